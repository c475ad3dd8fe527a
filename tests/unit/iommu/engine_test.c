/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/engine_test.c - the IOMMU engine through its public API (iommu.h, dev.h),
 * single-threaded: translation equals the page table's walk for every format, permissions,
 * every fault reason (recorded, nothing touched), pass-through and blocked contexts, context
 * switches, stale IOTLB entries until the invalidation + wait, every invalidation command,
 * offline devices and laps, timeout with diagnostic and recovery, bad commands, coalesced
 * waits, the reference configuration, the fault-queue overflow and the statistics.
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

#define K4 0x1000ull
#define M2 0x200000ull

#define RW (DG_PROT_READ | DG_PROT_WRITE)

/* Host memory: one 8 MiB arena aligned to 2 MiB (so 2 MiB pages can map it). */
#define ARENA_SIZE (8ull << 20)
#include "test_arena.h"
#include "test_objects.h"

static void map(struct dg_domain *dom, uint64_t iova, uint64_t off, uint64_t size,
		unsigned int prot)
{
	assert_int_equal(dg_domain_map(dom, iova, host(off), size, prot, NULL), 0);
}

static void unmap_flush(struct dg_iommu *mmu, struct dg_domain *dom, uint64_t iova, uint64_t size)
{
	struct dg_pt_gather g;
	uint64_t unmapped;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(dom, iova, size, &g, &unmapped), 0);
	assert_int_equal(dg_iommu_flush_gather(mmu, dom, &g), 0);
	assert_int_equal(g.nr_tables, 0);
}

static int pop_fault(struct dg_iommu *mmu, struct dg_fault *f)
{
	return dg_iommu_fault_pop(mmu, f);
}

static void expect_fault(struct dg_iommu *mmu, uint32_t rid, uint32_t did, uint64_t iova,
			 unsigned int access, enum dg_fault_reason reason)
{
	struct dg_fault f;

	assert_int_equal(pop_fault(mmu, &f), 0);
	assert_int_equal(f.rid, rid);
	assert_int_equal(f.domain, did);
	assert_int_equal(f.iova, iova);
	assert_int_equal(f.access, access);
	assert_int_equal(f.reason, reason);
	assert_true(f.time_ns > 0);
}

static void expect_no_fault(struct dg_iommu *mmu)
{
	struct dg_fault f;

	assert_int_equal(pop_fault(mmu, &f), -EAGAIN);
}

/* ---- configuration, domains, devices ---------------------------------------------------- */

static void test_config(void **state)
{
	struct dg_iommu_config cfg, got;
	struct dg_iommu *mmu;

	(void)state;
	mmu = dg_iommu_create(NULL);
	assert_non_null(mmu);
	dg_iommu_config(mmu, &got);
	assert_int_equal(got.iotlb_entries, 1024);
	assert_int_equal(got.inval_queue_len, 1024);
	assert_int_equal(got.wait_timeout_ns, 1000000000ull);
	assert_false(got.reference);
	dg_iommu_destroy(mmu);

	memset(&cfg, 0, sizeof(cfg)); /* zero fields: defaults */
	mmu = dg_iommu_create(&cfg);
	assert_non_null(mmu);
	dg_iommu_config(mmu, &got);
	assert_int_equal(got.fault_queue_len, 256);
	assert_null(got.log);
	dg_iommu_destroy(mmu);

	cfg.iotlb_entries = 1000;
	errno = 0;
	assert_null(dg_iommu_create(&cfg));
	assert_int_equal(errno, EINVAL);
	cfg.iotlb_entries = 0;
	cfg.inval_queue_len = 8;
	assert_null(dg_iommu_create(&cfg));
	assert_int_equal(errno, EINVAL);
	cfg.inval_queue_len = 0;
	cfg.max_devices = 70000;
	assert_null(dg_iommu_create(&cfg));
	assert_int_equal(errno, EINVAL);
}

static void test_domains_and_devices(void **state)
{
	struct dg_iommu_config cfg;
	struct dg_iommu *mmu;
	struct dg_domain *a, *b;
	struct dg_device *d1, *d2;
	struct dg_pt_geometry bad = {.format = (enum dg_pt_format)99};

	(void)state;
	dg_iommu_config_init(&cfg);
	cfg.max_devices = 2;
	cfg.log = NULL;
	mmu = dg_iommu_create(&cfg);
	assert_non_null(mmu);
	a = mk_vtd(mmu);
	b = mk_vtd(mmu);
	assert_int_equal(dg_domain_id(a), 1);
	assert_int_equal(dg_domain_id(b), 2);
	assert_ptr_equal(dg_domain_iommu(a), mmu);
	assert_non_null(dg_domain_pt(a));
	errno = 0;
	assert_null(dg_domain_create(mmu, &bad, NULL, NULL));
	assert_int_equal(errno, EINVAL);

	d1 = dg_device_create(mmu, 0x10);
	assert_non_null(d1);
	errno = 0;
	assert_null(dg_device_create(mmu, 0x10));
	assert_int_equal(errno, EEXIST);
	d2 = dg_device_create(mmu, 0x11);
	assert_non_null(d2);
	assert_null(dg_device_create(mmu, 0x12));
	assert_int_equal(errno, ENOSPC);
	assert_int_equal(dg_device_rid(d1), 0x10);
	assert_ptr_equal(dg_device_iommu(d1), mmu);
	assert_int_equal(dg_device_mode(d1), DG_CTX_BLOCKED);
	assert_null(dg_device_domain(d1));
	assert_false(dg_dev_is_online(d1));

	assert_int_equal(dg_device_attach(d1, a), 0);
	assert_int_equal(dg_device_mode(d1), DG_CTX_TRANSLATE);
	assert_ptr_equal(dg_device_domain(d1), a);
	assert_int_equal(dg_domain_destroy(a), -EBUSY);
	assert_int_equal(dg_device_attach(d1, a), 0); /* same domain: no-op */
	assert_int_equal(dg_device_attach(d1, b), 0); /* switch */
	assert_int_equal(dg_domain_destroy(a), 0);
	assert_int_equal(dg_domain_destroy(b), -EBUSY);
	assert_int_equal(dg_device_passthrough(d1), 0);
	assert_int_equal(dg_device_mode(d1), DG_CTX_PASSTHROUGH);
	assert_null(dg_device_domain(d1));
	assert_int_equal(dg_domain_destroy(b), 0);
	/* A freed id is reused. */
	a = mk_vtd(mmu);
	assert_int_equal(dg_domain_id(a), 1);
	assert_int_equal(dg_device_attach(d2, a), 0);
	dg_device_destroy(d2); /* drops its reference */
	assert_int_equal(dg_domain_destroy(a), 0);
	dg_device_destroy(d1);
	d2 = dg_device_create(mmu, 0x12); /* a freed slot is reused */
	assert_non_null(d2);
	dg_device_destroy(d2);
	dg_iommu_destroy(mmu);
}

static void test_domain_ids_exhausted(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_pt_geometry g = {.format = DG_PT_FMT_FLAT, .window_base = 0, .window_size = K4};
	static struct dg_domain *doms[DG_DOMAIN_ID_MAX];

	(void)state;
	for (unsigned int i = 0; i < DG_DOMAIN_ID_MAX; i++) {
		doms[i] = dg_domain_create(mmu, &g, NULL, NULL);
		assert_non_null(doms[i]);
		assert_int_equal(dg_domain_id(doms[i]), i + 1);
	}
	errno = 0;
	assert_null(dg_domain_create(mmu, &g, NULL, NULL));
	assert_int_equal(errno, ENOSPC);
	for (unsigned int i = 0; i < DG_DOMAIN_ID_MAX; i++)
		assert_int_equal(dg_domain_destroy(doms[i]), 0);
	dg_iommu_destroy(mmu);
}

