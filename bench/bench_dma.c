/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_dma.c - "dmaguard bench dma": what a map + unmap costs under each policy.
 *
 * Configurations, measured in the same run, each on its own IOMMU and device:
 *   identity      pass-through: the baseline every ratio divides by
 *   strict        dmaguard strict (magazine IOVAs, one RANGE invalidation per unmap/batch)
 *   strict-2step  strict through the two-step API: one IOVA range reserved per thread, buffers
 *                 linked into fixed slots and unlinked (the ring path: no IOVA allocator)
 *   lazy          per-CPU flush queues (256 entries, 10 ms)
 *   window        a 64 GiB DDW window of 64K pages whose direct region holds the buffers
 *   window-4k     the small default window (4K pages, everything mapped on demand)
 *   bounce        shadow slots and copies (to-device: copy in at map)
 *   pool          the buffers live in a pool mapped once (page_pool)
 *   linux-ref     the Linux-like reference: Linux's IOVA allocator without caches, an IOMMU
 *                 whose queue has one lock, one synchronous invalidation per unmapped page
 * Sizes: 64, 1500, 4096 and 65536 bytes (one buffer, DG_DMA_TO_DEVICE), and sg16: a list of
 * 16 segments of 4 KiB (a 64 KiB TSO send). Modes: single (every unmap waits for its own
 * invalidation), batched (unmaps in batches of 32, one wait each, the NAPI pattern) and bulk
 * (the 32 maps in one dg_dma_map_bulk() / dg_dma_iova_link_bulk() call, the 32 unmaps in one
 * dg_dma_unmap_bulk() / dg_dma_iova_unlink_bulk() into a batch: a ring's refill and reap;
 * identity, strict, strict-2step and lazy, single buffers) and poll4/poll16/poll64 (identity
 * and strict, 64 B: a NAPI poll of n = 4, 16, 64 buffers - batch_begin, unmap_bulk of n
 * adjacent stream buffers, batch_submit, map_bulk of n others, batch_end of the previous
 * poll's batch; callgrind's instr/op = a / n + b gives the per-poll part a, docs/dma-api.md).
 * Threads: 1 and 2, each mapping its own buffers on the same device, pinned to its own CPU.
 *
 * An operation is one map plus one unmap (in batched mode the batch's end is included,
 * shared by its 32 unmaps). Each thread keeps 32 buffers: map all, unmap all, repeat.
 * ns_per_op is the wall time of a round divided by the operations each thread did (the cost
 * each thread sees), median of --rounds rounds; vs_identity divides it by identity's for the
 * same size, mode and threads (the overhead factor), and linux_ref_over divides the
 * reference's by it (how much faster than stock Linux strict; bulk cases by the reference's
 * batched case, as the reference has no bulk calls).
 *
 * The device is idle by default (offline: invalidation waits complete at once, so the
 * figures are the CPU cost of the policy). --device adds a device thread that keeps doing DMA
 * on a coherent buffer, so every wait really waits for it to acknowledge.
 *
 * Fixed-count mode (--case NAME --ops N): set-up and one warm-up round, then exactly N
 * operations per thread (rounded up to a multiple of 32) with no clock reads, so callgrind
 * instruction counts of an N and a 2N run differ by N operations.
 */
#include "bench.h"
#include "lockstep.h"

#include <dmaguard/dma.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUF	32 /* buffers per thread = batch size */
#define MAX_THR 2
#define SGN	16
#define BUFSZ	65536u
#define STRIDE	(BUFSZ + 4096u) /* a buffer starts 64 bytes in: room for the largest */
/* Two-step slots are contiguous, as a ring's: a buffer at offset 64 rounded up to pages. */
#define SLOT2(len) ((((len) + 64 + 4095) / 4096) * 4096)

enum cfg {
	C_IDENTITY,
	C_STRICT,
	C_STRICT2,
	C_LAZY,
	C_WINDOW,
	C_WINDOW4K,
	C_BOUNCE,
	C_POOL,
	C_LINUX,
	NCFG
};
static const char *const cfg_name[NCFG] = {"identity", "strict", "strict-2step",
					   "lazy",     "window", "window-4k",
					   "bounce",   "pool",	 "linux-ref"};

