/* SPDX-License-Identifier: MIT */
/*
 * iommu/iotlb.c - per-agent IOTLB (direct-mapped hash per page size) and page-walk cache
 * (direct-mapped per table depth). Layout and key encoding are explained in iotlb.h.
 *
 * Invalidation of a block walks the slots its pages hash to when there are fewer of them than
 * sets, and scans the whole table otherwise, so one command costs at most one pass over the
 * table whatever its size (hardware does the same with its address-mask match).
 */
#include "iommu/iotlb.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct iotlb_ent *alloc_table(uint32_t sets)
{
	return aligned_alloc(DG_CACHELINE,
			     dg_align_up((uint64_t)sets * sizeof(struct iotlb_ent), DG_CACHELINE));
}

int iotlb_init(struct iotlb *t, uint32_t small, uint32_t large)
{
	memset(t, 0, sizeof(*t));
	for (unsigned int i = 0; i < IOTLB_STREAMS; i++)
		t->miss_line[i] = IOTLB_NO_LINE;
	for (unsigned int i = 0; i < IOTLB_MAX_LEVELS; i++) {
		t->cap[i] = i ? large : small;
		t->mem[i] = alloc_table(t->cap[i]);
		if (!t->mem[i]) {
			iotlb_fini(t);
			return -ENOMEM;
		}
		memset(t->mem[i], 0, (size_t)t->cap[i] * sizeof(struct iotlb_ent));
	}
	return 0;
}

void iotlb_fini(struct iotlb *t)
{
	for (unsigned int i = 0; i < IOTLB_MAX_LEVELS; i++) {
		free(t->mem[i]);
		t->mem[i] = NULL;
	}
	t->nr_levels = 0;
}

void iotlb_configure(struct iotlb *t, uint64_t pgsize_bitmap)
{
	unsigned int n = 0;

	while (pgsize_bitmap && n < IOTLB_MAX_LEVELS) {
		unsigned int shift = (unsigned int)__builtin_ctzll(pgsize_bitmap);
		struct iotlb_level *l = &t->lvl[n];

		pgsize_bitmap &= pgsize_bitmap - 1;
		l->ent = t->mem[n];
		l->shift = shift;
		l->base_mask = ~((1ull << shift) - 1);
		l->set_mask = t->cap[n] - 1;
		l->off_shift = shift - IOTLB_ENT_SHIFT;
		l->off_mask = l->set_mask << IOTLB_ENT_SHIFT;
		n++;
	}
	for (unsigned int i = n; i < IOTLB_MAX_LEVELS; i++)
		memset(&t->lvl[i], 0, sizeof(t->lvl[i]));
	t->nr_levels = n;
	t->no_small = false;
	iotlb_flush(t);
}

static inline uint32_t ent_did(uint64_t key)
{
	return (uint32_t)((key >> IOTLB_DID_SHIFT) & IOTLB_DID_MASK);
}

int iotlb_find(const struct iotlb *t, uint32_t did, uint64_t iova, const struct iotlb_ent **out)
{
	uint64_t tag = (uint64_t)did << IOTLB_DID_SHIFT;

	for (unsigned int i = 0; i < t->nr_levels; i++) {
		const struct iotlb_level *l = &t->lvl[i];
		const struct iotlb_ent *e = iotlb_slot(l, iova >> l->shift);

		if (e->key && ((e->key ^ (iova & l->base_mask) ^ tag) & ~IOTLB_PERM_MASK) == 0) {
			*out = e;
			return (int)i;
		}
	}
	return -1;
}

int iotlb_insert(struct iotlb *t, uint32_t did, uint64_t iova, uint64_t pgsize, uint64_t phys,
		 unsigned int perm)
{
	unsigned int shift = dg_ilog2(pgsize);

	for (unsigned int i = t->no_small; i < t->nr_levels; i++) {
		struct iotlb_level *l = &t->lvl[i];
		uint64_t base = iova & l->base_mask;
		struct iotlb_ent *e;

		if (l->shift != shift)
			continue;
		e = iotlb_slot(l, iova >> shift);
		t->used |= 1u << i;
		e->key = base | (uint64_t)did << IOTLB_DID_SHIFT | (perm & IOTLB_PERM_MASK);
		e->delta = (phys & l->base_mask) - base;
		return (int)i;
	}
	return -1;
}

static bool ent_overlaps(uint64_t key, unsigned int shift, uint64_t addr, uint64_t last)
{
	uint64_t base = key & ~((1ull << shift) - 1);

	return base <= last && base + ((1ull << shift) - 1) >= addr;
}

/*
 * Drop the entries of the @cnt (<= sets) consecutive pages from page number @first whose key
 * without permission is @want for the first page (then + one page per page): their slots
 * are consecutive but for one wrap, so the loop walks a pointer and steps the expected key,
 * one load, one compare and the store of a match per page (a page-selective command of a
 * strict ring's batch: 64 pages, 14.4 instructions per page in bench iotlb ring_inval, 21.6
 * through iotlb_slot() per page). A non-zero @want (the tag, >= 1 for every translated
 * context) never matches an empty slot; a zero one (tag 0, page 0: tests only) is refused by
 * the emptiness test.
 */
