/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the IOTLB neighbour fill (dev/translate.c fill_line()): a miss that reads a
 * last-level entry also caches the other valid entries of its 64-byte line.
 *
 * What must hold, and fails if the fill were wrong or missing:
 *  - counts: 64 consecutive pages cost 9 misses (not 64) through the cheap miss and the
 *    general walk, up or down, and 16 pages of a range 2; off (no_iotlb_prefetch) 64 again;
 *  - the stream detector (fill_wanted()): a miss fills only next to the last miss of one of
 *    the device's two streams, or when its range goes on: random misses fill nothing, a
 *    stride of one line fills and one of two does not, two interleaved streams fill and
 *    three do not, and a device switching between random and sequential follows;
 *  - only valid neighbours are filled, each with its own permissions: a hole, an unmapped or
 *    a present-but-permission-less neighbour is never cached, and a later access to it
 *    faults and is recorded; the group is cut to the table (a small flat window) and to the
 *    IOTLB's sets, and follows the table's own indexing (a flat window not aligned to it);
 *  - invalidation: a prefetched entry is dropped by a PSI (PAGE) or RANGE of its page, leaf
 *    or not, by a DOMAIN and a leaf-only DOMAIN flush, GLOBAL and DEVICE, and by the catch-up
 *    of a device that fell a whole queue behind (a lap): after each, an access to the
 *    unmapped neighbour faults (before it, the stale entry is still used: it was cached);
 *  - the race with an unmap of a neighbour, in both orders (fill before the command is
 *    published: dropped when the device applies it, which it does before acknowledging;
 *    command published before the miss: the miss catches up first and reads the cleared
 *    entry), and with two threads: after the flush of a page returns, no device write
 *    reaches it even though the device keeps refilling its line from a neighbour's miss.
 */
#include "iommu/iommu_internal.h"
#include "pt/pt_leaf.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#ifdef IOMMU_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define K4	   0x1000ull
#define K64	   0x10000ull
#define RW	   (DG_PROT_READ | DG_PROT_WRITE)
#define BASE	   0x100000ull /* 256 pages: a line of 8 leaf entries starts here */

#define ARENA_SIZE (16ull << 20)
#include "test_arena.h"

#include "test_env.h"

struct opts {
	bool no_fill;	     /* cfg.no_iotlb_prefetch */
	bool auto_offline;   /* every call ends offline: the general walk, not the cheap miss */
	uint32_t iotlb_sets; /* 0: default */
	uint32_t inval_len;  /* 0: default */
};

static struct dg_pt_geometry vtd4k(void)
{
	return (struct dg_pt_geometry){.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
}

static void env_init(struct env *e, const struct dg_pt_geometry *g, struct opts o)
{
	struct dg_iommu_config cfg, got;

	dg_iommu_config_init(&cfg);
	assert_false(cfg.no_iotlb_prefetch); /* on by default */
	cfg.log = NULL;
	cfg.fault_queue_len = 1024;
	cfg.no_iotlb_prefetch = o.no_fill;
	if (o.iotlb_sets)
		cfg.iotlb_entries = o.iotlb_sets;
	if (o.inval_len)
		cfg.inval_queue_len = o.inval_len;
	env_open(e, &cfg, g, o.auto_offline);
	dg_iommu_config(e->mmu, &got);
	assert_int_equal(got.no_iotlb_prefetch, o.no_fill);
}

static void map(struct env *e, uint64_t iova, uint64_t off, uint64_t size, unsigned int prot)
{
	assert_int_equal(dg_domain_map(e->dom, iova, host(off), size, prot, NULL), 0);
}

/* Unmap without invalidating: the device may go on using what it cached. */
static void unmap_only(struct env *e, uint64_t iova, uint64_t size)
{
	struct dg_pt_gather g;
	uint64_t unmapped;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(e->dom, iova, size, &g, &unmapped), 0);
	assert_int_equal(g.nr_tables, 0);
}

/* Submit one command and wait for it (the device goes offline first: a wait skips it). */
static void inval(struct env *e, struct dg_inval_cmd c)
{
	uint64_t seq;

	dg_dev_offline(e->dev);
	assert_int_equal(dg_inval_submit(e->mmu, &c, 1, &seq), 0);
	assert_int_equal(dg_inval_wait(e->mmu, seq), 0);
}

/* Translate @len bytes at @iova: 0 with the host address, or the errno. */
static int xlate(struct env *e, uint64_t iova, size_t len, unsigned int access, uint64_t *out)
{
	struct dg_sg sg[4];
	unsigned int nr = 0;
	int r = dg_dev_translate(e->dev, iova, len, access, sg, 4, &nr);

	if (!r) {
		assert_int_equal(nr, 1);
		*out = (uint64_t)(uintptr_t)sg[0].addr;
	}
	return r;
}

static void expect_fault(struct env *e, uint64_t iova, unsigned int access,
			 enum dg_fault_reason reason)
{
	struct dg_fault f;

	assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), 0);
	assert_int_equal(f.iova, iova);
	assert_int_equal(f.access, access);
	assert_int_equal(f.reason, reason);
}

/* The device's IOTLB entry for @iova (current tag): its permissions, or -1 when absent. */
static int cached_perm(const struct env *e, uint64_t iova)
{
	const struct iotlb_ent *ent;

	if (iotlb_find(&e->dev->iotlb, e->dev->ctag, iova, &ent) < 0)
		return -1;
	return (int)(ent->key & IOTLB_PERM_MASK);
}

static void stats(const struct env *e, struct dg_dev_stats *s)
{
	dg_dev_stats(e->dev, s);
}

/*
 * Make the device's next miss at @iova look sequential to the fill's stream detector
 * (dev/translate.c fill_wanted(): a stream's last miss was in the same line), so that it fills:
 * for the tests of what a fill caches. The rule itself is tested by test_detector_*.
 */
