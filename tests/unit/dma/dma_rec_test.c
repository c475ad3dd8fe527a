/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the record lookups' leaf hint (dma_rec_tls in src/dma/dma_internal.h): a
 * thread's last record leaf is reused only for the table it was found in. Each test fails if
 * the hint were keyed by the leaf number alone:
 *  - two devices used in turn by one thread get the same IOVAs (each has its own space), so
 *    their records sit at the same leaf number: every map and unmap must reach its own
 *    device's record (the other device's mappings stay live, a second unmap is -ENOENT, and
 *    both devices' structure checks hold);
 *  - a device destroyed and another created (its table may reuse the freed memory): the new
 *    device's lookups must not use the old leaf (-ENOENT for what it never mapped; ASan and
 *    valgrind's memcheck, which run every unit test, report a read of the freed leaf).
 */
#include "dma/dma_internal.h" /* before cmocka.h: it defines fail() */
#include "dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define PG 4096u

static void reach(struct dg_dma_dev *dd, uint64_t dma, uint8_t want)
{
	uint8_t v = 0;

	assert_int_equal(dg_dev_read(dg_dma_dev_device(dd), dma, &v, 1), 0);
	assert_int_equal(v, want);
}

static void test_two_devices(void **state)
{
	uint8_t *mem = page_alloc(2 * PG);
	struct dg_dma_dev *a, *b;
	struct dma_fixture f;
	uint64_t da, db;

	(void)state;
	assert_non_null(mem);
	mem[0] = 0xa1;
	mem[PG] = 0xb2;
	assert_int_equal(fixture_init(&f, false, 0), 0);
	a = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, NULL);
	b = fixture_idle_dev(&f, 2, DG_DMA_STRICT, false, NULL);
	assert_non_null(a);
	assert_non_null(b);
	for (unsigned int round = 0; round < 8; round++) {
		assert_int_equal(dg_dma_map_single(a, mem, 64, DG_DMA_TO_DEVICE, 0, &da), 0);
		assert_int_equal(dg_dma_map_single(b, mem + PG, 64, DG_DMA_TO_DEVICE, 0, &db), 0);
		assert_int_equal(da, db); /* the same IOVA in each space: the same leaf number */
		reach(a, da, 0xa1);
		reach(b, db, 0xb2);
		if (round & 1) {
			assert_int_equal(dg_dma_unmap_single(a, da, 64, DG_DMA_TO_DEVICE, 0, NULL),
					 0);
			reach(b, db, 0xb2);
			assert_int_equal(dg_dma_unmap_single(a, da, 64, DG_DMA_TO_DEVICE, 0, NULL),
					 -ENOENT);
			assert_int_equal(dg_dma_unmap_single(b, db, 64, DG_DMA_TO_DEVICE, 0, NULL),
					 0);
		} else {
			assert_int_equal(
				dg_dma_unmap_bulk(b, &db, 1, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
			reach(a, da, 0xa1);
			assert_int_equal(dg_dma_unmap_bulk(b, &db, 1, 64, DG_DMA_TO_DEVICE, 0,
							   NULL),
					 -ENOENT);
			assert_int_equal(
				dg_dma_unmap_bulk(a, &da, 1, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		}
		assert_int_equal(dg_dma_dev_check(a, stderr), 0);
		assert_int_equal(dg_dma_dev_check(b, stderr), 0);
	}
	fixture_dev_destroy(a);
	fixture_dev_destroy(b);
	fixture_fini(&f);
	free(mem);
}

static void test_new_table(void **state)
{
	uint8_t *mem = page_alloc(PG);
	struct dg_dma_dev *a;
	struct dma_fixture f;
	uint64_t d0, d1;

	(void)state;
	assert_non_null(mem);
	mem[0] = 0x5a;
	assert_int_equal(fixture_init(&f, false, 0), 0);
	for (unsigned int round = 0; round < 4; round++) {
		a = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, NULL);
		assert_non_null(a);
		/* this thread's hint is the previous device's (freed) leaf, at this leaf number */
		assert_int_equal(dg_dma_map_single(a, mem, 64, DG_DMA_TO_DEVICE, 0, &d0), 0);
		reach(a, d0, 0x5a);
		assert_int_equal(dg_dma_unmap_single(a, d0, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_int_equal(dg_dma_unmap_single(a, d0, 64, DG_DMA_TO_DEVICE, 0, NULL),
				 -ENOENT);
		assert_int_equal(dg_dma_map_single(a, mem, 64, DG_DMA_TO_DEVICE, 0, &d1), 0);
		assert_int_equal(dg_dma_dev_check(a, stderr), 0);
		assert_int_equal(dg_dma_unmap_single(a, d1, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		fixture_dev_destroy(a); /* the leaf of the hint is freed with the table */
	}
	a = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, NULL);
	assert_non_null(a);
	assert_int_equal(dg_dma_unmap_single(a, d1, 64, DG_DMA_TO_DEVICE, 0, NULL), -ENOENT);
	fixture_dev_destroy(a);
	fixture_fini(&f);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_devices),
		cmocka_unit_test(test_new_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
