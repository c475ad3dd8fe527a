/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_soak.c - "dmaguard bench soak": aging under mixed traffic through every policy.
 *
 * The seed figures include an aging cliff (16 hours of lazy mode: 1.7M -> 0.33-0.69M IOPS as
 * magazines drained into the tree) and soft lockups that appear only after long uptimes. A
 * soak runs the whole stack for a long time and reports whether anything drifts:
 *
 *   workers (--threads, default 2), each owning one device per policy:
 *     identity strict lazy window bounce pool    on one shared IOMMU and DMA layer
 *     linux-ref                                  on a reference IOMMU of its own
 *   each burst, on one device: 1..16 requests of mixed kinds (single maps of 64 B .. 64 KiB,
 *   page maps, scatter-gather lists of 2..8 segments, pool buffers under pool), every
 *   direction; the device (the same thread, auto-offline) reads or writes every mapping; the
 *   unmaps go one by one or in a batch; now and then a coherent allocation, and under the
 *   translated policies a two-step ring of four slots.
 *
 * Every interval (--interval, or duration / 20; duration / interval of them, at most 4096,
 * each timed from the end of the previous sample, so a loaded machine stretches the run
 * instead of shortening the series) the workers finish their burst and wait at a barrier
 * while the main thread samples: requests per policy in the interval, the process's
 * RSS, and the library's own counters - page-table pages of every domain, live mappings,
 * IOVAs held by lazy flush queues and quarantine, bounce shadow bytes in use - and runs
 * dg_dma_dev_check() on every device. After the run:
 *  - throughput trend: the least-squares slope of requests per CPU second of the workers
 *    over the intervals (wall-clock rates on a shared machine follow the other processes),
 *    as a change over the whole run in percent of the mean (trend_pct); downward_trend
 *    when below -10%; the same on wall-clock rates is reported too (trend_wall_pct);
 *  - memory (the rules are at the verdict in bench_soak_main): no live mapping at any
 *    barrier, IOVAs held within what the flush queues can hold, RSS and table pages settling
 *    (judged over quarters of the *work*, since a loaded machine may do little at first);
 *  - drained: once the traffic stops, every lazy flush and quarantine completes and nothing
 *    stays held.
 * The trend is a reported result, not an assertion (a timed run on a shared machine is
 * noise); make test checks the memory verdict of a --quick run (tests/e2e/soak_test.sh),
 * and --leak N proves the verdict can say "grew". The exit status is non-zero only for
 * errors (a call that failed, a check() that failed, not drained).
 */
#include "bench.h"

#include <dmaguard/dma.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum soak_pol { S_IDENTITY, S_STRICT, S_LAZY, S_WINDOW, S_BOUNCE, S_POOL, S_LINUX_REF, S_NR };

static const char *const pol_names[S_NR] = {"identity", "strict", "lazy",     "window",
					    "bounce",	"pool",	  "linux-ref"};

#define MAX_THREADS   8
#define MAX_REQ	      16
#define ARENA	      (4u << 20) /* per worker: buffers come from here */
#define DIRECT	      (2u << 20) /* window: the first half is the direct region */
#define MAX_INTERVALS 4096
#define POOL_BUF      2048u
#define POOL_NBUFS    64u

enum req_kind { R_SINGLE, R_PAGE, R_SG, R_POOL };

struct req {
	enum req_kind kind;
	enum dg_dma_dir dir;
	void *buf;
	size_t len;
	uint64_t dma;
	struct dg_dma_sg sg[8];
	unsigned int nents, nr;
};

struct soak_dev {
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	struct dg_dma_pool *pool; /* pool policy */
};

struct worker {
	unsigned int id;
	pthread_t thread;
	uint8_t *arena;
	struct soak_dev d[S_NR];
	uint64_t rng;
	_Atomic uint64_t ops[S_NR]; /* requests done (single writer; read at the barrier) */
	_Atomic uint64_t errors;
	_Atomic uint64_t enospc;   /* requests skipped for back-pressure */
	_Atomic uint64_t timeouts; /* unmaps and batch ends that said -ETIMEDOUT */
	uint64_t bursts;	   /* worker only */
	struct req held[64];	   /* --leak: requests kept mapped until the end */
	enum soak_pol held_pol[64];
	unsigned int nheld;
	uint8_t scratch[65536];
} __attribute__((aligned(64)));

struct sample {
	double t_s;
	uint64_t ops[S_NR];
	double mops_per_s;     /* requests per wall second */
	double mops_per_cpu_s; /* requests per second of the workers' CPU time */
	uint64_t cpu_ns;       /* the workers' CPU time so far */
	uint64_t rss_kib;
	uint64_t table_pages;
	uint64_t live;
	uint64_t iova_held; /* lazy_pending + quarantined */
	uint64_t bounce_in_use;
};

static unsigned int opt_leak; /* --leak N: every Nth burst keeps one mapping (self-test) */