static void arm_fill(struct env *e, uint64_t iova)
{
	/* The leaf size is the granule (the IOTLB levels are set up only at the first call). */
	unsigned int shift = (unsigned int)__builtin_ctzll(e->dom->granule);

	e->dev->iotlb.miss_line[0] = iova >> (shift + IOTLB_LINE_SHIFT);
}

/* ---- counts --------------------------------------------------------------------------- */

/*
 * 64 consecutive pages, one at a time, ascending or descending: with the fill, the first
 * miss only trains the stream detector and the second fills the rest of its line; then
 * descending, one miss per line (9 in all); ascending, one per two lines (6: each fills its
 * own line and the next); 64 without.
 */
static void run_sequential(struct opts o, bool down, uint64_t want_misses, uint64_t want_fills)
{
	struct dg_pt_geometry g = vtd4k();
	struct dg_iommu_stats ist;
	struct dg_dev_stats a, b;
	struct env e;
	uint64_t h;

	env_init(&e, &g, o);
	map(&e, BASE, 0, 64 * K4, RW);
	stats(&e, &a);
	for (unsigned int i = 0; i < 64; i++) {
		unsigned int p = down ? 63 - i : i;

		assert_int_equal(xlate(&e, BASE + p * K4 + 64, 64, DG_ACCESS_WRITE, &h), 0);
		assert_int_equal(h, host(p * K4 + 64));
	}
	stats(&e, &b);
	dg_iommu_stats(e.mmu, &ist);
	assert_int_equal(ist.prefetch_fills, b.prefetch_fills); /* the only device */
	assert_int_equal(b.iotlb_misses - a.iotlb_misses, want_misses);
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, 64 - want_misses);
	assert_int_equal(b.prefetch_fills - a.prefetch_fills, want_fills);
	/* Every prefetched entry translates as the table does. */
	for (unsigned int p = 0; p < 64; p++) {
		assert_int_equal(xlate(&e, BASE + p * K4, 1, DG_ACCESS_READ, &h), 0);
		assert_int_equal(h, host(p * K4));
	}
	stats(&e, &a);
	if (!o.iotlb_sets) /* all 64 stay cached in the default IOTLB */
		assert_int_equal(a.iotlb_misses, b.iotlb_misses);
	env_fini(&e);
}

static void test_sequential(void **state)
{
	(void)state;
	/* Descending, 9 misses: page 63 (trains the detector), page 62 (fills 56..61 and 63: a
	   fill also rewrites a neighbour already cached), then 55, 47, ..., 7, 7 fills each.
	   Ascending, 6 misses: page 0, page 1 (fills 0 and 2..7: its own line, the stream's
	   line), then 8 (one line up: 9..15 and the next line, 16..23), 24 (25..39), 40
	   (41..55), 56 (57..63; the next line is not mapped): 7 + 3 * 15 + 7 fills. */
	for (int down = 0; down < 2; down++) {
		uint64_t m = down ? 9 : 6, f = down ? 56 : 59;

		run_sequential((struct opts){0}, down, m, f); /* the cheap miss */
		run_sequential((struct opts){.auto_offline = true}, down, m, f); /* the walk */
		run_sequential((struct opts){.no_fill = true}, down, 64, 0);	 /* switched off */
		run_sequential((struct opts){.no_fill = true, .auto_offline = true}, down, 64, 0);
	}
	/* An IOTLB of 4 sets: the group is cut to 4 so no neighbour evicts the demand entry,
	   and there is no room for a next line: pages 0, 1 (fills 0, 2, 3), then 4, 8, ..., 60
	   (3 each). */
	run_sequential((struct opts){.iotlb_sets = 4}, false, 17, 48);
	/* 16 sets: room for two lines (16 slots), so the ascending stream fills ahead. */
	run_sequential((struct opts){.iotlb_sets = 16}, false, 6, 59);
}

/* ---- the stream detector ---------------------------------------------------------------- */

/* Translate page @p of BASE, checking the host address; count its misses and fills. */
static void touch(struct env *e, uint64_t p, uint64_t *misses, uint64_t *fills)
{
	struct dg_dev_stats a, b;
	uint64_t h;

	stats(e, &a);
	assert_int_equal(xlate(e, BASE + p * K4 + 16, 16, DG_ACCESS_READ, &h), 0);
	assert_int_equal(h, host(p * K4 + 16));
	stats(e, &b);
	*misses += b.iotlb_misses - a.iotlb_misses;
	*fills += b.prefetch_fills - a.prefetch_fills;
}

/* Lines 0..31 visited 5 apart (mod 32), page i * @step % 8 of the i-th: 32 misses, no fill. */
static void random_lines(struct env *e, unsigned int step)
{
	uint64_t misses = 0, fills = 0;

	for (unsigned int i = 0; i < 32; i++)
		touch(e, (i * 5 % 32) * 8 + i * step % 8, &misses, &fills);
	assert_int_equal(misses, 32);
	assert_int_equal(fills, 0);
}

/*
 * Misses never in the line of one of the previous two (the detector's streams) nor next to
 * it fill nothing: 32 pages, one per line, the lines visited 5 apart (mod 32, so two misses
 * apart they are 10 apart), each at a different page of its line. Without the detector every
 * one of them would fill its 7 mapped neighbours.
 */
static void test_detector_random(void **state)
{
	struct dg_pt_geometry g = vtd4k();

	(void)state;
	for (int off = 0; off < 2; off++) {
		struct env e;

		env_init(&e, &g, (struct opts){.auto_offline = off == 1});
		map(&e, BASE, 0, 256 * K4, RW);
		random_lines(&e, 3);
		env_fini(&e);
	}
}

/*
 * The boundary of "adjacent": one page per line, a line apart, fills each time but the first
 * down, and up (the next line filled too, the miss after it one line further up: 1 + 16
 * misses, 15 fills each but the first, and the last's next line, page 256, is in the next
 * leaf table: 7); two lines apart never fills.
 */
