/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the device's translation of ascending IOVAs on a leaf-direct device (the
 * streaming-strict pattern: a driver hands out IOVAs ascending from a chunk of one leaf
 * table, 512 granules, so consecutive buffers of a ring share a last-level table, and the
 * device's hot line - the "last leaf table" - serves them with one load each; docs/iommu.md,
 * "Leaf-direct").
 *
 * What must hold, and fails if the inline leaf hit (dmaguard/dev.h dg_dev_hot_leaf()) or its
 * hot line (iommu_internal.h hot_set_leaf()) were wrong:
 *  - a chunk of 512 ascending pages in one table costs one miss; a chunk that straddles two
 *    tables two; every other page is an inline hit returning the exact host address of its
 *    own page (host pages are scrambled, so a wrong entry index, a wrong span test or an
 *    output-address mask that keeps the permission bits gives a wrong address);
 *  - streaming strict: page k mapped, translated, unmapped and invalidated (leaf-only, the
 *    table stays), acknowledged: translating page k again faults (-EFAULT, recorded) while
 *    page k + 1, mapped meanwhile, is still a hit without a miss;
 *  - a translation held across the invalidation of its page (the device holds sg lists)
 *    keeps the acknowledgement back: the invalidation's wait does not complete until the
 *    device quiesces, and after that the page faults;
 *  - a read-only page refuses a write (-EACCES, recorded) on the inline path, and after it
 *    is remapped writable and the remap's invalidation applied the write is allowed;
 *  - two tables (a ring's receive and send buffers): alternating between them misses twice,
 *    then every access is an inline hit (the hot line's second table); a third table evicts
 *    the older one; a non-leaf invalidation of the second table's span (the table freed and,
 *    by a LIFO allocator, reused for another region) drops it: the old region's access then
 *    faults instead of reading the other region's entry through the reused page (fails
 *    without the second table's overlap test in agent.c apply());
 *  - watched ranges (dg_dev_watch()): DG_DEV_WATCH_MAX of them (a multi-queue NIC's or an
 *    NVMe controller's rings) are all re-held across a buffer's invalidation, and exactly
 *    the one a command covers is not; one more watch is -ENOSPC; the hull that lets a
 *    command outside every range skip the per-range compares follows watch and unwatch (a
 *    range added above it, a middle range after the lowest was unwatched: both must still
 *    see their command, which fails if the hull is stale).
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

#define K4	   0x1000ull
#define M2	   0x200000ull
#define NPG	   512ull
#define BASE	   0x40000000ull /* 1 GiB: 2 MiB aligned */
#define ARENA_SIZE (4ull << 20)
#include "../iommu/test_arena.h"

#include "../iommu/test_env.h"
#include "../iommu/test_pool.h"

/* The host page of IOVA page k: scrambled over the arena's 1024 pages. */
static uint64_t host_off(uint64_t k)
{
	return ((k * 389 + 17) % 1024) * K4;
}

static void map(struct env *e, uint64_t k, unsigned int prot)
{
	assert_int_equal(dg_domain_map(e->dom, BASE + k * K4, host(host_off(k)), K4, prot, NULL),
			 0);
}

/* Unmap page k and submit its leaf-only invalidation; returns the sequence number to wait
   for. The device is online: the wait completes only once it acknowledged. */
static uint64_t unmap_submit(struct env *e, uint64_t k)
{
	struct dg_pt_gather g;
	uint64_t unmapped, seq = 0;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(e->dom, BASE + k * K4, K4, &g, &unmapped), 0);
	assert_int_equal(unmapped, K4);
	assert_int_equal(g.nr_tables, 0);
	assert_int_equal(dg_inval_submit(e->mmu,
					 &(struct dg_inval_cmd){.type = DG_INVAL_PAGE,
								.flags = DG_INVAL_LEAF,
								.domain = dg_domain_id(e->dom),
								.iova = BASE + k * K4,
								.size = K4},
					 1, &seq),
			 0);
	return seq;
}

/* Translate 64 bytes at @off of page k (inline path) for @access. */
static int xlat(struct env *e, uint64_t k, uint64_t off, unsigned int access, void **out)
{
	struct dg_sg sg[2];
	unsigned int nr = 0;
	int r = dg_dev_translate_fast(e->dev, BASE + k * K4 + off, 64, access, sg, 2, &nr);

	if (!r) {
		assert_int_equal(nr, 1);
		assert_int_equal(sg[0].len, 64);
		*out = sg[0].addr;
	}
	return r;
}

/* Unmap @n pages from page k and flush them while the device is offline. */
static void unmap_all(struct env *e, uint64_t k, uint64_t n)
{
	struct dg_pt_gather g;
	uint64_t unmapped;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(e->dom, BASE + k * K4, n * K4, &g, &unmapped), 0);
	dg_dev_offline(e->dev);
	assert_int_equal(dg_iommu_flush_gather(e->mmu, e->dom, &g), 0);
}

