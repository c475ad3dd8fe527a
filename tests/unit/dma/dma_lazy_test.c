/* SPDX-License-Identifier: MIT */
/*
 * The lazy flush queue against a reference model (tests/unit/dma).
 *
 * test_lazy_model: a device that is online and never acknowledges on its own, so a flush stays
 * in flight until the test calls dg_dev_quiesce(); the DMA layer has one CPU slot, so there is
 * one queue. Random bulk maps (one and two granules per buffer), bulk unmaps (ascending,
 * descending, scrambled, several in a row) and single unmaps, and acknowledgements, checked
 * after every step against a model written from the documented rules alone:
 *   - an unmap joins the open generation; a flush starts when none is in flight and the open
 *     generation reaches half the queue, and covers exactly the entries queued before it;
 *   - a flush completes when the device acknowledges after its start; the entries it covers
 *     are released at the next unmap call (its reclaim), not before;
 * Checked: every mapped buffer translates to its page and every unmapped one not at all right
 * after its unmap; the number of pending entries and of flushes (lazy_pending, lazy_flushes: an entry
 * lost or a flush started at another entry fails), every pending IOVA still allocated in the
 * IOVA space (given back too early fails), every released IOVA that was not handed out again
 * free or cached (lost, never given back, fails), no map handed a pending IOVA. The ring's
 * free-running positions start just below 2^32, so they wrap during the run.
 *
 * One-granule buffers come from the streams (stream.c: per-thread chunks, a granule given back
 * to its chunk when the flush covering its unmap completed); a fifth of the steps run on a
 * second thread (its own stream: unmaps there retire granules of the first thread's chunks, and
 * the other way round). For them the census of the chunks is checked after every step: each
 * granule of a held chunk is exactly one of mapped, pending in the queue, retired, or a
 * stream's unused rest (a granule retired before the flush covering its unmap completed is
 * counted twice and fails; one never retired is missing and fails), a spare chunk is wholly
 * retired with nothing mapped or pending in it; and a map never hands out a pending granule.
 * At the end, after the drains, every IOVA (chunks included) is back in the allocator. A check
 * that fails on the second thread ends the binary (cmocka exits with 255, no message).
 *
 * test_lazy_full_bulk: a bulk unmap of more entries than the queue holds, with a thread that
 * acknowledges: the call waits for room (lazy_full_waits), nothing is lost (every IOVA
 * pending or given back, and all given back after a drain).
 *
 * test_lazy_exhaust: strict's stream exhaustion test under lazy: chunks pinned until the
 * streams hold their share, then the allocator path maps every granule the streams do not
 * hold; once everything is unmapped (pending in the queue), single maps fill the whole space
 * (the flush queues and the spare chunks are free space).
 */
#include "dma/dma_internal.h" /* before cmocka.h: it defines fail() */
#include "dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>
#include <dmaguard/pt.h>

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#define QSIZE 32u
#define NBUF  160u /* buffers (mapped or not) */
#define MAXK  12u  /* buffers per bulk call: never more than the room the model leaves */

/* The model: every IOVA queued, in order; [head, tail) pending; [head, busy_end) covered by
 * the flush in flight when busy. */
struct model {
	uint64_t q[1u << 16]; /* queued IOVAs by position (the test stays far below) */
	uint64_t qsz[1u << 16];
	uint64_t qtok[1u << 16]; /* their tokens (a stream granule's: its chunk) */
	uint32_t head, tail, busy_end, open;
	bool busy, acked;
	uint64_t flushes;
};

struct buf {
	void *mem;
	uint64_t dma; /* 0: not mapped */
	size_t len;
	uint64_t tok; /* the mapping's token (record w3) */
};

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return (uint32_t)(rnd_state % n);
}

/* The unmap call's reclaim, then its entries one by one (no full queue: the test leaves room). */
static void model_retire(struct model *m, const uint64_t *iova, const uint64_t *size,
			 const uint64_t *tok, unsigned int k)
{
	if (m->busy && m->acked) {
		m->head = m->busy_end;
		m->busy = false;
	}
	for (unsigned int i = 0; i < k; i++) {
		assert_true(m->tail - m->head < QSIZE);
		m->qsz[m->tail] = size[i];
		m->qtok[m->tail] = tok[i];
		m->q[m->tail++] = iova[i];
		m->open++;
		if (!m->busy && m->open >= QSIZE / 2) {
			m->busy = true;
			m->acked = false;
			m->busy_end = m->tail;
			m->open = 0;
			m->flushes++;
		}
	}
}