/* ---- translation semantics --------------------------------------------------------------- */

struct fmt_case {
	const char *name;
	struct dg_pt_geometry geo;
};

static const struct fmt_case fmt_cases[] = {
	{"vtd-4level", {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48}},
	{"vtd-3level", {.format = DG_PT_FMT_VTD_SS, .ias = 39, .oas = 48}},
	{"lpae-s1-4k", {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48, .granule = K4}},
	{"lpae-s2-4k", {.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 40, .oas = 48, .granule = K4}},
	{"lpae-s1-16k", {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 47, .oas = 48, .granule = 0x4000}},
	{"lpae-s2-64k",
	 {.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 42, .oas = 48, .granule = 0x10000}},
	{"flat-4k",
	 {.format = DG_PT_FMT_FLAT,
	  .oas = 52,
	  .granule = K4,
	  .window_base = 1ull << 32,
	  .window_size = 64ull << 20}},
};

/* Compare one translated range with the page table's walk, page by page. */
static void check_against_walk(struct dg_device *dev, struct dg_domain *dom, uint64_t iova,
			       size_t len, unsigned int access)
{
	struct dg_sg sg[64];
	unsigned int nr = 0, s = 0;
	uint64_t a = iova, seg_off = 0;
	int r = dg_dev_translate(dev, iova, len, access, sg, 64, &nr);

	assert_int_equal(r, 0);
	assert_true(nr >= 1);
	while (a < iova + len) {
		struct dg_pt_walk w;
		uint64_t page_end, chunk;

		assert_int_equal(dg_pt_walk(dg_domain_pt(dom), a, &w), 0);
		page_end = (a & ~(w.pgsize - 1)) + w.pgsize;
		chunk = (page_end < iova + len ? page_end : iova + len) - a;
		assert_true(s < nr);
		assert_int_equal((uint64_t)(uintptr_t)sg[s].addr + seg_off, w.phys);
		seg_off += chunk;
		if (seg_off == sg[s].len) {
			s++;
			seg_off = 0;
		}
		assert_true(seg_off < sg[s < nr ? s : 0].len || s == nr);
		a += chunk;
	}
	assert_int_equal(s, nr);
}

static void test_translate_matches_walk(void **state)
{
	(void)state;
	for (size_t f = 0; f < sizeof(fmt_cases) / sizeof(fmt_cases[0]); f++) {
		struct dg_iommu *mmu = mk_iommu(0, 0);
		struct dg_domain *dom = dg_domain_create(mmu, &fmt_cases[f].geo, NULL, NULL);
		struct dg_device *dev = mk_dev(mmu, 7);
		struct dg_pt_geometry g;
		uint64_t gran, base;
		uint64_t pages = 32;

		assert_non_null(dom);
		assert_non_null(dev);
		dg_pt_geometry(dg_domain_pt(dom), &g);
		gran = g.granule;
		base = g.format == DG_PT_FMT_FLAT ? g.window_base : 0x40000000ull;
		if (gran * pages * 2 > ARENA_SIZE)
			pages = ARENA_SIZE / gran / 2;
		assert_int_equal(dg_device_attach(dev, dom), 0);
		/* Pages mapped in reverse host order: never contiguous across pages. */
		for (uint64_t p = 0; p < pages; p++)
			map(dom, base + p * gran, (pages - 1 - p) * gran, gran, RW);
		/* Then a host-contiguous run right after them. */
		map(dom, base + pages * gran, pages * gran, pages * gran, RW);
		for (unsigned int t = 0; t < 200; t++) {
			uint64_t off = ((uint64_t)t * 7919 * 64) % (2 * pages * gran - 1);
			size_t len = 1 + ((size_t)t * 104729) % (3 * gran);

			if (off + len > 2 * pages * gran)
				len = 2 * pages * gran - off;
			check_against_walk(dev, dom, base + off, len, DG_ACCESS_READ);
			check_against_walk(dev, dom, base + off, len, DG_ACCESS_WRITE);
		}
		/* Scattered pages: one segment each; the contiguous run: one segment. */
		{
			struct dg_sg sg[8];
			unsigned int nr;

			assert_int_equal(dg_dev_translate(dev, base, 4 * gran, DG_ACCESS_READ, sg,
							  8, &nr),
					 0);
			assert_int_equal(nr, 4);
			assert_int_equal(dg_dev_translate(dev, base + pages * gran, pages * gran,
							  DG_ACCESS_READ, sg, 8, &nr),
					 0);
			assert_int_equal(nr, 1);
			assert_int_equal(sg[0].len, pages * gran);
			assert_int_equal(dg_dev_translate(dev, base, 4 * gran, DG_ACCESS_READ, sg,
							  3, &nr),
					 -ENOSPC);
			assert_int_equal(nr, 4);
		}
		expect_no_fault(mmu);
		teardown(mmu, dom, dev);
	}
}

static void test_large_pages(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = mk_dev(mmu, 1);
	struct dg_dev_stats st;
	struct dg_sg sg[4];
	unsigned int nr;

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 4 * M2, 0, 2 * M2, RW);  /* two 2M leaves */
	map(dom, 8 * M2, 2 * M2, K4, RW); /* and a 4K page */
	check_against_walk(dev, dom, 4 * M2 + 0x1234, 2 * M2 - 0x2000, DG_ACCESS_READ);
	assert_int_equal(dg_dev_translate(dev, 4 * M2, 2 * M2, DG_ACCESS_WRITE, sg, 4, &nr), 0);
	assert_int_equal(nr, 1); /* both 2M pages are host-contiguous */
	assert_ptr_equal(sg[0].addr, arena);
	assert_int_equal(dg_dev_translate(dev, 8 * M2, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	dg_dev_stats(dev, &st);
	/* Both page sizes are cached now: only hits, whatever level is probed first. */
	for (int i = 0; i < 10; i++) {
		assert_int_equal(dg_dev_translate(dev, 5 * M2 + 64 * (uint64_t)i, 64,
						  DG_ACCESS_READ, sg, 1, &nr),
				 0);
		assert_int_equal(dg_dev_translate(dev, 8 * M2 + 64 * (uint64_t)i, 64,
						  DG_ACCESS_READ, sg, 1, &nr),
				 0);
	}
	{
		struct dg_dev_stats st2;

		dg_dev_stats(dev, &st2);
		assert_int_equal(st2.iotlb_misses, st.iotlb_misses);
		assert_int_equal(st2.iotlb_hits, st.iotlb_hits + 20);
	}
	teardown(mmu, dom, dev);
}

static void test_permissions(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = mk_dev(mmu, 3);
	uint8_t buf[16] = {1, 2, 3};
	struct dg_sg sg[1];
	unsigned int nr;

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 0x10000, 0x10000, K4, DG_PROT_READ);
	map(dom, 0x11000, 0x11000, K4, DG_PROT_WRITE);
	map(dom, 0x12000, 0x12000, K4, RW);
	memset(arena + 0x10000, 0xaa, 3 * K4);

	assert_int_equal(dg_dev_read(dev, 0x10000, buf, 16), 0);
	assert_int_equal(buf[0], 0xaa);
	assert_int_equal(dg_dev_write(dev, 0x10000, buf, 16), -EACCES);
	expect_fault(mmu, 3, 1, 0x10000, DG_ACCESS_WRITE, DG_FAULT_PERM);
	assert_int_equal(dg_dev_write(dev, 0x11000, "x", 1), 0);
	assert_int_equal(arena[0x11000], 'x');
	assert_int_equal(dg_dev_read(dev, 0x11000, buf, 1), -EACCES);
	expect_fault(mmu, 3, 1, 0x11000, DG_ACCESS_READ, DG_FAULT_PERM);
	assert_int_equal(
		dg_dev_translate(dev, 0x12000, 8, DG_ACCESS_READ | DG_ACCESS_WRITE, sg, 1, &nr), 0);
	assert_int_equal(dg_dev_translate(dev, 0x10000, 8, DG_ACCESS_READ | DG_ACCESS_WRITE, sg, 1,
					  &nr),
			 -EACCES);
	expect_fault(mmu, 3, 1, 0x10000, DG_ACCESS_READ | DG_ACCESS_WRITE, DG_FAULT_PERM);
	/* Cached now: the second refusal comes from the IOTLB, same answer. */
	assert_int_equal(dg_dev_write(dev, 0x10000, buf, 1), -EACCES);
	expect_fault(mmu, 3, 1, 0x10000, DG_ACCESS_WRITE, DG_FAULT_PERM);
	/* A write running from a writable page into an unmapped one writes nothing at all. */
	memset(arena + 0x12000, 0x55, 2 * K4);
	{
		uint8_t big[K4];

		memset(big, 0x77, sizeof(big));
		assert_int_equal(dg_dev_write(dev, 0x12800, big, K4), -EFAULT);
		expect_fault(mmu, 3, 1, 0x13000, DG_ACCESS_WRITE, DG_FAULT_UNMAPPED);
		for (uint64_t i = 0; i < 2 * K4; i++)
			assert_int_equal(arena[0x12000 + i], 0x55);
	}
	expect_no_fault(mmu);
	teardown(mmu, dom, dev);
}

