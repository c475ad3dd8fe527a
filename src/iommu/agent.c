/* SPDX-License-Identifier: MIT */
/*
 * iommu/agent.c - a device as a translation agent: it applies queued invalidation commands
 * to its own IOTLB and walk cache at its quiescent points and acknowledges them.
 *
 * This is quiescent-state-based reclamation (liburcu's QSBR flavour) applied to IOTLBs: the
 * "readers" are devices, a "grace period" is an invalidation sequence number, and a device
 * announces a quiescent state by storing the sequence number it has applied into its slot.
 * A waiter for seq S returns once every online slot shows ack >= S; by then every device has
 * finished each access it began before applying S, and every later access misses the caches
 * for what S covered and walks a page table in which the unmap is visible.
 *
 * States of a device (its slot word: ack | AGENT_OFFLINE):
 *
 *         enter (DMA call) / dg_dev_online: RMW, then catch up
 *   OFFLINE -------------------------------------------------> ONLINE
 *           <-------------------------------------------------  |  quiescent point:
 *                dg_dev_offline: catch up, then RMW              |  catch up, store ack
 *                                                                +---(release)
 *
 * Why RMWs around OFFLINE: a waiter that skips an offline device must be sure the device will
 * see the waiter's page-table changes when it comes back. Plain loads and stores would form
 * the store-buffering pattern (each side could read the other's old value). Instead the waiter
 * does an RMW on the slot when it finds it offline (inval.c), and the device comes online with
 * an RMW: RMWs on one word are totally ordered, so either the device went online first (the
 * waiter's RMW returns ONLINE and it waits for an ack) or the waiter's release RMW is read by
 * the device's acquire RMW, and the device's catch-up then finds written every command below
 * the published value the waiter checked (their stamps were stored before that publish): it
 * applies them, or laps.
 *
 * How a device learns that something is pending: not from the queue's published word but
 * from the stamp of the slot of its next command, seen % len (hot.watchword; check is that
 * stamp's value while command seen is not written, inv_queue_quiet()). A producer writing the
 * command changes it, so the device's next load misses once and finds the command in the same
 * line; watching published cost a miss on published and then one on the slot. The catch-up
 * applies every written command from seen on, in sequence order, published or not, and stops
 * at the first slot whose stamp is not seq + 1 (the table in inval_queue.h):
 *  - early application is safe: an invalidation may always be applied early, and the stamp's
 *    acquire makes the page-table change made before the command visible. The ack names seen,
 *    perhaps past published, but never a command the device has not applied; waiters still
 *    wait for publication as well (inval.c scan(): published >= seq), so they are unchanged;
 *  - a stamp 0 (being written) or newer than seq + 1 (overwritten) is settled by published:
 *    above seq, command seq was published and is gone - a lap; else the command is being
 *    written for the first time and the next call looks again (the word stays != check, so
 *    the device does not miss it, and it spins in no loop meanwhile);
 *  - offline and blocked devices have check = UINT64_MAX, which no stamp takes: every call is
 *    slow (an offline device applies nothing; a blocked one applies and acknowledges);
 *    pass-through devices and the reference (mutex-serialized) queue use the same stamps.
 *
 * An offline device applies nothing (dg_dev_quiesce() is a no-op for it): a CONTEXT command
 * makes the device read its context entry and the domain it names, and that domain is only
 * guaranteed alive while waits cannot skip the device. Online, a domain stays referenced until
 * a wait the device has acknowledged confirms the change away from it.
 *
 * A device that fell a whole queue behind (its next command overwritten) cannot know what it
 * missed: it flushes its IOTLB and walk cache, reloads its context and goes on from published,
 * read with acquire so that every command below it is covered by the flush (a "lap").
 *
 * Generations: a device's caches only ever hold entries of the domain its context names
 * (a context change empties them), so the 10-bit domain field of an entry's key carries a
 * cache tag instead of the domain id: ctag for IOTLB entries, wtag for walk-cache entries. A
 * command for another domain has nothing to drop here and is skipped without a look; a
 * page-selective command for ours touches the slots of its pages (iotlb.c); a DOMAIN, GLOBAL
 * or DEVICE flush bumps both tags (a leaf-only DOMAIN command, DG_INVAL_LEAF, only ctag: the
 * table pages are unchanged), after which no older entry matches a lookup, its tag compare
 * or a range command - O(1) instead of a scan of every slot. When a tag has used all 1023
 * values its table is really emptied (once per 1023 flushes) so an entry can never match
 * again under a reused tag.
 */
