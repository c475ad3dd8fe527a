/* SPDX-License-Identifier: MIT */
/*
 * pt/pt.c - the generic IO page-table walker: create, map, unmap, walk, gather, check, dump.
 *
 * One walker serves every format (pt_internal.h says how a format describes itself). The tree:
 *
 *   root (depth 0) ──► table (depth 1) ──► ... ──► table (depth - 1)
 *   each entry: 0 (not present) | leaf (block/page of lvl[d].size) | table descriptor
 *
 * Map picks, at each IOVA, the shallowest depth whose entry size is allowed, fits the rest of
 * the range and divides both the IOVA and the output address: the largest page that fits,
 * hence the fewest entries. It then writes a run of leaves in that table in a tight loop (the
 * run ends at the table's end, which is also the next larger page's boundary, so the choice is
 * re-made there). Unmap descends only through tables the range covers in part, then sweeps the
 * rest of the table: leaves are cleared whole (the sweep never steps past the range's last
 * entry, so it never runs into the next leaf), tables whose whole span is inside the range are
 * unlinked with their subtree.
 *
 * Cost (docs/pt.md has the numbers). Everything that can be is computed at create: the
 * geometry per depth, the leaf attribute bits per (prot, depth), and two tables indexed by
 * log2 of an alignment, leaf_depth_of[] (where the largest leaf fits) and cover_depth_of[]
 * (how deep an unmap must descend), so neither map nor unmap searches or divides. The
 * read-only fields are copied to locals before the first acquire load (the compiler would
 * reload them after each). A range that is exactly one allowed page takes pt_map_one() /
 * pt_unmap_one(): one descent, one entry. A run of pages costs a load, a test and a store per
 * entry each way.
 *
 * Concurrency (the io-pgtable-arm scheme, without its locks):
 *  - Entries are _Atomic uint64_t. Map and unmap on disjoint ranges run concurrently: they
 *    share at most upper tables, where the only write that can race is linking a new table
 *    into an empty slot. A new table is zero-filled by the allocator, then published with one
 *    compare-and-swap (release); the loser frees its own, never-published table and descends
 *    into the winner's. Leaves and covered tables are only ever touched by the caller that owns
 *    their range. So an entry of a shared table that a map or unmap read as empty may hold a
 *    table the next time it reads it: unmap's sweep, which loads again the slot at which its
 *    descent stopped, then goes on from its own address, never from the slot's start below it
 *    (pt_unmap_sweep).
 *  - Walkers (device threads, dg_pt_walk) never lock: they load each entry with acquire and see
 *    either the old or the new entry.
 *  - An unlinked table is never freed at once: a walker or a walk cache may still hold it. It is
 *    chained onto the caller's struct dg_pt_gather through its word 0 (an aligned pointer:
 *    the low bits every format uses for "present" are zero, so a stale walker reading that word
 *    sees a non-present entry) and freed by dg_pt_gather_release() after the caller's
 *    invalidation has completed. The rest of an unlinked table keeps its old entries: a stale
 *    walker sees the old translation, exactly like a stale IOTLB entry, until the invalidation.
 *
 * The last-leaf-table hint (the io-pgtable idea of keeping tables on leaf-only unmaps, taken
 * one step further). Tables are never freed by a leaf unmap, so a DMA layer mapping and
 * unmapping 4K pages meets the same few last-level tables over and over. Each thread keeps,
 * per page table (four slots keyed by dg_pt.id), the last-level table it last reached and the
 * IOVA span it covers; a one-page map or unmap at the last depth inside that span skips the
 * descent and touches one entry. The hint is valid only while pt->unlink_gen equals the value
 * read before the descent that recorded it: every unlink of a table (pt_gather_subtree, the
 * only way a table leaves the tree) increments it before the table goes on a gather, and a
 * table is freed only after that. Why a relaxed load is enough: a thread maps or unmaps in a
 * span only while it owns that range (the API's rule for concurrent callers), and the thread
 * that unlinked the table owned the whole span when it did; the range came to this thread
 * after that (the IOVA allocator's lock or the caller's own handover), so the increment
 * happens before our load and the hint misses. So a hint never names an unlinked or freed
 * table when it is used; dg_pt_hint_check() verifies it in tests. A stale hint only costs a
 * descent. Why not a per-domain shared hint: every map would write a line all CPUs read.
 *
 * Errors leave no translation changed: arguments are validated before anything is written,
 * and a map that fails part way (-EEXIST, -ENOMEM) unmaps what it wrote. Tables it linked may
 * stay, empty; that is a valid tree (dg_pt_check accepts empty tables) and a later map reuses
 * them, a covering unmap or dg_pt_destroy frees them.
 */
#include "pt_fast.h"
#include "pt_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation ------------------------------------------------------------------------ */

static void *pt_default_alloc(void *cookie, size_t size)
{
	void *p = aligned_alloc(size, size);

	(void)cookie;
	if (p)
		memset(p, 0, size);
	return p;
}

static void pt_default_free(void *cookie, void *page, size_t size)
{
	(void)cookie;
	(void)size;
	free(page);
}

static const struct dg_pt_mem_ops pt_default_mem = {
	.alloc = pt_default_alloc,
	.free = pt_default_free,
};

/*
 * A zeroed table of @bytes. A page the descriptors could not hold (not aligned to its size,
 * or beyond the format's table address field) is refused like a failed allocation: linking it
 * would corrupt the tree.
 */
static _Atomic uint64_t *pt_table_alloc(struct dg_pt *pt, uint64_t bytes, bool root)
{
	void *p = pt->mem->alloc(pt->mem_cookie, (size_t)bytes);
	uint64_t addr = (uint64_t)(uintptr_t)p;

	if (!p)
		return NULL;
	if ((addr & (bytes - 1)) || (!root && (addr & ~pt->table_addr_mask))) {
		pt->mem->free(pt->mem_cookie, p, (size_t)bytes);
		return NULL;
	}
	atomic_fetch_add_explicit(&pt->nr_tables, 1, memory_order_relaxed);
	return p;
}

static void pt_table_free(struct dg_pt *pt, _Atomic uint64_t *table, uint64_t bytes)
{
	pt->mem->free(pt->mem_cookie, (void *)table, (size_t)bytes);
	atomic_fetch_sub_explicit(&pt->nr_tables, 1, memory_order_relaxed);
}

/* ---- the last-leaf-table hint (see the top of the file) ----------------------------------- */

#define PT_HINT_SLOTS 4 /* page tables a thread keeps a hint for at once (power of two) */

struct pt_hint {
	uint64_t id;		 /* dg_pt.id the hint belongs to (0: none) */
	uint64_t gen;		 /* its unlink_gen read before the descent that found table */
	uint64_t tag;		 /* va >> lvl[depth - 2].shift: the span table covers */
	_Atomic uint64_t *table; /* the last-level table linked there */
};

static _Thread_local struct pt_hint pt_hints[PT_HINT_SLOTS]
	__attribute__((tls_model("initial-exec")));

static _Atomic uint64_t pt_next_id = 1; /* dg_pt.id of the next page table */

/* The span tag of @va: the index bits above the last level. */
static inline uint64_t pt_hint_tag(const struct dg_pt *pt, uint64_t va)
{
	return va >> pt->hint_shift;
}

/* The hinted last-level table for @va, or NULL. Only for depth > 1. */
static inline _Atomic uint64_t *pt_hint_get(const struct dg_pt *pt, uint64_t va)
{
	const struct pt_hint *h = &pt_hints[pt->id & (PT_HINT_SLOTS - 1)];

	/* Relaxed: see the top of the file (the range handover orders the unlink before us). */
	if (h->id == pt->id && h->tag == pt_hint_tag(pt, va) &&
	    h->gen == atomic_load_explicit(&pt->unlink_gen, memory_order_relaxed))
		return h->table;
	return NULL;
}

static inline void pt_hint_set(const struct dg_pt *pt, uint64_t va, uint64_t gen,
			       _Atomic uint64_t *table)
{
	struct pt_hint *h = &pt_hints[pt->id & (PT_HINT_SLOTS - 1)];

	h->id = pt->id;
	h->gen = gen;
	h->tag = pt_hint_tag(pt, va);
	h->table = table;
}

