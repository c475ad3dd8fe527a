/* SPDX-License-Identifier: MIT */
/*
 * iommu/fault_queue.h - the bounded multi-producer, multi-consumer fault record queue
 * (private).
 *
 * Device threads push a record for every refused access; CPU threads pop them. The queue is
 * Vyukov's bounded MPMC array queue: each slot carries a sequence number that says whether it
 * is free for the producer of lap k or full for the consumer of lap k, so a record's fields
 * are plain memory published by the slot's release store. A push that finds the queue full
 * counts the record in `overflow` instead: nothing is dropped without a trace.
 *
 * Faults are the slow path of a device (a walk already happened), so a compare-and-swap per
 * record is fine here; the invalidation queue, which is on the unmap fast path, avoids it.
 */
#ifndef DG_IOMMU_FAULT_QUEUE_H
#define DG_IOMMU_FAULT_QUEUE_H

#include "base/compiler.h"

#include <dmaguard/iommu.h>

#include <stdatomic.h>

struct fq_slot {
	_Atomic uint64_t seq; /* pos: free for the push of pos; pos + 1: full for its pop */
	struct dg_fault rec;  /* written by the pusher before seq = pos + 1 (release) */
};

struct fault_queue {
	dg_cacheline _Atomic uint64_t head; /* next pop position */
	dg_cacheline _Atomic uint64_t tail; /* next push position */
	dg_cacheline _Atomic uint64_t pushed;
	_Atomic uint64_t overflow;
	struct fq_slot *slots;
	uint64_t mask;
};

int fault_queue_init(struct fault_queue *fq, uint32_t len);
void fault_queue_fini(struct fault_queue *fq);

/* Push a record; returns 0, or -ENOSPC when full (the record is counted in overflow). */
int fault_queue_push(struct fault_queue *fq, const struct dg_fault *rec);

/* Pop the oldest record; returns 0 or -EAGAIN when empty. */
int fault_queue_pop(struct fault_queue *fq, struct dg_fault *out);

#endif /* DG_IOMMU_FAULT_QUEUE_H */
