/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the IOVA allocator (dmaguard/iova.h): configuration and argument errors,
 * alignment, limits, prefer32, reserved ranges, find, exhaustion and recovery, magazines and
 * the depot (zones, flush, trim), memory-allocation failures, randomized operations against
 * the reference model with dg_iova_check() after every step, the nodes-visited bound on the
 * EiovaR pattern and on a 32-bit device in a nearly full space (and the Linux reference's
 * linear walk on the same layouts), and that dg_iova_check() catches corruption.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dmaguard/iova.h>

#include "iova/iova_owned.h"
#include "iova/iova_priv.h"
#include "iova_model.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../test_rand.h"

#define K4   4096ull
#define GIB4 (1ull << 32)

static struct dg_iova_space *mk(uint64_t start, uint64_t end, uint64_t granule,
				enum dg_iova_algo algo, unsigned int flags, unsigned int ncpus)
{
	struct dg_iova_config cfg = {.start = start,
				     .end = end,
				     .granule = granule,
				     .algo = algo,
				     .flags = flags,
				     .ncpus = ncpus};
	struct dg_iova_space *s = dg_iova_create(&cfg);

	assert_non_null(s);
	return s;
}

static void assert_ok(const struct dg_iova_space *s)
{
	int err = dg_iova_check(s, stderr);

	if (err)
		dg_iova_dump(s, stderr);
	assert_int_equal(err, 0);
}

/* The three ways to run a space. */
struct variant {
	const char *name;
	enum dg_iova_algo algo;
	unsigned int flags;
};

static const struct variant variants[] = {
	{"augmented+magazines", DG_IOVA_ALGO_AUGMENTED, 0},
	{"augmented", DG_IOVA_ALGO_AUGMENTED, DG_IOVA_CFG_NO_MAGAZINES},
	{"linux-reference", DG_IOVA_ALGO_LINUX_REFERENCE, 0},
};

/* A 64 GiB space of 4K granules (IOVA 0 reserved), the default algorithm unless @v says. */
static struct dg_iova_space *mk_64g(const struct variant *v, unsigned int ncpus)
{
	return mk(0, (1ull << 36) - 1, K4, v ? v->algo : DG_IOVA_ALGO_AUGMENTED, v ? v->flags : 0,
		  ncpus);
}

static void test_create_errors(void **state)
{
	(void)state;
	static const struct dg_iova_config bad[] = {
		{.start = 0, .end = (1ull << 36) - 1, .granule = 0},
		{.start = 0, .end = (1ull << 36) - 1, .granule = 3 * K4},
		{.start = 0, .end = UINT64_MAX, .granule = 1ull << 33},
		{.start = 100, .end = (1ull << 36) - 1, .granule = K4},
		{.start = 0, .end = (1ull << 36), .granule = K4},
		{.start = 2 * K4, .end = K4 - 1, .granule = K4},
		{.start = 0, .end = K4 - 1, .granule = K4}, /* only IOVA 0: nothing usable */
		{.start = 0, .end = UINT64_MAX, .granule = 1},
		{.start = 0, .end = (1ull << 36) - 1, .granule = K4, .algo = 7},
		{.start = 0, .end = (1ull << 36) - 1, .granule = K4, .flags = 1u << 5},
		{.start = 0, .end = (1ull << 36) - 1, .granule = K4, .ncpus = 5000},
	};

	errno = 0;
	assert_null(dg_iova_create(NULL));
	assert_int_equal(errno, EINVAL);
	for (size_t i = 0; i < DG_ARRAY_SIZE(bad); i++) {
		errno = 0;
		assert_null(dg_iova_create(&bad[i]));
		assert_int_equal(errno, EINVAL);
	}
	/* Edges that are fine. */
	struct dg_iova_space *s = mk(0, UINT64_MAX, K4, DG_IOVA_ALGO_AUGMENTED, 0, 0);
	uint64_t iova;
	assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &iova), 0);
	assert_int_equal(iova, UINT64_MAX - K4 + 1);
	assert_ok(s);
	dg_iova_destroy(s);
	s = mk(0, UINT64_MAX - 2, 1, DG_IOVA_ALGO_AUGMENTED, 0, 1);
	assert_int_equal(dg_iova_alloc(s, 1, UINT64_MAX, 0, &iova), 0);
	assert_int_equal(iova, UINT64_MAX - 2);
	assert_ok(s);
	dg_iova_destroy(s);
	dg_iova_destroy(NULL);
}

static void stats(const struct dg_iova_space *s, struct dg_iova_stats *st)
{
	dg_iova_get_stats(s, st);
}

/* Flush every cache to the tree: nothing stays cached; @st: the statistics after. */
static void flush_caches(struct dg_iova_space *s, struct dg_iova_stats *st)
{
	dg_iova_flush_caches(s);
	stats(s, st);
	assert_int_equal(st->cached_ranges, 0);
}

static void test_basic(void **state)
{
	(void)state;
	for (size_t v = 0; v < DG_ARRAY_SIZE(variants); v++) {
		struct dg_iova_space *s = mk_64g(&variants[v], 2);
		uint64_t a, b, c, d, start, size;
		struct dg_iova_stats st;

		stats(s, &st);
		assert_int_equal(st.reserved_ranges, 1); /* IOVA 0 */
		assert_int_equal(dg_iova_find(s, 0, &start, &size), -EPERM);
		assert_int_equal(start, 0);
		assert_int_equal(size, K4);

		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &a), 0);
		assert_int_equal(a, (1ull << 36) - K4); /* highest first */
		assert_int_equal(dg_iova_alloc(s, 2 * K4, UINT64_MAX, 0, &b), 0);
		assert_int_equal(b, (1ull << 36) - 4 * K4); /* 8K aligned below a */
		assert_int_equal(dg_iova_alloc(s, 3 * K4, UINT64_MAX, 0, &c), 0);
		assert_int_equal(c, (1ull << 36) - 8 * K4); /* 3 pages: 4 reserved, 16K aligned */
		assert_int_equal(dg_iova_alloc(s, 3 * K4, UINT64_MAX, DG_IOVA_ALLOC_PAGE_ALIGN, &d),
				 0);
		assert_int_equal(d, (1ull << 36) - 11 * K4); /* exactly 3 pages below c */
		assert_ok(s);

		assert_int_equal(dg_iova_find(s, c + 3 * K4 + 5, &start, &size), 0);
		assert_int_equal(start, c); /* the padding granule belongs to c */
		assert_int_equal(size, 3 * K4);
		assert_int_equal(dg_iova_find(s, b + 100, &start, NULL), 0);
		assert_int_equal(start, b);
		assert_int_equal(dg_iova_find(s, a - K4, NULL, NULL), -ENOENT);

		/* Bad frees: counted, nothing changes. */
		stats(s, &st);
		uint64_t live = st.live_ranges;
		assert_int_equal(dg_iova_free(s, c, 4 * K4 + 1), -EINVAL); /* 5 granules */
		assert_int_equal(dg_iova_free(s, c + K4, 3 * K4), -ENOENT);
		assert_int_equal(dg_iova_free(s, c + 1, 3 * K4), -EINVAL);
		assert_int_equal(dg_iova_free(s, c, 0), -EINVAL);
		assert_int_equal(dg_iova_free(s, 0, K4), -ENOENT); /* reserved */
		assert_int_equal(dg_iova_free(s, 1ull << 40, K4), -ENOENT);
		stats(s, &st);
		assert_int_equal(st.bad_frees, 6);
		assert_int_equal(st.live_ranges, live);
		assert_ok(s);

		/* A size that rounds to the same granules is accepted. */
		assert_int_equal(dg_iova_free(s, c, 3 * K4 - 100), 0);
		assert_int_equal(dg_iova_free(s, c, 3 * K4), -ENOENT); /* double free */
		assert_int_equal(dg_iova_find(s, c, NULL, NULL), -ENOENT);
		assert_int_equal(dg_iova_free(s, a, K4), 0);
		assert_int_equal(dg_iova_free(s, b, 2 * K4), 0);
		assert_int_equal(dg_iova_free(s, d, 3 * K4), 0);
		stats(s, &st);
		assert_int_equal(st.live_ranges, 0);
		assert_int_equal(st.allocs, 4);
		assert_int_equal(st.frees, 4);
		assert_int_equal(st.bad_frees, 7);
		assert_ok(s);
		flush_caches(s, &st);
		assert_int_equal(st.tree_nodes, 2);
		assert_ok(s);
		dg_iova_destroy(s);
	}
}

/* @n ranges of one granule allocated as owned (with their tokens, 0 from the tree). */
static void alloc_owned_granules(struct dg_iova_space *s, struct iova_owned *r, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		assert_int_equal(iova_alloc_owned(s, K4, UINT64_MAX, &r[i].iova, &r[i].token), 0);
		r[i].size = K4;
	}
}

/*
 * Owned ranges (iova_owned.h, the DMA layer's path): a batch of frees by token skips the
 * index but leaves the same state as validated frees (dg_iova_check after every step, the
 * ranges come back from the magazine); a token that does not check out (wrong range, wrong
 * size, already freed, 0) takes the validated path, which refuses bad frees and changes
 * nothing.
 */
