/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of range translation (dev/translate.c translate_range() and its run of IOTLB
 * hits, hit_run()): a range of several pages translated into a scatter-gather list.
 *
 * What must hold, and fails if the run were wrong:
 *  - a warm range gives exactly the segments of the page table (contiguous host pages merged
 *    into one segment, scattered ones one per page, runs in between), for ranges that start
 *    and end inside pages or on their edges, with every page counted once as a hit;
 *  - with fewer sg entries than segments: -ENOSPC, *nr the segments needed, sg[] the first
 *    ones exactly;
 *  - randomized against a reference (the page table read with dg_pt_walk()): 4 KiB pages
 *    mapped to random frames with random permissions, unmapped with a strict invalidation,
 *    some translated alone to warm the IOTLB (a 16-set IOTLB, so a range's slots wrap around
 *    the table and evict one another), then random ranges for read or write: the sg list and
 *    the count equal the reference, every page is one hit or one miss, and a range with an
 *    unmapped or forbidden page fails with its errno and records the fault at that page,
 *    whether the page was cached (refused by the cached permission) or not;
 *  - a range over 4 KiB pages and a 2 MiB page (the run stops at the large page, which the
 *    general path translates) and a range whose entries were made stale by a DOMAIN flush
 *    (the run's probe misses on the old tag, the walk answers).
 */
#include "iommu/iommu_internal.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define K4	   0x1000ull
#define M2	   0x200000ull
#define RW	   (DG_PROT_READ | DG_PROT_WRITE)
#define BASE	   0x40000000ull /* 1 GiB: 2 MiB aligned */
#define NPAGES	   48u
#define MAXSEG	   64u
#define ARENA_SIZE (8ull << 20)
#include "test_arena.h"

#include "test_env.h"
#include "../../test_rand.h"

static bool leaf_direct; /* the *_direct tests: cfg.iotlb_leaf_direct */

static void env_init(struct env *e, uint32_t iotlb_sets, bool auto_offline)
{
	struct dg_pt_geometry g = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	struct dg_iommu_config cfg;

	dg_iommu_config_init(&cfg);
	cfg.log = NULL;
	cfg.iotlb_leaf_direct = leaf_direct;
	cfg.fault_queue_len = 1024;
	if (iotlb_sets)
		cfg.iotlb_entries = iotlb_sets;
	env_open(e, &cfg, &g, auto_offline);
	dg_dev_online(e->dev);			       /* loads the context */
	assert_int_equal(e->dev->direct, leaf_direct); /* VT-d: leaf-direct when asked */
	dg_dev_offline(e->dev);
}

/* Unmap and invalidate (strict): after it the device cannot reach the page. */
static void unmap_strict(struct env *e, uint64_t iova, uint64_t size)
{
	struct dg_pt_gather g;
	uint64_t unmapped;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(e->dom, iova, size, &g, &unmapped), 0);
	dg_dev_offline(e->dev); /* a wait skips an offline device; it catches up when online */
	assert_int_equal(dg_iommu_flush_gather(e->mmu, e->dom, &g), 0);
	dg_dev_online(e->dev);
}

/*
 * The reference: translate [iova, iova + len) for @access page by page from the page table,
 * merging host-contiguous pieces. Returns 0 with the segments and *pages the pages (of any
 * size) translated, or the errno with *bad the address the fault is recorded at (the range
 * start in its first page, else the page base).
 */
static int reference(struct env *e, uint64_t iova, uint64_t len, unsigned int access,
		     struct dg_sg *sg, unsigned int *nr, uint64_t *bad, uint64_t *pages)
{
	uint64_t a = iova, last = iova + len - 1, end_prev = 0;
	unsigned int n = 0;

	*pages = 0;
	for (;;) {
		struct dg_pt_walk w;
		uint64_t page_last, end, host;

		if (dg_pt_walk(dg_domain_pt(e->dom), a, &w)) {
			*bad = a;
			return -EFAULT;
		}
		if (access & ~w.prot) {
			*bad = a;
			return -EACCES;
		}
		page_last = (a & ~(w.pgsize - 1)) + w.pgsize - 1;
		end = page_last < last ? page_last : last;
		host = w.phys;
		if (n && host == end_prev) {
			sg[n - 1].len += end - a + 1;
		} else {
			assert_true(n < MAXSEG);
			sg[n].addr = (void *)(uintptr_t)host;
			sg[n].len = end - a + 1;
			n++;
		}
		end_prev = host + (end - a + 1);
		++*pages;
		if (end == last)
			break;
		a = end + 1;
	}
	*nr = n;
	return 0;
}

