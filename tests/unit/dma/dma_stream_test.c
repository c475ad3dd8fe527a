/* SPDX-License-Identifier: MIT */
/*
 * Streams (src/dma/stream.c): strict's one-granule maps (bulk and single calls) handed out in
 * order from per-thread chunks with kept tables, retired per chunk at the batch end.
 *
 *  - test_order: a ring's refills come out ascending from one chunk-aligned chunk; the device
 *    reaches every mapping and, after the batch end, faults on every unmapped address it had
 *    cached; the kept tables stay linked (dg_dma_dev_check -> pt_slots_check).
 *  - test_model: a reference model over random steps - bulk and single maps of random sizes
 *    and directions, unmaps in random orders and pieces, by bulk and single calls, in batches
 *    (submitted early or not), without a batch, on another thread (with its own batch or
 *    this one's), long-lived pins, refused calls with an exact error and nothing changed:
 *    no IOVA is handed out while it is mapped or while its unmap's invalidation is not
 *    complete (the batch not ended), and the device faults on each unmapped address once the
 *    batch ended.
 *  - test_bad_entry: a bulk unmap with one bad entry is refused with its exact error and
 *    leaves every other mapping live (record, live bit, reachable), under strict and lazy.
 *  - test_run_entries: a bulk unmap's stream run puts only its two ends in the batch; every
 *    batch-end way that reads the entries between writes them first, and a bulk unmap that is
 *    no such run writes them at once (ent[] poisoned with a live mapping's entry).
 *  - test_fill_oa: the map's entries carry the format's output-address encoding, low and
 *    high (above 2^48) addresses, VT-d and LPAE (the map's short and general loops).
 *  - test_dir_streams: rx and tx maps in turns keep each ring's IOVAs adjacent (a stream
 *    per direction): each ring's reap is one stream run of the batch.
 *  - test_poll_runs: a NIC driver's polls (rx and tx reaps of 1-64 buffers into a batch,
 *    submit, refill, end the previous poll's batch) over several chunks: the device faults on
 *    every buffer of a batch after its end, every granule is retired exactly once (the batch
 *    end's runs way and its general way).
 *  - test_map_odd: a bulk map with one buffer leaving its granule, at any position, maps
 *    every buffer whole; one NULL buffer refuses the call.
 *  - test_exhaust: a small space: chunks pinned by one mapping each until the streams' share
 *    is held, then the allocator path maps on - every granule the streams do not hold - and
 *    once the pins go, spare chunks go back on -ENOSPC so single maps fill the whole space.
 *    Under strict and under lazy (whose unmaps wait in the flush queue: free space too).
 */
#include "dma/dma_internal.h" /* before cmocka.h: it defines fail() */
#include "dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include "../../test_rand.h"

#define PG 4096u

static uint64_t rnd(uint64_t *s)
{
	return xorshift64(s);
}

/* The device reaches @dma (the byte @v there), or faults on it. */
static void reach(struct dg_device *dev, uint64_t dma, enum dg_dma_dir dir, uint8_t v)
{
	uint8_t got = 0;

	if (dir == DG_DMA_FROM_DEVICE) { /* write-only: the device writes what is there */
		assert_int_equal(dg_dev_write(dev, dma, &v, 1), 0);
		return;
	}
	assert_int_equal(dg_dev_read(dev, dma, &got, 1), 0);
	assert_int_equal(got, v);
}

static void faults(struct dg_device *dev, uint64_t dma)
{
	uint8_t v = 0;

	assert_int_equal(dg_dev_read(dev, dma, &v, 1), -EFAULT);
	assert_int_equal(dg_dev_write(dev, dma, &v, 1), -EFAULT);
}

