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
 * Generations (positions in the ring, per queue): the entries queued since the last flush
 * started are the open generation; a flush takes the open generation's hull as one RANGE
 * invalidation (leaf-only while no table page was freed) and covers exactly the entries before
 * the tail at its start (busy_end). It is "in flight" until dg_inval_done() says its sequence
 * number completed; then those entries are released (IOVAs freed; the flush's gather releases
 * the table pages) and head moves to busy_end. One flush is in flight per queue, so
 * generations finish in order and at most two are in the ring.
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
 * Measured window of a flush: from the time its oldest entry was queued to the time its
 * completion was observed (an upper bound of how long a stale translation stayed usable); in
 * unmaps: entries queued on this queue from its oldest entry up to that observation.
 *
 * Streams (session 10): one-granule maps take their IOVAs from the thread's stream as strict's
 * do (stream.c: per-thread chunks whose last-level table is kept; a map is one PTE store and
 * the record). The ring keeps each entry's token; a stream granule's (its chunk's address |
 * DMA_TOKEN_STREAM) goes back to its chunk - one dma_stream_retire() per stretch of entries of
 * one chunk, lazy_retire_streams() - in the reclaim that observed the completion of the flush
 * covering it, where the allocator's IOVAs are given back (lazy_release(), which skips stream
 * granules). A chunk is handed out again only once all its granules were retired, so a
 * granule is reissued only after the flush covering its unmap completed, whichever thread
 * mapped it and whichever queue its unmap went to. The window is the same: an entry per unmap
 * in the ring, measured as before.
 *
 * Bulk (dma_lazy_retire_bulk(), what dg_dma_unmap_bulk() calls after the claim pass it shares
 * with strict, claim_bulk() in map.c): one lock and one reclaim for
 * the whole call, the page-table entries removed by runs of neighbouring IOVAs (a ring's reap
 * is one run: pt_unmap_granules()), the entries copied into the ring in stretches cut where
 * the single call would start a flush (the open generation reaching half the queue) or wait
 * (a full queue). So a bulk call leaves the queue exactly as its entries retired one by one
 * would, except that a flush completing during the call is observed at the next stretch or
 * call instead of the next entry (later, never earlier: release is only delayed).
 * Per packet this is what made lazy cheaper than strict: lock, reclaim (dg_inval_done()),
 * page-table walk and counters were paid per entry before (fwd64: 1703 driver instructions
 * per packet under lazy against 987 under strict).
 */
#include "dma/dma_internal.h"
#include "pt/pt_fast.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * Give back the released entries [from, to) of the ring in address order, highest first
 * (a magazine hands them out again ascending, so the next maps get neighbouring IOVAs and
 * share page-table lines). Given back in unmap order, xdp64 under lazy had 3% of its maps
 * next to the previous one (47% sorted).
 *
 * The ring is nearly always a few ascending pieces (each bulk unmap of a ring's reap is one:
 * fwd64 alternates rx and tx reaps): up to LAZY_PIECES of them are merged from their ends
 * straight out of the ring - the piece whose last entry is highest gives back its entries
 * down to the highest last entry of the others, then the next is chosen (as the strict batch
 * end does) - one iova_free_owned_one() each, no copy and no sort. More pieces (scrambled
 * unmaps) are copied in chunks of LAZY_FREE_CHUNK, the newest first, put in order by
 * dma_order_frees() and given back with one allocator call each.
 */
#define LAZY_PIECES	8
#define LAZY_FREE_CHUNK DG_DMA_BATCH_MAX

static dg_noinline void lazy_release_sorted(struct dma_space *sp, const struct dma_lazy *lz,
					    const struct lazy_fq *fq, uint32_t from, uint32_t to)
{
	struct iova_owned tmp[LAZY_FREE_CHUNK];
	const uint32_t mask = lz->qsize - 1;

	while (to != from) {
		uint32_t k = to - from < LAZY_FREE_CHUNK ? to - from : LAZY_FREE_CHUNK, nf = 0;

		for (uint32_t j = 0; j < k; j++) {
			const struct iova_owned *e = &fq->ring[(to - 1 - j) & mask];

			if (!dma_token_stream(e->token)) /* retired already */
				tmp[nf++] = *e;
		}
		dma_order_frees(tmp, nf);
		iova_free_owned(sp->iova, tmp, nf);
		to -= k;
	}
}

