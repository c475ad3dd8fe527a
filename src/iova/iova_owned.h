/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_owned.h - allocations whose owner keeps the proof of ownership (library private).
 *
 * dg_iova_free() validates every free through the live-range index (a lock-free hash lookup
 * and a compare-exchange, iova_index.c): no caller mistake can push a range into a magazine
 * twice. The DMA layer does not need that check: its map record (src/dma/map_record.c)
 * already proves that the range is live and that this thread won the one claim that may free
 * it. So it keeps the token iova_alloc_owned() hands out (the allocator's node) in the
 * record, and gives ranges back with iova_free_owned(), which skips the index and pushes a
 * whole batch into this thread's magazines inside one entry of its thread cache (the batch
 * end of dg_dma_batch_end()): with membarrier, no atomic read-modify-write at all.
 *
 * The token is checked on its face (the node starts at the IOVA and is LIVE with this size);
 * anything else, and a token of 0 (the range came from the tree, not a magazine), takes the
 * validated dg_iova_free() path. What the short path relies on: no other free of the same
 * range runs concurrently (the caller's proof), so never mix it with dg_iova_free() of a
 * range someone else may free. The space's invariants (dg_iova_check) are the same either way.
 */
#ifndef DG_IOVA_OWNED_H
#define DG_IOVA_OWNED_H

#include <dmaguard/iova.h>

#include "iova/iova_priv.h"

#include <stdint.h>

struct iova_owned {
	uint64_t iova;	/* what iova_alloc_owned() returned ... */
	uint64_t size;	/* ... for this size */
	uint64_t token; /* ... with this token (0: none) */
};

/* iova_alloc_owned() past a magazine hit (iova.c). */
int iova_alloc_owned_miss(struct dg_iova_space *s, uint64_t size, uint64_t limit, uint64_t *iova,
			  uint64_t *token);

/* dg_iova_alloc(s, size, limit, 0, iova) that also returns the range's token (0 when the
 * range did not come from a magazine). Same errors. Any thread. The magazine hit is inline
 * (iova_alloc_hit): the DMA layer's map calls nothing here. */
static inline int iova_alloc_owned(struct dg_iova_space *s, uint64_t size, uint64_t limit,
				   uint64_t *iova, uint64_t *token)
{
	struct iova_node *n;

	if (dg_unlikely(!iova_alloc_hit(s, size, limit, iova, &n)))
		return iova_alloc_owned_miss(s, size, limit, iova, token);
	*token = (uint64_t)(uintptr_t)n;
	return 0;
}

/*
 * iova_alloc_owned() of @n ranges of @size each (a driver's ring refill): the magazine hits
 * are taken inside one entry of this thread's cache (in the order a magazine hands them out:
 * ascending when they were given back highest first), the rest one at a time. All or nothing:
 * 0 with iova[0..n) and token[0..n) set, or the error of the allocation that failed with
 * every range this call took given back. Any thread.
 */
int iova_alloc_owned_bulk(struct dg_iova_space *s, uint64_t size, uint64_t limit, unsigned int n,
			  uint64_t *iova, uint64_t *token);

/* Give back @n owned ranges (see above). Ranges whose token does not check out go through
 * dg_iova_free() (counted as bad frees there if they are bad). Any thread. */
void iova_free_owned(struct dg_iova_space *s, const struct iova_owned *r, unsigned int n);

/* An owned free that cannot take the short way (leaves the cache @tc if entered, then the
 * validated dg_iova_free()) (iova.c). */
void iova_free_owned_slow(struct dg_iova_space *s, struct iova_tcache *tc, uint64_t iova,
			  uint64_t size);

/*
 * iova_free_owned() one range at a time, for a caller that walks its own list (the DMA
 * batch end): *tcp starts NULL, and iova_free_owned_end() after the last range. This
 * thread's cache is entered once for the whole walk (again after a slow step, which leaves
 * it); each range is checked on its face with one load of its node's state, then pushed
 * into its magazine.
 */
static dg_always_inline void iova_free_owned_one(struct dg_iova_space *s, struct iova_tcache **tcp,
						 uint64_t iova, uint64_t size, uint64_t token)
{
	struct iova_node *x = (struct iova_node *)(uintptr_t)token;
	struct iova_tcache *tc = *tcp;
	struct iova_mag *m;
	uint64_t st;

	/*
	 * The token is the node alloc_hit() popped; the owner's proof (a claimed map record)
	 * makes this thread the only one freeing it. Still checked on its face: a token of
	 * another range or another size takes the validated path. Relaxed: the owner's claim
	 * ordered the allocator's LIVE store before us.
	 */
	if (dg_unlikely(!x || x->lo != iova >> s->shift))
		goto slow;
	st = atomic_load_explicit(&x->state, memory_order_relaxed);
	if (dg_unlikely((st & IOVA_ST_LOW) != IOVA_LIVE_SIZE(s, size)))
		goto slow;
	if (dg_unlikely(!tc) && !iova_tc_enter(s, &tc) && !(tc = iova_tc_lock(s))) {
		iova_free_owned_slow(s, NULL, iova, size); /* no memory for a cache */
		*tcp = NULL;
		return;
	}
	/* Relaxed: only this thread pops it from its cache (a stealer releases it to the tree
	 * after its handshake with us, iova_mag.c); stored inside the cache so that
	 * dg_iova_check(), which steals every cache, sees CACHED exactly for the nodes in a
	 * magazine. A stealer never changes the state of a LIVE node: @st is current. */
	atomic_store_explicit(&x->state, (st & ~IOVA_ST_LOW) | IOVA_ST_CACHED,
			      memory_order_relaxed);
	m = tc->cc[x->cc_idx].loaded;
	if (dg_likely(m->n < DG_IOVA_MAG_SIZE)) {
		m->e[m->n++] = x;
		*tcp = tc;
		return;
	}
	iova_mag_free_slow(s, tc, x); /* leaves */
	*tcp = NULL;
	return;
slow:
	iova_free_owned_slow(s, tc, iova, size);
	*tcp = NULL;
}

/* The end of a walk of iova_free_owned_one(): leave the cache if it is entered. */
static inline void iova_free_owned_end(struct iova_tcache *tc)
{
	if (tc)
		iova_tc_exit(tc);
}

#endif /* DG_IOVA_OWNED_H */