/* ---- entry helpers ---------------------------------------------------------------------- */

/* A present entry above the last depth: table descriptor (else a leaf)? */
static inline bool pt_is_table(const struct dg_pt *pt, uint64_t pte)
{
	return (pte & pt->table_mask) == pt->table_val;
}

static inline _Atomic uint64_t *pt_table_ptr(const struct dg_pt *pt, uint64_t pte)
{
	return (_Atomic uint64_t *)(uintptr_t)(pte & pt->table_addr_mask);
}

static inline _Atomic uint64_t *pt_entry(const struct dg_pt *pt, _Atomic uint64_t *table,
					 unsigned int d, uint64_t va)
{
	return table + ((va >> pt->lvl[d].shift) & pt->lvl[d].index_mask);
}

/*
 * Link a new table into the empty slot @ptep, or use the one another mapper linked first.
 * Returns the table now linked there, or NULL with *err (-ENOMEM, or -EEXIST when the slot
 * turned out to hold a leaf: an overlapping concurrent map, a caller bug).
 */
static _Atomic uint64_t *pt_install_table(struct dg_pt *pt, _Atomic uint64_t *ptep, int *err)
{
	_Atomic uint64_t *t = pt_table_alloc(pt, pt->table_bytes, false);
	uint64_t cur = 0;

	if (!t) {
		*err = -ENOMEM;
		return NULL;
	}
	/*
	 * Release on success: the zeroed table is visible before the descriptor that links it;
	 * pairs with the acquire loads of walkers (pt_walk_at) and of other mappers and
	 * unmappers descending (pt_map_va, pt_unmap_va). Acquire on failure: pairs with the
	 * winner's release here, so its table can be descended into.
	 */
	if (atomic_compare_exchange_strong_explicit(ptep, &cur,
						    (uint64_t)(uintptr_t)t | pt->table_bits,
						    memory_order_release, memory_order_acquire))
		return t;
	pt_table_free(pt, t, pt->table_bytes); /* never published: nobody can hold it */
	if (!pt_is_table(pt, cur)) {
		*err = -EEXIST;
		return NULL;
	}
	return pt_table_ptr(pt, cur);
}

/* ---- gather ----------------------------------------------------------------------------- */

void dg_pt_gather_init(struct dg_pt_gather *gather)
{
	pt_gather_init(gather);
}

/*
 * Put the unlinked table @table (depth @d) and every table below it on @g; add the size of
 * the leaves it holds to *bytes and the largest to *maxpg. The caller owns the table's range
 * and has already cleared the descriptor that linked it.
 */
static void pt_gather_subtree(struct dg_pt *pt, _Atomic uint64_t *table, unsigned int d,
			      struct dg_pt_gather *g, uint64_t *bytes, uint64_t *maxpg)
{
	const struct pt_level *l = &pt->lvl[d];
	bool last = d == pt->depth - 1;

	/* Every hint recorded before this is stale from now on (see the top of the file).
	 * Relaxed: the caller's range handover publishes it. */
	atomic_fetch_add_explicit(&pt->unlink_gen, 1, memory_order_relaxed);
	for (uint64_t i = 0; i <= l->index_mask; i++) {
		/* Acquire: pairs with the release CAS that linked a child table. */
		uint64_t pte = atomic_load_explicit(&table[i], memory_order_acquire);

		if (!pte)
			continue;
		if (!last && pt_is_table(pt, pte)) {
			pt_gather_subtree(pt, pt_table_ptr(pt, pte), d + 1, g, bytes, maxpg);
		} else {
			*bytes += l->size;
			if (l->size > *maxpg)
				*maxpg = l->size;
		}
	}
	/*
	 * Chain through word 0. Relaxed: a stale walker may read the word concurrently and sees
	 * an aligned pointer, "not present"; the gather itself reaches the releasing thread
	 * through the caller's invalidation handshake.
	 */
	atomic_store_explicit(&table[0], (uint64_t)(uintptr_t)g->freelist, memory_order_relaxed);
	g->freelist = (void *)table;
	g->nr_tables++;
	g->leaf_only = false;
	atomic_fetch_add_explicit(&pt->nr_pending, 1, memory_order_relaxed);
}

void dg_pt_gather_release(struct dg_pt *pt, struct dg_pt_gather *gather)
{
	void *t = gather->freelist;

	while (t) {
		_Atomic uint64_t *table = t;

		t = (void *)(uintptr_t)atomic_load_explicit(&table[0], memory_order_relaxed);
		pt_table_free(pt, table, pt->table_bytes);
		atomic_fetch_sub_explicit(&pt->nr_pending, 1, memory_order_relaxed);
	}
	dg_pt_gather_init(gather);
}

/* ---- no leaf below? (an empty table a larger leaf may replace) ---------------------------- */

static bool pt_subtree_empty(const struct dg_pt *pt, _Atomic uint64_t *table, unsigned int d)
{
	bool last = d == pt->depth - 1;

	for (uint64_t i = 0; i <= pt->lvl[d].index_mask; i++) {
		/* Acquire: pairs with the release CAS that linked a child table. */
		uint64_t pte = atomic_load_explicit(&table[i], memory_order_acquire);

		if (!pte)
			continue;
		if (last || !pt_is_table(pt, pte) ||
		    !pt_subtree_empty(pt, pt_table_ptr(pt, pte), d + 1))
			return false;
	}
	return true;
}

/*
 * Map found @ptep (depth d, covering va) not empty where a leaf goes. Allowed only over an
 * empty table (no leaf below): it is unlinked here, its subtree put on @g with its span, and
 * the caller stores the leaf. Returns 0 or -EEXIST.
 */
static dg_noinline int pt_map_over(struct dg_pt *pt, _Atomic uint64_t *ptep, unsigned int d,
				   uint64_t va, struct dg_pt_gather *g)
{
	/* Acquire: pairs with the release CAS that linked a table here. */
	uint64_t old = atomic_load_explicit(ptep, memory_order_acquire);
	uint64_t none = 0, maxpg = 0;
	_Atomic uint64_t *dead;

	if (d == pt->depth - 1 || !pt_is_table(pt, old) ||
	    !pt_subtree_empty(pt, pt_table_ptr(pt, old), d + 1))
		return -EEXIST;
	dead = pt_table_ptr(pt, old);
	/* Unlink first, so no new walker enters the table while it is put on the gather. */
	atomic_store_explicit(ptep, 0, memory_order_relaxed);
	pt_gather_subtree(pt, dead, d + 1, g, &none, &maxpg);
	pt_gather_range(g, va + pt->iova_base, va + pt->lvl[d].size + pt->iova_base, 0);
	return 0;
}

/*
 * The map descent met @pte at @ptep where it wants a table: link a new one into an empty
 * slot, or fail with -EEXIST (a leaf covers the range there). Out of line: the descent's
 * common case is an existing table.
 */
static dg_noinline _Atomic uint64_t *pt_map_link(struct dg_pt *pt, _Atomic uint64_t *ptep,
						 uint64_t pte, int *err)
{
	if (pte) {
		*err = -EEXIST;
		return NULL;
	}
	return pt_install_table(pt, ptep, err);
}

/* ---- choosing depths -------------------------------------------------------------------- */

/* log2 of the largest power of two dividing @x (x | 2^63 so never zero) capped by log2(len). */
static inline unsigned int pt_fit_shift(uint64_t x, uint64_t len)
{
	unsigned int align = (unsigned int)__builtin_ctzll(x | (1ull << 63));
	unsigned int fit = 63u - (unsigned int)__builtin_clzll(len);

	return align < fit ? align : fit;
}

/* ---- unmap ------------------------------------------------------------------------------ */

/* What an unmap removed, for the gather. */
struct pt_unmap_acc {
	uint64_t bytes;	 /* size of the leaves removed */
	uint64_t maxpg;	 /* largest leaf removed */
	uint64_t lo, hi; /* va range changed (hi == 0: nothing) */
};