static struct {
	struct dg_iommu *mmu, *ref_mmu;
	struct dg_dma *dma, *ref_dma;
	struct worker *w;
	unsigned int nthreads;
	_Atomic bool stop;
	_Atomic uint64_t pause_gen;   /* main: a new pause (barrier generation) */
	_Atomic uint64_t resumed_gen; /* main: the pause of this generation is over */
	_Atomic unsigned int paused;  /* workers parked in the current pause */
	_Atomic uint64_t check_failures;
} S;

static uint64_t rnd(struct worker *w)
{
	/* xorshift64*: cheap, per worker */
	w->rng ^= w->rng >> 12;
	w->rng ^= w->rng << 25;
	w->rng ^= w->rng >> 27;
	return w->rng * 0x2545f4914f6cdd1dull;
}

static void fail(struct worker *w, const char *what, int err)
{
	if (err == -ETIMEDOUT) {
		/* A wait gave up (a device starved of CPU in the middle of a DMA on a loaded
		   machine): the library quarantines and confirms later. Reported, not an error. */
		atomic_fetch_add_explicit(&w->timeouts, 1, memory_order_relaxed);
		return;
	}
	if (atomic_fetch_add_explicit(&w->errors, 1, memory_order_relaxed) < 5)
		fprintf(stderr, "bench soak: worker %u: %s: %s\n", w->id, what, strerror(-err));
}

/* ---- one burst ------------------------------------------------------------------------------ */

static const size_t sizes[] = {64, 256, 1500, 2048, 4096, 9000, 16384, 65536};

/* The device touches the start and the end of every DMA segment. */
static void device_touch(struct worker *w, struct dg_device *dev, uint64_t dma, size_t len,
			 enum dg_dma_dir dir)
{
	size_t n = len < 256 ? len : 256;
	int r;

	if (dir == DG_DMA_FROM_DEVICE) {
		memset(w->scratch, 0xa5, n);
		r = dg_dev_write(dev, dma, w->scratch, n);
		if (!r && len > n)
			r = dg_dev_write(dev, dma + len - n, w->scratch, n);
	} else {
		r = dg_dev_read(dev, dma, w->scratch, n);
		if (!r && len > n)
			r = dg_dev_read(dev, dma + len - n, w->scratch, n);
	}
	if (r)
		fail(w, "device DMA", r);
}

static int map_req(struct worker *w, struct soak_dev *sd, enum soak_pol p, struct req *q)
{
	size_t off;
	int r;

	q->dir = (enum dg_dma_dir)(rnd(w) % 3);
	q->kind = (enum req_kind)(rnd(w) % 3);
	if (p == S_POOL && rnd(w) % 4) {
		q->kind = R_POOL;
		q->dir = DG_DMA_BIDIRECTIONAL;
		r = dg_dma_pool_get(sd->pool, &q->buf, &q->dma);
		if (r)
			return r == -ENOSPC ? 1 : r; /* all out: skip */
		q->len = POOL_BUF;
		return dg_dma_map_single(sd->dd, q->buf, q->len, DG_DMA_BIDIRECTIONAL, 0, &q->dma);
	}
	q->len = sizes[rnd(w) % (sizeof(sizes) / sizeof(sizes[0]))];
	off = rnd(w) % (ARENA - 2 * 65536) & ~(size_t)63;
	if (p == S_WINDOW && rnd(w) % 2)
		off = rnd(w) % (DIRECT - 65536) & ~(size_t)63; /* the direct region */
	switch (q->kind) {
	case R_SINGLE:
		q->buf = w->arena + off;
		return dg_dma_map_single(sd->dd, q->buf, q->len, q->dir, 0, &q->dma);
	case R_PAGE:
		q->buf = w->arena + (off & ~(size_t)4095);
		return dg_dma_map_page(sd->dd, q->buf, off & 4095, q->len, q->dir, 0, &q->dma);
	case R_SG:
		q->nents = 2 + (unsigned int)(rnd(w) % 7);
		for (unsigned int i = 0; i < q->nents; i++) {
			size_t o = rnd(w) % (ARENA - 8192) & ~(size_t)63;

			q->sg[i] = (struct dg_dma_sg){.addr = w->arena + o,
						      .len = 512 + rnd(w) % 3584};
		}
		return dg_dma_map_sg(sd->dd, q->sg, q->nents, q->dir, 0, &q->nr);
	case R_POOL:
		break;
	}
	return -EINVAL;
}

static int unmap_req(struct soak_dev *sd, struct req *q, struct dg_dma_batch *b)
{
	switch (q->kind) {
	case R_SINGLE:
		return dg_dma_unmap_single(sd->dd, q->dma, q->len, q->dir, 0, b);
	case R_PAGE:
		return dg_dma_unmap_page(sd->dd, q->dma, q->len, q->dir, 0, b);
	case R_SG:
		return dg_dma_unmap_sg(sd->dd, q->sg, q->nents, q->dir, 0, b);
	case R_POOL: {
		int r = dg_dma_unmap_single(sd->dd, q->dma, q->len, DG_DMA_BIDIRECTIONAL, 0, b);
		int p = r && r != -ETIMEDOUT ? 0 : dg_dma_pool_put(sd->pool, q->buf);

		return r ? r : p;
	}
	}
	return -EINVAL;
}

