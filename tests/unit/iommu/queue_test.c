/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/queue_test.c - the invalidation command ring and the fault queue, alone:
 * sequence numbers, batch ownership (a batch joined by a second producer is published by the
 * owner, once), lapping detection, the reference (single-lock) mode, fault overflow.
 */
#include "iommu/fault_queue.h"
#include "iommu/inval_queue.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static struct inv_cmd mk(uint64_t i)
{
	struct inv_cmd c = {.op = (uint8_t)(INV_OP_BLOCK + i % 5),
			    .leaf = (uint8_t)(i & 1),
			    .order = (uint8_t)(12 + i % 40),
			    .id = (uint32_t)(i * 7 + 1),
			    .iova = i << 12};
	return c;
}

static void expect_cmd(const struct inv_queue *q, uint64_t seq, uint64_t i)
{
	struct inv_cmd c, want = mk(i);

	assert_int_equal(inv_queue_read(q, seq, &c), 0);
	assert_int_equal(c.op, want.op);
	assert_int_equal(c.leaf, want.leaf);
	assert_int_equal(c.order, want.order);
	assert_int_equal(c.id, want.id);
	assert_int_equal(c.iova, want.iova);
}

static uint64_t published(struct inv_queue *q)
{
	return atomic_load(&q->published);
}

static void test_single_producer(void **state)
{
	struct inv_queue q;
	bool owner;

	(void)state;
	assert_int_equal(inv_queue_init(&q, 64, false), 0);
	for (uint64_t round = 0; round < 100; round++) {
		uint32_t n = (uint32_t)(round % 7) + 1;
		uint64_t start = inv_queue_reserve(&q, n, &owner);

		assert_true(owner); /* nobody else: every batch owns the queue */
		assert_int_equal(start, published(&q));
		for (uint32_t i = 0; i < n; i++) {
			struct inv_cmd c = mk(start + i);
			inv_queue_write(&q, start + i, &c);
		}
		inv_queue_commit(&q, start, n, owner);
		assert_int_equal(published(&q), start + n);
		assert_int_equal(inv_queue_tail(&q), start + n);
		for (uint32_t i = 0; i < n; i++)
			expect_cmd(&q, start + i, start + i);
	}
	assert_int_equal(inv_queue_check(&q, stderr), 0);
	inv_queue_fini(&q);
}

/* A second producer joins an open batch: only the owner publishes, covering both. */
static void test_joined_batch(void **state)
{
	struct inv_queue q;
	bool own_a, own_b, own_c;
	uint64_t a, b, c;

	(void)state;
	assert_int_equal(inv_queue_init(&q, 16, false), 0);
	a = inv_queue_reserve(&q, 2, &own_a);
	b = inv_queue_reserve(&q, 3, &own_b);
	assert_true(own_a);
	assert_false(own_b);
	assert_int_equal(b, a + 2);
	assert_int_equal(inv_queue_tail(&q), 5);
	for (uint64_t s = b; s < b + 3; s++) {
		struct inv_cmd x = mk(s);
		inv_queue_write(&q, s, &x);
	}
	inv_queue_commit(&q, b, 3, own_b);
	assert_int_equal(published(&q), 0); /* B left it to A */
	for (uint64_t s = a; s < a + 2; s++) {
		struct inv_cmd x = mk(s);
		inv_queue_write(&q, s, &x);
	}
	inv_queue_commit(&q, a, 2, own_a);
	assert_int_equal(published(&q), 5);
	for (uint64_t s = 0; s < 5; s++)
		expect_cmd(&q, s, s);
	assert_int_equal(q.batch_max, 5);
	assert_int_equal(q.batches, 1);
	/* The batch is closed: the next producer owns the queue again. */
	c = inv_queue_reserve(&q, 1, &own_c);
	assert_true(own_c);
	assert_int_equal(c, 5);
	{
		struct inv_cmd x = mk(5);
		inv_queue_write(&q, 5, &x);
	}
	inv_queue_commit(&q, c, 1, own_c);
	assert_int_equal(published(&q), 6);
	assert_int_equal(inv_queue_check(&q, stderr), 0);
	inv_queue_fini(&q);
}

/* A reader a whole ring behind sees -ESTALE, never another command's fields. */
static void test_lap(void **state)
{
	struct inv_queue q;
	struct inv_cmd c;
	bool owner;

	(void)state;
	assert_int_equal(inv_queue_init(&q, 16, false), 0);
	for (uint64_t s = 0; s < 40; s++) {
		uint64_t start = inv_queue_reserve(&q, 1, &owner);
		struct inv_cmd x = mk(s);

		assert_int_equal(start, s);
		inv_queue_write(&q, s, &x);
		inv_queue_commit(&q, s, 1, owner);
	}
	for (uint64_t s = 0; s < 24; s++)
		assert_int_equal(inv_queue_read(&q, s, &c), -ESTALE);
	for (uint64_t s = 24; s < 40; s++)
		expect_cmd(&q, s, s);
	assert_int_equal(inv_queue_check(&q, stderr), 0);
	inv_queue_fini(&q);
}