/*
 * Sweep the entries of @table (depth d < last) from the one holding *va through the range:
 * clear leaves, unlink the tables the range covers whole. Stops at the range's or the table's
 * end, or before a table covered only in part (the caller descends into it); *va is where.
 */
static dg_noinline void pt_unmap_sweep(struct dg_pt *pt, _Atomic uint64_t *table, unsigned int d,
				       uint64_t *vap, uint64_t end, struct dg_pt_gather *g,
				       struct pt_unmap_acc *acc)
{
	const struct pt_level *l = &pt->lvl[d];
	const uint64_t step = l->size, va = *vap;
	uint64_t base = va & ~(step - 1);

	if (dg_unlikely(pt->sweep_hook)) /* tests only (dg_pt_set_sweep_hook) */
		pt->sweep_hook(pt->sweep_hook_arg, va + pt->iova_base, d);
	for (uint64_t i = (va >> l->shift) & l->index_mask; i <= l->index_mask && base < end;
	     i++, base += step) {
		/* Acquire: a table here was linked by a release CAS (pt_install_table). */
		uint64_t pte = atomic_load_explicit(&table[i], memory_order_acquire);

		if (!pte)
			continue;
		if (!pt_is_table(pt, pte)) {
			/* A leaf. Relaxed store: as in pt_unmap_va. */
			atomic_store_explicit(&table[i], 0, memory_order_relaxed);
			acc->bytes += step;
			acc->maxpg = step > acc->maxpg ? step : acc->maxpg;
		} else if (base >= va && end - base >= step) {
			atomic_store_explicit(&table[i], 0, memory_order_relaxed);
			pt_gather_subtree(pt, pt_table_ptr(pt, pte), d + 1, g, &acc->bytes,
					  &acc->maxpg);
		} else {
			break; /* covered in part: the caller descends into it */
		}
		acc->lo = base < acc->lo ? base : acc->lo;
		acc->hi = base + step;
	}
	/*
	 * Where the caller goes on: at base, but never below va. The first entry can stop the
	 * sweep although the caller's descent stopped here because that very entry was empty: a
	 * concurrent map elsewhere in its span may have linked a table into it since (the CAS of
	 * pt_install_table; the entry's span begins below va, where others own pages). Going on
	 * at base would sweep that table from its start, clearing the others' leaves and counting
	 * them as ours. At va the caller descends into the new table. Progress: a table stays
	 * linked while we own part of its span (only an owner of the whole span unlinks one), so
	 * that descent goes deeper and the next sweep starts past this entry.
	 */
	*vap = base > va ? base : va;
}

/*
 * Remove every leaf intersecting [va, end) and every table whose span the range covers.
 * Returns the bytes of the leaves removed; the changed range and tables go on @g.
 *
 * Each pass descends from the root while the entry at va is a table the range does not cover
 * whole (cover_depth_of[]), then sweeps that table's entries inside the range: at the last
 * depth in the tight loop below, higher up in pt_unmap_sweep().
 */
static inline __attribute__((always_inline)) uint64_t
pt_unmap_va(struct dg_pt *pt, uint64_t va, uint64_t end, struct dg_pt_gather *g)
{
	/*
	 * Read-only geometry in locals: after each acquire load the compiler would otherwise
	 * reload these fields of *pt.
	 */
	const uint64_t tmask = pt->table_mask, tval = pt->table_val, taddr = pt->table_addr_mask;
	const struct pt_level *const last = &pt->lvl[pt->depth - 1];
	struct pt_unmap_acc acc = {.lo = UINT64_MAX};

	do {
		const struct pt_level *l = pt->lvl;
		const struct pt_level *stop = l + pt->cover_depth_of[pt_fit_shift(va, end - va)];
		_Atomic uint64_t *table = pt->root;

		for (; l < stop; l++) {
			/* Acquire: pairs with the release CAS that linked a table (pt_install_table). */
			uint64_t pte = atomic_load_explicit(
				table + ((va >> l->shift) & l->index_mask), memory_order_acquire);

			if ((pte & tmask) != tval)
				break;
			table = (_Atomic uint64_t *)(uintptr_t)(pte & taddr);
		}
		if (l != last) {
			pt_unmap_sweep(pt, table, (unsigned int)(l - pt->lvl), &va, end, g, &acc);
			continue;
		}

		/* The last depth holds leaves only: the hot loop of unmap. */
		const unsigned int shift = l->shift;
		const uint64_t idx = (va >> shift) & l->index_mask;
		const uint64_t base = va & ~(l->size - 1);
		uint64_t n = (end - base + l->size - 1) >> shift;
		uint64_t cnt = 0, first = 0, after = 0;

		if (n > l->index_mask + 1 - idx)
			n = l->index_mask + 1 - idx;
		for (uint64_t i = 0; i < n; i++) {
			if (!atomic_load_explicit(&table[idx + i], memory_order_relaxed))
				continue;
			/*
			 * Relaxed: clearing publishes nothing; a walker still seeing the leaf is
			 * covered by the caller's invalidation of @g.
			 */
			atomic_store_explicit(&table[idx + i], 0, memory_order_relaxed);
			if (!cnt++)
				first = i;
			after = i + 1;
		}
		if (cnt) {
			acc.bytes += cnt << shift;
			acc.maxpg = l->size > acc.maxpg ? l->size : acc.maxpg;
			acc.lo = base + (first << shift) < acc.lo ? base + (first << shift) :
								    acc.lo;
			acc.hi = base + (after << shift);
		}
		va = base + (n << shift);
	} while (va < end);
	if (acc.hi)
		pt_gather_range(g, acc.lo + pt->iova_base, acc.hi + pt->iova_base, acc.maxpg);
	return acc.bytes;
}

/* Undo of a failed map (out of line: only error paths use it). */
static dg_noinline void pt_unmap_undo(struct dg_pt *pt, uint64_t va, uint64_t end,
				      struct dg_pt_gather *g)
{
	pt_unmap_va(pt, va, end, g);
}

/* ---- map -------------------------------------------------------------------------------- */

/*
 * The table at level @leaf that holds @va, descending from the root and linking a table
 * where one is missing (pt_map_link()); NULL with *err set if that fails. @tmask, @tval,
 * @taddr: the table test and address mask (pt->table_*), which callers keep in locals.
 */
static inline __attribute__((always_inline)) _Atomic uint64_t *
pt_map_descend(struct dg_pt *pt, uint64_t va, const struct pt_level *leaf, uint64_t tmask,
	       uint64_t tval, uint64_t taddr, int *err)
{
	_Atomic uint64_t *table = pt->root;

	for (const struct pt_level *l = pt->lvl; l < leaf; l++) {
		_Atomic uint64_t *ptep = table + ((va >> l->shift) & l->index_mask);
		/* Acquire: pairs with the release CAS that linked the table. */
		uint64_t pte = atomic_load_explicit(ptep, memory_order_acquire);

		if (dg_likely((pte & tmask) == tval)) {
			table = (_Atomic uint64_t *)(uintptr_t)(pte & taddr);
		} else {
			table = pt_map_link(pt, ptep, pte, err);
			if (!table)
				return NULL;
		}
	}
	return table;
}

/*
 * Map [va, end) to pa.. with the leaf templates @tmpl (@fixed < 0: the largest leaves that
 * fit; else leaves at depth @fixed only, alignment validated by the caller). On failure what
 * it mapped is undone.
 *
 * Each pass picks the leaf depth at va (leaf_depth_of[] of the alignment of va and pa and
 * the length left), descends to it linking missing tables, and writes a run of leaves in that
 * table up to its end (the next larger page's boundary, where the choice is made again) or
 * the range's.
 */
static inline __attribute__((always_inline)) int pt_map_va(struct dg_pt *pt, uint64_t va,
							   uint64_t end, uint64_t pa,
							   const uint64_t *tmpl, int fixed,
							   struct dg_pt_gather *g)
{
	/* Read-only geometry in locals (see pt_unmap_va). */
	const uint64_t tmask = pt->table_mask, tval = pt->table_val, taddr = pt->table_addr_mask;
	const uint64_t oa_mask = pt->oa_mask, oa_hi = pt->oa_hi_mask;
	const uint64_t start = va;
	int err = 0;

