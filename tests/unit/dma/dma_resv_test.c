/* SPDX-License-Identifier: MIT */
/*
 * A strict batch's submit in two steps (src/iommu/inval.h, map.c batch_issue_runs): its ring
 * slots are reserved before the page-table clears and written and committed after them. A
 * reserved slot that is never committed stops the queue (every later command waits behind
 * it), so on every path a submit takes, the queue must be closed when the call returns: no
 * producer batch open, the tail equal to `published`, every published stamp right
 * (inv_queue_check()) - checked right after dg_dma_batch_submit() and after the batch end:
 *  - the common way (stream runs only: the reservation before the clears), one run and
 *    several (one command, and one per run), policy strict and its Linux-reference variant
 *    (the mutex queue: the post reserves);
 *  - the general way (single unmaps and a bulk unmap mixed: reserved after the clears);
 *  - an empty batch, a batch of nothing but a submit, an end with nothing left to issue;
 *  - a refused reservation (the domain id forged: RANGE and DOMAIN refused, GLOBAL taken);
 *  - a wait that times out (the device online and never acknowledging).
 * After each, the strict guarantee: the device faults on every unmapped granule.
 * And the two steps themselves (white box): a held reservation keeps the queue open and a
 * later producer's command unpublished until the post; a refused reserve reserves nothing.
 */
#include "dma/dma_internal.h" /* before cmocka.h: it defines fail() */
#include "dma_test_util.h"
#include "iommu/inval.h"
#include "iommu/iommu_internal.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <assert.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#define G	   4096u
#define TIMEOUT_NS 5000000ull /* the timeout test's waits give up after 5 ms */

/* The queue is closed: nothing reserved and not committed. */
static void queue_closed(struct dma_fixture *f)
{
	struct inv_queue *q = &f->mmu->inv;

	assert_int_equal(inv_queue_check(q, stderr), 0);
	assert_int_equal(inv_queue_tail(q), atomic_load(&q->published));
}

static uint64_t queue_tail(struct dma_fixture *f)
{
	return inv_queue_tail(&f->mmu->inv);
}

/* The device reads @iova (its IOTLB then holds the translation), or writes it if the mapping
 * is device-write-only (FROM_DEVICE). */
static void touch(struct dg_device *dev, uint64_t iova)
{
	uint8_t b[8] = {0};
	int r = dg_dev_read(dev, iova, b, sizeof(b));

	if (r == -EACCES)
		r = dg_dev_write(dev, iova, b, sizeof(b));
	assert_int_equal(r, 0);
}

static void faults(struct dg_device *dev, uint64_t iova)
{
	uint8_t b[8];

	assert_int_equal(dg_dev_read(dev, iova, b, sizeof(b)), -EFAULT);
}

static uint64_t submits(struct dma_fixture *f)
{
	struct dg_iommu_stats s;

	dg_iommu_stats(f->mmu, &s);
	return s.submits;
}

/* The common way's cases (test_runs()). */
static struct runs_case {
	const char *name;
	bool reference;	     /* the mutex queue (the reserve only checks, the post locks) */
	bool ref_dev;	     /* the whole Linux reference: its unmaps' own submits */
	unsigned int pieces; /* rings of */
	unsigned int n;	     /* buffers each */
} runs_cases[] = {
	{"test_runs_one", false, false, 1, 32},
	{"test_runs_two", false, false, 2, 32},
	{"test_runs_eight", false, false, 8, 4},
	{"test_runs_mutex_queue", true, false, 2, 32}, /* strict's own batches */
	{"test_runs_reference", true, true, 2, 32},
};
#define NRUNS (sizeof(runs_cases) / sizeof(runs_cases[0]))

/*
 * Bulk maps in c->pieces rings of c->n buffers each (alternating directions: each its own
 * stream), unmapped in one batch by bulk unmaps (stream runs: the common way), submitted and
 * ended; the queue closed after the submit and after the end, every buffer faulting.
 */
