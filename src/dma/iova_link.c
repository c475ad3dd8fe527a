/* SPDX-License-Identifier: MIT */
/*
 * dma/iova_link.c - the two-step API: reserve an IOVA range once, then link and unlink pages
 * inside it (Linux 6.15's dma_iova_try_alloc / dma_iova_link / dma_iova_sync /
 * dma_iova_unlink / dma_iova_free).
 *
 * This is the cheapest protected path, and the one a ring wants (rIOMMU, ASPLOS'15: a device
 * consumes its ring in order, so the ring's buffers can live in one IOVA range slot by slot):
 * reserve slots x buffer size once, link a buffer into its slot (a page-table store, no
 * allocator), unlink it when the device is done (a page-table store), and let one batch end
 * invalidate the consumed slots - contiguous, so one RANGE command - with one wait.
 *
 * Each granule of the range has a link word (dma_links.w, behind st->links), written by the
 * thread using the range (one at a time, the API's rule) and by the end of a batch holding
 * its unlinks:
 *   first granule of a link: bit 63 linked | bits 58..59 dir | bit 36 (LINK_XSPAN) the data
 *                            crosses one granule boundary more than its length needs (it
 *                            spans ceil(len / granule) + 1 granules) | bits 0..35 length
 *   other granules of a link: bit 62 (busy)
 *   unlinked, invalidation not yet confirmed: DMA_LINK_PENDING (bit 61)
 *   free: 0
 * so an unlink with the wrong length or direction, or of nothing, and a link over a linked or
 * pending granule are refused with nothing changed, by the words alone; and the word of a
 * one-granule link of @len bytes for @dir is one constant (LINK_VALID | dir | len, len <= the
 * granule), so an unlink's check is one compare and a bulk link stores the same word for
 * every buffer.
 *
 * The fast path (one-granule links: a ring's slots). At reserve time the range gets page-table
 * slots (pt_fast.h): its last-level tables, found on first use and kept, which is safe because
 * the range's owner only ever writes granule leaves into them and clears them. A link is then
 * the word check, one PTE store through a kept table and the word store; an unlink is the word
 * check, one PTE clear and a batch entry. The batch's end invalidates its unlinks - a ring's
 * consecutive slots merge into one run: one RANGE command (leaf-only: walk caches stay warm),
 * one wait - and then settles their words (pending -> free). Multi-granule links take the same
 * slots, one store per granule, all checked before any is written. The bulk calls below do
 * the same per buffer with the per-call work (arguments, counters, tables) done once.
 *
 *   link:    w[i] == 0 ? -> PTE store (release) -> w[i] = link word
 *   unlink:  w[i] linked, len/dir match ? -> PTE clear -> w[i] = PENDING -> batch entry
 *   end:     RANGE over the runs -> wait -> w[i] = 0 (the slot can be linked again)
 *
 * Why the words say "pending" rather than leaving it to the page table: the PTE is gone at
 * unlink time, and a re-link before the invalidation completes would let the device meet a
 * stale translation of the old buffer where the driver expects the new one; and a range with
 * pending unlinks cannot be freed (-EBUSY), so a batch never settles words of a freed range or
 * invalidates IOVAs someone else holds.
 *
 * Counters: the range caches the counter block of the thread that used it last (dma_links.ts,
 * checked against the thread id), so a fast path counts with three loads rather than the
 * per-thread slot lookup; a handover to another thread costs one lookup.
 *
 * The Linux-like reference device keeps the general path (dg_pt_map per link, a synchronous
 * strict unmap per unlink), as stock Linux does.
 *
 * Under identity a range reserves nothing and links return host addresses. Lazy unlinks are
 * strict: a range is reused by design, and a lazy unlink would let a re-link at the same
 * offset meet a stale translation of the old buffer. Bounce cannot place a buffer at a chosen
 * IOVA (-EOPNOTSUPP: use streaming maps, as Linux does for swiotlb devices).
 */
#include "dma/dma_internal.h"
#include "pt/pt_fast.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#define LINK_VALID     (1ull << 63)
#define LINK_BUSY      (1ull << 62)
#define LINK_DIR_SHIFT 58
#define LINK_XSPAN     (1ull << 36)
#define LINK_LEN_MASK  (LINK_XSPAN - 1)

static_assert(DMA_LINK_PENDING != LINK_VALID && DMA_LINK_PENDING != LINK_BUSY &&
		      DMA_LINK_PENDING > (3ull << LINK_DIR_SHIFT),
	      "link word bits overlap");

/* The word of a link of @len bytes for @dir spanning @span bytes (whole granules). */
static uint64_t link_word(enum dg_dma_dir dir, uint64_t len, uint64_t span, unsigned int gshift)
{
	const uint64_t least = (len + (1ull << gshift) - 1) >> gshift; /* granules len needs */

	return LINK_VALID | (uint64_t)dir << LINK_DIR_SHIFT |
	       ((span >> gshift) > least ? LINK_XSPAN : 0) | len;
}

/* The bytes (whole granules) spanned by the link whose first word is @v. */
static uint64_t link_span(uint64_t v, unsigned int gshift)
{
	const uint64_t len = v & LINK_LEN_MASK;

	return (((len + (1ull << gshift) - 1) >> gshift) + !!(v & LINK_XSPAN)) << gshift;
}

