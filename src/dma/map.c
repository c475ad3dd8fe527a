/* SPDX-License-Identifier: MIT */
/*
 * dma/map.c - the streaming DMA API, the translated mapping path shared by every policy that
 * allocates IOVAs (strict, lazy, window's on-demand part, pool fallbacks, coherent memory,
 * bounce's own areas), strict retirement and batches.
 *
 * A translated map (the F&S recipe, "Fast & Safe IO Memory Protection", SOSP'24):
 *
 *   IOVA alloc (magazine) -> record slot -> page-table map of the pages -> record published
 *
 * One contiguous IOVA range per request, also for a scatter-gather list, so an unmap is one
 * page-table walk and one range invalidation. A strict unmap:
 *
 *   claim the record (one CAS, or for a stream granule's mapping its live bit - stream.c -
 *   one atomic AND per 64 granules of a bulk call: refuses never-mapped, wrong
 *   size/dir/kind, double unmap with nothing changed) -> page-table unmap into a gather -> RANGE invalidation (leaf-only
 *   unless a table page was freed: page-walk caches stay warm) -> wait -> free table pages
 *   -> IOVA free
 *
 * Batches move the invalidation and the wait to dg_dma_batch_end(): the gather collects the
 * hull of every unmap, the IOVAs wait in the batch, and one wait covers all of them (a
 * poll's batch - stream runs only, submitted - ends in line: batch_end_runs). The
 * invalidation is one RANGE command over the hull when the hull is at most four times the
 * bytes unmapped (magazines often hand back neighbouring IOVAs), else one command per run of
 * adjacent ranges, all submitted at once (one atomic add on the queue, for a poll's stream
 * runs made before their page-table clears: batch_issue_runs, iommu/inval.h), up to BATCH_PSI_RUNS
 * runs; more scattered than that, one DOMAIN command (leaf-only unless a table page was
 * freed). That is Linux's VT-d rule (a domain-selective flush above the page-selective
 * limit) for the same reason: every device reads and applies each command, each slot is a
 * cache line it must fetch, while a domain flush costs it O(1) (a new IOTLB generation,
 * agent.c) and a few refills of translations it still uses.
 *
 * Invariants:
 *  - An IOVA is given back to the allocator only after an invalidation covering its last
 *    translation completed (strict, batches) or a flush that started after its unmap finished
 *    (lazy.c). The same holds for page-table pages (dg_pt_gather_release).
 *  - A record is valid exactly while its mapping is live and usable by the device.
 *  - A wait that times out leaves everything it covered in quarantine (never reused) until a
 *    later completion confirms it (dma_quarantine_retry, from housekeeping).
 */
#include "dma/dma_internal.h"
#include "dma/fixed_map.h"
#include "iommu/inval.h"
#include "pt/pt_fast.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Kinds of batch entries (dma_internal.h), short names. */
#define BATCH_IOVA   DMA_BATCH_IOVA
#define BATCH_LINK   DMA_BATCH_LINK
#define BATCH_BOUNCE DMA_BATCH_BOUNCE
#define BATCH_KIND   DMA_BATCH_KIND

/* Separate runs a batch invalidates page-selectively at most (see the preamble). */
#define BATCH_PSI_RUNS 8

static inline bool gather_empty(const struct dg_pt_gather *g)
{
	return g->start == g->end && !g->nr_tables;
}

/* ---- address spaces ----------------------------------------------------------------------- */

int dma_space_create(struct dg_dma_dev *dd, const struct dg_pt_geometry *geo, uint64_t first,
		     uint64_t last, struct dma_space **out)
{
	struct dg_iova_config ic = {0};
	struct dg_pt_geometry g;
	struct dma_space *sp;
	uint64_t in_first, in_last;
	int r;

	sp = calloc(1, sizeof(*sp));
	if (!sp)
		return -ENOMEM;
	sp->dom = dg_domain_create(dd->dma->mmu, geo, NULL, NULL);
	if (!sp->dom) {
		r = -errno;
		free(sp);
		return r ? r : -ENOMEM;
	}
	sp->pt = dg_domain_pt(sp->dom);
	sp->dom_id = dg_domain_id(sp->dom);
	dg_pt_geometry(sp->pt, &g);
	sp->granule = g.granule;
	sp->gmask = g.granule - 1;
	sp->gshift = dg_ilog2(g.granule);
	sp->write_only_ok = g.format != DG_PT_FMT_ARM_LPAE_S1;
	if (g.format == DG_PT_FMT_FLAT) {
		in_first = g.window_base;
		in_last = g.window_base + (g.window_size - 1);
	} else {
		in_first = 0;
		in_last = g.ias >= 64 ? UINT64_MAX : (1ull << g.ias) - 1;
	}
	first = dg_align_up(first > in_first ? first : in_first, g.granule);
	last = last < in_last ? last : in_last;
	/* The record table indexes 2^36 granules. */
	if (sp->gshift + 3 * REC_LEVEL_BITS < 64 &&
	    last - first > (REC_MAX_GRANULES << sp->gshift) - 1)
		last = first + (REC_MAX_GRANULES << sp->gshift) - 1;
	r = -EINVAL;
	if (last < first || last - first < sp->granule - 1)
		goto fail_dom;
	sp->first = first;
	sp->last = last;
	sp->limit = dd->mask < last ? dd->mask : last;
	if (sp->limit < first)
		goto fail_dom; /* the device cannot address any of the space */
	ic.start = first;
	ic.end = last;
	ic.granule = g.granule;
	ic.algo = dd->reference ? DG_IOVA_ALGO_LINUX_REFERENCE : DG_IOVA_ALGO_AUGMENTED;
	sp->iova = dg_iova_create(&ic);
	if (!sp->iova) {
		r = errno ? -errno : -ENOMEM;
		goto fail_dom;
	}
	r = dma_rec_init(&sp->rec, first, sp->gshift);
	if (r)
		goto fail_iova;
	dma_stream_init(sp, !dd->reference); /* the reference models Linux: no streams */
	*out = sp;
	return 0;
fail_iova:
	dg_iova_destroy(sp->iova);
fail_dom:
	dg_domain_destroy(sp->dom);
	free(sp);
	return r;
}

/* The device must already be detached from the domain (or never attached). */
void dma_space_destroy(struct dma_space *sp)
{
	if (!sp)
		return;
	dma_stream_fini(sp);
	dma_rec_fini(&sp->rec);
	dg_iova_destroy(sp->iova);
	dg_domain_destroy(sp->dom);
	free(sp);
}

/* ---- invalidation, quarantine ------------------------------------------------------------- */

/* What a refused reserve falls back to, step @k (dma_inval_reserve): 0, one DOMAIN command of
 * @domain (the first refused command's); 1, one GLOBAL command, which is never refused. */
static dg_always_inline struct dg_inval_cmd inval_fallback(unsigned int k, uint32_t domain)
{
	if (k == 0)
		return (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN, .domain = domain};
	return (struct dg_inval_cmd){.type = DG_INVAL_GLOBAL};
}

/*
 * Every invalidation the DMA layer submits is these two steps (iommu/inval.h: a closed
 * reservation, then the slot writes and the commit): a strict batch's stream runs with their
 * page-table clears between them (batch_issue_runs), every other submit with nothing between
 * (dma_inval_submit, batch_submit_cmds). One way, so one place for the fallbacks below, and
 * one locked RMW per submit (dg_inval_submit()'s joined reservation takes two: the add and
 * the close). For the submitter nothing else changes: alone, it waits for the previous
 * publisher at its commit as a joined owner did; with a batch open it joins it. What a closed
 * reservation gives up is other producers joining its batch: under contention, more, smaller
 * publications (inval_queue.h) - as strict's batches have had since session 13 (correct and
 * stress-tested, not measured apart).
 *
 * Never fails, and every caller relies on it: a failed submit would leave page-table entries
 * cleared with no invalidation queued, and *seq (0, or an older submit's) would let the
 * quarantine or a batch end give their IOVAs back with translations still in the IOTLBs.
 * So: the commands as asked; refused (-E2BIG: more slots than the ring, or a range the queue
 * does not take), one DOMAIN command; refused too (-ENOENT: no such domain - not the case
 * while the space lives, as the domain is destroyed only with it), one GLOBAL command, which
 * is always taken (no fields to validate, one slot, a ring is never empty). Every refusal is
 * at the reserve, before anything is reserved. Queue full is not a failure: the post waits
 * for room (inv_queue_write).
 *
 * dma_inval_reserve() returns the commands to post (@cmds, or @fb: the fallback), *n their
 * number; the reservation must be posted (dma_inval_post) with them on every path, and
 * nothing between the two may wait (iommu/inval.h).
 */
static dg_always_inline const struct dg_inval_cmd *
dma_inval_reserve(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds, size_t *n,
		  struct inval_ticket *t, struct dg_inval_cmd *fb)
{
	int r = iommu_inval_reserve(mmu, cmds, *n, t);

	for (unsigned int k = 0; dg_unlikely(r) && k < 2; k++) {
		*fb = inval_fallback(k, cmds[0].domain); /* k = 1: fb's, the same */
		cmds = fb;
		*n = 1;
		r = iommu_inval_reserve(mmu, cmds, 1, t);
	}
	assert(!r); /* see above: a GLOBAL command cannot be refused */
	(void)r;
	return cmds;
}

/* The second step of dma_inval_reserve()'s reservation: *seq covers @cmds (counts a submit). */
static dg_always_inline void dma_inval_post(struct dg_dma_dev *dd, const struct dg_inval_cmd *cmds,
					    size_t n, struct inval_ticket *t, uint64_t *seq)
{
	iommu_inval_post(dd->dma->mmu, cmds, n, t, seq);
	ctr_add(dma_tstats(dd), CTR_SUBMITS, 1);
}

int dma_inval_submit(struct dg_dma_dev *dd, const struct dg_inval_cmd *cmds, size_t n,
		     uint64_t *seq)
{
	struct dg_inval_cmd fb;
	struct inval_ticket t;

	assert(cmds && n);
	cmds = dma_inval_reserve(dd->dma->mmu, cmds, &n, &t, &fb);
	dma_inval_post(dd, cmds, n, &t, seq);
	return 0;
}

int dma_inval_wait(struct dg_dma_dev *dd, uint64_t seq)
{
	int r = dg_inval_wait(dd->dma->mmu, seq);

	ctr_add(dma_tstats(dd), CTR_WAITS, 1);
	return r;
}

int dma_inval(struct dg_dma_dev *dd, const struct dg_inval_cmd *cmds, size_t n, uint64_t *seq)
{
	int r = dma_inval_submit(dd, cmds, n, seq);

	return r ? r : dma_inval_wait(dd, *seq);
}

/* One RANGE command over what @g covers (or a DOMAIN command for tables without a range). */
static void gather_cmd(const struct dma_space *sp, const struct dg_pt_gather *g,
		       struct dg_inval_cmd *c)
{
	memset(c, 0, sizeof(*c));
	c->domain = sp->dom_id;
	if (g->start == g->end) {
		c->type = DG_INVAL_DOMAIN;
		return;
	}
	c->type = DG_INVAL_RANGE;
	c->flags = g->leaf_only ? DG_INVAL_LEAF : 0;
	c->iova = g->start;
	c->size = g->end - g->start;
}

/*
 * Stock Linux strict mode: one page-selective invalidation and one wait per page. On a
 * timeout the rest is covered by one more command so that *seq covers everything.
 */
static int reference_flush(struct dg_dma_dev *dd, struct dma_space *sp,
			   const struct dg_pt_gather *g, uint64_t *seq)
{
	struct dg_inval_cmd c = {.type = DG_INVAL_PAGE,
				 .domain = sp->dom_id,
				 .flags = g->leaf_only ? DG_INVAL_LEAF : 0,
				 .size = sp->granule};
	int r;

	if (g->start == g->end) {
		gather_cmd(sp, g, &c);
		return dma_inval(dd, &c, 1, seq);
	}
	for (uint64_t a = g->start; a != g->end; a += sp->granule) {
		c.iova = a;
		r = dma_inval(dd, &c, 1, seq);
		if (r == -ETIMEDOUT && a + sp->granule != g->end) {
			struct dg_inval_cmd rest = c;

			rest.type = DG_INVAL_RANGE;
			rest.iova = a + sp->granule;
			rest.size = g->end - rest.iova;
			dma_inval_submit(dd, &rest, 1, seq); /* never fails: *seq covers it all */
		}
		if (r)
			return r;
	}
	return 0;
}

int dma_flush_gather(struct dg_dma_dev *dd, struct dma_space *sp, struct dg_pt_gather *g)
{
	struct dg_inval_cmd c;
	uint64_t seq = 0;
	int r;

	if (gather_empty(g))
		return 0;
	gather_cmd(sp, g, &c);
	r = dma_inval(dd, &c, 1, &seq);
	if (r) {
		dma_quarantine_add(dd, sp, seq, g, NULL, NULL, 0, NULL);
		return r;
	}
	dg_pt_gather_release(sp->pt, g);
	return 0;
}

/* Give back a parked IOVA range whose invalidation completed: a two-step unlink's granules to
 * their range (DMA_TOKEN_LINK), a stream granule to its chunk (@token tagged), anything else
 * to the allocator (validated). */
static void quarantine_give(struct dma_space *sp, uint64_t iova, uint64_t size, uint64_t token)
{
	if (token & DMA_TOKEN_LINK) /* a two-step unlink: its granules linkable again */
		dma_links_settle((struct dma_links *)(uintptr_t)(token & ~DMA_TOKEN_LINK), iova,
				 size);
	else if (dma_token_stream(token))
		dma_stream_retire(sp, token, size >> sp->gshift);
	else
		dg_iova_free(sp->iova, iova, size);
}

void dma_quarantine_add(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t seq,
			struct dg_pt_gather *g, const uint64_t *iova, const uint64_t *size,
			uint32_t n, void *mem)
{
	dma_quarantine_add_tok(dd, sp, seq, g, iova, size, NULL, n, mem);
}

void dma_quarantine_add_tok(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t seq,
			    struct dg_pt_gather *g, const uint64_t *iova, const uint64_t *size,
			    const uint64_t *token, uint32_t n, void *mem)
{
	struct dma_quarantine *q = calloc(1, sizeof(*q));

	if (!q) {
		/* Nowhere to park it: wait until the devices confirm, however long. */
		while (dg_inval_wait(dd->dma->mmu, seq) == -ETIMEDOUT)
			;
		dg_pt_gather_release(sp->pt, g);
		for (uint32_t i = 0; i < n; i++)
			quarantine_give(sp, iova[i], size[i], token ? token[i] : 0);
		free(mem);
		return;
	}
	q->mem = mem;
	q->sp = sp;
	q->seq = seq;
	q->gather = *g; /* takes over the table pages */
	dg_pt_gather_init(g);
	q->n = n;
	for (uint32_t i = 0; i < n; i++) {
		q->iova[i] = iova[i];
		q->size[i] = size[i];
		q->token[i] = token ? token[i] : 0;
	}
	pthread_mutex_lock(&dd->q_lock);
	q->next = dd->quarantine;
	dd->quarantine = q;
	atomic_fetch_add_explicit(&dd->nr_quarantined, n ? n : 1, memory_order_relaxed);
	pthread_mutex_unlock(&dd->q_lock);
}