static void test_fault_reasons(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = mk_dev(mmu, 0x42);
	struct dg_iommu_stats st;
	uint8_t buf[64];
	struct dg_sg sg[2];
	unsigned int nr;

	(void)state;
	memset(buf, 0x11, sizeof(buf));
	/* Blocked (a new device). */
	assert_int_equal(dg_dev_write(dev, 0x1000, buf, 8), -EPERM);
	expect_fault(mmu, 0x42, 0, 0x1000, DG_ACCESS_WRITE, DG_FAULT_BLOCKED);
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 0x1000, 0x1000, K4, RW);
	/* Unmapped. */
	assert_int_equal(dg_dev_read(dev, 0x5000, buf, 8), -EFAULT);
	expect_fault(mmu, 0x42, 1, 0x5000, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
	/* Outside the domain (48-bit input). */
	assert_int_equal(dg_dev_read(dev, 1ull << 48, buf, 8), -ERANGE);
	expect_fault(mmu, 0x42, 1, 1ull << 48, DG_ACCESS_READ, DG_FAULT_RANGE);
	/* Wrapping past 2^64. */
	assert_int_equal(dg_dev_translate(dev, UINT64_MAX - 3, 8, DG_ACCESS_READ, sg, 2, &nr),
			 -EOVERFLOW);
	expect_fault(mmu, 0x42, 1, UINT64_MAX - 3, DG_ACCESS_READ, DG_FAULT_WRAP);
	/* Permission. */
	map(dom, 0x2000, 0x2000, K4, DG_PROT_READ);
	assert_int_equal(dg_dev_write(dev, 0x2000, buf, 8), -EACCES);
	expect_fault(mmu, 0x42, 1, 0x2000, DG_ACCESS_WRITE, DG_FAULT_PERM);
	/* Bad arguments are errors, not faults. */
	assert_int_equal(dg_dev_translate(dev, 0x1000, 0, DG_ACCESS_READ, sg, 2, &nr), -EINVAL);
	assert_int_equal(dg_dev_translate(dev, 0x1000, 8, 0, sg, 2, &nr), -EINVAL);
	assert_int_equal(dg_dev_translate(dev, 0x1000, 8, 4, sg, 2, &nr), -EINVAL);
	assert_int_equal(dg_dev_translate(dev, 0x1000, 8, DG_ACCESS_READ, sg, 0, &nr), -ENOSPC);
	assert_int_equal(nr, 1);
	assert_int_equal(dg_dev_read(dev, 0x1000, NULL, 8), -EINVAL);
	assert_int_equal(dg_dev_write(dev, 0x1000, buf, 0), -EINVAL);
	expect_no_fault(mmu);
	/* Nothing was written by any refused access. */
	for (uint64_t i = 0; i < 2 * K4; i++)
		assert_int_equal(arena[0x1000 + i], 0);
	dg_iommu_stats(mmu, &st);
	assert_int_equal(st.faults, 5);
	assert_int_equal(st.faults_recorded, 5);
	assert_int_equal(st.fault_overflow, 0);
	assert_string_equal(dg_fault_reason_name(DG_FAULT_WRAP), "wrap");
	assert_null(dg_fault_reason_name((enum dg_fault_reason)0));
	teardown(mmu, dom, dev);
}

static void test_fault_overflow(void **state)
{
	struct dg_iommu_config cfg;
	struct dg_iommu *mmu;
	struct dg_device *dev;
	struct dg_iommu_stats st;
	struct dg_fault f;
	uint8_t b;

	(void)state;
	dg_iommu_config_init(&cfg);
	cfg.fault_queue_len = 4;
	mmu = dg_iommu_create(&cfg);
	dev = mk_dev(mmu, 9);
	for (uint64_t i = 0; i < 10; i++)
		assert_int_equal(dg_dev_read(dev, i << 12, &b, 1), -EPERM);
	dg_iommu_stats(mmu, &st);
	assert_int_equal(st.faults, 10);
	assert_int_equal(st.faults_recorded, 4);
	assert_int_equal(st.fault_overflow, 6);
	for (uint64_t i = 0; i < 4; i++) {
		assert_int_equal(dg_iommu_fault_pop(mmu, &f), 0);
		assert_int_equal(f.iova, i << 12); /* the oldest are kept */
	}
	assert_int_equal(dg_iommu_fault_pop(mmu, &f), -EAGAIN);
	/* Room again: recording resumes. */
	assert_int_equal(dg_dev_read(dev, 0x77000, &b, 1), -EPERM);
	assert_int_equal(dg_iommu_fault_pop(mmu, &f), 0);
	assert_int_equal(f.iova, 0x77000);
	dg_device_destroy(dev);
	dg_iommu_destroy(mmu);
}

static void test_passthrough(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_device *dev = mk_dev(mmu, 5);
	struct dg_sg sg[1];
	unsigned int nr;
	char out[6] = {0};

	(void)state;
	assert_int_equal(dg_device_passthrough(dev), 0);
	assert_int_equal(dg_dev_write(dev, host(0x3000), "hello", 6), 0);
	assert_string_equal((char *)arena + 0x3000, "hello");
	assert_int_equal(dg_dev_read(dev, host(0x3000), out, 6), 0);
	assert_string_equal(out, "hello");
	assert_int_equal(dg_dev_translate(dev, host(0x1000), 3 * M2, DG_ACCESS_READ, sg, 1, &nr),
			 0);
	assert_int_equal(nr, 1);
	assert_ptr_equal(sg[0].addr, arena + 0x1000);
	assert_int_equal(sg[0].len, 3 * M2);
	assert_int_equal(dg_dev_translate(dev, UINT64_MAX, 2, DG_ACCESS_READ, sg, 1, &nr),
			 -EOVERFLOW);
	expect_fault(mmu, 5, 0, UINT64_MAX, DG_ACCESS_READ, DG_FAULT_WRAP);
	/* Back to blocked: nothing reaches memory. */
	assert_int_equal(dg_device_block(dev), 0);
	assert_int_equal(dg_dev_write(dev, host(0x3000), "HELLO", 6), -EPERM);
	assert_string_equal((char *)arena + 0x3000, "hello");
	expect_fault(mmu, 5, 0, host(0x3000), DG_ACCESS_WRITE, DG_FAULT_BLOCKED);
	memset(arena + 0x3000, 0, 6);
	dg_device_destroy(dev);
	dg_iommu_destroy(mmu);
}

