/* SPDX-License-Identifier: MIT */
/*
 * dma/window.c - the window policy: PowerPC Dynamic DMA Windows (DDW).
 *
 * A pseries device gets a DMA window: an IOVA range translated by a flat TCE table with one
 * page size. The default window is small with 4K pages and every I/O maps and unmaps TCEs in
 * it. DDW asks firmware for a big 64-bit window with large pages (64K or more); when it
 * covers all RAM the device reaches memory at a fixed offset with no map/unmap at all, and
 * since 2020 Linux uses it even when it does not ("translated window with big pages"); a later
 * hybrid sends RAM direct and maps the rest on demand. That hybrid is this policy:
 *
 *   window [base, base + size)  -- flat table (DG_PT_FMT_FLAT), pages of page_size
 *   |-- direct part [base, base + direct_size): host [direct, direct + direct_size), mapped
 *   |   once read/write; dma = base + (addr - direct); nothing per I/O, nothing to unmap
 *   '-- on-demand part: IOVA allocator in page_size units; a buffer outside the direct
 *       region is mapped like strict (whole window pages, so up to page_size - 1 bytes
 *       around it are exposed: the price of large TCEs) and unmapped with an invalidation
 *
 * What it protects: memory outside the direct region that is not mapped; the direct region is
 * exposed for the policy's life (reported as persistent bytes) and its direction is not
 * enforced. With no window configured the small default one (1 GiB at 2 GiB, 4K pages, no
 * direct part) makes this policy strict-like with a TCE table. The streaming hooks are the
 * pool policy's (dma/fixed_map.h), with the direct region as the fixed part; so are its
 * bulk calls (map.c takes them through dma_window_ops.fixed).
 */
#include "dma/dma_internal.h"
#include "dma/fixed_map.h"

#include <errno.h>

/* Is [a, a + len) inside the direct region? Then *dma gets its window address. The region is
 * mapped read/write: @dir is not enforced. */
static bool win_find(struct dg_dma_dev *dd, uintptr_t a, size_t len, enum dg_dma_dir dir,
		     uint64_t *dma)
{
	const struct dma_window *w = &dd->win;

	(void)dir;
	if (!(a >= w->direct && a - w->direct < w->direct_size &&
	      len <= w->direct_size - (a - w->direct)))
		return false;
	*dma = w->base + (a - w->direct);
	return true;
}

/* Is [dma, dma + len) inside the direct part of the window? */
static bool win_owns(struct dg_dma_dev *dd, uint64_t dma, size_t len)
{
	const struct dma_window *w = &dd->win;

	return dma >= w->base && dma - w->base < w->direct_size &&
	       len <= w->direct_size - (dma - w->base);
}

static const struct dma_fixed win_fixed = {
	.find = win_find,
	.owns = win_owns,
	.hit = CTR_WIN_DIRECT,
	.fallback = CTR_WIN_DYNAMIC,
};

static int win_map(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
		   unsigned int attrs, enum dma_kind kind, uint64_t *dma)
{
	return dma_fixed_map(&win_fixed, dd, buf, len, dir, attrs, kind, dma);
}

static int win_unmap(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		     unsigned int attrs, enum dma_kind kind, struct dg_dma_batch *b)
{
	return dma_fixed_unmap(&win_fixed, dd, dma, len, dir, attrs, kind, b);
}

static int win_map_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
		      enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma)
{
	return dma_fixed_map_sg(&win_fixed, dd, sg, nents, dir, attrs, nr_dma);
}

static int win_unmap_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	return dma_fixed_unmap_sg(&win_fixed, dd, sg, nents, dir, attrs, b);
}

const struct dma_policy_ops dma_window_ops = {
	.map = win_map,
	.unmap = win_unmap,
	.map_sg = win_map_sg,
	.unmap_sg = win_unmap_sg,
	.fixed = &win_fixed,
};