static void test_owned(void **state)
{
	(void)state;
	for (size_t v = 0; v < DG_ARRAY_SIZE(variants); v++) {
		struct dg_iova_space *s = mk_64g(&variants[v], 2);
		bool mags = !(variants[v].flags & DG_IOVA_CFG_NO_MAGAZINES) &&
			    variants[v].algo != DG_IOVA_ALGO_LINUX_REFERENCE;
		struct iova_owned r[300], bad;
		struct dg_iova_stats st;
		uint64_t a;

		/* Warm the magazines: ranges from the tree have no token. */
		alloc_owned_granules(s, r, 300);
		for (unsigned int i = 0; i < 300; i++)
			assert_int_equal(r[i].token, 0);
		iova_free_owned(s, r, 300); /* token 0: validated frees */
		assert_ok(s);
		stats(s, &st);
		assert_int_equal(st.live_ranges, 0);
		assert_int_equal(st.bad_frees, 0);

		/* Ranges from magazines (and the depot) have tokens; 300 frees in one call cross
		 * magazine boundaries. */
		alloc_owned_granules(s, r, 300);
		for (unsigned int i = 0; i < 300; i++) {
			if (mags)
				assert_true(r[i].token != 0);
			else
				assert_int_equal(r[i].token, 0);
		}
		assert_ok(s);
		stats(s, &st);
		assert_int_equal(st.live_ranges, 300);

		/* Tokens that do not check out: nothing changes, each is a counted bad free. */
		bad = r[0];
		bad.iova = 1ull << 35; /* a range nobody allocated */
		iova_free_owned(s, &bad, 1);
		bad = r[0];
		bad.size = 2 * K4; /* another size */
		iova_free_owned(s, &bad, 1);
		stats(s, &st);
		assert_int_equal(st.bad_frees, 2);
		assert_int_equal(st.live_ranges, 300);
		assert_ok(s);
		/* Another node's token for a live range: the validated path frees the range. */
		bad = r[1];
		bad.token = r[0].token;
		iova_free_owned(s, &bad, 1);
		stats(s, &st);
		assert_int_equal(st.bad_frees, 2);
		assert_int_equal(st.live_ranges, 299);
		assert_ok(s);
		assert_int_equal(iova_alloc_owned(s, K4, UINT64_MAX, &r[1].iova, &r[1].token), 0);
		assert_int_equal(r[1].iova, bad.iova); /* last in, first out (or the tree's top) */
		bad.iova = 1ull << 35; /* a live node's token for a range nobody allocated */
		iova_free_owned(s, &bad, 1);
		stats(s, &st);
		assert_int_equal(st.bad_frees, 3);
		assert_int_equal(st.live_ranges, 300);
		assert_ok(s);

		iova_free_owned(s, r, 150);
		assert_ok(s);
		iova_free_owned(s, r + 150, 150);
		assert_ok(s);
		stats(s, &st);
		assert_int_equal(st.live_ranges, 0);
		assert_int_equal(st.bad_frees, 3);
		assert_int_equal(st.cached_ranges, mags ? 300 : 0);

		/* A second free of the same token is refused (the node is CACHED). */
		iova_free_owned(s, &r[7], 1);
		stats(s, &st);
		assert_int_equal(st.bad_frees, 4);
		assert_int_equal(st.live_ranges, 0);
		assert_ok(s);

		/* What the owned path cached serves the public allocator (last in, first out). */
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &a), 0);
		if (mags)
			assert_int_equal(a, r[299].iova);
		assert_int_equal(dg_iova_free(s, a, K4), 0);
		assert_ok(s);
		dg_iova_flush_caches(s);
		stats(s, &st);
		assert_int_equal(st.tree_nodes, 2);
		assert_ok(s);
		dg_iova_destroy(s);
	}
}

static void test_alloc_errors(void **state)
{
	(void)state;
	for (size_t v = 0; v < DG_ARRAY_SIZE(variants); v++) {
		struct dg_iova_space *s =
			mk(16 * K4, 1024 * K4 - 1, K4, variants[v].algo, variants[v].flags, 1);
		uint64_t iova = 12345;
		struct dg_iova_stats st;

		assert_int_equal(dg_iova_alloc(s, 0, UINT64_MAX, 0, &iova), -EINVAL);
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 1u << 7, &iova), -EINVAL);
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, NULL), -EINVAL);
		/* 1008 granules: page aligned fits, natural (1024) is larger than the space */
		assert_int_equal(dg_iova_alloc(s, 1009 * K4, UINT64_MAX, DG_IOVA_ALLOC_PAGE_ALIGN,
					       &iova),
				 -EINVAL);
		assert_int_equal(dg_iova_alloc(s, 1008 * K4, UINT64_MAX, 0, &iova), -EINVAL);
		assert_int_equal(dg_iova_alloc(s, UINT64_MAX, UINT64_MAX, 0, &iova), -EINVAL);
		assert_int_equal(dg_iova_alloc(s, K4, 16 * K4 - 1, 0, &iova), -ERANGE);
		assert_int_equal(dg_iova_alloc_prefer32(s, K4, 100, 0, &iova), -ERANGE);
		/* A limit inside the first granule leaves no whole granule. */
		assert_int_equal(dg_iova_alloc(s, K4, 16 * K4 + 10, 0, &iova), -ENOSPC);
		assert_int_equal(iova, 12345);
		stats(s, &st);
		assert_int_equal(st.allocs, 0);
		assert_int_equal(st.alloc_failures, 1);
		assert_int_equal(st.tree_nodes, 1);
		/* The whole space in one page-aligned range. */
		assert_int_equal(dg_iova_alloc(s, 1008 * K4, UINT64_MAX, DG_IOVA_ALLOC_PAGE_ALIGN,
					       &iova),
				 0);
		assert_int_equal(iova, 16 * K4);
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &iova), -ENOSPC);
		assert_int_equal(dg_iova_free(s, 16 * K4, 1008 * K4), 0);
		/* A limit: the highest fit ends at or below it. */
		assert_int_equal(dg_iova_alloc(s, 4 * K4, 100 * K4 + 5, 0, &iova), 0);
		assert_int_equal(iova, 96 * K4);
		assert_int_equal(dg_iova_alloc(s, 4 * K4, 100 * K4 - 1, 0, &iova), 0);
		assert_int_equal(iova, 92 * K4);
		assert_ok(s);
		dg_iova_destroy(s);
	}
}

/* Magazines never give a caller a range above its limit; prefer32 goes below 4 GiB first. */
static void test_limits_and_zones(void **state)
{
	(void)state;
	for (size_t v = 0; v < DG_ARRAY_SIZE(variants); v++) {
		struct dg_iova_space *s =
			mk(K4, (1ull << 40) - 1, K4, variants[v].algo, variants[v].flags, 1);
		uint64_t lo, hi, x, y, z;

		/* Only 16 granules below 4 GiB stay free. */
		assert_int_equal(dg_iova_reserve(s, K4, GIB4 - 17 * K4), 0);
		assert_int_equal(dg_iova_alloc(s, K4, GIB4 - 1, 0, &lo), 0);
		assert_true(lo < GIB4);
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &hi), 0);
		assert_int_equal(hi, (1ull << 40) - K4);
		assert_int_equal(dg_iova_free(s, lo, K4), 0);
		assert_int_equal(dg_iova_free(s, hi, K4), 0);
		/* The cached low range must not serve a 64-bit request (it keeps the low space),
		 * and the cached high one must never serve a 32-bit request. */
		assert_int_equal(dg_iova_alloc(s, K4, GIB4 - 1, 0, &x), 0);
		assert_true(x < GIB4);
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &y), 0);
		assert_true(y >= GIB4);
		/* A limit between 4 GiB and the end. */
		assert_int_equal(dg_iova_free(s, y, K4), 0);
		assert_int_equal(dg_iova_alloc(s, K4, (1ull << 38) - 1, 0, &z), 0);
		assert_true(z < 1ull << 38);
		assert_int_equal(dg_iova_free(s, z, K4), 0);
		assert_int_equal(dg_iova_free(s, x, K4), 0);
		assert_ok(s);

		/* prefer32: the 16 free low granules first, then high. */
		uint64_t got[17];
		for (int i = 0; i < 17; i++) {
			assert_int_equal(dg_iova_alloc_prefer32(s, K4, UINT64_MAX, 0, &got[i]), 0);
			if (i < 16)
				assert_true(got[i] < GIB4 && got[i] >= GIB4 - 16 * K4);
			else
				assert_true(got[i] >= GIB4);
		}
		assert_int_equal(dg_iova_alloc(s, K4, GIB4 - 1, 0, &x), -ENOSPC);
		/* A device limited to 32 bits on a full low space: ENOSPC, and the high space is
		 * untouched. */
		struct dg_iova_stats st;
		stats(s, &st);
		assert_int_equal(st.alloc_failures, 1);
		assert_int_equal(dg_iova_alloc_prefer32(s, K4, GIB4 - 1, 0, &x), -ENOSPC);
		for (int i = 0; i < 17; i++)
			assert_int_equal(dg_iova_free(s, got[i], K4), 0);
		assert_ok(s);
		dg_iova_destroy(s);
	}
}