/* ---- invalidation ------------------------------------------------------------------------- */

/* A cached translation survives the unmap until the invalidation and wait: that is the window. */
static void test_stale_until_flush(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = mk_dev(mmu, 1);
	struct dg_pt_gather g;
	uint64_t unmapped;
	uint8_t b = 0x5a;

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 0x7000, 0x7000, K4, RW);
	assert_int_equal(dg_dev_write(dev, 0x7000, &b, 1), 0);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(dom, 0x7000, K4, &g, &unmapped), 0);
	assert_int_equal(unmapped, K4);
	/* Unmapped in the table, still cached: the device still reaches the page. */
	assert_int_equal(dg_dev_write(dev, 0x7001, &b, 1), 0);
	assert_int_equal(arena[0x7001], 0x5a);
	assert_true(g.leaf_only);
	assert_int_equal(dg_iommu_flush_gather(mmu, dom, &g), 0);
	assert_int_equal(g.start, g.end); /* released and reset */
	assert_int_equal(dg_dev_write(dev, 0x7002, &b, 1), -EFAULT);
	assert_int_equal(arena[0x7002], 0);
	expect_fault(mmu, 1, 1, 0x7002, DG_ACCESS_WRITE, DG_FAULT_UNMAPPED);
	memset(arena + 0x7000, 0, 2);
	teardown(mmu, dom, dev);
}

static uint64_t submit1(struct dg_iommu *mmu, struct dg_inval_cmd c)
{
	uint64_t seq = 0;

	assert_int_equal(dg_inval_submit(mmu, &c, 1, &seq), 0);
	assert_int_equal(dg_inval_wait(mmu, seq), 0);
	return seq;
}

static bool cached(struct dg_device *dev, uint64_t iova)
{
	const struct iotlb_ent *e;

	return iotlb_find(&dev->iotlb, dev->ctag, iova, &e) >= 0;
}

/* Translate pages [0, n) of 4K at iova 0x100000 + p * 4K so they are cached. */
static void warm(struct dg_device *dev, unsigned int n)
{
	struct dg_sg sg[1];
	unsigned int nr;

	for (unsigned int p = 0; p < n; p++)
		assert_int_equal(
			dg_dev_translate(dev, 0x100000 + p * K4, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	for (unsigned int p = 0; p < n; p++)
		assert_true(cached(dev, 0x100000 + p * K4));
}

/* Let an (auto-offline) device apply what is queued: come online, catch up, go offline. */
static void apply_pending(struct dg_device *dev)
{
	dg_dev_online(dev);
	dg_dev_offline(dev);
}

/*
 * Generations (agent.c): DOMAIN, GLOBAL and DEVICE flushes retire every cached entry by
 * bumping the device's cache tag; after the 1023rd the tables are really emptied, so an entry
 * made under a tag can never match when the tag comes round again. Commands of another
 * domain are skipped and leave ours alone.
 */
static void test_generations(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu), *other = mk_vtd(mmu);
	struct dg_device *d1 = mk_dev(mmu, 1);
	struct dg_pt_gather g;
	struct dg_sg sg[1];
	uint64_t unmapped;
	unsigned int nr;

	(void)state;
	assert_int_equal(dg_device_attach(d1, dom), 0);
	map(dom, 0x100000, 0x100000, 16 * K4, RW);
	warm(d1, 3);
	assert_int_equal(d1->ctag, 1);
	/* A page command of the other domain over our pages: skipped. */
	submit1(mmu, (struct dg_inval_cmd){
			     .type = DG_INVAL_PAGE, .domain = 2, .iova = 0x100000, .size = 4 * K4});
	apply_pending(d1);
	assert_true(cached(d1, 0x102000));
	/* Page 2 now points elsewhere in the table; only a flush can drop its old entry. */
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(dom, 0x102000, K4, &g, &unmapped), 0);
	map(dom, 0x102000, 0x200000, K4, RW);
	assert_int_equal(dg_dev_translate(d1, 0x102000, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	assert_ptr_equal(sg[0].addr, (void *)(uintptr_t)host(0x102000)); /* stale, as expected */
	for (unsigned int i = 1; i <= 1100; i++) {
		struct dg_inval_cmd c = {.type = DG_INVAL_GLOBAL};

		if (i % 3 == 1)
			c = (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN, .domain = 1};
		else if (i % 3 == 2)
			c = (struct dg_inval_cmd){.type = DG_INVAL_DEVICE, .rid = 1};
		warm(d1, 2); /* pages 0 and 1 under the current tag; page 2 never again */
		submit1(mmu, c);
		apply_pending(d1);
		assert_false(cached(d1, 0x100000));
		assert_false(cached(d1, 0x101000));
		assert_false(cached(d1, 0x102000));
		assert_int_equal(iotlb_count_tag(&d1->iotlb, d1->ctag), 0);
		assert_true(d1->ctag >= 1 && d1->ctag <= 1023);
	}
	assert_int_equal(d1->ctag, 1100 % 1023 + 1); /* wrapped once */
	/* Page 2 translates through the table: the entry made under tag 1 is gone. */
	assert_int_equal(dg_dev_translate(d1, 0x102000, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	assert_ptr_equal(sg[0].addr, (void *)(uintptr_t)host(0x200000));
	apply_pending(d1);
	assert_int_equal(dg_iommu_flush_gather(mmu, dom, &g), 0);
	unmap_flush(mmu, dom, 0x100000, 16 * K4);
	assert_int_equal(dg_device_block(d1), 0);
	dg_device_destroy(d1);
	assert_int_equal(dg_domain_destroy(dom), 0);
	assert_int_equal(dg_domain_destroy(other), 0);
	dg_iommu_destroy(mmu);
}

static void test_inval_commands(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu), *other = mk_vtd(mmu);
	struct dg_device *d1 = mk_dev(mmu, 1), *d2 = mk_dev(mmu, 2);
	struct dg_iommu_stats st;

	(void)state;
	assert_int_equal(dg_device_attach(d1, dom), 0);
	assert_int_equal(dg_device_attach(d2, dom), 0);
	map(dom, 0x100000, 0x100000, 16 * K4, RW);

	/* PAGE: exactly the naturally aligned block. */
	warm(d1, 16);
	submit1(mmu, (struct dg_inval_cmd){
			     .type = DG_INVAL_PAGE, .domain = 1, .iova = 0x104000, .size = 4 * K4});
	apply_pending(d1);
	for (unsigned int p = 0; p < 16; p++)
		assert_true(cached(d1, 0x100000 + p * K4) == (p < 4 || p >= 8));
	/* RANGE split into blocks: [1, 3) pages -> 1 + 1 blocks. */
	warm(d1, 16);
	submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
					   .domain = 1,
					   .iova = 0x101000,
					   .size = 2 * K4,
					   .flags = DG_INVAL_LEAF});
	apply_pending(d1);
	for (unsigned int p = 0; p < 16; p++)
		assert_true(cached(d1, 0x100000 + p * K4) == (p < 1 || p >= 3));
	/* Another domain's commands leave ours alone. */
	warm(d1, 16);
	submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN, .domain = 2});
	apply_pending(d1);
	assert_int_equal(iotlb_count_tag(&d1->iotlb, d1->ctag), 16);
	submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN, .domain = 1});
	apply_pending(d1);
	assert_int_equal(iotlb_count_tag(&d1->iotlb, d1->ctag), 0);
	/* DEVICE: only that device. */
	warm(d1, 4);
	warm(d2, 4);
	submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_DEVICE, .rid = 2});
	apply_pending(d1);
	apply_pending(d2);
	/* (4 walked, and the 4 other mapped pages of their line: the neighbour fill) */
	assert_int_equal(iotlb_count_tag(&d1->iotlb, d1->ctag), 8);
	assert_int_equal(iotlb_count_tag(&d2->iotlb, d2->ctag), 0);
	/* GLOBAL: everyone. */
	warm(d2, 4);
	submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_GLOBAL});
	apply_pending(d1);
	apply_pending(d2);
	assert_int_equal(
		iotlb_count_tag(&d1->iotlb, d1->ctag) + iotlb_count_tag(&d2->iotlb, d2->ctag), 0);
	/* CONTEXT: reload (the same entry) and drop everything. */
	warm(d1, 4);
	submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_CONTEXT, .rid = 1});
	apply_pending(d1);
	assert_int_equal(iotlb_count_tag(&d1->iotlb, d1->ctag), 0);
	warm(d1, 2);
	/* A RANGE above the threshold becomes one DOMAIN command. */
	submit1(mmu, (struct dg_inval_cmd){
			     .type = DG_INVAL_RANGE, .domain = 1, .iova = 0, .size = 1ull << 40});
	apply_pending(d1);
	assert_int_equal(iotlb_count_tag(&d1->iotlb, d1->ctag), 0);

	dg_iommu_stats(mmu, &st);
	assert_int_equal(st.inval_cmds[DG_INVAL_PAGE], 3);
	assert_int_equal(st.inval_cmds[DG_INVAL_DOMAIN], 3);
	assert_int_equal(st.inval_cmds[DG_INVAL_DEVICE], 1);
	assert_int_equal(st.inval_cmds[DG_INVAL_GLOBAL], 1);
	assert_int_equal(st.inval_cmds[DG_INVAL_CONTEXT], 1 + 2); /* + the two attaches */
	assert_int_equal(st.inval_ranges, 2);
	assert_int_equal(dg_device_block(d1), 0);
	assert_int_equal(dg_device_block(d2), 0);
	dg_device_destroy(d1);
	dg_device_destroy(d2);
	assert_int_equal(dg_domain_destroy(dom), 0);
	assert_int_equal(dg_domain_destroy(other), 0);
	dg_iommu_destroy(mmu);
}

