/* SPDX-License-Identifier: MIT */
/*
 * dev/translate.c - the device side of a DMA: translate, read, write (dmaguard/dev.h).
 *
 * Fast path (a translation that fits in one page, hits the level probed first, and finds no
 * invalidation pending):
 *
 *   one acquire load of `published` == dev->check      (nothing pending, online, not blocked)
 *   fits in the page: len - 1 <= ~(iova | base_mask)     (also refuses len 0 and wrapping)
 *   one probe: key ^ page ^ tag, masked by the access    (tag, permission, emptiness at once)
 *   host = iova + delta
 *
 * Pass-through takes the same path through an identity level (agent.c), so it costs the same
 * as a hit.
 *
 * No lock, no atomic read-modify-write, no shared cache line written. Everything else (ranges
 * over several pages, other page sizes, misses and walks, pass-through, blocked devices, faults,
 * catching up with the invalidation queue) takes the slow path, which is the same code for
 * every case so a refused access is refused the same way whatever made it slow.
 *
 * A range is checked completely before a byte is copied (dg_dev_read/dg_dev_write): a refused
 * access touches nothing. Host memory is never assumed contiguous across pages; contiguous
 * neighbours merge into one segment.
 */
#include "iommu/iommu_internal.h"

#include <errno.h>
#include <string.h>

#define COPY_SEGS 16 /* segments translated per step of a copy */

static int fault_errno(enum dg_fault_reason r)
{
	switch (r) {
	case DG_FAULT_UNMAPPED:
		return -EFAULT;
	case DG_FAULT_PERM:
		return -EACCES;
	case DG_FAULT_RANGE:
		return -ERANGE;
	case DG_FAULT_BLOCKED:
		return -EPERM;
	case DG_FAULT_WRAP:
		return -EOVERFLOW;
	}
	return -EFAULT;
}

static int refuse(struct dg_device *dev, uint64_t iova, uint64_t len, unsigned int access,
		  enum dg_fault_reason r)
{
	iommu_record_fault(dev, iova, len, access, r);
	return fault_errno(r);
}

/* Walk @a from the deepest walk-cache entry, refilling the walk cache on the way. */
static int walk(struct dg_device *dev, uint64_t a, struct dg_pt_walk *w)
{
	const void *table = NULL;
	unsigned int d = wc_lookup_last(&dev->wc, dev->wtag, a, &table);
	int r;

	if (!d)
		d = wc_lookup(&dev->wc, dev->wtag, a, &table);
	stat_inc(&dev->st_walks, 1);
	if (d) {
		stat_inc(&dev->st_wc_hits, 1);
		r = dg_pt_walk_from(dev->dom->pt, a, table, d, w);
	} else {
		r = dg_pt_walk(dev->dom->pt, a, w);
	}
	/* On success and on -ENOENT, table[d..depth] are the tables passed: keep them. */
	if (r == 0 || r == -ENOENT)
		for (unsigned int k = d + 1; k <= w->depth && k < DG_PT_MAX_DEPTH; k++)
			wc_insert(&dev->wc, dev->wtag, a, k, w->table[k]);
	return r;
}

/*
 * Translate the page holding @a for @access. Returns 0 with the host address of @a and the
 * last IOVA of its page, or the fault reason.
 */
static dg_always_inline int translate_page(struct dg_device *dev, uint64_t a, unsigned int access,
					   uint64_t *host, uint64_t *page_last)
{
	const struct iotlb_ent *e;
	struct dg_pt_walk w;
	unsigned int perm;
	int lvl, r;

	lvl = iotlb_find(&dev->iotlb, dev->ctag, a, &e);
	if (lvl >= 0) {
		const struct iotlb_level *l = &dev->iotlb.lvl[lvl];

		if (access & ~(unsigned int)e->key & IOTLB_PERM_MASK)
			return DG_FAULT_PERM;
		stat_inc(&dev->st_hits, 1);
		if (dev->hot.ent != l->ent) /* copy only when the hot level changes */
			dev->hot = *l;
		*host = a + e->delta;
		*page_last = (a & l->base_mask) + ~l->base_mask;
		return 0;
	}
	stat_inc(&dev->st_misses, 1);
	if (a < dev->dom->in_first || a > dev->dom->in_last)
		return DG_FAULT_RANGE;
	r = walk(dev, a, &w);
	if (r == -ERANGE)
		return DG_FAULT_RANGE;
	if (r)
		return DG_FAULT_UNMAPPED;
	perm = w.prot & (DG_PROT_READ | DG_PROT_WRITE);
	lvl = iotlb_insert(&dev->iotlb, dev->ctag, a, w.pgsize, w.phys, perm);
	if (lvl >= 0 && dev->hot.ent != dev->iotlb.lvl[lvl].ent)
		dev->hot = dev->iotlb.lvl[lvl];
	if (access & ~perm)
		return DG_FAULT_PERM;
	*host = w.phys;
	*page_last = (a & ~(w.pgsize - 1)) + (w.pgsize - 1);
	return 0;
}

