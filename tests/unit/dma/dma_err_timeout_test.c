/* SPDX-License-Identifier: MIT */
/*
 * What dg_dma_stats.err_timeout counts (dma.h): calls on the device that returned
 * -ETIMEDOUT, once per call however many of its invalidation waits timed out, like every
 * err_* counter (each counts failures returned to the caller). The waits themselves are
 * dg_iommu_stats.wait_timeouts. So:
 *  - a batch whose early flush (a full ent[]) times out and whose end times out too: the
 *    unmap that flushed returns 0 (the early flush's error is the end's to report), the end
 *    returns -ETIMEDOUT: one count, two timed-out waits;
 *  - a batch whose early flush timed out and whose end's own wait completes: the end still
 *    returns -ETIMEDOUT (the early flush's buffers were not confirmed by it): one count;
 *  - an unmap without a batch, a bulk unmap without a batch (one wait for all): one each;
 *  - lazy's full flush queue whose wait times out and whose rest retires the strict way with
 *    one more wait that times out: one count for the call;
 *  - dg_dma_batch_submit() while the device does not answer (it does not wait) and a
 *    housekeeping pass that finds the quarantine still unconfirmed: none;
 *  - a bulk map that fails part-way on a path that maps one by one (strict's general way,
 *    window's and pool's on-demand maps) and whose undo's wait times out: none - the call
 *    returns its own error (counted once, as that error), as every other undo path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dmaguard/dev.h>
#include <dmaguard/dma.h>
#include <dmaguard/iommu.h>

#include "dma_test_util.h"

#define TIMEOUT_NS 5000000ull /* waits give up after 5 ms */
#define G	   4096u
#define N	   320u /* two bulk calls of 160: more than DG_DMA_BATCH_MAX */

static uint64_t err_timeout(struct dg_dma_dev *dd)
{
	struct dg_dma_stats st;

	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	return st.err_timeout;
}

static uint64_t wait_timeouts(struct dma_fixture *f)
{
	struct dg_iommu_stats s;

	dg_iommu_stats(f->mmu, &s);
	return s.wait_timeouts;
}

struct env {
	struct dma_fixture f;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	uint8_t *mem;
	void *bufs[N];
	uint64_t dma[N];
	uint64_t e0, w0; /* err_timeout and the IOMMU's wait_timeouts at the last env_mark() */
};

/* Both counters from now on (env_counts() reports what came after). */
static void env_mark(struct env *e)
{
	e->e0 = err_timeout(e->dd);
	e->w0 = wait_timeouts(&e->f);
}

/* Since the mark: @waits waits timed out and @calls calls were counted in err_timeout. */
static void env_counts(struct env *e, uint64_t waits, uint64_t calls)
{
	assert_int_equal(wait_timeouts(&e->f) - e->w0, waits);
	assert_int_equal(err_timeout(e->dd) - e->e0, calls);
}

/* A device of configuration @c with N one-page buffers mapped in two bulk calls; the device
 * did one DMA and stays online without acknowledging: every wait times out. Marked. */
static void env_init_cfg(struct env *e, const struct dg_dma_dev_config *c)
{
	uint8_t got[8];

	assert_int_equal(fixture_init(&e->f, false, TIMEOUT_NS), 0);
	e->dd = fixture_dev(&e->f, 1, c->policy, c, &e->dev);
	assert_non_null(e->dd);
	e->mem = page_alloc(N * G);
	for (unsigned int i = 0; i < N; i++)
		e->bufs[i] = e->mem + (size_t)i * G;
	assert_int_equal(dg_dma_map_bulk(e->dd, e->bufs, N / 2, 64, DG_DMA_TO_DEVICE, 0, e->dma),
			 0);
	assert_int_equal(dg_dma_map_bulk(e->dd, e->bufs + N / 2, N / 2, 64, DG_DMA_TO_DEVICE, 0,
					 e->dma + N / 2),
			 0);
	assert_int_equal(dg_dev_read(e->dev, e->dma[0], got, sizeof(got)), 0);
	env_mark(e);
}