/* The word of a one-granule link (len <= granule): what the fast paths store and compare. */
static dg_always_inline uint64_t link_word1(enum dg_dma_dir dir, uint64_t len)
{
	return LINK_VALID | (uint64_t)dir << LINK_DIR_SHIFT | len;
}

/* Never matches a thread (ids start at 1): what l->ts holds before the first count. */
static struct dma_tstats links_no_ts = {.owner = UINT64_MAX};

int dg_dma_iova_alloc(struct dg_dma_dev *dd, uint64_t size, struct dg_dma_iova_state *st)
{
	struct dma_space *sp;
	struct dma_links *l;
	uint64_t n;
	int r;

	if (!dd)
		return -EINVAL;
	if (!st || !size || size > (1ull << 40))
		return dma_err(dd, -EINVAL);
	if (dd->policy == DG_DMA_BOUNCE)
		return dma_err(dd, -EOPNOTSUPP);
	st->dev = dd;
	st->links = NULL;
	if (!dd->sp) {
		st->addr = 0;
		st->granule = DMA_HOST_PAGE;
		st->size = dg_align_up(size, DMA_HOST_PAGE);
		atomic_fetch_add_explicit(&dd->iova_states, 1, memory_order_relaxed);
		return 0;
	}
	sp = dd->sp;
	st->granule = sp->granule;
	st->size = dg_align_up(size, sp->granule);
	n = st->size >> sp->gshift;
	r = dma_fail(dd, DG_DMA_FAIL_IOVA);
	if (!r)
		r = dg_iova_alloc(sp->iova, st->size, sp->limit, 0, &st->addr);
	if (r) {
		st->dev = NULL;
		return dma_err(dd, r);
	}
	l = calloc(1, sizeof(*l) + n * sizeof(l->w[0]));
	if (!l) {
		r = -ENOMEM;
		goto fail;
	}
	l->addr = st->addr;
	l->gshift = sp->gshift;
	atomic_init(&l->ts, &links_no_ts);
	l->fail = &dd->dma->fail;
	if (!dd->reference) {
		l->slots = pt_slots_create(sp->pt, st->addr, n);
		if (!l->slots && errno != EOPNOTSUPP) { /* else: the general path */
			r = -errno;
			goto fail;
		}
		for (unsigned int d = 0; l->slots && d < 3; d++)
			l->tmpl[d] = pt_slots_tmpl(l->slots, dma_dir_prot(d));
	}
	st->links = l;
	atomic_fetch_add_explicit(&dd->iova_states, 1, memory_order_relaxed);
	return 0;
fail:
	free(l);
	dg_iova_free(sp->iova, st->addr, st->size);
	st->dev = NULL;
	return dma_err(dd, r);
}

/*
 * A link of several granules, or any link without slots (the reference): every word free
 * before anything is written, then the pages (the slots check every entry before the first
 * store; the general path undoes a failed map itself). Returns 0 or -errno, nothing changed.
 */
static dg_noinline int link_slow(struct dg_dma_dev *dd, struct dg_dma_iova_state *st,
				 struct dma_links *l, uint64_t i, uint64_t phys, uint64_t span,
				 enum dg_dma_dir dir)
{
	const uint64_t k = span >> l->gshift;
	struct dma_space *sp = dd->sp;
	struct dg_pt_gather g;
	int r;

	for (uint64_t j = 0; j < k; j++)
		if (atomic_load_explicit(&l->w[i + j], memory_order_relaxed))
			return -EEXIST;
	r = dma_fail(dd, DG_DMA_FAIL_PT_MAP);
	if (r)
		return r;
	if (l->slots) {
		r = pt_slots_map(l->slots, i, k, phys, dma_dir_prot(dir));
	} else {
		dg_pt_gather_init(&g);
		r = dg_pt_map(sp->pt, st->addr + (i << l->gshift), phys, span, dma_dir_prot(dir),
			      &g);
		if (g.start != g.end || g.nr_tables)
			dma_flush_gather(dd, sp, &g); /* replaced tables, or a failed map's undo */
	}
	if (r)
		return r;
	for (uint64_t j = 1; j < k; j++)
		atomic_store_explicit(&l->w[i + j], LINK_BUSY, memory_order_relaxed);
	return 0;
}