static void expect_fault(struct env *e, uint64_t k, uint64_t off, enum dg_fault_reason why)
{
	struct dg_fault f;

	assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), 0);
	assert_int_equal(f.iova, BASE + k * K4 + off);
	assert_int_equal(f.reason, why);
}

/* One chunk of NPG ascending pages from page @first: @tables misses, the rest inline hits. */
static void run_chunk(uint64_t first, uint64_t tables)
{
	struct dg_dev_stats a, b;
	struct env e;
	void *p;

	env_open_direct(&e, NULL, NULL, 0);
	for (uint64_t k = first; k < first + NPG; k++)
		map(&e, k, DG_PROT_READ | DG_PROT_WRITE);
	dg_dev_stats(e.dev, &a);
	for (uint64_t k = first; k < first + NPG; k++) {
		uint64_t off = (k * 64) % (K4 - 64);

		assert_int_equal(xlat(&e, k, off, k & 1 ? DG_ACCESS_READ : DG_ACCESS_WRITE, &p), 0);
		assert_ptr_equal(p, (void *)(uintptr_t)(host(host_off(k)) + off));
	}
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.iotlb_misses - a.iotlb_misses, tables);
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, NPG - tables);
	assert_true(e.dev->hot.leaf_shift);
	dg_dev_quiesce(e.dev);
	unmap_all(&e, first, NPG);
	env_fini(&e);
}

static void test_chunk_one_table(void **state)
{
	(void)state;
	run_chunk(0, 1);
}

static void test_chunk_two_tables(void **state)
{
	(void)state;
	run_chunk(NPG / 2, 2);
}

/*
 * Streaming strict over a ring of the chunk: map k + 1, use k, unmap k with a leaf-only
 * invalidation, acknowledge (quiesce), then k must fault and k + 1 must still hit.
 */
static void test_stream_strict(void **state)
{
	struct dg_dev_stats a, b;
	struct env e;
	void *p;

	(void)state;
	env_open_direct(&e, NULL, NULL, 0);
	map(&e, 0, DG_PROT_READ | DG_PROT_WRITE);
	assert_int_equal(xlat(&e, 0, 0, DG_ACCESS_WRITE, &p), 0); /* the table's one miss */
	dg_dev_stats(e.dev, &a);
	for (uint64_t k = 0; k + 1 < NPG; k++) {
		uint64_t seq;

		map(&e, k + 1, DG_PROT_READ | DG_PROT_WRITE);
		assert_int_equal(xlat(&e, k, 8, DG_ACCESS_WRITE, &p), 0);
		assert_ptr_equal(p, (void *)(uintptr_t)(host(host_off(k)) + 8));
		seq = unmap_submit(&e, k);
		dg_dev_quiesce(e.dev); /* applies and acknowledges */
		assert_int_equal(dg_inval_wait(e.mmu, seq), 0);
		assert_int_equal(xlat(&e, k, 8, DG_ACCESS_WRITE, &p), -EFAULT);
		expect_fault(&e, k, 8, DG_FAULT_UNMAPPED);
		assert_int_equal(xlat(&e, k + 1, 8, DG_ACCESS_READ, &p), 0);
		assert_ptr_equal(p, (void *)(uintptr_t)(host(host_off(k + 1)) + 8));
		dg_dev_quiesce(e.dev);
	}
	dg_dev_stats(e.dev, &b);
	/* the faulting lookups walk (a miss each); every mapped page was a hit */
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, 2 * (NPG - 1));
	assert_int_equal(b.faults - a.faults, NPG - 1);
	unmap_all(&e, (NPG - 1), 1);
	env_fini(&e);
}