	do {
		unsigned int target = fixed < 0 ?
					      pt->leaf_depth_of[pt_fit_shift(va | pa, end - va)] :
					      (unsigned int)fixed;
		const struct pt_level *const l = pt->lvl + target;
		_Atomic uint64_t *table = pt_map_descend(pt, va, l, tmask, tval, taddr, &err);

		if (!table)
			goto fail;

		const unsigned int shift = l->shift;
		const uint64_t step = l->size, attrs = tmpl[target];
		const uint64_t idx = (va >> shift) & l->index_mask;
		uint64_t n = (end - va) >> shift;
		uint64_t pte = (pa & oa_mask) | ((pa >> 36) & oa_hi) | attrs;

		if (n > l->index_mask + 1 - idx)
			n = l->index_mask + 1 - idx;
		for (uint64_t i = 0; i < n; i++) {
			_Atomic uint64_t *ptep = &table[idx + i];

			if (dg_unlikely(atomic_load_explicit(ptep, memory_order_relaxed))) {
				err = pt_map_over(pt, ptep, target, va + (i << shift), g);
				if (err) {
					va += i << shift;
					goto fail;
				}
			}
			/*
			 * Release: pairs with the acquire loads of walkers, so a device that
			 * sees the leaf also sees what the CPU wrote before mapping.
			 */
			atomic_store_explicit(ptep, pte, memory_order_release);
			/* The address field is linear unless PA[51:48] moves (LPAE 52-bit). */
			pte += step;
			if (dg_unlikely(oa_hi)) {
				uint64_t next = pa + ((i + 1) << shift);

				pte = (next & oa_mask) | ((next >> 36) & oa_hi) | attrs;
			}
		}
		va += n << shift;
		pa += n << shift;
	} while (va < end);
	return 0;
fail:
	if (va > start)
		pt_unmap_undo(pt, start, va, g);
	return err;
}

/* Common argument checks of map and map_pages; on success *va is the window offset. */
static inline int pt_map_check(const struct dg_pt *pt, uint64_t iova, uint64_t phys, uint64_t size,
			       uint64_t align_mask, unsigned int prot, const struct dg_pt_gather *g,
			       uint64_t *va)
{
	if (!g || !(prot & (DG_PROT_READ | DG_PROT_WRITE)) || (prot & ~DG_PROT_ALL) || !size ||
	    ((iova | phys | size) & align_mask))
		return -EINVAL;
	*va = iova - pt->iova_base;
	if (iova < pt->iova_base || *va >= pt->va_limit || size > pt->va_limit - *va ||
	    phys >= pt->oa_limit || size > pt->oa_limit - phys)
		return -ERANGE;
	return 0;
}

/* pt_map_one / pt_unmap_one: "not the simple case, take the general path" (nothing changed). */
#define PT_SLOW 1

/*
 * Exactly one leaf, at depth @d (the range is one allowed page size, both addresses aligned
 * to it): the common DMA case, without the length and alignment search of pt_map_va. Returns
 * 0, -errno, or PT_SLOW when the slot is not empty above the last depth (an empty table may
 * have to be replaced: the general path decides). Nothing to undo: the only write is the leaf.
 */
static inline __attribute__((always_inline)) int
pt_map_one(struct dg_pt *pt, uint64_t va, uint64_t pa, unsigned int d, uint64_t attrs)
{
	const uint64_t oa = (pa & pt->oa_mask) | ((pa >> 36) & pt->oa_hi_mask);
	const struct pt_level *const l = pt->lvl + d;
	_Atomic uint64_t *table, *ptep;
	int err;

	table = pt_map_descend(pt, va, l, pt->table_mask, pt->table_val, pt->table_addr_mask, &err);
	if (!table)
		return err;
	ptep = table + ((va >> l->shift) & l->index_mask);
	if (dg_unlikely(atomic_load_explicit(ptep, memory_order_relaxed)))
		return d == pt->depth - 1 ? -EEXIST : PT_SLOW;
	/* Release: pairs with the acquire loads of walkers (as in pt_map_va). */
	atomic_store_explicit(ptep, oa | attrs, memory_order_release);
	return 0;
}

/* The range is exactly one allowed page, both addresses aligned to it? */
static inline bool pt_one_page(const struct dg_pt *pt, uint64_t addrs, uint64_t size)
{
	return !(size & (size - 1)) && (size & pt->geo.pgsize_bitmap) && !(addrs & (size - 1));
}

int dg_pt_map(struct dg_pt *pt, uint64_t iova, uint64_t phys, uint64_t size, unsigned int prot,
	      struct dg_pt_gather *gather)
{
	uint64_t va;
	int err = pt_map_check(pt, iova, phys, size, pt->granule_mask, prot, gather, &va);

	if (dg_unlikely(err))
		return err;
	if (pt_one_page(pt, va | phys, size)) {
		unsigned int d = pt->leaf_depth_of[__builtin_ctzll(size)];

		err = pt_map_one(pt, va, phys, d, pt->leaf_tmpl[prot][d]);
		if (dg_likely(err != PT_SLOW))
			return err;
	}
	return pt_map_va(pt, va, va + size, phys, pt->leaf_tmpl[prot], -1, gather);
}

int dg_pt_map_pages(struct dg_pt *pt, uint64_t iova, uint64_t phys, uint64_t pgsize,
		    uint64_t pgcount, unsigned int prot, struct dg_pt_gather *gather)
{
	int d = 0;
	uint64_t va;
	int err;

	if (!dg_is_pow2(pgsize) || !(pgsize & pt->geo.pgsize_bitmap) || !pgcount)
		return -EINVAL;
	if (pgcount > UINT64_MAX / pgsize)
		return -ERANGE;
	err = pt_map_check(pt, iova, phys, pgsize * pgcount, pgsize - 1, prot, gather, &va);
	if (err)
		return err;
	while (pt->lvl[d].size != pgsize)
		d++;
	return pt_map_va(pt, va, va + pgsize * pgcount, phys, pt->leaf_tmpl[prot], d, gather);
}

/*
 * Unmap of exactly one allowed page at depth @d, aligned (the common case): returns 0 with
 * the leaf cleared, -ENOENT when its slot is empty, or PT_SLOW, having changed nothing, when
 * the walk meets anything else (a larger leaf, a table to unlink) for the general path.
 */
static inline __attribute__((always_inline)) int
pt_unmap_one(struct dg_pt *pt, uint64_t va, unsigned int d, struct dg_pt_gather *g)
{
	const uint64_t tmask = pt->table_mask, tval = pt->table_val, taddr = pt->table_addr_mask;
	const struct pt_level *l = pt->lvl, *const leaf = l + d;
	_Atomic uint64_t *table = pt->root, *ptep;
	uint64_t pte;

	for (; l < leaf; l++) {
		/* Acquire: pairs with the release CAS that linked a table (pt_install_table). */
		pte = atomic_load_explicit(table + ((va >> l->shift) & l->index_mask),
					   memory_order_acquire);
		if ((pte & tmask) != tval)
			return pte ? PT_SLOW : -ENOENT;
		table = (_Atomic uint64_t *)(uintptr_t)(pte & taddr);
	}
	ptep = table + ((va >> l->shift) & l->index_mask);
	pte = atomic_load_explicit(ptep, memory_order_relaxed);
	if (!pte)
		return -ENOENT;
	if (d != pt->depth - 1 && (pte & tmask) == tval)
		return PT_SLOW;
	/* Relaxed: as in pt_unmap_va. */
	atomic_store_explicit(ptep, 0, memory_order_relaxed);
	pt_gather_range(g, va + pt->iova_base, va + l->size + pt->iova_base, l->size);
	return 0;
}

