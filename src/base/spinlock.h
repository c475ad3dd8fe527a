/* SPDX-License-Identifier: MIT */
/*
 * base/spinlock.h - a test-and-test-and-set lock for short critical sections (private).
 *
 * For locks held for a few dozen instructions and almost never contended (per-CPU magazine
 * slots, hash shards): an uncontended lock is one atomic exchange, an unlock one release store.
 * A waiter spins on a plain load (no cache-line ping-pong) and yields the CPU after a while,
 * because this machine is shared and the holder may be descheduled. Everything is C11
 * <stdatomic.h>, so ThreadSanitizer sees the acquire/release pairs.
 */
#ifndef DG_BASE_SPINLOCK_H
#define DG_BASE_SPINLOCK_H

#include "base/clock.h"
#include "base/compiler.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

struct dg_spinlock {
	atomic_uint v; /* 0 free, 1 held */
};

#define DG_SPINLOCK_INIT \
	{                \
		0        \
	}

static inline void dg_spin_init(struct dg_spinlock *l)
{
	atomic_init(&l->v, 0);
}

/* Acquire pairs with the release in dg_spin_unlock() of the previous holder. (Exchanging a
 * held lock's 1 for 1 is harmless, so no test before the exchange: one instruction less on the
 * uncontended path this is for.) */
static inline bool dg_spin_trylock(struct dg_spinlock *l)
{
	return !atomic_exchange_explicit(&l->v, 1, memory_order_acquire);
}

static dg_unused dg_noinline void dg_spin_lock_slow(struct dg_spinlock *l)
{
	unsigned int spins = 0;

	for (;;) {
		while (atomic_load_explicit(&l->v, memory_order_relaxed)) {
			if (++spins < 128) {
				dg_cpu_relax();
			} else {
				spins = 0;
				sched_yield();
			}
		}
		/* Acquire pairs with the release in dg_spin_unlock(). */
		if (!atomic_exchange_explicit(&l->v, 1, memory_order_acquire))
			return;
	}
}

static inline void dg_spin_lock(struct dg_spinlock *l)
{
	/* Acquire pairs with the release in dg_spin_unlock() of the previous holder. */
	if (dg_likely(!atomic_exchange_explicit(&l->v, 1, memory_order_acquire)))
		return;
	dg_spin_lock_slow(l);
}

/* Release pairs with the acquire exchange in dg_spin_lock()/dg_spin_trylock() of the next
 * holder: everything written in the critical section is visible to it. */
static inline void dg_spin_unlock(struct dg_spinlock *l)
{
	atomic_store_explicit(&l->v, 0, memory_order_release);
}

#endif /* DG_BASE_SPINLOCK_H */
