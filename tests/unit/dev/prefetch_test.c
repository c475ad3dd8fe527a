/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the device's early start (dmaguard/dev.h dg_dev_prefetch_fast() and the
 * library's dg_dev_prefetch()): a hint that prefetches the cache line of a leaf-direct entry
 * and must never be anything more.
 *
 * What must hold, and fails if the code were wrong:
 *  - nothing changes: a script of translations, reads, writes, unmaps with their
 *    invalidations (a leaf-only one, and one left pending while the device prefetches) run
 *    twice on fresh devices, once as is and once with every IOVA of a list prefetched (both
 *    calls) before every step, gives the same results (errno, segments, host addresses),
 *    the same faults in the same order and the same device counters; and every batch of
 *    prefetches leaves the whole struct dg_device byte for byte as it was, and records no
 *    fault. The list holds mapped, unmapped, read-only (for a write), just-unmapped and
 *    never-mapped IOVAs, 0, 1, ~0, the domain's end and beyond (2^48, 2^63), and IOVAs of
 *    the hot line's two tables and of a third one. Leaf-direct, IOTLB and pass-through
 *    devices. A prefetch that translated, counted, applied a pending command or recorded a
 *    fault fails here;
 *  - it prefetches the right line: with __builtin_prefetch recorded by this test (the
 *    inline function is compiled here), a leaf-direct device asks for exactly the address
 *    of @iova's entry of the table that maps it - the 8 bytes there are the live entry of
 *    that page (its host page and permission) - for IOVAs of either of its two tables, and
 *    for nothing else (another table, outside the domain, 0, ~0); an IOTLB or pass-through
 *    device asks for nothing.
 */
#include <stddef.h>
#include <stdint.h>

/* Record the inline hint's prefetches (dmaguard/dev.h is compiled into this file). */
static const void *pf_addr[16];
static unsigned int pf_n;

static void pf_record(const void *p)
{
	if (pf_n < 16)
		pf_addr[pf_n] = p;
	pf_n++;
}
#define __builtin_prefetch(p, rw, loc) pf_record(p)

#include "iommu/iommu_internal.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define K4	   0x1000ull
#define M2	   0x200000ull
#define RW	   (DG_PROT_READ | DG_PROT_WRITE)
#define BASE	   0x40000000ull /* 1 GiB: 2 MiB aligned */
#define ARENA_SIZE (4ull << 20)
#include "../iommu/test_arena.h"

#include "../iommu/test_env.h"

enum mode { DIRECT, IOTLB, PASS };

/* The host page of IOVA page k of table t (t = 0, 1, 2: 2 MiB apart). */
static uint64_t host_off(unsigned int t, uint64_t k)
{
	return ((t * 64 + k * 37 + 5) % 1024) * K4;
}

static uint64_t iova_of(unsigned int t, uint64_t k)
{
	return BASE + t * M2 + k * K4;
}

/* Tables 0 and 1: pages 0..15 mapped, read-write but page 5 read-only and page 9 unmapped;
   table 2: pages 0..3. */
static void open_mode(struct env *e, enum mode m)
{
	struct dg_pt_geometry g = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	struct dg_iommu_config cfg;

	if (m == DIRECT) {
		env_open_direct(e, NULL, NULL, 0);
	} else {
		dg_iommu_config_init(&cfg);
		cfg.log = NULL;
		env_open(e, &cfg, &g, false);
		dg_dev_online(e->dev);
		assert_false(e->dev->direct);
	}
	for (unsigned int t = 0; t < 3; t++)
		for (uint64_t k = 0; k < (t == 2 ? 4 : 16); k++)
			if (k != 9)
				assert_int_equal(dg_domain_map(e->dom, iova_of(t, k),
							       host(host_off(t, k)), K4,
							       k == 5 ? DG_PROT_READ : RW, NULL),
						 0);
	if (m == PASS) { /* offline: the context change's wait does not wait for it */
		dg_dev_offline(e->dev);
		assert_int_equal(dg_device_passthrough(e->dev), 0);
		dg_dev_online(e->dev);
	}
}

static const uint64_t pf_list[] = {
	0,
	1,
	0xfff,
	~0ull,
	~0ull - 0xfff,
	1ull << 48,
	(1ull << 48) - 1,
	1ull << 63,
	BASE - 1,
	BASE,
	BASE + 5 * K4 + 8,   /* read-only */
	BASE + 9 * K4,	     /* never mapped */
	BASE + 3 * K4 + 100, /* unmapped by the script */
	BASE + 15 * K4 + 0xfff,
	BASE + 511 * K4, /* in table 0, not mapped */
	BASE + M2 + 7 * K4,
	BASE + M2 + 8 * K4,
	BASE + 2 * M2 + 2 * K4,
	BASE + 3 * M2, /* no table */
	0x12345678abcdull,
};
#define PF_N (sizeof(pf_list) / sizeof(pf_list[0]))

