/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the bulk calls (dg_dma_map_bulk / dg_dma_unmap_bulk in src/dma/map.c,
 * dg_dma_iova_link_bulk / dg_dma_iova_unlink_bulk in src/dma/iova_link.c). Each would fail if
 * a bulk call mapped a buffer at the wrong place, changed anything before refusing, or left
 * the device a way to a buffer after the batch holding its unmap ended:
 *  - every address a bulk map or link returns reaches its own buffer (the device reads the
 *    buffer's bytes, or writes into it for FROM_DEVICE), one- and multi-granule buffers;
 *  - after the batch end the device faults on every one of them;
 *  - one bad entry (never mapped, wrong length or direction, an address twice, a slot not
 *    linked) refuses the whole unmap with every mapping still live and reachable, with the
 *    error the single call gives for that entry;
 *  - bad arguments are refused with nothing mapped;
 *  - window and pool (test_fixed_bulk): a bulk call does what n single calls do (fixed
 *    addresses of the direct region or pool, the others mapped as strict; the same counters),
 *    a bad entry refuses the unmap with everything live, a map failing part-way leaves
 *    nothing mapped, a double unmap across bulk and single calls is refused;
 *  - an injected page-table failure part-way refuses the map with nothing left mapped;
 *  - randomized sequences against the single calls as the reference: the same addresses in
 *    use, the same counters, the same answers;
 *  - dg_dma_batch_done() says false until the batch is submitted and acknowledged.
 */
#include "dma/dma_internal.h" /* before cmocka.h: it defines fail() */
#include "dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include "../../test_rand.h"

#define PG    4096ull
#define NPG   1024 /* pages of buffers */
#define SLOTS 512

struct t {
	struct dma_fixture f;
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	uint8_t *mem; /* NPG pages, page i filled with pattern (i * 7 + k) */
};

static void setup(struct t *t, enum dg_dma_policy p, bool reference)
{
	assert_int_equal(fixture_init(&t->f, reference, 0), 0);
	t->dd = fixture_idle_dev(&t->f, 1, p, reference, &t->dev);
	assert_non_null(t->dd);
	t->mem = page_alloc(NPG * PG);
	assert_non_null(t->mem);
	for (size_t i = 0; i < NPG * PG; i++)
		t->mem[i] = (uint8_t)(i * 7 + i / PG);
}

static void teardown(struct t *t)
{
	struct dg_dma_stats s;

	assert_int_equal(dg_dma_dev_stats(t->dd, &s), 0);
	assert_int_equal(s.live, 0);
	assert_int_equal(fixture_end(&t->f, t->dd), 0);
	free(t->mem);
}

static uint64_t live(struct t *t)
{
	struct dg_dma_stats s;

	assert_int_equal(dg_dma_dev_stats(t->dd, &s), 0);
	return s.live;
}

/* The device reaches @buf through @dma: reads its first and last bytes (or, FROM_DEVICE,
 * writes them and finds them in the buffer). */
static void reaches(struct t *t, uint64_t dma, uint8_t *buf, size_t len, enum dg_dma_dir dir)
{
	uint8_t b[2];

	if (dir == DG_DMA_FROM_DEVICE) {
		uint8_t v[2] = {(uint8_t)(buf[0] ^ 0xff), (uint8_t)(buf[len - 1] ^ 0xff)};

		assert_int_equal(dg_dev_write(t->dev, dma, &v[0], 1), 0);
		assert_int_equal(dg_dev_write(t->dev, dma + len - 1, &v[1], 1), 0);
		assert_int_equal(buf[0], v[0]);
		assert_int_equal(buf[len - 1], v[1]);
		return;
	}
	assert_int_equal(dg_dev_read(t->dev, dma, &b[0], 1), 0);
	assert_int_equal(dg_dev_read(t->dev, dma + len - 1, &b[1], 1), 0);
	assert_int_equal(b[0], buf[0]);
	assert_int_equal(b[1], buf[len - 1]);
}

static void faults(struct t *t, uint64_t dma, enum dg_dma_dir dir)
{
	uint8_t b = 0;

	if (dir == DG_DMA_FROM_DEVICE)
		assert_int_equal(dg_dev_write(t->dev, dma, &b, 1), -EFAULT);
	else
		assert_int_equal(dg_dev_read(t->dev, dma, &b, 1), -EFAULT);
}

/* ---- streaming -------------------------------------------------------------------------------- */

static void run_map_unmap(enum dg_dma_policy p, bool reference, size_t len, enum dg_dma_dir dir)
{
	void *bufs[DG_DMA_BULK_MAX];
	uint64_t dma[DG_DMA_BULK_MAX];
	const unsigned int n = 100;
	struct dg_dma_stats s0, s1;
	struct dg_dma_batch b;
	struct t t;

	setup(&t, p, reference);
	for (unsigned int i = 0; i < n; i++) /* a scattered order of pages, odd offsets */
		bufs[i] = t.mem + ((i * 37) % (NPG - 4)) * PG + 64 + i;
	assert_int_equal(dg_dma_dev_stats(t.dd, &s0), 0);
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, n, len, dir, 0, dma), 0);
	assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
	assert_int_equal(live(&t), n);
	for (unsigned int i = 0; i < n; i++) {
		if (p == DG_DMA_IDENTITY)
			assert_int_equal(dma[i], (uintptr_t)bufs[i]);
		for (unsigned int j = 0; j < i; j++)
			assert_true(dma[i] != dma[j]);
		reaches(&t, dma[i], bufs[i], len, dir);
	}
	assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
	dg_dma_batch_begin(t.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, n, len, dir, 0, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(dg_dma_dev_stats(t.dd, &s1), 0);
	assert_int_equal(s1.maps - s0.maps, n);
	assert_int_equal(s1.unmaps - s0.unmaps, n);
	assert_int_equal(s1.map_bytes - s0.map_bytes, n * len);
	if (p == DG_DMA_STRICT) /* lazy: not before its flush */
		for (unsigned int i = 0; i < n; i++)
			faults(&t, dma[i], dir);
	/* without a batch: one wait covers them all before the call returns */
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, n, len, dir, 0, dma), 0);
	assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, n, len, dir, 0, NULL), 0);
	if (p == DG_DMA_STRICT)
		for (unsigned int i = 0; i < n; i++)
			faults(&t, dma[i], dir);
	teardown(&t);
}

