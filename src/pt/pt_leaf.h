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

/* Index of @iova's entry in its last-level table. */
static inline uint64_t pt_leaf_index(const struct dg_pt *pt, uint64_t iova)
{
	return ((iova - pt->iova_base) >> pt->leaf_shift) & pt->leaf_index_mask;
}

/*
 * Entries of a last-level table that share one cache line, minus one: an aligned group of
 * DG_CACHELINE / 8 entries of 8 bytes (every format's entries are 64-bit: VT-d, LPAE and
 * the flat TCE-style table alike), or the whole table when it is smaller (a flat window of
 * fewer pages). Tables are allocated aligned to their size (at least a line, or the whole
 * of a smaller one), so index & ~mask .. index | mask is one line of @table.
 */
static inline uint64_t pt_leaf_line_mask(const struct dg_pt *pt)
{
	return (DG_CACHELINE / sizeof(uint64_t) - 1) & pt->leaf_index_mask;
}

/*
 * Entry @idx (< leaf_index_mask + 1) of the last-level table @table: true with the output
 * address of the page (the entry's, aligned to its size) and the DG_PROT_READ |
 * DG_PROT_WRITE it grants when present, false when not present.
 */
static dg_always_inline bool pt_leaf_read_at(const struct dg_pt *pt, const void *table,
					     uint64_t idx, uint64_t *page_phys, unsigned int *rw)
{
	const _Atomic uint64_t *ptep = (const _Atomic uint64_t *)table + idx;
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

/* The entry of @iova in the last-level table @table (pt_leaf_read_at()). */
static dg_always_inline bool pt_leaf_read(const struct dg_pt *pt, const void *table, uint64_t iova,
					  uint64_t *page_phys, unsigned int *rw)
{
	return pt_leaf_read_at(pt, table, pt_leaf_index(pt, iova), page_phys, rw);
}

#endif /* DG_PT_LEAF_H */
