/* SPDX-License-Identifier: MIT */
/*
 * dma/dma_internal.h - private structures of the DMA layer (src/dma/).
 *
 * Layout of the layer:
 *   dma.c          struct dg_dma: global settings, failure hook, housekeeping thread
 *   dma_dev.c      struct dg_dma_dev: configuration, policy activation and switching
 *   dma_stats.c    per-thread counter blocks, error accounting, stats/dump/check
 *   map_record.c   the record table: what is mapped at each IOVA (validation of unmaps)
 *   map.c          the streaming API, translated map/unmap shared by the IOVA policies,
 *                  strict retirement and batches
 *   lazy.c         per-CPU flush queues
 *   bounce.c       shadow areas (buddy allocator per CPU and direction)
 *   window.c       the DDW window (direct region + on-demand part)
 *   pool.c         page_pool-style pools
 *   coherent.c     coherent allocations
 *   iova_link.c    the two-step API
 *   stream.c       streams: strict's per-thread IOVA chunks handed out in ring order
 *
 * Hot-path rules: no lock and no atomic read-modify-write of a line shared between CPUs on
 * the identity, strict-batched and two-step paths beyond what the IOVA allocator and the
 * invalidation queue need. Counters are per thread (single writer, relaxed load + store);
 * errors are rare and counted with atomic adds on the device.
 */
#ifndef DG_DMA_INTERNAL_H
#define DG_DMA_INTERNAL_H

#include <dmaguard/dma.h>
#include <dmaguard/iova.h>

#include "base/compiler.h"
#include "base/spinlock.h"
#include "iova/iova_owned.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>

#define DMA_HOST_PAGE 4096ull /* host page of dg_dma_map_page() */

/* Internal error: no bounce shadow slot (returned as -ENOSPC, counted apart from IOVA space). */
#define DMA_ENOSHADOW (-4097)

/* ---- per-thread counters (dma_stats.c) ----------------------------------------------------- */

enum dma_ctr {
	CTR_MAPS,
	CTR_UNMAPS,
	CTR_MAP_BYTES,
	CTR_SG_MAPS,
	CTR_LINKS,
	CTR_UNLINKS,
	CTR_COH_ALLOCS,
	CTR_COH_FREES,
	CTR_BATCHES,
	CTR_SUBMITS,
	CTR_WAITS,
	CTR_SUBPAGE,
	CTR_BOUNCE_IN,
	CTR_BOUNCE_OUT,
	CTR_BOUNCE_ZERO,
	CTR_WIN_DIRECT,
	CTR_WIN_DYNAMIC,
	CTR_POOL_HITS,
	CTR_POOL_FALLBACKS,
	CTR_NR
};

/*
 * One thread's counters for one device. Written only by its thread (relaxed load + store, no
 * read-modify-write), read by dg_dma_dev_stats() with relaxed loads: exact once the device is
 * quiet. Blocks are never freed before the device.
 */
struct dma_chunk;

/*
 * A thread's stream on one device for one direction (stream.c): the chunk it hands granules
 * out of, in order. Only its thread reads or writes it. @gen is the space's generation (dma_space.gen) when the
 * chunk was taken: a stream of a destroyed space (a policy change) never matches, so its
 * chunk pointer is never followed.
 */
#define DMA_STREAM_DIRS 3 /* enum dg_dma_dir's values */
struct dma_stream {
	uint64_t gen;	     /* dma_space.gen of @c, 0: none */
	struct dma_chunk *c; /* the current chunk */
	uint32_t cur;	     /* its next granule */
	uint32_t end;	     /* its granules (the space's chunk span) */
	uint32_t backoff;    /* calls left before the next try after a failed chunk get */
};

struct dma_tstats {
	struct dma_tstats *next; /* dd->tstats list (push only) */
	uint64_t owner;		 /* thread id (dma_thread_id()), never reused */
	_Atomic uint64_t c[CTR_NR];
	_Atomic uint64_t subpage_max;
	/* Batches begun minus batches ended on this thread, mod 2^64 (a batch may end on another
	 * thread than the one that began it: only the sum over all blocks means anything). The
	 * thread's own relaxed load and store, not a locked add on the device: a batch's begin
	 * and end are on every strict poll, and a locked instruction there waits for the
	 * poll's page-table and ring stores to leave the store buffer. dma_open_batches(). */
	_Atomic uint64_t open_batches;
	/* strict's and lazy's streams, one per enum dg_dma_dir (stream.c: a ring's buffers,
	 * rx or tx, keep adjacent IOVAs when a thread maps both) */
	struct dma_stream st[DMA_STREAM_DIRS];
};

enum dma_err_kind {
	ERR_INVALID,
	ERR_RANGE,
	ERR_NOT_MAPPED,
	ERR_IOVA_SPACE,
	ERR_SHADOW_SPACE,
	ERR_NOMEM,
	ERR_TIMEOUT,
	ERR_OTHER,
	ERR_NR
};

/*
 * A thread's cache of its blocks: the one it used last (dma_tls_last: one compare on the hot
 * paths), then slot gen & (DMA_TLS_SLOTS - 1) (dma_tstats_slow). The key is the device's
 * generation alone: generations are unique, never reused and never 0, so a slot never names
 * a block of another (or a freed and reallocated) device, and an empty slot never matches.
 */
#define DMA_TLS_SLOTS 8
struct dma_tls_slot {
	uint64_t gen;	      /* generation of the device the block belongs to; 0: empty */
	struct dma_tstats *t; /* its block for this thread */
};
extern _Thread_local struct dma_tls_slot dma_tls[DMA_TLS_SLOTS]
	__attribute__((tls_model("initial-exec")));
extern _Thread_local struct dma_tls_slot dma_tls_last __attribute__((tls_model("initial-exec")));