static void test_map_unmap(void **state)
{
	(void)state;
	run_map_unmap(DG_DMA_STRICT, false, 64, DG_DMA_TO_DEVICE);
	run_map_unmap(DG_DMA_STRICT, false, 64, DG_DMA_FROM_DEVICE);
	run_map_unmap(DG_DMA_STRICT, false, 1500, DG_DMA_BIDIRECTIONAL); /* some cross pages */
	run_map_unmap(DG_DMA_STRICT, false, 9000, DG_DMA_TO_DEVICE);	 /* the general way */
	run_map_unmap(DG_DMA_STRICT, true, 64, DG_DMA_TO_DEVICE);
	run_map_unmap(DG_DMA_LAZY, false, 64, DG_DMA_TO_DEVICE);
	run_map_unmap(DG_DMA_IDENTITY, false, 64, DG_DMA_FROM_DEVICE);
}

/* One bad entry refuses the whole unmap: every mapping stays live and reachable. */
static void run_refuse(enum dg_dma_policy p, bool reference)
{
	void *bufs[64];
	uint64_t dma[64], bad[64];
	struct dg_dma_batch b;
	struct t t;

	setup(&t, p, reference);
	for (unsigned int i = 0; i < 64; i++)
		bufs[i] = t.mem + i * PG + 128;
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 64, 200, DG_DMA_TO_DEVICE, 0, dma), 0);
	for (unsigned int k = 0; k < (p == DG_DMA_IDENTITY ? 3u : 4u); k++) {
		int want, r;

		memcpy(bad, dma, sizeof(dma));
		if (k == 0) { /* a never-mapped address: 16 pages below the lowest mapping */
			uint64_t lowest = dma[0];

			for (unsigned int i = 1; i < 64; i++)
				lowest = dma[i] < lowest ? dma[i] : lowest;
			bad[40] = lowest - 16 * PG;
			want = -ENOENT;
		} else if (k == 1) { /* an address twice */
			bad[50] = dma[3];
			want = -ENOENT;
		} else if (k == 2) { /* an offset the mapping does not start at */
			bad[63] = dma[63] + 8;
			want = -ENOENT;
		} else { /* an address of a mapping already unmapped (the last case) */
			assert_int_equal(dg_dma_unmap_single(t.dd, dma[20], 200, DG_DMA_TO_DEVICE,
							     0, NULL),
					 0);
			want = -ENOENT;
		}
		if (p == DG_DMA_IDENTITY)
			want = 0;
		if (k == 0 && p != DG_DMA_IDENTITY) /* the single call says the same */
			assert_int_equal(dg_dma_unmap_single(t.dd, bad[40], 200, DG_DMA_TO_DEVICE,
							     0, NULL),
					 want);
		dg_dma_batch_begin(t.dd, &b);
		r = dg_dma_unmap_bulk(t.dd, bad, 64, 200, DG_DMA_TO_DEVICE, 0, &b);
		assert_int_equal(b.n, 0);
		assert_int_equal(dg_dma_batch_end(&b), 0);
		if (p == DG_DMA_IDENTITY) { /* no per-mapping state: only face checks */
			assert_int_equal(r, 0);
			assert_int_equal(
				dg_dma_map_bulk(t.dd, bufs, 64, 200, DG_DMA_TO_DEVICE, 0, dma), 0);
			continue;
		}
		assert_int_equal(r, want);
		assert_int_equal(live(&t), k == 3 ? 63 : 64);
		for (unsigned int i = 0; i < 64; i++)
			if (k < 3 || i != 20)
				reaches(&t, dma[i], bufs[i], 200, DG_DMA_TO_DEVICE);
	}
	if (p != DG_DMA_IDENTITY) {
		assert_int_equal(
			dg_dma_map_single(t.dd, bufs[20], 200, DG_DMA_TO_DEVICE, 0, &dma[20]), 0);
		/* wrong length, wrong direction: -EINVAL, as the single call */
		assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 64, 201, DG_DMA_TO_DEVICE, 0, NULL),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma[0], 201, DG_DMA_TO_DEVICE, 0, NULL),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 64, 200, DG_DMA_BIDIRECTIONAL, 0,
						   NULL),
				 -EINVAL);
		assert_int_equal(live(&t), 64);
		for (unsigned int i = 0; i < 64; i++)
			reaches(&t, dma[i], bufs[i], 200, DG_DMA_TO_DEVICE);
	}
	assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 64, 200, DG_DMA_TO_DEVICE, 0, NULL), 0);
	teardown(&t);
}

static void test_refuse(void **state)
{
	(void)state;
	run_refuse(DG_DMA_STRICT, false);
	run_refuse(DG_DMA_STRICT, true);
	run_refuse(DG_DMA_LAZY, false);
	run_refuse(DG_DMA_IDENTITY, false);
}