static bool model_pending(const struct model *m, uint64_t iova)
{
	for (uint32_t i = m->head; i < m->tail; i++)
		if (m->q[i] == iova)
			return true;
	return false;
}

static bool mapped_now(const struct buf *b, uint64_t iova, uint64_t gmask)
{
	for (unsigned int i = 0; i < NBUF; i++)
		if (b[i].dma && (b[i].dma & ~gmask) == iova)
			return true;
	return false;
}

#define MAXCHUNKS 256u

/* The granules of the chunk of @tok that are the unused rest of a thread's stream. */
static uint64_t stream_rest(struct dg_dma_dev *dd, uint64_t tok)
{
	uint64_t rest = 0;

	/* Acquire pairs with the release CAS that pushes a block (dma_stats.c). */
	for (struct dma_tstats *t = atomic_load_explicit(&dd->tstats, memory_order_acquire); t;
	     t = t->next)
		for (unsigned int d = 0; d < DMA_STREAM_DIRS; d++)
			if (t->st[d].gen == dd->sp->gen &&
			    ((uintptr_t)t->st[d].c | DMA_TOKEN_STREAM) == tok)
				rest += t->st[d].end - t->st[d].cur;
	return rest;
}

/* The census of the stream chunks (see the preamble); returns the number of chunks. */
static unsigned int check_streams(struct dg_dma_dev *dd, const struct model *m, const struct buf *b)
{
	static struct dma_stream_chunk ch[MAXCHUNKS];
	struct dma_space *sp = dd->sp;
	const unsigned int n = dma_stream_census(sp, ch, MAXCHUNKS);
	unsigned int held_live = 0, held_pend = 0, all_live = 0, all_pend = 0;

	assert_true(n <= MAXCHUNKS);
	for (unsigned int c = 0; c < n; c++) {
		uint64_t live = 0, pend = 0, rest = stream_rest(dd, ch[c].token);

		for (unsigned int i = 0; i < NBUF; i++)
			if (b[i].dma && b[i].tok == ch[c].token) {
				/* a granule of this chunk */
				assert_true(b[i].dma - ch[c].iova < (uint64_t)sp->cspan
									    << sp->gshift);
				live++;
			}
		for (uint32_t i = m->head; i != m->tail; i++)
			if (m->qtok[i] == ch[c].token) {
				assert_true(m->q[i] - ch[c].iova < (uint64_t)sp->cspan
									   << sp->gshift);
				pend++;
			}
		if (ch[c].spare) {
			assert_int_equal(live + pend + rest, 0);
			assert_int_equal(ch[c].retired, sp->cspan);
		} else {
			assert_int_equal(ch[c].retired + live + pend + rest, sp->cspan);
			held_live += (unsigned int)live;
			held_pend += (unsigned int)pend;
		}
	}
	/* every stream granule mapped or pending belongs to a held chunk */
	for (unsigned int i = 0; i < NBUF; i++)
		all_live += b[i].dma && dma_token_stream(b[i].tok);
	for (uint32_t i = m->head; i != m->tail; i++)
		all_pend += dma_token_stream(m->qtok[i]);
	assert_int_equal(all_live, held_live);
	assert_int_equal(all_pend, held_pend);
	return n;
}

static void check(struct dg_dma_dev *dd, const struct model *m, const struct buf *b)
{
	struct dma_space *sp = dd->sp;
	struct dg_dma_stats st;

	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	assert_int_equal(st.lazy_pending, m->tail - m->head);
	assert_int_equal(st.lazy_flushes, m->flushes);
	assert_int_equal(st.lazy_full_waits, 0);
	for (uint32_t i = m->head; i < m->tail; i++) { /* not given back yet */
		uint64_t start = 0, size = 0;

		if (dma_token_stream(m->qtok[i]))
			continue; /* a stream granule: check_streams() */
		assert_int_equal(dg_iova_find(sp->iova, m->q[i], &start, &size), 0);
		assert_int_equal(start, m->q[i]);
	}
	for (uint32_t i = 0; i < m->head; i++) /* given back, unless handed out again */
		if (!dma_token_stream(m->qtok[i]) && !mapped_now(b, m->q[i], sp->gmask) &&
		    !model_pending(m, m->q[i]))
			assert_int_equal(dg_iova_find(sp->iova, m->q[i], NULL, NULL), -ENOENT);
	check_streams(dd, m, b);
}

