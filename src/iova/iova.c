/* SPDX-License-Identifier: MIT */
/*
 * iova/iova.c - the IOVA allocator's public API (dmaguard/iova.h).
 *
 *      dg_iova_alloc                               dg_iova_free
 *           |                                           |
 *           | cacheable size, limit maps to a zone      | index lookup: LIVE, right size?
 *           v                                           v       (shard lock, O(1))
 *   per-CPU magazines --- depot (full magazines) <--- push (cacheable) | tree (other)
 *           | miss                                          |
 *           v                                               v
 *   augmented AVL tree: highest fit below the limit, O(log n) worst case (tree lock)
 *
 * Invariants (dg_iova_check() verifies all of them):
 *  - The tree holds every range that is not free: live and cached allocations (ALLOC nodes),
 *    reserved ranges, and the anchor at end + 1. Ranges are disjoint and inside the space;
 *    each node's gap is the free space below it; subtree fields are exact (iova_tree.c).
 *  - With magazines, every ALLOC node is in the live-range index (iova_index.c) and its state
 *    is LIVE (with the granules asked for) or CACHED; a CACHED node is in exactly one magazine,
 *    of its size class and zone; LIVE nodes are in none.
 *  - Without magazines (DG_IOVA_CFG_NO_MAGAZINES or the Linux reference) every ALLOC node is
 *    LIVE and a free finds its node by a tree descent under the tree lock.
 *
 * Frees are validated before anything changes: a free of a pfn no ALLOC node starts at, of a
 * node that is already CACHED, or with another size, is refused and counted, so no caller
 * mistake can put a range into a magazine twice or tear a hole into the tree.
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

void iova_release_cached(struct dg_iova_space *s, struct iova_node **nodes, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct iova_index_shard *sh = iova_index_shard(s, nodes[i]->lo);

		dg_spin_lock(&sh->lock);
		iova_index_remove(s, sh, nodes[i]);
		dg_spin_unlock(&sh->lock);
	}
	pthread_mutex_lock(&s->tree_lock);
	for (unsigned int i = 0; i < n; i++) {
		iova_tree_op_begin(s);
		tree_unlink(s, nodes[i]);
		iova_tree_op_end(s);
	}
	store_relaxed(&s->st_tree_frees, load_relaxed(&s->st_tree_frees) + n);
	pthread_mutex_unlock(&s->tree_lock);
	for (unsigned int i = 0; i < n; i++)
		free(nodes[i]);
}

struct dg_iova_space *dg_iova_create(const struct dg_iova_config *cfg)
{
	struct dg_iova_space *s;
	unsigned int shift;
	uint64_t start_pfn, end_pfn;
	long ncpus;

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
	ncpus = cfg->ncpus ? (long)cfg->ncpus : sysconf(_SC_NPROCESSORS_CONF);
	s->nslots = (unsigned int)dg_roundup_pow2(ncpus < 1    ? 1 :
						  ncpus > 4096 ? 4096 :
								 (uint64_t)ncpus);
	pthread_mutex_init(&s->tree_lock, NULL);
	iova_tree_init(&s->tree, start_pfn, &s->anchor, end_pfn + 1,
		       s->algo == DG_IOVA_ALGO_AUGMENTED);
	s->cached_node = s->cached32_node = &s->anchor;
	s->max32_alloc_size = s->dma32_pfn + 1;
	if (s->mags && (iova_index_init(s) || iova_mag_init(s))) {
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
	struct iova_node *x = iova_malloc(s, sizeof(*x)), *succ;

	if (!x)
		return -ENOMEM;
	pthread_mutex_lock(&s->tree_lock);
	iova_tree_op_begin(s);
	if (s->algo == DG_IOVA_ALGO_LINUX_REFERENCE)
		succ = iova_linux_find_fit(s, r->len, r->align, lim, pfn);
	else
		succ = iova_tree_find_fit(&s->tree, r->len, r->align, lim, pfn);
	if (!succ) {
		iova_tree_op_end(s);
		pthread_mutex_unlock(&s->tree_lock);
		free(x);
		return -ENOSPC;
	}
	x->lo = *pfn;
	x->len = r->len;
	x->kind = IOVA_KIND_ALLOC;
	x->hnext = NULL;
	node_classify(s, x);
	atomic_init(&x->state, IOVA_LIVE(r->npfn));
	iova_tree_insert_below(&s->tree, succ, x);
	if (s->algo == DG_IOVA_ALGO_LINUX_REFERENCE)
		iova_linux_inserted(s, x);
	iova_tree_op_end(s);
	store_relaxed(&s->st_tree_allocs, load_relaxed(&s->st_tree_allocs) + 1);
	if (s->mags) {
		struct iova_index_shard *sh = iova_index_shard(s, x->lo);

		dg_spin_lock(&sh->lock);
		iova_index_insert(s, sh, x);
		dg_spin_unlock(&sh->lock);
	}
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
			iova_mag_alloc(s, (unsigned int)zone * IOVA_ORDERS + (unsigned int)r.order);

		if (dg_likely(n)) {
			/* Release pairs with the acquire load in dg_iova_free(): the caller may
			 * hand the IOVA to another thread, which then sees the node LIVE. */
			atomic_store_explicit(&n->state, IOVA_LIVE(r.npfn), memory_order_release);
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