/* Bad arguments, unsupported policies. */
static void test_args(void **state)
{
	/* bounce has its own bulk calls (tests/unit/dma/bounce_cache_test.c) */
	static const enum dg_dma_policy other[] = {DG_DMA_WINDOW, DG_DMA_POOL};
	void *bufs[DG_DMA_BULK_MAX + 1];
	uint64_t dma[DG_DMA_BULK_MAX + 1];
	struct dg_dma_batch b;
	struct t t;

	(void)state;
	setup(&t, DG_DMA_STRICT, false);
	for (unsigned int i = 0; i <= DG_DMA_BULK_MAX; i++)
		bufs[i] = t.mem + i * PG;
	assert_int_equal(dg_dma_map_bulk(NULL, bufs, 4, 64, DG_DMA_TO_DEVICE, 0, dma), -EINVAL);
	assert_int_equal(dg_dma_map_bulk(t.dd, NULL, 4, 64, DG_DMA_TO_DEVICE, 0, dma), -EINVAL);
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 4, 64, DG_DMA_TO_DEVICE, 0, NULL), -EINVAL);
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 0, 64, DG_DMA_TO_DEVICE, 0, dma), -EINVAL);
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, DG_DMA_BULK_MAX + 1, 64, DG_DMA_TO_DEVICE, 0,
					 dma),
			 -EINVAL);
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 4, 0, DG_DMA_TO_DEVICE, 0, dma), -EINVAL);
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 4, 64, (enum dg_dma_dir)3, 0, dma), -EINVAL);
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 4, 64, DG_DMA_TO_DEVICE, 8, dma), -EINVAL);
	bufs[2] = NULL;
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 4, 64, DG_DMA_TO_DEVICE, 0, dma), -EINVAL);
	bufs[2] = (void *)(UINTPTR_MAX - 10); /* wraps */
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 4, 64, DG_DMA_TO_DEVICE, 0, dma), -ERANGE);
	bufs[2] = t.mem + 2 * PG;
	assert_int_equal(live(&t), 0);
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 4, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
	dg_dma_batch_begin(t.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 0, 64, DG_DMA_TO_DEVICE, 0, &b), -EINVAL);
	assert_int_equal(dg_dma_unmap_bulk(t.dd, NULL, 4, 64, DG_DMA_TO_DEVICE, 0, &b), -EINVAL);
	assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 4, 0, DG_DMA_TO_DEVICE, 0, &b), -EINVAL);
	assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, DG_DMA_BULK_MAX + 1, 64, DG_DMA_TO_DEVICE, 0,
					   &b),
			 -EINVAL);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(live(&t), 4);
	/* a batch of another device */
	{
		struct dg_device *dev2 = NULL;
		struct dg_dma_dev *d2 = fixture_dev(&t.f, 2, DG_DMA_STRICT, NULL, &dev2);

		assert_non_null(d2);
		dg_dma_batch_begin(d2, &b);
		assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 4, 64, DG_DMA_TO_DEVICE, 0, &b),
				 -EINVAL);
		assert_int_equal(dg_dma_batch_end(&b), 0);
		fixture_dev_destroy(d2);
	}
	assert_int_equal(live(&t), 4);
	assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 4, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	for (unsigned int k = 0; k < 2; k++) { /* supported since session 11 (test_fixed_bulk) */
		assert_int_equal(dg_dma_dev_set_policy(t.dd, other[k]), 0);
		assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 4, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
		assert_int_equal(live(&t), 4);
		assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 4, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_int_equal(live(&t), 0);
	}
	assert_int_equal(dg_dma_dev_set_policy(t.dd, DG_DMA_STRICT), 0);
	teardown(&t);
}

/* Fails the @cookie-th page-table map (counting from 1) and every one after it. */
static int fail_nth(void *cookie, enum dg_dma_fail_point point, uint32_t rid)
{
	unsigned int *left = cookie;

	(void)rid;
	if (point != DG_DMA_FAIL_PT_MAP)
		return 0;
	if (*left && --*left)
		return 0;
	return -ENOMEM;
}

/* A map failing part-way leaves nothing mapped: the maps done were undone and invalidated
 * (the short way's undo for strict, the single calls' for the reference). */
static void test_fail_partway(void **state)
{
	void *bufs[64];
	uint64_t dma[64], prev[64], d1;
	struct t t;

	(void)state;
	for (unsigned int ref = 0; ref < 2; ref++) {
		setup(&t, DG_DMA_STRICT, ref);
		for (unsigned int i = 0; i < 64; i++)
			bufs[i] = t.mem + i * PG + 64;
		for (unsigned int k = 1; k <= 64; k += 21) {
			unsigned int left = k;
			struct dg_dma_fail_hook hook = {fail_nth, &left};

			/* the addresses the next map is likely to get: they must fault after */
			assert_int_equal(
				dg_dma_map_bulk(t.dd, bufs, 64, 64, DG_DMA_TO_DEVICE, 0, prev), 0);
			assert_int_equal(dg_dma_unmap_bulk(t.dd, prev, 64, 64, DG_DMA_TO_DEVICE, 0,
							   NULL),
					 0);
			dg_dma_set_fail_hook(t.f.dma, &hook);
			assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 64, 64, DG_DMA_TO_DEVICE, 0,
							 dma),
					 -ENOMEM);
			dg_dma_set_fail_hook(t.f.dma, NULL);
			assert_int_equal(live(&t), 0);
			assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
			for (unsigned int i = 0; i < 64; i++)
				faults(&t, prev[i], DG_DMA_TO_DEVICE);
		}
		/* the IOVAs came back: a map gets one, and the device reaches nothing stale */
		assert_int_equal(dg_dma_map_single(t.dd, bufs[0], 64, DG_DMA_TO_DEVICE, 0, &d1), 0);
		reaches(&t, d1, bufs[0], 64, DG_DMA_TO_DEVICE);
		assert_int_equal(dg_dma_unmap_single(t.dd, d1, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		teardown(&t);
	}
}

/* ---- window and pool: the fixed part and the rest ------------------------------------------- */

#define FX_N 40 /* entries of the fixed tests: even ones fixed, odd ones mapped as strict */

struct fx {
	struct t t;
	struct dg_dma_pool *pool;
	void *bufs[FX_N];
};

/* A window with the first half of t.mem direct, or a pool device with a pool of 64 buffers:
 * bufs[] even entries fixed (direct region, pool buffers), odd ones in the second half of
 * t.mem (mapped on demand). */