static void test_bad_commands(void **state)
{
	struct dg_iommu *mmu = mk_iommu(16, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = dg_device_create(mmu, 1);
	uint64_t seq = 12345, tail;
	struct {
		struct dg_inval_cmd c;
		int err;
	} bad[] = {
		{{.type = (enum dg_inval_type)0}, -EINVAL},
		{{.type = (enum dg_inval_type)42}, -EINVAL},
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = 0x1000, .size = 0}, -EINVAL},
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = 0x1001, .size = K4}, -EINVAL},
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = 0x1000, .size = 100}, -EINVAL},
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = 0x1000, .size = K4, .flags = 2},
		 -EINVAL},
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = UINT64_MAX - K4 + 1, .size = 2 * K4},
		 -EOVERFLOW},
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = 1ull << 48, .size = K4}, -ERANGE},
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = (1ull << 48) - K4, .size = 2 * K4},
		 -ERANGE},
		{{.type = DG_INVAL_RANGE, .domain = 7, .iova = 0, .size = K4}, -ENOENT},
		{{.type = DG_INVAL_RANGE, .domain = 0, .iova = 0, .size = K4}, -ENOENT},
		{{.type = DG_INVAL_PAGE, .domain = 1, .iova = 0x1000, .size = 3 * K4}, -EINVAL},
		{{.type = DG_INVAL_PAGE, .domain = 1, .iova = 0x1000, .size = 2 * K4}, -EINVAL},
		{{.type = DG_INVAL_PAGE, .domain = 1, .iova = 0, .size = 0x800}, -EINVAL},
		{{.type = DG_INVAL_DOMAIN, .domain = 5000}, -ENOENT},
		{{.type = DG_INVAL_DOMAIN, .domain = 1, .flags = 2}, -EINVAL},
		{{.type = DG_INVAL_GLOBAL, .flags = 1}, -EINVAL},
		{{.type = DG_INVAL_DEVICE, .rid = 99}, -ENODEV},
		{{.type = DG_INVAL_CONTEXT, .rid = 99}, -ENODEV},
	};
	struct dg_inval_cmd many[2] = {
		{.type = DG_INVAL_GLOBAL},
		{.type = DG_INVAL_RANGE,
		 .domain = 1,
		 .iova = 0x1000,
		 .size = 0x3ffe000}, /* 26 blocks */
	};

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	tail = inv_queue_tail(&mmu->inv);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct dg_inval_cmd two[2] = {{.type = DG_INVAL_GLOBAL}, bad[i].c};

		assert_int_equal(dg_inval_submit(mmu, &bad[i].c, 1, &seq), bad[i].err);
		/* A bad command anywhere in a batch refuses the whole batch. */
		assert_int_equal(dg_inval_submit(mmu, two, 2, &seq), bad[i].err);
		assert_int_equal(seq, 12345);
		assert_int_equal(inv_queue_tail(&mmu->inv), tail);
	}
	assert_int_equal(dg_inval_submit(mmu, many, 0, &seq), -EINVAL);
	assert_int_equal(dg_inval_submit(mmu, NULL, 1, &seq), -EINVAL);
	assert_int_equal(dg_inval_submit(mmu, many, 1, NULL), -EINVAL);
	/* A range needing more blocks than the 16-slot queue holds. */
	assert_int_equal(dg_inval_submit(mmu, many, 2, &seq), -E2BIG);
	assert_int_equal(inv_queue_tail(&mmu->inv), tail);
	/* Waits for sequence numbers never handed out. */
	assert_int_equal(dg_inval_wait(mmu, tail + 1), -EINVAL);
	assert_false(dg_inval_done(mmu, tail + 1));
	/* The queue is still usable. */
	submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_GLOBAL});
	assert_int_equal(inv_queue_tail(&mmu->inv), tail + 1);
	assert_int_equal(inv_queue_check(&mmu->inv, stderr), 0);
	assert_int_equal(dg_iommu_flush_gather(mmu, NULL, NULL), -EINVAL);
	teardown(mmu, dom, dev);
}