/* A ring of four two-step slots: link, sync, device reads, unlink in a batch, free. */
static void two_step(struct worker *w, struct soak_dev *sd)
{
	struct dg_dma_iova_state st;
	struct dg_dma_batch b;
	uint64_t dma[4];
	int r = dg_dma_iova_alloc(sd->dd, 4 * 8192, &st);

	if (r) {
		fail(w, "two-step alloc", r);
		return;
	}
	for (unsigned int i = 0; i < 4; i++) {
		r = dg_dma_iova_link(&st, i * 8192, w->arena + i * 8192 + 64, 4000,
				     DG_DMA_TO_DEVICE, &dma[i]);
		if (r)
			fail(w, "two-step link", r);
	}
	r = dg_dma_iova_sync(&st, 0, 4 * 8192);
	if (r)
		fail(w, "two-step sync", r);
	dg_dma_batch_begin(sd->dd, &b);
	for (unsigned int i = 0; i < 4; i++) {
		device_touch(w, sd->dev, dma[i], 4000, DG_DMA_TO_DEVICE);
		r = dg_dma_iova_unlink(&st, i * 8192, 4000, DG_DMA_TO_DEVICE, &b);
		if (r)
			fail(w, "two-step unlink", r);
	}
	r = dg_dma_batch_end(&b);
	if (r)
		fail(w, "two-step batch end", r);
	r = dg_dma_iova_free(&st);
	if (r)
		fail(w, "two-step free", r);
}

static void burst(struct worker *w, enum soak_pol p)
{
	struct soak_dev *sd = &w->d[p];
	struct req q[MAX_REQ];
	unsigned int n = 1 + (unsigned int)(rnd(w) % MAX_REQ), done = 0;
	bool batched = rnd(w) % 2;
	struct dg_dma_batch b;
	int r;

	for (unsigned int i = 0; i < n; i++) {
		r = map_req(w, sd, p, &q[done]);
		if (r == 1 || r == -ENOSPC) { /* back-pressure (pool empty, shadow area full) */
			atomic_fetch_add_explicit(&w->enospc, 1, memory_order_relaxed);
			continue;
		}
		if (r) {
			fail(w, pol_names[p], r);
			continue;
		}
		if (q[done].kind == R_SG)
			for (unsigned int s = 0; s < q[done].nr; s++)
				device_touch(w, sd->dev, q[done].sg[s].dma_addr,
					     q[done].sg[s].dma_len, q[done].dir);
		else
			device_touch(w, sd->dev, q[done].dma, q[done].len, q[done].dir);
		done++;
	}
	if (opt_leak && ++w->bursts % opt_leak == 0 && done && w->nheld < 64) {
		/* the self-test of the memory verdict: this one is not unmapped until the end */
		w->held_pol[w->nheld] = p;
		w->held[w->nheld++] = q[--done];
	}
	if (batched)
		dg_dma_batch_begin(sd->dd, &b);
	for (unsigned int i = 0; i < done; i++) {
		r = unmap_req(sd, &q[i], batched ? &b : NULL);
		if (r)
			fail(w, "unmap", r);
	}
	if (batched && (r = dg_dma_batch_end(&b)))
		fail(w, "batch end", r);
	if (rnd(w) % 64 == 0) {
		uint64_t dma;
		size_t sz = 4096u << (rnd(w) % 4);
		void *c = dg_dma_alloc_coherent(sd->dd, sz, &dma);

		if (!c) {
			fail(w, "coherent alloc", -errno);
		} else {
			device_touch(w, sd->dev, dma, sz, DG_DMA_FROM_DEVICE);
			if ((r = dg_dma_free_coherent(sd->dd, c, sz, dma)))
				fail(w, "coherent free", r);
		}
	}
	if (rnd(w) % 32 == 0 && p != S_IDENTITY && p != S_BOUNCE)
		two_step(w, sd);
	/* Single writer: a relaxed load and store, read by the main thread at the barrier. */
	atomic_store_explicit(&w->ops[p],
			      atomic_load_explicit(&w->ops[p], memory_order_relaxed) + done,
			      memory_order_relaxed);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	/* Not pinned: on a shared machine a pinned worker stuck behind other work would hold up
	   every wait of the others for as long as its device is in the middle of a DMA. */
	for (unsigned int p = 0; p < S_NR; p++)
		dg_dev_set_auto_offline(w->d[p].dev, true); /* this thread is the device */
	uint64_t parked_gen = 0;

	/* Acquire pairs with the release store of stop in bench_soak_main(). */
	while (!atomic_load_explicit(&S.stop, memory_order_acquire)) {
		/* Acquire pairs with the release store of pause_gen in sample(). */
		uint64_t gen = atomic_load_explicit(&S.pause_gen, memory_order_acquire);

		if (gen != parked_gen) {
			parked_gen = gen;
			/* Release pairs with the acquire load in sample(): our counters and our
			   devices' state (everything unmapped) are visible to it. */
			atomic_fetch_add_explicit(&S.paused, 1, memory_order_release);
			/* Acquire pairs with the release store of resumed_gen in sample(). A
			   new pause bumps pause_gen and is seen at the top of the loop. */
			while (atomic_load_explicit(&S.resumed_gen, memory_order_acquire) != gen)
				usleep(100);
			continue;
		}
		burst(w, (enum soak_pol)(rnd(w) % S_NR));
	}
	return NULL;
}

