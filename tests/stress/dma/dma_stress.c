/* SPDX-License-Identifier: MIT */
/*
 * Stress test of the DMA layer: CPU threads map, hand buffers to a device thread, unmap (one
 * by one, in batches, as scatter-gather lists, through two-step links, through the bulk calls:
 * dg_dma_map_bulk/unmap_bulk where the policy has them, else dg_dma_iova_link_bulk/
 * unlink_bulk), and after every unmap the device tries the stale address. Runs every policy in turn; also runs under
 * ThreadSanitizer.
 *
 *   stress_dma CPU_THREADS ITERATIONS [POLICY]
 *
 * Protocol per CPU thread: a mailbox shared with the device thread. The CPU thread fills its
 * buffer with a live pattern, maps it, posts {dma, len, dir} and waits; the device reads
 * (checks the pattern) and/or writes (its own pattern) and answers; the CPU unmaps, checks the
 * device's data arrived, fills the buffer with a dead pattern and posts a probe of the stale
 * address; the device translates it (dg_dev_translate: what it could reach, without touching
 * memory, so the test has no data race of its own) and reports whether any host segment it
 * got lies in the buffer's pages. Under strict, window, pool (fallback maps) and bounce that
 * must never happen: after unmap (or the end of its batch) returns, no device access reaches
 * the buffer. Under lazy it may (the window); the window's bound in unmaps is checked from
 * the statistics. The device thread reaches a quiescent point whenever it has no work.
 */
#include <dmaguard/dma.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CPU	  4
#define BATCH	  8
#define BUF_PAGES 3
#define PG	  4096u

enum { MB_EMPTY, MB_DMA, MB_PROBE, MB_DONE };

struct mailbox {
	_Atomic int state;
	/* request, written before state (release), read by the device after acquire */
	uint64_t dma;
	size_t len;
	enum dg_dma_dir dir;
	uintptr_t lo, hi; /* probe: the buffer's pages */
	uint8_t pattern;
	/* answer, written by the device before MB_DONE */
	int result; /* 0 ok; 1 the stale address reached the buffer; <0 an error */
} __attribute__((aligned(64)));

struct run {
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	enum dg_dma_policy policy;
	unsigned int ncpu;
	unsigned long iters;
	struct mailbox mb[MAX_CPU];
	_Atomic int stop;
	_Atomic unsigned long reached; /* stale translations that reached a buffer */
	_Atomic unsigned long errors;
};

struct cpu_arg {
	struct run *run;
	unsigned int id;
};

static void fail(struct run *r, const char *what, long v)
{
	fprintf(stderr, "stress_dma %s: %s (%ld)\n", dg_dma_policy_name(r->policy), what, v);
	atomic_fetch_add(&r->errors, 1);
}

/* ---- the device ------------------------------------------------------------------------------ */

static int device_dma(struct run *r, struct mailbox *mb)
{
	uint8_t tmp[BUF_PAGES * PG];

	if (mb->dir != DG_DMA_FROM_DEVICE) {
		int e = dg_dev_read(r->dev, mb->dma, tmp, mb->len);

		if (e)
			return e;
		for (size_t i = 0; i < mb->len; i++)
			if (tmp[i] != (uint8_t)(mb->pattern + i))
				return -EBADMSG;
	}
	if (mb->dir != DG_DMA_TO_DEVICE) {
		for (size_t i = 0; i < mb->len; i++)
			tmp[i] = (uint8_t)(mb->pattern ^ 0xa5);
		return dg_dev_write(r->dev, mb->dma, tmp, mb->len);
	}
	return 0;
}

static int device_probe(struct run *r, struct mailbox *mb)
{
	static const unsigned int access[] = {DG_ACCESS_READ, DG_ACCESS_WRITE};
	struct dg_sg sg[8];
	unsigned int nr;

	/* page by page: a refused page must not hide a reachable one */
	for (uint64_t a = mb->dma; a < mb->dma + mb->len; a = (a | (PG - 1)) + 1) {
		uint64_t n = ((a | (PG - 1)) + 1) - a;

		if (n > mb->dma + mb->len - a)
			n = mb->dma + mb->len - a;
		for (unsigned int k = 0; k < 2; k++) {
			if (dg_dev_translate(r->dev, a, n, access[k], sg, 8, &nr))
				continue; /* refused: nothing reached */
			for (unsigned int i = 0; i < nr; i++) {
				uintptr_t s = (uintptr_t)sg[i].addr, e = s + sg[i].len;

				if (s < mb->hi && e > mb->lo)
					return 1;
			}
		}
	}
	return 0;
}

