/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_priv.h - the IOVA allocator's private structures (never installed).
 *
 * Pieces and the files that own them:
 *   iova_tree.c    the augmented AVL tree of ranges (the only record of what is taken)
 *   iova_index.c   the live-range index: first byte -> node, read without a lock, so a free
 *                  is validated in O(1)
 *   iova_mag.c     per-thread magazine caches and the depot in front of the tree
 *   iova_steal.h   the owner/stealer handshake of a thread cache (the bounce policy's too)
 *   iova_linux.c   the Linux 6.1 reference search (cached node, linear walk)
 *   iova.c         the public API: argument checks, dispatch, stats, check and dump
 *
 * Lock order (a thread holding one may take only those to its right):
 *   registry lock -> thread cache (stealer's steal, or owner's busy) -> depot lock -> tree lock
 * An owner waiting for a stealer to finish holds nothing of these (iova_mag.c).
 * The live-range index has no lock: it changes only under the tree lock and is read without
 * one (iova_index.c). Tree nodes of allocations are never freed before the space is (they go
 * to a free list and are reused), so a lock-free reader never touches freed memory.
 */
#ifndef DG_IOVA_PRIV_H
#define DG_IOVA_PRIV_H

#include <dmaguard/iova.h>

#include "base/compiler.h"
#include "base/spinlock.h"
#include "iova/iova_steal.h"

#include <stdio.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * For the structure checks (dg_iova_check() and the cache's): unless @cond holds, say why on
 * @why (when not NULL: one line, @prefix then the printf-style rest), set err to -EUCLEAN
 * and go to out.
 */
#define IOVA_CHECK_OR_OUT(why, prefix, cond, ...)                 \
	do {                                                      \
		if (!(cond)) {                                    \
			if (why) {                                \
				fprintf(why, prefix __VA_ARGS__); \
				fputc('\n', why);                 \
			}                                         \
			err = -EUCLEAN;                           \
			goto out;                                 \
		}                                                 \
	} while (0)

#define IOVA_ORDERS	(DG_IOVA_MAG_MAX_ORDER + 1) /* cached size classes */
#define IOVA_ZONES	2			    /* cache zones, see iova_mag.c */
#define IOVA_ZONE_FULL	0  /* ranges for requests whose limit reaches the end of the space */
#define IOVA_ZONE_DMA32 1  /* ranges below 4 GiB, for limits from 4 GiB - 1 up */
#define IOVA_MAX_HEIGHT 96 /* AVL height bound for 2^64 nodes is < 93 */

enum iova_kind {
	IOVA_KIND_ALLOC = 0,	/* an allocation, live or cached */
	IOVA_KIND_RESERVED = 1, /* never handed out */
	IOVA_KIND_ANCHOR = 2,	/* the node at end + 1 that owns the topmost gap */
};

/*
 * State word of an ALLOC node: gen << IOVA_ST_GEN_SHIFT | low, where low is
 *   IOVA_LIVE(npfn)  live, indexed node (see IOVA_INDEXED): the granules asked for, < 1024
 *   IOVA_ST_LIVE     live, node not indexed: the granules asked for are in n->npfn
 *   IOVA_ST_CACHED   in exactly one magazine or depot magazine (indexed nodes only)
 *   0                out of the tree, on the space's node free list
 * gen counts the node's incarnations (it is bumped each time a recycled node is put back
 * into the tree), so a lock-free free that found the node by a stale chain cannot mistake a
 * new incarnation for the one it looked up: its compare-exchange expects the old gen.
 * Transitions of an indexed node:
 *   -> LIVE     by the tree allocator (tree lock), release store: publishes the node;
 *   LIVE -> CACHED   by a free (any thread, inside its thread cache), compare-exchange
 *               (acq_rel): exactly one of two racing frees wins, the other is refused;
 *               by an owned free (iova_owned.h), a store inside the thread cache;
 *   CACHED -> LIVE   by the thread that popped the node from a magazine, inside the thread
 *               cache it popped it from (release store: the new owner may hand the IOVA to
 *               another thread, whose free must see LIVE);
 *   CACHED -> 0      by the release to the tree (tree lock), after the node left every
 *               magazine.
 * No store ever races with the compare-exchange: a node is in a magazine only while CACHED,
 * and CACHED nodes are touched only by whoever took them out of a magazine.
 */
#define IOVA_ST_LIVE	  1u
#define IOVA_ST_CACHED	  2u
#define IOVA_ST_SHIFT	  2
#define IOVA_ST_GEN_SHIFT 12
#define IOVA_ST_LOW	  ((1ull << IOVA_ST_GEN_SHIFT) - 1)
#define IOVA_ST_NPFN(st)  (((st)&IOVA_ST_LOW) >> IOVA_ST_SHIFT)
#define IOVA_LIVE(npfn)	  (((uint64_t)(npfn) << IOVA_ST_SHIFT) | IOVA_ST_LIVE)
/*
 * IOVA_LIVE() of the granules in @size bytes, in four instructions, for any @size: with
 * x = granules - 1 = (size - 1) >> shift, it is rotl(x, 2) + 5, which is x * 4 + 5 when
 * x < 2^62, and otherwise (size 0, or a size near 2^64 with a granule of 1 or 2) has low bits
 * rotl(x, 2) & 3 = x >> 62 != 0, so + 5 never ends in LIVE's 01: it never equals a LIVE low
 * state, and a free of such a size is refused without a special test.
 */
static inline uint64_t iova_rotl2(uint64_t x)
{
	return x << IOVA_ST_SHIFT | x >> (64 - IOVA_ST_SHIFT);
}
#define IOVA_LIVE_SIZE(s, size) \
	(iova_rotl2(((size)-1) >> (s)->shift) + ((1u << IOVA_ST_SHIFT) | IOVA_ST_LIVE))
/* Indexed nodes: cacheable ALLOC nodes of a space with magazines. */
#define IOVA_INDEXED(s, n) ((s)->mags && (n)->mag_order >= 0)

struct iova_node {
	struct iova_node *left, *right, *parent; /* tree links (tree lock); left: free list */
	uint64_t lo;	       /* first pfn (tree lock; fixed while in the tree) */
	uint64_t len;	       /* granules reserved (ditto) */
	uint64_t gap;	       /* free pfns right below lo (tree lock) */
	uint64_t max_gap;      /* largest gap in this subtree (tree lock) */
	int8_t gap_order;      /* largest k: the gap holds an aligned 2^k block; -1 (tree lock) */
	int8_t max_order;      /* largest gap_order in this subtree (tree lock) */
	uint8_t height;	       /* AVL height, leaves 1 (tree lock) */
	uint8_t kind;	       /* enum iova_kind (fixed while in the tree) */
	int8_t mag_order;      /* size class when cacheable (len 2^k, aligned), else -1 (ditto) */
	uint8_t zone;	       /* cache zone of the range (ditto) */
	uint8_t cc_idx;	       /* zone * IOVA_ORDERS + mag_order when cacheable (ditto) */
	uint64_t npfn;	       /* granules asked for, nodes not indexed (tree lock) */
	_Atomic uint64_t hkey; /* index key: lo << shift, the first byte (for lock-free readers) */
	_Atomic(struct iova_node *) hnext; /* index chain (written under the tree lock) */
	_Atomic uint64_t state;		   /* see above */
};

struct iova_tree {
	struct iova_node *root;
	uint64_t start_pfn; /* lowest pfn a gap may start at */
	bool augment;	    /* maintain gap/max_gap/orders (false for the Linux reference) */
	uint64_t nodes;	    /* nodes incl. the anchor */
	uint64_t allocated; /* ALLOC nodes (live + cached) */
	uint64_t reserved;  /* RESERVED nodes */
	uint64_t visits;    /* nodes examined by the current operation */
};

struct iova_mag {
	uint32_t n;			       /* ranges held */
	struct iova_node *e[DG_IOVA_MAG_SIZE]; /* ranges, CACHED, of one class and zone */
};

struct iova_cpu_cache {
	struct iova_mag *loaded; /* pop/push here first (owner); never NULL in a zone the space
				    has (iova_tc_create) */
	struct iova_mag *prev;	 /* always empty or full (owner) */
};

#define IOVA_CCS (IOVA_ZONES * IOVA_ORDERS) /* caches per thread cache: zone * ORDERS + order */

/*
 * A thread's cache for one space (iova_mag.c): what a per-CPU slot was, owned by one thread.
 * The owner touches cc[] and its counters only between iova_tc_enter()/iova_tc_lock() and
 * iova_tc_exit() (sw.busy = 1); a stealer only while it holds sw.steal with busy seen 0.
 */
struct iova_tcache {
	struct iova_steal sw; /* owner and stealers (iova_steal.h; stealers: registry lock) */
	uint64_t hits;	      /* allocations served here (inside the cache: owner, stealer) */
	uint64_t misses;      /* cacheable allocations sent to the tree (ditto) */
	struct iova_cpu_cache cc[IOVA_CCS];
	/* registry links (iova_reg_lock) */
	struct dg_iova_space *space;	   /* the space (fixed while linked) */
	uint64_t space_id;		   /* its id (fixed) */
	struct iova_tcache *snext, *sprev; /* the space's list */
	struct iova_tcache *tnext, *tprev; /* the owner thread's list */
	struct iova_thr *thr;		   /* the owner thread's list head */
} dg_cacheline;

/* A thread's registered caches (its thread-local record; registry lock). */
struct iova_thr {
	struct iova_tcache *head;
};

struct iova_depot {
	struct dg_spinlock lock;
	uint32_t nfull;	    /* full magazines (depot lock) */
	uint32_t nempty;    /* spare empty magazines (depot lock) */
	uint32_t full_low;  /* fewest full magazines since the last trim step (depot lock) */
	uint32_t empty_low; /* fewest empty ones since the last trim step (depot lock) */
	_Atomic uint64_t nfull_pub; /* nfull for stats (single writer: lock holder) */
	struct iova_mag *full[DG_IOVA_DEPOT_MAX];
	struct iova_mag *empty[DG_IOVA_DEPOT_MAX];
} dg_cacheline;

/* A table of the live-range index (iova_index.c); never freed before the space. */
struct iova_itab {
	struct iova_itab *retired; /* tables drained before this one */
	unsigned int shift;	   /* 64 - log2(nb) */
	uint64_t nb;		   /* buckets, a power of two */
	_Atomic(struct iova_node *) b[];
};

struct dg_iova_space {
	/* configuration (immutable) */
	uint64_t granule;
	unsigned int shift;
	uint64_t start_pfn, end_pfn; /* usable pfns [start_pfn, end_pfn] */
	uint64_t dma32_pfn;	     /* last pfn below 4 GiB (may exceed end_pfn) */
	enum dg_iova_algo algo;
	unsigned int flags;
	bool mags;		/* magazines in use */
	uint64_t gmask;		/* granule - 1 */
	uint64_t mag_max_bytes; /* largest cached size in bytes; 0 without magazines */
	uint64_t full_limit;	/* limits at or above this (the last byte) use ZONE_FULL */
	uint64_t dma32_limit;	/* ... else at or above this (4 GiB - 1) ZONE_DMA32 */
	unsigned int nzones;	/* 2 when the space reaches above 4 GiB, else 1 */
	bool memb;		/* owners enter without an RMW (membarrier registered) */
	uint64_t id;		/* unique among the process's spaces, never 0 (iova_tls) */

	/* the tree and what the tree lock protects */
	pthread_mutex_t tree_lock;
	struct iova_tree tree;
	struct iova_node anchor;
	struct iova_node *cached_node;	 /* Linux reference: where the walk starts */
	struct iova_node *cached32_node; /* ... for limits below 4 GiB */
	uint64_t max32_alloc_size;	 /* ... smallest size known not to fit below 4 GiB */

	/* counters written under the tree lock (single writer), read by get_stats */
	_Atomic uint64_t st_tree_allocs, st_tree_frees, st_user_tree_frees, st_visited;
	_Atomic uint64_t st_last_visited, st_max_visited, st_nodes, st_allocated, st_reserved;
	/* counters of rare events (atomic add) */
	_Atomic uint64_t st_alloc_failures, st_bad_frees, st_flushes, st_trimmed;

	/* the live-range index (iova_index.c): written under the tree lock, read without locks */
	_Atomic(struct iova_itab *) itab; /* current table */
	_Atomic(struct iova_itab *) iold; /* the previous one while it drains, else NULL */
	uint64_t imigrate;		  /* buckets of iold below this are drained */
	uint64_t icount;		  /* nodes indexed */
	struct iova_itab *iretired;	  /* drained tables, freed with the space */
	struct iova_node *free_nodes;	  /* recycled ALLOC nodes, linked by left (tree lock) */
	uint64_t nfree_nodes;		  /* ... how many */

	/* thread caches (iova_mag.c): the list and the counts of caches gone (registry lock) */
	struct iova_tcache *tcs;
	uint64_t ntcs;
	_Atomic uint64_t st_gone_hits, st_gone_misses;
	struct iova_depot depot[IOVA_CCS];

	/* fault injection for tests: returns true to make an allocation of @size fail */
	bool (*fail_alloc)(void *arg, size_t size);
	void *fail_arg;
};

/* ---- iova.c ---- */
void *iova_malloc(struct dg_iova_space *s, size_t size);
void *iova_calloc(struct dg_iova_space *s, size_t n, size_t size);
/* Test hook: make allocations fail (see fail_alloc). */
void dg_iova_set_fail_hook(struct dg_iova_space *s, bool (*fail)(void *arg, size_t size),
			   void *arg);
/* Tree-locked bracket of one tree operation: resets and then records the visit counters. */
void iova_tree_op_begin(struct dg_iova_space *s);
void iova_tree_op_end(struct dg_iova_space *s);
/* Return @n CACHED nodes (already out of every magazine) to the tree. Takes the tree lock. */
void iova_release_cached(struct dg_iova_space *s, struct iova_node **nodes, unsigned int n);
/* The same with the tree lock held. */
void iova_release_cached_locked(struct dg_iova_space *s, struct iova_node **nodes, unsigned int n);

/* ---- iova_tree.c (caller holds the tree lock) ---- */
void iova_tree_init(struct iova_tree *t, uint64_t start_pfn, struct iova_node *anchor,
		    uint64_t anchor_pfn, bool augment);
/*
 * Highest pfn x with x aligned to 2^align_order, [x, x + len) free and x + len - 1 <= lim.
 * Returns the node whose gap holds it (the successor of the new range) and sets *pfn, or NULL.
 */
struct iova_node *iova_tree_find_fit(struct iova_tree *t, uint64_t len, unsigned int align_order,
				     uint64_t lim, uint64_t *pfn);
/* Link @x (lo and len set, inside succ's gap) as the predecessor of @succ. */
void iova_tree_insert_below(struct iova_tree *t, struct iova_node *succ, struct iova_node *x);
/* Link @x, whose range is free, by its key (O(log n) descent). */
void iova_tree_insert(struct iova_tree *t, struct iova_node *x);
void iova_tree_remove(struct iova_tree *t, struct iova_node *x);
/* The node with the largest lo <= pfn, or NULL. */
struct iova_node *iova_tree_floor(struct iova_tree *t, uint64_t pfn);
/* The node with the smallest lo > pfn, or NULL. */
struct iova_node *iova_tree_above(struct iova_tree *t, uint64_t pfn);
struct iova_node *iova_tree_prev(struct iova_tree *t, struct iova_node *n);
struct iova_node *iova_tree_next(struct iova_tree *t, struct iova_node *n);
struct iova_node *iova_tree_first(const struct iova_tree *t);
/* Structural check of the whole tree; 0 or -EUCLEAN with a message on @why. */
int iova_tree_check(const struct iova_tree *t, FILE *why);
int8_t iova_gap_order(uint64_t g0, uint64_t len);

/* ---- iova_index.c ---- */
#define IOVA_INDEX_MAX_STEPS 32 /* chain steps of a lock-free lookup before it gives up */

/* The rest of a lock-free lookup of @key: the chain from @n (already checked) onwards, then
 * the draining table (see iova_index_head). */
struct iova_node *iova_index_find_slow(struct dg_iova_space *s, struct iova_node *n, uint64_t key);

/* Keys are first bytes (lo << shift): an unaligned address never matches a key. */
static inline uint64_t iova_index_hash(uint64_t key)
{
	return key * 0x9e3779b97f4a7c15ull; /* Fibonacci hashing: bucket = top bits */
}

/*
 * Lock-free lookup (any thread, no lock), first step: the head of the chain of @key (NULL if
 * the chain is empty). The caller compares its key (after loading its state, see the state
 * word) and continues with iova_index_find_slow() if it is another node. Every answer is a
 * hint: a chain changing under the reader may hide the node (callers confirm a miss under the
 * tree lock with iova_index_lookup_locked()), and a node found is only a candidate whose state
 * word decides.
 */
static inline struct iova_node *iova_index_head(struct dg_iova_space *s, uint64_t key)
{
	uint64_t h = iova_index_hash(key);
	/* Acquire pairs with the release store of the table in grow() (iova_index.c). */
	struct iova_itab *t = atomic_load_explicit(&s->itab, memory_order_acquire);

	/* Acquire pairs with the release store of a chain head in link_head(). */
	return atomic_load_explicit(&t->b[h >> t->shift], memory_order_acquire);
}

int iova_index_init(struct dg_iova_space *s);
void iova_index_fini(struct dg_iova_space *s);
/* A lock-free lookup had to look in the draining table: drain some more of it if the tree lock
 * is free (trylock; lock order allows a thread cache held). */
void iova_index_help_drain(struct dg_iova_space *s);
/* Exact lookup; caller holds the tree lock. */
struct iova_node *iova_index_lookup_locked(const struct dg_iova_space *s, uint64_t key);
/* Caller holds the tree lock for these two. Inserting never fails (a table that cannot grow
 * keeps longer chains). */
void iova_index_insert(struct dg_iova_space *s, struct iova_node *n);
void iova_index_remove(struct dg_iova_space *s, struct iova_node *n);
/* Every chained node hashes to where it is and is indexed; counts agree (tree lock held). */
int iova_index_check(const struct dg_iova_space *s, FILE *why);

/* ---- iova_mag.c ---- */
/*
 * This thread's caches (see iova_mag.c, "Finding the cache"): the last IOVA_TLS_WAYS spaces
 * it used, by id (a space at a reused address has another id), most recent first. Entries
 * are hints: an entry of a destroyed space is never matched again (ids are not reused).
 */
#define IOVA_TLS_WAYS 4
struct iova_tls {
	uint64_t id[IOVA_TLS_WAYS];
	struct iova_tcache *tc[IOVA_TLS_WAYS];
};
extern _Thread_local struct iova_tls iova_tls __attribute__((tls_model("initial-exec")));

/* This thread's cache of @s, entered (iova_tc_exit() ends it): found or made, waiting while a
 * stealer holds it. NULL when there is no memory for a cache (the caller uses the tree). */
struct iova_tcache *iova_tc_lock(struct dg_iova_space *s);
struct iova_node *iova_mag_alloc_slow(struct dg_iova_space *s, struct iova_tcache *tc,
				      unsigned int idx, uint64_t live);
void iova_mag_free_slow(struct dg_iova_space *s, struct iova_tcache *tc, struct iova_node *n);

/*
 * Enter this thread's cache of @s on the fast path: false (nothing changed, nothing held) if
 * it is not the most recent one, or a stealer holds it, or the space runs without
 * membarrier (IOVA_STEAL_FALLBACK: iova_tc_lock() enters with an exchange). No atomic
 * read-modify-write: iova_steal_try() (iova_steal.h).
 */
static inline bool iova_tc_enter(struct dg_iova_space *s, struct iova_tcache **tcp)
{
	struct iova_tcache *tc = iova_tls.tc[0];

	*tcp = tc;
	if (dg_unlikely(iova_tls.id[0] != s->id))
		return false;
	return iova_steal_try(&tc->sw);
}

/* Leave the cache: a stealer may take it from now on. */
static inline void iova_tc_exit(struct iova_tcache *tc)
{
	iova_steal_leave(&tc->sw);
}

/* A node popped from a magazine of cache @tc (entered) becomes LIVE with low state @live. */
static inline void iova_node_set_live(struct iova_node *n, uint64_t live)
{
	uint64_t st = atomic_load_explicit(&n->state, memory_order_relaxed); /* CACHED, ours */

	/* Release pairs with the acquire load and compare-exchange of a free (dg_iova_free):
	 * the caller may hand the IOVA to another thread, which then sees the node LIVE. */
	atomic_store_explicit(&n->state, (st & ~IOVA_ST_LOW) | live, memory_order_release);
}

/* Pop a cached range of cache @idx (zone * IOVA_ORDERS + order) and make it LIVE with low
 * state @live; NULL on a miss. */
static inline struct iova_node *iova_mag_alloc(struct dg_iova_space *s, unsigned int idx,
					       uint64_t live)
{
	struct iova_tcache *tc = iova_tc_lock(s);
	struct iova_mag *m;
	struct iova_node *n;

	if (dg_unlikely(!tc))
		return NULL;
	m = tc->cc[idx].loaded;
	if (dg_likely(m->n)) {
		n = m->e[--m->n];
		iova_node_set_live(n, live);
		tc->hits++;
		iova_tc_exit(tc);
		return n;
	}
	return iova_mag_alloc_slow(s, tc, idx, live); /* exits */
}

/*
 * The magazine hit of an allocation without flags (alloc_fast in iova.c, and inlined into
 * the DMA layer by iova_owned.h): a size of at most the largest class, a limit that maps to
 * a zone, this thread's cache the last one used, a hit. True with *iova and *node set (the
 * node became LIVE inside the thread cache, iova_node_set_live), else false with nothing
 * changed and nothing held (the caller takes the slow way). No call, no lock, no atomic
 * read-modify-write.
 */
static inline __attribute__((always_inline)) bool iova_alloc_hit(struct dg_iova_space *s,
								 uint64_t size, uint64_t limit,
								 uint64_t *iova,
								 struct iova_node **node)
{
	struct iova_tcache *tc;
	struct iova_node *n;
	struct iova_mag *m;
	uint64_t x;
	unsigned int idx;

	/* mag_max_bytes is 0 without magazines, so size - 1 < 0 never holds (size 0 wraps) */
	if (dg_unlikely(size - 1 >= s->mag_max_bytes))
		return false;
	x = (size - 1) >> s->shift;			     /* granules - 1 */
	idx = 63 ^ (unsigned int)__builtin_clzll(2 * x + 1); /* the class: ceil(log2 granules) */
	if (dg_unlikely(limit < s->full_limit)) {
		if (limit < s->dma32_limit)
			return false;
		idx += IOVA_ORDERS; /* ZONE_DMA32 */
	}
	if (dg_unlikely(!iova_tc_enter(s, &tc)))
		return false;
	m = tc->cc[idx].loaded; /* never NULL (tc_get) */
	if (dg_unlikely(!m->n)) {
		iova_tc_exit(tc);
		return false;
	}
	n = m->e[--m->n];
	iova_node_set_live(n, 4 * x + IOVA_LIVE(1)); /* IOVA_LIVE(x + 1) in one instruction */
	tc->hits++;
	iova_tc_exit(tc);
	/* the key is the first byte; relaxed: the node is ours (LIVE, set by us) */
	*iova = atomic_load_explicit(&n->hkey, memory_order_relaxed);
	*node = n;
	return true;
}

/* Process-wide setup (membarrier registration, the thread-exit key); 0 or -errno. */
int iova_mag_global_init(void);
/* Membarrier is registered for the process (after iova_mag_global_init()). */
bool iova_mag_memb(void);
/* Test hook: make @s (new, never used) run without membarrier (the exchange fallback). */
void iova_mag_force_fallback(struct dg_iova_space *s);
/* Thread caches registered with @s (registry lock). */
uint64_t iova_mag_ncaches(struct dg_iova_space *s);
int iova_mag_init(struct dg_iova_space *s);
void iova_mag_fini(struct dg_iova_space *s);
void iova_mag_flush(struct dg_iova_space *s);
void iova_mag_trim(struct dg_iova_space *s);
/* Ranges cached in magazines and depots, and the caches' hit and miss counts (steals every
 * thread cache for a moment); hits and misses may be NULL. */
uint64_t iova_mag_cached(struct dg_iova_space *s, uint64_t *hits, uint64_t *misses);
/* Take every thread cache (registry lock, steal) and lock every depot / give them back. */
void iova_mag_lock_all(struct dg_iova_space *s);
void iova_mag_unlock_all(struct dg_iova_space *s);
/* With everything locked: validate magazine contents against the tree. */
int iova_mag_check(const struct dg_iova_space *s, FILE *why, uint64_t cached_in_tree);
void iova_mag_dump(const struct dg_iova_space *s, FILE *out);

/* ---- iova_linux.c (caller holds the tree lock) ---- */
struct iova_node *iova_linux_find_fit(struct dg_iova_space *s, uint64_t len,
				      unsigned int align_order, uint64_t lim, uint64_t *pfn);
void iova_linux_inserted(struct dg_iova_space *s, struct iova_node *x);
void iova_linux_removing(struct dg_iova_space *s, struct iova_node *x);

#endif /* DG_IOVA_PRIV_H */