struct dma_tstats *dma_tstats_slow(struct dg_dma_dev *dd);
/* This thread's id (dma_tstats.owner), 0 until its first dma_tstats_slow() (dma_stats.c). */
extern _Thread_local uint64_t dma_tls_tid __attribute__((tls_model("initial-exec")));
void dma_tstats_free(struct dg_dma_dev *dd);
/* Batches open on @dd: the sum over the threads' blocks and the device's shared count. */
uint64_t dma_open_batches(const struct dg_dma_dev *dd);

/* ---- the record table (map_record.c) ------------------------------------------------------- */

/*
 * What is mapped at the first granule of every live IOVA range of the translated policies:
 * three-level radix of 4096-entry nodes over the space's granule numbers (2^36 granules).
 * Nodes are published with a release CAS and never freed before the table. A record's words
 * are written by the owner of the IOVA range (the allocator makes it exclusive).
 *
 *  w0: bit 63 valid | bits 60..62 kind | bits 58..59 dir | bit 57 stream | bits 32..47 nents |
 *      bits 0..31 offset of the data in its first granule
 *  w1: bytes mapped (the caller's length; sg: the sum of the entries)
 *  w2: IOVA bytes of the range (what unmap removes and the allocator gets back)
 *  w3: the allocator's token of the range (iova/iova_owned.h; 0: none), so the range goes
 *      back without the allocator's own free check: the claim proves ownership
 *
 * The claim of an unmap - the one step of which two racing unmaps of a mapping can win only
 * one - is a compare-and-swap of w0 to 0, except for a stream granule's mapping made by a bulk
 * call (w0's stream bit, REC_STREAM: made by dma_stream_map(), stream.c). Those are claimed by
 * clearing their bit in the leaf's live bitmap: one bit per granule after the leaf's records, set (release)
 * by the map once the entry and the record are written, cleared by the claim, so a bulk unmap
 * of a ring's reap claims 64 granules with one atomic AND (map.c: claim_bulk). stream.c's
 * preamble has the argument; in short: a bit is set only by a stream map of that granule,
 * the compare-and-swap never matches a stream record's w0 (the stream bit differs) and the
 * bitmap only ever holds stream mappings, so every mapping has exactly one way to be claimed.
 */
#define REC_LEVEL_BITS	 12
#define REC_NODE	 (1u << REC_LEVEL_BITS)
#define REC_MAX_GRANULES (1ull << (3 * REC_LEVEL_BITS))

#define REC_VALID	 (1ull << 63)
#define REC_KIND_SHIFT	 60
#define REC_DIR_SHIFT	 58
#define REC_STREAM	 (1ull << 57)
#define REC_NENTS_SHIFT	 32

enum dma_kind {
	KIND_SINGLE = 1,
	KIND_PAGE = 2,
	KIND_SG = 3,
	KIND_COHERENT = 4,
};

struct dma_rec {
	_Atomic uint64_t w0;
	_Atomic uint64_t w1;
	_Atomic uint64_t w2;
	_Atomic uint64_t w3;
};

/* A leaf: REC_NODE records, then their live bitmap (REC_NODE / 64 words: a 512-granule
 * chunk's 8 words are one cache line of their own, as the leaf is cache-line aligned). */
#define REC_LIVE_WORDS (REC_NODE / 64)
#define REC_LEAF_BYTES (REC_NODE * sizeof(struct dma_rec) + REC_LIVE_WORDS * sizeof(uint64_t))

/* The live-bitmap word of the record @rec of granule @g (its bit: g & 63). */
static inline _Atomic uint64_t *dma_rec_live(struct dma_rec *rec, uint64_t g)
{
	struct dma_rec *leaf = rec - (g & (REC_NODE - 1));

	return (_Atomic uint64_t *)(void *)(leaf + REC_NODE) + ((g & (REC_NODE - 1)) >> 6);
}

struct dma_rec_table {
	_Atomic(void *) *top; /* REC_NODE pointers to middle nodes */
	uint64_t base;	      /* IOVA of granule 0 */
	unsigned int gshift;  /* log2 granule */
	uint64_t gen;	      /* unique, never reused, never 0: the key of the leaf hints */
};

/*
 * This thread's last record leaf (a ring's buffers sit in a few leaves of 4096 granules, so
 * nearly every lookup hits it): the table's generation, the leaf's number (g >> 12) and the
 * leaf. Safe without any invalidation: leaves are never freed before their table, and a table
 * created later (even at the same address) has another generation, so a hint of a destroyed
 * table never matches. The leaf was found by this thread with acquire loads (its zeroes were
 * visible then, and stay so).
 */
struct dma_rec_hint {
	uint64_t gen;
	uint64_t leafno;
	struct dma_rec *leaf;
};
extern _Thread_local struct dma_rec_hint dma_rec_tls __attribute__((tls_model("initial-exec")));

int dma_rec_init(struct dma_rec_table *t, uint64_t base, unsigned int gshift);
void dma_rec_fini(struct dma_rec_table *t);
struct dma_rec *dma_rec_get_slow(struct dma_rec_table *t, uint64_t iova, bool create);

/*
 * The record of granule @g (= (iova - t->base) >> t->gshift) of @iova, which the caller knows
 * is inside the table (an IOVA of the space: dma_space_create() keeps [first, last] within
 * REC_MAX_GRANULES granules), so no range check; creating nodes when @create (else NULL if
 * absent). Two dependent acquire loads below the table's top when the nodes exist.
 */
