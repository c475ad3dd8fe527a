/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the bounce policy's per-CPU shadow areas (src/dma/bounce.c): the CPU a thread
 * last ran on (dma_cpu(), re-read only every 256 calls, so stale after a migration) chooses
 * which area is tried first, never how much a map can get.
 *
 * Four CPUs' areas of 256 KiB per direction; a thread's cached CPU is forced (dma_tls_cpu), as
 * a thread that migrated away from it would see it:
 *  - one thread fills CPU 2's area and keeps its slots live; a thread whose cached CPU is 2
 *    still maps (from the other areas), area by area, until every area of the direction is
 *    full - then -ENOSPC, counted once; in_use exact all along; for slots of the per-thread
 *    stacks (64 B, 2 KiB) and of the locked path (4 KiB, 64 KiB);
 *  - unmaps from a thread on another CPU put every slot back into the area it came from:
 *    each area gives its whole-area slot again, at its own address;
 *  - bulk maps: served from the other areas when the cached CPU's area is full, and all or
 *    nothing when the direction cannot hold them all (nothing mapped, in_use unchanged, the
 *    space still there for a bulk map that fits);
 *  - slots cached on a live thread's stacks are not lost capacity: a thread fills its stacks
 *    and blocks on a barrier while another maps until the direction is full - every area
 *    whole for the largest slot, then exactly NCPU x AREA of 64 B / 2 KiB / 4 KiB slots, and
 *    the parked thread's stacks work after the theft (the reclaim, bounce.c; the binary runs
 *    again as unit_dma_bounce_area_nomemb without membarrier).
 */
#include "dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dma/dma_internal.h" /* dma_tls_cpu; before cmocka.h: it defines fail() */

#include <cmocka.h>

#define NCPU 4
#define AREA (256u << 10)

struct env {
	struct dma_fixture f;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	uint64_t base[3]; /* per direction: the IOVA of CPU 0's area */
};

/* Make this thread's cached CPU @cpu for the next 2^30 calls (as after a migration). */
static void force_cpu(unsigned int cpu)
{
	dma_tls_cpu = cpu;
	dma_tls_cpu_left = 1u << 30;
}

/* Back to reading the CPU (the next call re-reads it). */
static void unforce_cpu(void)
{
	dma_tls_cpu_left = 0;
}

static struct dg_dma_stats stats(struct dg_dma_dev *dd)
{
	struct dg_dma_stats st;

	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	return st;
}

/* The area (its CPU) that holds @dma of direction @dir. */
static unsigned int area_of(const struct env *e, enum dg_dma_dir dir, uint64_t dma)
{
	uint64_t off = dma - e->base[dir];

	assert_true(off < (uint64_t)NCPU * AREA);
	return (unsigned int)(off / AREA);
}

/*
 * How many whole-area slots direction @dir gives (all unmapped again); each must be exactly
 * at its area's start, and the areas all distinct.
 */
static unsigned int whole_areas(struct env *e, enum dg_dma_dir dir, uint8_t *buf)
{
	uint64_t big[NCPU + 1];
	unsigned int n = 0, seen = 0;

	while (n < NCPU + 1 && dg_dma_map_single(e->dd, buf, AREA, dir, 0, &big[n]) == 0) {
		unsigned int a = area_of(e, dir, big[n]);

		assert_int_equal(big[n], e->base[dir] + (uint64_t)a * AREA);
		assert_false(seen & 1u << a);
		seen |= 1u << a;
		n++;
	}
	for (unsigned int i = 0; i < n; i++)
		assert_int_equal(dg_dma_unmap_single(e->dd, big[i], AREA, dir, 0, NULL), 0);
	return n;
}

static void env_init(struct env *e, uint8_t *buf)
{
	struct dg_dma_dev_config c;

	assert_int_equal(fixture_init(&e->f, false, 0), 0);
	e->f.dma->ncpus = NCPU; /* before the device: its areas are made at its creation */
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_BOUNCE;
	c.geo.format = DG_PT_FMT_VTD_SS;
	c.bounce.area_size = AREA;
	e->dd = fixture_dev(&e->f, 1, DG_DMA_BOUNCE, &c, &e->dev);
	assert_non_null(e->dd);
	dg_dev_set_auto_offline(e->dev, true);
	/* CPU 0's area of each direction: the whole-area slot a thread on CPU 0 gets first */
	force_cpu(0);
	for (unsigned int d = 0; d < 3; d++) {
		assert_int_equal(
			dg_dma_map_single(e->dd, buf, AREA, (enum dg_dma_dir)d, 0, &e->base[d]), 0);
		assert_int_equal(dg_dma_unmap_single(e->dd, e->base[d], AREA, (enum dg_dma_dir)d, 0,
						     NULL),
				 0);
	}
	unforce_cpu();
}

