/* SPDX-License-Identifier: MIT */
/*
 * iommu/inval_queue.h - the invalidation command ring (private).
 *
 * A bounded history of invalidation commands, numbered by 64-bit sequence numbers: command
 * number s lives in slot s % len. Producers (CPU threads) reserve slots, write them and get
 * them published; consumers (device agents) read every published command at their quiescent
 * points. The ring never waits for consumers: a consumer that falls a whole ring behind sees
 * a stamp that is not its sequence number (inv_queue_next() says -ESTALE) and flushes
 * everything it caches instead. Producers only wait for publication (space).
 *
 * Multi-producer protocol (after the SMMUv3 command queue, Linux 2019):
 *
 *   resv = tail32 << 32 | joined32        (one 64-bit word, producers only)
 *
 *   reserve  old = fetch_add(resv, n << 32 | 1)   ONE atomic add, no cmpxchg loop
 *            owner = (old.joined32 == 0)          nobody gathers a batch: this one does
 *   write    wait for space, stamp = 0, fields, stamp = seq + 1   (no lock)
 *   commit   non-owner: done (its owner publishes its slots);
 *            owner: a. wait until published == its start (the previous owner is done)
 *                   b. close: end = fetch_and(resv, ~0xffffffff).tail32  (one RMW)
 *                   c. wait until the stamps of [start, end) are valid
 *                   d. published = end (release)
 *
 * Closed reservations (session 13, for the two steps below: a strict batch's submit):
 *
 *   reserve  old = fetch_add(resv, n << 32)         joined32 untouched
 *            alone = (old.joined32 == 0)            no batch open: nobody can join ours
 *   commit   not alone: done (it joined the open batch, whose owner's close covers it);
 *            alone: wait until published == start, then publish [start, start + n)
 *
 * One locked instruction per submit instead of two (no close). Why the order holds: a batch
 * is open exactly from its owner's reserve to its close (only that close zeroes joined32,
 * and no other owner can arise meanwhile), so a reservation that finds joined32 != 0 lies
 * inside the open batch's [start, end) (its add came before the close's RMW, which reads the
 * tail after it), and one that finds 0 is the next publisher: the publishers - owners and
 * lone producers, in the order of their RMWs on resv - cover consecutive ranges, and each
 * waits for its predecessor's publication before its own. A lone producer gathers no
 * joiners, so under contention there are more, smaller publications; its wait for the
 * previous publisher is at its commit (an owner's is too).
 *
 * Everyone who reserves between an owner's reserve and its close joins that owner's batch;
 * the first producer after the close owns the next batch and publishes it after this one.
 * An owner publishes only what was reserved before its close, so its work is bounded, and
 * devices see one store of `published` per batch. In the reference configuration a mutex
 * serializes reserve, write and publish instead (the single-lock queue of the Linux-like
 * baseline).
 *
 * Invariants: published <= every reserved-but-unpublished seq; a slot is overwritten only
 * after it was published (space check), so a consumer never misses a command silently.
 *
 * Between its reserve and its write a producer may do other work, if that work waits for
 * nothing (iommu/inval.h, session 13: a strict DMA batch reserves, then clears the page-table
 * entries its commands cover, then writes and commits; since session 14 every DMA submit
 * reserves closed, the others with nothing between). Every later command waits behind
 * reserved slots (consumers apply in order; the next owner publishes after this batch; a
 * joined producer's commit returns, but its waiters wait for this owner), so every reserve is
 * followed by its write and commit on every path, soon, and never by a wait for the queue.
 * What that buys: a locked RMW drains the store buffer, and the page-table clears' lines are
 * held shared by the devices that walked them (one cross-core transfer each, ~80 ns on the
 * test VM). Reserving after the clears, the add waited for them and the close then waited
 * for the slot line, in series; reserving before, with a closed reservation (above), the add
 * finds no clear in the buffer, no close follows, and the clears, the slot and `published`
 * drain together behind the producer's next locked instruction. The stamp argument below is
 * unchanged: the stamp's release store follows the clears in program order.
 *
 * Consumers watch the stamp of their next slot, not `published` (agent.c): a device that has
 * applied the commands < seen reads the stamp of slot seen % len on every translation; while
 * command seen is not written it holds the previous lap's stamp, inv_queue_quiet(seen)
 * (seen + 1 - len, or INV_STAMP_NEVER on the first lap: a slot never written), and the
 * device's next load after a producer writes it misses once and finds the command in the
 * same line (slots are 32 bytes, two per line). Stamps a consumer can find in slot seen:
 *
 *   quiet(seen)           command seen not written yet           nothing to do
 *   0                     being written: command seen itself,    published decides: > seen
 *                         or seen + k * len (a lap)              means a lap
 *   seen + 1              command seen, written (maybe not yet   apply it (in order)
 *                         published: a command is safe to apply
 *                         early, the page-table change before it
 *                         is visible through the stamp's acquire)
 *   seen + 1 + k * len    overwritten: the consumer was lapped   flush everything
 *
 * A consumer may so acknowledge a command before it is published; waiters still wait for
 * publication (published >= their seq), so nothing changes for them. In the reference
 * configuration the same stamps are written under the mutex, and devices read them the same
 * way. Never-written slots start at INV_STAMP_NEVER rather than 0, so 0 always means "being
 * written" and never looks quiet (a device's first lap needs no special case).
 */
