/* SPDX-License-Identifier: MIT */
/*
 * dma/stream.c - streams: strict's and lazy's IOVAs handed out in ring order from per-thread chunks
 * whose last-level table is kept (the rIOMMU idea, ASPLOS'15: a device consumes a ring in
 * order, so IOVAs handed out in ring order need neither a general allocator per buffer nor a
 * page-table walk per map).
 *
 * A chunk is one last-level table's span of IOVA space (cspan granules: 512 with 4 KiB
 * granules, 2 MiB), allocated naturally aligned from the space's allocator, its table made
 * present once (pt_slots, pt/pt_fast.h) and its records' leaf created once. A thread's stream
 * (dma_stream, in its counter block of the device; one per direction, session 12: a driver
 * mapping its rx refills and its tx sends in turns keeps each ring's IOVAs adjacent, so each
 * reap is one run for the batch) hands the chunk's granules out ascending:
 *
 *   map (one granule, strict bulk or single call):  iova = chunk + cur++ granules
 *                                         one PTE store into the kept table, the record
 *
 * The PTE lines are shared with the device's core (its walks read them), so each store to
 * one it read waits for a request for ownership. A bulk map asks for the lines of its
 * entries first (prefetchw: the requests overlap instead of queueing one by one in the store
 * buffer behind the record stores); a bulk unmap of a run does so at the end of its claims
 * (dma_stream_run), and the run's entries are cleared when the batch is submitted
 * (dma_stream_clear from batch_issue, after every claim of the batch: a claim's locked
 * read-modify-write drains the store buffer, and then has no PTE clear to wait for).
 *
 * The claim of a stream mapping made by a bulk call (session 11; dma_stream_map, REC_STREAM
 * in its record): its bit in the live bitmap of its record leaf (map_record.c,
 * dma_internal.h), not a compare-and-swap of its record. The map sets the bits of the
 * granules it mapped with one atomic OR per bitmap word (release), after their entries and
 * records; an unmap claims a granule by clearing its bit (acquire), a bulk unmap the granules
 * of a run inside one word with one atomic AND (map.c: claim_bulk; the call gets them all or
 * gives back exactly the bits it cleared and fails), and checks the record's face only then,
 * on a record nobody else can change any more; w0 is cleared after (a plain store: dumps,
 * checks, error codes). A single call's map (dma_stream_map_one) sets no bit and writes no
 * REC_STREAM: it would pay a locked OR per buffer, and its unmap is usually a single call too,
 * which pays one locked operation either way - so its mapping keeps the record's CAS. Which
 * of the two claims a mapping has is fixed by its map, in w0. Why every mapping is claimed
 * exactly once, whichever calls race:
 *  - The bit of granule G is set only by the bulk stream map that hands G out (or by a claimer
 *    giving back a bit it cleared itself, while the mapping it took is still live: nobody
 *    else can take it meanwhile, and G cannot be handed out again before it is retired). So a
 *    set bit always belongs to G's current mapping, which is a bit mapping (REC_STREAM), and
 *    each such mapping's bit is set once.
 *  - Every path that claims a mapping reads w0 first and takes the bit exactly when w0 has
 *    REC_STREAM: the single calls (xl_claim -> claim_live, strict and lazy), strict's, lazy's
 *    and the reference's bulk calls (claim_bulk: the fast way takes bits only, the slow way
 *    the bit or the CAS by w0). The record compare-and-swap only ever expects a word without
 *    REC_STREAM, so it never takes a bit mapping; a bit claimer only gets a bit a bit
 *    mapping set, so it never takes a CAS mapping (a single call's, or the allocator's). Each
 *    mapping has exactly one claim.
 *  - Clearing a bit is an atomic read-modify-write that reports whether it was set: of racing
 *    claimers (single vs bulk, bulk vs bulk, lazy vs strict paths) exactly one sees it set;
 *    of racing compare-and-swaps, one succeeds.
 *  - Retirement follows a kept claim only (the batch end, strict retire, quarantine, lazy's
 *    reclaim retire claimed granules; an abandoned rest never had its bits set), so a chunk
 *    goes spare with every bit of it clear, and a chunk given back to the allocator leaves
 *    clear bits to whatever maps there next (an allocator mapping never sets one).
 *  - The bitmap lives in the record leaf, which is never freed before the table: a stale
 *    claimer (a double unmap) finds the word from the address alone and never touches a
 *    chunk that went back to the allocator meanwhile.
 * A face read before the claim may be an earlier mapping's; the claim checks it again once
 * the bit is its own. dma_stream_check() checks that a bit is set exactly for the granules
 * whose record is a live bit mapping's.
 *
 * No magazine, no descent, no per-buffer allocator state. Lazy maps the same way (session 10);
 * its unmaps clear the PTE at once and queue the granule with its token on the flush queue
 * (lazy.c), which retires it here when it observes that the flush covering the unmap
 * completed. Strict's unmaps: the claim (the live bit) refuses never-mapped, wrong size /
 * direction and double unmaps with nothing changed, the batch's submit (or end) clears the PTEs by
 * runs, invalidates, the end waits; then, instead of giving each IOVA to the allocator, it
 * adds the granules of each run of one chunk to the chunk's `retired` count (one atomic add
 * per run, not per buffer: the batch end groups consecutive entries of one chunk). The token
 * of a stream granule (record w3, batch entry token) is its chunk's address |
 * DMA_TOKEN_STREAM, so every place that gives a token back - batch end, strict retire,
 * quarantine retry - knows where it goes.
 *
 * A chunk's life: taken by a stream (cur = 0, retired = 0) -> granules handed out until cur
 * reaches cspan (a bulk call that does not fit in the rest abandons it: the unused rest is
 * retired at once, never having been mapped) -> the stream takes the next chunk -> the chunk
 * drains as its granules' unmaps complete, from any thread, in any order -> the add that
 * brings retired to cspan (exactly one add can: each granule is retired once) puts it on the
 * space's spare list (table still linked, record leaf still there) -> a stream takes it
 * again. Spare chunks beyond DMA_STREAM_SPARE_MAX go back to the allocator (from chunk_get:
 * a batch end never calls the allocator for a chunk).
 *
 * Invariants (what makes this strict):
 *  - A granule is handed out again only after its chunk went through the spare list, i.e.
 *    after every granule of the chunk was retired, and a mapped granule is retired only
 *    after the invalidation covering its unmap completed (batch end after its wait, strict
 *    retire after its wait, quarantine after a later completion confirmed it, lazy's reclaim
 *    after the completion of the flush that started after the unmap). A granule
 *    never mapped (an abandoned rest) needs no invalidation. So no IOVA is reissued before
 *    the invalidation of its previous unmap completed, and its PTE is clear when it is
 *    (cleared before that invalidation was issued).
 *  - The kept table stays linked while the chunk is held (the pt_slots argument): the chunk's
 *    IOVA range is allocated to the streams, so no other user maps or unmaps inside it;
 *    inside it only one-granule leaves are written (here) and cleared (pt_unmap_granule,
 *    pt_unmap_granules: they never unlink a last-level table), and a one-granule unmap
 *    cannot cover a table of more than one entry. A table leaves the tree only when a call
 *    covers its whole span, which nobody else can while the range is held. pt_slots_check()
 *    verifies it (tests).
 *  - A chunk's records all sit in one record leaf: streams are on only when the space's
 *    first IOVA is chunk aligned (the record index is relative to it), so the records of a
 *    chunk are rec0[0..cspan).
 *  - A stream is only ever used by its thread; a chunk's `retired` is the one word shared
 *    (acq_rel adds); the lists are under chunk_lock (taken once per chunk, not per map).
 *
 * Exhaustion: a chunk that cannot be had (no IOVA space, no memory) makes the stream step
 * aside for DMA_STREAM_BACKOFF calls: maps take the allocator path (magazines), which behaves
 * as before. When the allocator itself says -ENOSPC, the caller drains: the unused rests of
 * this thread's chunks are abandoned and every spare chunk given back, then it tries once
 * more - so a map the allocator path would have done without streams does not fail for the
 * spares. What streams can still hold is the unused rest of other threads' current chunks (at
 * most cspan - 1 granules per thread and direction mapping on the device) and chunks pinned by long-lived
 * mappings (a chunk with one live granule is held whole): streams are on only for spaces of
 * at least DMA_STREAM_MIN_CHUNKS chunks.
 */