static void test_coalesced_waits(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_device *dev = dg_device_create(mmu, 1);
	struct dg_inval_cmd c = {.type = DG_INVAL_GLOBAL};
	struct dg_iommu_stats st;
	uint64_t s1, s2, s3;

	(void)state;
	assert_int_equal(dg_device_passthrough(dev), 0);
	dg_dev_online(dev);
	assert_int_equal(dg_inval_submit(mmu, &c, 1, &s1), 0);
	assert_int_equal(dg_inval_submit(mmu, &c, 1, &s2), 0);
	assert_int_equal(dg_inval_submit(mmu, &c, 1, &s3), 0);
	assert_true(s1 < s2 && s2 < s3);
	assert_false(dg_inval_done(mmu, s1)); /* online, not acknowledged */
	dg_dev_quiesce(dev);
	assert_true(dg_inval_done(mmu, s3));
	dg_iommu_stats(mmu, &st);
	assert_int_equal(dg_inval_wait(mmu, s1), 0);
	assert_int_equal(dg_inval_wait(mmu, s2), 0);
	assert_int_equal(dg_inval_wait(mmu, 0), 0);
	{
		struct dg_iommu_stats st2;

		dg_iommu_stats(mmu, &st2);
		assert_int_equal(st2.waits, st.waits + 3);
		assert_int_equal(st2.waits_coalesced, st.waits_coalesced + 3);
		assert_int_equal(st2.batch_cmds_max, 1);
	}
	dg_device_destroy(dev);
	dg_iommu_destroy(mmu);
}

/* An offline device never holds up a wait and catches up before its next translation. */
static void test_offline_catch_up(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = dg_device_create(mmu, 1);
	struct dg_sg sg[1];
	struct dg_dev_stats st;
	unsigned int nr;

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 0x100000, 0x100000, 4 * K4, RW);
	warm(dev, 4);
	assert_true(dg_dev_is_online(dev));
	dg_dev_offline(dev);
	assert_false(dg_dev_is_online(dev));
	unmap_flush(mmu, dom, 0x101000, K4); /* returns although the device never quiesced */
	assert_true(cached(dev, 0x101000));  /* still in its IOTLB, but it is offline */
	dg_dev_quiesce(dev);		     /* offline: applies nothing */
	assert_true(cached(dev, 0x101000));
	assert_int_equal(dg_dev_translate(dev, 0x101000, 1, DG_ACCESS_READ, sg, 1, &nr), -EFAULT);
	expect_fault(mmu, 1, 1, 0x101000, DG_ACCESS_READ, DG_FAULT_UNMAPPED);
	assert_true(dg_dev_is_online(dev));
	assert_int_equal(dg_dev_translate(dev, 0x102000, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	dg_dev_stats(dev, &st);
	assert_int_equal(st.laps, 0);
	assert_int_equal(st.acked, inv_queue_tail(&mmu->inv));
	dg_dev_offline(dev);
	teardown(mmu, dom, dev);
}

/* A device a whole queue behind flushes everything instead of missing commands. */
static void test_lap(void **state)
{
	struct dg_iommu *mmu = mk_iommu(16, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = mk_dev(mmu, 1);
	struct dg_dev_stats st;

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 0x100000, 0x100000, 4 * K4, RW);
	warm(dev, 4);
	dg_dev_offline(dev);
	for (int i = 0; i < 40; i++)
		submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN, .domain = 7 - 6});
	/* The commands that would have dropped page 0 are overwritten... */
	dg_dev_online(dev);
	dg_dev_stats(dev, &st);
	assert_int_equal(st.laps, 1);
	assert_int_equal(iotlb_count_tag(&dev->iotlb, dev->ctag), 0); /* ...so everything went */
	assert_int_equal(dg_device_mode(dev), DG_CTX_TRANSLATE);
	warm(dev, 4);
	teardown(mmu, dom, dev);
}

/*
 * A device that holds a translation and never reaches a quiescent point: the wait times out
 * with a diagnostic naming it, nothing is released, later commands still flow, and once the
 * device quiesces the same flush succeeds.
 */
static void test_timeout_recovery(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 20 * 1000 * 1000);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *stuck = dg_device_create(mmu, 0xbeef), *ok = dg_device_create(mmu, 2);
	struct dg_pt_gather g;
	struct dg_iommu_stats st;
	struct dg_dev_stats ds;
	struct dg_sg sg[1];
	unsigned int nr;
	uint64_t unmapped, seq, seq2;
	char diag[512];

	(void)state;
	assert_int_equal(dg_device_attach(stuck, dom), 0);
	assert_int_equal(dg_device_attach(ok, dom), 0);
	assert_int_equal(dg_iommu_last_diag(mmu, diag, sizeof(diag)), 0);
	map(dom, 0x100000, 0x100000, 4 * K4, RW);
	assert_int_equal(dg_dev_translate(stuck, 0x100000, 64, DG_ACCESS_WRITE, sg, 1, &nr), 0);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(dom, 0x100000, 4 * K4, &g, &unmapped), 0);
	assert_int_equal(dg_iommu_flush_gather(mmu, dom, &g), -ETIMEDOUT);
	assert_int_not_equal(g.start, g.end); /* kept for a retry */
	assert_true(dg_iommu_last_diag(mmu, diag, sizeof(diag)) > 0);
	assert_non_null(strstr(diag, "timed out"));
	assert_non_null(strstr(diag, "rid 0xbeef"));
	assert_null(strstr(diag, "rid 0x2 ")); /* offline: not blamed */
	/* The stuck device's sg list is still valid: the memory was not given back. */
	memset(sg[0].addr, 0x42, 64);
	/* The queue keeps working: more commands; the other device acknowledges them. */
	assert_int_equal(
		dg_inval_submit(mmu, &(struct dg_inval_cmd){.type = DG_INVAL_GLOBAL}, 1, &seq), 0);
	dg_dev_quiesce(ok);
	assert_int_equal(dg_inval_wait(mmu, seq), -ETIMEDOUT);
	dg_iommu_stats(mmu, &st);
	assert_int_equal(st.wait_timeouts, 2);
	/*
	 * The device's next translation applies everything queued meanwhile (it faults), but
	 * it still holds its first sg list: no acknowledgement until it quiesces.
	 */
	assert_int_equal(dg_dev_translate(stuck, 0x100000, 64, DG_ACCESS_WRITE, sg, 1, &nr),
			 -EFAULT);
	expect_fault(mmu, 0xbeef, 1, 0x100000, DG_ACCESS_WRITE, DG_FAULT_UNMAPPED);
	assert_false(dg_inval_done(mmu, seq));
	dg_dev_quiesce(stuck);
	assert_int_equal(dg_inval_wait(mmu, seq), 0);
	dg_dev_offline(stuck);
	assert_int_equal(dg_iommu_flush_gather(mmu, dom, &g), 0);
	assert_int_equal(g.start, g.end);
	dg_dev_stats(stuck, &ds);
	assert_int_equal(ds.laps, 0);
	assert_true(ds.acked >= seq);
	assert_int_equal(dg_device_block(ok), 0);
	/* A context change against a stuck device: unconfirmed, domain stays referenced. */
	map(dom, 0x200000, 0x200000, K4, RW);
	assert_int_equal(dg_dev_translate(stuck, 0x200000, 64, DG_ACCESS_WRITE, sg, 1, &nr), 0);
	assert_int_equal(dg_device_block(stuck), -ETIMEDOUT);
	assert_int_equal(dg_domain_destroy(dom), -EBUSY);
	assert_int_equal(dg_device_sync(stuck), -ETIMEDOUT);
	dg_dev_quiesce(stuck);
	assert_int_equal(dg_device_sync(stuck), 0);
	assert_int_equal(dg_device_mode(stuck), DG_CTX_BLOCKED);
	assert_int_equal(
		dg_inval_submit(mmu, &(struct dg_inval_cmd){.type = DG_INVAL_GLOBAL}, 1, &seq2), 0);
	dg_dev_offline(stuck);
	assert_int_equal(dg_inval_wait(mmu, seq2), 0);
	memset(arena + 0x100000, 0, 64);
	dg_device_destroy(stuck);
	dg_device_destroy(ok);
	assert_int_equal(dg_domain_destroy(dom), 0);
	dg_iommu_destroy(mmu);
}

