/* SPDX-License-Identifier: MIT */
/*
 * Strict's failure paths: nothing is reused before a confirmed invalidation.
 *
 * A device that did DMA and then stays online without reaching a quiescent point makes every
 * invalidation wait time out (dev.h). After each such failure the call must say -ETIMEDOUT,
 * the IOVAs (streaming maps, stream granules, two-step slots) must not be handed out again
 * until a later completion confirms the invalidation (dg_dma_housekeep() after the device
 * quiesces), and after recovery everything is reclaimed (dg_dma_dev_check, stats).
 */
#include <assert.h>
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

static struct dg_dma_stats stats(struct dg_dma_dev *dd)
{
	struct dg_dma_stats st;

	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	return st;
}

static void *pages(size_t n)
{
	void *p = NULL;

	assert_int_equal(posix_memalign(&p, G, n * G), 0);
	memset(p, 0x5a, n * G);
	return p;
}

/* The fixture (waits give up after TIMEOUT_NS; @reference: the Linux-like queue) and its own
 * device, f->dd and f->dev, of configuration @c (NULL: strict's defaults). */
static void open_dev(struct dma_fixture *f, bool reference, const struct dg_dma_dev_config *c)
{
	assert_int_equal(fixture_open(f, reference, TIMEOUT_NS, c, false), 0);
}

/* Recovery: the device answers, and housekeeping confirms every parked invalidation. */
static void recover(struct dma_fixture *f)
{
	fixture_dev_answers(f->dev);
	assert_int_equal(dg_dma_housekeep(f->dma), 0);
}

/* The end: nothing live, the device's structure checked, everything destroyed. */
static void close_dev(struct dma_fixture *f)
{
	assert_int_equal(stats(f->dd).live, 0);
	fixture_faults(f);
	assert_int_equal(fixture_close(f), 0);
}

/* An IOVA range of @slots granules for two-step links, bufs[i] = @buf + i granules. */
static void link_range(struct dg_dma_dev *dd, struct dg_dma_iova_state *st, uint8_t *buf,
		       void **bufs, unsigned int slots)
{
	assert_int_equal(dg_dma_iova_alloc(dd, (uint64_t)slots * G, st), 0);
	page_ptrs(bufs, buf, slots);
}

/* The two-step link tests' world: the fixture, an IOVA range of LINK_SLOTS granules and the
 * pages behind it (bufs[i]: granule i), the addresses links returned. */
enum { LINK_SLOTS = 8 };
struct link_world {
	struct dma_fixture f;
	struct dg_dma_iova_state st;
	uint8_t *buf;
	void *bufs[LINK_SLOTS];
	uint64_t dma[LINK_SLOTS];
};

/* open_dev(@reference, @c), then the range. */
static void link_open(struct link_world *w, bool reference, const struct dg_dma_dev_config *c)
{
	memset(&w->st, 0, sizeof(w->st));
	w->buf = pages(LINK_SLOTS);
	open_dev(&w->f, reference, c);
	link_range(w->f.dd, &w->st, w->buf, w->bufs, LINK_SLOTS);
}

/* The end: the range freed (every slot unlinked and confirmed), close_dev(). */
static void link_close(struct link_world *w)
{
	assert_int_equal(dg_dma_iova_free(&w->st), 0);
	close_dev(&w->f);
	free(w->buf);
}

static bool in_set(const uint64_t *set, size_t n, uint64_t a)
{
	for (size_t i = 0; i < n; i++)
		if ((set[i] & ~(uint64_t)(G - 1)) == (a & ~(uint64_t)(G - 1)))
			return true;
	return false;
}

/*
 * A batch of stream runs only, submitted, whose end times out (dg_dma_batch_end's runs way:
 * batch_end_runs() waits, the general way parks): the end reports -ETIMEDOUT, no granule
 * goes back to its chunk - the runs' IOVAs are never handed out again until housekeeping
 * sees the device confirm; then everything is reclaimed.
 */
