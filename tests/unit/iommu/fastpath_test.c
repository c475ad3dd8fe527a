/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the device's fast paths (dev/translate.c): the inline hit of dmaguard/dev.h
 * (dg_dev_translate_fast) and the cheap miss that reads one entry of the leaf table the walk
 * cache knows (or of a one-level table's root).
 *
 * Each test would fail if a fast path skipped a check: a hit after a permission change and
 * its invalidation must fault; a miss after the leaf table was freed by a non-leaf
 * invalidation must walk from the root and find the new table; and, for every page-table
 * format, randomized map/unmap/invalidate/translate sequences are checked against a model of
 * what is mapped (address, permission, fault reason, the fault queue) while the counters
 * prove the cheap miss was taken. The devices here are online and not auto-offline (the cheap
 * miss is off for auto-offline devices): the test takes them offline before each wait.
 */
#include "iommu/iommu_internal.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define K4  0x1000ull
#define K64 0x10000ull
#define M2  0x200000ull
#define RW  (DG_PROT_READ | DG_PROT_WRITE)

/* Host memory: 16 MiB aligned to 2 MiB (any granule, and 2 MiB pages, can map it). */
#define ARENA_SIZE (16ull << 20)
#include "test_arena.h"
#include "../../test_rand.h"

#include "test_env.h"

/* test_env.h's world (not auto-offline); @fill: the neighbour fill of dev/translate.c (on by
 * default). */
static void env_init_fill(struct env *e, const struct dg_pt_geometry *g, bool fill)
{
	struct dg_iommu_config cfg;

	dg_iommu_config_init(&cfg);
	cfg.log = NULL;
	cfg.fault_queue_len = 1024;
	cfg.no_iotlb_prefetch = !fill;
	env_open(e, &cfg, g, false);
}

static void env_init(struct env *e, const struct dg_pt_geometry *g)
{
	env_init_fill(e, g, true);
}

/* Unmap and invalidate (the device goes offline first, so the wait does not wait for it). */
static void unmap_flush(struct env *e, uint64_t iova, uint64_t size, uint64_t *tables)
{
	struct dg_pt_gather g;
	uint64_t unmapped;

	dg_dev_offline(e->dev);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(e->dom, iova, size, &g, &unmapped), 0);
	assert_true(unmapped > 0 && unmapped <= size); /* what was mapped in the range */
	if (tables)
		*tables = g.nr_tables;
	assert_int_equal(dg_iommu_flush_gather(e->mmu, e->dom, &g), 0);
}

static void expect_fault(struct env *e, uint64_t iova, unsigned int access,
			 enum dg_fault_reason reason)
{
	struct dg_fault f;

	assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), 0);
	assert_int_equal(f.rid, 1);
	assert_int_equal(f.iova, iova);
	assert_int_equal(f.access, access);
	assert_int_equal(f.reason, reason);
}

static void expect_no_fault(struct env *e)
{
	struct dg_fault f;

	assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), -EAGAIN);
}

static int xlate_fast(struct env *e, uint64_t iova, size_t len, unsigned int access, uint64_t *out)
{
	struct dg_sg sg[1] = {{NULL, 0}};
	unsigned int nr = 0;
	int r = dg_dev_translate_fast(e->dev, iova, len, access, sg, 1, &nr);

	if (!r) {
		assert_int_equal(nr, 1);
		assert_int_equal(sg[0].len, len);
		*out = (uint64_t)(uintptr_t)sg[0].addr;
	}
	return r;
}