int dma_quarantine_retry(struct dg_dma_dev *dd, bool wait)
{
	struct dg_iommu *mmu = dd->dma->mmu;
	struct dma_quarantine **pq, *q;
	int r = 0;

	pthread_mutex_lock(&dd->q_lock);
	for (pq = &dd->quarantine; (q = *pq);) {
		bool done = wait ? dg_inval_wait(mmu, q->seq) == 0 : dg_inval_done(mmu, q->seq);

		if (!done) {
			r = -ETIMEDOUT;
			pq = &q->next;
			continue;
		}
		dg_pt_gather_release(q->sp->pt, &q->gather);
		for (uint32_t i = 0; i < q->n; i++)
			quarantine_give(q->sp, q->iova[i], q->size[i], q->token[i]);
		free(q->mem);
		atomic_fetch_sub_explicit(&dd->nr_quarantined, q->n ? q->n : 1,
					  memory_order_relaxed);
		*pq = q->next;
		free(q);
	}
	pthread_mutex_unlock(&dd->q_lock);
	return r;
}

/* ---- batches ------------------------------------------------------------------------------ */

/*
 * A batch in ascending pieces. A ring's reap unmaps its buffers in ring order and a magazine
 * handed them out ascending, so each bulk unmap (a queue's rx reap, its tx reap) is one
 * ascending piece, and a poll's batch is a few of them one after the other (fwd64: rx, then
 * tx). Up to BATCH_PIECES such pieces are put in order without a sort: the runs of each piece
 * are merged (a k-way merge of k sorted lists), and the batch end gives the IOVAs back piece
 * by piece from the entries (batch_pieces()). Only more pieces than that - a scrambled batch -
 * take dma_order_frees()' merge sort.
 */
#define BATCH_PIECES DG_DMA_BATCH_PIECES

/*
 * The entries of a stream run (b->run_clear bit j: unmap_bulk_strict) between its first and
 * its last are not written: they are the run's adjacent granules of one chunk, one granule
 * each, with the first's token. The batch end's common way reads the ends only (batch_runs,
 * batch_flush's retire pass); the others (a sort, a mixed batch, non-stream entries to give
 * back, a failed wait's quarantine) write them first. Idempotent.
 */
static dg_noinline void batch_expand(struct dg_dma_batch *b)
{
	for (uint32_t j = 0, rc = b->run_clear; rc && j < b->nruns; j++) {
		const uint32_t f = b->run_first[j], k = b->run_len[j];
		const uint64_t a = b->ent[f].addr, size = b->ent[f].size, tok = b->ent[f].token;
		const uint64_t g = size & ~(uint64_t)BATCH_KIND;

		if (!(rc >> j & 1))
			continue;
		for (uint32_t i = 1; i + 1 < k; i++) {
			b->ent[f + i].addr = a + i * g;
			b->ent[f + i].size = size;
			b->ent[f + i].token = tok;
		}
	}
}

/* Merge the @k ascending lists of runs [seg[j], seg[j + 1]) of lo/hi[0..m) into one
 * ascending list (adjacent runs joined); returns its length. seg[k] must be m. */
static size_t runs_merge(uint64_t *lo, uint64_t *hi, size_t m, const uint32_t *seg, unsigned int k)
{
	uint64_t tlo[DG_DMA_BATCH_MAX], thi[DG_DMA_BATCH_MAX];
	uint32_t pos[BATCH_PIECES];
	size_t out = 0;

	for (unsigned int j = 0; j < k; j++)
		pos[j] = seg[j];
	for (size_t c = 0; c < m; c++) {
		unsigned int best = k;
		uint64_t a, e;

		for (unsigned int j = 0; j < k; j++)
			if (pos[j] < seg[j + 1] && (best == k || lo[pos[j]] < lo[pos[best]]))
				best = j;
		a = lo[pos[best]];
		e = hi[pos[best]];
		pos[best]++;
		if (out && a == thi[out - 1]) {
			thi[out - 1] = e;
			continue;
		}
		tlo[out] = a;
		thi[out++] = e;
	}
	memcpy(lo, tlo, out * sizeof(*lo));
	memcpy(hi, thi, out * sizeof(*hi));
	return out;
}

/*
 * The ranges of ent[from..n) (streaming unmaps and two-step unlinks; bounce slots have none)
 * in address order, adjacent ones merged into runs; *sum gets their bytes, *niova the
 * streaming ones among them. A batch is nearly always a few ascending pieces (see above):
 * one pass merges each piece's neighbours as it goes, and the pieces' runs are merged after.
 * Anything else (more pieces: descending, scrambled) is put in order by dma_order_frees()'
 * natural merge sort (a batch holds up to 256: no quadratic sort) and merged after.
 * pe[0..*npe) gets the first entries of the pieces (*npe 0 after a sort). The runs a bulk
 * unmap recorded (b->run_first[], dg_dma_unmap_bulk) are taken whole: their first entry's
 * address and their last one's end, the entries between unread.
 */
static size_t batch_runs(struct dg_dma_batch *b, uint32_t from, uint64_t *lo, uint64_t *hi,
			 uint64_t *sum, uint32_t *niova, uint32_t *nlink, uint32_t *pe,
			 uint32_t *npe, uint32_t *nclr)
{
	struct iova_owned t[DG_DMA_BATCH_MAX];
	uint32_t seg[BATCH_PIECES + 1], ns = 1; /* seg[j]: the first run of piece j */
	size_t n = 0, m = 0;
	uint64_t s = 0, chi = 0; /* the open run's end, in a register */
	uint32_t ni = 0, nb = 0;

	uint32_t rj = 0, rnext; /* the next known run (b->run_first[]) and its first entry */

	while (rj < b->nruns && b->run_first[rj] < from)
		rj++; /* submitted already */
	rnext = rj < b->nruns ? b->run_first[rj] : UINT32_MAX;
	seg[0] = 0;
	pe[0] = from;
	for (uint32_t i = from; i < b->n; i++) {
		const uint32_t first = i;
		uint64_t k = b->ent[i].size & BATCH_KIND, a = b->ent[i].addr, e;

		if (i == rnext) {
			/* a known run of streaming unmaps: one range, its entries unread */
			if (b->run_clear >> rj & 1)
				*nclr += b->run_len[rj]; /* cleared through its kept table */
			i += b->run_len[rj] - 1;
			ni += b->run_len[rj] - 1; /* the last one is counted below */
			k = b->ent[i].size & BATCH_KIND;
			rnext = ++rj < b->nruns ? b->run_first[rj] : UINT32_MAX;
		}
		e = b->ent[i].addr + (b->ent[i].size & ~(uint64_t)BATCH_KIND);
		if (k == BATCH_BOUNCE) {
			nb++;
			continue;
		}
		s += e - a;
		ni += k == BATCH_IOVA;
		if (dg_likely(a == chi) && m) { /* the next slot of a ring: extend */
			chi = e;
			continue;
		}
		if (m)
			hi[m - 1] = chi;
		if (dg_unlikely(a < chi)) { /* a new ascending piece */
			if (ns == BATCH_PIECES)
				goto sort;
			pe[ns] = first;
			seg[ns++] = (uint32_t)m;
		}
		lo[m++] = a;
		chi = e;
	}
	if (m)
		hi[m - 1] = chi;
	if (dg_unlikely(ns > 1)) {
		seg[ns] = (uint32_t)m;
		m = runs_merge(lo, hi, m, seg, ns);
	}
	*sum = s;
	*niova = ni;
	*nlink = b->n - from - nb - ni; /* the rest are two-step unlinks */
	*npe = ns;
	return m;
sort:
	s = 0;
	ni = 0;
	batch_expand(b); /* every entry read */
	for (uint32_t i = from; i < b->n; i++) {
		const uint64_t k = b->ent[i].size & BATCH_KIND;

		if (k == BATCH_BOUNCE)
			continue;
		t[n] = (struct iova_owned){.iova = b->ent[i].addr,
					   .size = b->ent[i].size & ~(uint64_t)BATCH_KIND};
		s += t[n].size;
		ni += k == BATCH_IOVA;
		n++;
	}
	dma_order_frees(t, (uint32_t)n); /* descending: read back to front */
	m = 0;
	for (size_t i = n; i-- > 0;) {
		if (m && t[i].iova == hi[m - 1]) {
			hi[m - 1] += t[i].size;
			continue;
		}
		lo[m] = t[i].iova;
		hi[m] = t[i].iova + t[i].size;
		m++;
	}
	*sum = s;
	*niova = ni;
	*nlink = (uint32_t)n - ni;
	*npe = 0;
	return m;
}

/*
 * Give IOVAs back highest first: a magazine hands them out again last-in first-out, so the
 * next maps get them in ascending order, neighbours after neighbours. Kept in address order
 * like that, a ring's buffers keep neighbouring IOVAs map after map, and their page-table
 * entries share cache lines: the device's walk and the driver's next map and unmap touch a
 * line the other side has just loaded once per eight pages, not once per page. (Given back
 * in the order they were unmapped, the order decays into a random one within seconds: 2% of
 * xdp64's maps were neighbours of the previous one.)
 *
 * A natural merge sort, descending: the list is cut into its maximal monotone runs (nearly
 * always one ascending run - the ring's order - or a few: a lazy chunk that spans a ring's
 * wrap, a batch of rx and tx buffers), ascending runs are reversed in place, and runs are
 * merged pairwise: O(n log r) for r runs, so one or two runs cost a single pass.
 */
void dma_order_frees(struct iova_owned *fr, uint32_t n)
{
	struct iova_owned tmp[DG_DMA_BATCH_MAX];
	uint32_t run[DG_DMA_BATCH_MAX + 1], nr = 0;

	assert(n <= DG_DMA_BATCH_MAX);
	for (uint32_t i = 0; i < n;) {
		uint32_t j = i + 1;

		if (j < n && fr[j].iova > fr[i].iova) {
			while (j < n && fr[j].iova > fr[j - 1].iova)
				j++;
			for (uint32_t a = i, b = j - 1; a < b; a++, b--) {
				struct iova_owned t = fr[a];

				fr[a] = fr[b];
				fr[b] = t;
			}
		} else {
			while (j < n && fr[j].iova < fr[j - 1].iova)
				j++;
		}
		run[nr++] = i;
		i = j;
	}
	run[nr] = n;
	while (nr > 1) {
		uint32_t m = 0;

		for (uint32_t r = 0; r < nr; r += 2) {
			uint32_t lo = run[r], mid = run[r + 1], hi = r + 2 <= nr ? run[r + 2] : n;

			run[m++] = lo;
			if (r + 1 >= nr)
				break; /* odd run out: stays as it is */
			if (fr[mid - 1].iova > fr[mid].iova)
				continue; /* already in order across the seam */
			uint32_t i = lo, j = mid, k = 0;

			while (i < mid && j < hi)
				tmp[k++] = fr[i].iova > fr[j].iova ? fr[i++] : fr[j++];
			while (i < mid)
				tmp[k++] = fr[i++];
			memcpy(&fr[lo], tmp,
			       k * sizeof(*fr)); /* the rest of [mid, hi) is in place */
		}
		run[m] = n;
		nr = m;
	}
}

/*
 * Invalidate the unmaps the batch has not submitted yet (ent[nsub..n)): remove the pages of
 * streaming unmaps - a stream run's through its kept table (b->run_clear), else one
 * page-table call per run of adjacent IOVAs, so a ring's consecutive buffers cost one walk
 * (two-step unlinks cleared theirs already) - and submit the commands
 * (one over the hull when it is at most four times the bytes unmapped, one per run up to
 * BATCH_PSI_RUNS, else one DOMAIN command). No wait: b->seq.
 *
 * Stream runs only (batch_issue_runs, a poll's batch): the commands are known before the
 * clears (a kept table's clear changes no gather), so their ring slots are reserved first,
 * the clears made, and the slots written and committed after (iommu/inval.h): the queue's
 * add then waits for no clear, no close follows (a lone producer's reservation is closed),
 * and the clears drain with the slot behind the poll's next locked instruction - one
 * cross-core transfer of waiting per submit at most, not two in series. The general way
 * (batch_issue_slow) reserves after its clears: a page-table call's clears grow the gather
 * and may free tables (not leaf-only any more), so its commands are known only then.
 */
static int batch_issue_slow(struct dg_dma_batch *b);

/* The stream runs from run @j0 on not submitted yet (unmap_bulk_strict's, b->run_clear)
 * cleared through their kept tables: before the commands, every claim of the batch made. */
static dg_always_inline void batch_clear_runs(struct dg_dma_batch *b, uint32_t j0)
{
	struct dma_space *sp = b->dev->sp;

	for (uint32_t j = j0, rc = b->run_clear; j < b->nruns; j++)
		if ((rc >> j & 1) && b->run_first[j] >= b->nsub) {
			const uint32_t f = b->run_first[j];

			dma_stream_clear(sp, b->ent[f].token, b->ent[f].addr, b->run_len[j]);
		}
}

/* The pieces of the whole batch so far, for its end (after a submit, the pieces of the
 * later unmaps follow those of the earlier ones): @pe[npe] appended when @usable (every new
 * entry an IOVA in them) and there is room, else none known (npieces 0). */
static dg_always_inline void batch_note_pieces(struct dg_dma_batch *b, const uint32_t *pe,
					       uint32_t npe, bool usable)
{
	if (!b->nsub)
		b->npieces = 0;
	if (usable && (!b->nsub || b->npieces) && b->npieces + npe <= BATCH_PIECES) {
		for (uint32_t j = 0; j < npe; j++)
			b->piece[b->npieces + j] = pe[j];
		b->npieces += npe;
	} else {
		b->npieces = 0;
	}
}

/* The commands of @nr runs [lo, hi) spanning [start, end) and @bytes unmapped, into @cmds
 * (returns how many): one RANGE over the hull (with what the gather holds, earlier submits'
 * included) when it is one run or at most four times the bytes, one per run up to
 * BATCH_PSI_RUNS, else one DOMAIN. */
static dg_always_inline size_t batch_cmds(const struct dg_dma_batch *b, const uint64_t *lo,
					  const uint64_t *hi, size_t nr, uint64_t start,
					  uint64_t end, uint64_t bytes,
					  struct dg_inval_cmd cmds[BATCH_PSI_RUNS])
{
	const struct dma_space *sp = b->dev->sp;
	const struct dg_pt_gather *g = &b->gather;
	const unsigned int flags = g->leaf_only ? DG_INVAL_LEAF : 0;
	size_t nc = 1;

	if (g->start != g->end) {
		start = g->start < start ? g->start : start;
		end = g->end > end ? g->end : end;
	}
	if (nr == 1 || end - start <= 4 * bytes) {
		cmds[0] = (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
						.flags = flags,
						.domain = sp->dom_id,
						.iova = start,
						.size = end - start};
	} else if (nr > BATCH_PSI_RUNS) {
		cmds[0] = (struct dg_inval_cmd){
			.type = DG_INVAL_DOMAIN, .flags = flags, .domain = sp->dom_id};
	} else {
		for (nc = 0; nc < nr; nc++)
			cmds[nc] = (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
							 .flags = flags,
							 .domain = sp->dom_id,
							 .iova = lo[nc],
							 .size = hi[nc] - lo[nc]};
	}
	return nc;
}

/* @b's wait covers a submit that ended at @seq: a wait for the later one covers the earlier. */
static dg_always_inline void batch_covers(struct dg_dma_batch *b, uint64_t seq)
{
	if (seq > b->seq)
		b->seq = seq;
}

/* Submit the commands of @nr runs (batch_cmds()) after the clears (the general way: a
 * page-table call's clears change the gather, so the commands are known only after them),
 * the two steps with nothing between. Never fails (dma_inval_reserve's fallbacks): the
 * entries just marked submitted are covered by b->seq, which batch_flush waits for or parks
 * in quarantine. */