static void test_detector_strides(void **state)
{
	static const struct {
		int stride;	 /* pages between consecutive translations */
		uint64_t fills;	 /* over 32 translations */
		uint64_t misses; /* over 32 translations */
	} c[] = {{8, 15 * 15 + 7, 17}, {-8, 31 * 7, 32}, {16, 0, 32}, {-16, 0, 32}};
	struct dg_pt_geometry g = vtd4k();

	(void)state;
	for (int off = 0; off < 2; off++)
		for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
			uint64_t misses = 0, fills = 0;
			struct env e;

			env_init(&e, &g, (struct opts){.auto_offline = off == 1});
			map(&e, BASE, 0, 512 * K4, RW);
			for (int k = 0; k < 32; k++)
				touch(&e, (uint64_t)(c[i].stride > 0 ? 0 : 511) + k * c[i].stride,
				      &misses, &fills);
			assert_int_equal(misses, c[i].misses);
			assert_int_equal(fills, c[i].fills);
			env_fini(&e);
		}
}

/*
 * Interleaved streams (a receive and a transmit ring): the detector follows two, so two
 * streams of 64 pages taken in turn cost 6 misses and 67 fills each, as alone (7 + 4 * 15:
 * the line after each stream's 64 pages is mapped); a third
 * stream in the rotation makes every miss next to neither slot (each evicts the line the
 * next one needs), so nothing fills: 64 misses per stream.
 */
static void test_detector_streams(void **state)
{
	struct dg_pt_geometry g = vtd4k();

	(void)state;
	for (int off = 0; off < 2; off++)
		for (unsigned int ns = 2; ns <= 3; ns++) {
			uint64_t misses = 0, fills = 0;
			struct env e;

			env_init(&e, &g, (struct opts){.auto_offline = off == 1});
			map(&e, BASE, 0, 1024 * K4, RW);
			for (unsigned int p = 0; p < 64; p++)
				for (unsigned int k = 0; k < ns; k++)
					touch(&e, k * 256 + p, &misses, &fills);
			assert_int_equal(misses, ns == 2 ? 2 * 6 : 3 * 64);
			assert_int_equal(fills, ns == 2 ? 2 * 67 : 0);
			env_fini(&e);
		}
}

/*
 * The switch: a device going from a random pattern to a stream and back. Random misses over
 * lines 0..31 fill nothing; the stream over pages 256..319 (lines 32..39; the last random
 * misses were in lines 22 and 27) costs 6 misses and fills the rest and line 40 (7 + 4 * 15),
 * as on a fresh device; random misses again, over lines 44..63 (7 or 13 lines apart, two
 * misses apart 6 or 14; the first 4 lines after the stream's last, line 40), fill nothing
 * again.
 */
static void test_detector_switch(void **state)
{
	struct dg_pt_geometry g = vtd4k();

	(void)state;
	for (int off = 0; off < 2; off++) {
		uint64_t misses = 0, fills = 0;
		struct env e;

		env_init(&e, &g, (struct opts){.auto_offline = off == 1});
		map(&e, BASE, 0, 512 * K4, RW);
		random_lines(&e, 1);
		for (unsigned int p = 256; p < 320; p++)
			touch(&e, p, &misses, &fills);
		assert_int_equal(misses, 6);
		assert_int_equal(fills, 67);
		misses = fills = 0;
		for (unsigned int i = 0; i < 20; i++)
			touch(&e, (44 + i * 7 % 20) * 8 + i % 8, &misses, &fills);
		assert_int_equal(misses, 20);
		assert_int_equal(fills, 0);
		env_fini(&e);
	}
}

/*
 * A 64 KiB range (16 pages, one sg segment): 2 misses, as a TSO send makes, whatever the
 * device's previous miss (a range's pages come in order: a miss that is not its last page
 * fills without asking the detector): on a fresh device, and after a one-page miss far away.
 * A range of 2 pages ending at the first page of a line: the first page fills (the range
 * goes on), the second too (the line above the first's: and the next line, as a one-page
 * ascending miss does: it is the range's last page).
 */
static void range(struct env *e, uint64_t first, uint64_t pages, uint64_t misses, uint64_t fills)
{
	struct dg_dev_stats a, b;
	struct dg_sg sg[4];
	unsigned int nr;

	stats(e, &a);
	assert_int_equal(dg_dev_translate(e->dev, BASE + first * K4, pages * K4, DG_ACCESS_READ, sg,
					  4, &nr),
			 0);
	assert_int_equal(nr, 1);
	assert_int_equal((uint64_t)(uintptr_t)sg[0].addr, host(first * K4));
	assert_int_equal(sg[0].len, pages * K4);
	stats(e, &b);
	assert_int_equal(b.iotlb_misses - a.iotlb_misses, misses);
	assert_int_equal(b.prefetch_fills - a.prefetch_fills, fills);
}

static void test_range(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	struct env e;
	uint64_t misses = 0, fills = 0;

	(void)state;
	for (int off = 0; off < 2; off++) {
		env_init(&e, &g, (struct opts){.auto_offline = off == 1});
		map(&e, BASE, 0, 256 * K4, RW);
		range(&e, 0, 16, 2, 14);
		touch(&e, 200, &misses, &fills); /* line 25 */
		range(&e, 64, 16, 2, 14);	 /* lines 8, 9 */
		range(&e, 135, 2, 2, 7 + 7 + 8); /* pages 135 (line 16), 136 (lines 17, 18) */
		env_fini(&e);
	}
	assert_int_equal(misses, 2);
	assert_int_equal(fills, 0);
}

/* ---- which neighbours ------------------------------------------------------------------ */

/*
 * Line 0..7: 0 RW (the demand page), 1 RW, 2 hole, 3 read-only, 4 write-only, 5 hole,
 * 6 RW at a distant frame, 7 hole; 8 mapped (the next line: never filled from this one).
 */