/* env_init_cfg() of a strict (or lazy: @lazy_queue, 0 = the default queue) device. */
static void env_init(struct env *e, enum dg_dma_policy policy, uint32_t lazy_queue)
{
	struct dg_dma_dev_config c;

	dg_dma_dev_config_init(&c);
	c.policy = policy;
	if (lazy_queue)
		c.lazy.queue_size = lazy_queue;
	env_init_cfg(e, &c);
}

/* The N buffers unmapped without a batch, in two bulk calls, each returning @want. */
static void env_unmap_all(struct env *e, int want)
{
	assert_int_equal(dg_dma_unmap_bulk(e->dd, e->dma, N / 2, 64, DG_DMA_TO_DEVICE, 0, NULL),
			 want);
	assert_int_equal(dg_dma_unmap_bulk(e->dd, e->dma + N / 2, N / 2, 64, DG_DMA_TO_DEVICE, 0,
					   NULL),
			 want);
}

/* Recovery and the end: every unmapped address faults, nothing leaks. */
static void env_fini(struct env *e)
{
	struct dg_dma_stats st;
	uint8_t got[8];

	fixture_dev_answers(e->dev);
	fixture_advance(&e->f, 1000000000ull);
	assert_int_equal(dg_dma_housekeep(e->f.dma), 0);
	assert_int_equal(dg_dma_housekeep(e->f.dma), 0);
	assert_int_equal(dg_dma_dev_stats(e->dd, &st), 0);
	assert_int_equal(st.quarantined, 0);
	assert_int_equal(st.live, 0);
	for (unsigned int i = 0; i < N; i++)
		assert_int_equal(dg_dev_read(e->dev, e->dma[i], got, sizeof(got)), -EFAULT);
	fixture_faults(&e->f);
	assert_int_equal(fixture_end(&e->f, e->dd), 0);
	free(e->mem);
}

/* Early flush and end both time out: one call failed, one count, two waits timed out. */
static void test_batch_two_timeouts_one_count(void **state)
{
	struct env e;
	struct dg_dma_batch b;

	(void)state;
	env_init(&e, DG_DMA_STRICT, 0);
	dg_dma_batch_begin(e.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, e.dma, N / 2, 64, DG_DMA_TO_DEVICE, 0, &b), 0);
	/* no wait: nothing counted while the device does not answer */
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	env_counts(&e, 0, 0);
	/* flushed first (a full ent[]), the wait times out; the call still succeeds */
	assert_int_equal(dg_dma_unmap_bulk(e.dd, e.dma + N / 2, N / 2, 64, DG_DMA_TO_DEVICE, 0, &b),
			 0);
	assert_int_equal(b.flushes, 1);
	env_counts(&e, 1, 0);
	assert_int_equal(dg_dma_batch_end(&b), -ETIMEDOUT);
	env_counts(&e, 2, 1);
	/* housekeeping that finds nothing confirmed counts nothing */
	assert_int_equal(dg_dma_housekeep(e.f.dma), 0);
	env_counts(&e, 2, 1);
	env_fini(&e);
}

/* The early flush times out, the end's own wait completes: the end still reports the early
 * flush's -ETIMEDOUT (counted once); its buffers stay quarantined until housekeeping. */
static void test_batch_early_timeout_end_reports(void **state)
{
	struct env e;
	struct dg_dma_batch b;
	struct dg_dma_stats st;

	(void)state;
	env_init(&e, DG_DMA_STRICT, 0);
	dg_dma_batch_begin(e.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, e.dma, N / 2, 64, DG_DMA_TO_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, e.dma + N / 2, N / 2, 64, DG_DMA_TO_DEVICE, 0, &b),
			 0);
	env_counts(&e, 1, 0);
	fixture_dev_answers(e.dev);
	assert_int_equal(dg_dma_batch_end(&b), -ETIMEDOUT);
	env_counts(&e, 1, 1);
	assert_int_equal(dg_dma_dev_stats(e.dd, &st), 0);
	assert_true(st.quarantined >= 1);
	env_fini(&e);
}

