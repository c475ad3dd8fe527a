/* SPDX-License-Identifier: MIT */
/*
 * pt/pt_fast.h - one-granule map and unmap for the DMA layer (library private).
 *
 * The DMA layer maps most buffers (a packet, a 4K block) as exactly one granule, over and
 * over in the same few last-level tables. These two take the calling thread's last-leaf-table
 * hint (pt.c) and touch one entry: no argument search, no descent. Whenever the short way
 * does not apply (no valid hint, a slot that is not what it should be, an address that is
 * not aligned or beyond the output size, a one-level table) they call dg_pt_map() /
 * dg_pt_unmap(), which validate everything, so results and errors are exactly theirs.
 */
#ifndef DG_PT_FAST_H
#define DG_PT_FAST_H

#include <dmaguard/pt.h>

#include "base/compiler.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* An empty gather (what dg_pt_gather_init() makes), inline for the DMA layer's map paths: the
   one definition of "empty" - all zero but leaf_only. */
static inline void pt_gather_init(struct dg_pt_gather *g)
{
	*g = (struct dg_pt_gather){.leaf_only = true};
}

/* [start, end) joins the hull of @g, whose page size is at least @pgsize: what every unmap
   adds to its gather (pt.c), and the DMA layer's clears through a kept table (lazy.c). */
static inline void pt_gather_range(struct dg_pt_gather *g, uint64_t start, uint64_t end,
				   uint64_t pgsize)
{
	if (g->start == g->end) {
		g->start = start;
		g->end = end;
	} else {
		if (start < g->start)
			g->start = start;
		if (end > g->end)
			g->end = end;
	}
	if (pgsize > g->pgsize)
		g->pgsize = pgsize;
}

/* dg_pt_map(pt, iova, phys, granule, prot, gather). Any thread, as dg_pt_map. */
int pt_map_granule(struct dg_pt *pt, uint64_t iova, uint64_t phys, unsigned int prot,
		   struct dg_pt_gather *gather);

/*
 * pt_map_granule() of @n consecutive granules from @iova, the i-th to @phys[i] (a page list:
 * a scatter-gather list of whole pages). One hint lookup per last-level table the range
 * crosses, then one store per granule. Returns 0, or the error of the first granule that
 * failed with *done set to the granules mapped before it (the caller undoes those).
 */
int pt_map_granules(struct dg_pt *pt, uint64_t iova, const uint64_t *phys, unsigned int n,
		    unsigned int prot, struct dg_pt_gather *gather, unsigned int *done);
/* dg_pt_unmap(pt, iova, granule, gather, &unmapped) without the count. Any thread, as
 * dg_pt_unmap. */
int pt_unmap_granule(struct dg_pt *pt, uint64_t iova, struct dg_pt_gather *gather);

/*
 * dg_pt_unmap(pt, iova, n granules, gather, &unmapped) of a run of granule leaves (a batch's
 * run of adjacent one-granule buffers), through the hint: one hint lookup per last-level table
 * the run crosses, then a load and a store per entry, one gather update. Tables are kept
 * (leaf-only: the invalidation can stay leaf-only and walk caches warm) where dg_pt_unmap
 * would unlink a table the run covers whole. Whatever is not a last-level table under a
 * table (a larger leaf, a one-level table) goes to dg_pt_unmap. Returns 0, or -ENOENT when
 * nothing was mapped there, -EINVAL / -ERANGE as dg_pt_unmap.
 */
int pt_unmap_granules(struct dg_pt *pt, uint64_t iova, uint64_t n, struct dg_pt_gather *gather);