static dg_always_inline int batch_submit_cmds(struct dg_dma_batch *b, const uint64_t *lo,
					      const uint64_t *hi, size_t nr, uint64_t start,
					      uint64_t end, uint64_t bytes)
{
	struct dg_inval_cmd cmds[BATCH_PSI_RUNS];
	size_t nc = batch_cmds(b, lo, hi, nr, start, end, bytes, cmds);
	uint64_t seq;

	dma_inval_submit(b->dev, cmds, nc, &seq);
	batch_covers(b, seq);
	return 0;
}

/*
 * The common case of batch_issue(), apart: every entry not submitted yet is in a stream run
 * (b->run_clear: a ring's reaps, up to BATCH_PIECES) - the runs cleared through their kept
 * tables, then one RANGE command over the hull (with the gather's) when it is at most four
 * times their bytes, else one per run (neighbouring runs joined; at most BATCH_PSI_RUNS), as
 * the general way decides; no pass over the entries, no merge. 1: not that case (nothing
 * done), the general way's.
 */
static dg_always_inline int batch_issue_runs(struct dg_dma_batch *b)
{
	struct dma_space *sp = b->dev->sp;
	const uint32_t nsub = b->nsub;
	uint64_t lo[BATCH_PIECES], hi[BATCH_PIECES], start = UINT64_MAX, end = 0;
	uint32_t j0 = b->nruns, covered = 0, pe[BATCH_PIECES], npe = 0, nr = 0;
	struct dg_inval_cmd cmds[BATCH_PSI_RUNS], fb;
	const struct dg_inval_cmd *post;
	struct inval_ticket t;
	uint64_t seq;
	size_t nc;

	static_assert(BATCH_PIECES <= BATCH_PSI_RUNS, "a command per run");
	for (uint32_t j = b->nruns; j-- > 0 && b->run_first[j] >= nsub;)
		j0 = j; /* the runs not submitted yet: the last ones */
	for (uint32_t j = j0; j < b->nruns; j++) {
		const uint32_t f = b->run_first[j];
		const uint64_t a = b->ent[f].addr;
		/* its last entry's end (a run's entries are one granule each, ascending) */
		const uint64_t e = b->ent[f + b->run_len[j] - 1].addr + sp->granule;

		if (!(b->run_clear >> j & 1))
			return 1;
		covered += b->run_len[j];
		start = a < start ? a : start;
		end = e > end ? e : end;
		if (nr && a == hi[nr - 1]) { /* the next slots of the same ring */
			hi[nr - 1] = e;
			continue;
		}
		if (!nr || a < hi[nr - 1])
			pe[npe++] = f; /* a new ascending piece (as batch_runs() finds them) */
		lo[nr] = a;
		hi[nr++] = e;
	}
	if (covered != b->n - nsub || !covered)
		return 1; /* other entries too (or none of this kind) */
	/* The commands first (the kept tables' clears leave the gather as it is), their slots
	 * reserved before the clears: one store-buffer drain per submit (iommu/inval.h). */
	nc = batch_cmds(b, lo, hi, nr, start, end, (uint64_t)covered << sp->gshift, cmds);
	post = dma_inval_reserve(b->dev->dma->mmu, cmds, &nc, &t, &fb);
	batch_clear_runs(b, j0);
	batch_note_pieces(b, pe, npe, true);
	b->nsub = b->n;
	dma_inval_post(b->dev, post, nc, &t, &seq);
	batch_covers(b, seq);
	return 0;
}

static dg_noinline int batch_issue_new(struct dg_dma_batch *b)
{
	if (dg_likely(b->run_clear) && !batch_issue_runs(b))
		return 0;
	return batch_issue_slow(b);
}

/* Inline: a batch end after its submit (a poll's) has nothing to issue - no call for it. */
static dg_always_inline int batch_issue(struct dg_dma_batch *b)
{
	if (b->nsub == b->n)
		return 0;
	return batch_issue_new(b);
}

static dg_noinline int batch_issue_slow(struct dg_dma_batch *b)
{
	struct dma_space *sp = b->dev->sp;
	uint64_t lo[DG_DMA_BATCH_MAX], hi[DG_DMA_BATCH_MAX], sum, unmapped;
	struct dg_pt_gather *g = &b->gather;
	uint32_t niova, nlink, pe[BATCH_PIECES], npe, nclr = 0;
	size_t nr;

	nr = batch_runs(b, b->nsub, lo, hi, &sum, &niova, &nlink, pe, &npe, &nclr);
	batch_clear_runs(b, 0);
	batch_note_pieces(b, pe, npe, niova == b->n - b->nsub && npe);
	if (!nr) {
		b->nsub = b->n;
		return 0; /* bounce slots only */
	}
	if (niova && !nlink && nclr == niova) {
		/* streaming unmaps only, every one in a stream run cleared above */
	} else if (niova && !nlink) { /* streaming unmaps only: a page-table call per run (an
				       entry cleared already is skipped) */
		for (size_t i = 0; i < nr; i++)
			pt_unmap_granules(sp->pt, lo[i], (hi[i] - lo[i]) >> sp->gshift, g);
	} else if (niova) { /* mixed: never unmap over a two-step range (its tables are kept) */
		batch_expand(b);
		for (uint32_t i = b->nsub; i < b->n; i++) {
			const uint64_t a = b->ent[i].addr;
			const uint64_t sz = b->ent[i].size & ~(uint64_t)BATCH_KIND;

			if ((b->ent[i].size & BATCH_KIND) != BATCH_IOVA)
				continue;
			if (sz == sp->granule)
				pt_unmap_granule(sp->pt, a, g);
			else
				dg_pt_unmap(sp->pt, a, sz, g, &unmapped);
		}
	}
	b->nsub = b->n;
	return batch_submit_cmds(b, lo, hi, nr, lo[0], hi[nr - 1], sum);
}

/*
 * Give back one streaming unmap's IOVA at the batch end, its invalidation completed: a
 * stream granule counts towards its chunk's retirement (consecutive entries of one chunk
 * are added up in *stok / *sn and retired in one atomic add when the chunk changes, and by
 * give_end(); skipped when @stok is NULL), anything else goes to this thread's magazine.
 */
static dg_always_inline void give_one(struct dma_space *sp, struct iova_tcache **tc, uint64_t a,
				      uint64_t sz, uint64_t tok, uint64_t *stok, uint64_t *sn)
{
	/* @stok NULL: stream granules were retired already (batch_flush's first pass) */
	if (dma_token_stream(tok)) {
		if (!stok)
			return; /* retired already (batch_flush's first pass) */
		if (dg_unlikely(tok != *stok)) {
			if (*sn)
				dma_stream_retire(sp, *stok, *sn);
			*stok = tok;
			*sn = 0;
		}
		*sn += sz >> sp->gshift;
		return;
	}
	iova_free_owned_one(sp->iova, tc, a, sz, tok);
}

static dg_always_inline void give_end(struct dma_space *sp, struct iova_tcache *tc, uint64_t stok,
				      uint64_t sn)
{
	iova_free_owned_end(tc);
	if (sn)
		dma_stream_retire(sp, stok, sn);
}

/*
 * The end of a batch (or of a full ent[]): invalidate what is not yet, wait once for all of
 * it, then give back table pages, IOVAs (one allocator call, this thread's cache) and shadow
 * slots, and make two-step granules linkable again; on a failed wait (-ETIMEDOUT: the submit
 * cannot fail, dma_inval_submit) park the IOVAs, the two-step granules (still pending: no link
 * there, the range cannot be freed) and the tables in quarantine, released by the first
 * housekeeping pass that sees the wait complete (dma_quarantine_retry).
 */
static int batch_flush_waited(struct dg_dma_batch *b, int waited);

static int batch_flush(struct dg_dma_batch *b)
{
	return batch_flush_waited(b, INT_MIN);
}

/* An empty batch: no entries, runs, pieces, commands or gathered range (what a flush leaves
 * and a begin starts from). */
static dg_always_inline void batch_reset(struct dg_dma_batch *b)
{
	b->n = 0;
	b->nsub = 0;
	b->seq = 0;
	b->npieces = 0;
	b->nruns = 0;
	b->run_clear = 0;
	dg_pt_gather_init(&b->gather);
}

/* batch_flush(), @waited its wait's result when done already (batch_end_runs: failed), or
 * INT_MIN: not waited. */
