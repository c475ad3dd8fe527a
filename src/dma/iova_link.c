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
 * Each granule of the range has a link word (st->links), written only by the thread linking
 * or unlinking at that offset (disjoint offsets may proceed in parallel, like the page table):
 *   bit 63 linked | bits 58..59 dir | bits 36..56 offset of the data in its first granule |
 *   bits 0..35 length
 * so an unlink with the wrong length or direction, or of nothing, is refused with nothing
 * changed, at the cost of one plain load and store. The page table refuses overlapping links
 * (-EEXIST).
 *
 * Under identity a range reserves nothing and links return host addresses. Lazy unlinks are
 * strict: a range is reused by design, and a lazy unlink would let a re-link at the same
 * offset meet a stale translation of the old buffer. Bounce cannot place a buffer at a chosen
 * IOVA (-EOPNOTSUPP: use streaming maps, as Linux does for swiotlb devices).
 */
#include "dma/dma_internal.h"
#include "pt/pt_fast.h"

#include <errno.h>
#include <stdlib.h>

#define LINK_VALID     (1ull << 63)
#define LINK_DIR_SHIFT 58
#define LINK_OFF_SHIFT 36
#define LINK_LEN_MASK  ((1ull << LINK_OFF_SHIFT) - 1)

static uint64_t link_word(enum dg_dma_dir dir, uint64_t off, uint64_t len)
{
	return LINK_VALID | (uint64_t)dir << LINK_DIR_SHIFT | off << LINK_OFF_SHIFT | len;
}

int dg_dma_iova_alloc(struct dg_dma_dev *dd, uint64_t size, struct dg_dma_iova_state *st)
{
	struct dma_space *sp;
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
	if (r)
		return dma_err(dd, r);
	st->links = calloc(n, sizeof(_Atomic uint64_t));
	if (!st->links) {
		dg_iova_free(sp->iova, st->addr, st->size);
		return dma_err(dd, -ENOMEM);
	}
	atomic_fetch_add_explicit(&dd->iova_states, 1, memory_order_relaxed);
	return 0;
}

int dg_dma_iova_link(struct dg_dma_iova_state *st, uint64_t offset, const void *buf, size_t len,
		     enum dg_dma_dir dir, uint64_t *dma)
{
	struct dg_dma_dev *dd;
	struct dma_space *sp;
	struct dg_pt_gather g;
	_Atomic uint64_t *w;
	uint64_t off, span;
	struct dma_tstats *t;
	int r;

	if (!st || !st->dev)
		return -EINVAL;
	dd = st->dev;
	if (dg_unlikely(!buf || !dma || !len || !dma_dir_ok(dir) || (offset & (st->granule - 1)) ||
			len > LINK_LEN_MASK))
		return dma_err(dd, -EINVAL);
	if (dg_unlikely((uintptr_t)buf + (len - 1) < (uintptr_t)buf))
		return dma_err(dd, -ERANGE);
	sp = dd->sp;
	if (!sp) {
		if ((uintptr_t)buf + (len - 1) > dd->mask || offset >= st->size)
			return dma_err(dd, -ERANGE);
		*dma = (uintptr_t)buf;
		ctr_add(dma_tstats(dd), CTR_LINKS, 1);
		return 0;
	}
	off = (uintptr_t)buf & sp->gmask;
	span = dg_align_up(off + len, sp->granule);
	if (dg_unlikely(offset >= st->size || span > st->size - offset))
		return dma_err(dd, -ERANGE);
	w = (_Atomic uint64_t *)st->links + (offset >> sp->gshift);
	if (dg_unlikely(atomic_load_explicit(w, memory_order_relaxed)))
		return dma_err(dd, -EEXIST);
	r = dma_fail(dd, DG_DMA_FAIL_PT_MAP);
	if (dg_unlikely(r))
		return dma_err(dd, r);
	dg_pt_gather_init(&g);
	/* One granule (a ring slot): through the page table's last-leaf-table hint. */
	if (span == sp->granule && !dd->reference)
		r = pt_map_granule(sp->pt, st->addr + offset, (uintptr_t)buf - off,
				   dma_dir_prot(dir), &g);
	else
		r = dg_pt_map(sp->pt, st->addr + offset, (uintptr_t)buf - off, span,
			      dma_dir_prot(dir), &g);
	if (dg_unlikely(g.start != g.end || g.nr_tables))
		dma_flush_gather(dd, sp, &g); /* replaced tables, or a failed map's undo */
	if (dg_unlikely(r))
		return dma_err(dd, r);
	atomic_store_explicit(w, link_word(dir, off, len), memory_order_relaxed);
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

int dg_dma_iova_unlink(struct dg_dma_iova_state *st, uint64_t offset, size_t len,
		       enum dg_dma_dir dir, struct dg_dma_batch *b)
{
	struct dg_dma_dev *dd;
	struct dma_space *sp;
	_Atomic uint64_t *w;
	uint64_t v, span;
	int r;

	if (!st || !st->dev)
		return -EINVAL;
	dd = st->dev;
	if (dg_unlikely(!len || !dma_dir_ok(dir) || (offset & (st->granule - 1)) ||
			(b && b->dev != dd)))
		return dma_err(dd, -EINVAL);
	if (dg_unlikely(offset >= st->size))
		return dma_err(dd, -ERANGE);
	sp = dd->sp;
	if (!sp) {
		ctr_add(dma_tstats(dd), CTR_UNLINKS, 1);
		return 0;
	}
	w = (_Atomic uint64_t *)st->links + (offset >> sp->gshift);
	v = atomic_load_explicit(w, memory_order_relaxed);
	if (dg_unlikely(!v))
		return dma_err(dd, -ENOENT);
	if (dg_unlikely((v & LINK_LEN_MASK) != len || ((v >> LINK_DIR_SHIFT) & 3) != dir))
		return dma_err(dd, -EINVAL);
	atomic_store_explicit(w, 0, memory_order_relaxed);
	span = dg_align_up(((v >> LINK_OFF_SHIFT) & 0x1fffff) + len, sp->granule);
	r = dma_strict_retire(dd, sp, st->addr + offset, span, false, 0, b, NULL);
	ctr_add(dma_tstats(dd), CTR_UNLINKS, 1);
	return r ? dma_err(dd, r) : 0;
}

int dg_dma_iova_free(struct dg_dma_iova_state *st)
{
	struct dg_dma_dev *dd;
	uint64_t n;

	if (!st || !st->dev)
		return -EINVAL;
	dd = st->dev;
	if (dd->sp) {
		if (!st->links)
			return dma_err(dd, -EINVAL);
		n = st->size >> dd->sp->gshift;
		for (uint64_t i = 0; i < n; i++)
			if (atomic_load_explicit((_Atomic uint64_t *)st->links + i,
						 memory_order_relaxed))
				return dma_err(dd, -EBUSY);
		dg_iova_free(dd->sp->iova, st->addr, st->size);
		free(st->links);
	}
	atomic_fetch_sub_explicit(&dd->iova_states, 1, memory_order_relaxed);
	st->links = NULL;
	st->dev = NULL;
	return 0;
}