#include "dma/dma_internal.h"
#include "pt/pt_fast.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Spare chunks kept (beyond: back to the allocator). */
#define DMA_STREAM_SPARE_MAX 64
/* Calls a stream steps aside after a failed chunk get. */
#define DMA_STREAM_BACKOFF 64
/* Streams hold at most 1 / DMA_STREAM_SHARE of the space's chunks. */
#define DMA_STREAM_SHARE 4
/* Streams only for spaces of at least this many chunks. */
#define DMA_STREAM_MIN_CHUNKS 64
/* Chunk span at most (granules): one 4 KiB-granule table's. */
#define DMA_STREAM_SPAN_MAX 512

struct dma_chunk {
	/* The word other threads write (their batch ends): a line of its own. */
	_Alignas(64) _Atomic uint64_t retired; /* granules done with since taken */
	_Alignas(64) uint64_t iova;	       /* first IOVA */
	_Atomic uint64_t *pte0;		       /* entry of granule 0 in the kept table */
	struct dma_rec *rec0;		       /* record of granule 0 */
	_Atomic uint64_t *live0; /* live-bitmap word of granule 0 (its record leaf's) */
	uint32_t lbit0;		 /* granule 0's bit in it (0 unless cspan < 64) */
	struct pt_slots *slots;	 /* the kept table (the proof: pt_slots_check) */
	struct dma_chunk *next;	 /* spare list */
	struct dma_chunk *all;	 /* sp->chunks */
};

