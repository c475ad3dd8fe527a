/* SPDX-License-Identifier: MIT */
/*
 * dma/lazy.c - the lazy policy: per-CPU flush queues (Linux's iommu_dma flush queue).
 *
 * An unmap clears the page table at once but does not wait for the devices: its IOVA goes on
 * the calling CPU's flush queue and is given back only when a flush that *started after it was
 * queued* has *finished*. Until then a device may still translate through a stale IOTLB entry
 * and reach the buffer: that is the window this policy trades for speed, and it is measured.
 *
 *   queue (ring of qsize entries)       generations
 *   head ........ busy ........ open ...... tail
 *        [gen g-1] [gen g: flush g in flight] [gen g+1: open, not flushed yet]
 *
 * Generations (start/finish counters, per queue): an entry records flush_start when queued; a
 * flush takes the open generation's hull as one RANGE invalidation (leaf-only while no table
 * page was freed), increments flush_start and is "in flight" until dg_inval_done() says its
 * sequence number completed; then flush_finish = its generation + 1 and every entry with
 * gen < flush_finish is released (IOVA freed; the flush's gather releases the table pages).
 * One flush is in flight per queue, so generations finish in order.
 *
 * Why per queue and not per domain as Linux: a flush releases only what was queued before it
 * started on the same queue, under the same lock, so "queued before" is a happens-before fact
 * (the unmap's page-table store precedes the submission of the flush that covers it) and not
 * an inference from a counter read on another CPU.
 *
 * When a flush starts: the open generation reaches half the queue (asynchronous: no wait); the
 * queue is full (then the unmap waits for the flush in flight, counted in full_waits); its
 * oldest entry is older than the timeout (housekeeping, dma_lazy_tick()). Hence the window in
 * unmaps never exceeds qsize (an entry is still in the ring when its window is measured), and
 * in time it is bounded by timeout + housekeeping period + the devices' acknowledgement time.
 *
 * Measured window of flush g: from the time its oldest entry was queued to the time its
 * completion was observed (an upper bound of how long a stale translation stayed usable); in
 * unmaps: entries queued on this queue from its oldest entry up to that observation.
 */