static void unmap_some(struct dg_dma_dev *dd, struct model *m, struct buf *b)
{
	const uint64_t gm = dd->sp->gmask;
	unsigned int idx[MAXK], k = 0, want = 1 + rnd(MAXK), order = rnd(3);
	size_t len = 0;
	uint64_t dma[MAXK], iova[MAXK], size[MAXK], tok[MAXK];

	/* mapped buffers of one length, in buffer order (the map order: ascending IOVAs mostly) */
	for (unsigned int s = rnd(NBUF), i = 0; i < NBUF && k < want; i++) {
		struct buf *x = &b[(s + i) % NBUF];

		if (!x->dma || (len && x->len != len))
			continue;
		len = x->len;
		idx[k++] = (s + i) % NBUF;
	}
	if (!k)
		return;
	if (order == 1) /* descending */
		for (unsigned int i = 0; i < k / 2; i++) {
			unsigned int t = idx[i];

			idx[i] = idx[k - 1 - i];
			idx[k - 1 - i] = t;
		}
	else if (order == 2) /* scrambled */
		for (unsigned int i = k; i > 1; i--) {
			unsigned int j = rnd(i), t = idx[i - 1];

			idx[i - 1] = idx[j];
			idx[j] = t;
		}
	for (unsigned int i = 0; i < k; i++) {
		dma[i] = b[idx[i]].dma;
		iova[i] = dma[i] & ~gm;
		size[i] = ((dma[i] & gm) + len + gm) & ~gm;
		tok[i] = b[idx[i]].tok;
	}
	if (k == 1 && rnd(2)) {
		assert_int_equal(dg_dma_unmap_single(dd, dma[0], len, DG_DMA_FROM_DEVICE, 0, NULL),
				 0);
	} else {
		struct dg_dma_batch bt;

		dg_dma_batch_begin(dd, &bt);
		assert_int_equal(dg_dma_unmap_bulk(dd, dma, k, len, DG_DMA_FROM_DEVICE, 0, &bt), 0);
		assert_int_equal(dg_dma_batch_end(&bt), 0);
	}
	/* the page table is clear at once (the invalidation is what waits) */
	for (unsigned int i = 0; i < k; i++)
		for (uint64_t o = 0; o < size[i]; o += gm + 1)
			assert_int_equal(dg_pt_iova_to_phys(dd->sp->pt, iova[i] + o), 0);
	model_retire(m, iova, size, tok, k);
	for (unsigned int i = 0; i < k; i++)
		b[idx[i]].dma = 0;
}

static void map_some(struct dg_dma_dev *dd, const struct model *m, struct buf *b)
{
	const size_t len = rnd(4) ? 64 : 6000; /* one granule, or two */
	unsigned int idx[MAXK], k = 0, want = 1 + rnd(MAXK);
	void *bufs[MAXK];
	uint64_t dma[MAXK];

	for (unsigned int s = rnd(NBUF), i = 0; i < NBUF && k < want; i++)
		if (!b[(s + i) % NBUF].dma)
			idx[k++] = (s + i) % NBUF;
	if (!k)
		return;
	for (unsigned int i = 0; i < k; i++)
		bufs[i] = b[idx[i]].mem;
	assert_int_equal(dg_dma_map_bulk(dd, bufs, k, len, DG_DMA_FROM_DEVICE, 0, dma), 0);
	for (unsigned int i = 0; i < k; i++) {
		struct dma_rec *rec = dma_rec_get(&dd->sp->rec, dma[i], false);

		assert_false(model_pending(m, dma[i] & ~dd->sp->gmask));
		assert_int_equal(dg_pt_iova_to_phys(dd->sp->pt, dma[i]), (uintptr_t)bufs[i]);
		assert_non_null(rec);
		b[idx[i]].dma = dma[i];
		b[idx[i]].len = len;
		/* Relaxed: this thread or the worker (joined through the hand-off) wrote it. */
		b[idx[i]].tok = atomic_load_explicit(&rec->w3, memory_order_relaxed);
		if (len == 64) /* one granule: the stream's */
			assert_true(dma_token_stream(b[idx[i]].tok));
	}
}