/* A held translation keeps the acknowledgement of its page's invalidation back. */
static void test_held_then_fault(void **state)
{
	struct env e;
	uint64_t seq;
	void *p;

	(void)state;
	env_open_direct(&e, NULL, NULL, 0);
	map(&e, 3, DG_PROT_READ | DG_PROT_WRITE);
	map(&e, 4, DG_PROT_READ | DG_PROT_WRITE);
	assert_int_equal(xlat(&e, 3, 0, DG_ACCESS_READ, &p), 0);
	seq = unmap_submit(&e, 3);
	/* the device's next DMA applies the command but may not acknowledge it: held */
	assert_int_equal(xlat(&e, 4, 0, DG_ACCESS_READ, &p), 0);
	assert_false(dg_inval_done(e.mmu, seq));
	assert_true(dg_dev_quiesce_if_pending(e.dev) || dg_inval_done(e.mmu, seq));
	dg_dev_quiesce(e.dev);
	assert_int_equal(dg_inval_wait(e.mmu, seq), 0);
	assert_int_equal(xlat(&e, 3, 0, DG_ACCESS_READ, &p), -EFAULT);
	expect_fault(&e, 3, 0, DG_FAULT_UNMAPPED);
	assert_int_equal(xlat(&e, 4, 0, DG_ACCESS_READ, &p), 0);
	assert_ptr_equal(p, (void *)(uintptr_t)host(host_off(4)));
	dg_dev_quiesce(e.dev);
	unmap_all(&e, 4, 1);
	env_fini(&e);
}

/* Permissions on the inline leaf path, and a remap with more of them. */
static void test_perm_remap(void **state)
{
	struct env e;
	uint64_t seq;
	void *p;

	(void)state;
	env_open_direct(&e, NULL, NULL, 0);
	map(&e, 7, DG_PROT_READ);
	map(&e, 8, DG_PROT_WRITE);
	assert_int_equal(xlat(&e, 7, 0, DG_ACCESS_READ, &p), 0);
	assert_ptr_equal(p, (void *)(uintptr_t)host(host_off(7)));
	assert_int_equal(xlat(&e, 7, 0, DG_ACCESS_WRITE, &p), -EACCES);
	expect_fault(&e, 7, 0, DG_FAULT_PERM);
	assert_int_equal(xlat(&e, 8, 0, DG_ACCESS_READ, &p), -EACCES);
	expect_fault(&e, 8, 0, DG_FAULT_PERM);
	assert_int_equal(xlat(&e, 8, 64, DG_ACCESS_WRITE, &p), 0);
	assert_ptr_equal(p, (void *)(uintptr_t)(host(host_off(8)) + 64));
	dg_dev_quiesce(e.dev);
	seq = unmap_submit(&e, 7);
	dg_dev_quiesce(e.dev);
	assert_int_equal(dg_inval_wait(e.mmu, seq), 0);
	map(&e, 7, DG_PROT_READ | DG_PROT_WRITE);
	assert_int_equal(xlat(&e, 7, 0, DG_ACCESS_READ | DG_ACCESS_WRITE, &p), 0);
	assert_ptr_equal(p, (void *)(uintptr_t)host(host_off(7)));
	dg_dev_quiesce(e.dev);
	unmap_all(&e, 7, 2);
	env_fini(&e);
}

/* Table j's page k (tables 2 MiB apart from BASE). */
#define TP(j, k) ((j)*NPG + (k))

