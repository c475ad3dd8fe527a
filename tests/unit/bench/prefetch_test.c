/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the device workloads' early start (wl.h wl_dev_prefetch_line() and
 * wl_dev_prefetch(), used by wl_nic.h nic_prefetch_burst() and wl_nvme.c), on a real
 * leaf-direct device whose hot line holds the table of the test's pages, with
 * __builtin_prefetch recorded by this test (dmaguard/dev.h's inline is compiled here):
 *  - a burst of 32 buffers on consecutive pages asks for each of their page-table lines
 *    exactly once, in order: 4 lines when the first page starts a line, 5 when the burst
 *    straddles (fails if the dedup by *last were lost - 32 prefetches - or wrong);
 *  - a range asks for every line it covers: 64 KiB from a line's start 2 lines, from the
 *    middle of one 3; a range inside one line 1; and each recorded address is the live entry
 *    of the line's page (its host page);
 *  - a length of 0, one past WL_BURST_BYTES, or a range that wraps past 2^64 asks for the
 *    first line only (a descriptor's length is the driver's word: never a loop over it);
 *  - pass-through asks for nothing.
 * The NIC device's burst helpers (wl_nic.h, used by rx_burst()/rx_burst_agg()/tx_burst()):
 *  - nic_rx_extent()/nic_tx_extent(): a burst may be empty, short, capped by NIC_BURST or by
 *    WL_BURST_BYTES, whole sends only (a chain without its EOP, or with it past NIC_SEGS
 *    descriptors, is left out), across the ring's end;
 *  - nic_prefetch_burst() asks for the page-table lines of the buffers of [from, from + n)
 *    once each, in order, around the ring's end and the 2^32 wrap of the free-running index,
 *    from a line's middle; a short burst one line, an empty one nothing; @whole (sends) every
 *    line of each buffer's range.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static const void *pf_addr[64];
static unsigned int pf_n;

static void pf_record(const void *p)
{
	if (pf_n < 64)
		pf_addr[pf_n] = p;
	pf_n++;
}
#define __builtin_prefetch(p, rw, loc) pf_record(p)

#include "wl.h"
#include "wl_nic.h"

#include <stdlib.h>
#include <string.h>

#define K4    0x1000ull
#define LINE  (1ull << WL_PTE_LINE_SHIFT)
#define BASE  0x40000000ull /* 2 MiB aligned: one table covers BASE..BASE + 2 MiB */
#define PAGES 64u

struct env {
	struct dg_iommu *mmu;
	struct dg_domain *dom;
	struct dg_device *dev;
	struct wl_port port;
	uint8_t *host;
};

static uint64_t host_of(const struct env *e, uint64_t k)
{
	return (uint64_t)(uintptr_t)(e->host + ((k * 13 + 3) % PAGES) * K4);
}

/* A leaf-direct (or pass-through) device; pages 0..PAGES-1 from BASE mapped; the table
   loaded into the hot line by a translation. */
static void env_init(struct env *e, bool pass)
{
	struct dg_pt_geometry g = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	struct dg_iommu_config ic;
	struct dg_sg sg;
	unsigned int nr;

	memset(e, 0, sizeof(*e));
	dg_iommu_config_init(&ic);
	ic.log = NULL;
	ic.iotlb_leaf_direct = true;
	e->mmu = dg_iommu_create(&ic);
	assert_non_null(e->mmu);
	e->dom = dg_domain_create(e->mmu, &g, NULL, NULL);
	assert_non_null(e->dom);
	e->dev = dg_device_create(e->mmu, 1);
	assert_non_null(e->dev);
	e->host = aligned_alloc(K4, PAGES * K4);
	assert_non_null(e->host);
	for (uint64_t k = 0; k < PAGES; k++)
		assert_int_equal(dg_domain_map(e->dom, BASE + k * K4, host_of(e, k), K4,
					       DG_PROT_READ | DG_PROT_WRITE, NULL),
				 0);
	assert_int_equal(pass ? dg_device_passthrough(e->dev) : dg_device_attach(e->dev, e->dom),
			 0);
	dg_dev_online(e->dev);
	e->port.dev = e->dev;
	assert_int_equal(dg_dev_translate(e->dev, BASE, 64, DG_ACCESS_READ, &sg, 1, &nr), 0);
	dg_dev_quiesce(e->dev);
}

static void env_fini(struct env *e)
{
	dg_dev_offline(e->dev);
	assert_int_equal(dg_device_block(e->dev), 0);
	dg_device_destroy(e->dev);
	assert_int_equal(dg_domain_destroy(e->dom), 0);
	dg_iommu_destroy(e->mmu);
	free(e->host);
}

/* Recorded prefetch i is the entry of page k: its host page. */
static void is_entry(const struct env *e, unsigned int i, uint64_t k)
{
	assert_true(i < pf_n);
	assert_int_equal(*(const uint64_t *)pf_addr[i] & 0x000ffffffffff000ull, host_of(e, k));
}

/* A burst of 32 frames at the start of consecutive pages from page @first. */
static void burst(struct env *e, uint64_t first, unsigned int lines)
{
	uint64_t last = UINT64_MAX;

	pf_n = 0;
	for (uint64_t k = first; k < first + 32; k++)
		wl_dev_prefetch_line(&e->port, BASE + k * K4 + 64, &last);
	assert_int_equal(pf_n, lines);
	/* the first line's prefetch is the first page's entry; every later one a line start */
	is_entry(e, 0, first);
	for (unsigned int i = 1; i < lines; i++)
		is_entry(e, i, (first / 8 + i) * 8);
}

static void test_burst_lines(void **state)
{
	struct env e;

	(void)state;
	env_init(&e, false);
	burst(&e, 0, 4);
	burst(&e, 8, 4);
	burst(&e, 3, 5);
	burst(&e, 31, 5);
	env_fini(&e);
}

/* wl_dev_prefetch() of [iova, iova + len): @lines prefetches, the lines from iova's. */
static void range(struct env *e, uint64_t iova, uint64_t len, unsigned int lines)
{
	uint64_t last = UINT64_MAX;

	pf_n = 0;
	wl_dev_prefetch(&e->port, iova, len, &last);
	assert_int_equal(pf_n, lines);
	if (iova >= BASE && iova < BASE + PAGES * K4) {
		is_entry(e, 0, (iova - BASE) / K4);
		for (unsigned int i = 1; i < lines; i++)
			is_entry(e, i, ((iova - BASE) / LINE + i) * (LINE / K4));
		assert_int_equal(last, (iova >> WL_PTE_LINE_SHIFT) + lines - 1);
	}
	/* the next range from the line it ended with does not ask for that line again */
	pf_n = 0;
	wl_dev_prefetch(&e->port, last << WL_PTE_LINE_SHIFT, 64, &last);
	assert_int_equal(pf_n, 0);
}

static void test_ranges(void **state)
{
	struct env e;

	(void)state;
	env_init(&e, false);
	range(&e, BASE, 65536, 2);
	range(&e, BASE + LINE / 2, 65536, 3);
	range(&e, BASE + 5 * K4, 4096, 1);
	range(&e, BASE + 5 * K4, 64, 1);
	range(&e, BASE + LINE - 64, 128, 2);
	range(&e, BASE + LINE / 2, 0, 1);		      /* len 0: the first line */
	range(&e, BASE + LINE / 2, WL_BURST_BYTES + 1ull, 1); /* too long: the first */
	range(&e, BASE + LINE / 2, UINT32_MAX, 1);
	env_fini(&e);
}

static void test_wrap(void **state)
{
	uint64_t last = UINT64_MAX;
	struct env e;

	(void)state;
	env_init(&e, false);
	/* outside the hot tables: asked for, but the device prefetches nothing */
	pf_n = 0;
	wl_dev_prefetch(&e.port, ~0ull - 100, 65536, &last);
	assert_int_equal(pf_n, 0);
	assert_int_equal(last, ~0ull >> WL_PTE_LINE_SHIFT);
	env_fini(&e);
}

static void test_pass_through(void **state)
{
	uint64_t last = UINT64_MAX;
	struct env e;

	(void)state;
	env_init(&e, true);
	pf_n = 0;
	for (uint64_t k = 0; k < 32; k++)
		wl_dev_prefetch(&e.port, BASE + k * LINE, 65536, &last);
	assert_int_equal(pf_n, 0);
	env_fini(&e);
}

/* ---- the NIC device's burst helpers ---- */

#define RING 64u /* descriptors of the test ring */

static struct nic_desc *ring_new(void)
{
	struct nic_desc *r = aligned_alloc(64, RING * sizeof(*r));

	assert_non_null(r);
	memset(r, 0, RING * sizeof(*r));
	return r;
}

static void set_desc(struct nic_desc *r, uint32_t i, uint64_t addr, uint32_t len, uint16_t flags)
{
	r[i & (RING - 1)].addr = addr;
	r[i & (RING - 1)].len = len;
	r[i & (RING - 1)].flags = flags;
}

static void test_extents(void **state)
{
	struct nic_desc *r = ring_new();
	uint64_t bytes;

	(void)state;
	assert_int_equal(nic_rx_extent(0, 2048), 0); /* empty */
	assert_int_equal(nic_rx_extent(5, 2048), 5); /* short */
	assert_int_equal(nic_rx_extent(600, 2048), NIC_BURST);
	assert_int_equal(nic_rx_extent(600, 4096), 16);	   /* WL_BURST_BYTES */
	assert_int_equal(nic_rx_extent(600, 1u << 20), 1); /* one buffer at least */
	/* single-descriptor sends */
	for (uint32_t i = 0; i < RING; i++)
		set_desc(r, i, BASE + i * K4, 64, NIC_EOP);
	assert_int_equal(nic_tx_extent(r, RING - 1, 10, 0, &bytes), 0);
	assert_int_equal(bytes, 0);
	assert_int_equal(nic_tx_extent(r, RING - 1, 10, 5, &bytes), 5);
	assert_int_equal(bytes, 5 * 64);
	assert_int_equal(nic_tx_extent(r, RING - 1, 50, 60, &bytes), NIC_BURST); /* wraps */
	assert_int_equal(bytes, NIC_BURST * 64);
	/* 3-descriptor chains of 16 KiB from 60 (across the end): 2 whole sends reach 96 KiB,
	   more than WL_BURST_BYTES (one send more); a chain without its EOP is left out */
	for (uint32_t i = 60; i < 60 + 12; i++)
		set_desc(r, i, BASE + (i % RING) * K4, 16384, (i - 60) % 3 == 2 ? NIC_EOP : 0);
	assert_int_equal(nic_tx_extent(r, RING - 1, 60, 12, &bytes), 6);
	assert_int_equal(bytes, 6 * 16384);
	assert_int_equal(nic_tx_extent(r, RING - 1, 60, 5, &bytes), 3);
	assert_int_equal(bytes, 3 * 16384);
	assert_int_equal(nic_tx_extent(r, RING - 1, 60, 2, &bytes), 0);
	assert_int_equal(bytes, 0);
	/* a send of NIC_SEGS descriptors is whole; one of more is not (its EOP past NIC_SEGS) */
	for (uint32_t i = 0; i < RING; i++)
		set_desc(r, i, BASE + i * K4, 64, i == NIC_SEGS || i == 40 ? NIC_EOP : 0);
	assert_int_equal(nic_tx_extent(r, RING - 1, 1, RING, &bytes), NIC_SEGS);
	assert_int_equal(bytes, NIC_SEGS * 64);
	assert_int_equal(nic_tx_extent(r, RING - 1, 0, RING, &bytes), 0);
	assert_int_equal(bytes, 0);
	free(r);
}

static void test_nic_burst_lines(void **state)
{
	struct nic_desc *r = ring_new();
	struct env e;

	(void)state;
	env_init(&e, false);
	/* rx: descriptor i holds page i's buffer (the ring's 64 descriptors, 64 pages) */
	for (uint32_t i = 0; i < RING; i++)
		set_desc(r, i, BASE + i * K4, 2048, 0);
	pf_n = 0;
	nic_prefetch_burst(&e.port, r, RING - 1, 0, 32, false); /* 32 pages: 4 lines */
	assert_int_equal(pf_n, 4);
	for (unsigned int i = 0; i < 4; i++)
		is_entry(&e, i, i * 8);
	pf_n = 0;
	nic_prefetch_burst(&e.port, r, RING - 1, 48, 32, false); /* around the ring's end */
	assert_int_equal(pf_n, 4);
	is_entry(&e, 0, 48);
	is_entry(&e, 1, 56);
	is_entry(&e, 2, 0);
	is_entry(&e, 3, 8);
	/* from a line's middle, around the ring's end: pages 36..63, 0..3, 5 lines */
	pf_n = 0;
	nic_prefetch_burst(&e.port, r, RING - 1, 100, 32, false);
	assert_int_equal(pf_n, 5);
	is_entry(&e, 0, 36);
	is_entry(&e, 1, 40);
	is_entry(&e, 2, 48);
	is_entry(&e, 3, 56);
	is_entry(&e, 4, 0);
	/* around 2^32 of the free-running index: pages 60..63, 0..3 */
	pf_n = 0;
	nic_prefetch_burst(&e.port, r, RING - 1, UINT32_MAX - 3, 8, false);
	assert_int_equal(pf_n, 2);
	is_entry(&e, 0, 60);
	is_entry(&e, 1, 0);
	pf_n = 0;
	nic_prefetch_burst(&e.port, r, RING - 1, 36, 3, false); /* short */
	assert_int_equal(pf_n, 1);
	is_entry(&e, 0, 36);
	pf_n = 0;
	nic_prefetch_burst(&e.port, r, RING - 1, 36, 0, false); /* empty */
	assert_int_equal(pf_n, 0);

	/* tx: whole ranges; sends of 64 bytes at the start of page i, a burst's extent */
	for (uint32_t i = 0; i < RING; i++)
		set_desc(r, i, BASE + i * K4, 64, NIC_EOP);
	uint64_t nb;

	pf_n = 0;
	nic_prefetch_burst(&e.port, r, RING - 1, 60, nic_tx_extent(r, RING - 1, 60, 10, &nb), true);
	assert_int_equal(pf_n, 2); /* pages 60..63, 0..5 */
	is_entry(&e, 0, 60);
	is_entry(&e, 1, 0);
	/* a send of 9 pages from page 4: every line of its range (pages 4..12: lines 0, 8) */
	set_desc(r, 20, BASE + 4 * K4, 9 * K4, NIC_EOP);
	pf_n = 0;
	nic_prefetch_burst(&e.port, r, RING - 1, 20, 1, true);
	assert_int_equal(pf_n, 2);
	is_entry(&e, 0, 4);
	is_entry(&e, 1, 8);
	pf_n = 0; /* and not whole: its first line only */
	nic_prefetch_burst(&e.port, r, RING - 1, 20, 1, false);
	assert_int_equal(pf_n, 1);
	is_entry(&e, 0, 4);
	env_fini(&e);
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_extents),	    cmocka_unit_test(test_nic_burst_lines),
		cmocka_unit_test(test_burst_lines), cmocka_unit_test(test_ranges),
		cmocka_unit_test(test_wrap),	    cmocka_unit_test(test_pass_through),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