static void fx_setup(struct fx *x, enum dg_dma_policy p)
{
	struct dg_dma_dev_config c;
	struct t *t = &x->t;

	memset(x, 0, sizeof(*x));
	t->mem = page_alloc(NPG * PG);
	assert_non_null(t->mem);
	for (size_t i = 0; i < NPG * PG; i++)
		t->mem[i] = (uint8_t)(i * 7 + i / PG);
	assert_int_equal(fixture_init(&t->f, false, 0), 0);
	dg_dma_dev_config_init(&c);
	c.policy = p;
	if (p == DG_DMA_WINDOW) {
		c.window.base = 1ull << 40;
		c.window.size = 1ull << 32;
		c.window.page_size = PG;
		c.window.direct = t->mem;
		c.window.direct_size = NPG / 2 * PG;
	}
	t->dd = fixture_dev(&t->f, 1, p, &c, &t->dev);
	assert_non_null(t->dd);
	dg_dev_set_auto_offline(t->dev, true);
	if (p == DG_DMA_POOL) {
		x->pool = dg_dma_pool_create(t->dd, 2048, 64, DG_DMA_BIDIRECTIONAL, 0);
		assert_non_null(x->pool);
	}
	for (unsigned int i = 0; i < FX_N; i++) {
		uint64_t d;

		if (i & 1)
			x->bufs[i] = t->mem + (NPG / 2 + (i * 13) % (NPG / 4)) * PG + 128 + i;
		else if (x->pool)
			assert_int_equal(dg_dma_pool_get(x->pool, &x->bufs[i], &d), 0);
		else
			x->bufs[i] = t->mem + ((i * 29) % (NPG / 2 - 1)) * PG + 256 + i;
	}
}

static void fx_teardown(struct fx *x)
{
	if (x->pool) {
		for (unsigned int i = 0; i < FX_N; i += 2)
			assert_int_equal(dg_dma_pool_put(x->pool, x->bufs[i]), 0);
		assert_int_equal(dg_dma_pool_destroy(x->pool), 0);
	}
	teardown(&x->t);
}

/* Counters of @p: fixed maps, on-demand maps, maps, unmaps. */
static void fx_ctrs(struct fx *x, enum dg_dma_policy p, uint64_t c[4])
{
	struct dg_dma_stats s;

	assert_int_equal(dg_dma_dev_stats(x->t.dd, &s), 0);
	c[0] = p == DG_DMA_POOL ? s.pool_hits : s.window_direct_maps;
	c[1] = p == DG_DMA_POOL ? s.pool_fallbacks : s.window_dynamic_maps;
	c[2] = s.maps;
	c[3] = s.unmaps;
}

static void fx_reach_all(struct fx *x, const uint64_t *dma, size_t len, enum dg_dma_dir dir)
{
	for (unsigned int i = 0; i < FX_N; i++)
		reaches(&x->t, dma[i], x->bufs[i], len, dir);
}

static void run_fixed_bulk(enum dg_dma_policy p)
{
	const size_t len = 64;
	uint64_t dma[FX_N], one[FX_N], bad[FX_N], c0[4], c1[4], c2[4], c3[4], gone;
	struct dg_dma_batch b;
	struct fx x;
	struct t *t = &x.t;

	fx_setup(&x, p);
	for (unsigned int d = 0; d < 2; d++) {
		const enum dg_dma_dir dir = d ? DG_DMA_FROM_DEVICE : DG_DMA_TO_DEVICE;
		unsigned int k;

		/* bulk == n singles: addresses, reach, counters */
		fx_ctrs(&x, p, c0);
		assert_int_equal(dg_dma_map_bulk(t->dd, x.bufs, FX_N, len, dir, 0, dma), 0);
		fx_ctrs(&x, p, c1);
		assert_int_equal(live(t), FX_N);
		assert_int_equal(c1[0] - c0[0], FX_N / 2);
		assert_int_equal(c1[1] - c0[1], FX_N / 2);
		assert_int_equal(c1[2] - c0[2], FX_N);
		assert_int_equal(dg_dma_dev_check(t->dd, stderr), 0);
		fx_reach_all(&x, dma, len, dir);
		dg_dma_batch_begin(t->dd, &b);
		assert_int_equal(dg_dma_unmap_bulk(t->dd, dma, FX_N, len, dir, 0, &b), 0);
		for (unsigned int i = 0; i < FX_N; i++) /* the batch not ended: still reachable */
			reaches(t, dma[i], x.bufs[i], len, dir);
		assert_int_equal(dg_dma_batch_end(&b), 0);
		fx_ctrs(&x, p, c2);
		assert_int_equal(c2[3] - c1[3], FX_N);
		assert_int_equal(live(t), 0);
		for (unsigned int i = 1; i < FX_N; i += 2)
			faults(t, dma[i], dir);
		for (unsigned int i = 0; i < FX_N; i += 2) /* the fixed part stays */
			reaches(t, dma[i], x.bufs[i], len, dir);
		for (unsigned int i = 0; i < FX_N; i++)
			assert_int_equal(dg_dma_map_single(t->dd, x.bufs[i], len, dir, 0, &one[i]),
					 0);
		fx_ctrs(&x, p, c3);
		for (k = 0; k < 3; k++) /* the singles count what the bulk call counted */
			assert_int_equal(c3[k] - c2[k], c1[k] - c0[k]);
		for (unsigned int i = 0; i < FX_N; i += 2)
			assert_int_equal(one[i], dma[i]); /* the fixed address, as the bulk's */
		fx_reach_all(&x, one, len, dir);
		for (unsigned int i = 0; i < FX_N; i++)
			assert_int_equal(dg_dma_unmap_single(t->dd, one[i], len, dir, 0, NULL), 0);
		fx_ctrs(&x, p, c0);
		assert_int_equal(c0[3] - c3[3], c2[3] - c1[3]);
		assert_int_equal(live(t), 0);

		/* a bad entry in the middle of an unmap: refused, everything still live */
		assert_int_equal(dg_dma_map_single(t->dd, x.bufs[1], len, dir, 0, &gone), 0);
		assert_int_equal(dg_dma_unmap_single(t->dd, gone, len, dir, 0, NULL), 0);
		assert_int_equal(dg_dma_map_bulk(t->dd, x.bufs, FX_N, len, dir, 0, dma), 0);
		memcpy(bad, dma, sizeof(bad));
		bad[FX_N / 2 + 1] = gone; /* not mapped now */
		assert_int_equal(dg_dma_unmap_bulk(t->dd, bad, FX_N, len, dir, 0, NULL), -ENOENT);
		memcpy(bad, dma, sizeof(bad));
		bad[FX_N / 2 + 1] = dma[3]; /* an address twice */
		assert_int_equal(dg_dma_unmap_bulk(t->dd, bad, FX_N, len, dir, 0, NULL), -ENOENT);
		assert_int_equal(dg_dma_unmap_bulk(t->dd, dma, FX_N, len * 2, dir, 0, NULL),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_bulk(t->dd, dma, FX_N, len,
						   d ? DG_DMA_TO_DEVICE : DG_DMA_FROM_DEVICE, 0,
						   NULL),
				 -EINVAL);
		dg_dma_batch_begin(t->dd, &b);
		memcpy(bad, dma, sizeof(bad));
		bad[FX_N / 2 + 1] = gone;
		assert_int_equal(dg_dma_unmap_bulk(t->dd, bad, FX_N, len, dir, 0, &b), -ENOENT);
		assert_int_equal(dg_dma_batch_end(&b), 0);
		assert_int_equal(live(t), FX_N);
		assert_int_equal(dg_dma_dev_check(t->dd, stderr), 0);
		fx_reach_all(&x, dma, len, dir);

		/* a double unmap across bulk and single calls */
		assert_int_equal(dg_dma_unmap_single(t->dd, dma[5], len, dir, 0, NULL), 0);
		assert_int_equal(dg_dma_unmap_bulk(t->dd, dma, FX_N, len, dir, 0, NULL), -ENOENT);
		assert_int_equal(live(t), FX_N - 1);
		for (unsigned int i = 0; i < FX_N; i++)
			if (i != 5)
				reaches(t, dma[i], x.bufs[i], len, dir);
		memcpy(bad, dma, sizeof(bad));
		bad[5] = bad[FX_N - 1]; /* the rest, FX_N - 1 entries */
		assert_int_equal(dg_dma_unmap_bulk(t->dd, bad, FX_N - 1, len, dir, 0, NULL), 0);
		assert_int_equal(live(t), 0);
		assert_int_equal(dg_dma_unmap_single(t->dd, dma[7], len, dir, 0, NULL), -ENOENT);
		for (unsigned int i = 1; i < FX_N; i += 2)
			faults(t, dma[i], dir);

		/* a map failing part-way (the 3rd on-demand buffer): nothing mapped */
		for (k = 1; k <= 3; k += 2) {
			unsigned int left = k;
			struct dg_dma_fail_hook hook = {fail_nth, &left};

			dg_dma_set_fail_hook(t->f.dma, &hook);
			assert_int_equal(dg_dma_map_bulk(t->dd, x.bufs, FX_N, len, dir, 0, one),
					 -ENOMEM);
			dg_dma_set_fail_hook(t->f.dma, NULL);
			assert_int_equal(live(t), 0);
			assert_int_equal(dg_dma_dev_check(t->dd, stderr), 0);
			for (unsigned int i = 1; i < 2 * k; i += 2) /* those mapped before */
				faults(t, one[i], dir);
		}
	}
	fx_teardown(&x);
}

