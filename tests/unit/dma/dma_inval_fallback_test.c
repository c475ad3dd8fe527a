/* SPDX-License-Identifier: MIT */
/*
 * The invalidation submit's fallbacks (src/dma/map.c dma_inval_submit()): the commands as
 * asked; refused, one DOMAIN command; that refused too, one GLOBAL command. Every strict
 * caller relies on it never failing (the page-table entries are cleared already), so each
 * fallback must cover everything the refused commands covered, and nothing it does may
 * take a translation that is still mapped.
 *
 *  - RANGE -> DOMAIN: an IOMMU with a 16-slot ring refuses (-E2BIG) a batch end's per-run
 *    RANGE commands when they need more slots than that. Leaf-only ranges take at most two
 *    slots each (inval.c leaf_cover), so eight runs never overflow 16 slots: the batch must
 *    free a table page (a 2 MiB mapping in 4 KiB pages, its last-level table covered whole;
 *    with a two-step unlink in the batch, batch_issue() unmaps each entry by dg_pt_unmap(),
 *    which unlinks it), so that its eight runs become exact, non-leaf blocks: 1 + 6 x 3 + 1
 *    = 20 slots.
 *  - DOMAIN -> GLOBAL: a DOMAIN command is refused only for a domain id that names no
 *    domain (-ENOENT), which the DMA layer never sends while its space lives. The test
 *    forges it (white box, as dma_api_test does): the space's dom_id points at an id no
 *    domain has while a batch end and a strict single unmap submit, so their RANGE and
 *    DOMAIN commands are refused and only a GLOBAL one can cover them.
 *
 *  - Lazy's flush (lazy.c flush_start: one RANGE over the open generation's hull, started
 *    here by a housekeeping pass after the timeout) through both: RANGE -> DOMAIN needs a
 *    non-leaf hull whose exact split is over 16 slots (a table page freed, both ends far
 *    from aligned); DOMAIN -> GLOBAL forges the domain id while the flush starts.
 *
 * After each: the device faults on every granule unmapped (it read each one just before, so
 * its IOTLB held the translation: a refused command left uncovered would still reach), every
 * mapping not unmapped still translates (to its own bytes), and the iommu statistics show
 * which command was queued (the fallback was taken, not the normal path).
 */
#include "dma/dma_internal.h" /* before cmocka.h: it defines fail() */
#include "dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#define G    4096u
#define RING 16u /* the smallest ring dg_iommu_create() takes */
#define BIG  (2u << 20)

/* The fixture of dma_test_util.h with a 16-slot invalidation ring. */
static void tiny_init(struct dma_fixture *f)
{
	struct dg_iommu_config ic;

	dg_iommu_config_init(&ic);
	ic.inval_queue_len = RING;
	ic.log = NULL;
	assert_int_equal(fixture_init_iommu(f, &ic), 0);
}

static struct dg_iommu_stats mmu_stats(struct dma_fixture *f)
{
	struct dg_iommu_stats s;

	dg_iommu_stats(f->mmu, &s);
	return s;
}

/* Between @s0 and @s1: @submits submits queued @ranges RANGE commands and @domain DOMAIN and
 * @global GLOBAL ones (no PAGE command: the DMA layer sends none here). */
static void queued(const struct dg_iommu_stats *s0, const struct dg_iommu_stats *s1,
		   uint64_t submits, uint64_t ranges, uint64_t domain, uint64_t global)
{
	assert_int_equal(s1->submits - s0->submits, submits);
	assert_int_equal(s1->inval_ranges - s0->inval_ranges, ranges);
	assert_int_equal(s1->inval_cmds[DG_INVAL_PAGE] - s0->inval_cmds[DG_INVAL_PAGE], 0);
	assert_int_equal(s1->inval_cmds[DG_INVAL_DOMAIN] - s0->inval_cmds[DG_INVAL_DOMAIN], domain);
	assert_int_equal(s1->inval_cmds[DG_INVAL_GLOBAL] - s0->inval_cmds[DG_INVAL_GLOBAL], global);
}

