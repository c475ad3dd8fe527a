/* SPDX-License-Identifier: MIT */
/*
 * dma/bounce.c - the bounce policy: permanently mapped shadow areas and a copy ("shadow DMA
 * buffers", Markuze et al., ASPLOS'16; Linux's swiotlb for untrusted devices).
 *
 * The device never sees the driver's buffer: map takes a shadow slot, copies the buffer in
 * (to-device, bidirectional) and hands out the slot's address; unmap and sync_for_cpu copy
 * back (from-device, bidirectional). Shadow areas are mapped once when the policy starts and
 * never unmapped while it lasts, so there is no per-I/O page-table work and no invalidation
 * at all, and no window: after unmap the buffer was never reachable in the first place.
 *
 * Sub-page isolation: a slot is 64 bytes to 256 KiB (a power of two), the bytes of a slot
 * past the buffer are zeroed at map when the device can read the area, so what a device can
 * read around a 64-byte buffer is zeros and its own other shadow slots - never the rest of
 * the buffer's page. Areas are per device (a device only ever sees its own shadows) and per
 * direction, each mapped with the direction's permission: a to-device area is read-only for
 * the device, a from-device area write-only (where the format can say so). A from-device slot
 * is therefore not copied in at map (Linux swiotlb copies it since CVE-2022-24304 because its
 * pool is shared between devices; here it only ever holds what this device wrote itself).
 *
 * Layout: one IOVA range holds 3 x ncpus areas of area_size bytes (direction-major), backed
 * by one host allocation; area (dir, cpu) is at IOVA base + (dir * ncpus + cpu) * area_size.
 * Each area is a binary buddy allocator over 64-byte units with blocks of up to 256 KiB:
 *
 *   rec[u] for the first unit u of every block:  st = state | kind | dir | order | nents
 *     free block:  fl.prev/fl.next link it into free_head[order] (doubly linked)
 *     live block:  orig = the driver's buffer (or its sg array), len = bytes mapped
 *   rec[u].st == 0 for units inside a block
 *
 * Areas and CPUs: the thread's CPU (dma_cpu(), stale for up to 256 calls after a migration)
 * only chooses which area is tried first - never how much a map can get. A map or a stack's
 * refill that this CPU's area cannot serve takes from the direction's other areas, each under
 * its own lock; with every one dry the slots cached on every thread's stacks of the
 * direction - running or parked threads' too - are taken back (see "Reclaim" below) and the
 * areas tried again, -ENOSPC only when a whole pass finds nothing and nothing was given back
 * since the pass before (area_take_all()); a bulk map that cannot be served in full maps
 * nothing (map_bulk_each()). A slot always goes back into the area of its address
 * (area_of_g()), never the freeing CPU's. So a direction holds ncpus x area_size of live
 * slots (docs/dma-api.md, "Which area, and how much").
 *
 * Locking: each area has a spinlock taken by alloc and free (map on its own CPU's area;
 * an unmap frees into the area the slot came from, uncontended unless threads migrate).
 * Sync finds a slot without the lock: st is published with a release store once orig/len
 * are written. The claim of an unmap (ALLOC -> CLAIMED) is the one transition two threads
 * can race for (a double or racing unmap), and every claim is made under the slot's area
 * lock (claim_locked: the word checked again and replaced there), so exactly one of two
 * racing unmaps finds the live word; every other transition is made by the slot's owner
 * alone (the stack that holds it, or whoever claimed it). A bulk unmap claims all its
 * entries of one area under one lock - one locked instruction per call instead of one per
 * slot, as a compare-and-swap per slot would cost (the workloads' strict unmaps stall right
 * after theirs) - and a bad entry gives back the claims made, under that lock, before
 * anyone could see them: all or nothing. A batch defers the frees to dg_dma_batch_end(); a
 * bulk unmap's slots go into it as ONE entry, chained through their records (rec->u.fl.next,
 * dead once claimed) from a head of kind KIND_CHAIN whose word's nents field holds the
 * chain's length, which dma_bounce_free() walks.
 *
 * Small-slot fast path (orders below TC_ORDERS, 64 B .. 2 KiB: packet buffers): every thread
 * keeps, per bounce instance, direction and order, a free stack of slots ("thread cache",
 * like jemalloc's tcache or the per-CPU magazines in front of Linux's IOVA allocator). Map
 * pops a slot and unmap pushes it: no lock, no buddy list, no atomic read-modify-write on the
 * allocation side (the unmap's locked claim stays: it is what refuses a double or racing
 * unmap); the pop or push is bracketed by tc_enter()/tc_exit() - a store, a load and a store,
 * so that a starving thread can take the stack back (see "Reclaim").
 * An empty stack is refilled with tc_batch slots under one area lock, a full one spills the
 * oldest tc_batch back the same way, so the lock is taken once per tc_batch I/Os.
 *
 *   map:   tc->slot[dir][order][--n]   st CACHED -> ALLOC (release, after orig/len/copy)
 *   unmap: claim ALLOC -> CLAIMED (area lock), copy back, st = CACHED, tc->slot[dir][order][n++]
 *   bulk:  the same in loops - n pops; n claims under one lock, n pushes (or one chain)
 *
 * Isolation is unchanged: a cached slot stays in its own area (this device, this direction,
 * this permission), so it never shares a page with another device's data or the other
 * direction's; the data it held is still only what this device itself wrote or was given.
 * A stack is bounded by tc_max[order] (at most 1/8 of an area per direction and order, and
 * TC_MAX slots), so a running thread holds at most 6/8 of one area per direction (1/16 made
 * bond4's 2 KiB receive stacks spill and refill every poll); when the areas run dry every
 * thread's cached slots of the direction go back (see "Reclaim"), and a thread's exit gives
 * back all of its slots (a key destructor) and leaves its emptied cache to the next new
 * thread.
 * A slot counts in its area's in_use while cached; dma_bounce_stats() subtracts what the
 * stacks hold (their depths: exact when no call runs, like every counter). Caches are found
 * through a 4-entry thread-local table keyed by the instance's unique generation (pointers
 * get reused) and freed with the instance.
 *
 * Reclaim: a map must not fail while capacity sits idle on another thread's stack (Linux's
 * IOVA allocator flushes every CPU's magazines and retries when an allocation fails,
 * free_cpu_cached_iovas(); the owner of a stack here may be parked on a barrier for good, so
 * asking it to give back at its next call would not do). The starving thread steals the
 * stacks with the asymmetric handshake of iova/iova_steal.h, the one iova_mag.c uses for its
 * magazines (liburcu's urcu-memb; membarrier(2)) - one implementation for both:
 *
 *   owner (tc_enter, fast paths)              thief (tc_reclaim, tc_reg_lock held)
 *     busy = 1                  (relaxed)       steal |= HELD             (seq_cst)
 *     compiler barrier                          membarrier(PRIVATE_EXPEDITED)
 *     if (steal) { busy = 0; wait, enter }      while (busy) wait         (acquire)
 *     pop / push / refill / spill               drain the direction's stacks to the areas
 *     busy = 0                  (release)       steal &= ~HELD            (release)
 *
 * Either the owner's busy = 1 is visible to the thief (which waits for busy = 0: the owner's
 * critical sections are short and never wait for anything a thief holds - an owner takes area
 * locks inside, a thief takes them only after its waits), or the owner's load of steal comes
 * after the thief's membarrier() and sees HELD, and it clears busy and waits in
 * iova_steal_enter() holding nothing, then enters again. The owner pays two plain stores, a
 * load and a branch per call, no atomic read-modify-write; the thief pays a system call
 * (microseconds) on a path taken only when every area of a direction is dry. Without
 * membarrier (an old kernel, a sandbox, DG_IOVA_NO_MEMBARRIER=1: iova_mag_global_init()
 * decides for the process) every cache carries IOVA_STEAL_FALLBACK in its steal word, so the
 * fast paths never enter and iova_steal_enter() does, with an exchange on busy and seq_cst
 * loads: Dekker's protocol, one atomic read-modify-write per call.
 *
 * How this file steals (where iova_mag.c differs, see iova_steal.h): tc_reg_lock makes one
 * thief at a time (it also guards the thread-exit drain). The thief takes every cache of the
 * instance BUT its own - it runs dry inside a map, outside its cache, and drains that one
 * first as its owner - so two starving threads never wait for each other; it marks them all,
 * one membarrier(), then waits for, drains and gives back each cache in turn: a drain only
 * moves slots into the areas (each under its own lock), nothing needs two caches held at one
 * moment, and each owner waits only for its own drain. iova_mag.c instead holds every cache
 * of a space, the stealer's own included, until it is done (its flush, count and check need
 * all the magazines still at once).
 *
 * When -ENOSPC is right: each area counts the blocks given back to it (gives, under its lock,
 * only growing). area_take_all() passes over the areas and, when none could serve, reclaims
 * and passes again; it gives up when a pass finds nothing and the sum of the counts it read
 * equals that of the pass before: then no area got anything between its two visits, so at
 * the moment between the two passes none could serve - and every stack of the direction was
 * drained in between. Two threads racing for the last free slots of an exact fit cannot both
 * miss a slot one of them gave back between the other's visits (which one pass and one
 * retry could: a slot freed into an area already visited). Other threads that keep refilling
 * their stacks from what is given back bound this at AREA_ROUNDS reclaims.
 *
 * The obvious alternatives cost the fast path more: a lock per stack (or a per-CPU trylock,
 * as Linux's rcache) is an atomic read-modify-write per map and per unmap; a thief that takes
 * slots by compare-and-swap on their records makes every map's publication a
 * compare-and-swap and needs generation tags against ABA (a stolen slot that comes back to
 * the same stack); a flag the owners poll at their next call never reaches a parked thread.
 *
 * Padding: the device must read zeros past a buffer in a slot it can read. A to-device area
 * is read-only for the device and the driver writes a slot only below its record's len (the
 * copy-in of map, sync_for_device), so in a to-device slot that came off a thread stack every
 * byte past rec->len - the length of its last mapping - is still zero: map zeroes only the
 * bytes from the new length to the old one (a steady stream of 1500-byte sends in 2 KiB slots
 * zeroes nothing). A slot taken from the buddy allocator onto a stack gets rec->len = its
 * size (all of it may be dirty: blocks split and merge), and the locked path zeroes the whole
 * padding; areas the device can write (bidirectional, from-device where readable) always do.
 *
 * The per-packet calls do what the copy needs and little else (docs/dma-api.md has the
 * instruction counts): map is a dispatch of tail calls - a receive buffer in a write-only area
 * to a leaf (no call, no register saved for one), a small buffer to copy or pad to
 * bounce_map_fill(), larger ones to the locked path; copies of up to SMALL_COPY bytes are
 * inline (copy_small()); sync of a range starting in a slot's first unit reads that unit's
 * record (no search over the orders), and the receive's (small, for the CPU, from-device) is
 * the policy's sync itself, a leaf whose record check is one test of the word's low byte;
 * an unmap without a copy-back is the claim and the push (or the batch entry); counters are
 * bumped through the thread's last counter block inline, the lookup of another one is a tail
 * call (count_slow()). The bulk calls
 * (dma_bounce_map_bulk, dma_bounce_unmap_bulk: a ring's refill and a poll's reap) do the
 * per-call work once - one dispatch, one stack lookup, one counter update - and loop over
 * the slots; a receive refill in a write-only area is a loop of pop, record, publish.
 */
#include "dma/dma_internal.h"

#include "base/clock.h"
#include "iova/iova_steal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Block states: free in the buddy lists, live, being unmapped, free in the quick cache. */
enum { ST_FREE = 1, ST_ALLOC = 2, ST_CLAIMED = 3, ST_CACHED = 4 };

/* st word: state [2:0] | kind [5:3] | dir [7:6] | order [12:8] | nents [31:16] */
#define ST(state, kind, dir, order, nents)                                  \
	((uint32_t)(state) | (uint32_t)(kind) << 3 | (uint32_t)(dir) << 6 | \
	 (uint32_t)(order) << 8 | (uint32_t)(nents) << 16)
#define ST_STATE(w) ((w)&7u)
#define ST_KIND(w)  (((w) >> 3) & 7u)
#define ST_DIR(w)   (((w) >> 6) & 3u)
#define ST_ORDER(w) (((w) >> 8) & 31u)
#define ST_NENTS(w) ((w) >> 16)

#define QC_MAX	    32 /* freed blocks kept per order without merging (the quick cache) */