/* A second thread that runs one step at a time for the test (the mutex hands each step over
 * and back: everything it did happens before the test's next check). */
enum { W_IDLE, W_MAP, W_UNMAP, W_DRAIN, W_STOP };

struct worker {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int op; /* W_*: W_IDLE when done */
	struct dg_dma_dev *dd;
	struct model *m;
	struct buf *b;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (w->op == W_IDLE)
			pthread_cond_wait(&w->cv, &w->mu);
		if (w->op == W_STOP)
			break;
		if (w->op == W_MAP)
			map_some(w->dd, w->m, w->b);
		else if (w->op == W_UNMAP)
			unmap_some(w->dd, w->m, w->b);
		else /* its stream's unused rest retired, spare chunks to the allocator */
			dma_stream_drain(w->dd->sp, dma_tstats(w->dd));
		w->op = W_IDLE;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

static void worker_do(struct worker *w, int op)
{
	pthread_mutex_lock(&w->mu);
	w->op = op;
	pthread_cond_broadcast(&w->cv);
	while (op != W_STOP && w->op != W_IDLE)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

static struct dg_dma_dev *lazy_dev(struct dma_fixture *f, struct dg_device **dev)
{
	struct dg_dma_dev_config c;

	assert_int_equal(fixture_init(f, false, 0), 0);
	f->dma->ncpus = 1; /* one flush queue: the model's */
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_LAZY;
	c.lazy.queue_size = QSIZE;
	c.lazy.timeout_ns = UINT64_MAX / 2; /* no timeout flush (no housekeeping either) */
	return fixture_dev(f, 1, DG_DMA_LAZY, &c, dev);
}

static void test_lazy_model(void **state)
{
	static struct model m;
	struct buf b[NBUF];
	struct worker w = {.op = W_IDLE};
	unsigned int chunks_max = 0, on_worker = 0;
	struct dma_fixture f;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	char *mem = page_alloc(NBUF * 2 * 4096);

	(void)state;
	assert_non_null(mem);
	memset(&m, 0, sizeof(m));
	dd = lazy_dev(&f, &dev);
	assert_non_null(dd);
	/* the ring's free-running positions wrap around 2^32 within the run */
	dd->lazy->fq[0].head = dd->lazy->fq[0].tail = UINT32_MAX - 3000;
	dg_dev_online(dev); /* in flight until the test acknowledges */
	for (unsigned int i = 0; i < NBUF; i++)
		b[i] = (struct buf){.mem = mem + (size_t)i * 2 * 4096 + 64 * (i % 3)};
	w.dd = dd;
	w.m = &m;
	w.b = b;
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	assert_int_equal(pthread_create(&w.th, NULL, worker_main, &w), 0);
	for (unsigned int step = 0; step < 6000; step++) {
		unsigned int op = rnd(10);
		const bool other = rnd(5) == 0; /* this step on the second thread */

		if (op < 4) {
			if (other)
				worker_do(&w, W_MAP);
			else
				map_some(dd, &m, b);
			on_worker += other;
		} else if (op < 9) {
			/* room for MAXK more after the call's reclaim, or acknowledge first */
			uint32_t pend = m.tail - (m.busy && m.acked ? m.busy_end : m.head);

			if (pend + MAXK > QSIZE) {
				dg_dev_quiesce(dev);
				m.acked = m.busy || m.acked;
			}
			if (other)
				worker_do(&w, W_UNMAP);
			else
				unmap_some(dd, &m, b);
			on_worker += other;
		} else {
			dg_dev_quiesce(dev);
			m.acked = m.busy || m.acked;
		}
		check(dd, &m, b);
		chunks_max = dd->sp->nchunks > chunks_max ? dd->sp->nchunks : chunks_max;
	}
	assert_true(m.flushes > 100);
	assert_true(on_worker > 500);
	/* chunks went round: more were taken than were ever held at once */
	assert_true(atomic_load(&dd->sp->chunk_gets) > chunks_max + 8);
	for (unsigned int i = 0; i < NBUF; i++)
		if (b[i].dma)
			assert_int_equal(dg_dma_unmap_single(dd, b[i].dma, b[i].len,
							     DG_DMA_FROM_DEVICE, 0, NULL),
					 0);
	dg_dev_offline(dev);
	assert_int_equal(dma_lazy_drain(dd, dd->lazy), 0);
	/* both streams' unused rests retired, every chunk spare, then given back */
	dma_stream_drain(dd->sp, dma_tstats(dd));
	worker_do(&w, W_DRAIN);
	dma_stream_drain(dd->sp, dma_tstats(dd));
	worker_do(&w, W_STOP);
	assert_int_equal(pthread_join(w.th, NULL), 0);
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
	assert_int_equal(dma_stream_census(dd->sp, NULL, 0), 0);
	{
		struct dg_dma_stats st;

		assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
		assert_int_equal(st.lazy_pending, 0);
		for (uint32_t i = 0; i < m.tail; i++) /* every IOVA given back */
			assert_int_equal(dg_iova_find(dd->sp->iova, m.q[i], NULL, NULL), -ENOENT);
	}
	assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
	fixture_dev_destroy(dd);
	fixture_fini(&f);
	free(mem);
}

struct acker {
	struct dg_device *dev;
	atomic_bool stop;
};

static void *ack_main(void *arg)
{
	struct acker *a = arg;

	/* Relaxed: a flag; the join orders everything after. */
	while (!atomic_load_explicit(&a->stop, memory_order_relaxed))
		dg_dev_quiesce(a->dev);
	dg_dev_offline(a->dev);
	return NULL;
}

static void test_lazy_full_bulk(void **state)
{
	enum { N = 100 };
	struct dma_fixture f;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	struct dg_dma_stats st;
	struct acker a;
	pthread_t th;
	char *mem = page_alloc(N * 4096);
	void *bufs[N];
	uint64_t dma[N];

	(void)state;
	assert_non_null(mem);
	dd = lazy_dev(&f, &dev);
	assert_non_null(dd);
	for (unsigned int i = 0; i < N; i++)
		bufs[i] = mem + (size_t)i * 4096;
	a.dev = dev;
	atomic_init(&a.stop, false);
	dg_dev_online(dev);
	assert_int_equal(pthread_create(&th, NULL, ack_main, &a), 0);
	for (unsigned int round = 0; round < 20; round++) {
		assert_int_equal(dg_dma_map_bulk(dd, bufs, N, 64, DG_DMA_TO_DEVICE, 0, dma), 0);
		assert_int_equal(dg_dma_unmap_bulk(dd, dma, N, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
		assert_true(st.lazy_pending <= QSIZE);
		for (unsigned int i = 0; i < N; i++) {
			int e = dg_iova_find(dd->sp->iova, dma[i], NULL, NULL);

			assert_true(e == 0 || e == -ENOENT);
		}
	}
	atomic_store_explicit(&a.stop, true, memory_order_relaxed);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	assert_true(st.lazy_full_waits > 0); /* 100 unmaps into a queue of 32 */
	assert_true(st.lazy_window_max_unmaps <= QSIZE);
	assert_int_equal(dma_lazy_drain(dd, dd->lazy), 0);
	/* the stream's unused rest retired: every chunk spare, given back */
	dma_stream_drain(dd->sp, dma_tstats(dd));
	assert_int_equal(dma_stream_census(dd->sp, NULL, 0), 0);
	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	assert_int_equal(st.lazy_pending, 0);
	for (unsigned int i = 0; i < N; i++)
		assert_int_equal(dg_iova_find(dd->sp->iova, dma[i], NULL, NULL), -ENOENT);
	assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
	fixture_dev_destroy(dd);
	fixture_fini(&f);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lazy_model),
		cmocka_unit_test(test_lazy_full_bulk),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