static void test_reserve(void **state)
{
	(void)state;
	for (size_t v = 0; v < DG_ARRAY_SIZE(variants); v++) {
		struct dg_iova_space *s =
			mk(0, GIB4 - 1, 1ull << 20, variants[v].algo, variants[v].flags, 1);
		uint64_t iova, start, size;
		struct dg_iova_stats st;

		assert_int_equal(dg_iova_reserve(s, 0xfee00000, 0x100000), 0); /* x86 MSI */
		assert_int_equal(dg_iova_find(s, 0xfee12345, &start, &size), -EPERM);
		assert_int_equal(start, 0xfee00000);
		assert_int_equal(size, 0x100000);
		/* Every 1 MiB granule but IOVA 0 and the MSI window. */
		unsigned int n = 0;
		while (dg_iova_alloc(s, 1 << 20, UINT64_MAX, 0, &iova) == 0) {
			assert_true(iova != 0xfee00000 && iova != 0);
			n++;
		}
		assert_int_equal(n, 4096 - 2);
		/* Overlapping a live range: -EBUSY, nothing changes. */
		stats(s, &st);
		assert_int_equal(dg_iova_reserve(s, 0x10000000, 1), -EBUSY);
		struct dg_iova_stats st2;
		stats(s, &st2);
		assert_int_equal(st2.reserved_ranges, st.reserved_ranges);
		assert_int_equal(st2.tree_nodes, st.tree_nodes);
		for (uint64_t a = 1 << 20; a < GIB4; a += 1 << 20)
			if (a != 0xfee00000)
				assert_int_equal(dg_iova_free(s, a, 1 << 20), 0);
		assert_ok(s);
		/* Overlapping cached ranges: flushed first, then reserved. */
		assert_int_equal(dg_iova_reserve(s, 0x10000000, 0x200000), 0);
		/* Touching and overlapping reserved ranges merge; the part outside is ignored. */
		assert_int_equal(dg_iova_reserve(s, 0x10200000, 0x100000), 0);
		assert_int_equal(dg_iova_reserve(s, 0x0ff00000, 0x180000), 0);
		assert_int_equal(dg_iova_reserve(s, 0xffe00000, 0x400000), 0);
		assert_int_equal(dg_iova_reserve(s, 0x100000000ull, 0x400000), 0);
		stats(s, &st);
		assert_int_equal(st.reserved_ranges, 4); /* 0, MSI, merged, top */
		assert_int_equal(dg_iova_find(s, 0x10250000, &start, &size), -EPERM);
		assert_int_equal(start, 0x0ff00000);
		assert_int_equal(size, 0x400000);
		assert_int_equal(dg_iova_reserve(s, 5, 0), -EINVAL);
		assert_int_equal(dg_iova_reserve(s, UINT64_MAX - 5, 7), -EINVAL);
		assert_int_equal(dg_iova_reserve(s, UINT64_MAX - 5, 6), 0);
		assert_int_equal(dg_iova_alloc(s, 1 << 20, UINT64_MAX, 0, &iova), 0);
		assert_int_equal(iova, 0xffd00000);
		assert_ok(s);
		dg_iova_destroy(s);
	}
}

/* Fill a small space, -ENOSPC, free everything, then the largest range fits again. */
static void test_exhaustion_recovery(void **state)
{
	(void)state;
	for (size_t v = 0; v < DG_ARRAY_SIZE(variants); v++) {
		struct dg_iova_space *s =
			mk(0, 1024 * K4 - 1, K4, variants[v].algo, variants[v].flags, 2);
		static uint64_t got[1024];
		struct dg_iova_stats st;
		unsigned int n = 0;
		uint64_t iova;

		for (int round = 0; round < 3; round++) {
			n = 0;
			while (dg_iova_alloc(s, K4, UINT64_MAX, 0, &got[n]) == 0)
				n++;
			assert_int_equal(n, 1023);
			assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &iova), -ENOSPC);
			assert_ok(s);
			for (unsigned int i = 0; i < n; i++)
				assert_int_equal(dg_iova_free(s, got[i], K4), 0);
			assert_ok(s);
			/* Natural 512: the only place is [512, 1023]. */
			assert_int_equal(dg_iova_alloc(s, 512 * K4, UINT64_MAX, 0, &iova), 0);
			assert_int_equal(iova, 512 * K4);
			assert_int_equal(dg_iova_alloc(s, 511 * K4, UINT64_MAX,
						       DG_IOVA_ALLOC_PAGE_ALIGN, &got[0]),
					 0);
			assert_int_equal(got[0], K4);
			assert_int_equal(dg_iova_free(s, iova, 512 * K4), 0);
			assert_int_equal(dg_iova_free(s, got[0], 511 * K4), 0);
			assert_ok(s);
		}
		stats(s, &st);
		assert_int_equal(st.alloc_failures, 6); /* two -ENOSPC per round */
		assert_int_equal(st.live_ranges, 0);
		dg_iova_destroy(s);
	}
}

/* ---- magazines and depot ---- */

static void test_depot_and_trim(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk_64g(NULL, 1);
	const unsigned int nr = (DG_IOVA_DEPOT_MAX + 4) * DG_IOVA_MAG_SIZE;
	uint64_t *got = malloc(nr * sizeof(*got));
	struct dg_iova_stats st;

	for (unsigned int i = 0; i < nr; i++)
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &got[i]), 0);
	stats(s, &st);
	assert_int_equal(st.magazine_misses, nr);
	for (unsigned int i = 0; i < nr; i++)
		assert_int_equal(dg_iova_free(s, got[i], K4), 0);
	assert_ok(s);
	stats(s, &st);
	/* 2 magazines in this thread's cache, the depot full, the rest went back to the tree. */
	assert_int_equal(st.depot_magazines, DG_IOVA_DEPOT_MAX);
	assert_int_equal(st.cached_ranges, (DG_IOVA_DEPOT_MAX + 2) * DG_IOVA_MAG_SIZE);
	assert_int_equal(st.tree_frees, 2 * DG_IOVA_MAG_SIZE);
	assert_int_equal(st.live_ranges, 0);

	/* Gradual trim: the first step only sets the low-water mark, then one per step. */
	dg_iova_trim(s);
	stats(s, &st);
	assert_int_equal(st.depot_magazines, DG_IOVA_DEPOT_MAX);
	dg_iova_trim(s);
	dg_iova_trim(s);
	stats(s, &st);
	assert_int_equal(st.depot_magazines, DG_IOVA_DEPOT_MAX - 2);
	assert_int_equal(st.trimmed_magazines, 2);
	assert_ok(s);
	/* Using the depot (down to zero) stops the trimming for one interval. */
	for (unsigned int i = 0; i < (DG_IOVA_DEPOT_MAX)*DG_IOVA_MAG_SIZE; i++)
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &got[i]), 0);
	stats(s, &st);
	assert_int_equal(st.depot_magazines, 0);
	assert_int_equal(st.magazine_hits, DG_IOVA_DEPOT_MAX * DG_IOVA_MAG_SIZE);
	for (unsigned int i = 0; i < (DG_IOVA_DEPOT_MAX)*DG_IOVA_MAG_SIZE; i++)
		assert_int_equal(dg_iova_free(s, got[i], K4), 0);
	stats(s, &st);
	uint64_t depot = st.depot_magazines;
	dg_iova_trim(s);
	stats(s, &st);
	assert_int_equal(st.depot_magazines, depot);
	dg_iova_trim(s);
	stats(s, &st);
	assert_int_equal(st.depot_magazines, depot - 1);
	assert_ok(s);
	flush_caches(s, &st);
	assert_int_equal(st.depot_magazines, 0);
	assert_int_equal(st.tree_nodes, 2);
	assert_ok(s);
	dg_iova_destroy(s);
	free(got);
}

/* Every power-of-two class up to the maximum is served by the magazines, in both zones. */
static void test_magazine_classes(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk(0, (1ull << 40) - 1, K4, DG_IOVA_ALGO_AUGMENTED, 0, 1);
	struct dg_iova_stats st;
	uint64_t a, b;

	for (unsigned int o = 0; o <= DG_IOVA_MAG_MAX_ORDER; o++) {
		uint64_t sz = K4 << o;

		for (int zone = 0; zone < 2; zone++) {
			uint64_t lim = zone ? GIB4 - 1 : UINT64_MAX;

			assert_int_equal(dg_iova_alloc(s, sz, lim, 0, &a), 0);
			assert_int_equal(dg_iova_free(s, a, sz), 0);
			stats(s, &st);
			uint64_t hits = st.magazine_hits;
			assert_int_equal(dg_iova_alloc(s, sz, lim, 0, &b), 0);
			assert_int_equal(b, a);
			assert_true(b % sz == 0 && b + sz - 1 <= lim);
			stats(s, &st);
			assert_int_equal(st.magazine_hits, hits + 1);
			/* page-aligned requests of the class use it too */
			assert_int_equal(dg_iova_free(s, b, sz), 0);
			assert_int_equal(dg_iova_alloc(s, sz, lim, DG_IOVA_ALLOC_PAGE_ALIGN, &b),
					 0);
			assert_int_equal(b, a);
			assert_int_equal(dg_iova_free(s, b, sz), 0);
		}
	}
	/* One class above: the tree, not cached. */
	uint64_t big = K4 << (DG_IOVA_MAG_MAX_ORDER + 1);
	assert_int_equal(dg_iova_alloc(s, big, UINT64_MAX, 0, &a), 0);
	assert_int_equal(dg_iova_free(s, a, big), 0);
	stats(s, &st);
	assert_int_equal(st.cached_ranges, 2 * (DG_IOVA_MAG_MAX_ORDER + 1));
	/* A page-aligned range that is not naturally aligned is not cached. */
	assert_int_equal(dg_iova_alloc(s, 2 * K4, 1003 * K4 - 1, DG_IOVA_ALLOC_PAGE_ALIGN, &b), 0);
	assert_int_equal(b, 1001 * K4);
	assert_int_equal(dg_iova_free(s, b, 2 * K4), 0);
	stats(s, &st);
	assert_int_equal(st.cached_ranges, 2 * (DG_IOVA_MAG_MAX_ORDER + 1));
	assert_ok(s);
	dg_iova_destroy(s);
}