static inline struct dma_rec *dma_rec_in(struct dma_rec_table *t, uint64_t iova, uint64_t g,
					 bool create)
{
	_Atomic(void *) *mid;
	struct dma_rec *leaf;

	if (dg_likely(dma_rec_tls.leafno == g >> REC_LEVEL_BITS && dma_rec_tls.gen == t->gen))
		return &dma_rec_tls.leaf[g & (REC_NODE - 1)];
	/* Acquire pairs with the release CAS publishing a node (map_record.c). */
	mid = atomic_load_explicit(&t->top[g >> (2 * REC_LEVEL_BITS)], memory_order_acquire);
	if (dg_likely(mid != NULL)) {
		/* Acquire as above. */
		leaf = atomic_load_explicit(&mid[(g >> REC_LEVEL_BITS) & (REC_NODE - 1)],
					    memory_order_acquire);
		if (dg_likely(leaf != NULL)) {
			dma_rec_tls = (struct dma_rec_hint){t->gen, g >> REC_LEVEL_BITS, leaf};
			return &leaf[g & (REC_NODE - 1)];
		}
	}
	/* no node on the way: no record there (a lookup), or make the nodes (a map) */
	return create ? dma_rec_get_slow(t, iova, true) : NULL;
}

/* The record of the granule holding @iova, creating nodes when @create (else NULL if absent
 * or outside the table). */
static inline struct dma_rec *dma_rec_get(struct dma_rec_table *t, uint64_t iova, bool create)
{
	uint64_t g = (iova - t->base) >> t->gshift;

	if (dg_likely(iova >= t->base && g < REC_MAX_GRANULES))
		return dma_rec_in(t, iova, g, create);
	return NULL;
}

/* Call @fn for every valid record; stops at a non-zero return, which it returns. */
int dma_rec_for_each(const struct dma_rec_table *t,
		     int (*fn)(void *arg, uint64_t iova, uint64_t w0, uint64_t w1, uint64_t w2),
		     void *arg);

/* A mapping's record: w1..w3, then w0 (the word a claim compares with) makes it live. */
static dg_always_inline void dma_rec_write(struct dma_rec *rec, uint64_t len, uint64_t total,
					   uint64_t token, uint64_t w0)
{
	atomic_store_explicit(&rec->w1, len, memory_order_relaxed);
	atomic_store_explicit(&rec->w2, total, memory_order_relaxed);
	atomic_store_explicit(&rec->w3, token, memory_order_relaxed);
	/* Release pairs with the acquire load in xl_check() (map.c): w1..w3 are visible. */
	atomic_store_explicit(&rec->w0, w0, memory_order_release);
}

static inline uint64_t rec_w0(enum dma_kind kind, enum dg_dma_dir dir, uint32_t nents, uint64_t off)
{
	return REC_VALID | (uint64_t)kind << REC_KIND_SHIFT | (uint64_t)dir << REC_DIR_SHIFT |
	       (uint64_t)nents << REC_NENTS_SHIFT | off;
}

/* ---- a translated address space: a domain and its IOVA allocator ----------------------------- */

struct dma_space {
	struct dg_domain *dom;
	struct dg_pt *pt;
	uint32_t dom_id;
	struct dg_iova_space *iova;
	uint64_t granule;
	uint64_t gmask; /* granule - 1 */
	unsigned int gshift;
	uint64_t first; /* allocatable IOVAs [first, last] */
	uint64_t last;
	uint64_t limit;	    /* min(device mask, last): allocation limit */
	bool write_only_ok; /* the format can express write-only (not ARM stage 1) */
	struct dma_rec_table rec;
	/* Streams (stream.c). */
	uint64_t gen;	/* unique, never reused, never 0: key of dma_stream.gen */
	uint32_t cspan; /* granules of a chunk (one last-level table's), 0: no streams */
	pthread_mutex_t chunk_lock;  /* the lists below */
	struct dma_chunk *spare;     /* chunks whose every granule retired, table kept */
	struct dma_chunk *chunks;    /* every chunk held (current, draining or spare) */
	uint32_t nspare, nchunks;    /* under chunk_lock */
	uint32_t cmax;		     /* chunks held at most (stream.c) */
	_Atomic uint64_t chunk_gets; /* chunks taken by streams (tests, stats; chunk_lock) */
};

/* ---- policies ---------------------------------------------------------------------------- */

/*
 * What varies between policies. All hooks are called from any CPU thread concurrently, with
 * arguments already checked on their face (dir known, len > 0, no wrap). They return 0 or a
 * negative errno and count nothing (the callers in map.c count).
 */
struct dma_fixed;

struct dma_policy_ops {
	int (*map)(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
		   unsigned int attrs, enum dma_kind kind, uint64_t *dma);
	int (*unmap)(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		     unsigned int attrs, enum dma_kind kind, struct dg_dma_batch *b);
	int (*map_sg)(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
		      enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma);
	int (*unmap_sg)(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b);
	/* Only bounce syncs; NULL elsewhere. sync counts its own errors (dma_err), so the
	 * entry point tail-calls it; sync_sg's are counted by its entry point. */
	int (*sync)(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		    bool for_cpu);
	int (*sync_sg)(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
		       enum dg_dma_dir dir, bool for_cpu);
	/* Window and pool: their fixed part (dma/fixed_map.h), which the bulk calls take;
	 * NULL elsewhere. */
	const struct dma_fixed *fixed;
};

extern const struct dma_policy_ops dma_identity_ops;
extern const struct dma_policy_ops dma_strict_ops; /* strict, lazy (retire differs) */
extern const struct dma_policy_ops dma_window_ops;
extern const struct dma_policy_ops dma_bounce_ops;
extern const struct dma_policy_ops dma_pool_ops;

/* ---- lazy (lazy.c) -------------------------------------------------------------------------- */

/*
 * One CPU's flush queue. Everything is under @lock. The ring holds the unmapped ranges in the
 * order they were queued, in at most two generations: while a flush is in flight (@busy),
 * [head, busy_end) is what it covers and [busy_end, tail) the open generation; otherwise all
 * of [head, tail) is open. The flush in flight covers exactly the entries queued before it
 * started (busy_end is the tail at its start); when its completion is observed those are
 * released and head moves to busy_end. One flush is in flight at a time per queue.
 */