/*
 * The magazine hit path (most allocations), kept short: a size of at most the largest class,
 * a limit that maps to a zone, this thread's slot free to take, a hit. Anything else returns
 * NULL having changed nothing, and the caller tail-calls alloc_common(), which checks
 * everything and takes the slow ways; with no call on the hit path the compiler needs no
 * registers saved.
 */
static inline __attribute__((always_inline)) struct iova_node *
alloc_hit(struct dg_iova_space *s, uint64_t size, uint64_t limit, unsigned int flags)
{
	struct iova_slot *sl;
	struct iova_node *n;
	struct iova_mag *m;
	uint64_t npfn;
	unsigned int c, idx;

	/* mag_max_bytes is 0 without magazines, so size - 1 < 0 never holds (size 0 wraps) */
	if (dg_unlikely(size - 1 >= s->mag_max_bytes || (flags & ~DG_IOVA_ALLOC_PAGE_ALIGN)))
		return NULL;
	npfn = ((size - 1) >> s->shift) + 1;
	idx = 63 ^ (unsigned int)__builtin_clzll(2 * npfn - 1); /* the class: ceil(log2 npfn) */
	if (dg_unlikely(flags && (npfn & (npfn - 1))))
		return NULL; /* page aligned, not a power of two: never cached */
	if (dg_unlikely(limit < s->full_limit)) {
		if (limit < s->dma32_limit)
			return NULL;
		idx += IOVA_ORDERS; /* ZONE_DMA32 */
	}
	c = iova_tls_slot;
	if (dg_unlikely(!c))
		return NULL;
	sl = &s->slots[c & (s->nslots - 1)];
	if (dg_unlikely(!dg_spin_trylock(&sl->lock)))
		return NULL;
	m = sl->cc[idx].loaded;
	if (dg_unlikely(!m || !m->n)) {
		dg_spin_unlock(&sl->lock);
		return NULL;
	}
	n = m->e[--m->n];
	sl->hits++;
	dg_spin_unlock(&sl->lock);
	/* Release pairs with the acquire load in dg_iova_free(): the caller may hand the IOVA to
	 * another thread, which then sees the node LIVE. */
	atomic_store_explicit(&n->state, IOVA_LIVE_SIZE(s, size), memory_order_release);
	return n;
}