static struct dg_pt_geometry vtd4k(void)
{
	return (struct dg_pt_geometry){.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
}

/*
 * A permission change must reach the hit path: once the page is unmapped, invalidated and
 * mapped again read-only, the write that hit before faults (through the inline hit, the
 * exported call and dg_dev_write), and reads still work.
 */
static void test_hit_after_perm_change(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	struct dg_dev_stats a, b;
	struct env e;
	uint64_t h;
	uint8_t x = 0x77;

	(void)state;
	env_init(&e, &g);
	assert_int_equal(dg_domain_map(e.dom, 0x40000, host(0x40000), K4, RW, NULL), 0);
	assert_int_equal(xlate_fast(&e, 0x40010, 16, DG_ACCESS_WRITE, &h), 0); /* miss */
	assert_int_equal(h, host(0x40010));
	dg_dev_stats(e.dev, &a);
	assert_int_equal(xlate_fast(&e, 0x40020, 16, DG_ACCESS_WRITE, &h), 0); /* hit */
	assert_int_equal(h, host(0x40020));
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, 1);
	assert_int_equal(b.iotlb_misses, a.iotlb_misses);

	unmap_flush(&e, 0x40000, K4, NULL);
	assert_int_equal(dg_domain_map(e.dom, 0x40000, host(0x40000), K4, DG_PROT_READ, NULL), 0);
	assert_int_equal(xlate_fast(&e, 0x40020, 16, DG_ACCESS_WRITE, &h), -EACCES);
	expect_fault(&e, 0x40020, DG_ACCESS_WRITE, DG_FAULT_PERM);
	/* Now cached read-only: the hit test refuses the write, the slow path records it. */
	assert_int_equal(xlate_fast(&e, 0x40030, 16, DG_ACCESS_WRITE, &h), -EACCES);
	expect_fault(&e, 0x40030, DG_ACCESS_WRITE, DG_FAULT_PERM);
	assert_int_equal(dg_dev_write(e.dev, 0x40040, &x, 1), -EACCES);
	expect_fault(&e, 0x40040, DG_ACCESS_WRITE, DG_FAULT_PERM);
	assert_int_equal(arena[0x40040], 0);
	{
		struct dg_sg sg[1];
		unsigned int nr;

		assert_int_equal(dg_dev_translate(e.dev, 0x40050, 1, DG_ACCESS_WRITE, sg, 1, &nr),
				 -EACCES);
		expect_fault(&e, 0x40050, DG_ACCESS_WRITE, DG_FAULT_PERM);
	}
	dg_dev_stats(e.dev, &a);
	assert_int_equal(xlate_fast(&e, 0x40060, 16, DG_ACCESS_READ, &h), 0);
	assert_int_equal(h, host(0x40060));
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, 1);
	/* Unmapped and invalidated: the hit is gone too. */
	unmap_flush(&e, 0x40000, K4, NULL);
	assert_int_equal(xlate_fast(&e, 0x40060, 16, DG_ACCESS_READ, &h), -EFAULT);
	expect_fault(&e, 0x40060, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
	expect_no_fault(&e);
	env_fini(&e);
}

/*
 * The walk cache's last entry names a leaf table; unmapping the whole region frees that table
 * after a non-leaf invalidation. The next miss must walk from the root (no walk-cache hit)
 * and translate through the new table, and the miss after it is cheap again.
 */