struct lazy_fq {
	struct dg_spinlock lock;
	uint32_t head;		    /* oldest entry (free-running) */
	uint32_t tail;		    /* next free slot (free-running) */
	uint32_t busy_end;	    /* busy: the end of what the flush in flight covers */
	struct iova_owned *ring;    /* the ranges and their allocator tokens */
	struct dg_pt_gather open;   /* unmapped since the last flush started: hull, tables */
	uint64_t open_first_ns;	    /* when the oldest entry of the open generation was queued */
	uint32_t open_first_pos;    /* its position */
	uint32_t open_count;	    /* entries in the open generation */
	bool busy;		    /* a flush is in flight: */
	uint64_t busy_seq;	    /*   its invalidation sequence number */
	struct dg_pt_gather busy_g; /* its tables */
	uint64_t busy_first_ns;	    /*   oldest entry it covers, queued at */
	uint32_t busy_first_pos;    /*   ... and at position */
	/* statistics (under lock) */
	uint64_t flushes;
	uint64_t timeout_flushes;
	uint64_t full_waits;
	uint64_t window_max_ns;
	uint64_t window_max_unmaps;
} dg_cacheline;

struct dma_lazy {
	uint32_t qsize; /* power of two */
	uint64_t timeout_ns;
	unsigned int ncpus;
	struct lazy_fq *fq; /* [ncpus] */
};

int dma_lazy_create(struct dg_dma_dev *dd, struct dma_lazy **out);
/* Flush and release everything (idle device); -ETIMEDOUT leaves the queues as they are. */
int dma_lazy_drain(struct dg_dma_dev *dd, struct dma_lazy *lz);
void dma_lazy_destroy(struct dma_lazy *lz);
/* Queue an unmap of [iova, iova + size) (pt unmap included). */
int dma_lazy_retire(struct dg_dma_dev *dd, uint64_t iova, uint64_t size, uint64_t token);
/* Queue @n claimed unmaps at once (dg_dma_unmap_bulk()): the range of entry i starts at
 * dma[i] rounded down to the granule, size[i] bytes, token[i]. One lock, one reclaim and the
 * page-table entries by runs of neighbouring IOVAs; the same queue states as @n calls of
 * dma_lazy_retire() in a row (the flush starts and full-queue waits at the same entries).
 * 0, or -ETIMEDOUT: the devices did not answer a full-queue wait, and the entries not queued
 * yet were retired the strict way, together (dma_strict_retire_many(): one wait), and that
 * wait timed out too - quarantined, as dma_lazy_retire(). */
int dma_lazy_retire_bulk(struct dg_dma_dev *dd, const uint64_t *dma, const uint64_t *size,
			 const uint64_t *token, unsigned int n);
/* Timeout flushes and reclaim (housekeeping). */
void dma_lazy_tick(struct dg_dma_dev *dd, uint64_t now);
void dma_lazy_stats(const struct dma_lazy *lz, struct dg_dma_stats *st);

/* ---- bounce (bounce.c) ------------------------------------------------------------------------ */

#define BOUNCE_UNIT_SHIFT 6  /* 64-byte units */
#define BOUNCE_MAX_ORDER  12 /* 64 << 12 = 256 KiB */
#define BOUNCE_MAX	  (1ull << (BOUNCE_UNIT_SHIFT + BOUNCE_MAX_ORDER))
#define BOUNCE_NONE	  UINT32_MAX

struct dma_bounce;
int dma_bounce_create(struct dg_dma_dev *dd, struct dma_space *sp, struct dma_bounce **out);
void dma_bounce_destroy(struct dg_dma_dev *dd, struct dma_space *sp, struct dma_bounce *bo);
/* Give back a claimed slot (batch end). */
void dma_bounce_free(struct dg_dma_dev *dd, uint64_t dma);
/* dg_dma_map_bulk() (arguments and buffers checked) and dg_dma_unmap_bulk() (arguments checked,
 * the addresses not) under bounce; they count, errors through dma_err(). */
int dma_bounce_map_bulk(struct dg_dma_dev *dd, void *const *bufs, unsigned int n, size_t len,
			enum dg_dma_dir dir, unsigned int attrs, uint64_t *dma);
int dma_bounce_unmap_bulk(struct dg_dma_dev *dd, const uint64_t *dma, unsigned int n, size_t len,
			  enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b);
void dma_bounce_stats(const struct dma_bounce *bo, struct dg_dma_stats *st);
/* Validate the areas; *live gets the number of live (mapped) slots. */
int dma_bounce_check(const struct dma_bounce *bo, FILE *why, uint64_t *live);
uint64_t dma_bounce_bytes(const struct dma_bounce *bo);

/* ---- window (window.c) ------------------------------------------------------------------------ */

struct dma_window {
	uint64_t base; /* window IOVA */
	uint64_t size;
	uint64_t page;
	uintptr_t direct; /* host start of the direct region */
	uint64_t direct_size;
};

/* ---- pools (pool.c) ---------------------------------------------------------------------------- */

#define DMA_MAX_POOLS 32

struct dg_dma_pool {
	struct dg_dma_dev *dd;
	uint8_t *mem;	   /* buffers */
	uint64_t mem_size; /* bytes mapped */
	uint64_t iova;	   /* DMA address of mem (identity: mem) */
	uint64_t iova_size;
	size_t buf_size;
	uint32_t nbufs;
	enum dg_dma_dir dir;
	unsigned int slot;	/* index in dd->pools */
	_Atomic uint64_t head;	/* free stack: ABA tag << 32 | (index + 1), 0 = empty */
	_Atomic uint32_t *next; /* next[i]: index + 1 below buffer i on the stack */
	_Atomic uint8_t *out;	/* out[i]: buffer i is handed out */
};