/* Translate and compare with the reference, the counters and the fault record. */
static void check_range(struct env *e, uint64_t iova, uint64_t len, unsigned int access,
			unsigned int max)
{
	struct dg_sg got[MAXSEG], want[MAXSEG];
	unsigned int nr = 0, wnr = 0;
	uint64_t bad = 0, pages;
	struct dg_dev_stats a, b;
	int r, wr = reference(e, iova, len, access, want, &wnr, &bad, &pages);

	memset(got, 0xa5, sizeof(got));
	dg_dev_stats(e->dev, &a);
	r = dg_dev_translate(e->dev, iova, len, access, got, max, &nr);
	dg_dev_stats(e->dev, &b);
	if (wr) {
		struct dg_fault f;

		assert_int_equal(r, wr);
		assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), 0);
		assert_int_equal(f.iova, bad);
		assert_int_equal(f.access, access);
		assert_int_equal(f.reason, wr == -EFAULT ? DG_FAULT_UNMAPPED : DG_FAULT_PERM);
		return;
	}
	assert_int_equal(r, wnr > max ? -ENOSPC : 0);
	assert_int_equal(nr, wnr);
	for (unsigned int i = 0; i < wnr && i < max; i++) {
		assert_ptr_equal(got[i].addr, want[i].addr);
		assert_int_equal(got[i].len, want[i].len);
	}
	if (max < MAXSEG) /* nothing written past max */
		assert_int_equal(got[max].len, 0xa5a5a5a5a5a5a5a5ull);
	/* Every page of the range once (a 2 MiB page once): a hit or a miss. */
	assert_int_equal((b.iotlb_hits - a.iotlb_hits) + (b.iotlb_misses - a.iotlb_misses), pages);
}

/* Map page p of BASE to frame f with @prot. */
static void map_page(struct env *e, unsigned int p, unsigned int f, unsigned int prot)
{
	assert_int_equal(dg_domain_map(e->dom, BASE + p * K4, host(f * K4), K4, prot, NULL), 0);
}

static void warm(struct env *e, unsigned int first, unsigned int n)
{
	struct dg_sg sg[1];
	unsigned int nr;

	for (unsigned int p = first; p < first + n; p++)
		assert_int_equal(
			dg_dev_translate(e->dev, BASE + p * K4, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
}

/* ---- warm ranges ------------------------------------------------------------------------ */

static void test_warm_layouts(void **state)
{
	/* Host frame of page p: contiguous, scattered, runs of 3 with gaps. */
	static const struct {
		unsigned int mul, add, run;
	} layouts[] = {{1, 0, 0}, {7, 3, 0}, {1, 0, 3}};
	static const struct {
		uint64_t off, len;
	} ranges[] = {
		{0, 16 * K4},		      /* a TSO send: 16 whole pages */
		{0x123, 16 * K4},	      /* starts inside page 0, ends inside page 16 */
		{K4 - 1, 2},		      /* the last byte of page 0 and the first of page 1 */
		{5 * K4, 3 * K4 + 1},	      /* whole pages and one byte */
		{7 * K4 + 100, 9 * K4 - 200}, /* inside to inside */
		{0, 20 * K4},
	};

	(void)state;
	for (int off = 0; off < 2; off++)
		for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
			struct env e;

			env_init(&e, 0, off == 1);
			for (unsigned int p = 0; p < 24; p++) {
				unsigned int f = layouts[l].run ?
							 p + p / layouts[l].run :
							 (p * layouts[l].mul + layouts[l].add) % 29;

				map_page(&e, p, f, RW);
			}
			warm(&e, 0, 24);
			for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
				struct dg_dev_stats a, b;

				dg_dev_stats(e.dev, &a);
				check_range(&e, BASE + ranges[i].off, ranges[i].len,
					    DG_ACCESS_READ | DG_ACCESS_WRITE, MAXSEG);
				dg_dev_stats(e.dev, &b);
				assert_int_equal(b.iotlb_misses, a.iotlb_misses); /* all warm */
				/* Too few entries: -ENOSPC, the count, the first ones. */
				check_range(&e, BASE + ranges[i].off, ranges[i].len, DG_ACCESS_READ,
					    1);
				check_range(&e, BASE + ranges[i].off, ranges[i].len, DG_ACCESS_READ,
					    3);
			}
			env_fini(&e);
		}
}