enum size { S64, S1500, S4K, S64K, SSG, NSIZE };
enum { MODE_SINGLE, MODE_BATCH, MODE_BULK, MODE_POLL4, MODE_POLL16, MODE_POLL64, NMODE };
static const char *const mode_name[NMODE] = {"single", "batch",	 "bulk",
					     "poll4",  "poll16", "poll64"};
/* buffers a poll mode's poll reaps and refills (0: not a poll mode) */
static const unsigned int poll_n[NMODE] = {0, 0, 0, 4, 16, 64};
#define POLL_MAX  64
#define POLL_STEP 2048 /* a poll mode's buffers: 2 x POLL_MAX of 2 KiB, as an rx ring's */
static const char *const size_name[NSIZE] = {"64", "1500", "4096", "65536", "sg16"};
static const size_t size_bytes[NSIZE] = {64, 1500, 4096, 65536, SGN * 4096};

struct env {
	struct dg_iommu *mmu;
	struct dg_dma *dma;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	struct dg_dma_pool *pool;
	uint8_t *arena; /* MAX_THR x NBUF buffers of STRIDE (window: the direct region) */
	enum cfg cfg;
	/* the device thread (--device) */
	pthread_t dev_thr;
	_Atomic bool dev_stop;
	bool dev_running;
	uint8_t *coh;
	uint64_t coh_dma;
};

struct thr {
	struct env *e;
	unsigned int id;
	enum size size;
	int mode; /* MODE_* */
	uint8_t *buf[NBUF];
	uint64_t dma[NBUF];
	struct dg_dma_sg sg[NBUF][SGN];
	struct dg_dma_iova_state st;
	/* poll modes: two sets of buffers, the one mapped (dma_p[cur]) and the one in the
	   pending batch (bt[cur ^ 1] while pend) */
	uint64_t dma_p[2][POLL_MAX];
	struct dg_dma_batch bt[2];
	unsigned int cur;
	bool pend;
	int err;
};

struct result {
	char name[64];
	enum cfg cfg;
	enum size size;
	int mode;
	unsigned int threads;
	struct bench_summary ns;
	double vs_identity;
	double linux_over;
	double waits_per_op;
	uint64_t ops;
};

static struct result *results;
static size_t nresults, capresults;
static bool with_device;