/* Is [buf, buf + len) inside a pool of @dd? Then *dma gets its fixed address. */
bool dma_pool_lookup(struct dg_dma_dev *dd, uintptr_t buf, size_t len, enum dg_dma_dir dir,
		     uint64_t *dma);
/* Is [dma, dma + len) inside a pool's IOVA range? */
bool dma_pool_owns(struct dg_dma_dev *dd, uint64_t dma, size_t len);

/* ---- the device ---------------------------------------------------------------------------- */

struct dma_quarantine {
	struct dma_quarantine *next;
	struct dma_space *sp;
	uint64_t seq;		    /* invalidation to confirm */
	struct dg_pt_gather gather; /* its tables */
	uint32_t n;
	uint64_t iova[DG_DMA_BATCH_MAX]; /* IOVA ranges to free once confirmed */
	uint64_t size[DG_DMA_BATCH_MAX];
	uint64_t token[DG_DMA_BATCH_MAX]; /* a stream granule's token (DMA_TOKEN_STREAM), a
					     two-step unlink's range (DMA_TOKEN_LINK), else 0 */
	void *mem;			  /* host memory to free once confirmed (coherent, pool) */
};

/* Everything a policy owns (dma_dev.c). */
struct pstate {
	enum dg_dma_policy policy;
	const struct dma_policy_ops *ops;
	struct dma_space *sp;
	struct dma_lazy *lazy;
	struct dma_bounce *bounce;
	struct dma_window win;
};

/* An old policy state the device did not confirm leaving (context change timed out). */
struct dma_zombie {
	struct dma_zombie *next;
	struct pstate ps;
};

struct dg_dma_dev {
	/* Fixed while the policy does not change (the device is idle when it does). */
	struct dg_dma *dma;
	struct dg_device *dev;
	uint32_t rid;
	uint64_t gen; /* unique, never reused: keys of the per-thread caches */
	enum dg_dma_policy policy;
	const struct dma_policy_ops *ops;
	struct dg_dma_dev_config cfg;
	uint64_t mask;
	uint64_t max_seg;
	uint64_t boundary;	   /* mask */
	bool reference;		   /* DG_DMA_DEV_LINUX_REFERENCE */
	struct dma_space *sp;	   /* NULL under identity */
	struct dma_lazy *lazy;	   /* lazy only */
	struct dma_bounce *bounce; /* bounce only */
	struct dma_window win;	   /* window only */
	/* Pools: slots published with a release store, read with acquire loads. */
	_Atomic(struct dg_dma_pool *) pools[DMA_MAX_POOLS];
	_Atomic uint32_t nr_pools_hw;  /* slots in use are below this */
	_Atomic uint32_t nr_pools;     /* pools alive (written under pool_lock) */
	pthread_mutex_t pool_lock;     /* pool create/destroy */
	uint64_t pool_bytes;	       /* under pool_lock */
	_Atomic uint64_t iova_states;  /* two-step ranges alive */
	_Atomic uint64_t open_batches; /* those of threads without a block: dma_open_batches() */
	_Atomic uint64_t persistent;   /* bytes mapped for good: pools, window direct region,
					 shadow areas, coherent memory */
	pthread_mutex_t coh_lock;      /* identity coherent allocations: */
	struct coh_ent *coh_list;      /*   under coh_lock */
	/* Statistics. */
	_Atomic(struct dma_tstats *) tstats; /* per-thread blocks (push with release CAS) */
	_Atomic uint64_t err[ERR_NR];
	/* Unmaps whose invalidation wait timed out. */
	pthread_mutex_t q_lock;
	struct dma_quarantine *quarantine; /* under q_lock */
	_Atomic uint64_t nr_quarantined;
	struct dma_zombie *zombies; /* under dma->lock */
	struct dg_dma_dev *next;    /* dma->devs, under dma->lock */
};

struct dg_dma {
	struct dg_iommu *mmu;
	struct dg_dma_config cfg;
	unsigned int ncpus;
	pthread_mutex_t lock;	 /* devs, force_translation, housekeeping state */
	struct dg_dma_dev *devs; /* under lock */
	bool force_translation;	 /* under lock (read unlocked at create: benign, see dma_dev.c) */
	_Atomic(const struct dg_dma_fail_hook *) fail;
	/* housekeeping */
	pthread_t hk_thread;
	bool hk_started;
	bool hk_stop;		/* under lock */
	pthread_cond_t hk_cond; /* signalled on stop */
	uint64_t last_trim_ns;	/* under lock */
};

/* ---- helpers shared by the files ----------------------------------------------------------- */

uint64_t dma_clock_default(void *cookie); /* CLOCK_MONOTONIC (dma.c) */

static inline uint64_t dma_now(const struct dg_dma *dma)
{
	return dma->cfg.clock ? dma->cfg.clock(dma->cfg.clock_cookie) : dma_clock_default(NULL);
}

/* Injected failure at @point, or 0. One acquire load when no hook is installed. */
static inline int dma_fail(struct dg_dma_dev *dd, enum dg_dma_fail_point point)
{
	/* Acquire pairs with the release store in dg_dma_set_fail_hook(). */
	const struct dg_dma_fail_hook *h =
		atomic_load_explicit(&dd->dma->fail, memory_order_acquire);

	return dg_unlikely(h != NULL) ? h->fail(h->cookie, point, dd->rid) : 0;
}

/* Count a failure by kind and return it. */
int dma_err(struct dg_dma_dev *dd, int err);

/* This thread's counter block of @dd. A hot path that calls nothing else compares
 * dma_tls_last.gen itself and tail-calls its slow way, so it stays a leaf (map.c). */
