/* SPDX-License-Identifier: MIT */
/*
 * iova/iova.c - the IOVA allocator's public API (dmaguard/iova.h).
 *
 *      dg_iova_alloc                               dg_iova_free
 *           |                                           |
 *           | cacheable size, limit maps to a zone      | lock-free index lookup, then one
 *           v                                           v compare-exchange LIVE -> CACHED
 *   per-CPU magazines --- depot (full magazines) <--- push (cacheable) | tree (other)
 *           | miss                                          |
 *           v                                               v
 *   augmented AVL tree: highest fit below the limit, O(log n) worst case (tree lock)
 *
 * The hit paths (alloc_fast, dg_iova_free) enter this thread's cache (a plain store and a load,
 * iova_mag.c) and take no lock, call nothing, and tail-call a slow path for anything unusual;
 * the free's compare-exchange LIVE -> CACHED is the pair's only atomic read-modify-write
 * (docs/iova.md).
 *
 * Invariants (dg_iova_check() verifies all of them):
 *  - The tree holds every range that is not free: live and cached allocations (ALLOC nodes),
 *    reserved ranges, and the anchor at end + 1. Ranges are disjoint and inside the space;
 *    each node's gap is the free space below it; subtree fields are exact (iova_tree.c).
 *  - With magazines, every cacheable ALLOC node (IOVA_INDEXED) is in the live-range index
 *    (iova_index.c) under its first byte, and its state (iova_priv.h) is LIVE with the granules
 *    asked for, or CACHED; a CACHED node is in exactly one magazine, of its size class and
 *    zone; LIVE nodes are in none. Other ALLOC nodes are not indexed, are LIVE and keep the
 *    granules asked for in n->npfn.
 *  - Without magazines (DG_IOVA_CFG_NO_MAGAZINES or the Linux reference) no node is indexed, the
 *    index stays empty, and a free finds its node by a tree descent under the tree lock.
 *  - ALLOC nodes out of the tree are on the node free list with state 0 and are never freed
 *    before the space (lock-free index readers may still look at them).
 *  - Every thread cache has a loaded magazine in every cache of the space's zones.
 *
 * Frees are validated before anything changes: a free of an address no ALLOC node starts at,
 * of a node that is already CACHED, or with another size, is refused and counted, so no
 * caller mistake can put a range into a magazine twice or tear a hole into the tree.
 *
 * When the tree has no room, the magazines and the depot are flushed back to the tree and the
 * search is repeated once (like Linux's alloc_iova_fast), so -ENOSPC means the space really
 * is full below the limit; after frees it is fully usable again.
 *
 * Natural alignment rounds a request of n granules up to 2^ceil(log2 n) (see iova.h): this is
 * what makes cached ranges interchangeable within a class and the tree search exact.
 */
#include "iova/iova_owned.h"
#include "iova/iova_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FOUR_GIB (1ull << 32)

void *iova_malloc(struct dg_iova_space *s, size_t size)
{
	if (dg_unlikely(s->fail_alloc) && s->fail_alloc(s->fail_arg, size))
		return NULL;
	return malloc(size);
}

void *iova_calloc(struct dg_iova_space *s, size_t n, size_t size)
{
	if (dg_unlikely(s->fail_alloc) && s->fail_alloc(s->fail_arg, n * size))
		return NULL;
	return calloc(n, size);
}

void dg_iova_set_fail_hook(struct dg_iova_space *s, bool (*fail)(void *arg, size_t size), void *arg)
{
	s->fail_alloc = fail;
	s->fail_arg = arg;
}

static inline void store_relaxed(_Atomic uint64_t *c, uint64_t v)
{
	atomic_store_explicit(c, v, memory_order_relaxed);
}

