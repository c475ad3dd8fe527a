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
 * The neighbour fill (the IOMMU caching the other entries of the cache line a miss read)
 * reads the line's aligned group of entries (pt_leaf_line_mask(), pt_leaf_index()) and
 * decodes them with pt_leaf_decode(), the same decoding with the fields held in a local.
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
 * Load entry @idx (< leaf_index_mask + 1) of the last-level table @table, as the walker does.
 * Acquire: pairs with the release store of a leaf in pt_map_va() / pt_granule_store() (pt.c),
 * as the walker's load does.
 */
static dg_always_inline uint64_t pt_leaf_load(const void *table, uint64_t idx)
{
	return atomic_load_explicit((const _Atomic uint64_t *)table + idx, memory_order_acquire);
}

/*
 * The decoder of last-level entries for a caller that decodes several and stores between
 * them (the IOMMU's neighbour fill): the table's presence mask, output-address masks and
 * permission fields copied once into a local (pt_leaf_dec_init()), so neither the acquire
 * loads nor the stores make the compiler reload them from the table (~30 instructions of
 * reloads and spills per line otherwise). pt_leaf_decode() applies them exactly as
 * pt_leaf_read_at() applies the table's own (pt_oa_decode() & ~granule_mask, pt_leaf_rw():
 * the walker's and every format's leaf_prot() decoders); the IOMMU's prefetch test checks
 * that the two agree on every entry of every format and permission. pt_leaf_read_at() keeps
 * its own form: decoding through this struct costs the one-entry cheap miss 16 instructions.
 */
struct pt_leaf_dec {
	uint64_t valid;	       /* valid_mask */
	uint64_t oa_lo, oa_hi; /* oa_mask & ~granule_mask; oa_hi_mask (moved to bits 48+) */
	uint64_t rw_xor;       /* pt_leaf_rw(): ((pte ^ rw_xor) >> rw_shift & rw_mask) | rw_or */
	unsigned int rw_shift, rw_mask, rw_or;
};

static dg_always_inline void pt_leaf_dec_init(const struct dg_pt *pt, struct pt_leaf_dec *d)
{
	d->valid = pt->valid_mask;
	d->oa_lo = pt->oa_mask & ~pt->granule_mask;
	d->oa_hi = pt->oa_hi_mask;
	d->rw_xor = pt->rw_xor;
	d->rw_shift = pt->rw_shift;
	d->rw_mask = pt->rw_mask;
	d->rw_or = pt->rw_or;
}

/*
 * Decode a last-level entry @pte: true with the output address of the page (the entry's,
 * aligned to its size: the walker's ~(size - 1) is ~granule_mask for one granule; the high
 * part, PA[51:48] of LPAE, lands above any granule) and the DG_PROT_READ | DG_PROT_WRITE it
 * grants when present, false when not present.
 */
static dg_always_inline bool pt_leaf_decode(const struct pt_leaf_dec *d, uint64_t pte,
					    uint64_t *page_phys, unsigned int *rw)
{
	if (!(pte & d->valid))
		return false;
	*page_phys = (pte & d->oa_lo) | ((pte & d->oa_hi) << 36);
	*rw = ((unsigned int)((pte ^ d->rw_xor) >> d->rw_shift) & d->rw_mask) | d->rw_or;
	return true;
}

/* Entry @idx of the last-level table @table, loaded and decoded. */
static dg_always_inline bool pt_leaf_read_at(const struct dg_pt *pt, const void *table,
					     uint64_t idx, uint64_t *page_phys, unsigned int *rw)
{
	uint64_t pte = pt_leaf_load(table, idx);

	if (!(pte & pt->valid_mask))
		return false;
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