/* ---- randomized against the page table ---------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng(void)
{
	return splitmix64(&rng_state);
}

static void run_random(uint32_t sets, bool auto_offline, uint64_t seed, unsigned int steps)
{
	bool mapped[NPAGES] = {0};
	struct env e;

	rng_state = seed;
	env_init(&e, sets, auto_offline);
	for (unsigned int s = 0; s < steps; s++) {
		unsigned int op = (unsigned int)(rng() % 16), p = (unsigned int)(rng() % NPAGES);

		if (op < 4) { /* map a few pages: frames contiguous, in runs or scattered */
			unsigned int n = 1 + (unsigned int)(rng() % 6),
				     f = (unsigned int)(rng() % 64);
			unsigned int prot = rng() % 8 ? RW : 1 + (unsigned int)(rng() % 2);
			bool scatter = rng() % 2;

			for (unsigned int i = 0; i < n && p + i < NPAGES; i++) {
				if (mapped[p + i])
					break;
				map_page(&e, p + i, scatter ? (f + 5 * i) % 64 : f + i, prot);
				mapped[p + i] = true;
			}
		} else if (op < 6) { /* unmap one page, strict */
			if (mapped[p]) {
				unmap_strict(&e, BASE + p * K4, K4);
				mapped[p] = false;
			}
		} else if (op < 8) { /* warm some pages (only the mapped ones translate) */
			struct dg_sg sg[1];
			unsigned int nr;

			for (unsigned int i = 0; i < 4 && p + i < NPAGES; i++)
				if (mapped[p + i])
					assert_int_equal(dg_dev_translate(e.dev,
									  BASE + (p + i) * K4, 1,
									  DG_ACCESS_READ, sg, 1,
									  &nr) != -EFAULT,
							 true);
			while (dg_iommu_fault_pop(e.mmu, &(struct dg_fault){0}) == 0)
				; /* write-only pages refuse the read: recorded, not checked here */
		} else {	  /* a range */
			uint64_t start = BASE + p * K4 + (rng() % 2 ? rng() % K4 : 0);
			uint64_t limit = BASE + NPAGES * K4 - start;
			uint64_t len = 1 + rng() % (rng() % 4 ? 20 * K4 : 2 * K4);
			unsigned int access = 1 + (unsigned int)(rng() % 3);
			unsigned int max = rng() % 8 ? MAXSEG : 1 + (unsigned int)(rng() % 4);

			check_range(&e, start, len < limit ? len : limit, access, max);
		}
		if (s % 8 == 0)
			dg_dev_quiesce(e.dev);
	}
	for (unsigned int p = 0; p < NPAGES; p++)
		if (mapped[p])
			unmap_strict(&e, BASE + p * K4, K4);
	env_fini(&e);
}

static void test_random(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 4; seed++) {
		run_random(16, false, seed, 1500); /* slots wrap, ranges evict themselves */
		run_random(0, false, seed + 100, 1500);
		run_random(16, true, seed + 200, 800); /* the general walk */
	}
}

/* ---- large pages, stale entries ------------------------------------------------------------ */

static void test_large_page(void **state)
{
	struct env e;

	(void)state;
	env_init(&e, 0, false);
	/* Pages BASE + 2M - 4 pages .. : 4 KiB pages, then the 2 MiB page at BASE + 2M. */
	for (unsigned int i = 0; i < 4; i++)
		assert_int_equal(dg_domain_map(e.dom, BASE + M2 - (4 - i) * K4,
					       host(M2 - (4 - i) * K4), K4, RW, NULL),
				 0);
	assert_int_equal(dg_domain_map(e.dom, BASE + M2, host(M2), M2, RW, NULL), 0);
	for (int k = 0; k < 3; k++) /* cold, then warm (the 2 MiB entry in its own level) */
		check_range(&e, BASE + M2 - 4 * K4 + 5, 4 * K4 + 3 * K4, DG_ACCESS_READ, MAXSEG);
	check_range(&e, BASE + M2 - K4, 2 * K4, DG_ACCESS_WRITE, MAXSEG);
	unmap_strict(&e, BASE + M2, M2);
	unmap_strict(&e, BASE + M2 - 4 * K4, 4 * K4);
	env_fini(&e);
}