int dg_pt_unmap(struct dg_pt *pt, uint64_t iova, uint64_t size, struct dg_pt_gather *gather,
		uint64_t *unmapped)
{
	uint64_t va = iova - pt->iova_base;
	uint64_t bytes;

	if (!gather || !unmapped || !size || ((iova | size) & pt->granule_mask))
		return -EINVAL;
	if (iova < pt->iova_base || va >= pt->va_limit || size > pt->va_limit - va)
		return -ERANGE;
	if (pt_one_page(pt, va, size)) {
		int err = pt_unmap_one(pt, va, pt->leaf_depth_of[__builtin_ctzll(size)], gather);

		if (dg_likely(err != PT_SLOW)) {
			*unmapped = err ? 0 : size;
			return err;
		}
	}
	bytes = pt_unmap_va(pt, va, va + size, gather);
	*unmapped = bytes;
	return bytes ? 0 : -ENOENT;
}

/* ---- one granule, through the hint (pt_fast.h) ------------------------------------------ */

/*
 * Descend to the last-level table holding @va, linking missing tables when @create: 0 and
 * *out, or -EEXIST (a larger leaf above the last level), -ENOENT (an empty slot and no
 * @create), or pt_install_table()'s error. @va is granule aligned and inside the input range.
 * Shared by the hint's slow path and the slots.
 */
static int pt_leaf_table(struct dg_pt *pt, uint64_t va, bool create, _Atomic uint64_t **out)
{
	const uint64_t tmask = pt->table_mask, tval = pt->table_val, taddr = pt->table_addr_mask;
	const struct pt_level *l = pt->lvl, *const leaf = l + pt->depth - 1;
	_Atomic uint64_t *table = pt->root;
	int err;

	for (; l < leaf; l++) {
		_Atomic uint64_t *ptep = table + ((va >> l->shift) & l->index_mask);
		/* Acquire: pairs with the release CAS that linked the table (pt_install_table). */
		uint64_t pte = atomic_load_explicit(ptep, memory_order_acquire);

		if (dg_likely((pte & tmask) == tval))
			table = (_Atomic uint64_t *)(uintptr_t)(pte & taddr);
		else if (pte)
			return -EEXIST;
		else if (!create)
			return -ENOENT;
		else if (!(table = pt_install_table(pt, ptep, &err)))
			return err;
	}
	*out = table;
	return 0;
}

/*
 * The hint missed: descend to the last-level table holding @va (linking missing tables when
 * @create) and make it the hint. NULL when the descent meets anything but a table above the
 * last level (a larger leaf, an empty slot without @create) or cannot link one: the caller
 * then takes the validated general path, which decides.
 */
static dg_noinline _Atomic uint64_t *pt_granule_table(struct dg_pt *pt, uint64_t va, bool create)
{
	/* Relaxed: see pt_hint_get(); read before the descent, so an unlink during it makes the
	 * new hint stale rather than wrong. */
	const uint64_t gen = atomic_load_explicit(&pt->unlink_gen, memory_order_relaxed);
	_Atomic uint64_t *table;

	if (pt_leaf_table(pt, va, create, &table))
		return NULL;
	pt_hint_set(pt, va, gen, table);
	return table;
}

/* Store a last-level leaf -> @phys with the template @tmpl into the empty slot @ptep (true),
 * or leave a taken slot to the general path (false). */
static inline bool pt_leaf_store(const struct dg_pt *pt, _Atomic uint64_t *ptep, uint64_t phys,
				 uint64_t tmpl)
{
	if (dg_unlikely(atomic_load_explicit(ptep, memory_order_relaxed)))
		return false;
	/* Release: pairs with the acquire loads of walkers (as in pt_map_va). */
	atomic_store_explicit(ptep, pt_oa_encode(pt, phys) | tmpl, memory_order_release);
	return true;
}

/* Store the leaf of [va, va + granule) -> phys into the last-level @table if its slot is empty
 * (true), else leave it to the general path (false). */
static inline bool pt_granule_store(struct dg_pt *pt, _Atomic uint64_t *table, uint64_t va,
				    uint64_t phys, unsigned int prot)
{
	return pt_leaf_store(pt, table + ((va >> pt->leaf_shift) & pt->leaf_index_mask), phys,
			     pt->leaf_tmpl[prot][pt->depth - 1]);
}

/* Clear the leaf of va in the last-level @table if present (true), else false. */
static inline bool pt_granule_clear(struct dg_pt *pt, _Atomic uint64_t *table, uint64_t va,
				    uint64_t iova, struct dg_pt_gather *gather)
{
	_Atomic uint64_t *ptep = table + ((va >> pt->leaf_shift) & pt->leaf_index_mask);

	if (dg_unlikely(!atomic_load_explicit(ptep, memory_order_relaxed)))
		return false;
	/* Relaxed: as in pt_unmap_va (a last-level entry is a leaf). */
	atomic_store_explicit(ptep, 0, memory_order_relaxed);
	pt_gather_range(gather, iova, iova + pt->geo.granule, pt->geo.granule);
	return true;
}

/* The hint missed (arguments checked): descend, then as the hit path. */
static dg_noinline int pt_map_granule_miss(struct dg_pt *pt, uint64_t iova, uint64_t phys,
					   unsigned int prot, struct dg_pt_gather *gather)
{
	const uint64_t va = iova - pt->iova_base;
	_Atomic uint64_t *table = pt_granule_table(pt, va, true);

	if (table && pt_granule_store(pt, table, va, phys, prot))
		return 0;
	return dg_pt_map(pt, iova, phys, pt->geo.granule, prot, gather);
}

static dg_noinline int pt_unmap_granule_miss(struct dg_pt *pt, uint64_t iova,
					     struct dg_pt_gather *gather)
{
	const uint64_t va = iova - pt->iova_base;
	_Atomic uint64_t *table = pt_granule_table(pt, va, false);
	uint64_t unmapped;

	if (table && pt_granule_clear(pt, table, va, iova, gather))
		return 0;
	return dg_pt_unmap(pt, iova, pt->geo.granule, gather, &unmapped);
}

/*
 * The hit paths call nothing but in tail position, so they save no registers. Checked here:
 * aligned addresses (a misaligned va would index its page's entry), an output address the
 * format holds, a valid prot, an IOVA inside the input range (a hint's tag match implies it;
 * the descent of a miss needs it said). Anything else is dg_pt_map's / dg_pt_unmap's to refuse.
 */
int pt_map_granule(struct dg_pt *pt, uint64_t iova, uint64_t phys, unsigned int prot,
		   struct dg_pt_gather *gather)
{
	const uint64_t va = iova - pt->iova_base;
	_Atomic uint64_t *table;

	if (dg_likely(pt->granule_fast && !((va | phys) & pt->granule_mask) &&
		      phys < pt->oa_limit && (prot & (DG_PROT_READ | DG_PROT_WRITE)) &&
		      !(prot & ~DG_PROT_ALL) && gather && iova >= pt->iova_base &&
		      va < pt->va_limit)) {
		table = pt_hint_get(pt, va);
		if (dg_unlikely(!table))
			return pt_map_granule_miss(pt, iova, phys, prot, gather);
		if (dg_likely(pt_granule_store(pt, table, va, phys, prot)))
			return 0;
	}
	return dg_pt_map(pt, iova, phys, pt->geo.granule, prot, gather);
}

int pt_map_granules(struct dg_pt *pt, uint64_t iova, const uint64_t *phys, unsigned int n,
		    unsigned int prot, struct dg_pt_gather *gather, unsigned int *done)
{
	const uint64_t g = pt->geo.granule;
	unsigned int i = 0;
	int r;

	if (dg_likely(pt->granule_fast && !(prot & ~DG_PROT_ALL) &&
		      (prot & (DG_PROT_READ | DG_PROT_WRITE)) && gather && n &&
		      iova >= pt->iova_base && iova - pt->iova_base < pt->va_limit &&
		      (uint64_t)n <= (pt->va_limit - (iova - pt->iova_base)) / g &&
		      !((iova - pt->iova_base) & pt->granule_mask))) {
		const uint64_t tmpl = pt->leaf_tmpl[prot][pt->depth - 1];
		const uint64_t span = pt->leaf_index_mask + 1; /* granules per last-level table */

		while (i < n) {
			const uint64_t va = iova - pt->iova_base + (uint64_t)i * g;
			const uint64_t idx = (va >> pt->leaf_shift) & pt->leaf_index_mask;
			_Atomic uint64_t *table = pt_hint_get(pt, va);
			unsigned int m = n - i;

			if (!table && !(table = pt_granule_table(pt, va, true)))
				break; /* no memory, or a larger leaf there: the general path says */
			if (m > span - idx)
				m = (unsigned int)(span - idx);
			for (unsigned int k = 0; k < m; k++) {
				const uint64_t pa = phys[i + k];

				if (dg_unlikely((pa & pt->granule_mask) || pa >= pt->oa_limit ||
						!pt_leaf_store(pt, &table[idx + k], pa, tmpl))) {
					i += k;
					goto slow; /* the general path refuses it as it should */
				}
			}
			i += m;
		}
	}
slow:
	for (; i < n; i++) {
		r = pt_map_granule(pt, iova + (uint64_t)i * g, phys[i], prot, gather);
		if (r) {
			*done = i;
			return r;
		}
	}
	*done = n;
	return 0;
}