/* dg_dma_iova_link(), every case. */
static dg_noinline int link_general(struct dg_dma_iova_state *st, uint64_t offset, const void *buf,
				    size_t len, enum dg_dma_dir dir, uint64_t *dma)
{
	struct dg_dma_dev *dd;
	struct dma_links *l;
	struct dma_tstats *t;
	uint64_t off, span, i;
	int r;

	if (!st || !st->dev)
		return -EINVAL;
	dd = st->dev;
	if (dg_unlikely(!buf || !dma || !len || !dma_dir_ok(dir) || (offset & (st->granule - 1)) ||
			len > LINK_LEN_MASK))
		return dma_err(dd, -EINVAL);
	if (dg_unlikely((uintptr_t)buf + (len - 1) < (uintptr_t)buf))
		return dma_err(dd, -ERANGE);
	l = st->links;
	if (!l) { /* identity */
		if ((uintptr_t)buf + (len - 1) > dd->mask || offset >= st->size)
			return dma_err(dd, -ERANGE);
		*dma = (uintptr_t)buf;
		ctr_add(dma_tstats(dd), CTR_LINKS, 1);
		return 0;
	}
	off = (uintptr_t)buf & (st->granule - 1);
	span = dg_align_up(off + len, st->granule);
	if (dg_unlikely(offset >= st->size || span > st->size - offset))
		return dma_err(dd, -ERANGE);
	i = offset >> l->gshift;
	if (dg_likely(span == st->granule && l->slots)) { /* a ring slot */
		if (dg_unlikely(atomic_load_explicit(&l->w[i], memory_order_relaxed)))
			return dma_err(dd, -EEXIST);
		r = dma_fail(dd, DG_DMA_FAIL_PT_MAP);
		if (dg_likely(!r))
			r = pt_slot_map(l->slots, i, (uintptr_t)buf - off, dma_dir_prot(dir));
	} else {
		r = link_slow(dd, st, l, i, (uintptr_t)buf - off, span, dir);
	}
	if (dg_unlikely(r))
		return dma_err(dd, r);
	atomic_store_explicit(&l->w[i], link_word(dir, len, span, l->gshift), memory_order_relaxed);
	t = dma_tstats(dd);
	ctr_add(t, CTR_LINKS, 1);
	ctr_add(t, CTR_SUBPAGE, span - len);
	ctr_max(&t->subpage_max, span - len);
	*dma = st->addr + offset + off;
	return 0;
}

int dg_dma_iova_sync(struct dg_dma_iova_state *st, uint64_t offset, uint64_t size)
{
	if (!st || !st->dev)
		return -EINVAL;
	if (!size)
		return dma_err(st->dev, -EINVAL);
	if (offset >= st->size || size > st->size - offset)
		return dma_err(st->dev, -ERANGE);
	/* Links never map over a present entry and flush replaced tables themselves. */
	return 0;
}

/* The quarantine token of @l's unlinks (quarantine_give settles them). */
static inline uint64_t links_token(const struct dma_links *l)
{
	return (uint64_t)(uintptr_t)l | DMA_TOKEN_LINK;
}

/* Park the unlinked granules [iova, iova + size) of @l, pending, until the invalidation
 * @seq is confirmed complete: a timed-out wait must not make them linkable again, since the
 * IOTLBs may still translate them to the old buffers (dma_internal.h, DMA_TOKEN_LINK). */
static dg_noinline void links_park(struct dg_dma_dev *dd, struct dma_links *l, uint64_t seq,
				   uint64_t iova, uint64_t size)
{
	const uint64_t tok = links_token(l);
	struct dg_pt_gather g;

	dg_pt_gather_init(&g);
	dma_quarantine_add_tok(dd, dd->sp, seq, &g, &iova, &size, &tok, 1, NULL);
}

/*
 * An unlink of several granules, without a batch (or with a full one), or without slots:
 * the words go pending, the pages go, and either the batch takes the range or it is
 * invalidated here (then the words are settled).
 */
static dg_noinline int unlink_slow(struct dg_dma_dev *dd, struct dg_dma_iova_state *st,
				   struct dma_links *l, uint64_t i, uint64_t span,
				   struct dg_dma_batch *b)
{
	const uint64_t k = span >> l->gshift, iova = st->addr + (i << l->gshift);
	struct dma_space *sp = dd->sp;
	struct dg_inval_cmd c;
	uint64_t seq = 0;
	int r;

	for (uint64_t j = 0; j < k; j++)
		atomic_store_explicit(&l->w[i + j], DMA_LINK_PENDING, memory_order_relaxed);
	if (!l->slots) { /* the reference: a synchronous strict unmap, as stock Linux */
		/* not confirmed: the granules stay pending, parked with the tables until a
		 * completion confirms (quarantine_give settles them) */
		r = dma_strict_retire(dd, sp, iova, span, false, links_token(l), NULL, NULL);
		if (!r)
			dma_links_settle(l, iova, span);
		return r;
	}
	pt_slots_unmap(l->slots, i, k);
	if (b) {
		dma_batch_add_link(b, iova, span, l);
		return 0;
	}
	c = (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
				  .flags = DG_INVAL_LEAF, /* the slots never free a table */
				  .domain = sp->dom_id,
				  .iova = iova,
				  .size = span};
	r = dma_inval(dd, &c, 1, &seq);
	if (dg_unlikely(r)) { /* pending until a completion confirms it, then settled */
		links_park(dd, l, seq, iova, span);
		return r;
	}
	dma_links_settle(l, iova, span);
	return 0;
}

/* dg_dma_iova_unlink(), every case. */
static dg_noinline int unlink_general(struct dg_dma_iova_state *st, uint64_t offset, size_t len,
				      enum dg_dma_dir dir, struct dg_dma_batch *b)
{
	struct dg_dma_dev *dd;
	struct dma_links *l;
	uint64_t v, span, i;
	int r;

