/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the emulated NIC's receive aggregation (nic_agg_fill(), wl_nic.c), driven by
 * the test thread as the device on a real strict device, with and without leaf-direct
 * translation: the buffer's range is translated once and every frame copied into it at its
 * offset, and an invalidation acknowledged between two frames (the acknowledgement point,
 * where the test's driver unmaps) is never followed by a write through the old translation:
 *  - the buffer itself unmapped: nothing after the acknowledgement reaches it (its bytes stay
 *    as they were: a write through the translation held before would change them), the
 *    frames before it are there, the descriptor reports only them and the fault is counted;
 *  - another buffer unmapped: the rest of the buffer is translated again and every frame
 *    lands where it belongs, in sequence;
 *  - nothing pending: every frame, no error, and the acknowledgement point called every
 *    NIC_ACK_EVERY (8) frames.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wl.h"
#include "wl_nic.h"

#include <stdlib.h>
#include <string.h>

#define BUF    65536u
#define STRIDE 1536u
#define FRAME  1500u
#define FRAMES 42u
#define FILL   0xa5

static const struct nic_param prm = {
	.rx_buf = BUF, .rx_frame = FRAME, .rx_frames = FRAMES, .rx_stride = STRIDE, .rx_ring = 8};

struct env {
	struct dg_iommu *mmu;
	struct dg_dma *dma;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	struct wl_run run;
	struct wl_ctr ctr;
	struct wl_port port;
	struct wl_dev *d;
	uint8_t *buf, *other, *tmpl;
	uint64_t iova, other_iova;
	/* the acknowledgement point */
	uint64_t unmap; /* the IOVA to unmap at the first call (0: none) */
	struct dg_dma_batch batch;
	bool submitted;
	unsigned int calls, acked;
	uint32_t frames_at[8]; /* frames written when it was called */
	uint32_t *frames;
};

static void env_init(struct env *e, bool leaf_direct)
{
	struct dg_iommu_config ic;
	struct dg_dma_dev_config dc;

	memset(e, 0, sizeof(*e));
	dg_iommu_config_init(&ic);
	ic.log = NULL;
	ic.iotlb_leaf_direct = leaf_direct;
	e->mmu = dg_iommu_create(&ic);
	assert_non_null(e->mmu);
	e->dma = dg_dma_create(e->mmu, NULL);
	assert_non_null(e->dma);
	e->dev = dg_device_create(e->mmu, 3);
	assert_non_null(e->dev);
	dg_dma_dev_config_init(&dc);
	dc.policy = DG_DMA_STRICT;
	e->dd = dg_dma_dev_create(e->dma, e->dev, &dc);
	assert_non_null(e->dd);
	e->run.wl = &wl_tcp_x1;
	e->run.cfg = WL_STRICT;
	e->port.dev = e->dev;
	e->port.dd = e->dd;
	e->d = calloc(1, sizeof(*e->d));
	assert_non_null(e->d);
	e->d->run = &e->run;
	e->d->ctr = &e->ctr;
	e->d->ndevs = 1;
	e->d->devs[0] = e->dev;
	e->buf = aligned_alloc(BUF, BUF);
	e->other = aligned_alloc(BUF, BUF);
	e->tmpl = malloc(BUF);
	assert_true(e->buf && e->other && e->tmpl);
	memset(e->buf, FILL, BUF);
	memset(e->other, FILL, BUF);
	for (uint32_t i = 0; i < BUF; i++)
		e->tmpl[i] = (uint8_t)(i * 7 + 1);
	assert_int_equal(dg_dma_map_single(e->dd, e->buf, BUF, DG_DMA_FROM_DEVICE, 0, &e->iova), 0);
	assert_int_equal(
		dg_dma_map_single(e->dd, e->other, BUF, DG_DMA_FROM_DEVICE, 0, &e->other_iova), 0);
}

static void env_fini(struct env *e)
{
	dg_dev_quiesce(e->dev);
	dg_dev_offline(e->dev); /* the test thread is the device: waits must not wait for it */
	if (e->unmap != e->iova)
		assert_int_equal(
			dg_dma_unmap_single(e->dd, e->iova, BUF, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	if (e->unmap != e->other_iova)
		assert_int_equal(dg_dma_unmap_single(e->dd, e->other_iova, BUF, DG_DMA_FROM_DEVICE,
						     0, NULL),
				 0);
	assert_int_equal(dg_dma_dev_destroy(e->dd), 0);
	dg_device_destroy(e->dev);
	dg_dma_destroy(e->dma);
	dg_iommu_destroy(e->mmu);
	free(e->buf);
	free(e->other);
	free(e->tmpl);
	free(e->d);
}

/* The acknowledgement point: the driver's unmap (submitted, not waited for) at the first call,
   then the device's acknowledgement as in the bench (wl_dev_ack_pending()). */
static bool ack_point(struct wl_dev *d, void *ctx)
{
	struct env *e = ctx;
	bool acked;

	if (e->calls < 8)
		e->frames_at[e->calls] = *e->frames;
	if (!e->calls++ && e->unmap) {
		dg_dma_batch_begin(e->dd, &e->batch);
		assert_int_equal(dg_dma_unmap_single(e->dd, e->unmap, BUF, DG_DMA_FROM_DEVICE, 0,
						     &e->batch),
				 0);
		assert_int_equal(dg_dma_batch_submit(&e->batch), 0);
		assert_false(dg_dma_batch_done(&e->batch)); /* the device holds a translation */
		e->submitted = true;
	}
	acked = wl_dev_ack_pending(d);
	e->acked += acked;
	return acked;
}

static uint32_t fill(struct env *e, uint64_t *seq, uint32_t *frames)
{
	struct nic_agg_buf b = {.addr = e->iova,
				.len = BUF,
				.queue = 5,
				.tmpl = e->tmpl,
				.ack = ack_point,
				.ctx = e};
	uint32_t since = 0;

	e->frames = frames;
	return nic_agg_fill(e->d, &e->port, &prm, &b, &since, seq, frames);
}

/* Frame @f of the buffer: its header (sequence @seq) and the template after it. */
static void check_frame(const struct env *e, uint32_t f, uint64_t seq)
{
	const uint8_t *at = e->buf + (size_t)f * STRIDE;
	struct wl_hdr h;

	memcpy(&h, at, sizeof(h));
	assert_int_equal(h.magic, WL_MAGIC);
	assert_int_equal(h.seq, seq);
	assert_int_equal(h.queue, 5);
	assert_int_equal(h.len, FRAME);
	assert_int_equal(h.csum, wl_hdr_csum(&h));
	assert_memory_equal(at + sizeof(h), e->tmpl + sizeof(h), FRAME - sizeof(h));
	for (uint32_t i = FRAME; i < STRIDE && (size_t)f * STRIDE + i < BUF; i++)
		assert_int_equal(at[i], FILL); /* the gap between frames is not written */
}

static void run_all_frames(bool leaf_direct)
{
	struct env e;
	uint64_t seq = 100;
	uint32_t frames = 0;

	env_init(&e, leaf_direct);
	assert_int_equal(fill(&e, &seq, &frames), FRAMES * STRIDE);
	assert_int_equal(frames, FRAMES);
	assert_int_equal(seq, 100 + FRAMES);
	for (uint32_t f = 0; f < FRAMES; f++)
		check_frame(&e, f, 100 + f);
	for (uint32_t i = FRAMES * STRIDE; i < BUF; i++)
		assert_int_equal(e.buf[i], FILL);
	/* between frames 8|9, 16|17, 24|25, 32|33, 40|41 */
	assert_int_equal(e.calls, 5);
	for (unsigned int c = 0; c < 5; c++)
		assert_int_equal(e.frames_at[c], 8 * (c + 1));
	assert_int_equal(e.acked, 0);
	assert_int_equal(atomic_load(&e.ctr.errors), 0);
	env_fini(&e);
}

static void test_all_frames(void **state)
{
	(void)state;
	run_all_frames(false);
	run_all_frames(true);
}

static void run_own_unmap(bool leaf_direct)
{
	struct env e;
	uint64_t seq = 0;
	uint32_t frames = 0;

	env_init(&e, leaf_direct);
	e.unmap = e.iova;
	/* the frames before the acknowledgement only; the rest faults and is counted */
	assert_int_equal(fill(&e, &seq, &frames), 8 * STRIDE);
	assert_int_equal(frames, 8);
	assert_int_equal(e.acked, 1);
	assert_true(e.submitted);
	assert_true(dg_dma_batch_done(&e.batch));
	assert_int_equal(dg_dma_batch_end(&e.batch), 0);
	for (uint32_t f = 0; f < 8; f++)
		check_frame(&e, f, f);
	/* after the acknowledgement the buffer is the driver's again: not one byte written */
	for (uint32_t i = 8 * STRIDE; i < BUF; i++)
		if (e.buf[i] != FILL)
			fail_msg("byte %u of the unmapped buffer written after the acknowledgement",
				 i);
	assert_int_equal(atomic_load(&e.ctr.errors), 1);
	env_fini(&e);
}

static void test_own_unmap(void **state)
{
	(void)state;
	run_own_unmap(false);
	run_own_unmap(true);
}

static void run_other_unmap(bool leaf_direct)
{
	struct env e;
	uint64_t seq = 7;
	uint32_t frames = 0;

	env_init(&e, leaf_direct);
	e.unmap = e.other_iova;
	assert_int_equal(fill(&e, &seq, &frames), FRAMES * STRIDE);
	assert_int_equal(frames, FRAMES);
	assert_int_equal(e.acked, 1);
	assert_int_equal(dg_dma_batch_end(&e.batch), 0);
	for (uint32_t f = 0; f < FRAMES; f++)
		check_frame(&e, f, 7 + f);
	for (uint32_t i = 0; i < BUF; i++)
		assert_int_equal(e.other[i], FILL);
	assert_int_equal(atomic_load(&e.ctr.errors), 0);
	env_fini(&e);
}

static void test_other_unmap(void **state)
{
	(void)state;
	run_other_unmap(false);
	run_other_unmap(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_frames),
		cmocka_unit_test(test_own_unmap),
		cmocka_unit_test(test_other_unmap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
