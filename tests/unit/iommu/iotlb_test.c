/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/iotlb_test.c - the per-agent IOTLB and walk cache alone: the one-probe
 * hit test (tag, domain, permission), page sizes, precise range and domain invalidation
 * (neighbours survive), hits independent of how many entries and in which order they were
 * inserted, and the walk cache's deepest-first lookup.
 */
#include "iommu/iotlb.h"

#include <dmaguard/dev.h>

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include "../../test_rand.h"

#define K4 0x1000ull
#define M2 0x200000ull
#define G1 0x40000000ull

static const struct iotlb_ent *probe_any(const struct iotlb *t, uint32_t did, uint64_t iova,
					 unsigned int access)
{
	uint64_t tag = (uint64_t)did << IOTLB_DID_SHIFT | IOTLB_PERM_MASK;

	for (unsigned int i = 0; i < t->nr_levels; i++) {
		const struct iotlb_ent *e =
			iotlb_probe(&t->lvl[i], iova, tag, ~IOTLB_PERM_MASK | access);
		if (e)
			return e;
	}
	return NULL;
}

static void test_probe_semantics(void **state)
{
	struct iotlb t;
	const struct iotlb_ent *e;

	(void)state;
	assert_int_equal(iotlb_init(&t, 64, 8), 0);
	iotlb_configure(&t, K4 | M2 | G1);
	assert_int_equal(t.nr_levels, 3);
	assert_int_equal(probe_any(&t, 1, 0x5000, DG_ACCESS_READ), NULL); /* empty */

	assert_int_equal(iotlb_insert(&t, 1, 0x5123, K4, 0x777000, DG_PROT_READ), 0);
	e = probe_any(&t, 1, 0x5fff, DG_ACCESS_READ);
	assert_non_null(e);
	assert_int_equal(0x5fff + e->delta, 0x777fff);
	assert_null(probe_any(&t, 1, 0x5000, DG_ACCESS_WRITE));			 /* perm */
	assert_null(probe_any(&t, 1, 0x5000, DG_ACCESS_READ | DG_ACCESS_WRITE)); /* perm */
	assert_null(probe_any(&t, 2, 0x5000, DG_ACCESS_READ));			 /* domain */
	assert_null(probe_any(&t, 1, 0x6000, DG_ACCESS_READ));			 /* page */
	assert_null(probe_any(&t, 1, 0x4fff, DG_ACCESS_READ));

	/* A write-only page, a 2M page and a 1G page, all at once. */
	assert_int_equal(iotlb_insert(&t, 1, 0x9000, K4, 0x1000, DG_PROT_WRITE), 0);
	assert_non_null(probe_any(&t, 1, 0x9000, DG_ACCESS_WRITE));
	assert_null(probe_any(&t, 1, 0x9000, DG_ACCESS_READ));
	assert_int_equal(
		iotlb_insert(&t, 1, 0x40200000, M2, 0x80000000, DG_PROT_READ | DG_PROT_WRITE), 1);
	e = probe_any(&t, 1, 0x403fffff, DG_ACCESS_READ | DG_ACCESS_WRITE);
	assert_non_null(e);
	assert_int_equal(0x403fffff + e->delta, 0x801fffff);
	assert_int_equal(iotlb_insert(&t, 3, 0x80000000, G1, 0xc0000000, DG_PROT_READ), 2);
	e = probe_any(&t, 3, 0xbfffffff, DG_ACCESS_READ);
	assert_non_null(e);
	assert_int_equal(0xbfffffff + e->delta, 0xffffffff);
	/* A page size the levels do not hold is not cached. */
	assert_int_equal(iotlb_insert(&t, 1, 0, 1ull << 39, 0, DG_PROT_READ), -1);
	assert_int_equal(iotlb_count(&t), 4);
	assert_int_equal(iotlb_check(&t, stderr), 0);

	/* iotlb_find ignores permissions. */
	assert_int_equal(iotlb_find(&t, 1, 0x9abc, &e), 0);
	assert_int_equal(e->key & IOTLB_PERM_MASK, DG_PROT_WRITE);
	assert_int_equal(iotlb_find(&t, 1, 0x40300000, &e), 1);
	assert_int_equal(iotlb_find(&t, 2, 0x9abc, &e), -1);
	iotlb_fini(&t);
}