static void test_fixed_bulk(void **state)
{
	(void)state;
	run_fixed_bulk(DG_DMA_WINDOW);
	run_fixed_bulk(DG_DMA_POOL);
}

static uint64_t rnd(uint64_t *s)
{
	return xorshift64(s);
}

/*
 * Randomized against the single calls: two devices of the same policy, one driven by the
 * bulk calls, the other by the single calls on the same buffers; every step the same
 * answers, the same live counts, every live mapping reachable; bad unmaps (one entry spoiled)
 * refused by the bulk call with the single call's error for that entry.
 */
static void run_random(enum dg_dma_policy p, uint64_t seed)
{
	static uint64_t dma_a[NPG], dma_b[NPG];
	static size_t len_of[NPG];
	static enum dg_dma_dir dir_of[NPG];
	static bool on[NPG];
	struct dg_device *dev_b = NULL;
	struct dg_dma_dev *db;
	struct dg_dma_stats sa, sb;
	struct t t;

	setup(&t, p, false);
	db = fixture_idle_dev(&t.f, 2, p, false, &dev_b);
	assert_non_null(db);
	memset(on, 0, sizeof(on));
	for (unsigned int step = 0; step < 300; step++) {
		unsigned int n = 1 + (unsigned int)(rnd(&seed) % 48), idx[64], k = 0;
		uint64_t da[64], a_out[64];
		void *bufs[64];
		size_t len = 1 + rnd(&seed) % (rnd(&seed) % 4 ? 4032 : 6000);
		enum dg_dma_dir dir = (enum dg_dma_dir)(rnd(&seed) % 3);
		struct dg_dma_batch b;

		if (rnd(&seed) % 2) { /* map n free pages */
			for (unsigned int tries = 0; tries < 4 * n && k < n; tries++) {
				unsigned int i = (unsigned int)(rnd(&seed) % (NPG - 2));

				if (on[i])
					continue;
				on[i] = true; /* taken for this step */
				idx[k++] = i;
			}
			for (unsigned int j = 0; j < k; j++) {
				size_t o = len > PG ? 0 : rnd(&seed) % (PG - len + 1);

				bufs[j] = t.mem + idx[j] * PG + o;
				len_of[idx[j]] = len;
				dir_of[idx[j]] = dir;
			}
			if (!k)
				continue;
			assert_int_equal(dg_dma_map_bulk(t.dd, bufs, k, len, dir, 0, a_out), 0);
			for (unsigned int j = 0; j < k; j++) {
				assert_int_equal(dg_dma_map_single(db, bufs[j], len, dir, 0,
								   &dma_b[idx[j]]),
						 0);
				dma_a[idx[j]] = a_out[j];
				reaches(&t, a_out[j], bufs[j], len, dir);
				/* the same offset in its granule as the single call's */
				assert_int_equal(a_out[j] & (PG - 1), dma_b[idx[j]] & (PG - 1));
			}
			continue;
		}
		/* unmap up to n live ones of one length and direction, sometimes spoiled */
		for (unsigned int i = 0; i < NPG && k < n; i++) {
			unsigned int c = (unsigned int)((i + rnd(&seed)) % NPG);

			if (!on[c])
				continue;
			bool dup = false;

			for (unsigned int j = 0; j < k; j++)
				dup |= idx[j] == c;
			if (dup ||
			    (k && (len_of[c] != len_of[idx[0]] || dir_of[c] != dir_of[idx[0]])))
				continue;
			idx[k++] = c;
		}
		if (!k)
			continue;
		for (unsigned int j = 0; j < k; j++)
			da[j] = dma_a[idx[j]];
		len = len_of[idx[0]];
		dir = dir_of[idx[0]];
		if (p != DG_DMA_IDENTITY && rnd(&seed) % 4 == 0) { /* spoil one entry */
			unsigned int j = (unsigned int)(rnd(&seed) % k);
			int want;

			da[j] += 1 + rnd(&seed) % 3; /* not the start of a mapping */
			want = dg_dma_unmap_single(t.dd, da[j], len, dir, 0, NULL);
			assert_true(want < 0);
			dg_dma_batch_begin(t.dd, &b);
			assert_int_equal(dg_dma_unmap_bulk(t.dd, da, k, len, dir, 0, &b), want);
			assert_int_equal(dg_dma_batch_end(&b), 0);
			for (unsigned int i = 0; i < k; i++)
				reaches(&t, dma_a[idx[i]],
					t.mem + idx[i] * PG + (dma_a[idx[i]] & (PG - 1)), len, dir);
			continue;
		}
		dg_dma_batch_begin(t.dd, &b);
		assert_int_equal(dg_dma_unmap_bulk(t.dd, da, k, len, dir, 0, &b), 0);
		assert_int_equal(dg_dma_batch_end(&b), 0);
		for (unsigned int j = 0; j < k; j++) {
			assert_int_equal(dg_dma_unmap_single(db, dma_b[idx[j]], len, dir, 0, NULL),
					 0);
			if (p == DG_DMA_STRICT)
				faults(&t, da[j], dir);
			on[idx[j]] = false;
		}
		assert_int_equal(dg_dma_dev_stats(t.dd, &sa), 0);
		assert_int_equal(dg_dma_dev_stats(db, &sb), 0);
		assert_int_equal(sa.live, sb.live);
		assert_int_equal(sa.maps, sb.maps);
		assert_int_equal(sa.map_bytes, sb.map_bytes);
		assert_int_equal(sa.subpage_bytes, sb.subpage_bytes);
	}
	assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
	for (unsigned int i = 0; i < NPG; i++)
		if (on[i]) {
			assert_int_equal(dg_dma_unmap_bulk(t.dd, &dma_a[i], 1, len_of[i], dir_of[i],
							   0, NULL),
					 0);
			assert_int_equal(dg_dma_unmap_single(db, dma_b[i], len_of[i], dir_of[i], 0,
							     NULL),
					 0);
		}
	fixture_dev_destroy(db);
	teardown(&t);
}