	if (!st || !st->dev)
		return -EINVAL;
	dd = st->dev;
	if (dg_unlikely(!len || !dma_dir_ok(dir) || (offset & (st->granule - 1)) ||
			(b && b->dev != dd)))
		return dma_err(dd, -EINVAL);
	if (dg_unlikely(offset >= st->size))
		return dma_err(dd, -ERANGE);
	l = st->links;
	if (!l) { /* identity */
		ctr_add(dma_tstats(dd), CTR_UNLINKS, 1);
		return 0;
	}
	i = offset >> l->gshift;
	v = atomic_load_explicit(&l->w[i], memory_order_relaxed);
	if (dg_unlikely(!(v & LINK_VALID)))
		return dma_err(dd, -ENOENT); /* free, pending, or inside another link */
	if (dg_unlikely((v & LINK_LEN_MASK) != len || ((v >> LINK_DIR_SHIFT) & 3) != dir))
		return dma_err(dd, -EINVAL);
	span = link_span(v, l->gshift);
	r = unlink_slow(dd, st, l, i, span, b); /* a ring slot into a batch: dg_dma_iova_unlink() */
	ctr_add(dma_tstats(dd), CTR_UNLINKS, 1);
	return dg_unlikely(r) ? dma_err(dd, r) : 0;
}

/*
 * The counters of a link or unlink when the range's cached counter block is not this
 * thread's (its first call, or another thread counted here last): the fast paths tail-call
 * this rather than calling the lookup.
 */
static dg_noinline int link_count_slow(struct dg_dma_dev *dd, struct dma_links *l, enum dma_ctr c,
				       uint64_t waste)
{
	struct dma_tstats *t = dma_tstats(dd);

	/* Release: pairs with the acquire load in links_tstats() (the block's owner field,
	 * written before the block was published in dma_tstats_slow(), is visible with it). */
	atomic_store_explicit(&l->ts, t, memory_order_release);

	ctr_add(t, c, 1);
	if (c == CTR_LINKS) {
		ctr_add(t, CTR_SUBPAGE, waste);
		ctr_max(&t->subpage_max, waste);
	}
	return 0;
}

/* The range's cached counter block if it is this thread's, else NULL: three loads. */
static dg_always_inline struct dma_tstats *links_tstats(struct dma_links *l)
{
	/* Acquire: pairs with the release store in link_count_slow(). */
	struct dma_tstats *t = atomic_load_explicit(&l->ts, memory_order_acquire);

	return dg_likely(t->owner == dma_tls_tid) ? t : NULL;
}

/*
 * The fast paths: a one-granule slot with its table kept, no failure hook, nothing to refuse.
 * They call nothing but in tail position (so they save no registers) and change nothing
 * before they know the short way applies; anything else goes to the general functions, which
 * check and refuse everything themselves.
 */
int dg_dma_iova_link(struct dg_dma_iova_state *st, uint64_t offset, const void *buf, size_t len,
		     enum dg_dma_dir dir, uint64_t *dma)
{
	struct dma_links *l;
	struct dma_tstats *t;
	uint64_t off, i, waste;

	/* st->links is set exactly while st->dev is (alloc, free): one test covers both */
	if (dg_unlikely(!st || !(l = st->links) || !l->slots || !buf || !dma || !len ||
			!dma_dir_ok(dir)))
		return link_general(st, offset, buf, len, dir, dma);
	off = (uintptr_t)buf & (st->granule - 1);
	if (dg_unlikely((offset & (st->granule - 1)) || offset >= st->size ||
			len > st->granule - off))
		return link_general(st, offset, buf, len, dir, dma);
	i = offset >> l->gshift;
	/* The hook is relaxed-loaded only to be tested: link_general() loads it with acquire
	 * (dma_fail()) before using it. */
	if (dg_unlikely(atomic_load_explicit(&l->w[i], memory_order_relaxed) ||
			atomic_load_explicit(l->fail, memory_order_relaxed) ||
			!pt_slot_try_map(l->slots, i, (uintptr_t)buf - off, l->tmpl[dir])))
		return link_general(st, offset, buf, len, dir, dma);
	atomic_store_explicit(&l->w[i], link_word1(dir, len), memory_order_relaxed);
	*dma = st->addr + offset + off;
	waste = st->granule - len;
	t = links_tstats(l);
	if (dg_unlikely(!t))
		return link_count_slow(st->dev, l, CTR_LINKS, waste);
	ctr_add(t, CTR_LINKS, 1);
	ctr_add(t, CTR_SUBPAGE, waste);
	ctr_max(&t->subpage_max, waste);
	return 0;
}

int dg_dma_iova_unlink(struct dg_dma_iova_state *st, uint64_t offset, size_t len,
		       enum dg_dma_dir dir, struct dg_dma_batch *b)
{
	struct dma_links *l;
	struct dma_tstats *t;
	uint64_t v, i;

	if (dg_unlikely(!st || !(l = st->links) || !l->slots || !b || b->dev != st->dev ||
			b->n >= DG_DMA_BATCH_MAX || !dma_dir_ok(dir) ||
			(offset & (st->granule - 1)) || offset >= st->size))
		return unlink_general(st, offset, len, dir, b);
	i = offset >> l->gshift;
	v = atomic_load_explicit(&l->w[i], memory_order_relaxed);
	/* linked here, with this length and direction, inside one granule */
	if (dg_unlikely(v != link_word1(dir, len) || len > st->granule || !len))
		return unlink_general(st, offset, len, dir, b);
	pt_slot_unmap(l->slots, i);
	atomic_store_explicit(&l->w[i], DMA_LINK_PENDING, memory_order_relaxed);
	dma_batch_put(b, st->addr + offset, st->granule | DMA_BATCH_LINK, (uint64_t)(uintptr_t)l);
	t = links_tstats(l);
	if (dg_unlikely(!t))
		return link_count_slow(st->dev, l, CTR_UNLINKS, 0);
	ctr_add(t, CTR_UNLINKS, 1);
	return 0;
}

