/* SPDX-License-Identifier: MIT */
/*
 * Stress test of the invalidation submit's RANGE -> DOMAIN fallback (src/dma/map.c
 * dma_inval_submit) against a device running in its own thread.
 *
 *   stress_dma_inval_fallback ROUNDS
 *
 * An IOMMU with a 16-slot ring; every round the driver maps eight runs far apart, one of them
 * a 2 MiB buffer in 4 KiB pages whose last-level table the unmap frees (so the batch end's
 * per-run RANGE commands need 20 exact slots and the ring refuses them: one DOMAIN command
 * goes instead, tests/unit/dma/dma_inval_fallback_test.c), and unmaps them in one batch while
 * the device holds a translation of every run (dg_dev_translate: held until its next
 * quiescent point, no acknowledgement before). Strict's promise, checked from the device's
 * side in real time:
 *  - the batch end cannot return while the device holds a translation (it holds them until
 *    200 us after the driver entered the end): a device that sees the end returned (a
 *    release store after it) while it still holds one is a violation - the end's wait must
 *    cover the fallback's command (its sequence number);
 *  - once the device has seen the end returned, every granule of the eight runs faults.
 * And every end took the fallback: a DOMAIN command per round (iommu statistics).
 * Runs under ThreadSanitizer too.
 */
#include <dmaguard/dev.h>
#include <dmaguard/dma.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define G     4096u
#define BIG   (2u << 20)
#define NS    6u /* runs of 7 granules */
#define NRUNS (NS + 2)

struct run {
	uint64_t iova, len;
};