static void test_two_tables(void **state)
{
	struct dg_dev_stats a, b;
	struct pool pl = {.nfree = 0};
	struct dg_pt_gather g;
	uint64_t unmapped;
	struct env e;
	void *p;

	(void)state;
	env_open_direct(&e, &pool_ops, &pl, 0);
	for (uint64_t k = 0; k < 8; k++)
		for (uint64_t j = 0; j < 3; j++)
			map(&e, TP(j, k), DG_PROT_READ | DG_PROT_WRITE);
	dg_dev_stats(e.dev, &a);
	for (uint64_t k = 0; k < 8; k++)
		for (uint64_t j = 0; j < 2; j++) {
			assert_int_equal(xlat(&e, TP(j, k), 64, DG_ACCESS_READ, &p), 0);
			assert_ptr_equal(p, (void *)(uintptr_t)(host(host_off(TP(j, k))) + 64));
		}
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.iotlb_misses - a.iotlb_misses, 2); /* each table's first access */
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, 14);
	/* a third table: table 0 (the older) is evicted, table 1 stays */
	assert_int_equal(xlat(&e, TP(2, 0), 0, DG_ACCESS_READ, &p), 0);
	dg_dev_stats(e.dev, &a);
	assert_int_equal(xlat(&e, TP(1, 3), 0, DG_ACCESS_READ, &p), 0);
	assert_int_equal(xlat(&e, TP(2, 3), 0, DG_ACCESS_READ, &p), 0);
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.iotlb_misses - a.iotlb_misses, 0);
	assert_int_equal(xlat(&e, TP(0, 3), 0, DG_ACCESS_READ, &p), 0);
	dg_dev_stats(e.dev, &a);
	assert_int_equal(a.iotlb_misses - b.iotlb_misses, 1);
	/* tables: first 0, second 2. Free table 2 (its whole span) and reuse its page. */
	assert_int_equal(xlat(&e, TP(2, 3), 0, DG_ACCESS_READ, &p), 0); /* second: hit */
	dg_dev_quiesce(e.dev);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(e.dom, BASE + TP(2, 0) * K4, M2, &g, &unmapped), 0);
	assert_true(g.nr_tables > 0);
	dg_dev_offline(e.dev);
	assert_int_equal(dg_iommu_flush_gather(e.mmu, e.dom, &g), 0); /* non-leaf RANGE */
	dg_dev_online(e.dev);
	/* another region, 16 MiB up (same directory): its new leaf table is table 2's page */
	assert_int_equal(dg_domain_map(e.dom, BASE + (16ull << 20) + 3 * K4, host(0), K4,
				       DG_PROT_READ | DG_PROT_WRITE, NULL),
			 0);
	assert_int_equal(xlat(&e, TP(2, 3), 0, DG_ACCESS_READ, &p), -EFAULT);
	expect_fault(&e, TP(2, 3), 0, DG_FAULT_UNMAPPED);
	assert_int_equal(xlat(&e, TP(0, 3), 0, DG_ACCESS_READ, &p), 0); /* table 0 kept */
	assert_ptr_equal(p, (void *)(uintptr_t)host(host_off(TP(0, 3))));
	dg_dev_quiesce(e.dev);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(e.dom, BASE + (16ull << 20), M2, &g, &unmapped), 0);
	dg_dev_offline(e.dev);
	assert_int_equal(dg_iommu_flush_gather(e.mmu, e.dom, &g), 0);
	unmap_all(&e, 0, 2 * NPG);
	env_fini(&e);
	pool_fini(&pl);
}

/* Ring r of the watch test: page WR0 + 2 r (the odd pages between are packet buffers). */
#define WR0 64ull

static uint64_t ring_stamp(struct env *e, uint64_t k)
{
	struct dg_sg sg[2];
	unsigned int nr = 0;

	assert_int_equal(dg_dev_translate(e->dev, BASE + k * K4, K4,
					  DG_ACCESS_READ | DG_ACCESS_WRITE, sg, 2, &nr),
			 0);
	assert_int_equal(nr, 1);
	return dg_dev_stamp(e->dev);
}