static void test_holes_and_perms(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	struct dg_dev_stats a, b;
	struct env e;
	uint64_t h;

	(void)state;
	for (int off = 0; off < 2; off++) {
		env_init(&e, &g, (struct opts){.auto_offline = off == 1});
		map(&e, BASE, 0, 2 * K4, RW);
		map(&e, BASE + 3 * K4, 3 * K4, K4, DG_PROT_READ);
		map(&e, BASE + 4 * K4, 4 * K4, K4, DG_PROT_WRITE);
		map(&e, BASE + 6 * K4, 100 * K4, K4, RW);
		map(&e, BASE + 8 * K4, 8 * K4, K4, RW);
		arm_fill(&e, BASE);
		stats(&e, &a);
		assert_int_equal(xlate(&e, BASE + 8, 8, DG_ACCESS_READ, &h), 0);
		stats(&e, &b);
		assert_int_equal(b.iotlb_misses - a.iotlb_misses, 1);
		assert_int_equal(b.prefetch_fills - a.prefetch_fills, 4);
		assert_int_equal(cached_perm(&e, BASE + 1 * K4), RW);
		assert_int_equal(cached_perm(&e, BASE + 2 * K4), -1);
		assert_int_equal(cached_perm(&e, BASE + 3 * K4), DG_PROT_READ);
		assert_int_equal(cached_perm(&e, BASE + 4 * K4), DG_PROT_WRITE);
		assert_int_equal(cached_perm(&e, BASE + 5 * K4), -1);
		assert_int_equal(cached_perm(&e, BASE + 6 * K4), RW);
		assert_int_equal(cached_perm(&e, BASE + 7 * K4), -1);
		assert_int_equal(cached_perm(&e, BASE + 8 * K4), -1);
		/* The filled ones serve hits with their own frame and permissions. */
		a = b;
		assert_int_equal(xlate(&e, BASE + 6 * K4 + 5, 1, DG_ACCESS_WRITE, &h), 0);
		assert_int_equal(h, host(100 * K4 + 5));
		assert_int_equal(xlate(&e, BASE + 3 * K4, 1, DG_ACCESS_READ, &h), 0);
		assert_int_equal(h, host(3 * K4));
		assert_int_equal(xlate(&e, BASE + 4 * K4, 1, DG_ACCESS_WRITE, &h), 0);
		assert_int_equal(h, host(4 * K4));
		stats(&e, &b);
		assert_int_equal(b.iotlb_misses, a.iotlb_misses);
		assert_int_equal(b.iotlb_hits - a.iotlb_hits, 3);
		/* Refused: the cached permission says no, and it is recorded. */
		assert_int_equal(xlate(&e, BASE + 3 * K4, 1, DG_ACCESS_WRITE, &h), -EACCES);
		expect_fault(&e, BASE + 3 * K4, DG_ACCESS_WRITE, DG_FAULT_PERM);
		assert_int_equal(xlate(&e, BASE + 4 * K4, 1, DG_ACCESS_READ, &h), -EACCES);
		expect_fault(&e, BASE + 4 * K4, DG_ACCESS_READ, DG_FAULT_PERM);
		/* The holes were not filled: they miss and fault, every time. */
		for (int k = 0; k < 2; k++) {
			assert_int_equal(xlate(&e, BASE + 2 * K4, 1, DG_ACCESS_READ, &h), -EFAULT);
			expect_fault(&e, BASE + 2 * K4, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
			assert_int_equal(xlate(&e, BASE + 7 * K4 + 9, 1, DG_ACCESS_WRITE, &h),
					 -EFAULT);
			expect_fault(&e, BASE + 7 * K4 + 9, DG_ACCESS_WRITE, DG_FAULT_UNMAPPED);
		}
		/* A refused demand access fills nothing. */
		arm_fill(&e, BASE + 8 * K4);
		stats(&e, &a);
		assert_int_equal(xlate(&e, BASE + 8 * K4, 1, DG_ACCESS_READ, &h), 0);
		stats(&e, &b);
		assert_int_equal(b.prefetch_fills - a.prefetch_fills, 0); /* 9..15: holes */
		env_fini(&e);
	}
}

/*
 * A present leaf granting nothing (ARM stage 2 with HAP = 00: valid, no access) next to the
 * demand page is not filled, and an access to it faults as a permission fault, recorded.
 */
static void run_permissionless(bool auto_offline)
{
	struct dg_pt_geometry g = {
		.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 40, .oas = 48, .granule = K4};
	struct dg_dev_stats a, b;
	struct dg_pt_walk w;
	struct env e;
	uint64_t h, pte;
	_Atomic uint64_t *table;

	env_init(&e, &g, (struct opts){.auto_offline = auto_offline});
	map(&e, BASE, 0, 2 * K4, RW);
	map(&e, BASE + 2 * K4, 2 * K4, K4, RW);
	/* Page 2's entry: the same descriptor without its two HAP bits (6, 7). */
	assert_int_equal(dg_pt_walk(dg_domain_pt(e.dom), BASE + 2 * K4, &w), 0);
	pte = w.pte & ~(3ull << 6);
	assert_true(pte & 1);
	table = (_Atomic uint64_t *)(uintptr_t)w.table[w.depth];
	atomic_store(&table[pt_leaf_index(dg_domain_pt(e.dom), BASE + 2 * K4)], pte);
	assert_int_equal(dg_pt_walk(dg_domain_pt(e.dom), BASE + 2 * K4, &w), 0);
	assert_int_equal(w.prot & RW, 0);
	arm_fill(&e, BASE);
	stats(&e, &a);
	assert_int_equal(xlate(&e, BASE, 8, DG_ACCESS_READ, &h), 0);
	stats(&e, &b);
	assert_int_equal(b.prefetch_fills - a.prefetch_fills, 1); /* page 1 only */
	assert_int_equal(cached_perm(&e, BASE + K4), RW);
	assert_int_equal(cached_perm(&e, BASE + 2 * K4), -1);
	assert_int_equal(xlate(&e, BASE + 2 * K4, 8, DG_ACCESS_READ, &h), -EACCES);
	expect_fault(&e, BASE + 2 * K4, DG_ACCESS_READ, DG_FAULT_PERM);
	assert_int_equal(cached_perm(&e, BASE + 2 * K4), -1);
	env_fini(&e);
}

static void test_permissionless_neighbour(void **state)
{
	(void)state;
	run_permissionless(false); /* the cheap miss */
	run_permissionless(true);  /* the general walk */
}

/* The group follows the table: a flat window of 4 entries, one not aligned to 8 pages,
 * and 64 KiB pages of an LPAE table. */
static void test_geometries(void **state)
{
	static const struct {
		struct dg_pt_geometry g;
		uint64_t iova, page; /* first page of the range mapped, page size */
		unsigned int pages;  /* mapped */
		unsigned int demand; /* page translated */
		uint64_t fills;	     /* neighbours filled */
	} c[] = {
		/* 4 entries: the table is the group. */
		{{.format = DG_PT_FMT_FLAT,
		  .granule = K4,
		  .window_base = 1ull << 32,
		  .window_size = 4 * K4},
		 1ull << 32,
		 K4,
		 4,
		 2,
		 3},
		/* Window at page 3 of an 8-page line: entries 0..7 are IOVA pages 3..10. */
		{{.format = DG_PT_FMT_FLAT,
		  .granule = K4,
		  .window_base = (1ull << 32) + 3 * K4,
		  .window_size = 64 * K4},
		 (1ull << 32) + 3 * K4,
		 K4,
		 16,
		 5,
		 7},
		{{.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 42, .oas = 48, .granule = K64},
		 1ull << 30,
		 K64,
		 16,
		 9,
		 7},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct dg_dev_stats a, b;
		struct env e;
		uint64_t h, first = c[i].demand & ~7u;

		env_init(&e, &c[i].g, (struct opts){0});
		map(&e, c[i].iova, 0, c[i].pages * c[i].page, RW);
		arm_fill(&e, c[i].iova + c[i].demand * c[i].page);
		stats(&e, &a);
		assert_int_equal(
			xlate(&e, c[i].iova + c[i].demand * c[i].page, 8, DG_ACCESS_READ, &h), 0);
		stats(&e, &b);
		assert_int_equal(b.prefetch_fills - a.prefetch_fills, c[i].fills);
		for (unsigned int p = 0; p < c[i].pages; p++) {
			bool in = p >= first && p < first + 8;

			assert_int_equal(cached_perm(&e, c[i].iova + p * c[i].page),
					 in ? (int)RW : -1);
			if (!in)
				continue;
			assert_int_equal(xlate(&e, c[i].iova + p * c[i].page + 3, 1,
					       DG_ACCESS_WRITE, &h),
					 0);
			assert_int_equal(h, host(p * c[i].page + 3));
		}
		stats(&e, &a);
		assert_int_equal(a.iotlb_misses - b.iotlb_misses, 0);
		env_fini(&e);
	}
}

/*
 * The fill's decoder (pt_leaf_decode() with the fields in a local) gives what the cheap
 * miss's pt_leaf_read_at() and the walker give, for every format and every permission the
 * format can express, present or not.
 */
static void test_decoders_agree(void **state)
{
	static const struct dg_pt_geometry geos[] = {
		{.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48},
		{.format = DG_PT_FMT_VTD_SS, .ias = 39, .oas = 48},
		{.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48, .granule = K4},
		{.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 40, .oas = 48, .granule = K4},
		{.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 47, .oas = 48, .granule = 0x4000},
		{.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 42, .oas = 52, .granule = K64},
		{.format = DG_PT_FMT_FLAT,
		 .granule = K4,
		 .window_base = 1ull << 32,
		 .window_size = 64 * K4},
		{.format = DG_PT_FMT_FLAT,
		 .granule = K64,
		 .window_base = 1ull << 32,
		 .window_size = 64 * K64},
	};
	static const unsigned int prots[] = {DG_PROT_READ, DG_PROT_WRITE, RW, RW | DG_PROT_CACHE};

	(void)state;
	for (size_t i = 0; i < sizeof(geos) / sizeof(geos[0]); i++) {
		struct dg_pt *pt = dg_pt_create(&geos[i], NULL, NULL);
		uint64_t iova, gran, oa_top;
		struct dg_pt_walk w;
		struct pt_leaf_dec d;
		const void *table;

		assert_non_null(pt);
		gran = geos[i].granule ? geos[i].granule : K4;
		iova = geos[i].format == DG_PT_FMT_FLAT ? 1ull << 32 : 1ull << 30;
		/* output addresses with high bits set (PA[51:48] of a 52-bit LPAE table) */
		oa_top = geos[i].oas == 52 ? 0xf000000000000ull : 0x7f00000000ull;
		for (unsigned int p = 0; p < 8; p++) {
			struct dg_pt_gather g;

			dg_pt_gather_init(&g);
			if (p != 5) /* a hole */
				assert_int_equal(dg_pt_map(pt, iova + p * gran,
							   oa_top + p * 3 * gran, gran,
							   prots[p % 4], &g),
						 0);
		}
		assert_int_equal(dg_pt_walk(pt, iova, &w), 0);
		table = w.table[w.depth];
		assert_int_equal(w.depth + 1, pt_depth(pt));
		pt_leaf_dec_init(pt, &d);
		for (unsigned int p = 0; p < 8; p++) {
			uint64_t idx = pt_leaf_index(pt, iova + p * gran), phys1 = 0, phys2 = 0;
			unsigned int rw1 = 0, rw2 = 0;
			bool ok1 = pt_leaf_read_at(pt, table, idx, &phys1, &rw1);
			bool ok2 = pt_leaf_decode(&d, pt_leaf_load(table, idx), &phys2, &rw2);
			int r = dg_pt_walk(pt, iova + p * gran, &w);

			assert_int_equal(ok1, p != 5);
			assert_int_equal(ok2, ok1);
			assert_int_equal(r, ok1 ? 0 : -ENOENT);
			if (!ok1)
				continue;
			assert_int_equal(phys1, oa_top + p * 3 * gran);
			assert_int_equal(phys2, phys1);
			assert_int_equal(rw2, rw1);
			assert_int_equal(rw1, w.prot & RW);
		}
		dg_pt_destroy(pt);
	}
}

/* ---- invalidation ---------------------------------------------------------------------- */

/*
 * Page 5 is cached only by the fill of page 0's miss, then unmapped without invalidation:
 * the device still reaches it (the entry is there and used), until @c is applied; then the
 * access faults and is recorded, and page 5 is gone from the IOTLB.
 */
static void run_drop(struct opts o, struct dg_inval_cmd c, bool keeps_4)
{
	struct dg_pt_geometry g = vtd4k();
	struct dg_dev_stats a, b;
	struct env e;
	uint64_t h;

	env_init(&e, &g, o);
	map(&e, BASE, 0, 8 * K4, RW);
	arm_fill(&e, BASE);
	assert_int_equal(xlate(&e, BASE, 8, DG_ACCESS_READ, &h), 0);
	assert_int_equal(cached_perm(&e, BASE + 5 * K4), RW);
	unmap_only(&e, BASE + 5 * K4, K4);
	stats(&e, &a);
	assert_int_equal(xlate(&e, BASE + 5 * K4, 8, DG_ACCESS_WRITE, &h), 0); /* stale: allowed */
	assert_int_equal(h, host(5 * K4));
	stats(&e, &b);
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, 1);
	assert_int_equal(b.iotlb_misses, a.iotlb_misses);
	inval(&e, c);
	dg_dev_online(e.dev); /* catch up */
	assert_int_equal(cached_perm(&e, BASE + 5 * K4), -1);
	assert_int_equal(cached_perm(&e, BASE + 4 * K4), keeps_4 ? (int)RW : -1);
	assert_int_equal(xlate(&e, BASE + 5 * K4, 8, DG_ACCESS_WRITE, &h), -EFAULT);
	expect_fault(&e, BASE + 5 * K4, DG_ACCESS_WRITE, DG_FAULT_UNMAPPED);
	env_fini(&e);
}