/* The kind of a CLAIMED head that leads a chain of a bulk unmap's slots (batch: one entry). */
#define KIND_CHAIN 7u
static_assert(KIND_CHAIN > KIND_COHERENT && KIND_CHAIN <= 7, "a kind no mapping has");
static_assert(DG_DMA_BULK_MAX <= 0xffff, "a chain's length fits its head word's nents field");

struct bounce_rec {
	union {
		void *orig; /* live: the buffer, or the sg array */
		struct {
			uint32_t prev, next;
		} fl; /* free: free-list links (unit numbers) */
	} u;
	uint32_t len;	     /* live: bytes mapped */
	_Atomic uint32_t st; /* block head state word, 0 inside a block */
};
static_assert(sizeof(struct bounce_rec) == 16, "bounce_rec is 16 bytes");

struct bounce_area {
	struct dg_spinlock lock;
	uint32_t free_head[BOUNCE_MAX_ORDER + 1];  /* under lock */
	uint8_t qn[BOUNCE_MAX_ORDER + 1];	   /* quick cache fill, under lock */
	uint32_t qc[BOUNCE_MAX_ORDER + 1][QC_MAX]; /* quick cache: freed blocks, unmerged */
	uint64_t in_use;			   /* bytes in live blocks, under lock */
	uint64_t gives;				   /* blocks given back so far, under lock */
	uint8_t *mem;				   /* host memory of the area */
	uint64_t iova;				   /* its DMA address */
	struct bounce_rec *rec;			   /* one per unit */
	enum dg_dma_dir dir;
	bool readable; /* the device can read it: zero the padding */
} dg_cacheline;

#define TC_ORDERS    6 /* orders 0..5 (64 B .. 2 KiB) have per-thread free stacks */
#define TC_BYTES     (1u << (TC_ORDERS - 1 + BOUNCE_UNIT_SHIFT)) /* their largest slot */
#define TC_MAX	     256					 /* slots per stack at most */
#define TC_TLS_SLOTS 4 /* thread-local lookup table entries (a power of two) */

/* One thread's free stacks for one bounce instance. Its owner touches n[] and slot[] only
 * between tc_enter()/tc_get() and tc_exit() (sw.busy = 1), a thief only while it holds
 * sw.steal with busy seen 0; dma_bounce_check() reads them when no call runs, destroy frees
 * them. */
struct bounce_tcache {
	struct iova_steal sw;	    /* owner and thief (iova/iova_steal.h; thief: tc_reg_lock) */
	struct bounce_tcache *next; /* bo->tcaches (push only, release CAS) */
	_Atomic uint64_t owner;	    /* thread id (tc_thread_id()), never reused; 0 = free */
	struct dma_bounce *bo;	    /* the instance (for the owner's exit) */
	struct bounce_tcache *tnext, **tpprev; /* the owner's list of caches (tc_reg_lock) */
	/* Stack depths, <= tc_max[order]: the owner writes them (load + store), statistics read
	 * them (relaxed: a count, exact when no call runs). */
	_Atomic uint32_t n[3][TC_ORDERS];
	uint32_t slot[3][TC_ORDERS][TC_MAX]; /* global unit numbers (area << unit_shift | u) */
};

struct dma_bounce {
	uint64_t gen; /* unique, never reused: key of the thread-local cache table */
	_Atomic(struct bounce_tcache *) tcaches; /* every thread's cache (push with release CAS) */
	uint32_t tc_max[TC_ORDERS];		 /* stack bound per order */
	uint32_t tc_batch[TC_ORDERS];		 /* slots moved per refill / spill */
	bool memb;				 /* owners enter without an RMW (tc_enter) */
	unsigned int unit_shift;		 /* log2(units) */
	bool readable[3];			 /* per direction: the device can read its area */
	uint64_t area_size;
	unsigned int area_shift;
	unsigned int ncpus;
	unsigned int nareas;
	uint32_t units; /* per area */
	uint64_t iova;	/* first IOVA of all areas */
	uint64_t iova_size;
	uint8_t *mem;
	struct bounce_rec *rec;
	struct bounce_area *area;
};

/* ---- buddy allocator (area lock held) --------------------------------------------------------- */

static void fl_push(struct bounce_area *a, uint32_t u, unsigned int order)
{
	struct bounce_rec *r = &a->rec[u];

	r->u.fl.prev = BOUNCE_NONE;
	r->u.fl.next = a->free_head[order];
	if (a->free_head[order] != BOUNCE_NONE)
		a->rec[a->free_head[order]].u.fl.prev = u;
	a->free_head[order] = u;
	atomic_store_explicit(&r->st, ST(ST_FREE, 0, 0, order, 0), memory_order_relaxed);
}

static void fl_remove(struct bounce_area *a, uint32_t u, unsigned int order)
{
	struct bounce_rec *r = &a->rec[u];

	if (r->u.fl.prev != BOUNCE_NONE)
		a->rec[r->u.fl.prev].u.fl.next = r->u.fl.next;
	else
		a->free_head[order] = r->u.fl.next;
	if (r->u.fl.next != BOUNCE_NONE)
		a->rec[r->u.fl.next].u.fl.prev = r->u.fl.prev;
	atomic_store_explicit(&r->st, 0, memory_order_relaxed);
}

static uint32_t buddy_alloc(struct bounce_area *a, unsigned int order)
{
	unsigned int o = order;
	uint32_t u;

	while (o <= BOUNCE_MAX_ORDER && a->free_head[o] == BOUNCE_NONE)
		o++;
	if (o > BOUNCE_MAX_ORDER)
		return BOUNCE_NONE;
	u = a->free_head[o];
	fl_remove(a, u, o);
	while (o > order) {
		o--;
		fl_push(a, u + (1u << o), o);
	}
	return u;
}

static void buddy_free(struct bounce_area *a, uint32_t u, unsigned int order)
{
	atomic_store_explicit(&a->rec[u].st, 0, memory_order_relaxed);
	while (order < BOUNCE_MAX_ORDER) {
		uint32_t b = u ^ (1u << order);

		if (atomic_load_explicit(&a->rec[b].st, memory_order_relaxed) !=
		    ST(ST_FREE, 0, 0, order, 0))
			break;
		fl_remove(a, b, order);
		u &= ~(1u << order);
		order++;
	}
	fl_push(a, u, order);
}

/* Give every quick-cached block back to the buddy lists (merging). */
static void qc_drain(struct bounce_area *a)
{
	for (unsigned int o = 0; o <= BOUNCE_MAX_ORDER; o++) {
		while (a->qn[o])
			buddy_free(a, a->qc[o][--a->qn[o]], o);
	}
}

/*
 * Take a block of 2^order units (lock held): the quick cache first (no splitting), then the
 * buddy lists, then the buddy lists after draining the quick caches into them. Like the
 * per-CPU page lists in front of Linux's buddy allocator, this keeps a steady stream of same-
 * sized buffers from splitting and merging a 256 KiB block on every map and unmap.
 */
static uint32_t slot_take(struct bounce_area *a, unsigned int order)
{
	uint32_t u;

	if (a->qn[order]) {
		u = a->qc[order][--a->qn[order]];
	} else {
		u = buddy_alloc(a, order);
		if (u == BOUNCE_NONE) {
			qc_drain(a);
			u = buddy_alloc(a, order);
			if (u == BOUNCE_NONE)
				return u;
		}
	}
	a->in_use += 1ull << (order + BOUNCE_UNIT_SHIFT);
	return u;
}

/* Give a block back (lock held). */
static void slot_give(struct bounce_area *a, uint32_t u, unsigned int order)
{
	a->in_use -= 1ull << (order + BOUNCE_UNIT_SHIFT);
	a->gives++;
	if (a->qn[order] < QC_MAX) {
		a->qc[order][a->qn[order]++] = u;
		atomic_store_explicit(&a->rec[u].st, ST(ST_CACHED, 0, 0, order, 0),
				      memory_order_relaxed);
		return;
	}
	buddy_free(a, u, order);
}

/* ---- per-thread free stacks of small slots (see the preamble) ---------------------------------- */

struct bounce_tls_slot {
	uint64_t gen; /* the instance's generation (unique, never 0): the cache's key */
	struct bounce_tcache *tc;
};
static _Thread_local struct bounce_tls_slot bounce_tls[TC_TLS_SLOTS]
	__attribute__((tls_model("initial-exec")));
static _Atomic uint64_t bounce_next_gen = 1;
static _Atomic uint64_t tc_next_thread_id = 1;
static _Thread_local uint64_t tc_thread;

static uint64_t tc_thread_id(void)
{
	if (!tc_thread)
		tc_thread = atomic_fetch_add_explicit(&tc_next_thread_id, 1, memory_order_relaxed);
	return tc_thread;
}

/*
 * A thread's exit gives its cached slots back: every cache a thread owns is on its list
 * (tc_mine), and a key destructor registered with its first cache drains them into their
 * areas and frees them for adoption by the next new thread (owner 0), so threads that come and
 * go strand nothing. tc_reg_lock guards every thread's list: the exiting thread walks its own,
 * dma_bounce_destroy() unlinks the caches it frees from the lists of threads still running,
 * and a thief (tc_reclaim()) holds it while it steals, so the exit's drain and a steal never
 * meet. Lock order: tc_reg_lock, then an area lock.
 */
static pthread_mutex_t tc_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t tc_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t tc_exit_key;
static bool tc_key_ok;
static _Thread_local struct bounce_tcache *tc_mine;

static void tc_drain(struct dma_bounce *bo, struct bounce_tcache *tc, unsigned int dir);

static void tc_unlink(struct bounce_tcache *tc)
{
	if (!tc->tpprev)
		return;
	*tc->tpprev = tc->tnext;
	if (tc->tnext)
		tc->tnext->tpprev = tc->tpprev;
	tc->tnext = NULL;
	tc->tpprev = NULL;
}

static void tc_thread_exit(void *arg)
{
	struct bounce_tcache **head = arg; /* the exiting thread's tc_mine */

	pthread_mutex_lock(&tc_reg_lock);
	while (*head) {
		struct bounce_tcache *tc = *head;

		for (unsigned int d = 0; d < 3; d++)
			tc_drain(tc->bo, tc, d);
		tc_unlink(tc);
		/* Release pairs with the acquire CAS of the adoption in tcache_slow(): the
		 * emptied stacks are the next owner's. */
		atomic_store_explicit(&tc->owner, 0, memory_order_release);
	}
	pthread_mutex_unlock(&tc_reg_lock);
}

static void tc_key_create(void)
{
	tc_key_ok = pthread_key_create(&tc_exit_key, tc_thread_exit) == 0;
}

/* Put @tc on this thread's list, so that its exit drains it. */
static void tc_adopt(struct dma_bounce *bo, struct bounce_tcache *tc)
{
	pthread_once(&tc_key_once, tc_key_create);
	pthread_mutex_lock(&tc_reg_lock);
	tc->bo = bo;
	tc->tnext = tc_mine;
	if (tc_mine)
		tc_mine->tpprev = &tc->tnext;
	tc->tpprev = &tc_mine;
	tc_mine = tc;
	pthread_mutex_unlock(&tc_reg_lock);
	/* Without the key, an exiting thread's slots stay cached (the areas' dry path still
	 * takes the slots of the thread that runs dry). */
	if (tc_key_ok && !pthread_getspecific(tc_exit_key))
		pthread_setspecific(tc_exit_key, &tc_mine);
}

static dg_noinline struct bounce_tcache *tcache_slow(struct dma_bounce *bo)
{
	uint64_t me = tc_thread_id();
	struct bounce_tls_slot *s = &bounce_tls[bo->gen & (TC_TLS_SLOTS - 1)];
	/* Acquire pairs with the release CAS below: a cache's owner field is visible. */
	struct bounce_tcache *tc = atomic_load_explicit(&bo->tcaches, memory_order_acquire);
	struct bounce_tcache *head;

	for (; tc; tc = tc->next)
		if (atomic_load_explicit(&tc->owner, memory_order_relaxed) == me)
			goto found;
	/* A cache whose thread exited (owner 0, emptied): take it over. Acquire pairs with the
	 * release store in tc_thread_exit(). */
	for (tc = atomic_load_explicit(&bo->tcaches, memory_order_acquire); tc; tc = tc->next) {
		uint64_t free_owner = 0;

		if (atomic_compare_exchange_strong_explicit(&tc->owner, &free_owner, me,
							    memory_order_acquire,
							    memory_order_relaxed)) {
			tc_adopt(bo, tc);
			goto found;
		}
	}
	tc = calloc(1, sizeof(*tc));
	if (!tc)
		return NULL; /* the locked path still works */
	atomic_init(&tc->owner, me);
	iova_steal_init(&tc->sw, bo->memb);
	tc_adopt(bo, tc);
	head = atomic_load_explicit(&bo->tcaches, memory_order_relaxed);
	do {
		tc->next = head;
		/* Release pairs with the acquire loads of bo->tcaches (lookup, stats, check). */
	} while (!atomic_compare_exchange_weak_explicit(
		&bo->tcaches, &head, tc, memory_order_release, memory_order_relaxed));
found:
	s->gen = bo->gen;
	s->tc = tc;
	return tc;
}