/* The device reads every granule of [iova, iova + len): fills its IOTLB. */
static void touch(struct dg_device *dev, uint64_t iova, uint64_t len)
{
	uint8_t b[8];

	for (uint64_t a = iova & ~(uint64_t)(G - 1); a < iova + len; a += G)
		assert_int_equal(dg_dev_read(dev, a < iova ? iova : a, b, sizeof(b)), 0);
}

/* Every granule of [iova, iova + len) faults for the device. */
static void all_fault(struct dg_device *dev, uint64_t iova, uint64_t len)
{
	uint8_t b[8];

	for (uint64_t a = iova & ~(uint64_t)(G - 1); a < iova + len; a += G)
		assert_int_equal(dg_dev_read(dev, a, b, sizeof(b)), -EFAULT);
}

/* The device reads @len bytes at @iova and gets @want's. */
static void reads(struct dg_device *dev, uint64_t iova, const void *want, size_t len)
{
	uint8_t b[64];

	assert_true(len <= sizeof(b));
	assert_int_equal(dg_dev_read(dev, iova, b, len), 0);
	assert_memory_equal(b, want, len);
}

/*
 * The DOMAIN -> GLOBAL tests' world: the 16-slot fixture, the device under test (@policy,
 * rid 1) and a second strict one (rid 2, its own domain) with one mapping, d2 of mem2,
 * which must keep translating whatever the first one's GLOBAL commands do.
 */
struct two {
	struct dma_fixture f;
	struct dg_device *dev, *dev2;
	struct dg_dma_dev *dd, *dd2;
	uint8_t *mem2;
	uint64_t d2;
	uint32_t dom_id; /* dd's real domain id while forged */
};

static void two_init(struct two *t, enum dg_dma_policy policy)
{
	tiny_init(&t->f);
	t->dev = t->dev2 = NULL;
	t->dd = fixture_idle_dev(&t->f, 1, policy, false, &t->dev);
	t->dd2 = fixture_idle_dev(&t->f, 2, DG_DMA_STRICT, false, &t->dev2);
	assert_non_null(t->dd);
	assert_non_null(t->dd2);
	t->mem2 = page_alloc(G);
	memset(t->mem2, 0x77, G);
	assert_int_equal(dg_dma_map_single(t->dd2, t->mem2, G, DG_DMA_TO_DEVICE, 0, &t->d2), 0);
	touch(t->dev2, t->d2, G);
}

/* dd's space gets a domain id no domain has (two were created: ids far below it): every
 * RANGE and DOMAIN command it sends is refused (-ENOENT). */
static void two_forge(struct two *t)
{
	assert_true(dg_domain_id(dg_dma_dev_domain(t->dd)) < DG_DOMAIN_ID_MAX);
	assert_true(dg_domain_id(dg_dma_dev_domain(t->dd2)) < DG_DOMAIN_ID_MAX);
	t->dom_id = t->dd->sp->dom_id;
	t->dd->sp->dom_id = DG_DOMAIN_ID_MAX;
}

static void two_unforge(struct two *t)
{
	t->dd->sp->dom_id = t->dom_id;
}