static inline struct dma_tstats *dma_tstats(struct dg_dma_dev *dd)
{
	return dg_likely(dma_tls_last.gen == dd->gen) ? dma_tls_last.t : dma_tstats_slow(dd);
}

/* Single-writer increment (the block belongs to this thread). */
static inline void ctr_add(struct dma_tstats *t, enum dma_ctr c, uint64_t v)
{
	atomic_store_explicit(&t->c[c], atomic_load_explicit(&t->c[c], memory_order_relaxed) + v,
			      memory_order_relaxed);
}

/* Count @v (1 or -1 as uint64_t) batches opened by this thread on @dd; @t = dma_tstats(dd). The
 * shared out-of-memory block (owner 0) is written by any thread: its count would race, so
 * such a thread counts on the device with an atomic add instead. */
static inline void dma_open_batches_add(struct dg_dma_dev *dd, struct dma_tstats *t, uint64_t v)
{
	_Atomic uint64_t *n = &t->open_batches;

	if (dg_likely(t->owner))
		atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + v,
				      memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&dd->open_batches, v, memory_order_relaxed);
}

static inline void ctr_max(_Atomic uint64_t *m, uint64_t v)
{
	if (v > atomic_load_explicit(m, memory_order_relaxed))
		atomic_store_explicit(m, v, memory_order_relaxed);
}

extern _Thread_local unsigned int dma_tls_cpu __attribute__((tls_model("initial-exec")));
extern _Thread_local unsigned int dma_tls_cpu_left __attribute__((tls_model("initial-exec")));
unsigned int dma_cpu_refresh(unsigned int n);

/* The slot of the CPU this thread last ran on (re-read every 256 calls, so stale for a while
 * after a migration), < @n. It only chooses which per-CPU structure a call tries first (a
 * bounce area, a lazy flush queue); those are locked, so a stale CPU costs contention and
 * cache misses, never correctness, and no capacity: a bounce map that its CPU's area cannot
 * serve takes from every other area of the direction and reclaims the slots other threads
 * keep cached (bounce.c, "Reclaim"). The caches the fast paths use without a lock are per
 * thread, not per CPU. */
static inline unsigned int dma_cpu(unsigned int n)
{
	if (dg_unlikely(!dma_tls_cpu_left--))
		return dma_cpu_refresh(n);
	return dg_likely(dma_tls_cpu < n) ? dma_tls_cpu : dma_tls_cpu % n;
}

/* Permission bits for a direction. */
static inline unsigned int dma_dir_prot(enum dg_dma_dir dir)
{
	/* TO_DEVICE -> READ and FROM_DEVICE -> WRITE share their values: a test and a move */
	static_assert(DG_DMA_TO_DEVICE == DG_PROT_READ && DG_DMA_FROM_DEVICE == DG_PROT_WRITE,
		      "dma_dir_prot");
	return dir != DG_DMA_BIDIRECTIONAL ? (unsigned int)dir : DG_PROT_READ | DG_PROT_WRITE;
}

static inline bool dma_dir_ok(unsigned int dir)
{
	return dir <= DG_DMA_FROM_DEVICE;
}

/* dma_space lifetime (map.c). */
int dma_space_create(struct dg_dma_dev *dd, const struct dg_pt_geometry *geo, uint64_t first,
		     uint64_t last, struct dma_space **out);
void dma_space_destroy(struct dma_space *sp);

/*
 * Is the list a page list: whole granules, aligned (the last may be shorter), at most
 * DMA_PAGE_LIST_MAX of them, a boundary no smaller than a granule? Its entries then sit at
 * i * granule in the IOVA range (no boundary padding: a granule-aligned position never has a
 * boundary less than a granule ahead) and map with pt_map_granules().
 */
#define DMA_PAGE_LIST_MAX 64
bool dma_sg_is_pages(const struct dg_dma_dev *dd, const struct dg_dma_sg *sg, unsigned int nents,
		     uint64_t g);

/* Translated map of a list of host segments into one IOVA range of @sp (map.c). */
int dma_xl_map(struct dg_dma_dev *dd, struct dma_space *sp, const struct dg_dma_sg *sg,
	       unsigned int nents, enum dg_dma_dir dir, enum dma_kind kind, uint64_t *iova_out,
	       uint64_t *dma_out);
/* Claim (validate and invalidate) the record of a translated mapping (map.c); *token gets
 * the IOVA range's allocator token (iova_owned.h). */
int dma_xl_claim(struct dma_space *sp, uint64_t dma, uint64_t len, enum dg_dma_dir dir,
		 enum dma_kind kind, uint32_t nents, uint64_t *iova, uint64_t *iova_size,
		 uint64_t *token);
/* Remove [iova, iova + size) from @sp and give the IOVA back (with its allocator @token, 0 if
 * none; not if !@free_iova), strictly (map.c): at @b's end when @b and @free_iova, else before
 * returning; @mem (not with a batch) is freed once no device can reach it. */
int dma_strict_retire(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t iova, uint64_t size,
		      bool free_iova, uint64_t token, struct dg_dma_batch *b, void *mem);
/* Submit an invalidation of @cmds and wait (counts submits and waits). */
int dma_inval(struct dg_dma_dev *dd, const struct dg_inval_cmd *cmds, size_t n, uint64_t *seq);
/* dma_inval() in two halves: submit (*seq: what to wait for), then wait. The submit never
 * fails (0 always: a refused command becomes a DOMAIN, then a GLOBAL one), so *seq always
 * covers the commands and only the wait can fail (-ETIMEDOUT): what to park in quarantine.
 * The submit is the DMA layer's one way (map.c): iommu/inval.h's two steps back to back. */