/* ---- memory-allocation failures ---- */

struct fail_ctl {
	int after;	  /* allocations to let through, then fail; -1 never */
	size_t only_size; /* 0: any size */
	unsigned int failed;
};

static bool fail_hook(void *arg, size_t size)
{
	struct fail_ctl *f = arg;

	if (f->after < 0 || (f->only_size && size != f->only_size))
		return false;
	if (f->after > 0) {
		f->after--;
		return false;
	}
	f->failed++;
	return true;
}

/* Fail everything but tree nodes and magazines: the index cannot grow. */
static bool fail_tables(void *arg, size_t size)
{
	(void)arg;
	return size != sizeof(struct iova_node) && size != sizeof(struct iova_mag);
}

static void test_enomem(void **state)
{
	(void)state;
	for (size_t v = 0; v < DG_ARRAY_SIZE(variants); v++) {
		struct dg_iova_space *s = mk_64g(&variants[v], 1);
		struct fail_ctl f = {.after = 0};
		struct dg_iova_stats st, st2;
		uint64_t iova = 7, a;

		dg_iova_set_fail_hook(s, fail_hook, &f);
		stats(s, &st);
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &iova), -ENOMEM);
		assert_int_equal(iova, 7);
		assert_int_equal(dg_iova_reserve(s, 1ull << 30, K4), -ENOMEM);
		stats(s, &st2);
		assert_int_equal(st2.tree_nodes, st.tree_nodes);
		assert_int_equal(st2.alloc_failures, 1);
		assert_ok(s);
		/* No memory for a magazine: a free that finds the loaded magazine full and gets no
		 * empty one goes to the tree instead; the cache keeps its loaded magazine. */
		bool mags = variants[v].algo == DG_IOVA_ALGO_AUGMENTED &&
			    !(variants[v].flags & DG_IOVA_CFG_NO_MAGAZINES);
		uint64_t b[DG_IOVA_MAG_SIZE + 1];
		f.after = -1;
		for (unsigned int i = 0; i <= DG_IOVA_MAG_SIZE; i++)
			assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &b[i]), 0);
		f.after = 0;
		unsigned int f0 = f.failed;
		for (unsigned int i = 0; i <= DG_IOVA_MAG_SIZE; i++)
			assert_int_equal(dg_iova_free(s, b[i], K4), 0);
		stats(s, &st);
		assert_int_equal(st.live_ranges, 0);
		assert_int_equal(st.cached_ranges, mags ? DG_IOVA_MAG_SIZE : 0);
		assert_int_equal(st.frees, DG_IOVA_MAG_SIZE + 1);
		assert_int_equal(f.failed - f0, mags ? 1 : 0); /* the one empty magazine */
		assert_ok(s);
		assert_int_equal(dg_iova_find(s, b[DG_IOVA_MAG_SIZE], NULL, NULL), -ENOENT);
		f.after = -1;
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &a), 0);
		assert_int_equal(dg_iova_free(s, a, K4), 0);
		assert_ok(s);
		dg_iova_destroy(s);
	}

	/* Index tables that cannot grow: chains get longer, everything stays correct. */
	struct dg_iova_space *s = mk_64g(NULL, 1);
	const unsigned int n = 4000;
	uint64_t *got = malloc(n * sizeof(*got));

	dg_iova_set_fail_hook(s, fail_tables, NULL);
	for (unsigned int i = 0; i < n; i++)
		assert_int_equal(
			dg_iova_alloc(s, 8 * K4, UINT64_MAX, DG_IOVA_ALLOC_PAGE_ALIGN, &got[i]), 0);
	assert_true(s->icount > 8 * atomic_load(&s->itab)->nb); /* long chains */
	assert_ok(s);
	for (unsigned int i = 0; i < n; i++)
		assert_int_equal(dg_iova_free(s, got[i], 8 * K4), 0);
	assert_ok(s);
	dg_iova_set_fail_hook(s, NULL, NULL);
	dg_iova_destroy(s);
	free(got);
}

/* ---- randomized against the model ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	return splitmix64(&rng_state);
}

struct live {
	uint64_t iova, size;
};

/*
 * Random allocations, frees, bad frees, reserves, finds, flushes and trims on a space of 8192
 * granules of 1 MiB that straddles 4 GiB. Every allocation is checked for alignment, limit and
 * overlap with what the model holds (live and reserved); without magazines the augmented
 * allocator must return exactly the model's highest fit, and -ENOSPC must mean the model has
 * no fit either. dg_iova_check() after every step.
 */
static void run_random(const struct variant *v, uint64_t seed, unsigned int steps)
{
	const uint64_t g = 1ull << 20, ng = 8192;
	struct dg_iova_space *s = mk(0, ng * g - 1, g, v->algo, v->flags, 3);
	struct live *lv = malloc(4096 * sizeof(*lv));
	size_t nlive = 0;
	struct model m;
	bool exact = v->algo == DG_IOVA_ALGO_AUGMENTED && (v->flags & DG_IOVA_CFG_NO_MAGAZINES);

	rng_state = seed;
	model_init(&m, 0, ng - 1);
	model_add(&m, 0, 1, 0); /* IOVA 0 */
	for (unsigned int step = 0; step < steps; step++) {
		unsigned int op = rnd() % 100;

		if (op < 55 && nlive < 4096) {
			static const uint64_t sizes[] = {1, 1, 1, 2,  2,  3,  4,
							 4, 5, 8, 16, 33, 64, 200};
			uint64_t npfn = sizes[rnd() % DG_ARRAY_SIZE(sizes)];
			uint64_t size = npfn * g - (rnd() % 2 ? rnd() % g : 0);
			unsigned int flags = rnd() % 4 == 0 ? DG_IOVA_ALLOC_PAGE_ALIGN : 0;
			uint64_t limit, lim, iova, want = 0, len, align;
			unsigned int lk = rnd() % 4;
			bool p32 = rnd() % 5 == 0;
			int err;

			limit = lk == 0 ? UINT64_MAX :
				lk == 1 ? GIB4 - 1 :
				lk == 2 ? ng * g - 1 :
					  (rnd() % ng) * g + g - 1;
			lim = limit >= ng * g ? ng - 1 : limit / g;
			len = flags ? npfn : dg_roundup_pow2(npfn);
			align = flags ? 1 : len;
			if (p32)
				err = dg_iova_alloc_prefer32(s, size, limit, flags, &iova);
			else
				err = dg_iova_alloc(s, size, limit, flags, &iova);
			bool fit = model_highest_fit(&m, len, align, lim, &want);
			if (p32 && lim > 4095) {
				uint64_t w32;

				if (model_highest_fit(&m, len, align, 4095, &w32)) {
					want = w32;
					fit = true;
				}
			}
			if (err) {
				assert_int_equal(err, -ENOSPC);
				if (fit && v->algo == DG_IOVA_ALGO_AUGMENTED) {
					fprintf(stderr, "ENOSPC but %#llx fits (len %llu)\n",
						(unsigned long long)want, (unsigned long long)len);
					fail();
				}
			} else {
				uint64_t pfn = iova / g;

				assert_true(iova % g == 0);
				assert_true(pfn % align == 0);
				assert_true(fit);
				assert_true(model_is_free(&m, pfn, len));
				assert_true(pfn + len - 1 <= lim);
				/* Exact: the highest fit, below 4 GiB first for prefer32. (With
				 * magazines the first, 32-bit try does not flush the caches, and
				 * Linux's max32_alloc_size ignores alignment: both may go high.) */
				if (exact)
					assert_int_equal(pfn, want);
				model_add(&m, pfn, len, npfn);
				lv[nlive++] = (struct live){iova, size};
			}
		} else if (op < 90 && nlive) {
			size_t i = rnd() % nlive;

			assert_int_equal(dg_iova_free(s, lv[i].iova, lv[i].size), 0);
			model_del(&m, lv[i].iova / g);
			lv[i] = lv[--nlive];
		} else if (op < 93) {
			/* a bad free: an address that no live allocation starts at, or a live one
			 * with a wrong size */
			struct dg_iova_stats a, b;

			stats(s, &a);
			if (nlive && rnd() % 2) {
				size_t i = rnd() % nlive;
				struct model_range *r = model_get(&m, lv[i].iova / g);

				assert_int_equal(dg_iova_free(s, lv[i].iova, (r->npfn + 1) * g),
						 -EINVAL);
			} else {
				uint64_t pfn = rnd() % ng;
				struct model_range *r = model_get(&m, pfn);

				if (!r || !r->npfn)
					assert_int_equal(dg_iova_free(s, pfn * g, g), -ENOENT);
			}
			stats(s, &b);
			assert_int_equal(a.live_ranges, b.live_ranges);
		} else if (op < 95) {
			uint64_t pfn = rnd() % ng, n = 1 + rnd() % 4;
			bool free_now = model_is_free(&m, pfn, n);
			int err = dg_iova_reserve(s, pfn * g, n * g);

			if (free_now) {
				assert_int_equal(err, 0);
				model_add(&m, pfn, n, 0);
			} else if (err == 0) {
				/* it may overlap only reserved ranges: merge them in the model */
				for (uint64_t p = pfn; p < pfn + n && p < ng; p++) {
					size_t k = model_lower(&m, p + 1);

					assert_true(k > 0);
					const struct model_range *r = &m.r[k - 1];
					if (r->lo + r->len > p) {
						assert_int_equal(r->npfn, 0);
						p = r->lo + r->len - 1;
					} else {
						model_add(&m, p, 1, 0);
					}
				}
			} else {
				assert_int_equal(err, -EBUSY);
			}
		} else if (op < 97) {
			uint64_t pfn = rnd() % ng, start, size;
			size_t k = model_lower(&m, pfn + 1);
			int err = dg_iova_find(s, pfn * g + rnd() % g, &start, &size);

			if (k && m.r[k - 1].lo + m.r[k - 1].len > pfn) {
				const struct model_range *r = &m.r[k - 1];

				assert_int_equal(err, r->npfn ? 0 : -EPERM);
				if (r->npfn) {
					assert_int_equal(start, r->lo * g);
					assert_int_equal(size, r->npfn * g);
				}
			} else {
				assert_int_equal(err, -ENOENT);
			}
		} else if (op < 98) {
			dg_iova_flush_caches(s);
		} else {
			dg_iova_trim(s);
		}
		if (dg_iova_check(s, stderr)) {
			fprintf(stderr, "%s seed %llu step %u\n", v->name, (unsigned long long)seed,
				step);
			dg_iova_dump(s, stderr);
			fail();
		}
	}
	struct dg_iova_stats st;
	stats(s, &st);
	assert_int_equal(st.live_ranges, nlive);
	model_fini(&m);
	free(lv);
	dg_iova_destroy(s);
}