/* The second device still reaches its mapping; then both are checked and destroyed. */
static void two_fini(struct two *t)
{
	reads(t->dev2, t->d2, t->mem2, 64);
	assert_int_equal(dg_dma_unmap_single(t->dd2, t->d2, G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	fixture_faults(&t->f);
	assert_int_equal(dg_dma_dev_check(t->dd2, stderr), 0);
	fixture_dev_destroy(t->dd2);
	assert_int_equal(fixture_end(&t->f, t->dd), 0);
	free(t->mem2);
}

struct run {
	uint64_t lo, hi;
};

static int run_cmp(const void *x, const void *y)
{
	const struct run *a = x, *b = y;

	return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/*
 * RANGE -> DOMAIN. Eight runs far apart (so batch_issue() asks for one RANGE per run, not
 * one over their hull, and not a DOMAIN command of its own: at most BATCH_PSI_RUNS runs),
 * a table page freed (non-leaf: exact blocks), 20 slots: the ring refuses them, one DOMAIN
 * command must cover all eight.
 */
static void test_range_refused_domain(void **state)
{
	enum { NS = 6, NK = 4 };
	struct dma_fixture f;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	struct dg_dma_batch b;
	struct dg_dma_iova_state fill[3] = {{0}}, lst = {0};
	uint8_t *bigmem = NULL, *smem = page_alloc(NS * 8 * G), *kmem = page_alloc(NK * G);
	uint8_t *lmem = page_alloc(G);
	uint64_t dbig, ds[NS], dk[NK], dlink, sum = 0;
	struct run runs[NS + 2];
	struct dg_iommu_stats s0, s1;

	(void)state;
	tiny_init(&f);
	dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, &dev);
	assert_non_null(dd);
	/* 2 MiB at a host address 4 KiB past a 2 MiB boundary: mapped in 4 KiB pages, so its
	 * (2 MiB aligned) IOVA range is one whole last-level table */
	assert_int_equal(posix_memalign((void **)&bigmem, BIG, 2 * BIG), 0);
	for (size_t i = 0; i < 2 * BIG; i += G)
		bigmem[i] = (uint8_t)(i / G);
	assert_int_equal(dg_dma_map_single(dd, bigmem + G, BIG, DG_DMA_BIDIRECTIONAL, 0, &dbig), 0);
	assert_int_equal(dbig % BIG, 0);
	/* 14 MiB reserved next to it (the allocator hands out naturally aligned ranges from the
	 * top down: these fill the rest of its 16 MiB block), so the runs below lie far apart */
	for (unsigned int i = 0; i < 3; i++)
		assert_int_equal(dg_dma_iova_alloc(dd, (uint64_t)BIG << i, &fill[i]), 0);
	/* a two-step link: the batch is mixed, so batch_issue() unmaps entry by entry */
	assert_int_equal(dg_dma_iova_alloc(dd, 4 * G, &lst), 0);
	memset(lmem, 0x6c, G);
	assert_int_equal(dg_dma_iova_link(&lst, 0, lmem, G, DG_DMA_BIDIRECTIONAL, &dlink), 0);
	assert_int_equal(dg_dma_iova_sync(&lst, 0, 4 * G), 0);
	/* six runs of 7 granules (IOVAs 8-granule aligned: 4 + 2 + 1, three exact blocks) */
	for (unsigned int i = 0; i < NS; i++) {
		memset(smem + (size_t)i * 8 * G, 0x10 + i, 7 * G);
		assert_int_equal(dg_dma_map_single(dd, smem + (size_t)i * 8 * G, 7 * G,
						   DG_DMA_TO_DEVICE, 0, &ds[i]),
				 0);
	}
	/* mappings that stay */
	for (unsigned int i = 0; i < NK; i++) {
		memset(kmem + (size_t)i * G, 0xa0 + i, G);
		assert_int_equal(dg_dma_map_single(dd, kmem + (size_t)i * G, G, DG_DMA_TO_DEVICE, 0,
						   &dk[i]),
				 0);
	}
	/* the precondition: eight runs, none adjacent, their hull over four times their bytes */
	runs[0] = (struct run){dbig, dbig + BIG};
	runs[1] = (struct run){dlink, dlink + G};
	for (unsigned int i = 0; i < NS; i++)
		runs[2 + i] = (struct run){ds[i], ds[i] + 7 * G};
	qsort(runs, NS + 2, sizeof(runs[0]), run_cmp);
	for (unsigned int i = 0; i < NS + 2; i++) {
		sum += runs[i].hi - runs[i].lo;
		if (i)
			assert_true(runs[i].lo > runs[i - 1].hi);
	}
	assert_true(runs[NS + 1].hi - runs[0].lo > 4 * sum);
	/* the device has read all of it: every translation is in its IOTLB */
	touch(dev, dbig, BIG);
	touch(dev, dlink, G);
	for (unsigned int i = 0; i < NS; i++)
		touch(dev, ds[i], 7 * G);
	for (unsigned int i = 0; i < NK; i++)
		touch(dev, dk[i], G);

	s0 = mmu_stats(&f);
	dg_dma_batch_begin(dd, &b);
	assert_int_equal(dg_dma_unmap_single(dd, dbig, BIG, DG_DMA_BIDIRECTIONAL, 0, &b), 0);
	for (unsigned int i = 0; i < NS; i++)
		assert_int_equal(dg_dma_unmap_single(dd, ds[i], 7 * G, DG_DMA_TO_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_iova_unlink(&lst, 0, G, DG_DMA_BIDIRECTIONAL, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	s1 = mmu_stats(&f);
	/* strict: nothing unmapped reaches, everything else does */
	all_fault(dev, dbig, BIG);
	all_fault(dev, dlink, G);
	for (unsigned int i = 0; i < NS; i++)
		all_fault(dev, ds[i], 7 * G);
	for (unsigned int i = 0; i < NK; i++)
		reads(dev, dk[i], kmem + (size_t)i * G, 64);
	/* the per-run RANGEs were refused (nothing queued by them), one DOMAIN command went */
	queued(&s0, &s1, 1, 0, 1, 0);

	/* the IOVAs came back: mapped again, the device reaches the new buffers */
	assert_int_equal(dg_dma_map_single(dd, bigmem + G, BIG, DG_DMA_BIDIRECTIONAL, 0, &dbig), 0);
	reads(dev, dbig + 5 * G, bigmem + 6 * G, 1);
	assert_int_equal(dg_dma_unmap_single(dd, dbig, BIG, DG_DMA_BIDIRECTIONAL, 0, NULL), 0);
	for (unsigned int i = 0; i < NK; i++)
		assert_int_equal(dg_dma_unmap_single(dd, dk[i], G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_iova_free(&lst), 0);
	for (unsigned int i = 0; i < 3; i++)
		assert_int_equal(dg_dma_iova_free(&fill[i]), 0);
	fixture_faults(&f);
	assert_int_equal(fixture_end(&f, dd), 0);
	free(bigmem);
	free(smem);
	free(kmem);
	free(lmem);
}

/*
 * DOMAIN -> GLOBAL: the space's domain id forged to one no domain has, around a batch end
 * (four runs) and a strict single unmap. The GLOBAL commands must cover both, and a second
 * device in its own domain keeps translating its mapping.
 */
static void test_domain_refused_global(void **state)
{
	enum { N = 4 };
	struct two t;
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	struct dg_dma_batch b;
	uint8_t *mem = page_alloc((N + 3) * 4 * G);
	uint64_t d[N], one, keep;
	struct dg_iommu_stats s0, s1;

	(void)state;
	two_init(&t, DG_DMA_STRICT);
	dd = t.dd;
	dev = t.dev;
	for (size_t i = 0; i < (N + 3) * 4 * G; i++)
		mem[i] = (uint8_t)(i * 7 + i / G);
	for (unsigned int i = 0; i < N; i++)
		assert_int_equal(dg_dma_map_single(dd, mem + (size_t)i * 4 * G, 3 * G,
						   DG_DMA_TO_DEVICE, 0, &d[i]),
				 0);
	assert_int_equal(dg_dma_map_single(dd, mem + (size_t)N * 4 * G, 2 * G, DG_DMA_TO_DEVICE, 0,
					   &one),
			 0);
	assert_int_equal(dg_dma_map_single(dd, mem + (size_t)(N + 1) * 4 * G, 2 * G,
					   DG_DMA_TO_DEVICE, 0, &keep),
			 0);
	for (unsigned int i = 0; i < N; i++)
		touch(dev, d[i], 3 * G);
	touch(dev, one, 2 * G);
	touch(dev, keep, 2 * G);

	two_forge(&t);
	s0 = mmu_stats(&t.f);
	dg_dma_batch_begin(dd, &b);
	for (unsigned int i = 0; i < N; i++)
		assert_int_equal(dg_dma_unmap_single(dd, d[i], 3 * G, DG_DMA_TO_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(dg_dma_unmap_single(dd, one, 2 * G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	s1 = mmu_stats(&t.f);
	two_unforge(&t);
	/* strict: nothing unmapped reaches, everything else does */
	for (unsigned int i = 0; i < N; i++)
		all_fault(dev, d[i], 3 * G);
	all_fault(dev, one, 2 * G);
	reads(dev, keep, mem + (size_t)(N + 1) * 4 * G, 64);
	reads(dev, keep + G, mem + (size_t)(N + 1) * 4 * G + G, 64);
	/* two submits, each queued one GLOBAL command and nothing else */
	queued(&s0, &s1, 2, 0, 0, 2);

	assert_int_equal(dg_dma_unmap_single(dd, keep, 2 * G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	two_fini(&t);
	free(mem);
}

/* Exact blocks of [a, e) (inval.c's split of a non-leaf RANGE: one slot each). */
static unsigned int exact_blocks(uint64_t a, uint64_t e)
{
	unsigned int n = 0;

	while (a < e) {
		unsigned int o = a ? (unsigned int)__builtin_ctzll(a) : 63;

		while (o && (o >= 64 || a + (1ull << o) > e))
			o--;
		a += 1ull << o;
		n++;
	}
	return n;
}

/* Lazy's timeout flush, started by a housekeeping pass (dma_lazy_tick: one RANGE command over
 * the open generation's hull, submitted without a wait). */
static void lazy_timeout_flush(struct dma_fixture *f)
{
	fixture_advance(f, 1000000000ull);
	assert_int_equal(dg_dma_housekeep(f->dma), 0);
}

/*
 * Lazy, RANGE -> DOMAIN. The flush queue's one RANGE over its hull: non-leaf (the 2 MiB
 * mapping's table page is freed), its ends far from aligned (a 511-granule mapping above, a
 * one-granule one below), so its exact split needs more than the ring's 16 slots. The ring
 * refuses it; one DOMAIN command must cover every unmap of the generation, and mappings
 * next to them (one inside the hull) that were not unmapped still translate.
 */
static void test_lazy_range_refused_domain(void **state)
{
	enum { NA = 511, NC = 3 };
	struct dma_fixture f;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	uint8_t *bigmem = NULL, *amem = page_alloc(NA * G), *cmem = page_alloc(NC * G);
	uint64_t da, dbig, dc[NC], lo, hi, unmapped;
	struct dg_iommu_stats s0, s1;
	struct dg_dma_stats st;

	(void)state;
	tiny_init(&f);
	dd = fixture_idle_dev(&f, 1, DG_DMA_LAZY, false, &dev);
	assert_non_null(dd);
	assert_int_equal(posix_memalign((void **)&bigmem, BIG, 2 * BIG), 0);
	for (size_t i = 0; i < 2 * BIG; i += G)
		bigmem[i] = (uint8_t)(i / G);
	for (size_t i = 0; i < NA * G; i++)
		amem[i] = (uint8_t)(i * 3 + 1);
	for (unsigned int i = 0; i < NC; i++)
		memset(cmem + (size_t)i * G, 0xc0 + i, G);
	/* the allocator hands out from the top: the 511 granules highest, the 2 MiB below (in
	 * 4 KiB pages, its IOVA range one whole last-level table), the one-granule maps below
	 * (a stream chunk: adjacent granules) */
	assert_int_equal(dg_dma_map_single(dd, amem, NA * G, DG_DMA_TO_DEVICE, 0, &da), 0);
	assert_int_equal(dg_dma_map_single(dd, bigmem + G, BIG, DG_DMA_BIDIRECTIONAL, 0, &dbig), 0);
	assert_int_equal(dbig % BIG, 0);
	for (unsigned int i = 0; i < NC; i++)
		assert_int_equal(dg_dma_map_single(dd, cmem + (size_t)i * G, G, DG_DMA_TO_DEVICE, 0,
						   &dc[i]),
				 0);
	touch(dev, da, NA * G);
	touch(dev, dbig, BIG);
	for (unsigned int i = 0; i < NC; i++)
		touch(dev, dc[i], G);
	/* unmapped: all of the 511 and the 2 MiB, the middle one-granule map (its two
	 * neighbours stay, the upper one inside the hull) */
	s0 = mmu_stats(&f);
	assert_int_equal(dg_dma_unmap_single(dd, da, NA * G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_unmap_single(dd, dbig, BIG, DG_DMA_BIDIRECTIONAL, 0, NULL), 0);
	assert_int_equal(dg_dma_unmap_single(dd, dc[1], G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(mmu_stats(&f).submits, s0.submits); /* queued, no flush yet */
	/* the precondition: the hull's exact split is over 16 slots, the hull under the
	 * IOMMU's own DOMAIN threshold (64 MiB), the kept map above the unmapped one inside
	 * it */
	lo = dc[1] & ~(uint64_t)(G - 1);
	hi = da + NA * G;
	if (dbig < lo)
		lo = dbig;
	if (dbig + BIG > hi)
		hi = dbig + BIG;
	assert_true(exact_blocks(lo, hi) > RING);
	assert_true(hi - lo <= (64ull << 20));
	assert_true(dc[2] > lo && dc[2] < hi);

	lazy_timeout_flush(&f);
	s1 = mmu_stats(&f);
	/* nothing unmapped reaches, the kept maps do */
	all_fault(dev, da, NA * G);
	all_fault(dev, dbig, BIG);
	all_fault(dev, dc[1], G);
	reads(dev, dc[0], cmem, 64);
	reads(dev, dc[2], cmem + 2 * G, 64);
	/* the RANGE was refused (nothing queued by it), one DOMAIN command went */
	queued(&s0, &s1, 1, 0, 1, 0);
	/* the flush completed (an idle device): everything it covered was given back */
	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	unmapped = st.live;
	assert_int_equal(unmapped, 2);

	assert_int_equal(dg_dma_unmap_single(dd, dc[0], G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_unmap_single(dd, dc[2], G, DG_DMA_TO_DEVICE, 0, NULL), 0);
	lazy_timeout_flush(&f);
	fixture_faults(&f);
	assert_int_equal(fixture_end(&f, dd), 0);
	free(bigmem);
	free(amem);
	free(cmem);
}

/*
 * Lazy, DOMAIN -> GLOBAL: the space's domain id forged to one no domain has while the
 * housekeeping pass starts the flush, so its RANGE and the DOMAIN fallback are refused and
 * only a GLOBAL command can cover the queued unmaps. A second device in its own domain keeps
 * translating its mapping.
 */
static void test_lazy_domain_refused_global(void **state)
{
	enum { N = 6 };
	struct two t;
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	uint8_t *mem = page_alloc(N * 2 * G);
	uint64_t d[N];
	struct dg_iommu_stats s0, s1;

	(void)state;
	two_init(&t, DG_DMA_LAZY);
	dd = t.dd;
	dev = t.dev;
	for (size_t i = 0; i < N * 2 * G; i++)
		mem[i] = (uint8_t)(i * 5 + i / G);
	for (unsigned int i = 0; i < N; i++) /* one and two granules, in turns */
		assert_int_equal(dg_dma_map_single(dd, mem + (size_t)i * 2 * G, (i & 1) ? 2 * G : G,
						   DG_DMA_TO_DEVICE, 0, &d[i]),
				 0);
	for (unsigned int i = 0; i < N; i++)
		touch(dev, d[i], (i & 1) ? 2 * G : G);
	for (unsigned int i = 0; i < N; i += 2) /* the even ones go, the odd ones stay */
		assert_int_equal(dg_dma_unmap_single(dd, d[i], G, DG_DMA_TO_DEVICE, 0, NULL), 0);

	two_forge(&t);
	s0 = mmu_stats(&t.f);
	lazy_timeout_flush(&t.f);
	s1 = mmu_stats(&t.f);
	two_unforge(&t);
	for (unsigned int i = 0; i < N; i++) {
		if (i & 1) {
			reads(dev, d[i], mem + (size_t)i * 2 * G, 64);
			reads(dev, d[i] + G, mem + (size_t)i * 2 * G + G, 64);
		} else {
			all_fault(dev, d[i], G);
		}
	}
	reads(t.dev2, t.d2, t.mem2, 64);
	/* one submit: one GLOBAL command and nothing else */
	queued(&s0, &s1, 1, 0, 0, 1);

	for (unsigned int i = 1; i < N; i += 2)
		assert_int_equal(dg_dma_unmap_single(dd, d[i], 2 * G, DG_DMA_TO_DEVICE, 0, NULL),
				 0);
	lazy_timeout_flush(&t.f);
	two_fini(&t);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_range_refused_domain),
		cmocka_unit_test(test_domain_refused_global),
		cmocka_unit_test(test_lazy_range_refused_domain),
		cmocka_unit_test(test_lazy_domain_refused_global),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