static void test_freed_leaf_table(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	struct dg_dev_stats a, b;
	struct env e;
	uint64_t h, tables = 0;

	(void)state;
	env_init(&e, &g);
	assert_int_equal(dg_domain_map(e.dom, 0x200000, host(0), 8 * K4, RW, NULL), 0);
	for (unsigned int p = 0; p < 8; p++) {
		assert_int_equal(xlate_fast(&e, 0x200000 + p * K4, 64, DG_ACCESS_READ, &h), 0);
		assert_int_equal(h, host(p * K4));
	}
	/* The walk of page 0 cached the leaf table and filled the 7 other pages of its line. */
	assert_int_equal(stat_get(&e.dev->st_prefetch), 7);
	/* Free the leaf table: the whole 2 MiB region it covers is unmapped. */
	unmap_flush(&e, 0x200000, M2, &tables);
	assert_true(tables >= 1);
	assert_int_equal(dg_domain_map(e.dom, 0x200000, host(M2), 8 * K4, DG_PROT_READ, NULL), 0);
	dg_dev_stats(e.dev, &a);
	assert_int_equal(xlate_fast(&e, 0x200000 + 3 * K4, 64, DG_ACCESS_READ, &h), 0);
	assert_int_equal(h, host(M2 + 3 * K4));
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.walks - a.walks, 1);
	assert_int_equal(b.walk_cache_hits - a.walk_cache_hits, 0);
	assert_int_equal(b.prefetch_fills - a.prefetch_fills, 7); /* 0..7 but 3 */
	a = b;
	assert_int_equal(xlate_fast(&e, 0x200000 + 5 * K4, 64, DG_ACCESS_READ, &h), 0);
	assert_int_equal(h, host(M2 + 5 * K4));
	assert_int_equal(xlate_fast(&e, 0x200000 + 5 * K4, 64, DG_ACCESS_WRITE, &h), -EACCES);
	expect_fault(&e, 0x200000 + 5 * K4, DG_ACCESS_WRITE, DG_FAULT_PERM);
	assert_int_equal(xlate_fast(&e, 0x200000 + 9 * K4, 64, DG_ACCESS_READ, &h), -EFAULT);
	expect_fault(&e, 0x200000 + 9 * K4, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
	dg_dev_stats(e.dev, &b);
	/*
	 * 5 (read) hit the entry the walk of 3 filled from the new table (a fill from the freed
	 * one would have given the old frame); 5 (write: the hot probe refused it, the entry is
	 * read again) and 9 read the new table through the walk cache.
	 */
	assert_int_equal(b.walk_cache_hits - a.walk_cache_hits, 2);
	assert_int_equal(b.prefetch_fills - a.prefetch_fills, 0); /* 9 is unmapped: no fill */
	expect_no_fault(&e);
	env_fini(&e);
}

/* A table allocator that keeps freed pages as they were until the end of the test, so a
 * walk through a stale table would read its old entries (and translate to the old page). */
struct quarantine {
	void *page[64];
	unsigned int n;
};

static void *q_alloc(void *cookie, size_t size)
{
	void *p = aligned_alloc(size, size);

	(void)cookie;
	if (p)
		memset(p, 0, size);
	return p;
}

static void q_free(void *cookie, void *page, size_t size)
{
	struct quarantine *q = cookie;

	(void)size;
	assert_true(q->n < 64);
	q->page[q->n++] = page;
}

static const struct dg_pt_mem_ops q_ops = {q_alloc, q_free};

/*
 * The same after a non-leaf DOMAIN invalidation (a new walk-cache generation, the last entry
 * left in place with the old tag): the freed table (kept intact by the allocator) must not be
 * read again.
 */
