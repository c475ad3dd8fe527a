/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl.h - the seed workloads of DESIGN.md section 1 as emulated devices driving
 * the real library ("dmaguard bench", suite "workloads").
 *
 * A run is one workload under one configuration (a DMA policy, the Linux-like reference, or
 * identity) for a fixed time. It has its own IOMMU, DMA layer and devices ("ports"), built
 * fresh by wl_run_setup() and checked and destroyed by wl_run_teardown():
 *
 *   driver thread(s)                               device thread(s)
 *   ---------------------------------------       -------------------------------------
 *   poll: reap completions from the rings    <--  status words (release stores through
 *         (acquire loads of status words)          translated ring pointers)
 *         sync + unmap them in one batch           translate ring + payload (sampled
 *         real work: read headers, verify          timing), copy the payload into or out
 *         map new buffers (sampled timing)         of the translated segments
 *         write descriptors, ring doorbell   -->  acquire load of the doorbell "register"
 *                                                  dg_dev_quiesce() after every burst
 *
 * Everything that differs between configurations is inside the library: the driver and
 * device code paths are the same, identity just runs them through a pass-through context.
 * The only per-configuration choice outside the library is where buffers come from: the pool
 * policy's driver takes them from dg_dma_pool (page_pool style), every other configuration
 * from a plain arena (which the window policy's direct region covers).
 *
 * Threads: driver thread i and device thread i form a pair (pinned to CPUs 2i and 2i+1 of
 * the process's CPU set). A port (one struct dg_device with its DMA state and queues) belongs
 * to one driver thread and one device thread, so every ring has a single producer and a
 * single consumer on each side, and each device is used by one thread (dev.h's contract).
 *
 * Counters: each thread has a block of relaxed single-writer counters (load + store, no
 * read-modify-write) that the main thread samples at the start and end of the measured
 * interval. Time spent in the DMA API (driver) and in translation (device) is measured on
 * one poll or burst in WL_SAMPLE_EVERY, with two clock reads around each phase, never per
 * operation (STYLE.md rule 12).
 */
#ifndef DG_BENCH_WL_H
#define DG_BENCH_WL_H

#include "bench.h"

#include <dmaguard/dev.h>
#include <dmaguard/dma.h>
#include <dmaguard/iommu.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- configurations ------------------------------------------------------------------------ */

enum wl_cfg {
	WL_IDENTITY, /* pass-through: the baseline every ratio divides by */
	WL_STRICT,
	WL_LAZY,
	WL_WINDOW, /* DDW: a 64 GiB window of 64K pages whose direct region holds the buffers */
	WL_BOUNCE,
	WL_POOL,
	WL_LINUX, /* strict as stock Linux did it (DG_DMA_DEV_LINUX_REFERENCE + reference IOMMU) */
	/* The two-step drivers (wl_slots.c): buffers linked into per-ring IOVA slots. */
	WL_IDENTITY_2STEP, /* pass-through: the baseline of the two-step configurations */
	WL_STRICT_2STEP,   /* strict through dg_dma_iova_link/unlink (rIOMMU, F&S) */
	WL_NCFG
};
extern const char *const wl_cfg_name[WL_NCFG];

/* The drivers link buffers into ring slots (two-step API) instead of mapping them. */
static inline bool wl_cfg_two_step(enum wl_cfg c)
{
	return c == WL_IDENTITY_2STEP || c == WL_STRICT_2STEP;
}

/* The configuration a ratio divides by: identity through the same drivers. */
static inline enum wl_cfg wl_cfg_baseline(enum wl_cfg c)
{
	return wl_cfg_two_step(c) ? WL_IDENTITY_2STEP : WL_IDENTITY;
}

static inline bool wl_cfg_is_baseline(enum wl_cfg c)
{
	return wl_cfg_baseline(c) == c;
}

#define WL_MAX_THREADS	16 /* driver threads (as many device threads) */
#define WL_MAX_PORTS	16
#define WL_MAX_CLASSES	2
#define WL_SAMPLE_EVERY 8	    /* one poll/burst in this many is timed */
#define WL_MEDIA_BLOCKS 16384u	    /* nvme4k media: 64 MiB of 4 KiB blocks */
#define WL_MAGIC	0x646d6167u /* "dmag": first word of every generated frame/block */
#define WL_FILL		0xa5u /* every byte of every buffer at set-up (wl_env.c, port_buffers()) */
#define WL_DEFAULT_QD	32u
#define WL_MAX_QD	1024u

/* ---- buffers ------------------------------------------------------------------------------- */

/* A class of driver buffers of one size (per port). */
struct wl_class {
	size_t size;	/* bytes; buffers are aligned to min(size, 4096) (64 at least) */
	uint32_t count; /* buffers of the port */
	bool shuffle;	/* hand them out in a scrambled order (pages of a TSO send are not
			   contiguous in host memory) */
};

/* A LIFO of free buffers, used by the port's driver thread only. */
struct wl_stack {
	void **v;
	uint32_t n, cap;
};

static inline void *wl_stack_pop(struct wl_stack *s)
{
	return s->n ? s->v[--s->n] : NULL;
}

static inline void wl_stack_push(struct wl_stack *s, void *buf)
{
	s->v[s->n++] = buf; /* cannot overflow: cap is the class's count */
}

/* ---- ring slots: the two-step drivers (wl_slots.c) ------------------------------------------ */

/*
 * One IOVA range reserved per ring (dg_dma_iova_alloc), cut into @nslots slots of @slot_bytes,
 * handed out in order: a ring's buffers are linked into consecutive slots, so the device's
 * IOTLB fill and the batch end's invalidation (one RANGE command over the unlinked slots) see
 * contiguous IOVAs. A slot is reused @nslots links later; the caller sizes @nslots so that by
 * then the batch that unlinked it has ended (the library refuses the link otherwise: the page
 * table still holds the old entry until the batch end, -EEXIST).
 */
struct wl_slots {
	struct dg_dma_iova_state st;
	uint64_t slot_bytes;
	uint32_t nslots, next; /* next: the slot the next link takes */
	bool live;
};

int wl_slots_init(struct wl_slots *s, struct dg_dma_dev *dd, uint32_t nslots, uint64_t bytes);
/* Free the range (every slot must be unlinked): 0 or -errno. */
int wl_slots_fini(struct wl_slots *s);
/* Link @buf into the next slot: *dma and *slot. */
int wl_slots_link(struct wl_slots *s, void *buf, size_t len, enum dg_dma_dir dir, uint64_t *dma,
		  uint32_t *slot);
/* Link bufs[0..n) into the next @n slots (n <= DG_DMA_BULK_MAX, at most nslots): a ring's
 * refill, one dg_dma_iova_link_bulk() and one sync per part (two where the slots wrap).
 * dma[i] and, in *first, the slot of bufs[0]. All or nothing: 0 or -errno. */
int wl_slots_link_bulk(struct wl_slots *s, void *const *bufs, unsigned int n, size_t len,
		       enum dg_dma_dir dir, uint64_t *dma, uint32_t *first);
/* Unlink the @n slots from @first (wrapping) into @b: one dg_dma_iova_unlink_bulk() per part.
 * 0 or the first error (a part refused is refused whole). */
int wl_slots_unlink_bulk(struct wl_slots *s, uint32_t first, unsigned int n, size_t len,
			 enum dg_dma_dir dir, struct dg_dma_batch *b);
/* The @n slots[] follow each other from slots[0] (wrapping): one bulk unlink covers them. */
bool wl_slots_consecutive(const struct wl_slots *s, const uint32_t *slots, unsigned int n);
int wl_slots_unlink(struct wl_slots *s, uint32_t slot, size_t len, enum dg_dma_dir dir,
		    struct dg_dma_batch *b);
/* Link the entries of @sg into consecutive granules of the next slot (each entry within one
   granule); sets their dma_addr/dma_len with contiguous ones merged, like dg_dma_map_sg:
   *nr_dma segments. */
int wl_slots_link_sg(struct wl_slots *s, struct dg_dma_sg *sg, unsigned int nents,
		     enum dg_dma_dir dir, unsigned int *nr_dma, uint32_t *slot);
int wl_slots_unlink_sg(struct wl_slots *s, uint32_t slot, const struct dg_dma_sg *sg,
		       unsigned int nents, enum dg_dma_dir dir, struct dg_dma_batch *b);

/* ---- counters -------------------------------------------------------------------------------- */

/* One thread's counters: single writer (relaxed load + store), read by the main thread. */
struct wl_ctr {
	_Atomic uint64_t ios;	     /* driver: I/Os completed (the workload's unit) */
	_Atomic uint64_t bytes;	     /* driver: payload bytes of those I/Os */
	_Atomic uint64_t dma_ns;     /* driver: ns in the DMA API, sampled polls only */
	_Atomic uint64_t dma_ios;    /* driver: I/Os of the sampled polls */
	_Atomic uint64_t units;	     /* device: descriptors (rx buffers, tx sends, commands) */
	_Atomic uint64_t xlat_ns;    /* device: ns translating, sampled bursts only */
	_Atomic uint64_t xlat_units; /* device: units of the sampled bursts */
	_Atomic uint64_t dev_bytes;  /* device: payload bytes moved through translations */
	_Atomic uint64_t errors;     /* failed DMA API call, device fault, corrupt data */
	_Atomic uint64_t timeouts;   /* -ETIMEDOUT of an invalidation wait (not fatal) */
	_Atomic uint64_t polls;	     /* polls (driver) or bursts (device) with work */
	_Atomic uint64_t loops;	     /* passes of the thread's loop (the stuck-run report) */
	_Atomic uint64_t idle_ns;    /* time in runs of empty polls (two clock reads a run) */
	char pad[24];
};

static inline void wl_ctr_add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
			      memory_order_relaxed);
}

/* ---- a run ------------------------------------------------------------------------------------ */

struct wl_run;
struct wl_workload;
struct wl_totals;

struct wl_port {
	struct wl_run *run;
	unsigned int idx;
	unsigned int drv_thr; /* driver thread that owns it */
	unsigned int dev_thr; /* device thread that owns it */
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	struct dg_dma_pool *pool[WL_MAX_CLASSES]; /* pool policy: one per class */
	uint8_t *arena;				  /* other configurations: all buffers */
	bool two_step;				  /* drivers link into ring slots */
	bool bulk; /* streaming drivers map and unmap a refill and a reap with the bulk calls
		      (policies that have them: identity, strict, lazy, bounce; not linux-ref) */
	size_t arena_size;
	struct wl_class cls[WL_MAX_CLASSES];
	unsigned int ncls;
	void *priv; /* the workload's queues */
	/*
	 * Free buffers (driver thread): their counts change with every buffer the driver takes
	 * or gives back, so they live on a cache line of their own. Next to priv and dev (which
	 * the device thread reads at every poll and translation) each push or pop cost the
	 * device a cross-core miss on its next poll (docs/iommu.md, "Shared cache lines").
	 */
	_Alignas(64) struct wl_stack stack[WL_MAX_CLASSES];
};
/* The device thread reads run, dev_thr, dev and priv; the driver writes stack[].n. */
_Static_assert(offsetof(struct wl_port, stack) % 64 == 0 &&
		       sizeof(struct wl_port) - offsetof(struct wl_port, stack) == 64,
	       "wl_port: the driver-written buffer stacks have a cache line of their own");
_Static_assert(sizeof(struct wl_port) % 64 == 0, "wl_port: ports do not share cache lines");

/* What a driver thread keeps between polls. */
struct wl_drv {
	struct wl_run *run;
	unsigned int id;
	struct wl_ctr *ctr;
	uint64_t poll_no;
	bool posting;	   /* map and post new work (false while draining) */
	bool timed;	   /* this poll is a sampled one */
	uint64_t t_mark;   /* clock at the start of the current timed phase */
	uint64_t phase_ns; /* DMA API ns of this poll so far */
	uint64_t rng;	   /* xorshift state (nvme LBAs) */
};

/* What a device thread keeps between bursts. */
#define WL_DEV_SG      1024   /* translated segments one device burst holds */
#define WL_BURST_BYTES 65536u /* payload one device burst moves at most (one send more) */
struct wl_dev {
	struct wl_run *run;
	unsigned int id;
	struct wl_ctr *ctr;
	uint64_t burst_no;
	bool timed;
	uint64_t t_mark;
	uint64_t xlat_ns; /* ns translating in this burst so far (timed bursts) */
	uint64_t units;	  /* units of this burst so far */
	uint8_t *scratch; /* the "wire": where transmitted payload is copied (64 KiB) */
	unsigned int ndevs;
	struct dg_device *devs[WL_MAX_PORTS]; /* the devices of this thread */
	struct dg_sg sg[WL_DEV_SG];
};

/* Phases of a run (wl_run.phase). */
enum { WL_RUN = 0, WL_DRAIN = 1, WL_STOP = 2 };

struct wl_run {
	const struct wl_workload *wl;
	enum wl_cfg cfg;
	unsigned int nthreads; /* driver threads = device threads */
	unsigned int nports;
	unsigned int qd;    /* nvme4k queue depth per job */
	uint64_t ops_limit; /* fixed-count mode: I/Os per driver thread, 0 = timed */
	bool unpinned;	    /* wl_run_opts.unpinned */
	struct dg_iommu *mmu;
	struct dg_dma *dma;
	struct wl_port port[WL_MAX_PORTS];
	void *priv; /* the workload's per-run state */
	/* Release store by the main thread (or a driver reaching ops_limit), acquire loads in
	   the polling loops: pairs so that WL_STOP is seen after every driver's drain. */
	_Atomic int phase;
	_Atomic unsigned int drained; /* driver threads done draining (release/acquire) */
	_Atomic unsigned int started; /* threads past their set-up */
	_Alignas(64) struct wl_ctr drv[WL_MAX_THREADS];
	struct wl_ctr dev[WL_MAX_THREADS];
};

/*
 * A workload. The driver side is a poll of one port (reap, unmap, work, map, post) and the
 * device side a burst on one port; both return true when they did something.
 */
struct wl_workload {
	const char *name;
	const char *summary;
	const char *unit;	  /* "Mpps", "Gbit/s" or "IOPS" */
	const char *io;		  /* what one I/O is: "packet", "frame", "64 KiB", "4 KiB read" */
	bool unit_bits;		  /* throughput from payload bytes (Gbit/s), else from I/Os */
	double unit_div;	  /* I/Os per second divided by this (Mpps: 1e6; IOPS: 1) */
	unsigned int fixed_ports; /* ports regardless of threads (bond4: 4); 0 = one per thread */
	unsigned int max_threads; /* thread pairs that can have work (queues); 0 = any */
	/* Buffer classes of port @port (called before the port's DMA device exists). */
	void (*classes)(const struct wl_run *r, unsigned int port, struct wl_class *cls,
			unsigned int *ncls);
	int (*port_init)(struct wl_port *p); /* rings (coherent memory) and queue state */
	void (*port_fini)(struct wl_port *p);
	bool (*drv_poll)(struct wl_drv *d, struct wl_port *p);
	bool (*drv_idle)(const struct wl_port *p); /* nothing outstanding (drain done) */
	bool (*dev_poll)(struct wl_dev *d, struct wl_port *p);
	void (*dump)(const struct wl_port *p, FILE *out); /* ring state (a stuck run) */
	const void *param;				  /* workload parameters (nic.c, nvme.c) */
};

extern const struct wl_workload wl_xdp64, wl_xdp64_2k, wl_xdp64_4k, wl_fwd64, wl_bond4, wl_tcp_x1,
	wl_tcp_x4, wl_tcp_x8, wl_nvme4k;

/* ---- environment (wl_env.c) ------------------------------------------------------------------- */

/* Build the run's IOMMU, DMA layer, ports, buffers and rings. Returns 0 or -errno (printed). */
int wl_run_setup(struct wl_run *r);
/* Check (no live mapping, dg_dma_dev_check, no fault) and destroy; returns 0 or -errno. */
int wl_run_teardown(struct wl_run *r);

/* The device media of nvme4k (built once per process, read only after). */
const uint8_t *wl_media(void);

/* ---- one run (wl_run.c) ---------------------------------------------------------------------- */

struct wl_run_opts {
	double warmup_s;   /* before the measured interval */
	double duration_s; /* the measured interval */
	uint64_t ops;	   /* fixed-count mode: I/Os per driver thread (no timing), 0 = timed */
	unsigned int threads;
	unsigned int qd;
	uint64_t stuck_ns; /* the stuck-run watchdog's limit (wl_run.c), 0 = 10 s (tests) */
	bool unpinned;	   /* threads left to the scheduler (tests: see wl_run.c), not pinned */
};

/*
 * The stuck-run watchdog's verdict on a run that made no progress for @stalled_ns, given the
 * CPU time each of its @n threads ran meanwhile (@ran_ns[i] < 0: that thread has exited):
 * WAIT while some live thread has not run long enough to have made progress (the scheduler
 * has not given it a CPU: starvation, not a bug), STUCK once past @stuck_ns every live thread
 * ran (they loop without progress), STARVED past a hard limit whatever ran (a thread that
 * never runs again: blocked, or starved for good).
 */
enum wl_watch { WL_WATCH_WAIT, WL_WATCH_STUCK, WL_WATCH_STARVED };
enum wl_watch wl_watch_verdict(uint64_t stalled_ns, uint64_t stuck_ns, const int64_t *ran_ns,
			       unsigned int n);

/*
 * Run @wl under @cfg once: set up, start the thread pairs, measure (or do ops I/Os), drain,
 * check and tear down. Adds the measured interval to @tot (whole-run counters too) and sets
 * *throughput (in wl->unit). Returns 0, or -errno when the run could not be set up or saw an
 * error, a device fault, a leaked buffer or mapping (described on stderr).
 */
int wl_run_once(const struct wl_workload *wl, enum wl_cfg cfg, const struct wl_run_opts *o,
		struct wl_totals *tot, double *throughput);

/* Thread pairs a run of @wl uses for @threads asked. */
unsigned int wl_threads_for(const struct wl_workload *wl, unsigned int threads);

/* ---- driver and device helpers (wl_env.c) ------------------------------------------------------ */

static inline int wl_phase(const struct wl_run *r)
{
	/* Acquire pairs with the release store in wl_run_phase_set(). */
	return atomic_load_explicit(&r->phase, memory_order_acquire);
}
void wl_run_phase_set(struct wl_run *r, int phase);

/* Driver: bracket a phase of DMA API calls (timed only in sampled polls). */
void wl_drv_dma_begin(struct wl_drv *d);
void wl_drv_dma_end(struct wl_drv *d);
/* Driver: a DMA API call failed: count it (and -ETIMEDOUT apart). */
void wl_drv_fail(struct wl_drv *d, int err);

/*
 * Driver: one unmap batch in flight. A poll fills the current batch (dg_dma_batch_begin on
 * wl_batch_cur(), its unmaps, dg_dma_batch_submit), then ends the previous poll's batch
 * (wl_batch_end_pending: the device has had a poll's time to acknowledge it) before it works
 * on what that poll unmapped, and keeps its own in flight (wl_batch_keep). Nothing a batch
 * unmapped is read, reused or freed before its end returned: strict's guarantee holds.
 */
struct wl_batches {
	struct dg_dma_batch b[2];
	unsigned int cur;	   /* the batch this poll fills */
	struct dg_dma_batch *pend; /* in flight since the previous poll, or NULL */
};

static inline struct dg_dma_batch *wl_batch_cur(struct wl_batches *w)
{
	return &w->b[w->cur];
}

/* End the batch in flight, if any (timed as DMA API time, a failure counted): true if one
   was, and the caller may now look at what it unmapped. Without @wait a batch the devices have
   not acknowledged yet stays in flight (false): a poll with no new batch to keep polls its
   rings again rather than blocking in the end (dg_dma_batch_done). */
bool wl_batch_end_pending(struct wl_drv *d, struct wl_batches *w, bool wait);

/* The current batch (begun and submitted) stays in flight until the next poll. */
static inline void wl_batch_keep(struct wl_batches *w)
{
	w->pend = &w->b[w->cur];
	w->cur ^= 1;
}

/* Driver: start and end one poll of a port; end adds its I/Os and bytes. */
void wl_drv_poll_start(struct wl_drv *d);
void wl_drv_poll_end(struct wl_drv *d, uint64_t ios, uint64_t bytes);

/*
 * Device: start and end one burst; xlat_begin/end bracket its translations. Inline, as the
 * quiescent points below: a device thread calls them at every poll (empty ones included) and
 * every few DMAs, and the calls were most of their cost; the counters of a burst with work
 * are added out of line (wl_dev_burst_add()).
 */
void wl_dev_burst_add(struct wl_dev *d, uint64_t units, uint64_t bytes);

static inline void wl_dev_burst_start(struct wl_dev *d)
{
	d->timed = d->burst_no++ % WL_SAMPLE_EVERY == 0;
	d->xlat_ns = 0;
}

static inline void wl_dev_burst_end(struct wl_dev *d, uint64_t units, uint64_t bytes)
{
	if (units)
		wl_dev_burst_add(d, units, bytes);
}

static inline void wl_dev_xlat_begin(struct wl_dev *d)
{
	if (d->timed)
		d->t_mark = bench_now_ns();
}

static inline void wl_dev_xlat_end(struct wl_dev *d)
{
	if (d->timed)
		d->xlat_ns += bench_now_ns() - d->t_mark;
}

/*
 * Device: the end of a burst on one ring: every device of the thread reaches a quiescent point
 * (translations released, invalidations acknowledged), so a driver's wait never waits for
 * more than one burst of the thread, whichever device it is for. Nothing to apply or announce
 * costs no call (dg_dev_quiesce_fast()).
 */
static inline void wl_dev_quiesce(struct wl_dev *d)
{
	for (unsigned int i = 0; i < d->ndevs; i++)
		dg_dev_quiesce_fast(d->devs[i]);
}

/* Device: between two DMAs, every device of the thread with an invalidation pending reaches a
   quiescent point (dg_dev_quiesce_if_pending); true if any did: what the thread translated
   before is no longer its to use. */
static inline bool wl_dev_ack_pending(struct wl_dev *d)
{
	bool acked = false;

	for (unsigned int i = 0; i < d->ndevs; i++)
		acked |= dg_dev_quiesce_if_pending_fast(d->devs[i]);
	return acked;
}

/* Device: translate [iova, iova + len) for @access into @sg (at most @max segments) through
   the inline hit (dg_dev_translate_fast, as a device's hot loop would), timed in
   sampled bursts; a failure is counted as an error. Returns the segment count or 0. */
unsigned int wl_dev_xlat_fail(struct wl_dev *d, uint64_t iova, size_t len, int err);

static inline unsigned int wl_dev_translate(struct wl_dev *d, struct wl_port *p, uint64_t iova,
					    size_t len, unsigned int access, struct dg_sg *sg,
					    unsigned int max)
{
	unsigned int nr = 0;
	int e = dg_dev_translate_fast(p->dev, iova, len, access, sg, max, &nr);

	if (__builtin_expect(e != 0, 0))
		return wl_dev_xlat_fail(d, iova, len, e); /* counted, reported once: 0 */
	return nr;
}

/*
 * Device: start the translations of [iova, iova + len) early (dg_dev_prefetch_fast(): a
 * prefetch of each table line a leaf-direct device will read; nothing under pass-through or
 * an IOTLB level): called for the addresses of a burst's descriptors as soon as they are
 * read, so that their lines' cross-core misses overlap instead of coming one per group of
 * translations. A line is asked for once: the entries of 4 KiB pages are 8 to a 64-byte
 * line, one per 2^WL_PTE_LINE_SHIFT bytes of IOVA, and *@last (start at UINT64_MAX) is the
 * one asked for last. wl_dev_prefetch_line(): the line of @iova only (a frame at a buffer's
 * start); wl_dev_prefetch(): every line of the range (len 0, more than WL_BURST_BYTES or a
 * range that wraps: the first one). Changes nothing the translation sees (dmaguard/dev.h).
 */
#define WL_PTE_LINE_SHIFT 15 /* 8 entries of 8 bytes for 4 KiB pages: 32 KiB of IOVA a line */

static inline void wl_dev_prefetch_line(const struct wl_port *p, uint64_t iova, uint64_t *last)
{
	uint64_t l = iova >> WL_PTE_LINE_SHIFT;

	if (l != *last) {
		*last = l;
		dg_dev_prefetch_fast(p->dev, iova);
	}
}

static inline void wl_dev_prefetch(const struct wl_port *p, uint64_t iova, uint64_t len,
				   uint64_t *last)
{
	const uint64_t span = 1ull << WL_PTE_LINE_SHIFT;

	wl_dev_prefetch_line(p, iova, last);
	if (__builtin_expect((iova & (span - 1)) + len > span, 0)) { /* more lines */
		uint64_t l = iova >> WL_PTE_LINE_SHIFT;
		uint64_t end = (iova + (len - 1 < WL_BURST_BYTES ? len - 1 : 0)) >>
			       WL_PTE_LINE_SHIFT;

		while (l < end)
			dg_dev_prefetch_fast(p->dev, ++l << WL_PTE_LINE_SHIFT);
		*last = l;
	}
}

/* Copy @len bytes into/out of translated segments, starting @off bytes into them. */
void wl_sg_copy_to(const struct dg_sg *sg, unsigned int nr, size_t off, const void *src,
		   size_t len);
void wl_sg_copy_from(const struct dg_sg *sg, unsigned int nr, size_t off, void *dst, size_t len);

/* A ring's translation kept by the device thread across bursts (wl_dev_ring()). */
struct wl_ring_xlat {
	void *host;	/* NULL: none yet */
	uint64_t stamp; /* dg_dev_stamp() when it was made */
	int watch;	/* 0: not watched yet; id + 1 of its dg_dev_watch(); < 0: none free */
};

/* A translated ring: the host address of a whole coherent ring. The translation in @x is
   used again, held (dg_dev_rehold_watched(): the ring is watched from its first
   translation; dg_dev_rehold() when no watch was free), while no command applied since it
   was made may have changed it; otherwise the ring is translated again and kept in @x. */
void *wl_dev_ring(struct wl_dev *d, struct wl_port *p, uint64_t ring_dma, size_t bytes,
		  struct wl_ring_xlat *x);

/* A burst cut short because its ring could not be translated again at an acknowledgement
   point (never while rings stay mapped): @undone descriptors were not written back. Counted
   as an error of the device thread (reported as the run's "errors", which the e2e check
   requires to be 0), with a message the first time. */
void wl_dev_ring_lost(struct wl_dev *d, uint32_t undone);

/* ---- the packet header every generated frame starts with -------------------------------------- */

struct wl_hdr {
	uint8_t dst[6], src[6];
	uint16_t ethertype; /* 0x0800 */
	uint16_t queue;	    /* queue that carried it */
	uint32_t magic;	    /* WL_MAGIC */
	uint64_t seq;	    /* per-queue sequence number */
	uint32_t len;	    /* frame bytes */
	uint32_t csum;	    /* sum of the words above, checked by the driver */
};

static inline uint32_t wl_hdr_csum(const struct wl_hdr *h)
{
	return h->magic ^ (uint32_t)h->seq ^ (uint32_t)(h->seq >> 32) ^ h->len ^ h->queue;
}

/* ---- the table of results ---------------------------------------------------------------------- */

/* Counters of one configuration over measured intervals (summed over rounds). */
struct wl_totals {
	double seconds;
	uint64_t ios, bytes, dma_ns, dma_ios, units, xlat_ns, xlat_units, dev_bytes, errors,
		timeouts;
	uint64_t maps, unmaps, subpage_bytes, iotlb_misses, walks, faults, inval_cmds, waits;
	uint64_t drv_idle_ns, dev_idle_ns; /* summed over the thread pairs */
	/* over whole runs (set-up to teardown) or maxima */
	uint64_t run_maps, run_unmaps, run_faults, run_errors;
	uint64_t subpage_max, persistent_bytes, lazy_window_ns, lazy_window_unmaps;
	bool exposes_all;
};

#define WL_MAX_ROUNDS 100

/*
 * The cache-line transfer measured again at the start of every round of every workload
 * (bench_xfer_measure(), bench/machine.c): the host moves the two vCPUs closer or farther apart
 * between rounds (28 ns one way in one round, 70-90 ns minutes later), and every workload passes
 * lines between the driver's and the device's cores, identity included. A few ms a round
 * (WL_XFER_ROUND_RUNS runs of WL_XFER_ROUND_RUN_S, the median of their median batches): ~0.3 s
 * over make run's 45 rounds. --quick measures the first round of the first workload only.
 */
#define WL_XFER_ROUND_RUNS  3
#define WL_XFER_ROUND_RUN_S 0.002

/* One row of the report: a workload under a configuration, over every round. */
struct wl_result {
	const struct wl_workload *wl;
	enum wl_cfg cfg;
	unsigned int threads, qd;
	/* runs measured: the entries of thr[] and thr_round[]. A policy runs once a round, so
	   its nruns is also its rounds (and its ratio[]'s entries); a baseline runs first in each
	   round and again after each policy, so its nruns is up to WL_NCFG a round */
	unsigned int nruns;
	double thr[WL_MAX_ROUNDS * WL_NCFG];	    /* throughput per run, in wl->unit (identity: a
						run before and after every policy's) */
	uint8_t thr_round[WL_MAX_ROUNDS * WL_NCFG]; /* the round of each thr[] run */
	double ratio[WL_MAX_ROUNDS]; /* per round: thr / mean of the identity runs around it */
	/* per round: the cache-line transfer measured at its start (ns one way, NaN: not
	   measured), the same in every row of the workload; rounds: how many there were */
	double xfer_ns[WL_MAX_ROUNDS];
	unsigned int rounds;
	struct bench_summary thr_s, ratio_s;
	struct wl_totals tot;
	bool failed; /* a run could not be set up, or saw an error, a fault or a leak */
	/* derived per I/O (wl_result_derive) */
	double dma_ns, xlat_ns, miss_4k, walks_4k, inval_io, waits_io;
	double drv_busy, dev_busy; /* fraction of the driver / device threads' time not idle */
	double window_ns;	   /* -1: reachable for good (identity, pool, window direct) */
	double subpage;		   /* bytes of other data exposed per mapped buffer (average) */
};

void wl_result_derive(struct wl_result *res);
/* The ratio of each round in the rounds' order: value[i] / ((before[i] + after[i]) / 2), NaN
   for a round bench_alternating_ratios() leaves out (a baseline that measured nothing). That
   one's ratios are sorted (its summary's); these stay next to the round's other figures. */
void wl_round_ratios(const double *value, const double *before, const double *after, size_t n,
		     double *ratio);

/* Output (wl_report.c). */
struct wl_report_opts {
	double duration_s, warmup_s;
	unsigned int rounds, threads, qd;
	bool quick;
	double loadavg;
};
void wl_report_table(FILE *out, struct wl_result *res, size_t n, const struct wl_report_opts *o);
/* One row's "RESULT suite=workloads ..." line (the table's last lines). */
void wl_report_result_line(FILE *out, const struct wl_result *r);
/* The note under the ratio table: strict's cross-core transfers per I/O times @x's transfer
   cost, against strict's measured extra time per I/O where it can be read (wl_report.c). */
void wl_report_transfers(FILE *out, const struct wl_result *res, size_t n,
			 const struct bench_xfer *x);
int wl_report_json(const char *path, struct wl_result *res, size_t n,
		   const struct wl_report_opts *o);
/* The CSV (columns: docs/bench-json.md) to @out; wl_report_csv() writes it to the file @path. */
void wl_report_csv_write(FILE *out, struct wl_result *res, size_t n);
int wl_report_csv(const char *path, struct wl_result *res, size_t n);
int wl_report_plot(const char *target, struct wl_result *res, size_t n);
void wl_plot_ascii(FILE *out, struct wl_result *res, size_t n, unsigned int width);

#endif /* DG_BENCH_WL_H */