static void test_inval_range_precise(void **state)
{
	struct iotlb t;

	(void)state;
	assert_int_equal(iotlb_init(&t, 1024, 16), 0);
	iotlb_configure(&t, K4 | M2);
	for (uint64_t p = 0; p < 64; p++) {
		assert_int_equal(iotlb_insert(&t, 1, p * K4, K4, 0x100000 + p * K4, DG_PROT_READ),
				 0);
		assert_int_equal(iotlb_insert(&t, 2, p * K4, K4, 0x100000 + p * K4, DG_PROT_READ),
				 0);
	}
	/* Domain 2's entries collide with domain 1's slots: only one of each pair survives. */
	for (uint64_t p = 0; p < 64; p++)
		assert_non_null(probe_any(&t, 2, p * K4, DG_ACCESS_READ));
	for (uint64_t p = 0; p < 64; p++)
		assert_int_equal(iotlb_insert(&t, 1, (p + 1024) * K4, K4, p * K4, DG_PROT_READ), 0);
	iotlb_flush(&t);
	for (uint64_t p = 0; p < 64; p++)
		assert_int_equal(iotlb_insert(&t, 1, p * K4, K4, 0x100000 + p * K4, DG_PROT_READ),
				 0);
	assert_int_equal(iotlb_insert(&t, 1, M2, M2, 4 * M2, DG_PROT_READ), 1);
	/* [8 pages, 16 pages) of domain 1; domain 7 asks for nothing it owns. */
	assert_int_equal(iotlb_inval_range(&t, 7, 0, 64 * K4 - 1), 0);
	assert_int_equal(iotlb_inval_range(&t, 1, 8 * K4, 16 * K4 - 1), 8);
	for (uint64_t p = 0; p < 64; p++) {
		bool gone = p >= 8 && p < 16;
		assert_true(!probe_any(&t, 1, p * K4, DG_ACCESS_READ) == gone);
	}
	assert_non_null(probe_any(&t, 1, M2 + 5, DG_ACCESS_READ));
	/* A 4K block inside the 2M page takes the whole 2M entry, nothing else. */
	assert_int_equal(iotlb_inval_range(&t, 1, M2 + 0x3000, M2 + 0x3fff), 1);
	assert_null(probe_any(&t, 1, M2, DG_ACCESS_READ));
	/* A range wider than the table takes the scan path: everything of domain 1 below 1G. */
	assert_int_equal(iotlb_inval_range(&t, 1, 0, G1 - 1), 56);
	assert_int_equal(iotlb_count(&t), 0);
	/* The range reaching 2^64 - 1 does not wrap. */
	assert_int_equal(iotlb_insert(&t, 1, UINT64_MAX - K4 + 1, K4, 0, DG_PROT_READ), 0);
	assert_int_equal(iotlb_inval_range(&t, 1, UINT64_MAX - K4 + 1, UINT64_MAX), 1);
	iotlb_fini(&t);
}

/*
 * A page-selective range whose slots wrap around the end of the table (16 sets: pages 12..19
 * sit in slots 12..15 and 0..3) drops exactly its pages, whatever their permission: not the
 * neighbours before and after it, not another page that took one of its slots (page 30 in
 * slot 14), not another tag's entry, and the counts add up.
 */
static void test_inval_range_wraps(void **state)
{
	struct iotlb t;

	(void)state;
	assert_int_equal(iotlb_init(&t, 16, 4), 0);
	iotlb_configure(&t, K4);
	for (uint64_t p = 11; p <= 20; p++)
		assert_int_equal(iotlb_insert(&t, 1, p * K4, K4, 0x100000 + p * K4,
					      p == 13 ? DG_PROT_WRITE : DG_PROT_READ),
				 0);
	assert_int_equal(iotlb_insert(&t, 1, 30 * K4, K4, 0x300000, DG_PROT_READ), 0); /* slot 14 */
	assert_int_equal(iotlb_insert(&t, 2, 37 * K4, K4, 0x300000, DG_PROT_READ), 0); /* slot 5 */
	assert_int_equal(iotlb_count(&t), 11);
	assert_int_equal(iotlb_inval_range(&t, 1, 12 * K4, 20 * K4 - 1), 7);
	for (uint64_t p = 11; p <= 20; p++) {
		bool gone = p >= 12 && p < 20;
		unsigned int acc = p == 13 ? DG_ACCESS_WRITE : DG_ACCESS_READ;

		assert_true(!probe_any(&t, 1, p * K4, acc) == gone);
	}
	assert_non_null(probe_any(&t, 1, 30 * K4, DG_ACCESS_READ));
	assert_non_null(probe_any(&t, 2, 37 * K4, DG_ACCESS_READ));
	assert_int_equal(iotlb_count(&t), 4);
	/* The same range again: nothing left to drop; 15 pages (one short of a scan) wrapping
	   from slot 15: page 30 is in it now, page 11 and page 37 (domain 2) are not. */
	assert_int_equal(iotlb_inval_range(&t, 1, 12 * K4, 20 * K4 - 1), 0);
	assert_int_equal(iotlb_inval_range(&t, 1, 15 * K4, 30 * K4 - 1), 1); /* page 20 */
	assert_int_equal(iotlb_inval_range(&t, 1, 30 * K4, 44 * K4 - 1), 1); /* page 30 */
	assert_non_null(probe_any(&t, 1, 11 * K4, DG_ACCESS_READ));
	assert_non_null(probe_any(&t, 2, 37 * K4, DG_ACCESS_READ));
	assert_int_equal(iotlb_check(&t, stderr), 0);
	iotlb_fini(&t);
}