static dg_noinline int batch_flush_waited(struct dg_dma_batch *b, int waited)
{
	struct dg_dma_dev *dd = b->dev;
	struct dma_space *sp = dd->sp;
	uint64_t qi[DG_DMA_BATCH_MAX], qs[DG_DMA_BATCH_MAX], qt[DG_DMA_BATCH_MAX];
	struct iova_owned fr[DG_DMA_BATCH_MAX];
	const uint32_t nsub = b->nsub;
	uint32_t nf = 0, nb = 0;
	uint64_t prev = UINT64_MAX;
	bool desc = true;
	int r = 0;

	if (!b->n)
		return 0;
	if (waited != INT_MIN) {
		r = waited;
		goto waited;
	}
	if (!nsub) {
		/* bounce slots only (nothing submitted, so nothing to wait for): no invalidation,
		 * no table page; give the slots back. A batch of another policy stops at once. */
		uint32_t i = 0;

		while (i < b->n && (b->ent[i].size & BATCH_KIND) == BATCH_BOUNCE)
			i++;
		if (i == b->n) {
			for (i = 0; i < b->n; i++)
				dma_bounce_free(dd, b->ent[i].addr);
			goto done;
		}
	}
	r = batch_issue(b);
	if (!r && b->seq)
		r = dma_inval_wait(dd, b->seq);
waited:
	if (!r && b->npieces) {
		/* streaming unmaps only, in a few ascending pieces (a ring's reaps): give the
		 * IOVAs back highest first straight from the entries, no copy and no sort - the
		 * pieces merged from their ends (what dma_order_frees() would give) */
		struct iova_tcache *tc = NULL;
		uint64_t stok = 0, sn = 0; /* stream granules of one chunk not retired yet */
		const uint32_t *seg = b->piece, ns = b->npieces;
		uint32_t end[BATCH_PIECES]; /* piece j's entries not given back: [seg[j], end[j]) */

		uint32_t nother = 0;

		if (!gather_empty(&b->gather))
			dg_pt_gather_release(sp->pt, &b->gather);
		/* stream granules first, in entry order (their chunks keep no order): one add per
		 * run of one chunk; the allocator's ranges after, in the order below */
		for (uint32_t i = 0, rj = 0; i < b->n; i++) {
			const uint64_t tok = b->ent[i].token;
			uint32_t k = 1;

			if (dg_unlikely(!dma_token_stream(tok))) {
				nother++;
				continue;
			}
			while (rj < b->nruns && b->run_first[rj] < i)
				rj++;
			if (rj < b->nruns && b->run_first[rj] == i && (b->run_clear >> rj & 1)) {
				/* a run in one chunk (unmap_bulk_strict checked): its entries unread */
				k = b->run_len[rj];
				i += k - 1;
			}
			if (dg_unlikely(tok != stok)) {
				if (sn)
					dma_stream_retire(sp, stok, sn);
				stok = tok;
				sn = 0;
			}
			sn += k; /* a stream granule is one granule */
		}
		if (sn)
			dma_stream_retire(sp, stok, sn);
		stok = sn = 0;
		if (dg_likely(!nother))
			goto done;
		batch_expand(b); /* every entry read below */
		if (ns == 1) {	 /* one piece (a ring's reap): back to front */
			for (uint32_t i = b->n; i-- > 0;)
				give_one(sp, &tc, b->ent[i].addr,
					 b->ent[i].size & ~(uint64_t)BATCH_KIND, b->ent[i].token,
					 NULL, NULL);
			give_end(sp, tc, stok, sn);
			goto done;
		}
		/* several pieces: the piece whose next entry is highest gives back its entries
		 * down to the highest next entry of the others (a whole run at a time, as pieces
		 * rarely interleave), then the next is chosen */
		for (unsigned int j = 0; j < ns; j++)
			end[j] = j + 1 < ns ? seg[j + 1] : b->n;
		for (;;) {
			unsigned int top = ns;
			uint64_t ta = 0, bar = 0;
			uint32_t i;

			for (unsigned int j = 0; j < ns; j++) {
				uint64_t a;

				if (end[j] == seg[j])
					continue;
				a = b->ent[end[j] - 1].addr;
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
			do {
				i = --end[top];
				give_one(sp, &tc, b->ent[i].addr,
					 b->ent[i].size & ~(uint64_t)BATCH_KIND, b->ent[i].token,
					 NULL, NULL);
			} while (end[top] > seg[top] && b->ent[end[top] - 1].addr > bar);
		}
		give_end(sp, tc, stok, sn);
		goto done;
	}
	/* back to front: a batch unmapped in ascending order (a ring's) lands in fr[] in the
	 * descending order dma_order_frees() would make - checked on the way, no sort then */
	batch_expand(b); /* every entry read */
	for (uint32_t i = b->n; i-- > 0;) {
		const uint64_t k = b->ent[i].size & BATCH_KIND, a = b->ent[i].addr;

		if (dg_likely(k == BATCH_IOVA)) {
			fr[nf++] =
				(struct iova_owned){.iova = a,
						    .size = b->ent[i].size & ~(uint64_t)BATCH_KIND,
						    .token = b->ent[i].token};
			desc &= a < prev;
			prev = a;
		} else if (k == BATCH_LINK) {
			if (dg_unlikely(r)) /* not confirmed: kept pending, parked below */
				fr[nf++] = (struct iova_owned){
					.iova = a,
					.size = b->ent[i].size & ~(uint64_t)BATCH_KIND,
					.token = b->ent[i].token | DMA_TOKEN_LINK};
			else
				dma_links_settle((struct dma_links *)(uintptr_t)b->ent[i].token, a,
						 b->ent[i].size & ~(uint64_t)BATCH_KIND);
		} else {
			nb++;
		}
	}
	if (nb < b->n) {
		if (r) {
			for (uint32_t i = 0; i < nf; i++) { /* in the batch's order */
				qi[i] = fr[nf - 1 - i].iova;
				qs[i] = fr[nf - 1 - i].size;
				qt[i] = fr[nf - 1 - i].token;
			}
			dma_quarantine_add_tok(dd, sp, b->seq, &b->gather, qi, qs, qt, nf, NULL);
			nf = 0; /* parked: given back once a completion confirms */
		} else if (!gather_empty(&b->gather)) {
			dg_pt_gather_release(sp->pt, &b->gather);
		}
	}
	if (nf) { /* stream granules to their chunks, the rest to the allocator */
		uint64_t stok = 0, sn = 0;
		uint32_t m = 0;

		for (uint32_t i = 0; i < nf; i++) {
			if (dma_token_stream(fr[i].token))
				give_one(sp, NULL, fr[i].iova, fr[i].size, fr[i].token, &stok, &sn);
			else
				fr[m++] = fr[i];
		}
		if (sn)
			dma_stream_retire(sp, stok, sn);
		nf = m;
	}
	if (nf) {
		if (!desc)
			dma_order_frees(fr, nf);
		iova_free_owned(sp->iova, fr, nf);
	}
	if (nb) /* bounce slots: no translation of theirs changed */
		for (uint32_t i = 0; i < b->n; i++)
			if ((b->ent[i].size & BATCH_KIND) == BATCH_BOUNCE)
				dma_bounce_free(dd, b->ent[i].addr);
done:
	batch_reset(b);
	b->flushes++;
	return r;
}

/* Make room for one entry. */
static void batch_reserve(struct dg_dma_batch *b)
{
	if (dg_unlikely(b->n == DG_DMA_BATCH_MAX)) {
		int r = batch_flush(b);

		if (r && !b->status)
			b->status = r;
	}
}

void dma_batch_room(struct dg_dma_batch *b, uint32_t n)
{
	if (dg_unlikely(b->n + n > DG_DMA_BATCH_MAX)) {
		int r = batch_flush(b);

		if (r && !b->status)
			b->status = r;
	}
}

void dma_batch_add_link(struct dg_dma_batch *b, uint64_t iova, uint64_t size, struct dma_links *l)
{
	batch_reserve(b);
	dma_batch_put(b, iova, size | BATCH_LINK, (uint64_t)(uintptr_t)l);
}

void dg_dma_batch_begin(struct dg_dma_dev *dd, struct dg_dma_batch *b)
{
	if (!b)
		return;
	b->dev = dd;
	if (dd) /* this thread's count: no locked add on a strict poll (dma_open_batches()) */
		dma_open_batches_add(dd, dma_tstats(dd), 1);
	batch_reset(b);
	b->flushes = 0;
	b->status = 0;
}

int dg_dma_batch_submit(struct dg_dma_batch *b)
{
	int r;

	if (!b || !b->dev)
		return -EINVAL;
	r = batch_issue(b);
	if (r && !b->status)
		b->status = r;
	return r ? dma_err(b->dev, r) : 0;
}

bool dg_dma_batch_done(struct dg_dma_batch *b)
{
	if (!b || !b->dev || b->nsub != b->n)
		return false;
	return !b->seq || dg_inval_done(b->dev->dma->mmu, b->seq);
}

/*
 * Strict retirement of @n claimed ranges (@dma: their DMA addresses, @size / @token: their
 * records') in a batch of their own: one invalidation, one wait, however many (lazy's way out
 * when its queue's flush timed out - one wait of wait_timeout_ns per range would block a
 * 256-buffer call for minutes). -ETIMEDOUT: all parked in quarantine. Not counted as an error
 * here (the caller does).
 */
int dma_strict_retire_many(struct dg_dma_dev *dd, const uint64_t *dma, const uint64_t *size,
			   const uint64_t *token, unsigned int n)
{
	struct dma_space *sp = dd->sp;
	struct dma_tstats *t;
	struct dg_dma_batch b;
	int r;

	dg_dma_batch_begin(dd, &b);
	for (unsigned int i = 0; i < n; i++) {
		batch_reserve(&b);
		dma_batch_put(&b, dma[i] & ~sp->gmask, size[i] | BATCH_IOVA, token[i]);
	}
	r = batch_flush(&b);
	if (!r)
		r = b.status;
	t = dma_tstats(dd);
	ctr_add(t, CTR_BATCHES, 1);
	dma_open_batches_add(dd, t, (uint64_t)-1);
	return r;
}

/*
 * Is the batch stream runs only, each cleared through its kept table (run_clear: in one
 * chunk, so every entry of a run has its first entry's token), end to end in entry order,
 * all submitted (a poll's reap: one run, or fwd64's rx and tx runs)? Reads no entry.
 */
static dg_always_inline bool batch_runs_only(const struct dg_dma_batch *b)
{
	const uint32_t nr = b->nruns;
	uint32_t at = 0;

	static_assert(BATCH_PIECES < 32, "run_clear: one bit a run");
	if (b->nsub != b->n || !nr || b->run_clear != (1u << nr) - 1)
		return false;
	for (uint32_t j = 0; j < nr; j++) {
		if (b->run_first[j] != at)
			return false;
		at += b->run_len[j];
	}
	return at == b->n;
}

/*
 * The end of a batch of stream runs only (batch_runs_only), in line: wait for its one
 * submitted invalidation, then retire each run's granules to its chunk (one atomic add per
 * run of a chunk) - what batch_flush()'s pieces way does with them, without its call, its
 * bounce-only and issue checks or its walk of the entries. 1: the wait failed (r = its
 * error; nothing given back), batch_flush_waited() parks it all.
 */
static dg_always_inline int batch_end_runs(struct dg_dma_batch *b, int *r)
{
	struct dma_space *sp = b->dev->sp;
	uint64_t stok = 0, sn = 0;

	*r = b->seq ? dma_inval_wait(b->dev, b->seq) : 0;
	if (dg_unlikely(*r))
		return 1;
	if (!gather_empty(&b->gather))
		dg_pt_gather_release(sp->pt, &b->gather);
	for (uint32_t j = 0; j < b->nruns; j++) {
		const uint64_t tok = b->ent[b->run_first[j]].token;

		if (tok != stok) {
			if (sn)
				dma_stream_retire(sp, stok, sn);
			stok = tok;
			sn = 0;
		}
		sn += b->run_len[j]; /* a stream granule is one granule */
	}
	dma_stream_retire(sp, stok, sn);
	batch_reset(b);
	b->flushes++;
	return 0;
}

/* dg_dma_batch_end() of an open batch, its error not counted (the caller counts it, or not:
 * dma_batch_end_undo). */
static dg_always_inline int batch_end(struct dg_dma_batch *b)
{
	struct dg_dma_dev *dd = b->dev;
	struct dma_tstats *t;
	int r;

	if (dg_likely(batch_runs_only(b))) {
		if (batch_end_runs(b, &r))
			r = batch_flush_waited(b, r);
	} else {
		r = batch_flush(b);
	}
	if (!r)
		r = b->status;
	b->status = 0;
	t = dma_tstats(dd);
	ctr_add(t, CTR_BATCHES, 1);
	/* this thread's count, -1 even if another thread began the batch (dma_open_batches()) */
	dma_open_batches_add(dd, t, (uint64_t)-1);
	b->dev = NULL;
	return r;
}

int dg_dma_batch_end(struct dg_dma_batch *b)
{
	struct dg_dma_dev *dd;
	int r;

	if (!b || !b->dev)
		return -EINVAL;
	dd = b->dev;
	r = batch_end(b);
	return r ? dma_err(dd, r) : 0;
}

int dma_batch_end_undo(struct dg_dma_batch *b)
{
	return batch_end(b);
}

/* ---- translated map / unmap ---------------------------------------------------------------- */

/* Position of a segment of @span bytes at cursor @cur: padded to the next boundary when it
 * would cross one (Linux iommu_dma_map_sg). */
static inline uint64_t sg_place(uint64_t cur, uint64_t span, uint64_t bmask)
{
	uint64_t pad = (bmask - cur + 1) & bmask;

	return pad && pad < span ? cur + pad : cur;
}

bool dma_sg_is_pages(const struct dg_dma_dev *dd, const struct dg_dma_sg *sg, unsigned int nents,
		     uint64_t g)
{
	if (nents > DMA_PAGE_LIST_MAX || dd->boundary < g - 1)
		return false;
	for (unsigned int i = 0; i + 1 < nents; i++)
		if (((uintptr_t)sg[i].addr & (g - 1)) || sg[i].len != g)
			return false;
	return !((uintptr_t)sg[nents - 1].addr & (g - 1)) && sg[nents - 1].len <= g;
}

int dma_sg_layout(struct dg_dma_dev *dd, const struct dg_dma_sg *sg, unsigned int nents, uint64_t g,
		  uint64_t *total)
{
	uint64_t cur = 0;

	for (unsigned int i = 0; i < nents; i++) {
		uint64_t off = (uintptr_t)sg[i].addr & (g - 1);
		uint64_t span = dg_align_up(off + sg[i].len, g);

		if (dd->boundary != UINT64_MAX && span > dd->boundary + 1)
			return -EINVAL; /* would cross the boundary wherever it goes */
		cur = sg_place(cur, span, dd->boundary) + span;
	}
	*total = cur;
	return 0;
}

unsigned int dma_sg_segments(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			     uint64_t iova, uint64_t g)
{
	uint64_t cur = 0, seg_start = 0, seg_len = 0, bm = dd->boundary;
	unsigned int nr = 0;
	bool mergeable = false;

	if (nents > 1 && dma_sg_is_pages(dd, sg, nents, g)) {
		/* a page list: entry i at i * g, each one mergeable with the one before */
		for (unsigned int i = 0; i < nents; i++) {
			uint64_t len = sg[i].len;

			if (nr && seg_len + len <= dd->max_seg &&
			    (seg_start & ~bm) == ((seg_start + seg_len + len - 1) & ~bm)) {
				seg_len += len;
				continue;
			}
			if (nr)
				sg[nr - 1].dma_len = seg_len;
			seg_start = iova + (uint64_t)i * g;
			seg_len = len;
			sg[nr++].dma_addr = seg_start;
		}
		goto out;
	}
	for (unsigned int i = 0; i < nents; i++) {
		uint64_t off = (uintptr_t)sg[i].addr & (g - 1), len = sg[i].len;
		uint64_t span = dg_align_up(off + len, g);
		uint64_t pos = nents == 1 ? 0 : sg_place(cur, span, bm);

		if (nr && mergeable && !off && pos == cur && seg_len + len <= dd->max_seg &&
		    (seg_start & ~bm) == ((seg_start + seg_len + len - 1) & ~bm)) {
			seg_len += len;
		} else {
			if (nr)
				sg[nr - 1].dma_len = seg_len;
			seg_start = iova + pos + off;
			seg_len = len;
			sg[nr].dma_addr = seg_start;
			nr++;
		}
		mergeable = off + len == span; /* ends on a granule boundary */
		cur = pos + span;
	}
out:
	sg[nr - 1].dma_len = seg_len;
	for (unsigned int i = nr; i < nents; i++) {
		sg[i].dma_addr = 0;
		sg[i].dma_len = 0;
	}
	return nr;
}

/*
 * A translated map failed after its IOVA was allocated, with what it had mapped already
 * removed into @g: invalidate that (a curious device may have cached it), then give the IOVA
 * back - or park both in quarantine when the wait times out. Returns @r.
 */
static dg_noinline int xl_map_undo(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t iova,
				   uint64_t total, struct dg_pt_gather *g, int r)
{
	if (!gather_empty(g)) {
		struct dg_inval_cmd c;
		uint64_t seq = 0;

		gather_cmd(sp, g, &c);
		if (dma_inval(dd, &c, 1, &seq)) {
			dma_quarantine_add(dd, sp, seq, g, &iova, &total, 1, NULL);
			return r;
		}
		dg_pt_gather_release(sp->pt, g);
	}
	dg_iova_free(sp->iova, iova, total);
	return r;
}

/*
 * Publish a mapping's record (the claim of its unmap reads it) and count its sub-page bytes
 * in @t (this thread's block of the device): the last step of dma_xl_map() and xl_map_one().
 */
static dg_always_inline void rec_publish(struct dma_tstats *t, struct dma_rec *rec, uint64_t len,
					 uint64_t total, uint64_t token, uint64_t w0, uint64_t sub)
{
	dma_rec_write(rec, len, total, token, w0);
	ctr_add(t, CTR_SUBPAGE, sub);
	ctr_max(&t->subpage_max, sub);
}

int dma_xl_map(struct dg_dma_dev *dd, struct dma_space *sp, const struct dg_dma_sg *sg,
	       unsigned int nents, enum dg_dma_dir dir, enum dma_kind kind, uint64_t *iova_out,
	       uint64_t *dma_out)
{
	const uint64_t g = sp->granule, gm = sp->gmask;
	const unsigned int prot = dma_dir_prot(dir);
	uint64_t iova, total, cur = 0, len = 0, sub = 0, unmapped, token;
	struct dg_pt_gather gth;
	struct dma_rec *rec;
	unsigned int i, nents_left = nents;
	const bool pages = nents > 1 && !dd->reference && dma_sg_is_pages(dd, sg, nents, g);
	int r;

	if (nents == 1) {
		total = dg_align_up(((uintptr_t)sg[0].addr & gm) + sg[0].len, g);
	} else if (pages) {
		total = (uint64_t)nents * g; /* no padding: see dma_sg_is_pages() */
	} else {
		r = dma_sg_layout(dd, sg, nents, g, &total);
		if (r)
			return r;
	}
	r = dma_fail(dd, DG_DMA_FAIL_IOVA);
	if (dg_unlikely(r))
		return r;
	r = iova_alloc_owned(sp->iova, total, sp->limit, &iova, &token);
	if (dg_unlikely(r == -ENOSPC) && dd->lazy && !dma_lazy_drain(dd, dd->lazy)) {
		/* lazy: IOVAs waiting in the flush queues are free space once their flush
		   completes: flush them all (their stream granules may complete chunks: spare
		   chunks go back too) and try once more before saying -ENOSPC */
		dma_stream_drain(sp, dma_tstats(dd));
		r = iova_alloc_owned(sp->iova, total, sp->limit, &iova, &token);
	} else if (dg_unlikely(r == -ENOSPC) && !dd->lazy && dma_stream_drain(sp, dma_tstats(dd)))
		/* strict: spare stream chunks are free space too */
		r = iova_alloc_owned(sp->iova, total, sp->limit, &iova, &token);
	if (dg_unlikely(r))
		return r;
	rec = dma_rec_in(&sp->rec, iova, (iova - sp->first) >> sp->gshift, true);
	if (dg_unlikely(!rec)) {
		r = -ENOMEM;
		goto fail_iova;
	}
	r = dma_fail(dd, DG_DMA_FAIL_PT_MAP);
	if (dg_unlikely(r))
		goto fail_iova;
	pt_gather_init(&gth); /* dg_pt_gather_init() inline */
	if (pages) {
		/* a page list: one hint lookup per last-level table, one store per page */
		uint64_t phys[DMA_PAGE_LIST_MAX];
		unsigned int done;

		for (i = 0; i < nents; i++) {
			phys[i] = (uintptr_t)sg[i].addr;
			len += sg[i].len;
		}
		r = pt_map_granules(sp->pt, iova, phys, nents, prot, &gth, &done);
		if (dg_unlikely(r)) {
			cur = (uint64_t)done * g;
			goto fail_map;
		}
		sub = total - len;
		nents_left = 0;
	}
	for (i = 0; i < nents_left; i++) {
		uint64_t off = (uintptr_t)sg[i].addr & gm;
		uint64_t span = dg_align_up(off + sg[i].len, g);
		uint64_t pos = nents == 1 ? 0 : sg_place(cur, span, dd->boundary);

		/* The Linux-like reference keeps the generic page-table path it models. */
		r = span == g && !dd->reference ?
			    pt_map_granule(sp->pt, iova + pos, (uintptr_t)sg[i].addr - off, prot,
					   &gth) :
			    dg_pt_map(sp->pt, iova + pos, (uintptr_t)sg[i].addr - off, span, prot,
				      &gth);
		if (dg_unlikely(r))
			goto fail_map;
		cur = pos + span;
		len += sg[i].len;
		sub += span - sg[i].len;
	}
	if (dg_unlikely(!gather_empty(&gth)))
		dma_flush_gather(dd, sp, &gth); /* tables replaced by larger leaves */
	rec_publish(dma_tstats(dd), rec, len, total, token,
		    rec_w0(kind, dir, kind == KIND_SG ? nents : 0, (uintptr_t)sg[0].addr & gm),
		    sub);
	*iova_out = iova;
	*dma_out = iova + ((uintptr_t)sg[0].addr & gm);
	return 0;

fail_map:
	/* Undo the segments already mapped; a curious device may have cached them. */
	if (cur)
		dg_pt_unmap(sp->pt, iova, cur, &gth, &unmapped);
	return xl_map_undo(dd, sp, iova, total, &gth, r);
fail_iova:
	dg_iova_free(sp->iova, iova, total);
	return r;
}

/*
 * dma_xl_map() of one buffer, the streaming single and page maps of strict and lazy: their
 * one-granule buffers from this thread's stream (stream.c), else the same steps as
 * dma_xl_map() without the list layout, one granule through the page table's hint; @t is this
 * thread's counter block of the device (map_common looks it up once per call). An installed
 * failure hook or a failed allocation takes dma_xl_map(), which handles them.
 */
static dg_always_inline int xl_map_one(struct dg_dma_dev *dd, struct dma_space *sp, void *buf,
				       size_t len, enum dg_dma_dir dir, enum dma_kind kind,
				       uint64_t *dma_out, struct dma_tstats *t)
{
	const uint64_t gm = sp->gmask, off = (uintptr_t)buf & gm;
	const uint64_t total = (off + len + gm) & ~gm, pa = (uintptr_t)buf - off;
	uint64_t iova, token;
	struct dg_pt_gather gth;
	struct dma_rec *rec;
	int r;

	/* Acquire pairs with the release store in dg_dma_set_fail_hook() (as in dma_fail). */
	const bool hook = atomic_load_explicit(&dd->dma->fail, memory_order_acquire) != NULL;

	/* strict or lazy, one granule: this thread's stream (stream.c), as a bulk call of one */
	if (total == sp->granule && !dd->reference && !hook &&
	    !dma_stream_map_one(sp, t, (uintptr_t)buf, len, dir, kind, dma_out)) {
		ctr_add(t, CTR_SUBPAGE, total - len);
		ctr_max(&t->subpage_max, total - len);
		return 0;
	}
	if (dg_unlikely(hook) ||
	    dg_unlikely(iova_alloc_owned(sp->iova, total, sp->limit, &iova, &token))) {
		struct dg_dma_sg s = {.addr = buf, .len = len};

		return dma_xl_map(dd, sp, &s, 1, dir, kind, &iova, dma_out);
	}
	/* the allocator hands out IOVAs of [first, last] only: no range check */
	rec = dma_rec_in(&sp->rec, iova, (iova - sp->first) >> sp->gshift, true);
	if (dg_unlikely(!rec)) {
		dg_iova_free(sp->iova, iova, total);
		return -ENOMEM;
	}
	pt_gather_init(&gth); /* dg_pt_gather_init() inline */
	/* The Linux-like reference keeps the generic page-table path it models. */
	if (total == sp->granule && !dd->reference)
		r = pt_map_granule(sp->pt, iova, pa, dma_dir_prot(dir), &gth);
	else
		r = dg_pt_map(sp->pt, iova, pa, total, dma_dir_prot(dir), &gth);
	if (dg_unlikely(r))
		return xl_map_undo(dd, sp, iova, total, &gth, r);
	if (dg_unlikely(!gather_empty(&gth)))
		dma_flush_gather(dd, sp, &gth); /* tables replaced by larger leaves */
	rec_publish(t, rec, len, total, token, rec_w0(kind, dir, 0, off), total - len);
	*dma_out = iova + off;
	return 0;
}

/* Why a claim failed, from the record's w0 as it was read: never mapped (or not at this
 * offset) is -ENOENT, mapped with another length, direction, kind or list is -EINVAL. */
static inline int xl_claim_err(uint64_t w0, uint64_t off)
{
	return !(w0 & REC_VALID) || (w0 & 0xffffffffu) != off ? -ENOENT : -EINVAL;
}

/*
 * Claim the record of the mapping at @dma: check it was mapped at this offset with this
 * length, direction, kind and list length (@nents, SG only), then take it - with one CAS of
 * w0, or for a bulk call's stream mapping (REC_STREAM) one atomic AND of its live bit - so of
 * two racing unmaps exactly one wins; nothing changes on a failure. The fast way is one
 * compare of w0 against the word the map wrote (rec_w0() of the arguments, the stream bit
 * aside) and one of w1; xl_claim_err() sorts out a failure.
 */
/* The record of the live mapping at @dma whose word is @want (with or without REC_STREAM)
 * and length @len: 0 with *recp, *gp (its granule) and *w0p (the word as read), else why not
 * (nothing changed). */
static dg_always_inline int xl_check(struct dma_space *sp, uint64_t dma, uint64_t len,
				     uint64_t want, struct dma_rec **recp, uint64_t *gp,
				     uint64_t *w0p)
{
	const uint64_t d = dma - sp->first;
	struct dma_rec *rec;
	uint64_t w0;

	if (dg_unlikely(d > sp->last - sp->first))
		return -ENOENT;
	rec = dma_rec_in(&sp->rec, dma, d >> sp->gshift, false);
	if (dg_unlikely(!rec))
		return -ENOENT;
	/* Acquire pairs with the release store of w0 in dma_rec_write(): w1..w3 are visible. */
	w0 = atomic_load_explicit(&rec->w0, memory_order_acquire);
	if (dg_unlikely((w0 & ~REC_STREAM) != want ||
			atomic_load_explicit(&rec->w1, memory_order_relaxed) != len))
		return xl_claim_err(w0, dma & sp->gmask);
	*recp = rec;
	*gp = d >> sp->gshift;
	*w0p = w0;
	return 0;
}

/*
 * Take the stream mapping whose record @rec (granule @g) read @w0 with length @len: clear its
 * live bit; then, the mapping ours (nobody else can claim it, and its granule is not reissued
 * before we retire it), check its face again - the first read may have been of an earlier
 * mapping of the granule - and clear w0. 0, or -ENOENT (lost) / the face's error with the bit
 * given back.
 */
static dg_always_inline int claim_live(struct dma_rec *rec, uint64_t g, uint64_t w0, uint64_t len)
{
	_Atomic uint64_t *lw = dma_rec_live(rec, g);
	const uint64_t bit = 1ull << (g & 63);
	uint64_t now;

	/* Acquire pairs with the release OR of live_set() (stream.c) or of a give-back: the
	 * mapping's entry and record are visible. */
	if (dg_unlikely(!(atomic_fetch_and_explicit(lw, ~bit, memory_order_acquire) & bit)))
		return -ENOENT; /* lost to a racing unmap, or not live */
	now = atomic_load_explicit(&rec->w0, memory_order_relaxed);
	if (dg_unlikely(now != w0 || atomic_load_explicit(&rec->w1, memory_order_relaxed) != len)) {
		/* Release: as live_set()'s (the record was not touched). */
		atomic_fetch_or_explicit(lw, bit, memory_order_release);
		return now != w0 ? xl_claim_err(now, w0 & 0xffffffffu) : -EINVAL;
	}
	/* Relaxed: the claim is the bit's; w0 cleared only for dumps, checks and error codes. */
	atomic_store_explicit(&rec->w0, 0, memory_order_relaxed);
	return 0;
}

static dg_always_inline int xl_claim(struct dma_space *sp, uint64_t dma, uint64_t len,
				     enum dg_dma_dir dir, enum dma_kind kind, uint32_t nents,
				     uint64_t *iova, uint64_t *iova_size, uint64_t *token)
{
	const uint64_t off = dma & sp->gmask;
	const uint64_t want = rec_w0(kind, dir, kind == KIND_SG ? nents : 0, off);
	struct dma_rec *rec;
	uint64_t w0, g;
	int r = xl_check(sp, dma, len, want, &rec, &g, &w0);

	if (dg_unlikely(r))
		return r;
	if (w0 & REC_STREAM) {
		r = claim_live(rec, g, w0, len);
		if (dg_unlikely(r))
			return r;
	} else if (dg_unlikely(!atomic_compare_exchange_strong_explicit(
			   &rec->w0, &w0, 0, memory_order_acquire, memory_order_relaxed))) {
		/* Of two racing unmaps one wins. Acquire: the reads of w2 and w3 below stay
		 * after it (they are the claimed mapping's: nobody writes them again before its
		 * IOVA is freed). */
		return -ENOENT;
	}
	*iova = dma - off;
	*iova_size = atomic_load_explicit(&rec->w2, memory_order_relaxed);
	*token = atomic_load_explicit(&rec->w3, memory_order_relaxed);
	return 0;
}

int dma_xl_claim(struct dma_space *sp, uint64_t dma, uint64_t len, enum dg_dma_dir dir,
		 enum dma_kind kind, uint32_t nents, uint64_t *iova, uint64_t *iova_size,
		 uint64_t *token)
{
	return xl_claim(sp, dma, len, dir, kind, nents, iova, iova_size, token);
}

int dma_strict_retire(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t iova, uint64_t size,
		      bool free_iova, uint64_t token, struct dg_dma_batch *b, void *mem)
{
	struct dg_pt_gather g;
	struct dg_inval_cmd c;
	uint64_t unmapped, seq = 0;
	int r;

	if (b && free_iova && !dd->reference) { /* the pages go at the batch's end */
		batch_reserve(b);
		dma_batch_put(b, iova, size | BATCH_IOVA, token);
		return 0;
	}
	dg_pt_gather_init(&g);
	if (size == sp->granule && !dd->reference)
		pt_unmap_granule(sp->pt, iova, &g);
	else
		dg_pt_unmap(sp->pt, iova, size, &g, &unmapped);
	if (dd->reference) {
		r = reference_flush(dd, sp, &g, &seq);
	} else {
		gather_cmd(sp, &g, &c);
		r = dma_inval(dd, &c, 1, &seq);
	}
	if (dg_unlikely(r)) {
		/* the range is parked when it is to be freed, or a two-step unlink's (its
		 * granules stay pending until confirmed: DMA_TOKEN_LINK) */
		dma_quarantine_add_tok(dd, sp, seq, &g, &iova, &size, &token,
				       free_iova || (token & DMA_TOKEN_LINK) ? 1 : 0, mem);
		return r;
	}
	dg_pt_gather_release(sp->pt, &g);
	if (free_iova && dma_token_stream(token)) {
		dma_stream_retire(sp, token, size >> sp->gshift);
	} else if (free_iova && token) {
		struct iova_owned o = {.iova = iova, .size = size, .token = token};

		iova_free_owned(sp->iova, &o, 1);
	} else if (free_iova) { /* not from a magazine (the reference has none) */
		dg_iova_free(sp->iova, iova, size);
	}
	free(mem);
	return 0;
}

static dg_always_inline int xl_unmap(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t dma,
				     size_t len, enum dg_dma_dir dir, enum dma_kind kind,
				     uint32_t nents, struct dg_dma_batch *b)
{
	uint64_t iova = 0, size = 0, token = 0; /* set when the claim succeeds */
	int r = xl_claim(sp, dma, len, dir, kind, nents, &iova, &size, &token);

	if (dg_unlikely(r))
		return r;
	if (dd->lazy && kind != KIND_COHERENT)
		return dma_lazy_retire(dd, iova, size, token);
	if (b && !dd->reference && dg_likely(b->n < DG_DMA_BATCH_MAX)) {
		dma_batch_put(b, iova, size | BATCH_IOVA, token);
		return 0;
	}
	return dma_strict_retire(dd, sp, iova, size, true, token, b, NULL);
}

int dma_xl_unmap(struct dg_dma_dev *dd, struct dma_space *sp, uint64_t dma, size_t len,
		 enum dg_dma_dir dir, enum dma_kind kind, uint32_t nents, struct dg_dma_batch *b)
{
	return xl_unmap(dd, sp, dma, len, dir, kind, nents, b);
}

/* ---- identity ------------------------------------------------------------------------------ */

static int id_map(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
		  unsigned int attrs, enum dma_kind kind, uint64_t *dma)
{
	uint64_t a = (uintptr_t)buf;

	(void)dir;
	(void)attrs;
	(void)kind;
	if (dg_unlikely(a + (len - 1) > dd->mask))
		return -ERANGE;
	*dma = a;
	return 0;
}

static int id_unmap(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		    unsigned int attrs, enum dma_kind kind, struct dg_dma_batch *b)
{
	(void)dir;
	(void)attrs;
	(void)kind;
	(void)b;
	if (dg_unlikely(dma + (len - 1) > dd->mask))
		return -ERANGE;
	return dma ? 0 : -ENOENT;
}

static int id_map_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
		     enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma)
{
	(void)dir;
	(void)attrs;
	for (unsigned int i = 0; i < nents; i++)
		if ((uintptr_t)sg[i].addr + (sg[i].len - 1) > dd->mask)
			return -ERANGE;
	for (unsigned int i = 0; i < nents; i++) {
		sg[i].dma_addr = (uintptr_t)sg[i].addr;
		sg[i].dma_len = sg[i].len;
	}
	*nr_dma = nents;
	return 0;
}

