/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_priv.h - the IOVA allocator's private structures (never installed).
 *
 * Pieces and the files that own them:
 *   iova_tree.c    the augmented AVL tree of ranges (the only record of what is taken)
 *   iova_index.c   the live-range index: pfn -> node, so a free is validated in O(1)
 *   iova_mag.c     per-CPU magazines and the depot in front of the tree
 *   iova_linux.c   the Linux 6.1 reference search (cached node, linear walk)
 *   iova.c         the public API: argument checks, dispatch, stats, check and dump
 *
 * Lock order (a thread holding one may take only those to its right):
 *   slot lock -> depot lock -> tree lock -> index shard lock
 * No path holds a slot or depot lock while it takes the tree lock; the tree lock is held
 * while a node enters or leaves the index.
 */
#ifndef DG_IOVA_PRIV_H
#define DG_IOVA_PRIV_H

#include <dmaguard/iova.h>

#include "base/compiler.h"
#include "base/spinlock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define IOVA_ORDERS	  (DG_IOVA_MAG_MAX_ORDER + 1) /* cached size classes */
#define IOVA_ZONES	  2			      /* cache zones, see iova_mag.c */
#define IOVA_ZONE_FULL	  0 /* ranges for requests whose limit reaches the end of the space */
#define IOVA_ZONE_DMA32	  1 /* ranges below 4 GiB, for limits from 4 GiB - 1 up */
#define IOVA_INDEX_SHARDS 64
#define IOVA_MAX_HEIGHT	  96 /* AVL height bound for 2^64 nodes is < 93 */

enum iova_kind {
	IOVA_KIND_ALLOC = 0,	/* an allocation, live or cached */
	IOVA_KIND_RESERVED = 1, /* never handed out */
	IOVA_KIND_ANCHOR = 2,	/* the node at end + 1 that owns the topmost gap */
};

/*
 * State word of an ALLOC node: (granules asked for << 2) | LIVE, or CACHED. Written by a free
 * under the node's index shard lock (LIVE -> CACHED), by an owned free (iova_owned.h) under
 * the slot lock it pushes the node with (LIVE -> CACHED: its owner proved no other free runs),
 * and by the allocator that popped the node from a magazine (CACHED -> LIVE, no lock: it owns
 * the node). They never race, because a node is in a magazine only while CACHED and a free
 * acts only on LIVE.
 */
#define IOVA_ST_LIVE	1u
#define IOVA_ST_CACHED	2u
#define IOVA_ST_SHIFT	2
#define IOVA_LIVE(npfn) (((uint64_t)(npfn) << IOVA_ST_SHIFT) | IOVA_ST_LIVE)
/* IOVA_LIVE() of the granules in @size bytes (size >= 1), in three instructions */
#define IOVA_LIVE_SIZE(s, size) \
	((((size)-1) >> (s)->shift << IOVA_ST_SHIFT) + ((1u << IOVA_ST_SHIFT) | IOVA_ST_LIVE))

struct iova_node {
	struct iova_node *left, *right, *parent; /* tree links (tree lock) */
	uint64_t lo;				 /* first pfn (immutable) */
	uint64_t len;				 /* granules reserved (immutable) */
	uint64_t gap;				 /* free pfns right below lo (tree lock) */
	uint64_t max_gap;			 /* largest gap in this subtree (tree lock) */
	int8_t gap_order; /* largest k: the gap holds an aligned 2^k block; -1 (tree lock) */
	int8_t max_order; /* largest gap_order in this subtree (tree lock) */
	uint8_t height;	  /* AVL height, leaves 1 (tree lock) */
	uint8_t kind;	  /* enum iova_kind (immutable) */
	int8_t mag_order; /* size class when cacheable (len 2^k, aligned), else -1 (immutable) */
	uint8_t zone;	  /* cache zone of the range (immutable) */
	uint8_t cc_idx;	  /* zone * IOVA_ORDERS + mag_order when cacheable (immutable) */
	struct iova_node *hnext; /* index chain (shard lock) */
	_Atomic uint64_t state;	 /* IOVA_ST_* (see above) */
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
	struct iova_mag *loaded; /* pop/push here first (slot lock) */
	struct iova_mag *prev;	 /* always empty or full (slot lock) */
};

#define IOVA_CCS (IOVA_ZONES * IOVA_ORDERS) /* caches per slot: zone * IOVA_ORDERS + order */

struct iova_slot {
	struct dg_spinlock lock;
	uint64_t hits;	 /* allocations served here (slot lock) */
	uint64_t misses; /* cacheable allocations sent to the tree (slot lock) */
	struct iova_cpu_cache cc[IOVA_CCS];
} dg_cacheline;

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

struct iova_index_shard {
	struct dg_spinlock lock;
	uint32_t bits;		/* log2 buckets of tab (shard lock) */
	uint32_t bshift;	/* 64 - bits (shard lock) */
	uint32_t old_bits;	/* log2 buckets of old while it drains (shard lock) */
	struct iova_node **tab; /* buckets (shard lock) */
	struct iova_node **old; /* previous table, drained a few buckets per call */
	uint64_t migrate;	/* buckets of old below this are drained (shard lock) */
	uint64_t count;		/* nodes in this shard (shard lock) */
} dg_cacheline;

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
	unsigned int nslots;	/* a power of two */

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

	struct iova_index_shard index[IOVA_INDEX_SHARDS];
	struct iova_slot *slots; /* nslots, NULL without magazines */
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
#define IOVA_INDEX_SHARD_BITS 6 /* log2 IOVA_INDEX_SHARDS */

