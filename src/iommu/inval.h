/* SPDX-License-Identifier: MIT */
/*
 * iommu/inval.h - dg_inval_submit() in two steps (private: every submit of the DMA layer).
 *
 * iommu_inval_reserve() checks the commands, counts their ring slots and reserves them with
 * a closed reservation (inval_queue.h: the queue's one atomic add, and no batch for others
 * to join); iommu_inval_post() writes the slots and commits them - alone, with no close, when
 * no batch was open; else the open batch's owner publishes them. Between the two a strict
 * batch's stream runs (dma/map.c batch_issue_runs) do the page-table clears the commands
 * cover. So a strict submit's one locked instruction (the add) comes before the clears, and
 * the clears, the slot stores and `published` leave the store buffer together behind the
 * caller's next locked instruction: one cross-core line transfer of waiting at most, where
 * dg_inval_submit() after the clears had its add wait for the clears' lines and then its
 * close for the slot's line, in series. Every other DMA submit (dma/map.c dma_inval_submit:
 * strict unmaps outside a batch, a batch's general way, lazy's flush, the Linux reference's
 * per-page flushes, undo paths) takes the two steps back to back: one way to submit in the
 * DMA layer, one locked RMW per submit instead of dg_inval_submit()'s two (the add and the
 * close). dg_inval_submit() (joined reservations: later producers gather into the owner's
 * batch) stays the public submit, for callers outside the DMA layer. The two share their
 * checks and slot writes (inval.c submit_plan, submit_write): only the reservation differs.
 *
 * Rules for the caller, the queue's (inval_queue.h):
 *  - a successful reserve must be followed by exactly one post with the same commands, on
 *    every path: the slots are numbered already, every later command waits behind them
 *    (devices apply in order, the owner of a later batch waits for this one's publication),
 *    so a reserve never posted stops the queue;
 *  - nothing between the two may wait for the queue (an invalidation wait, a submit of its
 *    own - it would own the next batch and wait for this one -, a lock a waiter holds): other
 *    producers' publications wait for this post;
 *  - the page-table changes the commands cover are made before the post (the stamp's
 *    release store orders them before the command for a device that applies it early).
 * A refused reserve (its errors are dg_inval_submit()'s) reserves nothing. In the reference
 * configuration (the mutex queue) the reserve only checks: the post takes the lock, writes
 * and publishes, so the lock is held no longer than by dg_inval_submit().
 */
#ifndef DG_IOMMU_INVAL_H
#define DG_IOMMU_INVAL_H

#include <dmaguard/iommu.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INVAL_TICKET_RANGES 8 /* RANGE commands a ticket plans without a walk (inval.c) */

/* A reservation between iommu_inval_reserve() and iommu_inval_post(). */
struct inval_ticket {
	uint64_t start; /* first slot (reserved only) */
	uint32_t total; /* slots */
	bool owner;	/* owns the queue's batch (reserved only) */
	bool reserved;	/* false: reference configuration, the post reserves */
	bool ranges;	/* RANGE commands only, written by way[] */
	uint8_t way[INVAL_TICKET_RANGES];
};

/* Check @cmds[0..n) and reserve their slots. 0, or dg_inval_submit()'s errors (nothing
 * reserved). */
int iommu_inval_reserve(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds, size_t n,
			struct inval_ticket *t);

/* Write and commit the slots of @t (the same @cmds): *seq as dg_inval_submit() gives it. */
void iommu_inval_post(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds, size_t n,
		      struct inval_ticket *t, uint64_t *seq);

#endif /* DG_IOMMU_INVAL_H */