int pt_unmap_granule(struct dg_pt *pt, uint64_t iova, struct dg_pt_gather *gather)
{
	const uint64_t va = iova - pt->iova_base;
	_Atomic uint64_t *table;
	uint64_t unmapped;

	if (dg_likely(pt->granule_fast && !(va & pt->granule_mask) && gather &&
		      iova >= pt->iova_base && va < pt->va_limit)) {
		table = pt_hint_get(pt, va);
		if (dg_unlikely(!table))
			return pt_unmap_granule_miss(pt, iova, gather);
		if (dg_likely(pt_granule_clear(pt, table, va, iova, gather)))
			return 0;
	}
	return dg_pt_unmap(pt, iova, pt->geo.granule, gather, &unmapped);
}

int pt_unmap_granules(struct dg_pt *pt, uint64_t iova, uint64_t n, struct dg_pt_gather *gather)
{
	const uint64_t g = pt->geo.granule, va0 = iova - pt->iova_base;
	uint64_t i = 0, cleared = 0, unmapped = 0;
	int r;

	if (dg_likely(pt->granule_fast && gather && n && iova >= pt->iova_base &&
		      va0 < pt->va_limit && n <= (pt->va_limit - va0) / g &&
		      !(va0 & pt->granule_mask))) {
		const uint64_t span = pt->leaf_index_mask + 1; /* granules per last-level table */

		while (i < n) {
			const uint64_t va = va0 + i * g;
			const uint64_t idx = (va >> pt->leaf_shift) & pt->leaf_index_mask;
			_Atomic uint64_t *table = pt_hint_get(pt, va);
			uint64_t m = n - i;

			if (!table && !(table = pt_granule_table(pt, va, false)))
				break; /* a larger leaf, or nothing: the general path says */
			if (m > span - idx)
				m = span - idx;
			for (uint64_t k = 0; k < m; k++) {
				if (!atomic_load_explicit(&table[idx + k], memory_order_relaxed))
					continue;
				/* Relaxed: as in pt_unmap_va (a last-level entry is a leaf). */
				atomic_store_explicit(&table[idx + k], 0, memory_order_relaxed);
				cleared++;
			}
			i += m;
		}
		if (cleared)
			pt_gather_range(gather, iova, iova + i * g, g);
		if (i == n)
			return cleared ? 0 : -ENOENT;
	}
	r = dg_pt_unmap(pt, iova + i * g, (n - i) * g, gather, &unmapped);
	return cleared && r == -ENOENT ? 0 : r;
}

/* ---- slots: kept last-level tables (pt_fast.h) ------------------------------------------ */

struct pt_slots *pt_slots_create(struct dg_pt *pt, uint64_t iova, uint64_t n)
{
	const unsigned int last = pt->depth - 1;
	const uint64_t va = iova - pt->iova_base;
	struct pt_slots *s;
	uint64_t nt;

	if (!n || iova < pt->iova_base || (va & pt->granule_mask)) {
		errno = EINVAL;
		return NULL;
	}
	if (pt->lvl[last].size != pt->geo.granule || !pt->lvl[last].leaf_ok) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (va >= pt->va_limit || n > (pt->va_limit - va) >> pt->leaf_shift) {
		errno = ERANGE;
		return NULL;
	}
	const unsigned int tshift = last ? (unsigned int)__builtin_ctzll(pt->leaf_index_mask + 1) :
					   63;
	const uint64_t first = va >> pt->leaf_shift;

	nt = ((first + n - 1) >> tshift) - (first >> tshift) + 1;
	s = calloc(1, sizeof(*s) + nt * sizeof(s->tables[0]));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	s->pt = pt;
	s->first = first;
	s->n = n;
	s->tshift = tshift;
	s->t0 = first >> tshift;
	s->tmask = last ? pt->leaf_index_mask : UINT64_MAX;
	s->lo = first & s->tmask;
	s->gshift = pt->leaf_shift;
	s->gmask = pt->granule_mask;
	s->oa_limit = pt->oa_limit;
	s->oa_mask = pt->oa_mask;
	s->oa_hi_mask = pt->oa_hi_mask;
	for (unsigned int p = 0; p <= DG_PROT_ALL; p++)
		s->tmpl[p] = pt->leaf_tmpl[p][last];
	for (uint64_t t = 0; t < nt; t++)
		atomic_init(&s->tables[t], last ? NULL : pt->root); /* one level: the root */
	return s;
}

void pt_slots_destroy(struct pt_slots *s)
{
	free(s);
}

int pt_slots_table(struct pt_slots *s, uint64_t t, _Atomic uint64_t **out)
{
	struct dg_pt *pt = s->pt;
	const uint64_t va = ((s->t0 + t) << s->tshift) << pt->leaf_shift;
	_Atomic uint64_t *table;
	int err = pt_leaf_table(pt, va, true, &table);

	if (err)
		return err; /* -EEXIST: a larger leaf over the range */
	/* Release: pairs with the acquire loads in pt_slot_entry() / pt_slot_unmap(). */
	atomic_store_explicit(&s->tables[t], table, memory_order_release);
	*out = table;
	return 0;
}

int pt_slots_map(struct pt_slots *s, uint64_t i, uint64_t k, uint64_t phys, unsigned int prot)
{
	_Atomic uint64_t *ptep;
	int err;

	if ((phys & s->gmask) || !(prot & (DG_PROT_READ | DG_PROT_WRITE)) ||
	    (prot & ~DG_PROT_ALL) || !k)
		return -EINVAL;
	if (i >= s->n || k > s->n - i || phys >= s->oa_limit ||
	    k > (s->oa_limit - phys) >> s->gshift)
		return -ERANGE;
	for (uint64_t j = 0; j < k; j++) { /* every slot free (tables found) before any store */
		ptep = pt_slot_entry(s, i + j, &err);
		if (!ptep)
			return err;
		if (atomic_load_explicit(ptep, memory_order_relaxed))
			return -EEXIST;
	}
	for (uint64_t j = 0; j < k; j++) {
		const uint64_t pa = phys + (j << s->gshift);

		ptep = pt_slot_entry(s, i + j, &err); /* kept: cannot fail now */
		/* Release: pairs with the acquire loads of walkers (as in pt_map_va). */
		atomic_store_explicit(
			ptep, (pa & s->oa_mask) | ((pa >> 36) & s->oa_hi_mask) | s->tmpl[prot],
			memory_order_release);
	}
	return 0;
}

uint64_t pt_slots_unmap(struct pt_slots *s, uint64_t i, uint64_t k)
{
	uint64_t cleared = 0;

	for (uint64_t j = 0; j < k; j++) {
		const uint64_t g = s->lo + i + j;
		/* Acquire: as in pt_slot_entry(). */
		_Atomic uint64_t *table =
			atomic_load_explicit(&s->tables[g >> s->tshift], memory_order_acquire);

		if (!table || !atomic_load_explicit(table + (g & s->tmask), memory_order_relaxed))
			continue;
		/* Relaxed: as in pt_unmap_va (the caller invalidates). */
		atomic_store_explicit(table + (g & s->tmask), 0, memory_order_relaxed);
		cleared++;
	}
	return cleared;
}