/* Unmaps without a batch: one count per call, a bulk call's one wait included. */
static void test_unbatched_one_count_per_call(void **state)
{
	struct env e;

	(void)state;
	env_init(&e, DG_DMA_STRICT, 0);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, e.dma, N / 2, 64, DG_DMA_TO_DEVICE, 0, NULL),
			 -ETIMEDOUT);
	env_counts(&e, 1, 1);
	for (unsigned int i = N / 2; i < N / 2 + 3; i++)
		assert_int_equal(dg_dma_unmap_single(e.dd, e.dma[i], 64, DG_DMA_TO_DEVICE, 0, NULL),
				 -ETIMEDOUT);
	env_counts(&e, 4, 4);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, e.dma + N / 2 + 3, N / 2 - 3, 64, DG_DMA_TO_DEVICE,
					   0, NULL),
			 -ETIMEDOUT);
	env_counts(&e, 5, 5);
	env_fini(&e);
}

/* Lazy's full queue: two waits time out in one call (the queue's flush, the strict rest). */
static void test_lazy_full_queue_one_count(void **state)
{
	struct env e;

	(void)state;
	env_init(&e, DG_DMA_LAZY, 16);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, e.dma, 64, 64, DG_DMA_TO_DEVICE, 0, NULL),
			 -ETIMEDOUT);
	env_counts(&e, 2, 1);
	/* the rest: each call that returns -ETIMEDOUT counts once */
	for (unsigned int i = 64; i < N; i += 64) {
		uint64_t c = err_timeout(e.dd);
		int r = dg_dma_unmap_bulk(e.dd, e.dma + i, 64, 64, DG_DMA_TO_DEVICE, 0, NULL);

		assert_true(r == 0 || r == -ETIMEDOUT);
		assert_int_equal(err_timeout(e.dd) - c, r ? 1 : 0);
	}
	env_fini(&e);
}

/* A bulk unlink of links over a granule (dg_dma_iova_unlink_bulk()'s general way) without a
 * batch: dma.h promises one invalidation and one wait for all of them. */
static void test_unlink_bulk_one_wait(void **state)
{
	enum { NL = 8 };
	struct env e;
	struct dg_dma_iova_state st = {0};
	uint8_t *lm = page_alloc(NL * 2 * G), got[8];
	void *lb[NL];
	uint64_t ld[NL];

	(void)state;
	env_init(&e, DG_DMA_STRICT, 0);
	assert_int_equal(dg_dma_iova_alloc(e.dd, NL * 2 * G, &st), 0);
	for (unsigned int i = 0; i < NL; i++)
		lb[i] = lm + (size_t)i * 2 * G;
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, 2 * G, lb, NL, 2 * G, DG_DMA_TO_DEVICE, ld),
			 0);
	assert_int_equal(dg_dma_iova_sync(&st, 0, NL * 2 * G), 0);
	assert_int_equal(dg_dev_read(e.dev, ld[NL - 1] + G, got, sizeof(got)), 0);
	env_mark(&e);
	assert_int_equal(dg_dma_iova_unlink_bulk(&st, 0, 2 * G, NL, 2 * G, DG_DMA_TO_DEVICE, NULL),
			 -ETIMEDOUT);
	env_counts(&e, 1, 1);
	/* unconfirmed: not linkable again yet */
	assert_int_equal(dg_dma_iova_link(&st, 0, lb[0], 2 * G, DG_DMA_TO_DEVICE, &ld[0]), -EEXIST);
	fixture_dev_answers(e.dev);
	assert_int_equal(dg_dma_housekeep(e.f.dma), 0);
	for (unsigned int i = 0; i < NL; i++) {
		assert_int_equal(dg_dev_read(e.dev, st.addr + (uint64_t)i * 2 * G, got, 8),
				 -EFAULT);
		assert_int_equal(dg_dev_read(e.dev, st.addr + (uint64_t)i * 2 * G + G, got, 8),
				 -EFAULT);
	}
	assert_int_equal(dg_dma_iova_free(&st), 0);
	env_unmap_all(&e, 0);
	env_fini(&e);
	free(lm);
}