static _Atomic uint64_t stream_gen;

void dma_stream_init(struct dma_space *sp, bool on)
{
	struct pt_slots *probe;
	uint64_t span, chunks;

	/* Relaxed: uniqueness is all that matters. */
	sp->gen = atomic_fetch_add_explicit(&stream_gen, 1, memory_order_relaxed) + 1;
	pthread_mutex_init(&sp->chunk_lock, NULL);
	sp->cspan = 0;
	if (!on)
		return;
	/* The last-level table's span, from a probe of the format (no table is made). */
	probe = pt_slots_create(sp->pt, sp->first, 1);
	if (!probe)
		return; /* not a format with granule leaves at the last level */
	span = probe->tmask + 1 ? probe->tmask + 1 : UINT64_MAX;
	pt_slots_destroy(probe);
	if (span > DMA_STREAM_SPAN_MAX)
		span = DMA_STREAM_SPAN_MAX;
	chunks = (((sp->limit - sp->first) >> sp->gshift) + 1) / span; /* in the device's reach */
	if (!dg_is_pow2(span) || span < 2 || ((sp->first >> sp->gshift) & (span - 1)) ||
	    chunks < DMA_STREAM_MIN_CHUNKS)
		return;
	sp->cspan = (uint32_t)span;
	sp->cmax = (uint32_t)(chunks / DMA_STREAM_SHARE < UINT32_MAX ? chunks / DMA_STREAM_SHARE :
								       UINT32_MAX);
}

static void chunk_free(struct dma_space *sp, struct dma_chunk *c, bool give_iova)
{
	if (give_iova)
		dg_iova_free(sp->iova, c->iova, (uint64_t)sp->cspan << sp->gshift);
	pt_slots_destroy(c->slots); /* the table stays linked: an empty table is a valid tree */
	free(c);
}

void dma_stream_fini(struct dma_space *sp)
{
	struct dma_chunk *c, *next;

	for (c = sp->chunks; c; c = next) {
		next = c->all;
		chunk_free(sp, c, false); /* the allocator dies with the space */
	}
	sp->chunks = NULL;
	sp->spare = NULL;
	pthread_mutex_destroy(&sp->chunk_lock);
}

/* Take @c off sp->chunks (chunk_lock held). */
static void unlink_chunk(struct dma_space *sp, struct dma_chunk *c)
{
	struct dma_chunk **pc;

	for (pc = &sp->chunks; *pc != c; pc = &(*pc)->all)
		;
	*pc = c->all;
	sp->nchunks--;
}