static void test_random(void **state)
{
	(void)state;
	run_random(DG_DMA_STRICT, 0x1234567887654321ull);
	run_random(DG_DMA_LAZY, 0x9e3779b97f4a7c15ull);
	run_random(DG_DMA_IDENTITY, 0x2545f4914f6cdd1dull);
}

/* dg_dma_batch_done(): false while unmaps are unsubmitted or a device has not acknowledged,
 * true once it has (the end then does not wait), and for an empty batch. */
static void test_batch_done(void **state)
{
	void *bufs[8];
	uint64_t dma[8];
	struct dg_dma_batch b;
	struct t t;

	(void)state;
	setup(&t, DG_DMA_STRICT, false);
	dg_dev_set_auto_offline(t.dev, false);
	for (unsigned int i = 0; i < 8; i++)
		bufs[i] = t.mem + i * PG;
	assert_false(dg_dma_batch_done(NULL));
	memset(&b, 0, sizeof(b));
	assert_false(dg_dma_batch_done(&b)); /* not begun */
	dg_dma_batch_begin(t.dd, &b);
	assert_true(dg_dma_batch_done(&b)); /* empty */
	assert_int_equal(dg_dma_map_bulk(t.dd, bufs, 8, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
	reaches(&t, dma[0], bufs[0], 64, DG_DMA_TO_DEVICE); /* the device is online now */
	assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 8, 64, DG_DMA_TO_DEVICE, 0, &b), 0);
	assert_false(dg_dma_batch_done(&b)); /* not submitted */
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	assert_false(dg_dma_batch_done(&b)); /* the device has not acknowledged */
	assert_false(dg_dma_batch_done(&b));
	dg_dev_quiesce(t.dev);
	assert_true(dg_dma_batch_done(&b));
	assert_int_equal(dg_dma_batch_end(&b), 0);
	for (unsigned int i = 0; i < 8; i++)
		faults(&t, dma[i], DG_DMA_TO_DEVICE);
	assert_false(dg_dma_batch_done(&b)); /* ended */
	dg_dev_offline(t.dev);
	teardown(&t);
}

/* ---- two-step --------------------------------------------------------------------------------- */

