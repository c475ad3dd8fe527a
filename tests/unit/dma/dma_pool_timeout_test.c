/* SPDX-License-Identifier: MIT */
/*
 * dg_dma_pool_destroy()'s -ETIMEDOUT path against what dma.h promises: "the invalidation
 * was not confirmed in time: the pool is gone, its memory is freed once the device
 * confirms (quarantine)".
 *
 * A device holds a translation of the pool (a translated sg list: dev.h, its quiescent
 * points then apply invalidations but do not acknowledge), so the destroy's wait times out.
 * Then:
 *  - the call says -ETIMEDOUT, counted once (err_timeout), and the pool is gone: its bytes
 *    no longer count as exposed, its memory is no pool's (a streaming map of it is a
 *    fallback mapping, not the pool's fixed address);
 *  - nothing the device can still reach is freed: it writes and reads the pool's memory
 *    through the host segments it holds (1 MiB: glibc maps it with mmap and unmaps it on
 *    free(), so a premature free() faults in any build; ASan and memcheck see it too);
 *  - the pool's IOVA range is not handed out again while unconfirmed (maps of as much
 *    memory as the pool get other IOVAs), and a housekeeping pass before the device answers
 *    releases nothing;
 *  - the device's destroy says -ETIMEDOUT while the quarantine is unconfirmed (state kept)
 *    and a later retry succeeds once the device has answered; by then housekeeping has
 *    freed the memory (leak checks of ASan and memcheck: it is freed exactly once) and the
 *    device faults on the pool's old IOVAs.
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
#define NBUFS	   256u /* x 4 KiB: 1 MiB, above glibc's mmap threshold */

static struct dg_dma_stats stats(struct dg_dma_dev *dd)
{
	struct dg_dma_stats st;

	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	return st;
}

static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

static void test_pool_destroy_timeout(void **state)
{
	struct dma_fixture f;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	struct dg_dma_pool *p;
	struct dg_sg sg[4];
	unsigned int nr = 0;
	void *buf, *other = page_alloc(NBUFS * G);
	uint64_t pdma, piova, odma, got;
	uint8_t b[64], pat[64];
	struct dg_dma_stats st;

	(void)state;
	assert_int_equal(fixture_init(&f, false, TIMEOUT_NS), 0);
	dd = fixture_dev(&f, 1, DG_DMA_POOL, NULL, &dev);
	assert_non_null(dd);
	p = dg_dma_pool_create(dd, G, NBUFS, DG_DMA_BIDIRECTIONAL, 0);
	assert_non_null(p);
	assert_int_equal(stats(dd).persistent_bytes, (uint64_t)NBUFS * G);
	/* buffer 0 is the pool's first byte: its addresses are the pool's */
	assert_int_equal(dg_dma_pool_get(p, &buf, &pdma), 0);
	piova = pdma;
	memset(pat, 0xd5, sizeof(pat));
	memcpy(buf, pat, sizeof(pat));
	assert_int_equal(dg_dev_read(dev, pdma, b, sizeof(b)), 0);
	assert_memory_equal(b, pat, sizeof(b));
	/* a streaming map of pool memory is the pool's fixed address */
	assert_int_equal(dg_dma_map_single(dd, buf, 64, DG_DMA_TO_DEVICE, 0, &got), 0);
	assert_int_equal(got, pdma);
	assert_int_equal(dg_dma_unmap_single(dd, got, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_pool_put(p, buf), 0);
	/* the device holds a translation of the pool's first two pages and never acknowledges */
	assert_int_equal(dg_dev_translate(dev, piova, 2 * G, DG_ACCESS_READ | DG_ACCESS_WRITE, sg,
					  4, &nr),
			 0);
	assert_true(nr >= 1 && sg[0].len >= 64);
	assert_ptr_equal(sg[0].addr, buf);

	assert_int_equal(dg_dma_pool_destroy(p), -ETIMEDOUT);
	st = stats(dd);
	assert_int_equal(st.err_timeout, 1);
	assert_int_equal(st.quarantined, 1);
	assert_int_equal(st.persistent_bytes, 0);
	/* the device still reaches the memory through what it holds: it must be there */
	memset(pat, 0x3e, sizeof(pat));
	memcpy(sg[0].addr, pat, sizeof(pat));
	memcpy(b, (uint8_t *)sg[0].addr + sizeof(pat), sizeof(b));
	memset((uint8_t *)sg[nr - 1].addr + sg[nr - 1].len - 64, 0x11, 64);
	/* the pool is gone: a map of its memory is a fallback mapping at a new IOVA */
	assert_int_equal(dg_dma_map_single(dd, buf, 64, DG_DMA_TO_DEVICE, 0, &got), 0);
	assert_true(got != pdma);
	assert_false(overlaps(got, 64, piova, (uint64_t)NBUFS * G));
	assert_int_equal(stats(dd).pool_fallbacks, 1);
	/* the pool's IOVA range is not reused while unconfirmed */
	assert_int_equal(dg_dma_map_single(dd, other, NBUFS * G, DG_DMA_TO_DEVICE, 0, &odma), 0);
	assert_false(overlaps(odma, (uint64_t)NBUFS * G, piova, (uint64_t)NBUFS * G));
	/* housekeeping before the device answers releases nothing */
	assert_int_equal(dg_dma_housekeep(f.dma), 0);
	assert_int_equal(stats(dd).quarantined, 1);
	memcpy(sg[0].addr, pat, sizeof(pat));
	/* these unmaps time out as well, and the device cannot be destroyed while its
	 * quarantine is unconfirmed: -ETIMEDOUT, nothing changed */
	assert_int_equal(dg_dma_unmap_single(dd, got, 64, DG_DMA_TO_DEVICE, 0, NULL), -ETIMEDOUT);
	assert_int_equal(dg_dma_unmap_single(dd, odma, NBUFS * G, DG_DMA_TO_DEVICE, 0, NULL),
			 -ETIMEDOUT);
	assert_int_equal(dg_dma_dev_destroy(dd), -ETIMEDOUT);
	assert_int_equal(dg_dma_dev_policy(dd), DG_DMA_POOL);
	assert_int_equal(stats(dd).err_timeout, 4);
	assert_true(stats(dd).quarantined >= 3);
	assert_memory_equal(sg[0].addr, pat, sizeof(pat));

	/* the device answers: its held translation is released, housekeeping confirms */
	dg_dev_quiesce(dev);
	dg_dev_set_auto_offline(dev, true);
	dg_dev_offline(dev);
	assert_int_equal(dg_dma_housekeep(f.dma), 0);
	assert_int_equal(stats(dd).quarantined, 0);
	assert_int_equal(dg_dev_read(dev, piova, b, sizeof(b)), -EFAULT);
	assert_int_equal(dg_dev_read(dev, piova + (uint64_t)(NBUFS - 1) * G, b, sizeof(b)),
			 -EFAULT);
	assert_int_equal(dg_dev_read(dev, odma, b, sizeof(b)), -EFAULT);
	fixture_faults(&f);
	assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
	/* the retry succeeds */
	assert_int_equal(dg_dma_dev_destroy(dd), 0);
	dg_device_destroy(dev);
	fixture_fini(&f);
	free(other);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool_destroy_timeout),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
