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
 * direct part) makes this policy strict-like with a TCE table.
 */
#include "dma/dma_internal.h"

#include <errno.h>

static bool in_direct(const struct dma_window *w, uintptr_t a, size_t len)
{
	return a >= w->direct && a - w->direct < w->direct_size &&
	       len <= w->direct_size - (a - w->direct);
}

static bool dma_in_direct(const struct dma_window *w, uint64_t dma, size_t len)
{
	return dma >= w->base && dma - w->base < w->direct_size &&
	       len <= w->direct_size - (dma - w->base);
}

static int win_map(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
		   unsigned int attrs, enum dma_kind kind, uint64_t *dma)
{
	int r;

	if (in_direct(&dd->win, (uintptr_t)buf, len)) {
		*dma = dd->win.base + ((uintptr_t)buf - dd->win.direct);
		ctr_add(dma_tstats(dd), CTR_WIN_DIRECT, 1);
		return 0;
	}
	r = dma_strict_ops.map(dd, buf, len, dir, attrs, kind, dma);
	if (!r)
		ctr_add(dma_tstats(dd), CTR_WIN_DYNAMIC, 1);
	return r;
}

static int win_unmap(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		     unsigned int attrs, enum dma_kind kind, struct dg_dma_batch *b)
{
	if (dma_in_direct(&dd->win, dma, len))
		return 0; /* fixed translation: nothing to undo */
	return dma_strict_ops.unmap(dd, dma, len, dir, attrs, kind, b);
}

static int win_map_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
		      enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma)
{
	unsigned int i;
	int r;

	for (i = 0; i < nents && in_direct(&dd->win, (uintptr_t)sg[i].addr, sg[i].len); i++)
		;
	if (i == nents) { /* all direct: one segment per entry, like identity */
		for (i = 0; i < nents; i++) {
			sg[i].dma_addr = dd->win.base + ((uintptr_t)sg[i].addr - dd->win.direct);
			sg[i].dma_len = sg[i].len;
		}
		*nr_dma = nents;
		ctr_add(dma_tstats(dd), CTR_WIN_DIRECT, 1);
		return 0;
	}
	r = dma_strict_ops.map_sg(dd, sg, nents, dir, attrs, nr_dma);
	if (!r)
		ctr_add(dma_tstats(dd), CTR_WIN_DYNAMIC, 1);
	return r;
}

static int win_unmap_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	unsigned int i;

	for (i = 0; i < nents && dma_in_direct(&dd->win, sg[i].dma_addr, sg[i].len) &&
		    sg[i].dma_len == sg[i].len;
	     i++)
		;
	if (i == nents)
		return 0;
	return dma_strict_ops.unmap_sg(dd, sg, nents, dir, attrs, b);
}

const struct dma_policy_ops dma_window_ops = {
	.map = win_map,
	.unmap = win_unmap,
	.map_sg = win_map_sg,
	.unmap_sg = win_unmap_sg,
};
