/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the batch end's bounce paths (src/dma/map.c batch_flush()): a batch of bounce
 * unmaps holds its slots until its end, then gives every one back - the short way (nothing
 * submitted: one pass over the slots) and the general one (dg_dma_batch_submit() before more
 * unmaps: the submitted part has nothing to invalidate, the end still frees all of them).
 *
 *  - during the batch no slot of an unmap is handed out again (a map gets another slot);
 *  - after the end the slots are free: no byte in use, this thread's next maps get them back
 *    (its stack is last-in first-out), a second unmap of one is -ENOENT, and the device's
 *    structure check holds.
 */
#include "dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#define NB 6

struct env {
	struct dma_fixture f;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
};

static void env_init(struct env *e)
{
	assert_int_equal(fixture_init(&e->f, false, 0), 0);
	e->dd = fixture_idle_dev(&e->f, 1, DG_DMA_BOUNCE, false, &e->dev);
	assert_non_null(e->dd);
}

static void env_fini(struct env *e)
{
	assert_int_equal(dg_dma_dev_check(e->dd, stderr), 0);
	fixture_dev_destroy(e->dd);
	fixture_fini(&e->f);
}

static uint64_t in_use(struct dg_dma_dev *dd)
{
	struct dg_dma_stats st;

	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	return st.bounce_in_use;
}

/* @submit_at: unmaps before dg_dma_batch_submit() (past NB: no submit). */
static void batch_of_bounce_unmaps(unsigned int submit_at)
{
	static uint8_t buf[NB][64];
	uint64_t dma[NB], other, again[NB];
	struct dg_dma_batch b;
	struct env e;

	env_init(&e);
	for (unsigned int i = 0; i < NB; i++)
		assert_int_equal(dg_dma_map_single(e.dd, buf[i], 64, DG_DMA_TO_DEVICE, 0, &dma[i]),
				 0);
	dg_dma_batch_begin(e.dd, &b);
	for (unsigned int i = 0; i <= NB; i++) {
		if (i == submit_at) {
			assert_int_equal(dg_dma_batch_submit(&b), 0);
			assert_true(dg_dma_batch_done(&b)); /* nothing to invalidate */
		}
		if (i < NB)
			assert_int_equal(
				dg_dma_unmap_single(e.dd, dma[i], 64, DG_DMA_TO_DEVICE, 0, &b), 0);
	}
	/* the batch holds its slots: a map now gets another one */
	assert_int_equal(dg_dma_map_single(e.dd, buf[0], 64, DG_DMA_TO_DEVICE, 0, &other), 0);
	for (unsigned int i = 0; i < NB; i++)
		assert_true(other != dma[i]);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	/* every slot is free again (only @other is live) and the next maps get them back */
	assert_int_equal(in_use(e.dd), 64);
	assert_int_equal(dg_dma_unmap_single(e.dd, other, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(in_use(e.dd), 0);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma[NB - 1], 64, DG_DMA_TO_DEVICE, 0, NULL),
			 -ENOENT);
	for (unsigned int i = 0; i < NB; i++) {
		bool found = false;

		assert_int_equal(
			dg_dma_map_single(e.dd, buf[i], 64, DG_DMA_TO_DEVICE, 0, &again[i]), 0);
		for (unsigned int j = 0; j < NB; j++)
			found |= again[i] == dma[j];
		assert_true(found || again[i] == other);
	}
	for (unsigned int i = 0; i < NB; i++)
		assert_int_equal(dg_dma_unmap_single(e.dd, again[i], 64, DG_DMA_TO_DEVICE, 0, NULL),
				 0);
	assert_int_equal(in_use(e.dd), 0);
	env_fini(&e);
}

static void test_bounce_batch(void **state)
{
	(void)state;
	batch_of_bounce_unmaps(NB + 1);
}

static void test_bounce_batch_submitted(void **state)
{
	(void)state;
	batch_of_bounce_unmaps(NB / 2);
}

static void test_bounce_batch_all_submitted(void **state)
{
	(void)state;
	batch_of_bounce_unmaps(NB);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bounce_batch),
		cmocka_unit_test(test_bounce_batch_submitted),
		cmocka_unit_test(test_bounce_batch_all_submitted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
