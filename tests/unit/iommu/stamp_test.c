/* SPDX-License-Identifier: MIT */
/*
 * Unit tests: devices learn of invalidation commands from the stamp of the next slot they read
 * (src/iommu/inval_queue.h, agent.c agent_catch_up()), not from the queue's published word.
 *  - a command written into the watched slot, and not published (the window between a
 *    producer's stamp store and the owner's publish, held open here by calling the queue's
 *    reserve/write/commit steps by hand), is seen by the inline hit, applied and acknowledged;
 *    its waiters still wait for publication;
 *  - commands are applied in sequence order: a written slot after an unwritten one waits;
 *  - a slot being written (stamp 0) is pending but applies nothing until published says more;
 *  - a device a whole ring behind (the watched stamp newer than expected, or 0 with the
 *    slot's command published) flushes everything: a lap; exactly a ring behind is no lap;
 *  - the same in the reference configuration (mutex-serialized queue), a pass-through device,
 *    and a blocked one (always the slow path; applies nothing wrong).
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

#define ARENA_SIZE 0x400000
#include "test_arena.h"

#define K4   0x1000ull
#define RW   (DG_PROT_READ | DG_PROT_WRITE)
#define PG   0x40000ull /* the page the tests cache and unmap */
#define QLEN 16u	/* the smallest ring: laps are cheap to make */

struct env {
	struct dg_iommu *mmu;
	struct dg_domain *dom;
	struct dg_domain *other; /* commands for it change nothing on the device */
	struct dg_device *dev;
	struct dg_pt_gather g; /* PG's unmap, flushed at the end */
};

static void env_open(struct env *e, bool reference)
{
	struct dg_pt_geometry geo = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	struct dg_iommu_config cfg;

	dg_iommu_config_init(&cfg);
	cfg.log = NULL;
	cfg.fault_queue_len = 64;
	cfg.inval_queue_len = QLEN;
	cfg.reference = reference;
	cfg.wait_timeout_ns = 200000000;
	e->mmu = dg_iommu_create(&cfg);
	assert_non_null(e->mmu);
	e->dom = dg_domain_create(e->mmu, &geo, NULL, NULL);
	assert_non_null(e->dom);
	e->other = dg_domain_create(e->mmu, &geo, NULL, NULL);
	assert_non_null(e->other);
	e->dev = dg_device_create(e->mmu, 1);
	assert_non_null(e->dev);
	assert_int_equal(dg_device_attach(e->dev, e->dom), 0);
	dg_dev_online(e->dev);
	dg_pt_gather_init(&e->g);
	assert_int_equal(dg_domain_map(e->dom, PG, host(PG), K4, RW, NULL), 0);
}

static void env_close(struct env *e)
{
	struct dg_fault f;

	dg_dev_offline(e->dev);
	assert_int_equal(dg_iommu_flush_gather(e->mmu, e->dom, &e->g), 0);
	assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), -EAGAIN); /* every fault expected */
	assert_int_equal(inv_queue_check(&e->mmu->inv, stderr), 0);
	assert_int_equal(dg_device_block(e->dev), 0);
	dg_device_destroy(e->dev);
	assert_int_equal(dg_domain_destroy(e->dom), 0);
	assert_int_equal(dg_domain_destroy(e->other), 0);
	dg_iommu_destroy(e->mmu);
}

static int xlate(struct env *e, uint64_t iova)
{
	struct dg_sg sg[1] = {{NULL, 0}};
	unsigned int nr = 0;

	return dg_dev_translate_fast(e->dev, iova, 64, DG_ACCESS_READ, sg, 1, &nr);
}

static void expect_fault(struct env *e, uint64_t iova)
{
	struct dg_fault f;

	assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), 0);
	assert_int_equal(f.iova, iova);
	assert_int_equal(f.reason, DG_FAULT_UNMAPPED);
}

/* Cache PG in the device (a hit from then on), then unmap it from the table without an
   invalidation: only a command the device applies (or a lap) makes it fault. */