#include "iommu/iommu_internal.h"

#include "pt/pt_leaf.h"

#include <errno.h>
#include <string.h>

/* The tag of the IOTLB entries made from now on, in both copies (the hot line's only while
   it holds an IOTLB level: a leaf-direct hot line keeps its table's IOVA there). */
static void set_tag(struct dg_device *dev, uint32_t ctag)
{
	dev->tag = (uint64_t)ctag << IOTLB_DID_SHIFT | IOTLB_PERM_MASK;
	if (!dev->hot.leaf_shift)
		dev->hot.tag = dev->tag;
}

/*
 * Leaf-direct: forget the last-level tables the hot line reads (hot_set_leaf(); the second
 * one is read only while leaf_shift != 0, which hot_set() clears). Called by
 * every command that drops walk-cache entries covering it (a non-leaf range over its span, a
 * non-leaf domain flush, global, device, context, a lap), in apply() before the device can
 * acknowledge the command, so the table page it points to is never read after the wait of
 * the invalidation that lets it be freed has returned.
 */
static void drop_leaf(struct dg_device *dev)
{
	if (dev->hot.leaf_shift)
		hot_set(dev, &dev->iotlb.lvl[0]);
}

static void clear_leaf(struct dg_device *dev)
{
	dev->leaf_lvl = NULL;
	dev->leaf_ctx = NULL;
	dev->leaf_pt = NULL;
	dev->leaf_root = NULL;
	dev->direct = false;
}

/*
 * Can @pt's last-level entries be read by the inline hit (dg_dev_hot_xlat())? Present iff
 * read or write, read = bit 0 and write = bit 1 (VT-d second stage, the flat table), the
 * output address one contiguous field from the granule up, and tables aligned in IOVA to
 * their span. Sets the device's leaf-direct geometry when so.
 */
static bool direct_geometry(struct dg_device *dev, const struct dg_pt *pt)
{
	uint64_t oa = pt->oa_mask & ~pt->granule_mask, entries = pt->leaf_index_mask + 1;
	unsigned int top = oa ? 64 - (unsigned int)__builtin_clzll(oa) : 0;
	unsigned int span = pt->leaf_shift + (unsigned int)__builtin_ctzll(entries);

	if (pt->valid_mask != IOTLB_PERM_MASK || pt->rw_xor || pt->rw_shift ||
	    pt->rw_mask != IOTLB_PERM_MASK || pt->rw_or || pt->oa_hi_mask || !oa ||
	    oa != (((top == 64 ? 0 : 1ull << top) - 1) & ~pt->granule_mask) ||
	    pt->granule_mask != (1ull << pt->leaf_shift) - 1 || !dg_is_pow2(entries) ||
	    span >= 64 || (pt->iova_base & ((1ull << span) - 1)))
		return false;
	dev->direct_page_mask = ~pt->granule_mask;
	dev->direct_off_mask = pt->leaf_index_mask << 3;
	dev->direct_off_shift = pt->leaf_shift - 3;
	dev->direct_span_shift = span;
	dev->direct_oa_shift = 64 - top;
	return true;
}

/*
 * What the cheap miss of dev/translate.c needs to know about @dom's table: the IOTLB level of
 * the size of its last-level entries, and where their table comes from: the root when the
 * table has one level (never unlinked), else the walk cache's deepest row (and last entry),
 * which holds last-level tables when the cache keeps every table depth. Neither: no cheap
 * miss (leaf_lvl NULL). Called when the context is loaded (the domain is alive then).
 */
static void set_leaf(struct dg_device *dev, const struct dg_domain *dom)
{
	unsigned int depth = pt_depth(dom->pt), shift = pt_leaf_shift(dom->pt);

	clear_leaf(dev);
	if (depth > 1 && (dev->wc.nr_depths != depth - 1 || dev->wc.shift[depth - 1] >= 64))
		return;
	/* Level 0, the smallest page size: the device's fills write it directly, and only it
	   is always looked at by invalidations (iotlb.used). */
	if (dev->iotlb.nr_levels && dev->iotlb.lvl[0].shift == shift)
		dev->leaf_ctx = &dev->iotlb.lvl[0];
	if (!dev->leaf_ctx)
		return;
	dev->leaf_pt = dom->pt;
	if (depth == 1)
		dev->leaf_root = pt_root(dom->pt);
	/* Leaf-direct replaces the cheap miss and its IOTLB level: level 0 stays empty. */
	if (dev->direct_cfg && depth > 1 && dev->leaf_ctx == &dev->iotlb.lvl[0] &&
	    direct_geometry(dev, dom->pt)) {
		dev->leaf_ctx = NULL;
		dev->leaf_lvl = NULL;
		dev->iotlb.no_small = true;
		dev->direct = true;
		return;
	}
	/* Auto-offline: the slow path ends every call offline, the cheap miss does not. */
	dev->leaf_lvl = dev->auto_offline ? NULL : dev->leaf_ctx;
}

