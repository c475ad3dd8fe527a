/* SPDX-License-Identifier: MIT */
/*
 * iommu/iotlb.h - one translation agent's IOTLB and page-walk cache (private).
 *
 * Both belong to one device and are read and written only by that device's thread (the agent
 * applies queued invalidations itself, at its quiescent points), so neither needs a lock or
 * an atomic: a hit is a few ALU operations and two loads from the agent's own memory.
 *
 * IOTLB: one direct-mapped table per page size in use ("level"), indexed by the low bits of the
 * page number like a hardware TLB set index (no hash: it would cost 4 instructions of the ~30
 * a hit may take), so a lookup costs the same whatever the number of entries and their order (DPDK's
 * sorted list costs 78 instructions first in the list and 20,548 behind 2047 stale entries;
 * QEMU's VT-d hash is flushed whole when full). An entry is
 *
 *   key   = page base | domain id << 2 | perm      (0: empty)
 *   delta = host base - page base                  (host = iova + delta)
 *
 * Page bases are aligned to at least 4 KiB, so the 10-bit domain id and the two permission
 * bits fit below them: tag and permission are checked with one XOR and one AND:
 *
 *   ((key ^ (iova & base_mask) ^ (did << 2 | 3)) & (~3 | access)) == 0
 *
 * (the XOR with 3 turns the granted permissions into the missing ones). The smallest page
 * size gets the big table (iotlb_entries), each larger size a small one.
 *
 * Walk cache: per table depth d >= 1, a direct-mapped table of (region of span(d), domain)
 * -> the table page covering it, so a miss walks from the deepest cached table
 * (dg_pt_walk_from) instead of the root. Entries are dropped by non-leaf invalidations, which
 * always precede the release of a table page they could point to. In front of it, one "last"
 * entry: a copy of the deepest entry last filled or hit, checked first (one compare), so a
 * miss near the previous one (the next buffer of a ring) goes straight to the leaf table.
 * It is dropped by exactly the commands that drop a table entry with its key, so it is never
 * more stale than the table. The device's cheap miss (dev/translate.c) asks only for the
 * deepest depth (wc_lookup_deepest: the last entry, else one probe of the deepest row), which
 * is the last level of the table whenever the cache keeps every table depth.
 */
#ifndef DG_IOMMU_IOTLB_H
#define DG_IOMMU_IOTLB_H

#include "base/compiler.h"

#include <dmaguard/dev.h>
#include <dmaguard/pt.h>

#include <assert.h>
#include <stdint.h>
#include <stdio.h>

#define IOTLB_MAX_LEVELS 4
#define IOTLB_DID_SHIFT	 2
#define IOTLB_DID_MASK	 0x3ffull     /* DG_DOMAIN_ID_MAX */
#define IOTLB_PERM_MASK	 3ull	      /* DG_PROT_READ | DG_PROT_WRITE */
#define IOTLB_LINE_SHIFT 3	      /* log2 of the 8-byte table entries in a 64-byte cache line */
#define IOTLB_LINE_MASK	 7	      /* (1 << IOTLB_LINE_SHIFT) - 1 */
#define IOTLB_NO_LINE	 (1ull << 62) /* miss_line before any miss: adjacent to no line */
#define IOTLB_STREAMS	 2	      /* streams the fill's detector follows (a power of two) */

/*
 * An entry: key = page base | did << 2 | perm (0 when empty), delta = host base - page base.
 * It is the public hot-line entry of dmaguard/dev.h (the inline fast path reads it), named
 * here by its private name so the library and the inline access it through one type.
 */
#define iotlb_ent	dg_dev_hot_ent
#define IOTLB_ENT_SHIFT 4 /* log2(sizeof(struct iotlb_ent)) */
static_assert(sizeof(struct iotlb_ent) == 1u << IOTLB_ENT_SHIFT, "IOTLB entry size");