static void lazy_release(struct dma_space *sp, const struct dma_lazy *lz, const struct lazy_fq *fq,
			 uint32_t from, uint32_t to)
{
	const struct iova_owned *ring = fq->ring;
	const uint32_t mask = lz->qsize - 1;
	uint32_t seg[LAZY_PIECES], end[LAZY_PIECES], ns = 1; /* piece j: [seg[j], end[j]) */
	struct iova_tcache *tc = NULL;
	uint64_t prev;

	if (from == to)
		return;
	seg[0] = from;
	prev = ring[from & mask].iova;
	for (uint32_t i = from + 1; i != to; i++) {
		const uint64_t a = ring[i & mask].iova;

		if (dg_unlikely(a < prev)) { /* a new ascending piece */
			if (ns == LAZY_PIECES) {
				lazy_release_sorted(sp, lz, fq, from, to);
				return;
			}
			end[ns - 1] = i;
			seg[ns++] = i;
		}
		prev = a;
	}
	end[ns - 1] = to;
	for (;;) {
		unsigned int top = ns;
		uint64_t ta = 0, bar = 0;
		uint32_t i, lo;

		for (unsigned int j = 0; j < ns; j++) {
			uint64_t a;

			if (end[j] == seg[j])
				continue;
			a = ring[(end[j] - 1) & mask].iova;
			if (top == ns || a > ta) {
				bar = top == ns ? bar : ta;
				top = j;
				ta = a;
			} else if (a > bar) {
				bar = a;
			}
		}
		if (top == ns)
			break;
		i = end[top];
		lo = seg[top];
		do {
			const struct iova_owned *e = &ring[--i & mask];

			if (!dma_token_stream(e->token)) /* retired already */
				iova_free_owned_one(sp->iova, &tc, e->iova, e->size, e->token);
		} while (i != lo && ring[(i - 1) & mask].iova > bar);
		end[top] = i;
	}
	iova_free_owned_end(tc);
}

/*
 * Retire the stream granules among the released entries [from, to) to their chunks
 * (dma_stream_retire(): the chunk is spare, so its granules can be handed out again, once all
 * of them were retired), one add per stretch of entries of one chunk (a ring's reap is one
 * stretch); returns how many entries are the allocator's (lazy_release() gives those back).
 */