static void test_freed_leaf_table_domain_flush(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	struct quarantine q = {.n = 0};
	struct dg_inval_cmd c = {.type = DG_INVAL_DOMAIN, .domain = 1};
	struct dg_dev_stats a, b;
	struct dg_pt_gather ga;
	struct dg_iommu_config cfg;
	struct env e;
	uint64_t h, unmapped, seq;

	(void)state;
	dg_iommu_config_init(&cfg);
	cfg.log = NULL;
	e.mmu = dg_iommu_create(&cfg);
	assert_non_null(e.mmu);
	e.dom = dg_domain_create(e.mmu, &g, &q_ops, &q);
	assert_non_null(e.dom);
	e.dev = dg_device_create(e.mmu, 1);
	assert_non_null(e.dev);
	assert_int_equal(dg_device_attach(e.dev, e.dom), 0);
	assert_int_equal(dg_domain_map(e.dom, 0x400000, host(0), 4 * K4, RW, NULL), 0);
	for (unsigned int p = 0; p < 4; p++)
		assert_int_equal(xlate_fast(&e, 0x400000 + p * K4, 64, DG_ACCESS_READ, &h), 0);
	dg_dev_offline(e.dev);
	dg_pt_gather_init(&ga);
	assert_int_equal(dg_domain_unmap(e.dom, 0x400000, M2, &ga, &unmapped), 0);
	assert_true(ga.nr_tables >= 1);
	assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
	assert_int_equal(dg_inval_wait(e.mmu, seq), 0);
	dg_pt_gather_release(dg_domain_pt(e.dom), &ga);
	assert_true(q.n >= 1);
	assert_int_equal(dg_domain_map(e.dom, 0x400000, host(M2), 4 * K4, RW, NULL), 0);
	dg_dev_stats(e.dev, &a);
	assert_int_equal(xlate_fast(&e, 0x400000 + 2 * K4, 64, DG_ACCESS_READ, &h), 0);
	assert_int_equal(h, host(M2 + 2 * K4));
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.walk_cache_hits - a.walk_cache_hits, 0);
	assert_int_equal(xlate_fast(&e, 0x400000 + 1 * K4, 64, DG_ACCESS_READ, &h), 0);
	assert_int_equal(h, host(M2 + 1 * K4));
	expect_no_fault(&e);
	env_fini(&e);
	for (unsigned int i = 0; i < q.n; i++)
		free(q.page[i]);
}

/* The inline hit refuses what the exported call refuses: bad arguments, blocked devices. */
static void test_fast_arguments(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	struct dg_sg sg[2];
	struct env e;
	unsigned int nr = 7;
	uint64_t h;

	(void)state;
	env_init(&e, &g);
	assert_int_equal(dg_domain_map(e.dom, 0x10000, host(0x10000), 2 * K4, RW, NULL), 0);
	assert_int_equal(xlate_fast(&e, 0x10000, 64, DG_ACCESS_READ, &h), 0);
	assert_int_equal(dg_dev_translate_fast(e.dev, 0x10000, 64, 0, sg, 1, &nr), -EINVAL);
	assert_int_equal(dg_dev_translate_fast(e.dev, 0x10000, 64, 4, sg, 1, &nr), -EINVAL);
	assert_int_equal(dg_dev_translate_fast(e.dev, 0x10000, 0, DG_ACCESS_READ, sg, 1, &nr),
			 -EINVAL);
	assert_int_equal(dg_dev_translate_fast(e.dev, 0x10000, 64, DG_ACCESS_READ, sg, 0, &nr),
			 -ENOSPC);
	assert_int_equal(nr, 1);
	/* Wrapping past 2^64 and crossing into the next page leave the hit path. */
	assert_int_equal(dg_dev_translate_fast(e.dev, UINT64_MAX - 1, 64, DG_ACCESS_READ, sg, 1,
					       &nr),
			 -EOVERFLOW);
	expect_fault(&e, UINT64_MAX - 1, DG_ACCESS_READ, DG_FAULT_WRAP);
	assert_int_equal(dg_dev_translate_fast(e.dev, 0x10ff0, 32, DG_ACCESS_READ, sg, 2, &nr), 0);
	assert_int_equal(nr, 1); /* host-contiguous pages share a segment */
	assert_int_equal(sg[0].len, 32);
	dg_dev_offline(e.dev);
	assert_int_equal(dg_device_block(e.dev), 0);
	assert_int_equal(xlate_fast(&e, 0x10000, 64, DG_ACCESS_READ, &h), -EPERM);
	expect_fault(&e, 0x10000, DG_ACCESS_READ, DG_FAULT_BLOCKED);
	dg_dev_offline(e.dev);
	assert_int_equal(dg_device_passthrough(e.dev), 0);
	assert_int_equal(xlate_fast(&e, 0x123456, 64, DG_ACCESS_WRITE, &h), 0);
	assert_int_equal(h, 0x123456);
	expect_no_fault(&e);
	dg_dev_offline(e.dev);
	assert_int_equal(dg_device_attach(e.dev, e.dom), 0);
	env_fini(&e);
}