static void cache_then_unmap(struct env *e)
{
	uint64_t unmapped;

	assert_int_equal(xlate(e, PG), 0);
	assert_int_equal(xlate(e, PG), 0);
	dg_dev_quiesce(e->dev);
	assert_int_equal(dg_domain_unmap(e->dom, PG, K4, &e->g, &unmapped), 0);
	assert_int_equal(unmapped, K4);
	assert_int_equal(xlate(e, PG), 0); /* still cached: nothing told the device */
	dg_dev_quiesce(e->dev);
}

static struct inv_cmd block_cmd(uint32_t domain, uint64_t iova)
{
	return (struct inv_cmd){.op = INV_OP_BLOCK, .order = 12, .id = domain, .iova = iova};
}

static uint64_t published(struct env *e)
{
	return atomic_load(&e->mmu->inv.published);
}

static uint64_t acked(struct env *e)
{
	return atomic_load(&e->dev->slot->ack);
}

/* One command for another domain, submitted and waited for (the device acknowledges it). */
static void submit_other(struct env *e, uint64_t iova, bool wait)
{
	struct dg_inval_cmd c = {
		.type = DG_INVAL_PAGE, .domain = dg_domain_id(e->other), .iova = iova, .size = K4};
	uint64_t seq;

	assert_int_equal(dg_inval_submit(e->mmu, &c, 1, &seq), 0);
	if (wait) {
		dg_dev_quiesce(e->dev);
		assert_int_equal(dg_inval_wait(e->mmu, seq), 0);
	}
}

/*
 * A command written into the watched slot but not published: the inline hit sees it
 * pending, the device applies it (PG faults) and acknowledges it, while published has not
 * moved and a wait for it is not complete; the publish then completes the wait. On every
 * position in a cache line (two slots each) and across the ring's wrap.
 */
static void written_not_published(bool reference)
{
	struct env e;

	env_open(&e, reference);
	for (unsigned int k = 0; k < QLEN + 3; k++) {
		struct inv_cmd c;
		uint64_t seq;
		bool owner;

		if (k) {
			/* map PG again, and make sure the device caches it */
			dg_dev_offline(e.dev);
			assert_int_equal(dg_iommu_flush_gather(e.mmu, e.dom, &e.g), 0);
			assert_int_equal(dg_domain_map(e.dom, PG, host(PG), K4, RW, NULL), 0);
		}
		cache_then_unmap(&e);
		assert_true(dg_dev_hot_idle(&e.dev->hot));
		seq = inv_queue_reserve(&e.mmu->inv, 1, &owner);
		assert_int_equal(seq, e.dev->seen);
		c = block_cmd(dg_domain_id(e.dom), PG);
		inv_queue_write(&e.mmu->inv, seq, &c);
		/* stamp set, not published */
		assert_int_equal(published(&e), seq);
		assert_false(dg_dev_hot_idle(&e.dev->hot));
		assert_int_equal(xlate(&e, PG), -EFAULT);
		expect_fault(&e, PG);
		assert_int_equal(e.dev->seen, seq + 1);
		dg_dev_quiesce(e.dev);
		assert_int_equal(acked(&e), seq + 1);
		assert_true(dg_dev_hot_idle(&e.dev->hot));
		assert_false(dg_inval_done(e.mmu, seq + 1)); /* waiters wait for publication */
		inv_queue_commit(&e.mmu->inv, seq, 1, owner);
		assert_int_equal(published(&e), seq + 1);
		assert_true(dg_inval_done(e.mmu, seq + 1));
		assert_true(dg_dev_hot_idle(&e.dev->hot));
	}
	env_close(&e);
}

static void test_written_not_published(void **state)
{
	(void)state;
	written_not_published(false);
}

static void test_written_not_published_reference(void **state)
{
	(void)state;
	written_not_published(true);
}

/*
 * In sequence order: of two reserved slots, the second is written first - the device applies
 * nothing (its watched slot is the first); once the first is written it applies both.
 */