static void env_fini(struct env *e)
{
	unforce_cpu();
	assert_int_equal(fixture_end(&e->f, e->dd), 0);
}

/* A thread whose cached CPU is @cpu maps @n buffers of @len into @dma and keeps them live. */
struct filler {
	struct env *e;
	unsigned int cpu, n;
	size_t len;
	enum dg_dma_dir dir;
	uint8_t *buf;
	uint64_t *dma;
};

static void *fill_main(void *p)
{
	struct filler *f = p;

	force_cpu(f->cpu);
	for (unsigned int i = 0; i < f->n; i++)
		if (dg_dma_map_single(f->e->dd, f->buf, f->len, f->dir, 0, &f->dma[i]))
			return (void *)1;
	return NULL;
}

/* Fill CPU @cpu's area of @dir with @len slots from a thread whose cached CPU is @cpu (its
 * slots stay live, the thread exits): returns their count, addresses in @dma. */
static unsigned int fill_area(struct env *e, unsigned int cpu, enum dg_dma_dir dir, size_t len,
			      uint8_t *buf, uint64_t *dma)
{
	struct filler f = {e, cpu, AREA / (unsigned int)len, len, dir, buf, dma};
	pthread_t t;
	void *ret;

	assert_int_equal(pthread_create(&t, NULL, fill_main, &f), 0);
	assert_int_equal(pthread_join(t, &ret), 0);
	assert_null(ret);
	for (unsigned int i = 0; i < f.n; i++) /* its own area first: the whole of it */
		assert_int_equal(area_of(e, dir, dma[i]), cpu);
	return f.n;
}

/* Unmap dma[0..n) from a thread whose cached CPU is @cpu. */
struct unmapper {
	struct env *e;
	unsigned int cpu, n;
	size_t len;
	enum dg_dma_dir dir;
	const uint64_t *dma;
};

static void *unmap_main(void *p)
{
	struct unmapper *u = p;

	force_cpu(u->cpu);
	for (unsigned int i = 0; i < u->n; i++)
		if (dg_dma_unmap_single(u->e->dd, u->dma[i], u->len, u->dir, 0, NULL))
			return (void *)1;
	return NULL;
}

static void unmap_from(struct env *e, unsigned int cpu, enum dg_dma_dir dir, size_t len,
		       const uint64_t *dma, unsigned int n)
{
	struct unmapper u = {e, cpu, n, len, dir, dma};
	pthread_t t;
	void *ret;

	assert_int_equal(pthread_create(&t, NULL, unmap_main, &u), 0);
	assert_int_equal(pthread_join(t, &ret), 0);
	assert_null(ret);
}

/*
 * CPU 2's area full (another thread's live slots); this thread's cached CPU is 2: its maps
 * come from the other areas until the direction is full, then -ENOSPC.
 */
static void stale_cpu(size_t len, enum dg_dma_dir dir)
{
	const unsigned int per = AREA / (unsigned int)len, total = NCPU * per;
	uint64_t *dma = calloc(total + 1, sizeof(*dma));
	uint8_t *buf = page_alloc(AREA);
	unsigned int n, got[NCPU] = {0};
	struct dg_dma_stats s0, s1;
	struct env e;

	assert_non_null(dma);
	assert_non_null(buf);
	env_init(&e, buf);
	n = fill_area(&e, 2, dir, len, buf, dma);
	assert_int_equal(n, per);
	assert_int_equal(stats(e.dd).bounce_in_use, AREA);
	force_cpu(2);
	s0 = stats(e.dd);
	for (;;) {
		int r = dg_dma_map_single(e.dd, buf, len, dir, 0, &dma[n]);

		if (r) {
			assert_int_equal(r, -ENOSPC);
			break;
		}
		got[area_of(&e, dir, dma[n])]++;
		n++;
		assert_true(n <= total);
		/* exact while it goes: the slots on this thread's stack are not counted */
		assert_int_equal(stats(e.dd).bounce_in_use, (uint64_t)n * len);
	}
	/* every other area gave all of itself; -ENOSPC only with every area full */
	assert_int_equal(n, total);
	assert_int_equal(got[2], 0);
	for (unsigned int c = 0; c < NCPU; c++)
		if (c != 2)
			assert_int_equal(got[c], per);
	s1 = stats(e.dd);
	assert_int_equal(s1.bounce_in_use, (uint64_t)NCPU * AREA);
	assert_int_equal(s1.maps - s0.maps, total - per);
	assert_int_equal(s1.err_shadow_space - s0.err_shadow_space, 1);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	/* the other directions are untouched */
	for (unsigned int d = 0; d < 3; d++)
		if (d != (unsigned int)dir)
			assert_int_equal(whole_areas(&e, (enum dg_dma_dir)d, buf), NCPU);
	/* unmapped from a thread on CPU 0: every slot back into the area it came from */
	unmap_from(&e, 0, dir, len, dma, n);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	assert_int_equal(whole_areas(&e, dir, buf), NCPU);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	env_fini(&e);
	free(dma);
	free(buf);
}