/*
 * Translated sg lists are held until the device quiesces: later calls apply invalidations
 * (and see them) but do not acknowledge, so the memory behind a held sg list stays reachable
 * to the device only, and no wait completes early. Read/write-only devices acknowledge at
 * every call.
 */
static void test_held_translations(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = dg_device_create(mmu, 1);
	struct dg_inval_cmd c = {.type = DG_INVAL_RANGE, .domain = 1, .iova = 0x10000, .size = K4};
	struct dg_pt_gather g;
	struct dg_sg sg[1];
	unsigned int nr;
	uint64_t unmapped, seq, x;

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 0x10000, 0x10000, K4, RW);
	map(dom, 0x20000, 0x20000, K4, RW);
	assert_int_equal(dg_dev_translate(dev, 0x10000, 8, DG_ACCESS_WRITE, sg, 1, &nr), 0);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(dom, 0x10000, K4, &g, &unmapped), 0);
	assert_int_equal(dg_inval_submit(mmu, &c, 1, &seq), 0);
	/* Another DMA call applies the command... */
	assert_int_equal(dg_dev_read(dev, 0x20000, &x, sizeof(x)), 0);
	assert_false(cached(dev, 0x10000));
	assert_int_equal(dg_dev_translate(dev, 0x10000, 8, DG_ACCESS_WRITE, sg, 1, &nr), -EFAULT);
	expect_fault(mmu, 1, 1, 0x10000, DG_ACCESS_WRITE, DG_FAULT_UNMAPPED);
	/* ...but the first sg list may still be in use: no acknowledgement. */
	assert_false(dg_inval_done(mmu, seq));
	dg_dev_quiesce(dev);
	assert_true(dg_inval_done(mmu, seq));
	dg_pt_gather_release(dg_domain_pt(dom), &g);
	/* Reads and writes alone acknowledge at each call. */
	c.iova = 0x20000;
	assert_int_equal(dg_inval_submit(mmu, &c, 1, &seq), 0);
	assert_false(dg_inval_done(mmu, seq));
	assert_int_equal(dg_dev_read(dev, 0x20000, &x, sizeof(x)), 0); /* walks again */
	assert_true(dg_inval_done(mmu, seq));
	dg_dev_offline(dev);
	teardown(mmu, dom, dev);
}

/*
 * dg_dev_quiesce_if_pending(): with nothing queued it changes nothing (held translations
 * stay held, so a command applied by a later call is not acknowledged behind the caller's
 * back); with something queued it quiesces, acknowledges and says so.
 */
static void test_quiesce_if_pending(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = dg_device_create(mmu, 1);
	struct dg_inval_cmd c = {.type = DG_INVAL_RANGE, .domain = 1, .iova = 0x10000, .size = K4};
	struct dg_sg ring[1], sg[1];
	unsigned int nr;
	uint64_t seq;

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 0x10000, 0x10000, K4, RW); /* the "ring" the device keeps */
	map(dom, 0x20000, 0x20000, K4, RW); /* a buffer */
	assert_int_equal(dg_dev_translate(dev, 0x10000, 64, DG_ACCESS_READ, ring, 1, &nr), 0);
	assert_false(dg_dev_quiesce_if_pending(dev)); /* nothing queued: the ring stays held */
	assert_int_equal(dg_inval_submit(mmu, &c, 1, &seq), 0);
	/* The next DMA applies the command but must not acknowledge: the ring is in use. */
	assert_int_equal(dg_dev_translate(dev, 0x20000, 64, DG_ACCESS_WRITE, sg, 1, &nr), 0);
	assert_false(cached(dev, 0x10000));
	assert_false(dg_inval_done(mmu, seq));
	assert_true(dg_dev_quiesce_if_pending(dev)); /* applied: translate the ring again */
	assert_true(dg_inval_done(mmu, seq));
	assert_false(dg_dev_quiesce_if_pending(dev));
	/* Queued and not yet applied by any call: applied and acknowledged here. */
	assert_int_equal(dg_dev_translate(dev, 0x10000, 64, DG_ACCESS_READ, ring, 1, &nr), 0);
	c.iova = 0x20000;
	assert_int_equal(dg_inval_submit(mmu, &c, 1, &seq), 0);
	assert_false(dg_inval_done(mmu, seq));
	assert_true(dg_dev_quiesce_if_pending(dev));
	assert_true(dg_inval_done(mmu, seq));
	dg_dev_offline(dev);
	teardown(mmu, dom, dev);
}

/* Switching domains under a device: from the wait on, only the new domain's mappings. */
static void test_context_switch(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *a = mk_vtd(mmu), *b = mk_vtd(mmu);
	struct dg_device *dev = mk_dev(mmu, 1);
	struct dg_sg sg[1];
	unsigned int nr;

	(void)state;
	map(a, 0x100000, 0x10000, K4, RW);
	map(b, 0x100000, 0x20000, K4, DG_PROT_READ);
	assert_int_equal(dg_device_attach(dev, a), 0);
	assert_int_equal(dg_dev_translate(dev, 0x100000, 8, DG_ACCESS_WRITE, sg, 1, &nr), 0);
	assert_ptr_equal(sg[0].addr, arena + 0x10000);
	/* The device is online and would hold up the wait: quiesce it via the offline path. */
	dg_dev_offline(dev);
	assert_int_equal(dg_device_attach(dev, b), 0);
	assert_int_equal(dg_dev_translate(dev, 0x100000, 8, DG_ACCESS_READ, sg, 1, &nr), 0);
	assert_ptr_equal(sg[0].addr, arena + 0x20000);
	assert_int_equal(dg_dev_translate(dev, 0x100000, 8, DG_ACCESS_WRITE, sg, 1, &nr), -EACCES);
	expect_fault(mmu, 1, 2, 0x100000, DG_ACCESS_WRITE, DG_FAULT_PERM);
	dg_dev_offline(dev);
	assert_int_equal(dg_device_block(dev), 0);
	dg_device_destroy(dev);
	assert_int_equal(dg_domain_destroy(a), 0);
	assert_int_equal(dg_domain_destroy(b), 0);
	dg_iommu_destroy(mmu);
}

/* The reference configuration: one PAGE command and one wait per page. */
static void test_reference_mode(void **state)
{
	struct dg_iommu_config cfg;
	struct dg_iommu *mmu;
	struct dg_domain *dom;
	struct dg_device *dev;
	struct dg_iommu_stats st;

	(void)state;
	dg_iommu_config_init(&cfg);
	cfg.reference = true;
	mmu = dg_iommu_create(&cfg);
	dom = mk_vtd(mmu);
	dev = mk_dev(mmu, 1);
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 0x100000, 0x100000, 8 * K4, RW);
	warm(dev, 8);
	dg_dev_offline(dev);
	dg_iommu_stats(mmu, &st);
	unmap_flush(mmu, dom, 0x100000, 8 * K4);
	{
		struct dg_iommu_stats st2;

		dg_iommu_stats(mmu, &st2);
		assert_int_equal(st2.inval_cmds[DG_INVAL_PAGE] - st.inval_cmds[DG_INVAL_PAGE], 8);
		assert_int_equal(st2.waits - st.waits, 8);
		assert_int_equal(st2.batch_cmds_max, 1);
	}
	dg_dev_online(dev);
	assert_int_equal(iotlb_count_tag(&dev->iotlb, dev->ctag), 0);
	dg_dev_offline(dev);
	teardown(mmu, dom, dev);
}