/* The page the hold tests translate, and the RANGE command over it. */
#define HELD_IOVA 0x30000ull
static const struct dg_inval_cmd held_cmd = {
	.type = DG_INVAL_RANGE, .domain = 1, .iova = HELD_IOVA, .size = K4};

/* A VT-d 4K world with one page at HELD_IOVA, translated once through the inline path. */
static void held_start(struct env *e)
{
	struct dg_pt_geometry g = vtd4k();
	uint64_t h;

	env_init(e, &g);
	assert_int_equal(dg_domain_map(e->dom, HELD_IOVA, host(HELD_IOVA), K4, RW, NULL), 0);
	assert_int_equal(xlate_fast(e, HELD_IOVA, 64, DG_ACCESS_READ, &h), 0);
}

/* The command submitted between two inline translations of the page: applied at the second,
 * not acknowledged (the translation is held). Returns its sequence number. */
static uint64_t held_apply(struct env *e)
{
	uint64_t h, seq;

	assert_int_equal(xlate_fast(e, HELD_IOVA, 64, DG_ACCESS_READ, &h), 0);
	assert_int_equal(dg_inval_submit(e->mmu, &held_cmd, 1, &seq), 0);
	assert_int_equal(xlate_fast(e, HELD_IOVA, 64, DG_ACCESS_READ, &h), 0);
	assert_false(dg_inval_done(e->mmu, seq)); /* applied, not acknowledged: held */
	return seq;
}

/* A hit through the inline path holds its translation until the device quiesces. */
static void test_fast_hit_holds(void **state)
{
	struct env e;
	uint64_t h, seq;

	(void)state;
	held_start(&e);
	dg_dev_quiesce(e.dev);
	assert_int_equal(xlate_fast(&e, HELD_IOVA, 64, DG_ACCESS_READ, &h), 0); /* a hit */
	assert_true(e.dev->hot.held);
	assert_int_equal(dg_inval_submit(e.mmu, &held_cmd, 1, &seq), 0);
	assert_true(dg_dev_quiesce_if_pending(e.dev));
	assert_true(dg_inval_done(e.mmu, seq));
	seq = held_apply(&e); /* the first translation walks again */
	dg_dev_quiesce(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));
	env_fini(&e);
}

/*
 * The inline quiescent points (dg_dev_quiesce_fast, dg_dev_quiesce_if_pending_fast) skip the
 * call only when the hot line shows nothing to do. A command applied while a translation was
 * held (at the start of a DMA call) is not acknowledged then: the hot line's check matches
 * published again, and only the unacked flag tells the inline path to call the library. Were
 * it not kept (or not read), both would return without acknowledging and the waits below
 * would never complete. Nothing pending: quiesce releases the hold, if_pending keeps it.
 */
static void test_fast_quiesce(void **state)
{
	struct env e;
	uint64_t seq;

	(void)state;
	held_start(&e);
	/* nothing pending: if_pending keeps the hold, quiesce releases it */
	assert_false(dg_dev_quiesce_if_pending_fast(e.dev));
	assert_true(e.dev->hot.held);
	dg_dev_quiesce_fast(e.dev);
	assert_false(e.dev->hot.held);
	assert_false(e.dev->hot.unacked);
	/* applied while held, acknowledged by the inline if_pending */
	seq = held_apply(&e);
	assert_true(e.dev->hot.unacked);
	assert_int_equal(atomic_load(e.dev->hot.watchword), e.dev->hot.check);
	assert_true(dg_dev_quiesce_if_pending_fast(e.dev));
	assert_true(dg_inval_done(e.mmu, seq));
	assert_false(e.dev->hot.unacked);
	/* the same through the inline quiesce */
	seq = held_apply(&e);
	dg_dev_quiesce_fast(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));
	assert_false(e.dev->hot.held);
	/* pending, nothing held: the inline quiesce applies and acknowledges */
	assert_int_equal(dg_inval_submit(e.mmu, &held_cmd, 1, &seq), 0);
	assert_false(dg_inval_done(e.mmu, seq));
	dg_dev_quiesce_fast(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));
	/* offline: the library's quiesce (a no-op), the device stays offline */
	dg_dev_offline(e.dev);
	dg_dev_quiesce_fast(e.dev);
	assert_false(dg_dev_quiesce_if_pending_fast(e.dev));
	assert_false(dg_dev_is_online(e.dev));
	env_fini(&e);
}