static dg_always_inline unsigned int inval_pages(struct iotlb_level *l, uint64_t first,
						 uint64_t cnt, uint64_t want)
{
	const uint64_t step = 1ull << l->shift;
	uint64_t s = first & l->set_mask;
	unsigned int n = 0;

	if (cnt == 1) { /* one page (of a large page size, usually): its slot */
		struct iotlb_ent *e = &l->ent[s];

		if ((e->key & ~IOTLB_PERM_MASK) != want || !e->key)
			return 0;
		e->key = 0;
		return 1;
	}
	for (;;) { /* at most twice: up to the end of the table, then from its start */
		uint64_t run = l->set_mask + 1 - s < cnt ? l->set_mask + 1 - s : cnt;
		struct iotlb_ent *e = &l->ent[s], *end = e + run;

		for (; e != end; e++, want += step) {
			uint64_t key = e->key;

			/* one compare: this page and this tag, whatever the permission */
			if ((key & ~IOTLB_PERM_MASK) == want && key) {
				e->key = 0;
				n++;
			}
		}
		cnt -= run;
		if (!cnt)
			return n;
		s = 0;
	}
}

unsigned int iotlb_inval_range(struct iotlb *t, uint32_t did, uint64_t addr, uint64_t last)
{
	unsigned int n = 0;

	for (unsigned int i = t->no_small; i < t->nr_levels; i++) {
		struct iotlb_level *l = &t->lvl[i];
		uint64_t first = addr >> l->shift, lastpn = last >> l->shift;

		if (i && !(t->used & 1u << i))
			continue; /* empty since the last flush */
		if (lastpn - first >= l->set_mask) {
			for (uint64_t s = 0; s <= l->set_mask; s++) {
				struct iotlb_ent *e = &l->ent[s];

				if (e->key && ent_did(e->key) == did &&
				    ent_overlaps(e->key, l->shift, addr, last)) {
					e->key = 0;
					n++;
				}
			}
			continue;
		}
		n += inval_pages(l, first, lastpn - first + 1,
				 first << l->shift | (uint64_t)did << IOTLB_DID_SHIFT);
	}
	return n;
}

unsigned int iotlb_inval_domain(struct iotlb *t, uint32_t did)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < t->nr_levels; i++) {
		struct iotlb_level *l = &t->lvl[i];

		if (i && !(t->used & 1u << i))
			continue; /* empty since the last flush */
		for (uint64_t s = 0; s <= l->set_mask; s++) {
			if (l->ent[s].key && ent_did(l->ent[s].key) == did) {
				l->ent[s].key = 0;
				n++;
			}
		}
	}
	return n;
}

void iotlb_flush(struct iotlb *t)
{
	for (unsigned int i = 0; i < t->nr_levels; i++)
		memset(t->lvl[i].ent, 0, (t->lvl[i].set_mask + 1) * sizeof(struct iotlb_ent));
	t->used = 0;
}

unsigned int iotlb_count(const struct iotlb *t)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < t->nr_levels; i++)
		for (uint64_t s = 0; s <= t->lvl[i].set_mask; s++)
			n += t->lvl[i].ent[s].key != 0;
	return n;
}

unsigned int iotlb_count_tag(const struct iotlb *t, uint32_t did)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < t->nr_levels; i++)
		for (uint64_t s = 0; s <= t->lvl[i].set_mask; s++)
			n += t->lvl[i].ent[s].key && ent_did(t->lvl[i].ent[s].key) == did;
	return n;
}

int iotlb_check(const struct iotlb *t, FILE *why)
{
	for (unsigned int i = 0; i < t->nr_levels; i++) {
		const struct iotlb_level *l = &t->lvl[i];

		if (i && l->shift <= t->lvl[i - 1].shift) {
			if (why)
				fprintf(why, "iotlb: level %u not ascending\n", i);
			return -EUCLEAN;
		}
		for (uint64_t s = 0; s <= l->set_mask; s++) {
			uint64_t key = l->ent[s].key;

			if (!key)
				continue;
			if ((i == 0 && t->no_small) || (i && !(t->used & 1u << i)) ||
			    !(key & IOTLB_PERM_MASK) || !ent_did(key) ||
			    iotlb_slot(l, key >> l->shift) != &l->ent[s] ||
			    ((key & ~(IOTLB_DID_MASK << IOTLB_DID_SHIFT | IOTLB_PERM_MASK)) &
			     ~l->base_mask) ||
			    ((l->ent[s].delta) & ~l->base_mask)) {
				if (why)
					fprintf(why,
						"iotlb: bad entry level %u slot %llu key %#llx\n",
						i, (unsigned long long)s, (unsigned long long)key);
				return -EUCLEAN;
			}
		}
	}
	return 0;
}