static void test_invalidation_drops(void **state)
{
	const struct dg_inval_cmd cmds[] = {
		{.type = DG_INVAL_PAGE, .domain = 1, .iova = BASE + 5 * K4, .size = K4},
		{.type = DG_INVAL_PAGE,
		 .domain = 1,
		 .iova = BASE + 5 * K4,
		 .size = K4,
		 .flags = DG_INVAL_LEAF},
		{.type = DG_INVAL_RANGE, .domain = 1, .iova = BASE + 5 * K4, .size = 2 * K4},
		{.type = DG_INVAL_DOMAIN, .domain = 1},
		{.type = DG_INVAL_DOMAIN, .domain = 1, .flags = DG_INVAL_LEAF},
		{.type = DG_INVAL_GLOBAL},
		{.type = DG_INVAL_DEVICE, .rid = 1},
	};

	(void)state;
	for (int off = 0; off < 2; off++)
		for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
			run_drop((struct opts){.auto_offline = off == 1}, cmds[i],
				 cmds[i].type == DG_INVAL_PAGE || cmds[i].type == DG_INVAL_RANGE);
}

/*
 * The fill ahead: an ascending miss (page 8, one line above the stream's page 0) caches the
 * next line (16..23) too, which then hits without a walk; a page-selective invalidation of
 * one of those pages (19, unmapped) drops that one only, so it walks and faults, while its
 * line's others still hit. At the last line of a leaf table the next line is in another
 * table: nothing is filled ahead (pages 512..519 stay uncached).
 */
