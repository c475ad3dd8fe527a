/* SPDX-License-Identifier: MIT */
/*
 * pt/pt_leaf.h - one entry of a last-level table, read the way the walker reads it (library
 * private: the IOMMU's cheap miss, src/dev/translate.c).
 *
 * A device whose page-walk cache knows the last-level ("leaf") table covering an IOVA needs
 * one entry of it, not a walk: at the last depth every present entry is a leaf of the
 * smallest size (no format puts a table or a larger page there), so the walker's per-depth
 * decisions reduce to "present or not". pt_leaf_read() is pt_walk_at() (pt.c) for that one
 * depth: the same acquire load, the same presence test, the same output-address decoding
 * (pt_oa_decode) and the same permission decoder (pt_leaf_rw, which every format's
 * leaf_prot() uses too), inline and without the walk result it does not need. Everything a
 * format means by its bits stays in its init() as data; nothing here is format specific.
 *
 * The caller guarantees that @table is a last-level table of @pt covering @iova that is
 * still linked, or unlinked but not yet released (a walk-cache entry not yet invalidated),
 * or the root of a one-level table (never unlinked).
 */
#ifndef DG_PT_LEAF_H
#define DG_PT_LEAF_H

#include "pt/pt_internal.h"

#include <stdatomic.h>

static inline unsigned int pt_depth(const struct dg_pt *pt)
{
	return pt->depth;
}

/* The root table (a one-level table's only table: it is never unlinked). */
static inline const void *pt_root(const struct dg_pt *pt)
{
	return (const void *)pt->root;
}

/* log2 of the size of a last-level entry (the granule). */
static inline unsigned int pt_leaf_shift(const struct dg_pt *pt)
{
	return pt->leaf_shift;
}

/*
 * The entry of @iova in the last-level table @table: true with the output address of the
 * page (the entry's, aligned to its size) and the DG_PROT_READ | DG_PROT_WRITE it grants
 * when present, false when not present.
 */
static dg_always_inline bool pt_leaf_read(const struct dg_pt *pt, const void *table, uint64_t iova,
					  uint64_t *page_phys, unsigned int *rw)
{
	uint64_t va = iova - pt->iova_base;
	const _Atomic uint64_t *ptep =
		(const _Atomic uint64_t *)table + ((va >> pt->leaf_shift) & pt->leaf_index_mask);
	/*
	 * Acquire: pairs with the release store of a leaf in pt_map_va() / pt_granule_store()
	 * (pt.c), as the walker's load does.
	 */
	uint64_t pte = atomic_load_explicit(ptep, memory_order_acquire);

	if (!(pte & pt->valid_mask))
		return false;
	/* A last-level entry is one granule: the walker's ~(size - 1) is ~granule_mask. */
	*page_phys = pt_oa_decode(pt, pte) & ~pt->granule_mask;
	*rw = pt_leaf_rw(pt, pte);
	return true;
}

#endif /* DG_PT_LEAF_H */