/* Unmap page k with its leaf-only command, acknowledged, then map it again. */
static void cycle(struct env *e, uint64_t k)
{
	uint64_t seq = unmap_submit(e, k);

	dg_dev_quiesce(e->dev);
	assert_int_equal(dg_inval_wait(e->mmu, seq), 0);
	map(e, k, DG_PROT_READ | DG_PROT_WRITE);
}

static void test_watch_many(void **state)
{
	enum { N = DG_DEV_WATCH_MAX };
	uint64_t stamp[N];
	int id[N], top;
	struct env e;

	(void)state;
	env_open_direct(&e, NULL, NULL, 0);
	for (uint64_t k = WR0; k < WR0 + 2 * N + 2; k++)
		map(&e, k, DG_PROT_READ | DG_PROT_WRITE);
	for (int r = 0; r < N; r++) {
		id[r] = dg_dev_watch(e.dev, BASE + (WR0 + 2 * (uint64_t)r) * K4, K4);
		assert_true(id[r] >= 0 && id[r] < DG_DEV_WATCH_MAX);
		stamp[r] = ring_stamp(&e, WR0 + 2 * (uint64_t)r);
	}
	assert_int_equal(dg_dev_watch(e.dev, BASE, K4), -ENOSPC);
	dg_dev_quiesce(e.dev);
	/* a buffer between rings 3 and 4: every ring is re-held */
	cycle(&e, WR0 + 7);
	for (int r = 0; r < N; r++)
		assert_true(dg_dev_rehold_watched(e.dev, id[r], stamp[r]));
	dg_dev_quiesce(e.dev);
	/* ring 5's page: only ring 5 is not */
	cycle(&e, WR0 + 10);
	for (int r = 0; r < N; r++)
		assert_int_equal(dg_dev_rehold_watched(e.dev, id[r], stamp[r]), r != 5);
	dg_dev_quiesce(e.dev);
	stamp[5] = ring_stamp(&e, WR0 + 10);
	dg_dev_quiesce(e.dev);
	/* the lowest ring unwatched: the hull shrinks, a middle ring still sees its command */
	dg_dev_unwatch(e.dev, id[0]);
	cycle(&e, WR0 + 2 * 9);
	for (int r = 1; r < N; r++)
		assert_int_equal(dg_dev_rehold_watched(e.dev, id[r], stamp[r]), r != 9);
	dg_dev_quiesce(e.dev);
	/* a range above the hull: its command must reach it */
	top = dg_dev_watch(e.dev, BASE + (WR0 + 2 * N + 1) * K4, K4);
	assert_int_equal(top, id[0]); /* the freed id */
	stamp[0] = ring_stamp(&e, WR0 + 2 * N + 1);
	dg_dev_quiesce(e.dev);
	assert_true(dg_dev_rehold_watched(e.dev, top, stamp[0]));
	dg_dev_quiesce(e.dev);
	cycle(&e, WR0 + 2 * N + 1);
	assert_false(dg_dev_rehold_watched(e.dev, top, stamp[0]));
	for (int r = 1; r < N; r++)
		assert_int_equal(dg_dev_rehold_watched(e.dev, id[r], stamp[r]), r != 9);
	dg_dev_quiesce(e.dev);
	for (int r = 0; r < N; r++)
		dg_dev_unwatch(e.dev, id[r]);
	unmap_all(&e, WR0, 2 * N + 2);
	env_fini(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chunk_one_table), cmocka_unit_test(test_chunk_two_tables),
		cmocka_unit_test(test_stream_strict),	cmocka_unit_test(test_held_then_fault),
		cmocka_unit_test(test_perm_remap),	cmocka_unit_test(test_watch_many),
		cmocka_unit_test(test_two_tables),
	};

	return cmocka_run_group_tests(tests, setup_arena, teardown_arena);
}