/* Prefetch every IOVA of the list (inline and library); the device must not change. */
static void prefetch_all(struct env *e)
{
	static struct dg_device before;
	struct dg_fault f;

	memcpy(&before, e->dev, sizeof(before));
	for (size_t i = 0; i < PF_N; i++) {
		dg_dev_prefetch_fast(e->dev, pf_list[i]);
		dg_dev_prefetch(e->dev, pf_list[i]);
	}
	dg_dev_prefetch(NULL, BASE);
	assert_memory_equal(&before, e->dev, sizeof(before));
	assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), -EAGAIN);
}

/* One step's outcome: the call's result and what it produced. */
struct outcome {
	int r;
	unsigned int nr;
	struct dg_sg sg[4];
	uint8_t data[16];
	struct dg_fault fault;
	int fault_r;
};

static void step_xlat(struct env *e, uint64_t iova, size_t len, unsigned int access,
		      struct outcome *o)
{
	memset(o, 0, sizeof(*o));
	o->r = dg_dev_translate_fast(e->dev, iova, len, access, o->sg, 4, &o->nr);
	if (o->r)
		o->nr = 0;
	o->fault_r = dg_iommu_fault_pop(e->mmu, &o->fault);
}

/* Unmap page k of table 0 and submit its leaf-only invalidation; returns its sequence. */
static uint64_t unmap_submit(struct env *e, uint64_t k)
{
	struct dg_pt_gather g;
	uint64_t unmapped, seq = 0;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(e->dom, iova_of(0, k), K4, &g, &unmapped), 0);
	assert_int_equal(dg_inval_submit(e->mmu,
					 &(struct dg_inval_cmd){.type = DG_INVAL_PAGE,
								.flags = DG_INVAL_LEAF,
								.domain = dg_domain_id(e->dom),
								.iova = iova_of(0, k),
								.size = K4},
					 1, &seq),
			 0);
	return seq;
}

#define NSTEPS 40

/* The script; with @pf every step is preceded by prefetch_all(). Fills out[] in order. */
static void script(enum mode m, bool pf, struct outcome *out, struct dg_dev_stats *st)
{
	static const struct {
		unsigned int t;
		uint64_t k, off;
		size_t len;
		unsigned int access;
	} xl[] = {
		{0, 0, 0x10, 64, DG_ACCESS_WRITE},
		{0, 1, 0, 4096, DG_ACCESS_READ},
		{0, 5, 8, 64, DG_ACCESS_READ},
		{0, 5, 8, 64, DG_ACCESS_WRITE},
		{0, 9, 0, 64, DG_ACCESS_READ},
		{0, 2, 0xfc0, 128, DG_ACCESS_READ},
		{1, 7, 0, 64, DG_ACCESS_WRITE},
		{0, 3, 100, 64, DG_ACCESS_WRITE},
		{1, 9, 0, 64, DG_ACCESS_WRITE},
		{2, 2, 0, 64, DG_ACCESS_READ},
		{0, 4, 0, 64, DG_ACCESS_READ},
		{1, 8, 0, 64, DG_ACCESS_READ | DG_ACCESS_WRITE},
		{0, 511, 0, 64, DG_ACCESS_READ},
		{0, 15, 0xfff, 1, DG_ACCESS_READ},
		{0, 0, 0, 3 * 4096, DG_ACCESS_READ},
		{0, 6, 0, 64, 0},
	};
	struct env e;
	unsigned int s = 0;
	uint64_t seq;

	open_mode(&e, m);
	for (unsigned int round = 0; round < 2; round++) {
		for (size_t i = 0; i < sizeof(xl) / sizeof(xl[0]); i++) {
			if (pf)
				prefetch_all(&e);
			step_xlat(&e, iova_of(xl[i].t, xl[i].k) + xl[i].off, xl[i].len,
				  xl[i].access, &out[s++]);
			dg_dev_quiesce(e.dev);
		}
		/* bad arguments and addresses outside the domain */
		if (pf)
			prefetch_all(&e);
		step_xlat(&e, 1ull << 48, 64, DG_ACCESS_READ, &out[s++]);
		step_xlat(&e, ~0ull - 10, 64, DG_ACCESS_READ, &out[s++]);
		/* a device write and read (not pass-through: the IOVA would be the address) */
		for (unsigned int w = 0; w < 2 && m != PASS; w++) {
			if (pf)
				prefetch_all(&e);
			memset(&out[s], 0, sizeof(out[s]));
			out[s].r = w ? dg_dev_read(e.dev, iova_of(0, 4) + 32, out[s].data, 8) :
				       dg_dev_write(e.dev, iova_of(0, 4) + 32, "prefetch", 8);
			out[s].fault_r = dg_iommu_fault_pop(e.mmu, &out[s].fault);
			s++;
		}
		if (round)
			break;
		/* page 3 unmapped: the invalidation pending while the device prefetches */
		seq = unmap_submit(&e, 3);
		if (pf)
			prefetch_all(&e);
		assert_false(dg_inval_done(e.mmu, seq)); /* not acknowledged by a prefetch */
		if (pf)
			prefetch_all(&e);
		dg_dev_quiesce(e.dev);
		assert_true(dg_inval_done(e.mmu, seq));
	}
	assert_true(s <= NSTEPS);
	for (; s < NSTEPS; s++)
		memset(&out[s], 0, sizeof(out[s]));
	dg_dev_stats(e.dev, st);
	env_fini(&e);
}