/* ---- page-walk cache ---------------------------------------------------------------- */

int wc_init(struct walk_cache *wc, uint32_t sets)
{
	memset(wc, 0, sizeof(*wc));
	wc->ent = calloc((size_t)sets * DG_PT_MAX_DEPTH, sizeof(*wc->ent));
	if (!wc->ent)
		return -ENOMEM;
	wc->set_mask = sets - 1;
	wc->fold = dg_ilog2(sets);
	return 0;
}

void wc_fini(struct walk_cache *wc)
{
	free(wc->ent);
	wc->ent = NULL;
	wc->nr_depths = 0;
}

void wc_configure(struct walk_cache *wc, unsigned int nr_depths, const unsigned int *shift)
{
	wc->nr_depths = nr_depths < DG_PT_MAX_DEPTH ? nr_depths : DG_PT_MAX_DEPTH - 1;
	for (unsigned int d = 0; d < DG_PT_MAX_DEPTH; d++)
		wc->shift[d] = d && d <= wc->nr_depths ? shift[d] : 0;
	wc_flush(wc);
}

static inline uint64_t wc_key(const struct walk_cache *wc, unsigned int d, uint32_t did,
			      uint64_t iova)
{
	return (iova >> wc->shift[d] << wc->shift[d]) | (uint64_t)did << IOTLB_DID_SHIFT | 1;
}

unsigned int wc_lookup(struct walk_cache *wc, uint32_t did, uint64_t iova, const void **table)
{
	unsigned int d = wc_lookup_last(wc, did, iova, table);

	if (d)
		return d;
	for (d = wc->nr_depths; d >= 1; d--) {
		const struct wc_ent *e = wc_slot(wc, d, iova >> wc->shift[d]);

		if (e->key == wc_key(wc, d, did, iova)) {
			*table = e->table;
			if (d == wc->nr_depths) {
				wc->last = *e;
				wc->last_depth = d;
			}
			return d;
		}
	}
	return 0;
}

void wc_insert(struct walk_cache *wc, uint32_t did, uint64_t iova, unsigned int depth,
	       const void *table)
{
	struct wc_ent *e;

	if (!depth || depth > wc->nr_depths || !table)
		return;
	e = wc_slot(wc, depth, iova >> wc->shift[depth]);
	e->key = wc_key(wc, depth, did, iova);
	e->table = table;
	if (depth == wc->nr_depths) {
		wc->last = *e;
		wc->last_depth = depth;
	}
}

/* Drop the last entry if it is of @did and its region overlaps [addr, last]. */
static void wc_drop_last(struct walk_cache *wc, uint32_t did, uint64_t addr, uint64_t last)
{
	if (wc->last_depth && ent_did(wc->last.key) == did &&
	    ent_overlaps(wc->last.key, wc->shift[wc->last_depth], addr, last)) {
		wc->last_depth = 0;
		wc->last.key = 0;
	}
}

unsigned int wc_inval_range(struct walk_cache *wc, uint32_t did, uint64_t addr, uint64_t last)
{
	unsigned int n = 0;

	wc_drop_last(wc, did, addr, last);
	for (unsigned int d = 1; d <= wc->nr_depths; d++) {
		unsigned int sh = wc->shift[d];
		uint64_t first = addr >> sh, lastrn = last >> sh;

		if (lastrn - first >= wc->set_mask) {
			for (uint64_t s = 0; s <= wc->set_mask; s++) {
				struct wc_ent *e = &wc->ent[(uint64_t)d * (wc->set_mask + 1) + s];

				if (e->key && ent_did(e->key) == did &&
				    ent_overlaps(e->key, sh, addr, last)) {
					e->key = 0;
					n++;
				}
			}
			continue;
		}
		for (uint64_t rn = first;; rn++) {
			struct wc_ent *e = wc_slot(wc, d, rn);

			if (e->key && ent_did(e->key) == did && (e->key >> sh) == rn) {
				e->key = 0;
				n++;
			}
			if (rn == lastrn)
				break;
		}
	}
	return n;
}

unsigned int wc_inval_domain(struct walk_cache *wc, uint32_t did)
{
	unsigned int n = 0;

	wc_drop_last(wc, did, 0, UINT64_MAX);
	for (uint64_t i = wc->set_mask + 1; i < (uint64_t)DG_PT_MAX_DEPTH * (wc->set_mask + 1);
	     i++) {
		if (wc->ent[i].key && ent_did(wc->ent[i].key) == did) {
			wc->ent[i].key = 0;
			n++;
		}
	}
	return n;
}

void wc_flush(struct walk_cache *wc)
{
	wc->last_depth = 0;
	wc->last.key = 0;
	memset(wc->ent, 0, (size_t)DG_PT_MAX_DEPTH * (wc->set_mask + 1) * sizeof(*wc->ent));
}