static uint32_t lazy_retire_streams(struct dma_space *sp, const struct dma_lazy *lz,
				    const struct lazy_fq *fq, uint32_t from, uint32_t to)
{
	const struct iova_owned *ring = fq->ring;
	const uint32_t mask = lz->qsize - 1;
	uint64_t tok = DMA_TOKEN_STREAM, k = 0; /* no chunk at 0: matches no token */
	uint32_t other = 0;

	for (uint32_t i = from; i != to; i++) {
		const uint64_t t = ring[i & mask].token;

		if (dg_likely(t == tok)) { /* the stretch goes on */
			k++;
			continue;
		}
		if (dg_unlikely(!dma_token_stream(t))) {
			other++;
			continue;
		}
		if (k)
			dma_stream_retire(sp, tok, k);
		tok = t;
		k = 1; /* a stream granule is one granule */
	}
	if (k)
		dma_stream_retire(sp, tok, k);
	return other;
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
		if (!fq->ring) {
			lz->ncpus = i + 1; /* this one's ring too (free(NULL) is fine) */
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
	dma_inval_submit(dd, &c, 1, &seq); /* never fails (DOMAIN, then GLOBAL fallbacks) */
	fq->busy = true;
	fq->busy_seq = seq;
	fq->busy_end = fq->tail;
	fq->busy_g = fq->open;
	dg_pt_gather_init(&fq->open);
	fq->busy_first_ns = fq->open_first_ns;
	fq->busy_first_pos = fq->open_first_pos;
	fq->open_count = 0;
	fq->flushes++;
}

/* Observe a completed flush and release what it covers (lock held). */
static void reclaim(struct dg_dma_dev *dd, struct dma_lazy *lz, struct lazy_fq *fq)
{
	struct dma_space *sp = dd->sp;
	uint64_t now, win, unmaps;

	if (!fq->busy || !dg_inval_done(dd->dma->mmu, fq->busy_seq))
		return;
	now = dma_now(dd->dma);
	win = now > fq->busy_first_ns ? now - fq->busy_first_ns : 0;
	unmaps = fq->tail - fq->busy_first_pos;
	if (win > fq->window_max_ns)
		fq->window_max_ns = win;
	if (unmaps > fq->window_max_unmaps)
		fq->window_max_unmaps = unmaps;
	dg_pt_gather_release(sp->pt, &fq->busy_g);
	fq->busy = false;
	if (lazy_retire_streams(sp, lz, fq, fq->head, fq->busy_end))
		lazy_release(sp, lz, fq, fq->head, fq->busy_end);
	fq->head = fq->busy_end;
}

/* Queue entries [0, k) (room for them, lock held): their page-table entries removed into the
 * open gather - a run of neighbouring stream granules of one chunk through its kept table
 * (dma_stream_clear(): no walk), another run of neighbouring one-granule ranges with one
 * pt_unmap_granules(). */
static void queue(struct dg_dma_dev *dd, struct dma_lazy *lz, struct lazy_fq *fq,
		  const uint64_t *restrict dma, const uint64_t *restrict size,
		  const uint64_t *restrict token, unsigned int k)
{
	struct dma_space *sp = dd->sp;
	struct iova_owned *restrict ring = fq->ring; /* not the arrays: no reloads per entry */
	const uint64_t g = sp->granule, am = ~sp->gmask;
	const uint32_t mask = lz->qsize - 1, t = fq->tail;
	uint64_t unmapped;

	if (!fq->open_count) {
		fq->open_first_ns = dma_now(dd->dma);
		fq->open_first_pos = t;
	}
	for (unsigned int i = 0; i < k;) {
		const uint64_t a = dma[i] & am;
		unsigned int j = i + 1;

		ring[(t + i) & mask] =
			(struct iova_owned){.iova = a, .size = size[i], .token = token[i]};
		if (dg_likely(size[i] == g)) {
			for (uint64_t want = a + g; j < k && size[j] == g && (dma[j] & am) == want;
			     j++, want += g)
				ring[(t + j) & mask] = (struct iova_owned){
					.iova = want, .size = g, .token = token[j]};
			if (dma_token_stream(token[i]) && token[j - 1] == token[i] &&
			    dma_stream_within(sp, token[i], a, j - i)) {
				dma_stream_clear(sp, token[i], a, j - i);
				pt_gather_range(&fq->open, a, a + (uint64_t)(j - i) * g, g);
			} else if (j - i == 1) {
				pt_unmap_granule(sp->pt, a, &fq->open);
			} else {
				pt_unmap_granules(sp->pt, a, j - i, &fq->open);
			}
		} else {
			dg_pt_unmap(sp->pt, a, size[i], &fq->open, &unmapped);
		}
		i = j;
	}
	fq->open_count += k;
	fq->tail = t + k;
}

int dma_lazy_retire_bulk(struct dg_dma_dev *dd, const uint64_t *dma, const uint64_t *size,
			 const uint64_t *token, unsigned int n)
{
	struct dma_lazy *lz = dd->lazy;
	struct lazy_fq *fq = &lz->fq[dma_cpu(lz->ncpus)];
	const uint32_t half = lz->qsize / 2;
	unsigned int i = 0;
	int r = 0;

	dg_spin_lock(&fq->lock);
	reclaim(dd, lz, fq);
	while (i < n) {
		uint32_t room = lz->qsize - (fq->tail - fq->head), k;

		if (dg_unlikely(!room)) { /* full: wait for the flush in flight */
			uint64_t seq;

			fq->full_waits++;
			if (!fq->busy)
				flush_start(dd, fq);
			seq = fq->busy_seq;
			dg_spin_unlock(&fq->lock);
			r = dg_inval_wait(dd->dma->mmu, seq);
			ctr_add(dma_tstats(dd), CTR_WAITS, 1);
			if (r)
				goto strict;
			dg_spin_lock(&fq->lock);
			reclaim(dd, lz, fq);
			continue;
		}
		k = n - i < room ? n - i : room;
		/* not busy: stop where the single call would start the flush (at the next entry
		 * when the open generation reached half the queue while a flush was in flight) */
		if (!fq->busy) {
			uint32_t lim = fq->open_count < half ? half - fq->open_count : 1;

			k = k < lim ? k : lim;
		}
		queue(dd, lz, fq, dma + i, size + i, token + i, k);
		i += k;
		if (!fq->busy && fq->open_count >= half)
			flush_start(dd, fq);
	}
	dg_spin_unlock(&fq->lock);
	return 0;
strict: /* the devices do not answer: the rest retire the strict, quarantined way, all with
	 * one invalidation and one wait (not one wait_timeout_ns per buffer) */
	return dma_strict_retire_many(dd, dma + i, size + i, token + i, n - i);
}

/* One entry: dma_lazy_retire_bulk() of one, written out (a full queue takes the bulk call,
 * which locks again and waits for room). */
int dma_lazy_retire(struct dg_dma_dev *dd, uint64_t iova, uint64_t size, uint64_t token)
{
	struct dma_lazy *lz = dd->lazy;
	struct lazy_fq *fq = &lz->fq[dma_cpu(lz->ncpus)];
	struct dma_space *sp = dd->sp;
	uint64_t unmapped;
	uint32_t t;

	dg_spin_lock(&fq->lock);
	reclaim(dd, lz, fq);
	t = fq->tail;
	if (dg_unlikely(t - fq->head == lz->qsize)) {
		dg_spin_unlock(&fq->lock);
		return dma_lazy_retire_bulk(dd, &iova, &size, &token, 1);
	}
	if (dg_likely(size == sp->granule) && dma_token_stream(token)) {
		dma_stream_clear(sp, token, iova, 1); /* its chunk's kept table: no walk */
		pt_gather_range(&fq->open, iova, iova + size, size);
	} else if (dg_likely(size == sp->granule))
		pt_unmap_granule(sp->pt, iova, &fq->open);
	else
		dg_pt_unmap(sp->pt, iova, size, &fq->open, &unmapped);
	fq->ring[t & (lz->qsize - 1)] =
		(struct iova_owned){.iova = iova, .size = size, .token = token};
	if (!fq->open_count++) {
		fq->open_first_ns = dma_now(dd->dma);
		fq->open_first_pos = t;
	}
	fq->tail = t + 1;
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