static inline uint64_t iova_index_hash(uint64_t pfn)
{
	return pfn * 0x9e3779b97f4a7c15ull; /* Fibonacci hashing */
}

/* The bucket of hash @h in a table of 2^bits buckets: the bits below the shard bits. */
static inline uint64_t iova_index_bucket(uint64_t h, uint32_t bits)
{
	return (h << IOVA_INDEX_SHARD_BITS) >> (64 - bits);
}

static inline struct iova_index_shard *iova_index_shard(struct dg_iova_space *s, uint64_t pfn)
{
	return &s->index[iova_index_hash(pfn) >> (64 - IOVA_INDEX_SHARD_BITS)];
}

/* The chain that holds (or would hold) hash @h; caller holds the shard lock. */
static inline struct iova_node **iova_index_chain(struct iova_index_shard *sh, uint64_t h)
{
	if (dg_unlikely(sh->old)) {
		uint64_t ob = iova_index_bucket(h, sh->old_bits);

		if (ob >= sh->migrate)
			return &sh->old[ob];
	}
	return &sh->tab[(h << IOVA_INDEX_SHARD_BITS) >> sh->bshift];
}

/* The indexed node starting at @pfn, or NULL; caller holds the shard lock. */
static inline struct iova_node *iova_index_lookup(struct iova_index_shard *sh, uint64_t pfn)
{
	struct iova_node *n = *iova_index_chain(sh, iova_index_hash(pfn));

	while (n && n->lo != pfn)
		n = n->hnext;
	return n;
}

int iova_index_init(struct dg_iova_space *s);
void iova_index_fini(struct dg_iova_space *s);
/* Caller holds the shard lock of the node's pfn for these two. */
void iova_index_insert(struct dg_iova_space *s, struct iova_index_shard *sh, struct iova_node *n);
void iova_index_remove(struct dg_iova_space *s, struct iova_index_shard *sh, struct iova_node *n);
/* Call @fn on every indexed node (caller holds every shard lock). Returns the count. */
uint64_t iova_index_count(const struct dg_iova_space *s);
int iova_index_check(const struct dg_iova_space *s, FILE *why);

/* ---- iova_mag.c ---- */
/* CPU + 1 of the slot this thread uses; 0 until its first magazine operation. */
extern _Thread_local unsigned int iova_tls_slot __attribute__((tls_model("initial-exec")));

struct iova_slot *iova_slot_lock_slow(struct dg_iova_space *s);
struct iova_node *iova_mag_alloc_slow(struct dg_iova_space *s, struct iova_slot *sl,
				      unsigned int idx);
bool iova_mag_free_slow(struct dg_iova_space *s, struct iova_slot *sl, struct iova_node *n);

/* Lock this thread's slot (see iova_mag.c, "Slots and migration"). */
static inline struct iova_slot *iova_slot_lock(struct dg_iova_space *s)
{
	unsigned int c = iova_tls_slot;

	if (dg_likely(c)) {
		struct iova_slot *sl = &s->slots[c & (s->nslots - 1)];

		if (dg_likely(dg_spin_trylock(&sl->lock)))
			return sl;
	}
	return iova_slot_lock_slow(s);
}

/* Pop a cached range of cache @idx (zone * IOVA_ORDERS + order); NULL on a miss. */
static inline struct iova_node *iova_mag_alloc(struct dg_iova_space *s, unsigned int idx)
{
	struct iova_slot *sl = iova_slot_lock(s);
	struct iova_mag *m = sl->cc[idx].loaded;
	struct iova_node *n;

	if (dg_likely(m && m->n)) {
		n = m->e[--m->n];
		sl->hits++;
		dg_spin_unlock(&sl->lock);
		return n;
	}
	return iova_mag_alloc_slow(s, sl, idx); /* unlocks */
}

/* Push a CACHED node; false if it could not be cached (no memory): free it to the tree. */
static inline bool iova_mag_free(struct dg_iova_space *s, struct iova_node *n)
{
	struct iova_slot *sl = iova_slot_lock(s);
	struct iova_mag *m = sl->cc[n->cc_idx].loaded;

	if (dg_likely(m && m->n < DG_IOVA_MAG_SIZE)) {
		m->e[m->n++] = n;
		dg_spin_unlock(&sl->lock);
		return true;
	}
	return iova_mag_free_slow(s, sl, n); /* unlocks */
}

int iova_mag_init(struct dg_iova_space *s);
void iova_mag_fini(struct dg_iova_space *s);
void iova_mag_flush(struct dg_iova_space *s);
void iova_mag_trim(struct dg_iova_space *s);
/* Ranges cached in magazines and depots, and the slots' hit and miss counts (takes the slot
 * locks one at a time); hits and misses may be NULL. */
uint64_t iova_mag_cached(struct dg_iova_space *s, uint64_t *hits, uint64_t *misses);
/* Lock every slot and depot (in lock order) / unlock them. */
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
