/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_mag.c - per-thread magazine caches and the depot in front of the tree.
 *
 * Bonwick & Adams, "Magazines and Vmem" (USENIX ATC 2001), as Linux's iova rcache applies it
 * (Peleg et al., ATC'15): a magazine is a stack of DG_IOVA_MAG_SIZE (127) freed ranges of one
 * size class. Each thread cache has, per size class and zone, a "loaded" magazine that alloc
 * pops and free pushes, and a "previous" one that is always either full or empty:
 *
 *   alloc: loaded non-empty -> pop; else prev full -> swap, pop; else depot has a full one ->
 *          give the empty prev back to the depot, prev = loaded, loaded = the full one, pop;
 *          else miss: the caller goes to the tree.
 *   free:  loaded not full -> push; else prev empty -> swap, push; else the depot takes the
 *          full prev (if it has room: otherwise that magazine's ranges go back to the tree),
 *          prev = loaded, loaded = an empty magazine, push.
 *
 * So a thread goes to the depot at most once per 127 operations, and to the tree only when
 * the depot has nothing for it.
 *
 * Size classes: every power of two from 1 to 2^DG_IOVA_MAG_MAX_ORDER granules (2 MiB with a 4
 * KiB granule: all NVMe and TSO sizes). A range is cacheable when its length is such a power
 * of two and it is naturally aligned, so a cached range serves any request of its class, with
 * either alignment.
 *
 * Limits (zones): a cached range must never be handed to a caller whose limit it exceeds, and
 * scanning a magazine for one that fits (Linux's iova_magazine_pop) is linear. Instead every
 * cached range belongs to one zone by its address and every request maps to one zone by its
 * limit, and the zones are chosen so that any range of the request's zone fits:
 *   ZONE_FULL   ranges that end above 4 GiB - 1 (all ranges if the space ends below 4 GiB);
 *               used by requests whose limit reaches the end of the space;
 *   ZONE_DMA32  ranges that end at or below 4 GiB - 1 (spaces reaching above 4 GiB only);
 *               used by requests whose limit is at least 4 GiB - 1 but below the end.
 * A request with any other limit (below 4 GiB - 1, say a 24-bit device) goes to the tree,
 * which is O(log n) anyway. A 64-bit device never takes a DMA32 range from a cache, which
 * keeps the space 32-bit devices depend on for them.
 *
 * Thread caches instead of per-CPU slots: user space cannot pin a slot to a CPU, so a per-CPU
 * slot needs a lock (a trylock per operation: an atomic read-modify-write, ~7 ns here, two per
 * alloc+free pair). A cache owned by one thread needs none against its owner. What still
 * needs the cache from other threads - dg_iova_flush_caches() (and the flush-and-retry of an
 * allocation that found the tree full), dg_iova_destroy(), the cached count of the stats,
 * dg_iova_check()/dump() and the thread's exit - "steals" it with an asymmetric handshake,
 * the one sys_membarrier exists for (liburcu's urcu-memb; membarrier(2)), in iova_steal.h
 * (shared with the bounce policy's slot stacks, dma/bounce.c):
 *
 *   owner (iova_tc_enter)                     stealer (steal_all, registry lock held)
 *     busy = 1                  (relaxed)       steal |= HELD             (seq_cst)
 *     compiler barrier                          membarrier(PRIVATE_EXPEDITED)
 *     if (steal) { busy = 0; slow path }        while (busy) wait         (acquire)
 *     pop / push                                take, count or check the magazines
 *     busy = 0                  (release)       steal &= ~HELD            (release)
 *
 * Either the owner's busy = 1 is visible to the stealer (which waits for busy = 0), or the
 * owner's load of steal comes after the stealer's membarrier() and sees HELD (and the owner
 * leaves without touching the cache, clears busy and waits holding no lock, then enters
 * again). The owner pays two plain stores and a load; the stealer a system call. Without
 * membarrier (ENOSYS, EINVAL: an old kernel, a sandbox; or DG_IOVA_NO_MEMBARRIER=1 in the
 * environment, or iova_mag_force_fallback() in tests) a space's caches carry
 * IOVA_STEAL_FALLBACK, so the fast path never enters them and iova_tc_lock() does, with an
 * exchange on busy: Dekker's protocol. iova_steal.h has the orderings and why they suffice.
 *
 * How this file steals (where the bounce policy differs, see iova_steal.h): steal_all()
 * takes EVERY cache of the space, the caller's own included - every stealer (flush, stats,
 * check, dump, destroy, an allocation's flush-and-retry) runs outside the space's caches, so
 * it never waits for itself - marks them all, one membarrier(), waits for every owner, and
 * holds them all until unsteal_all(): the flush, the cached count and dg_iova_check() need
 * the whole space's magazines still at one moment (every CACHED node in exactly one
 * magazine), where bounce's reclaim drains and gives back one cache at a time.
 *
 * Finding the cache: the thread-local iova_tls remembers the caches of the last IOVA_TLS_WAYS
 * spaces, by space id; the fast paths check the first only, iova_tc_lock() the others, then
 * the thread's list of caches (registry lock), and makes a cache if it has none for the space
 * (with a loaded magazine in every cache of the space's zones, as Linux's rcache init does, so
 * the hit paths need no test for a missing one).
 *
 * Lifetime (the registry lock, one for the process, protects both lists a cache is on: its
 * space's and its thread's):
 *  - a thread that exits gives its caches back (a pthread key destructor): full magazines to
 *    the depot while it has room, every other range to the tree; its counters are kept;
 *  - dg_iova_destroy() frees the caches of every thread still holding one (the callers'
 *    contract: no operation on the space runs concurrently), unlinking them from their
 *    threads' lists; iova_tls entries that still point to them carry the dead space's id,
 *    which is never matched again;
 *  - a thread that goes idle without exiting keeps its cached ranges until a flush, like a
 *    Linux CPU that stops doing DMA keeps its per-CPU magazines; dg_iova_flush_caches()
 *    (called on -ENOSPC anyway) returns them.
 *
 * Depot trimming: a depot (per class and zone) holds at most DG_IOVA_DEPOT_MAX full
 * magazines; a free that would overflow it sends a magazine's worth of ranges back to the
 * tree (as Linux 6.1 does). dg_iova_trim() is the gradual policy on top (Bonwick's working
 * set): each call returns one full magazine from every depot whose count of full magazines
 * never dropped to zero since the previous call (so at least one sat unused all the while),
 * and frees one spare empty magazine likewise. The DMA layer calls it from its housekeeping
 * tick (Linux's equivalent runs every 100 ms); without calls the depot bound still holds.
 *
 * The hit paths (iova_tc_enter in iova_priv.h, inlined into dg_iova_alloc and dg_iova_free)
 * are: enter the cache, pop or push, leave. Everything else is here.
 *
 * Locking: registry lock, then a thread cache (a stealer's), then the depot lock (lock order
 * in iova_priv.h); an owner inside its cache takes only depot and tree locks, and one that
 * waits for a stealer holds none. A cache's hit and miss counters are plain fields written by
 * the owner inside it and read by dg_iova_get_stats() with the cache stolen (a gone cache's
 * counts move to the space's st_gone_*); the number of cached ranges is counted from the
 * magazines with every cache stolen for a moment when asked for.
 *
 * Invariants (dg_iova_check() verifies the magazine ones, with the registry lock, every cache
 * stolen and every depot locked):
 *  - a thread cache is on exactly its space's list and its thread's list, and has a loaded
 *    magazine in every class of the space's zones; prev is empty or full;
 *  - every CACHED node is in exactly one magazine (of a cache or a depot) of its class and
 *    zone: ranges leave a magazine for the tree while its cache is still held (or under the
 *    registry lock: flush, trim, thread exit), never after;
 *  - only the owner enters its cache, and only while no stealer holds it; a stealer holds the
 *    registry lock, so there is at most one.
 */
#include "iova/iova_priv.h"

#include "base/clock.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct iova_mag *mag_new(struct dg_iova_space *s)
{
	struct iova_mag *m = iova_malloc(s, sizeof(*m));

	if (m)
		m->n = 0;
	return m;
}

static inline void depot_set_nfull(struct iova_depot *d, uint32_t n)
{
	d->nfull = n;
	if (n < d->full_low)
		d->full_low = n;
	atomic_store_explicit(&d->nfull_pub, n, memory_order_relaxed);
}

_Thread_local struct iova_tls iova_tls __attribute__((tls_model("initial-exec")));
static _Thread_local struct iova_thr iova_thr; /* this thread's caches (registry lock) */
static _Thread_local bool iova_thr_keyed;      /* the exit destructor is armed */

static pthread_mutex_t iova_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t iova_once = PTHREAD_ONCE_INIT;
static pthread_key_t iova_key;
static int iova_init_err;
static bool iova_memb_ok; /* membarrier registered (set once, before any space exists) */

static void tc_thread_exit(void *arg);

static void global_init(void)
{
	const char *env = getenv("DG_IOVA_NO_MEMBARRIER");
	long q;

	if (pthread_key_create(&iova_key, tc_thread_exit)) {
		iova_init_err = -EAGAIN;
		return;
	}
	if (env && *env && strcmp(env, "0") != 0)
		return;
	q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
	if (q < 0 || !(q & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
		return; /* ENOSYS, EINVAL, or the command missing: the fallback */
	iova_memb_ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) ==
		       0;
}

int iova_mag_global_init(void)
{
	pthread_once(&iova_once, global_init);
	return iova_init_err;
}

bool iova_mag_memb(void)
{
	return iova_memb_ok;
}

void iova_mag_force_fallback(struct dg_iova_space *s)
{
	s->memb = false;
}

/*
 * The out-of-line steps of the owner/stealer handshake (iova_steal.h), shared with the
 * bounce policy's slot stacks (dma/bounce.c).
 */

void iova_steal_barrier(void)
{
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		return;
	/* EPERM: not registered. A child of fork() inherits our memory and so iova_memb_ok; the
	 * kernel here carries the registration over too (test_fork_child_steals), but should one
	 * not, register and try again. */
	if (errno == EPERM &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		return;
	/* The command cannot fail otherwise once registered (membarrier(2)); if a kernel ever
	 * made it, there is no safe way on (an owner may be inside its cache): stop. */
	abort();
}

static void wait_relax(unsigned int *spins)
{
	if (++*spins < 128)
		dg_cpu_relax();
	else
		sched_yield();
}

void iova_steal_wait(struct iova_steal *x)
{
	unsigned int spins = 0;

	/* seq_cst (an acquire): pairs with the owner's release store of busy = 0
	 * (iova_steal_leave, or iova_steal_try/enter backing out), so all the owner did happens
	 * before what the stealer does next; and the load half of Dekker's pair (fallback). */
	while (atomic_load_explicit(&x->busy, memory_order_seq_cst))
		wait_relax(&spins);
}

void iova_steal_enter(struct iova_steal *x)
{
	for (;;) {
		uint32_t w = atomic_load_explicit(&x->steal, memory_order_relaxed);
		unsigned int spins = 0;

		if (w & IOVA_STEAL_FALLBACK) {
			/* seq_cst both: Dekker's pair with iova_steal_mark()'s seq_cst store of
			 * steal and iova_steal_wait()'s load of busy; one side sees the other. */
			atomic_exchange_explicit(&x->busy, 1, memory_order_seq_cst);
			w = atomic_load_explicit(&x->steal, memory_order_seq_cst);
		} else {
			atomic_store_explicit(&x->busy, 1, memory_order_relaxed);
			atomic_signal_fence(memory_order_seq_cst); /* see iova_steal_try() */
			/* Acquire pairs with the release store in iova_steal_unmark(). */
			w = atomic_load_explicit(&x->steal, memory_order_acquire);
		}
		if (!(w & IOVA_STEAL_HELD))
			return;
		/* Release pairs with the stealer's acquire load of busy (iova_steal_wait). */
		atomic_store_explicit(&x->busy, 0, memory_order_release);
		/* Acquire pairs with the release store in iova_steal_unmark(). */
		while (atomic_load_explicit(&x->steal, memory_order_acquire) & IOVA_STEAL_HELD)
			wait_relax(&spins);
	}
}

/* Registry lock held, outside every cache of @s: take every cache of @s from its owner, all
 * at once (see the preamble). */
static void steal_all(struct dg_iova_space *s)
{
	bool memb = false;

	for (struct iova_tcache *tc = s->tcs; tc; tc = tc->snext)
		memb |= iova_steal_mark(&tc->sw);
	if (memb)
		iova_steal_barrier();
	for (struct iova_tcache *tc = s->tcs; tc; tc = tc->snext)
		iova_steal_wait(&tc->sw);
}

/* Give every cache back to its owner (registry lock held). */
static void unsteal_all(struct dg_iova_space *s)
{
	for (struct iova_tcache *tc = s->tcs; tc; tc = tc->snext)
		iova_steal_unmark(&tc->sw);
}

/* Free a cache's magazines (registry lock held, the cache out of every list's use). */
static void tc_free(struct iova_tcache *tc)
{
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		free(tc->cc[k].loaded);
		free(tc->cc[k].prev);
	}
	free(tc);
}

/* Unlink @tc from its space's and its thread's lists and keep its counts (registry lock). */
static void tc_unlink(struct iova_tcache *tc)
{
	struct dg_iova_space *s = tc->space;

	atomic_store_explicit(&s->st_gone_hits,
			      atomic_load_explicit(&s->st_gone_hits, memory_order_relaxed) +
				      tc->hits,
			      memory_order_relaxed);
	atomic_store_explicit(&s->st_gone_misses,
			      atomic_load_explicit(&s->st_gone_misses, memory_order_relaxed) +
				      tc->misses,
			      memory_order_relaxed);
	if (tc->sprev)
		tc->sprev->snext = tc->snext;
	else
		s->tcs = tc->snext;
	if (tc->snext)
		tc->snext->sprev = tc->sprev;
	s->ntcs--;
	if (tc->tprev)
		tc->tprev->tnext = tc->tnext;
	else
		tc->thr->head = tc->tnext;
	if (tc->tnext)
		tc->tnext->tprev = tc->tprev;
}

/* This thread's cache of @s from its list, or a new one; NULL without memory. */
static struct iova_tcache *tc_get(struct dg_iova_space *s)
{
	struct iova_tcache *tc;

	pthread_mutex_lock(&iova_reg_lock);
	for (tc = iova_thr.head; tc; tc = tc->tnext) {
		if (tc->space_id == s->id)
			goto out;
	}
	if (!iova_thr_keyed) {
		/* a non-NULL value arms the destructor for this thread */
		if (pthread_setspecific(iova_key, &iova_thr))
			goto out; /* tc is NULL: no cache for this thread */
		iova_thr_keyed = true;
	}
	tc = s->fail_alloc && s->fail_alloc(s->fail_arg, sizeof(*tc)) ?
		     NULL :
		     aligned_alloc(DG_CACHELINE, dg_align_up(sizeof(*tc), DG_CACHELINE));
	if (!tc)
		goto out;
	memset(tc, 0, sizeof(*tc));
	for (unsigned int k = 0; k < s->nzones * IOVA_ORDERS; k++) {
		if (!(tc->cc[k].loaded = mag_new(s))) {
			tc_free(tc);
			tc = NULL;
			goto out;
		}
	}
	iova_steal_init(&tc->sw, s->memb);
	tc->space = s;
	tc->space_id = s->id;
	tc->thr = &iova_thr;
	tc->snext = s->tcs;
	if (s->tcs)
		s->tcs->sprev = tc;
	s->tcs = tc;
	s->ntcs++;
	tc->tnext = iova_thr.head;
	if (iova_thr.head)
		iova_thr.head->tprev = tc;
	iova_thr.head = tc;
out:
	pthread_mutex_unlock(&iova_reg_lock);
	return tc;
}

struct iova_tcache *iova_tc_lock(struct dg_iova_space *s)
{
	struct iova_tcache *tc;
	unsigned int i;

	for (i = 0; i < IOVA_TLS_WAYS; i++) {
		if (iova_tls.id[i] == s->id) {
			tc = iova_tls.tc[i];
			goto found;
		}
	}
	if (!(tc = tc_get(s)))
		return NULL;
	i = IOVA_TLS_WAYS - 1;
found:
	for (; i > 0; i--) { /* most recent first */
		iova_tls.id[i] = iova_tls.id[i - 1];
		iova_tls.tc[i] = iova_tls.tc[i - 1];
	}
	iova_tls.id[0] = s->id;
	iova_tls.tc[0] = tc;
	iova_steal_enter(&tc->sw);
	return tc;
}

/* Thread exit: give every cache of this thread back to its space (see the preamble). */
/* Give @m's ranges back to the tree, then keep it as one of @d's spare empty magazines (or
 * free it when the depot has enough). */
static void put_empty(struct dg_iova_space *s, struct iova_depot *d, struct iova_mag *m)
{
	if (m->n)
		iova_release_cached(s, m->e, m->n);
	m->n = 0;
	dg_spin_lock(&d->lock);
	if (d->nempty < DG_IOVA_DEPOT_MAX) {
		d->empty[d->nempty++] = m;
		m = NULL;
	}
	dg_spin_unlock(&d->lock);
	free(m);
}

static void tc_thread_exit(void *arg)
{
	struct iova_thr *thr = arg;

	pthread_mutex_lock(&iova_reg_lock);
	while (thr->head) {
		struct iova_tcache *tc = thr->head;
		struct dg_iova_space *s = tc->space;

		tc_unlink(tc);
		for (unsigned int k = 0; k < IOVA_CCS; k++) {
			struct iova_mag *mags[2] = {tc->cc[k].loaded, tc->cc[k].prev};
			struct iova_depot *d = &s->depot[k];

			for (unsigned int j = 0; j < 2; j++) {
				struct iova_mag *m = mags[j];

				if (!m)
					continue;
				dg_spin_lock(&d->lock);
				if (m->n == DG_IOVA_MAG_SIZE && d->nfull < DG_IOVA_DEPOT_MAX) {
					d->full[d->nfull] = m;
					depot_set_nfull(d, d->nfull + 1);
					m = NULL;
				}
				dg_spin_unlock(&d->lock);
				if (m)
					put_empty(s, d, m);
			}
			tc->cc[k].loaded = tc->cc[k].prev = NULL;
		}
		free(tc);
	}
	pthread_mutex_unlock(&iova_reg_lock);
	memset(&iova_tls, 0, sizeof(iova_tls)); /* the entries point to freed caches */
	iova_thr_keyed = false;
}

uint64_t iova_mag_ncaches(struct dg_iova_space *s)
{
	uint64_t n;

	pthread_mutex_lock(&iova_reg_lock);
	n = s->ntcs;
	pthread_mutex_unlock(&iova_reg_lock);
	return n;
}

int iova_mag_init(struct dg_iova_space *s)
{
	for (unsigned int i = 0; i < IOVA_CCS; i++)
		dg_spin_init(&s->depot[i].lock);
	return 0;
}

void iova_mag_fini(struct dg_iova_space *s)
{
	pthread_mutex_lock(&iova_reg_lock);
	while (s->tcs) {
		struct iova_tcache *tc = s->tcs;

		tc_unlink(tc);
		tc_free(tc);
	}
	pthread_mutex_unlock(&iova_reg_lock);
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		struct iova_depot *d = &s->depot[k];

		for (unsigned int i = 0; i < d->nfull; i++)
			free(d->full[i]);
		for (unsigned int i = 0; i < d->nempty; i++)
			free(d->empty[i]);
		d->nfull = d->nempty = 0;
	}
}

/* An empty magazine from the depot's spares or the heap; NULL without memory. */
static struct iova_mag *get_empty(struct dg_iova_space *s, struct iova_depot *d)
{
	struct iova_mag *m = NULL;

	dg_spin_lock(&d->lock);
	if (d->nempty) {
		m = d->empty[--d->nempty];
		if (d->nempty < d->empty_low)
			d->empty_low = d->nempty;
	}
	dg_spin_unlock(&d->lock);
	return m ? m : mag_new(s);
}

/* Alloc with loaded empty (cache @tc entered; leaves it). */
struct iova_node *iova_mag_alloc_slow(struct dg_iova_space *s, struct iova_tcache *tc,
				      unsigned int idx, uint64_t live)
{
	struct iova_cpu_cache *cc = &tc->cc[idx];
	struct iova_depot *d = &s->depot[idx];
	struct iova_mag *m, *spare = NULL;
	struct iova_node *n;

	if (cc->prev && cc->prev->n) { /* prev is full */
		m = cc->prev;
		cc->prev = cc->loaded;
		cc->loaded = m;
		goto pop;
	}
	dg_spin_lock(&d->lock);
	if (!d->nfull) {
		dg_spin_unlock(&d->lock);
		tc->misses++;
		iova_tc_exit(tc);
		return NULL;
	}
	m = d->full[d->nfull - 1];
	depot_set_nfull(d, d->nfull - 1);
	if (cc->prev) { /* empty: back to the depot's spares */
		if (d->nempty < DG_IOVA_DEPOT_MAX)
			d->empty[d->nempty++] = cc->prev;
		else
			spare = cc->prev;
	}
	dg_spin_unlock(&d->lock);
	cc->prev = cc->loaded;
	cc->loaded = m;
pop:
	tc->hits++;
	n = m->e[--m->n];
	iova_node_set_live(n, live);
	iova_tc_exit(tc);
	free(spare);
	return n;
}

/* Free with loaded full (cache @tc entered; leaves it). The cache keeps a loaded magazine
 * whatever happens: without memory for an empty one, @n goes to the tree. Ranges leave for
 * the tree before the cache is left, so no stealer (dg_iova_check) ever sees a CACHED range
 * that is in no magazine. */
void iova_mag_free_slow(struct dg_iova_space *s, struct iova_tcache *tc, struct iova_node *n)
{
	struct iova_cpu_cache *cc = &tc->cc[n->cc_idx];
	struct iova_depot *d = &s->depot[n->cc_idx];
	struct iova_mag *m, *fresh = NULL;

	if (!cc->prev || !cc->prev->n) {
		/* loaded is full, prev empty (or missing): swap */
		if (!cc->prev)
			cc->prev = get_empty(s, d);
		m = cc->prev;
		if (m) {
			cc->prev = cc->loaded;
			cc->loaded = m;
		}
	} else {
		/* loaded and prev are full: prev goes to the depot, or back to the tree */
		dg_spin_lock(&d->lock);
		if (d->nfull < DG_IOVA_DEPOT_MAX && !d->nempty) {
			/* an empty magazine to load before the depot takes prev */
			dg_spin_unlock(&d->lock);
			fresh = mag_new(s);
			dg_spin_lock(&d->lock);
		}
		if (d->nfull < DG_IOVA_DEPOT_MAX && (d->nempty || fresh)) {
			m = d->nempty ? d->empty[--d->nempty] : NULL;
			if (d->nempty < d->empty_low)
				d->empty_low = d->nempty;
			d->full[d->nfull] = cc->prev;
			depot_set_nfull(d, d->nfull + 1);
			dg_spin_unlock(&d->lock);
			if (!m) {
				m = fresh;
				fresh = NULL;
			}
			cc->prev = cc->loaded;
			cc->loaded = m;
		} else if (d->nfull < DG_IOVA_DEPOT_MAX) {
			dg_spin_unlock(&d->lock); /* no memory: @n goes to the tree */
			m = NULL;
		} else {
			dg_spin_unlock(&d->lock); /* the depot is full: prev's ranges to the tree */
			m = cc->prev;
			iova_release_cached(s, m->e, m->n);
			m->n = 0;
			cc->prev = cc->loaded;
			cc->loaded = m;
		}
	}
	if (m) {
		m->e[m->n++] = n;
	} else {
		atomic_fetch_add_explicit(&s->st_user_tree_frees, 1, memory_order_relaxed);
		iova_release_cached(s, &n, 1);
	}
	iova_tc_exit(tc);
	free(fresh);
}

void iova_mag_flush(struct dg_iova_space *s)
{
	if (!s->mags)
		return;
	/* Every thread cache, stolen: its ranges go to the tree while its owner waits (lock
	 * order: registry, the caches, the tree). */
	pthread_mutex_lock(&iova_reg_lock);
	steal_all(s);
	for (struct iova_tcache *tc = s->tcs; tc; tc = tc->snext) {
		for (unsigned int k = 0; k < IOVA_CCS; k++) {
			struct iova_mag *mags[2] = {tc->cc[k].loaded, tc->cc[k].prev};

			for (unsigned int j = 0; j < 2; j++) {
				if (mags[j] && mags[j]->n) {
					iova_release_cached(s, mags[j]->e, mags[j]->n);
					mags[j]->n = 0;
				}
			}
		}
	}
	unsteal_all(s);
	/* The depots, still under the registry lock: a range on its way to the tree is CACHED in
	 * no magazine, which dg_iova_check() (registry lock) must not see. */
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		struct iova_depot *d = &s->depot[k];

		for (;;) {
			struct iova_mag *m = NULL;

			dg_spin_lock(&d->lock);
			if (d->nfull) {
				m = d->full[d->nfull - 1];
				depot_set_nfull(d, d->nfull - 1);
			}
			dg_spin_unlock(&d->lock);
			if (!m)
				break;
			put_empty(s, d, m);
		}
	}
	pthread_mutex_unlock(&iova_reg_lock);
}

void iova_mag_trim(struct dg_iova_space *s)
{
	if (!s->mags)
		return;
	pthread_mutex_lock(&iova_reg_lock); /* as in iova_mag_flush() */
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		struct iova_depot *d = &s->depot[k];
		struct iova_mag *full = NULL, *empty = NULL;

		dg_spin_lock(&d->lock);
		if (d->full_low && d->nfull) {
			full = d->full[d->nfull - 1];
			depot_set_nfull(d, d->nfull - 1);
		}
		d->full_low = d->nfull;
		if (d->empty_low && d->nempty)
			empty = d->empty[--d->nempty];
		d->empty_low = d->nempty;
		dg_spin_unlock(&d->lock);
		if (full) {
			iova_release_cached(s, full->e, full->n);
			atomic_fetch_add_explicit(&s->st_trimmed, 1, memory_order_relaxed);
			free(full);
		}
		free(empty);
	}
	pthread_mutex_unlock(&iova_reg_lock);
}

uint64_t iova_mag_cached(struct dg_iova_space *s, uint64_t *hits, uint64_t *misses)
{
	uint64_t c = 0, h = 0, m = 0;

	if (!s->mags) {
		if (hits)
			*hits = *misses = 0;
		return 0;
	}
	pthread_mutex_lock(&iova_reg_lock);
	h = atomic_load_explicit(&s->st_gone_hits, memory_order_relaxed);
	m = atomic_load_explicit(&s->st_gone_misses, memory_order_relaxed);
	steal_all(s);
	for (struct iova_tcache *tc = s->tcs; tc; tc = tc->snext) {
		h += tc->hits; /* stolen: the owner is out */
		m += tc->misses;
		for (unsigned int k = 0; k < IOVA_CCS; k++)
			c += (tc->cc[k].loaded ? tc->cc[k].loaded->n : 0) +
			     (tc->cc[k].prev ? tc->cc[k].prev->n : 0);
	}
	unsteal_all(s);
	pthread_mutex_unlock(&iova_reg_lock);
	for (unsigned int k = 0; k < IOVA_CCS; k++)
		c += atomic_load_explicit(&s->depot[k].nfull_pub, memory_order_relaxed) *
		     DG_IOVA_MAG_SIZE;
	if (hits) {
		*hits = h;
		*misses = m;
	}
	return c;
}

void iova_mag_lock_all(struct dg_iova_space *s)
{
	pthread_mutex_lock(&iova_reg_lock);
	steal_all(s);
	for (unsigned int k = 0; k < IOVA_CCS; k++)
		dg_spin_lock(&s->depot[k].lock);
}

void iova_mag_unlock_all(struct dg_iova_space *s)
{
	for (unsigned int k = IOVA_CCS; k-- > 0;)
		dg_spin_unlock(&s->depot[k].lock);
	unsteal_all(s);
	pthread_mutex_unlock(&iova_reg_lock);
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;

	return x < y ? -1 : x > y;
}

#define MCHECK(cond, ...) IOVA_CHECK_OR_OUT(why, "iova cache: ", cond, __VA_ARGS__)

/* One magazine's entries: CACHED nodes of the right class and zone. */
static int check_mag(const struct iova_mag *m, unsigned int k, FILE *why, struct iova_node **all,
		     uint64_t *nall, uint64_t cap)
{
	int err = 0;

	MCHECK(m->n <= DG_IOVA_MAG_SIZE, "magazine holds %u", m->n);
	for (uint32_t i = 0; i < m->n; i++) {
		const struct iova_node *n = m->e[i];
		uint64_t st = atomic_load_explicit(&n->state, memory_order_relaxed);

		MCHECK(n->kind == IOVA_KIND_ALLOC && (st & IOVA_ST_LOW) == IOVA_ST_CACHED,
		       "node %#llx in a magazine is not cached (state %#llx)",
		       (unsigned long long)n->lo, (unsigned long long)st);
		MCHECK(n->cc_idx == k && n->zone == k / IOVA_ORDERS &&
			       n->mag_order == (int)(k % IOVA_ORDERS),
		       "node %#llx (order %d zone %u) in the magazine of order %u zone %u",
		       (unsigned long long)n->lo, n->mag_order, n->zone, k % IOVA_ORDERS,
		       k / IOVA_ORDERS);
		MCHECK(*nall < cap, "more cached ranges in magazines than in the tree");
		all[(*nall)++] = m->e[i];
	}
out:
	return err;
}

int iova_mag_check(const struct dg_iova_space *s, FILE *why, uint64_t cached_in_tree)
{
	struct iova_node **all = NULL;
	uint64_t nall = 0, cap = cached_in_tree + 1;
	int err = 0;

	if (!s->mags) {
		MCHECK(!cached_in_tree, "%llu cached ranges without magazines",
		       (unsigned long long)cached_in_tree);
		return 0;
	}
	all = malloc(cap * sizeof(*all));
	MCHECK(all, "no memory to check the caches");
	unsigned int c = 0;

	for (const struct iova_tcache *tc = s->tcs; tc; tc = tc->snext, c++) {
		MCHECK(tc->space == s && tc->space_id == s->id, "thread cache %u of another space",
		       c);
		for (unsigned int k = 0; k < IOVA_CCS; k++) {
			const struct iova_cpu_cache *cc = &tc->cc[k];

			MCHECK(cc->loaded || k >= s->nzones * IOVA_ORDERS,
			       "thread cache %u: no loaded magazine in cache %u", c, k);
			if (cc->loaded && (err = check_mag(cc->loaded, k, why, all, &nall, cap)))
				goto out;
			if (cc->prev) {
				MCHECK(cc->prev->n == 0 || cc->prev->n == DG_IOVA_MAG_SIZE,
				       "thread cache %u: prev magazine neither empty nor full (%u)",
				       c, cc->prev->n);
				if ((err = check_mag(cc->prev, k, why, all, &nall, cap)))
					goto out;
			}
		}
	}
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		const struct iova_depot *d = &s->depot[k];

		MCHECK(d->nfull <= DG_IOVA_DEPOT_MAX && d->nempty <= DG_IOVA_DEPOT_MAX,
		       "depot overfull");
		MCHECK(atomic_load_explicit(&d->nfull_pub, memory_order_relaxed) == d->nfull,
		       "depot count not published");
		for (uint32_t i = 0; i < d->nfull; i++) {
			MCHECK(d->full[i]->n == DG_IOVA_MAG_SIZE, "depot magazine not full (%u)",
			       d->full[i]->n);
			if ((err = check_mag(d->full[i], k, why, all, &nall, cap)))
				goto out;
		}
		for (uint32_t i = 0; i < d->nempty; i++)
			MCHECK(d->empty[i]->n == 0, "depot spare not empty");
	}
	MCHECK(nall == cached_in_tree, "%llu ranges in magazines, %llu cached in the tree",
	       (unsigned long long)nall, (unsigned long long)cached_in_tree);
	qsort(all, nall, sizeof(*all), cmp_ptr);
	for (uint64_t i = 1; i < nall; i++)
		MCHECK(all[i] != all[i - 1], "node %#llx is in two magazines",
		       (unsigned long long)all[i]->lo);
out:
	free(all);
	return err;
}

void iova_mag_dump(const struct dg_iova_space *s, FILE *out)
{
	if (!s->mags) {
		fprintf(out, "  magazines: off\n");
		return;
	}
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		const struct iova_depot *d = &s->depot[k];
		uint64_t incaches = 0;

		for (const struct iova_tcache *tc = s->tcs; tc; tc = tc->snext) {
			const struct iova_cpu_cache *cc = &tc->cc[k];

			incaches += (cc->loaded ? cc->loaded->n : 0) + (cc->prev ? cc->prev->n : 0);
		}
		if (!incaches && !d->nfull && !d->nempty)
			continue;
		fprintf(out,
			"  zone %s order %2u: %llu in thread caches, depot %u full %u empty (low %u/%u)\n",
			k / IOVA_ORDERS == IOVA_ZONE_FULL ? "full " : "dma32", k % IOVA_ORDERS,
			(unsigned long long)incaches, d->nfull, d->nempty, d->full_low,
			d->empty_low);
	}
}