static void test_random_model(void **state)
{
	(void)state;
	for (size_t v = 0; v < DG_ARRAY_SIZE(variants); v++)
		for (uint64_t seed = 1; seed <= 2; seed++)
			run_random(&variants[v], seed * 7919 + v, 3000);
}

/* ---- the nodes-visited bound ---- */

/*
 * Proven in iova_tree.c: a search examines at most 3h + 1 nodes, an insertion 2h, a removal
 * 3h (successor, retrace, and the descent that finds the node without magazines), with
 * h <= 1.4405 log2(n + 2). So an operation examines at most 5h + 2 nodes:
 */
static uint64_t visit_bound(uint64_t nodes)
{
	return (uint64_t)(5.0 * 1.4405 * log2((double)nodes + 2.0)) + 2;
}

/*
 * The adversarial layout: N one-granule ranges separated by one-granule holes at the top of
 * the space, a range H above them (so Linux's cached node sits above the holes), and each
 * round: a two-granule request, its free, H freed and allocated again.
 */
static uint64_t adversarial_round_visits(struct dg_iova_space *s, uint64_t g, uint64_t *h,
					 uint64_t *worst)
{
	struct dg_iova_stats a, b;
	uint64_t x, max = 0;

	dg_iova_get_stats(s, &a);
	assert_int_equal(dg_iova_alloc(s, 2 * g, UINT64_MAX, 0, &x), 0);
	dg_iova_get_stats(s, &b);
	max = b.last_op_nodes_visited;
	assert_int_equal(dg_iova_free(s, x, 2 * g), 0);
	assert_int_equal(dg_iova_free(s, *h, g), 0);
	assert_int_equal(dg_iova_alloc(s, g, UINT64_MAX, 0, h), 0);
	dg_iova_get_stats(s, &b);
	*worst = max;
	return b.tree_nodes_visited - a.tree_nodes_visited;
}

static void build_adversarial(struct dg_iova_space *s, uint64_t g, unsigned int n, uint64_t *h)
{
	uint64_t *tmp = malloc((2 * n + 1) * sizeof(*tmp));

	assert_int_equal(dg_iova_alloc(s, g, UINT64_MAX, 0, h), 0);
	for (unsigned int i = 0; i < 2 * n; i++)
		assert_int_equal(dg_iova_alloc(s, g, UINT64_MAX, 0, &tmp[i]), 0);
	for (unsigned int i = 0; i < 2 * n; i += 2)
		assert_int_equal(dg_iova_free(s, tmp[i], g), 0);
	free(tmp);
}

static void test_adversarial_bound(void **state)
{
	(void)state;
	const unsigned int n = 8192;
	const uint64_t g = K4;

	/* dmaguard, tree path: every operation within the bound. */
	struct dg_iova_space *s =
		mk(0, (1ull << 40) - 1, g, DG_IOVA_ALGO_AUGMENTED, DG_IOVA_CFG_NO_MAGAZINES, 1);
	uint64_t h, worst;
	struct dg_iova_stats st;

	build_adversarial(s, g, n, &h);
	assert_ok(s);
	dg_iova_get_stats(s, &st);
	uint64_t bound = visit_bound(st.tree_nodes);
	assert_true(st.max_op_nodes_visited <= bound);
	for (int r = 0; r < 50; r++) {
		uint64_t total = adversarial_round_visits(s, g, &h, &worst);

		assert_true(worst <= bound);
		assert_true(total <= 4 * bound);
	}
	dg_iova_get_stats(s, &st);
	assert_true(st.max_op_nodes_visited <= bound);
	assert_ok(s);
	dg_iova_destroy(s);

	/* The Linux reference on the same layout walks past every one of the N ranges: the
	 * layout really is adversarial, and the counter really counts. */
	s = mk(0, (1ull << 40) - 1, g, DG_IOVA_ALGO_LINUX_REFERENCE, 0, 1);
	build_adversarial(s, g, n, &h);
	for (int r = 0; r < 3; r++) {
		adversarial_round_visits(s, g, &h, &worst);
		assert_true(worst >= n);
	}
	assert_ok(s);
	dg_iova_destroy(s);
}

/*
 * EiovaR (FAST'15): a ring of long-lived buffers interleaved with short-lived ones, all
 * in flight at once, then the short-lived ones cycle. And a device limited to 32 bits on a
 * space that is nearly full below 4 GiB: one aligned pair left at the bottom, found in
 * O(log n), and then -ENOSPC found in O(log n).
 */
static void test_eiovar_and_dma32_bound(void **state)
{
	(void)state;
	const uint64_t g = 1ull << 18; /* 16384 granules below 4 GiB */
	const unsigned int ring = 4096;
	uint64_t *longl = malloc(ring * sizeof(uint64_t)),
		 *shortl = malloc(ring * sizeof(uint64_t));
	struct dg_iova_stats st;

	for (int mags = 0; mags < 2; mags++) {
		struct dg_iova_space *s = mk(0, (1ull << 40) - 1, g, DG_IOVA_ALGO_AUGMENTED,
					     mags ? 0 : DG_IOVA_CFG_NO_MAGAZINES, 1);

		for (unsigned int i = 0; i < ring; i++) {
			assert_int_equal(dg_iova_alloc(s, g, UINT64_MAX, 0, &longl[i]), 0);
			assert_int_equal(dg_iova_alloc(s, 2 * g, UINT64_MAX, 0, &shortl[i]), 0);
		}
		for (int round = 0; round < 20; round++) {
			for (unsigned int i = 0; i < ring; i += 7) {
				assert_int_equal(dg_iova_free(s, shortl[i], 2 * g), 0);
				assert_int_equal(dg_iova_alloc(s, (1 + round % 3) * g, UINT64_MAX,
							       0, &shortl[i]),
						 0);
				dg_iova_get_stats(s, &st);
				assert_true(st.last_op_nodes_visited <= visit_bound(st.tree_nodes));
				assert_int_equal(dg_iova_free(s, shortl[i], (1 + round % 3) * g),
						 0);
				assert_int_equal(dg_iova_alloc(s, 2 * g, UINT64_MAX, 0, &shortl[i]),
						 0);
			}
		}
		dg_iova_get_stats(s, &st);
		assert_true(st.max_op_nodes_visited <= visit_bound(st.tree_nodes));
		assert_ok(s);

		/* Nearly full below 4 GiB: one-granule ranges with one-granule holes, an aligned
		 * free pair at the very bottom. */
		const uint64_t low = GIB4 / g; /* granules below 4 GiB */
		for (uint64_t p = 4; p + 1 < low; p += 2)
			assert_int_equal(dg_iova_reserve(s, p * g, g), 0);
		assert_int_equal(dg_iova_reserve(s, g, g), 0);
		/* left: [2, 3] aligned pair, and the odd holes */
		dg_iova_get_stats(s, &st);
		uint64_t before = st.tree_nodes_visited, x;
		assert_int_equal(dg_iova_alloc(s, 2 * g, GIB4 - 1, 0, &x), 0);
		assert_int_equal(x, 2 * g);
		dg_iova_get_stats(s, &st);
		assert_true(st.tree_nodes > low / 2);
		assert_true(st.tree_nodes_visited - before <= visit_bound(st.tree_nodes));
		before = st.tree_nodes_visited;
		assert_int_equal(dg_iova_alloc(s, 2 * g, GIB4 - 1, 0, &x), -ENOSPC);
		dg_iova_get_stats(s, &st);
		/* with magazines the -ENOSPC path flushes the caches and searches again */
		uint64_t tries = mags ? 2 : 1;
		assert_true(st.tree_nodes_visited - before <=
			    tries * visit_bound(st.tree_nodes) +
				    2 * ring * visit_bound(st.tree_nodes));
		if (!mags)
			assert_true(st.tree_nodes_visited - before <= visit_bound(st.tree_nodes));
		assert_ok(s);
		dg_iova_destroy(s);
	}
	free(longl);
	free(shortl);
}