static int id_unmap_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
		       enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	(void)dd;
	(void)dir;
	(void)attrs;
	(void)b;
	for (unsigned int i = 0; i < nents; i++)
		if (sg[i].dma_addr != (uintptr_t)sg[i].addr || sg[i].dma_len != sg[i].len)
			return -EINVAL;
	return 0;
}

const struct dma_policy_ops dma_identity_ops = {
	.map = id_map,
	.unmap = id_unmap,
	.map_sg = id_map_sg,
	.unmap_sg = id_unmap_sg,
};

/* ---- strict and lazy ----------------------------------------------------------------------- */

static int strict_map(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
		      unsigned int attrs, enum dma_kind kind, uint64_t *dma)
{
	(void)attrs;
	return xl_map_one(dd, dd->sp, buf, len, dir, kind, dma, dma_tstats(dd));
}

static int strict_unmap(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
			unsigned int attrs, enum dma_kind kind, struct dg_dma_batch *b)
{
	(void)attrs;
	return xl_unmap(dd, dd->sp, dma, len, dir, kind, 0, b);
}

static int strict_map_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			 enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma)
{
	uint64_t iova, dma;
	int r;

	(void)attrs;
	r = dma_xl_map(dd, dd->sp, sg, nents, dir, KIND_SG, &iova, &dma);
	if (!r)
		*nr_dma = dma_sg_segments(dd, sg, nents, iova, dd->sp->granule);
	return r;
}

static uint64_t sg_total(const struct dg_dma_sg *sg, unsigned int nents)
{
	uint64_t t = 0;

	for (unsigned int i = 0; i < nents; i++)
		t += sg[i].len;
	return t;
}

static int strict_unmap_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			   enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	(void)attrs;
	return dma_xl_unmap(dd, dd->sp, sg[0].dma_addr, sg_total(sg, nents), dir, KIND_SG, nents,
			    b);
}

const struct dma_policy_ops dma_strict_ops = {
	.map = strict_map,
	.unmap = strict_unmap,
	.map_sg = strict_map_sg,
	.unmap_sg = strict_unmap_sg,
};

/* ---- the public streaming API --------------------------------------------------------------- */

#define ATTRS_KNOWN DG_DMA_ATTR_SKIP_CPU_SYNC

/* A known direction and no unknown attribute, in one compare: an unknown attribute bit
 * (bit 1 and up) makes the value at least 8, a direction above DG_DMA_FROM_DEVICE 3 or more. */
static inline bool dir_attrs_ok(enum dg_dma_dir dir, unsigned int attrs)
{
	static_assert(ATTRS_KNOWN == 1 && DG_DMA_FROM_DEVICE == 2, "dir_attrs_ok");
	return ((uint64_t)(attrs >> 1) << 3 | (unsigned int)dir) <= DG_DMA_FROM_DEVICE;
}

/* The error of map arguments the fast check in map_common() refused (kept out of line). */
static dg_noinline int map_args_err(struct dg_dma_dev *dd, void *buf, size_t len,
				    enum dg_dma_dir dir, unsigned int attrs, const uint64_t *dma)
{
	if (!buf || !len || !dma || !dma_dir_ok(dir) || (attrs & ~ATTRS_KNOWN))
		return dma_err(dd, -EINVAL);
	return dma_err(dd, -ERANGE); /* the buffer wraps */
}