/* A new chunk from the allocator, its table present and its records' leaf made. */
static struct dma_chunk *chunk_new(struct dma_space *sp)
{
	const uint64_t bytes = (uint64_t)sp->cspan << sp->gshift;
	_Atomic uint64_t *table;
	struct dma_chunk *c;
	uint64_t iova;

	if (dg_iova_alloc(sp->iova, bytes, sp->limit, 0, &iova))
		return NULL;
	c = aligned_alloc(64, sizeof(*c));
	if (!c)
		goto fail_iova;
	*c = (struct dma_chunk){.iova = iova};
	c->slots = pt_slots_create(sp->pt, iova, sp->cspan);
	if (!c->slots)
		goto fail_c;
	/* naturally aligned (the allocator's default): one table, one record leaf */
	if ((iova & (bytes - 1)) || pt_slots_table(c->slots, 0, &table))
		goto fail_slots;
	c->pte0 = table + (c->slots->lo & c->slots->tmask);
	c->rec0 = dma_rec_in(&sp->rec, iova, (iova - sp->first) >> sp->gshift, true);
	if (!c->rec0)
		goto fail_slots;
	c->live0 = dma_rec_live(c->rec0, (iova - sp->first) >> sp->gshift);
	c->lbit0 = (uint32_t)(((iova - sp->first) >> sp->gshift) & 63);
	/* Every record's IOVA bytes and token, once for the chunk's life (a map writes w1 and
	 * w0 only: stream_rec_write). Relaxed: the range is ours alone; a map's release OR of
	 * the bit publishes them to claimers (the chunk reaches other threads' streams through
	 * chunk_lock). */
	for (uint32_t i = 0; i < sp->cspan; i++) {
		atomic_store_explicit(&c->rec0[i].w2, sp->granule, memory_order_relaxed);
		atomic_store_explicit(&c->rec0[i].w3, (uintptr_t)c | DMA_TOKEN_STREAM,
				      memory_order_relaxed);
	}
	return c;
fail_slots:
	pt_slots_destroy(c->slots);
fail_c:
	free(c);
fail_iova:
	dg_iova_free(sp->iova, iova, bytes);
	return NULL;
}

/* Count a chunk taken (chunk_lock held): the lock makes its holder the one writer, so a
 * relaxed load and store, not a locked add (the readers - tests, stats - load it). */