/*
 * Auto-offline devices take the slow path (it ends every call offline); switching it off and
 * on again, with the device offline in between, turns the cheap miss on and off.
 */
static void test_auto_offline_toggle(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	struct env e;
	uint64_t h, leaf;

	(void)state;
	env_init_fill(&e, &g, false); /* one leaf walk per page */
	assert_int_equal(dg_domain_map(e.dom, 0x600000, host(0), 16 * K4, RW, NULL), 0);
	dg_dev_set_auto_offline(e.dev, true);
	for (unsigned int p = 0; p < 4; p++) {
		assert_int_equal(xlate_fast(&e, 0x600000 + p * K4, 64, DG_ACCESS_READ, &h), 0);
		assert_int_equal(h, host(p * K4));
	}
	assert_false(dg_dev_is_online(e.dev));
	leaf = stat_get(&e.dev->st_leaf_walks);
	dg_dev_set_auto_offline(e.dev, false);
	for (unsigned int p = 4; p < 8; p++) {
		assert_int_equal(xlate_fast(&e, 0x600000 + p * K4, 64, DG_ACCESS_READ, &h), 0);
		assert_int_equal(h, host(p * K4));
	}
	assert_int_equal(stat_get(&e.dev->st_leaf_walks) - leaf, 4);
	dg_dev_set_auto_offline(e.dev, true);
	leaf = stat_get(&e.dev->st_leaf_walks);
	for (unsigned int p = 8; p < 12; p++) {
		assert_int_equal(xlate_fast(&e, 0x600000 + p * K4, 64, DG_ACCESS_READ, &h), 0);
		assert_int_equal(h, host(p * K4));
		assert_false(dg_dev_is_online(e.dev));
	}
	assert_int_equal(stat_get(&e.dev->st_leaf_walks), leaf);
	expect_no_fault(&e);
	env_fini(&e);
}

/* ---- every format through the cheap miss, against a model ------------------------------- */

struct fmt_case {
	const char *name;
	struct dg_pt_geometry g;
	uint64_t iova;	/* first page of the test range (crosses a leaf-table boundary) */
	uint64_t block; /* a region mapped as one large page at times (0: none) */
	uint64_t bsize; /* its size */
	bool s1;	/* ARM stage 1: write-only reads back as read-write */
	bool one_level; /* a flat table: misses read the root */
};

#define NPAGES 48u

static uint64_t rnd(uint64_t *s)
{
	return xorshift64(s);
}

static void check_xlate(struct env *e, const struct fmt_case *fc, uint64_t iova, unsigned int prot,
			uint64_t phys, unsigned int access, unsigned int how, size_t len)
{
	unsigned int granted = fc->s1 && prot == DG_PROT_WRITE ? RW : prot;
	int want = !prot ? -EFAULT : (access & ~granted) ? -EACCES : 0;
	uint64_t h = 0;
	uint8_t buf[64];
	int r;

	if (how == 0) {
		r = xlate_fast(e, iova, len, access, &h);
	} else if (how == 1) {
		struct dg_sg sg[1];
		unsigned int nr = 0;

		r = dg_dev_translate(e->dev, iova, len, access, sg, 1, &nr);
		if (!r) {
			assert_int_equal(nr, 1);
			h = (uint64_t)(uintptr_t)sg[0].addr;
		}
	} else if (access == DG_ACCESS_READ) {
		r = dg_dev_read(e->dev, iova, buf, len);
		h = phys;
	} else {
		memset(buf, 0, len);
		r = dg_dev_write(e->dev, iova, buf, len);
		h = phys;
	}
	if (r != want)
		fail_msg("%s: iova %#llx prot %u access %u how %u: %d, expected %d", fc->name,
			 (unsigned long long)iova, prot, access, how, r, want);
	if (!r)
		assert_int_equal(h, phys);
	else
		expect_fault(e, iova, access, !prot ? DG_FAULT_UNMAPPED : DG_FAULT_PERM);
}