/* ---- set-up --------------------------------------------------------------------------------- */

static int dev_create(struct worker *w, enum soak_pol p)
{
	struct dg_dma_dev_config c;
	struct soak_dev *sd = &w->d[p];
	bool ref = p == S_LINUX_REF;

	sd->dev = dg_device_create(ref ? S.ref_mmu : S.mmu, 0x100 + w->id * S_NR + p);
	if (!sd->dev)
		return -errno;
	dg_dma_dev_config_init(&c);
	switch (p) {
	case S_IDENTITY:
		c.policy = DG_DMA_IDENTITY;
		break;
	case S_STRICT:
		c.policy = DG_DMA_STRICT;
		break;
	case S_LAZY:
		c.policy = DG_DMA_LAZY;
		break;
	case S_WINDOW:
		c.policy = DG_DMA_WINDOW;
		c.window.base = 1ull << 32;
		c.window.size = 1ull << 30;
		c.window.page_size = 4096;
		c.window.direct = w->arena;
		c.window.direct_size = DIRECT;
		break;
	case S_BOUNCE:
		c.policy = DG_DMA_BOUNCE;
		c.bounce.area_size = 2u << 20; /* a burst's worst case (16 x 64 KiB) fits */
		break;
	case S_POOL:
		c.policy = DG_DMA_POOL;
		break;
	case S_LINUX_REF:
		c.policy = DG_DMA_STRICT;
		c.flags = DG_DMA_DEV_LINUX_REFERENCE;
		break;
	case S_NR:
		break;
	}
	sd->dd = dg_dma_dev_create(ref ? S.ref_dma : S.dma, sd->dev, &c);
	if (!sd->dd)
		return -errno;
	if (p == S_POOL) {
		sd->pool =
			dg_dma_pool_create(sd->dd, POOL_BUF, POOL_NBUFS, DG_DMA_BIDIRECTIONAL, 0);
		if (!sd->pool)
			return -errno;
	}
	return 0;
}

static void dev_destroy(struct soak_dev *sd)
{
	if (sd->pool && dg_dma_pool_destroy(sd->pool))
		fprintf(stderr, "bench soak: pool still busy at the end\n");
	if (sd->dd) {
		for (int k = 0; k < 100 && dg_dma_dev_destroy(sd->dd) == -ETIMEDOUT; k++)
			;
	}
	if (sd->dev)
		dg_device_destroy(sd->dev);
}

static int setup(unsigned int nthreads)
{
	struct dg_iommu_config ic;
	int r;

	dg_iommu_config_init(&ic);
	ic.log = NULL;
	S.mmu = dg_iommu_create(&ic);
	ic.reference = true;
	S.ref_mmu = dg_iommu_create(&ic);
	if (!S.mmu || !S.ref_mmu)
		return -errno;
	S.dma = dg_dma_create(S.mmu, NULL);
	S.ref_dma = dg_dma_create(S.ref_mmu, NULL);
	if (!S.dma || !S.ref_dma)
		return -errno;
	S.nthreads = nthreads;
	S.w = aligned_alloc(64, sizeof(*S.w) * nthreads);
	if (!S.w)
		return -ENOMEM;
	memset(S.w, 0, sizeof(*S.w) * nthreads);
	for (unsigned int i = 0; i < nthreads; i++) {
		struct worker *w = &S.w[i];

		w->id = i;
		w->rng = 0x9e3779b97f4a7c15ull * (i + 1);
		w->arena = aligned_alloc(2u << 20, ARENA);
		if (!w->arena)
			return -ENOMEM;
		memset(w->arena, 0x3c, ARENA);
		for (unsigned int p = 0; p < S_NR; p++)
			if ((r = dev_create(w, (enum soak_pol)p)))
				return r;
	}
	return 0;
}

static void teardown(void)
{
	if (S.w) {
		for (unsigned int i = 0; i < S.nthreads; i++) {
			for (unsigned int p = 0; p < S_NR; p++)
				dev_destroy(&S.w[i].d[p]);
			free(S.w[i].arena);
		}
		free(S.w);
	}
	if (S.dma)
		dg_dma_destroy(S.dma);
	if (S.ref_dma)
		dg_dma_destroy(S.ref_dma);
	if (S.mmu)
		dg_iommu_destroy(S.mmu);
	if (S.ref_mmu)
		dg_iommu_destroy(S.ref_mmu);
	memset(&S, 0, sizeof(S));
}

