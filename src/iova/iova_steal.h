/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_steal.h - the owner/stealer handshake of a per-thread cache (library private): one
 * implementation for the IOVA magazines (iova_mag.c) and the bounce policy's slot stacks
 * (dma/bounce.c).
 *
 * A cache belongs to one thread (its owner), which enters and leaves it around every use with
 * no atomic read-modify-write; rarely another thread (a stealer) must take it - to empty it,
 * count it, check it - while the owner may be running, parked on a barrier for good, or gone.
 * The asymmetric handshake sys_membarrier exists for (liburcu's urcu-memb; membarrier(2)):
 *
 *   owner (iova_steal_try)                    stealer (one at a time: its user's lock held)
 *     busy = 1                  (relaxed)       steal |= IOVA_STEAL_HELD  (seq_cst)   _mark
 *     compiler barrier                          membarrier(PRIVATE_EXPEDITED)         _barrier
 *     if (steal) { busy = 0; slow path }        while (busy) wait         (acquire)   _wait
 *     use the cache                             use the cache
 *     busy = 0                  (release)       steal &= ~HELD            (release)   _unmark
 *     (iova_steal_leave)
 *
 * membarrier() makes every running thread of the process execute a full memory barrier
 * before it returns, so each side's store comes before its load in one order both agree on:
 * either the owner's busy = 1 is visible to the stealer (which waits for busy = 0), or the
 * owner's load of steal comes after the barrier and sees HELD (and the owner leaves without
 * touching the cache, clears busy and waits in iova_steal_enter() holding nothing, then
 * enters again). The owner pays two plain stores, a load and a branch per use; the stealer
 * pays a system call (microseconds), which is right for operations this rare.
 *
 * Without membarrier (ENOSYS, EINVAL: an old kernel, a sandbox; DG_IOVA_NO_MEMBARRIER=1;
 * iova_mag_global_init() decides for the process) a cache carries IOVA_STEAL_FALLBACK in its
 * steal word from birth (iova_steal_init), so iova_steal_try() never enters it and
 * iova_steal_enter() does, with an exchange on busy (seq_cst) and a seq_cst load of steal
 * against the stealer's seq_cst store of steal and load of busy: Dekker's protocol, one
 * atomic read-modify-write per entry. A stealer calls iova_steal_barrier() when any cache it
 * marked lacks the flag (iova_steal_mark() says so).
 *
 * What every user keeps (the protocol's invariants):
 *  - the owner touches the cache only between iova_steal_try()/iova_steal_enter() and
 *    iova_steal_leave(); a stealer only between its iova_steal_wait() and iova_steal_unmark();
 *  - there is one stealer at a time (the user's lock: iova_mag.c's registry lock, bounce.c's
 *    tc_reg_lock), and it is never inside a cache it waits for (it would wait for itself);
 *  - an owner inside its cache never waits for anything a stealer holds while waiting (it may
 *    take locks the stealer takes only after its waits: depot, tree, area locks); an owner
 *    that meets HELD waits holding nothing.
 *
 * Where the two users differ (each preamble says the same of itself):
 *  - iova_mag.c takes EVERY cache of a space, the caller's own included (a stealer is never
 *    inside a cache of the space: flush, stats, check and destroy run outside them), marks all,
 *    one barrier, waits for all, and holds them all at once until it is done - flush, stats
 *    and dg_iova_check() need the whole space's magazines still at one moment (a CACHED node
 *    in exactly one magazine);
 *  - bounce.c takes every cache of an instance BUT the thief's own, which it drains first as
 *    its owner (it runs dry inside a map, outside its cache); marks all, one barrier, then
 *    waits for, drains and gives back each cache in turn - a drain moves slots to the areas,
 *    which each have their own lock, so nothing needs two caches held at once, and an owner
 *    is held back only for its own drain.
 */
#ifndef DG_IOVA_STEAL_H
#define DG_IOVA_STEAL_H