int dma_inval_submit(struct dg_dma_dev *dd, const struct dg_inval_cmd *cmds, size_t n,
		     uint64_t *seq);
int dma_inval_wait(struct dg_dma_dev *dd, uint64_t seq);
/* dg_dma_batch_end() of a batch that undoes a failed call's maps (map.c): its error (an
 * unconfirmed wait: the IOVAs parked in quarantine) returned, not counted - the call returns
 * and counts its own error only, as every other undo path (dma.h err_timeout: calls that
 * returned -ETIMEDOUT). */
int dma_batch_end_undo(struct dg_dma_batch *b);
/* Strict retirement of @n claimed ranges with one invalidation and one wait (map.c). */
int dma_strict_retire_many(struct dg_dma_dev *dd, const uint64_t *dma, const uint64_t *size,
			   const uint64_t *token, unsigned int n);
/* Invalidate what @g covers in @sp and wait; then release its tables. */
int dma_flush_gather(struct dg_dma_dev *dd, struct dma_space *sp, struct dg_pt_gather *g);
/* Park a timed-out invalidation's IOVAs (map.c); retried by dma_quarantine_retry(). */
void dma_quarantine_add(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t seq,
			struct dg_pt_gather *g, const uint64_t *iova, const uint64_t *size,
			uint32_t n, void *mem);
/* dma_quarantine_add() with the ranges' tokens (stream granules go back to their chunks). */
void dma_quarantine_add_tok(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t seq,
			    struct dg_pt_gather *g, const uint64_t *iova, const uint64_t *size,
			    const uint64_t *token, uint32_t n, void *mem);
int dma_quarantine_retry(struct dg_dma_dev *dd, bool wait);
/* Translated unmap shared by strict, window (on demand) and pool fallbacks. */
int dma_xl_unmap(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t dma, size_t len,
		 enum dg_dma_dir dir, enum dma_kind kind, uint32_t nents, struct dg_dma_batch *b);
/* Fill sg[].dma_addr/dma_len of a list mapped at @dma_first contiguously (map.c). */
unsigned int dma_sg_segments(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			     uint64_t dma_first, uint64_t granule);
/* Total IOVA bytes a list takes in a space of granule @g, with boundary padding (map.c). */
int dma_sg_layout(struct dg_dma_dev *dd, const struct dg_dma_sg *sg, unsigned int nents, uint64_t g,
		  uint64_t *total);

/*
 * Put ranges about to be given back to the allocator in descending address order, so its
 * magazine hands them out again ascending and a ring keeps neighbouring IOVAs (map.c): a
 * natural merge sort of at most DG_DMA_BATCH_MAX ranges, linear for one or two runs.
 */
void dma_order_frees(struct iova_owned *fr, uint32_t n);

/* Make room for @n more entries (n <= DG_DMA_BATCH_MAX): flush the batch early if it lacks
 * them, as a full batch does (map.c). */
void dma_batch_room(struct dg_dma_batch *b, uint32_t n);

/* Kinds of batch entries, in the low bits of ent[].size (sizes are multiples of 64; map.c). */
#define DMA_BATCH_IOVA	 1u /* IOVA range to unmap, free after the wait (token: the IOVA's) */
#define DMA_BATCH_LINK	 2u /* two-step unlink: invalidate, then settle (token: the links) */
#define DMA_BATCH_BOUNCE 3u /* bounce slot to free (addr: its DMA address; no invalidation) */
#define DMA_BATCH_KIND	 3u

/* Append an entry to @b, which has room for it (dma_batch_room()); @size_kind is the size
 * with the entry's kind in its low bits. */
static inline void dma_batch_put(struct dg_dma_batch *b, uint64_t addr, uint64_t size_kind,
				 uint64_t token)
{
	b->ent[b->n].addr = addr;
	b->ent[b->n].size = size_kind;
	b->ent[b->n].token = token;
	b->n++;
}

/* Defer the release of a claimed bounce slot to the batch's end (map.c), inline: a full
 * batch flushes first (dma_batch_room()). */
static inline void dma_batch_add_bounce(struct dg_dma_batch *b, uint64_t dma)
{
	if (dg_unlikely(b->n == DG_DMA_BATCH_MAX))
		dma_batch_room(b, 1);
	dma_batch_put(b, dma, DMA_BATCH_BOUNCE, 0);
}

/* ---- the two-step API (iova_link.c) ------------------------------------------------------- */

/*
 * A two-step range's private part (dg_dma_iova_state.links): the page-table slots kept for it
 * and one word per granule (iova_link.c says what the words hold). DMA_LINK_PENDING marks a
 * granule unlinked in a batch whose end has not confirmed the invalidation yet: a link there
 * is refused (-EEXIST), the range cannot be freed (-EBUSY).
 */
#define DMA_LINK_PENDING (1ull << 61)

struct pt_slots; /* pt/pt_fast.h */

struct dma_links {
	struct pt_slots *slots; /* NULL: the general page-table path (Linux-like reference) */
	uint64_t addr;		/* IOVA of granule 0 (st->addr) */
	unsigned int gshift;	/* log2 granule */
	uint64_t tmpl[3];	/* pt_slots_tmpl() of each direction's permissions */
	/* The counter block of the thread that counted here last (iova_link.c); checked against
	 * dma_tls_tid on use, so a handover to another thread only costs one lookup. */
	_Atomic(struct dma_tstats *) ts;
	_Atomic(const struct dg_dma_fail_hook *) *fail; /* &dd->dma->fail: the link tests it */
	_Atomic uint64_t w[];				/* one word per granule */
};

/*
 * Batch entries of two-step unlinks (map.c): their pages are already cleared from the table,
 * the batch invalidates [iova, iova + size) with the others and, after the wait, makes the
 * granules linkable again (dma_links_settle()). No IOVA goes back.
 */