/* The fail hook: DG_DMA_FAIL_IOVA fails (-ENOSPC) at its *left-th call. */
static int fail_nth_iova(void *cookie, enum dg_dma_fail_point point, uint32_t rid)
{
	unsigned int *left = cookie;

	(void)rid;
	if (point != DG_DMA_FAIL_IOVA || !*left || --*left)
		return 0;
	return -ENOSPC;
}

/*
 * A bulk map on a device of configuration @c whose buffers (NB of @len, apart by 2 granules
 * + @off) it maps one by one, the third IOVA refused; the device is online and silent, so
 * the undo of the two maps made times out: the call returns -ENOSPC, counted as that
 * (err_iova_space) and not as a timeout (err_timeout); the two are parked, nothing is live.
 */
static void map_bulk_undo_times_out(const struct dg_dma_dev_config *c, size_t len, size_t off)
{
	enum { NB = 4 };
	unsigned int left = 3;
	struct dg_dma_fail_hook hook = {fail_nth_iova, &left};
	struct dg_dma_stats s0, s1;
	struct env e;
	uint8_t *big = page_alloc(NB * 2 * G);
	void *bufs[NB];
	uint64_t d[NB];

	env_init_cfg(&e, c);
	for (unsigned int i = 0; i < NB; i++)
		bufs[i] = big + (size_t)i * 2 * G + off;
	assert_int_equal(dg_dma_dev_stats(e.dd, &s0), 0);
	dg_dma_set_fail_hook(e.f.dma, &hook);
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, NB, len, DG_DMA_TO_DEVICE, 0, d), -ENOSPC);
	dg_dma_set_fail_hook(e.f.dma, NULL);
	assert_int_equal(left, 0); /* the third map was refused: two were made, then undone */
	assert_int_equal(dg_dma_dev_stats(e.dd, &s1), 0);
	env_counts(&e, 1, 0);
	assert_int_equal(s1.err_iova_space - s0.err_iova_space, 1);
	assert_true(s1.quarantined > s0.quarantined); /* parked: never reused unconfirmed */
	assert_int_equal(s1.live, s0.live);
	env_unmap_all(&e, -ETIMEDOUT);
	env_fini(&e);
	free(big);
}

/* Strict's general way: buffers over a granule, dg_dma_map_single() one by one. */
static void test_map_bulk_undo_strict(void **state)
{
	struct dg_dma_dev_config c;

	(void)state;
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_STRICT;
	map_bulk_undo_times_out(&c, 2 * G, 0);
}

/* Window's on-demand maps (dma/fixed_map.h: the strict map per buffer outside the direct
 * part). */
static void test_map_bulk_undo_window(void **state)
{
	struct dg_dma_dev_config c;
	uint8_t *direct = page_alloc(16 * G);

	(void)state;
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_WINDOW;
	c.window.base = 1ull << 40;
	c.window.size = 1ull << 32;
	c.window.page_size = G;
	c.window.direct = direct;
	c.window.direct_size = 16 * G;
	map_bulk_undo_times_out(&c, 64, 128);
	free(direct);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_two_timeouts_one_count),
		cmocka_unit_test(test_batch_early_timeout_end_reports),
		cmocka_unit_test(test_unbatched_one_count_per_call),
		cmocka_unit_test(test_lazy_full_queue_one_count),
		cmocka_unit_test(test_unlink_bulk_one_wait),
		cmocka_unit_test(test_map_bulk_undo_strict),
		cmocka_unit_test(test_map_bulk_undo_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