static void test_order(void **state)
{
	enum { N = 32, ROUNDS = 40 };
	uint8_t *mem = page_alloc((size_t)N * PG);
	uint64_t dma[N], chunk = (uint64_t)512 * PG, last = 0;
	void *bufs[N];
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	struct dma_fixture f;

	(void)state;
	assert_non_null(mem);
	for (unsigned int i = 0; i < N; i++) {
		mem[(size_t)i * PG + 64] = (uint8_t)(i + 1);
		bufs[i] = mem + (size_t)i * PG + 64;
	}
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, &dev);
	assert_non_null(dd);
	assert_int_equal(dd->sp->cspan, 512);
	for (unsigned int r = 0; r < ROUNDS; r++) {
		struct dg_dma_batch b;

		assert_int_equal(dg_dma_map_bulk(dd, bufs, N, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
		for (unsigned int i = 0; i < N; i++) {
			assert_int_equal(dma[i] & (PG - 1), 64);
			if (i)
				assert_int_equal(dma[i], dma[i - 1] + PG); /* in order */
			else if (r % (512 / N))
				assert_int_equal(dma[0], last + PG); /* the same chunk goes on */
			else
				assert_int_equal((dma[0] - 64) & (chunk - 1), 0); /* a new chunk */
			reach(dev, dma[i], DG_DMA_TO_DEVICE, (uint8_t)(i + 1));	  /* cached now */
		}
		last = dma[N - 1];
		dg_dma_batch_begin(dd, &b);
		assert_int_equal(dg_dma_unmap_bulk(dd, dma, N, 64, DG_DMA_TO_DEVICE, 0, &b), 0);
		assert_int_equal(dg_dma_batch_end(&b), 0);
		for (unsigned int i = 0; i < N; i++)
			faults(dev, dma[i]);
		assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
	}
	/* 40 refills of 32 take a chunk three times: the same one (wholly retired when its
	 * last refill's batch ended: spare, taken again) */
	assert_int_equal(atomic_load(&dd->sp->chunk_gets), 3);
	assert_int_equal(dd->sp->nchunks, 1);
	assert_int_equal(fixture_faults(&f) > 0, 1);
	fixture_dev_destroy(dd);
	fixture_fini(&f);
	free(mem);
}

/* The live bit of the granule of @dma (map.c's claim of a stream mapping clears it). */
static bool live_bit(struct dg_dma_dev *dd, uint64_t dma)
{
	struct dma_space *sp = dd->sp;
	const uint64_t g = (dma - sp->first) >> sp->gshift;
	struct dma_rec *rec = dma_rec_get(&sp->rec, dma & ~sp->gmask, false);

	assert_non_null(rec);
	return atomic_load(dma_rec_live(rec, g)) >> (g & 63) & 1;
}

/* @dma is a live stream mapping: its record says so and its bit is set. */
static void live_stream(struct dg_dma_dev *dd, uint64_t dma)
{
	struct dma_rec *rec = dma_rec_get(&dd->sp->rec, dma & ~dd->sp->gmask, false);

	assert_non_null(rec);
	assert_true(atomic_load(&rec->w0) & REC_VALID);
	assert_true(atomic_load(&rec->w0) & REC_STREAM);
	assert_true(live_bit(dd, dma));
}

/* @dma is a live mapping of a single call's stream map: claimed by the record's CAS, so no
 * REC_STREAM and no live bit. */
static void live_single(struct dg_dma_dev *dd, uint64_t dma)
{
	struct dma_rec *rec = dma_rec_get(&dd->sp->rec, dma & ~dd->sp->gmask, false);

	assert_non_null(rec);
	assert_true(atomic_load(&rec->w0) & REC_VALID);
	assert_false(atomic_load(&rec->w0) & REC_STREAM);
	assert_false(live_bit(dd, dma));
}

/*
 * test_bad_entry: a bulk unmap (strict's batch, strict without one, lazy) of a ring's reap
 * with one bad entry - already unmapped, mapped with the other direction, an address given
 * twice, outside the space, a wrapping one (-ERANGE over any other error), or the wrong
 * length for all - at the start, in the middle (across a bitmap word) or at the end, is
 * refused with its exact error, nothing enters the batch, and every other mapping stays
 * live: record, live bit, the device reaches it. Then the reap without the bad entry goes
 * through and (strict) the device faults on each after the batch end.
 */
static void test_bad_entry(void **state)
{
	const enum dg_dma_policy pol = *(const enum dg_dma_policy *)*state;
	enum { N = 80 };
	uint8_t *mem = page_alloc((size_t)(N + 2) * PG);
	uint64_t dma[N], v[N + 1], gone, other;
	void *bufs[N];
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	struct dma_fixture f;

	assert_non_null(mem);
	for (unsigned int i = 0; i < N + 2; i++)
		mem[(size_t)i * PG + 64] = (uint8_t)(i + 1);
	for (unsigned int i = 0; i < N; i++)
		bufs[i] = mem + (size_t)i * PG + 64;
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dd = fixture_idle_dev(&f, 1, pol, false, &dev);
	assert_non_null(dd);
	assert_int_equal(dg_dma_map_single(dd, mem + (size_t)N * PG + 64, 64, DG_DMA_TO_DEVICE, 0,
					   &gone),
			 0);
	assert_int_equal(dg_dma_unmap_single(dd, gone, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	bufs[0] = mem + (size_t)(N + 1) * PG + 64; /* a bulk map of one: a bit mapping */
	assert_int_equal(dg_dma_map_bulk(dd, bufs, 1, 64, DG_DMA_FROM_DEVICE, 0, &other), 0);
	bufs[0] = mem + 64;
	assert_int_equal(dg_dma_map_bulk(dd, bufs, N, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
	for (unsigned int i = 0; i < N; i++) {
		assert_int_equal(dma[i], dma[0] + (uint64_t)i * PG); /* a run of the stream */
		live_stream(dd, dma[i]);
	}
	for (unsigned int kind = 0; kind < 6; kind++) {
		static const unsigned int at[] = {0, 1, N / 2, 63, N - 1, N};

		for (unsigned int p = 0; p < sizeof(at) / sizeof(at[0]); p++) {
			const unsigned int pos = at[p];
			unsigned int n = N, len = 64;
			int want = -ENOENT;
			struct dg_dma_batch b;

			for (unsigned int j = 0, k = 0; j <= N; j++) /* bad entry inserted at pos */
				v[j] = j == pos ? 0 : dma[k++];
			n = N + 1;
			switch (kind) {
			case 0: /* already unmapped */
				v[pos] = gone;
				break;
			case 1: /* the other direction */
				v[pos] = other;
				want = -EINVAL;
				break;
			case 2: /* given twice */
				v[pos] = dma[pos ? pos - 1 : 0];
				break;
			case 3: /* outside the space */
				v[pos] = 0x1000;
				break;
			case 4: /* a wrapping one, after an entry of the other direction */
				v[pos] = UINT64_MAX - 8;
				if (pos)
					v[0] = other;
				want = -ERANGE;
				break;
			default: /* the wrong length for all (no bad entry) */
				for (unsigned int j = 0; j < N; j++)
					v[j] = dma[j];
				n = N;
				len = 65;
				want = -EINVAL;
				break;
			}
			dg_dma_batch_begin(dd, &b);
			assert_int_equal(dg_dma_unmap_bulk(dd, v, n, len, DG_DMA_TO_DEVICE, 0,
							   pol == DG_DMA_STRICT && p % 2 ? NULL :
											   &b),
					 want);
			assert_int_equal(b.n, 0);
			assert_int_equal(dg_dma_batch_end(&b), 0);
			for (unsigned int i = 0; i < N; i++) {
				live_stream(dd, dma[i]);
				reach(dev, dma[i], DG_DMA_TO_DEVICE, (uint8_t)(i + 1));
			}
			live_stream(dd, other);
			assert_false(live_bit(dd, gone));
			assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
		}
	}
	{
		/* inside a run of adjacent granules: one already unmapped (its bit clear: the
		 * word's AND gets fewer bits than it asked for), then one of the other direction
		 * (the face checked after the claim) - the bits and records given back */
		enum { M = 12 };
		uint64_t w[M];

		/* bulk maps (bit mappings): 9 to the device, 1 from it, 2 to it - adjacent. A
		 * thread's streams are one per direction (stream.c), so the one from the device
		 * lands inside the run only where its stream took a chunk another direction's
		 * stream used before; made here by giving w[9] the other direction's face and
		 * entry (the device never reached it: nothing cached to invalidate) */
		assert_int_equal(dg_dma_map_bulk(dd, bufs, 12, 64, DG_DMA_TO_DEVICE, 0, w), 0);
		for (unsigned int i = 1; i < M; i++)
			assert_int_equal(w[i], w[i - 1] + PG);
		{
			struct dma_rec *r9 =
				dma_rec_get(&dd->sp->rec, w[9] & ~dd->sp->gmask, false);
			struct dg_pt *pt = dg_domain_pt(dg_dma_dev_domain(dd));
			struct dg_pt_gather gth;
			uint64_t unmapped = 0;

			assert_non_null(r9);
			dg_pt_gather_init(&gth);
			assert_int_equal(dg_pt_unmap(pt, w[9] & ~(uint64_t)(PG - 1), PG, &gth,
						     &unmapped),
					 0);
			assert_int_equal(unmapped, PG);
			assert_int_equal(gth.nr_tables, 0); /* the kept table stays */
			assert_int_equal(dg_pt_map(pt, w[9] & ~(uint64_t)(PG - 1),
						   (uintptr_t)(mem + (size_t)9 * PG), PG,
						   DG_PROT_WRITE, &gth),
					 0);
			assert_int_equal(gth.nr_tables, 0);
			assert_int_equal(atomic_load(&r9->w0),
					 rec_w0(KIND_SINGLE, DG_DMA_TO_DEVICE, 0, 64) | REC_STREAM);
			atomic_store(&r9->w0,
				     rec_w0(KIND_SINGLE, DG_DMA_FROM_DEVICE, 0, 64) | REC_STREAM);
		}
		assert_int_equal(dg_dma_unmap_single(dd, w[5], 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_int_equal(dg_dma_unmap_bulk(dd, w, M, 64, DG_DMA_TO_DEVICE, 0, NULL),
				 -ENOENT);
		for (unsigned int i = 0; i < M; i++)
			if (i != 5)
				live_stream(dd, w[i]);
		assert_int_equal(dg_dma_unmap_bulk(dd, w + 6, M - 6, 64, DG_DMA_TO_DEVICE, 0, NULL),
				 -EINVAL);
		for (unsigned int i = 0; i < M; i++)
			if (i != 5)
				live_stream(dd, w[i]);
		assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
		assert_int_equal(dg_dma_unmap_bulk(dd, w, 5, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_int_equal(dg_dma_unmap_bulk(dd, w + 6, 3, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_int_equal(dg_dma_unmap_single(dd, w[9], 64, DG_DMA_FROM_DEVICE, 0, NULL), 0);
		assert_int_equal(dg_dma_unmap_bulk(dd, w + 10, 2, 64, DG_DMA_TO_DEVICE, 0, NULL),
				 0);
	}
	if (pol == DG_DMA_STRICT) {
		struct dg_dma_batch b;

		dg_dma_batch_begin(dd, &b);
		assert_int_equal(dg_dma_unmap_bulk(dd, dma, N, 64, DG_DMA_TO_DEVICE, 0, &b), 0);
		assert_int_equal(dg_dma_batch_end(&b), 0);
		for (unsigned int i = 0; i < N; i++)
			faults(dev, dma[i]);
	} else {
		assert_int_equal(dg_dma_unmap_bulk(dd, dma, N, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	}
	for (unsigned int i = 0; i < N; i++) {
		assert_false(live_bit(dd, dma[i]));
		/* a second unmap, by either call: refused */
		assert_int_equal(dg_dma_unmap_single(dd, dma[i], 64, DG_DMA_TO_DEVICE, 0, NULL),
				 -ENOENT);
	}
	assert_int_equal(dg_dma_unmap_bulk(dd, dma, N, 64, DG_DMA_TO_DEVICE, 0, NULL), -ENOENT);
	assert_int_equal(dg_dma_unmap_single(dd, other, 64, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
	fixture_dev_destroy(dd);
	fixture_fini(&f);
	free(mem);
}

/* ---- the model ---------------------------------------------------------------------------- */

#define MB    192 /* buffers */
#define STEPS 2500

struct model {
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	uint8_t *mem;
	bool on[MB];
	uint64_t dma[MB];
	enum dg_dma_dir dir[MB];
	bool pin[MB];
	bool bulk[MB]; /* mapped by a bulk call: a bit mapping (else the record's CAS) */
	/* IOVAs unmapped in the open batch (its end not reached): must not come back yet */
	uint64_t pend[DG_DMA_BATCH_MAX];
	unsigned int npend;
	struct dg_dma_batch b;
	bool open;
};

static void *buf_of(struct model *m, unsigned int i)
{
	return m->mem + (size_t)i * PG + (i % 7) * 64;
}

static uint8_t val_of(unsigned int i)
{
	return (uint8_t)(i * 13 + 1);
}

/* A new IOVA is neither mapped nor waiting for its unmap's invalidation. */
static void check_new(struct model *m, uint64_t dma)
{
	const uint64_t g = dma & ~(uint64_t)(PG - 1);

	for (unsigned int i = 0; i < MB; i++)
		if (m->on[i])
			assert_true((m->dma[i] & ~(uint64_t)(PG - 1)) != g);
	for (unsigned int j = 0; j < m->npend; j++)
		assert_true(m->pend[j] != g);
}

static void batch_end(struct model *m)
{
	if (!m->open)
		return;
	assert_int_equal(dg_dma_batch_end(&m->b), 0);
	m->open = false;
	for (unsigned int j = 0; j < m->npend; j++)
		faults(m->dev, m->pend[j]); /* cached before its unmap, unreachable now */
	m->npend = 0;
}

static void batch_open(struct model *m)
{
	if (m->open)
		return;
	dg_dma_batch_begin(m->dd, &m->b);
	m->open = true;
}

struct xunmap {
	struct dg_dma_dev *dd;
	const uint64_t *dma;
	unsigned int n;
	enum dg_dma_dir dir;
	struct dg_dma_batch *b; /* NULL: its own */
	int r;
};

static void *xunmap_main(void *arg)
{
	struct xunmap *x = arg;
	struct dg_dma_batch own;

	if (x->b) {
		x->r = dg_dma_unmap_bulk(x->dd, x->dma, x->n, 64, x->dir, 0, x->b);
		return NULL;
	}
	dg_dma_batch_begin(x->dd, &own);
	x->r = dg_dma_unmap_bulk(x->dd, x->dma, x->n, 64, x->dir, 0, &own);
	if (!x->r)
		x->r = dg_dma_batch_end(&own);
	else
		dg_dma_batch_end(&own);
	return NULL;
}

static void model_map(struct model *m, uint64_t *seed)
{
	static const enum dg_dma_dir dirs[3] = {DG_DMA_TO_DEVICE, DG_DMA_FROM_DEVICE,
						DG_DMA_BIDIRECTIONAL};
	const enum dg_dma_dir dir = dirs[rnd(seed) % 3];
	const unsigned int want = 1 + (unsigned int)(rnd(seed) % 48);
	unsigned int idx[MB], n = 0;
	void *bufs[MB];
	uint64_t dma[MB];

	for (unsigned int j = 0, i = (unsigned int)(rnd(seed) % MB); j < MB && n < want;
	     j++, i = (i + 1) % MB)
		if (!m->on[i]) {
			idx[n] = i;
			bufs[n++] = buf_of(m, i);
		}
	if (!n)
		return;
	if (n > 1 && rnd(seed) % 16 == 0) { /* a bad buffer: -EINVAL, nothing mapped */
		void *keep = bufs[n / 2];

		bufs[n / 2] = NULL;
		assert_int_equal(dg_dma_map_bulk(m->dd, bufs, n, 64, dir, 0, dma), -EINVAL);
		bufs[n / 2] = keep;
	}
	const bool bulk = rnd(seed) % 4 != 0;

	if (!bulk) /* single calls: the stream too */
		for (unsigned int j = 0; j < n; j++)
			assert_int_equal(dg_dma_map_single(m->dd, bufs[j], 64, dir, 0, &dma[j]), 0);
	else
		assert_int_equal(dg_dma_map_bulk(m->dd, bufs, n, 64, dir, 0, dma), 0);
	for (unsigned int j = 0; j < n; j++) {
		const unsigned int i = idx[j];

		check_new(m, dma[j]);
		m->on[i] = true;
		m->dma[i] = dma[j];
		m->dir[i] = dir;
		m->bulk[i] = bulk;
		m->pin[i] = rnd(seed) % 24 == 0; /* long-lived */
		reach(m->dev, dma[j], dir, val_of(i));
	}
}

static void model_unmap(struct model *m, uint64_t *seed)
{
	const unsigned int want = 1 + (unsigned int)(rnd(seed) % 40);
	const enum dg_dma_dir dir = (enum dg_dma_dir)(rnd(seed) % 3);
	const unsigned int how = (unsigned int)(rnd(seed) % 8);
	unsigned int idx[MB], n = 0;
	uint64_t dma[MB];

	/* a piece of one direction: ascending from a random start (a reap) or shuffled */
	for (unsigned int j = 0, i = (unsigned int)(rnd(seed) % MB); j < MB && n < want;
	     j++, i = (i + 1) % MB)
		if (m->on[i] && m->dir[i] == dir && (!m->pin[i] || rnd(seed) % 64 == 0))
			idx[n++] = i;
	if (!n)
		return;
	if (rnd(seed) % 2) /* address order, as a ring's reap */
		for (unsigned int a = 1; a < n; a++)
			for (unsigned int c = a; c > 0 && m->dma[idx[c]] < m->dma[idx[c - 1]];
			     c--) {
				unsigned int t = idx[c];

				idx[c] = idx[c - 1];
				idx[c - 1] = t;
			}
	else
		for (unsigned int a = n; a > 1; a--) {
			unsigned int c = (unsigned int)(rnd(seed) % a), t = idx[a - 1];

			idx[a - 1] = idx[c];
			idx[c] = t;
		}
	for (unsigned int j = 0; j < n; j++) {
		dma[j] = m->dma[idx[j]];
		reach(m->dev, dma[j], dir, val_of(idx[j])); /* cached */
	}
	if (rnd(seed) % 12 == 0) { /* refused calls: exact errors, nothing changed */
		uint64_t bad[MB + 1];
		const unsigned int at = (unsigned int)(rnd(seed) % (n + 1));
		const enum dg_dma_dir other = (enum dg_dma_dir)((dir + 1) % 3);

		assert_int_equal(dg_dma_unmap_bulk(m->dd, dma, n, 64, other, 0, NULL), -EINVAL);
		assert_int_equal(dg_dma_unmap_bulk(m->dd, dma, n, 128, dir, 0, NULL), -EINVAL);
		for (unsigned int j = 0, k = 0; j <= n; j++)
			bad[j] = j == at ? (m->npend ? m->pend[0] + 64 : 0x7000000040ull) :
					   dma[k++];
		assert_int_equal(dg_dma_unmap_bulk(m->dd, bad, n + 1, 64, dir, 0, NULL), -ENOENT);
		if (n > 1) { /* an address given twice */
			for (unsigned int j = 0; j < n; j++)
				bad[j] = dma[j];
			bad[n] = dma[at % n];
			assert_int_equal(dg_dma_unmap_bulk(m->dd, bad, n + 1, 64, dir, 0, NULL),
					 -ENOENT);
		}
		for (unsigned int j = 0; j < n; j++) { /* still mapped, and claimable */
			reach(m->dev, dma[j], dir, val_of(idx[j]));
			if (m->bulk[idx[j]])
				live_stream(m->dd, dma[j]);
			else
				live_single(m->dd, dma[j]);
		}
	}
	if (how != 0 && how != 2 && m->open && m->b.n + n > DG_DMA_BATCH_MAX)
		batch_end(m); /* a full batch would end early inside the call: end it here */
	if (how == 0) {	      /* no batch: invalidated and given back before returning */
		assert_int_equal(dg_dma_unmap_bulk(m->dd, dma, n, 64, dir, 0, NULL), 0);
		for (unsigned int j = 0; j < n; j++)
			faults(m->dev, dma[j]);
	} else if (how == 1) { /* single calls into the open batch */
		batch_open(m);
		for (unsigned int j = 0; j < n; j++)
			assert_int_equal(dg_dma_unmap_single(m->dd, dma[j], 64, dir, 0, &m->b), 0);
	} else if (how == 2 || how == 3) { /* another thread: its own batch, or ours */
		struct xunmap x = {.dd = m->dd, .dma = dma, .n = n, .dir = dir};
		pthread_t th;

		if (how == 3) {
			batch_open(m);
			x.b = &m->b;
		}
		assert_int_equal(pthread_create(&th, NULL, xunmap_main, &x), 0);
		assert_int_equal(pthread_join(th, NULL), 0);
		assert_int_equal(x.r, 0);
		if (how == 2)
			for (unsigned int j = 0; j < n; j++)
				faults(m->dev, dma[j]);
	} else {
		batch_open(m);
		assert_int_equal(dg_dma_unmap_bulk(m->dd, dma, n, 64, dir, 0, &m->b), 0);
		if (how == 4)
			assert_int_equal(dg_dma_batch_submit(&m->b), 0);
	}
	for (unsigned int j = 0; j < n; j++) {
		m->on[idx[j]] = false;
		if (m->open && how != 0 && how != 2)
			m->pend[m->npend++] = dma[j] & ~(uint64_t)(PG - 1);
	}
	if (m->open && rnd(seed) % 3 == 0)
		batch_end(m);
}

/* The chunks this thread's streams hold (one per direction at most). */
static unsigned int held_chunks(struct dg_dma_dev *dd)
{
	const struct dma_tstats *t = dma_tstats(dd);
	unsigned int n = 0;

	for (unsigned int d = 0; d < DMA_STREAM_DIRS; d++)
		n += t->st[d].gen == dd->sp->gen && t->st[d].c;
	return n;
}

static void test_model(void **state)
{
	uint64_t seed = 0x853c49e6748fea9bull;
	struct dma_fixture f;
	struct model *m = calloc(1, sizeof(*m));

	(void)state;
	assert_non_null(m);
	m->mem = page_alloc((size_t)MB * PG);
	assert_non_null(m->mem);
	for (unsigned int i = 0; i < MB; i++)
		*(uint8_t *)buf_of(m, i) = val_of(i);
	assert_int_equal(fixture_init(&f, false, 0), 0);
	m->dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, &m->dev);
	assert_non_null(m->dd);
	for (unsigned int s = 0; s < STEPS; s++) {
		if (rnd(&seed) % 2)
			model_map(m, &seed);
		else
			model_unmap(m, &seed);
		if (s % 250 == 0) {
			batch_end(m);
			assert_int_equal(dg_dma_dev_check(m->dd, stderr), 0);
		}
		for (unsigned int i = 0; i < MB; i++) /* the live bits are the model's */
			if (m->on[i] && m->bulk[i])
				live_stream(m->dd, m->dma[i]);
			else if (m->on[i])
				live_single(m->dd, m->dma[i]);
		for (unsigned int j = 0; j < m->npend; j++)
			assert_false(live_bit(m->dd, m->pend[j]));
	}
	batch_end(m);
	for (unsigned int i = 0; i < MB; i++) /* the rest, pins included */
		if (m->on[i]) {
			assert_int_equal(
				dg_dma_unmap_single(m->dd, m->dma[i], 64, m->dir[i], 0, NULL), 0);
			m->on[i] = false;
		}
	assert_int_equal(dg_dma_dev_check(m->dd, stderr), 0);
	/* every chunk but this thread's current ones (a stream per direction) wholly retired:
	 * spare */
	assert_true(m->dd->sp->nchunks >= 2);
	assert_int_equal(m->dd->sp->nspare, m->dd->sp->nchunks - held_chunks(m->dd));
	fixture_dev_destroy(m->dd);
	fixture_fini(&f);
	free(m->mem);
	free(m);
}

/* ---- exhaustion ---------------------------------------------------------------------------- */

/* @state: the policy (strict; lazy, whose one-granule maps take the streams too). */
static void test_exhaust(void **state)
{
	const enum dg_dma_policy pol = *(const enum dg_dma_policy *)*state;
	enum { BULK = 256 };
	/* 2^27 bytes: 32768 granules, 64 chunks of 512; streams hold 16 at most */
	const uint64_t granules = 1ull << 15, mask = (granules * PG) - 1;
	uint8_t *page = page_alloc(PG);
	void *bufs[BULK];
	uint64_t *live = malloc(granules * sizeof(*live)), pins[64];
	unsigned int nlive = 0, npins = 0;
	struct dg_dma_dev_config c;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	struct dma_fixture f;
	uint64_t dma[BULK];
	int r;

	assert_non_null(page);
	assert_non_null(live);
	for (unsigned int i = 0; i < BULK; i++)
		bufs[i] = page + 128;
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dg_dma_dev_config_init(&c);
	c.policy = pol;
	c.dma_mask = mask;
	dd = fixture_dev(&f, 1, pol, &c, &dev);
	assert_non_null(dd);
	dg_dev_set_auto_offline(dev, true);
	assert_int_equal(dd->sp->cspan, 512);
	assert_int_equal(dd->sp->cmax, 16);
	/* 1. pin chunks: of each chunk's 512 maps, keep the first */
	while (npins < 20) {
		for (unsigned int k = 0; k < 2; k++) {
			assert_int_equal(
				dg_dma_map_bulk(dd, bufs, BULK, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
			assert_int_equal(dg_dma_unmap_bulk(dd, dma + !k, BULK - !k, 64,
							   DG_DMA_TO_DEVICE, 0, NULL),
					 0);
			if (!k)
				pins[npins++] = dma[0];
		}
	}
	/* the streams hold their share; the rest of the pins' maps took the allocator */
	assert_int_equal(dd->sp->nchunks, 16);
	/* 2. the allocator path maps every granule the streams do not hold */
	while ((r = dg_dma_map_bulk(dd, bufs, BULK, 64, DG_DMA_TO_DEVICE, 0, dma)) == 0)
		for (unsigned int i = 0; i < BULK; i++)
			live[nlive++] = dma[i];
	assert_int_equal(r, -ENOSPC);
	while ((r = dg_dma_map_single(dd, page, 64, DG_DMA_TO_DEVICE, 0, &dma[0])) == 0)
		live[nlive++] = dma[0];
	assert_int_equal(r, -ENOSPC);
	/* IOVA 0 is reserved; the 16 held chunks keep their granules */
	assert_int_equal(nlive + npins - 16, granules - 1 - 16 * 512);
	assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
	/* 3. everything unmapped: spare chunks go back on -ENOSPC, single maps fill it all */
	for (unsigned int i = 0; i < nlive; i++)
		assert_int_equal(dg_dma_unmap_single(dd, live[i], 64, DG_DMA_TO_DEVICE, 0, NULL),
				 0);
	for (unsigned int i = 0; i < npins; i++)
		assert_int_equal(dg_dma_unmap_single(dd, pins[i], 64, DG_DMA_TO_DEVICE, 0, NULL),
				 0);
	nlive = 0;
	while ((r = dg_dma_map_single(dd, page, 64, DG_DMA_TO_DEVICE, 0, &dma[0])) == 0)
		live[nlive++] = dma[0];
	assert_int_equal(r, -ENOSPC);
	assert_int_equal(nlive, granules - 1);
	for (unsigned int i = 0; i < nlive; i++)
		assert_int_equal(dg_dma_unmap_single(dd, live[i], 64, DG_DMA_TO_DEVICE, 0, NULL),
				 0);
	assert_int_equal(fixture_end(&f, dd), 0);
	free(live);
	free(page);
}

/* ---- a stream run's batch entries ---------------------------------------------------------- */

#define RE_N 48 /* stream buffers of one round */

struct re {
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	uint8_t *mem;
	uint64_t x, xa, xsize, xtok; /* the live allocator mapping X and its record */
};

/* Page @i's buffer (its byte at 64 is i + 1). */
static void *re_buf(struct re *t, unsigned int i)
{
	return t->mem + (size_t)i * PG + 64;
}

/* Every entry of @b a copy of X's (an IOVA entry, X's size and token): an entry the batch
 * end reads without having written it unmaps X or gives its IOVA back while it is mapped. */
static void re_poison(struct re *t, struct dg_dma_batch *b)
{
	for (unsigned int i = 0; i < DG_DMA_BATCH_MAX; i++) {
		b->ent[i].addr = t->xa;
		b->ent[i].size = t->xsize | DMA_BATCH_IOVA;
		b->ent[i].token = t->xtok;
	}
}

/* X is untouched: its record live, the device reaches it, and new allocator mappings (two
 * pages: not a stream's) do not get its IOVA. */
static void re_x_intact(struct re *t)
{
	struct dma_rec *rec = dma_rec_get(&t->dd->sp->rec, t->xa, false);
	uint64_t z[6];

	assert_non_null(rec);
	assert_true(atomic_load(&rec->w0) & REC_VALID);
	reach(t->dev, t->x, DG_DMA_TO_DEVICE, 0xa5);
	reach(t->dev, t->x + PG, DG_DMA_TO_DEVICE, 0x5a);
	for (unsigned int i = 0; i < 6; i++) {
		assert_int_equal(dg_dma_map_single(t->dd, t->mem + (size_t)(200 + 2 * i) * PG,
						   2 * PG, DG_DMA_TO_DEVICE, 0, &z[i]),
				 0);
		assert_true(z[i] + 2 * PG <= t->xa || z[i] >= t->xa + t->xsize);
	}
	for (unsigned int i = 0; i < 6; i++)
		assert_int_equal(
			dg_dma_unmap_single(t->dd, z[i], 2 * PG, DG_DMA_TO_DEVICE, 0, NULL), 0);
}

/*
 * test_run_entries: a strict bulk unmap of a stream run in one chunk puts only the run's two
 * ends in the batch (map.c: unmap_bulk_strict); the ways of the batch end that read the
 * entries between write them first (batch_expand), and a bulk unmap that does not become such
 * a run writes its middles before returning (batch_put_fill). Each batch's ent[] is poisoned
 * first with copies of a live allocator mapping X's entry. Variants (@v):
 *  0: the run and an allocator mapping's unmap (the end gives non-stream IOVAs back)
 *  1: the run and a two-step unlink (a mixed batch: the IOVA entries unmapped one by one)
 *  2: a bulk unmap of two pieces far apart (not a run), then the piece between (a run)
 *  3: nine runs in one batch (the batch notes eight: the ninth's middles written at once)
 *  4: the run and nine single unmaps descending (more pieces than the batch merges: sorted)
 *  5: the run submitted, then eight single unmaps descending (the pieces of the two submits
 *     together too many: the end's general way)
 * Each: every unmapped address faults after the end, X is intact, the dump checks; at the
 * end every chunk but this thread's current one is retired whole (spare).
 */
static void test_run_entries(void **state)
{
	struct dma_fixture f;
	struct re t = {0};
	struct dma_rec *rec;

	(void)state;
	t.mem = page_alloc((size_t)256 * PG);
	assert_non_null(t.mem);
	for (unsigned int i = 0; i < RE_N; i++)
		*(uint8_t *)re_buf(&t, i) = (uint8_t)(i + 1);
	t.mem[(size_t)100 * PG] = 0xa5;
	t.mem[(size_t)101 * PG] = 0x5a;
	assert_int_equal(fixture_init(&f, false, 0), 0);
	t.dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, &t.dev);
	assert_non_null(t.dd);
	assert_int_equal(dg_dma_map_single(t.dd, t.mem + (size_t)100 * PG, 2 * PG, DG_DMA_TO_DEVICE,
					   0, &t.x),
			 0);
	t.xa = t.x & ~t.dd->sp->gmask;
	rec = dma_rec_get(&t.dd->sp->rec, t.xa, false);
	assert_non_null(rec);
	t.xsize = atomic_load(&rec->w2);
	t.xtok = atomic_load(&rec->w3);
	assert_int_equal(t.xsize, 2 * PG);
	assert_false(dma_token_stream(t.xtok));
	for (unsigned int v = 0; v < 6; v++) {
		for (unsigned int round = 0; round < 12; round++) {
			uint64_t dma[RE_N], y = 0, l = 0, piece[RE_N];
			struct dg_dma_iova_state st;
			struct dg_dma_batch b;
			void *bufs[RE_N];

			for (unsigned int i = 0; i < RE_N; i++)
				bufs[i] = re_buf(&t, i);
			assert_int_equal(
				dg_dma_map_bulk(t.dd, bufs, RE_N, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
			for (unsigned int i = 0; i < RE_N; i++) {
				assert_int_equal(dma[i], dma[0] + (uint64_t)i * PG); /* a run */
				reach(t.dev, dma[i], DG_DMA_TO_DEVICE, (uint8_t)(i + 1));
			}
			if (v == 0) {
				assert_int_equal(dg_dma_map_single(t.dd, t.mem + (size_t)102 * PG,
								   2 * PG, DG_DMA_TO_DEVICE, 0, &y),
						 0);
				reach(t.dev, y, DG_DMA_TO_DEVICE, 0);
			} else if (v == 1) {
				assert_int_equal(dg_dma_iova_alloc(t.dd, 4 * PG, &st), 0);
				assert_int_equal(dg_dma_iova_link(&st, PG, re_buf(&t, 5), 64,
								  DG_DMA_TO_DEVICE, &l),
						 0);
				assert_int_equal(dg_dma_iova_sync(&st, PG, PG), 0);
				reach(t.dev, l, DG_DMA_TO_DEVICE, 6);
			}
			dg_dma_batch_begin(t.dd, &b);
			re_poison(&t, &b);
			switch (v) {
			case 0:
			case 1:
				assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, RE_N, 64,
								   DG_DMA_TO_DEVICE, 0, &b),
						 0);
				if (v == 0)
					assert_int_equal(dg_dma_unmap_single(t.dd, y, 2 * PG,
									     DG_DMA_TO_DEVICE, 0,
									     &b),
							 0);
				else
					assert_int_equal(dg_dma_iova_unlink(&st, PG, 64,
									    DG_DMA_TO_DEVICE, &b),
							 0);
				break;
			case 2:
				for (unsigned int i = 0; i < 16; i++) {
					piece[i] = dma[i];
					piece[16 + i] = dma[32 + i];
				}
				assert_int_equal(dg_dma_unmap_bulk(t.dd, piece, 32, 64,
								   DG_DMA_TO_DEVICE, 0, &b),
						 0);
				assert_int_equal(dg_dma_unmap_bulk(t.dd, dma + 16, 16, 64,
								   DG_DMA_TO_DEVICE, 0, &b),
						 0);
				break;
			case 3:
				for (unsigned int j = 0; j < 9; j++)
					assert_int_equal(dg_dma_unmap_bulk(t.dd, dma + 5 * j,
									   j < 8 ? 5 : RE_N - 40,
									   64, DG_DMA_TO_DEVICE, 0,
									   &b),
							 0);
				assert_int_equal(b.nruns, DG_DMA_BATCH_PIECES);
				break;
			case 4:
				assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 30, 64,
								   DG_DMA_TO_DEVICE, 0, &b),
						 0);
				for (unsigned int i = RE_N; i-- > 30;)
					assert_int_equal(dg_dma_unmap_single(t.dd, dma[i], 64,
									     DG_DMA_TO_DEVICE, 0,
									     &b),
							 0);
				break;
			default:
				assert_int_equal(dg_dma_unmap_bulk(t.dd, dma, 40, 64,
								   DG_DMA_TO_DEVICE, 0, &b),
						 0);
				assert_int_equal(dg_dma_batch_submit(&b), 0);
				for (unsigned int i = RE_N; i-- > 40;)
					assert_int_equal(dg_dma_unmap_single(t.dd, dma[i], 64,
									     DG_DMA_TO_DEVICE, 0,
									     &b),
							 0);
				break;
			}
			if (round % 2)
				assert_int_equal(dg_dma_batch_submit(&b), 0);
			assert_int_equal(dg_dma_batch_end(&b), 0);
			for (unsigned int i = 0; i < RE_N; i++)
				faults(t.dev, dma[i]);
			if (v == 0)
				faults(t.dev, y);
			if (v == 1) {
				faults(t.dev, l);
				assert_int_equal(dg_dma_iova_free(&st), 0);
			}
			re_x_intact(&t);
			assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
		}
	}
	/* 6 x 12 rounds of 48 (ten a chunk): the chunks went round, each retired whole (spare)
	 * but the current one */
	assert_true(atomic_load(&t.dd->sp->chunk_gets) >= 5);
	assert_int_equal(held_chunks(t.dd), 1);
	assert_int_equal(t.dd->sp->nspare, t.dd->sp->nchunks - 1);
	re_x_intact(&t);
	assert_int_equal(dg_dma_unmap_single(t.dd, t.x, 2 * PG, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
	fixture_dev_destroy(t.dd);
	fixture_fini(&f);
	free(t.mem);
}

/* ---- output addresses ---------------------------------------------------------------------- */

/*
 * test_fill_oa: dma_stream_map() writes each entry with the format's output-address encoding:
 * its short loop (the address as it is) when every address up to the call's highest has its
 * bits in the format's mask, else the general one (LPAE 52-bit: PA[51:48] moved to bits
 * [15:12]). Addresses given directly (the map reads only their offsets from bufs[]): low ones
 * (VT-d 48 and 52 bits, LPAE 4K/48, LPAE 64K/52) and, with 52-bit output, ones above 2^48
 * (VT-d: its mask reaches bit 51, the short loop; LPAE: the general loop); the table
 * walk must give each back, then the bulk unmap claims them all. With 48-bit output the
 * high ones are refused (the stream takes nothing, the bulk map says -ERANGE).
 */
static void test_fill_oa(void **state)
{
	const struct dg_pt_geometry geos[4] = {
		{0}, /* VT-d 4K, 48 bits */
		{.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 52},
		{.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48},
		{.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 52, .granule = 65536},
	};

	(void)state;
	for (unsigned int x = 0; x < 4; x++) {
		for (unsigned int high = 0; high < 2; high++) {
			enum { N = 12 };
			struct dg_dma_dev_config c;
			struct dg_device *dev = NULL;
			struct dma_fixture f;
			struct dg_dma_dev *dd;
			struct dma_space *sp;
			uint64_t phys[N], dma[N], pbits = 0, g;
			void *bufs[N];
			struct dg_pt *pt;

			assert_int_equal(fixture_init(&f, false, 0), 0);
			dg_dma_dev_config_init(&c);
			c.policy = DG_DMA_STRICT;
			c.geo = geos[x];
			dd = fixture_dev(&f, 1, DG_DMA_STRICT, &c, &dev);
			assert_non_null(dd);
			dg_dev_set_auto_offline(dev, true);
			sp = dd->sp;
			assert_true(sp->cspan > 0);
			g = sp->granule;
			pt = dg_domain_pt(dg_dma_dev_domain(dd));
			for (unsigned int i = 0; i < N; i++) {
				/* pages spread over the address bits (one with PA[51:48] set) */
				phys[i] = ((high ? 0x000f000000000000ull >> (i % 4) :
						   0x12345ull << 20) +
					   (uint64_t)i * 977 * g) &
					  ~(g - 1) & 0x000fffffffffffffull;
				bufs[i] = (void *)(uintptr_t)(phys[i] + 64 * i);
				pbits |= phys[i];
			}
			if (high && geos[x].oas != 52) {
				/* beyond the output: refused, nothing changed (the allocator path
				 * says -ERANGE) */
				const uint32_t cur = dma_tstats(dd)->st[DG_DMA_TO_DEVICE].cur;

				assert_int_equal(dma_stream_map(sp, dma_tstats(dd), bufs, pbits, N,
								64, DG_DMA_TO_DEVICE, KIND_SINGLE,
								dma),
						 1);
				assert_int_equal(dma_tstats(dd)->st[DG_DMA_TO_DEVICE].cur, cur);
				assert_int_equal(dg_dma_map_bulk(dd, bufs, N, 64, DG_DMA_TO_DEVICE,
								 0, dma),
						 -ERANGE);
				fixture_dev_destroy(dd);
				fixture_fini(&f);
				continue;
			}
			assert_int_equal(dma_stream_map(sp, dma_tstats(dd), bufs, pbits, N, 64,
							DG_DMA_TO_DEVICE, KIND_SINGLE, dma),
					 0);
			ctr_add(dma_tstats(dd), CTR_MAPS, N); /* as dg_dma_map_bulk counts */
			for (unsigned int i = 0; i < N; i++) {
				assert_int_equal(dma[i] & (g - 1), 64 * i);
				assert_int_equal(dg_pt_iova_to_phys(pt, dma[i]), phys[i] + 64 * i);
			}
			assert_int_equal(
				dg_dma_unmap_bulk(dd, dma, N, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
			for (unsigned int i = 0; i < N; i++)
				assert_int_equal(dg_pt_iova_to_phys(pt, dma[i]), 0);
			assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
			fixture_dev_destroy(dd);
			fixture_fini(&f);
		}
	}
}

/* ---- a stream per direction ---------------------------------------------------------------- */

/*
 * test_dir_streams: a thread that maps rx buffers (from the device) and tx buffers (to it) in
 * turns - a forwarding driver's polls - gets adjacent IOVAs for each ring (a stream per
 * direction), so each ring's reap is one stream run of the batch (run_clear: cleared through
 * the kept table, its middle entries unwritten); the device faults on every one after the end.
 */
static void test_dir_streams(void **state)
{
	enum { K = 16, ROUNDS = 4 };
	uint8_t *mem = page_alloc((size_t)2 * K * PG);
	uint64_t rx[ROUNDS * K], tx[ROUNDS * K];
	void *rb[K], *tb[K];
	struct dg_device *dev = NULL;
	struct dg_dma_batch b;
	struct dg_dma_dev *dd;
	struct dma_fixture f;

	(void)state;
	assert_non_null(mem);
	for (unsigned int i = 0; i < K; i++) {
		rb[i] = mem + (size_t)i * PG + 64;
		tb[i] = mem + (size_t)(K + i) * PG + 64;
		mem[(size_t)(K + i) * PG + 64] = (uint8_t)(i + 1);
	}
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, &dev);
	assert_non_null(dd);
	for (unsigned int r = 0; r < ROUNDS; r++) {
		assert_int_equal(dg_dma_map_bulk(dd, rb, K, 64, DG_DMA_FROM_DEVICE, 0, rx + r * K),
				 0);
		assert_int_equal(dg_dma_map_bulk(dd, tb, K, 64, DG_DMA_TO_DEVICE, 0, tx + r * K),
				 0);
	}
	for (unsigned int i = 1; i < ROUNDS * K; i++) { /* each ring's IOVAs adjacent */
		assert_int_equal(rx[i], rx[i - 1] + PG);
		assert_int_equal(tx[i], tx[i - 1] + PG);
	}
	for (unsigned int i = 0; i < ROUNDS * K; i++) {
		reach(dev, rx[i], DG_DMA_FROM_DEVICE, 0x77);
		reach(dev, tx[i], DG_DMA_TO_DEVICE, (uint8_t)(i % K + 1));
	}
	assert_int_equal(held_chunks(dd), 2);
	dg_dma_batch_begin(dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(dd, rx, ROUNDS * K, 64, DG_DMA_FROM_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_unmap_bulk(dd, tx, ROUNDS * K, 64, DG_DMA_TO_DEVICE, 0, &b), 0);
	assert_int_equal(b.nruns, 2);
	assert_int_equal(b.run_clear, 3); /* both stream runs */
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	for (unsigned int i = 0; i < ROUNDS * K; i++) {
		faults(dev, rx[i]);
		faults(dev, tx[i]);
	}
	assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
	fixture_dev_destroy(dd);
	fixture_fini(&f);
	free(mem);
}

/*
 * test_poll_runs: a NIC driver's polls (bench/workloads/wl_nic.c's order): begin a batch,
 * unmap the reap of each ring (rx, tx: one stream run each) into it, submit, refill the
 * rings, end the previous poll's batch - reaps of 1 to 64 buffers over several chunks, so
 * most ends take the runs way (dg_dma_batch_end: stream runs only, all submitted) and those
 * whose reap crosses a chunk the general one. After each end the device faults on every
 * buffer of that batch; at the close every granule was retired exactly once: every chunk is
 * a spare but the streams' current ones (a granule retired twice gives a chunk back while
 * mapped, dg_dma_dev_check and the count see it; one not retired keeps its chunk held).
 */
static void test_poll_runs(void **state)
{
	enum { RING = 128, POLLS = 400 };
	uint8_t *mem = page_alloc((size_t)2 * RING * PG);
	uint64_t ring[2][RING], reaped[2][2][64], seed = 0x5bd1e995u;
	unsigned int head[2] = {0, 0}, nreap[2][2] = {{0}}, runs_way = 0;
	struct dg_device *dev = NULL;
	struct dg_dma_batch b[2];
	struct dg_dma_dev *dd;
	struct dma_fixture f;
	void *bufs[64];

	(void)state;
	assert_non_null(mem);
	for (unsigned int i = 0; i < 2 * RING; i++)
		mem[(size_t)i * PG + 128] = 0x5a; /* what the device reads (tx) */
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, &dev);
	assert_non_null(dd);
	for (unsigned int d = 0; d < 2; d++) {
		for (unsigned int i = 0; i < RING; i += 64) {
			for (unsigned int k = 0; k < 64; k++)
				bufs[k] = mem + ((size_t)d * RING + i + k) * PG + 128;
			assert_int_equal(dg_dma_map_bulk(dd, bufs, 64, 64,
							 d ? DG_DMA_TO_DEVICE : DG_DMA_FROM_DEVICE,
							 0, ring[d] + i),
					 0);
		}
	}
	for (unsigned int p = 0; p < POLLS; p++) {
		struct dg_dma_batch *nb = &b[p & 1], *ob = &b[(p & 1) ^ 1];

		dg_dma_batch_begin(dd, nb);
		for (unsigned int d = 0; d < 2; d++) {
			const enum dg_dma_dir dir = d ? DG_DMA_TO_DEVICE : DG_DMA_FROM_DEVICE;
			const unsigned int k = 1 + (unsigned int)(rnd(&seed) % 64);
			const unsigned int h = head[d];
			uint64_t reap[64];

			/* the reap: the k oldest buffers, in ring order (wrapping: two calls) */
			for (unsigned int i = 0; i < k; i++)
				reap[i] = ring[d][(h + i) % RING];
			if (h + k <= RING) {
				assert_int_equal(dg_dma_unmap_bulk(dd, reap, k, 64, dir, 0, nb), 0);
			} else {
				const unsigned int k1 = RING - h;

				assert_int_equal(dg_dma_unmap_bulk(dd, reap, k1, 64, dir, 0, nb),
						 0);
				assert_int_equal(dg_dma_unmap_bulk(dd, reap + k1, k - k1, 64, dir,
								   0, nb),
						 0);
			}
			for (unsigned int i = 0; i < k; i++)
				reaped[p & 1][d][i] = reap[i];
			nreap[p & 1][d] = k;
		}
		assert_int_equal(dg_dma_batch_submit(nb), 0);
		for (unsigned int d = 0; d < 2; d++) { /* the refill, same buffers, new IOVAs */
			const enum dg_dma_dir dir = d ? DG_DMA_TO_DEVICE : DG_DMA_FROM_DEVICE;
			const unsigned int k = nreap[p & 1][d], h = head[d];
			uint64_t out[64];

			for (unsigned int i = 0; i < k; i++)
				bufs[i] = mem + ((size_t)d * RING + (h + i) % RING) * PG + 128;
			assert_int_equal(dg_dma_map_bulk(dd, bufs, k, 64, dir, 0, out), 0);
			for (unsigned int i = 0; i < k; i++) {
				ring[d][(h + i) % RING] = out[i];
				reach(dev, out[i], dir, 0x5a);
			}
			head[d] = (h + k) % RING;
		}
		if (p) {
			const bool runs = ob->nsub == ob->n && ob->nruns &&
					  ob->run_clear == (1u << ob->nruns) - 1;

			runs_way += runs;
			assert_int_equal(dg_dma_batch_end(ob), 0);
			for (unsigned int d = 0; d < 2; d++)
				for (unsigned int i = 0; i < nreap[(p & 1) ^ 1][d]; i++)
					faults(dev, reaped[(p & 1) ^ 1][d][i]);
		}
	}
	assert_int_equal(dg_dma_batch_end(&b[(POLLS - 1) & 1]), 0);
	assert_true(runs_way > POLLS / 2);
	assert_true(runs_way < POLLS - 1); /* the general way too (reaps across chunks) */
	for (unsigned int d = 0; d < 2; d++)
		for (unsigned int i = 0; i < RING; i += 64)
			assert_int_equal(dg_dma_unmap_bulk(dd, ring[d] + i, 64, 64,
							   d ? DG_DMA_TO_DEVICE :
							       DG_DMA_FROM_DEVICE,
							   0, NULL),
					 0);
	assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
	assert_int_equal(dd->sp->nspare, dd->sp->nchunks - held_chunks(dd));
	fixture_dev_destroy(dd);
	fixture_fini(&f);
	free(mem);
}

/* ---- bulk maps' argument pass ---------------------------------------------------------------- */

/*
 * test_map_odd: dg_dma_map_bulk's argument pass (one branch-free pass over the buffers) sends
 * a call with one buffer that leaves its granule - at any position, through the last byte
 * of its page - to the general way: every buffer is mapped whole (the device reads all its
 * bytes), then unmapped; a NULL one anywhere refuses the call with -EINVAL, nothing mapped.
 */
static void test_map_odd(void **state)
{
	enum { N = 11, LEN = 100 };
	uint8_t *mem = page_alloc((size_t)(2 * N + 1) * PG);
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	struct dma_fixture f;

	(void)state;
	assert_non_null(mem);
	for (size_t i = 0; i < (size_t)(2 * N + 1) * PG; i++)
		mem[i] = (uint8_t)(i * 7 + i / PG);
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, &dev);
	assert_non_null(dd);
	for (unsigned int at = 0; at < N; at++) {
		for (unsigned int cross = 1; cross < LEN; cross += 49) {
			uint64_t dma[N];
			void *bufs[N];

			for (unsigned int i = 0; i < N; i++) /* page 2i, offset 64 */
				bufs[i] = mem + (size_t)2 * i * PG + 64;
			/* @cross bytes of buffer @at in the next page */
			bufs[at] = mem + (size_t)2 * at * PG + PG - (LEN - cross);
			assert_int_equal(
				dg_dma_map_bulk(dd, bufs, N, LEN, DG_DMA_TO_DEVICE, 0, dma), 0);
			for (unsigned int i = 0; i < N; i++) {
				uint8_t got[LEN];

				assert_int_equal(dg_dev_read(dev, dma[i], got, LEN), 0);
				assert_memory_equal(got, bufs[i], LEN);
			}
			assert_int_equal(
				dg_dma_unmap_bulk(dd, dma, N, LEN, DG_DMA_TO_DEVICE, 0, NULL), 0);
			for (unsigned int i = 0; i < N; i++)
				faults(dev, dma[i]);
			bufs[at] = NULL;
			assert_int_equal(dg_dma_map_bulk(dd, bufs, N, LEN, DG_DMA_TO_DEVICE, 0,
							 dma),
					 -EINVAL);
		}
	}
	assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
	fixture_dev_destroy(dd);
	fixture_fini(&f);
	free(mem);
}

int main(void)
{
	static enum dg_dma_policy strict = DG_DMA_STRICT, lazy = DG_DMA_LAZY;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_run_entries),
		cmocka_unit_test(test_fill_oa),
		cmocka_unit_test(test_dir_streams),
		cmocka_unit_test(test_poll_runs),
		cmocka_unit_test(test_map_odd),
		cmocka_unit_test_prestate(test_exhaust, &strict),
		cmocka_unit_test_prestate(test_exhaust, &lazy),
		cmocka_unit_test_prestate(test_bad_entry, &strict),
		cmocka_unit_test_prestate(test_bad_entry, &lazy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