/* ---- check and dump ---- */

static void test_check_catches_corruption(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk_64g(NULL, 1);
	uint64_t a[8];
	FILE *null = fopen("/dev/null", "w");

	for (int i = 0; i < 8; i++)
		assert_int_equal(dg_iova_alloc(s, K4 << (i % 3), UINT64_MAX, 0, &a[i]), 0);
	assert_int_equal(dg_iova_free(s, a[3], K4 << 0), 0); /* cached */
	assert_ok(s);

	struct iova_node *root = s->tree.root;
	uint64_t saved = root->max_gap;
	root->max_gap++;
	assert_int_equal(dg_iova_check(s, null), -EUCLEAN);
	root->max_gap = saved;
	int8_t o = root->gap_order;
	root->gap_order = 40;
	assert_int_equal(dg_iova_check(s, null), -EUCLEAN);
	root->gap_order = o;
	saved = root->gap;
	root->gap++;
	assert_int_equal(dg_iova_check(s, null), -EUCLEAN);
	root->gap = saved;
	uint8_t hgt = root->height;
	root->height++;
	assert_int_equal(dg_iova_check(s, null), -EUCLEAN);
	root->height = hgt;
	assert_ok(s);

	/* A cached node marked live, and a live node marked cached. */
	struct iova_tcache *tc = iova_tc_lock(s); /* this thread's cache, where a[3] went */
	iova_tc_exit(tc);
	struct iova_node *n = tc->cc[0].loaded->e[0];
	atomic_store(&n->state, IOVA_LIVE(1));
	assert_int_equal(dg_iova_check(s, null), -EUCLEAN);
	atomic_store(&n->state, IOVA_ST_CACHED);
	assert_ok(s);
	/* A node missing from the index. */
	struct iova_node *live = iova_index_lookup_locked(s, a[0]);
	assert_non_null(live);
	iova_index_remove(s, live);
	assert_int_equal(dg_iova_check(s, null), -EUCLEAN);
	iova_index_insert(s, live);
	assert_ok(s);
	/* The same node twice in a magazine. */
	struct iova_mag *m = tc->cc[0].loaded;
	m->e[m->n++] = n;
	assert_int_equal(dg_iova_check(s, null), -EUCLEAN);
	m->n--;
	assert_ok(s);

	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	dg_iova_dump(s, mem);
	fclose(mem);
	assert_non_null(strstr(buf, "algo augmented magazines on"));
	assert_non_null(strstr(buf, "cached"));
	assert_non_null(strstr(buf, "reserved"));
	assert_non_null(strstr(buf, "anchor"));
	free(buf);
	fclose(null);
	dg_iova_destroy(s);
}

/* Many live ranges through the index: shards grow and drain incrementally. */
static void test_index_growth(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk(0, (1ull << 40) - 1, K4, DG_IOVA_ALGO_AUGMENTED, 0, 2);
	const unsigned int n = 20000;
	uint64_t *got = malloc(n * sizeof(*got));

	for (unsigned int i = 0; i < n; i++) {
		assert_int_equal(dg_iova_alloc(s, (1 + i % 5) * K4, UINT64_MAX,
					       DG_IOVA_ALLOC_PAGE_ALIGN, &got[i]),
				 0);
		if (i % 2500 == 0)
			assert_ok(s);
	}
	assert_ok(s);
	for (unsigned int i = 0; i < n; i += 2)
		assert_int_equal(dg_iova_free(s, got[i], (1 + i % 5) * K4), 0);
	assert_ok(s);
	for (unsigned int i = 1; i < n; i += 2)
		assert_int_equal(dg_iova_free(s, got[i], (1 + i % 5) * K4), 0);
	assert_ok(s);
	free(got);
	dg_iova_destroy(s);
}

/* Granule 1 and 64 KiB, and a space that does not start at 0. */
static void test_granules(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk(4096, 8191, 1, DG_IOVA_ALGO_AUGMENTED, 0, 1);
	uint64_t x;

	assert_int_equal(dg_iova_alloc(s, 100, UINT64_MAX, 0, &x), 0);
	assert_int_equal(x, 8192 - 128);
	assert_int_equal(dg_iova_alloc(s, 100, UINT64_MAX, DG_IOVA_ALLOC_PAGE_ALIGN, &x), 0);
	assert_int_equal(x, 8192 - 228);
	assert_int_equal(dg_iova_alloc(s, 4096, UINT64_MAX, 0, &x), -ENOSPC);
	assert_int_equal(dg_iova_find(s, 0, NULL, NULL), -ENOENT);
	assert_ok(s);
	dg_iova_destroy(s);

	s = mk(1ull << 32, (1ull << 48) - 1, 1ull << 16, DG_IOVA_ALGO_AUGMENTED, 0, 1);
	assert_int_equal(dg_iova_alloc(s, 1, UINT64_MAX, 0, &x), 0);
	assert_int_equal(x, (1ull << 48) - (1ull << 16));
	assert_int_equal(dg_iova_alloc(s, 1, GIB4 - 1, 0, &x), -ERANGE);
	assert_int_equal(dg_iova_alloc(s, 1, GIB4 + (1ull << 16) - 1, 0, &x), 0);
	assert_int_equal(x, GIB4);
	assert_int_equal(dg_iova_alloc_prefer32(s, 1, UINT64_MAX, 0, &x), 0);
	assert_int_equal(x, (1ull << 48) - (2ull << 16));
	assert_ok(s);
	dg_iova_destroy(s);
}

/*
 * Sizes whose granule count does not fit the state word: with a granule of 1, a size of
 * 2^62 + 4 bytes must not pass for the 4 the range was allocated with (a plain x * 4 + 5
 * would wrap to the same state), nor size 0 or 2^64 - 1 for anything; a free at an address
 * inside a range or unaligned is refused; nothing changes.
 */
static void test_free_sizes_and_addresses(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk(0, (1ull << 40) - 1, 1, DG_IOVA_ALGO_AUGMENTED, 0, 1);
	struct dg_iova_stats st;
	uint64_t a, b;

	assert_int_equal(dg_iova_alloc(s, 4, UINT64_MAX, 0, &a), 0);
	assert_int_equal(dg_iova_free(s, a, (1ull << 62) + 4), -EINVAL);
	assert_int_equal(dg_iova_free(s, a, (2ull << 62) + 4), -EINVAL);
	assert_int_equal(dg_iova_free(s, a, (3ull << 62) + 4), -EINVAL);
	assert_int_equal(dg_iova_free(s, a, UINT64_MAX), -EINVAL);
	assert_int_equal(dg_iova_free(s, a, 0), -EINVAL);
	assert_int_equal(dg_iova_free(s, a + 1, 3), -ENOENT);
	assert_int_equal(dg_iova_free(s, a, 3), -EINVAL); /* 3 granules, not the 4 asked for */
	stats(s, &st);
	assert_int_equal(st.bad_frees, 7);
	assert_int_equal(st.live_ranges, 1);
	assert_ok(s);
	assert_int_equal(dg_iova_free(s, a, 4), 0);
	assert_ok(s);
	dg_iova_destroy(s);

	s = mk(0, (1ull << 40) - 1, K4, DG_IOVA_ALGO_AUGMENTED, 0, 1);
	assert_int_equal(dg_iova_alloc(s, 2 * K4, UINT64_MAX, 0, &a), 0);
	assert_int_equal(dg_iova_alloc(s, 3 * K4, UINT64_MAX, DG_IOVA_ALLOC_PAGE_ALIGN, &b), 0);
	assert_int_equal(dg_iova_free(s, a + 1, 2 * K4), -EINVAL); /* unaligned */
	assert_int_equal(dg_iova_free(s, a + K4, K4), -ENOENT);	   /* inside */
	assert_int_equal(dg_iova_free(s, b, 4 * K4), -EINVAL);	   /* tree range, wrong size */
	assert_int_equal(dg_iova_free(s, b + K4, K4), -ENOENT);
	assert_int_equal(dg_iova_free(s, a, UINT64_MAX), -EINVAL);
	assert_ok(s);
	assert_int_equal(dg_iova_free(s, a, 2 * K4), 0);
	assert_int_equal(dg_iova_free(s, b, 3 * K4), 0);
	assert_int_equal(dg_iova_free(s, b, 3 * K4), -ENOENT);
	assert_int_equal(dg_iova_free(s, a, 2 * K4), -ENOENT);
	assert_ok(s);
	dg_iova_destroy(s);
}

/*
 * A node that went back to the tree is reused for the next range with a new generation, so
 * a lock-free free that read the node in its previous life cannot validate against it: the
 * compare-exchange with the old state word fails.
 */