/* This thread's cache for @bo (NULL only when it could not be allocated). */
static dg_always_inline struct bounce_tcache *tcache(struct dma_bounce *bo)
{
	struct bounce_tls_slot *s = &bounce_tls[bo->gen & (TC_TLS_SLOTS - 1)];

	if (dg_likely(s->gen == bo->gen))
		return s->tc;
	return tcache_slow(bo);
}

/* This thread's cache for @bo if the lookup table has it, else NULL (no call: fast paths). */
static dg_always_inline struct bounce_tcache *tcache_peek(const struct dma_bounce *bo)
{
	const struct bounce_tls_slot *s = &bounce_tls[bo->gen & (TC_TLS_SLOTS - 1)];

	return dg_likely(s->gen == bo->gen) ? s->tc : NULL;
}

/* Owner and thieves (see the preamble, "Reclaim"; the protocol is iova/iova_steal.h's).
 * Enter this thread's cache @tc on a fast path: false (nothing changed, nothing held) if a
 * thief holds it or the instance runs without membarrier (then tc_get()). */
static dg_always_inline bool tc_enter(struct bounce_tcache *tc)
{
	return iova_steal_try(&tc->sw);
}

/* Leave the cache: a thief may take it from now on. */
static dg_always_inline void tc_exit(struct bounce_tcache *tc)
{
	iova_steal_leave(&tc->sw);
}

/* Enter this thread's cache @tc: tc_enter() inline, iova_steal_enter() (waiting while a thief
 * holds it, holding nothing meanwhile; the fallback's exchange) only when that cannot. */
static dg_always_inline void tc_get(struct bounce_tcache *tc)
{
	if (dg_unlikely(!tc_enter(tc)))
		iova_steal_enter(&tc->sw);
}

static inline uint32_t tc_n(const struct bounce_tcache *tc, unsigned int dir, unsigned int order)
{
	return atomic_load_explicit(&tc->n[dir][order], memory_order_relaxed);
}

static inline void tc_set_n(struct bounce_tcache *tc, unsigned int dir, unsigned int order,
			    uint32_t v)
{
	atomic_store_explicit(&tc->n[dir][order], v, memory_order_relaxed);
}

static inline struct bounce_area *area_of_g(struct dma_bounce *bo, uint32_t g)
{
	return &bo->area[g >> bo->unit_shift];
}

/*
 * Give the @cnt oldest slots of stack (@dir, @order) back to their areas, one lock per run of
 * slots from the same area.
 */
static dg_noinline void tc_spill(struct dma_bounce *bo, struct bounce_tcache *tc, unsigned int dir,
				 unsigned int order, uint32_t cnt)
{
	uint32_t *st = tc->slot[dir][order];
	uint32_t umask = bo->units - 1;

	uint32_t n = tc_n(tc, dir, order);

	if (cnt > n)
		cnt = n;
	for (uint32_t i = 0; i < cnt;) {
		struct bounce_area *a = area_of_g(bo, st[i]);

		dg_spin_lock(&a->lock);
		do {
			slot_give(a, st[i] & umask, order);
			i++;
		} while (i < cnt && area_of_g(bo, st[i]) == a);
		dg_spin_unlock(&a->lock);
	}
	memmove(st, st + cnt, (n - cnt) * sizeof(*st));
	tc_set_n(tc, dir, order, n - cnt);
}

/* Give every slot of this thread's stacks for direction @dir back (the areas ran dry). */
static void tc_drain(struct dma_bounce *bo, struct bounce_tcache *tc, unsigned int dir)
{
	for (unsigned int o = 0; o < TC_ORDERS; o++)
		tc_spill(bo, tc, dir, o, tc_n(tc, dir, o));
}

/*
 * Give the cached slots of direction @dir of every thread's cache of @bo back to their areas
 * (the areas ran dry; see the preamble, "Reclaim"): this thread's own (@mine, entered here:
 * the caller is outside it) directly, every other one stolen - the steal word set in each, one
 * membarrier() for all, each owner waited for until it is outside its cache, the stacks of
 * @dir drained, the steal word cleared. tc_reg_lock makes this the one thief; owners that
 * meet the steal word wait holding nothing. Lock order: tc_reg_lock, then area locks.
 */
static dg_noinline void tc_reclaim(struct dma_bounce *bo, unsigned int dir,
				   struct bounce_tcache *mine)
{
	struct bounce_tcache *head, *tc;
	bool memb = false;

	if (mine) {
		tc_get(mine);
		tc_drain(bo, mine, dir);
		tc_exit(mine);
	}
	pthread_mutex_lock(&tc_reg_lock);
	/* Caches are only pushed at the head: the list from this head is the same for both
	 * loops. Acquire pairs with the release CAS in tcache_slow(). */
	head = atomic_load_explicit(&bo->tcaches, memory_order_acquire);
	for (tc = head; tc; tc = tc->next)
		if (tc != mine)
			memb |= iova_steal_mark(&tc->sw);
	if (memb)
		iova_steal_barrier();
	for (tc = head; tc; tc = tc->next) {
		if (tc == mine)
			continue;
		/* One cache at a time: the drain needs no other cache held (iova_steal.h, "Where
		 * the two users differ"), and its owner waits only for its own. */
		iova_steal_wait(&tc->sw);
		tc_drain(bo, tc, dir);
		iova_steal_unmark(&tc->sw);
	}
	pthread_mutex_unlock(&tc_reg_lock);
}

/*
 * Fill the empty stack (@dir, @order) with up to tc_batch slots: this CPU's area first, then
 * the others, one lock per area visited. Returns the number of slots taken.
 */
static dg_noinline uint32_t tc_refill(struct dma_bounce *bo, struct bounce_tcache *tc,
				      unsigned int dir, unsigned int order)
{
	uint32_t want = bo->tc_batch[order], got = 0;
	uint32_t *st = tc->slot[dir][order];
	unsigned int cpu = dma_cpu(bo->ncpus);

	for (unsigned int k = 0; k < bo->ncpus && got < want; k++) {
		unsigned int ai = dir * bo->ncpus + (cpu + k) % bo->ncpus;
		struct bounce_area *a = &bo->area[ai];

		dg_spin_lock(&a->lock);
		while (got < want) {
			uint32_t u = slot_take(a, order);

			if (u == BOUNCE_NONE)
				break;
			atomic_store_explicit(&a->rec[u].st, ST(ST_CACHED, 0, 0, order, 0),
					      memory_order_relaxed);
			/* Whatever the block held before: all of it may be dirty. */
			a->rec[u].len = 1u << (order + BOUNCE_UNIT_SHIFT);
			/* Stack order: the area's first slots end on top (popped first). */
			st[want - 1 - got] = ai << bo->unit_shift | u;
			got++;
		}
		dg_spin_unlock(&a->lock);
	}
	if (got < want) /* compact what was taken to the bottom of the stack */
		memmove(st, st + (want - got), got * sizeof(*st));
	tc_set_n(tc, dir, order, got);
	return got;
}

/* Pop a small slot for (@dir, @order) from this thread's stack (entered): its global unit
 * or NONE. */
static dg_always_inline uint32_t tc_pop(struct dma_bounce *bo, struct bounce_tcache *tc,
					unsigned int dir, unsigned int order)
{
	uint32_t n = tc_n(tc, dir, order);

	if (dg_unlikely(!n) && !(n = tc_refill(bo, tc, dir, order)))
		return BOUNCE_NONE;
	tc_set_n(tc, dir, order, n - 1);
	return tc->slot[dir][order][n - 1];
}

/* Push the claimed small slot @g (order @order, direction @dir) on this thread's stack
 * (entered). */
static dg_always_inline void tc_push(struct dma_bounce *bo, struct bounce_tcache *tc, uint32_t g,
				     unsigned int dir, unsigned int order)
{
	uint32_t n;

	if (dg_unlikely(tc_n(tc, dir, order) == bo->tc_max[order]))
		tc_spill(bo, tc, dir, order, bo->tc_batch[order]);
	atomic_store_explicit(&bo->rec[g].st, ST(ST_CACHED, 0, 0, order, 0), memory_order_relaxed);
	n = tc_n(tc, dir, order);
	tc->slot[dir][order][n] = g;
	tc_set_n(tc, dir, order, n + 1);
}

/* Give the claimed slot @g back: this thread's stack for small slots, its area otherwise. */
static dg_noinline void slot_release_slow(struct dma_bounce *bo, uint32_t g)
{
	uint32_t st = atomic_load_explicit(&bo->rec[g].st, memory_order_relaxed);
	unsigned int order = ST_ORDER(st);
	struct bounce_tcache *tc;
	struct bounce_area *a;

	if (order < TC_ORDERS && (tc = tcache(bo)) != NULL) {
		tc_get(tc);
		tc_push(bo, tc, g, ST_DIR(st), order);
		tc_exit(tc);
		return;
	}
	a = area_of_g(bo, g);
	dg_spin_lock(&a->lock);
	slot_give(a, g & (bo->units - 1), order);
	dg_spin_unlock(&a->lock);
}

/*
 * The fast path of slot_release_slow(): a push on this thread's stack when it is known and
 * not full. No call on this path, so it needs no saved registers (the rest is a tail call).
 */
static dg_always_inline void slot_release(struct dma_bounce *bo, uint32_t g)
{
	uint32_t st = atomic_load_explicit(&bo->rec[g].st, memory_order_relaxed);
	unsigned int order = ST_ORDER(st), dir = ST_DIR(st);
	struct bounce_tcache *tc = tcache_peek(bo);

	uint32_t n;

	if (dg_likely(order < TC_ORDERS && tc != NULL) && dg_likely(tc_enter(tc))) {
		if (dg_likely((n = tc_n(tc, dir, order)) < bo->tc_max[order])) {
			atomic_store_explicit(&bo->rec[g].st, ST(ST_CACHED, 0, 0, order, 0),
					      memory_order_relaxed);
			tc->slot[dir][order][n] = g;
			tc_set_n(tc, dir, order, n + 1);
			tc_exit(tc);
			return;
		}
		tc_exit(tc);
	}
	slot_release_slow(bo, g);
}

/* ---- setup ------------------------------------------------------------------------------------ */

