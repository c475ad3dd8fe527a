/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of leaf-direct translation (dg_iommu_config.iotlb_leaf_direct; docs/iommu.md,
 * "Leaf-direct"): the device's hot line reads a last-level table the walk cache knows, one
 * entry per access, and pages of the leaf size are never put in its IOTLB.
 *
 * What must hold, and fails if the code were wrong:
 *  - after one miss the device's next access in the same table is an inline hit that reads
 *    the live entry (dg_dev_translate_fast(), dg_dev_read(), dg_dev_write()): no miss, the
 *    host address of the page table, the permission of the entry (a read-only page refuses
 *    a write and records the fault); the IOTLB level of the leaf size stays empty;
 *  - a leaf-only invalidation (a page unmapped, no table freed) leaves the hot table in
 *    place: the unmapped page faults, its neighbour is still a hit with no miss;
 *  - a table freed and reused: the hot line's table T is unlinked by an unmap of its whole
 *    span, invalidated (non-leaf) and released, and the next table the page table allocates,
 *    for another region, is T again (a LIFO allocator). The device must not read the old
 *    region through T: the access faults. Without the drop of the hot table at the non-leaf
 *    invalidation (agent.c drop_leaf()) it returns the other region's page. Run with the
 *    RANGE command of dg_iommu_flush_gather(), a DOMAIN command and a GLOBAL one;
 *  - a non-leaf invalidation of another table's span keeps the hot table;
 *  - dg_dev_rehold(): true only while nothing was applied or is pending since the stamp, and
 *    then the translations are held (a wait does not complete at the next quiescent point);
 *  - dg_dev_watch() / dg_dev_rehold_watched(): a watched ring is re-held across commands that
 *    cannot have changed it, never across one that may have (a page command over any of its
 *    pages, a domain, global, device or context command): without agent.c watch_mark() or
 *    changed_all the re-hold would hand out a translation of an unmapped page; nor after a
 *    lap;
 *  - the hot line's two tables survive a catch-up at the start of a translation and a
 *    refused access in the first one: no table load (miss) follows;
 *  - a leaf-only range command still drops a 2 MiB page the device caches (the IOTLB level
 *    of the large pages; agent.c skips the IOTLB only while no level but the leaf size's,
 *    which a leaf-direct device never fills, has been used).
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
#define RW	   (DG_PROT_READ | DG_PROT_WRITE)
#define BASE	   0x40000000ull /* 1 GiB: 2 MiB aligned */
#define ARENA_SIZE (4ull << 20)
#include "test_arena.h"

#include "test_env.h"
#include "test_pool.h"

/* A leaf-direct device attached to a VT-d domain whose tables come from @p (NULL: the default
   allocator), online; @qlen: the queue's slots (0: default). */
static void open_direct_q(struct env *e, struct pool *p, uint32_t qlen)
{
	env_open_direct(e, p ? &pool_ops : NULL, p, qlen);
	assert_true(e->dev->iotlb.no_small);
}

static void open_direct(struct env *e, struct pool *p)
{
	open_direct_q(e, p, 0);
}

static void map(struct env *e, uint64_t iova, uint64_t off, unsigned int prot)
{
	assert_int_equal(dg_domain_map(e->dom, iova, host(off), K4, prot, NULL), 0);
}

/* Unmap [iova, iova + size) and flush its gather (RANGE, leaf-only unless tables were
   freed) while the device is offline; it applies the command when it comes back online. */
static unsigned int unmap_flush(struct env *e, uint64_t iova, uint64_t size)
{
	struct dg_pt_gather g;
	uint64_t unmapped;
	unsigned int tables;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(e->dom, iova, size, &g, &unmapped), 0);
	tables = g.nr_tables;
	dg_dev_offline(e->dev);
	assert_int_equal(dg_iommu_flush_gather(e->mmu, e->dom, &g), 0);
	dg_dev_online(e->dev);
	return tables;
}

static int xlat(struct env *e, uint64_t iova, unsigned int access, void **out)
{
	struct dg_sg sg[2];
	unsigned int nr = 0;
	int r = dg_dev_translate_fast(e->dev, iova, 64, access, sg, 2, &nr);

	if (!r) {
		assert_int_equal(nr, 1);
		*out = sg[0].addr;
	}
	return r;
}

static void expect_fault(struct env *e, uint64_t iova, enum dg_fault_reason why)
{
	struct dg_fault f;

	assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), 0);
	assert_int_equal(f.iova, iova);
	assert_int_equal(f.reason, why);
}