static void test_node_reuse_generation(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk(0, (1ull << 40) - 1, K4, DG_IOVA_ALGO_AUGMENTED, 0, 1);
	uint64_t a, b;

	assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &a), 0);
	struct iova_node *n = iova_index_lookup_locked(s, a);
	assert_non_null(n);
	uint64_t old = atomic_load(&n->state);
	assert_int_equal(old & IOVA_ST_LOW, IOVA_LIVE(1));
	assert_int_equal(dg_iova_free(s, a, K4), 0);
	dg_iova_flush_caches(s); /* back to the tree: the node is on the free list */
	assert_int_equal(atomic_load(&n->state) & IOVA_ST_LOW, 0);
	assert_int_equal(dg_iova_alloc(s, 2 * K4, UINT64_MAX, 0, &b), 0); /* reuses it */
	assert_true(iova_index_lookup_locked(s, b) == n);
	assert_true(b != a);
	uint64_t now = atomic_load(&n->state);
	assert_int_equal(now & IOVA_ST_LOW, IOVA_LIVE(2));
	assert_int_equal(now >> IOVA_ST_GEN_SHIFT, (old >> IOVA_ST_GEN_SHIFT) + 1);
	/* what a stale reader of the old life would try */
	uint64_t expect = (now & ~IOVA_ST_LOW) - (1ull << IOVA_ST_GEN_SHIFT) + IOVA_LIVE(2);
	assert_false(atomic_compare_exchange_strong(&n->state, &expect, IOVA_ST_CACHED));
	assert_int_equal(dg_iova_free(s, a, K4), -ENOENT);
	assert_int_equal(dg_iova_free(s, b, 2 * K4), 0);
	assert_ok(s);
	dg_iova_destroy(s);
}

/*
 * After the index doubled, frees that only hit the magazines (no tree operation that would
 * drain the old table) still find their ranges and drain the old table themselves.
 */
static void test_index_drain_by_frees(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk(0, (1ull << 40) - 1, K4, DG_IOVA_ALGO_AUGMENTED, 0, 1);
	const unsigned int cap = 1u << 14;
	uint64_t *got = malloc(cap * sizeof(*got));
	unsigned int n = 0;
	struct dg_iova_stats st0, st1;

	/* allocate until the index has just doubled */
	do {
		assert_true(n < cap);
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &got[n]), 0);
		n++;
	} while (!atomic_load(&s->iold) || s->imigrate > 0);
	stats(s, &st0);
	/* cycle frees and allocations through the magazines only */
	for (unsigned int round = 0; round < 64 && atomic_load(&s->iold); round++) {
		for (unsigned int i = 0; i < n; i++)
			assert_int_equal(dg_iova_free(s, got[i], K4), 0);
		for (unsigned int i = 0; i < n; i++)
			assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &got[i]), 0);
	}
	assert_null(atomic_load(&s->iold));
	stats(s, &st1);
	assert_int_equal(st1.tree_allocs, st0.tree_allocs);
	assert_int_equal(st1.tree_frees, st0.tree_frees);
	assert_ok(s);
	for (unsigned int i = 0; i < n; i++)
		assert_int_equal(dg_iova_free(s, got[i], K4), 0);
	assert_ok(s);
	free(got);
	dg_iova_destroy(s);
}

/* Ranges freed by another thread than the one that allocated them, then freed again by
 * either: refused (the range sits in the other thread's cache, or after its exit in the
 * tree). The other thread's exit gives its cached ranges back: none stays in a cache nobody
 * owns (a partly filled magazine goes to the tree). */
struct xfree {
	struct dg_iova_space *s;
	uint64_t *r;
	unsigned int n;
	int want;
};

static void *xfree_thread(void *arg)
{
	struct xfree *x = arg;

	for (unsigned int i = 0; i < x->n; i++)
		if (dg_iova_free(x->s, x->r[i], K4 << (i % 3)) != x->want)
			return (void *)1;
	return NULL;
}

static void test_cross_thread_double_free(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk(0, (1ull << 40) - 1, K4, DG_IOVA_ALGO_AUGMENTED, 0, 1);
	uint64_t r[300];
	struct xfree x = {.s = s, .r = r, .n = 300, .want = 0};
	struct dg_iova_stats st;
	pthread_t t;
	void *ret;

	for (int round = 0; round < 2; round++) { /* the second round hits the magazines */
		for (unsigned int i = 0; i < 300; i++)
			assert_int_equal(dg_iova_alloc(s, K4 << (i % 3), UINT64_MAX, 0, &r[i]), 0);
		x.want = 0;
		assert_int_equal(pthread_create(&t, NULL, xfree_thread, &x), 0);
		pthread_join(t, &ret);
		assert_null(ret);
		for (unsigned int i = 0; i < 300; i++)
			assert_int_equal(dg_iova_free(s, r[i], K4 << (i % 3)), -ENOENT);
		x.want = -ENOENT;
		assert_int_equal(pthread_create(&t, NULL, xfree_thread, &x), 0);
		pthread_join(t, &ret);
		assert_null(ret);
		stats(s, &st);
		assert_int_equal(st.live_ranges, 0);
		assert_int_equal(st.bad_frees, 600ull * (round + 1));
		assert_int_equal(st.cached_ranges, 0);	  /* 100 per class: no full magazine */
		assert_int_equal(iova_mag_ncaches(s), 1); /* this thread's; the other's is gone */
		assert_ok(s);
	}
	assert_int_equal(st.magazine_hits, 0);
	dg_iova_destroy(s);
}

/*
 * One thread alternating between spaces: its remembered cache belongs to one space at a time
 * (by id), so a space created at a destroyed space's address never gets the old cache (which
 * valgrind and ASan would report as a use after free).
 */
static void test_spaces_alternate(void **state)
{
	(void)state;
	struct dg_iova_space *s[2];
	struct dg_iova_stats st;
	uint64_t a, b;

	for (int gen = 0; gen < 3; gen++) {
		for (int k = 0; k < 2; k++)
			s[k] = mk(0, (1ull << 40) - 1, K4, DG_IOVA_ALGO_AUGMENTED, 0, 2);
		for (unsigned int i = 0; i < 1000; i++) {
			assert_int_equal(dg_iova_alloc(s[0], K4, UINT64_MAX, 0, &a), 0);
			assert_int_equal(dg_iova_alloc(s[1], 2 * K4, UINT64_MAX, 0, &b), 0);
			assert_int_equal(dg_iova_free(s[0], a, K4), 0);
			assert_int_equal(dg_iova_free(s[1], b, 2 * K4), 0);
			assert_int_equal(dg_iova_free(s[i & 1], i & 1 ? b : a, (i & 1) + 1),
					 -ENOENT);
		}
		for (int k = 0; k < 2; k++) {
			stats(s[k], &st);
			assert_int_equal(st.allocs, 1000);
			assert_int_equal(st.magazine_hits, 999);
			assert_int_equal(st.tree_frees, 0);
			assert_int_equal(st.bad_frees, 500);
			assert_ok(s[k]);
			dg_iova_destroy(s[k]);
		}
	}
}

/* ---- thread caches (iova_mag.c) ---- */

struct tc_arg {
	struct dg_iova_space *s;
	unsigned int n;		/* ranges of one granule to allocate and free */
	uint64_t *r;		/* ... kept here */
	pthread_barrier_t *bar; /* if set: wait twice after the frees (caches held) */
	bool again;		/* ... then fill again (a->s may have changed meanwhile) */
	int err;
};

static void tc_fill(struct tc_arg *a)
{
	for (unsigned int i = 0; i < a->n && !a->err; i++)
		a->err = dg_iova_alloc(a->s, K4, UINT64_MAX, 0, &a->r[i]);
	for (unsigned int i = 0; i < a->n && !a->err; i++)
		a->err = dg_iova_free(a->s, a->r[i], K4);
}

static void *tc_fill_thread(void *arg)
{
	struct tc_arg *a = arg;

	tc_fill(a);
	if (a->bar) {
		pthread_barrier_wait(a->bar);
		pthread_barrier_wait(a->bar);
		if (a->again)
			tc_fill(a);
	}
	return NULL;
}

/* A thread that has filled its cache with @n ranges (kept in @r) and holds it. */
struct tc_held {
	struct tc_arg a;
	pthread_barrier_t bar;
	pthread_t t;
};

/* Start the thread; returns once its frees are done and its cache is held. */
static void tc_hold(struct tc_held *h, struct dg_iova_space *s, unsigned int n, uint64_t *r)
{
	h->a = (struct tc_arg){.s = s, .n = n, .r = r, .bar = &h->bar};
	pthread_barrier_init(&h->bar, NULL, 2);
	assert_int_equal(pthread_create(&h->t, NULL, tc_fill_thread, &h->a), 0);
	pthread_barrier_wait(&h->bar);
}

/* Let the thread go and wait until it has exited (its cache given back). */
static void tc_exit(struct tc_held *h)
{
	pthread_barrier_wait(&h->bar);
	pthread_join(h->t, NULL);
	pthread_barrier_destroy(&h->bar);
}

/*
 * A thread that exits gives its cached ranges back: its full magazine to the depot, its
 * partly filled one to the tree; no cache is left and the counters stay. 300 frees of one
 * class: loaded and prev fill up (254), the depot takes prev, 46 go into a new loaded one.
 */