static void same_with_and_without(enum mode m)
{
	static struct outcome a[NSTEPS], b[NSTEPS];
	struct dg_dev_stats sa, sb;

	script(m, false, a, &sa);
	script(m, true, b, &sb);
	for (unsigned int i = 0; i < NSTEPS; i++) {
		assert_int_equal(a[i].r, b[i].r);
		assert_int_equal(a[i].nr, b[i].nr);
		for (unsigned int j = 0; j < a[i].nr; j++) {
			assert_ptr_equal(a[i].sg[j].addr, b[i].sg[j].addr);
			assert_int_equal(a[i].sg[j].len, b[i].sg[j].len);
		}
		assert_memory_equal(a[i].data, b[i].data, sizeof(a[i].data));
		assert_int_equal(a[i].fault_r, b[i].fault_r);
		if (!a[i].fault_r) {
			assert_int_equal(a[i].fault.iova, b[i].fault.iova);
			assert_int_equal(a[i].fault.reason, b[i].fault.reason);
			assert_int_equal(a[i].fault.access, b[i].fault.access);
		}
	}
	assert_memory_equal(&sa, &sb, sizeof(sa));
	/* the script did what it says: faults, hits */
	assert_true(sa.faults >= (m == PASS ? 1 : 6));
	if (m != PASS)
		assert_true(sa.iotlb_hits > 0);
}

static void test_same_direct(void **state)
{
	(void)state;
	same_with_and_without(DIRECT);
}

static void test_same_iotlb(void **state)
{
	(void)state;
	same_with_and_without(IOTLB);
}

static void test_same_pass(void **state)
{
	(void)state;
	same_with_and_without(PASS);
}

/* The one prefetch of @iova, or NULL if none. */
static const uint64_t *prefetched(struct env *e, uint64_t iova)
{
	pf_n = 0;
	dg_dev_prefetch_fast(e->dev, iova);
	assert_true(pf_n <= 1);
	return pf_n ? pf_addr[0] : NULL;
}

/* @p is the live entry of page k of table t: its host page and permission. */
static void is_entry(const uint64_t *p, unsigned int t, uint64_t k)
{
	uint64_t pte;

	assert_non_null(p);
	pte = *p;
	assert_int_equal(pte & 0x000ffffffffff000ull, host(host_off(t, k)));
	assert_int_equal(pte & 3, k == 5 ? DG_PROT_READ : RW);
}

static void test_right_line(void **state)
{
	struct dg_sg sg[1];
	unsigned int nr;
	struct env e;

	(void)state;
	open_mode(&e, DIRECT);
	/* no table yet: nothing */
	assert_null(prefetched(&e, iova_of(0, 1)));
	assert_int_equal(
		dg_dev_translate_fast(e.dev, iova_of(0, 0), 64, DG_ACCESS_READ, sg, 1, &nr), 0);
	for (uint64_t k = 0; k < 16; k++)
		if (k != 9) {
			is_entry(prefetched(&e, iova_of(0, k)), 0, k);
			is_entry(prefetched(&e, iova_of(0, k) + 0xfff), 0, k);
		}
	/* an unmapped entry of the table: its slot, which holds 0 */
	assert_ptr_equal(prefetched(&e, iova_of(0, 9)), prefetched(&e, iova_of(0, 8)) + 1);
	assert_int_equal(*prefetched(&e, iova_of(0, 9)), 0);
	assert_ptr_equal(prefetched(&e, iova_of(0, 511)), prefetched(&e, iova_of(0, 0)) + 511);
	/* a second table: both are prefetched, a third is not */
	assert_null(prefetched(&e, iova_of(1, 7)));
	assert_int_equal(
		dg_dev_translate_fast(e.dev, iova_of(1, 0), 64, DG_ACCESS_READ, sg, 1, &nr), 0);
	for (uint64_t k = 0; k < 16; k++)
		if (k != 9) {
			is_entry(prefetched(&e, iova_of(1, k)), 1, k);
			is_entry(prefetched(&e, iova_of(0, k)), 0, k);
		}
	assert_null(prefetched(&e, iova_of(2, 0)));
	for (size_t i = 0; i < PF_N; i++)
		if (pf_list[i] < BASE || pf_list[i] >= BASE + 2 * M2)
			assert_null(prefetched(&e, pf_list[i]));
	env_fini(&e);

	/* IOTLB and pass-through devices: never */
	for (enum mode m = IOTLB; m <= PASS; m++) {
		open_mode(&e, m);
		assert_int_equal(dg_dev_translate_fast(e.dev, iova_of(0, 0), 64, DG_ACCESS_READ, sg,
						       1, &nr),
				 0);
		for (size_t i = 0; i < PF_N; i++)
			assert_null(prefetched(&e, pf_list[i]));
		env_fini(&e);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_direct),
		cmocka_unit_test(test_same_iotlb),
		cmocka_unit_test(test_same_pass),
		cmocka_unit_test(test_right_line),
	};

	return cmocka_run_group_tests(tests, setup_arena, teardown_arena);
}