static void test_inline_hit(void **state)
{
	struct dg_dev_stats a, b;
	uint8_t buf[16] = {1, 2, 3};
	struct env e;
	void *p;

	(void)state;
	open_direct(&e, NULL);
	for (unsigned int i = 0; i < 8; i++)
		map(&e, BASE + i * K4, (7 - i) * K4, i == 5 ? DG_PROT_READ : RW);
	assert_int_equal(xlat(&e, BASE + 0x10, DG_ACCESS_WRITE, &p), 0); /* loads the table */
	assert_ptr_equal(p, host(7 * K4 + 0x10));
	assert_true(e.dev->hot.leaf_shift);
	dg_dev_stats(e.dev, &a);
	for (unsigned int i = 1; i < 8; i++) {
		assert_int_equal(xlat(&e, BASE + i * K4 + 8, DG_ACCESS_READ, &p), 0);
		assert_ptr_equal(p, host((7 - i) * K4 + 8));
	}
	assert_int_equal(dg_dev_write(e.dev, BASE + 2 * K4 + 100, buf, sizeof(buf)), 0);
	assert_memory_equal(host(5 * K4 + 100), buf, sizeof(buf));
	memset(buf, 0, sizeof(buf));
	assert_int_equal(dg_dev_read(e.dev, BASE + 2 * K4 + 100, buf, sizeof(buf)), 0);
	assert_int_equal(buf[2], 3);
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.iotlb_misses, a.iotlb_misses);
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, 9);
	/* Read-only page 5: a write faults, from the same entry. */
	assert_int_equal(xlat(&e, BASE + 5 * K4, DG_ACCESS_WRITE, &p), -EACCES);
	expect_fault(&e, BASE + 5 * K4, DG_FAULT_PERM);
	assert_int_equal(dg_dev_write(e.dev, BASE + 5 * K4, buf, 1), -EACCES);
	expect_fault(&e, BASE + 5 * K4, DG_FAULT_PERM);
	/* Unmapped page 9 of the same table. */
	assert_int_equal(xlat(&e, BASE + 9 * K4, DG_ACCESS_READ, &p), -EFAULT);
	expect_fault(&e, BASE + 9 * K4, DG_FAULT_UNMAPPED);
	assert_int_equal(iotlb_count(&e.dev->iotlb), 0); /* nothing of the leaf size cached */
	unmap_flush(&e, BASE, 8 * K4);
	env_fini(&e);
}

static void test_leaf_inval_keeps_table(void **state)
{
	struct dg_dev_stats a, b;
	const void *table;
	struct env e;
	void *p;

	(void)state;
	open_direct(&e, NULL);
	for (unsigned int i = 0; i < 8; i++)
		map(&e, BASE + i * K4, i * K4, RW);
	assert_int_equal(xlat(&e, BASE, DG_ACCESS_READ, &p), 0);
	table = e.dev->hot.ent;
	assert_int_equal(unmap_flush(&e, BASE + 3 * K4, K4), 0); /* leaf only */
	assert_true(e.dev->hot.leaf_shift);
	assert_ptr_equal(e.dev->hot.ent, table);
	dg_dev_stats(e.dev, &a);
	assert_int_equal(xlat(&e, BASE + 3 * K4, DG_ACCESS_READ, &p), -EFAULT);
	expect_fault(&e, BASE + 3 * K4, DG_FAULT_UNMAPPED);
	assert_int_equal(xlat(&e, BASE + 4 * K4, DG_ACCESS_READ, &p), 0);
	assert_ptr_equal(p, host(4 * K4));
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, 1);
	/* A non-leaf invalidation of another table's span keeps it too. */
	map(&e, BASE + 4 * M2, 0, RW);
	assert_int_equal(unmap_flush(&e, BASE + 4 * M2, M2), 1);
	assert_ptr_equal(e.dev->hot.ent, table);
	assert_int_equal(xlat(&e, BASE + 5 * K4, DG_ACCESS_READ, &p), 0);
	unmap_flush(&e, BASE, 8 * K4);
	env_fini(&e);
}

enum how { BY_RANGE, BY_DOMAIN, BY_GLOBAL };