static void test_in_order(void **state)
{
	struct env e;
	struct inv_cmd c0, c1;
	uint64_t seq;
	bool owner;

	(void)state;
	env_open(&e, false);
	submit_other(&e, 0, true); /* the watched slot in the middle of a line */
	cache_then_unmap(&e);
	seq = inv_queue_reserve(&e.mmu->inv, 2, &owner);
	c0 = block_cmd(dg_domain_id(e.other), 0x1000);
	c1 = block_cmd(dg_domain_id(e.dom), PG);
	inv_queue_write(&e.mmu->inv, seq + 1, &c1);
	assert_true(dg_dev_hot_idle(&e.dev->hot)); /* the watched slot is seq's */
	agent_catch_up(e.dev);			   /* forced: finds seq not written */
	assert_int_equal(e.dev->seen, seq);
	assert_int_equal(xlate(&e, PG), 0); /* seq + 1 not applied */
	dg_dev_quiesce(e.dev);
	inv_queue_write(&e.mmu->inv, seq, &c0);
	assert_int_equal(xlate(&e, PG), -EFAULT);
	expect_fault(&e, PG);
	assert_int_equal(e.dev->seen, seq + 2);
	inv_queue_commit(&e.mmu->inv, seq, 2, owner);
	dg_dev_quiesce(e.dev);
	assert_true(dg_inval_done(e.mmu, seq + 2));
	env_close(&e);
}

/*
 * A slot being written (stamp 0, as inv_queue_write() stores first) with its command not
 * published: pending (the slow path runs), nothing applied, no lap; then written: applied.
 */
static void test_being_written(void **state)
{
	struct env e;
	struct inv_cmd c;
	uint64_t seq, laps;
	bool owner;

	(void)state;
	env_open(&e, false);
	for (unsigned int k = 0; k < QLEN + 1; k++)
		submit_other(&e, 0, true); /* later laps: the quiet stamp is not 0 */
	cache_then_unmap(&e);
	laps = atomic_load(&e.dev->st_laps);
	seq = inv_queue_reserve(&e.mmu->inv, 1, &owner);
	atomic_store(&e.mmu->inv.slots[seq & e.mmu->inv.mask].stamp, 0);
	assert_false(dg_dev_hot_idle(&e.dev->hot));
	assert_int_equal(xlate(&e, PG), 0); /* slow path, IOTLB still holds it */
	dg_dev_quiesce(e.dev);
	assert_int_equal(e.dev->seen, seq);
	assert_int_equal(atomic_load(&e.dev->st_laps), laps);
	c = block_cmd(dg_domain_id(e.dom), PG);
	inv_queue_write(&e.mmu->inv, seq, &c);
	assert_int_equal(xlate(&e, PG), -EFAULT);
	expect_fault(&e, PG);
	assert_int_equal(e.dev->seen, seq + 1);
	inv_queue_commit(&e.mmu->inv, seq, 1, owner);
	assert_int_equal(atomic_load(&e.dev->st_laps), laps);
	env_close(&e);
}

/*
 * A device that did nothing while @behind commands for another domain went through the ring
 * (the first one for PG unless @first_other): more than a ring behind it must lap (PG, unmapped
 * without a command of its own when @first_other, faults); a ring or less it reads them all.
 * @mid_write: the watched slot shows 0 as if its next command were being written (published
 * tells the device it was lapped).
 */
static void lapped(unsigned int behind, bool mid_write, bool first_other)
{
	struct env e;
	uint64_t seen, pub, st = 0;
	_Atomic uint64_t *stamp;

	env_open(&e, false);
	submit_other(&e, 0, true);
	cache_then_unmap(&e);
	seen = e.dev->seen;
	for (unsigned int k = 0; k < behind; k++) {
		struct dg_inval_cmd c = {.type = DG_INVAL_PAGE,
					 .domain = dg_domain_id(k || first_other ? e.other : e.dom),
					 .iova = k || first_other ? 0x2000 : PG,
					 .size = K4};
		uint64_t seq;

		assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
	}
	pub = published(&e);
	assert_int_equal(pub, seen + behind);
	assert_false(dg_dev_hot_idle(&e.dev->hot));
	stamp = &e.mmu->inv.slots[seen & e.mmu->inv.mask].stamp;
	if (mid_write) {
		st = atomic_load(stamp);
		atomic_store(stamp, 0);
	}
	if (behind > QLEN || !first_other) {
		assert_int_equal(xlate(&e, PG), -EFAULT);
		expect_fault(&e, PG);
	} else {
		assert_int_equal(xlate(&e, PG), 0); /* nothing for PG: still cached */
	}
	assert_int_equal(atomic_load(&e.dev->st_laps), behind > QLEN ? 1 : 0);
	assert_int_equal(e.dev->seen, pub);
	dg_dev_quiesce(e.dev);
	assert_int_equal(acked(&e), pub);
	assert_true(dg_inval_done(e.mmu, pub));
	assert_true(dg_dev_hot_idle(&e.dev->hot));
	if (mid_write)
		atomic_store(stamp, st);
	/* and it goes on reading commands from where it is now */
	submit_other(&e, 0x3000, true);
	assert_int_equal(e.dev->seen, pub + 1);
	env_close(&e);
}