static void run_link(enum dg_dma_policy p, bool reference, uint64_t stride, size_t len)
{
	struct dg_dma_iova_state st;
	void *bufs[128];
	uint64_t dma[128], d;
	struct dg_dma_stats s0, s1;
	struct dg_dma_batch b;
	const unsigned int n = 100;
	const size_t off = len + 64 <= PG ? 64 : 0;
	struct t t;

	setup(&t, p, reference);
	assert_int_equal(dg_dma_iova_alloc(t.dd, SLOTS * stride, &st), 0);
	for (unsigned int i = 0; i < n; i++)
		bufs[i] = t.mem + ((i * 37) % (NPG - 2)) * PG + off;
	assert_int_equal(dg_dma_dev_stats(t.dd, &s0), 0);
	/* slots 7.. (a ring after some use) */
	assert_int_equal(dg_dma_iova_link_bulk(&st, 7 * stride, stride, bufs, n, len,
					       DG_DMA_TO_DEVICE, dma),
			 0);
	for (unsigned int i = 0; i < n; i++) {
		if (p != DG_DMA_IDENTITY)
			assert_int_equal(dma[i], st.addr + (7 + i) * stride + off);
		reaches(&t, dma[i], bufs[i], len, DG_DMA_TO_DEVICE);
	}
	if (p != DG_DMA_IDENTITY) {
		/* a linked slot refuses a bulk link over it, with nothing linked */
		assert_int_equal(dg_dma_iova_link_bulk(&st, 0, stride, bufs, 8, len,
						       DG_DMA_TO_DEVICE, dma + n),
				 -EEXIST);
		assert_int_equal(dg_dma_iova_unlink(&st, 0, len, DG_DMA_TO_DEVICE, NULL), -ENOENT);
		/* one slot not linked: the whole unlink is refused */
		assert_int_equal(dg_dma_iova_unlink_bulk(&st, 6 * stride, stride, 10, len,
							 DG_DMA_TO_DEVICE, NULL),
				 -ENOENT);
		assert_int_equal(dg_dma_iova_unlink_bulk(&st, 7 * stride, stride, n + 1, len,
							 DG_DMA_TO_DEVICE, NULL),
				 -ENOENT);
		assert_int_equal(dg_dma_iova_unlink_bulk(&st, 7 * stride, stride, n, len + 1,
							 DG_DMA_TO_DEVICE, NULL),
				 -EINVAL);
		assert_int_equal(dg_dma_iova_unlink_bulk(&st, 7 * stride, stride, n, len,
							 DG_DMA_FROM_DEVICE, NULL),
				 -EINVAL);
		for (unsigned int i = 0; i < n; i++)
			reaches(&t, dma[i], bufs[i], len, DG_DMA_TO_DEVICE);
	}
	dg_dma_batch_begin(t.dd, &b);
	assert_int_equal(
		dg_dma_iova_unlink_bulk(&st, 7 * stride, stride, n, len, DG_DMA_TO_DEVICE, &b), 0);
	if (p != DG_DMA_IDENTITY && !reference) { /* pending until the batch's end */
		assert_int_equal(dg_dma_iova_link(&st, 7 * stride, bufs[0], len, DG_DMA_TO_DEVICE,
						  &d),
				 -EEXIST);
		assert_int_equal(dg_dma_iova_link_bulk(&st, 7 * stride, stride, bufs, 1, len,
						       DG_DMA_TO_DEVICE, &d),
				 -EEXIST);
	}
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(dg_dma_dev_stats(t.dd, &s1), 0);
	assert_int_equal(s1.links - s0.links, n);
	assert_int_equal(s1.unlinks - s0.unlinks, n);
	if (p != DG_DMA_IDENTITY)
		for (unsigned int i = 0; i < n; i++)
			faults(&t, dma[i], DG_DMA_TO_DEVICE);
	/* linkable again; without a batch one wait covers the unlinks */
	assert_int_equal(dg_dma_iova_link_bulk(&st, 7 * stride, stride, bufs, n, len,
					       DG_DMA_TO_DEVICE, dma),
			 0);
	assert_int_equal(dg_dma_iova_unlink_bulk(&st, 7 * stride, stride, n, len, DG_DMA_TO_DEVICE,
						 NULL),
			 0);
	if (p != DG_DMA_IDENTITY)
		for (unsigned int i = 0; i < n; i++)
			faults(&t, dma[i], DG_DMA_TO_DEVICE);
	/* arguments */
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, stride, bufs, 0, len, DG_DMA_TO_DEVICE, dma),
			 -EINVAL);
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, stride, bufs, DG_DMA_BULK_MAX + 1, len,
					       DG_DMA_TO_DEVICE, dma),
			 -EINVAL);
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, 0, bufs, 2, len, DG_DMA_TO_DEVICE, dma),
			 -EINVAL);
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, stride + 1, bufs, 2, len, DG_DMA_TO_DEVICE,
					       dma),
			 -EINVAL);
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, stride, NULL, 2, len, DG_DMA_TO_DEVICE, dma),
			 -EINVAL);
	assert_int_equal(dg_dma_iova_link_bulk(&st, (SLOTS - 1) * stride, stride, bufs, 2, len,
					       DG_DMA_TO_DEVICE, dma),
			 -ERANGE);
	assert_int_equal(dg_dma_iova_unlink_bulk(&st, (SLOTS - 1) * stride, stride, 2, len,
						 DG_DMA_TO_DEVICE, NULL),
			 -ERANGE);
	/* a buffer longer than a stride */
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, stride, bufs, 2, stride + 1,
					       DG_DMA_TO_DEVICE, dma),
			 -EINVAL);
	assert_int_equal(live(&t), 0);
	assert_int_equal(dg_dma_iova_free(&st), 0);
	teardown(&t);
}

static void test_link(void **state)
{
	(void)state;
	run_link(DG_DMA_STRICT, false, PG, 64);	      /* ring slots: the short way */
	run_link(DG_DMA_STRICT, false, 2 * PG, 64);   /* spaced slots */
	run_link(DG_DMA_STRICT, false, 2 * PG, 5000); /* two granules each: the general way */
	run_link(DG_DMA_STRICT, true, PG, 64);	      /* the reference */
	run_link(DG_DMA_LAZY, false, PG, 2048);
	run_link(DG_DMA_WINDOW, false, PG, 64);
	run_link(DG_DMA_IDENTITY, false, PG, 64);
}