struct iotlb_level {
	struct iotlb_ent *ent;	/* sets entries */
	uint64_t base_mask;	/* ~(page size - 1) */
	uint64_t set_mask;	/* sets - 1 */
	unsigned int shift;	/* log2(page size); index = (iova >> shift) & set_mask */
	unsigned int off_shift; /* shift - log2(sizeof(entry)): byte offset of the slot is */
	uint64_t off_mask;	/* (iova >> off_shift) & off_mask (iotlb_probe) */
};

struct iotlb {
	struct iotlb_level lvl[IOTLB_MAX_LEVELS]; /* ascending page sizes in use */
	unsigned int nr_levels;
	uint32_t cap[IOTLB_MAX_LEVELS];		 /* sets allocated for each table */
	struct iotlb_ent *mem[IOTLB_MAX_LEVELS]; /* mem[0] is the big table */
	/* The neighbour fill's stream detector (dev/translate.c fill_wanted()): the lines,
	   iova >> (shift + IOTLB_LINE_SHIFT), of the last allowed demand misses of last-level
	   pages of up to IOTLB_STREAMS streams; IOTLB_NO_LINE until used. miss_next: the slot a
	   miss next to none of them takes (round robin). Only decides whether a miss fills,
	   never what a cached entry holds, so invalidations and context changes leave it. */
	uint64_t miss_line[IOTLB_STREAMS];
	unsigned int miss_next;
	/* Leaf-direct (agent.c set_leaf()): level 0 is never filled (iotlb_insert() refuses it,
	   the device's own fills are off) so range invalidations skip it; iotlb_check() checks
	   it is empty. Cleared by iotlb_configure(). */
	bool no_small;
	/* Levels >= 1 that may hold entries (bit i), set by iotlb_insert(), their only writer,
	   cleared when the tables are emptied: range and domain invalidations skip the others
	   (a strict driver's commands cover small pages; the large-page levels stay empty).
	   Level 0 is always looked at (the device's cheap miss and fills and src/vhost write
	   its slots directly). */
	uint32_t used;
};

struct wc_ent {
	uint64_t key;	   /* region base | did << 2 | 1; 0 when empty */
	const void *table; /* the table page covering the region at this depth */
};

struct walk_cache {
	struct wc_ent last;	 /* copy of the entry last filled or hit at depth last_depth */
	unsigned int last_depth; /* 0: last is empty */
	struct wc_ent *ent;	 /* DG_PT_MAX_DEPTH rows of sets entries (row 0 unused) */
	uint64_t set_mask;
	unsigned int fold;
	unsigned int nr_depths;		     /* depths 1..nr_depths are cached */
	unsigned int shift[DG_PT_MAX_DEPTH]; /* log2 of the span of a table at depth d */
};

/* Allocate: @small sets for the smallest page size, @large for each other (powers of two). */
int iotlb_init(struct iotlb *t, uint32_t small, uint32_t large);
void iotlb_fini(struct iotlb *t);

/*
 * Use the page sizes of @pgsize_bitmap (ascending; sizes beyond IOTLB_MAX_LEVELS are never
 * cached) and empty the tables.
 */
void iotlb_configure(struct iotlb *t, uint64_t pgsize_bitmap);

static inline struct iotlb_ent *iotlb_slot(const struct iotlb_level *l, uint64_t pn)
{
	return &l->ent[pn & l->set_mask];
}

/*
 * The hit test of the fast path. @tag = did << 2 | 3, @amask = ~3 | access. Returns the
 * entry when it translates @iova for @access, NULL otherwise (miss or missing permission).
 */
static dg_always_inline const struct iotlb_ent *
iotlb_probe(const struct iotlb_level *l, uint64_t iova, uint64_t tag, uint64_t amask)
{
	const struct iotlb_ent *e =
		(const struct iotlb_ent *)(const void *)((const char *)l->ent +
							 ((iova >> l->off_shift) & l->off_mask));

	return ((e->key ^ (iova & l->base_mask) ^ tag) & amask) ? NULL : e;
}