static void run_format(const struct fmt_case *fc, uint64_t seed)
{
	unsigned int prot[NPAGES] = {0};
	uint64_t phys[NPAGES] = {0}, gran, s = seed, next = 0;
	unsigned int bprot = 0;
	uint64_t bphys = 0;
	struct env e;

	env_init(&e, &fc->g);
	gran = fc->g.granule ? fc->g.granule : K4;
	for (unsigned int it = 0; it < 3000; it++) {
		unsigned int op = (unsigned int)(rnd(&s) % 16),
			     p = (unsigned int)(rnd(&s) % NPAGES);
		uint64_t iova = fc->iova + p * gran;

		if (op == 0) {
			/* Map or unmap one page (new host page, random permission). */
			if (prot[p]) {
				unmap_flush(&e, iova, gran, NULL);
				prot[p] = 0;
			} else {
				static const unsigned int prots[] = {DG_PROT_READ, DG_PROT_WRITE,
								     RW};

				prot[p] = prots[rnd(&s) % 3];
				phys[p] = host((next++ % (ARENA_SIZE / gran / 2)) * gran);
				assert_int_equal(dg_domain_map(e.dom, iova, phys[p], gran, prot[p],
							       NULL),
						 0);
			}
		} else if (op == 1 && !(rnd(&s) % 8)) {
			/* Empty the whole range: its leaf tables are freed. */
			for (unsigned int q = 0; q < NPAGES; q++) {
				if (prot[q])
					unmap_flush(&e, fc->iova + q * gran, gran, NULL);
				prot[q] = 0;
			}
		} else if (op == 2 && fc->block) {
			/* The large page region: map or unmap it whole. */
			if (bprot) {
				unmap_flush(&e, fc->block, fc->bsize, NULL);
				bprot = 0;
			} else {
				bprot = rnd(&s) & 1 ? RW : DG_PROT_READ;
				bphys = host(ARENA_SIZE - fc->bsize);
				assert_int_equal(dg_domain_map(e.dom, fc->block, bphys, fc->bsize,
							       bprot, NULL),
						 0);
			}
		} else if (op == 3 && fc->block) {
			uint64_t off = (rnd(&s) % (fc->bsize / 64)) * 64;

			check_xlate(&e, fc, fc->block + off, bprot, bphys + off,
				    rnd(&s) & 1 ? DG_ACCESS_READ : DG_ACCESS_WRITE,
				    (unsigned int)(rnd(&s) % 4), 64);
		} else {
			uint64_t off = rnd(&s) % gran;
			size_t len = 1 + (size_t)(rnd(&s) % 64);

			if (off + len > gran)
				off = gran - len;
			check_xlate(&e, fc, iova + off, prot[p], phys[p] + off,
				    rnd(&s) & 1 ? DG_ACCESS_READ : DG_ACCESS_WRITE,
				    (unsigned int)(rnd(&s) % 4), len);
			if (!(rnd(&s) % 4))
				dg_dev_quiesce(e.dev);
		}
	}
	expect_no_fault(&e);
	/* The cheap miss was taken (and counted as what it is). */
	if (fc->one_level)
		assert_true(stat_get(&e.dev->st_root_walks) > 100);
	else
		assert_true(stat_get(&e.dev->st_leaf_walks) > 100);
	env_fini(&e);
}