#include "base/compiler.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* steal word bits */
#define IOVA_STEAL_HELD	    1u /* a stealer holds the cache (its user's lock held) */
#define IOVA_STEAL_FALLBACK 2u /* no membarrier: the owner enters with an exchange */

/* The handshake words of one thread cache (the first member of iova_tcache, bounce_tcache). */
struct iova_steal {
	_Atomic uint32_t busy;	/* 1 while the owner is inside (owner writes) */
	_Atomic uint32_t steal; /* IOVA_STEAL_HELD (the stealer) | IOVA_STEAL_FALLBACK (fixed) */
};

/* A new cache's words, before it is published: @memb, owners enter without an RMW. */
static inline void iova_steal_init(struct iova_steal *x, bool memb)
{
	atomic_init(&x->busy, 0);
	atomic_init(&x->steal, memb ? 0 : IOVA_STEAL_FALLBACK);
}

/*
 * Owner: enter on the fast path. False (nothing changed, nothing held) when a stealer holds
 * the cache or it runs without membarrier (IOVA_STEAL_FALLBACK): then iova_steal_enter().
 * No atomic read-modify-write: busy = 1 (relaxed), a compiler barrier, then the steal word;
 * the stealer's membarrier() makes the two sides' store-then-load pairs exclusive.
 */
static dg_always_inline bool iova_steal_try(struct iova_steal *x)
{
	atomic_store_explicit(&x->busy, 1, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst); /* the kernel's barrier stands in (membarrier) */
	/* Acquire pairs with the release store of the steal word in iova_steal_unmark(): what
	 * the last stealer did to the cache happens before the owner's use. */
	if (dg_likely(!atomic_load_explicit(&x->steal, memory_order_acquire)))
		return true;
	/* Release pairs with the stealer's acquire load of busy (iova_steal_wait). */
	atomic_store_explicit(&x->busy, 0, memory_order_release);
	return false;
}

/* Owner: enter, waiting while a stealer holds the cache (holding nothing meanwhile); the
 * fallback's exchange too. Out of line (iova_mag.c). */
void iova_steal_enter(struct iova_steal *x);

/* Owner: leave; a stealer may take the cache from now on. */
static dg_always_inline void iova_steal_leave(struct iova_steal *x)
{
	/* Release pairs with the stealer's acquire load of busy (iova_steal_wait): all the
	 * owner did to the cache happens before the stealer touches it. */
	atomic_store_explicit(&x->busy, 0, memory_order_release);
}

/* Stealer (its user's lock held): mark the cache held. True when the owner enters without an
 * RMW, so iova_steal_barrier() must run before the first iova_steal_wait(). */
static inline bool iova_steal_mark(struct iova_steal *x)
{
	uint32_t w = atomic_load_explicit(&x->steal, memory_order_relaxed); /* HELD clear */

	/* seq_cst: the store half of Dekker's pair with an owner's exchange of busy and seq_cst
	 * load of steal (fallback); with membarrier the barrier after it orders it. */
	atomic_store_explicit(&x->steal, w | IOVA_STEAL_HELD, memory_order_seq_cst);
	return !(w & IOVA_STEAL_FALLBACK);
}

/* Stealer: a full barrier on every running thread of the process (PRIVATE_EXPEDITED,
 * registered by iova_mag_global_init()), between the marks and the waits. Aborts if the
 * kernel refuses it once registered (an owner may be inside: there is no safe way on). */
void iova_steal_barrier(void);

/* Stealer: wait until the owner of a marked cache is outside it (after the barrier). */
void iova_steal_wait(struct iova_steal *x);

/* Stealer: give the cache back to its owner. */
static inline void iova_steal_unmark(struct iova_steal *x)
{
	uint32_t w = atomic_load_explicit(&x->steal, memory_order_relaxed); /* only we write */

	/* Release pairs with the owner's acquire load of steal (iova_steal_try,
	 * iova_steal_enter): what the stealer did to the cache happens before the owner's next
	 * use. */
	atomic_store_explicit(&x->steal, w & ~IOVA_STEAL_HELD, memory_order_release);
}

#endif