int dg_iova_alloc(struct dg_iova_space *s, uint64_t size, uint64_t limit, unsigned int flags,
		  uint64_t *iova)
{
	struct iova_node *n;

	if (dg_likely(iova) && (n = alloc_hit(s, size, limit, flags))) {
		*iova = n->lo << s->shift;
		return 0;
	}
	return alloc_common(s, size, limit, flags, iova, true, NULL);
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

/* Without magazines: find, validate and remove under the tree lock. */
static int free_tree(struct dg_iova_space *s, uint64_t pfn, uint64_t npfn)
{
	struct iova_node *n;
	int err = 0;

	pthread_mutex_lock(&s->tree_lock);
	iova_tree_op_begin(s);
	n = iova_tree_floor(&s->tree, pfn);
	if (!n || n->lo != pfn || n->kind != IOVA_KIND_ALLOC)
		err = -ENOENT;
	else if (atomic_load_explicit(&n->state, memory_order_relaxed) != IOVA_LIVE(npfn))
		err = -EINVAL;
	else
		tree_unlink(s, n);
	iova_tree_op_end(s);
	if (!err)
		store_relaxed(&s->st_tree_frees, load_relaxed(&s->st_tree_frees) + 1);
	pthread_mutex_unlock(&s->tree_lock);
	if (err)
		return bad_free(s, err);
	count_event(&s->st_user_tree_frees);
	free(n);
	return 0;
}

/* A free that is not a magazine push. With @sh, its lock is held and @n is what the index
 * lookup found (NULL, or not LIVE with this size, or not cacheable). */
static dg_noinline int free_slow(struct dg_iova_space *s, uint64_t iova, uint64_t size,
				 struct iova_index_shard *sh, struct iova_node *n)
{
	uint64_t st, npfn;

	if (!sh) { /* no magazines, or an invalid argument */
		if (!size || (iova & s->gmask))
			return bad_free(s, -EINVAL);
		return free_tree(s, iova >> s->shift, ((size - 1) >> s->shift) + 1);
	}
	npfn = ((size - 1) >> s->shift) + 1;
	if (!n) {
		dg_spin_unlock(&sh->lock);
		return bad_free(s, -ENOENT);
	}
	/* Acquire pairs with the release store of LIVE in dg_iova_alloc()/alloc_common(). */
	st = atomic_load_explicit(&n->state, memory_order_acquire);
	if (st != IOVA_LIVE(npfn)) {
		dg_spin_unlock(&sh->lock);
		return bad_free(s, st & IOVA_ST_LIVE ? -EINVAL : -ENOENT);
	}
	/* LIVE and not cacheable: out of the index, then out of the tree */
	iova_index_remove(s, sh, n);
	dg_spin_unlock(&sh->lock);
	pthread_mutex_lock(&s->tree_lock);
	iova_tree_op_begin(s);
	tree_unlink(s, n);
	iova_tree_op_end(s);
	store_relaxed(&s->st_tree_frees, load_relaxed(&s->st_tree_frees) + 1);
	pthread_mutex_unlock(&s->tree_lock);
	count_event(&s->st_user_tree_frees);
	free(n);
	return 0;
}

/* The rest of a free whose node is CACHED and out of the shard lock: push it (slowly). */
static dg_noinline int free_push_slow(struct dg_iova_space *s, struct iova_node *n)
{
	if (!iova_mag_free(s, n)) {
		/* No memory for a magazine: to the tree (the node is CACHED, in the index). */
		count_event(&s->st_user_tree_frees);
		iova_release_cached(s, &n, 1);
	}
	return 0;
}

/* ... the same with this thread's slot locked and its loaded magazine missing or full. */
static dg_noinline int free_push_locked_slow(struct dg_iova_space *s, struct iova_slot *sl,
					     struct iova_node *n)
{
	if (!iova_mag_free_slow(s, sl, n)) { /* unlocks */
		count_event(&s->st_user_tree_frees);
		iova_release_cached(s, &n, 1);
	}
	return 0;
}

/* ... with the shard lock still to take. */
static dg_noinline int free_locked_slow(struct dg_iova_space *s, uint64_t iova, uint64_t size)
{
	struct iova_index_shard *sh = iova_index_shard(s, iova >> s->shift);
	struct iova_node *n;

	dg_spin_lock(&sh->lock);
	n = iova_index_lookup(sh, iova >> s->shift);
	if (n && n->mag_order >= 0 &&
	    atomic_load_explicit(&n->state, memory_order_acquire) ==
		    IOVA_LIVE(((size - 1) >> s->shift) + 1)) {
		atomic_store_explicit(&n->state, IOVA_ST_CACHED, memory_order_relaxed);
		dg_spin_unlock(&sh->lock);
		return free_push_slow(s, n);
	}
	return free_slow(s, iova, size, sh, n);
}

/*
 * The magazine push path (most frees), kept short: look the start up in the index, check it
 * is LIVE with this size and cacheable, mark it CACHED, push it into this thread's slot.
 * Anything else is a tail call to a slow path, so the hit path calls nothing.
 */
int dg_iova_free(struct dg_iova_space *s, uint64_t iova, uint64_t size)
{
	struct iova_index_shard *sh;
	struct iova_slot *sl;
	struct iova_node *n;
	struct iova_mag *m;
	uint64_t pfn, h, st;
	unsigned int c;

	if (dg_unlikely(!s->mags || !size || (iova & s->gmask)))
		return free_slow(s, iova, size, NULL, NULL);
	pfn = iova >> s->shift;
	h = iova_index_hash(pfn);
	sh = &s->index[h >> (64 - IOVA_INDEX_SHARD_BITS)];
	if (dg_unlikely(!dg_spin_trylock(&sh->lock)))
		return free_locked_slow(s, iova, size);
	n = *iova_index_chain(sh, h);
	while (n && n->lo != pfn)
		n = n->hnext;
	if (dg_unlikely(!n))
		return free_slow(s, iova, size, sh, n);
	/* Acquire pairs with the release store of LIVE in dg_iova_alloc()/alloc_common(). */
	st = atomic_load_explicit(&n->state, memory_order_acquire);
	if (dg_unlikely(st != IOVA_LIVE_SIZE(s, size) || n->mag_order < 0))
		return free_slow(s, iova, size, sh, n);
	/* Relaxed: the shard lock orders this against other frees of the node, and the slot
	 * locks publish it to the allocator that pops the node. */
	atomic_store_explicit(&n->state, IOVA_ST_CACHED, memory_order_relaxed);
	dg_spin_unlock(&sh->lock);

	c = iova_tls_slot;
	if (dg_unlikely(!c))
		return free_push_slow(s, n);
	sl = &s->slots[c & (s->nslots - 1)];
	if (dg_unlikely(!dg_spin_trylock(&sl->lock)))
		return free_push_slow(s, n);
	m = sl->cc[n->cc_idx].loaded;
	if (dg_unlikely(!m || m->n == DG_IOVA_MAG_SIZE))
		return free_push_locked_slow(s, sl, n);
	m->e[m->n++] = n;
	dg_spin_unlock(&sl->lock);
	return 0;
}

/* ---- owned ranges (iova_owned.h) ---- */

int iova_alloc_owned(struct dg_iova_space *s, uint64_t size, uint64_t limit, uint64_t *iova,
		     uint64_t *token)
{
	struct iova_node *n = alloc_hit(s, size, limit, 0);
	int err;

	if (dg_likely(n)) {
		*iova = n->lo << s->shift;
		*token = (uint64_t)(uintptr_t)n;
		return 0;
	}
	n = NULL;
	err = alloc_common(s, size, limit, 0, iova, true, &n);
	*token = (uint64_t)(uintptr_t)n;
	return err;
}

/* An owned free that cannot take the short way: the validated public path. */
static dg_noinline void free_owned_slow(struct dg_iova_space *s, struct iova_slot *sl,
					const struct iova_owned *r)
{
	if (sl)
		dg_spin_unlock(&sl->lock);
	dg_iova_free(s, r->iova, r->size);
}

void iova_free_owned(struct dg_iova_space *s, const struct iova_owned *r, unsigned int n)
{
	struct iova_slot *sl = NULL;

	for (unsigned int i = 0; i < n; i++) {
		struct iova_node *x = (struct iova_node *)(uintptr_t)r[i].token;
		struct iova_mag *m;

		/*
		 * The token is the node alloc_hit() popped; the owner's proof (a claimed map
		 * record) makes this thread the only one freeing it. Still checked on its face:
		 * a token of another range or another size takes the validated path.
		 * Relaxed: the owner's claim ordered the allocator's LIVE store before us.
		 */
		if (dg_unlikely(!x || x->lo != r[i].iova >> s->shift ||
				atomic_load_explicit(&x->state, memory_order_relaxed) !=
					IOVA_LIVE_SIZE(s, r[i].size))) {
			free_owned_slow(s, sl, &r[i]);
			sl = NULL;
			continue;
		}
		if (!sl)
			sl = iova_slot_lock(s);
		/* Relaxed: the slot lock publishes it to the allocator that pops the node (as in
		 * dg_iova_free); stored under the slot lock so that dg_iova_check(), which holds
		 * every slot lock, sees CACHED exactly for the nodes in a magazine. */
		atomic_store_explicit(&x->state, IOVA_ST_CACHED, memory_order_relaxed);
		m = sl->cc[x->cc_idx].loaded;
		if (dg_likely(m && m->n < DG_IOVA_MAG_SIZE)) {
			m->e[m->n++] = x;
			continue;
		}
		if (!iova_mag_free_slow(s, sl, x)) { /* unlocks */
			count_event(&s->st_user_tree_frees);
			iova_release_cached(s, &x, 1);
		}
		sl = NULL;
	}
	if (sl)
		dg_spin_unlock(&sl->lock);
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
				st_size = (st >> IOVA_ST_SHIFT) << s->shift;
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
	x->hnext = NULL;
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
	if (s->mags)
		for (unsigned int i = 0; i < IOVA_INDEX_SHARDS; i++)
			dg_spin_lock(&s->index[i].lock);
}

static void unlock_everything(struct dg_iova_space *s)
{
	if (s->mags)
		for (unsigned int i = IOVA_INDEX_SHARDS; i-- > 0;)
			dg_spin_unlock(&s->index[i].lock);
	pthread_mutex_unlock(&s->tree_lock);
	iova_mag_unlock_all(s);
}

#define SCHECK(cond, ...)                                           \
	do {                                                        \
		if (!(cond)) {                                      \
			if (why) {                                  \
				fprintf(why, "iova: " __VA_ARGS__); \
				fputc('\n', why);                   \
			}                                           \
			err = -EUCLEAN;                             \
			goto out;                                   \
		}                                                   \
	} while (0)

static int check_nodes(struct dg_iova_space *s, FILE *why, uint64_t *cached)
{
	struct iova_tree *t = &s->tree;
	uint64_t saved = t->visits;
	int err = 0;

	*cached = 0;
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
		int8_t order = n->mag_order;
		uint8_t zone = n->zone;

		node_classify(s, n);
		SCHECK(order == n->mag_order && zone == n->zone,
		       "node %#llx: class %d zone %u, expected %d %u", (unsigned long long)n->lo,
		       order, zone, n->mag_order, n->zone);
		SCHECK((st & IOVA_ST_LIVE && st >> IOVA_ST_SHIFT >= 1 &&
			st >> IOVA_ST_SHIFT <= n->len) ||
			       (s->mags && st == IOVA_ST_CACHED),
		       "node %#llx: bad state %#llx", (unsigned long long)n->lo,
		       (unsigned long long)st);
		SCHECK(!(st & IOVA_ST_LIVE) || dg_roundup_pow2(st >> IOVA_ST_SHIFT) == n->len ||
			       st >> IOVA_ST_SHIFT == n->len,
		       "node %#llx: %llu granules reserved for %llu asked",
		       (unsigned long long)n->lo, (unsigned long long)n->len,
		       (unsigned long long)(st >> IOVA_ST_SHIFT));
		if (st == IOVA_ST_CACHED) {
			SCHECK(n->mag_order >= 0, "node %#llx cached but not cacheable",
			       (unsigned long long)n->lo);
			(*cached)++;
		}
		if (s->mags) {
			struct iova_index_shard *sh = iova_index_shard(s, n->lo);

			SCHECK(iova_index_lookup(sh, n->lo) == n, "node %#llx not in the index",
			       (unsigned long long)n->lo);
		}
	}
out:
	t->visits = saved;
	return err;
}

