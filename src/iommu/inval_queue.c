/* SPDX-License-Identifier: MIT */
/*
 * iommu/inval_queue.c - the invalidation command ring: one atomic add to reserve, lock-free
 * writes, one owner publishes each batch (design and invariants in inval_queue.h).
 *
 * Why not a cmpxchg loop on the tail (the first SMMUv3 lock-free queue): under contention
 * every failed compare costs a cache-line round trip, and Linux measured +24% IOPS from
 * replacing it by an atomic add. Why not publish in order, each producer waiting for the
 * previous one (DPDK's ring): every producer would then spin on every earlier one; with an
 * owner only the owner waits, for the stamps of the slots that joined its batch.
 */
#include "iommu/inval_queue.h"

#include "base/clock.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define RESV_TAIL(w)   ((uint32_t)((w) >> 32))
#define RESV_JOINED(w) ((uint32_t)(w))

/*
 * Back off in a spin wait: a pause at first, then yield the CPU. The thread we wait for (a
 * producer between reserve and write, an owner) may have been preempted: on a machine with
 * more runnable threads than CPUs, spinning on would only delay it.
 */
static void backoff(unsigned int *spins)
{
	if (++*spins < 128)
		dg_cpu_relax();
	else
		sched_yield();
}

int inv_queue_init(struct inv_queue *q, uint32_t len, bool reference)
{
	memset(q, 0, sizeof(*q));
	if (!dg_is_pow2(len))
		return -EINVAL;
	q->slots = aligned_alloc(DG_CACHELINE, (size_t)len * sizeof(*q->slots));
	if (!q->slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < len; i++) {
		atomic_init(&q->slots[i].stamp, INV_STAMP_NEVER); /* never written */
		atomic_init(&q->slots[i].word, 0);
		atomic_init(&q->slots[i].iova, 0);
		q->slots[i].pad = 0;
	}
	q->len = len;
	q->mask = len - 1;
	q->reference = reference;
	atomic_init(&q->published, 0);
	atomic_init(&q->resv, 0);
	atomic_init(&q->batches, 0);
	atomic_init(&q->batch_max, 0);
	for (unsigned int i = 0; i < INV_NR_OPS; i++)
		atomic_init(&q->ops[i], 0);
	atomic_init(&q->submits, 0);
	atomic_init(&q->ranges, 0);
	if (pthread_mutex_init(&q->lock, NULL)) {
		free(q->slots);
		return -ENOMEM;
	}
	return 0;
}

void inv_queue_fini(struct inv_queue *q)
{
	pthread_mutex_destroy(&q->lock);
	free(q->slots);
	q->slots = NULL;
}

uint64_t inv_queue_reserve(struct inv_queue *q, uint32_t n, bool *owner)
{
	uint64_t old, pub;

	if (q->reference) {
		pthread_mutex_lock(&q->lock);
		*owner = true;
		return atomic_load_explicit(&q->published, memory_order_relaxed);
	}
	/* The one atomic add of a submission: n slots, and one more producer in the batch. */
	old = atomic_fetch_add_explicit(&q->resv, (uint64_t)n << 32 | 1, memory_order_relaxed);
	*owner = RESV_JOINED(old) == 0;
	/*
	 * Widen the 32-bit tail to 64 bits. Our slots are not written yet, so published cannot
	 * have passed them, and fewer than 2^32 slots are ever outstanding: published <= start
	 * < published + 2^32. Acquire pairs with the owner's release store of published.
	 */
	pub = atomic_load_explicit(&q->published, memory_order_acquire);
	return pub + (uint32_t)(RESV_TAIL(old) - (uint32_t)pub);
}

uint64_t inv_queue_reserve_closed(struct inv_queue *q, uint32_t n, bool *owner)
{
	uint64_t old, pub;

	if (q->reference)
		return inv_queue_reserve(q, n, owner);
	/* n slots, joined32 untouched: no batch of ours for others to join (inval_queue.h). */
	old = atomic_fetch_add_explicit(&q->resv, (uint64_t)n << 32, memory_order_relaxed);
	*owner = RESV_JOINED(old) == 0;
	/* As in inv_queue_reserve(). */
	pub = atomic_load_explicit(&q->published, memory_order_acquire);
	return pub + (uint32_t)(RESV_TAIL(old) - (uint32_t)pub);
}

void inv_queue_wait_space(struct inv_queue *q, uint64_t seq)
{
	unsigned int spins = 0;

	/* Acquire pairs with the owner's release store of published. */
	while (seq >= atomic_load_explicit(&q->published, memory_order_acquire) + q->len)
		backoff(&spins);
}