static void test_stale_cpu_64(void **state)
{
	(void)state;
	stale_cpu(64, DG_DMA_TO_DEVICE);
}

static void test_stale_cpu_2k(void **state)
{
	(void)state;
	stale_cpu(2048, DG_DMA_FROM_DEVICE);
}

static void test_stale_cpu_4k(void **state)
{
	(void)state;
	stale_cpu(4096, DG_DMA_BIDIRECTIONAL);
}

static void test_stale_cpu_64k(void **state)
{
	(void)state;
	stale_cpu(65536, DG_DMA_TO_DEVICE);
}

#define BN 32

/*
 * Bulk maps with CPU 1's area full and this thread's cached CPU 1: served from the other
 * areas; with fewer than BN slots left in the whole direction, a bulk map of BN is refused
 * with nothing mapped, and one of what is left still goes through.
 */
static void bulk_stale_cpu(size_t len)
{
	const enum dg_dma_dir dir = DG_DMA_FROM_DEVICE;
	const unsigned int per = AREA / (unsigned int)len, total = NCPU * per, left = BN / 2;
	uint64_t *dma = calloc(total + BN, sizeof(*dma)), bd[BN];
	/* at least an area: env_init() and whole_areas() map whole-area slots of it */
	uint8_t *buf = page_alloc((size_t)BN * len > AREA ? (size_t)BN * len : AREA);
	struct dg_dma_stats s0, s1;
	void *bufs[BN];
	unsigned int n;
	struct env e;

	assert_non_null(dma);
	assert_non_null(buf);
	for (unsigned int i = 0; i < BN; i++)
		bufs[i] = buf + (size_t)i * len;
	env_init(&e, buf);
	n = fill_area(&e, 1, dir, len, buf, dma);
	force_cpu(1);
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, BN, len, dir, 0, bd), 0);
	for (unsigned int i = 0; i < BN; i++) {
		assert_int_not_equal(area_of(&e, dir, bd[i]), 1);
		for (unsigned int k = 0; k < i; k++)
			assert_int_not_equal(bd[i], bd[k]);
	}
	assert_int_equal(stats(e.dd).bounce_in_use, (uint64_t)(n + BN) * len);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, bd, BN, len, dir, 0, NULL), 0);
	/* fill the direction up to @left free slots */
	while (n < total - left) {
		assert_int_equal(dg_dma_map_single(e.dd, buf, len, dir, 0, &dma[n]), 0);
		n++;
	}
	s0 = stats(e.dd);
	assert_int_equal(s0.bounce_in_use, (uint64_t)n * len);
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, BN, len, dir, 0, bd), -ENOSPC);
	s1 = stats(e.dd);
	assert_int_equal(s1.bounce_in_use, s0.bounce_in_use);
	assert_int_equal(s1.live, s0.live);
	assert_int_equal(s1.maps, s0.maps);
	assert_int_equal(s1.err_shadow_space - s0.err_shadow_space, 1);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	/* what is left is all there: a bulk map of it fits, then nothing more does */
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, left, len, dir, 0, &dma[n]), 0);
	n += left;
	assert_int_equal(stats(e.dd).bounce_in_use, (uint64_t)NCPU * AREA);
	assert_int_equal(dg_dma_map_single(e.dd, buf, len, dir, 0, &bd[0]), -ENOSPC);
	unmap_from(&e, 3, dir, len, dma, n);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	assert_int_equal(whole_areas(&e, dir, buf), NCPU);
	env_fini(&e);
	free(dma);
	free(buf);
}

static void test_bulk_stale_cpu_2k(void **state)
{
	(void)state;
	bulk_stale_cpu(2048);
}

static void test_bulk_stale_cpu_4k(void **state)
{
	(void)state;
	bulk_stale_cpu(4096);
}

/*
 * A thread that keeps slots cached and stays alive: it maps and unmaps PARK_MAPS buffers of
 * each small size (its stacks keep them, up to 1/8 of an area each, 6/8 of one in all) with
 * its cached CPU @cpu, then waits on a barrier until the test lets it go on; then it maps and
 * unmaps again (its stacks, emptied by a thief meanwhile, still work) and exits.
 */
#define PARK_MAPS 48

struct parker {
	struct env *e;
	unsigned int cpu;
	enum dg_dma_dir dir;
	uint8_t *buf;
	pthread_barrier_t parked, go;
	unsigned int bad;
};