static void table_reuse(enum how how)
{
	struct pool pool = {0};
	const void *t1;
	struct env e;
	void *p;

	open_direct(&e, &pool);
	map(&e, BASE, K4, RW);
	t1 = pool.last; /* the last-level table of [BASE, BASE + 2M) */
	assert_int_equal(xlat(&e, BASE, DG_ACCESS_READ, &p), 0);
	assert_ptr_equal(e.dev->hot.ent, t1);
	/* Unmap the table's whole span: the table is unlinked into the gather. */
	if (how == BY_RANGE) {
		assert_int_equal(unmap_flush(&e, BASE, M2), 1);
	} else {
		struct dg_inval_cmd c = {.type = how == BY_DOMAIN ? DG_INVAL_DOMAIN :
								    DG_INVAL_GLOBAL,
					 .domain = dg_domain_id(e.dom)};
		struct dg_pt_gather g;
		uint64_t unmapped, seq;

		dg_pt_gather_init(&g);
		assert_int_equal(dg_domain_unmap(e.dom, BASE, M2, &g, &unmapped), 0);
		assert_int_equal(g.nr_tables, 1);
		dg_dev_offline(e.dev);
		assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
		assert_int_equal(dg_inval_wait(e.mmu, seq), 0);
		dg_pt_gather_release(dg_domain_pt(e.dom), &g);
		dg_dev_online(e.dev);
	}
	/* The next table allocated, for the region above, is the same page. */
	map(&e, BASE + M2, 3 * K4, RW);
	assert_ptr_equal(pool.last, t1);
	/* Page 0 of the old region reads entry 0 of t1 if the hot line still has t1 for it. */
	assert_int_equal(xlat(&e, BASE, DG_ACCESS_READ, &p), -EFAULT);
	expect_fault(&e, BASE, DG_FAULT_UNMAPPED);
	assert_int_equal(xlat(&e, BASE + M2, DG_ACCESS_READ, &p), 0);
	assert_ptr_equal(p, host(3 * K4));
	unmap_flush(&e, BASE + M2, K4);
	env_fini(&e);
	pool_fini(&pool);
}

static void test_table_reuse_range(void **state)
{
	(void)state;
	table_reuse(BY_RANGE);
}

static void test_table_reuse_domain(void **state)
{
	(void)state;
	table_reuse(BY_DOMAIN);
}

static void test_table_reuse_global(void **state)
{
	(void)state;
	table_reuse(BY_GLOBAL);
}

/*
 * dg_dev_stamp() / dg_dev_rehold(): a ring translated once is used again while nothing was
 * applied, and held again then: a command published after the rehold is applied by the next
 * DMA call (a read, whose end is a quiescent point) but acknowledged only at the quiesce.
 * Without the hold the read would acknowledge it while the ring may still be in use.
 */
static void test_rehold(void **state)
{
	struct dg_inval_cmd c = {.type = DG_INVAL_PAGE, .iova = BASE + 6 * K4, .size = K4};
	struct dg_sg sg[2];
	unsigned int nr;
	uint64_t stamp, seq;
	uint8_t b;
	struct env e;

	(void)state;
	open_direct(&e, NULL);
	c.domain = dg_domain_id(e.dom);
	for (unsigned int i = 0; i < 8; i++)
		map(&e, BASE + i * K4, i * K4, RW);
	assert_int_equal(dg_dev_translate(e.dev, BASE, 2 * K4, DG_ACCESS_READ, sg, 2, &nr), 0);
	stamp = dg_dev_stamp(e.dev);
	dg_dev_quiesce(e.dev);
	assert_false(e.dev->hot.held);
	assert_true(dg_dev_rehold(e.dev, stamp)); /* nothing applied since */
	assert_true(e.dev->hot.held);
	assert_false(dg_dev_rehold(e.dev, stamp + 1));
	assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
	assert_false(dg_dev_rehold(e.dev, stamp));		       /* pending */
	assert_int_equal(dg_dev_read(e.dev, BASE + 7 * K4, &b, 1), 0); /* applies it */
	assert_true(e.dev->seen >= seq);
	assert_false(dg_inval_done(e.mmu, seq));   /* held by the rehold */
	assert_false(dg_dev_rehold(e.dev, stamp)); /* applied since */
	dg_dev_quiesce(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));
	stamp = dg_dev_stamp(e.dev);
	assert_true(dg_dev_rehold(e.dev, stamp));
	dg_dev_offline(e.dev);
	assert_false(dg_dev_rehold(e.dev, stamp)); /* offline */
	dg_dev_online(e.dev);
	assert_true(dg_dev_rehold(e.dev, stamp)); /* nothing was published meanwhile */
	unmap_flush(&e, BASE, 8 * K4);
	env_fini(&e);
}