void agent_leaf_auto_offline(struct dg_device *dev, bool on)
{
	dev->leaf_lvl = on ? NULL : dev->leaf_ctx;
}

/* After every change of seen, acked, online or mode: the hot line's copies of the state
   (watchword, check, unacked) that the inline hit and quiescent point (dmaguard/dev.h) read. */
static void update_check(struct dg_device *dev)
{
	const struct inv_queue *q = &dev->mmu->inv;

	dev->quiet = inv_queue_quiet(q, dev->seen);
	dev->hot.watchword = inv_queue_watch(q, dev->seen);
	dev->hot.check = dev->online && dev->mode != DG_CTX_BLOCKED ? dev->quiet : UINT64_MAX;
	dev->hot.unacked = dev->acked != dev->seen;
}

int agent_init(struct dg_device *dev, const struct dg_iommu_config *cfg)
{
	int r = iotlb_init(&dev->iotlb, cfg->iotlb_entries, cfg->iotlb_large_entries);

	if (r)
		return r;
	r = wc_init(&dev->wc, cfg->walk_cache_entries);
	if (r) {
		iotlb_fini(&dev->iotlb);
		return r;
	}
	/*
	 * Pass-through rides the translated fast path: a level whose two entries cover the
	 * lower and upper half of the address space with delta 0 (host = iova), tagged with
	 * domain 0 and both permissions. Ranges crossing 2^63, or wrapping, take the slow path.
	 */
	dev->ident_ent[0].key = IOTLB_PERM_MASK;
	dev->ident_ent[0].delta = 0;
	dev->ident_ent[1].key = 1ull << 63 | IOTLB_PERM_MASK;
	dev->ident_ent[1].delta = 0;
	dev->ident.ent = dev->ident_ent;
	dev->ident.base_mask = 1ull << 63;
	dev->ident.set_mask = 1;
	dev->ident.shift = 63;
	dev->ident.off_shift = 63 - IOTLB_ENT_SHIFT;
	dev->ident.off_mask = 1ull << IOTLB_ENT_SHIFT;
	dev->prefetch = !cfg->no_iotlb_prefetch;
	dev->direct_cfg = cfg->iotlb_leaf_direct;
	dev->online = false;
	dev->mode = DG_CTX_BLOCKED;
	dev->did = 0;
	dev->ctag = 0;
	dev->wtag = 0;
	dev->dom = NULL;
	hot_set(dev, &dev->ident);
	set_tag(dev, 0);
	clear_leaf(dev);
	/*
	 * A new device caches nothing: every command so far is irrelevant to it. Acquire pairs
	 * with the owner's release store of published: the stamps of the commands before it
	 * are visible, so the watched slot shows its quiet stamp or a newer one.
	 */
	dev->seen = atomic_load_explicit(&dev->mmu->inv.published, memory_order_acquire);
	dev->acked = dev->seen;
	dev->hot.held = false;
	update_check(dev); /* offline: check = UINT64_MAX */
	return 0;
}

void agent_fini(struct dg_device *dev)
{
	wc_fini(&dev->wc);
	iotlb_fini(&dev->iotlb);
}