/* ---- sampling ------------------------------------------------------------------------------- */

static uint64_t rss_kib(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size, res = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
}

/* Stop the workers at the barrier, sample, let them go. */
static void sample(struct sample *s, double t_s)
{
	uint64_t gen = atomic_load_explicit(&S.pause_gen, memory_order_relaxed) + 1;

	atomic_store_explicit(&S.paused, 0, memory_order_relaxed);
	/* Release pairs with the workers' acquire load of pause_gen: paused is 0 first. */
	atomic_store_explicit(&S.pause_gen, gen, memory_order_release);
	/* Acquire pairs with the workers' release increment: they are all parked. */
	while (atomic_load_explicit(&S.paused, memory_order_acquire) < S.nthreads)
		usleep(100);
	memset(s, 0, sizeof(*s));
	s->t_s = t_s;
	s->rss_kib = rss_kib();
	for (unsigned int i = 0; i < S.nthreads; i++) {
		clockid_t cid;
		struct timespec ts;

		if (!pthread_getcpuclockid(S.w[i].thread, &cid) && !clock_gettime(cid, &ts))
			s->cpu_ns += (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	for (unsigned int i = 0; i < S.nthreads; i++) {
		for (unsigned int p = 0; p < S_NR; p++) {
			struct soak_dev *sd = &S.w[i].d[p];
			struct dg_domain *dom = dg_dma_dev_domain(sd->dd);
			struct dg_dma_stats st;

			s->ops[p] += atomic_load_explicit(&S.w[i].ops[p], memory_order_relaxed);
			if (dom)
				s->table_pages += dg_pt_table_pages(dg_domain_pt(dom));
			dg_dma_dev_stats(sd->dd, &st);
			s->live += st.live;
			s->iova_held += st.lazy_pending + st.quarantined;
			s->bounce_in_use += st.bounce_in_use;
			if (dg_dma_dev_check(sd->dd, stderr))
				atomic_fetch_add_explicit(&S.check_failures, 1,
							  memory_order_relaxed);
		}
	}
	/* Release pairs with the workers' acquire loads of resumed_gen: go on. */
	atomic_store_explicit(&S.resumed_gen, gen, memory_order_release);
}

/*
 * After the run: nothing may stay held. Lazy queues flush on their timeout and quarantine is
 * confirmed by housekeeping; then every device has no live mapping, no IOVA held and no
 * shadow byte in use. Waits up to 3 s for the flushes.
 */
static bool drain(void)
{
	uint64_t t0 = bench_now_ns();

	for (;;) {
		uint64_t held = 0;

		dg_dma_housekeep(S.dma);
		dg_dma_housekeep(S.ref_dma);
		for (unsigned int i = 0; i < S.nthreads; i++)
			for (unsigned int p = 0; p < S_NR; p++) {
				struct dg_dma_stats st;

				dg_dma_dev_stats(S.w[i].d[p].dd, &st);
				held += st.live + st.lazy_pending + st.quarantined +
					st.bounce_in_use;
			}
		if (!held)
			return true;
		if (bench_now_ns() - t0 > 3000000000ull)
			return false;
		usleep(5000);
	}
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dmaguard bench soak [--duration S] [--interval S] [--threads N] "
		"[--quick] [--json FILE] [--leak N]\n\n"
		"Mixed traffic through every policy for S seconds (default 120; --quick: 3),\n"
		"sampled every interval (default S/20): throughput per interval, RSS and the\n"
		"library's memory counters; reports the throughput trend and memory growth.\n\n");
	bench_usage_common(out);
}

static double slope(const double *y, size_t n)
{
	double sx = 0, sy = 0, sxx = 0, sxy = 0;

	for (size_t i = 0; i < n; i++) {
		sx += (double)i;
		sy += y[i];
		sxx += (double)i * (double)i;
		sxy += (double)i * y[i];
	}
	double d = (double)n * sxx - sx * sx;
	return d > 0 ? ((double)n * sxy - sx * sy) / d : 0;
}

static int bench_soak_main(int argc, char **argv)
{
	double duration = 120, interval = 0;
	bool duration_given = false;
	struct sample *smp = NULL, prev;
	struct bench_opts o;
	struct bench_report rep;
	unsigned int nthreads, n = 0;
	int rc = 0;

	for (int i = 1; i < argc; i++)
		duration_given |= !strcmp(argv[i], "--duration");
	if (bench_parse_common(&argc, argv, &o))
		return 2;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--leak") && i + 1 < argc) {
			opt_leak = (unsigned int)strtoul(argv[++i], NULL, 10);
			continue;
		}
		if (!strcmp(argv[i], "--interval") && i + 1 < argc) {
			char *end;

			interval = strtod(argv[++i], &end);
			if (*end || !(interval >= 0.01)) {
				fprintf(stderr, "bench soak: --interval wants seconds >= 0.01\n");
				return 2;
			}
			continue;
		}
		return bench_help_or_unknown("soak", argv[i], usage);
	}
	if (o.list) {
		printf("soak\n");
		return 0;
	}
	if (o.ops || (o.case_name && strcmp(o.case_name, "soak"))) {
		fprintf(stderr, "bench soak: one case ('soak'), timed only\n");
		return 2;
	}
	if (duration_given)
		duration = o.duration_s;
	else if (o.quick)
		duration = 3;
	if (!interval)
		interval = duration / 20 < 0.1 ? 0.1 : duration / 20;
	if (interval > duration)
		interval = duration;
	nthreads = o.threads ? o.threads : 2;
	if (nthreads > MAX_THREADS) {
		fprintf(stderr, "bench soak: --threads must be 1..%u\n", MAX_THREADS);
		return 2;
	}
	smp = calloc(MAX_INTERVALS + 1, sizeof(*smp));
	if (!smp)
		return 1;
	rc = setup(nthreads);
	if (rc) {
		fprintf(stderr, "bench soak: set-up failed: %s\n", strerror(-rc));
		teardown();
		free(smp);
		return 1;
	}
	printf("dmaguard bench soak: %.1f s, %u workers, every policy, sampled every %.2f s (%s)\n",
	       duration, nthreads, interval, bench_cpu_model());
	printf("%8s %10s %10s %9s %11s %6s %9s %9s\n", "t (s)", "Mreq/s", "Mreq/cpu-s", "RSS KiB",
	       "table pages", "live", "iova held", "bounce B");
	atomic_store_explicit(&S.stop, false, memory_order_relaxed); /* before the threads start */
	for (unsigned int i = 0; i < nthreads; i++)
		if (pthread_create(&S.w[i].thread, NULL, worker_main, &S.w[i])) {
			fprintf(stderr, "bench soak: cannot start worker %u\n", i);
			nthreads = i;
			rc = 1;
			break;
		}
	/*
	 * A fixed number of intervals, each one interval after the previous sample ended: a
	 * loaded machine stretches the run (a sample stops every worker at a barrier and checks
	 * every device) but never shortens the series the verdicts are computed from.
	 */
	unsigned int nint = (unsigned int)(duration / interval + 0.5);
	uint64_t t0 = bench_now_ns(), tprev = t0, tend = t0;

	if (nint < 1)
		nint = 1;
	if (nint > MAX_INTERVALS)
		nint = MAX_INTERVALS;
	sample(&prev, 0);
	struct sample start = prev; /* before any traffic */
	while (!rc && n < nint) {
		uint64_t next = tend + (uint64_t)(interval * 1e9), now;
		uint64_t ops = 0;

		while ((now = bench_now_ns()) < next)
			usleep((useconds_t)((next - now) / 1000 < 50000 ? (next - now) / 1000 + 1 :
									  50000));
		struct sample *s = &smp[n];
		sample(s, (now - t0) / 1e9);
		for (unsigned int p = 0; p < S_NR; p++) {
			uint64_t d = s->ops[p] - prev.ops[p];

			prev.ops[p] = s->ops[p];
			s->ops[p] = d;
			ops += d;
		}
		s->mops_per_s = ops / ((now - tprev) / 1e3);
		s->mops_per_cpu_s =
			s->cpu_ns > prev.cpu_ns ? ops / ((s->cpu_ns - prev.cpu_ns) / 1e3) : 0;
		prev.cpu_ns = s->cpu_ns;
		tprev = now;
		printf("%8.2f %10.3f %10.3f %9llu %11llu %6llu %9llu %9llu\n", s->t_s,
		       s->mops_per_s, s->mops_per_cpu_s, (unsigned long long)s->rss_kib,
		       (unsigned long long)s->table_pages, (unsigned long long)s->live,
		       (unsigned long long)s->iova_held, (unsigned long long)s->bounce_in_use);
		fflush(stdout);
		n++;
		tend = bench_now_ns();
	}
	/* Release pairs with the workers' acquire load of stop. */
	atomic_store_explicit(&S.stop, true, memory_order_release);
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_join(S.w[i].thread, NULL);

	/* Results. */
	uint64_t errors = 0, timeouts = 0, enospc = 0, rss_growth = 0, total[S_NR] = {0};
	double *y = calloc(n ? n : 1, sizeof(double)), *yw = calloc(n ? n : 1, sizeof(double));
	double mean = 0, mean_wall = 0, trend = 0, trend_wall = 0, q1 = 0, q4 = 0;
	size_t nq = n / 4 ? n / 4 : 1;

	for (unsigned int i = 0; i < nthreads; i++) {
		errors += atomic_load_explicit(&S.w[i].errors, memory_order_relaxed);
		timeouts += atomic_load_explicit(&S.w[i].timeouts, memory_order_relaxed);
		enospc += atomic_load_explicit(&S.w[i].enospc, memory_order_relaxed);
	}
	uint64_t all = 0, cum = 0, live_max = 0, held_max = 0, held_bound;
	unsigned int q[5] = {0}; /* sample where the cumulative work reaches k/4 */
	const struct sample *at[5];

	for (unsigned int i = 0; i < n; i++) {
		y[i] = smp[i].mops_per_cpu_s;
		yw[i] = smp[i].mops_per_s;
		mean += y[i] / n;
		mean_wall += yw[i] / n;
		for (unsigned int p = 0; p < S_NR; p++) {
			total[p] += smp[i].ops[p];
			all += smp[i].ops[p];
		}
		if (smp[i].live > live_max)
			live_max = smp[i].live;
		if (smp[i].iova_held > held_max)
			held_max = smp[i].iova_held;
	}
	/* Quarters of the work, not of the time (a loaded machine may do little at first). */
	for (unsigned int i = 0, k = 1; i < n && k <= 4; i++) {
		for (unsigned int p = 0; p < S_NR; p++)
			cum += smp[i].ops[p];
		while (k <= 4 && 4 * cum >= k * all)
			q[k++] = i;
	}
	at[0] = &start;
	for (unsigned int k = 1; k <= 4; k++)
		at[k] = n ? &smp[q[k]] : &start;
	for (unsigned int i = q[2] + 1; i < n; i++)
		if (smp[i].rss_kib > at[2]->rss_kib + rss_growth)
			rss_growth = smp[i].rss_kib - at[2]->rss_kib;
	for (size_t i = 0; i < nq && n; i++) {
		q1 += y[i] / nq;
		q4 += y[n - 1 - i] / nq;
	}
	/* The trend is taken on requests per CPU second of the workers: other processes on a
	   shared machine change the wall-clock rate far more than aging would. */
	if (n >= 2 && mean > 0)
		trend = slope(y, n) * (n - 1) / mean * 100;
	if (n >= 2 && mean_wall > 0)
		trend_wall = slope(yw, n) * (n - 1) / mean_wall * 100;
		/*
	 * Memory. Exact: no mapping may be live at a barrier (every burst unmaps all it
	 * mapped), and IOVAs held back may not exceed what the lazy flush queues can hold
	 * (256 per CPU and lazy device) plus what timed-out waits quarantined.
	 * Settling: RSS follows the allocators' caches and table pages the IOVA footprint;
	 * both grow while caches fill and then settle, a leak grows with the work. RSS grew
	 * when the second half of the work added more than half what the first half did
	 * (+2 MiB). Table pages grew when the last quarter of the work added more than 3/4 of
	 * what the second quarter did (+8 pages): a settling curve adds less and less, a leak
	 * the same per request. The lazy footprint is the running maximum of its pending IOVAs
	 * and settles only after millions of requests, so table pages are judged in runs of a
	 * minute or more and only reported in shorter ones (their exact check is
	 * dg_dma_dev_check()'s table count at every barrier, and the leak checkers of make
	 * test at exit).
	 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	const bool rss_judged = false; /* the sanitizer keeps freed memory in quarantine */