/* Translate the two-page ring at BASE; returns dg_dev_stamp() right after. */
static uint64_t ring_xlat(struct env *e)
{
	struct dg_sg sg[2];
	unsigned int nr;

	assert_int_equal(dg_dev_translate(e->dev, BASE, 2 * K4, DG_ACCESS_READ, sg, 2, &nr), 0);
	assert_int_equal(nr, 1);
	assert_ptr_equal(sg[0].addr, (void *)(uintptr_t)host(0));
	return dg_dev_stamp(e->dev);
}

static uint64_t submit(struct env *e, struct dg_inval_cmd c)
{
	uint64_t seq;

	assert_int_equal(dg_inval_submit(e->mmu, &c, 1, &seq), 0);
	return seq;
}

static void test_watch(void **state)
{
	const struct dg_inval_cmd page = {
		.type = DG_INVAL_PAGE, .flags = DG_INVAL_LEAF, .size = K4};
	struct dg_inval_cmd c, wide[4];
	struct dg_sg sg[2];
	unsigned int nr;
	uint64_t before, stamp, seq;
	int id, ids[DG_DEV_WATCH_MAX];
	uint8_t b;
	struct env e;

	(void)state;
	open_direct(&e, NULL);
	for (unsigned int i = 0; i < 8; i++)
		map(&e, BASE + i * K4, i * K4, RW);
	assert_int_equal(dg_dev_watch(e.dev, BASE, 0), -EINVAL);
	assert_int_equal(dg_dev_watch(e.dev, UINT64_MAX - 1, 3), -EINVAL);
	before = ring_xlat(&e);
	/* a command applied before the watch counts as a change: the older stamp never re-holds */
	c = page;
	c.domain = dg_domain_id(e.dom);
	c.iova = BASE + 6 * K4;
	seq = submit(&e, c);
	dg_dev_quiesce(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));
	id = dg_dev_watch(e.dev, BASE, 2 * K4);
	assert_true(id >= 0 && id < DG_DEV_WATCH_MAX);
	assert_false(dg_dev_rehold_watched(e.dev, id, before));
	assert_false(dg_dev_rehold_watched(e.dev, -1, before));
	assert_false(dg_dev_rehold_watched(e.dev, DG_DEV_WATCH_MAX, before));
	stamp = ring_xlat(&e);
	dg_dev_quiesce(e.dev);

	/* another page's command, pending: applied and acknowledged by the re-hold (nothing
	   held before it), which then holds the ring; dg_dev_rehold() would have failed */
	c.iova = BASE + 7 * K4;
	seq = submit(&e, c);
	assert_false(dg_dev_rehold(e.dev, stamp));
	assert_true(dg_dev_rehold_watched(e.dev, id, stamp));
	assert_true(dg_inval_done(e.mmu, seq));
	assert_true(e.dev->hot.held);
	assert_false(dg_dev_rehold(e.dev, stamp));
	/* held: a command applied by the next DMA call waits for the quiesce */
	c.iova = BASE + 5 * K4;
	seq = submit(&e, c);
	assert_int_equal(dg_dev_read(e.dev, BASE + 4 * K4, &b, 1), 0);
	assert_false(dg_inval_done(e.mmu, seq));
	assert_true(dg_dev_rehold_watched(e.dev, id, stamp));
	dg_dev_quiesce(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));

	/* a command over the ring's last page (nothing unmapped yet): no re-hold */
	c.iova = BASE + K4;
	submit(&e, c);
	assert_false(dg_dev_rehold_watched(e.dev, id, stamp));
	assert_false(e.dev->hot.held);
	/* a new translation re-holds again */
	stamp = ring_xlat(&e);
	dg_dev_quiesce(e.dev);
	assert_true(dg_dev_rehold_watched(e.dev, id, stamp));
	dg_dev_quiesce(e.dev);

	/* commands of the whole domain or device: none re-holds */
	wide[0] = (struct dg_inval_cmd){
		.type = DG_INVAL_DOMAIN, .flags = DG_INVAL_LEAF, .domain = dg_domain_id(e.dom)};
	wide[1] = (struct dg_inval_cmd){.type = DG_INVAL_GLOBAL};
	wide[2] = (struct dg_inval_cmd){.type = DG_INVAL_DEVICE, .rid = 1};
	wide[3] = (struct dg_inval_cmd){.type = DG_INVAL_CONTEXT, .rid = 1};
	for (unsigned int k = 0; k < 4; k++) {
		stamp = ring_xlat(&e);
		dg_dev_quiesce(e.dev);
		submit(&e, wide[k]);
		assert_false(dg_dev_rehold_watched(e.dev, id, stamp));
		dg_dev_quiesce(e.dev);
	}

	/* the ring's page unmapped: the stale translation is never re-held, a new one faults */
	stamp = ring_xlat(&e);
	dg_dev_quiesce(e.dev);
	assert_int_equal(unmap_flush(&e, BASE + K4, K4), 0);
	assert_false(dg_dev_rehold_watched(e.dev, id, stamp));
	assert_int_equal(dg_dev_translate(e.dev, BASE, 2 * K4, DG_ACCESS_READ, sg, 2, &nr),
			 -EFAULT);
	expect_fault(&e, BASE + K4, DG_FAULT_UNMAPPED);

	/* the slots: all in use, then one freed */
	ids[0] = id;
	for (unsigned int k = 1; k < DG_DEV_WATCH_MAX; k++)
		assert_true((ids[k] = dg_dev_watch(e.dev, BASE + k * K4, K4)) >= 0);
	assert_int_equal(dg_dev_watch(e.dev, BASE, K4), -ENOSPC);
	dg_dev_unwatch(e.dev, ids[2]);
	dg_dev_unwatch(e.dev, -1); /* ignored */
	assert_false(dg_dev_rehold_watched(e.dev, ids[2], dg_dev_stamp(e.dev)));
	assert_int_equal(dg_dev_watch(e.dev, BASE, K4), ids[2]);
	dg_dev_quiesce(e.dev);
	unmap_flush(&e, BASE, K4);
	unmap_flush(&e, BASE + 2 * K4, 6 * K4);
	env_fini(&e);
}