static void load_context(struct dg_device *dev)
{
	/* Acquire pairs with the release store of the entry in set_context() (iommu.c). */
	uint64_t w = atomic_load_explicit(&dev->ctx, memory_order_acquire);
	struct dg_domain *dom = (struct dg_domain *)(uintptr_t)(w & ~3ull);

	dev->mode = (uint32_t)(w & 3);
	if (dev->mode == DG_CTX_TRANSLATE) {
		dev->dom = dom;
		dev->did = dom->id;
		dev->ctag = 1;
		dev->wtag = 1;
		set_tag(dev, dev->ctag);
		iotlb_configure(&dev->iotlb, dom->pgsize_bitmap);
		wc_configure(&dev->wc, dom->wc_depths, dom->wc_shift);
		hot_set(dev, &dev->iotlb.lvl[0]);
		set_leaf(dev, dom);
	} else {
		dev->dom = NULL;
		dev->did = 0;
		dev->ctag = 0;
		dev->wtag = 0;
		set_tag(dev, 0); /* tag 0: the identity entries */
		iotlb_configure(&dev->iotlb, 0);
		wc_configure(&dev->wc, 0, NULL);
		hot_set(dev, &dev->ident); /* only reached when pass-through (check) */
		clear_leaf(dev);
	}
}

/*
 * Drop every cached translation, and unless @leaf every walk-cache entry too: a new
 * generation of the IOTLB's tag and, unless @leaf, of the walk cache's (see the preamble).
 */
static void retag(struct dg_device *dev, bool leaf)
{
	if (dev->mode != DG_CTX_TRANSLATE)
		return; /* nothing is cached outside translation */
	if (dev->ctag == IOTLB_DID_MASK) {
		iotlb_flush(&dev->iotlb);
		dev->ctag = 1;
	} else {
		dev->ctag++;
	}
	set_tag(dev, dev->ctag);
	if (leaf)
		return;
	drop_leaf(dev);
	if (dev->wtag == IOTLB_DID_MASK) {
		wc_flush(&dev->wc);
		dev->wtag = 1;
	} else {
		dev->wtag++;
	}
}

static void flush_all(struct dg_device *dev)
{
	retag(dev, false);
	stat_inc(&dev->st_flushes, 1);
}

/*
 * A command at @seq over [first, last] of the device's domain has been applied: every
 * watched range it overlaps may have changed (dg_dev_rehold_watched() then fails for a
 * translation made before it: made at a stamp <= seq).
 */
static void watch_mark(struct dg_device *dev, uint64_t first, uint64_t last, uint64_t seq)
{
	if (first > dev->watch_hi || last < dev->watch_lo)
		return; /* outside every watched range (or none watched) */
	for (uint64_t m = dev->watch_used; m; m &= m - 1) {
		unsigned int i = (unsigned int)__builtin_ctzll(m);

		if (first <= dev->watch[i].last && last >= dev->watch[i].first)
			dev->watch[i].changed = seq + 1;
	}
}

/* Apply the command @c, sequence number @seq. */
static void apply(struct dg_device *dev, const struct inv_cmd *c, uint64_t seq)
{
	uint64_t last;

	switch (c->op) {
	case INV_OP_BLOCK:
		if (c->id != dev->did || dev->mode != DG_CTX_TRANSLATE)
			break; /* nothing of that domain is cached here */
		last = c->iova + ((1ull << c->order) - 1);
		watch_mark(dev, c->iova, last, seq);
		/* Leaf-direct with no larger page cached (iotlb.used): every IOTLB level the
		   range command would look at is empty, so it has nothing to drop. */
		if (!dev->iotlb.no_small || (dev->iotlb.used & ~1u))
			iotlb_inval_range(&dev->iotlb, dev->ctag, c->iova, last);
		if (!c->leaf) {
			wc_inval_range(&dev->wc, dev->wtag, c->iova, last);
			/* the hot line's tables whose span overlaps [iova, last]: the second one
			   becomes a copy of the first, the first takes both with it */
			if (dev->hot.leaf_shift &&
			    c->iova >> dev->hot.leaf_shift <= dev->hot.tag2 >>
				    dev->hot.leaf_shift &&
			    last >> dev->hot.leaf_shift >= dev->hot.tag2 >> dev->hot.leaf_shift) {
				dev->hot.ent2 = dev->hot.ent;
				dev->hot.tag2 = dev->hot.tag;
			}
			if (dev->hot.leaf_shift &&
			    c->iova >> dev->hot.leaf_shift <= dev->hot.tag >> dev->hot.leaf_shift &&
			    last >> dev->hot.leaf_shift >= dev->hot.tag >> dev->hot.leaf_shift)
				drop_leaf(dev);
		}
		break;
	case INV_OP_DOMAIN:
		if (c->id == dev->did) {
			retag(dev, c->leaf);
			dev->changed_all = seq + 1;
		}
		break;
	case INV_OP_GLOBAL:
		flush_all(dev);
		dev->changed_all = seq + 1;
		break;
	case INV_OP_DEVICE:
		if (c->id == dev->rid) {
			flush_all(dev);
			dev->changed_all = seq + 1;
		}
		break;
	case INV_OP_CONTEXT:
		if (c->id == dev->rid) {
			load_context(dev); /* empties both caches */
			stat_inc(&dev->st_flushes, 1);
			dev->changed_all = seq + 1;
		}
		break;
	}
}