/*
 * Translate a range into at most @max segments (the device is entered). *nr gets the number
 * of segments the range needs; -ENOSPC when that exceeds @max (the range was fully checked).
 */
static int translate_range(struct dg_device *dev, uint64_t iova, size_t len, unsigned int access,
			   struct dg_sg *sg, unsigned int max, unsigned int *nr)
{
	uint64_t last = iova + (len - 1), a = iova, prev_end = 0;
	unsigned int n = 0;

	if (!len || !access || (access & ~(unsigned int)IOTLB_PERM_MASK))
		return -EINVAL;
	if (dev->mode == DG_CTX_BLOCKED)
		return refuse(dev, iova, len, access, DG_FAULT_BLOCKED);
	if (last < iova)
		return refuse(dev, iova, len, access, DG_FAULT_WRAP);
	if (dev->mode == DG_CTX_PASSTHROUGH) {
		*nr = 1;
		if (!max)
			return -ENOSPC;
		sg[0].addr = (void *)(uintptr_t)iova;
		sg[0].len = len;
		return 0;
	}
	if (dg_likely(max && dev->iotlb.nr_levels &&
		      (uint64_t)len - 1 <= ~(iova | dev->iotlb.lvl[0].base_mask))) {
		/* Within one smallest page (a packet buffer): one translation, one segment. */
		uint64_t host, page_last;
		int r = translate_page(dev, iova, access, &host, &page_last);

		if (r)
			return refuse(dev, iova, len, access, (enum dg_fault_reason)r);
		sg[0].addr = (void *)(uintptr_t)host;
		sg[0].len = len;
		*nr = 1;
		return 0;
	}
	for (;;) {
		uint64_t host, page_last, end, seg;
		int r = translate_page(dev, a, access, &host, &page_last);

		if (r)
			return refuse(dev, a, len, access, (enum dg_fault_reason)r);
		end = page_last < last ? page_last : last;
		seg = end - a + 1;
		if (n && host == prev_end) {
			if (n <= max)
				sg[n - 1].len += seg;
		} else {
			if (n < max) {
				sg[n].addr = (void *)(uintptr_t)host;
				sg[n].len = seg;
			}
			n++;
		}
		prev_end = host + seg;
		if (end == last)
			break;
		a = end + 1;
	}
	*nr = n;
	return n > max ? -ENOSPC : 0;
}

static dg_noinline __attribute__((cold)) int translate_slow(struct dg_device *dev, uint64_t iova,
							    size_t len, unsigned int access,
							    struct dg_sg *sg, unsigned int max,
							    unsigned int *nr)
{
	int r;

	agent_enter(dev);
	if (dg_likely(dev->mode == DG_CTX_TRANSLATE && max && access - 1u < 3u &&
		      dev->iotlb.nr_levels &&
		      (uint64_t)len - 1 <= ~(iova | dev->iotlb.lvl[0].base_mask))) {
		/* The common miss: within one smallest page (what translate_range() does for
		 * it, without its loop). */
		uint64_t host, page_last;

		r = translate_page(dev, iova, access, &host, &page_last);
		if (r) {
			r = refuse(dev, iova, len, access, (enum dg_fault_reason)r);
		} else {
			sg[0].addr = (void *)(uintptr_t)host;
			sg[0].len = len;
			*nr = 1;
		}
	} else {
		r = translate_range(dev, iova, len, access, sg, max, nr);
	}
	if (r == 0)
		dev->held = true;
	if (dev->auto_offline)
		agent_offline(dev);
	return r;
}

/* The fast-path lookup: the entry for [iova, iova + len) in the hot level, or NULL. */
static dg_always_inline const struct iotlb_ent *
fast_lookup(const struct dg_device *dev, uint64_t iova, size_t len, unsigned int access)
{
	const struct iotlb_level *l = &dev->hot;

	if ((uint64_t)len - 1 > ~(iova | l->base_mask))
		return NULL;
	return iotlb_probe(l, iova, dev->tag, ~IOTLB_PERM_MASK | access);
}

int dg_dev_translate(struct dg_device *dev, uint64_t iova, size_t len, unsigned int access,
		     struct dg_sg *sg, unsigned int max, unsigned int *nr)
{
	/* Acquire pairs with the owner's release store of published (inval_queue.c). */
	if (dg_likely(atomic_load_explicit(dev->published, memory_order_acquire) == dev->check &&
		      max && access - 1u < 3u)) {
		const struct iotlb_ent *e = fast_lookup(dev, iova, len, access);

		if (dg_likely(e != NULL)) {
			sg->addr = (void *)(uintptr_t)(iova + e->delta);
			sg->len = len;
			*nr = 1;
			dev->held = true;
			stat_inc(&dev->st_hits, 1);
			return 0;
		}
	}
	return translate_slow(dev, iova, len, access, sg, max, nr);
}