/*
 * A lap: the device, offline, fell a whole queue behind (commands of other pages only), so
 * it cannot know what it missed; the watched ring is not re-held (agent.c lap() marks every
 * range changed), although no command it could still read covers the ring.
 */
static void test_watch_lap(void **state)
{
	struct dg_inval_cmd c = {.type = DG_INVAL_PAGE, .flags = DG_INVAL_LEAF, .size = K4};
	uint64_t stamp, laps;
	struct env e;
	int id;

	(void)state;
	open_direct_q(&e, NULL, 16);
	for (unsigned int i = 0; i < 8; i++)
		map(&e, BASE + i * K4, i * K4, RW);
	id = dg_dev_watch(e.dev, BASE, 2 * K4);
	assert_true(id >= 0);
	stamp = ring_xlat(&e);
	dg_dev_quiesce(e.dev);
	laps = stat_get(&e.dev->st_laps);
	dg_dev_offline(e.dev);
	c.domain = dg_domain_id(e.dom);
	for (unsigned int k = 0; k < 20; k++) {
		c.iova = BASE + (6 + k % 2) * K4;
		submit(&e, c);
	}
	assert_false(dg_dev_rehold_watched(e.dev, id, stamp)); /* comes online: a lap */
	assert_int_equal(stat_get(&e.dev->st_laps), laps + 1);
	stamp = ring_xlat(&e);
	dg_dev_quiesce(e.dev);
	assert_true(dg_dev_rehold_watched(e.dev, id, stamp));
	dg_dev_quiesce(e.dev);
	unmap_flush(&e, BASE, 8 * K4);
	env_fini(&e);
}

/*
 * A 2 MiB page on a leaf-direct device is cached in the IOTLB's 2 MiB level; the leaf-only
 * range command of its unmap must drop it (agent.c applies iotlb_inval_range() whenever a
 * level above the leaf size has been used): afterwards the access faults.
 */
/*
 * The hot line's two tables survive a catch-up and a refused access (translate.c
 * direct_entered(), direct_load()): with tables A (BASE) and B (BASE + 2 MiB) held, a
 * command applied at the start of a translation in B (a leaf-only PAGE command of another
 * page, pending when the translation starts) and then accesses to A and B alternating are
 * all hits, no table load; a fault on an unmapped page of the first table keeps the second
 * one (its next access is a hit). Fails when direct_entered() loads the table again after
 * a catch-up (the second table is pushed out: two misses), or when direct_load() pushes the
 * first table into the second slot when it holds it already (one miss after the fault).
 */