int dg_dma_iova_free(struct dg_dma_iova_state *st)
{
	struct dg_dma_dev *dd;
	struct dma_links *l;
	uint64_t n;

	if (!st || !st->dev)
		return -EINVAL;
	dd = st->dev;
	l = st->links;
	if (dd->sp) {
		if (!l)
			return dma_err(dd, -EINVAL);
		n = st->size >> l->gshift;
		for (uint64_t i = 0; i < n; i++)
			if (atomic_load_explicit(&l->w[i], memory_order_relaxed))
				return dma_err(dd,
					       -EBUSY); /* linked, or its unlink not confirmed */
		pt_slots_destroy(l->slots);
		dg_iova_free(dd->sp->iova, st->addr, st->size);
		free(l);
	}
	atomic_fetch_sub_explicit(&dd->iova_states, 1, memory_order_relaxed);
	st->links = NULL;
	st->dev = NULL;
	return 0;
}

/*
 * The bulk calls (a ring's refill and reap), all or nothing with the error of the first bad
 * buffer. The arguments are checked first. A bulk link of one-granule buffers through the
 * slots (link_bulk_fast) then checks and stores buffer by buffer in one pass per last-level
 * table (the checks - a NULL or out-of-range address, a buffer crossing a granule, a linked or
 * pending slot - are branches a ring's refill always passes): a NULL-free run costs a load of
 * the buffer, two compares, a load of the word and the entry, the entry store, the word store
 * (one constant for the whole call) and the address store. The rare buffer that fails undoes
 * the links before it (their entries cleared, one RANGE invalidation and a wait - the device
 * may have walked them - then their words freed) before the answer. A bulk unlink of
 * one-granule links checks every word against the one constant word of the call first (a
 * load and a compare each: an unlink cannot be undone without the device seeing a spurious
 * fault, so nothing is cleared before all are known good), then clears entries and marks the
 * words pending in one pass per table, plus one batch entry for a run of adjacent slots
 * (stride = granule: a ring's consecutive slots are one entry, settled at the batch's end in
 * one pass); the counters once per call. Multi-granule buffers, the reference and an installed
 * failure hook take the general way: every buffer and word checked, then the single calls one
 * by one, whose checks cannot fail after those passed; a page-table allocation can, and then
 * the links made are unlinked again (with a wait) before the error is returned.
 */

/* Check the common bulk arguments: 0, -EINVAL or -ERANGE. */
static int bulk_args(const struct dg_dma_iova_state *st, uint64_t offset, uint64_t stride,
		     unsigned int n, size_t len, enum dg_dma_dir dir)
{
	if (!n || n > DG_DMA_BULK_MAX || !len || len > LINK_LEN_MASK || !dma_dir_ok(dir) ||
	    !stride || (stride & (st->granule - 1)) || (offset & (st->granule - 1)))
		return -EINVAL;
	if (offset >= st->size || (uint64_t)(n - 1) * stride >= st->size - offset)
		return -ERANGE;
	return 0;
}

/*
 * Undo the first @done links of a failed link_bulk_fast() (slots offset + j * stride): clear
 * their entries, invalidate them - the device may have walked an entry meanwhile, and the
 * caller is told they were never linked, so it may reuse the buffers - then free the words.
 * Rare (a buffer refused after others were linked): one RANGE command over the hull (it may
 * cover slots between ours: invalidating more is always safe) and one wait. A failed wait
 * leaves the words pending, parked in quarantine until a completion confirms (links_park(),
 * as unlink_slow() does): the caller gets the refused buffer's error, and those slots cannot
 * be linked again (-EEXIST) nor the range freed (-EBUSY) before the IOTLBs are clean.
 */
static dg_noinline void link_undo(struct dg_dma_iova_state *st, struct dma_links *l,
				  uint64_t offset, uint64_t stride, unsigned int done)
{
	struct dg_dma_dev *dd = st->dev;
	const uint64_t ws = stride >> l->gshift;
	struct dg_inval_cmd c;
	uint64_t wi, seq = 0;

	if (!done)
		return;
	wi = offset >> l->gshift;
	for (unsigned int j = 0; j < done; j++, wi += ws) {
		pt_slot_unmap(l->slots, wi);
		atomic_store_explicit(&l->w[wi], DMA_LINK_PENDING, memory_order_relaxed);
	}
	c = (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
				  .flags = DG_INVAL_LEAF, /* the slots never free a table */
				  .domain = dd->sp->dom_id,
				  .iova = st->addr + offset,
				  .size = (uint64_t)(done - 1) * stride + st->granule};
	if (dg_unlikely(dma_inval(dd, &c, 1, &seq))) {
		/* not confirmed: the slots stay pending (not linkable, the range not freeable)
		 * until a completion confirms it, one parked granule each */
		for (unsigned int j = 0; j < done; j++)
			links_park(dd, l, seq, st->addr + offset + (uint64_t)j * stride,
				   st->granule);
		return;
	}
	wi = offset >> l->gshift;
	for (unsigned int j = 0; j < done; j++, wi += ws)
		atomic_store_explicit(&l->w[wi], 0, memory_order_relaxed);
}