static void test_thread_exit_returns_ranges(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk_64g(NULL, 0);
	uint64_t r[300];
	struct dg_iova_stats st;
	struct tc_held h;

	tc_hold(&h, s, 300, r);
	assert_int_equal(h.a.err, 0);
	stats(s, &st); /* the thread is alive and holds its cache */
	assert_int_equal(st.cached_ranges, 300);
	assert_int_equal(st.depot_magazines, 1);
	assert_int_equal(st.live_ranges, 0);
	assert_int_equal(iova_mag_ncaches(s), 1);
	assert_ok(s);
	tc_exit(&h);

	stats(s, &st);
	assert_int_equal(iova_mag_ncaches(s), 0);
	assert_int_equal(st.depot_magazines, 2);
	assert_int_equal(st.cached_ranges, 2 * DG_IOVA_MAG_SIZE);
	assert_int_equal(st.tree_frees, 300 - 2 * DG_IOVA_MAG_SIZE);
	assert_int_equal(st.live_ranges, 0);
	assert_int_equal(st.allocs, 300);
	assert_int_equal(st.magazine_misses, 300); /* the gone cache's counts are kept */
	assert_ok(s);
	/* This thread gets the depot's ranges, then the tree's. */
	for (unsigned int i = 0; i < 300; i++)
		assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &r[i]), 0);
	stats(s, &st);
	assert_int_equal(st.magazine_hits, 2 * DG_IOVA_MAG_SIZE);
	assert_int_equal(st.live_ranges, 300);
	assert_int_equal(iova_mag_ncaches(s), 1);
	for (unsigned int i = 0; i < 300; i++)
		assert_int_equal(dg_iova_free(s, r[i], K4), 0);
	assert_ok(s);
	dg_iova_destroy(s);
}

/* A range cached in a live thread's cache, freed again by another thread: refused, and the
 * owner still gets it back from its cache. */
static void test_double_free_cached_in_other_thread(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk_64g(NULL, 0);
	uint64_t r[3];
	struct dg_iova_stats st;
	struct tc_held h;

	tc_hold(&h, s, 3, r);
	for (unsigned int i = 0; i < 3; i++) {
		assert_int_equal(dg_iova_free(s, r[i], K4), -ENOENT);
		assert_int_equal(dg_iova_free(s, r[i], 2 * K4), -ENOENT);
	}
	stats(s, &st);
	assert_int_equal(st.bad_frees, 6);
	assert_int_equal(st.cached_ranges, 3);
	assert_ok(s);
	tc_exit(&h);
	stats(s, &st);
	assert_int_equal(st.cached_ranges, 0); /* a partial magazine: to the tree */
	assert_int_equal(st.tree_frees, 3);
	assert_ok(s);
	dg_iova_destroy(s);
}

/* Destroy while threads hold caches, then a new space (perhaps at the same address) used by
 * the same threads, which then exit: valgrind and ASan catch a cache used (through a thread's
 * remembered entry) or freed (at the thread's exit) after the destroy. */
static void test_destroy_with_thread_caches(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk_64g(NULL, 0);
	uint64_t r[2][200];
	struct tc_arg a[2];
	pthread_barrier_t bar;
	pthread_t t[2];

	pthread_barrier_init(&bar, NULL, 3);
	for (int i = 0; i < 2; i++) {
		a[i] = (struct tc_arg){.s = s, .n = 200, .r = r[i], .bar = &bar, .again = true};
		assert_int_equal(pthread_create(&t[i], NULL, tc_fill_thread, &a[i]), 0);
	}
	pthread_barrier_wait(&bar);
	assert_int_equal(iova_mag_ncaches(s), 2);
	dg_iova_destroy(s);
	s = mk_64g(NULL, 0);
	for (int i = 0; i < 2; i++)
		a[i].s = s; /* read by the threads after the barrier */
	pthread_barrier_wait(&bar);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(a[i].err, 0);
	}
	assert_int_equal(iova_mag_ncaches(s), 0);
	struct dg_iova_stats st;
	stats(s, &st);
	assert_int_equal(st.allocs, 400);
	assert_int_equal(st.live_ranges, 0);
	assert_ok(s);
	dg_iova_destroy(s);
	pthread_barrier_destroy(&bar);
}

/* A thread whose cache is found in its remembered entries after using other spaces, and a
 * destroyed space's entry never matched again (ids are never reused). */
static void test_tls_ways(void **state)
{
	(void)state;
	struct dg_iova_space *s[IOVA_TLS_WAYS + 2];
	struct dg_iova_stats st;
	uint64_t a;

	for (int k = 0; k < IOVA_TLS_WAYS + 2; k++)
		s[k] = mk_64g(NULL, 0);
	for (int round = 0; round < 50; round++) {
		for (int k = 0; k < IOVA_TLS_WAYS + 2; k++) {
			assert_int_equal(dg_iova_alloc(s[k], K4 << (k % 3), UINT64_MAX, 0, &a), 0);
			assert_int_equal(dg_iova_free(s[k], a, K4 << (k % 3)), 0);
		}
	}
	for (int k = 0; k < IOVA_TLS_WAYS + 2; k++) {
		stats(s[k], &st);
		assert_int_equal(st.magazine_hits, 49);
		assert_int_equal(iova_mag_ncaches(s[k]), 1);
		assert_ok(s[k]);
		dg_iova_destroy(s[k]);
	}
}

/*
 * The fallback without membarrier: caches carry IOVA_STEAL_FALLBACK, the fast path never enters
 * them and the slow path enters with an exchange; caching, stealing and exit work the same.
 */
static void test_no_membarrier_fallback(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk_64g(NULL, 0);
	uint64_t r[300];
	struct tc_arg a = {.s = s, .n = 300, .r = r};
	struct dg_iova_stats st;
	struct iova_tcache *tc;
	pthread_t t;
	uint64_t x;

	iova_mag_force_fallback(s);
	for (unsigned int i = 0; i < 1000; i++) {
		assert_int_equal(dg_iova_alloc(s, 2 * K4, UINT64_MAX, 0, &x), 0);
		assert_int_equal(dg_iova_free(s, x, 2 * K4), 0);
		assert_int_equal(dg_iova_free(s, x, 2 * K4), -ENOENT);
	}
	tc = iova_tc_lock(s);
	assert_non_null(tc);
	assert_int_equal(atomic_load(&tc->sw.steal), IOVA_STEAL_FALLBACK);
	assert_int_equal(atomic_load(&tc->sw.busy), 1);
	iova_tc_exit(tc);
	stats(s, &st);
	assert_int_equal(st.magazine_hits, 999);
	assert_int_equal(st.cached_ranges, 1);
	assert_int_equal(st.bad_frees, 1000);
	assert_ok(s);
	assert_int_equal(pthread_create(&t, NULL, tc_fill_thread, &a), 0);
	pthread_join(t, NULL);
	assert_int_equal(a.err, 0);
	stats(s, &st);
	assert_int_equal(st.cached_ranges, 1 + 2 * DG_IOVA_MAG_SIZE);
	flush_caches(s, &st);
	assert_int_equal(st.live_ranges, 0);
	assert_ok(s);
	dg_iova_destroy(s);
}

/* A child of fork() inherits the membarrier decision (and, on this kernel, the registration;
 * memb_all() registers again if not): its caches and steals work. */
static void test_fork_child_steals(void **state)
{
	(void)state;
	struct dg_iova_space *s = mk_64g(NULL, 0);
	struct dg_iova_stats st;
	uint64_t a;
	int status;
	pid_t pid;

	assert_int_equal(dg_iova_alloc(s, K4, UINT64_MAX, 0, &a), 0);
	assert_int_equal(dg_iova_free(s, a, K4), 0);
	dg_iova_flush_caches(s); /* the parent's steal */
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct dg_iova_space *c = mk_64g(NULL, 0);
		int bad = 0;

		bad |= dg_iova_alloc(c, K4, UINT64_MAX, 0, &a) != 0;
		bad |= dg_iova_free(c, a, K4) != 0;
		dg_iova_flush_caches(c); /* the child's steal: membarrier */
		dg_iova_get_stats(c, &st);
		bad |= st.cached_ranges != 0 || dg_iova_check(c, NULL) != 0;
		_exit(bad);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	dg_iova_destroy(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_errors),
		cmocka_unit_test(test_basic),
		cmocka_unit_test(test_owned),
		cmocka_unit_test(test_alloc_errors),
		cmocka_unit_test(test_limits_and_zones),
		cmocka_unit_test(test_reserve),
		cmocka_unit_test(test_exhaustion_recovery),
		cmocka_unit_test(test_depot_and_trim),
		cmocka_unit_test(test_magazine_classes),
		cmocka_unit_test(test_enomem),
		cmocka_unit_test(test_random_model),
		cmocka_unit_test(test_adversarial_bound),
		cmocka_unit_test(test_eiovar_and_dma32_bound),
		cmocka_unit_test(test_check_catches_corruption),
		cmocka_unit_test(test_index_growth),
		cmocka_unit_test(test_granules),
		cmocka_unit_test(test_free_sizes_and_addresses),
		cmocka_unit_test(test_node_reuse_generation),
		cmocka_unit_test(test_index_drain_by_frees),
		cmocka_unit_test(test_cross_thread_double_free),
		cmocka_unit_test(test_spaces_alternate),
		cmocka_unit_test(test_thread_exit_returns_ranges),
		cmocka_unit_test(test_double_free_cached_in_other_thread),
		cmocka_unit_test(test_destroy_with_thread_caches),
		cmocka_unit_test(test_tls_ways),
		cmocka_unit_test(test_no_membarrier_fallback),
		cmocka_unit_test(test_fork_child_steals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