static void test_inval_domain(void **state)
{
	struct iotlb t;

	(void)state;
	assert_int_equal(iotlb_init(&t, 256, 16), 0);
	iotlb_configure(&t, K4 | M2);
	for (uint64_t p = 0; p < 100; p++)
		iotlb_insert(&t, (uint32_t)(p % 3) + 1, p * K4, K4, 0, DG_PROT_READ);
	iotlb_insert(&t, 2, 0x40000000, M2, 0, DG_PROT_READ);
	assert_int_equal(iotlb_inval_domain(&t, 2), 34);
	for (uint64_t p = 0; p < 100; p++)
		assert_true(!probe_any(&t, (uint32_t)(p % 3) + 1, p * K4, DG_ACCESS_READ) ==
			    (p % 3 == 1));
	assert_int_equal(iotlb_check(&t, stderr), 0);
	iotlb_fini(&t);
}

/*
 * Hits do not depend on the number of entries or their order: fill a table with N entries
 * that all fit (consecutive pages, distinct slots) in forward, reverse and shuffled order;
 * the hot entry hits in each, at the same slot.
 */
static void test_order_independence(void **state)
{
	static const unsigned int counts[] = {1, 16, 1024};
	struct iotlb t;
	uint64_t perm[1024];

	(void)state;
	assert_int_equal(iotlb_init(&t, 1024, 8), 0);
	iotlb_configure(&t, K4);
	for (unsigned int c = 0; c < 3; c++) {
		unsigned int n = counts[c];

		for (unsigned int order = 0; order < 3; order++) {
			for (unsigned int i = 0; i < n; i++)
				perm[i] = order == 1 ? n - 1 - i : i;
			if (order == 2) {
				srand(n);
				for (unsigned int i = n - 1; i > 0; i--) {
					unsigned int j = (unsigned int)rand() % (i + 1);
					uint64_t x = perm[i];
					perm[i] = perm[j];
					perm[j] = x;
				}
			}
			iotlb_flush(&t);
			for (unsigned int i = 0; i < n; i++)
				iotlb_insert(&t, 1, (0x100000 + perm[i]) * K4, K4, perm[i] * K4,
					     DG_PROT_READ);
			assert_int_equal(iotlb_count(&t), n);
			for (unsigned int i = 0; i < n; i++) {
				const struct iotlb_ent *e =
					probe_any(&t, 1, (0x100000 + i) * K4, DG_ACCESS_READ);
				assert_non_null(e);
				assert_int_equal((0x100000 + i) * K4 + e->delta, i * K4);
			}
		}
	}
	iotlb_fini(&t);
}

static void test_walk_cache(void **state)
{
	struct walk_cache wc;
	unsigned int shift[DG_PT_MAX_DEPTH] = {0, 39, 30, 21, 0};
	int tables[4];
	const void *tab = NULL;

	(void)state;
	assert_int_equal(wc_init(&wc, 16), 0);
	wc_configure(&wc, 3, shift);
	assert_int_equal(wc_lookup(&wc, 1, 0x1234000, &tab), 0);
	wc_insert(&wc, 1, 0x1234000, 1, &tables[1]);
	wc_insert(&wc, 1, 0x1234000, 2, &tables[2]);
	assert_int_equal(wc_lookup(&wc, 1, 0x1234000, &tab), 2);
	assert_ptr_equal(tab, &tables[2]);
	wc_insert(&wc, 1, 0x1234000, 3, &tables[3]);
	assert_int_equal(wc_lookup(&wc, 1, 0x1234000, &tab), 3);
	assert_ptr_equal(tab, &tables[3]);
	/* Another 2M region in the same 1G: depth 2 serves it. */
	assert_int_equal(wc_lookup(&wc, 1, 0x1634000, &tab), 2);
	assert_int_equal(wc_lookup(&wc, 2, 0x1234000, &tab), 0);
	/*
	 * Like a VT-d paging-structure cache, a range drops every entry used to translate it:
	 * the 1G and 512G regions above it, but not the 2M region next door.
	 */
	assert_int_equal(wc_inval_range(&wc, 1, 0x1634000, 0x1634fff), 2);
	assert_int_equal(wc_lookup(&wc, 1, 0x1234000, &tab), 3);
	assert_int_equal(wc_inval_range(&wc, 1, 0x1200000, 0x13fffff), 1);
	assert_int_equal(wc_lookup(&wc, 1, 0x1234000, &tab), 0);
	wc_insert(&wc, 1, 0x1234000, 2, &tables[2]);
	wc_insert(&wc, 3, 0x41234000, 2, &tables[2]);
	assert_int_equal(wc_inval_domain(&wc, 1), 1);
	assert_int_equal(wc_lookup(&wc, 3, 0x41234000, &tab), 2);
	assert_int_equal(wc_lookup(&wc, 1, 0x1234000, &tab), 0);
	wc_insert(&wc, 3, 0x1234000, 4, &tables[0]); /* beyond nr_depths: ignored */
	wc_flush(&wc);
	assert_int_equal(wc_lookup(&wc, 3, 0x41234000, &tab), 0);
	wc_fini(&wc);
}