static inline uint64_t load_relaxed(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static inline void count_event(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

void iova_tree_op_begin(struct dg_iova_space *s)
{
	s->tree.visits = 0;
}

/* Publish the visit counters and the tree's sizes (tree lock held: single writer). */
void iova_tree_op_end(struct dg_iova_space *s)
{
	uint64_t v = s->tree.visits;

	store_relaxed(&s->st_last_visited, v);
	store_relaxed(&s->st_visited, load_relaxed(&s->st_visited) + v);
	if (v > load_relaxed(&s->st_max_visited))
		store_relaxed(&s->st_max_visited, v);
	store_relaxed(&s->st_nodes, s->tree.nodes);
	store_relaxed(&s->st_allocated, s->tree.allocated);
	store_relaxed(&s->st_reserved, s->tree.reserved);
}

static void node_classify(const struct dg_iova_space *s, struct iova_node *x)
{
	x->mag_order = -1;
	if (dg_is_pow2(x->len) && dg_ilog2(x->len) <= DG_IOVA_MAG_MAX_ORDER &&
	    dg_is_aligned(x->lo, x->len))
		x->mag_order = (int8_t)dg_ilog2(x->len);
	x->zone = s->nzones == 2 && x->lo + x->len - 1 <= s->dma32_pfn ? IOVA_ZONE_DMA32 :
									 IOVA_ZONE_FULL;
	x->cc_idx = x->mag_order >= 0 ? (uint8_t)(x->zone * IOVA_ORDERS + x->mag_order) : 0;
}

/* Remove @x from the tree (tree lock held) and count it. */
static void tree_unlink(struct dg_iova_space *s, struct iova_node *x)
{
	if (s->algo == DG_IOVA_ALGO_LINUX_REFERENCE)
		iova_linux_removing(s, x);
	iova_tree_remove(&s->tree, x);
}

/* A node for a new ALLOC range: a recycled one (its generation carries on) or a new one. */
static struct iova_node *node_get(struct dg_iova_space *s)
{
	struct iova_node *x = s->free_nodes;

	if (x) {
		s->free_nodes = x->left;
		s->nfree_nodes--;
		return x;
	}
	x = iova_malloc(s, sizeof(*x));
	if (x) {
		atomic_init(&x->state, 0);
		atomic_init(&x->hkey, UINT64_MAX);
		atomic_init(&x->hnext, NULL);
	}
	return x;
}

/* An ALLOC node out of the tree (and the index): kept for reuse, never freed before the
 * space, because lock-free index readers may still look at it (iova_index.c). Tree lock. */
static void node_put(struct dg_iova_space *s, struct iova_node *x)
{
	uint64_t st = atomic_load_explicit(&x->state, memory_order_relaxed);

	/* Relaxed: nobody's compare-exchange can succeed on a node that is not LIVE. */
	atomic_store_explicit(&x->state, st & ~IOVA_ST_LOW, memory_order_relaxed);
	x->left = s->free_nodes;
	s->free_nodes = x;
	s->nfree_nodes++;
}

void iova_release_cached(struct dg_iova_space *s, struct iova_node **nodes, unsigned int n)
{
	pthread_mutex_lock(&s->tree_lock);
	iova_release_cached_locked(s, nodes, n);
	pthread_mutex_unlock(&s->tree_lock);
}

void iova_release_cached_locked(struct dg_iova_space *s, struct iova_node **nodes, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		iova_index_remove(s, nodes[i]);
		iova_tree_op_begin(s);
		tree_unlink(s, nodes[i]);
		iova_tree_op_end(s);
		node_put(s, nodes[i]);
	}
	store_relaxed(&s->st_tree_frees, load_relaxed(&s->st_tree_frees) + n);
}

static _Atomic uint64_t next_space_id;

struct dg_iova_space *dg_iova_create(const struct dg_iova_config *cfg)
{
	struct dg_iova_space *s;
	unsigned int shift;
	uint64_t start_pfn, end_pfn;

	if (!cfg || !dg_is_pow2(cfg->granule) || cfg->granule > FOUR_GIB ||
	    !dg_is_aligned(cfg->start, cfg->granule) || cfg->start > cfg->end ||
	    (cfg->end & (cfg->granule - 1)) != cfg->granule - 1 ||
	    (cfg->algo != DG_IOVA_ALGO_AUGMENTED && cfg->algo != DG_IOVA_ALGO_LINUX_REFERENCE) ||
	    (cfg->flags & ~DG_IOVA_CFG_NO_MAGAZINES) || cfg->ncpus > 4096) {
		errno = EINVAL;
		return NULL;
	}
	shift = dg_ilog2(cfg->granule);
	start_pfn = cfg->start >> shift;
	end_pfn = cfg->end >> shift;
	/* The anchor sits at end_pfn + 1 and its range must not wrap; pfn 0 is reserved. */
	if (end_pfn >= UINT64_MAX - 1 || end_pfn == 0) {
		errno = EINVAL;
		return NULL;
	}
	if (iova_mag_global_init()) {
		errno = EAGAIN;
		return NULL;
	}
	s = aligned_alloc(DG_CACHELINE, dg_align_up(sizeof(*s), DG_CACHELINE));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	memset(s, 0, sizeof(*s));
	s->granule = cfg->granule;
	s->shift = shift;
	s->start_pfn = start_pfn;
	s->end_pfn = end_pfn;
	s->dma32_pfn = (FOUR_GIB >> shift) - 1;
	s->algo = cfg->algo;
	s->flags = cfg->flags;
	s->mags = s->algo == DG_IOVA_ALGO_AUGMENTED && !(s->flags & DG_IOVA_CFG_NO_MAGAZINES);
	s->nzones = end_pfn > s->dma32_pfn ? 2 : 1;
	s->gmask = cfg->granule - 1;
	s->mag_max_bytes = s->mags ? cfg->granule << DG_IOVA_MAG_MAX_ORDER : 0;
	s->full_limit = cfg->end;
	s->dma32_limit = s->nzones == 2 ? FOUR_GIB - 1 : UINT64_MAX;
	s->memb = iova_mag_memb(); /* cfg->ncpus is only checked: caches are per thread */
	pthread_mutex_init(&s->tree_lock, NULL);
	iova_tree_init(&s->tree, start_pfn, &s->anchor, end_pfn + 1,
		       s->algo == DG_IOVA_ALGO_AUGMENTED);
	s->cached_node = s->cached32_node = &s->anchor;
	s->max32_alloc_size = s->dma32_pfn + 1;
	s->id = atomic_fetch_add_explicit(&next_space_id, 1, memory_order_relaxed) + 1;
	/* Slots and an (empty) index even without magazines: dg_iova_free() needs no test. */
	if (iova_index_init(s) || iova_mag_init(s)) {
		dg_iova_destroy(s);
		errno = ENOMEM;
		return NULL;
	}
	if (start_pfn == 0) {
		int err = dg_iova_reserve(s, 0, 1);

		if (err) {
			dg_iova_destroy(s);
			errno = -err;
			return NULL;
		}
	}
	iova_tree_op_end(s);
	return s;
}

static void free_subtree(struct iova_node *n)
{
	while (n) {
		struct iova_node *r = n->right;

		free_subtree(n->left);
		if (n->kind != IOVA_KIND_ANCHOR)
			free(n);
		n = r;
	}
}

void dg_iova_destroy(struct dg_iova_space *s)
{
	if (!s)
		return;
	iova_mag_fini(s);
	iova_index_fini(s);
	free_subtree(s->tree.root);
	while (s->free_nodes) {
		struct iova_node *x = s->free_nodes;

		s->free_nodes = x->left;
		free(x);
	}
	pthread_mutex_destroy(&s->tree_lock);
	free(s);
}

/* ---- allocation ---- */

struct alloc_req {
	uint64_t npfn;	    /* granules asked for */
	uint64_t len;	    /* granules reserved */
	unsigned int align; /* log2 of the alignment in granules */
	int order;	    /* size class if cacheable, else -1 */
};

static int parse_request(const struct dg_iova_space *s, uint64_t size, unsigned int flags,
			 uint64_t *iova, struct alloc_req *r)
{
	uint64_t span = s->end_pfn - s->start_pfn + 1;

	if (!size || (flags & ~DG_IOVA_ALLOC_PAGE_ALIGN) || !iova)
		return -EINVAL;
	r->npfn = (size >> s->shift) + ((size & (s->granule - 1)) != 0);
	if (r->npfn > span)
		return -EINVAL;
	if (flags & DG_IOVA_ALLOC_PAGE_ALIGN) {
		r->len = r->npfn;
		r->align = 0;
	} else {
		if (r->npfn > 1ull << 63)
			return -EINVAL;
		r->len = dg_roundup_pow2(r->npfn);
		r->align = dg_ilog2(r->len);
		if (r->len > span)
			return -EINVAL;
	}
	r->order = dg_is_pow2(r->len) && dg_ilog2(r->len) <= DG_IOVA_MAG_MAX_ORDER ?
			   (int)dg_ilog2(r->len) :
			   -1;
	return 0;
}

/* Last usable pfn for @limit (a byte address), or -ERANGE / -ENOSPC. */
static int limit_pfn(const struct dg_iova_space *s, uint64_t limit, uint64_t *lim)
{
	uint64_t excl;

	if (limit < s->start_pfn << s->shift)
		return -ERANGE;
	if (limit == UINT64_MAX) {
		*lim = s->end_pfn;
		return 0;
	}
	excl = (limit + 1) >> s->shift; /* pfns wholly at or below limit are < excl */
	if (!excl || excl - 1 < s->start_pfn)
		return -ENOSPC;
	*lim = excl - 1 < s->end_pfn ? excl - 1 : s->end_pfn;
	return 0;
}

static inline int zone_of_limit(const struct dg_iova_space *s, uint64_t lim)
{
	if (lim >= s->end_pfn)
		return IOVA_ZONE_FULL;
	if (s->nzones == 2 && lim >= s->dma32_pfn)
		return IOVA_ZONE_DMA32;
	return -1;
}

/* The tree path. */
static int alloc_tree(struct dg_iova_space *s, const struct alloc_req *r, uint64_t lim,
		      uint64_t *pfn)
{
	struct iova_node *x, *succ;
	uint64_t gen;

	pthread_mutex_lock(&s->tree_lock);
	x = node_get(s);
	if (!x) {
		pthread_mutex_unlock(&s->tree_lock);
		return -ENOMEM;
	}
	iova_tree_op_begin(s);
	if (s->algo == DG_IOVA_ALGO_LINUX_REFERENCE)
		succ = iova_linux_find_fit(s, r->len, r->align, lim, pfn);
	else
		succ = iova_tree_find_fit(&s->tree, r->len, r->align, lim, pfn);
	if (!succ) {
		iova_tree_op_end(s);
		node_put(s, x);
		pthread_mutex_unlock(&s->tree_lock);
		return -ENOSPC;
	}
	x->lo = *pfn;
	x->len = r->len;
	x->kind = IOVA_KIND_ALLOC;
	node_classify(s, x);
	x->npfn = r->npfn;
	gen = (atomic_load_explicit(&x->state, memory_order_relaxed) >> IOVA_ST_GEN_SHIFT) + 1;
	/* Release pairs with the acquire load and compare-exchange of a free (dg_iova_free) in
	 * another thread the caller hands the IOVA to. A new generation: a lock-free reader that
	 * found the node in its previous life cannot validate against this one. */
	atomic_store_explicit(&x->state,
			      gen << IOVA_ST_GEN_SHIFT |
				      (IOVA_INDEXED(s, x) ? IOVA_LIVE(r->npfn) : IOVA_ST_LIVE),
			      memory_order_release);
	iova_tree_insert_below(&s->tree, succ, x);
	if (s->algo == DG_IOVA_ALGO_LINUX_REFERENCE)
		iova_linux_inserted(s, x);
	iova_tree_op_end(s);
	store_relaxed(&s->st_tree_allocs, load_relaxed(&s->st_tree_allocs) + 1);
	if (IOVA_INDEXED(s, x))
		iova_index_insert(s, x);
	pthread_mutex_unlock(&s->tree_lock);
	return 0;
}

/* Everything the hit path in dg_iova_alloc() does not do. */
/* Every allocation that is not a hit of alloc_hit(); *node (if @node) gets the magazine node
 * the range came from, or NULL when it came from the tree. */
static dg_noinline int alloc_common(struct dg_iova_space *s, uint64_t size, uint64_t limit,
				    unsigned int flags, uint64_t *iova, bool last_try,
				    struct iova_node **node)
{
	struct alloc_req r;
	uint64_t lim, pfn;
	int err, zone;

	if ((err = parse_request(s, size, flags, iova, &r)))
		return err;
	if ((err = limit_pfn(s, limit, &lim)))
		goto fail;
	if (s->mags && r.order >= 0 && (zone = zone_of_limit(s, lim)) >= 0) {
		struct iova_node *n =
			iova_mag_alloc(s, (unsigned int)zone * IOVA_ORDERS + (unsigned int)r.order,
				       IOVA_LIVE(r.npfn));

		if (dg_likely(n)) {
			*iova = n->lo << s->shift;
			if (node)
				*node = n;
			return 0;
		}
	}
	err = alloc_tree(s, &r, lim, &pfn);
	if (err == -ENOSPC && s->mags && last_try && iova_mag_cached(s, NULL, NULL)) {
		dg_iova_flush_caches(s);
		err = alloc_tree(s, &r, lim, &pfn);
	}
	if (!err) {
		*iova = pfn << s->shift;
		return 0;
	}
fail:
	if (err == -ENOMEM || (err == -ENOSPC && last_try))
		count_event(&s->st_alloc_failures);
	return err;
}

/* Every allocation that is not a magazine hit of alloc_fast() (six arguments: a tail call). */
static dg_noinline int alloc_miss(struct dg_iova_space *s, uint64_t size, uint64_t limit,
				  unsigned int flags, uint64_t *iova, uint64_t *token)
{
	struct iova_node *n = NULL;
	int err = alloc_common(s, size, limit, flags, iova, true, token ? &n : NULL);

	if (token)
		*token = (uint64_t)(uintptr_t)n;
	return err;
}

/*
 * The magazine hit path (most allocations), kept short: no flags, then iova_alloc_hit()
 * (iova_priv.h; iova_owned.h inlines it into the DMA layer). Anything else is a tail call to
 * alloc_miss(), having changed nothing, which checks everything and takes the slow ways
 * (page-aligned requests of a power-of-two size still hit the magazines there); with no call
 * on the hit path the compiler needs no registers saved. @token (iova_owned.h) may be NULL.
 */
static inline __attribute__((always_inline)) int alloc_fast(struct dg_iova_space *s, uint64_t size,
							    uint64_t limit, unsigned int flags,
							    uint64_t *iova, uint64_t *token)
{
	struct iova_node *n;

	if (dg_unlikely(!iova || flags))
		return alloc_miss(s, size, limit, flags, iova, token);
	if (dg_unlikely(!iova_alloc_hit(s, size, limit, iova, &n)))
		return alloc_miss(s, size, limit, 0, iova, token); /* flags are 0: not kept */
	if (token)
		*token = (uint64_t)(uintptr_t)n;
	return 0;
}

int dg_iova_alloc(struct dg_iova_space *s, uint64_t size, uint64_t limit, unsigned int flags,
		  uint64_t *iova)
{
	return alloc_fast(s, size, limit, flags, iova, NULL);
}

int dg_iova_alloc_prefer32(struct dg_iova_space *s, uint64_t size, uint64_t limit,
			   unsigned int flags, uint64_t *iova)
{
	if (limit > FOUR_GIB - 1) {
		int err = alloc_common(s, size, FOUR_GIB - 1, flags, iova, false, NULL);

		if (err != -ENOSPC && err != -ERANGE)
			return err;
	}
	return alloc_common(s, size, limit, flags, iova, true, NULL);
}

/* ---- free ---- */

static int bad_free(struct dg_iova_space *s, int err)
{
	count_event(&s->st_bad_frees);
	return err;
}

/* A node that is not indexed: find, validate and remove it (tree lock held). 0 or an errno;
 * on success *out is the node, out of the tree, for the caller to put. */
static int free_unindexed(struct dg_iova_space *s, uint64_t pfn, uint64_t npfn,
			  struct iova_node **out)
{
	struct iova_node *n;
	uint64_t st;
	int err = 0;

	iova_tree_op_begin(s);
	n = iova_tree_floor(&s->tree, pfn);
	if (!n || n->lo != pfn || n->kind != IOVA_KIND_ALLOC || IOVA_INDEXED(s, n)) {
		err = -ENOENT; /* an indexed node starting here would have been found */
	} else {
		st = atomic_load_explicit(&n->state, memory_order_relaxed);
		if (!(st & IOVA_ST_LIVE))
			err = -ENOENT;
		else if (n->npfn != npfn)
			err = -EINVAL;
		else
			tree_unlink(s, n);
	}
	iova_tree_op_end(s);
	if (!err) {
		store_relaxed(&s->st_tree_frees, load_relaxed(&s->st_tree_frees) + 1);
		*out = n;
	}
	return err;
}

/* Push the CACHED node @n into cache @tc (entered); leaves it. Without memory for a magazine
 * the node goes to the tree. */
static void push_locked(struct dg_iova_space *s, struct iova_tcache *tc, struct iova_node *n)
{
	struct iova_mag *m = tc->cc[n->cc_idx].loaded;

	if (dg_likely(m->n < DG_IOVA_MAG_SIZE)) {
		m->e[m->n++] = n;
		iova_tc_exit(tc);
		return;
	}
	iova_mag_free_slow(s, tc, n); /* leaves */
}

/*
 * Every free that is not a lock-free magazine push: invalid arguments, no magazines, a range
 * that is not cacheable, the index hiding a node from the lock-free lookup, a free that is
 * refused. Under the tree lock the index cannot change, so the lookup is exact and decides; the
 * LIVE -> CACHED transition is then made inside this thread's cache (never held across the tree
 * mutex; without memory for a cache the node goes straight back to the tree), with the
 * compare-exchange against the state word read under the tree lock: if the node changed in
 * between (another free won, or it was even reused: a new generation), the compare-exchange
 * fails and the lookup is made again.
 */
static dg_noinline int free_slow(struct dg_iova_space *s, uint64_t iova, uint64_t size)
{
	struct iova_tcache *tc;
	struct iova_node *n = NULL;
	uint64_t pfn, npfn, st;
	int err;

	if (!size || (iova & s->gmask))
		return bad_free(s, -EINVAL);
	pfn = iova >> s->shift;
	npfn = ((size - 1) >> s->shift) + 1;
	for (;;) {
		pthread_mutex_lock(&s->tree_lock);
		if (!s->mags || !(n = iova_index_lookup_locked(s, iova)))
			break;
		/* Acquire pairs with the release stores of LIVE (alloc_tree, iova_node_set_live). */
		st = atomic_load_explicit(&n->state, memory_order_acquire);
		pthread_mutex_unlock(&s->tree_lock);
		if ((st & IOVA_ST_LOW) == IOVA_ST_CACHED)
			return bad_free(s, -ENOENT);
		if (IOVA_ST_NPFN(st) != npfn)
			return bad_free(s, -EINVAL);
		if (!(tc = iova_tc_lock(s))) /* no memory for a cache: straight to the tree */
			pthread_mutex_lock(&s->tree_lock);
		/* acq_rel: as in dg_iova_free() */
		if (atomic_compare_exchange_strong_explicit(
			    &n->state, &st, (st & ~IOVA_ST_LOW) | IOVA_ST_CACHED,
			    memory_order_acq_rel, memory_order_relaxed)) {
			if (tc) {
				push_locked(s, tc, n); /* leaves */
				return 0;
			}
			/* under the tree lock, so check() never sees it CACHED out of a magazine */
			iova_release_cached_locked(s, &n, 1);
			pthread_mutex_unlock(&s->tree_lock);
			count_event(&s->st_user_tree_frees);
			return 0;
		}
		if (tc)
			iova_tc_exit(tc);
		else
			pthread_mutex_unlock(&s->tree_lock);
	}
	err = free_unindexed(s, pfn, npfn, &n);
	if (!err)
		node_put(s, n);
	pthread_mutex_unlock(&s->tree_lock);
	if (err)
		return bad_free(s, err);
	count_event(&s->st_user_tree_frees);
	return 0;
}

/* A push into this thread's cache (entered) whose loaded magazine is full. */
static dg_noinline int free_push_locked_slow(struct dg_iova_space *s, struct iova_tcache *tc,
					     struct iova_node *n)
{
	iova_mag_free_slow(s, tc, n); /* leaves */
	return 0;
}

/*
 * The end of a lock-free free: @n is the indexed node whose key (the first byte) is @iova,
 * its state @st loaded (acquire) before the key was compared, this thread's cache @tc is
 * entered. Check LIVE with this size, flip it to CACHED with one compare-exchange (which fails
 * if another free won, or if the node was reused since its key was read: the generation
 * changed), push it into the cache. Anything else goes to free_slow(), which decides exactly.
 */
static inline __attribute__((always_inline)) int free_found(struct dg_iova_space *s,
							    struct iova_tcache *tc,
							    struct iova_node *n, uint64_t st,
							    uint64_t iova, uint64_t size)
{
	struct iova_mag *m;

	if (dg_unlikely((st & IOVA_ST_LOW) != IOVA_LIVE_SIZE(s, size)))
		goto slow;
	/* acq_rel: acquire as the load of @st; release: the state travels with the node to
	 * the thread that pops it (iova_node_set_live), and this free is the one that won. */
	if (dg_unlikely(!atomic_compare_exchange_strong_explicit(
		    &n->state, &st, (st & ~IOVA_ST_LOW) | IOVA_ST_CACHED, memory_order_acq_rel,
		    memory_order_relaxed)))
		goto slow;
	m = tc->cc[n->cc_idx].loaded; /* never NULL (tc_get) */
	if (dg_unlikely(m->n == DG_IOVA_MAG_SIZE))
		return free_push_locked_slow(s, tc, n);
	m->e[m->n++] = n;
	iova_tc_exit(tc);
	return 0;
slow:
	iova_tc_exit(tc);
	return free_slow(s, iova, size);
}

/* dg_iova_free() when the head of the chain is another node or missing: walk on (from @n,
 * which is checked again), and look in the table that drains (if any). */
static dg_noinline int free_chain(struct dg_iova_space *s, struct iova_tcache *tc,
				  struct iova_node *n, uint64_t iova, uint64_t size)
{
	uint64_t st;

	n = iova_index_find_slow(s, n, iova);
	if (atomic_load_explicit(&s->iold, memory_order_relaxed))
		iova_index_help_drain(s);
	if (!n) {
		iova_tc_exit(tc);
		return free_slow(s, iova, size);
	}
	/* Acquire pairs with the release stores of LIVE (alloc_tree, iova_node_set_live); the
	 * key is read again after it, so it is this generation's key (iova_index.c). */
	st = atomic_load_explicit(&n->state, memory_order_acquire);
	if (atomic_load_explicit(&n->hkey, memory_order_relaxed) != iova) {
		iova_tc_exit(tc);
		return free_slow(s, iova, size);
	}
	return free_found(s, tc, n, st, iova, size);
}

/* dg_iova_free() when this thread's cache of @s is not the last one used (or not made yet),
 * stolen, or entered the fallback way: find it and enter it, then the same lock-free way. */
static dg_noinline int free_relock(struct dg_iova_space *s, uint64_t iova, uint64_t size)
{
	struct iova_tcache *tc;

	if (!s->mags || !(tc = iova_tc_lock(s)))
		return free_slow(s, iova, size);
	return free_chain(s, tc, iova_index_head(s, iova), iova, size);
}

/*
 * The magazine push path (most frees), kept short and without a lock (this thread's cache is
 * entered with a store and a load, iova_tc_enter): the node is looked up by its first byte in
 * the index without a lock (an unaligned IOVA matches no key), then free_found(). Every other
 * case is a tail call, so the hit path calls nothing and saves no registers.
 */
int dg_iova_free(struct dg_iova_space *s, uint64_t iova, uint64_t size)
{
	struct iova_tcache *tc;
	struct iova_node *n;
	uint64_t st;

	/* Without magazines the index is empty (a miss); a size of 0 or above the largest class
	 * never matches a LIVE state, nor an unaligned IOVA a key: all go to free_slow(). */
	if (dg_unlikely(!iova_tc_enter(s, &tc)))
		return free_relock(s, iova, size);
	n = iova_index_head(s, iova);
	if (dg_unlikely(!n)) /* perhaps in the table that drains */
		return free_chain(s, tc, n, iova, size);
	/* Acquire pairs with the release stores of LIVE (alloc_tree, iova_node_set_live); the
	 * key is read after it, so it is this generation's key (iova_index.c). */
	st = atomic_load_explicit(&n->state, memory_order_acquire);
	if (dg_unlikely(atomic_load_explicit(&n->hkey, memory_order_relaxed) != iova))
		return free_chain(s, tc, n, iova, size);
	return free_found(s, tc, n, st, iova, size);
}

/* ---- owned ranges (iova_owned.h) ---- */

int iova_alloc_owned_miss(struct dg_iova_space *s, uint64_t size, uint64_t limit, uint64_t *iova,
			  uint64_t *token)
{
	return alloc_miss(s, size, limit, 0, iova, token);
}

/* An owned free that cannot take the short way: the validated public path. */
void iova_free_owned_slow(struct dg_iova_space *s, struct iova_tcache *tc, uint64_t iova,
			  uint64_t size)
{
	if (tc)
		iova_tc_exit(tc);
	dg_iova_free(s, iova, size);
}

/*
 * The short way: this thread's cache entered once for the whole batch (again after a slow
 * step, which leaves it), each range checked on its face with one load of its node's state,
 * then pushed into its magazine.
 */
int iova_alloc_owned_bulk(struct dg_iova_space *s, uint64_t size, uint64_t limit, unsigned int n,
			  uint64_t *iova, uint64_t *token)
{
	struct iova_tcache *tc;
	unsigned int got = 0;

	/* the magazine hits of iova_alloc_hit(), as many as the loaded magazine holds */
	if (size - 1 < s->mag_max_bytes && (limit >= s->full_limit || limit >= s->dma32_limit)) {
		const uint64_t x = (size - 1) >> s->shift;
		unsigned int idx = 63 ^ (unsigned int)__builtin_clzll(2 * x + 1);

		if (limit < s->full_limit)
			idx += IOVA_ORDERS; /* ZONE_DMA32 */
		if (iova_tc_enter(s, &tc)) {
			struct iova_mag *m = tc->cc[idx].loaded;
			unsigned int k = m->n < n ? m->n : n;

			for (; got < k; got++) {
				struct iova_node *nd = m->e[--m->n];

				iova_node_set_live(nd, 4 * x + IOVA_LIVE(1));
				/* relaxed: the node is ours (LIVE, set by us) */
				iova[got] = atomic_load_explicit(&nd->hkey, memory_order_relaxed);
				token[got] = (uint64_t)(uintptr_t)nd;
			}
			tc->hits += k;
			iova_tc_exit(tc);
		}
	}
	for (; got < n; got++) {
		int r = iova_alloc_owned(s, size, limit, &iova[got], &token[got]);

		if (dg_unlikely(r)) {
			for (unsigned int i = 0; i < got; i++) {
				struct iova_owned o = {
					.iova = iova[i], .size = size, .token = token[i]};

				iova_free_owned(s, &o, 1);
			}
			return r;
		}
	}
	return 0;
}

void iova_free_owned(struct dg_iova_space *s, const struct iova_owned *r, unsigned int n)
{
	struct iova_tcache *tc = NULL;

	for (unsigned int i = 0; i < n; i++)
		iova_free_owned_one(s, &tc, r[i].iova, r[i].size, r[i].token);
	iova_free_owned_end(tc);
}

/* ---- find, reserve, caches ---- */

int dg_iova_find(const struct dg_iova_space *cs, uint64_t iova, uint64_t *start, uint64_t *size)
{
	struct dg_iova_space *s = (struct dg_iova_space *)cs; /* the lock and counters */
	uint64_t pfn = iova >> s->shift, st_start = 0, st_size = 0;
	struct iova_node *n;
	int err = -ENOENT;

	pthread_mutex_lock(&s->tree_lock);
	iova_tree_op_begin(s);
	n = iova_tree_floor(&s->tree, pfn);
	if (n && pfn - n->lo < n->len) {
		if (n->kind == IOVA_KIND_RESERVED) {
			st_start = n->lo << s->shift;
			st_size = n->len << s->shift;
			err = -EPERM;
		} else if (n->kind == IOVA_KIND_ALLOC) {
			uint64_t st = atomic_load_explicit(&n->state, memory_order_relaxed);

			if (st & IOVA_ST_LIVE) {
				st_start = n->lo << s->shift;
				st_size = (IOVA_INDEXED(s, n) ? IOVA_ST_NPFN(st) : n->npfn)
					  << s->shift;
				err = 0;
			}
		}
	}
	iova_tree_op_end(s);
	pthread_mutex_unlock(&s->tree_lock);
	if (err != -ENOENT) {
		if (start)
			*start = st_start;
		if (size)
			*size = st_size;
	}
	return err;
}

void dg_iova_flush_caches(struct dg_iova_space *s)
{
	if (!s->mags)
		return;
	count_event(&s->st_flushes);
	iova_mag_flush(s);
}

void dg_iova_trim(struct dg_iova_space *s)
{
	if (s->mags)
		iova_mag_trim(s);
}

/*
 * Nodes that overlap [r0, r1] or touch it, from the highest down: @p starts at the node with
 * the largest lo <= r1 + 1. Returns 1 for a live allocation in the way, 2 for a cached one.
 */
static int reserve_conflict(struct dg_iova_space *s, uint64_t r0, uint64_t r1)
{
	struct iova_node *p = iova_tree_floor(&s->tree, r1);

	for (; p && p->lo + p->len > r0; p = iova_tree_prev(&s->tree, p)) {
		if (p->kind != IOVA_KIND_ALLOC)
			continue;
		return atomic_load_explicit(&p->state, memory_order_relaxed) & IOVA_ST_LIVE ? 1 : 2;
	}
	return 0;
}

int dg_iova_reserve(struct dg_iova_space *s, uint64_t start, uint64_t size)
{
	uint64_t r0, r1;
	struct iova_node *x, *p;
	bool flushed = false;
	int c;

	if (!size || size - 1 > UINT64_MAX - start)
		return -EINVAL;
	r0 = start >> s->shift;
	r1 = (start + size - 1) >> s->shift;
	if (r1 < s->start_pfn || r0 > s->end_pfn)
		return 0; /* nothing of it is in the space */
	r0 = r0 > s->start_pfn ? r0 : s->start_pfn;
	r1 = r1 < s->end_pfn ? r1 : s->end_pfn;
	x = iova_malloc(s, sizeof(*x));
	if (!x)
		return -ENOMEM;
again:
	pthread_mutex_lock(&s->tree_lock);
	iova_tree_op_begin(s);
	c = reserve_conflict(s, r0, r1);
	if (c) {
		iova_tree_op_end(s);
		pthread_mutex_unlock(&s->tree_lock);
		if (c == 2 && !flushed) {
			flushed = true;
			dg_iova_flush_caches(s);
			goto again;
		}
		free(x);
		return -EBUSY;
	}
	/* Merge the reserved ranges that overlap or touch [r0, r1]. */
	p = iova_tree_floor(&s->tree, r1 + 1);
	while (p && p->lo + p->len >= r0) {
		struct iova_node *below = iova_tree_prev(&s->tree, p);

		if (p->kind == IOVA_KIND_RESERVED) {
			uint64_t hi = p->lo + p->len - 1;

			r0 = p->lo < r0 ? p->lo : r0;
			r1 = hi > r1 ? hi : r1;
			tree_unlink(s, p);
			free(p);
		}
		p = below;
	}
	x->lo = r0;
	x->len = r1 - r0 + 1;
	x->kind = IOVA_KIND_RESERVED;
	x->mag_order = -1;
	x->zone = 0;
	atomic_init(&x->hnext, NULL);
	atomic_init(&x->hkey, UINT64_MAX);
	atomic_init(&x->state, 0);
	iova_tree_insert(&s->tree, x);
	iova_tree_op_end(s);
	pthread_mutex_unlock(&s->tree_lock);
	return 0;
}

/* ---- stats, check, dump ---- */

void dg_iova_get_stats(const struct dg_iova_space *s, struct dg_iova_stats *st)
{
	uint64_t hits, misses, depot = 0;

	memset(st, 0, sizeof(*st));
	for (unsigned int k = 0; k < IOVA_CCS; k++)
		depot += load_relaxed(&s->depot[k].nfull_pub);
	st->cached_ranges = iova_mag_cached((struct dg_iova_space *)s, &hits, &misses); /* locks */
	st->reserved_ranges = load_relaxed(&s->st_reserved);
	st->tree_nodes = load_relaxed(&s->st_nodes);
	uint64_t allocated = load_relaxed(&s->st_allocated);
	st->live_ranges = allocated > st->cached_ranges ? allocated - st->cached_ranges : 0;
	st->depot_magazines = depot;
	st->tree_allocs = load_relaxed(&s->st_tree_allocs);
	st->allocs = hits + st->tree_allocs;
	st->frees = st->allocs > st->live_ranges ? st->allocs - st->live_ranges : 0;
	st->magazine_hits = hits;
	st->magazine_misses = misses;
	st->tree_frees = load_relaxed(&s->st_tree_frees);
	st->tree_nodes_visited = load_relaxed(&s->st_visited);
	st->last_op_nodes_visited = load_relaxed(&s->st_last_visited);
	st->max_op_nodes_visited = load_relaxed(&s->st_max_visited);
	st->alloc_failures = load_relaxed(&s->st_alloc_failures);
	st->bad_frees = load_relaxed(&s->st_bad_frees);
	st->cache_flushes = load_relaxed(&s->st_flushes);
	st->trimmed_magazines = load_relaxed(&s->st_trimmed);
}

static void lock_everything(struct dg_iova_space *s)
{
	iova_mag_lock_all(s);
	pthread_mutex_lock(&s->tree_lock);
}

static void unlock_everything(struct dg_iova_space *s)
{
	pthread_mutex_unlock(&s->tree_lock);
	iova_mag_unlock_all(s);
}

#define SCHECK(cond, ...) IOVA_CHECK_OR_OUT(why, "iova: ", cond, __VA_ARGS__)

static int check_nodes(struct dg_iova_space *s, FILE *why, uint64_t *cached, uint64_t *indexed)
{
	struct iova_tree *t = &s->tree;
	uint64_t saved = t->visits;
	int err = 0;

	*cached = *indexed = 0;
	for (struct iova_node *n = iova_tree_first(t); n; n = iova_tree_next(t, n)) {
		uint64_t hi = n->lo + n->len - 1;

		if (n->kind == IOVA_KIND_ANCHOR) {
			SCHECK(n == &s->anchor && n->lo == s->end_pfn + 1, "stray anchor");
			continue;
		}
		SCHECK(n->lo >= s->start_pfn && hi <= s->end_pfn,
		       "range [%#llx, %#llx] outside the space", (unsigned long long)n->lo,
		       (unsigned long long)hi);
		if (n->kind != IOVA_KIND_ALLOC)
			continue;
		uint64_t st = atomic_load_explicit(&n->state, memory_order_relaxed);
		uint64_t low = st & IOVA_ST_LOW, npfn;
		int8_t order = n->mag_order;
		uint8_t zone = n->zone;

		node_classify(s, n);
		SCHECK(order == n->mag_order && zone == n->zone,
		       "node %#llx: class %d zone %u, expected %d %u", (unsigned long long)n->lo,
		       order, zone, n->mag_order, n->zone);
		if (IOVA_INDEXED(s, n)) {
			npfn = IOVA_ST_NPFN(st);
			SCHECK((low & IOVA_ST_LIVE && npfn >= 1) || low == IOVA_ST_CACHED,
			       "node %#llx: bad state %#llx", (unsigned long long)n->lo,
			       (unsigned long long)st);
			SCHECK(iova_index_lookup_locked(s, n->lo << s->shift) == n,
			       "node %#llx not in the index", (unsigned long long)n->lo);
			(*indexed)++;
		} else {
			npfn = n->npfn;
			SCHECK(low == IOVA_ST_LIVE && npfn >= 1, "node %#llx: bad state %#llx",
			       (unsigned long long)n->lo, (unsigned long long)st);
			SCHECK(!s->mags || !iova_index_lookup_locked(s, n->lo << s->shift),
			       "node %#llx indexed but not cacheable", (unsigned long long)n->lo);
		}
		SCHECK(low == IOVA_ST_CACHED || dg_roundup_pow2(npfn) == n->len || npfn == n->len,
		       "node %#llx: %llu granules reserved for %llu asked",
		       (unsigned long long)n->lo, (unsigned long long)n->len,
		       (unsigned long long)npfn);
		if (low == IOVA_ST_CACHED)
			(*cached)++;
	}
out:
	t->visits = saved;
	return err;
}

int dg_iova_check(const struct dg_iova_space *cs, FILE *why)
{
	struct dg_iova_space *s = (struct dg_iova_space *)cs; /* locks */
	uint64_t cached = 0, indexed = 0, nfree = 0;
	int err;

	lock_everything(s);
	if ((err = iova_tree_check(&s->tree, why)) ||
	    (err = check_nodes(s, why, &cached, &indexed)))
		goto out;
	for (const struct iova_node *x = s->free_nodes; x; x = x->left) {
		SCHECK((atomic_load_explicit(&x->state, memory_order_relaxed) & IOVA_ST_LOW) == 0 &&
			       ++nfree <= s->nfree_nodes,
		       "node free list corrupt");
	}
	SCHECK(nfree == s->nfree_nodes, "node free list holds %llu, counted %llu",
	       (unsigned long long)nfree, (unsigned long long)s->nfree_nodes);
	SCHECK(load_relaxed(&s->st_nodes) == s->tree.nodes &&
		       load_relaxed(&s->st_allocated) == s->tree.allocated &&
		       load_relaxed(&s->st_reserved) == s->tree.reserved,
	       "published tree counters stale");
	if (s->mags) {
		SCHECK(s->icount == indexed, "index holds %llu nodes, the tree %llu cacheable",
		       (unsigned long long)s->icount, (unsigned long long)indexed);
		if ((err = iova_index_check(s, why)))
			goto out;
	}
	err = iova_mag_check(s, why, cached);
out:
	unlock_everything(s);
	return err;
}

void dg_iova_dump(const struct dg_iova_space *cs, FILE *out)
{
	struct dg_iova_space *s = (struct dg_iova_space *)cs;
	struct dg_iova_stats st;
	static const char *const kinds[] = {"alloc", "reserved", "anchor"};

	dg_iova_get_stats(s, &st);
	lock_everything(s);
	fprintf(out,
		"iova space [%#llx, %#llx] granule %#llx algo %s magazines %s thread caches %llu "
		"zones %u%s\n",
		(unsigned long long)(s->start_pfn << s->shift),
		(unsigned long long)(((s->end_pfn + 1) << s->shift) - 1),
		(unsigned long long)s->granule,
		s->algo == DG_IOVA_ALGO_AUGMENTED ? "augmented" : "linux-reference",
		s->mags ? "on" : "off", (unsigned long long)s->ntcs, s->nzones,
		s->memb ? "" : " (no membarrier)");
	fprintf(out,
		"  live %llu cached %llu reserved %llu nodes %llu height %u; allocs %llu frees "
		"%llu hits %llu misses %llu bad_frees %llu failures %llu\n",
		(unsigned long long)st.live_ranges, (unsigned long long)st.cached_ranges,
		(unsigned long long)st.reserved_ranges, (unsigned long long)st.tree_nodes,
		s->tree.root->height, (unsigned long long)st.allocs, (unsigned long long)st.frees,
		(unsigned long long)st.magazine_hits, (unsigned long long)st.magazine_misses,
		(unsigned long long)st.bad_frees, (unsigned long long)st.alloc_failures);
	iova_mag_dump(s, out);
	uint64_t saved = s->tree.visits;
	for (struct iova_node *n = iova_tree_first(&s->tree); n; n = iova_tree_next(&s->tree, n)) {
		uint64_t st_word = atomic_load_explicit(&n->state, memory_order_relaxed);

		fprintf(out, "  [%#llx, %#llx] %-8s gap %llu", (unsigned long long)n->lo,
			(unsigned long long)(n->lo + n->len - 1), kinds[n->kind],
			(unsigned long long)n->gap);
		if (s->tree.augment)
			fprintf(out, " order %d max_gap %llu max_order %d", n->gap_order,
				(unsigned long long)n->max_gap, n->max_order);
		if (n->kind == IOVA_KIND_ALLOC)
			fprintf(out, " %s", st_word & IOVA_ST_LIVE ? "live" : "cached");
		fprintf(out, " h%u\n", n->height);
	}
	s->tree.visits = saved;
	unlock_everything(s);
}