/* Reads and writes over many scattered pages take the stepwise copy path. */
static void test_long_copies(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = mk_dev(mmu, 1);
	enum { PAGES = 40 };
	static uint8_t src[PAGES * K4], dst[PAGES * K4];

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	for (uint64_t p = 0; p < PAGES; p++)
		map(dom, 0x400000 + p * K4, (PAGES - 1 - p) * 2 * K4, K4, RW);
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 31 + 7);
	assert_int_equal(dg_dev_write(dev, 0x400123, src, sizeof(src) - 0x200), 0);
	for (uint64_t p = 0; p < PAGES; p++)
		for (uint64_t i = 0; i < K4; i++) {
			uint64_t off = p * K4 + i;

			if (off < 0x123 || off >= 0x123 + sizeof(src) - 0x200)
				continue;
			assert_int_equal(arena[(PAGES - 1 - p) * 2 * K4 + i], src[off - 0x123]);
		}
	assert_int_equal(dg_dev_read(dev, 0x400123, dst, sizeof(src) - 0x200), 0);
	assert_memory_equal(dst, src, sizeof(src) - 0x200);
	/* The last page faults: the whole long write is refused before a byte moves. */
	unmap_flush(mmu, dom, 0x400000 + (PAGES - 1) * K4, K4);
	memset(src, 0xee, sizeof(src));
	assert_int_equal(dg_dev_write(dev, 0x400000, src, sizeof(src)), -EFAULT);
	assert_int_equal(dg_dev_read(dev, 0x400123, dst, sizeof(src) - 0x1200), 0);
	assert_int_not_equal(dst[0], 0xee);
	memset(arena, 0, PAGES * 2 * K4);
	while (dg_iommu_fault_pop(mmu, &(struct dg_fault){0}) == 0)
		;
	teardown(mmu, dom, dev);
}

/* Walk-cache hits, leaf-only invalidations keep them, non-leaf ones drop them. */
static void test_walk_cache_use(void **state)
{
	struct dg_iommu *mmu = mk_iommu(0, 0);
	struct dg_domain *dom = mk_vtd(mmu);
	struct dg_device *dev = mk_dev(mmu, 1);
	struct dg_dev_stats a, b;
	struct dg_sg sg[1];
	unsigned int nr;

	(void)state;
	assert_int_equal(dg_device_attach(dev, dom), 0);
	map(dom, 0x100000, 0x100000, 64 * K4, RW);
	assert_int_equal(dg_dev_translate(dev, 0x100000, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	dg_dev_stats(dev, &a);
	for (unsigned int p = 1; p < 64; p++)
		assert_int_equal(
			dg_dev_translate(dev, 0x100000 + p * K4, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	dg_dev_stats(dev, &b);
	/* One walk per two lines of 8 leaf entries once the misses look sequential: page 1
	   (the walk of page 0, the device's first miss, filled nothing; page 1's, next to it,
	   fills 0 and 2..7), then pages 8, 24, 40, 56, each one line above the stream's and
	   filling its own 7 neighbours and the next line's 8 (none after page 63). */
	assert_int_equal(b.walks - a.walks, 5);
	assert_int_equal(b.walk_cache_hits - a.walk_cache_hits, 5);
	assert_int_equal(b.prefetch_fills - a.prefetch_fills, 7 + 3 * 15 + 7);
	/* Leaf-only invalidation of everything: walks still start from the cache. */
	submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
					   .domain = 1,
					   .iova = 0x100000,
					   .size = 64 * K4,
					   .flags = DG_INVAL_LEAF});
	dg_dev_stats(dev, &a);
	assert_int_equal(dg_dev_translate(dev, 0x100000, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	dg_dev_stats(dev, &b);
	assert_int_equal(b.walk_cache_hits - a.walk_cache_hits, 1);
	/* Non-leaf: the first walk starts from the root again. */
	submit1(mmu,
		(struct dg_inval_cmd){
			.type = DG_INVAL_RANGE, .domain = 1, .iova = 0x100000, .size = 64 * K4});
	dg_dev_stats(dev, &a);
	assert_int_equal(dg_dev_translate(dev, 0x100000, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	dg_dev_stats(dev, &b);
	assert_int_equal(b.walks - a.walks, 1);
	assert_int_equal(b.walk_cache_hits - a.walk_cache_hits, 0);
	/* A leaf-only domain flush drops every translation but keeps the walk cache... */
	for (unsigned int p = 0; p < 64; p++)
		assert_int_equal(
			dg_dev_translate(dev, 0x100000 + p * K4, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	dg_dev_quiesce(dev);
	submit1(mmu, (struct dg_inval_cmd){
			     .type = DG_INVAL_DOMAIN, .domain = 1, .flags = DG_INVAL_LEAF});
	dg_dev_stats(dev, &a);
	for (unsigned int p = 0; p < 64; p++)
		assert_int_equal(
			dg_dev_translate(dev, 0x100000 + p * K4, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	dg_dev_stats(dev, &b);
	/* 6 misses: page 0 (the previous miss was page 56's, 7 lines away: no fill), then
	   page 1 and 8, 24, 40, 56 as above. */
	assert_int_equal(b.iotlb_misses - a.iotlb_misses, 6);
	assert_int_equal(b.walk_cache_hits - a.walk_cache_hits, 6);
	assert_int_equal(b.prefetch_fills - a.prefetch_fills, 7 + 3 * 15 + 7);
	/* ...and a full one drops both. */
	dg_dev_quiesce(dev);
	submit1(mmu, (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN, .domain = 1});
	dg_dev_stats(dev, &a);
	assert_int_equal(dg_dev_translate(dev, 0x100000, 1, DG_ACCESS_READ, sg, 1, &nr), 0);
	dg_dev_stats(dev, &b);
	assert_int_equal(b.iotlb_misses - a.iotlb_misses, 1);
	assert_int_equal(b.walk_cache_hits - a.walk_cache_hits, 0);
	assert_int_equal(iotlb_check(&dev->iotlb, stderr), 0);
	teardown(mmu, dom, dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_domains_and_devices),
		cmocka_unit_test(test_domain_ids_exhausted),
		cmocka_unit_test(test_translate_matches_walk),
		cmocka_unit_test(test_large_pages),
		cmocka_unit_test(test_permissions),
		cmocka_unit_test(test_fault_reasons),
		cmocka_unit_test(test_fault_overflow),
		cmocka_unit_test(test_passthrough),
		cmocka_unit_test(test_stale_until_flush),
		cmocka_unit_test(test_inval_commands),
		cmocka_unit_test(test_generations),
		cmocka_unit_test(test_bad_commands),
		cmocka_unit_test(test_coalesced_waits),
		cmocka_unit_test(test_offline_catch_up),
		cmocka_unit_test(test_lap),
		cmocka_unit_test(test_timeout_recovery),
		cmocka_unit_test(test_held_translations),
		cmocka_unit_test(test_quiesce_if_pending),
		cmocka_unit_test(test_context_switch),
		cmocka_unit_test(test_reference_mode),
		cmocka_unit_test(test_long_copies),
		cmocka_unit_test(test_walk_cache_use),
	};

	return cmocka_run_group_tests(tests, setup_arena, teardown_arena);
}