static void test_runs(void **state)
{
	const struct runs_case *c = *state;
	const unsigned int pieces = c->pieces, n = c->n;
	struct dma_fixture f;
	struct dg_dma_dev_config cfg;
	struct dg_dma_batch b;
	uint8_t *mem = page_alloc((size_t)pieces * n * G);
	void *bufs[8][64];
	uint64_t dma[8][64], t0, s0;

	assert_true(pieces <= 8 && n <= 64);
	fixture_config(&cfg, DG_DMA_STRICT, c->ref_dev);
	assert_int_equal(fixture_open(&f, c->reference, 0, &cfg, true), 0);
	for (unsigned int p = 0; p < pieces; p++) {
		page_ptrs(bufs[p], mem + (size_t)p * n * G, n);
		assert_int_equal(dg_dma_map_bulk(f.dd, bufs[p], n, 64,
						 p & 1 ? DG_DMA_TO_DEVICE : DG_DMA_FROM_DEVICE, 0,
						 dma[p]),
				 0);
		for (unsigned int i = 0; i < n; i++)
			touch(f.dev, dma[p][i]);
	}
	queue_closed(&f);
	t0 = queue_tail(&f);
	s0 = submits(&f);
	dg_dma_batch_begin(f.dd, &b);
	for (unsigned int p = 0; p < pieces; p++)
		assert_int_equal(dg_dma_unmap_bulk(f.dd, dma[p], n, 64,
						   p & 1 ? DG_DMA_TO_DEVICE : DG_DMA_FROM_DEVICE, 0,
						   &b),
				 0);
	if (!c->ref_dev)
		assert_int_equal(b.run_clear, (1u << pieces) - 1); /* the common way's batch */
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	queue_closed(&f);
	assert_true(queue_tail(&f) > t0);
	if (!c->ref_dev) /* (the Linux reference submits per unmap) */
		assert_int_equal(submits(&f) - s0, 1);
	s0 = submits(&f);
	assert_int_equal(dg_dma_batch_submit(&b), 0); /* nothing new: nothing reserved */
	assert_int_equal(dg_dma_batch_end(&b), 0);
	queue_closed(&f);
	assert_int_equal(submits(&f), s0);
	for (unsigned int p = 0; p < pieces; p++)
		for (unsigned int i = 0; i < n; i++)
			faults(f.dev, dma[p][i]);
	fixture_faults(&f);
	assert_int_equal(fixture_close(&f), 0);
	free(mem);
}