static void die(const char *what, int err)
{
	fprintf(stderr, "bench dma: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

/* ---- the environment of one configuration ------------------------------------------------------ */

static void *device_main(void *arg)
{
	struct env *e = arg;
	uint8_t tmp[64];

	bench_pin_cpu(bench_ncpus() - 1); /* the last CPU: apart from worker 0 */
	while (!atomic_load_explicit(&e->dev_stop, memory_order_relaxed))
		dg_dev_read(e->dev, e->coh_dma, tmp, sizeof(tmp));
	dg_dev_offline(e->dev);
	return NULL;
}

static void env_init(struct env *e, enum cfg c)
{
	struct dg_iommu_config ic;
	struct dg_dma_dev_config dc;
	size_t arena = (size_t)MAX_THR * NBUF * STRIDE;

	memset(e, 0, sizeof(*e));
	e->cfg = c;
	dg_iommu_config_init(&ic);
	ic.reference = c == C_LINUX;
	e->mmu = dg_iommu_create(&ic);
	if (!e->mmu)
		die("iommu", errno);
	e->dma = dg_dma_create(e->mmu, NULL);
	if (!e->dma)
		die("dma", errno);
	e->dev = dg_device_create(e->mmu, 1);
	if (!e->dev)
		die("device", errno);
	e->arena = aligned_alloc(1 << 21, (arena + (1 << 21) - 1) & ~(size_t)((1 << 21) - 1));
	if (!e->arena)
		die("arena", ENOMEM);
	memset(e->arena, 0x5a, arena);
	dg_dma_dev_config_init(&dc);
	switch (c) {
	case C_IDENTITY:
		dc.policy = DG_DMA_IDENTITY;
		break;
	case C_STRICT:
	case C_STRICT2:
		dc.policy = DG_DMA_STRICT;
		break;
	case C_LAZY:
		dc.policy = DG_DMA_LAZY;
		break;
	case C_WINDOW:
		dc.policy = DG_DMA_WINDOW;
		dc.window.base = 1ull << 40;
		dc.window.size = 64ull << 30;
		dc.window.page_size = 65536;
		dc.window.direct = e->arena;
		dc.window.direct_size = arena;
		break;
	case C_WINDOW4K:
		dc.policy = DG_DMA_WINDOW;
		break;
	case C_BOUNCE:
		dc.policy = DG_DMA_BOUNCE;
		/* Areas are per CPU, and a thread's CPU is read again only every 256 calls
		   (dma_cpu()): the caller's thread, re-pinned to CPU 0 by the lockstep start,
		   keeps using its old CPU's area for a while beside the worker pinned there.
		   4 MiB holds both threads' 32 x 64 KiB; 2 MiB failed --ops runs with ENOSPC. */
		dc.bounce.area_size = 4u << 20;
		break;
	case C_POOL:
		dc.policy = DG_DMA_POOL;
		break;
	case C_LINUX:
		dc.policy = DG_DMA_STRICT;
		dc.flags = DG_DMA_DEV_LINUX_REFERENCE;
		break;
	default:
		break;
	}
	e->dd = dg_dma_dev_create(e->dma, e->dev, &dc);
	if (!e->dd)
		die("dma device", errno);
	if (c == C_POOL) {
		/* the pool is the arena's role: buffers come from it */
		e->pool = dg_dma_pool_create(e->dd, STRIDE, MAX_THR * NBUF, DG_DMA_BIDIRECTIONAL,
					     DG_DMA_POOL_HUGE);
		if (!e->pool)
			die("pool", errno);
	}
	if (with_device) {
		e->coh = dg_dma_alloc_coherent(e->dd, 4096, &e->coh_dma);
		if (!e->coh)
			die("coherent", errno);
		atomic_store(&e->dev_stop, false);
		pthread_create(&e->dev_thr, NULL, device_main, e);
		e->dev_running = true;
	}
}

static void env_fini(struct env *e)
{
	if (e->dev_running) {
		atomic_store(&e->dev_stop, true);
		pthread_join(e->dev_thr, NULL);
		dg_dma_free_coherent(e->dd, e->coh, 4096, e->coh_dma);
	}
	if (e->pool && dg_dma_pool_destroy(e->pool))
		die("pool destroy", EBUSY);
	if (dg_dma_dev_check(e->dd, stderr))
		die("dg_dma_dev_check", EUCLEAN);
	if (dg_dma_dev_destroy(e->dd))
		die("dma device destroy", EBUSY);
	dg_device_destroy(e->dev);
	dg_dma_destroy(e->dma);
	dg_iommu_destroy(e->mmu);
	free(e->arena);
}

/* ---- one thread's work ----------------------------------------------------------------------- */

/* Buffer @i of a poll mode's set @set: 2 KiB apart, inside the thread's part of the arena. */
static void *poll_buf(struct thr *t, unsigned int set, unsigned int i)
{
	return t->e->arena + (size_t)t->id * NBUF * STRIDE + (set * POLL_MAX + i) * POLL_STEP;
}

static void thr_setup(struct thr *t)
{
	struct env *e = t->e;

	for (unsigned int i = 0; i < NBUF; i++) {
		if (e->pool) {
			void *b;
			uint64_t d;

			if (dg_dma_pool_get(e->pool, &b, &d))
				die("pool get", ENOSPC);
			t->buf[i] = b;
		} else {
			t->buf[i] = e->arena + ((size_t)t->id * NBUF + i) * STRIDE;
		}
		/* buffers start at a cache-line offset in their page, like skb data */
		for (unsigned int k = 0; k < SGN; k++)
			t->sg[i][k] = (struct dg_dma_sg){.addr = t->buf[i] + k * 4096, .len = 4096};
	}
	if (e->cfg == C_STRICT2 && dg_dma_iova_alloc(e->dd, (uint64_t)NBUF * SLOT2(BUFSZ), &t->st))
		die("iova alloc", ENOSPC);
	if (poll_n[t->mode]) {
		void *bufs[POLL_MAX];
		unsigned int n = poll_n[t->mode];

		for (unsigned int i = 0; i < n; i++)
			bufs[i] = poll_buf(t, 0, i);
		if (dg_dma_map_bulk(e->dd, bufs, n, size_bytes[t->size], DG_DMA_FROM_DEVICE, 0,
				    t->dma_p[0]))
			die("poll map", ENOSPC);
		t->cur = 0;
		t->pend = false;
	}
}

static void thr_teardown(struct thr *t)
{
	if (poll_n[t->mode]) {
		if (t->pend && dg_dma_batch_end(&t->bt[t->cur ^ 1]))
			die("poll batch end", EIO);
		t->pend = false;
		if (dg_dma_unmap_bulk(t->e->dd, t->dma_p[t->cur], poll_n[t->mode],
				      size_bytes[t->size], DG_DMA_FROM_DEVICE, 0, NULL))
			die("poll unmap", EINVAL);
	}
	if (t->e->cfg == C_STRICT2 && dg_dma_iova_free(&t->st))
		die("iova free", EBUSY);
	if (t->e->pool)
		for (unsigned int i = 0; i < NBUF; i++)
			dg_dma_pool_put(t->e->pool, t->buf[i]);
}

/* One round: map NBUF buffers, unmap them. */
/* Unmap buffer @i of a round mapped by the single calls (@bp: the round's batch or NULL). */
static int unmap_one(struct thr *t, unsigned int i, size_t len, struct dg_dma_batch *bp)
{
	struct dg_dma_dev *dd = t->e->dd;

	if (t->size == SSG)
		return dg_dma_unmap_sg(dd, t->sg[i], SGN, DG_DMA_TO_DEVICE, 0, bp);
	if (t->e->cfg == C_STRICT2)
		return dg_dma_iova_unlink(&t->st, (uint64_t)i * SLOT2(len), len, DG_DMA_TO_DEVICE,
					  bp);
	return dg_dma_unmap_single(dd, t->dma[i], len, DG_DMA_TO_DEVICE, 0, bp);
}

/*
 * One poll of a NAPI driver (bench/workloads/wl_nic.c's order): unmap the n buffers the device
 * filled (one bulk unmap of adjacent IOVAs into this poll's batch), submit the batch, refill
 * the ring with the other n buffers (one bulk map), end the previous poll's batch. Every call
 * has n buffers: instr/op = a / n + b separates the per-poll part a from the per-buffer b.
 */
static void poll_once(struct thr *t)
{
	struct dg_dma_dev *dd = t->e->dd;
	const unsigned int n = poll_n[t->mode], c = t->cur;
	const size_t len = size_bytes[t->size];
	struct dg_dma_batch *b = &t->bt[c];
	void *bufs[POLL_MAX];
	int r;

	dg_dma_batch_begin(dd, b);
	r = dg_dma_unmap_bulk(dd, t->dma_p[c], n, len, DG_DMA_FROM_DEVICE, 0, b);
	if (!r)
		r = dg_dma_batch_submit(b);
	for (unsigned int i = 0; i < n; i++)
		bufs[i] = poll_buf(t, c ^ 1, i);
	if (!r)
		r = dg_dma_map_bulk(dd, bufs, n, len, DG_DMA_FROM_DEVICE, 0, t->dma_p[c ^ 1]);
	if (t->pend) {
		int re = dg_dma_batch_end(&t->bt[c ^ 1]);

		r = r ? r : re;
	}
	t->pend = true;
	t->cur = c ^ 1;
	if (r && !t->err)
		t->err = r;
}

/* Operations (map + unmap) of one round. */
static unsigned int round_ops(int mode)
{
	return poll_n[mode] ? poll_n[mode] : NBUF;
}

static void round_once(struct thr *t)
{
	struct dg_dma_dev *dd = t->e->dd;
	size_t len = size_bytes[t->size];
	struct dg_dma_batch b;
	unsigned int nr, i;
	int r = 0;

	if (poll_n[t->mode]) {
		poll_once(t);
		return;
	}
	if (t->mode == MODE_BULK) {
		void *bufs[NBUF];

		for (i = 0; i < NBUF; i++)
			bufs[i] = t->buf[i] + 64;
		if (t->e->cfg == C_STRICT2)
			r = dg_dma_iova_link_bulk(&t->st, 0, SLOT2(len), bufs, NBUF, len,
						  DG_DMA_TO_DEVICE, t->dma);
		else
			r = dg_dma_map_bulk(dd, bufs, NBUF, len, DG_DMA_TO_DEVICE, 0, t->dma);
		if (r)
			goto fail;
		dg_dma_batch_begin(dd, &b);
		if (t->e->cfg == C_STRICT2)
			r = dg_dma_iova_unlink_bulk(&t->st, 0, SLOT2(len), NBUF, len,
						    DG_DMA_TO_DEVICE, &b);
		else
			r = dg_dma_unmap_bulk(dd, t->dma, NBUF, len, DG_DMA_TO_DEVICE, 0, &b);
		if (r) {
			dg_dma_batch_end(&b);
			goto fail;
		}
		if ((r = dg_dma_batch_end(&b)))
			goto fail;
		return;
	}
	for (i = 0; i < NBUF; i++) {
		if (t->size == SSG)
			r = dg_dma_map_sg(dd, t->sg[i], SGN, DG_DMA_TO_DEVICE, 0, &nr);
		else if (t->e->cfg == C_STRICT2)
			r = dg_dma_iova_link(&t->st, (uint64_t)i * SLOT2(len), t->buf[i] + 64, len,
					     DG_DMA_TO_DEVICE, &t->dma[i]);
		else
			r = dg_dma_map_single(dd, t->buf[i] + 64, len, DG_DMA_TO_DEVICE, 0,
					      &t->dma[i]);
		if (r)
			goto undo;
	}
	if (t->mode == MODE_BATCH)
		dg_dma_batch_begin(dd, &b);
	for (i = 0; i < NBUF; i++) {
		r = unmap_one(t, i, len, t->mode == MODE_BATCH ? &b : NULL);
		if (r)
			break;
	}
	/* a batch is ended even when an unmap failed (the ones before it are in it) */
	if (t->mode == MODE_BATCH) {
		int re = dg_dma_batch_end(&b);

		r = r ? r : re;
	}
	if (r)
		goto fail;
	return;
undo:
	/* a failed map: the buffers mapped before it are unmapped, so a failure does not pile
	 * up mappings round after round */
	while (i--)
		unmap_one(t, i, len, NULL);
fail:
	if (!t->err)
		t->err = r;
}

/* bench_lockstep callbacks: a thread's state is its struct thr. */
static void run_rounds(void *arg, uint64_t n)
{
	struct thr *t = arg;

	for (uint64_t k = 0; k < n; k++)
		round_once(t);
}

static void thr_enter(void *arg)
{
	thr_setup(arg);
}

static void thr_leave(void *arg)
{
	thr_teardown(arg);
}

static void case_name(char *buf, size_t n, enum cfg c, enum size s, int mode, unsigned int thr)
{
	snprintf(buf, n, "%s/%s/%s/t%u", cfg_name[c], size_name[s], mode_name[mode], thr);
}

static bool case_applies(enum cfg c, enum size s, int mode)
{
	if (poll_n[mode]) /* a poll's bulk calls: strict against identity, 64-byte buffers */
		return s == S64 && (c == C_IDENTITY || c == C_STRICT);
	if (mode == MODE_BULK) /* the policies with bulk calls, single buffers */
		return s != SSG &&
		       (c == C_IDENTITY || c == C_STRICT || c == C_STRICT2 || c == C_LAZY);
	return !(c == C_STRICT2 && s == SSG); /* a link is one buffer */
}

static void measure(const struct bench_opts *o, struct env *e, enum size s, int mode,
		    unsigned int nthr, const char *name)
{
	struct thr t[MAX_THR];
	struct bench_lockstep ls;
	struct dg_dma_stats a, z;
	struct result r = {.cfg = e->cfg, .size = s, .mode = mode, .threads = nthr};

	memset(t, 0, sizeof(t));
	for (unsigned int i = 0; i < nthr; i++)
		t[i] = (struct thr){.e = e, .id = i, .size = s, .mode = mode};
	bench_lockstep_start(&ls, nthr, t, sizeof(t[0]), run_rounds, thr_enter, thr_leave);
	thr_setup(&t[0]);
	snprintf(r.name, sizeof(r.name), "%s", name);
	bench_lockstep_round(&ls, 2); /* warm-up */
	dg_dma_dev_stats(e->dd, &a);
	if (o->ops) {
		uint64_t n = (o->ops + round_ops(mode) - 1) / round_ops(mode);

		bench_lockstep_round(&ls, n);
		r.ops = n * round_ops(mode);
	} else {
		double budget_ns = o->duration_s * 1e9 / (o->quick ? 2.0 : 4.0) / o->rounds;
		double samples[1000];
		uint64_t per = bench_lockstep_calibrate(&ls, budget_ns, 1, 1ull << 24), ns;

		dg_dma_dev_stats(e->dd, &a);
		for (unsigned int i = 0; i < o->rounds && i < 1000; i++) {
			ns = bench_lockstep_round(&ls, per);
			samples[i] = (double)ns / (double)(per * round_ops(mode));
			r.ops += per * round_ops(mode);
		}
		bench_summarize(samples, o->rounds < 1000 ? o->rounds : 1000, &r.ns);
	}
	dg_dma_dev_stats(e->dd, &z);
	r.waits_per_op = (double)(z.inval_waits - a.inval_waits) / (double)(r.ops * nthr);
	bench_lockstep_stop(&ls);
	thr_teardown(&t[0]);
	for (unsigned int i = 0; i < nthr; i++)
		if (t[i].err)
			die(name, t[i].err);
	if (o->ops) {
		printf("case %s: %llu ops per thread done (fixed count), %.3f waits/op\n", name,
		       (unsigned long long)r.ops, r.waits_per_op);
		return;
	}
	printf("  %-32s %9.1f ns/op  +-%4.0f%%  %6.3f waits/op\n", name, r.ns.median,
	       100 * r.ns.spread, r.waits_per_op);
	fflush(stdout);
	if (nresults == capresults) {
		capresults = capresults ? 2 * capresults : 128;
		results = realloc(results, capresults * sizeof(*results));
		if (!results)
			die("realloc", ENOMEM);
	}
	results[nresults++] = r;
}

static json_t *result_json(const struct result *r)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:s, s:i, s:b, s:I, s:f}", "case", r->name,
			      "policy", cfg_name[r->cfg], "size", size_name[r->size], "bytes",
			      (json_int_t)size_bytes[r->size], "mode", mode_name[r->mode],
			      "threads", (int)r->threads, "device_thread", with_device, "ops",
			      (json_int_t)r->ops, "waits_per_op", r->waits_per_op);

	json_object_set_new(j, "ns_per_op",
			    json_pack("{s:f, s:f, s:f, s:f, s:i}", "median", r->ns.median, "min",
				      r->ns.min, "max", r->ns.max, "spread", r->ns.spread, "rounds",
				      (int)r->ns.n));
	json_object_set_new(j, "vs_identity",
			    r->vs_identity > 0 ? json_real(r->vs_identity) : json_null());
	json_object_set_new(j, "linux_ref_over",
			    r->linux_over > 0 ? json_real(r->linux_over) : json_null());
	return j;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: dmaguard bench dma [--device] [--policy NAME[,NAME...]] [OPTIONS]\n"
		     "  --device        a device thread keeps doing DMA (waits really wait)\n"
		     "  --policy LIST   only these configurations (identity is always kept)\n\n");
	bench_usage_common(out);
}

