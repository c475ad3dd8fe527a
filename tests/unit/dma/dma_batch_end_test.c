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
 *
 * And of the strict batch end of streaming unmaps in ascending pieces (batch_runs(),
 * runs_merge() and batch_pieces(): a poll's rx and tx reaps, merged and freed without a sort),
 * against the sort it replaces, with random batches of 1 to 12 pieces (past BATCH_PIECES: the
 * sort), scattered so that the invalidation is one command per run, submitted or not:
 *  - after the end the device faults on every unmapped address - it had read each one just
 *    before (its IOTLB holds the translation), so a run left out of the page-table unmap or
 *    of the invalidation would still reach - while every address still mapped reaches;
 *  - every IOVA is back in the allocator exactly once: live ranges = mappings left, no bad
 *    free, the allocator's and the device's structure checks hold;
 *  - pieces lying apart come back in address order: a refill of the freed buffers gets
 *    ascending IOVAs.
 */
#include "dma/dma_internal.h" /* before cmocka.h: it defines fail() */
#include "dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include "../../test_rand.h"

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
	assert_int_equal(fixture_end(&e->f, e->dd), 0);
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

/* ---- strict: ascending pieces ---------------------------------------------------------------- */

#define NP    96 /* buffers, one page each */
#define PG    4096u
#define ROUND 60

static uint64_t rnd(uint64_t *s)
{
	return xorshift64(s);
}

static uint64_t live_iovas(struct dg_dma_dev *dd)
{
	struct dg_iova_stats st;

	dg_iova_get_stats(dd->sp->iova, &st);
	assert_int_equal(st.bad_frees, 0);
	return st.live_ranges;
}

static void reach_or_fault(struct dg_device *dev, uint64_t dma, const uint8_t *buf, bool mapped)
{
	uint8_t v = 0;

	if (!mapped) {
		assert_int_equal(dg_dev_read(dev, dma, &v, 1), -EFAULT);
		return;
	}
	assert_int_equal(dg_dev_read(dev, dma, &v, 1), 0);
	assert_int_equal(v, buf[0]);
}

/* NP buffers of one page on a strict device taking its IOVAs from the allocator. */
struct strict_env {
	struct dma_fixture f;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	uint8_t *mem;
	void *bufs[NP];	  /* buffer i: page i of mem, first byte i + the mark */
	uint64_t dma[NP]; /* its IOVA while mapped */
	bool on[NP];	  /* mapped */
};

/* Every buffer mapped (one bulk map); @mark tells the runs' buffers from the pieces'. */
static void strict_open(struct strict_env *s, unsigned int mark)
{
	s->mem = page_alloc((size_t)NP * PG);
	assert_non_null(s->mem);
	for (unsigned int i = 0; i < NP; i++) {
		s->mem[(size_t)i * PG] = (uint8_t)(i + mark);
		s->bufs[i] = s->mem + (size_t)i * PG;
	}
	assert_int_equal(fixture_init(&s->f, false, 0), 0);
	s->dev = NULL;
	s->dd = fixture_idle_dev(&s->f, 1, DG_DMA_STRICT, false, &s->dev);
	assert_non_null(s->dd);
	s->dd->sp->cspan = 0; /* the allocator's path (streams: dma_stream_test.c) */
	assert_int_equal(dg_dma_map_bulk(s->dd, s->bufs, NP, 64, DG_DMA_TO_DEVICE, 0, s->dma), 0);
	for (unsigned int i = 0; i < NP; i++)
		s->on[i] = true;
}

/* A round's start: @order = every buffer (all mapped), sorted by address; the device reads
   each, so its IOTLB holds every translation. */
static void round_begin(struct strict_env *s, unsigned int *order)
{
	for (unsigned int i = 0; i < NP; i++)
		order[i] = i;
	for (unsigned int i = 1; i < NP; i++)
		for (unsigned int j = i; j > 0 && s->dma[order[j]] < s->dma[order[j - 1]]; j--) {
			unsigned int t = order[j];

			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	for (unsigned int i = 0; i < NP; i++)
		reach_or_fault(s->dev, s->dma[i], s->bufs[i], true);
}

/* After the batch end: the device faults on every unmapped buffer and reaches every mapped
   one, the @nfree unmapped IOVAs are back exactly once, both structure checks hold. */
static void round_check(struct strict_env *s, unsigned int nfree)
{
	for (unsigned int i = 0; i < NP; i++)
		reach_or_fault(s->dev, s->dma[i], s->bufs[i], s->on[i]);
	assert_int_equal(live_iovas(s->dd), NP - nfree);
	assert_int_equal(dg_iova_check(s->dd->sp->iova, stderr), 0);
	assert_int_equal(dg_dma_dev_check(s->dd, stderr), 0);
}

/* The @nfree buffers @freed[] mapped again in one bulk map; @remap: their new IOVAs. */
static void refill(struct strict_env *s, const unsigned int *freed, unsigned int nfree,
		   uint64_t *remap)
{
	void *rb[NP] = {NULL}; /* (gcc -O1 cannot see nfree > 0) */

	for (unsigned int j = 0; j < nfree; j++)
		rb[j] = s->bufs[freed[j]];
	assert_int_equal(dg_dma_map_bulk(s->dd, rb, nfree, 64, DG_DMA_TO_DEVICE, 0, remap), 0);
	for (unsigned int j = 0; j < nfree; j++) {
		s->dma[freed[j]] = remap[j];
		s->on[freed[j]] = true;
	}
}

static void strict_close(struct strict_env *s)
{
	assert_int_equal(dg_dma_unmap_bulk(s->dd, s->dma, NP, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(live_iovas(s->dd), 0);
	assert_int_equal(fixture_end(&s->f, s->dd), 0);
	free(s->mem);
}

static void test_strict_pieces(void **state)
{
	static struct strict_env s;
	uint64_t seed = 0x9e3779b97f4a7c15ull;

	(void)state;
	strict_open(&s, 1);
	for (unsigned int round = 0; round < ROUND; round++) {
		const unsigned int k = 1 + (unsigned int)(rnd(&seed) % 12), submit = round % 3;
		unsigned int order[NP], nfree = 0, freed[NP];
		uint64_t remap[NP];
		struct dg_dma_batch b;

		round_begin(&s, order);
		/* k pieces, each an ascending pick of a few scattered buffers, in random order */
		dg_dma_batch_begin(s.dd, &b);
		for (unsigned int p = 0; p < k; p++) {
			const unsigned int want = 1 + (unsigned int)(rnd(&seed) % 6);
			const unsigned int from = (unsigned int)(rnd(&seed) % NP);
			uint64_t pd[NP];
			unsigned int n = 0;

			for (unsigned int j = from; j < NP && n < want; j += 1 + rnd(&seed) % 9) {
				const unsigned int i = order[j];

				if (!s.on[i])
					continue;
				s.on[i] = false;
				pd[n++] = s.dma[i];
				freed[nfree++] = i;
			}
			if (!n)
				continue;
			assert_int_equal(
				dg_dma_unmap_bulk(s.dd, pd, n, 64, DG_DMA_TO_DEVICE, 0, &b), 0);
			if (submit == 1 && p == k / 2)
				assert_int_equal(dg_dma_batch_submit(&b), 0);
		}
		if (submit == 2)
			assert_int_equal(dg_dma_batch_submit(&b), 0);
		assert_int_equal(dg_dma_batch_end(&b), 0);
		round_check(&s, nfree);
		if (!nfree)
			continue;
		/* refill: the freed IOVAs come back in ascending order */
		refill(&s, freed, nfree, remap);
		for (unsigned int j = 1; j < nfree; j++)
			assert_true(remap[j] > remap[j - 1]);
		assert_int_equal(live_iovas(s.dd), NP);
	}
	strict_close(&s);
}

/*
 * The runs a bulk unmap records for the batch end (dg_dma_batch.run_first[], taken whole by
 * batch_runs()): rounds of bulk unmaps of buffers neighbouring in IOVA order - whole runs,
 * runs with one buffer left out (not a run: must not be recorded as one), more of them than
 * the batch records - mixed with single unmaps and submits at random points. After the end
 * the device faults on every unmapped address it had cached and reaches every mapped one,
 * and every IOVA is back exactly once: a run taken with a wrong end or count would leave a
 * translation or an IOVA behind.
 */
static void test_strict_runs(void **state)
{
	static struct strict_env s;
	uint64_t seed = 0x2545f4914f6cdd1dull;
	unsigned int recorded = 0, gapped = 0;

	(void)state;
	strict_open(&s, 7);
	for (unsigned int round = 0; round < ROUND; round++) {
		const unsigned int k = 1 + (unsigned int)(rnd(&seed) % 12);
		unsigned int order[NP], nfree = 0, freed[NP];
		uint64_t remap[NP];
		struct dg_dma_batch b;

		round_begin(&s, order);
		dg_dma_batch_begin(s.dd, &b);
		for (unsigned int p = 0; p < k; p++) {
			const unsigned int want = 1 + (unsigned int)(rnd(&seed) % 12);
			const unsigned int from = (unsigned int)(rnd(&seed) % NP);
			const bool gap = rnd(&seed) % 4 == 0, single = rnd(&seed) % 5 == 0;
			const uint32_t nruns = b.nruns;
			uint64_t pd[NP], next = 0;
			unsigned int n = 0;
			bool adjacent = true, skipped = false;

			for (unsigned int j = from; j < NP && n < want; j++) {
				const unsigned int i = order[j];

				if (!s.on[i])
					continue;
				if (gap && !skipped && n && n == want / 2) {
					skipped = true; /* left mapped: a hole in the run */
					continue;
				}
				adjacent &= !n || s.dma[i] == next;
				next = s.dma[i] + PG;
				s.on[i] = false;
				pd[n++] = s.dma[i];
				freed[nfree++] = i;
			}
			if (!n)
				continue;
			if (single) {
				for (unsigned int j = 0; j < n; j++)
					assert_int_equal(dg_dma_unmap_single(s.dd, pd[j], 64,
									     DG_DMA_TO_DEVICE, 0,
									     &b),
							 0);
				assert_int_equal(b.nruns, nruns);
			} else {
				assert_int_equal(dg_dma_unmap_bulk(s.dd, pd, n, 64,
								   DG_DMA_TO_DEVICE, 0, &b),
						 0);
				/* recorded exactly when adjacent (and there is room) */
				assert_int_equal(b.nruns - nruns,
						 adjacent && n > 1 && nruns < DG_DMA_BATCH_PIECES);
				recorded += b.nruns - nruns;
				gapped += !adjacent;
			}
			if (rnd(&seed) % 4 == 0)
				assert_int_equal(dg_dma_batch_submit(&b), 0);
		}
		assert_int_equal(dg_dma_batch_end(&b), 0);
		round_check(&s, nfree);
		if (!nfree)
			continue;
		refill(&s, freed, nfree, remap);
	}
	assert_true(recorded >= ROUND / 2); /* the runs were taken, and not only them */
	assert_true(gapped > 0);
	strict_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strict_pieces),
		cmocka_unit_test(test_strict_runs),
		cmocka_unit_test(test_bounce_batch),
		cmocka_unit_test(test_bounce_batch_submitted),
		cmocka_unit_test(test_bounce_batch_all_submitted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