/* The device fell behind the queue (a command it had not read was overwritten): it cannot
 * know what it missed up to @pub, so it reloads everything and every watched range may have
 * changed. */
static void lap(struct dg_device *dev, uint64_t pub)
{
	dev->changed_all = pub;
	load_context(dev);
	stat_inc(&dev->st_flushes, 1);
	stat_inc(&dev->st_laps, 1);
}

void agent_catch_up(struct dg_device *dev)
{
	const struct inv_queue *q = &dev->mmu->inv;
	uint64_t s = dev->seen, pub = 0, n = 0;

	if (!dev->online)
		return;
	/*
	 * Apply every written command from seen on, in order, published or not (inval_queue.h:
	 * an invalidation is always safe to apply early; the page-table change made before it
	 * is visible through the stamp's acquire in inv_queue_next()). Stop at the first slot
	 * not yet written: seen then names it, and the inline paths watch its stamp. At most a
	 * ring per call, so producers that keep writing cannot hold the device here.
	 */
	while (n < q->len) {
		struct inv_cmd c;
		int r = inv_queue_next(q, s, &c);

		if (!r) {
			apply(dev, &c, s);
			s++;
			n++;
			continue;
		}
		if (r == -EAGAIN)
			break; /* not written yet: nothing pending */
		/*
		 * Being written (-EBUSY: command s itself, or a later lap's) or overwritten
		 * (-ESTALE): published tells. Acquire pairs with the owner's release store of
		 * published (inval_queue.c): every command before it, and the page-table changes
		 * made before they were submitted, are visible.
		 */
		if (pub <= s) {
			pub = atomic_load_explicit(&q->published, memory_order_acquire);
			if (pub <= s)
				break; /* s not published as far as we see: being written for
					  the first time, or a lapping writer's relaxed stamp = 0
					  seen before its publish is; the next call looks again */
			if (r == -EBUSY)
				continue; /* s was published: read its slot again */
		}
		/* Command s was published and its slot no longer holds it: lapped. */
		lap(dev, pub);
		s = pub;
		break;
	}
	if (s != dev->seen) {
		stat_inc(&dev->st_cmds, n);
		dev->seen = s;
	}
	/*
	 * The acknowledgement, unless translated sg lists may still be in use (held): then the
	 * commands are applied (later translations see them) but waits keep waiting. Release
	 * pairs with the waiter's acquire load of the slot (inval.c): every access this device
	 * made before it happens before the wait returns. It may name commands not yet
	 * published: they are applied, and waiters wait for publication anyway.
	 */
	if (!dev->hot.held && dev->acked != dev->seen) {
		atomic_store_explicit(&dev->slot->ack, dev->seen, memory_order_release);
		dev->acked = dev->seen;
	}
	update_check(dev);
}

void agent_online(struct dg_device *dev)
{
	if (!dev->online) {
		/*
		 * acq_rel RMW: synchronizes with the release RMW of any waiter that saw this
		 * device offline (inval.c), so the catch-up below sees what that waiter saw.
		 * Until the catch-up acknowledges, waiters wait for us (ack = seen < their seq).
		 */
		atomic_exchange_explicit(&dev->slot->ack, dev->seen, memory_order_acq_rel);
		dev->acked = dev->seen;
		dev->online = true;
	}
	agent_catch_up(dev);
	update_check(dev);
}

void agent_offline(struct dg_device *dev)
{
	dev->hot.held = false; /* offline: nothing translated is in use any more */
	agent_catch_up(dev);
	if (dev->online) {
		/*
		 * Release: every access this device made happens before any waiter whose RMW
		 * reads OFFLINE (and then skips it). Acquire keeps the RMW chain (preamble).
		 */
		atomic_exchange_explicit(&dev->slot->ack, dev->seen | AGENT_OFFLINE,
					 memory_order_acq_rel);
		dev->online = false;
	}
	update_check(dev);
}

void agent_enter_slow(struct dg_device *dev)
{
	if (!dev->online)
		agent_online(dev);
	else
		agent_catch_up(dev);
}