#include "dma/dma_internal.h"
#include "pt/pt_fast.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * Give back @n released entries in address order (dma_order_frees), in chunks of at most
 * LAZY_FREE_CHUNK, the last chunk first: a stretch in ascending order (a ring's) goes back
 * highest first as a whole, and the next maps get neighbouring IOVAs ascending. Given back in
 * unmap order, xdp64 under lazy had 3% of its maps next to the previous one (47% with this,
 * 1% when only monotonic chunks are put in order: the order decays unless sorted). The sort
 * costs the single map+unmap benchmark about 150 instructions per operation
 * (lazy/64/single/t1: 917 against 769).
 */
#define LAZY_FREE_CHUNK 64

static void lazy_free(struct dma_space *sp, const struct iova_owned *r, uint32_t n)
{
	struct iova_owned tmp[LAZY_FREE_CHUNK];

	while (n) {
		uint32_t k = n < LAZY_FREE_CHUNK ? n : LAZY_FREE_CHUNK;

		memcpy(tmp, r + n - k, k * sizeof(*tmp));
		dma_order_frees(tmp, k);
		iova_free_owned(sp->iova, tmp, k);
		n -= k;
	}
}

int dma_lazy_create(struct dg_dma_dev *dd, struct dma_lazy **out)
{
	struct dma_lazy *lz = calloc(1, sizeof(*lz));

	if (!lz)
		return -ENOMEM;
	lz->qsize = dd->cfg.lazy.queue_size;
	lz->timeout_ns = dd->cfg.lazy.timeout_ns;
	lz->ncpus = dd->dma->ncpus;
	lz->fq = aligned_alloc(DG_CACHELINE, sizeof(*lz->fq) * lz->ncpus);
	if (!lz->fq) {
		free(lz);
		return -ENOMEM;
	}
	for (unsigned int i = 0; i < lz->ncpus; i++) {
		struct lazy_fq *fq = &lz->fq[i];

		*fq = (struct lazy_fq){0};
		dg_spin_init(&fq->lock);
		dg_pt_gather_init(&fq->open);
		dg_pt_gather_init(&fq->busy_g);
		fq->ring = calloc(lz->qsize, sizeof(*fq->ring));
		fq->gen = calloc(lz->qsize, sizeof(*fq->gen));
		if (!fq->ring || !fq->gen) {
			lz->ncpus = i + 1; /* this one's arrays too (free(NULL) is fine) */
			dma_lazy_destroy(lz);
			return -ENOMEM;
		}
	}
	*out = lz;
	return 0;
}

void dma_lazy_destroy(struct dma_lazy *lz)
{
	if (!lz)
		return;
	for (unsigned int i = 0; i < lz->ncpus; i++) {
		free(lz->fq[i].ring);
		free(lz->fq[i].gen);
	}
	free(lz->fq);
	free(lz);
}

/* Start flushing the open generation (lock held, nothing in flight). */
static void flush_start(struct dg_dma_dev *dd, struct lazy_fq *fq)
{
	struct dma_space *sp = dd->sp;
	struct dg_inval_cmd c = {.domain = sp->dom_id};
	uint64_t seq;

	if (fq->open.start != fq->open.end) {
		c.type = DG_INVAL_RANGE;
		c.flags = fq->open.leaf_only ? DG_INVAL_LEAF : 0;
		c.iova = fq->open.start;
		c.size = fq->open.end - fq->open.start;
	} else {
		c.type = DG_INVAL_DOMAIN;
	}
	if (dg_inval_submit(dd->dma->mmu, &c, 1, &seq)) {
		c = (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN, .domain = sp->dom_id};
		if (dg_inval_submit(dd->dma->mmu, &c, 1, &seq))
			return; /* cannot happen for a live domain; the next call retries */
	}
	ctr_add(dma_tstats(dd), CTR_SUBMITS, 1);
	fq->busy = true;
	fq->busy_seq = seq;
	fq->busy_g = fq->open;
	dg_pt_gather_init(&fq->open);
	fq->busy_first_ns = fq->open_first_ns;
	fq->busy_first_pos = fq->open_first_pos;
	fq->open_count = 0;
	fq->flush_start++;
	fq->flushes++;
}

/* Observe a completed flush and release what it covers (lock held). */
static void reclaim(struct dg_dma_dev *dd, struct dma_lazy *lz, struct lazy_fq *fq)
{
	struct dma_space *sp = dd->sp;

	if (fq->busy && dg_inval_done(dd->dma->mmu, fq->busy_seq)) {
		uint64_t now = dma_now(dd->dma);
		uint64_t win = now > fq->busy_first_ns ? now - fq->busy_first_ns : 0;
		uint64_t unmaps = fq->tail - fq->busy_first_pos;

		if (win > fq->window_max_ns)
			fq->window_max_ns = win;
		if (unmaps > fq->window_max_unmaps)
			fq->window_max_unmaps = unmaps;
		fq->flush_finish = fq->flush_start; /* the one in flight was flush_start - 1 */
		dg_pt_gather_release(sp->pt, &fq->busy_g);
		fq->busy = false;
	}
	/* Release the covered entries: each contiguous stretch of the ring with one allocator
	 * call (this thread's allocator cache: no lock). */
	while (fq->head != fq->tail) {
		uint32_t pos = fq->head & (lz->qsize - 1), n = 0;

		while (fq->head + n != fq->tail && pos + n < lz->qsize &&
		       fq->gen[pos + n] < fq->flush_finish)
			n++;
		if (!n)
			break;
		lazy_free(sp, &fq->ring[pos], n);
		fq->head += n;
	}
}

int dma_lazy_retire(struct dg_dma_dev *dd, uint64_t iova, uint64_t size, uint64_t token)
{
	struct dma_lazy *lz = dd->lazy;
	struct lazy_fq *fq = &lz->fq[dma_cpu(lz->ncpus)];
	uint64_t unmapped;
	uint32_t pos;

	dg_spin_lock(&fq->lock);
	reclaim(dd, lz, fq);
	while (dg_unlikely(fq->tail - fq->head == lz->qsize)) {
		uint64_t seq;
		int r;

		fq->full_waits++;
		if (!fq->busy)
			flush_start(dd, fq);
		seq = fq->busy_seq;
		dg_spin_unlock(&fq->lock);
		r = dg_inval_wait(dd->dma->mmu, seq);
		ctr_add(dma_tstats(dd), CTR_WAITS, 1);
		if (r) /* the devices do not answer: fall back to a strict, quarantined unmap */
			return dma_strict_retire(dd, dd->sp, iova, size, true, token, NULL, NULL);
		dg_spin_lock(&fq->lock);
		reclaim(dd, lz, fq);
	}
	if (size == dd->sp->granule)
		pt_unmap_granule(dd->sp->pt, iova, &fq->open);
	else
		dg_pt_unmap(dd->sp->pt, iova, size, &fq->open, &unmapped);
	pos = fq->tail & (lz->qsize - 1);
	fq->ring[pos] = (struct iova_owned){.iova = iova, .size = size, .token = token};
	fq->gen[pos] = fq->flush_start;
	if (!fq->open_count++) {
		fq->open_first_ns = dma_now(dd->dma);
		fq->open_first_pos = fq->tail;
	}
	fq->tail++;
	if (!fq->busy && fq->open_count >= lz->qsize / 2)
		flush_start(dd, fq);
	dg_spin_unlock(&fq->lock);
	return 0;
}

void dma_lazy_tick(struct dg_dma_dev *dd, uint64_t now)
{
	struct dma_lazy *lz = dd->lazy;

	for (unsigned int i = 0; i < lz->ncpus; i++) {
		struct lazy_fq *fq = &lz->fq[i];

		dg_spin_lock(&fq->lock);
		reclaim(dd, lz, fq);
		if (!fq->busy && fq->open_count && now - fq->open_first_ns >= lz->timeout_ns) {
			flush_start(dd, fq);
			fq->timeout_flushes++;
			reclaim(dd, lz, fq); /* idle devices complete at once */
		}
		dg_spin_unlock(&fq->lock);
	}
}

int dma_lazy_drain(struct dg_dma_dev *dd, struct dma_lazy *lz)
{
	for (unsigned int i = 0; i < lz->ncpus; i++) {
		struct lazy_fq *fq = &lz->fq[i];

		dg_spin_lock(&fq->lock);
		for (;;) {
			uint64_t seq;
			int r;

			reclaim(dd, lz, fq);
			if (!fq->busy && (fq->open_count || fq->open.nr_tables))
				flush_start(dd, fq);
			if (!fq->busy)
				break;
			seq = fq->busy_seq;
			dg_spin_unlock(&fq->lock);
			r = dg_inval_wait(dd->dma->mmu, seq);
			dg_spin_lock(&fq->lock);
			if (r) {
				dg_spin_unlock(&fq->lock);
				return r;
			}
		}
		dg_spin_unlock(&fq->lock);
	}
	return 0;
}

void dma_lazy_stats(const struct dma_lazy *clz, struct dg_dma_stats *st)
{
	struct dma_lazy *lz = (struct dma_lazy *)clz; /* the locks */

	for (unsigned int i = 0; i < lz->ncpus; i++) {
		struct lazy_fq *fq = &lz->fq[i];

		dg_spin_lock(&fq->lock);
		st->lazy_flushes += fq->flushes;
		st->lazy_timeout_flushes += fq->timeout_flushes;
		st->lazy_full_waits += fq->full_waits;
		st->lazy_pending += fq->tail - fq->head;
		if (fq->window_max_ns > st->lazy_window_max_ns)
			st->lazy_window_max_ns = fq->window_max_ns;
		if (fq->window_max_unmaps > st->lazy_window_max_unmaps)
			st->lazy_window_max_unmaps = fq->window_max_unmaps;
		dg_spin_unlock(&fq->lock);
	}
}