static void *device_main(void *arg)
{
	struct run *r = arg;

	while (!atomic_load_explicit(&r->stop, memory_order_acquire)) {
		bool work = false;

		for (unsigned int i = 0; i < r->ncpu; i++) {
			struct mailbox *mb = &r->mb[i];
			/* Acquire pairs with the CPU thread's release store of the request. */
			int st = atomic_load_explicit(&mb->state, memory_order_acquire);

			if (st != MB_DMA && st != MB_PROBE)
				continue;
			work = true;
			mb->result = st == MB_DMA ? device_dma(r, mb) : device_probe(r, mb);
			/* Release pairs with the CPU thread's acquire load of MB_DONE. */
			atomic_store_explicit(&mb->state, MB_DONE, memory_order_release);
		}
		if (!work) {
			dg_dev_quiesce(r->dev);
			sched_yield();
		}
	}
	dg_dev_offline(r->dev);
	return NULL;
}

/* ---- the CPU threads --------------------------------------------------------------------------- */

static int post(struct mailbox *mb, int kind)
{
	/* Release pairs with the device's acquire load of the state. */
	atomic_store_explicit(&mb->state, kind, memory_order_release);
	/* Acquire pairs with the device's release store of MB_DONE. */
	while (atomic_load_explicit(&mb->state, memory_order_acquire) != MB_DONE)
		sched_yield();
	atomic_store_explicit(&mb->state, MB_EMPTY, memory_order_relaxed);
	return mb->result;
}

struct item {
	uint8_t *buf;
	size_t off, len;
	enum dg_dma_dir dir;
	uint64_t dma;
	uint8_t pattern;
	struct dg_dma_sg sg[2];
	unsigned int nents;
};

static bool strictly_isolated(enum dg_dma_policy p)
{
	return p == DG_DMA_STRICT || p == DG_DMA_WINDOW || p == DG_DMA_POOL || p == DG_DMA_BOUNCE;
}

static void probe_after_unmap(struct run *r, struct mailbox *mb, struct item *it)
{
	int res;

	memset(it->buf, 0xdd, BUF_PAGES * PG); /* the dead pattern */
	if (r->policy == DG_DMA_IDENTITY)
		return;
	mb->dma = it->dma;
	mb->len = it->len;
	mb->lo = (uintptr_t)it->buf;
	mb->hi = (uintptr_t)it->buf + BUF_PAGES * PG;
	res = post(mb, MB_PROBE);
	if (res == 1) {
		atomic_fetch_add(&r->reached, 1);
		if (strictly_isolated(r->policy))
			fail(r, "a stale address reached the unmapped buffer", 0);
	}
}

static void check_written(struct run *r, struct item *it)
{
	if (it->dir == DG_DMA_TO_DEVICE)
		return;
	for (size_t i = 0; i < it->len; i++)
		if (it->buf[it->off + i] != (uint8_t)(it->pattern ^ 0xa5)) {
			fail(r, "device data missing after unmap", (long)i);
			return;
		}
}