static int parse_policies(const char *arg, bool *want)
{
	char *copy = strdup(arg), *save = NULL;
	int r = 0;

	for (int c = 0; c < NCFG; c++)
		want[c] = c == C_IDENTITY;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int c;

		for (c = 0; c < NCFG && strcmp(tok, cfg_name[c]); c++)
			;
		if (c == NCFG) {
			fprintf(stderr, "bench dma: unknown configuration '%s'\n", tok);
			r = -EINVAL;
			break;
		}
		want[c] = true;
	}
	free(copy);
	return r;
}

static int bench_dma_main(int argc, char **argv)
{
	struct bench_opts o;
	bool want_cfg[NCFG];
	unsigned int thr_list[2] = {1, 2}, nthr_list = 2;
	struct bench_report rep;
	char name[64];
	bool any = false;

	if (bench_parse_common(&argc, argv, &o))
		return 2;
	for (int c = 0; c < NCFG; c++)
		want_cfg[c] = true;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--device")) {
			with_device = true;
			continue;
		}
		if (!strcmp(argv[i], "--policy") && i + 1 < argc) {
			if (parse_policies(argv[++i], want_cfg))
				return 2;
			continue;
		}
		return bench_help_or_unknown("dma", argv[i], usage);
	}
	if (o.threads) {
		if (o.threads > MAX_THR) {
			fprintf(stderr, "bench dma: --threads must be 1..%u\n", MAX_THR);
			return 2;
		}
		thr_list[0] = o.threads;
		nthr_list = 1;
	} else if (o.quick) {
		nthr_list = 1;
	}
	if (o.list) {
		for (int c = 0; c < NCFG; c++)
			for (int s = 0; s < NSIZE; s++)
				for (int b = 0; b < NMODE; b++)
					for (unsigned int k = 0; k < 2; k++)
						if (case_applies(c, s, b)) {
							case_name(name, sizeof(name), c, s, b,
								  k + 1);
							printf("%s\n", name);
						}
		return 0;
	}
	if (!o.ops)
		printf("dmaguard bench dma: map+unmap per operation, %s%s\n", bench_cpu_model(),
		       with_device ? ", device thread running" : ", device idle");
	for (int c = 0; c < NCFG; c++) {
		bool need = false;
		struct env e;

		for (int s = 0; s < NSIZE; s++)
			for (int b = 0; b < NMODE; b++)
				for (unsigned int k = 0; k < nthr_list; k++) {
					case_name(name, sizeof(name), c, s, b, thr_list[k]);
					need |= want_cfg[c] && case_applies(c, s, b) &&
						bench_case_selected(&o, name);
				}
		if (!need)
			continue;
		env_init(&e, (enum cfg)c);
		for (int s = 0; s < NSIZE; s++)
			for (int b = 0; b < NMODE; b++)
				for (unsigned int k = 0; k < nthr_list; k++) {
					case_name(name, sizeof(name), c, s, b, thr_list[k]);
					if (!case_applies(c, s, b) ||
					    !bench_case_selected(&o, name))
						continue;
					if (o.quick &&
					    (s == S1500 || (s == S64K && b != MODE_BATCH) ||
					     (b == MODE_BULK && s != S64) || poll_n[b]))
						continue;
					any = true;
					measure(&o, &e, (enum size)s, b, thr_list[k], name);
				}
		env_fini(&e);
	}
	if (!any) {
		fprintf(stderr, "bench dma: no case named '%s' (see --list)\n",
			o.case_name ? o.case_name : "");
		return 2;
	}
	if (o.ops)
		return 0;

	for (size_t i = 0; i < nresults; i++) {
		struct result *r = &results[i];

		for (size_t j = 0; j < nresults; j++) {
			const struct result *q = &results[j];
			/* the reference has no bulk calls: bulk is compared with its batches */
			const int qmode = r->mode == MODE_BULK && q->cfg == C_LINUX ? MODE_BATCH :
										      r->mode;

			if (q->size != r->size || q->mode != qmode || q->threads != r->threads)
				continue;
			if (q->cfg == C_IDENTITY && q->ns.median > 0)
				r->vs_identity = r->ns.median / q->ns.median;
			if (q->cfg == C_LINUX && r->cfg != C_LINUX && r->ns.median > 0)
				r->linux_over = q->ns.median / r->ns.median;
		}
	}
	printf("\n  %-32s %9s %10s %10s %9s\n", "case", "ns/op", "x identity", "linux-ref/",
	       "waits/op");
	for (size_t i = 0; i < nresults; i++) {
		const struct result *r = &results[i];
		char lin[32] = "-";

		if (r->linux_over > 0)
			snprintf(lin, sizeof(lin), "%.1fx", r->linux_over);
		printf("  %-32s %9.1f %10.2f %10s %9.3f\n", r->name, r->ns.median, r->vs_identity,
		       lin, r->waits_per_op);
		printf("RESULT suite=dma case=%s ns_per_op=%.1f vs_identity=%.3f linux_ref_over=%.3f "
		       "waits_per_op=%.4f threads=%u\n",
		       r->name, r->ns.median, r->vs_identity, r->linux_over, r->waits_per_op,
		       r->threads);
	}
	if (bench_report_init(&rep, "dma"))
		return 1;
	for (size_t i = 0; i < nresults; i++)
		bench_report_add(&rep, result_json(&results[i]));
	int rc = bench_report_close(&rep, o.json_path);
	free(results);
	results = NULL;
	nresults = capresults = 0;
	return rc;
}

DG_BENCH_SUITE(dma, "dma", "DMA API: map+unmap per policy and size, single and batched",
	       bench_dma_main)