#ifndef DG_IOMMU_INVAL_QUEUE_H
#define DG_IOMMU_INVAL_QUEUE_H

#include "base/compiler.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Commands as stored in the ring: RANGE requests are split into BLOCK commands. */
enum inv_op {
	INV_OP_BLOCK = 1, /* id = domain, iova, order: 2^order bytes at iova, aligned */
	INV_OP_DOMAIN,	  /* id = domain */
	INV_OP_GLOBAL,
	INV_OP_DEVICE,	/* id = rid */
	INV_OP_CONTEXT, /* id = rid */
};

/* Marks for statistics, counted by the owner that publishes the slot (no shared RMW). */
#define INV_MARK_SUBMIT 1u /* first slot of a dg_inval_submit() call */
#define INV_MARK_RANGE	2u /* first slot of a RANGE request */
#define INV_NR_OPS	6u /* enum inv_op bound */

struct inv_cmd {
	uint8_t op;    /* enum inv_op */
	uint8_t leaf;  /* BLOCK: walk caches may stay */
	uint8_t order; /* BLOCK: log2 of the block size */
	uint8_t mark;  /* INV_MARK_* */
	uint32_t id;   /* domain id or rid */
	uint64_t iova; /* BLOCK: first byte */
};

/*
 * The stamp of a slot no command was ever written to (inv_queue_init()): neither 0 (being
 * written) nor seq + 1 of a real command (< 2^63), nor UINT64_MAX (agent.c: "slow path").
 */
#define INV_STAMP_NEVER (1ull << 63)

/* One slot: every word is atomic because a lapped reader may race with the next writer. */
struct inv_slot {
	_Atomic uint64_t stamp; /* seq + 1 once written; 0 while being (re)written */
	_Atomic uint64_t word;	/* op | leaf << 8 | order << 16 | mark << 24 | id << 32 */
	_Atomic uint64_t iova;
	uint64_t pad;
};

struct inv_queue {
	/* Read by waiters, producers and devices that were lapped: written once per batch
	   (devices watch their next slot's stamp instead, see above). */
	dg_cacheline _Atomic uint64_t published; /* commands < published are visible */
	/* Producers' reservation word. */
	dg_cacheline _Atomic uint64_t resv; /* tail32 << 32 | joined32, see above */
	/* Read by every device at every catch-up, written only at init: no writer nearby. */
	dg_cacheline struct inv_slot *slots;
	uint64_t mask; /* len - 1 */
	uint32_t len;
	bool reference;
	/*
	 * Statistics, written only by the owner of the moment (owners are serialized by the
	 * resv RMW chain, or by the lock): relaxed load + store, no read-modify-write. The lock
	 * is taken by every reference-configuration producer: it lives here, with what the owner
	 * writes anyway, not next to the fields above (there every reference submit would cost
	 * the devices' next catch-up a miss).
	 */
	dg_cacheline pthread_mutex_t lock; /* reference configuration only */
	_Atomic uint64_t batches;	   /* publications */
	_Atomic uint64_t batch_max;	   /* most slots in one publication */
	_Atomic uint64_t ops[INV_NR_OPS];  /* commands by enum inv_op */
	_Atomic uint64_t submits;	   /* INV_MARK_SUBMIT slots */
	_Atomic uint64_t ranges;	   /* INV_MARK_RANGE slots */
};

static_assert(offsetof(struct inv_queue, slots) / DG_CACHELINE !=
			      offsetof(struct inv_queue, lock) / DG_CACHELINE &&
		      offsetof(struct inv_queue, slots) / DG_CACHELINE !=
			      offsetof(struct inv_queue, batches) / DG_CACHELINE,
	      "what devices read at catch-up shares no line with what producers write");

int inv_queue_init(struct inv_queue *q, uint32_t len, bool reference);
void inv_queue_fini(struct inv_queue *q);

/*
 * Reserve @n (1..len) consecutive slots; returns the first sequence number. Reference
 * configuration: returns with the queue lock held until inv_queue_commit().
 */
uint64_t inv_queue_reserve(struct inv_queue *q, uint32_t n, bool *owner);

/*
 * inv_queue_reserve() for a producer that publishes alone (see the preamble: "closed
 * reservations"): when no batch is open, *owner is true and nobody can join; else the slots
 * join the open batch (*owner false). Commit with inv_queue_commit_closed().
 */
uint64_t inv_queue_reserve_closed(struct inv_queue *q, uint32_t n, bool *owner);

/* Commit of inv_queue_reserve_closed()'s @n slots from @start (all written). */
void inv_queue_commit_closed(struct inv_queue *q, uint64_t start, uint32_t n, bool owner);

