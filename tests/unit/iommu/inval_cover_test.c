/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of how dg_inval_submit() writes RANGE commands into the queue (inval.c):
 *  - a range that the exact split covers with one or two naturally aligned blocks, and every
 *    range that is not leaf-only, is written as exactly that split (nothing outside it);
 *  - a leaf-only range that needs more is written as two blocks (leaf_cover()): each
 *    naturally aligned, together covering the range with no gap, each less than twice the
 *    part of the range it holds (so at most twice the range), one slot per block, as the
 *    slot count validate() reserved (the queue's tail moves by exactly what was written);
 *    checked on edge cases and 20,000 seeded random ranges, read back with inv_queue_read()
 *    (ranges above inval_domain_threshold stay one DOMAIN command);
 *  - one to three RANGE commands (dg_inval_submit()'s own way for up to eight, submit_ranges())
 *    write the same slots, marks included, and refuse with the same error as the general way
 *    (the commands followed by a DOMAIN one, which takes validate() and emit()): edge cases,
 *    20,000 seeded random ranges (leaf-only and not, alone and in twos and threes with a
 *    refused one at any place) and every refusal validate() makes (-EINVAL, -ENOENT,
 *    -EOVERFLOW, -ERANGE, -E2BIG);
 *  - on a device: pages of such a range cached in its IOTLB, unmapped, then the leaf-only
 *    range invalidated: no page of the range translates any more (a stale IOTLB entry would),
 *    and the still-mapped pages that the wider cover dropped translate again correctly.
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

#define ARENA_SIZE (4ull << 20)
#include "../../test_rand.h"
#include "test_arena.h"
#include "test_objects.h"

/* A seeded random range below @top (a power of two, at least 2^44): the next xorshift64 of
   @rng gives its size, 1 page up to 2^k pages for k of 1..31 (returned), and its start in
   @a, page-aligned and moved down if the range would pass @top. */
static uint64_t rand_range(uint64_t *rng, uint64_t top, uint64_t *a)
{
	uint64_t r = xorshift64(rng);
	uint64_t pages = 1 + (r >> 20) % (1ull << (1 + (r & 15) + (r >> 60)));

	*a = ((r >> 8) & (top - 1)) & ~(K4 - 1);
	if (*a + pages * K4 > top)
		*a = top - pages * K4;
	return pages;
}

/* Naturally aligned blocks of the exact split of [a, last] (what the queue did before). */
static unsigned int exact_blocks(uint64_t a, uint64_t last)
{
	unsigned int n = 0;

	for (;;) {
		unsigned int align = a ? (unsigned int)__builtin_ctzll(a) : 63;
		unsigned int fit = 63 - (unsigned int)__builtin_clzll(last - a + 1);
		unsigned int o = align < fit ? align : fit;

		n++;
		if (last - a <= (1ull << o) - 1)
			return n;
		a += 1ull << o;
	}
}

/* Submit a RANGE of [a, a + size) and check the blocks written for it. */
static void check_range(struct dg_iommu *mmu, uint32_t did, uint64_t a, uint64_t size, bool leaf)
{
	struct dg_inval_cmd c = {.type = DG_INVAL_RANGE,
				 .domain = did,
				 .flags = leaf ? DG_INVAL_LEAF : 0,
				 .iova = a,
				 .size = size};
	uint64_t start = inv_queue_tail(&mmu->inv), seq = 0, last = a + size - 1, next = 0;
	unsigned int exact = exact_blocks(a, last), n;

	assert_int_equal(dg_inval_submit(mmu, &c, 1, &seq), 0);
	n = (unsigned int)(seq - start);
	assert_int_equal(inv_queue_tail(&mmu->inv), seq);
	if (size > mmu->cfg.inval_domain_threshold) { /* one DOMAIN command, as before */
		struct inv_cmd ic;

		assert_int_equal(n, 1);
		assert_int_equal(inv_queue_read(&mmu->inv, start, &ic), 0);
		assert_int_equal(ic.op, INV_OP_DOMAIN);
		return;
	}
	assert_int_equal(n, leaf && exact > 2 ? 2 : exact);
	for (unsigned int i = 0; i < n; i++) {
		struct inv_cmd ic;
		uint64_t bsz, blast;

		assert_int_equal(inv_queue_read(&mmu->inv, start + i, &ic), 0);
		assert_int_equal(ic.op, INV_OP_BLOCK);
		assert_int_equal(ic.id, did);
		assert_int_equal(ic.leaf, leaf ? 1 : 0);
		assert_int_equal(ic.mark, i ? 0 : INV_MARK_SUBMIT | INV_MARK_RANGE);
		bsz = 1ull << ic.order;
		blast = ic.iova + bsz - 1;
		assert_int_equal(ic.iova & (bsz - 1), 0); /* naturally aligned */
		if (i == 0)
			assert_true(ic.iova <= a);
		else
			assert_int_equal(ic.iova, next); /* no gap, no overlap */
		next = blast + 1;
		if (n == exact) {
			/* the exact split: inside the range */
			assert_true(ic.iova >= a && blast <= last);
		} else {
			/* the cover: less than twice the part of the range it holds */
			uint64_t lo = ic.iova > a ? ic.iova : a, hi = blast < last ? blast : last;

			assert_true(hi >= lo);
			assert_true(bsz < 2 * (hi - lo + 1));
		}
	}
	assert_true(next - 1 >= last); /* the whole range */
	if (n == exact)
		assert_int_equal(next - 1, last);
}

static void test_blocks(void **state)
{
	(void)state;
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	uint32_t did = dg_domain_id(dom);
	static const uint64_t edge[][2] = {
		{0x3000, 0x20000},
		{0x1000, 0x2000},
		{0x1000, 0x3000},
		{0x4000, 0x4000},
		{0x0, 0x1000},
		{0x0, 0x7ffff000},
		{0x1000, 0x3ffe000},
		{0xffffffeb0000, 0x140000},
		{0xffffffef0000, 0x50000},
		{0x7fffff000, 0x2000},
		{0xfffffffff000, 0x1000},
		{0x800000000000 - 0x5000, 0x5000},
		{0x1ff000, 0x202000},
		{0x10000, 0x30000},
	};
	uint64_t rng = 0x243f6a8885a308d3ull;

	for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
		check_range(mmu, did, edge[i][0], edge[i][1], true);
		check_range(mmu, did, edge[i][0], edge[i][1], false);
	}
	for (unsigned int i = 0; i < 20000; i++) {
		uint64_t a, pages = rand_range(&rng, 1ull << 48, &a);

		check_range(mmu, did, a, pages * K4, i & 1);
	}
	assert_int_equal(inv_queue_check(&mmu->inv, stderr), 0);
	teardown(mmu, dom, NULL);
}

/* The slots [from, to) read back. */
static void read_slots(struct dg_iommu *mmu, uint64_t from, uint64_t to, struct inv_cmd *out)
{
	for (uint64_t s = from; s < to; s++)
		assert_int_equal(inv_queue_read(&mmu->inv, s, &out[s - from]), 0);
}

/* The @k RANGE commands @c (dg_inval_submit()'s own way for them, submit_ranges) and the same
 * followed by a DOMAIN command (the general way): the same error, or the same slots for @c. */
static void check_same(struct dg_iommu *mmu, uint32_t did, const struct dg_inval_cmd *c, size_t k)
{
	struct dg_inval_cmd more[4];
	struct inv_cmd a[200], b[200];
	uint64_t t0 = inv_queue_tail(&mmu->inv), s1 = 0, s2 = 0, t1;
	int r1 = dg_inval_submit(mmu, c, k, &s1), r2;

	assert_true(k < 4);
	memcpy(more, c, k * sizeof(*c));
	more[k] = (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN, .domain = did};
	t1 = inv_queue_tail(&mmu->inv);
	r2 = dg_inval_submit(mmu, more, k + 1, &s2);
	assert_int_equal(r1, r2);
	if (r1) { /* nothing written by either */
		assert_int_equal(t1, t0);
		assert_int_equal(inv_queue_tail(&mmu->inv), t0);
		return;
	}
	assert_int_equal(s1, t1);
	assert_true(s1 - t0 <= 200);
	assert_int_equal(s2 - t1, s1 - t0 + 1); /* the general way's slots for c, and the DOMAIN */
	read_slots(mmu, t0, s1, a);
	read_slots(mmu, t1, s2 - 1, b);
	for (uint64_t i = 0; i < s1 - t0; i++) {
		assert_int_equal(a[i].op, b[i].op);
		assert_int_equal(a[i].leaf, b[i].leaf);
		assert_int_equal(a[i].order, b[i].order);
		assert_int_equal(a[i].mark, b[i].mark);
		assert_int_equal(a[i].id, b[i].id);
		assert_int_equal(a[i].iova, b[i].iova);
	}
}

static void test_range_way(void **state)
{
	(void)state;
	struct dg_iommu *mmu = mk_iommu(512, 0); /* both ways' slots of a check stay readable */
	struct dg_domain *dom = mk_vtd(mmu);
	uint32_t did = dg_domain_id(dom);
	uint64_t rng = 0x13198a2e03707344ull;
	const uint64_t top = 1ull << 48;
	struct dg_inval_cmd c, prev = {.type = DG_INVAL_RANGE, .domain = 0, .iova = 0, .size = 0};

	/* every refusal of validate() for a RANGE */
	const struct dg_inval_cmd bad[] = {
		{.type = DG_INVAL_RANGE, .domain = did, .flags = 2, .iova = K4, .size = K4},
		{.type = DG_INVAL_RANGE, .domain = 0, .iova = K4, .size = K4},
		{.type = DG_INVAL_RANGE, .domain = did + 1, .iova = K4, .size = K4},
		{.type = DG_INVAL_RANGE, .domain = DG_DOMAIN_ID_MAX + 1, .iova = K4, .size = K4},
		{.type = DG_INVAL_RANGE, .domain = did, .iova = K4, .size = 0},
		{.type = DG_INVAL_RANGE, .domain = did, .iova = K4 + 8, .size = K4},
		{.type = DG_INVAL_RANGE, .domain = did, .iova = K4, .size = K4 + 8},
		{.type = DG_INVAL_RANGE, .domain = did, .iova = ~(K4 - 1), .size = 2 * K4},
		{.type = DG_INVAL_RANGE, .domain = did, .iova = top - K4, .size = 2 * K4},
		{.type = DG_INVAL_RANGE, .domain = did, .iova = top, .size = K4},
	};

	const size_t nbad = sizeof(bad) / sizeof(bad[0]);

	prev.domain = did;
	prev.size = K4;
	for (size_t i = 0; i < nbad; i++) {
		uint64_t s = 0;

		assert_int_not_equal(dg_inval_submit(mmu, &bad[i], 1, &s), 0);
		check_same(mmu, did, &bad[i], 1);
	}
	/* edge cases and random ranges, leaf-only and not */
	for (unsigned int i = 0; i < 20000; i++) {
		uint64_t a, pages = rand_range(&rng, top, &a);

		if (i < 64) /* the top of the space and ranges from 0 */
			a = i & 1 ? top - pages * K4 : 0;
		c = (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
					  .domain = did,
					  .flags = i & 2 ? DG_INVAL_LEAF : 0,
					  .iova = a,
					  .size = pages * K4};
		check_same(mmu, did, &c, 1);
		/* with the one before (and one refused, now and then), as a batch's runs */
		{
			struct dg_inval_cmd set[3] = {prev, c, bad[i % nbad]};

			check_same(mmu, did, set, 2);
			check_same(mmu, did, set + 1, 1);
			if (i % 16 == 0) {
				check_same(mmu, did, set, 3);
				set[2] = set[0];
				set[0] = bad[i % nbad];
				check_same(mmu, did, set, 3);
			}
		}
		prev = c;
	}
	/* above the threshold: one DOMAIN slot either way */
	c = (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
				  .domain = did,
				  .iova = 0,
				  .size = mmu->cfg.inval_domain_threshold + K4};
	check_same(mmu, did, &c, 1);
	assert_int_equal(inv_queue_check(&mmu->inv, stderr), 0);
	teardown(mmu, dom, NULL);

	/* more slots than the ring: -E2BIG either way (22 exact blocks, a ring of 16) */
	mmu = mk_iommu(16, 0);
	dom = mk_vtd(mmu);
	did = dg_domain_id(dom);
	c = (struct dg_inval_cmd){
		.type = DG_INVAL_RANGE, .domain = did, .iova = K4, .size = (1ull << 24) - 2 * K4};
	{
		uint64_t s = 0;

		assert_int_equal(dg_inval_submit(mmu, &c, 1, &s), -E2BIG);
	}
	check_same(mmu, did, &c, 1);
	c.flags = DG_INVAL_LEAF; /* two blocks: fits */
	check_same(mmu, did, &c, 1);
	{ /* 2 + 2 slots fit; 2 + 2 + 22 do not: -E2BIG at the third command */
		struct dg_inval_cmd set[3] = {c, c, c};

		check_same(mmu, did, set, 2);
		set[2].flags = 0;
		check_same(mmu, did, set, 3);
		assert_int_equal(dg_inval_submit(mmu, set, 3, &(uint64_t){0}), -E2BIG);
	}
	assert_int_equal(inv_queue_check(&mmu->inv, stderr), 0);
	teardown(mmu, dom, NULL);
}

static int xlat(struct dg_device *dev, uint64_t iova, uint64_t *host_out)
{
	struct dg_sg sg;
	unsigned int nr = 0;
	int e = dg_dev_translate(dev, iova, 64, DG_ACCESS_READ, &sg, 1, &nr);

	dg_dev_quiesce(dev);
	if (!e)
		*host_out = (uint64_t)(uintptr_t)sg.addr;
	return e;
}

static void test_device(void **state)
{
	(void)state;
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = dg_device_create(mmu, 9);
	/* pages 1..36 mapped; pages 3..34 ([0x3000, 0x23000): 6 exact blocks) unmapped and
	   invalidated as one leaf-only range, covered by [0, 0x20000) and [0x20000, 0x24000) */
	const uint64_t first = 3 * K4, size = 32 * K4;
	struct dg_inval_cmd c = {.type = DG_INVAL_RANGE,
				 .domain = dg_domain_id(dom),
				 .flags = DG_INVAL_LEAF,
				 .iova = first,
				 .size = size};
	struct dg_pt_gather g;
	uint64_t seq = 0, unmapped = 0, h = 0, misses;
	struct dg_dev_stats st;

	assert_non_null(dev);
	assert_int_equal(dg_device_attach(dev, dom), 0);
	assert_int_equal(dg_domain_map(dom, K4, host(K4), 36 * K4, DG_PROT_READ, NULL), 0);
	for (uint64_t p = 1; p <= 36; p++) { /* every page cached in the IOTLB */
		assert_int_equal(xlat(dev, p * K4, &h), 0);
		assert_int_equal(h, host(p * K4));
	}
	dg_dev_stats(dev, &st);
	misses = st.iotlb_misses;
	for (uint64_t p = 1; p <= 36; p++) /* hits now */
		assert_int_equal(xlat(dev, p * K4, &h), 0);
	dg_dev_stats(dev, &st);
	assert_int_equal(st.iotlb_misses, misses);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(dom, first, size, &g, &unmapped), 0);
	assert_int_equal(unmapped, size);
	assert_int_equal(g.nr_tables, 0); /* pages 1, 2, 35, 36 keep the table: leaf only */
	assert_int_equal(dg_inval_submit(mmu, &c, 1, &seq), 0);
	assert_int_equal(seq - inv_queue_tail(&mmu->inv), 0);
	dg_dev_quiesce(dev); /* applies the two blocks and acknowledges */
	assert_true(dg_inval_done(mmu, seq));
	for (uint64_t p = 3; p <= 34; p++)
		assert_int_equal(xlat(dev, p * K4, &h), -EFAULT);
	for (uint64_t p = 1; p <= 36; p += p == 2 ? 33 : 1) {
		assert_int_equal(xlat(dev, p * K4, &h), 0);
		assert_int_equal(h, host(p * K4));
	}
	dg_dev_offline(dev);
	teardown(mmu, dom, dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocks),
		cmocka_unit_test(test_range_way),
		cmocka_unit_test(test_device),
	};

	return cmocka_run_group_tests(tests, setup_arena, teardown_arena);
}