int dma_bounce_create(struct dg_dma_dev *dd, struct dma_space *sp, struct dma_bounce **out)
{
	struct dma_bounce *bo = calloc(1, sizeof(*bo));
	uint64_t dir_bytes;
	int r = -ENOMEM;

	if (!bo)
		return -ENOMEM;
	bo->area_size = dd->cfg.bounce.area_size;
	bo->area_shift = dg_ilog2(bo->area_size);
	bo->ncpus = dd->dma->ncpus;
	bo->nareas = 3 * bo->ncpus;
	bo->units = (uint32_t)(bo->area_size >> BOUNCE_UNIT_SHIFT);
	bo->iova_size = bo->area_size * bo->nareas;
	if (bo->iova_size >> BOUNCE_UNIT_SHIFT >= BOUNCE_NONE) {
		/* More shadow units than 32-bit unit numbers cover (>= 256 GiB of areas). */
		free(bo);
		return -EINVAL;
	}
	bo->unit_shift = dg_ilog2(bo->units);
	bo->gen = atomic_fetch_add_explicit(&bounce_next_gen, 1, memory_order_relaxed);
	/* membarrier registered once per process (iova_mag.c); without it (or with
	 * DG_IOVA_NO_MEMBARRIER=1) owners enter their caches with an exchange (tc_get). */
	bo->memb = iova_mag_global_init() == 0 && iova_mag_memb();
	for (unsigned int o = 0; o < TC_ORDERS; o++) {
		/* At most 1/8 of an area per stack; moved in halves. */
		uint64_t cap = (bo->area_size >> 3) >> (o + BOUNCE_UNIT_SHIFT);

		bo->tc_max[o] = cap < TC_MAX ? (uint32_t)(cap ? cap : 1) : TC_MAX;
		bo->tc_batch[o] = bo->tc_max[o] > 1 ? bo->tc_max[o] / 2 : 1;
	}
	bo->iova_size = bo->area_size * bo->nareas;
	dir_bytes = bo->area_size * bo->ncpus;
	r = dma_fail(dd, DG_DMA_FAIL_ALLOC);
	if (r)
		goto fail;
	r = -ENOMEM;
	bo->mem = aligned_alloc(DMA_HOST_PAGE > sp->granule ? DMA_HOST_PAGE : sp->granule,
				bo->iova_size);
	bo->rec = calloc((size_t)bo->units * bo->nareas, sizeof(*bo->rec));
	bo->area = aligned_alloc(DG_CACHELINE, sizeof(*bo->area) * bo->nareas);
	if (!bo->mem || !bo->rec || !bo->area)
		goto fail;
	memset(bo->mem, 0, bo->iova_size);
	r = dg_iova_alloc(sp->iova, bo->iova_size, sp->limit, 0, &bo->iova);
	if (r)
		goto fail;
	for (unsigned int d = 0; d < 3; d++) {
		r = dg_domain_map(sp->dom, bo->iova + d * dir_bytes,
				  (uintptr_t)(bo->mem + d * dir_bytes), dir_bytes,
				  dma_dir_prot((enum dg_dma_dir)d), NULL);
		if (r) {
			/* The domain is not attached yet: nobody can have cached these. */
			struct dg_pt_gather g;
			uint64_t un;

			dg_pt_gather_init(&g);
			if (d)
				dg_domain_unmap(sp->dom, bo->iova, d * dir_bytes, &g, &un);
			dg_iommu_flush_gather(dd->dma->mmu, sp->dom, &g);
			dg_iova_free(sp->iova, bo->iova, bo->iova_size);
			goto fail;
		}
	}
	for (unsigned int i = 0; i < bo->nareas; i++) {
		struct bounce_area *a = &bo->area[i];
		enum dg_dma_dir dir = (enum dg_dma_dir)(i / bo->ncpus);

		memset(a, 0, sizeof(*a));
		dg_spin_init(&a->lock);
		a->dir = dir;
		a->readable = dir != DG_DMA_FROM_DEVICE || !sp->write_only_ok;
		bo->readable[dir] = a->readable;
		a->mem = bo->mem + (uint64_t)i * bo->area_size;
		a->iova = bo->iova + (uint64_t)i * bo->area_size;
		a->rec = bo->rec + (uint64_t)i * bo->units;
		for (unsigned int o = 0; o <= BOUNCE_MAX_ORDER; o++)
			a->free_head[o] = BOUNCE_NONE;
		for (uint32_t u = bo->units; u > 0; u -= 1u << BOUNCE_MAX_ORDER)
			fl_push(a, u - (1u << BOUNCE_MAX_ORDER), BOUNCE_MAX_ORDER);
	}
	atomic_fetch_add_explicit(&dd->persistent, bo->iova_size, memory_order_relaxed);
	*out = bo;
	return 0;
fail:
	free(bo->mem);
	free(bo->rec);
	free(bo->area);
	free(bo);
	return r;
}

/* The domain goes away with the space (the device is already elsewhere). */
void dma_bounce_destroy(struct dg_dma_dev *dd, struct dma_space *sp, struct dma_bounce *bo)
{
	(void)sp;
	if (!bo)
		return;
	atomic_fetch_sub_explicit(&dd->persistent, bo->iova_size, memory_order_relaxed);
	/* Acquire pairs with the release CAS in tcache_slow(). */
	pthread_mutex_lock(&tc_reg_lock);
	for (struct bounce_tcache *tc = atomic_load_explicit(&bo->tcaches, memory_order_acquire),
				  *next;
	     tc; tc = next) {
		next = tc->next;
		tc_unlink(tc); /* off the list of a thread still running */
		free(tc);
	}
	pthread_mutex_unlock(&tc_reg_lock);
	free(bo->mem);
	free(bo->rec);
	free(bo->area);
	free(bo);
}

uint64_t dma_bounce_bytes(const struct dma_bounce *bo)
{
	return bo->iova_size;
}

/* ---- copies ----------------------------------------------------------------------------------- */

/* Copy @len bytes starting @off bytes into the concatenation of @sg (to or from @flat). */
static void sg_copy(const struct dg_dma_sg *sg, unsigned int nents, uint64_t off, uint8_t *flat,
		    uint64_t len, bool to_sg)
{
	for (unsigned int i = 0; i < nents && len; i++) {
		uint64_t n;

		if (off >= sg[i].len) {
			off -= sg[i].len;
			continue;
		}
		n = sg[i].len - off < len ? sg[i].len - off : len;
		if (to_sg)
			memcpy((uint8_t *)sg[i].addr + off, flat, n);
		else
			memcpy(flat, (uint8_t *)sg[i].addr + off, n);
		flat += n;
		len -= n;
		off = 0;
	}
}

/* ---- map / unmap ------------------------------------------------------------------------------ */

static inline unsigned int order_of(uint64_t len)
{
	return len <= (1u << BOUNCE_UNIT_SHIFT) ?
		       0 :
		       (unsigned int)(64 - __builtin_clzll(len - 1)) - BOUNCE_UNIT_SHIFT;
}

/* The global unit of @dma (any byte of the areas), or BOUNCE_NONE outside them. */
static inline uint32_t unit_of(const struct dma_bounce *bo, uint64_t dma)
{
	uint64_t off = dma - bo->iova; /* wraps below the areas */

	return off < bo->iova_size ? (uint32_t)(off >> BOUNCE_UNIT_SHIFT) : BOUNCE_NONE;
}

static inline uint8_t *slot_mem(const struct dma_bounce *bo, uint32_t g)
{
	return bo->mem + ((uint64_t)g << BOUNCE_UNIT_SHIFT);
}

static inline uint64_t slot_iova(const struct dma_bounce *bo, uint32_t g)
{
	return bo->iova + ((uint64_t)g << BOUNCE_UNIT_SHIFT);
}

/*
 * Copy @n <= SMALL_COPY bytes between a slot and the driver's buffer (never overlapping)
 * inline: two moves of the largest power of two <= n, from the start and to the end (they
 * overlap when n is not a power of two), as a libc memcpy does for small sizes - without its
 * call, so the fast paths below stay leaves (no call, no register saved).
 */
#define SMALL_COPY 64u

static dg_always_inline void copy_small(uint8_t *d, const uint8_t *s, size_t n)
{
	if (n >= 32) {
		/* four 16-byte moves, the last two addressed from the end (no pointer sums) */
		__builtin_memcpy(d, s, 16);
		__builtin_memcpy(d + 16, s + 16, 16);
		__builtin_memcpy(d + n - 32, s + n - 32, 16);
		__builtin_memcpy(d + n - 16, s + n - 16, 16);
	} else if (n >= 16) {
		__builtin_memcpy(d, s, 16);
		__builtin_memcpy(d + n - 16, s + n - 16, 16);
	} else if (n >= 8) {
		__builtin_memcpy(d, s, 8);
		__builtin_memcpy(d + n - 8, s + n - 8, 8);
	} else if (n >= 4) {
		__builtin_memcpy(d, s, 4);
		__builtin_memcpy(d + n - 4, s + n - 4, 4);
	} else if (n) {
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	}
}

/*
 * One pass over the areas of direction @dir (this CPU's first) for a block of @order: true
 * with its global unit in *gp, else false with *gives the sum of the areas' give-back counts,
 * each read under its lock when its area could not serve.
 */
static bool area_pass(struct dma_bounce *bo, unsigned int dir, unsigned int order, unsigned int cpu,
		      uint32_t *gp, uint64_t *gives)
{
	uint64_t sum = 0;

	for (unsigned int k = 0; k < bo->ncpus; k++) {
		unsigned int ai = dir * bo->ncpus + (cpu + k) % bo->ncpus;
		struct bounce_area *a = &bo->area[ai];
		uint32_t u;

		dg_spin_lock(&a->lock);
		u = slot_take(a, order);
		sum += a->gives;
		dg_spin_unlock(&a->lock);
		if (u != BOUNCE_NONE) {
			*gp = ai << bo->unit_shift | u;
			return true;
		}
	}
	*gives = sum;
	return false;
}

#define AREA_ROUNDS 16 /* reclaims at most per allocation that finds the areas dry */

/*
 * Take a block of @order of direction @dir from the areas when this thread's stack cannot
 * serve it (see the preamble, "Reclaim"): a pass over the areas; when they are dry, every
 * thread's cached slots of @dir back into them (tc_reclaim) and another pass; -ENOSPC only
 * after a pass that found no area able to serve and no give-back into any of them since the
 * pass before (gives are counted per area under its lock and only grow, so equal sums mean
 * no area got anything between its two visits: at the moment between the passes none could
 * serve, and no cache held a slot of @dir when it was drained), or after AREA_ROUNDS
 * reclaims while other threads keep taking what is given back.
 */
static dg_noinline int area_take_all(struct dma_bounce *bo, unsigned int dir, unsigned int order,
				     struct bounce_tcache *tc, uint32_t *gp)
{
	unsigned int cpu = dma_cpu(bo->ncpus);
	uint64_t gives = 0, prev = 0;

	for (unsigned int round = 0;; round++) {
		if (area_pass(bo, dir, order, cpu, gp, &gives))
			return 0;
		if ((round > 0 && gives == prev) || round == AREA_ROUNDS)
			return DMA_ENOSHADOW;
		prev = gives;
		if (!tc)
			tc = tcache(bo);
		tc_reclaim(bo, dir, tc);
	}
}

/*
 * Take a slot of @order in direction @dir (its global unit into *gp): a small one from this
 * thread's stack (refilled from the areas), otherwise from the areas (area_take_all(), which
 * reclaims cached slots when they are dry).
 */
static dg_noinline int slot_alloc_slow(struct dg_dma_dev *dd, struct dma_bounce *bo,
				       enum dg_dma_dir dir, unsigned int order, uint32_t *gp)
{
	struct bounce_tcache *tc = NULL;
	int r = dma_fail(dd, DG_DMA_FAIL_SHADOW);

	if (dg_unlikely(r))
		return r == -ENOSPC ? DMA_ENOSHADOW : r;
	if (order < TC_ORDERS && (tc = tcache(bo)) != NULL) {
		uint32_t g;

		tc_get(tc);
		g = tc_pop(bo, tc, dir, order);
		tc_exit(tc);
		if (g != BOUNCE_NONE) {
			*gp = g;
			return 0;
		}
	}
	return area_take_all(bo, dir, order, tc, gp);
}

/* The fast path of slot_alloc_slow(): a slot from this thread's non-empty stack. */
static dg_always_inline int slot_alloc(struct dg_dma_dev *dd, struct dma_bounce *bo,
				       enum dg_dma_dir dir, unsigned int order, uint32_t *gp)
{
	struct bounce_tcache *tc;
	uint32_t n;

	/* Relaxed: only whether a hook is installed; slot_alloc_slow() reads it with acquire. */
	if (dg_likely(order < TC_ORDERS) &&
	    dg_likely(!atomic_load_explicit(&dd->dma->fail, memory_order_relaxed)) &&
	    dg_likely((tc = tcache_peek(bo)) != NULL) && dg_likely(tc_enter(tc))) {
		if (dg_likely((n = tc_n(tc, dir, order)) != 0)) {
			tc_set_n(tc, dir, order, n - 1);
			*gp = tc->slot[dir][order][n - 1];
			tc_exit(tc);
			return 0;
		}
		tc_exit(tc);
	}
	return slot_alloc_slow(dd, bo, dir, order, gp);
}