/*
 * Slots: the last-level tables under an IOVA range that one owner keeps for a long time (the
 * DMA layer's two-step ranges: a ring's slots), found once and kept, so that a one-granule
 * map or unmap inside the range is an index, one load of a kept table pointer and one store -
 * no hint, no descent, no gather (the rIOMMU idea, ASPLOS'15, on a radix table: a ring's
 * translations live in a few tables the driver already holds).
 *
 *   slot i -> g = (first & tmask) + i -> tables[g >> tshift][g & tmask]
 *
 * Why a kept table pointer stays valid: a last-level table leaves the tree only when one call
 * covers its whole span - an unmap (pt_unmap_va unlinks covered tables) or a map of a larger
 * leaf over it (pt_map_va replaces an empty table). Only the range's owner maps and unmaps
 * inside the range, and through slots it writes only last-level leaves and clears them, never
 * unlinking anything. A table partly outside the range can never be covered whole by another
 * owner's call (it would overlap the range); a table wholly inside it is touched only through
 * the slots. So while the slots exist (the owner holds the range) every kept table is linked
 * where it was found; pt_slots_check() verifies it in tests. pt_slots_destroy() leaves the
 * tables linked: empty tables are a valid tree, reused by later maps or freed by a covering
 * unmap or dg_pt_destroy().
 *
 * The caller owns the range for the life of the slots and gives it back to other users only
 * after pt_slots_destroy(). Clears publish nothing (as pt_unmap_va's): the caller invalidates
 * what it cleared. Concurrent use of disjoint slots is allowed (the table pointers are atomic).
 */
struct pt_slots {
	struct dg_pt *pt;
	uint64_t first;	     /* granule number ((iova - base) >> granule shift) of slot 0 */
	uint64_t n;	     /* slots */
	uint64_t t0;	     /* first >> tshift: the table of slot 0 */
	uint64_t lo;	     /* first & tmask: slot i is entry (lo + i) & tmask of table
				(lo + i) >> tshift, relative to t0 */
	uint64_t tmask;	     /* entries of a last-level table - 1 (one-level: all ones) */
	unsigned int tshift; /* log2 entries of a last-level table (one-level: 63) */
	unsigned int gshift; /* log2 granule */
	uint64_t gmask;	     /* granule - 1 */
	uint64_t oa_limit;   /* output addresses must be below */
	uint64_t oa_mask;    /* leaf output address bits (low part) */
	uint64_t oa_hi_mask; /* LPAE 52-bit PA[51:48] at bits [15:12], or 0 */
	uint64_t tmpl[DG_PROT_ALL + 1];	      /* last-level leaf bits but the address, per prot */
	_Atomic(_Atomic uint64_t *) tables[]; /* kept tables, NULL until first needed */
};

/*
 * Slots for the @n granules from @iova (granule aligned, inside the input range). Returns NULL
 * with errno EINVAL (n 0, misaligned), ERANGE (outside the input range), EOPNOTSUPP (the
 * format's granule is not a last-level leaf), ENOMEM. Finds no table yet (first use does).
 */
struct pt_slots *pt_slots_create(struct dg_pt *pt, uint64_t iova, uint64_t n);
/* Forget the tables (they stay linked). The range's leaves should be clear. */
void pt_slots_destroy(struct pt_slots *s);
/* Table @t (relative to t0): descend, linking missing tables, keep it. 0, -ENOMEM, or -EEXIST
 * when a larger leaf covers it (someone mapped over the range: a caller bug). */
int pt_slots_table(struct pt_slots *s, uint64_t t, _Atomic uint64_t **table);
/* Map slots [i, i + k) to [phys, phys + k granules), every one checked before any is written:
 * 0, or -EINVAL (phys misaligned, bad prot), -ERANGE (i + k > n, phys beyond the output size),
 * -EEXIST (a slot is present), -ENOMEM with nothing mapped. */
int pt_slots_map(struct pt_slots *s, uint64_t i, uint64_t k, uint64_t phys, unsigned int prot);
/* Clear slots [i, i + k) (i + k <= n); returns how many were present. */
uint64_t pt_slots_unmap(struct pt_slots *s, uint64_t i, uint64_t k);
/* 0 when every kept table is the one the tree links at its place; else -EUCLEAN (a line on
 * @why). No map or unmap may run on the range meanwhile. */
int pt_slots_check(const struct pt_slots *s, FILE *why);