/* Find the entry for @iova in domain @did whatever its permissions: level index or -1. */
int iotlb_find(const struct iotlb *t, uint32_t did, uint64_t iova, const struct iotlb_ent **out);

/* Insert a translation; returns the level used, or -1 when @pgsize is not cached (or is
 * level 0's while no_small). */
int iotlb_insert(struct iotlb *t, uint32_t did, uint64_t iova, uint64_t pgsize, uint64_t phys,
		 unsigned int perm);

/* Drop entries of @did that overlap [addr, last] (level 0 skipped while no_small: empty);
 * returns how many. */
unsigned int iotlb_inval_range(struct iotlb *t, uint32_t did, uint64_t addr, uint64_t last);
unsigned int iotlb_inval_domain(struct iotlb *t, uint32_t did);
void iotlb_flush(struct iotlb *t);

/* Number of valid entries (tests, dumps). */
unsigned int iotlb_count(const struct iotlb *t);
/* Valid entries of domain (tag) @did: those a lookup with it can still find (tests). */
unsigned int iotlb_count_tag(const struct iotlb *t, uint32_t did);

/* Each valid entry sits in its own slot, has a permission and a domain. 0 or -EUCLEAN. */
int iotlb_check(const struct iotlb *t, FILE *why);

int wc_init(struct walk_cache *wc, uint32_t sets);
void wc_fini(struct walk_cache *wc);

/* Cache depths 1..@nr_depths whose tables span 2^shift[d]; empties the cache. */
void wc_configure(struct walk_cache *wc, unsigned int nr_depths, const unsigned int *shift);

/* Deepest cached table covering @iova in @did: returns its depth (>= 1) or 0 for none. */
/* The last entry, when it covers @iova in @did: its depth and table; 0 otherwise. */
static dg_always_inline unsigned int wc_lookup_last(const struct walk_cache *wc, uint32_t did,
						    uint64_t iova, const void **table)
{
	unsigned int d = wc->last_depth, sh = wc->shift[d];

	if (dg_likely(d) &&
	    wc->last.key == ((iova >> sh << sh) | (uint64_t)did << IOTLB_DID_SHIFT | 1)) {
		*table = wc->last.table;
		return d;
	}
	return 0;
}

static inline struct wc_ent *wc_slot(const struct walk_cache *wc, unsigned int d, uint64_t rn)
{
	return &wc->ent[(uint64_t)d * (wc->set_mask + 1) + ((rn ^ (rn >> wc->fold)) & wc->set_mask)];
}

/*
 * The table of the deepest cached depth covering @iova in @did, or NULL: the last entry, else
 * one probe of the deepest row (a hit there becomes the last entry, as in wc_lookup()).
 */
static dg_always_inline const void *wc_lookup_deepest(struct walk_cache *wc, uint32_t did,
						      uint64_t iova)
{
	unsigned int d = wc->nr_depths, sh = wc->shift[d];
	uint64_t key = (iova >> sh << sh) | (uint64_t)did << IOTLB_DID_SHIFT | 1;
	const struct wc_ent *e;

	/* A non-empty last entry is always of the deepest row (wc_lookup, wc_insert). */
	if (wc->last.key == key)
		return wc->last.table;
	e = wc_slot(wc, d, iova >> sh);
	if (e->key != key)
		return NULL;
	wc->last = *e;
	wc->last_depth = d;
	return e->table;
}

/* (Not const: a hit in the deepest row becomes the last entry.) */
unsigned int wc_lookup(struct walk_cache *wc, uint32_t did, uint64_t iova, const void **table);
void wc_insert(struct walk_cache *wc, uint32_t did, uint64_t iova, unsigned int depth,
	       const void *table);
unsigned int wc_inval_range(struct walk_cache *wc, uint32_t did, uint64_t addr, uint64_t last);
unsigned int wc_inval_domain(struct walk_cache *wc, uint32_t did);
void wc_flush(struct walk_cache *wc);

#endif /* DG_IOMMU_IOTLB_H */