/* Map a list (single: one entry) of @total bytes into one slot. */
static dg_always_inline int bounce_map_list(struct dg_dma_dev *dd, const struct dg_dma_sg *sg,
					    unsigned int nents, uint64_t total, enum dg_dma_dir dir,
					    unsigned int attrs, enum dma_kind kind, void *orig,
					    uint64_t *dma)
{
	struct dma_bounce *bo = dd->bounce;
	struct bounce_rec *rec;
	unsigned int order;
	uint64_t slot_bytes;
	uint8_t *slot;
	uint32_t g;
	int r;

	if (dg_unlikely(total > BOUNCE_MAX))
		return -EINVAL;
	order = order_of(total);
	slot_bytes = 1ull << (order + BOUNCE_UNIT_SHIFT);
	r = slot_alloc(dd, bo, dir, order, &g);
	if (dg_unlikely(r))
		return r;
	rec = &bo->rec[g];
	rec->u.orig = orig;
	rec->len = (uint32_t)total;
	slot = slot_mem(bo, g);
	if (dir != DG_DMA_FROM_DEVICE && !(attrs & DG_DMA_ATTR_SKIP_CPU_SYNC)) {
		/* Only the mapped bytes. */
		if (nents == 1)
			memcpy(slot, sg->addr, total);
		else
			sg_copy(sg, nents, 0, slot, total, false);
		ctr_add(dma_tstats(dd), CTR_BOUNCE_IN, total);
	}
	if (bo->readable[dir] && slot_bytes > total) {
		memset(slot + total, 0, slot_bytes - total);
		ctr_add(dma_tstats(dd), CTR_BOUNCE_ZERO, slot_bytes - total);
	}
	/* Release pairs with the acquire loads in find_slot(), claim() and the bulk unmap: orig,
	 * len and the copied data are visible to whoever finds the slot live. */
	atomic_store_explicit(&rec->st, ST(ST_ALLOC, kind, dir, order, kind == KIND_SG ? nents : 0),
			      memory_order_release);
	*dma = slot_iova(bo, g);
	return 0;
}

static dg_noinline int bounce_map_slow(struct dg_dma_dev *dd, void *buf, size_t len,
				       enum dg_dma_dir dir, unsigned int attrs, enum dma_kind kind,
				       uint64_t *dma)
{
	struct dg_dma_sg s = {.addr = buf, .len = len};

	return bounce_map_list(dd, &s, 1, len, dir, attrs, kind, buf, dma);
}

/* Count a fast path's copies and padding when this thread's counter block is not the last
 * one used (a tail call: returns 0). */
static dg_noinline int count_slow(struct dg_dma_dev *dd, uint64_t in, uint64_t zeroed, uint64_t out)
{
	struct dma_tstats *t = dma_tstats(dd);

	ctr_add(t, CTR_BOUNCE_IN, in);
	ctr_add(t, CTR_BOUNCE_ZERO, zeroed);
	ctr_add(t, CTR_BOUNCE_OUT, out);
	return 0;
}

/*
 * Map a single buffer of up to TC_BYTES from this thread's stack. Without @fill (a receive
 * buffer in an area the device cannot read: nothing to copy, nothing to zero) it is a leaf
 * (no call, no register saved); with @fill it copies in (inline up to SMALL_COPY bytes) and
 * zeroes what the device could read past the buffer: in a to-device area only the bytes
 * the slot's previous buffer left past the new one (see the preamble: past rec->len a
 * to-device slot is all zeros), elsewhere the whole padding. An empty stack, a larger slot
 * or an installed failure hook go to bounce_map_list().
 */
static dg_always_inline int map_single(struct dg_dma_dev *dd, void *buf, size_t len,
				       enum dg_dma_dir dir, unsigned int attrs, enum dma_kind kind,
				       uint64_t *dma, bool fill)
{
	struct dma_bounce *bo = dd->bounce;
	const bool copy = fill && dir != DG_DMA_FROM_DEVICE && !(attrs & DG_DMA_ATTR_SKIP_CPU_SYNC);
	struct bounce_tcache *tc;
	struct bounce_rec *rec;
	uint64_t zeroed = 0;
	unsigned int order;
	uint8_t *slot;
	uint32_t g, n;

	order = order_of(len); /* < TC_ORDERS: bounce_map() sent larger buffers elsewhere */
	/* Relaxed: only whether a hook is installed; slot_alloc_slow() reads it with acquire. */
	if (dg_unlikely(atomic_load_explicit(&dd->dma->fail, memory_order_relaxed) != NULL) ||
	    dg_unlikely(!(tc = tcache_peek(bo))) || dg_unlikely(!tc_enter(tc)))
		return bounce_map_slow(dd, buf, len, dir, attrs, kind, dma);
	if (dg_unlikely(!(n = tc_n(tc, dir, order)))) {
		tc_exit(tc);
		return bounce_map_slow(dd, buf, len, dir, attrs, kind, dma);
	}
	tc_set_n(tc, dir, order, n - 1);
	g = tc->slot[dir][order][n - 1];
	tc_exit(tc); /* the slot is ours: the rest is outside the cache */
	rec = &bo->rec[g];
	slot = slot_mem(bo, g);
	if (fill && bo->readable[dir]) {
		const uint64_t size = 1ull << (order + BOUNCE_UNIT_SHIFT);
		const uint64_t dirty = dir == DG_DMA_TO_DEVICE && rec->len < size ? rec->len : size;

		if (dirty > len) {
			zeroed = dirty - len;
			memset(slot + len, 0, zeroed);
		}
	}
	rec->u.orig = buf;
	rec->len = (uint32_t)len;
	if (copy && len <= SMALL_COPY)
		copy_small(slot, buf, len);
	else if (copy)
		memcpy(slot, buf, len);
	/* Release pairs with the acquire loads in find_slot(), claim(), sync_small() and the bulk
	 * unmap: orig, len and the copied data are visible to whoever finds the slot live. */
	atomic_store_explicit(&rec->st, ST(ST_ALLOC, kind, dir, order, 0), memory_order_release);
	*dma = slot_iova(bo, g);
	if (fill) {
		const uint64_t in = copy ? len : 0;

		/* dma_tstats() inline without its call: the counting goes out of line */
		if (dg_unlikely(dma_tls_last.gen != dd->gen))
			return count_slow(dd, in, zeroed, 0);
		ctr_add(dma_tls_last.t, CTR_BOUNCE_IN, in);
		ctr_add(dma_tls_last.t, CTR_BOUNCE_ZERO, zeroed);
	}
	return 0;
}

static dg_noinline int bounce_map_fill(struct dg_dma_dev *dd, void *buf, size_t len,
				       enum dg_dma_dir dir, unsigned int attrs, enum dma_kind kind,
				       uint64_t *dma)
{
	return map_single(dd, buf, len, dir, attrs, kind, dma, true);
}

static dg_noinline int bounce_map_rx(struct dg_dma_dev *dd, void *buf, size_t len,
				     enum dg_dma_dir dir, unsigned int attrs, enum dma_kind kind,
				     uint64_t *dma)
{
	return map_single(dd, buf, len, dir, attrs, kind, dma, false);
}

/* A dispatch of tail calls (no register saved): up to TC_BYTES, a receive buffer in a
 * write-only area to bounce_map_rx(), a leaf; a buffer to copy in, or in an area the device
 * can read (padding to zero), to bounce_map_fill(); larger ones (and too large ones: -EINVAL)
 * to bounce_map_list(). */
static int bounce_map(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
		      unsigned int attrs, enum dma_kind kind, uint64_t *dma)
{
	if (dg_unlikely(len > TC_BYTES))
		return bounce_map_slow(dd, buf, len, dir, attrs, kind, dma);
	if (dd->bounce->readable[dir] ||
	    (dir != DG_DMA_FROM_DEVICE && !(attrs & DG_DMA_ATTR_SKIP_CPU_SYNC)))
		return bounce_map_fill(dd, buf, len, dir, attrs, kind, dma);
	return bounce_map_rx(dd, buf, len, dir, attrs, kind, dma);
}

/* Claim the slot @g if its word is still @st (-> @claimed), under its area's lock: every
 * claim is made under it, so of two racing ones exactly one finds the live word. */
static dg_always_inline bool claim_locked(struct dma_bounce *bo, uint32_t g, uint32_t st,
					  uint32_t claimed)
{
	struct bounce_area *a = area_of_g(bo, g);
	bool won;

	dg_spin_lock(&a->lock);
	won = atomic_load_explicit(&bo->rec[g].st, memory_order_relaxed) == st;
	if (won)
		atomic_store_explicit(&bo->rec[g].st, claimed, memory_order_relaxed);
	dg_spin_unlock(&a->lock);
	return won;
}

/* Validate and claim the live slot at @dma: its global unit into *gp. */
static dg_always_inline int claim(struct dma_bounce *bo, uint64_t dma, uint64_t len,
				  enum dg_dma_dir dir, enum dma_kind kind, uint32_t nents,
				  uint32_t *gp)
{
	uint32_t g = unit_of(bo, dma), st;
	struct bounce_rec *rec;

	if (dg_unlikely(g == BOUNCE_NONE || (dma & ((1u << BOUNCE_UNIT_SHIFT) - 1))))
		return -ENOENT;
	rec = &bo->rec[g];
	/* Acquire pairs with the release store in bounce_map_list(). */
	st = atomic_load_explicit(&rec->st, memory_order_acquire);
	/* One compare for state, kind, dir and nents (the order follows from len); len is read
	 * only once the slot is known live. */
	if (dg_unlikely((st & ~ST(0, 0, 0, 31, 0)) != ST(ST_ALLOC, kind, dir, 0, nents)) ||
	    dg_unlikely(rec->len != len))
		return ST_STATE(st) != ST_ALLOC ? -ENOENT : -EINVAL;
	/* One of two racing unmaps wins: claims are made under the slot's area lock (see the
	 * preamble), the word checked again there (the load above made orig and len visible). */
	if (!claim_locked(bo, g, st, (st & ~7u) | ST_CLAIMED))
		return -ENOENT;
	*gp = g;
	return 0;
}

/*
 * Give back the claimed slots of a chain from its head @g (state word @st): slots of one
 * direction and order (one bulk unmap's), linked through rec->u.fl.next up to BOUNCE_NONE,
 * ST_NENTS(@st) of them. Small slots go on this thread's stack, looked up once - when the
 * stack has room for the whole chain, in a loop without the test for a full stack; the rest
 * one by one.
 */
static dg_noinline void chain_release(struct dma_bounce *bo, uint32_t g, uint32_t st)
{
	const unsigned int order = ST_ORDER(st), dir = ST_DIR(st);
	struct bounce_tcache *tc = order < TC_ORDERS ? tcache(bo) : NULL;
	struct bounce_rec *const recs = bo->rec;
	uint32_t n, max, *stk;

	if (!tc) { /* a large slot's chain (or no cache): each into its area */
		while (g != BOUNCE_NONE) {
			const uint32_t next = recs[g].u.fl.next;

			slot_release_slow(bo, g);
			g = next;
		}
		return;
	}
	stk = tc->slot[dir][order];
	max = bo->tc_max[order];
	tc_get(tc);
	n = tc_n(tc, dir, order);
	if (dg_likely(ST_NENTS(st) <= max - n)) { /* room for all: no test of a full stack */
		for (uint32_t k = ST_NENTS(st); k; k--) {
			const uint32_t next = recs[g].u.fl.next;

			atomic_store_explicit(&recs[g].st, ST(ST_CACHED, 0, 0, order, 0),
					      memory_order_relaxed);
			stk[n++] = g;
			g = next;
		}
		assert(g == BOUNCE_NONE); /* the chain was as long as its head says */
	}
	while (g != BOUNCE_NONE) {
		const uint32_t next = recs[g].u.fl.next;

		if (dg_unlikely(n == max)) { /* full: its oldest half back to the areas */
			tc_set_n(tc, dir, order, n);
			tc_spill(bo, tc, dir, order, bo->tc_batch[order]);
			n = tc_n(tc, dir, order);
		}
		atomic_store_explicit(&recs[g].st, ST(ST_CACHED, 0, 0, order, 0),
				      memory_order_relaxed);
		stk[n++] = g;
		g = next;
	}
	tc_set_n(tc, dir, order, n);
	tc_exit(tc);
}

void dma_bounce_free(struct dg_dma_dev *dd, uint64_t dma)
{
	struct dma_bounce *bo = dd->bounce;
	uint32_t g = unit_of(bo, dma), st;

	assert(g != BOUNCE_NONE); /* a claimed slot's address */
	st = atomic_load_explicit(&bo->rec[g].st, memory_order_relaxed);
	if (ST_KIND(st) == KIND_CHAIN) {
		chain_release(bo, g, st);
		return;
	}
	slot_release(bo, g);
}