/* Only the owner of the moment writes the counters (see struct inv_queue). */
static void bump(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

static void note_batch(struct inv_queue *q, uint64_t n)
{
	bump(&q->batches, 1);
	if (n > atomic_load_explicit(&q->batch_max, memory_order_relaxed))
		atomic_store_explicit(&q->batch_max, n, memory_order_relaxed);
}

/* Owner: wait until the slots [cur, end) are written, then make them visible. Inline in
 * commit (one call per submit, not two). */
static dg_always_inline void publish(struct inv_queue *q, uint64_t cur, uint64_t end)
{
	for (uint64_t s = cur; s < end; s++) {
		const struct inv_slot *slot = &q->slots[s & q->mask];
		unsigned int spins = 0;
		uint64_t word;

		/* Acquire pairs with the release stamp store in inv_queue_write(). */
		while (atomic_load_explicit(&slot->stamp, memory_order_acquire) != s + 1)
			backoff(&spins);
		word = atomic_load_explicit(&slot->word, memory_order_relaxed);
		bump(&q->ops[(word & 0xff) % INV_NR_OPS], 1);
		if ((word >> 24) & INV_MARK_SUBMIT)
			bump(&q->submits, 1);
		if ((word >> 24) & INV_MARK_RANGE)
			bump(&q->ranges, 1);
	}
	/*
	 * Release pairs with the acquire loads of published by devices (agent catch-up), by
	 * waiters and by producers waiting for space: the commands, and everything their
	 * producers did before submitting them (the page-table updates), are visible first.
	 */
	atomic_store_explicit(&q->published, end, memory_order_release);
	note_batch(q, end - cur);
}

void inv_queue_commit(struct inv_queue *q, uint64_t start, uint32_t n, bool owner)
{
	uint64_t end, w;
	unsigned int spins = 0;

	if (q->reference) {
		publish(q, start, start + n);
		pthread_mutex_unlock(&q->lock);
		return;
	}
	if (!owner)
		return; /* the owner of the batch we joined publishes our slots */
	/*
	 * a. The previous owner publishes everything before our start. Acquire pairs with its
	 *    release store of published.
	 */
	while (atomic_load_explicit(&q->published, memory_order_acquire) != start)
		backoff(&spins);
	/* b. Close the batch: whoever reserves from now on owns or joins the next one. */
	w = atomic_fetch_and_explicit(&q->resv, ~0xffffffffull, memory_order_relaxed);
	end = start + (uint32_t)(RESV_TAIL(w) - (uint32_t)start);
	/* c, d. Publish, in steps of at most len: producers beyond wait for that space. */
	for (uint64_t cur = start; cur < end;) {
		uint64_t step = end - cur > q->len ? cur + q->len : end;

		publish(q, cur, step);
		cur = step;
	}
	(void)n;
}

void inv_queue_commit_closed(struct inv_queue *q, uint64_t start, uint32_t n, bool owner)
{
	unsigned int spins = 0;

	if (q->reference || !owner) {
		/* the mutex queue's; or joined an open batch: its owner publishes our slots */
		inv_queue_commit(q, start, n, owner);
		return;
	}
	/* Alone: the previous publisher first (as commit's step a), then our n slots (<= len,
	   inv_queue_reserve's rule), no close. */
	while (atomic_load_explicit(&q->published, memory_order_acquire) != start)
		backoff(&spins);
	publish(q, start, start + n);
}

int inv_queue_read(const struct inv_queue *q, uint64_t seq, struct inv_cmd *c)
{
	const struct inv_slot *s = &q->slots[seq & q->mask];

	/* Acquire pairs with the release stamp store in inv_queue_write(). */
	if (atomic_load_explicit(&s->stamp, memory_order_acquire) != seq + 1)
		return -ESTALE;
	return inv_slot_fields(s, seq, c);
}

uint64_t inv_queue_tail(struct inv_queue *q)
{
	/* published first: it never passes the tail read after it. Acquire as in reserve. */
	uint64_t pub = atomic_load_explicit(&q->published, memory_order_acquire);
	uint64_t w;

	if (q->reference)
		return pub;
	w = atomic_load_explicit(&q->resv, memory_order_relaxed);
	return pub + (uint32_t)(RESV_TAIL(w) - (uint32_t)pub);
}

int inv_queue_check(struct inv_queue *q, FILE *why)
{
	uint64_t pub = atomic_load_explicit(&q->published, memory_order_acquire);
	uint64_t from = pub > q->len ? pub - q->len : 0;
	uint64_t w = atomic_load_explicit(&q->resv, memory_order_relaxed);

	if (!q->reference && RESV_JOINED(w)) {
		if (why)
			fprintf(why, "inv_queue: batch open (tail %u, %u producers)\n",
				RESV_TAIL(w), RESV_JOINED(w));
		return -EUCLEAN;
	}
	if (!q->reference && RESV_TAIL(w) != (uint32_t)pub) {
		if (why)
			fprintf(why, "inv_queue: tail %u != published %llu\n", RESV_TAIL(w),
				(unsigned long long)pub);
		return -EUCLEAN;
	}
	for (uint64_t s = from; s < pub; s++) {
		uint64_t st =
			atomic_load_explicit(&q->slots[s & q->mask].stamp, memory_order_relaxed);
		if (st != s + 1) {
			if (why)
				fprintf(why, "inv_queue: slot of seq %llu has stamp %llu\n",
					(unsigned long long)s, (unsigned long long)st);
			return -EUCLEAN;
		}
	}
	return 0;
}