/* The general way: single unmaps and a bulk unmap in one batch (reserved after the clears). */
static void test_mixed_batch(void **state)
{
	enum { N = 16 };
	struct dma_fixture f;
	struct dg_dma_batch b;
	uint8_t *mem = page_alloc(2 * N * G);
	void *bufs[N];
	uint64_t dma[N], one[N], s0;

	(void)state;
	assert_int_equal(fixture_open(&f, false, 0, NULL, true), 0);
	for (unsigned int i = 0; i < N; i++) {
		bufs[i] = mem + (size_t)i * G;
		assert_int_equal(dg_dma_map_single(f.dd, mem + (size_t)(N + i) * G, G,
						   DG_DMA_TO_DEVICE, 0, &one[i]),
				 0);
		touch(f.dev, one[i]);
	}
	assert_int_equal(dg_dma_map_bulk(f.dd, bufs, N, 64, DG_DMA_FROM_DEVICE, 0, dma), 0);
	for (unsigned int i = 0; i < N; i++)
		touch(f.dev, dma[i]);
	s0 = submits(&f);
	dg_dma_batch_begin(f.dd, &b);
	for (unsigned int i = 0; i < N; i += 2)
		assert_int_equal(dg_dma_unmap_single(f.dd, one[i], G, DG_DMA_TO_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_unmap_bulk(f.dd, dma, N, 64, DG_DMA_FROM_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	queue_closed(&f);
	for (unsigned int i = 1; i < N; i += 2) /* after a submit: a second one at the end */
		assert_int_equal(dg_dma_unmap_single(f.dd, one[i], G, DG_DMA_TO_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	queue_closed(&f);
	assert_int_equal(submits(&f) - s0, 2);
	for (unsigned int i = 0; i < N; i++) {
		faults(f.dev, dma[i]);
		faults(f.dev, one[i]);
	}
	fixture_faults(&f);
	assert_int_equal(fixture_close(&f), 0);
	free(mem);
}

/* Nothing to invalidate: nothing reserved. */
static void test_empty_batch(void **state)
{
	struct dma_fixture f;
	struct dg_dma_batch b;
	uint64_t t0;

	(void)state;
	assert_int_equal(fixture_open(&f, false, 0, NULL, true), 0);
	t0 = queue_tail(&f);
	dg_dma_batch_begin(f.dd, &b);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	dg_dma_batch_begin(f.dd, &b);
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	queue_closed(&f);
	assert_int_equal(queue_tail(&f), t0);
	assert_int_equal(fixture_close(&f), 0);
}

/*
 * A refused reservation: the space's domain id forged to one no domain has (white box, as
 * dma_inval_fallback_test), so the batch's RANGE command and the DOMAIN fallback are refused
 * and a GLOBAL command is reserved and posted; the queue closed, the buffers faulting.
 */
static void test_refused_reserve(void **state)
{
	enum { N = 32 };
	struct dma_fixture f;
	struct dg_dma_batch b;
	uint8_t *mem = page_alloc(N * G);
	void *bufs[N];
	uint64_t dma[N];
	uint32_t dom_id;
	struct dg_iommu_stats s0, s1;

	(void)state;
	assert_int_equal(fixture_open(&f, false, 0, NULL, true), 0);
	page_ptrs(bufs, mem, N);
	assert_int_equal(dg_dma_map_bulk(f.dd, bufs, N, 64, DG_DMA_FROM_DEVICE, 0, dma), 0);
	for (unsigned int i = 0; i < N; i++)
		touch(f.dev, dma[i]);
	dom_id = f.dd->sp->dom_id;
	f.dd->sp->dom_id = DG_DOMAIN_ID_MAX;
	dg_iommu_stats(f.mmu, &s0);
	dg_dma_batch_begin(f.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(f.dd, dma, N, 64, DG_DMA_FROM_DEVICE, 0, &b), 0);
	assert_int_equal(b.run_clear, 1);
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	queue_closed(&f);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	dg_iommu_stats(f.mmu, &s1);
	f.dd->sp->dom_id = dom_id;
	queue_closed(&f);
	assert_int_equal(s1.submits - s0.submits, 1);
	assert_int_equal(s1.inval_ranges - s0.inval_ranges, 0);
	assert_int_equal(s1.inval_cmds[DG_INVAL_GLOBAL] - s0.inval_cmds[DG_INVAL_GLOBAL], 1);
	for (unsigned int i = 0; i < N; i++)
		faults(f.dev, dma[i]);
	fixture_faults(&f);
	assert_int_equal(fixture_close(&f), 0);
	free(mem);
}

/* A wait that times out: the submit's slots were committed all the same (a later wait can
 * complete); the end parks everything, the device then answers. */
static void test_timeout(void **state)
{
	enum { N = 32 };
	struct dma_fixture f;
	struct dg_dma_batch b;
	uint8_t *mem = page_alloc(N * G);
	void *bufs[N];
	uint64_t dma[N], seq;

	(void)state;
	assert_int_equal(fixture_open(&f, false, TIMEOUT_NS, NULL, false), 0);
	page_ptrs(bufs, mem, N);
	assert_int_equal(dg_dma_map_bulk(f.dd, bufs, N, 64, DG_DMA_FROM_DEVICE, 0, dma), 0);
	touch(f.dev, dma[0]); /* online, and never acknowledging from now on */
	dg_dma_batch_begin(f.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(f.dd, dma, N, 64, DG_DMA_FROM_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	queue_closed(&f);
	seq = b.seq;
	assert_int_equal(dg_dma_batch_end(&b), -ETIMEDOUT);
	queue_closed(&f);
	fixture_dev_answers(f.dev);
	assert_int_equal(dg_inval_wait(f.mmu, seq), 0);
	assert_int_equal(dg_dma_housekeep(f.dma), 0);
	for (unsigned int i = 0; i < N; i++)
		faults(f.dev, dma[i]);
	queue_closed(&f);
	fixture_faults(&f);
	assert_int_equal(fixture_close(&f), 0);
	free(mem);
}

/* A joined batch opened by hand (inv_queue_reserve of one slot): its start, @at. */
static uint64_t joined_open(struct dma_fixture *f, uint64_t at)
{
	bool owner;
	uint64_t start = inv_queue_reserve(&f->mmu->inv, 1, &owner);

	assert_true(owner);
	assert_int_equal(start, at);
	return start;
}

/* Its owner's close: until then nothing from @start on is published (the joined slots wait
 * for it); the close covers the joined slots, published becomes @end. */
static void joined_close(struct dma_fixture *f, uint64_t start, uint64_t end)
{
	struct inv_cmd ic = {.op = INV_OP_GLOBAL, .mark = INV_MARK_SUBMIT};

	assert_int_equal(atomic_load(&f->mmu->inv.published), start);
	assert_int_equal(inv_queue_check(&f->mmu->inv, NULL), -EUCLEAN);
	inv_queue_write(&f->mmu->inv, start, &ic);
	inv_queue_commit(&f->mmu->inv, start, 1, true);
	queue_closed(f);
	assert_int_equal(atomic_load(&f->mmu->inv.published), end);
}

/* A second producer in its own thread: dg_inval_submit() on @mmu, or the DMA layer's
 * dma_inval_submit() on @dd when it is set. */
struct later {
	struct dg_iommu *mmu;
	struct dg_dma_dev *dd;
	struct dg_inval_cmd c;
	uint64_t seq;
	_Atomic int done;
};

static void *later_main(void *arg)
{
	struct later *l = arg;

	if (l->dd)
		dma_inval_submit(l->dd, &l->c, 1, &l->seq);
	else if (dg_inval_submit(l->mmu, &l->c, 1, &l->seq))
		l->seq = 0;
	atomic_store(&l->done, 1);
	return NULL;
}

/* Start @l's producer: @c submitted on @mmu, or through @dd when not NULL. */
static void later_start(struct later *l, pthread_t *th, struct dg_iommu *mmu, struct dg_dma_dev *dd,
			const struct dg_inval_cmd *c)
{
	l->mmu = mmu;
	l->dd = dd;
	l->c = *c;
	l->seq = 0;
	atomic_init(&l->done, 0);
	assert_int_equal(pthread_create(th, NULL, later_main, l), 0);
}

/* The post of a reservation of two slots at @t0 held by hand while @l's producer waited
 * behind it: nothing was published before it; then ours is t0 + 2, the producer's t0 + 4,
 * published in order, and both complete. */
static void held_post(struct dma_fixture *f, struct later *l, pthread_t th,
		      const struct dg_inval_cmd *c, struct inval_ticket *t, uint64_t t0)
{
	uint64_t seq;

	assert_true(atomic_load(&f->mmu->inv.published) <= t0);
	iommu_inval_post(f->mmu, c, 1, t, &seq);
	assert_int_equal(seq, t0 + 2);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(l->seq, t0 + 4);
	queue_closed(f);
	assert_int_equal(dg_inval_wait(f->mmu, l->seq), 0);
}

/*
 * The two steps (white box). A refused reserve leaves the tail where it was. A reservation
 * made with no batch open is closed (inval_queue.h): the producer publishes alone, so while
 * it is held the queue is open (inv_queue_check refuses it: what the tests above would see if
 * a path forgot its post), and a later producer (another thread: it owns the next batch)
 * waits in its commit until the post, which publishes both in order. A reservation made
 * while a batch is open joins it: its post returns with nothing published, the batch's owner
 * publishes it.
 */
static void test_ticket(void **state)
{
	struct dma_fixture f;
	struct inval_ticket t;
	struct dg_inval_cmd c, bad;
	struct later l;
	pthread_t th;
	uint64_t t0, seq, start;

	(void)state;
	assert_int_equal(fixture_open(&f, false, 0, NULL, true), 0);
	c = (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
				  .flags = DG_INVAL_LEAF,
				  .domain = f.dd->sp->dom_id,
				  .iova = f.dd->sp->first,
				  .size = 3 * G};
	bad = c;
	bad.size = G + 1; /* not aligned: refused */
	t0 = queue_tail(&f);
	assert_int_equal(iommu_inval_reserve(f.mmu, &bad, 1, &t), -EINVAL);
	assert_int_equal(queue_tail(&f), t0);
	queue_closed(&f);

	/* alone: a later producer waits for the post */
	assert_int_equal(iommu_inval_reserve(f.mmu, &c, 1, &t), 0);
	assert_true(t.reserved && t.owner);
	assert_int_equal(t.total, 2); /* [first, first + 3 granules): two exact blocks */
	assert_int_equal(queue_tail(&f), t0 + 2);
	assert_int_equal(inv_queue_check(&f.mmu->inv, NULL), -EUCLEAN);
	later_start(&l, &th, f.mmu, NULL, &c);
	for (int i = 0; i < 50 && !atomic_load(&l.done); i++)
		usleep(1000);
	assert_false(atomic_load(&l.done)); /* its commit waits for ours */
	held_post(&f, &l, th, &c, &t, t0);

	/* joined: a batch open (its reserve by hand), the post publishes nothing */
	start = joined_open(&f, t0 + 4);
	assert_int_equal(iommu_inval_reserve(f.mmu, &c, 1, &t), 0);
	assert_false(t.owner);
	iommu_inval_post(f.mmu, &c, 1, &t, &seq);
	assert_int_equal(seq, t0 + 7);
	joined_close(&f, start, t0 + 7);
	assert_int_equal(dg_inval_wait(f.mmu, seq), 0);
	assert_int_equal(fixture_close(&f), 0);
}

/*
 * The DMA layer's submits outside a batch (dma_inval_submit: a strict unmap without a batch,
 * the Linux reference's per-page flushes, lazy's flush started by housekeeping) take the same
 * two steps with nothing between: after each the queue is closed, one submit counted, and
 * the device faults on what was unmapped - on the lock-free queue and on the mutex queue.
 */
static void unbatched(bool reference, enum dg_dma_policy policy, bool ref_dev)
{
	struct dma_fixture f;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	uint8_t *mem = page_alloc(4 * G);
	uint64_t d1, d3, t0, s0;

	assert_int_equal(fixture_init(&f, reference, 0), 0);
	dd = fixture_idle_dev(&f, 1, policy, ref_dev, &dev);
	assert_non_null(dd);
	assert_int_equal(dg_dma_map_single(dd, mem, G, DG_DMA_TO_DEVICE, 0, &d1), 0);
	assert_int_equal(dg_dma_map_single(dd, mem + G, 3 * G, DG_DMA_TO_DEVICE, 0, &d3), 0);
	touch(dev, d1);
	touch(dev, d3 + 2 * G);
	queue_closed(&f);
	t0 = queue_tail(&f);
	s0 = submits(&f);
	assert_int_equal(dg_dma_unmap_single(dd, d1, G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_unmap_single(dd, d3, 3 * G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	if (policy == DG_DMA_LAZY) {
		assert_int_equal(submits(&f), s0); /* queued, no flush yet */
		fixture_advance(&f, 1000000000ull);
		assert_int_equal(dg_dma_housekeep(f.dma), 0); /* the flush's submit */
		assert_int_equal(submits(&f) - s0, 1);
	} else if (!ref_dev) {
		assert_int_equal(submits(&f) - s0, 2); /* one per unmap */
	} else {
		assert_int_equal(submits(&f) - s0, 4); /* one per page */
	}
	queue_closed(&f);
	assert_true(queue_tail(&f) > t0);
	faults(dev, d1);
	for (unsigned int i = 0; i < 3; i++)
		faults(dev, d3 + i * G);
	assert_int_equal(dg_dma_housekeep(f.dma), 0);
	queue_closed(&f);
	fixture_faults(&f);
	assert_int_equal(fixture_end(&f, dd), 0);
	free(mem);
}

/* unbatched()'s cases (main() lists every one under its own name). */
static const struct unbatched_case {
	const char *name;
	bool reference; /* the mutex queue */
	enum dg_dma_policy policy;
	bool ref_dev; /* the whole Linux reference: one submit per page */
} unbatched_cases[] = {
	{"test_unbatched_strict", false, DG_DMA_STRICT, false},
	{"test_unbatched_strict_mutex_queue", true, DG_DMA_STRICT, false},
	{"test_unbatched_reference", true, DG_DMA_STRICT, true},
	{"test_unbatched_lazy", false, DG_DMA_LAZY, false},
};
#define NUNBATCHED (sizeof(unbatched_cases) / sizeof(unbatched_cases[0]))

static void test_unbatched(void **state)
{
	const struct unbatched_case *c = *state;

	unbatched(c->reference, c->policy, c->ref_dev);
}

/*
 * dma_inval_submit() takes a closed reservation (white box; map.c: every DMA submit is the two
 * steps). Behind a reservation held by hand, a submit from another thread waits in its commit
 * (the previous publisher first) with no batch open for others to join: joined32 stays 0 (a
 * joined reservation, dg_inval_submit()'s, would have opened one: 1). After the held post
 * both are published in order. With a joined batch open (by hand) the submit joins it and
 * returns at once, nothing published: the batch's owner publishes its slots.
 */
static void test_submit_closed(void **state)
{
	struct dma_fixture f;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	struct inv_queue *q;
	struct inval_ticket t;
	struct dg_inval_cmd c;
	struct later l;
	pthread_t th;
	uint64_t t0, seq, start;

	(void)state;
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, &dev);
	assert_non_null(dd);
	q = &f.mmu->inv;
	c = (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
				  .flags = DG_INVAL_LEAF,
				  .domain = dd->sp->dom_id,
				  .iova = dd->sp->first,
				  .size = 3 * G}; /* two slots */
	t0 = queue_tail(&f);

	/* behind a held reservation: the submit waits, no batch open */
	assert_int_equal(iommu_inval_reserve(f.mmu, &c, 1, &t), 0);
	assert_true(t.reserved && t.owner);
	later_start(&l, &th, f.mmu, dd, &c);
	for (int i = 0; i < 2000 && queue_tail(&f) != t0 + 4; i++)
		usleep(1000);
	assert_int_equal(queue_tail(&f), t0 + 4); /* reserved */
	usleep(10000);
	assert_false(atomic_load(&l.done));		      /* its commit waits for ours */
	assert_int_equal((uint32_t)atomic_load(&q->resv), 0); /* closed: nothing to join */
	held_post(&f, &l, th, &c, &t, t0);

	/* a joined batch open: the submit joins it, its owner publishes */
	start = joined_open(&f, t0 + 4);
	assert_int_equal(dma_inval_submit(dd, &c, 1, &seq), 0);
	assert_int_equal(seq, t0 + 7);
	joined_close(&f, start, t0 + 7);
	assert_int_equal(dg_inval_wait(f.mmu, seq), 0);
	assert_int_equal(fixture_end(&f, dd), 0);
}
/* The case runs_cases[i] of test_runs, under its own name (main() lists every one). */
#define RUNS_TEST(i)                                                      \
	{                                                                 \
		runs_cases[i].name, test_runs, NULL, NULL, &runs_cases[i] \
	}
static_assert(NRUNS == 5, "a RUNS_TEST() in main() for every case of runs_cases");

/* The case unbatched_cases[i] of test_unbatched, likewise. */
#define UNBATCHED_TEST(i)                                                                        \
	{                                                                                        \
		unbatched_cases[i].name, test_unbatched, NULL, NULL, (void *)&unbatched_cases[i] \
	}
static_assert(NUNBATCHED == 4, "an UNBATCHED_TEST() in main() for every unbatched case");

int main(void)
{
	const struct CMUnitTest tests[] = {
		RUNS_TEST(0),
		RUNS_TEST(1),
		RUNS_TEST(2),
		RUNS_TEST(3),
		RUNS_TEST(4),
		cmocka_unit_test(test_mixed_batch),
		cmocka_unit_test(test_empty_batch),
		cmocka_unit_test(test_refused_reserve),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_ticket),
		UNBATCHED_TEST(0),
		UNBATCHED_TEST(1),
		UNBATCHED_TEST(2),
		UNBATCHED_TEST(3),
		cmocka_unit_test(test_submit_closed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