static void *cpu_main(void *arg)
{
	struct cpu_arg *a = arg;
	struct run *r = a->run;
	struct mailbox *mb = &r->mb[a->id];
	struct item items[BATCH];
	uint64_t rng = 0x9e3779b97f4a7c15ull * (a->id + 1);
	struct dg_dma_iova_state st, st2;
	bool two_step = r->policy != DG_DMA_BOUNCE;
	bool bulk = r->policy == DG_DMA_IDENTITY || r->policy == DG_DMA_STRICT ||
		    r->policy == DG_DMA_LAZY;

	for (unsigned int k = 0; k < BATCH; k++)
		items[k].buf = aligned_alloc(PG, BUF_PAGES * PG);
	if (two_step && (dg_dma_iova_alloc(r->dd, BUF_PAGES * PG, &st) ||
			 dg_dma_iova_alloc(r->dd, BATCH * 2 * PG, &st2))) {
		fail(r, "iova alloc", 0);
		return NULL;
	}
	/* the mode by round, not by item count (rounds of 8 items would skip modes) */
	for (unsigned long it = 0, round = 0; it < r->iters; round++) {
		unsigned int mode = (unsigned int)(round % 5),
			     n = mode == 1 || mode == 4 ? BATCH : 1;
		struct dg_dma_batch b;
		int e;

		if (mode == 4 &&
		    (bulk || two_step)) { /* the bulk calls: a ring's refill and reap */
			void *bufs[BATCH];
			uint64_t dma[BATCH];
			const bool links = !bulk || (round / 5) % 2;

			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			for (unsigned int k = 0; k < n; k++) {
				struct item *x = &items[k];

				x->off = (rng >> (4 * k)) % 3000;
				x->len = 1 + (rng >> 16) % 5000; /* one length and direction */
				x->dir = (enum dg_dma_dir)((rng >> 40) % 3);
				x->pattern = (uint8_t)((rng >> 48) + k);
				x->nents = 0;
				for (size_t i = 0; i < x->len; i++)
					x->buf[x->off + i] = (uint8_t)(x->pattern + i);
				bufs[k] = x->buf + x->off;
			}
			if (links)
				e = dg_dma_iova_link_bulk(&st2, 0, 2 * PG, bufs, n, items[0].len,
							  items[0].dir, dma);
			else
				e = dg_dma_map_bulk(r->dd, bufs, n, items[0].len, items[0].dir, 0,
						    dma);
			if (e) {
				fail(r, "bulk map", e);
				return NULL;
			}
			for (unsigned int k = 0; k < n; k++) {
				items[k].dma = dma[k];
				mb->dma = dma[k];
				mb->len = items[k].len;
				mb->dir = items[k].dir;
				mb->pattern = items[k].pattern;
				e = post(mb, MB_DMA);
				if (e)
					fail(r, "device DMA on a live bulk mapping", e);
			}
			dg_dma_batch_begin(r->dd, &b);
			if (links)
				e = dg_dma_iova_unlink_bulk(&st2, 0, 2 * PG, n, items[0].len,
							    items[0].dir, &b);
			else
				e = dg_dma_unmap_bulk(r->dd, dma, n, items[0].len, items[0].dir, 0,
						      &b);
			if (e)
				fail(r, "bulk unmap", e);
			if ((e = dg_dma_batch_end(&b)))
				fail(r, "batch end", e);
			for (unsigned int k = 0; k < n; k++) {
				check_written(r, &items[k]);
				probe_after_unmap(r, mb, &items[k]);
			}
			it += n;
			continue;
		}

		for (unsigned int k = 0; k < n; k++) {
			struct item *x = &items[k];

			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			x->off = rng % 3000;
			x->len = 1 + (rng >> 16) % 5000;
			x->dir = (enum dg_dma_dir)((rng >> 40) % 3);
			x->pattern = (uint8_t)(rng >> 48);
			for (size_t i = 0; i < x->len; i++)
				x->buf[x->off + i] = (uint8_t)(x->pattern + i);
			if (mode == 3 && two_step) { /* linked at offset 0 of the range */
				x->nents = 0;
				e = dg_dma_iova_link(&st, 0, x->buf + x->off, x->len, x->dir,
						     &x->dma);
			} else if (mode == 2 && x->len > 100) { /* a two-entry list */
				x->nents = 2;
				x->sg[0] = (struct dg_dma_sg){.addr = x->buf + x->off, .len = 100};
				x->sg[1] = (struct dg_dma_sg){.addr = x->buf + x->off + 100,
							      .len = x->len - 100};
				unsigned int nr;

				e = dg_dma_map_sg(r->dd, x->sg, 2, x->dir, 0, &nr);
				/* the device sees one segment when they merged, else two */
				x->dma = x->sg[0].dma_addr;
				if (!e && nr == 2) {
					/* keep the test simple: the device gets the first only */
					x->len = 100;
				}
			} else {
				x->nents = 0;
				e = dg_dma_map_single(r->dd, x->buf + x->off, x->len, x->dir, 0,
						      &x->dma);
			}
			if (e) {
				fail(r, "map", e);
				return NULL;
			}
			mb->dma = x->dma;
			mb->len = x->len;
			mb->dir = x->dir;
			mb->pattern = x->pattern;
			e = post(mb, MB_DMA);
			if (e)
				fail(r, "device DMA on a live mapping", e);
		}
		if (n > 1)
			dg_dma_batch_begin(r->dd, &b);
		for (unsigned int k = 0; k < n; k++) {
			struct item *x = &items[k];
			size_t full = x->nents ? x->sg[0].len + x->sg[1].len : x->len;

			if (mode == 3 && two_step)
				e = dg_dma_iova_unlink(&st, 0, x->len, x->dir, NULL);
			else if (x->nents)
				e = dg_dma_unmap_sg(r->dd, x->sg, 2, x->dir, 0, n > 1 ? &b : NULL);
			else
				e = dg_dma_unmap_single(r->dd, x->dma, full, x->dir, 0,
							n > 1 ? &b : NULL);
			if (e)
				fail(r, "unmap", e);
		}
		if (n > 1 && (e = dg_dma_batch_end(&b)))
			fail(r, "batch end", e);
		for (unsigned int k = 0; k < n; k++) {
			check_written(r, &items[k]);
			probe_after_unmap(r, mb, &items[k]);
		}
		it += n;
	}
	if (two_step && (dg_dma_iova_free(&st) || dg_dma_iova_free(&st2)))
		fail(r, "iova free", 0);
	for (unsigned int k = 0; k < BATCH; k++)
		free(items[k].buf);
	return NULL;
}