static void chunk_gets_inc(struct dma_space *sp)
{
	atomic_store_explicit(&sp->chunk_gets,
			      atomic_load_explicit(&sp->chunk_gets, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* A chunk for a stream: a spare one, else a new one. */
static struct dma_chunk *chunk_get(struct dma_space *sp)
{
	struct dma_chunk *c;

	struct dma_chunk *surplus = NULL, *x;
	bool full;

	pthread_mutex_lock(&sp->chunk_lock);
	c = sp->spare;
	if (c) {
		sp->spare = c->next;
		sp->nspare--;
		chunk_gets_inc(sp);
	}
	while (sp->nspare > DMA_STREAM_SPARE_MAX) { /* more than streams will want */
		x = sp->spare;
		sp->spare = x->next;
		sp->nspare--;
		unlink_chunk(sp, x);
		x->next = surplus;
		surplus = x;
	}
	/* a soft cap: racing gets may pass it by one each */
	full = !c && sp->nchunks >= sp->cmax;
	pthread_mutex_unlock(&sp->chunk_lock);
	while (surplus) {
		x = surplus;
		surplus = x->next;
		chunk_free(sp, x, true);
	}
	if (!c) {
		if (full)
			return NULL; /* streams hold their share: the allocator path */
		c = chunk_new(sp);
		if (!c)
			return NULL;
		pthread_mutex_lock(&sp->chunk_lock);
		c->all = sp->chunks;
		sp->chunks = c;
		sp->nchunks++;
		chunk_gets_inc(sp);
		pthread_mutex_unlock(&sp->chunk_lock);
	}
	/* Relaxed: whoever made it spare did so under chunk_lock after the add that completed
	 * it; our lock above orders everything before (no add can come: all retired). */
	atomic_store_explicit(&c->retired, 0, memory_order_relaxed);
	return c;
}

/* Every granule of @c is retired: spare it. Never calls the allocator (a batch end may be
 * inside its thread cache): chunk_get() gives surplus spares back. */
static void chunk_put(struct dma_space *sp, struct dma_chunk *c)
{
	pthread_mutex_lock(&sp->chunk_lock);
	c->next = sp->spare;
	sp->spare = c;
	sp->nspare++;
	pthread_mutex_unlock(&sp->chunk_lock);
}

void dma_stream_retire(struct dma_space *sp, uint64_t token, uint64_t k)
{
	struct dma_chunk *c = (struct dma_chunk *)(uintptr_t)(token & ~DMA_TOKEN_STREAM);

	/* Acq_rel: release orders this thread's completed wait (and PTE clears) before the
	 * add; acquire makes the adder that completes the chunk see every other adder's. */
	if (atomic_fetch_add_explicit(&c->retired, k, memory_order_acq_rel) + k == sp->cspan)
		chunk_put(sp, c);
}

/* Leave the current chunk: its unused rest [cur, end) was never mapped, retired now. */
static void stream_leave(struct dma_space *sp, struct dma_stream *s)
{
	struct dma_chunk *c = s->c;
	const uint32_t rest = s->end - s->cur;

	s->gen = 0;
	s->c = NULL;
	s->cur = s->end = 0;
	if (rest)
		dma_stream_retire(sp, (uintptr_t)c | DMA_TOKEN_STREAM, rest);
}

/* A chunk with room for @n: 0, or -ENOSPC with the stream empty (the caller steps aside). */
static dg_noinline int stream_refill(struct dma_space *sp, struct dma_stream *s, unsigned int n)
{
	struct dma_chunk *c;

	if (s->gen == sp->gen)
		stream_leave(sp, s);
	else
		*s = (struct dma_stream){.backoff = s->backoff}; /* another space's: forget it */
	if (!sp->cspan || n > sp->cspan)
		return -ENOSPC;
	if (s->backoff) {
		s->backoff--;
		return -ENOSPC;
	}
	c = chunk_get(sp);
	if (!c) {
		s->backoff = DMA_STREAM_BACKOFF;
		return -ENOSPC;
	}
	s->c = c;
	s->cur = 0;
	s->end = sp->cspan;
	s->gen = sp->gen;
	return 0;
}

/* A stream mapping's record: its length, then w0. Its IOVA bytes (a granule) and token (its
 * chunk's) were written when the chunk was made (chunk_new) and stay: nothing else writes a
 * record inside a held chunk. */
static dg_always_inline void stream_rec_write(struct dma_rec *rec, uint64_t len, uint64_t w0)
{
	atomic_store_explicit(&rec->w1, len, memory_order_relaxed);
	/* Release pairs with the acquire load in xl_check() (map.c): w1..w3 are visible. */
	atomic_store_explicit(&rec->w0, w0, memory_order_release);
}

/* The stores of dma_stream_map(): the entry (output address, the high part of a 52-bit one
 * moved, the template), the record and the address, per buffer. Inline twice: with the
 * output-address masks the caller proved to change nothing, and with the format's. */
static dg_always_inline void stream_fill(_Atomic uint64_t *pte, struct dma_rec *rec,
					 void *const *bufs, unsigned int n, uint64_t len,
					 uint64_t g, uint64_t iova, uint64_t tmpl, uint64_t oam,
					 uint64_t ohm, uint64_t w0, uint64_t *dma)
{
	const uint64_t gm = g - 1;

#pragma GCC unroll 4
	for (size_t i = 0; i < n; i++, iova += g) {
		const uint64_t a = (uintptr_t)bufs[i], off = a & gm, p = a - off;

		/* Release: pairs with the acquire loads of walkers (as in pt_map_va). The entry
		 * is clear: see the preamble. */
		atomic_store_explicit(&pte[i], (p & oam) | ((p >> 36) & ohm) | tmpl,
				      memory_order_release);
		stream_rec_write(&rec[i], len, w0 | off);
		dma[i] = iova + off;
	}
}

/* Ask for the cache lines of the @n entries from @pte for writing (prefetchw: the request
 * for ownership of a line the device's core read starts now, not when the store buffer
 * reaches the store; a hint, no fault, no ordering). */
static dg_always_inline void pte_prefetchw(const _Atomic uint64_t *pte, unsigned int n)
{
	const uintptr_t end = (uintptr_t)(pte + n);

	for (uintptr_t l = (uintptr_t)pte & ~(uintptr_t)(DG_CACHELINE - 1); l < end;
	     l += DG_CACHELINE) {
#if defined(__x86_64__) || defined(__i386__)
		__asm__ volatile("prefetchw %0" : : "m"(*(const char *)l));
#else
		__builtin_prefetch((const void *)l, 1, 3);
#endif
	}
}

/* Make the @n mapped granules from @cur of @c claimable: set their live bits, one atomic OR
 * per bitmap word (a ring's refill: one or two). */
static dg_always_inline void live_set(const struct dma_chunk *c, uint64_t cur, uint64_t n)
{
	uint64_t b = c->lbit0 + cur;

	while (n) {
		const uint64_t s = b & 63, k = n < 64 - s ? n : 64 - s;
		const uint64_t m = (k == 64 ? ~0ull : (1ull << k) - 1) << s;

		/* Release pairs with the acquire AND of a claim (map.c: xl_claim, claim_bulk):
		 * the entries and records written before are visible to whoever claims. */
		atomic_fetch_or_explicit(c->live0 + (b >> 6), m, memory_order_release);
		b += k;
		n -= k;
	}
}

int dma_stream_map(struct dma_space *sp, struct dma_tstats *t, void *const *bufs, uint64_t pbits,
		   unsigned int n, size_t len, enum dg_dma_dir dir, enum dma_kind kind,
		   uint64_t *dma)
{
	struct dma_stream *s = &t->st[dir];
	const struct pt_slots *sl;
	struct dma_chunk *c;

	if (dg_unlikely(s->gen != sp->gen || s->end - s->cur < n) && stream_refill(sp, s, n))
		return 1;
	c = s->c;
	sl = c->slots;
	/* oa_limit is a power of two: some address at or above it has a bit there */
	if (dg_unlikely(pbits >= sl->oa_limit))
		return 1; /* the allocator path says -ERANGE */
	const uint64_t g = sp->granule, gm = sp->gmask, cur = s->cur;
	const uint64_t tmpl = sl->tmpl[dma_dir_prot(dir)], oam = sl->oa_mask, ohm = sl->oa_hi_mask;
	const uint64_t w0 = rec_w0(kind, dir, 0, 0) | REC_STREAM;
	_Atomic uint64_t *pte = c->pte0 + cur;
	struct dma_rec *rec = c->rec0 + cur;
	const uint64_t iova = c->iova + (cur << sp->gshift);

	/* the address bits the buffers can have (every aligned address up to pbits' top bit) */
	const uint64_t span = pbits ? (~0ull >> __builtin_clzll(pbits)) & ~gm : 0;

	pte_prefetchw(pte, n);
	if (dg_likely(!(span & ~oam) && !((span >> 36) & ohm)))
		/* every one of them is its own output-address bits (VT-d's mask reaches bit 51,
		 * LPAE's PA[51:48] move only for addresses that high) */
		stream_fill(pte, rec, bufs, n, len, g, iova, tmpl, UINT64_MAX, 0, w0, dma);
	else
		stream_fill(pte, rec, bufs, n, len, g, iova, tmpl, oam, ohm, w0, dma);
	live_set(c, cur, n);
	s->cur = (uint32_t)(cur + n);
	return 0;
}

int dma_stream_map_one(struct dma_space *sp, struct dma_tstats *t, uintptr_t buf, size_t len,
		       enum dg_dma_dir dir, enum dma_kind kind, uint64_t *dma)
{
	struct dma_stream *s = &t->st[dir];
	const uint64_t gm = sp->gmask, pa = buf & ~gm, off = buf & gm;
	const struct pt_slots *sl;
	struct dma_chunk *c;
	uint32_t cur;

	if (dg_unlikely(s->gen != sp->gen || s->cur == s->end) && stream_refill(sp, s, 1))
		return 1;
	c = s->c;
	sl = c->slots;
	if (dg_unlikely(pa >= sl->oa_limit))
		return 1; /* the allocator path says -ERANGE */
	cur = s->cur;
	/* Release: pairs with the acquire loads of walkers (as in pt_map_va). The entry is
	 * clear: see the preamble. */
	atomic_store_explicit(&c->pte0[cur],
			      (pa & sl->oa_mask) | ((pa >> 36) & sl->oa_hi_mask) |
				      sl->tmpl[dma_dir_prot(dir)],
			      memory_order_release);
	/* no REC_STREAM, no live bit: claimed by the record's CAS (see the preamble) */
	stream_rec_write(&c->rec0[cur], len, rec_w0(kind, dir, 0, off));
	*dma = c->iova + ((uint64_t)cur << sp->gshift) + off;
	s->cur = cur + 1;
	return 0;
}

bool dma_stream_drain(struct dma_space *sp, struct dma_tstats *t)
{
	struct dma_chunk *list, *c;
	bool any = false;

	if (!sp->cspan)
		return false;
	for (unsigned int d = 0; d < DMA_STREAM_DIRS; d++) {
		if (t->st[d].gen == sp->gen)
			stream_leave(sp, &t->st[d]);   /* may complete the chunk: spare, given back
						      * below */
		t->st[d].backoff = DMA_STREAM_BACKOFF; /* do not take a chunk straight back */
	}
	pthread_mutex_lock(&sp->chunk_lock);
	list = sp->spare;
	sp->spare = NULL;
	sp->nspare = 0;
	for (c = list; c; c = c->next)
		unlink_chunk(sp, c);
	pthread_mutex_unlock(&sp->chunk_lock);
	while (list) {
		c = list;
		list = c->next;
		chunk_free(sp, c, true);
		any = true;
	}
	return any;
}

int dma_stream_check(struct dma_space *sp, FILE *why)
{
	uint32_t n = 0, ns = 0;
	int r = 0;

	pthread_mutex_lock(&sp->chunk_lock);
	for (struct dma_chunk *c = sp->chunks; c && !r; c = c->all) {
		n++;
		r = pt_slots_check(c->slots, why); /* the kept table is still linked */
		/* a granule's live bit is set exactly while its record is a stream mapping's (the
		 * device quiet: no claim between the two); spare chunks: every bit clear */
		for (uint32_t i = 0; i < sp->cspan && !r; i++) {
			const uint64_t b = c->lbit0 + i;
			/* Relaxed: the device is quiet (the caller's contract). */
			const bool live =
				atomic_load_explicit(c->live0 + (b >> 6), memory_order_relaxed) >>
					(b & 63) &
				1;
			const uint64_t w0 =
				atomic_load_explicit(&c->rec0[i].w0, memory_order_relaxed);

			if (atomic_load_explicit(&c->rec0[i].w2, memory_order_relaxed) !=
				    sp->granule ||
			    atomic_load_explicit(&c->rec0[i].w3, memory_order_relaxed) !=
				    ((uintptr_t)c | DMA_TOKEN_STREAM)) {
				if (why)
					fprintf(why,
						"stream granule %#" PRIx64 ": record size/token\n",
						c->iova + ((uint64_t)i << sp->gshift));
				r = -EUCLEAN;
			} else if (live !=
				   ((w0 & (REC_VALID | REC_STREAM)) == (REC_VALID | REC_STREAM))) {
				if (why)
					fprintf(why,
						"stream granule %#" PRIx64
						": live bit %d, record %#" PRIx64 "\n",
						c->iova + ((uint64_t)i << sp->gshift), live, w0);
				r = -EUCLEAN;
			}
		}
	}
	for (struct dma_chunk *c = sp->spare; c && !r; c = c->next) {
		ns++;
		/* Relaxed: every add happened before the put, which our lock follows. */
		if (atomic_load_explicit(&c->retired, memory_order_relaxed) != sp->cspan)
			r = -EUCLEAN;
		for (uint32_t i = 0; i < sp->cspan && !r; i++)
			if (atomic_load_explicit(&c->pte0[i], memory_order_relaxed) ||
			    atomic_load_explicit(&c->rec0[i].w0, memory_order_relaxed))
				r = -EUCLEAN;
		if (r && why)
			fprintf(why, "spare stream chunk %#" PRIx64 " not clear\n", c->iova);
	}
	if (!r && (n != sp->nchunks || ns != sp->nspare)) {
		if (why)
			fprintf(why, "stream chunk lists: %u/%u held, %u/%u spare\n", n,
				sp->nchunks, ns, sp->nspare);
		r = -EUCLEAN;
	}
	pthread_mutex_unlock(&sp->chunk_lock);
	return r;
}

void dma_stream_clear(struct dma_space *sp, uint64_t token, uint64_t iova, uint32_t n)
{
	const struct dma_chunk *c =
		(const struct dma_chunk *)(uintptr_t)(token & ~DMA_TOKEN_STREAM);
	_Atomic uint64_t *pte = c->pte0 + ((iova - c->iova) >> sp->gshift);

#pragma GCC unroll 4
	for (uint32_t i = 0; i < n; i++)
		/* Relaxed: as in pt_unmap_va (the batch end invalidates; a last-level entry is
		 * a leaf). */
		atomic_store_explicit(&pte[i], 0, memory_order_relaxed);
}

/*
 * No chunk check here (session 13; it was `iova < c->iova || first + n > cspan`, and no test
 * could make it refuse): the caller's run is inside the chunk of @token by construction.
 * unmap_bulk_strict() calls this only for a claimed run (claim_bulk's *run: entry i + 1 is
 * entry i's next granule) whose first and last entries both carry the stream token of @c.
 *  1. A claimed record's w3 is the token of the mapping claimed: w0 is made live only by
 *     dma_rec_write() (which writes w3 first: an allocator token, bit 0 clear), by
 *     stream_rec_write() for a granule of the stream's own held chunk (whose w3 chunk_new()
 *     wrote, and nothing rewrites while the chunk is held), or by a claim's give-back
 *     (claim_undo, undo_group: a mapping live all along, its w3 unchanged).
 *  2. So a claimed record with a stream token (c | DMA_TOKEN_STREAM) is a granule of c's
 *     range [c->iova, c->iova + cspan granules): chunk_new() writes that token into exactly
 *     those records, and a token of a freed chunk whose struct address is reused names the
 *     new chunk's records only (an allocator mapping in the old range writes its own w3).
 *  3. The run's first granule is in c, and its last one, first + (n - 1) granules (no wrap:
 *     n <= DG_DMA_BULK_MAX granules cannot go round 2^64 and land in a chunk again), is in
 *     c too: iova >= c->iova and first + n <= cspan.
 * Debug builds (the ASan test suite) still assert it. Lazy's flush queue (lazy.c) still asks
 * dma_stream_within() of its runs; the same argument holds there (the same claim), left as it
 * is.
 */
void dma_stream_run(struct dma_space *sp, uint64_t token, uint64_t iova, uint32_t n)
{
	const struct dma_chunk *c =
		(const struct dma_chunk *)(uintptr_t)(token & ~DMA_TOKEN_STREAM);

	assert(dma_stream_within(sp, token, iova, n));
	pte_prefetchw(c->pte0 + ((iova - c->iova) >> sp->gshift), n);
}

bool dma_stream_within(struct dma_space *sp, uint64_t token, uint64_t iova, uint32_t n)
{
	const struct dma_chunk *c =
		(const struct dma_chunk *)(uintptr_t)(token & ~DMA_TOKEN_STREAM);

	return iova >= c->iova && ((iova - c->iova) >> sp->gshift) + n <= sp->cspan;
}

unsigned int dma_stream_census(struct dma_space *sp, struct dma_stream_chunk *out, unsigned int max)
{
	unsigned int n = 0;

	pthread_mutex_lock(&sp->chunk_lock);
	for (struct dma_chunk *c = sp->chunks; c; c = c->all) {
		bool spare = false;

		for (const struct dma_chunk *x = sp->spare; x && !spare; x = x->next)
			spare = x == c;
		if (n < max)
			/* Relaxed: the device is quiet (the caller's contract). */
			out[n] = (struct dma_stream_chunk){
				.token = (uintptr_t)c | DMA_TOKEN_STREAM,
				.iova = c->iova,
				.retired = atomic_load_explicit(&c->retired, memory_order_relaxed),
				.spare = spare,
			};
		n++;
	}
	pthread_mutex_unlock(&sp->chunk_lock);
	return n;
}