/* What every buffer of a link_bulk_fast() call shares. */
struct link_k {
	uint64_t gm;	 /* granule - 1 */
	uint64_t glen;	 /* granule - len: the largest offset in the granule that still fits */
	uint64_t lim1;	 /* output limit - 1 (a power of two): a - 1 < lim1 <=> 0 < a < limit */
	uint64_t pmask;	 /* the leaf's output address bits of a granule-aligned address */
	uint64_t hi;	 /* the leaf's PA[51:48] at bits [15:12] (LPAE 52-bit), or 0 */
	uint64_t tmpl;	 /* the leaf bits but the address (pt_slots_tmpl()) */
	uint64_t word;	 /* the link word (link_word1()) */
	uint64_t stride; /* bytes between two buffers' slots */
};

/*
 * Link bufs[0..m) into the entries pte[j * ws] (one kept table) and the words w[j * ws],
 * checking and storing each buffer in turn (the checks are predictable: a ring's buffers pass
 * them all). Returns m, or the index of the first buffer that failed a check (nothing of it
 * stored; the caller undoes the ones before). @hi: the format has PA[51:48] bits (LPAE 52).
 */
static dg_always_inline unsigned int link_run(_Atomic uint64_t *w, _Atomic uint64_t *pte,
					      uint64_t ws, void *const *bufs, unsigned int m,
					      const struct link_k *k, uint64_t base, uint64_t *dma,
					      bool hi)
{
	for (unsigned int j = 0; j < m; j++) {
		const uint64_t a = (uintptr_t)bufs[j], off = a & k->gm;
		_Atomic uint64_t *we = w + j * ws, *pe = pte + j * ws;

		if (dg_unlikely(a - 1 >= k->lim1 || off > k->glen ||
				(atomic_load_explicit(we, memory_order_relaxed) |
				 atomic_load_explicit(pe, memory_order_relaxed))))
			return j;
		/* Release: pairs with the acquire loads of walkers (as in pt_slot_map). */
		atomic_store_explicit(pe, (a & k->pmask) | (hi ? (a >> 36) & k->hi : 0) | k->tmpl,
				      memory_order_release);
		atomic_store_explicit(we, k->word, memory_order_relaxed);
		dma[j] = base + j * k->stride + off;
	}
	return m;
}

/*
 * link_run() of a ring (adjacent slots, so stride = granule) in a format whose leaf holds a
 * granule-aligned address below the output limit as it is (no PA[51:48] bits: the caller
 * checks): out of line with the loop written for the registers it has - every array indexed
 * by one counter running up to 0, the entry (a - off) | tmpl, the next slot's IOVA one add.
 */
static dg_noinline unsigned int link_run_ring(_Atomic uint64_t *w, _Atomic uint64_t *pte,
					      void *const *bufs, unsigned int m,
					      const struct link_k *k, uint64_t base, uint64_t *dma)
{
	const uint64_t gm = k->gm, glen = k->glen, lim1 = k->lim1, tmpl = k->tmpl, word = k->word;

	w += m;
	pte += m;
	bufs += m;
	dma += m;
	for (intptr_t j = -(intptr_t)m; j; j++) {
		const uint64_t a = (uintptr_t)bufs[j], off = a & gm;

		if (dg_unlikely(a - 1 >= lim1 || off > glen ||
				(atomic_load_explicit(&w[j], memory_order_relaxed) |
				 atomic_load_explicit(&pte[j], memory_order_relaxed))))
			return (unsigned int)((intptr_t)m + j);
		/* Release: pairs with the acquire loads of walkers (as in pt_slot_map). */
		atomic_store_explicit(&pte[j], (a ^ off) | tmpl, memory_order_release);
		atomic_store_explicit(&w[j], word, memory_order_relaxed);
		dma[j] = base | off;
		base += gm + 1;
	}
	return m;
}

/* link_run() of any stride and format. */
static dg_noinline unsigned int link_run_any(_Atomic uint64_t *w, _Atomic uint64_t *pte,
					     uint64_t ws, void *const *bufs, unsigned int m,
					     const struct link_k *k, uint64_t base, uint64_t *dma)
{
	const struct link_k kk = *k;

	return link_run(w, pte, ws, bufs, m, &kk, base, dma, kk.hi != 0);
}

/*
 * The short way of dg_dma_iova_link_bulk(): one-granule buffers through kept tables, no
 * failure hook. One pass per last-level table the slots cross, each buffer checked and then
 * stored (link_run()); the first buffer that fails a check undoes the links before it
 * (link_undo(): with an invalidation and a wait) and decides the answer, so the call is still
 * all or nothing with the error of the first bad buffer, in the order the general way checks:
 * NULL -EINVAL, more than one granule (1), beyond the output size -ERANGE, a linked or pending
 * slot -EEXIST, an entry present although its word is free (1). A table that cannot be kept
 * fails the call with its error (-ENOMEM) when its first buffer is reached. Returns 1 when
 * the general way must say (nothing linked; the tables kept change nothing), else 0 or -errno.
 */