static void test_ahead_and_its_invalidation(void **state)
{
	struct dg_pt_geometry g = vtd4k();

	(void)state;
	for (int off = 0; off < 2; off++) {
		struct dg_dev_stats a, b;
		struct env e;
		uint64_t h;

		env_init(&e, &g, (struct opts){.auto_offline = off == 1});
		map(&e, BASE, 0, 520 * K4, RW);
		assert_int_equal(xlate(&e, BASE, 8, DG_ACCESS_READ, &h), 0);
		assert_int_equal(cached_perm(&e, BASE + 17 * K4), -1);
		assert_int_equal(xlate(&e, BASE + 8 * K4, 8, DG_ACCESS_READ, &h), 0);
		for (unsigned int p = 9; p < 24; p++)
			assert_int_equal(cached_perm(&e, BASE + p * K4), RW);
		assert_int_equal(cached_perm(&e, BASE + 24 * K4), -1);
		unmap_only(&e, BASE + 19 * K4, K4);
		inval(&e, (struct dg_inval_cmd){.type = DG_INVAL_PAGE,
						.domain = 1,
						.iova = BASE + 19 * K4,
						.size = K4,
						.flags = DG_INVAL_LEAF});
		dg_dev_online(e.dev); /* catch up */
		assert_int_equal(cached_perm(&e, BASE + 19 * K4), -1);
		stats(&e, &a);
		for (unsigned int p = 16; p < 24; p++) {
			int r = xlate(&e, BASE + p * K4 + 8, 8, DG_ACCESS_WRITE, &h);

			if (p == 19) {
				assert_int_equal(r, -EFAULT);
				expect_fault(&e, BASE + 19 * K4 + 8, DG_ACCESS_WRITE,
					     DG_FAULT_UNMAPPED);
			} else {
				assert_int_equal(r, 0);
				assert_int_equal(h, host(p * K4 + 8));
			}
		}
		stats(&e, &b);
		assert_int_equal(b.iotlb_misses - a.iotlb_misses, 1); /* page 19 only */
		assert_int_equal(b.iotlb_hits - a.iotlb_hits, 7);
		/* BASE is entry 256 of its leaf table: page 248 is in its last line (504..511);
		   one line above the stream's line at page 240, it fills its own line only. */
		assert_int_equal(xlate(&e, BASE + 240 * K4, 8, DG_ACCESS_READ, &h), 0);
		assert_int_equal(xlate(&e, BASE + 248 * K4, 8, DG_ACCESS_READ, &h), 0);
		assert_int_equal(cached_perm(&e, BASE + 255 * K4), RW);
		assert_int_equal(cached_perm(&e, BASE + 256 * K4), -1);
		env_fini(&e);
	}
}