/* Count a map of @len bytes; the counter block not in this thread's cache (rare). */
static dg_noinline int count_map_slow(struct dg_dma_dev *dd, size_t len)
{
	struct dma_tstats *t = dma_tstats_slow(dd);

	ctr_add(t, CTR_MAPS, 1);
	ctr_add(t, CTR_MAP_BYTES, len);
	return 0;
}

/* Count a map of @len bytes and return 0; a path that calls nothing else stays a leaf. */
static dg_always_inline int count_map(struct dg_dma_dev *dd, size_t len)
{
	struct dma_tstats *t;

	if (dg_unlikely(dma_tls_last.gen != dd->gen))
		return count_map_slow(dd, len);
	t = dma_tls_last.t;
	ctr_add(t, CTR_MAPS, 1);
	ctr_add(t, CTR_MAP_BYTES, len);
	return 0;
}

static dg_noinline int count_unmap_slow(struct dg_dma_dev *dd)
{
	ctr_add(dma_tstats_slow(dd), CTR_UNMAPS, 1);
	return 0;
}

/* Count an unmap and return 0 (as count_map()). */
static dg_always_inline int count_unmap(struct dg_dma_dev *dd)
{
	if (dg_unlikely(dma_tls_last.gen != dd->gen))
		return count_unmap_slow(dd);
	ctr_add(dma_tls_last.t, CTR_UNMAPS, 1);
	return 0;
}

/* The map of strict and lazy, counted (this thread's counter block looked up once); one
 * function per kind below, so the record word is mostly a constant. */
static dg_always_inline int xl_map_counted(struct dg_dma_dev *dd, void *buf, size_t len,
					   enum dg_dma_dir dir, enum dma_kind kind, uint64_t *dma)
{
	struct dma_tstats *t = dma_tstats(dd);
	int r = xl_map_one(dd, dd->sp, buf, len, dir, kind, dma, t);

	if (dg_unlikely(r))
		return dma_err(dd, r);
	ctr_add(t, CTR_MAPS, 1);
	ctr_add(t, CTR_MAP_BYTES, len);
	return 0;
}

static dg_noinline int xl_map_single(struct dg_dma_dev *dd, void *buf, size_t len,
				     enum dg_dma_dir dir, uint64_t *dma)
{
	return xl_map_counted(dd, buf, len, dir, KIND_SINGLE, dma);
}

static dg_noinline int xl_map_page(struct dg_dma_dev *dd, void *buf, size_t len,
				   enum dg_dma_dir dir, uint64_t *dma)
{
	return xl_map_counted(dd, buf, len, dir, KIND_PAGE, dma);
}

/* The map of the other policies (bounce, window, pool) through the ops table, counted; inline
 * in the entry point (no call of its own: the register saves it needs stay on its path, the
 * identity and strict paths keep none). */
static dg_always_inline int map_ops(struct dg_dma_dev *dd, void *buf, size_t len,
				    enum dg_dma_dir dir, unsigned int attrs, enum dma_kind kind,
				    uint64_t *dma)
{
	int r = dd->ops->map(dd, buf, len, dir, attrs, kind, dma);

	return dg_unlikely(r) ? dma_err(dd, r) : count_map(dd, len);
}

/*
 * The streaming map of every policy. The hot path: one branch per argument check (a failure
 * goes out of line to map_args_err(), which says which); identity inline and a leaf (no call,
 * no register saved); strict and lazy a tail call of xl_map_counted(), without the ops
 * table's indirect call; the others map_ops() inline.
 */
static dg_always_inline int map_common(struct dg_dma_dev *dd, void *buf, size_t len,
				       enum dg_dma_dir dir, unsigned int attrs, enum dma_kind kind,
				       uint64_t *dma)
{
	const uintptr_t a = (uintptr_t)buf;
	const struct dma_policy_ops *ops;
	uintptr_t last;

	if (dg_unlikely(!dd))
		return -EINVAL;
	/* a + (len - 1) overflows: the buffer wraps, or len is 0 (and a is not) */
	if (dg_unlikely(!a) || dg_unlikely(__builtin_add_overflow(a, len - 1, &last)) ||
	    dg_unlikely(!dma) || dg_unlikely(!dir_attrs_ok(dir, attrs)))
		return map_args_err(dd, buf, len, dir, attrs, dma);
	ops = dd->ops;
	if (ops == &dma_identity_ops) {
		if (dg_unlikely(last > dd->mask)) /* id_map() inline */
			return dma_err(dd, -ERANGE);
		*dma = a;
		return count_map(dd, len);
	}
	if (dg_likely(ops == &dma_strict_ops))
		return kind == KIND_SINGLE ? xl_map_single(dd, buf, len, dir, dma) :
					     xl_map_page(dd, buf, len, dir, dma);
	return map_ops(dd, buf, len, dir, attrs, kind, dma);
}

/* The error of unmap arguments the fast check in unmap_common() refused. */
static dg_noinline int unmap_args_err(struct dg_dma_dev *dd, size_t len, enum dg_dma_dir dir,
				      unsigned int attrs, const struct dg_dma_batch *b)
{
	if (!len || !dma_dir_ok(dir) || (attrs & ~ATTRS_KNOWN) || (b && b->dev != dd))
		return dma_err(dd, -EINVAL);
	return dma_err(dd, -ERANGE); /* the range wraps */
}

/* A policy's unmap failed: a timed-out wait still unmapped (counted as an unmap). */
static dg_noinline int unmap_failed(struct dg_dma_dev *dd, int r)
{
	if (r == -ETIMEDOUT)
		ctr_add(dma_tstats(dd), CTR_UNMAPS, 1);
	return dma_err(dd, r);
}

/* A claimed strict or lazy streaming unmap that is not a batch append: retire and count. */
static dg_noinline int xl_unmap_retire(struct dg_dma_dev *dd, uint64_t iova, uint64_t size,
				       uint64_t token, struct dg_dma_batch *b)
{
	int r = dd->lazy ? dma_lazy_retire(dd, iova, size, token) :
			   dma_strict_retire(dd, dd->sp, iova, size, true, token, b, NULL);

	return dg_unlikely(r) ? unmap_failed(dd, r) : count_unmap(dd);
}

/*
 * The unmap of strict and lazy, counted: the claim inline, then a strict unmap inside a batch
 * with room is appended to it - a leaf (no call, no register saved) - and the rest goes out
 * of line to xl_unmap_retire().
 */
static dg_always_inline int xl_unmap_counted(struct dg_dma_dev *dd, uint64_t dma, size_t len,
					     enum dg_dma_dir dir, enum dma_kind kind,
					     struct dg_dma_batch *b)
{
	uint64_t iova = 0, size = 0, token = 0; /* set when the claim succeeds */
	int r = xl_claim(dd->sp, dma, len, dir, kind, 0, &iova, &size, &token);

	if (dg_unlikely(r))
		return dma_err(dd, r);
	if (dg_likely(b && !dd->lazy && !dd->reference && b->n < DG_DMA_BATCH_MAX)) {
		dma_batch_put(b, iova, size | BATCH_IOVA, token);
		return count_unmap(dd);
	}
	return xl_unmap_retire(dd, iova, size, token, b);
}

static dg_noinline int xl_unmap_single(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				       enum dg_dma_dir dir, struct dg_dma_batch *b)
{
	return xl_unmap_counted(dd, dma, len, dir, KIND_SINGLE, b);
}

static dg_noinline int xl_unmap_page(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				     enum dg_dma_dir dir, struct dg_dma_batch *b)
{
	return xl_unmap_counted(dd, dma, len, dir, KIND_PAGE, b);
}

/* The unmap of the other policies through the ops table, counted (as map_ops()). */
static dg_always_inline int unmap_ops(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				      enum dg_dma_dir dir, unsigned int attrs, enum dma_kind kind,
				      struct dg_dma_batch *b)
{
	int r = dd->ops->unmap(dd, dma, len, dir, attrs, kind, b);

	return dg_unlikely(r) ? unmap_failed(dd, r) : count_unmap(dd);
}

/* The streaming unmap of every policy, built as map_common(). */
static dg_always_inline int unmap_common(struct dg_dma_dev *dd, uint64_t dma, size_t len,
					 enum dg_dma_dir dir, unsigned int attrs,
					 enum dma_kind kind, struct dg_dma_batch *b)
{
	const struct dma_policy_ops *ops;
	uint64_t last;

	if (dg_unlikely(!dd))
		return -EINVAL;
	if (dg_unlikely(!len) || dg_unlikely(__builtin_add_overflow(dma, len - 1, &last)) ||
	    dg_unlikely(!dir_attrs_ok(dir, attrs)) || dg_unlikely(b && b->dev != dd))
		return unmap_args_err(dd, len, dir, attrs, b);
	ops = dd->ops;
	if (ops == &dma_identity_ops) {
		/* id_unmap() inline: nothing to check but the device's reach; 0 is never mapped */
		if (dg_unlikely(last > dd->mask))
			return dma_err(dd, -ERANGE);
		if (dg_unlikely(!dma))
			return dma_err(dd, -ENOENT);
		return count_unmap(dd);
	}
	if (dg_likely(ops == &dma_strict_ops))
		return kind == KIND_SINGLE ? xl_unmap_single(dd, dma, len, dir, b) :
					     xl_unmap_page(dd, dma, len, dir, b);
	return unmap_ops(dd, dma, len, dir, attrs, kind, b);
}

int dg_dma_map_single(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
		      unsigned int attrs, uint64_t *dma)
{
	return map_common(dd, buf, len, dir, attrs, KIND_SINGLE, dma);
}

int dg_dma_unmap_single(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
			unsigned int attrs, struct dg_dma_batch *b)
{
	return unmap_common(dd, dma, len, dir, attrs, KIND_SINGLE, b);
}

int dg_dma_map_page(struct dg_dma_dev *dd, void *page, size_t offset, size_t len,
		    enum dg_dma_dir dir, unsigned int attrs, uint64_t *dma)
{
	if (!dd)
		return -EINVAL;
	if (!page || ((uintptr_t)page & (DMA_HOST_PAGE - 1)))
		return dma_err(dd, -EINVAL);
	if ((uintptr_t)page + offset < (uintptr_t)page)
		return dma_err(dd, -ERANGE);
	return map_common(dd, (char *)page + offset, len, dir, attrs, KIND_PAGE, dma);
}

int dg_dma_unmap_page(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		      unsigned int attrs, struct dg_dma_batch *b)
{
	return unmap_common(dd, dma, len, dir, attrs, KIND_PAGE, b);
}

/* Checks every entry of a list on its face. */
static int sg_check(const struct dg_dma_dev *dd, const struct dg_dma_sg *sg, unsigned int nents,
		    uint64_t *total)
{
	uint64_t t = 0;

	for (unsigned int i = 0; i < nents; i++) {
		if (!sg[i].addr || !sg[i].len || sg[i].len > dd->max_seg)
			return -EINVAL;
		if ((uintptr_t)sg[i].addr + (sg[i].len - 1) < (uintptr_t)sg[i].addr)
			return -ERANGE;
		t += sg[i].len;
	}
	*total = t;
	return 0;
}

int dg_dma_map_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
		  enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma)
{
	struct dma_tstats *t;
	uint64_t total;
	int r;

	if (!dd)
		return -EINVAL;
	if (!sg || !nr_dma || !nents || nents > DG_DMA_SG_MAX || !dma_dir_ok(dir) ||
	    (attrs & ~ATTRS_KNOWN))
		return dma_err(dd, -EINVAL);
	r = sg_check(dd, sg, nents, &total);
	if (!r)
		r = dd->ops->map_sg(dd, sg, nents, dir, attrs, nr_dma);
	if (r)
		return dma_err(dd, r);
	t = dma_tstats(dd);
	ctr_add(t, CTR_MAPS, 1);
	ctr_add(t, CTR_SG_MAPS, 1);
	ctr_add(t, CTR_MAP_BYTES, total);
	return 0;
}

int dg_dma_unmap_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
		    enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	uint64_t total;
	int r;

	if (!dd)
		return -EINVAL;
	if (!sg || !nents || nents > DG_DMA_SG_MAX || !dma_dir_ok(dir) || (attrs & ~ATTRS_KNOWN) ||
	    (b && b->dev != dd))
		return dma_err(dd, -EINVAL);
	r = sg_check(dd, sg, nents, &total);
	if (!r)
		r = dd->ops->unmap_sg(dd, sg, nents, dir, attrs, b);
	if (r && r != -ETIMEDOUT)
		return dma_err(dd, r);
	ctr_add(dma_tstats(dd), CTR_UNMAPS, 1);
	return r ? dma_err(dd, r) : 0;
}

static int sync_common(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		       bool for_cpu)
{
	if (!dd)
		return -EINVAL;
	if (dg_unlikely(!len || !dma_dir_ok(dir)))
		return dma_err(dd, -EINVAL);
	if (!dd->ops->sync)
		return 0; /* coherent */
	/* a tail call: the policy counts its own errors */
	return dd->ops->sync(dd, dma, len, dir, for_cpu);
}

bool dg_dma_need_sync(const struct dg_dma_dev *dd)
{
	return dd && dd->ops->sync;
}

int dg_dma_sync_for_cpu(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir)
{
	return sync_common(dd, dma, len, dir, true);
}

int dg_dma_sync_for_device(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir)
{
	return sync_common(dd, dma, len, dir, false);
}

static int sync_sg_common(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			  enum dg_dma_dir dir, bool for_cpu)
{
	int r;

	if (!dd)
		return -EINVAL;
	if (!sg || !nents || nents > DG_DMA_SG_MAX || !dma_dir_ok(dir))
		return dma_err(dd, -EINVAL);
	if (!dd->ops->sync_sg)
		return 0;
	r = dd->ops->sync_sg(dd, sg, nents, dir, for_cpu);
	return r ? dma_err(dd, r) : 0;
}

int dg_dma_sync_sg_for_cpu(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			   enum dg_dma_dir dir)
{
	return sync_sg_common(dd, sg, nents, dir, true);
}

int dg_dma_sync_sg_for_device(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			      enum dg_dma_dir dir)
{
	return sync_sg_common(dd, sg, nents, dir, false);
}

/* ---- bulk streaming maps ---------------------------------------------------------------------- */

/*
 * dg_dma_map_bulk() and dg_dma_unmap_bulk(): a ring's refill and a poll's reap in one call.
 *
 * Map, the short way (strict or lazy, one granule per buffer, not the reference): the
 * arguments once; then, when the space has streams, the next @n granules of this thread's
 * stream (dma_stream_map, stream.c: one PTE store and a record each). Otherwise (no streams,
 * or the stream stepping aside): @n IOVAs from this thread's magazine in one entry of its
 * cache (iova_alloc_owned_bulk); the page-table entries by runs of neighbouring IOVAs - the
 * batch end gives IOVAs back highest first, so a magazine hands them out ascending and a
 * refill is usually one or two runs - one pt_map_granules() per run (one hint lookup per
 * last-level table, one store per entry); then each record looked up and written in the pass
 * that returns the addresses, and the counters once. A failure after IOVAs were taken (no
 * memory for a record node included: the records written are cleared, nobody having their
 * addresses yet) undoes everything (bulk_map_undo). Every other case
 * maps buffer by buffer through the single call and undoes the maps done when one fails.
 *
 * Unmap: one claim pass for every policy that translates (claim_bulk: a stream run's granules
 * of one bitmap word with one atomic AND, then their faces; anything else entry by entry);
 * a bad entry, or a claim lost to a racing unmap (or to an address given twice), gives back
 * the claims this call made - the mappings were live all along - and refuses the call. The
 * claimed unmaps then join the batch together (strict: room made for all of them first; a
 * stream run's PTEs are cleared when the batch is submitted, after all its claims - see
 * unmap_bulk_strict), go on lazy's flush queue at once, or are retired one by one (the
 * reference).
 *
 * Window and pool (dma/fixed_map.h): a map takes a fixed buffer's address and maps the others
 * one by one as strict, undoing them on a failure; an unmap leaves the fixed entries (nothing
 * to do, as the single unmap) and takes the rest the strict way above.
 */