static int link_bulk_fast(struct dg_dma_iova_state *st, struct dma_links *l, uint64_t offset,
			  uint64_t stride, void *const *bufs, unsigned int n, size_t len,
			  enum dg_dma_dir dir, uint64_t *dma)
{
	struct pt_slots *s = l->slots;
	const uint64_t gm = st->granule - 1, ws = stride >> l->gshift;
	const struct link_k k = {.gm = gm,
				 .glen = st->granule - len,
				 .lim1 = s->oa_limit - 1,
				 .pmask = s->oa_mask & ~gm,
				 .hi = s->oa_hi_mask,
				 .tmpl = l->tmpl[dir],
				 .word = link_word1(dir, len),
				 .stride = stride};
	/* every output address bit a buffer below the limit can have is the leaf's as it is */
	const bool ring = ws == 1 && !k.hi && !((s->oa_limit - 1) & ~gm & ~s->oa_mask);
	uint64_t wi = offset >> l->gshift, base = st->addr + offset;
	struct dma_tstats *t;
	unsigned int i = 0;
	int r;

	if (len > st->granule || atomic_load_explicit(l->fail, memory_order_relaxed))
		return 1;
	while (i < n) {
		const uint64_t g = s->lo + wi, room = s->tmask - (g & s->tmask);
		/* Acquire: as in pt_slot_entry(). */
		_Atomic uint64_t *table =
			atomic_load_explicit(&s->tables[g >> s->tshift], memory_order_acquire);
		unsigned int m = n - i, done;
		uint64_t a, off;

		if (room / ws < m - 1) /* the buffers whose slots are in this table */
			m = (unsigned int)(room / ws) + 1;
		if (dg_unlikely(!table) && (r = pt_slots_table(s, g >> s->tshift, &table))) {
			link_undo(st, l, offset, stride, i);
			return r;
		}
		table += g & s->tmask;
		if (dg_likely(ring))
			done = link_run_ring(&l->w[wi], table, bufs + i, m, &k, base, dma + i);
		else
			done = link_run_any(&l->w[wi], table, ws, bufs + i, m, &k, base, dma + i);
		if (dg_likely(done == m)) {
			i += m;
			wi += m * ws;
			base += m * stride;
			continue;
		}
		/* buffer i + done failed a check: which one decides the answer */
		a = (uintptr_t)bufs[i + done];
		off = a & gm;
		if (!a)
			r = -EINVAL;
		else if (off > k.glen)
			r = 1; /* more than one granule: the general way says */
		else if ((a & ~gm) >= s->oa_limit)
			r = -ERANGE;
		else if (atomic_load_explicit(&l->w[wi + done * ws], memory_order_relaxed))
			r = -EEXIST;
		else
			r = 1; /* present although its word is free: the general way says */
		link_undo(st, l, offset, stride, i + done);
		return r;
	}
	t = dma_tstats(st->dev);
	ctr_add(t, CTR_LINKS, n);
	ctr_add(t, CTR_SUBPAGE, (uint64_t)n * (st->granule - len));
	ctr_max(&t->subpage_max, st->granule - len);
	return 0;
}

int dg_dma_iova_link_bulk(struct dg_dma_iova_state *st, uint64_t offset, uint64_t stride,
			  void *const *bufs, unsigned int n, size_t len, enum dg_dma_dir dir,
			  uint64_t *dma)
{
	struct dg_dma_dev *dd;
	struct dma_links *l;
	unsigned int i;
	int r;

	if (!st || !st->dev)
		return -EINVAL;
	dd = st->dev;
	if (!bufs || !dma)
		return dma_err(dd, -EINVAL);
	r = bulk_args(st, offset, stride, n, len, dir);
	if (r)
		return dma_err(dd, r);
	l = st->links;
	if (l && l->slots) {
		r = link_bulk_fast(st, l, offset, stride, bufs, n, len, dir, dma);
		if (r <= 0)
			return r ? dma_err(dd, r) : 0;
	}
	for (i = 0; i < n; i++) { /* every check before anything changes */
		const uintptr_t a = (uintptr_t)bufs[i];
		const uint64_t span = dg_align_up((a & (st->granule - 1)) + len, st->granule);

		if (!a)
			return dma_err(dd, -EINVAL);
		if (a + (len - 1) < a || (!l && a + (len - 1) > dd->mask))
			return dma_err(dd, -ERANGE);
		if (span > stride)
			return dma_err(dd, -EINVAL); /* it would run into the next offset */
		if (offset + i * stride > st->size - span)
			return dma_err(dd, -ERANGE);
		for (uint64_t j = 0; l && j < span >> l->gshift; j++)
			if (atomic_load_explicit(&l->w[((offset + i * stride) >> l->gshift) + j],
						 memory_order_relaxed))
				return dma_err(dd, -EEXIST);
	}
	if (!l) { /* identity */
		for (i = 0; i < n; i++)
			dma[i] = (uintptr_t)bufs[i];
		ctr_add(dma_tstats(dd), CTR_LINKS, n);
		return 0;
	}
	for (i = 0; i < n; i++) { /* one by one; a failure unlinks what was linked */
		r = dg_dma_iova_link(st, offset + i * stride, bufs[i], len, dir, &dma[i]);
		if (r) {
			while (i--)
				dg_dma_iova_unlink(st, offset + i * stride, len, dir, NULL);
			return r; /* counted by the single call */
		}
	}
	return 0;
}