/* Unmap the slot at @dma: a single buffer (@sg NULL) or the list @sg. */
static dg_always_inline int bounce_unmap_list(struct dg_dma_dev *dd, uint64_t dma,
					      const struct dg_dma_sg *sg, unsigned int nents,
					      uint64_t total, enum dg_dma_dir dir,
					      unsigned int attrs, enum dma_kind kind,
					      struct dg_dma_batch *b)
{
	struct dma_bounce *bo = dd->bounce;
	uint32_t g;
	int r = claim(bo, dma, total, dir, kind, kind == KIND_SG ? nents : 0, &g);

	if (dg_unlikely(r))
		return r;
	if (dir != DG_DMA_TO_DEVICE && !(attrs & DG_DMA_ATTR_SKIP_CPU_SYNC)) {
		/* Only the mapped bytes; the claim made the record ours. */
		if (!sg && total <= SMALL_COPY)
			copy_small(bo->rec[g].u.orig, slot_mem(bo, g), total);
		else if (!sg)
			memcpy(bo->rec[g].u.orig, slot_mem(bo, g), total);
		else
			sg_copy(sg, nents, 0, slot_mem(bo, g), total, true);
		ctr_add(dma_tstats(dd), CTR_BOUNCE_OUT, total);
	}
	if (b)
		dma_batch_add_bounce(b, dma);
	else
		slot_release(bo, g);
	return 0;
}

/* The unmap of a single buffer that copies back (as many arguments as bounce_unmap()). */
static dg_noinline int bounce_unmap_copy(struct dg_dma_dev *dd, uint64_t dma, size_t len,
					 enum dg_dma_dir dir, unsigned int attrs,
					 enum dma_kind kind, struct dg_dma_batch *b)
{
	return bounce_unmap_list(dd, dma, NULL, 1, len, dir, attrs, kind, b);
}

/*
 * Unmap a single buffer. Without a copy-back (to-device, or DG_DMA_ATTR_SKIP_CPU_SYNC after
 * a sync of what the device wrote) only the claim and the slot's release or batch entry are
 * left, and nothing is live across that last call.
 */
static int bounce_unmap(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
			unsigned int attrs, enum dma_kind kind, struct dg_dma_batch *b)
{
	struct dma_bounce *bo = dd->bounce;
	uint32_t g;
	int r;

	if (dir != DG_DMA_TO_DEVICE && !(attrs & DG_DMA_ATTR_SKIP_CPU_SYNC))
		return bounce_unmap_copy(dd, dma, len, dir, attrs, kind, b);
	r = claim(bo, dma, len, dir, kind, 0, &g);
	if (dg_unlikely(r))
		return r;
	if (b)
		dma_batch_add_bounce(b, dma);
	else
		slot_release(bo, g);
	return 0;
}

/* ---- bulk map / unmap (dg_dma_map_bulk, dg_dma_unmap_bulk) ---------------------------------- */

/*
 * The bulk calls do what n single calls do, with the per-call work once: one dispatch, one
 * lookup of this thread's stack and of its counter block, one counter update each; then a
 * loop of pops (map) or claims (unmap). All or nothing, as dma.h documents for both.
 */

/* Map bufs[0..n) into slots popped off this thread's stack, which holds at least @n (the
 * caller checked): what map_single() does for each, with @fill (copy in, zero the padding)
 * a constant, so a receive ring's refill in a write-only area is a loop of pop, record,
 * publish. Returns the padding bytes zeroed. */
static dg_always_inline uint64_t map_bulk_pop(struct dma_bounce *bo, struct bounce_tcache *tc,
					      void *const *bufs, unsigned int n, size_t len,
					      enum dg_dma_dir dir, bool copy, bool fill,
					      uint64_t *dma)
{
	const unsigned int order = order_of(len);
	const uint64_t size = 1ull << (order + BOUNCE_UNIT_SHIFT);
	const uint32_t word = ST(ST_ALLOC, KIND_SINGLE, dir, order, 0);
	const uint32_t depth = tc_n(tc, dir, order);
	const uint32_t *stk = tc->slot[dir][order] + depth;
	struct bounce_rec *const recs = bo->rec;
	uint8_t *const mem = bo->mem;
	const uint64_t base = bo->iova;
	uint64_t zeroed = 0;

	tc_set_n(tc, dir, order, depth - n);
	for (unsigned int i = 0; i < n; i++) {
		const uint32_t g = *--stk; /* the order n single maps would pop them in */
		struct bounce_rec *rec = &recs[g];
		uint8_t *slot = mem + ((uint64_t)g << BOUNCE_UNIT_SHIFT);

		if (fill && bo->readable[dir]) {
			const uint64_t dirty =
				dir == DG_DMA_TO_DEVICE && rec->len < size ? rec->len : size;

			if (dirty > len) {
				zeroed += dirty - len;
				memset(slot + len, 0, dirty - len);
			}
		}
		rec->u.orig = bufs[i];
		rec->len = (uint32_t)len;
		if (copy && len <= SMALL_COPY)
			copy_small(slot, bufs[i], len);
		else if (copy)
			memcpy(slot, bufs[i], len);
		/* Release pairs with the acquire loads in find_slot(), claim(), sync_small()
		 * and dma_bounce_unmap_bulk(): orig, len and the data are visible first. */
		atomic_store_explicit(&rec->st, word, memory_order_release);
		dma[i] = base + ((uint64_t)g << BOUNCE_UNIT_SHIFT);
	}
	return zeroed;
}

/* dma_bounce_map_bulk() one buffer at a time (a larger slot, a stack holding fewer than @n,
 * an installed failure hook); a failure unmaps the buffers mapped so far (nobody has their
 * addresses yet) and returns the error uncounted. */
static dg_noinline int map_bulk_each(struct dg_dma_dev *dd, void *const *bufs, unsigned int n,
				     size_t len, enum dg_dma_dir dir, unsigned int attrs,
				     uint64_t *dma)
{
	for (unsigned int i = 0; i < n; i++) {
		int r = bounce_map(dd, bufs[i], len, dir, attrs, KIND_SINGLE, &dma[i]);

		if (dg_unlikely(r)) {
			while (i--) {
				uint32_t g;

				if (claim(dd->bounce, dma[i], len, dir, KIND_SINGLE, 0, &g) == 0)
					slot_release(dd->bounce, g);
			}
			return r;
		}
	}
	return 0;
}

int dma_bounce_map_bulk(struct dg_dma_dev *dd, void *const *bufs, unsigned int n, size_t len,
			enum dg_dma_dir dir, unsigned int attrs, uint64_t *dma)
{
	struct dma_bounce *bo = dd->bounce;
	const bool copy = dir != DG_DMA_FROM_DEVICE && !(attrs & DG_DMA_ATTR_SKIP_CPU_SYNC);
	uint64_t zeroed = 0;
	struct dma_tstats *t;
	struct bounce_tcache *tc;
	int r;

	/* Relaxed: only whether a hook is installed; slot_alloc_slow() reads it with acquire. */
	if (dg_likely(len <= TC_BYTES) &&
	    dg_likely(!atomic_load_explicit(&dd->dma->fail, memory_order_relaxed)) &&
	    dg_likely((tc = tcache_peek(bo)) != NULL) && dg_likely(tc_enter(tc)) &&
	    (dg_likely(tc_n(tc, dir, order_of(len)) >= n) || (tc_exit(tc), false))) {
		if (copy || bo->readable[dir])
			zeroed = map_bulk_pop(bo, tc, bufs, n, len, dir, copy, true, dma);
		else /* a receive ring's refill in a write-only area */
			map_bulk_pop(bo, tc, bufs, n, len, dir, false, false, dma);
		tc_exit(tc);
		t = dma_tstats(dd);
		if (copy)
			ctr_add(t, CTR_BOUNCE_IN, (uint64_t)n * len);
		ctr_add(t, CTR_BOUNCE_ZERO, zeroed);
	} else {
		r = map_bulk_each(dd, bufs, n, len, dir, attrs, dma);
		if (dg_unlikely(r))
			return dma_err(dd, r);
		t = dma_tstats(dd);
	}
	ctr_add(t, CTR_MAPS, n);
	ctr_add(t, CTR_MAP_BYTES, (uint64_t)n * len);
	return 0;
}

/*
 * The error of a bulk unmap's first bad entry dma[i] (@st: its slot's word when it is in the
 * areas and was not claimed by someone else, else 0): -ERANGE if this or a later address
 * wraps, else as claim(): -EINVAL a live slot mapped with another length, direction or call,
 * -ENOENT no live slot there (a claim lost, an address given twice).
 */
static dg_noinline int unmap_bulk_err(const uint64_t *dma, unsigned int i, unsigned int n,
				      size_t len, uint32_t st)
{
	for (unsigned int j = i; j < n; j++)
		if (dma[j] + (len - 1) < dma[j])
			return -ERANGE;
	return ST_STATE(st) == ST_ALLOC ? -EINVAL : -ENOENT;
}

/*
 * The claims of dma_bounce_unmap_bulk() in one area (records @arec, first global unit @g0,
 * @asize bytes of IOVA from @abase), its lock held: dma[0..) while in the area, each checked
 * (a live single slot of @len, word @want) and claimed (the same word, ST_CLAIMED), its
 * global unit into
 * gs[]. Returns the index of the first entry not claimed (@n: all), with *stp its slot's word
 * when that entry is bad (never 0: @want has a state), else 0 (outside this area: the caller
 * claims the rest one by one). Out of line so that its loop has the registers to itself.
 */
static dg_noinline unsigned int claim_area(struct bounce_rec *arec, uint64_t abase, uint64_t asize,
					   uint32_t g0, const uint64_t *dma, unsigned int n,
					   uint64_t len, uint32_t want, uint32_t *gs, uint32_t *stp)
{
	const uint64_t *p = dma, *const end = dma + n;

	/* the claimed word is the live one with the next state, ST_CLAIMED */
	static_assert(ST_CLAIMED == ST_ALLOC + 1, "claimed = want + 1");
	for (; p != end; p++, gs++) {
		const uint64_t off = *p - abase; /* in this area */
		struct bounce_rec *rec;
		uint32_t st, u;

		if (dg_unlikely(off >= asize || (off & ((1u << BOUNCE_UNIT_SHIFT) - 1))))
			break;
		u = (uint32_t)(off >> BOUNCE_UNIT_SHIFT);
		rec = &arec[u];
		/* Acquire pairs with the release store of the map (map_single(),
		 * bounce_map_list(), map_bulk_pop()): orig and len are visible. */
		st = atomic_load_explicit(&rec->st, memory_order_acquire);
		if (dg_unlikely(st != want) || dg_unlikely(rec->len != len)) {
			*stp = st ? st : ST(0, 0, 0, 0, 1); /* nonzero: bad, not elsewhere */
			return (unsigned int)(p - dma);
		}
		atomic_store_explicit(&rec->st, want + 1, memory_order_relaxed);
		*gs = g0 + u;
	}
	*stp = 0;
	return (unsigned int)(p - dma);
}

/*
 * Unmap dma[0..n) (@len, @dir, mapped by a single or bulk map), all or nothing: each slot is
 * checked and claimed (ALLOC -> CLAIMED: a double or racing unmap, or an address given twice,
 * finds it claimed) in one pass, those of the first entry's area under one hold of its lock,
 * any others one by one under theirs; a bad entry gives back the claims this call made (the
 * words they had, stored back: the mappings were live all along) and refuses the call. Then
 * the copies back (without DG_DMA_ATTR_SKIP_CPU_SYNC), and the slots go on this thread's
 * stack - or, with @b, into the batch as ONE entry: the claimed slots are chained through
 * their records (rec->u.fl.next, dead once claimed) from a head of kind KIND_CHAIN (its
 * word's nents: the chain's length), and dma_bounce_free() at the batch's end gives the
 * chain back in one pass. The first area's claims are claim_area()'s.
 */