/*
 * The walk cache's "last" entry never outlives what it copies: random inserts, range and
 * domain invalidations and flushes against a model of what is still valid; every table a
 * lookup returns must be the model's for that (domain, depth, region). A lookup may miss (the
 * cache is lossy), never return a dropped table.
 */
#define WM_MAX 4096
struct wm_ent {
	uint32_t did;
	unsigned int d;
	uint64_t base;
	uintptr_t table;
};

static uint64_t wm_rnd(uint64_t *s)
{
	return xorshift64(s);
}

static void test_walk_cache_last_model(void **state)
{
	static struct wm_ent m[WM_MAX];
	unsigned int shift[DG_PT_MAX_DEPTH] = {0, 39, 30, 21, 0}, n = 0;
	struct walk_cache wc;
	uint64_t seed = 12345;
	uintptr_t next_table = 16;

	(void)state;
	assert_int_equal(wc_init(&wc, 16), 0);
	wc_configure(&wc, 3, shift);
	for (unsigned int step = 0; step < 50000; step++) {
		unsigned int op = (unsigned int)(wm_rnd(&seed) % 100);
		uint32_t did = 1 + (uint32_t)(wm_rnd(&seed) % 2);
		/* 64 2M regions over two 1G regions: deep-row collisions and shared parents */
		uint64_t iova = (wm_rnd(&seed) % 64) << 21 | (wm_rnd(&seed) % 2) << 30 |
				(wm_rnd(&seed) & 0x1fffff);
		const void *tab = NULL;

		if (op < 45) {
			unsigned int d = 1 + (unsigned int)(wm_rnd(&seed) % 3);
			uint64_t base = iova >> shift[d] << shift[d];
			unsigned int k;

			wc_insert(&wc, did, iova, d, (const void *)next_table);
			for (k = 0; k < n; k++)
				if (m[k].did == did && m[k].d == d && m[k].base == base)
					break;
			if (k == n) {
				if (n == WM_MAX)
					continue;
				n++;
			}
			m[k] = (struct wm_ent){did, d, base, next_table};
			next_table += 16;
		} else if (op < 85) {
			unsigned int d = wc_lookup(&wc, did, iova, &tab);

			if (d) {
				uint64_t base = iova >> shift[d] << shift[d];
				bool found = false;

				for (unsigned int k = 0; k < n; k++)
					if (m[k].did == did && m[k].d == d && m[k].base == base) {
						assert_int_equal((uintptr_t)tab, m[k].table);
						found = true;
					}
				assert_true(found);
			}
		} else if (op < 97) {
			uint64_t len = 1ull << (12 + wm_rnd(&seed) % 20), a = iova & ~(len - 1);

			wc_inval_range(&wc, did, a, a + len - 1);
			for (unsigned int k = 0; k < n;) {
				uint64_t last = m[k].base + ((1ull << shift[m[k].d]) - 1);

				if (m[k].did == did && m[k].base <= a + len - 1 && last >= a)
					m[k] = m[--n];
				else
					k++;
			}
		} else if (op < 99) {
			wc_inval_domain(&wc, did);
			for (unsigned int k = 0; k < n;) {
				if (m[k].did == did)
					m[k] = m[--n];
				else
					k++;
			}
		} else {
			wc_flush(&wc);
			n = 0;
		}
	}
	wc_fini(&wc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_probe_semantics),
		cmocka_unit_test(test_inval_range_precise),
		cmocka_unit_test(test_inval_range_wraps),
		cmocka_unit_test(test_inval_domain),
		cmocka_unit_test(test_order_independence),
		cmocka_unit_test(test_walk_cache),
		cmocka_unit_test(test_walk_cache_last_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