int dg_iova_check(const struct dg_iova_space *cs, FILE *why)
{
	struct dg_iova_space *s = (struct dg_iova_space *)cs; /* locks */
	uint64_t cached = 0;
	int err;

	lock_everything(s);
	if ((err = iova_tree_check(&s->tree, why)) || (err = check_nodes(s, why, &cached)))
		goto out;
	SCHECK(load_relaxed(&s->st_nodes) == s->tree.nodes &&
		       load_relaxed(&s->st_allocated) == s->tree.allocated &&
		       load_relaxed(&s->st_reserved) == s->tree.reserved,
	       "published tree counters stale");
	if (s->mags) {
		SCHECK(iova_index_count(s) == s->tree.allocated,
		       "index holds %llu nodes, tree %llu allocations",
		       (unsigned long long)iova_index_count(s),
		       (unsigned long long)s->tree.allocated);
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
		"iova space [%#llx, %#llx] granule %#llx algo %s magazines %s slots %u zones %u\n",
		(unsigned long long)(s->start_pfn << s->shift),
		(unsigned long long)(((s->end_pfn + 1) << s->shift) - 1),
		(unsigned long long)s->granule,
		s->algo == DG_IOVA_ALGO_AUGMENTED ? "augmented" : "linux-reference",
		s->mags ? "on" : "off", s->nslots, s->nzones);
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