/* The entry of slot @i (< n), finding its table on first use; NULL with *err on failure. */
static dg_always_inline _Atomic uint64_t *pt_slot_entry(struct pt_slots *s, uint64_t i, int *err)
{
	const uint64_t g = s->lo + i;
	/* Acquire: pairs with the release store in pt_slots_table() (the table's zero fill and
	 * the descriptors above it were seen by the thread that kept it). */
	_Atomic uint64_t *table =
		atomic_load_explicit(&s->tables[g >> s->tshift], memory_order_acquire);

	if (dg_unlikely(!table) && (*err = pt_slots_table(s, g >> s->tshift, &table)))
		return NULL;
	return table + (g & s->tmask);
}

/* pt_slots_map() of one slot (i < n): one load of the kept table, one of the entry, a store. */
static dg_always_inline int pt_slot_map(struct pt_slots *s, uint64_t i, uint64_t phys,
					unsigned int prot)
{
	_Atomic uint64_t *ptep;
	int err;

	if (dg_unlikely((phys & s->gmask) || !(prot & (DG_PROT_READ | DG_PROT_WRITE)) ||
			(prot & ~DG_PROT_ALL)))
		return -EINVAL;
	if (dg_unlikely(phys >= s->oa_limit))
		return -ERANGE;
	ptep = pt_slot_entry(s, i, &err);
	if (dg_unlikely(!ptep))
		return err;
	if (dg_unlikely(atomic_load_explicit(ptep, memory_order_relaxed)))
		return -EEXIST;
	/* Release: pairs with the acquire loads of walkers (as in pt_map_va). */
	atomic_store_explicit(ptep,
			      (phys & s->oa_mask) | ((phys >> 36) & s->oa_hi_mask) | s->tmpl[prot],
			      memory_order_release);
	return 0;
}

/* The leaf bits but the address of a slot mapped for @prot (a caller's cached template). */
static inline uint64_t pt_slots_tmpl(const struct pt_slots *s, unsigned int prot)
{
	return s->tmpl[prot & DG_PROT_ALL];
}

/* The last-level entry of a slot mapped to @phys (granule aligned, below oa_limit) with
 * @tmpl (a pt_slots_tmpl()): what pt_slot_try_map() stores, for a caller holding the entry. */
static inline uint64_t pt_slots_pte(const struct pt_slots *s, uint64_t phys, uint64_t tmpl)
{
	return (phys & s->oa_mask) | ((phys >> 36) & s->oa_hi_mask) | tmpl;
}

/*
 * The short way of pt_slot_map() for a caller that falls back to it (or to pt_slots_map())
 * whenever this says false, having changed nothing: @phys granule aligned and @tmpl a
 * pt_slots_tmpl() (the caller's contract); false when the slot's table is not kept yet, the
 * slot is present or @phys is beyond the output size. No call, so the caller's fast path
 * saves no registers.
 */
static dg_always_inline bool pt_slot_try_map(struct pt_slots *s, uint64_t i, uint64_t phys,
					     uint64_t tmpl)
{
	const uint64_t g = s->lo + i;
	/* Acquire: as in pt_slot_entry(). */
	_Atomic uint64_t *table =
		atomic_load_explicit(&s->tables[g >> s->tshift], memory_order_acquire);
	_Atomic uint64_t *ptep;

	if (dg_unlikely(!table || phys >= s->oa_limit))
		return false;
	ptep = table + (g & s->tmask);
	if (dg_unlikely(atomic_load_explicit(ptep, memory_order_relaxed)))
		return false;
	/* Release: pairs with the acquire loads of walkers (as in pt_map_va). */
	atomic_store_explicit(ptep, (phys & s->oa_mask) | ((phys >> 36) & s->oa_hi_mask) | tmpl,
			      memory_order_release);
	return true;
}

/* Clear slot @i (< n) mapped before (its table is kept): one load, one store. */
static dg_always_inline void pt_slot_unmap(struct pt_slots *s, uint64_t i)
{
	const uint64_t g = s->lo + i;
	/* Acquire: as in pt_slot_entry(). */
	_Atomic uint64_t *table =
		atomic_load_explicit(&s->tables[g >> s->tshift], memory_order_acquire);

	/* Relaxed: as in pt_unmap_va (the caller invalidates; a last-level entry is a leaf). */
	if (dg_likely(table != NULL))
		atomic_store_explicit(table + (g & s->tmask), 0, memory_order_relaxed);
}

#endif /* DG_PT_FAST_H */