/* Undo a bulk map's IOVAs iova[0..n) of @total bytes each, of which runs [0, mapped) have
 * page-table entries (unmapped into one gather, invalidated, waited for); returns @r. */
static dg_noinline int bulk_map_undo(struct dg_dma_dev *dd, struct dma_space *sp,
				     const uint64_t *iova, const uint64_t *token, unsigned int n,
				     uint64_t total, unsigned int mapped, int r)
{
	struct iova_owned o[DG_DMA_BULK_MAX];
	uint64_t sz[DG_DMA_BULK_MAX], unmapped, seq = 0;
	struct dg_pt_gather g;
	struct dg_inval_cmd c;

	pt_gather_init(&g);
	for (unsigned int i = 0; i < mapped; i++)
		dg_pt_unmap(sp->pt, iova[i], total, &g, &unmapped);
	if (!gather_empty(&g)) {
		gather_cmd(sp, &g, &c);
		if (dma_inval(dd, &c, 1, &seq)) {
			for (unsigned int i = 0; i < n; i++)
				sz[i] = total;
			dma_quarantine_add(dd, sp, seq, &g, iova, sz, n, NULL);
			return r;
		}
		dg_pt_gather_release(sp->pt, &g);
	}
	for (unsigned int i = 0; i < n; i++)
		o[i] = (struct iova_owned){.iova = iova[i], .size = total, .token = token[i]};
	iova_free_owned(sp->iova, o, n);
	return r;
}

/* The buffers' own errors, the first bad one's: NULL is -EINVAL, a wrapping one -ERANGE. */
static dg_always_inline int bulk_args(void *const *bufs, unsigned int n, size_t len)
{
	for (unsigned int i = 0; i < n; i++) {
		if (!bufs[i])
			return -EINVAL;
		if ((uintptr_t)bufs[i] + (len - 1) < (uintptr_t)bufs[i])
			return -ERANGE;
	}
	return 0;
}

/* The short way of dg_dma_map_bulk() (see above), which checks the buffers itself: 1 when it
 * does not apply (the buffers are good, nothing done), else 0 or -errno with nothing mapped. */
static int map_bulk_fast(struct dg_dma_dev *dd, void *const *bufs, unsigned int n, size_t len,
			 enum dg_dma_dir dir, uint64_t *dma)
{
	struct dma_space *sp = dd->sp;
	const uint64_t g = sp->granule, gm = sp->gmask;
	const unsigned int prot = dma_dir_prot(dir);
	uint64_t iova[DG_DMA_BULK_MAX], token[DG_DMA_BULK_MAX], phys[DG_DMA_BULK_MAX];
	uint64_t sub, waste, por = 0; /* the OR of the buffers' addresses */
	/* Acquire pairs with the release store in dg_dma_set_fail_hook() (as in dma_fail). */
	const bool hook = atomic_load_explicit(&dd->dma->fail, memory_order_acquire) != NULL;
	struct dg_pt_gather gth;
	struct dma_tstats *t;
	unsigned int i, done;
	int r;

	/* the arguments of every buffer and whether it fits in one granule, in one pass without
	 * a branch (GCC vectorizes it): a buffer inside one granule cannot wrap (its granule
	 * ends below 2^64), so the test is NULL or not inside one granule (len <= g first: no
	 * overflow). ORed over the buffers: offset + len - 1 (below 2g: the granule's bit is
	 * set exactly when it leaves its granule) and a - 1 (NULL wraps to the top bit; an
	 * address from 2^63 up is suspected too). The rare odd one is sorted out after,
	 * exactly (bulk_args, then the general way). */
	if (dg_unlikely(len > g))
		goto odd;
	uint64_t ends = 0, below = 0;

	for (i = 0; i < n; i++) {
		const uint64_t a = (uintptr_t)bufs[i];

		ends |= (a & gm) + (len - 1);
		below |= a - 1;
		por |= a;
	}
	if (dg_unlikely((ends & ~gm) | (below >> 63)))
		goto odd;
	r = dma_fail(dd, DG_DMA_FAIL_IOVA);
	if (dg_unlikely(r))
		return r;
	t = dma_tstats(dd);
	/* strict or lazy: this thread's stream (stream.c); an installed hook takes the
	 * allocator path, which asks it at every step */
	if (!hook && !dma_stream_map(sp, t, bufs, por & ~gm, n, len, dir, KIND_SINGLE, dma))
		goto counted;
	for (i = 0; i < n; i++)
		phys[i] = (uintptr_t)bufs[i] & ~(uintptr_t)gm;
	r = iova_alloc_owned_bulk(sp->iova, g, sp->limit, n, iova, token);
	if (dg_unlikely(r == -ENOSPC) && !dd->lazy && dma_stream_drain(sp, t))
		r = iova_alloc_owned_bulk(sp->iova, g, sp->limit, n, iova, token);
	if (dg_unlikely(r))
		return dd->lazy && r == -ENOSPC ? 1 : r; /* lazy: the single call drains */
	pt_gather_init(&gth);
	for (i = 0; i < n;) { /* one pt_map_granules() per run of neighbouring IOVAs */
		unsigned int k = 1, ok;
		int e = 0;

		while (i + k < n && iova[i + k] == iova[i] + (uint64_t)k * g)
			k++;
		/* an installed failure hook is asked once per buffer, as the single call does */
		for (ok = hook ? 0 : k; ok < k && !(e = dma_fail(dd, DG_DMA_FAIL_PT_MAP)); ok++)
			;
		done = 0;
		r = ok ? pt_map_granules(sp->pt, iova[i], &phys[i], ok, prot, &gth, &done) : 0;
		if (dg_unlikely(r || e)) {
			if (!gather_empty(&gth))
				dma_flush_gather(dd, sp, &gth);
			return bulk_map_undo(dd, sp, iova, token, n, g, i + (r ? done : ok),
					     r ? r : e);
		}
		i += k;
	}
	if (dg_unlikely(!gather_empty(&gth)))
		dma_flush_gather(dd, sp, &gth); /* tables replaced by larger leaves */
	/* the records last, in the pass that returns the addresses (no record node memory:
	 * everything mapped is undone) */
	for (i = 0; i < n; i++) {
		const uint64_t off = (uintptr_t)bufs[i] & gm;
		struct dma_rec *rec =
			dma_rec_in(&sp->rec, iova[i], (iova[i] - sp->first) >> sp->gshift, true);

		if (dg_unlikely(!rec)) {
			while (i--) /* not published: the call fails */
				atomic_store_explicit(&dma_rec_get(&sp->rec, iova[i], false)->w0, 0,
						      memory_order_relaxed);
			return bulk_map_undo(dd, sp, iova, token, n, g, n, -ENOMEM);
		}
		dma_rec_write(rec, len, g, token[i], rec_w0(KIND_SINGLE, dir, 0, off));
		dma[i] = iova[i] + off;
	}
counted:
	waste = g - len;
	sub = waste * n;
	ctr_add(t, CTR_SUBPAGE, sub);
	ctr_max(&t->subpage_max, waste);
	ctr_add(t, CTR_MAPS, n);
	ctr_add(t, CTR_MAP_BYTES, (uint64_t)n * len);
	return 0;
odd:
	r = bulk_args(bufs, n, len);
	return r ? r : 1; /* a bad buffer, or one of more than one granule */
}

int dg_dma_map_bulk(struct dg_dma_dev *dd, void *const *bufs, unsigned int n, size_t len,
		    enum dg_dma_dir dir, unsigned int attrs, uint64_t *dma)
{
	unsigned int i;
	int r;

	if (!dd)
		return -EINVAL;
	if (!bufs || !dma || !n || n > DG_DMA_BULK_MAX || !len || !dir_attrs_ok(dir, attrs))
		return dma_err(dd, -EINVAL);
	if (dd->ops == &dma_identity_ops) {
		struct dma_tstats *t;

		r = bulk_args(bufs, n, len);
		if (r)
			return dma_err(dd, r);
		for (i = 0; i < n; i++)
			if ((uintptr_t)bufs[i] + (len - 1) > dd->mask)
				return dma_err(dd, -ERANGE);
		for (i = 0; i < n; i++)
			dma[i] = (uintptr_t)bufs[i];
		t = dma_tstats(dd);
		ctr_add(t, CTR_MAPS, n);
		ctr_add(t, CTR_MAP_BYTES, (uint64_t)n * len);
		return 0;
	}
	if (dd->ops == &dma_strict_ops && !dd->reference) {
		/* the buffers are checked on the short way's pass */
		r = map_bulk_fast(dd, bufs, n, len, dir, dma);
		if (r <= 0)
			return r ? dma_err(dd, r) : 0;
	} else {
		r = bulk_args(bufs, n, len);
		if (r)
			return dma_err(dd, r);
		if (dd->ops == &dma_bounce_ops)
			return dma_bounce_map_bulk(dd, bufs, n, len, dir, attrs, dma);
		if (dd->ops->fixed) { /* window, pool: fixed_map.h */
			r = dma_fixed_map_bulk(dd->ops->fixed, dd, bufs, n, len, dir, attrs, dma);
			return r ? dma_err(dd, r) : 0;
		}
		if (dd->ops != &dma_strict_ops)
			return dma_err(dd, -EOPNOTSUPP);
	}
	for (i = 0; i < n; i++) { /* the general way: one by one, undone on a failure */
		r = dg_dma_map_single(dd, bufs[i], len, dir, attrs, &dma[i]);
		if (r) {
			struct dg_dma_batch b;

			dg_dma_batch_begin(dd, &b);
			while (i--)
				dg_dma_unmap_single(dd, dma[i], len, dir,
						    attrs | DG_DMA_ATTR_SKIP_CPU_SYNC, &b);
			/* the call's error is its own (counted by the single call); an undo
			 * whose wait times out parks the IOVAs and counts nothing more */
			dma_batch_end_undo(&b);
			return r;
		}
	}
	return 0;
}

/* The record of the granule at @a (granule aligned) for a claim, and its granule number
 * (*gp): NULL outside the space or with no record there. */
static dg_noinline struct dma_rec *claim_rec(struct dma_space *sp, uint64_t a, uint64_t *gp)
{
	const uint64_t d = a - sp->first;

	if (dg_unlikely(d > sp->last - sp->first))
		return NULL;
	*gp = d >> sp->gshift;
	return dma_rec_in(&sp->rec, a, *gp, false);
}

/* Where claim_bulk() puts its claimed entry @i: IOVA @a (granule aligned), its IOVA bytes and
 * the allocator's (or stream's) token (the slow way, entry by entry). */
typedef void claim_put_fn(void *ctx, size_t i, uint64_t a, uint64_t size, uint64_t token);
/* The fast way's: entries [i, i + k) claimed at once, at the adjacent granules from @a (@g
 * apart), their records rec[0..k) (stream records: IOVA bytes one granule, token w3). */
typedef void claim_putg_fn(void *ctx, size_t i, uint64_t a, size_t k, uint64_t g,
			   const struct dma_rec *rec);
/* The slow way starts over: forget what the fast way put. */
typedef void claim_restart_fn(void *ctx);

/* A batch entry (its type is unnamed in dma.h). */
typedef __typeof__(((struct dg_dma_batch *)NULL)->ent[0]) batch_ent;

/*
 * A strict bulk unmap's entries go straight into the batch: e is &b->ent[b->n] (room made).
 * A fast-way group of one chunk (its first and last records' tokens equal: a chunk is one
 * contiguous range, and every record of a held chunk has its token) puts its two ends only
 * and is noted in grp[]: its middle entries are (a + j granules, one granule, the token) and
 * are written only if the call does not end up as a stream run of the batch (batch_put_fill;
 * a run's middles are written back by batch_expand() when the batch end needs them).
 */
struct batch_put {
	batch_ent *e;
	uint32_t ng;			  /* groups whose middles are not written */
	uint16_t grp[DG_DMA_BULK_MAX][2]; /* their first entry and count */
};

static dg_always_inline void put_batch(void *ctx, size_t i, uint64_t a, uint64_t size,
				       uint64_t token)
{
	batch_ent *e = ((struct batch_put *)ctx)->e + i;

	e->addr = a;
	e->size = size | BATCH_IOVA;
	e->token = token;
}

static dg_always_inline void putg_batch(void *ctx, size_t i, uint64_t a, size_t k, uint64_t g,
					const struct dma_rec *rec)
{
	struct batch_put *o = ctx;
	batch_ent *e = o->e + i;
	/* Relaxed: the claim's acquire AND made the records visible (claim_bulk). */
	const uint64_t t0 = atomic_load_explicit(&rec[0].w3, memory_order_relaxed);
	const uint64_t tl = atomic_load_explicit(&rec[k - 1].w3, memory_order_relaxed);

	e[0] = (batch_ent){.addr = a, .size = g | BATCH_IOVA, .token = t0};
	e[k - 1] = (batch_ent){.addr = a + (k - 1) * g, .size = g | BATCH_IOVA, .token = tl};
	if (dg_likely(t0 == tl)) {
		if (k > 2) {
			o->grp[o->ng][0] = (uint16_t)i;
			o->grp[o->ng++][1] = (uint16_t)k;
		}
		return;
	}
	for (size_t j = 1; j + 1 < k; j++) /* two chunks' records: each its own token */
		e[j] = (batch_ent){.addr = a + j * g,
				   .size = g | BATCH_IOVA,
				   .token = atomic_load_explicit(&rec[j].w3, memory_order_relaxed)};
}

static dg_always_inline void restart_batch(void *ctx)
{
	((struct batch_put *)ctx)->ng = 0; /* the slow way writes every entry */
}

/* Write the middles of e[first, + k) (its ends written): entries of one chunk's adjacent
 * granules. */
static dg_always_inline void fill_middles(batch_ent *e, uint32_t k)
{
	const uint64_t a = e[0].addr, size = e[0].size, tok = e[0].token;
	const uint64_t g = size & ~(uint64_t)BATCH_KIND;

	for (uint32_t j = 1; j + 1 < k; j++)
		e[j] = (batch_ent){.addr = a + j * g, .size = size, .token = tok};
}

/* The call did not become a stream run of the batch: its groups' middles written now. */
static dg_noinline void batch_put_fill(struct batch_put *o)
{
	for (uint32_t x = 0; x < o->ng; x++)
		fill_middles(o->e + o->grp[x][0], o->grp[x][1]);
	o->ng = 0;
}

/* Lazy's and the reference's: sizes and tokens in two arrays (the addresses are dma[]). */
struct claim_arrays {
	uint64_t *size;
	uint64_t *token;
};

static dg_always_inline void put_arrays(void *ctx, size_t i, uint64_t a, uint64_t size,
					uint64_t token)
{
	struct claim_arrays *o = ctx;

	(void)a;
	o->size[i] = size;
	o->token[i] = token;
}

static dg_always_inline void putg_arrays(void *ctx, size_t i, uint64_t a, size_t k, uint64_t g,
					 const struct dma_rec *rec)
{
	struct claim_arrays *o = ctx;

	(void)a;
	for (size_t j = 0; j < k; j++) {
		o->size[i + j] = g; /* a stream mapping's IOVA bytes are one granule (w2) */
		/* Relaxed: the claim's acquire AND made the records visible (claim_bulk). */
		o->token[i + j] = atomic_load_explicit(&rec[j].w3, memory_order_relaxed);
	}
}

