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
 *   first granule of a link: bit 63 linked | bits 58..59 dir | bits 36..56 offset of the data
 *                            in its first granule | bits 0..35 length
 *   other granules of a link: bit 62 (busy)
 *   unlinked, invalidation not yet confirmed: DMA_LINK_PENDING (bit 61)
 *   free: 0
 * so an unlink with the wrong length or direction, or of nothing, and a link over a linked or
 * pending granule are refused with nothing changed, by the words alone.
 *
 * The fast path (one-granule links: a ring's slots). At reserve time the range gets page-table
 * slots (pt_fast.h): its last-level tables, found on first use and kept, which is safe because
 * the range's owner only ever writes granule leaves into them and clears them. A link is then
 * the word check, one PTE store through a kept table and the word store; an unlink is the word
 * check, one PTE clear and a batch entry. The batch's end invalidates its unlinks - a ring's
 * consecutive slots merge into one run: one RANGE command (leaf-only: walk caches stay warm),
 * one wait - and then settles their words (pending -> free). Multi-granule links take the same
 * slots, one store per granule, all checked before any is written.
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
#define LINK_OFF_SHIFT 36
#define LINK_OFF_MASK  0x1fffffull
#define LINK_LEN_MASK  ((1ull << LINK_OFF_SHIFT) - 1)

static_assert(DMA_LINK_PENDING != LINK_VALID && DMA_LINK_PENDING != LINK_BUSY &&
		      DMA_LINK_PENDING > (3ull << LINK_DIR_SHIFT),
	      "link word bits overlap");

static uint64_t link_word(enum dg_dma_dir dir, uint64_t off, uint64_t len)
{
	return LINK_VALID | (uint64_t)dir << LINK_DIR_SHIFT | off << LINK_OFF_SHIFT | len;
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
	atomic_store_explicit(&l->w[i], link_word(dir, off, len), memory_order_relaxed);
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
	struct dg_pt_gather g;
	struct dg_inval_cmd c;
	uint64_t seq = 0;
	int r;

	for (uint64_t j = 0; j < k; j++)
		atomic_store_explicit(&l->w[i + j], DMA_LINK_PENDING, memory_order_relaxed);
	if (!l->slots) { /* the reference: a synchronous strict unmap, as stock Linux */
		r = dma_strict_retire(dd, sp, iova, span, false, 0, NULL, NULL);
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
	if (dg_unlikely(r)) { /* parked until a completion confirms it (nothing to give back) */
		dg_pt_gather_init(&g);
		dma_quarantine_add(dd, sp, seq, &g, NULL, NULL, 0, NULL);
	}
	dma_links_settle(l, iova, span);
	return r;
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
	span = dg_align_up(((v >> LINK_OFF_SHIFT) & LINK_OFF_MASK) + len, st->granule);
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
	atomic_store_explicit(&l->w[i], link_word(dir, off, len), memory_order_relaxed);
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
	if (dg_unlikely((v & ~(LINK_OFF_MASK << LINK_OFF_SHIFT)) !=
				(LINK_VALID | (uint64_t)dir << LINK_DIR_SHIFT | len) ||
			((v >> LINK_OFF_SHIFT) & LINK_OFF_MASK) + len > st->granule || !len))
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
 * The bulk calls (a ring's refill and reap). Everything is checked before anything changes:
 * the arguments, each buffer on its face, every offset's word (free for a link; linked with
 * this length and direction for an unlink) and, for links through the slots, the slots'
 * tables (found and kept first: keeping a table changes nothing the caller can see). Then the
 * short way is a PTE store and a word store per link, and for unlinks a PTE clear and a word
 * store each plus one batch entry for a run of adjacent slots (stride = granule: a ring's
 * consecutive slots are one entry, settled at the batch's end in one pass); the counters once.
 * Multi-granule buffers, the reference and an installed failure hook take the single calls
 * one by one: their checks cannot fail after the bulk checks passed, but a page-table
 * allocation can, and then the links made are unlinked again (with a wait) before the error
 * is returned.
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
 * The short way of dg_dma_iova_link_bulk(): one-granule buffers through kept tables, no
 * failure hook. Checks everything, then stores. 1 when it does not apply (nothing done; the
 * tables it kept change nothing), else 0 or -errno with nothing linked.
 */
static int link_bulk_fast(struct dg_dma_iova_state *st, struct dma_links *l, uint64_t offset,
			  uint64_t stride, void *const *bufs, unsigned int n, size_t len,
			  enum dg_dma_dir dir, uint64_t *dma)
{
	struct pt_slots *s = l->slots;
	const uint64_t gm = st->granule - 1, ws = stride >> l->gshift, tmpl = l->tmpl[dir];
	const uint64_t limit = s->oa_limit, lo = s->lo, tmask = s->tmask;
	const unsigned int tshift = s->tshift;
	const uint64_t word = link_word(dir, 0, len), base = st->addr + offset;
	_Atomic uint64_t *pte[DG_DMA_BULK_MAX], *table = NULL;
	uint64_t wi = offset >> l->gshift, tcur = UINT64_MAX, pa[DG_DMA_BULK_MAX];
	struct dma_tstats *t;
	unsigned int i;
	int r;

	if (len > st->granule || atomic_load_explicit(l->fail, memory_order_relaxed))
		return 1;
	for (i = 0; i < n; i++, wi += ws) {
		const uintptr_t a = (uintptr_t)bufs[i];
		const uint64_t g = lo + wi;

		if (dg_unlikely(!a))
			return -EINVAL;
		if (dg_unlikely((a & gm) + len > st->granule))
			return 1; /* more than one granule: the general way says */
		pa[i] = a & ~gm;
		if (dg_unlikely(pa[i] >= limit))
			return -ERANGE;
		if (dg_unlikely(atomic_load_explicit(&l->w[wi], memory_order_relaxed)))
			return -EEXIST;
		if (dg_unlikely(g >> tshift != tcur)) { /* the next last-level table */
			_Atomic uint64_t *e = pt_slot_entry(s, wi, &r);

			if (dg_unlikely(!e))
				return r;
			table = e - (g & tmask);
			tcur = g >> tshift;
		}
		pte[i] = table + (g & tmask);
		if (dg_unlikely(atomic_load_explicit(pte[i], memory_order_relaxed)))
			return 1; /* present although its word is free: the general way says */
	}
	wi = offset >> l->gshift;
	for (i = 0; i < n; i++, wi += ws) {
		const uint64_t off = (uintptr_t)bufs[i] & gm;

		/* Release: pairs with the acquire loads of walkers (as in pt_slot_map). */
		atomic_store_explicit(pte[i], pt_slots_pte(s, pa[i], tmpl), memory_order_release);
		atomic_store_explicit(&l->w[wi], word | off << LINK_OFF_SHIFT,
				      memory_order_relaxed);
		dma[i] = base + i * stride + off;
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
	for (i = 0; i < n; i++, wi += ws) {
		const uint64_t v = atomic_load_explicit(&l->w[wi], memory_order_relaxed);

		if (dg_unlikely((v & ~(LINK_OFF_MASK << LINK_OFF_SHIFT)) != want)) {
			if (!(v & LINK_VALID)) /* free, pending, or inside another link */
				return dma_err(dd, -ENOENT);
			return dma_err(dd, -EINVAL);
		}
		one &= ((v >> LINK_OFF_SHIFT) & LINK_OFF_MASK) + len <= st->granule;
	}
	if (!one || !l->slots) { /* the general way: nothing left to refuse */
		for (i = 0, r = 0; i < n; i++) {
			int e = dg_dma_iova_unlink(st, offset + i * stride, len, dir, b);

			if (e && !r)
				r = e;
		}
		return r;
	}
	if (!b)
		dg_dma_batch_begin(dd, b = &local);
	dma_batch_room(b, ws == 1 ? 1 : n);
	wi = offset >> l->gshift;
	for (i = 0; i < n; i++, wi += ws) {
		pt_slot_unmap(l->slots, wi);
		atomic_store_explicit(&l->w[wi], DMA_LINK_PENDING, memory_order_relaxed);
	}
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