static const size_t park_len[] = {64, 128, 256, 512, 1024, 2048};

static unsigned int park_round(struct parker *k)
{
	uint64_t dma[PARK_MAPS];

	for (unsigned int s = 0; s < sizeof(park_len) / sizeof(park_len[0]); s++) {
		for (unsigned int i = 0; i < PARK_MAPS; i++)
			if (dg_dma_map_single(k->e->dd, k->buf, park_len[s], k->dir, 0, &dma[i]))
				return 1;
		for (unsigned int i = 0; i < PARK_MAPS; i++)
			if (dg_dma_unmap_single(k->e->dd, dma[i], park_len[s], k->dir, 0, NULL))
				return 1;
	}
	return 0;
}

static void *park_main(void *p)
{
	struct parker *k = p;

	force_cpu(k->cpu);
	k->bad = park_round(k);
	pthread_barrier_wait(&k->parked);
	pthread_barrier_wait(&k->go); /* alive, its caches full, until the test is done */
	k->bad |= park_round(k) << 1;
	return NULL;
}

/*
 * Thread A fills its stacks of direction @dir and stays alive (blocked on a barrier) while
 * this thread maps until the direction would be exhausted: every area gives its whole-area
 * slot (A's cached slots were taken back and merged), then @len slots fill the direction
 * exactly (NCPU * AREA of them live, in_use exact), -ENOSPC only then. Nothing is lost: the
 * structure check holds and every area is whole again after the unmaps, after A ran again
 * and after it exited. Fails without the reclaim: A's cached slots keep its CPU's area from
 * merging (one whole-area slot short) and stay out of reach of the small maps.
 */
static void parked_cache(size_t len, enum dg_dma_dir dir)
{
	const unsigned int nslots = (unsigned int)((uint64_t)NCPU * AREA / len);
	uint64_t *dma = calloc(nslots + 1, sizeof(*dma));
	uint8_t *buf = page_alloc(AREA);
	struct parker k;
	struct env e;
	pthread_t t;
	unsigned int n = 0;

	assert_non_null(dma);
	assert_non_null(buf);
	env_init(&e, buf);
	k = (struct parker){.e = &e, .cpu = 1, .dir = dir, .buf = buf};
	assert_int_equal(pthread_barrier_init(&k.parked, NULL, 2), 0);
	assert_int_equal(pthread_barrier_init(&k.go, NULL, 2), 0);
	assert_int_equal(pthread_create(&t, NULL, park_main, &k), 0);
	pthread_barrier_wait(&k.parked);
	assert_int_equal(k.bad, 0);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	force_cpu(1); /* A's CPU: its area is the one its cached slots came from */
	assert_int_equal(whole_areas(&e, dir, buf), NCPU);
	while (n <= nslots && dg_dma_map_single(e.dd, buf, len, dir, 0, &dma[n]) == 0) {
		n++;
		if (n % 64 == 0)
			assert_int_equal(stats(e.dd).bounce_in_use, (uint64_t)n * len);
	}
	assert_int_equal(n, nslots);
	assert_int_equal(stats(e.dd).bounce_in_use, (uint64_t)NCPU * AREA);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	for (unsigned int i = 0; i < n; i++)
		assert_int_equal(dg_dma_unmap_single(e.dd, dma[i], len, dir, 0, NULL), 0);
	unforce_cpu();
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	/* this thread's own stacks hold slots now: whole_areas() takes them back itself */
	assert_int_equal(whole_areas(&e, dir, buf), NCPU);
	pthread_barrier_wait(&k.go);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(k.bad, 0);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	assert_int_equal(whole_areas(&e, dir, buf), NCPU);
	pthread_barrier_destroy(&k.parked);
	pthread_barrier_destroy(&k.go);
	env_fini(&e);
	free(dma);
	free(buf);
}

static void test_parked_cache_64(void **state)
{
	(void)state;
	parked_cache(64, DG_DMA_FROM_DEVICE);
}

static void test_parked_cache_2k(void **state)
{
	(void)state;
	parked_cache(2048, DG_DMA_TO_DEVICE);
}

static void test_parked_cache_4k(void **state)
{
	(void)state;
	parked_cache(4096, DG_DMA_BIDIRECTIONAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stale_cpu_64),	  cmocka_unit_test(test_stale_cpu_2k),
		cmocka_unit_test(test_stale_cpu_4k),	  cmocka_unit_test(test_stale_cpu_64k),
		cmocka_unit_test(test_bulk_stale_cpu_2k), cmocka_unit_test(test_bulk_stale_cpu_4k),
		cmocka_unit_test(test_parked_cache_64),	  cmocka_unit_test(test_parked_cache_2k),
		cmocka_unit_test(test_parked_cache_4k),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
