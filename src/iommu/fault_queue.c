/* SPDX-License-Identifier: MIT */
/*
 * iommu/fault_queue.c - bounded MPMC fault queue with an overflow counter (see
 * fault_queue.h; after D. Vyukov's bounded MPMC queue).
 */
#include "iommu/fault_queue.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int fault_queue_init(struct fault_queue *fq, uint32_t len)
{
	memset(fq, 0, sizeof(*fq));
	if (len < 2 || !dg_is_pow2(len))
		return -EINVAL;
	fq->slots = calloc(len, sizeof(*fq->slots));
	if (!fq->slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < len; i++)
		atomic_init(&fq->slots[i].seq, i);
	fq->mask = len - 1;
	atomic_init(&fq->head, 0);
	atomic_init(&fq->tail, 0);
	atomic_init(&fq->pushed, 0);
	atomic_init(&fq->overflow, 0);
	return 0;
}

void fault_queue_fini(struct fault_queue *fq)
{
	free(fq->slots);
	fq->slots = NULL;
}

int fault_queue_push(struct fault_queue *fq, const struct dg_fault *rec)
{
	uint64_t pos = atomic_load_explicit(&fq->tail, memory_order_relaxed);
	struct fq_slot *s;

	for (;;) {
		s = &fq->slots[pos & fq->mask];
		/* Acquire pairs with the release store of seq in fault_queue_pop(): free slot. */
		uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
		int64_t diff = (int64_t)(seq - pos);

		if (diff == 0) {
			if (atomic_compare_exchange_weak_explicit(&fq->tail, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed))
				break;
		} else if (diff < 0) {
			/* Full: the slot still holds the record of the previous lap. */
			atomic_fetch_add_explicit(&fq->overflow, 1, memory_order_relaxed);
			return -ENOSPC;
		} else {
			pos = atomic_load_explicit(&fq->tail, memory_order_relaxed);
		}
	}
	s->rec = *rec;
	/* Release pairs with the acquire load of seq in fault_queue_pop(): record first. */
	atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
	atomic_fetch_add_explicit(&fq->pushed, 1, memory_order_relaxed);
	return 0;
}

int fault_queue_pop(struct fault_queue *fq, struct dg_fault *out)
{
	uint64_t pos = atomic_load_explicit(&fq->head, memory_order_relaxed);
	struct fq_slot *s;

	for (;;) {
		s = &fq->slots[pos & fq->mask];
		/* Acquire pairs with the release store of seq in fault_queue_push(): record. */
		uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
		int64_t diff = (int64_t)(seq - (pos + 1));

		if (diff == 0) {
			if (atomic_compare_exchange_weak_explicit(&fq->head, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed))
				break;
		} else if (diff < 0) {
			return -EAGAIN;
		} else {
			pos = atomic_load_explicit(&fq->head, memory_order_relaxed);
		}
	}
	*out = s->rec;
	/* Release pairs with the acquire load in fault_queue_push(): the slot is free again. */
	atomic_store_explicit(&s->seq, pos + fq->mask + 1, memory_order_release);
	return 0;
}