/* A link failing part-way leaves nothing linked. */
static void test_link_fail(void **state)
{
	unsigned int left = 5;
	struct dg_dma_fail_hook hook = {fail_nth, &left};
	struct dg_dma_iova_state st;
	void *bufs[16];
	uint64_t dma[16];
	struct t t;

	(void)state;
	setup(&t, DG_DMA_STRICT, false);
	assert_int_equal(dg_dma_iova_alloc(t.dd, SLOTS * PG, &st), 0);
	for (unsigned int i = 0; i < 16; i++)
		bufs[i] = t.mem + i * PG;
	/* with a hook the single calls link one by one; the fifth is refused: the four
	   linked before it are unlinked again (with a wait) */
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, PG, bufs, 8, 64, DG_DMA_TO_DEVICE, dma), 0);
	assert_int_equal(dg_dma_iova_unlink_bulk(&st, 0, PG, 8, 64, DG_DMA_TO_DEVICE, NULL), 0);
	dg_dma_set_fail_hook(t.f.dma, &hook);
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, PG, bufs, 16, 64, DG_DMA_TO_DEVICE, dma),
			 -ENOMEM);
	dg_dma_set_fail_hook(t.f.dma, NULL);
	assert_int_equal(live(&t), 0);
	for (unsigned int i = 0; i < 16; i++)
		faults(&t, st.addr + i * PG, DG_DMA_TO_DEVICE);
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, PG, bufs, 16, 64, DG_DMA_TO_DEVICE, dma), 0);
	for (unsigned int i = 0; i < 16; i++)
		reaches(&t, dma[i], bufs[i], 64, DG_DMA_TO_DEVICE);
	assert_int_equal(dg_dma_iova_unlink_bulk(&st, 0, PG, 16, 64, DG_DMA_TO_DEVICE, NULL), 0);
	assert_int_equal(dg_dma_iova_free(&st), 0);
	teardown(&t);
}

/* Randomized against the single calls: two ranges, the same ring of slots, one through the
 * bulk calls, one through the single calls; the same addresses relative to the range, the
 * same answers, spoiled unlinks refused with the single call's error. */
static void test_link_random(void **state)
{
	struct dg_dma_iova_state sa, sb;
	static bool on[SLOTS];
	static size_t len_of[SLOTS];
	uint64_t seed = 0xfeedfacecafebeefull;
	struct t t;

	(void)state;
	setup(&t, DG_DMA_STRICT, false);
	assert_int_equal(dg_dma_iova_alloc(t.dd, SLOTS * PG, &sa), 0);
	assert_int_equal(dg_dma_iova_alloc(t.dd, SLOTS * PG, &sb), 0);
	memset(on, 0, sizeof(on));
	for (unsigned int step = 0; step < 400; step++) {
		unsigned int first = (unsigned int)(rnd(&seed) % SLOTS);
		unsigned int n = 1 + (unsigned int)(rnd(&seed) % 40);
		size_t len = 1 + rnd(&seed) % 4000;
		uint64_t da[64], db;
		void *bufs[64];
		int want = 0, r;

		if (first + n > SLOTS)
			n = SLOTS - first;
		if (rnd(&seed) % 2) {
			for (unsigned int j = 0; j < n; j++) {
				bufs[j] = t.mem + (first + j) * PG + rnd(&seed) % (PG - len + 1);
				if (on[first + j])
					want = -EEXIST;
			}
			r = dg_dma_iova_link_bulk(&sa, first * PG, PG, bufs, n, len,
						  DG_DMA_TO_DEVICE, da);
			assert_int_equal(r, want);
			if (r)
				continue;
			for (unsigned int j = 0; j < n; j++) {
				assert_int_equal(dg_dma_iova_link(&sb, (first + j) * PG, bufs[j],
								  len, DG_DMA_TO_DEVICE, &db),
						 0);
				assert_int_equal(da[j] - sa.addr, db - sb.addr);
				reaches(&t, da[j], bufs[j], len, DG_DMA_TO_DEVICE);
				on[first + j] = true;
				len_of[first + j] = len;
			}
			continue;
		}
		/* unlink [first, first + n) with the first slot's length, if linked */
		len = on[first] ? len_of[first] : len;
		for (unsigned int j = 0; j < n && !want; j++)
			if (!on[first + j])
				want = -ENOENT;
			else if (len_of[first + j] != len)
				want = -EINVAL;
		r = dg_dma_iova_unlink_bulk(&sa, first * PG, PG, n, len, DG_DMA_TO_DEVICE, NULL);
		assert_int_equal(r, want);
		if (r) { /* the single call on the first bad slot says the same */
			for (unsigned int j = 0; j < n; j++)
				if (!on[first + j] || len_of[first + j] != len) {
					assert_int_equal(dg_dma_iova_unlink(&sb, (first + j) * PG,
									    len, DG_DMA_TO_DEVICE,
									    NULL),
							 want);
					break;
				}
			for (unsigned int j = 0; j < SLOTS; j++)
				if (on[j])
					reaches(&t, sa.addr + j * PG + 0, t.mem + j * PG + 0, 1,
						DG_DMA_TO_DEVICE);
			continue;
		}
		for (unsigned int j = 0; j < n; j++) {
			assert_int_equal(dg_dma_iova_unlink(&sb, (first + j) * PG, len,
							    DG_DMA_TO_DEVICE, NULL),
					 0);
			faults(&t, sa.addr + (first + j) * PG, DG_DMA_TO_DEVICE);
			on[first + j] = false;
		}
	}
	for (unsigned int j = 0; j < SLOTS; j++)
		if (on[j]) {
			assert_int_equal(dg_dma_iova_unlink_bulk(&sa, j * PG, PG, 1, len_of[j],
								 DG_DMA_TO_DEVICE, NULL),
					 0);
			assert_int_equal(dg_dma_iova_unlink(&sb, j * PG, len_of[j],
							    DG_DMA_TO_DEVICE, NULL),
					 0);
		}
	assert_int_equal(dg_dma_iova_free(&sa), 0);
	assert_int_equal(dg_dma_iova_free(&sb), 0);
	teardown(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_map_unmap),  cmocka_unit_test(test_refuse),
		cmocka_unit_test(test_args),	   cmocka_unit_test(test_fail_partway),
		cmocka_unit_test(test_random),	   cmocka_unit_test(test_link),
		cmocka_unit_test(test_link_fail),  cmocka_unit_test(test_link_random),
		cmocka_unit_test(test_batch_done), cmocka_unit_test(test_fixed_bulk),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