static void test_stale_tag(void **state)
{
	struct dg_inval_cmd c = {.type = DG_INVAL_DOMAIN, .domain = 1};
	struct dg_dev_stats a, b;
	struct env e;
	uint64_t seq;

	(void)state;
	env_init(&e, 0, false);
	for (unsigned int p = 0; p < 16; p++)
		map_page(&e, p, p, RW);
	warm(&e, 0, 16);
	/* Remap page 5 to another frame with no PAGE invalidation: the DOMAIN flush that
	   follows is what drops its old entry (with every other: a new tag). A run that did
	   not compare the tag would hit the old entry and return frame 5. */
	{
		struct dg_pt_gather g;
		uint64_t unmapped;

		dg_pt_gather_init(&g);
		assert_int_equal(dg_domain_unmap(e.dom, BASE + 5 * K4, K4, &g, &unmapped), 0);
		assert_int_equal(g.nr_tables, 0);
	}
	map_page(&e, 5, 40, RW);
	dg_dev_offline(e.dev);
	assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
	assert_int_equal(dg_inval_wait(e.mmu, seq), 0);
	dg_dev_online(e.dev);
	dg_dev_stats(e.dev, &a);
	check_range(&e, BASE, 16 * K4, DG_ACCESS_READ, MAXSEG); /* 3 segments */
	dg_dev_stats(e.dev, &b);
	assert_true(b.iotlb_misses > a.iotlb_misses);
	unmap_strict(&e, BASE, 16 * K4);
	env_fini(&e);
}

/*
 * A range's sg list is held like any translation: a command published after it is applied at
 * the device's next call but not acknowledged (dg_inval_done() stays false) until the device
 * quiesces, for a warm range (the run alone), a cold one and one through the general walk.
 */
static void test_range_holds(void **state)
{
	(void)state;
	for (int k = 0; k < 2; k++) {
		struct dg_inval_cmd c = {
			.type = DG_INVAL_PAGE, .domain = 1, .iova = BASE + 40 * K4, .size = K4};
		struct dg_sg sg[4];
		unsigned int nr;
		uint64_t seq;
		struct env e;

		env_init(&e, 0, false);
		for (unsigned int p = 0; p < 16; p++)
			map_page(&e, p, p, RW);
		if (k == 0)
			warm(&e, 0, 16);
		dg_dev_quiesce(e.dev);
		assert_int_equal(dg_dev_translate(e.dev, BASE + 8, 16 * K4 - 16, DG_ACCESS_READ, sg,
						  4, &nr),
				 0);
		assert_int_equal(nr, 1);
		assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
		assert_false(dg_inval_done(e.mmu, seq));
		/* The next call applies it (a one-page hit catches up first) but holds the ack. */
		assert_int_equal(dg_dev_translate(e.dev, BASE + 3 * K4, 2 * K4, DG_ACCESS_READ, sg,
						  4, &nr),
				 0);
		assert_true(e.dev->seen >= seq); /* applied */
		assert_false(dg_inval_done(e.mmu, seq));
		dg_dev_quiesce(e.dev);
		assert_true(dg_inval_done(e.mmu, seq));
		unmap_strict(&e, BASE, 16 * K4);
		env_fini(&e);
	}
}

/* The same tests with leaf-direct devices (docs/iommu.md): the ranges are read from the
   cached last-level tables (direct_run()), the results and counts must not change. */
static int direct_on(void **state)
{
	(void)state;
	leaf_direct = true;
	return 0;
}

static int direct_off(void **state)
{
	(void)state;
	leaf_direct = false;
	return 0;
}

#define DIRECT(t) cmocka_unit_test_setup_teardown(t, direct_on, direct_off)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warm_layouts),
		cmocka_unit_test(test_random),
		cmocka_unit_test(test_large_page),
		cmocka_unit_test(test_stale_tag),
		cmocka_unit_test(test_range_holds),
		DIRECT(test_warm_layouts),
		DIRECT(test_random),
		DIRECT(test_large_page),
		DIRECT(test_stale_tag),
		DIRECT(test_range_holds),
	};

	return cmocka_run_group_tests(tests, setup_arena, teardown_arena);
}