static int run_policy(enum dg_dma_policy p, unsigned int ncpu, unsigned long iters)
{
	struct dg_iommu_config ic;
	struct dg_dma_dev_config c;
	struct dg_dma_stats st;
	pthread_t dev_thr, cpu_thr[MAX_CPU];
	struct cpu_arg args[MAX_CPU];
	struct dg_iommu *mmu;
	struct dg_dma *dma;
	struct run *r = calloc(1, sizeof(*r));
	int bad;

	dg_iommu_config_init(&ic);
	ic.log = NULL;
	mmu = dg_iommu_create(&ic);
	dma = dg_dma_create(mmu, NULL); /* with the housekeeping thread */
	r->dev = dg_device_create(mmu, 1);
	dg_dma_dev_config_init(&c);
	c.policy = p;
	c.lazy.queue_size = 16;
	r->dd = dg_dma_dev_create(dma, r->dev, &c);
	if (!mmu || !dma || !r->dev || !r->dd) {
		fprintf(stderr, "stress_dma: set-up failed: %s\n", strerror(errno));
		return 1;
	}
	r->policy = p;
	r->ncpu = ncpu;
	r->iters = iters;
	pthread_create(&dev_thr, NULL, device_main, r);
	for (unsigned int i = 0; i < ncpu; i++) {
		args[i] = (struct cpu_arg){r, i};
		pthread_create(&cpu_thr[i], NULL, cpu_main, &args[i]);
	}
	for (unsigned int i = 0; i < ncpu; i++)
		pthread_join(cpu_thr[i], NULL);
	atomic_store_explicit(&r->stop, 1, memory_order_release);
	pthread_join(dev_thr, NULL);

	dg_dma_dev_stats(r->dd, &st);
	if (st.live)
		fail(r, "mappings left live", (long)st.live);
	if (p == DG_DMA_LAZY && st.lazy_window_max_unmaps > 16)
		fail(r, "lazy window longer than the queue", (long)st.lazy_window_max_unmaps);
	if (dg_dma_dev_check(r->dd, stderr))
		fail(r, "dg_dma_dev_check", 0);
	printf("stress_dma %-8s cpus %u iterations %lu: maps %llu, stale translations that "
	       "reached the buffer %lu, lazy window max %llu unmaps / %llu ns\n",
	       dg_dma_policy_name(p), ncpu, iters, (unsigned long long)st.maps,
	       atomic_load(&r->reached), (unsigned long long)st.lazy_window_max_unmaps,
	       (unsigned long long)st.lazy_window_max_ns);
	bad = (int)atomic_load(&r->errors);
	if (dg_dma_dev_destroy(r->dd))
		bad++;
	dg_device_destroy(r->dev);
	if (dg_dma_destroy(dma))
		bad++;
	dg_iommu_destroy(mmu);
	free(r);
	return bad;
}

int main(int argc, char **argv)
{
	unsigned int ncpu = argc > 1 ? (unsigned int)atoi(argv[1]) : 2;
	unsigned long iters = argc > 2 ? strtoul(argv[2], NULL, 0) : 2000;
	int bad = 0;

	if (ncpu < 1 || ncpu > MAX_CPU) {
		fprintf(stderr, "usage: stress_dma CPU_THREADS(1..%d) ITERATIONS [POLICY]\n",
			MAX_CPU);
		return 2;
	}
	for (unsigned int p = 0; p < DG_DMA_NR_POLICIES; p++) {
		enum dg_dma_policy want;

		if (argc > 3 && (dg_dma_policy_parse(argv[3], &want) || want != p))
			continue;
		bad += run_policy((enum dg_dma_policy)p, ncpu, iters);
	}
	return bad ? 1 : 0;
}