/* More than a ring's worth reserved at once is published in ring-sized steps. */
static void test_full_ring_batch(void **state)
{
	struct inv_queue q;
	bool owner;
	uint64_t start;

	(void)state;
	assert_int_equal(inv_queue_init(&q, 16, false), 0);
	start = inv_queue_reserve(&q, 16, &owner);
	for (uint64_t s = start; s < start + 16; s++) {
		struct inv_cmd x = mk(s);
		inv_queue_write(&q, s, &x);
	}
	inv_queue_commit(&q, start, 16, owner);
	assert_int_equal(published(&q), 16);
	for (uint64_t s = 0; s < 16; s++)
		expect_cmd(&q, s, s);
	inv_queue_fini(&q);
}

static void test_reference_mode(void **state)
{
	struct inv_queue q;
	bool owner;

	(void)state;
	assert_int_equal(inv_queue_init(&q, 32, true), 0);
	for (uint64_t s = 0; s < 50; s += 2) {
		uint64_t start = inv_queue_reserve(&q, 2, &owner);

		assert_int_equal(start, s);
		for (uint64_t i = s; i < s + 2; i++) {
			struct inv_cmd x = mk(i);
			inv_queue_write(&q, i, &x);
		}
		inv_queue_commit(&q, start, 2, owner);
		assert_int_equal(published(&q), s + 2);
		assert_int_equal(inv_queue_tail(&q), s + 2);
	}
	assert_int_equal(q.batches, 25);
	assert_int_equal(inv_queue_check(&q, stderr), 0);
	inv_queue_fini(&q);
}

static void test_init_errors(void **state)
{
	struct inv_queue q;
	struct fault_queue fq;

	(void)state;
	assert_int_equal(inv_queue_init(&q, 24, false), -EINVAL);
	assert_int_equal(fault_queue_init(&fq, 3), -EINVAL);
	assert_int_equal(fault_queue_init(&fq, 1), -EINVAL);
}

static void test_fault_queue(void **state)
{
	struct fault_queue fq;
	struct dg_fault f, g;

	(void)state;
	assert_int_equal(fault_queue_init(&fq, 8), 0);
	assert_int_equal(fault_queue_pop(&fq, &g), -EAGAIN);
	/* Many laps, interleaved: FIFO order, fields intact. */
	for (uint64_t i = 0; i < 100; i++) {
		memset(&f, 0, sizeof(f));
		f.iova = i << 12;
		f.len = i;
		f.rid = (uint32_t)i;
		f.reason = DG_FAULT_PERM;
		assert_int_equal(fault_queue_push(&fq, &f), 0);
		if (i % 3 == 2) {
			for (int k = 0; k < 3; k++) {
				assert_int_equal(fault_queue_pop(&fq, &g), 0);
				assert_int_equal(g.rid, i - 2 + (uint64_t)k);
				assert_int_equal(g.iova, (i - 2 + (uint64_t)k) << 12);
			}
		}
	}
	assert_int_equal(fault_queue_pop(&fq, &g), 0); /* record 99 */
	assert_int_equal(g.rid, 99);
	assert_int_equal(fault_queue_pop(&fq, &g), -EAGAIN);
	/* Overflow: 8 fit, 5 more are counted, none silently lost. */
	for (uint32_t i = 0; i < 13; i++) {
		f.rid = i;
		assert_int_equal(fault_queue_push(&fq, &f), i < 8 ? 0 : -ENOSPC);
	}
	assert_int_equal(atomic_load(&fq.overflow), 5);
	assert_int_equal(atomic_load(&fq.pushed), 108);
	for (uint32_t i = 0; i < 8; i++) {
		assert_int_equal(fault_queue_pop(&fq, &g), 0);
		assert_int_equal(g.rid, i);
	}
	assert_int_equal(fault_queue_pop(&fq, &g), -EAGAIN);
	fault_queue_fini(&fq);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_single_producer),
		cmocka_unit_test(test_joined_batch),
		cmocka_unit_test(test_lap),
		cmocka_unit_test(test_full_ring_batch),
		cmocka_unit_test(test_reference_mode),
		cmocka_unit_test(test_init_errors),
		cmocka_unit_test(test_fault_queue),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