/* Copy between @buf and the range, checked as a whole first. */
static dg_noinline int copy_slow(struct dg_device *dev, uint64_t iova, void *buf, size_t len,
				 unsigned int access)
{
	struct dg_sg sg[COPY_SEGS];
	unsigned int n = 0;
	uint64_t a, last, chunk;
	size_t off = 0;
	int r;

	agent_enter(dev);
	if (!buf) {
		r = -EINVAL;
		goto out;
	}
	r = translate_range(dev, iova, len, access, sg, COPY_SEGS, &n);
	if (r && r != -ENOSPC)
		goto out;
	a = iova;
	last = iova + (len - 1);
	/* At most COPY_SEGS smallest pages per step, so each step fits in sg[]. */
	chunk = (uint64_t)COPY_SEGS << (dev->iotlb.nr_levels ? dev->iotlb.lvl[0].shift : 12);
	for (;;) {
		uint64_t end = last;

		if (r == -ENOSPC) {
			/* Whole range checked; translate it step by step (IOTLB hits). */
			uint64_t step_last = dg_align_down(a, chunk) + (chunk - 1);

			if (step_last < end)
				end = step_last;
			r = translate_range(dev, a, end - a + 1, access, sg, COPY_SEGS, &n);
			if (r)
				goto out; /* the mapping changed under a racing unmap */
			r = -ENOSPC;
		}
		for (unsigned int i = 0; i < n; i++) {
			if (access == DG_ACCESS_READ)
				memcpy((char *)buf + off, sg[i].addr, sg[i].len);
			else
				memcpy(sg[i].addr, (const char *)buf + off, sg[i].len);
			off += sg[i].len;
		}
		if (end == last)
			break;
		a = end + 1;
	}
	r = 0;
out:
	if (dev->auto_offline)
		agent_offline(dev);
	else
		agent_leave(dev);
	return r;
}

int dg_dev_read(struct dg_device *dev, uint64_t iova, void *dst, size_t len)
{
	/* Acquire pairs with the owner's release store of published (inval_queue.c). */
	if (dg_likely(atomic_load_explicit(dev->published, memory_order_acquire) == dev->check &&
		      dst)) {
		const struct iotlb_ent *e = fast_lookup(dev, iova, len, DG_ACCESS_READ);

		if (dg_likely(e != NULL)) {
			stat_inc(&dev->st_hits, 1);
			memcpy(dst, (const void *)(uintptr_t)(iova + e->delta), len);
			agent_leave(dev);
			return 0;
		}
	}
	return copy_slow(dev, iova, dst, len, DG_ACCESS_READ);
}

int dg_dev_write(struct dg_device *dev, uint64_t iova, const void *src, size_t len)
{
	/* Acquire pairs with the owner's release store of published (inval_queue.c). */
	if (dg_likely(atomic_load_explicit(dev->published, memory_order_acquire) == dev->check &&
		      src)) {
		const struct iotlb_ent *e = fast_lookup(dev, iova, len, DG_ACCESS_WRITE);

		if (dg_likely(e != NULL)) {
			stat_inc(&dev->st_hits, 1);
			memcpy((void *)(uintptr_t)(iova + e->delta), src, len);
			agent_leave(dev);
			return 0;
		}
	}
	return copy_slow(dev, iova, (void *)(uintptr_t)src, len, DG_ACCESS_WRITE);
}

/* Nothing published since the last catch-up, and that one was acknowledged. */
static dg_always_inline bool nothing_pending(const struct dg_device *dev)
{
	/* Acquire pairs with the owner's release store of published (inval_queue.c). */
	return atomic_load_explicit(dev->published, memory_order_acquire) == dev->seen &&
	       dev->acked == dev->seen;
}

void dg_dev_quiesce(struct dg_device *dev)
{
	dev->held = false; /* the caller is done with every translated sg list */
	/*
	 * Nothing published since the last catch-up, and that one was acknowledged: the slot
	 * already shows seen, so this quiescent point has nothing to apply or announce. An idle
	 * device polls here between bursts; this keeps each poll to one load and two compares
	 * (agent_catch_up() costs ~36 instructions even with nothing to do).
	 */
	if (nothing_pending(dev))
		return;
	agent_catch_up(dev);
}

bool dg_dev_quiesce_if_pending(struct dg_device *dev)
{
	/*
	 * Held stays as it is when nothing is pending: the translations the caller keeps must
	 * go on holding later waits (a command applied at the start of a later DMA call is
	 * then only acknowledged here, once the caller knows to translate again).
	 */
	if (nothing_pending(dev))
		return false;
	dg_dev_quiesce(dev);
	return true;
}

void dg_dev_online(struct dg_device *dev)
{
	agent_online(dev);
}

void dg_dev_offline(struct dg_device *dev)
{
	agent_offline(dev);
}

void dg_dev_set_auto_offline(struct dg_device *dev, bool on)
{
	dev->auto_offline = on;
	if (on)
		agent_offline(dev);
}

bool dg_dev_is_online(const struct dg_device *dev)
{
	return !(atomic_load_explicit(&dev->slot->ack, memory_order_relaxed) & AGENT_OFFLINE);
}