int dma_bounce_unmap_bulk(struct dg_dma_dev *dd, const uint64_t *dma, unsigned int n, size_t len,
			  enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	struct dma_bounce *bo = dd->bounce;
	/* every map gives its slot order_of(its len): the whole word of a live slot mapped
	 * with @len is known (none for a length no slot can have) */
	const unsigned int order = len <= BOUNCE_MAX ? order_of(len) : 0;
	const uint32_t want = len <= BOUNCE_MAX ? ST(ST_ALLOC, KIND_SINGLE, dir, order, 0) :
						  UINT32_MAX;
	const uint32_t claimed = ST(ST_CLAIMED, KIND_SINGLE, dir, order, 0);
	const bool back = dir != DG_DMA_TO_DEVICE && !(attrs & DG_DMA_ATTR_SKIP_CPU_SYNC);
	struct bounce_rec *const recs = bo->rec;
	const uint64_t base = bo->iova, size = bo->iova_size;
	uint32_t gs[DG_DMA_BULK_MAX];
	struct bounce_tcache *tc;
	struct dma_tstats *t;
	uint32_t st, depth;
	unsigned int i;
	int r;

	static_assert(sizeof(struct bounce_rec) << BOUNCE_UNIT_SHIFT >> 4 ==
			      1u << BOUNCE_UNIT_SHIFT,
		      "a unit's record is at its offset / 4");
	/* The claims: under the lock of the first entry's area, which all of a ring's reap
	 * usually share (this CPU's area) - one lock instead of a locked instruction per slot
	 * (claim_locked); an entry of another area ends this loop and the rest are claimed
	 * one by one, each under its own area's lock. */
	i = 0;
	if (dg_likely(dma[0] - base < size)) {
		const unsigned int ai = (unsigned int)((dma[0] - base) >> bo->area_shift);
		const uint64_t abase = base + ((uint64_t)ai << bo->area_shift);
		struct bounce_area *a = &bo->area[ai];
		const uint32_t g0 = (uint32_t)(a->rec - recs); /* the area's first global unit */

		dg_spin_lock(&a->lock);
		i = claim_area(a->rec, abase, bo->area_size, g0, dma, n, len, want, gs, &st);
		if (dg_unlikely(i < n) && st != 0) { /* a bad entry in this area */
			const unsigned int bad = i;

			/* the claims given back at once, under the lock: nobody else could
			 * claim anything in between */
			while (i--)
				atomic_store_explicit(&recs[gs[i]].st, want, memory_order_relaxed);
			dg_spin_unlock(&a->lock);
			return dma_err(dd, unmap_bulk_err(dma, bad, n, len, st));
		}
		dg_spin_unlock(&a->lock);
	}
	for (; i < n; i++) { /* the rest (another area, or an error to find) one by one */
		const uint64_t off = dma[i] - base; /* wraps below the areas */
		struct bounce_rec *rec;

		if (dg_unlikely(off >= size || (off & ((1u << BOUNCE_UNIT_SHIFT) - 1)))) {
			st = 0;
			goto bad;
		}
		rec = (struct bounce_rec *)((char *)recs + (off >> (BOUNCE_UNIT_SHIFT - 4)));
		/* Acquire: as above. */
		st = atomic_load_explicit(&rec->st, memory_order_acquire);
		if (dg_unlikely(st != want) || dg_unlikely(rec->len != len))
			goto bad;
		if (dg_unlikely(!claim_locked(bo, (uint32_t)(off >> BOUNCE_UNIT_SHIFT), want,
					      claimed))) {
			st = 0; /* lost: claimed by a racing unmap */
			goto bad;
		}
		gs[i] = (uint32_t)(off >> BOUNCE_UNIT_SHIFT);
	}
	if (back)
		for (i = 0; i < n; i++) {
			if (len <= SMALL_COPY)
				copy_small(bo->rec[gs[i]].u.orig, slot_mem(bo, gs[i]), len);
			else
				memcpy(bo->rec[gs[i]].u.orig, slot_mem(bo, gs[i]), len);
		}
	if (b) {
		/* the chain: claimed records are ours alone until the batch's end frees them */
		for (i = 0; i + 1 < n; i++)
			recs[gs[i]].u.fl.next = gs[i + 1];
		recs[gs[n - 1]].u.fl.next = BOUNCE_NONE;
		atomic_store_explicit(&recs[gs[0]].st, ST(ST_CLAIMED, KIND_CHAIN, dir, order, n),
				      memory_order_relaxed);
		dma_batch_add_bounce(b, dma[0]);
	} else if (dg_likely(order < TC_ORDERS && (tc = tcache_peek(bo)) != NULL) &&
		   dg_likely(tc_enter(tc)) &&
		   (dg_likely((depth = tc_n(tc, dir, order)) + n <= bo->tc_max[order]) ||
		    (tc_exit(tc), false))) {
		uint32_t *stk = tc->slot[dir][order] + depth;

		for (i = 0; i < n; i++) { /* the order n single unmaps would push them in */
			atomic_store_explicit(&recs[gs[i]].st, ST(ST_CACHED, 0, 0, order, 0),
					      memory_order_relaxed);
			*stk++ = gs[i];
		}
		tc_set_n(tc, dir, order, depth + n);
		tc_exit(tc);
	} else {
		for (i = 0; i < n; i++)
			slot_release(bo, gs[i]);
	}
	t = dma_tstats(dd);
	ctr_add(t, CTR_UNMAPS, n);
	if (back)
		ctr_add(t, CTR_BOUNCE_OUT, (uint64_t)n * len);
	return 0;
bad:
	r = unmap_bulk_err(dma, i, n, len, st);
	while (i--) { /* the word each had (want), under its lock as a claim */
		struct bounce_area *a = area_of_g(bo, gs[i]);

		dg_spin_lock(&a->lock);
		atomic_store_explicit(&recs[gs[i]].st, want, memory_order_relaxed);
		dg_spin_unlock(&a->lock);
	}
	return dma_err(dd, r);
}

/* Split a slot of @total bytes at @dma into DMA segments (max_seg, boundary). */
static int bounce_segments(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			   uint64_t dma, uint64_t total, unsigned int *nr_dma)
{
	unsigned int nr = 0;
	uint64_t pos = 0;

	while (pos < total) {
		uint64_t a = dma + pos, n = total - pos;
		uint64_t to_boundary = (dd->boundary - (a & dd->boundary)) + 1;

		if (n > dd->max_seg)
			n = dd->max_seg;
		if (to_boundary && n > to_boundary)
			n = to_boundary;
		if (nr == nents)
			return -EINVAL;
		sg[nr].dma_addr = a;
		sg[nr].dma_len = n;
		nr++;
		pos += n;
	}
	for (unsigned int i = nr; i < nents; i++) {
		sg[i].dma_addr = 0;
		sg[i].dma_len = 0;
	}
	*nr_dma = nr;
	return 0;
}

static uint64_t sg_total(const struct dg_dma_sg *sg, unsigned int nents)
{
	uint64_t t = 0;

	for (unsigned int i = 0; i < nents; i++)
		t += sg[i].len;
	return t;
}

static int bounce_map_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			 enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma)
{
	uint64_t total = sg_total(sg, nents), dma;
	int r = bounce_map_list(dd, sg, nents, total, dir, attrs, KIND_SG, sg, &dma);

	if (r)
		return r;
	r = bounce_segments(dd, sg, nents, dma, total, nr_dma);
	if (r) {
		uint32_t g;

		if (claim(dd->bounce, dma, total, dir, KIND_SG, nents, &g) == 0)
			slot_release(dd->bounce, g);
	}
	return r;
}

static int bounce_unmap_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			   enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	return bounce_unmap_list(dd, sg[0].dma_addr, sg, nents, sg_total(sg, nents), dir, attrs,
				 KIND_SG, b);
}

/* The live slot holding @dma: its head unit (blocks are aligned to their size, and areas to
 * the largest block, so the head is in the same area). */
static dg_always_inline int find_slot(struct dma_bounce *bo, uint64_t dma, uint32_t *gp,
				      uint32_t *stp)
{
	uint32_t g = unit_of(bo, dma);

	if (dg_unlikely(g == BOUNCE_NONE))
		return -ENOENT;
	for (unsigned int o = 0; o <= BOUNCE_MAX_ORDER; o++) {
		uint32_t h = g & ~((1u << o) - 1);
		/* Acquire pairs with the release store in bounce_map_list(). */
		uint32_t st = atomic_load_explicit(&bo->rec[h].st, memory_order_acquire);

		if (ST_STATE(st) == ST_ALLOC && ST_ORDER(st) == o) {
			*gp = h;
			*stp = st;
			return 0;
		}
	}
	return -ENOENT;
}

/* Sync at any offset of a live slot (single or list); the error uncounted. */
static int sync_slow(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		     bool for_cpu)
{
	struct dma_bounce *bo = dd->bounce;
	struct bounce_rec *rec;
	uint32_t g, st;
	uint64_t off;
	uint8_t *slot;
	int r = find_slot(bo, dma, &g, &st);

	if (dg_unlikely(r))
		return r;
	rec = &bo->rec[g];
	slot = slot_mem(bo, g);
	off = dma - slot_iova(bo, g);
	/* off + len may wrap (len is any size_t): compare without the sum */
	if (dg_unlikely(ST_DIR(st) != dir || off > rec->len || len > rec->len - off))
		return -EINVAL;
	if (for_cpu ? dir == DG_DMA_TO_DEVICE : dir == DG_DMA_FROM_DEVICE)
		return 0;
	if (ST_KIND(st) == KIND_SG) {
		sg_copy(rec->u.orig, ST_NENTS(st), off, slot + off, len, for_cpu);
	} else if (for_cpu) {
		memcpy((uint8_t *)rec->u.orig + off, slot + off, len);
	} else {
		memcpy(slot + off, (uint8_t *)rec->u.orig + off, len);
	}
	ctr_add(dma_tstats(dd), for_cpu ? CTR_BOUNCE_OUT : CTR_BOUNCE_IN, len);
	return 0;
}

/* sync_slow() for bounce_sync(), which counts its own errors (a tail call of the entry point). */
static dg_noinline int bounce_sync_slow(struct dg_dma_dev *dd, uint64_t dma, size_t len,
					enum dg_dma_dir dir, bool for_cpu)
{
	int r = sync_slow(dd, dma, len, dir, for_cpu);

	return dg_unlikely(r) ? dma_err(dd, r) : 0;
}

/* The copy of a sync (back to the buffer @orig for the CPU, into the @slot for the device)
 * and its count, for sync_single() and sync_small(). */
static dg_always_inline int sync_copy(struct dg_dma_dev *dd, uint8_t *slot, uint8_t *orig,
				      size_t len, bool for_cpu, bool big)
{
	if (big)
		memcpy(for_cpu ? orig : slot, for_cpu ? slot : orig, len);
	else if (for_cpu)
		copy_small(orig, slot, len);
	else
		copy_small(slot, orig, len);
	/* dma_tstats() inline without its call: the counting goes out of line */
	if (dg_unlikely(dma_tls_last.gen != dd->gen))
		return for_cpu ? count_slow(dd, 0, 0, len) : count_slow(dd, len, 0, 0);
	ctr_add(dma_tls_last.t, for_cpu ? CTR_BOUNCE_OUT : CTR_BOUNCE_IN, len);
	return 0;
}

/*
 * Sync a range of a single buffer that starts in the slot's first unit (a receive's header
 * or frame at the start of its buffer): the live head is @dma's own unit, no search. Up to
 * SMALL_COPY bytes (!@big) the copy is inline and this is a leaf; more with memcpy. Anything
 * else goes to bounce_sync_slow(), which finds the slot's head at any offset.
 */
static dg_always_inline int sync_single(struct dg_dma_dev *dd, uint64_t dma, size_t len,
					enum dg_dma_dir dir, bool for_cpu, bool big)
{
	struct dma_bounce *bo = dd->bounce;
	const uint64_t off = dma - bo->iova;			   /* wraps below the areas */
	const uint64_t in = off & ((1u << BOUNCE_UNIT_SHIFT) - 1); /* offset in the slot */
	struct bounce_rec *rec;
	uint32_t st;

	if (dg_unlikely(off >= bo->iova_size))
		return bounce_sync_slow(dd, dma, len, dir, for_cpu);
	rec = &bo->rec[off >> BOUNCE_UNIT_SHIFT];
	/* Acquire pairs with the release store in map_single() and bounce_map_list(). */
	st = atomic_load_explicit(&rec->st, memory_order_acquire);
	if (dg_unlikely(ST_STATE(st) != ST_ALLOC) || dg_unlikely(ST_KIND(st) == KIND_SG))
		return bounce_sync_slow(dd, dma, len, dir, for_cpu);
	/* in + len may wrap (len is any size_t): compare without the sum */
	if (dg_unlikely(ST_DIR(st) != dir) || dg_unlikely(in > rec->len || len > rec->len - in))
		return dma_err(dd, -EINVAL);
	if (for_cpu ? dir == DG_DMA_TO_DEVICE : dir == DG_DMA_FROM_DEVICE)
		return 0;
	return sync_copy(dd, bo->mem + off, (uint8_t *)rec->u.orig + in, len, for_cpu, big);
}