static const struct fmt_case fmt_cases[] = {
	{"vtd-4l",
	 {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48},
	 M2 - 24 * K4,
	 8 * M2,
	 M2,
	 false,
	 false},
	{"vtd-3l",
	 {.format = DG_PT_FMT_VTD_SS, .ias = 39, .oas = 48},
	 3 * M2 - 24 * K4,
	 0,
	 0,
	 false,
	 false},
	{"lpae-s1-4k",
	 {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48, .granule = K4},
	 M2 - 24 * K4,
	 8 * M2,
	 M2,
	 true,
	 false},
	{"lpae-s1-16k",
	 {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 36, .oas = 48, .granule = 0x4000},
	 (32ull << 20) - 24 * 0x4000,
	 0,
	 0,
	 true,
	 false},
	{"lpae-s1-64k",
	 {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 42, .oas = 48, .granule = K64},
	 (512ull << 20) - 24 * K64,
	 0,
	 0,
	 true,
	 false},
	{"lpae-s2-4k",
	 {.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 40, .oas = 48, .granule = K4},
	 M2 - 24 * K4,
	 8 * M2,
	 M2,
	 false,
	 false},
	{"flat-4k",
	 {.format = DG_PT_FMT_FLAT,
	  .granule = K4,
	  .window_base = 1ull << 32,
	  .window_size = 1ull << 24},
	 (1ull << 32) + 5 * K4,
	 0,
	 0,
	 false,
	 true},
	{"flat-64k",
	 {.format = DG_PT_FMT_FLAT,
	  .granule = K64,
	  .window_base = 1ull << 40,
	  .window_size = 1ull << 26},
	 (1ull << 40) + 3 * K64,
	 0,
	 0,
	 false,
	 true},
};

static void test_formats_against_model(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(fmt_cases) / sizeof(fmt_cases[0]); i++)
		run_format(&fmt_cases[i], 0x9e3779b97f4a7c15ull + i);
}

/* Outside a flat window, the cheap miss refuses with a range fault (the walk does). */
static void test_flat_range(void **state)
{
	struct dg_pt_geometry g = {.format = DG_PT_FMT_FLAT,
				   .granule = K4,
				   .window_base = 1ull << 32,
				   .window_size = 1ull << 20};
	struct env e;
	uint64_t h;

	(void)state;
	env_init(&e, &g);
	assert_int_equal(dg_domain_map(e.dom, 1ull << 32, host(0), K4, RW, NULL), 0);
	assert_int_equal(xlate_fast(&e, (1ull << 32) + 8, 8, DG_ACCESS_READ, &h), 0);
	assert_int_equal(h, host(8));
	assert_int_equal(xlate_fast(&e, (1ull << 32) + (1ull << 20), 8, DG_ACCESS_READ, &h),
			 -ERANGE);
	expect_fault(&e, (1ull << 32) + (1ull << 20), DG_ACCESS_READ, DG_FAULT_RANGE);
	assert_int_equal(xlate_fast(&e, (1ull << 32) - K4, 8, DG_ACCESS_READ, &h), -ERANGE);
	expect_fault(&e, (1ull << 32) - K4, DG_ACCESS_READ, DG_FAULT_RANGE);
	assert_true(stat_get(&e.dev->st_root_walks) >= 1);
	expect_no_fault(&e);
	env_fini(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_after_perm_change),
		cmocka_unit_test(test_freed_leaf_table),
		cmocka_unit_test(test_freed_leaf_table_domain_flush),
		cmocka_unit_test(test_fast_arguments),
		cmocka_unit_test(test_fast_hit_holds),
		cmocka_unit_test(test_fast_quiesce),
		cmocka_unit_test(test_auto_offline_toggle),
		cmocka_unit_test(test_formats_against_model),
		cmocka_unit_test(test_flat_range),
	};

	return cmocka_run_group_tests(tests, setup_arena, teardown_arena);
}