static void test_lapped(void **state)
{
	(void)state;
	lapped(QLEN, false, false);	   /* exactly a ring: every command still there */
	lapped(QLEN, false, true);	   /* ... and no lap */
	lapped(QLEN + 1, false, true);	   /* the watched stamp is newer: lap */
	lapped(2 * QLEN + 1, false, true); /* two laps newer */
	lapped(3 * QLEN, false, true);	   /* the watched slot two laps newer, the next one too */
	lapped(QLEN + 1, true, true);	   /* the watched slot being rewritten: published tells */
	lapped(2 * QLEN + 3, true, true);
}

/*
 * Offline and blocked devices apply nothing (check forces the slow path, which finds them
 * offline / refuses); coming online applies what was written meanwhile, or laps.
 */
static void test_offline_blocked(void **state)
{
	struct env e;
	uint64_t seen;

	(void)state;
	env_open(&e, false);
	cache_then_unmap(&e);
	dg_dev_offline(e.dev);
	assert_false(dg_dev_hot_idle(&e.dev->hot)); /* offline: check is UINT64_MAX */
	seen = e.dev->seen;
	submit_other(&e, 0, false);
	{
		struct dg_inval_cmd c = {.type = DG_INVAL_PAGE,
					 .domain = dg_domain_id(e.dom),
					 .iova = PG,
					 .size = K4};
		uint64_t seq;

		assert_int_equal(dg_inval_submit(e.mmu, &c, 1, &seq), 0);
		assert_int_equal(dg_inval_wait(e.mmu, seq), 0); /* skips the offline device */
	}
	assert_int_equal(e.dev->seen, seen);
	dg_dev_online(e.dev);
	assert_int_equal(e.dev->seen, seen + 2);
	assert_int_equal(xlate(&e, PG), -EFAULT);
	expect_fault(&e, PG);
	/* pass-through: the same watch, so it acknowledges */
	dg_dev_offline(e.dev);
	assert_int_equal(dg_device_passthrough(e.dev), 0);
	assert_int_equal(xlate(&e, PG), 0);
	submit_other(&e, 0, true);
	assert_int_equal(acked(&e), published(&e));
	assert_int_equal(xlate(&e, PG), 0);
	assert_true(dg_dev_hot_idle(&e.dev->hot));
	/* blocked: always the slow path, which still applies and acknowledges */
	dg_dev_offline(e.dev);
	assert_int_equal(dg_device_block(e.dev), 0);
	assert_int_equal(xlate(&e, PG), -EPERM);
	{
		struct dg_fault f;

		assert_int_equal(dg_iommu_fault_pop(e.mmu, &f), 0);
		assert_int_equal(f.reason, DG_FAULT_BLOCKED);
	}
	assert_false(dg_dev_hot_idle(&e.dev->hot));
	submit_other(&e, 0, true);
	assert_int_equal(acked(&e), published(&e));
	env_close(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_written_not_published),
		cmocka_unit_test(test_written_not_published_reference),
		cmocka_unit_test(test_in_order),
		cmocka_unit_test(test_being_written),
		cmocka_unit_test(test_lapped),
		cmocka_unit_test(test_offline_blocked),
	};

	return cmocka_run_group_tests(tests, setup_arena, teardown_arena);
}