static void test_two_tables_kept(void **state)
{
	struct dg_inval_cmd c = {
		.type = DG_INVAL_PAGE, .flags = DG_INVAL_LEAF, .iova = BASE + 7 * K4, .size = K4};
	struct dg_dev_stats a, b;
	struct env e;
	uint64_t seq;
	void *p;

	(void)state;
	open_direct(&e, NULL);
	c.domain = dg_domain_id(e.dom);
	for (unsigned int i = 0; i < 4; i++) {
		map(&e, BASE + i * K4, i * K4, RW);
		map(&e, BASE + M2 + i * K4, (8 + i) * K4, RW);
	}
	assert_int_equal(xlat(&e, BASE, DG_ACCESS_READ, &p), 0);      /* A */
	assert_int_equal(xlat(&e, BASE + M2, DG_ACCESS_READ, &p), 0); /* B, A second */
	dg_dev_quiesce(e.dev);
	dg_dev_stats(e.dev, &a);
	seq = submit(&e, c); /* pending: applied by the next translation */
	assert_int_equal(xlat(&e, BASE + M2 + K4, DG_ACCESS_WRITE, &p), 0);
	assert_true(e.dev->seen >= seq);
	assert_ptr_equal(p, host(9 * K4));
	for (unsigned int i = 0; i < 4; i++) {
		assert_int_equal(xlat(&e, BASE + i * K4, DG_ACCESS_READ, &p), 0);
		assert_ptr_equal(p, host(i * K4));
		assert_int_equal(xlat(&e, BASE + M2 + i * K4, DG_ACCESS_READ, &p), 0);
		assert_ptr_equal(p, host((8 + i) * K4));
	}
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.iotlb_misses, a.iotlb_misses);
	assert_int_equal(b.iotlb_hits - a.iotlb_hits, 9);
	/* B is the first table: a fault in it keeps A second. */
	assert_int_equal(xlat(&e, BASE + M2 + 5 * K4, DG_ACCESS_READ, &p), -EFAULT);
	expect_fault(&e, BASE + M2 + 5 * K4, DG_FAULT_UNMAPPED);
	dg_dev_stats(e.dev, &a);
	assert_int_equal(xlat(&e, BASE + 2 * K4, DG_ACCESS_READ, &p), 0);
	assert_ptr_equal(p, host(2 * K4));
	dg_dev_stats(e.dev, &b);
	assert_int_equal(b.iotlb_misses, a.iotlb_misses);
	/* The command was applied and is acknowledged at the quiesce. */
	dg_dev_quiesce(e.dev);
	assert_true(dg_inval_done(e.mmu, seq));
	unmap_flush(&e, BASE, 4 * K4);
	unmap_flush(&e, BASE + M2, 4 * K4);
	env_fini(&e);
}

static void test_large_page_inval(void **state)
{
	const uint64_t iova = BASE + 2 * M2;
	void *h;
	struct env e;

	(void)state;
	open_direct(&e, NULL);
	assert_int_equal(dg_domain_map(e.dom, iova, host(0), M2, RW, NULL), 0);
	assert_int_equal(xlat(&e, iova + 5 * K4, DG_ACCESS_READ, &h), 0);
	assert_ptr_equal(h, (void *)(uintptr_t)host(5 * K4));
	assert_int_equal(xlat(&e, iova + 9 * K4, DG_ACCESS_WRITE, &h), 0); /* an IOTLB hit */
	assert_true(e.dev->iotlb.used & ~1u);
	dg_dev_quiesce(e.dev);
	assert_int_equal(unmap_flush(&e, iova, M2), 0); /* no table freed: leaf-only */
	assert_int_equal(xlat(&e, iova + 9 * K4, DG_ACCESS_READ, &h), -EFAULT);
	expect_fault(&e, iova + 9 * K4, DG_FAULT_UNMAPPED);
	env_fini(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_inline_hit),
		cmocka_unit_test(test_leaf_inval_keeps_table),
		cmocka_unit_test(test_table_reuse_range),
		cmocka_unit_test(test_table_reuse_domain),
		cmocka_unit_test(test_table_reuse_global),
		cmocka_unit_test(test_rehold),
		cmocka_unit_test(test_watch),
		cmocka_unit_test(test_watch_lap),
		cmocka_unit_test(test_large_page_inval),
		cmocka_unit_test(test_two_tables_kept),
	};

	return cmocka_run_group_tests(tests, setup_arena, teardown_arena);
}