static void test_runs_end_timeout(void **state)
{
	enum { N = 48, MORE = 1024 };
	struct dma_fixture f;
	struct dg_dma_batch b;
	uint8_t *buf = pages(N), got[8];
	void *bufs[N], *mb[MORE];
	uint64_t dma[N], mdma[MORE];

	(void)state;
	open_dev(&f, false, NULL);
	page_ptrs(bufs, buf, N);
	assert_int_equal(dg_dma_map_bulk(f.dd, bufs, N / 2, 64, DG_DMA_FROM_DEVICE, 0, dma), 0);
	assert_int_equal(dg_dma_map_bulk(f.dd, bufs + N / 2, N / 2, 64, DG_DMA_TO_DEVICE, 0,
					 dma + N / 2),
			 0);
	/* one DMA, then the device stays online and never acknowledges again */
	assert_int_equal(dg_dev_read(f.dev, dma[N / 2], got, 8), 0);
	dg_dma_batch_begin(f.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(f.dd, dma, N / 2, 64, DG_DMA_FROM_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_unmap_bulk(f.dd, dma + N / 2, N / 2, 64, DG_DMA_TO_DEVICE, 0, &b),
			 0);
	assert_int_equal(b.nruns, 2);
	assert_int_equal(b.run_clear, 3); /* two stream runs: the end's runs way */
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	assert_int_equal(dg_dma_batch_end(&b), -ETIMEDOUT);
	struct dg_dma_stats st = stats(f.dd);
	assert_int_equal(st.live, 0);
	assert_true(st.quarantined >= N);
	/* map a lot more (new chunks): never one of the IOVAs waiting for confirmation */
	for (unsigned int i = 0; i < MORE; i++)
		mb[i] = buf + (size_t)(i % N) * G;
	for (unsigned int i = 0; i < MORE; i += 128) {
		assert_int_equal(
			dg_dma_map_bulk(f.dd, mb + i, 128, 64, DG_DMA_FROM_DEVICE, 0, mdma + i), 0);
		for (unsigned int k = i; k < i + 128; k++)
			assert_false(in_set(dma, N, mdma[k]));
	}
	recover(&f);
	assert_int_equal(stats(f.dd).quarantined, 0);
	for (unsigned int i = 0; i < MORE; i += 128)
		assert_int_equal(
			dg_dma_unmap_bulk(f.dd, mdma + i, 128, 64, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	close_dev(&f);
	free(buf);
}

/*
 * A batch longer than its entry array (DG_DMA_BATCH_MAX): the first flush happens inside
 * dg_dma_unmap_bulk() and times out, the rest at the end (which times out too). The end
 * reports it; every IOVA (stream granules of the bulk maps included) stays out of
 * circulation until the device confirms.
 */
static void test_batch_timeout_no_reuse(void **state)
{
	enum { N = 320, MORE = 1024 };
	struct dma_fixture f;
	struct dg_dma_batch b;
	uint8_t *buf = pages(N), *more = pages(MORE / 4), got[8];
	void *bufs[N], *mb[MORE];
	uint64_t dma[N], mdma[MORE];

	(void)state;
	open_dev(&f, false, NULL);
	page_ptrs(bufs, buf, N);
	assert_int_equal(dg_dma_map_bulk(f.dd, bufs, 160, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
	assert_int_equal(dg_dma_map_bulk(f.dd, bufs + 160, 160, 64, DG_DMA_TO_DEVICE, 0, dma + 160),
			 0);
	/* one DMA, then the device stays online and never acknowledges again */
	assert_int_equal(dg_dev_read(f.dev, dma[0], got, 8), 0);
	dg_dma_batch_begin(f.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(f.dd, dma, 160, 64, DG_DMA_TO_DEVICE, 0, &b), 0);
	/* 160 + 160 > DG_DMA_BATCH_MAX: flushed first (times out), then joins */
	assert_int_equal(dg_dma_unmap_bulk(f.dd, dma + 160, 160, 64, DG_DMA_TO_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), -ETIMEDOUT);
	struct dg_dma_stats st = stats(f.dd);
	assert_int_equal(st.live, 0);
	assert_true(st.quarantined >= N);
	assert_true(st.err_timeout >= 1);
	/* map a lot more: never one of the IOVAs waiting for confirmation */
	for (unsigned int i = 0; i < MORE; i++)
		mb[i] = more + (size_t)(i / 4) * G + (i % 4) * 1024;
	for (unsigned int i = 0; i < MORE; i += 128)
		assert_int_equal(
			dg_dma_map_bulk(f.dd, mb + i, 128, 64, DG_DMA_TO_DEVICE, 0, mdma + i), 0);
	for (unsigned int i = 0; i < MORE; i++)
		assert_false(in_set(dma, N, mdma[i]));
	/* single maps (the allocator's magazines, not streams) in a batch that times out */
	uint64_t sdma[8];

	dg_dma_batch_begin(f.dd, &b);
	for (unsigned int i = 0; i < 8; i++)
		assert_int_equal(dg_dma_map_single(f.dd, buf + (size_t)i * G, 2 * G,
						   DG_DMA_BIDIRECTIONAL, 0, &sdma[i]),
				 0);
	for (unsigned int i = 0; i < 8; i++)
		assert_int_equal(
			dg_dma_unmap_single(f.dd, sdma[i], 2 * G, DG_DMA_BIDIRECTIONAL, 0, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), -ETIMEDOUT);
	for (unsigned int i = 0; i < 64; i++) {
		uint64_t a;

		assert_int_equal(dg_dma_map_single(f.dd, buf + (size_t)i * G, 2 * G,
						   DG_DMA_BIDIRECTIONAL, 0, &a),
				 0);
		assert_false(in_set(dma, N, a));
		assert_false(in_set(mdma, MORE, a));
		assert_false(in_set(sdma, 8, a) || in_set(sdma, 8, a + G));
		assert_int_equal(dg_dma_unmap_single(f.dd, a, 2 * G, DG_DMA_BIDIRECTIONAL, 0, NULL),
				 -ETIMEDOUT);
	}
	/* housekeeping while the device still does not answer: nothing released */
	dg_dma_housekeep(f.dma);
	assert_true(stats(f.dd).quarantined >= N + 8 + 64);
	/* recovery: the device reaches a quiescent point, housekeeping confirms and releases */
	recover(&f);
	st = stats(f.dd);
	assert_int_equal(st.quarantined, 0);
	assert_int_equal(st.live, MORE);
	for (unsigned int i = 0; i < N; i++)
		assert_int_equal(dg_dev_read(f.dev, dma[i], got, 8), -EFAULT);
	for (unsigned int i = 0; i < MORE; i += 128)
		assert_int_equal(
			dg_dma_unmap_bulk(f.dd, mdma + i, 128, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	close_dev(&f);
	free(buf);
	free(more);
}

/*
 * Two-step unlinks in a batch whose wait times out: the slots must stay pending (no link at
 * that offset, the range cannot be freed) until a completion confirms; then they are free.
 * (Before session 11 the batch end made them linkable at once, so a re-link reused the IOVA
 * while the invalidation of its old translation was unconfirmed.)
 */
static void test_link_batch_timeout_keeps_slots(void **state)
{
	struct link_world w;
	struct dg_dma_batch b;
	uint8_t got[8];
	uint64_t d;

	(void)state;
	link_open(&w, false, NULL);
	assert_int_equal(dg_dma_iova_link_bulk(&w.st, 0, G, w.bufs, LINK_SLOTS, 256,
					       DG_DMA_TO_DEVICE, w.dma),
			 0);
	assert_int_equal(dg_dma_iova_sync(&w.st, 0, LINK_SLOTS * G), 0);
	assert_int_equal(dg_dev_read(w.f.dev, w.dma[3], got, 8), 0);
	/* a bulk unlink and a single one in one batch; the device never acknowledges */
	dg_dma_batch_begin(w.f.dd, &b);
	assert_int_equal(dg_dma_iova_unlink_bulk(&w.st, 0, G, 4, 256, DG_DMA_TO_DEVICE, &b), 0);
	assert_int_equal(dg_dma_iova_unlink(&w.st, 5 * G, 256, DG_DMA_TO_DEVICE, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), -ETIMEDOUT);
	assert_true(stats(w.f.dd).quarantined >= 1);
	/* not confirmed: the slots are not reused, the range is not given back */
	for (unsigned int i = 0; i < 6; i++)
		if (i != 4)
			assert_int_equal(dg_dma_iova_link(&w.st, (uint64_t)i * G, w.bufs[i], 256,
							  DG_DMA_TO_DEVICE, &d),
					 -EEXIST);
	assert_int_equal(dg_dma_iova_link_bulk(&w.st, 0, G, w.bufs, 4, 256, DG_DMA_TO_DEVICE,
					       w.dma),
			 -EEXIST);
	assert_int_equal(dg_dma_housekeep(w.f.dma), 0);
	assert_true(stats(w.f.dd).quarantined >= 1);
	assert_int_equal(dg_dma_iova_link(&w.st, 0, w.bufs[0], 256, DG_DMA_TO_DEVICE, &d), -EEXIST);
	/* recovery */
	recover(&w.f);
	assert_int_equal(stats(w.f.dd).quarantined, 0);
	for (unsigned int i = 0; i < 4; i++)
		assert_int_equal(dg_dev_read(w.f.dev, w.st.addr + (uint64_t)i * G, got, 8),
				 -EFAULT);
	assert_int_equal(dg_dev_read(w.f.dev, w.st.addr + 5 * G, got, 8), -EFAULT);
	assert_int_equal(dg_dma_iova_link(&w.st, 0, w.bufs[0], 256, DG_DMA_TO_DEVICE, &d), 0);
	assert_int_equal(dg_dma_iova_link(&w.st, 5 * G, w.bufs[5], 256, DG_DMA_TO_DEVICE, &d), 0);
	/* everything unlinked and the range freed: nothing leaks */
	assert_int_equal(dg_dma_iova_unlink(&w.st, 0, 256, DG_DMA_TO_DEVICE, NULL), 0);
	assert_int_equal(dg_dma_iova_unlink(&w.st, 5 * G, 256, DG_DMA_TO_DEVICE, NULL), 0);
	for (unsigned int i = 4; i < LINK_SLOTS; i++)
		if (i != 5)
			assert_int_equal(dg_dma_iova_unlink(&w.st, (uint64_t)i * G, 256,
							    DG_DMA_TO_DEVICE, NULL),
					 0);
	link_close(&w);
}

/*
 * Two-step unlinks without a batch (strict's slots and the Linux reference's synchronous
 * unmap) and the undo of a bulk link that a refused buffer stopped half way: when the
 * invalidation is not confirmed, the slots stay pending - not linkable (-EEXIST), the range
 * not freeable (-EBUSY) - until housekeeping sees a completion.
 */
static const struct link_case {
	const char *name;
	bool reference; /* the Linux reference's queue and device (else strict's) */
} link_cases[] = {
	{"test_link_single_timeout_keeps_slots", false},
	{"test_link_reference_timeout_keeps_slots", true},
};
#define NLINK (sizeof(link_cases) / sizeof(link_cases[0]))

static void test_link_single_timeout(void **state)
{
	const struct link_case *lc = *state;
	const bool reference = lc->reference;
	/* the reference links every slot; strict leaves 4..7 free for the bulk link */
	const unsigned int nl = reference ? LINK_SLOTS : 4;
	struct link_world w;
	struct dg_dma_dev_config c;
	uint8_t got[8];
	uint64_t d;

	fixture_config(&c, DG_DMA_STRICT, reference);
	link_open(&w, reference, &c);
	for (unsigned int i = 0; i < nl; i++)
		assert_int_equal(dg_dma_iova_link(&w.st, (uint64_t)i * G, w.bufs[i], 256,
						  DG_DMA_TO_DEVICE, &w.dma[i]),
				 0);
	assert_int_equal(dg_dma_iova_sync(&w.st, 0, LINK_SLOTS * G), 0);
	/* one DMA, then the device stays online and never acknowledges again */
	assert_int_equal(dg_dev_read(w.f.dev, w.dma[1], got, 8), 0);
	assert_int_equal(dg_dma_iova_unlink(&w.st, G, 256, DG_DMA_TO_DEVICE, NULL), -ETIMEDOUT);
	assert_true(stats(w.f.dd).quarantined >= 1);
	assert_int_equal(dg_dma_iova_link(&w.st, G, w.bufs[1], 256, DG_DMA_TO_DEVICE, &d), -EEXIST);
	dg_dma_housekeep(w.f.dma); /* the device still does not answer: nothing released */
	assert_true(stats(w.f.dd).quarantined >= 1);
	assert_int_equal(dg_dma_iova_link(&w.st, G, w.bufs[1], 256, DG_DMA_TO_DEVICE, &d), -EEXIST);
	if (!reference) {
		/* a bulk link into the free slots 4, 5, 6 whose third buffer is refused: the
		 * two linked ones are undone, and the undo's invalidation times out too */
		void *bad[3] = {w.bufs[4], w.bufs[5], NULL};
		uint64_t bd[3];

		assert_int_equal(dg_dma_iova_link_bulk(&w.st, 4 * G, G, bad, 3, 256,
						       DG_DMA_TO_DEVICE, bd),
				 -EINVAL);
		for (unsigned int i = 4; i < 6; i++)
			assert_int_equal(dg_dma_iova_link(&w.st, (uint64_t)i * G, w.bufs[i], 256,
							  DG_DMA_TO_DEVICE, &d),
					 -EEXIST);
		/* slot 6 was never linked: free */
		assert_int_equal(
			dg_dma_iova_link(&w.st, 6 * G, w.bufs[6], 256, DG_DMA_TO_DEVICE, &d), 0);
		assert_int_equal(dg_dma_iova_unlink(&w.st, 6 * G, 256, DG_DMA_TO_DEVICE, NULL),
				 -ETIMEDOUT);
	}
	assert_int_equal(dg_dma_iova_free(&w.st), -EBUSY);
	/* recovery: the device reaches a quiescent point, housekeeping confirms */
	recover(&w.f);
	assert_int_equal(stats(w.f.dd).quarantined, 0);
	assert_int_equal(dg_dev_read(w.f.dev, w.st.addr + G, got, 8), -EFAULT);
	assert_int_equal(dg_dma_iova_link(&w.st, G, w.bufs[1], 256, DG_DMA_TO_DEVICE, &d), 0);
	if (!reference) { /* the undone slots can be linked again */
		assert_int_equal(dg_dev_read(w.f.dev, w.st.addr + 4 * G, got, 8), -EFAULT);
		assert_int_equal(
			dg_dma_iova_link(&w.st, 4 * G, w.bufs[4], 256, DG_DMA_TO_DEVICE, &d), 0);
		assert_int_equal(dg_dma_iova_unlink(&w.st, 4 * G, 256, DG_DMA_TO_DEVICE, NULL), 0);
	}
	for (unsigned int i = 0; i < nl; i++)
		assert_int_equal(
			dg_dma_iova_unlink(&w.st, (uint64_t)i * G, 256, DG_DMA_TO_DEVICE, NULL), 0);
	link_close(&w);
}

/*
 * Lazy: a full flush queue waits for the flush in flight; when that times out the rest of
 * the call retires the strict, quarantined way (lazy.c). Nothing may be reused until
 * confirmed, whichever of the two ways an unmap took.
 */
static void test_lazy_full_queue_timeout(void **state)
{
	enum { N = 64 };
	struct dma_fixture f;
	struct dg_dma_dev_config c;
	uint8_t *buf = pages(N), *more = pages(N), got[8];
	void *bufs[N], *mb[N];
	uint64_t dma[N], mdma[N];
	struct dg_iommu_stats is0, is1;
	int r;

	(void)state;
	fixture_config(&c, DG_DMA_LAZY, false);
	c.lazy.queue_size = 16;
	open_dev(&f, false, &c);
	for (unsigned int i = 0; i < N; i++) {
		bufs[i] = buf + (size_t)i * G;
		mb[i] = more + (size_t)i * G;
	}
	assert_int_equal(dg_dma_map_bulk(f.dd, bufs, N, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
	assert_int_equal(dg_dev_read(f.dev, dma[0], got, 8), 0);
	dg_iommu_stats(f.mmu, &is0);
	r = dg_dma_unmap_bulk(f.dd, dma, N, 64, DG_DMA_TO_DEVICE, 0, NULL);
	assert_int_equal(r, -ETIMEDOUT);
	/* the full queue's wait timed out once; the rest (N - 16 buffers) retired with one more
	 * wait, not one each (that blocked for N - 16 timeouts) */
	dg_iommu_stats(f.mmu, &is1);
	assert_int_equal(is1.wait_timeouts - is0.wait_timeouts, 2);
	assert_true(stats(f.dd).err_timeout >= 1);
	assert_int_equal(stats(f.dd).live, 0);
	for (unsigned int k = 0; k < 4; k++) {
		assert_int_equal(dg_dma_map_bulk(f.dd, mb, N, 64, DG_DMA_TO_DEVICE, 0, mdma), 0);
		for (unsigned int i = 0; i < N; i++)
			assert_false(in_set(dma, N, mdma[i]));
		/* these unmaps queue (or time out); their IOVAs join the unconfirmed ones */
		r = dg_dma_unmap_bulk(f.dd, mdma, N, 64, DG_DMA_TO_DEVICE, 0, NULL);
		assert_true(r == -ETIMEDOUT || r == 0);
	}
	fixture_dev_answers(f.dev);
	fixture_advance(&f, 1000000000ull);
	dg_dma_housekeep(f.dma);
	dg_dma_housekeep(f.dma);
	assert_int_equal(stats(f.dd).quarantined, 0);
	for (unsigned int i = 0; i < N; i++)
		assert_int_equal(dg_dev_read(f.dev, dma[i], got, 8), -EFAULT);
	close_dev(&f);
	free(buf);
	free(more);
}

/* The case link_cases[i] of test_link_single_timeout, by its name (cmocka's initial state:
 * the case). */
#define LINK_TEST(i)                                                                             \
	{                                                                                        \
		link_cases[i].name, test_link_single_timeout, NULL, NULL, (void *)&link_cases[i] \
	}
static_assert(NLINK == 2, "a LINK_TEST() in main() for every case of link_cases");

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_timeout_no_reuse),
		cmocka_unit_test(test_runs_end_timeout),
		cmocka_unit_test(test_link_batch_timeout_keeps_slots),
		LINK_TEST(0),
		LINK_TEST(1),
		cmocka_unit_test(test_lazy_full_queue_timeout),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