/* A device a whole queue behind cannot know what it missed: its catch-up drops everything,
 * the prefetched entries included (the commands it missed are all for another domain). */
static void test_lap_drops(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	struct dg_domain *other;
	struct dg_dev_stats st;
	struct env e;
	uint64_t h;

	(void)state;
	env_init(&e, &g, (struct opts){.inval_len = 16});
	other = dg_domain_create(e.mmu, &g, NULL, NULL);
	assert_non_null(other);
	map(&e, BASE, 0, 8 * K4, RW);
	arm_fill(&e, BASE);
	assert_int_equal(xlate(&e, BASE, 8, DG_ACCESS_READ, &h), 0);
	assert_int_equal(cached_perm(&e, BASE + 5 * K4), RW);
	unmap_only(&e, BASE + 5 * K4, K4);
	for (int i = 0; i < 40; i++)
		inval(&e, (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN,
						.domain = dg_domain_id(other)});
	assert_int_equal(xlate(&e, BASE + 5 * K4, 8, DG_ACCESS_READ, &h), -EFAULT);
	expect_fault(&e, BASE + 5 * K4, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
	dg_dev_stats(e.dev, &st);
	assert_int_equal(st.laps, 1);
	/* Without the lap the entry would have survived: the same with 8 commands. */
	map(&e, BASE + 5 * K4, 5 * K4, K4, RW);
	assert_int_equal(xlate(&e, BASE + 4 * K4, 8, DG_ACCESS_READ, &h), 0);
	unmap_only(&e, BASE + 5 * K4, K4);
	for (int i = 0; i < 8; i++)
		inval(&e, (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN,
						.domain = dg_domain_id(other)});
	assert_int_equal(xlate(&e, BASE + 5 * K4, 8, DG_ACCESS_READ, &h), 0); /* stale, allowed */
	inval(&e, (struct dg_inval_cmd){.type = DG_INVAL_PAGE,
					.domain = dg_domain_id(e.dom),
					.iova = BASE + 5 * K4,
					.size = K4});
	assert_int_equal(xlate(&e, BASE + 5 * K4, 8, DG_ACCESS_READ, &h), -EFAULT);
	expect_fault(&e, BASE + 5 * K4, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
	assert_int_equal(dg_domain_destroy(other), 0);
	env_fini(&e);
}

/* ---- the race with an unmap of a neighbour ---------------------------------------------- */

/*
 * Both orders, single-threaded, with an online device (the cheap miss; waits wait for it):
 *  (a) the fill happens before the unmap's command is published (the walk read the line
 *      before the entry was cleared): the wait cannot complete until the device acknowledges,
 *      and the device applies the command, dropping the entry, before it acknowledges - even
 *      while it holds an sg list, and at its next call before any translation;
 *  (b) the command is published before the miss: the miss catches up first (its acquire of
 *      published makes the cleared entry visible), so the line shows page 1 unmapped.
 */
static void test_race_orders(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	struct dg_inval_cmd c = {.type = DG_INVAL_PAGE, .domain = 1, .iova = BASE + K4, .size = K4};
	struct dg_dev_stats a, b;
	struct env e;
	uint64_t h, seq;

	(void)state;
	/* (a) */
	env_init(&e, &g, (struct opts){0});
	map(&e, BASE, 0, 8 * K4, RW);
	arm_fill(&e, BASE);
	assert_int_equal(xlate(&e, BASE, 8, DG_ACCESS_READ, &h), 0); /* fills 1..7; held */
	assert_int_equal(cached_perm(&e, BASE + K4), RW);
	unmap_only(&e, BASE + K4, K4);
	assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
	assert_false(dg_inval_done(e.mmu, seq)); /* the device is online and has not caught up */
	/* Its next call applies the command first: page 1 misses and faults. */
	assert_int_equal(xlate(&e, BASE + K4, 8, DG_ACCESS_READ, &h), -EFAULT);
	expect_fault(&e, BASE + K4, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
	assert_false(dg_inval_done(e.mmu, seq)); /* applied, but the sg list of page 0 is held */
	dg_dev_quiesce(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));
	assert_int_equal(cached_perm(&e, BASE + K4), -1);
	env_fini(&e);

	/* (a') the same when the device reaches its quiescent point before touching page 1. */
	env_init(&e, &g, (struct opts){0});
	map(&e, BASE, 0, 8 * K4, RW);
	arm_fill(&e, BASE);
	assert_int_equal(xlate(&e, BASE, 8, DG_ACCESS_READ, &h), 0);
	unmap_only(&e, BASE + K4, K4);
	assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
	assert_int_equal(cached_perm(&e, BASE + K4), RW); /* not applied yet */
	dg_dev_quiesce(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));
	assert_int_equal(cached_perm(&e, BASE + K4), -1);
	assert_int_equal(xlate(&e, BASE + K4, 8, DG_ACCESS_READ, &h), -EFAULT);
	expect_fault(&e, BASE + K4, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
	env_fini(&e);

	/* (b) */
	env_init(&e, &g, (struct opts){0});
	map(&e, BASE, 0, 8 * K4, RW);
	/* Online, warm; the first miss, which also makes the next one (same line) fill. */
	assert_int_equal(xlate(&e, BASE + 2 * K4, 8, DG_ACCESS_READ, &h), 0);
	dg_dev_quiesce(e.dev);
	inval(&e,
	      (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN, .domain = 1, .flags = DG_INVAL_LEAF});
	dg_dev_online(e.dev); /* an empty IOTLB, the walk cache kept: the next miss is cheap */
	unmap_only(&e, BASE + K4, K4);
	c.flags = DG_INVAL_LEAF; /* no table freed: the walk cache keeps the leaf table */
	assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
	stats(&e, &a);
	assert_int_equal(xlate(&e, BASE, 8, DG_ACCESS_READ, &h), 0);
	stats(&e, &b);
	assert_int_equal(b.walk_cache_hits - a.walk_cache_hits, 1);
	assert_int_equal(b.prefetch_fills - a.prefetch_fills, 6); /* 2..7 */
	assert_int_equal(cached_perm(&e, BASE + K4), -1);
	assert_int_equal(xlate(&e, BASE + K4, 8, DG_ACCESS_READ, &h), -EFAULT);
	expect_fault(&e, BASE + K4, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
	dg_dev_quiesce(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));
	env_fini(&e);
}

/*
 * Two threads. The device writes a round number to page 0 (its neighbour-fill source: each
 * round leaf-invalidates page 0, so its next write misses and re-reads the line) and then to
 * page 1 (served by the entry that fill made). The CPU maps page 1 to a fresh frame, waits
 * until the device has written it, unmaps and flushes it, snapshots the frame and lets the
 * device make more attempts: one byte changed after the flush returned is a failure.
 */
#define RACE_ROUNDS (RUNNING_ON_VALGRIND ? 20u : 150u) /* threads serialised there */
#define RACE_FRAMES 8

struct race {
	struct env e;
	_Atomic bool stop;
	_Atomic uint64_t attempts; /* device loop iterations */
	_Atomic uint64_t refused;  /* writes to page 1 refused */
};

static void *race_device(void *arg)
{
	struct race *r = arg;
	uint64_t v = 1;

	while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		dg_dev_write(r->e.dev, BASE + 8, &v, sizeof(v)); /* page 0: the line's miss */
		if (dg_dev_write(r->e.dev, BASE + K4 + 8, &v, sizeof(v)))
			atomic_fetch_add_explicit(&r->refused, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&r->attempts, 1, memory_order_relaxed);
		v++;
		dg_dev_quiesce(r->e.dev);
	}
	dg_dev_offline(r->e.dev);
	return NULL;
}

static void wait_attempts(struct race *r, uint64_t n)
{
	uint64_t start = atomic_load_explicit(&r->attempts, memory_order_relaxed);

	while (atomic_load_explicit(&r->attempts, memory_order_relaxed) - start < n)
		sched_yield();
}

static void test_race_threads(void **state)
{
	struct dg_pt_geometry g = vtd4k();
	static struct race r;
	struct dg_fault f;
	struct dg_dev_stats st;
	struct dg_iommu_stats ist;
	uint64_t faults = 0;
	pthread_t t;

	(void)state;
	memset(&r, 0, sizeof(r));
	env_init(&r.e, &g, (struct opts){0});
	map(&r.e, BASE, 0, K4, RW);
	assert_int_equal(pthread_create(&t, NULL, race_device, &r), 0);
	for (unsigned int round = 0; round < RACE_ROUNDS; round++) {
		uint64_t frame = (1 + round % RACE_FRAMES) * K4, unmapped;
		uint8_t *mem = arena + frame, snap[64];
		struct dg_pt_gather gat;
		struct dg_inval_cmd c = {.type = DG_INVAL_PAGE,
					 .domain = dg_domain_id(r.e.dom),
					 .iova = BASE,
					 .size = K4,
					 .flags = DG_INVAL_LEAF};
		uint64_t seq;

		memset(mem, 0, 64);
		map(&r.e, BASE + K4, frame, K4, RW);
		/* Page 0's entry goes: its next write re-reads the line, page 1 now in it. */
		assert_int_equal(dg_inval_submit(r.e.mmu, &c, 1, &seq), 0);
		assert_int_equal(dg_inval_wait(r.e.mmu, seq), 0);
		while (!atomic_load_explicit((_Atomic uint64_t *)(void *)(mem + 8),
					     memory_order_relaxed))
			sched_yield();
		dg_pt_gather_init(&gat);
		assert_int_equal(dg_domain_unmap(r.e.dom, BASE + K4, K4, &gat, &unmapped), 0);
		assert_int_equal(dg_iommu_flush_gather(r.e.mmu, r.e.dom, &gat), 0);
		memcpy(snap, mem, sizeof(snap));
		wait_attempts(&r, 3);
		assert_memory_equal(snap, mem, sizeof(snap));
		while (dg_iommu_fault_pop(r.e.mmu, &f) == 0) {
			assert_int_equal(f.iova, BASE + K4 + 8);
			faults++;
		}
	}
	atomic_store_explicit(&r.stop, true, memory_order_relaxed);
	assert_int_equal(pthread_join(t, NULL), 0);
	while (dg_iommu_fault_pop(r.e.mmu, &f) == 0)
		faults++;
	dg_dev_stats(r.e.dev, &st);
	dg_iommu_stats(r.e.mmu, &ist);
	/* Every refused write was recorded (or counted as an overflow), and fills happened. */
	assert_int_equal(faults + ist.fault_overflow, atomic_load(&r.refused));
	assert_true(faults >= 2 * RACE_ROUNDS);
	assert_true(st.prefetch_fills > 0);
	env_fini(&r.e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sequential),
		cmocka_unit_test(test_range),
		cmocka_unit_test(test_detector_random),
		cmocka_unit_test(test_detector_strides),
		cmocka_unit_test(test_detector_streams),
		cmocka_unit_test(test_detector_switch),
		cmocka_unit_test(test_holes_and_perms),
		cmocka_unit_test(test_permissionless_neighbour),
		cmocka_unit_test(test_geometries),
		cmocka_unit_test(test_decoders_agree),
		cmocka_unit_test(test_invalidation_drops),
		cmocka_unit_test(test_ahead_and_its_invalidation),
		cmocka_unit_test(test_lap_drops),
		cmocka_unit_test(test_race_orders),
		cmocka_unit_test(test_race_threads),
	};

	return cmocka_run_group_tests(tests, setup_arena, teardown_arena);
}