static dg_noinline int bounce_sync_big(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				       enum dg_dma_dir dir, bool for_cpu)
{
	return sync_single(dd, dma, len, dir, for_cpu, true);
}

/*
 * Sync up to SMALL_COPY bytes starting in a single buffer's first unit (a receive's frame):
 * sync_single() with fewer tests - live, this direction and a single buffer (not a list) in
 * one test of the record word's low byte (state, kind, dir: it must be ALLOC, dir and
 * KIND_SINGLE or KIND_PAGE, which are 8 apart there: the byte less the SINGLE word is 0 or
 * 8), and the range in one (in + len <= 128 cannot wrap). Anything else, errors included,
 * goes to bounce_sync_slow(), which says which.
 */
static dg_always_inline int sync_small(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				       enum dg_dma_dir dir, bool for_cpu)
{
	struct dma_bounce *bo = dd->bounce;
	const uint64_t off = dma - bo->iova;			   /* wraps below the areas */
	const uint64_t in = off & ((1u << BOUNCE_UNIT_SHIFT) - 1); /* offset in the slot */
	const uint32_t single = ST(ST_ALLOC, KIND_SINGLE, dir, 0, 0);
	struct bounce_rec *rec;
	uint32_t st;

	static_assert(ST(7, 7, 3, 0, 0) == 0xffu, "state, kind and dir are the word's low byte");
	static_assert(ST(0, KIND_PAGE, 0, 0, 0) - ST(0, KIND_SINGLE, 0, 0, 0) == 8u &&
			      KIND_SG != KIND_SINGLE && KIND_SG != KIND_PAGE,
		      "the two single-buffer kinds are 8 apart in the low byte");
	if (dg_unlikely(off >= bo->iova_size))
		return bounce_sync_slow(dd, dma, len, dir, for_cpu);
	rec = &bo->rec[off >> BOUNCE_UNIT_SHIFT];
	/* Acquire pairs with the release store of the map (map_single(), bounce_map_list(),
	 * map_bulk_pop()): orig, len and the data are visible. */
	st = atomic_load_explicit(&rec->st, memory_order_acquire);
	if (dg_unlikely(((uint8_t)(st - single) & (uint8_t)~8u) != 0) ||
	    dg_unlikely(in + len > rec->len))
		return bounce_sync_slow(dd, dma, len, dir, for_cpu);
	if (for_cpu ? dir == DG_DMA_TO_DEVICE : dir == DG_DMA_FROM_DEVICE)
		return 0;
	return sync_copy(dd, bo->mem + off, (uint8_t *)rec->u.orig + in, len, for_cpu, false);
}

/* sync_small() for the device's usual direction, a leaf of its own (registers allocated for
 * it alone: none saved), tail-called by bounce_sync_other(). */
static dg_noinline int sync_small_dev(struct dg_dma_dev *dd, uint64_t dma, size_t len)
{
	return sync_small(dd, dma, len, DG_DMA_TO_DEVICE, false);
}

/* sync_small() of any direction (the other way's, or one the checks will refuse). */
static dg_noinline int sync_small_any(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				      enum dg_dma_dir dir, bool for_cpu)
{
	if (for_cpu)
		return sync_small(dd, dma, len, dir, true);
	return sync_small(dd, dma, len, dir, false);
}

/* A small sync other than the receive's (for the CPU of a from-device buffer): only tail
 * calls (nothing saved) - the device's usual direction to its leaf with its constants (the
 * record's expected word an immediate), anything else to sync_small_any(). */
static dg_noinline int bounce_sync_other(struct dg_dma_dev *dd, uint64_t dma, size_t len,
					 enum dg_dma_dir dir, bool for_cpu)
{
	if (!for_cpu && dg_likely(dir == DG_DMA_TO_DEVICE))
		return sync_small_dev(dd, dma, len);
	return sync_small_any(dd, dma, len, dir, for_cpu);
}

/*
 * The policy's sync: counts its own errors, so the entry point (map.c) tail-calls it. Larger
 * syncs go to bounce_sync_big(); the receive's (for the CPU, from-device, at most SMALL_COPY
 * bytes: a frame or a header) is this function itself, a leaf with its constants (session
 * 14: it was a tail call to a leaf of its own); any other small one is one tail call away.
 */
static int bounce_sync(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		       bool for_cpu)
{
	if (len > SMALL_COPY)
		return bounce_sync_big(dd, dma, len, dir, for_cpu);
	if (dg_likely(for_cpu) && dg_likely(dir == DG_DMA_FROM_DEVICE))
		return sync_small(dd, dma, len, DG_DMA_FROM_DEVICE, true);
	return bounce_sync_other(dd, dma, len, dir, for_cpu);
}

static int bounce_sync_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			  enum dg_dma_dir dir, bool for_cpu)
{
	struct dma_bounce *bo = dd->bounce;
	uint32_t g, st;
	int r = find_slot(bo, sg[0].dma_addr, &g, &st);

	if (r)
		return r;
	if (ST_KIND(st) != KIND_SG || ST_NENTS(st) != nents || bo->rec[g].u.orig != sg ||
	    slot_iova(bo, g) != sg[0].dma_addr)
		return -EINVAL;
	return sync_slow(dd, sg[0].dma_addr, bo->rec[g].len, dir, for_cpu); /* counted by map.c */
}

const struct dma_policy_ops dma_bounce_ops = {
	.map = bounce_map,
	.unmap = bounce_unmap,
	.map_sg = bounce_map_sg,
	.unmap_sg = bounce_unmap_sg,
	.sync = bounce_sync,
	.sync_sg = bounce_sync_sg,
};

/* ---- statistics and check --------------------------------------------------------------------- */

void dma_bounce_stats(const struct dma_bounce *cbo, struct dg_dma_stats *st)
{
	struct dma_bounce *bo = (struct dma_bounce *)cbo; /* the locks */
	uint64_t in_use = 0, cached = 0;

	for (unsigned int i = 0; i < bo->nareas; i++) {
		dg_spin_lock(&bo->area[i].lock);
		in_use += bo->area[i].in_use;
		dg_spin_unlock(&bo->area[i].lock);
	}
	/* Cached slots count in their area's in_use but are free. Acquire pairs with the
	 * release CAS in tcache_slow(). */
	for (const struct bounce_tcache *tc =
		     atomic_load_explicit(&bo->tcaches, memory_order_acquire);
	     tc; tc = tc->next)
		for (unsigned int d = 0; d < 3; d++)
			for (unsigned int o = 0; o < TC_ORDERS; o++)
				cached += (uint64_t)tc_n(tc, d, o) << (o + BOUNCE_UNIT_SHIFT);
	/* Exact when no call runs; while calls run a refill may be seen half, never below 0. */
	st->bounce_in_use += in_use > cached ? in_use - cached : 0;
}

/*
 * The thread caches: every entry is a CACHED head of its stack's order in an area of its
 * stack's direction, and no stack is over its bound. Counts the entries and bytes per area
 * into @cnt and @bytes (nareas each).
 */
static int tc_check(const struct dma_bounce *bo, FILE *why, uint64_t *cnt, uint64_t *bytes)
{
	/* Acquire pairs with the release CAS in tcache_slow(). */
	const struct bounce_tcache *tc =
		atomic_load_explicit(&((struct dma_bounce *)bo)->tcaches, memory_order_acquire);

	for (; tc; tc = tc->next) {
		for (unsigned int d = 0; d < 3; d++)
			for (unsigned int o = 0; o < TC_ORDERS; o++) {
				if (tc_n(tc, d, o) > bo->tc_max[o]) {
					if (why)
						fprintf(why,
							"bounce cache %" PRIu64
							": stack %u/%u over its bound\n",
							atomic_load_explicit(&tc->owner,
									     memory_order_relaxed),
							d, o);
					return -EUCLEAN;
				}
				for (uint32_t k = 0; k < tc_n(tc, d, o); k++) {
					uint32_t g = tc->slot[d][o][k], ai = g >> bo->unit_shift;
					uint32_t u = g & (bo->units - 1), st;

					st = ai < bo->nareas ?
						     atomic_load_explicit(&bo->area[ai].rec[u].st,
									  memory_order_relaxed) :
						     0;
					if (ai >= bo->nareas || bo->area[ai].dir != d ||
					    st != ST(ST_CACHED, 0, 0, o, 0)) {
						if (why)
							fprintf(why,
								"bounce cache %" PRIu64
								": stack %u/%u holds unit %#x in state %#x\n",
								atomic_load_explicit(
									&tc->owner,
									memory_order_relaxed),
								d, o, g, st);
						return -EUCLEAN;
					}
					cnt[ai]++;
					bytes[ai] += 1ull << (o + BOUNCE_UNIT_SHIFT);
				}
			}
	}
	return 0;
}

int dma_bounce_check(const struct dma_bounce *bo, FILE *why, uint64_t *live)
{
	uint64_t *tcn = calloc(2 * (size_t)bo->nareas, sizeof(*tcn)), *tcb;
	int r;

	*live = 0;
	if (!tcn)
		return -ENOMEM;
	tcb = tcn + bo->nareas;
	r = tc_check(bo, why, tcn, tcb);
	for (unsigned int i = 0; !r && i < bo->nareas; i++) {
		const struct bounce_area *a = &bo->area[i];
		uint64_t used = tcb[i], nfree[BOUNCE_MAX_ORDER + 1] = {0}, ncached = 0;

		ncached -= tcn[i]; /* blocks in thread caches are CACHED too */

		for (uint32_t u = 0; u < bo->units;) {
			uint32_t st = atomic_load_explicit(&a->rec[u].st, memory_order_relaxed);
			unsigned int o = ST_ORDER(st);

			if (!ST_STATE(st) || o > BOUNCE_MAX_ORDER || (u & ((1u << o) - 1))) {
				if (why)
					fprintf(why, "bounce area %u unit %u: bad head %#x\n", i, u,
						st);
				r = -EUCLEAN;
				goto out;
			}
			for (uint32_t k = 1; k < (1u << o); k++)
				if (atomic_load_explicit(&a->rec[u + k].st, memory_order_relaxed)) {
					if (why)
						fprintf(why,
							"bounce area %u unit %u: inside a block "
							"but marked\n",
							i, u + k);
					r = -EUCLEAN;
					goto out;
				}
			if (ST_STATE(st) == ST_FREE)
				nfree[o]++;
			else if (ST_STATE(st) == ST_CACHED)
				ncached++;
			else {
				used += 1ull << (o + BOUNCE_UNIT_SHIFT);
				*live += ST_STATE(st) == ST_ALLOC; /* not CLAIMED (in a batch) */
			}
			u += 1u << o;
		}
		if (used != a->in_use) {
			if (why)
				fprintf(why,
					"bounce area %u: in_use %" PRIu64 " but blocks %" PRIu64
					"\n",
					i, a->in_use, used);
			r = -EUCLEAN;
			goto out;
		}
		for (unsigned int o = 0; o <= BOUNCE_MAX_ORDER; o++) {
			uint64_t n = 0;

			for (unsigned int k = 0; k < a->qn[o]; k++) {
				uint32_t st = atomic_load_explicit(&a->rec[a->qc[o][k]].st,
								   memory_order_relaxed);

				if (st != ST(ST_CACHED, 0, 0, o, 0)) {
					if (why)
						fprintf(why,
							"bounce area %u: quick cache %u holds "
							"unit %u in state %#x\n",
							i, o, a->qc[o][k], st);
					r = -EUCLEAN;
					goto out;
				}
				ncached--;
			}

			for (uint32_t u = a->free_head[o]; u != BOUNCE_NONE;
			     u = a->rec[u].u.fl.next)
				if (++n > bo->units)
					break;
			if (n != nfree[o]) {
				if (why)
					fprintf(why,
						"bounce area %u: free list %u has %" PRIu64
						" blocks, %" PRIu64 " free blocks\n",
						i, o, n, nfree[o]);
				r = -EUCLEAN;
				goto out;
			}
		}
		if (ncached) {
			if (why)
				fprintf(why,
					"bounce area %u: cached blocks not in the quick caches\n",
					i);
			r = -EUCLEAN;
			goto out;
		}
	}
out:
	free(tcn);
	return r;
}