/* Wait until slot @seq is free (its previous command published): inv_queue_write()'s. */
void inv_queue_wait_space(struct inv_queue *q, uint64_t seq);

/* Write command @c into reserved slot @seq (waits while the slot is not yet free). Inline:
 * a submit's few slots are four stores each, not a call each. */
static inline void inv_queue_write(struct inv_queue *q, uint64_t seq, const struct inv_cmd *c)
{
	struct inv_slot *s = &q->slots[seq & q->mask];
	const uint64_t word = (uint64_t)c->op | (uint64_t)c->leaf << 8 | (uint64_t)c->order << 16 |
			      (uint64_t)c->mark << 24 | (uint64_t)c->id << 32;

	/*
	 * Space: the slot's previous command (seq - len) must have been published before it is
	 * overwritten. Acquire pairs with the owner's release store of published.
	 */
	if (dg_unlikely(seq >= atomic_load_explicit(&q->published, memory_order_acquire) + q->len))
		inv_queue_wait_space(q, seq);
	atomic_store_explicit(&s->stamp, 0, memory_order_relaxed);
	/*
	 * Release on the fields orders the stamp = 0 above before them: a lapped reader that
	 * reads one of these new values then sees the stamp changed (inv_queue_next).
	 */
	atomic_store_explicit(&s->word, word, memory_order_release);
	atomic_store_explicit(&s->iova, c->iova, memory_order_release);
	/* Release pairs with the acquire loads of the stamp in publish(), inv_queue_next() and
	   the devices' inline loads of their watched stamp (dmaguard/dev.h). */
	atomic_store_explicit(&s->stamp, seq + 1, memory_order_release);
}

/* The stamp of slot @seq % len while command @seq is not yet written (see the preamble). */
static inline uint64_t inv_queue_quiet(const struct inv_queue *q, uint64_t seq)
{
	return seq >= q->len ? seq + 1 - q->len : INV_STAMP_NEVER;
}

/*
 * The fields of slot @s, whose stamp the caller read as @seq + 1 with acquire: the seqlock read
 * side. Acquire on the fields pairs with their release stores (inv_queue_write()), so a newer
 * writer's stamp = 0 is visible to the re-check. 0 (command @seq in @c) or -ESTALE (changed
 * while read). inv_queue_read()'s and inv_queue_next()'s.
 */
static inline int inv_slot_fields(const struct inv_slot *s, uint64_t seq, struct inv_cmd *c)
{
	const uint64_t word = atomic_load_explicit(&s->word, memory_order_acquire);
	const uint64_t iova = atomic_load_explicit(&s->iova, memory_order_acquire);

	if (atomic_load_explicit(&s->stamp, memory_order_relaxed) != seq + 1)
		return -ESTALE;
	c->op = (uint8_t)word;
	c->leaf = (uint8_t)(word >> 8);
	c->order = (uint8_t)(word >> 16);
	c->mark = (uint8_t)(word >> 24);
	c->id = (uint32_t)(word >> 32);
	c->iova = iova;
	return 0;
}

/* The stamp a consumer whose next command is @seq watches. */
static inline const _Atomic uint64_t *inv_queue_watch(const struct inv_queue *q, uint64_t seq)
{
	return &q->slots[seq & q->mask].stamp;
}

/*
 * Read command @seq if it has been written, published or not (a consumer's catch-up, see the
 * preamble). Returns 0 (read into @c), -EAGAIN (slot @seq still holds the previous lap's
 * command: @seq is not written yet), -EBUSY (stamp 0: a command is being written into it,
 * @seq or a later lap's) or -ESTALE (overwritten by a later lap, or changed while read).
 */
static inline int inv_queue_next(const struct inv_queue *q, uint64_t seq, struct inv_cmd *c)
{
	const struct inv_slot *s = &q->slots[seq & q->mask];
	/* Acquire pairs with the release stamp store in inv_queue_write(): the command, and
	   what its producer did before writing it (the page-table change), are visible. */
	uint64_t st = atomic_load_explicit(&s->stamp, memory_order_acquire);

	if (st != seq + 1) {
		if (!st)
			return -EBUSY;
		return st == inv_queue_quiet(q, seq) ? -EAGAIN : -ESTALE;
	}
	return inv_slot_fields(s, seq, c);
}

/* Publish, or leave to the owner, the @n slots from @start (all written). */
void inv_queue_commit(struct inv_queue *q, uint64_t start, uint32_t n, bool owner);

/*
 * Read published command @seq. Returns 0, or -ESTALE when the slot has been overwritten
 * (the reader fell a whole ring behind).
 */
int inv_queue_read(const struct inv_queue *q, uint64_t seq, struct inv_cmd *c);

/* One past the last sequence number handed out so far. */
uint64_t inv_queue_tail(struct inv_queue *q);

/* Validate the ring (quiet queue only): every published stamp matches. 0 or -EUCLEAN. */
int inv_queue_check(struct inv_queue *q, FILE *why);

#endif /* DG_IOMMU_INVAL_QUEUE_H */