#else
	const bool rss_judged = true;
#endif
	held_bound = (uint64_t)nthreads * 256 * (uint64_t)sysconf(_SC_NPROCESSORS_CONF) + timeouts;
	uint64_t rss_first = at[2]->rss_kib > start.rss_kib ? at[2]->rss_kib - start.rss_kib : 0;
	uint64_t tp_q2 = at[2]->table_pages - at[1]->table_pages;
	uint64_t tp_q4 = at[4]->table_pages - at[3]->table_pages;
	uint64_t tp_growth = at[4]->table_pages - at[2]->table_pages;
	bool tp_judged = n && smp[n - 1].t_s >= 60;
	bool tp_grew = tp_judged && 4 * tp_q4 > 3 * tp_q2 + 32;
	bool down = trend < -10, grew = live_max || held_max > held_bound ||
					(rss_judged && rss_growth > rss_first / 2 + 2048) ||
					tp_grew;
	for (unsigned int i = 0; i < nthreads; i++) /* --leak: give them back now */
		while (S.w[i].nheld) {
			struct worker *w = &S.w[i];
			struct req *hq = &w->held[--w->nheld];
			int r = unmap_req(&w->d[w->held_pol[w->nheld]], hq, NULL);

			if (r && r != -ETIMEDOUT)
				fail(w, "unmap (held)", r);
		}
	bool drained = drain();
	uint64_t checks = atomic_load_explicit(&S.check_failures, memory_order_relaxed);

	printf("RESULT suite=soak case=soak duration_s=%.1f intervals=%u mops_per_cpu_s_mean=%.3f "
	       "trend_pct=%.1f downward_trend=%s rss_growth_kib=%llu table_pages_growth=%llu "
	       "live_max=%llu iova_held_max=%llu memory_grew=%s drained=%s errors=%llu "
	       "wait_timeouts=%llu check_failures=%llu\n",
	       n ? smp[n - 1].t_s : 0, n, mean, trend, down ? "yes" : "no",
	       (unsigned long long)rss_growth, (unsigned long long)tp_growth,
	       (unsigned long long)live_max, (unsigned long long)held_max, grew ? "yes" : "no",
	       drained ? "yes" : "no", (unsigned long long)errors, (unsigned long long)timeouts,
	       (unsigned long long)checks);
	if (!bench_report_init(&rep, "soak")) {
		json_t *r = json_object(), *iv = json_array(), *per = json_object();

		for (unsigned int i = 0; i < n; i++) {
			json_t *o2 = json_object(), *pp = json_object();

			for (unsigned int p = 0; p < S_NR; p++)
				json_object_set_new(pp, pol_names[p],
						    json_integer((json_int_t)smp[i].ops[p]));
			json_object_set_new(o2, "t_s", json_real(smp[i].t_s));
			json_object_set_new(o2, "mops_per_s", json_real(smp[i].mops_per_s));
			json_object_set_new(o2, "mops_per_cpu_s", json_real(smp[i].mops_per_cpu_s));
			json_object_set_new(o2, "requests", pp);
			json_object_set_new(o2, "rss_kib",
					    json_integer((json_int_t)smp[i].rss_kib));
			json_object_set_new(o2, "table_pages",
					    json_integer((json_int_t)smp[i].table_pages));
			json_object_set_new(o2, "live_mappings",
					    json_integer((json_int_t)smp[i].live));
			json_object_set_new(o2, "iova_held",
					    json_integer((json_int_t)smp[i].iova_held));
			json_object_set_new(o2, "bounce_in_use",
					    json_integer((json_int_t)smp[i].bounce_in_use));
			json_array_append_new(iv, o2);
		}
		for (unsigned int p = 0; p < S_NR; p++)
			json_object_set_new(per, pol_names[p], json_integer((json_int_t)total[p]));
		json_object_set_new(r, "case", json_string("soak"));
		json_object_set_new(r, "duration_s", json_real(n ? smp[n - 1].t_s : 0));
		json_object_set_new(r, "interval_s", json_real(interval));
		json_object_set_new(r, "threads", json_integer(nthreads));
		json_object_set_new(r, "requests", per);
		json_object_set_new(r, "intervals", iv);
		json_object_set_new(r, "mops_per_s_mean", json_real(mean_wall));
		json_object_set_new(r, "mops_per_cpu_s_mean", json_real(mean));
		json_object_set_new(r, "first_quarter_mops_per_cpu_s", json_real(q1));
		json_object_set_new(r, "last_quarter_mops_per_cpu_s", json_real(q4));
		json_object_set_new(r, "trend_wall_pct", json_real(trend_wall));
		json_object_set_new(r, "trend_pct", json_real(trend));
		json_object_set_new(r, "downward_trend", json_boolean(down));
		json_object_set_new(r, "rss_first_half_kib", json_integer((json_int_t)rss_first));
		json_object_set_new(r, "rss_growth_kib", json_integer((json_int_t)rss_growth));
		json_object_set_new(r, "rss_judged", json_boolean(rss_judged));
		json_object_set_new(r, "table_pages_start",
				    json_integer((json_int_t)start.table_pages));
		json_object_set_new(r, "table_pages_end",
				    json_integer((json_int_t)at[4]->table_pages));
		json_object_set_new(r, "table_pages_growth", json_integer((json_int_t)tp_growth));
		json_object_set_new(r, "table_pages_q2", json_integer((json_int_t)tp_q2));
		json_object_set_new(r, "table_pages_q4", json_integer((json_int_t)tp_q4));
		json_object_set_new(r, "table_pages_judged", json_boolean(tp_judged));
		json_object_set_new(r, "live_max", json_integer((json_int_t)live_max));
		json_object_set_new(r, "iova_held_max", json_integer((json_int_t)held_max));
		json_object_set_new(r, "iova_held_bound", json_integer((json_int_t)held_bound));
		json_object_set_new(r, "memory_grew", json_boolean(grew));
		json_object_set_new(r, "drained", json_boolean(drained));
		json_object_set_new(r, "errors", json_integer((json_int_t)errors));
		json_object_set_new(r, "wait_timeouts", json_integer((json_int_t)timeouts));
		json_object_set_new(r, "back_pressure", json_integer((json_int_t)enospc));
		json_object_set_new(r, "check_failures", json_integer((json_int_t)checks));
		bench_report_add(&rep, r);
		if (bench_report_write(&rep, o.json_path))
			rc = 1;
		bench_report_fini(&rep);
	}
	free(y);
	free(yw);
	free(smp);
	teardown();
	return rc || errors || checks || !drained ? 1 : 0;
}

DG_BENCH_SUITE(soak, "soak", "aging: mixed traffic through every policy, trend and memory growth",
	       bench_soak_main)
