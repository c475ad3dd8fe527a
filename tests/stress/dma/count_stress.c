/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/dma/count_stress.c - counts kept per thread and summed by their reader
 * (session 13: no locked instruction on a strict poll for them).
 *
 *   count_stress [ROUNDS [WAITERS [WAIT_ROUNDS]]]
 *
 * Open batches (dma_tstats.open_batches, summed by dma_open_batches()): two threads take
 * turns beginning a strict batch (with an unmap of a buffer it mapped) and ending the other's
 * (each thread's own count goes up and down by different amounts: only the sum is right); the
 * main thread checks between the steps that the device refuses a policy change (-EBUSY) while
 * the batch is open and accepts it once it ended - a sum that lost either thread's count, or
 * counted only the caller's, fails one of the two. At the end, after both threads exited,
 * the device is destroyed (its blocks outlive their threads).
 *
 * Wait counters (iommu: one slot per thread, the threads past WAIT_STAT_THREADS share one
 * with atomic adds): WAITERS threads (default 40, more than the slots) each wait WAIT_ROUNDS
 * / 16 times (WAIT_ROUNDS default 20000) for a command of their own and 64 * WAIT_ROUNDS
 * times for seq 0 (coalesced, back to back: the shared slot's counts race); dg_iommu_stats()
 * must count every wait exactly (plain stores to the shared slot lose some: seen failing).
 */
#include "dma/dma_internal.h"
#include "iommu/iommu_internal.h"

#include "../../unit/dma/dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static struct dma_fixture fx;
static struct dg_dma_dev *dd;
static struct dg_dma_batch batch;
static _Atomic unsigned int stage; /* round * 4 + step */
static unsigned long rounds, wait_rounds;

static void die(const char *msg)
{
	fprintf(stderr, "count_stress: FAIL: %s\n", msg);
	exit(1);
}

static void wait_stage(unsigned int s)
{
	/* Acquire pairs with the release stores of stage: the batch and the device's counts. */
	while (atomic_load_explicit(&stage, memory_order_acquire) != s)
		sched_yield();
}

static void set_stage(unsigned int s)
{
	atomic_store_explicit(&stage, s, memory_order_release);
}

/* Thread @me (0 or 1): begins the batch of even rounds (0) or odd ones (1), ends the other's. */
static void *batch_main(void *arg)
{
	const unsigned int me = (unsigned int)(uintptr_t)arg;
	static uint8_t buf[2][256];

	for (unsigned long r = 0; r < rounds; r++) {
		const unsigned int base = (unsigned int)r * 4;

		if ((r & 1) == me) { /* begin: step 0 -> 1 */
			uint64_t dma;

			wait_stage(base);
			if (dg_dma_map_single(dd, buf[me], sizeof(buf[me]), DG_DMA_TO_DEVICE, 0,
					      &dma))
				die("map");
			dg_dma_batch_begin(dd, &batch);
			if (dg_dma_unmap_single(dd, dma, sizeof(buf[me]), DG_DMA_TO_DEVICE, 0,
						&batch))
				die("unmap into the batch");
			set_stage(base + 1);
		} else { /* end: step 2 -> 3 */
			wait_stage(base + 2);
			if (dg_dma_batch_end(&batch))
				die("batch end");
			set_stage(base + 3);
		}
	}
	return NULL;
}

static void open_batches(void)
{
	pthread_t t[2];

	if (fixture_init(&fx, false, 0))
		die("fixture");
	dd = fixture_idle_dev(&fx, 1, DG_DMA_STRICT, false, NULL);
	if (!dd)
		die("device");
	atomic_init(&stage, 0);
	for (uintptr_t i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, batch_main, (void *)i))
			die("pthread_create");
	for (unsigned long r = 0; r < rounds; r++) {
		const unsigned int base = (unsigned int)r * 4;

		wait_stage(base + 1); /* open: begun on one thread */
		if (dg_dma_dev_set_policy(dd, DG_DMA_STRICT) != -EBUSY)
			die("policy change accepted while a batch (begun on another thread) is open");
		set_stage(base + 2);
		wait_stage(base + 3); /* ended on the other */
		if (dma_open_batches(dd))
			die("batches still counted open after their end");
		if (r % 16 == 0 && dg_dma_dev_set_policy(dd, DG_DMA_STRICT))
			die("policy change refused after the batch ended (on another thread)");
		set_stage(base + 4);
	}
	for (unsigned int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	if (fixture_end(&fx, dd))
		die("device check");
}

static struct dg_iommu *mmu;
static pthread_barrier_t go;

#define ZERO_WAITS    64 /* per round: back to back, the counters' shared slot contended */
#define REAL_EVERY    16 /* rounds: one wait for a command of the thread's own */
#define REAL_WAITS(r) (((r) + REAL_EVERY - 1) / REAL_EVERY)

static void *waiter_main(void *arg)
{
	const struct dg_inval_cmd c = {.type = DG_INVAL_GLOBAL};

	(void)arg;
	pthread_barrier_wait(&go); /* all together: the shared slot contended */
	for (unsigned long r = 0; r < wait_rounds; r++) {
		uint64_t seq;
		int e = 0;

		if (r % REAL_EVERY == 0) {
			e = dg_inval_submit(mmu, &c, 1, &seq);
			if (!e)
				e = dg_inval_wait(mmu, seq);
		}
		if (e) {
			fprintf(stderr, "error %d\n", e);
			die("submit / wait");
		}
		for (unsigned int k = 0; k < ZERO_WAITS; k++)
			if (dg_inval_wait(mmu, 0)) /* complete before: coalesced */
				die("wait for seq 0");
	}
	return NULL;
}

static void wait_counts(unsigned int n)
{
	struct dg_iommu_config cfg;
	struct dg_iommu_stats st;
	pthread_t *t = calloc(n, sizeof(*t));
	uint64_t want;

	if (!t)
		die("calloc");
	dg_iommu_config_init(&cfg);
	cfg.log = NULL;
	/* 40 threads on few CPUs (under TSan too): a producer preempted between its reserve and
	 * its publication holds up every later wait for a while */
	cfg.wait_timeout_ns = 60000000000ull;
	mmu = dg_iommu_create(&cfg);
	if (!mmu || pthread_barrier_init(&go, NULL, n))
		die("iommu");
	for (unsigned int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, waiter_main, NULL))
			die("pthread_create");
	for (unsigned int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	dg_iommu_stats(mmu, &st);
	want = (uint64_t)n * (ZERO_WAITS * wait_rounds + REAL_WAITS(wait_rounds));

	if (st.waits != want) {
		fprintf(stderr, "waits %llu, expected %llu\n", (unsigned long long)st.waits,
			(unsigned long long)want);
		die("a wait was not counted");
	}
	if (st.waits_coalesced < (uint64_t)ZERO_WAITS * n * wait_rounds ||
	    st.waits_coalesced > st.waits)
		die("coalesced waits miscounted");
	if (st.wait_timeouts)
		die("a wait timed out");
	dg_iommu_destroy(mmu);
	pthread_barrier_destroy(&go);
	free(t);
}

int main(int argc, char **argv)
{
	unsigned int waiters = 40;

	rounds = argc > 1 ? strtoul(argv[1], NULL, 0) : 200;
	if (argc > 2)
		waiters = (unsigned int)strtoul(argv[2], NULL, 0);
	wait_rounds = argc > 3 ? strtoul(argv[3], NULL, 0) : 20000;
	if (!rounds || waiters <= WAIT_STAT_THREADS || !wait_rounds)
		die("usage: count_stress [ROUNDS [WAITERS > WAIT_STAT_THREADS [WAIT_ROUNDS]]]");
	open_batches();
	wait_counts(waiters);
	printf("count_stress: %lu rounds, %u waiters x %lu: ok\n", rounds, waiters, wait_rounds);
	return 0;
}