int pt_slots_check(const struct pt_slots *s, FILE *why)
{
	const struct dg_pt *pt = s->pt;
	const uint64_t nt = ((s->first + s->n - 1) >> s->tshift) - s->t0 + 1;

	for (uint64_t t = 0; t < nt; t++) {
		/* Acquire: as in pt_slot_entry(). */
		_Atomic uint64_t *kept = atomic_load_explicit(&s->tables[t], memory_order_acquire);
		const uint64_t va = ((s->t0 + t) << s->tshift) << pt->leaf_shift;
		_Atomic uint64_t *table = pt->root;

		if (!kept)
			continue;
		for (unsigned int d = 0; d + 1 < pt->depth; d++) {
			/* Acquire: pairs with the release CAS that linked a table. */
			uint64_t pte = atomic_load_explicit(pt_entry(pt, table, d, va),
							    memory_order_acquire);

			if (!pte || !pt_is_table(pt, pte)) {
				table = NULL;
				break;
			}
			table = pt_table_ptr(pt, pte);
		}
		if (table != kept) {
			if (why)
				fprintf(why,
					"pt: slots keep table %p for va 0x%" PRIx64
					", the tree links %p\n",
					(void *)kept, va + pt->iova_base, (void *)table);
			return -EUCLEAN;
		}
	}
	return 0;
}

/* ---- walk ------------------------------------------------------------------------------- */

static int pt_walk_at(const struct dg_pt *pt, uint64_t va, _Atomic uint64_t *table, unsigned int d,
		      struct dg_pt_walk *w)
{
	const unsigned int last = pt->depth - 1;

	for (;; d++) {
		const struct pt_level *l = &pt->lvl[d];
		/*
		 * Acquire: pairs with the release CAS that linked a table (its entries are
		 * initialised) and with the release store of a leaf in pt_map_va().
		 */
		uint64_t pte =
			atomic_load_explicit(pt_entry(pt, table, d, va), memory_order_acquire);

		w->table[d] = (const void *)table;
		if (!(pte & pt->valid_mask)) {
			w->depth = d;
			return -ENOENT;
		}
		if (d < last && pt_is_table(pt, pte)) {
			table = pt_table_ptr(pt, pte);
			continue;
		}
		w->pte = pte;
		w->pgsize = l->size;
		w->phys = (pt_oa_decode(pt, pte) & ~(l->size - 1)) | (va & (l->size - 1));
		w->prot = pt->ops->leaf_prot(pt, pte);
		w->level = l->hw_level;
		w->depth = d;
		return 0;
	}
}

int dg_pt_walk(const struct dg_pt *pt, uint64_t iova, struct dg_pt_walk *w)
{
	uint64_t va = iova - pt->iova_base;

	if (iova < pt->iova_base || va >= pt->va_limit)
		return -ERANGE;
	return pt_walk_at(pt, va, pt->root, 0, w);
}

int dg_pt_walk_from(const struct dg_pt *pt, uint64_t iova, const void *table, unsigned int depth,
		    struct dg_pt_walk *w)
{
	uint64_t va = iova - pt->iova_base;

	if (!table || depth >= pt->depth)
		return -EINVAL;
	if (iova < pt->iova_base || va >= pt->va_limit)
		return -ERANGE;
	return pt_walk_at(pt, va, (_Atomic uint64_t *)(uintptr_t)table, depth, w);
}

uint64_t dg_pt_iova_to_phys(const struct dg_pt *pt, uint64_t iova)
{
	struct dg_pt_walk w;

	return dg_pt_walk(pt, iova, &w) ? 0 : w.phys;
}

uint64_t dg_pt_table_span(const struct dg_pt *pt, unsigned int depth)
{
	if (depth >= pt->depth)
		return 0;
	return depth ? pt->lvl[depth - 1].size : pt->va_limit;
}

uint64_t dg_pt_table_pages(const struct dg_pt *pt)
{
	return atomic_load_explicit(&pt->nr_tables, memory_order_relaxed);
}

/* ---- create / destroy ------------------------------------------------------------------- */

static const struct pt_fmt_ops *pt_fmt_ops(enum dg_pt_format format)
{
	switch (format) {
	case DG_PT_FMT_VTD_SS:
		return &pt_fmt_vtd_ops;
	case DG_PT_FMT_ARM_LPAE_S1:
	case DG_PT_FMT_ARM_LPAE_S2:
		return &pt_fmt_lpae_ops;
	case DG_PT_FMT_FLAT:
		return &pt_fmt_flat_ops;
	}
	return NULL;
}

const char *dg_pt_format_name(enum dg_pt_format format)
{
	switch (format) {
	case DG_PT_FMT_VTD_SS:
		return "vtd-ss";
	case DG_PT_FMT_ARM_LPAE_S1:
		return "arm-lpae-s1";
	case DG_PT_FMT_ARM_LPAE_S2:
		return "arm-lpae-s2";
	case DG_PT_FMT_FLAT:
		return "flat";
	}
	return NULL;
}

struct dg_pt *dg_pt_create(const struct dg_pt_geometry *geo, const struct dg_pt_mem_ops *mem,
			   void *cookie)
{
	const struct pt_fmt_ops *ops = geo ? pt_fmt_ops(geo->format) : NULL;
	struct dg_pt *pt;
	int err;

	if (!ops || (mem && (!mem->alloc || !mem->free))) {
		errno = EINVAL;
		return NULL;
	}
	pt = aligned_alloc(DG_CACHELINE, sizeof(*pt));
	if (!pt) {
		errno = ENOMEM;
		return NULL;
	}
	memset(pt, 0, sizeof(*pt));
	pt->id = atomic_fetch_add_explicit(&pt_next_id, 1, memory_order_relaxed);
	pt->ops = ops;
	pt->geo = *geo;
	pt->mem = mem ? mem : &pt_default_mem;
	pt->mem_cookie = cookie;
	err = ops->init(pt);
	if (err) {
		free(pt);
		errno = -err;
		return NULL;
	}
	pt->granule_mask = pt->geo.granule - 1;
	pt->oa_limit = 1ull << pt->geo.oas;
	pt->table_bytes = pt->depth > 1 ? pt->lvl[1].table_bytes : 0;
	/* Leaves where the (validated) page sizes allow; sizes no depth holds drop out. */
	uint64_t sizes = pt->geo.pgsize_bitmap;

	pt->geo.pgsize_bitmap = 0;
	for (unsigned int d = 0; d < pt->depth; d++) {
		struct pt_level *l = &pt->lvl[d];

		l->leaf_ok = (sizes & l->size) != 0;
		if (!l->leaf_ok)
			continue;
		pt->geo.pgsize_bitmap |= l->size;
		for (unsigned int prot = 0; prot < PT_PROT_COMBOS; prot++)
			if (prot & (DG_PROT_READ | DG_PROT_WRITE))
				pt->leaf_tmpl[prot][d] = ops->leaf_attrs(pt, prot, d);
	}
	/*
	 * For each alignment (log2): the shallowest depth whose entries it allows, and the
	 * shallowest whose leaf the page sizes allow too.
	 */
	for (unsigned int a = 0; a < 64; a++) {
		pt->leaf_depth_of[a] = pt->cover_depth_of[a] = (uint8_t)(pt->depth - 1);
		for (unsigned int d = pt->depth; d-- > 0;) {
			if (pt->lvl[d].shift > a)
				break;
			pt->cover_depth_of[a] = (uint8_t)d;
			if (pt->lvl[d].leaf_ok)
				pt->leaf_depth_of[a] = (uint8_t)d;
		}
	}
	pt->granule_fast = pt->depth > 1 && pt->lvl[pt->depth - 1].size == pt->geo.granule &&
			   pt->lvl[pt->depth - 1].leaf_ok;
	pt->hint_shift = pt->depth > 1 ? pt->lvl[pt->depth - 2].shift : 63;
	pt->leaf_shift = pt->lvl[pt->depth - 1].shift;
	pt->leaf_index_mask = pt->lvl[pt->depth - 1].index_mask;
	pt->root = pt_table_alloc(pt, pt->lvl[0].table_bytes, true);
	if (!pt->root) {
		free(pt);
		errno = ENOMEM;
		return NULL;
	}
	return pt;
}