static dg_always_inline void restart_arrays(void *ctx)
{
	(void)ctx; /* the slow way writes every entry */
}

/* Give back claim_bulk()'s claims of dma[0..n) (mappings of @len, @dir, all live all along,
 * their claims made on the slow way when @slow: stream entries have their bit in @stream):
 * records stored back with the word they had, then the bits of stream mappings set again. */
static dg_noinline void claim_undo(struct dma_space *sp, const uint64_t *dma, unsigned int n,
				   enum dg_dma_dir dir, const uint64_t *stream)
{
	const uint64_t wdir = rec_w0(KIND_SINGLE, dir, 0, 0);

	for (unsigned int i = 0; i < n; i++) {
		const bool st = !stream || (stream[i >> 6] >> (i & 63) & 1);
		uint64_t g;
		struct dma_rec *x = claim_rec(sp, dma[i] & ~sp->gmask, &g);

		/* Release pairs with the acquire load in xl_check(), as the map's. */
		atomic_store_explicit(&x->w0, wdir | (st ? REC_STREAM : 0) | (dma[i] & sp->gmask),
				      memory_order_release);
		if (st)
			/* Release: as live_set()'s (stream.c), after the record's word. */
			atomic_fetch_or_explicit(dma_rec_live(x, g), 1ull << (g & 63),
						 memory_order_release);
	}
}

/*
 * The claim pass of dg_dma_unmap_bulk() (every policy that translates: strict's batch, lazy's
 * flush queue, the reference): @n buffers of @len, @dir (KIND_SINGLE) claimed, each put
 * (@put entry by entry, @putg a fast-way group at once, @restart when the slow way starts
 * over) with its IOVA range and token; *run: the entries are adjacent ascending granules (a
 * ring's reap). 0, or the first bad entry's error (-ERANGE first if any address wraps) with
 * nothing changed: a bad address or record (-ENOENT, -EINVAL), a claim lost to a racing unmap
 * or to an address given twice (-ENOENT) gives back this call's claims (the mappings were
 * live all along) - a racing unmap of one of them meanwhile fails with -ENOENT, as it would
 * had it come a little earlier or later.
 *
 * The fast way, bit mappings (a ring's reap of a stream a bulk call refilled; stream.c): the
 * entries at adjacent granules
 * inside one word of the live bitmap are claimed with one atomic AND of their bits (a reap of
 * 32 buffers: one, or two where it crosses a word), and only then - the mappings ours and
 * their records stable - each record's face is checked (the word the map wrote and the
 * length) and its w0 cleared. A record found at the next granule of the one before is the
 * previous one's next in its leaf (a word's 64 granules are inside one leaf). No wrap test: a
 * record that matches proves [dma[i], dma[i] + len) is inside a live mapping. Anything else
 * (a bit not set, a face not right, a record not a stream's) gives this way's claims back
 * and takes the slow way, entry by entry (xl_claim's steps, CAS or bit), which finds the error.
 */
static dg_always_inline int claim_bulk(struct dma_space *sp, const uint64_t *dma, unsigned int n,
				       size_t len, enum dg_dma_dir dir, claim_put_fn *put,
				       claim_putg_fn *putg, claim_restart_fn *restart, void *ctx,
				       bool *run)
{
	const uint64_t gm = sp->gmask, g = sp->granule, wdir = rec_w0(KIND_SINGLE, dir, 0, 0);
	const uint64_t want = wdir | REC_STREAM;
	uint64_t stream[DG_DMA_BULK_MAX / 64]; /* the slow way's stream entries (bit i) */
	uint64_t next = 1;		       /* never aligned */
	bool adj = true;
	size_t i = 0, j, k, lim;     /* size_t: no extension of an index in the loops */
	_Atomic uint64_t *lw = NULL; /* the fast way's word ... */
	uint64_t m = 0;		     /* ... and the bits of its group */
	struct dma_rec *rec;
	uint64_t gi, w0;
	int r;

	if (dg_unlikely(!sp->cspan))
		goto slow; /* no streams: no stream record */
	while (i < n) {
		const uint64_t a = dma[i] & ~gm;
		uint64_t old, na = a + g;
		unsigned int b;

		rec = claim_rec(sp, a, &gi);
		/* Relaxed: a hint (a stream's record?); the face is checked once the bit is ours. */
		if (dg_unlikely(!rec) ||
		    dg_unlikely(
			    !(atomic_load_explicit(&rec->w0, memory_order_relaxed) & REC_STREAM)))
			goto undo;
		b = (unsigned int)(gi & 63);
		lim = n - i < 64 - b ? n - i : 64 - b; /* entries that could share the word */
		/* the adjacent entries: four at a time (one test of their XORs), then one by one */
		for (k = 1; k + 4 <= lim; k += 4, na += 4 * g)
			if (((dma[i + k] ^ na) | (dma[i + k + 1] ^ (na + g)) |
			     (dma[i + k + 2] ^ (na + 2 * g)) | (dma[i + k + 3] ^ (na + 3 * g))) &
			    ~gm)
				break;
		for (; k < lim && (dma[i + k] & ~gm) == na; k++)
			na += g;
		m = (k == 64 ? ~0ull : (1ull << k) - 1) << b;
		lw = dma_rec_live(rec, gi);
		/* Acquire pairs with the release OR of live_set() (stream.c) or of a give-back:
		 * the entries and records of the mappings claimed are visible. */
		old = atomic_fetch_and_explicit(lw, ~m, memory_order_acquire);
		if (dg_unlikely((old & m) != m)) {
			/* Release: as live_set()'s. Exactly the bits this call cleared. */
			atomic_fetch_or_explicit(lw, old & m, memory_order_release);
			goto undo;
		}
		{ /* k >= 1; pointers, unrolled: GCC's own loop kept an index and a pointer */
			const uint64_t *d = dma + i;
			struct dma_rec *x = rec, *const xe = rec + k;

#pragma GCC unroll 2
			do {
				const uint64_t w = want | (*d++ & gm);

				/* Relaxed: the acquire AND above made the record visible. */
				if (dg_unlikely(
					    (atomic_load_explicit(&x->w0, memory_order_relaxed) ^
					     w) |
					    (atomic_load_explicit(&x->w1, memory_order_relaxed) ^
					     len))) {
					j = (size_t)(x - rec);
					goto undo_group;
				}
				/* Relaxed: the claim is the bit's (see claim_live()). */
				atomic_store_explicit(&x->w0, 0, memory_order_relaxed);
			} while (++x != xe);
		}
		/* a stream mapping's IOVA bytes are one granule (w2, stream.c) */
		putg(ctx, i, a, k, g, rec);
		adj &= !i || a == next;
		next = na;
		i += k;
	}
	*run = adj;
	return 0;
undo_group: /* entries [i, i + j) cleared, the group's bits all ours */
	while (j--)
		/* Release pairs with the acquire load in xl_check(), as the map's. */
		atomic_store_explicit(&rec[j].w0, want | (dma[i + j] & gm), memory_order_release);
	/* Release: as live_set()'s, after the records' words. */
	atomic_fetch_or_explicit(lw, m, memory_order_release);
undo:
	if (i)
		claim_undo(sp, dma, (unsigned int)i, dir, NULL);
slow:
	restart(ctx);
	memset(stream, 0, sizeof(stream));
	adj = true;
	next = 1;
	for (i = 0; i < n; i++) {
		const uint64_t d = dma[i], a = d & ~gm, off = d & gm;

		if (dg_unlikely(d + (len - 1) < d))
			goto bad;
		rec = claim_rec(sp, a, &gi);
		if (dg_unlikely(!rec))
			goto bad;
		/* Acquire pairs with the release store of w0 in dma_rec_write() (as xl_check). */
		w0 = atomic_load_explicit(&rec->w0, memory_order_acquire);
		if (dg_unlikely((w0 & ~REC_STREAM) != (wdir | off) ||
				atomic_load_explicit(&rec->w1, memory_order_relaxed) != len))
			goto bad;
		if (w0 & REC_STREAM) {
			if (dg_unlikely(claim_live(rec, gi, w0, len)))
				goto bad;
			stream[i >> 6] |= 1ull << (i & 63);
		} else if (dg_unlikely(!atomic_compare_exchange_strong_explicit(
				   &rec->w0, &w0, 0, memory_order_acquire, memory_order_relaxed))) {
			/* Acquire: as in xl_claim() (the reads of w2 and w3 below stay after it). */
			goto bad;
		}
		put(ctx, i, a, atomic_load_explicit(&rec->w2, memory_order_relaxed),
		    atomic_load_explicit(&rec->w3, memory_order_relaxed));
		adj &= !i || a == next;
		next = a + g;
	}
	*run = adj;
	return 0;
bad:
	/* the first bad entry's error, read before anything is given back: a record this call
	 * claimed reads as unmapped (an address given twice is -ENOENT, as a lost claim is) */
	if (dma[i] + (len - 1) < dma[i]) {
		r = -ERANGE;
	} else {
		const uint64_t off = dma[i] & gm;
		struct dma_rec *x = claim_rec(sp, dma[i] & ~gm, &gi);

		w0 = x ? atomic_load_explicit(&x->w0, memory_order_relaxed) & ~REC_STREAM : 0;
		if (w0 != (wdir | off))
			r = xl_claim_err(w0, off);
		else /* the face was right: the length, or a claim lost */
			r = atomic_load_explicit(&x->w1, memory_order_relaxed) != len ? -EINVAL :
											-ENOENT;
	}
	for (j = i + 1; j < n && r != -ERANGE; j++)
		if (dma[j] + (len - 1) < dma[j])
			r = -ERANGE;
	if (i)
		claim_undo(sp, dma, (unsigned int)i, dir, stream);
	return r;
}

/*
 * The strict way of dg_dma_unmap_bulk() (not lazy, not the reference): the claim pass
 * (claim_bulk) writes the entries straight into the batch (room made for all first, counted
 * in b->n once all are claimed; a fast-way group of one chunk its two ends only, the rest
 * written at the end of the call unless the call is a stream run: put_batch); a failure
 * refuses the call, nothing having entered the batch. @b is the caller's batch or its own (begun before, ended after). A run of one stream
 * chunk is marked (b->run_clear) and its PTE lines asked for (prefetchw); batch_issue clears
 * it through the kept table before the batch's commands, so no claim of this call or of a
 * later one in the batch (a poll's rx then tx reap) waits in its locked read-modify-write for
 * the clears' stores to lines the device's core holds.
 */
static dg_noinline int unmap_bulk_strict(struct dma_space *sp, const uint64_t *dma, unsigned int n,
					 size_t len, enum dg_dma_dir dir, struct dg_dma_batch *b)
{
	struct batch_put o;
	uint32_t bn;
	bool run;
	int r;

	dma_batch_room(b, n);
	bn = b->n;
	o.e = &b->ent[bn];
	o.ng = 0;
	r = claim_bulk(sp, dma, n, len, dir, put_batch, putg_batch, restart_batch, &o, &run);
	if (dg_unlikely(r))
		return r;
	b->n = bn + n;
	if (run && n > 1 && b->nruns < BATCH_PIECES) { /* one range for the batch end */
		const uint64_t tok = b->ent[bn].token;

		/* a stream's run in one chunk (both ends of it there): its entries are cleared
		 * through the kept table, in one tight loop, when the batch is submitted (after
		 * every claim of the batch: no claim waits behind the clears' stores); its middle
		 * entries stay unwritten (batch_expand() writes them for a batch end that reads
		 * them) */
		if (dma_token_stream(tok) && b->ent[bn + n - 1].token == tok) {
			/* in the chunk (both ends are: stream.c, dma_stream_run), their lines
			 * asked for (a hint): owned by the time of the clears */
			dma_stream_run(sp, tok, b->ent[bn].addr, n);
			b->run_clear |= 1u << b->nruns;
			o.ng = 0;
		}
		b->run_first[b->nruns] = bn;
		b->run_len[b->nruns++] = n;
	}
	if (dg_unlikely(o.ng))
		batch_put_fill(&o);
	return 0;
}

int dg_dma_unmap_bulk(struct dg_dma_dev *dd, const uint64_t *dma, unsigned int n, size_t len,
		      enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	uint64_t size[DG_DMA_BULK_MAX], token[DG_DMA_BULK_MAX], rest[DG_DMA_BULK_MAX];
	struct claim_arrays out = {size, token};
	unsigned int fixed = 0; /* window, pool: entries of the fixed part (nothing to do) */
	struct dg_dma_batch local;
	struct dma_space *sp;
	struct dma_tstats *t;
	unsigned int i;
	bool run;
	int r = 0;

	if (!dd)
		return -EINVAL;
	if (!dma || !n || n > DG_DMA_BULK_MAX || !len || !dir_attrs_ok(dir, attrs) ||
	    (b && b->dev != dd))
		return dma_err(dd, -EINVAL);
	if (dg_likely(dd->ops == &dma_strict_ops))
		goto strict;
	if (dd->ops == &dma_bounce_ops)
		return dma_bounce_unmap_bulk(dd, dma, n, len, dir, attrs, b);
	for (i = 0; i < n; i++)
		if (dma[i] + (len - 1) < dma[i])
			return dma_err(dd, -ERANGE);
	if (dd->ops == &dma_identity_ops) {
		for (i = 0; i < n; i++) {
			if (dma[i] + (len - 1) > dd->mask)
				return dma_err(dd, -ERANGE);
			if (!dma[i])
				return dma_err(dd, -ENOENT);
		}
		ctr_add(dma_tstats(dd), CTR_UNMAPS, n);
		return 0;
	}
	if (dd->ops->fixed) {
		/* a fixed entry needs nothing (as its single unmap); the rest the strict way,
		 * all claimed before any is unmapped (fixed_map.h) */
		const unsigned int m = dma_fixed_unmap_rest(dd->ops->fixed, dd, dma, n, len, rest);

		if (!m) {
			ctr_add(dma_tstats(dd), CTR_UNMAPS, n);
			return 0;
		}
		fixed = n - m;
		dma = rest;
		n = m;
		goto strict;
	}
	return dma_err(dd, -EOPNOTSUPP);
strict:
	sp = dd->sp;
	if (!dd->lazy && !dd->reference) {
		const bool own = !b;

		if (own)
			dg_dma_batch_begin(dd, b = &local);
		r = unmap_bulk_strict(sp, dma, n, len, dir, b);
		if (dg_unlikely(r)) {
			if (own)
				dg_dma_batch_end(&local); /* empty */
			return dma_err(dd, r);
		}
		if (own) { /* the end counts its own error: the call's one count */
			r = dg_dma_batch_end(&local);
			ctr_add(dma_tstats(dd), CTR_UNMAPS, n + fixed);
			return r;
		}
		goto counted;
	}
	/* lazy, the reference: the same claim pass, then retired - lazy all at once on its flush
	 * queue (lazy.c), the reference one by one */
	r = claim_bulk(sp, dma, n, len, dir, put_arrays, putg_arrays, restart_arrays, &out, &run);
	if (dg_unlikely(r))
		return dma_err(dd, r);
	if (dd->lazy) {
		r = dma_lazy_retire_bulk(dd, dma, size, token, n);
	} else {
		for (i = 0; i < n; i++) {
			const uint64_t iova = dma[i] & ~sp->gmask;
			int e = dma_strict_retire(dd, sp, iova, size[i], true, token[i], b, NULL);

			if (e && !r)
				r = e;
		}
	}
counted:
	t = dma_tstats(dd);
	ctr_add(t, CTR_UNMAPS, n + fixed);
	return r ? dma_err(dd, r) : 0;
}