void dma_batch_add_link(struct dg_dma_batch *b, uint64_t iova, uint64_t size, struct dma_links *l);

/* The invalidation covering unlinks of [iova, iova + size) of @l completed: those granules
 * can be linked again. (A batch whose wait timed out parks its unlinks in quarantine with
 * token (uintptr_t)l | DMA_TOKEN_LINK and settles them once a completion confirms: until
 * then they stay pending, so no link reuses an IOVA the IOTLBs may still translate to the
 * old buffer, and the range cannot be freed.) */
#define DMA_TOKEN_LINK 2ull /* quarantine only; bit 1 is clear in every other token */
static inline void dma_links_settle(struct dma_links *l, uint64_t iova, uint64_t size)
{
	const uint64_t i = (iova - l->addr) >> l->gshift, k = size >> l->gshift;

	atomic_store_explicit(&l->w[i], 0, memory_order_relaxed); /* k >= 1: a ring slot's one */
	for (uint64_t j = 1; dg_unlikely(j < k); j++)
		atomic_store_explicit(&l->w[i + j], 0, memory_order_relaxed);
}

/* ---- streams (stream.c) ------------------------------------------------------------------ */

/*
 * The token (record w3, batch entry token) of a granule handed out by a stream: its chunk's
 * address with this bit set (allocator tokens are node addresses: the bit is clear). Every
 * place that gives a token back (batch end, strict retire, quarantine) sends these to
 * dma_stream_retire() instead of the allocator.
 */
#define DMA_TOKEN_STREAM 1ull

static inline bool dma_token_stream(uint64_t token)
{
	return token & DMA_TOKEN_STREAM;
}

/* Streams of a new space (off when not @on or when its geometry does not suit them) / of a
 * dying one. */
void dma_stream_init(struct dma_space *sp, bool on);
void dma_stream_fini(struct dma_space *sp);

/*
 * Map @n one-granule buffers (bufs[i], each inside one granule, checked by the caller;
 * @pbits: the OR of their granules' addresses) from this thread's stream @t of @sp, writing
 * their records:
 * 0 with dma[] set, or 1 when the stream cannot take them (nothing changed: the caller takes
 * the allocator path). Strict and lazy (not the reference). Records of @kind (a bulk
 * call's and dg_dma_map_single()'s KIND_SINGLE, dg_dma_map_page()'s KIND_PAGE).
 */
int dma_stream_map(struct dma_space *sp, struct dma_tstats *t, void *const *bufs, uint64_t pbits,
		   unsigned int n, size_t len, enum dg_dma_dir dir, enum dma_kind kind,
		   uint64_t *dma);

/* Clear the entries of the @n granules from @iova, claimed stream granules of the chunk of
 * @token lying in it (dma_stream_run(), dma_stream_within()): a bulk unmap's run
 * (b->run_clear), cleared by batch_issue before it submits the invalidation. */
void dma_stream_clear(struct dma_space *sp, uint64_t token, uint64_t iova, uint32_t n);
bool dma_stream_within(struct dma_space *sp, uint64_t token, uint64_t iova, uint32_t n);
/* A hint: start taking the cache lines of the entries of the @n granules from @iova (a
 * claimed run of the chunk of @token, inside it by construction: stream.c) for writing,
 * ahead of dma_stream_clear() (a bulk unmap's run). */
void dma_stream_run(struct dma_space *sp, uint64_t token, uint64_t iova, uint32_t n);

/* dma_stream_map() of one buffer at @buf (inside one granule, not NULL): the single calls. */
int dma_stream_map_one(struct dma_space *sp, struct dma_tstats *t, uintptr_t buf, size_t len,
		       enum dg_dma_dir dir, enum dma_kind kind, uint64_t *dma);

/* @k granules of the chunk of @token (a stream token) are done with: unmapped, and the
 * invalidation covering that completed (strict: its wait; lazy: the flush covering the unmap,
 * observed by the queue's reclaim). The last one makes the chunk spare. */
void dma_stream_retire(struct dma_space *sp, uint64_t token, uint64_t k);

/* The allocator said -ENOSPC: give back this thread's chunk's unused rest and every spare
 * chunk. True when that freed anything (worth a retry). */
bool dma_stream_drain(struct dma_space *sp, struct dma_tstats *t);

/* Every held chunk's kept table still linked (pt_slots_check), spare chunks wholly retired
 * with every entry and record clear, the lists' counts right: 0 or -EUCLEAN (a line on @why).
 * The device quiet (dg_dma_dev_check()). */
int dma_stream_check(struct dma_space *sp, FILE *why);

/* A chunk as dma_stream_census() sees it (tests). */
struct dma_stream_chunk {
	uint64_t token;	  /* its granules' token */
	uint64_t iova;	  /* its first IOVA (cspan granules) */
	uint64_t retired; /* granules retired since a stream took it */
	bool spare;	  /* on the spare list (then wholly retired) */
};

/* Every chunk of @sp (held or spare), up to @max of them into @out; returns how many there
 * are. The device quiet (tests: each granule of a held chunk is exactly one of mapped, waiting
 * for its invalidation, retired, or a stream's unused rest). */
unsigned int dma_stream_census(struct dma_space *sp, struct dma_stream_chunk *out,
			       unsigned int max);

/* dma_dev.c / dma_stats.c */
uint64_t dma_dev_live(const struct dg_dma_dev *dd);
/* 0 when the device is idle (lazy queues drained, quarantine confirmed), else -EBUSY or
 * -ETIMEDOUT. dma->lock held. */
int dma_dev_busy(struct dg_dma_dev *dd);
int dma_dev_force_strict(struct dg_dma_dev *dd);

/* dma.c */
void dma_hk_kick(struct dg_dma *dma);

#endif /* DG_DMA_INTERNAL_H */