/* Are the words w[j * ws], j < n, all @want? The fast unlink's check pass: a load and a
 * compare each. */
static dg_always_inline bool words_are(const _Atomic uint64_t *w, uint64_t ws, unsigned int n,
				       uint64_t want)
{
	for (unsigned int j = 0; j < n; j++)
		if (dg_unlikely(atomic_load_explicit(&w[j * ws], memory_order_relaxed) != want))
			return false;
	return true;
}

/*
 * The store pass of a fast bulk unlink (every word checked): per last-level table the slots
 * cross, clear the entries and mark the words pending, two stores a buffer.
 */
static void unlink_run(struct dma_links *l, uint64_t wi, uint64_t ws, unsigned int n)
{
	struct pt_slots *s = l->slots;

	while (n) {
		const uint64_t g = s->lo + wi, room = s->tmask - (g & s->tmask);
		/* Acquire: as in pt_slot_entry(). */
		_Atomic uint64_t *pte =
			atomic_load_explicit(&s->tables[g >> s->tshift], memory_order_acquire);
		_Atomic uint64_t *w = &l->w[wi];
		unsigned int m = n;

		if (room / ws < m - 1)
			m = (unsigned int)(room / ws) + 1;
		if (dg_likely(pte != NULL)) { /* kept: every slot here is linked (always so) */
			pte += g & s->tmask;
			for (unsigned int j = 0; j < m; j++) {
				/* Relaxed: as in pt_unmap_va (the batch end invalidates). */
				atomic_store_explicit(&pte[j * ws], 0, memory_order_relaxed);
				atomic_store_explicit(&w[j * ws], DMA_LINK_PENDING,
						      memory_order_relaxed);
			}
		} else {
			for (unsigned int j = 0; j < m; j++)
				atomic_store_explicit(&w[j * ws], DMA_LINK_PENDING,
						      memory_order_relaxed);
		}
		n -= m;
		wi += m * ws;
	}
}

int dg_dma_iova_unlink_bulk(struct dg_dma_iova_state *st, uint64_t offset, uint64_t stride,
			    unsigned int n, size_t len, enum dg_dma_dir dir, struct dg_dma_batch *b)
{
	const uint64_t want = LINK_VALID | (uint64_t)dir << LINK_DIR_SHIFT | len;
	struct dg_dma_batch local;
	struct dg_dma_dev *dd;
	struct dma_links *l;
	uint64_t wi, ws;
	bool one = true;
	unsigned int i;
	int r;

	if (!st || !st->dev)
		return -EINVAL;
	dd = st->dev;
	if (b && b->dev != dd)
		return dma_err(dd, -EINVAL);
	r = bulk_args(st, offset, stride, n, len, dir);
	if (r)
		return dma_err(dd, r);
	l = st->links;
	if (!l) { /* identity */
		ctr_add(dma_tstats(dd), CTR_UNLINKS, n);
		return 0;
	}
	ws = stride >> l->gshift;
	wi = offset >> l->gshift;
	/* the short way: one-granule links through the slots, every word exactly the link's */
	if (dg_likely(l->slots && len <= st->granule && words_are(&l->w[wi], ws, n, want)))
		goto fast;
	for (i = 0; i < n; i++, wi += ws) {
		const uint64_t v = atomic_load_explicit(&l->w[wi], memory_order_relaxed);

		if (dg_unlikely((v & ~LINK_XSPAN) != want)) {
			if (!(v & LINK_VALID)) /* free, pending, or inside another link */
				return dma_err(dd, -ENOENT);
			return dma_err(dd, -EINVAL);
		}
		one &= link_span(v, l->gshift) == st->granule;
	}
	if (!one || !l->slots) { /* the general way: nothing left to refuse */
		/* without @b in a batch of its own: one invalidation and one wait for all (one
		 * each blocked a call for n timeouts when the device did not answer) */
		if (!b)
			dg_dma_batch_begin(dd, b = &local);
		for (i = 0, r = 0; i < n; i++) {
			int e = dg_dma_iova_unlink(st, offset + i * stride, len, dir, b);

			if (e && !r)
				r = e;
		}
		if (b == &local) {
			int e = dg_dma_batch_end(&local);

			if (!r)
				r = e;
		}
		return r;
	}
fast:
	if (!b)
		dg_dma_batch_begin(dd, b = &local);
	dma_batch_room(b, ws == 1 ? 1 : n);
	unlink_run(l, offset >> l->gshift, ws, n);
	if (ws == 1) { /* adjacent slots: one entry, settled in one pass */
		dma_batch_put(b, st->addr + offset, (uint64_t)n * st->granule | DMA_BATCH_LINK,
			      (uint64_t)(uintptr_t)l);
	} else {
		for (i = 0; i < n; i++)
			dma_batch_put(b, st->addr + offset + i * stride,
				      st->granule | DMA_BATCH_LINK, (uint64_t)(uintptr_t)l);
	}
	ctr_add(dma_tstats(dd), CTR_UNLINKS, n);
	return b == &local ? dg_dma_batch_end(&local) : 0;
}