struct world {
	struct dg_iommu *mmu;
	struct dg_dma *dma;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	unsigned long rounds;
	/* per round: written by the driver before its release store of go */
	struct run runs[NRUNS];
	/* the handshake (round numbers, 1-based) */
	_Atomic unsigned long go;      /* driver: the runs are mapped */
	_Atomic unsigned long held;    /* device: it holds a translation of every run */
	_Atomic unsigned long ending;  /* driver: about to call the batch end */
	_Atomic unsigned long ended;   /* driver: the batch end returned (0 from it) */
	_Atomic unsigned long checked; /* device: done with the round */
	_Atomic unsigned long violations;
	_Atomic bool stop;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The device: each round, hold every run, check the end cannot return meanwhile, let go,
 * then check every granule faults once the end returned. */
static void *device(void *arg)
{
	struct world *w = arg;
	uint8_t b[8];

	dg_dev_offline(w->dev);
	for (unsigned long r = 1; r <= w->rounds; r++) {
		struct dg_sg sg[NRUNS][4];
		unsigned int nr[NRUNS];

		/* Acquire pairs with the driver's release store of go: the runs are written. */
		while (atomic_load_explicit(&w->go, memory_order_acquire) < r)
			if (atomic_load_explicit(&w->stop, memory_order_relaxed))
				return NULL;
		for (unsigned int i = 0; i < NRUNS; i++)
			if (dg_dev_translate(w->dev, w->runs[i].iova, G,
					     DG_ACCESS_READ | DG_ACCESS_WRITE, sg[i], 4, &nr[i])) {
				fprintf(stderr, "round %lu: translate of run %u failed\n", r, i);
				atomic_fetch_add(&w->violations, 1);
				nr[i] = 0;
			}
		/* Release pairs with the driver's acquire load: it unmaps only now. */
		atomic_store_explicit(&w->held, r, memory_order_release);
		/* hold on until the driver is in its batch end, and 200 us more */
		uint64_t until = UINT64_MAX;

		for (;;) {
			/* Acquire pairs with the driver's release store after its end returned. */
			if (atomic_load_explicit(&w->ended, memory_order_acquire) == r) {
				fprintf(stderr,
					"round %lu: the batch end returned while the "
					"device held its translations\n",
					r);
				atomic_fetch_add(&w->violations, 1);
				break;
			}
			for (unsigned int i = 0; i < NRUNS; i++) /* still ours: use them */
				if (nr[i])
					memcpy(b, sg[i][0].addr, sizeof(b));
			if (until == UINT64_MAX &&
			    atomic_load_explicit(&w->ending, memory_order_relaxed) == r)
				until = now_ns() + 200000;
			if (now_ns() > until)
				break;
		}
		dg_dev_quiesce(w->dev); /* done with the lists: acknowledge */
		/* Acquire as above. */
		while (atomic_load_explicit(&w->ended, memory_order_acquire) < r) {
			if (atomic_load_explicit(&w->stop, memory_order_relaxed))
				return NULL;
			dg_dev_quiesce(w->dev);
		}
		for (unsigned int i = 0; i < NRUNS; i++)
			for (uint64_t a = 0; a < w->runs[i].len; a += G)
				if (dg_dev_read(w->dev, w->runs[i].iova + a, b, sizeof(b)) !=
				    -EFAULT) {
					fprintf(stderr,
						"round %lu: run %u + %#llx reached after the "
						"batch end\n",
						r, i, (unsigned long long)a);
					atomic_fetch_add(&w->violations, 1);
				}
		dg_dev_offline(w->dev);
		/* Release pairs with the driver's acquire load: it maps again only now. */
		atomic_store_explicit(&w->checked, r, memory_order_release);
	}
	return NULL;
}

static int run_cmp(const void *x, const void *y)
{
	const struct run *a = x, *b = y;

	return a->iova < b->iova ? -1 : a->iova > b->iova;
}

/* The batch end asks for one RANGE per run: eight runs, none adjacent, hull over 4x bytes. */
static bool layout_ok(const struct run *runs)
{
	struct run s[NRUNS];
	uint64_t sum = 0;

	memcpy(s, runs, sizeof(s));
	qsort(s, NRUNS, sizeof(s[0]), run_cmp);
	for (unsigned int i = 0; i < NRUNS; i++) {
		sum += s[i].len;
		if (i && s[i].iova <= s[i - 1].iova + s[i - 1].len)
			return false;
	}
	return s[NRUNS - 1].iova + s[NRUNS - 1].len - s[0].iova > 4 * sum;
}

int main(int argc, char **argv)
{
	struct world w;
	struct dg_iommu_config ic;
	struct dg_dma_dev_config c;
	struct dg_dma_iova_state fill[3] = {{0}}, lst = {0};
	struct dg_iommu_stats s0, s1;
	uint8_t *bigmem = NULL, *smem, *lmem;
	pthread_t th;
	int bad = 0;

	memset(&w, 0, sizeof(w));
	w.rounds = argc > 1 ? strtoul(argv[1], NULL, 10) : 200;
	if (!w.rounds)
		w.rounds = 1;
	dg_iommu_config_init(&ic);
	ic.inval_queue_len = 16;
	ic.log = NULL;
	w.mmu = dg_iommu_create(&ic);
	w.dma = w.mmu ? dg_dma_create(w.mmu, NULL) : NULL;
	w.dev = w.mmu ? dg_device_create(w.mmu, 1) : NULL;
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_STRICT;
	w.dd = w.dma && w.dev ? dg_dma_dev_create(w.dma, w.dev, &c) : NULL;
	smem = aligned_alloc(G, NS * 8 * G);
	lmem = aligned_alloc(G, G);
	if (!w.dd || posix_memalign((void **)&bigmem, BIG, 2 * BIG) || !smem || !lmem) {
		perror("set-up");
		return 1;
	}
	memset(bigmem, 0x42, 2 * BIG);
	memset(smem, 0x43, NS * 8 * G);
	memset(lmem, 0x44, G);
	dg_dev_offline(w.dev); /* until the device thread runs: waits do not wait for it */
	if (pthread_create(&th, NULL, device, &w)) {
		perror("pthread_create");
		return 1;
	}
	dg_iommu_stats(w.mmu, &s0);
	for (unsigned long r = 1; r <= w.rounds && !bad; r++) {
		struct dg_dma_batch b;
		int e = 0;

		/* 2 MiB first (the top of the space), then 14 MiB reserved below it, once */
		e |= dg_dma_map_single(w.dd, bigmem + G, BIG, DG_DMA_BIDIRECTIONAL, 0,
				       &w.runs[0].iova);
		w.runs[0].len = BIG;
		for (unsigned int i = 0; r == 1 && i < 3; i++)
			e |= dg_dma_iova_alloc(w.dd, (uint64_t)BIG << i, &fill[i]);
		if (r == 1)
			e |= dg_dma_iova_alloc(w.dd, 4 * G, &lst);
		e |= dg_dma_iova_link(&lst, 0, lmem, G, DG_DMA_BIDIRECTIONAL, &w.runs[1].iova);
		w.runs[1].len = G;
		for (unsigned int i = 0; i < NS; i++) {
			e |= dg_dma_map_single(w.dd, smem + (size_t)i * 8 * G, 7 * G,
					       DG_DMA_BIDIRECTIONAL, 0, &w.runs[2 + i].iova);
			w.runs[2 + i].len = 7 * G;
		}
		if (e || !layout_ok(w.runs)) {
			fprintf(stderr, "round %lu: map failed or layout not as planned\n", r);
			bad = 1;
			break;
		}
		/* Release pairs with the device's acquire load of go. */
		atomic_store_explicit(&w.go, r, memory_order_release);
		/* Acquire pairs with the device's release store of held. */
		while (atomic_load_explicit(&w.held, memory_order_acquire) < r)
			;
		dg_dma_batch_begin(w.dd, &b);
		e |= dg_dma_unmap_single(w.dd, w.runs[0].iova, BIG, DG_DMA_BIDIRECTIONAL, 0, &b);
		e |= dg_dma_iova_unlink(&lst, 0, G, DG_DMA_BIDIRECTIONAL, &b);
		for (unsigned int i = 0; i < NS; i++)
			e |= dg_dma_unmap_single(w.dd, w.runs[2 + i].iova, 7 * G,
						 DG_DMA_BIDIRECTIONAL, 0, &b);
		atomic_store_explicit(&w.ending, r, memory_order_relaxed);
		e |= dg_dma_batch_end(&b);
		if (e) {
			fprintf(stderr, "round %lu: unmap or batch end failed\n", r);
			bad = 1;
		}
		/* Release pairs with the device's acquire loads of ended. */
		atomic_store_explicit(&w.ended, r, memory_order_release);
		/* Acquire pairs with the device's release store of checked. */
		while (!bad && atomic_load_explicit(&w.checked, memory_order_acquire) < r)
			;
	}
	atomic_store(&w.stop, true);
	pthread_join(th, NULL);
	dg_iommu_stats(w.mmu, &s1);
	if (!bad && s1.inval_cmds[DG_INVAL_DOMAIN] - s0.inval_cmds[DG_INVAL_DOMAIN] < w.rounds) {
		fprintf(stderr, "%llu DOMAIN commands for %lu rounds: the fallback was not taken\n",
			(unsigned long long)(s1.inval_cmds[DG_INVAL_DOMAIN] -
					     s0.inval_cmds[DG_INVAL_DOMAIN]),
			w.rounds);
		bad = 1;
	}
	if (atomic_load(&w.violations))
		bad = 1;
	for (unsigned int i = 0; i < 3; i++)
		if (fill[i].dev && dg_dma_iova_free(&fill[i]))
			bad = 1;
	if (lst.dev && dg_dma_iova_free(&lst))
		bad = 1;
	if (dg_dma_dev_check(w.dd, stderr) || dg_dma_dev_destroy(w.dd))
		bad = 1;
	dg_device_destroy(w.dev);
	dg_dma_destroy(w.dma);
	dg_iommu_destroy(w.mmu);
	free(bigmem);
	free(smem);
	free(lmem);
	printf("stress_dma_inval_fallback: %lu rounds, %lu violations: %s\n", w.rounds,
	       (unsigned long)atomic_load(&w.violations), bad ? "FAIL" : "ok");
	return bad;
}