static void pt_free_subtree(struct dg_pt *pt, _Atomic uint64_t *table, unsigned int d)
{
	if (d + 1 < pt->depth) {
		for (uint64_t i = 0; i <= pt->lvl[d].index_mask; i++) {
			uint64_t pte = atomic_load_explicit(&table[i], memory_order_relaxed);

			if (pte && pt_is_table(pt, pte))
				pt_free_subtree(pt, pt_table_ptr(pt, pte), d + 1);
		}
	}
	pt_table_free(pt, table, pt->lvl[d].table_bytes);
}

void dg_pt_destroy(struct dg_pt *pt)
{
	if (!pt)
		return;
	pt_free_subtree(pt, pt->root, 0);
	free(pt);
}

void dg_pt_set_sweep_hook(struct dg_pt *pt,
			  void (*fn)(void *arg, uint64_t iova, unsigned int depth), void *arg)
{
	pt->sweep_hook = fn;
	pt->sweep_hook_arg = arg;
}

int dg_pt_hint_check(const struct dg_pt *pt, FILE *why)
{
	const struct pt_hint *h = &pt_hints[pt->id & (PT_HINT_SLOTS - 1)];
	_Atomic uint64_t *table = pt->root;
	uint64_t va;

	if (pt->depth < 2 || h->id != pt->id ||
	    h->gen != atomic_load_explicit(&pt->unlink_gen, memory_order_relaxed))
		return 0; /* none, or stale: never used */
	va = h->tag << pt->hint_shift;
	for (unsigned int d = 0; d < pt->depth - 1; d++) {
		/* Acquire: pairs with the release CAS that linked a table (pt_install_table). */
		uint64_t pte =
			atomic_load_explicit(pt_entry(pt, table, d, va), memory_order_acquire);

		if (!pte || !pt_is_table(pt, pte)) {
			table = NULL;
			break;
		}
		table = pt_table_ptr(pt, pte);
	}
	if (table == h->table)
		return 0;
	if (why)
		fprintf(why, "pt: hint for va 0x%" PRIx64 " names table %p, the tree links %p\n",
			va + pt->iova_base, (void *)h->table, (void *)table);
	return -EUCLEAN;
}

void dg_pt_geometry(const struct dg_pt *pt, struct dg_pt_geometry *geo)
{
	*geo = pt->geo;
}

uint64_t dg_pt_root(const struct dg_pt *pt)
{
	return pt->ops->root_reg(pt);
}

/* ---- check / dump ----------------------------------------------------------------------- */

struct pt_check {
	FILE *why;
	unsigned int errors;
	uint64_t tables;
};

#define PT_CHECK_MAX_REPORTS 20

static void pt_check_fail(struct pt_check *c, unsigned int d, uint64_t iova, uint64_t pte,
			  const char *what)
{
	if (c->why && c->errors < PT_CHECK_MAX_REPORTS)
		fprintf(c->why, "pt check: depth %u iova 0x%" PRIx64 " pte 0x%016" PRIx64 ": %s\n",
			d, iova, pte, what);
	c->errors++;
}

static void pt_check_table(const struct dg_pt *pt, _Atomic uint64_t *table, unsigned int d,
			   uint64_t va, struct pt_check *c)
{
	const struct pt_level *l = &pt->lvl[d];
	bool last = d == pt->depth - 1;

	for (uint64_t i = 0; i <= l->index_mask; i++, va += l->size) {
		uint64_t pte = atomic_load_explicit(&table[i], memory_order_relaxed);
		uint64_t iova = va + pt->iova_base;

		if (!pte)
			continue;
		if (va >= pt->va_limit) {
			pt_check_fail(c, d, iova, pte, "entry beyond the input range");
			continue;
		}
		if (!(pte & pt->valid_mask)) {
			pt_check_fail(c, d, iova, pte, "non-present entry not zero");
			continue;
		}
		if (!last && pt_is_table(pt, pte)) {
			_Atomic uint64_t *child = pt_table_ptr(pt, pte);

			if ((pte & ~pt->table_addr_mask) != pt->table_bits) {
				pt_check_fail(c, d, iova, pte, "table descriptor with stray bits");
				continue;
			}
			if (!child || ((uintptr_t)child & (pt->table_bytes - 1))) {
				pt_check_fail(c, d, iova, pte, "table address null or misaligned");
				continue;
			}
			c->tables++;
			pt_check_table(pt, child, d + 1, va, c);
			continue;
		}
		if (!l->leaf_ok) {
			pt_check_fail(c, d, iova, pte, "leaf at a depth the page sizes forbid");
			continue;
		}
		unsigned int prot = pt->ops->leaf_prot(pt, pte);
		uint64_t pa = pt_oa_decode(pt, pte) & ~(l->size - 1);

		if (!(prot & (DG_PROT_READ | DG_PROT_WRITE)))
			pt_check_fail(c, d, iova, pte, "leaf grants neither read nor write");
		else if (pte != (pt_oa_encode(pt, pa) | pt->leaf_tmpl[prot][d]))
			pt_check_fail(c, d, iova, pte, "leaf encoding differs from the format's");
		else if (pa >= pt->oa_limit || l->size > pt->oa_limit - pa)
			pt_check_fail(c, d, iova, pte, "leaf output beyond oas");
	}
}

int dg_pt_check(const struct dg_pt *pt, FILE *why)
{
	struct pt_check c = {.why = why};
	uint64_t root = (uint64_t)(uintptr_t)pt->root;
	uint64_t allocated = atomic_load_explicit(&pt->nr_tables, memory_order_relaxed);
	uint64_t pending = atomic_load_explicit(&pt->nr_pending, memory_order_relaxed);

	if (!root || (root & (pt->lvl[0].table_bytes - 1)))
		pt_check_fail(&c, 0, 0, root, "root null or misaligned");
	else
		pt_check_table(pt, pt->root, 0, 0, &c);
	if (c.tables + 1 != allocated - pending) {
		if (why)
			fprintf(why,
				"pt check: %" PRIu64 " tables linked (root included) but %" PRIu64
				" allocated - %" PRIu64 " on gathers\n",
				c.tables + 1, allocated, pending);
		c.errors++;
	}
	if (c.errors && why && c.errors > PT_CHECK_MAX_REPORTS)
		fprintf(why, "pt check: %u problems in all\n", c.errors);
	return c.errors ? -EUCLEAN : 0;
}

static void pt_dump_table(const struct dg_pt *pt, _Atomic uint64_t *table, unsigned int d,
			  uint64_t va, FILE *out)
{
	const struct pt_level *l = &pt->lvl[d];
	bool last = d == pt->depth - 1;

	for (uint64_t i = 0; i <= l->index_mask; i++, va += l->size) {
		uint64_t pte = atomic_load_explicit(&table[i], memory_order_relaxed);

		if (!(pte & pt->valid_mask))
			continue;
		fprintf(out, "%*s[%" PRIu64 "] iova 0x%" PRIx64 " pte 0x%016" PRIx64, (int)(2 * d),
			"", i, va + pt->iova_base, pte);
		if (!last && pt_is_table(pt, pte)) {
			fprintf(out, " table L%u\n", l->hw_level);
			pt_dump_table(pt, pt_table_ptr(pt, pte), d + 1, va, out);
		} else {
			fprintf(out, " leaf L%u size 0x%" PRIx64 " -> 0x%" PRIx64 " prot 0x%x\n",
				l->hw_level, l->size, pt_oa_decode(pt, pte) & ~(l->size - 1),
				pt->ops->leaf_prot(pt, pte));
		}
	}
}

void dg_pt_dump(const struct dg_pt *pt, FILE *out)
{
	fprintf(out,
		"%s: ias %u oas %u granule 0x%" PRIx64 " pages 0x%" PRIx64
		" depth %u root 0x%" PRIx64 " tables %" PRIu64 "\n",
		dg_pt_format_name(pt->geo.format), pt->geo.ias, pt->geo.oas, pt->geo.granule,
		pt->geo.pgsize_bitmap, pt->depth, dg_pt_root(pt), dg_pt_table_pages(pt));
	pt_dump_table(pt, pt->root, 0, 0, out);
}
