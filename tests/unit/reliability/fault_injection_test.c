/* SPDX-License-Identifier: MIT */
/*
 * Fault injection across the layers (issue 8, "Reliability"): for each fault - a page-table
 * page that cannot be allocated (at the domain's first map and in the middle of a
 * scatter-gather map), IOVA space exhausted, bounce shadow areas exhausted, the fault queue
 * overflowing, a translation agent that stops acknowledging (waits, context changes, lazy
 * flush queues, batches, teardown), a device that disappears in the middle of a DMA - the
 * test asserts:
 *  - a clear error: the documented errno, counted in the statistics, nothing half done;
 *  - no corruption: every structure's check() passes right after the fault
 *    (dg_dma_dev_check covers the IOVA tree, the page table, the records, the shadow areas);
 *  - no leak: the counters return to zero, and the sanitizer and valgrind runs of make test
 *    see every allocation freed;
 *  - normal service once the fault clears: maps, device DMA and unmaps work again.
 *
 * Table pages fail for real: the test is linked with -Wl,--wrap=aligned_alloc, and the
 * wrapper refuses the allocations the page-table code makes (a power-of-two size aligned to
 * itself, 4 KiB .. 64 KiB) while a test arms it. Nothing else in the library allocates that
 * shape while armed (coherent memory and pools are not allocated in armed sections).
 */
#include <dmaguard/dma.h>

#include "../dma/dma_test_util.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>

/* ---- the table-page allocator, wrapped ------------------------------------------------------ */

void *__real_aligned_alloc(size_t align, size_t size);
void *__wrap_aligned_alloc(size_t align, size_t size);

/* Relaxed throughout: only counters; the tests arm, allocate and check in one thread (the
   fixture has no housekeeping thread), atomics only because aligned_alloc is thread-safe. */
static _Atomic int fail_countdown = -1; /* -1: disarmed; n: let n table pages through */
static _Atomic bool fail_persistent;	/* keep failing once the countdown hit zero */
static _Atomic unsigned int fail_hits;	/* table allocations refused */

void *__wrap_aligned_alloc(size_t align, size_t size)
{
	if (align == size && size >= 4096 && size <= 65536 && !(size & (size - 1))) {
		int c = atomic_load_explicit(&fail_countdown, memory_order_relaxed);

		while (c > 0 && !atomic_compare_exchange_weak_explicit(&fail_countdown, &c, c - 1,
								       memory_order_relaxed,
								       memory_order_relaxed))
			;
		if (c == 0) {
			if (!atomic_load_explicit(&fail_persistent, memory_order_relaxed))
				atomic_store_explicit(&fail_countdown, -1, memory_order_relaxed);
			atomic_fetch_add_explicit(&fail_hits, 1, memory_order_relaxed);
			return NULL;
		}
	}
	return __real_aligned_alloc(align, size);
}

static void arm(int let_through, bool persistent)
{
	atomic_store_explicit(&fail_persistent, persistent, memory_order_relaxed);
	atomic_store_explicit(&fail_hits, 0, memory_order_relaxed);
	atomic_store_explicit(&fail_countdown, let_through, memory_order_relaxed);
}

static void disarm(void)
{
	atomic_store_explicit(&fail_countdown, -1, memory_order_relaxed);
}

/* ---- helpers -------------------------------------------------------------------------------- */

static struct dg_dma_stats stats(const struct dg_dma_dev *dd)
{
	struct dg_dma_stats st;

	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	return st;
}

static void check_dev(const struct dg_dma_dev *dd)
{
	assert_int_equal(dg_dma_dev_check(dd, stderr), 0);
}

/* A second later, housekeeping has run: what was waiting on the clock is released. */
static void settle(struct dma_fixture *f)
{
	fixture_advance(f, 1000000000ull);
	dg_dma_housekeep(f->dma);
}

/* The device reads [dma, dma + len) and finds @want. */
static void device_sees(struct dg_device *dev, uint64_t dma, const void *want, size_t len)
{
	uint8_t *got = malloc(len);

	assert_int_equal(dg_dev_read(dev, dma, got, len), 0);
	assert_memory_equal(got, want, len);
	free(got);
}

/* One map, device read and unmap: normal service. */
static void service_ok(struct dg_dma_dev *dd, struct dg_device *dev, uint8_t *buf, size_t len)
{
	uint64_t dma;

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i * 7 + 1);
	assert_int_equal(dg_dma_map_single(dd, buf, len, DG_DMA_BIDIRECTIONAL, 0, &dma), 0);
	device_sees(dev, dma, buf, len);
	assert_int_equal(dg_dma_unmap_single(dd, dma, len, DG_DMA_BIDIRECTIONAL, 0, NULL), 0);
}

struct pol {
	const char *name;
	enum dg_dma_policy policy;
	unsigned int flags;
	bool reference;
};

static const struct pol translated[] = {
	{"strict", DG_DMA_STRICT, 0, false},
	{"lazy", DG_DMA_LAZY, 0, false},
	{"pool (fallback)", DG_DMA_POOL, 0, false},
	{"linux-ref", DG_DMA_STRICT, DG_DMA_DEV_LINUX_REFERENCE, true},
};

static struct dg_dma_dev *make_dev(struct dma_fixture *f, const struct pol *p, uint64_t mask,
				   struct dg_device **dev)
{
	struct dg_dma_dev_config c;
	struct dg_dma_dev *dd;

	dg_dma_dev_config_init(&c);
	c.policy = p->policy;
	c.flags = p->flags;
	c.dma_mask = mask;
	dd = fixture_dev(f, 1, p->policy, &c, dev);
	assert_non_null(dd);
	dg_dev_set_auto_offline(*dev, true); /* emulated in this thread */
	return dd;
}

/* ---- page-table pages ------------------------------------------------------------------------ */

/* The domain's first map builds its tables: refuse each of them in turn. */
static void test_table_pages_first_map(void **state)
{
	uint8_t *buf = page_alloc(4 * 4096);

	(void)state;
	for (size_t p = 0; p < sizeof(translated) / sizeof(translated[0]); p++) {
		unsigned int failures = 0;

		for (int k = 0;; k++) {
			struct dma_fixture f;
			struct dg_device *dev = NULL;
			struct dg_dma_dev *dd;
			uint64_t dma;
			int r;

			assert_int_equal(fixture_init(&f, translated[p].reference, 0), 0);
			dd = make_dev(&f, &translated[p], 0, &dev);
			arm(k, false);
			r = dg_dma_map_single(dd, buf, 3 * 4096, DG_DMA_TO_DEVICE, 0, &dma);
			disarm();
			if (r == 0) { /* k is past the tables this map needs */
				assert_int_equal(
					atomic_load_explicit(&fail_hits, memory_order_relaxed), 0);
				assert_int_equal(dg_dma_unmap_single(dd, dma, 3 * 4096,
								     DG_DMA_TO_DEVICE, 0, NULL),
						 0);
				fixture_dev_destroy(dd);
				fixture_fini(&f);
				break;
			}
			failures++;
			assert_int_equal(r, -ENOMEM);
			assert_int_equal(atomic_load_explicit(&fail_hits, memory_order_relaxed), 1);
			struct dg_dma_stats st = stats(dd);
			assert_int_equal(st.err_nomem, 1);
			assert_int_equal(st.live, 0);
			assert_int_equal(st.maps, 0);
			check_dev(dd);
			/* nothing reachable, and the fault clears */
			assert_int_equal(fixture_faults(&f), 0);
			service_ok(dd, dev, buf, 3 * 4096);
			assert_int_equal(fixture_end(&f, dd), 0);
		}
		/* VT-d 48-bit: the root exists, a map needs three tables below it */
		assert_int_equal(failures, 3);
	}
	free(buf);
}

/*
 * Scatter-gather lists of 32 pages stay live, one after the other: every 16th needs a new leaf
 * table (and now and then an upper one) in the middle of its IOVA range... or at its start.
 * Every map runs armed; the ones that need a table fail, are checked, and are retried.
 */
static void test_table_pages_mid_map(void **state)
{
	enum { SEGS = 32, MAPS = 48 };
	uint8_t *buf = page_alloc(SEGS * 4096);

	(void)state;
	for (size_t i = 0; i < SEGS * 4096; i++)
		buf[i] = (uint8_t)(i >> 5);
	for (size_t p = 0; p < sizeof(translated) / sizeof(translated[0]); p++) {
		struct dg_dma_sg sg[MAPS][SEGS];
		unsigned int nr[MAPS], failures = 0;
		struct dma_fixture f;
		struct dg_device *dev = NULL;
		struct dg_dma_dev *dd;

		assert_int_equal(fixture_init(&f, translated[p].reference, 0), 0);
		dd = make_dev(&f, &translated[p], 0, &dev);
		for (unsigned int m = 0; m < MAPS; m++) {
			int r;

			for (unsigned int s = 0; s < SEGS; s++)
				sg[m][s] = (struct dg_dma_sg){.addr = buf + s * 4096, .len = 4096};
			arm(0, true);
			r = dg_dma_map_sg(dd, sg[m], SEGS, DG_DMA_TO_DEVICE, 0, &nr[m]);
			disarm();
			if (r) {
				assert_int_equal(r, -ENOMEM);
				failures++;
				assert_int_equal(stats(dd).live, m);
				check_dev(dd);
				assert_int_equal(dg_dma_map_sg(dd, sg[m], SEGS, DG_DMA_TO_DEVICE, 0,
							       &nr[m]),
						 0);
			}
			assert_int_equal(stats(dd).live, m + 1);
		}
		assert_true(failures >= 3);
		check_dev(dd);
		for (unsigned int m = 0; m < MAPS; m++) {
			for (unsigned int s = 0; s < nr[m]; s++)
				device_sees(dev, sg[m][s].dma_addr,
					    buf + (sg[m][s].dma_addr - sg[m][0].dma_addr),
					    sg[m][s].dma_len);
			assert_int_equal(
				dg_dma_unmap_sg(dd, sg[m], SEGS, DG_DMA_TO_DEVICE, 0, NULL), 0);
		}
		assert_int_equal(fixture_faults(&f), 0);
		settle(&f);
		assert_int_equal(stats(dd).live, 0);
		assert_int_equal(fixture_end(&f, dd), 0);
	}
	free(buf);
}

/* ---- IOVA space and shadow areas ------------------------------------------------------------- */

/* The last of @n mappings of @buf unmapped and mapped again at once (the space full until the
   unmap): the device reads the new mapping. */
static void remap_last(struct dg_dma_dev *dd, struct dg_device *dev, uint8_t *buf, size_t len,
		       uint64_t *dma, unsigned int n)
{
	assert_int_equal(dg_dma_unmap_single(dd, dma[n - 1], len, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_map_single(dd, buf, len, DG_DMA_TO_DEVICE, 0, &dma[n - 1]), 0);
	device_sees(dev, dma[n - 1], buf, len);
}

/* Unmap @dma[0..n), last first. */
static void unmap_all(struct dg_dma_dev *dd, size_t len, const uint64_t *dma, unsigned int n)
{
	while (n)
		assert_int_equal(dg_dma_unmap_single(dd, dma[--n], len, DG_DMA_TO_DEVICE, 0, NULL),
				 0);
}

static void test_iova_exhaustion(void **state)
{
	const size_t len = 64 * 1024;
	uint8_t *buf = page_alloc(len);
	static uint64_t dma[1024];

	(void)state;
	for (size_t p = 0; p < sizeof(translated) / sizeof(translated[0]); p++) {
		struct dma_fixture f;
		struct dg_device *dev = NULL;
		struct dg_dma_dev *dd;
		unsigned int n = 0;
		int r;

		assert_int_equal(fixture_init(&f, translated[p].reference, 0), 0);
		dd = make_dev(&f, &translated[p], (1ull << 24) - 1, &dev); /* 16 MiB of IOVA */
		while ((r = dg_dma_map_single(dd, buf, len, DG_DMA_TO_DEVICE, 0, &dma[n])) == 0) {
			assert_true(dma[n] + len - 1 < (1ull << 24));
			n++;
			assert_true(n < 1024);
		}
		assert_int_equal(r, -ENOSPC);
		assert_true(n >= 200); /* 256 slots, minus IOVA 0's */
		struct dg_dma_stats st = stats(dd);
		assert_int_equal(st.err_iova_space, 1);
		assert_int_equal(st.live, n);
		check_dev(dd);
		/* every mapping still works */
		device_sees(dev, dma[0], buf, len);
		device_sees(dev, dma[n - 1], buf, len);
		/* the fault clears: one unmap, and the space is usable again at once (lazy: the
		   map flushes the queue holding the freed IOVA rather than fail) */
		remap_last(dd, dev, buf, len, dma, n);
		assert_int_equal(stats(dd).err_iova_space, 1);
		unmap_all(dd, len, dma, n);
		settle(&f);
		st = stats(dd);
		assert_int_equal(st.live, 0);
		assert_int_equal(st.lazy_pending, 0);
		check_dev(dd);
		service_ok(dd, dev, buf, len);
		fixture_dev_destroy(dd);
		fixture_fini(&f);
	}
	free(buf);
}

static void test_shadow_exhaustion(void **state)
{
	const size_t len = 32 * 1024;
	uint8_t *buf = page_alloc(len);
	struct dg_dma_dev_config c;
	struct dma_fixture f;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	uint64_t dma[64];
	unsigned int n = 0;
	int r;

	(void)state;
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_BOUNCE;
	c.bounce.area_size = 256 * 1024;
	dd = fixture_dev(&f, 1, DG_DMA_BOUNCE, &c, &dev);
	assert_non_null(dd);
	dg_dev_set_auto_offline(dev, true);
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i * 3);
	while ((r = dg_dma_map_single(dd, buf, len, DG_DMA_TO_DEVICE, 0, &dma[n])) == 0) {
		n++;
		assert_true(n < 64);
	}
	assert_int_equal(r, -ENOSPC);
	assert_true(n >= 8); /* at least this CPU's area */
	struct dg_dma_stats st = stats(dd);
	assert_int_equal(st.err_shadow_space, 1);
	assert_int_equal(st.err_iova_space, 0);
	assert_int_equal(st.live, n);
	assert_int_equal(st.bounce_in_use, (uint64_t)n * len);
	check_dev(dd);
	device_sees(dev, dma[n - 1], buf, len);
	remap_last(dd, dev, buf, len, dma, n);
	unmap_all(dd, len, dma, n);
	st = stats(dd);
	assert_int_equal(st.live, 0);
	assert_int_equal(st.bounce_in_use, 0);
	check_dev(dd);
	service_ok(dd, dev, buf, len);
	fixture_dev_destroy(dd);
	fixture_fini(&f);
	free(buf);
}

/* ---- the fault queue ---------------------------------------------------------------------------- */

static void test_fault_queue_overflow(void **state)
{
	struct dg_iommu_config ic;
	struct dg_iommu_stats is;
	struct dg_dev_stats ds;
	struct dg_iommu *mmu;
	struct dg_device *dev = NULL;
	struct dg_fault flt;
	uint8_t b[8];

	(void)state;
	dg_iommu_config_init(&ic);
	ic.fault_queue_len = 4;
	ic.log = NULL;
	mmu = dg_iommu_create(&ic);
	assert_non_null(mmu);
	dev = dg_device_create(mmu, 7); /* blocked: every access faults */
	assert_non_null(dev);
	for (unsigned int i = 0; i < 20; i++)
		assert_int_equal(dg_dev_read(dev, 0x1000ull * (i + 1), b, 8), -EPERM);
	dg_iommu_stats(mmu, &is);
	dg_dev_stats(dev, &ds);
	assert_int_equal(ds.faults, 20);
	assert_int_equal(is.faults, 20);
	assert_int_equal(is.faults_recorded, 4);
	assert_int_equal(is.fault_overflow, 16); /* counted, not silently dropped */
	for (unsigned int i = 0; i < 4; i++) {	 /* the oldest are kept */
		assert_int_equal(dg_iommu_fault_pop(mmu, &flt), 0);
		assert_int_equal(flt.iova, 0x1000ull * (i + 1));
		assert_int_equal(flt.rid, 7);
		assert_int_equal(flt.reason, DG_FAULT_BLOCKED);
		assert_int_equal(flt.access, DG_ACCESS_READ);
	}
	assert_int_equal(dg_iommu_fault_pop(mmu, &flt), -EAGAIN);
	/* drained: recorded again */
	assert_int_equal(dg_dev_write(dev, 0x9000, b, 8), -EPERM);
	assert_int_equal(dg_iommu_fault_pop(mmu, &flt), 0);
	assert_int_equal(flt.iova, 0x9000);
	assert_int_equal(flt.access, DG_ACCESS_WRITE);
	dg_iommu_stats(mmu, &is);
	assert_int_equal(is.faults_recorded + is.fault_overflow, is.faults);
	dg_device_destroy(dev);
	dg_iommu_destroy(mmu);
}

/* ---- an agent that stops acknowledging ---------------------------------------------------------- */

static void test_stuck_agent_iommu(void **state)
{
	struct dg_pt_geometry geo = {.format = DG_PT_FMT_VTD_SS, .ias = 48};
	struct dg_inval_cmd cmd = {.type = DG_INVAL_DOMAIN};
	uint8_t *page = page_alloc(4096);
	struct dg_domain *d1, *d2;
	struct dg_iommu_config ic;
	struct dg_iommu_stats is;
	struct dg_iommu *mmu;
	struct dg_device *dev = NULL;
	struct dg_pt_gather g;
	struct dg_sg sg[1];
	unsigned int nr;
	uint64_t seq, unmapped;
	char diag[256];

	(void)state;
	dg_iommu_config_init(&ic);
	ic.wait_timeout_ns = 20000000;
	ic.log = NULL;
	mmu = dg_iommu_create(&ic);
	assert_non_null(mmu);
	d1 = dg_domain_create(mmu, &geo, NULL, NULL);
	d2 = dg_domain_create(mmu, &geo, NULL, NULL);
	dev = dg_device_create(mmu, 0x42);
	assert_non_null(d1);
	assert_non_null(d2);
	assert_non_null(dev);
	dg_dev_offline(dev);
	assert_int_equal(dg_device_attach(dev, d1), 0);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_map(d1, 0x10000, (uintptr_t)page, 4096, DG_PROT_READ, NULL), 0);
	/* the device translates and holds, and never reaches a quiescent point */
	assert_int_equal(dg_dev_translate(dev, 0x10000, 64, DG_ACCESS_READ, sg, 1, &nr), 0);
	assert_int_equal(dg_domain_unmap(d1, 0x10000, 4096, &g, &unmapped), 0);
	assert_int_equal(dg_iommu_flush_gather(mmu, d1, &g), -ETIMEDOUT);
	assert_true(g.end > g.start); /* kept, so the call can be repeated */
	assert_true(dg_iommu_last_diag(mmu, diag, sizeof(diag)) > 0);
	assert_non_null(strstr(diag, "0x42"));
	cmd.domain = dg_domain_id(d1);
	assert_int_equal(dg_inval_submit(mmu, &cmd, 1, &seq), 0);
	assert_int_equal(dg_inval_wait(mmu, seq), -ETIMEDOUT);
	assert_false(dg_inval_done(mmu, seq));
	/* a context change times out too: the old domain stays referenced */
	assert_int_equal(dg_device_attach(dev, d2), -ETIMEDOUT);
	assert_int_equal(dg_domain_destroy(d1), -EBUSY);
	dg_iommu_stats(mmu, &is);
	assert_int_equal(is.wait_timeouts, 3);
	/* the agent comes back (a quiescent point) and goes idle: everything completes, the
	   queue works as before */
	dg_dev_quiesce(dev);
	assert_int_equal(dg_inval_wait(mmu, seq), 0);
	dg_dev_offline(dev);
	assert_true(dg_inval_done(mmu, seq));
	assert_int_equal(dg_iommu_flush_gather(mmu, d1, &g), 0);
	assert_int_equal(dg_device_sync(dev), 0);
	assert_int_equal(dg_domain_destroy(d1), 0);
	assert_int_equal(dg_pt_check(dg_domain_pt(d2), stderr), 0);
	assert_int_equal(dg_domain_map(d2, 0x20000, (uintptr_t)page, 4096, DG_PROT_READ, NULL), 0);
	assert_int_equal(dg_dev_translate(dev, 0x20000, 64, DG_ACCESS_READ, sg, 1, &nr), 0);
	assert_ptr_equal(sg[0].addr, page);
	dg_dev_offline(dev);
	assert_int_equal(dg_domain_unmap(d2, 0x20000, 4096, &g, &unmapped), 0);
	assert_int_equal(dg_iommu_flush_gather(mmu, d2, &g), 0);
	dg_device_destroy(dev);
	assert_int_equal(dg_domain_destroy(d2), 0);
	dg_iommu_destroy(mmu);
	free(page);
}

/* Lazy flush queues, batches and teardown with a device that holds a translation. */
static void test_stuck_agent_dma(void **state)
{
	uint8_t *buf = page_alloc(16 * 4096), b[8];
	struct dg_dma_dev_config c;
	struct dma_fixture f;
	struct dg_dma_batch batch;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	struct dg_sg sg[1];
	unsigned int nr, timeouts = 0;
	uint64_t dma;

	(void)state;
	assert_int_equal(fixture_init(&f, false, 20000000), 0); /* waits give up after 20 ms */
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_LAZY;
	c.lazy.queue_size = 4;
	dd = fixture_dev(&f, 1, DG_DMA_LAZY, &c, &dev);
	assert_non_null(dd);
	assert_int_equal(dg_dma_map_single(dd, buf, 64, DG_DMA_TO_DEVICE, 0, &dma), 0);
	assert_int_equal(dg_dev_translate(dev, dma, 64, DG_ACCESS_READ, sg, 1, &nr), 0);
	assert_int_equal(dg_dma_unmap_single(dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	/* the queue fills: an unmap would wait for a flush that cannot complete */
	for (unsigned int i = 1; i < 10; i++) {
		int r;

		assert_int_equal(
			dg_dma_map_single(dd, buf + i * 4096, 64, DG_DMA_TO_DEVICE, 0, &dma), 0);
		r = dg_dma_unmap_single(dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL);
		assert_true(r == 0 || r == -ETIMEDOUT);
		timeouts += r == -ETIMEDOUT;
	}
	assert_true(timeouts > 0);
	struct dg_dma_stats st = stats(dd);
	assert_int_equal(st.err_timeout, timeouts);
	assert_int_equal(st.live, 0);
	assert_true(st.quarantined > 0 || st.lazy_pending > 0);
	/* a policy switch needs the queues drained: it cannot confirm either */
	assert_int_equal(dg_dma_dev_set_policy(dd, DG_DMA_STRICT), -ETIMEDOUT);
	/* teardown cannot confirm either, and changes nothing */
	assert_int_equal(dg_dma_dev_destroy(dd), -ETIMEDOUT);
	/* the device completes: everything is confirmed and released */
	dg_dev_offline(dev);
	settle(&f);
	st = stats(dd);
	assert_int_equal(st.quarantined, 0);
	assert_int_equal(st.lazy_pending, 0);
	check_dev(dd);
	assert_int_equal(dg_dev_read(dev, dma, b, 8), -EFAULT);
	assert_int_equal(fixture_faults(&f), 1);
	dg_dev_offline(dev);
	dg_dev_set_auto_offline(dev, true);
	assert_int_equal(dg_dma_dev_set_policy(dd, DG_DMA_STRICT), 0);
	dg_dma_batch_begin(dd, &batch);
	assert_int_equal(dg_dma_map_single(dd, buf, 100, DG_DMA_TO_DEVICE, 0, &dma), 0);
	device_sees(dev, dma, buf, 100);
	assert_int_equal(dg_dma_unmap_single(dd, dma, 100, DG_DMA_TO_DEVICE, 0, &batch), 0);
	assert_int_equal(dg_dma_batch_end(&batch), 0);
	assert_int_equal(fixture_end(&f, dd), 0);
	free(buf);
}

/* ---- a device that disappears in the middle of a DMA ------------------------------------------ */

/*
 * Device A translates a descriptor and vanishes while holding it (its thread is gone, its
 * agent online). Every wait now times out - device B's unmaps too: one dead agent holds up
 * the whole IOMMU, as a hung ATS device does. The driver sees -ETIMEDOUT and the diagnostic
 * naming A; its hot-unplug path, which knows A's thread is gone, takes A offline on its
 * behalf (legal: no call on A runs), tears A down, and B is served normally again.
 */
static void test_device_disappears(void **state)
{
	uint8_t *buf = page_alloc(4 * 4096);
	struct dma_fixture f;
	struct dg_device *a = NULL, *b = NULL;
	struct dg_dma_dev *da, *db;
	struct dg_sg sg[2];
	unsigned int nr;
	uint64_t dma_a, dma_b;
	char diag[256];

	(void)state;
	assert_int_equal(fixture_init(&f, false, 20000000), 0);
	da = fixture_dev(&f, 0xa, DG_DMA_STRICT, NULL, &a);
	db = fixture_dev(&f, 0xb, DG_DMA_STRICT, NULL, &b);
	assert_non_null(da);
	assert_non_null(db);
	dg_dev_set_auto_offline(b, true);
	assert_int_equal(dg_dma_map_single(da, buf, 4096, DG_DMA_FROM_DEVICE, 0, &dma_a), 0);
	assert_int_equal(dg_dev_translate(a, dma_a, 4096, DG_ACCESS_WRITE, sg, 2, &nr), 0);
	/* A is gone. B's driver carries on: */
	assert_int_equal(dg_dma_map_single(db, buf + 4096, 512, DG_DMA_TO_DEVICE, 0, &dma_b), 0);
	device_sees(b, dma_b, buf + 4096, 512);
	assert_int_equal(dg_dma_unmap_single(db, dma_b, 512, DG_DMA_TO_DEVICE, 0, NULL),
			 -ETIMEDOUT);
	assert_true(dg_iommu_last_diag(f.mmu, diag, sizeof(diag)) > 0);
	assert_non_null(strstr(diag, "rid 0xa"));
	assert_null(strstr(diag, "rid 0xb"));
	assert_int_equal(stats(db).quarantined, 1);
	/* hot unplug of A */
	dg_dev_offline(a);
	dg_dma_housekeep(f.dma);
	assert_int_equal(stats(db).quarantined, 0);
	assert_int_equal(dg_dev_read(b, dma_b, buf, 8), -EFAULT); /* B's unmap is confirmed */
	assert_int_equal(dg_dma_unmap_single(da, dma_a, 4096, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	check_dev(da);
	assert_int_equal(dg_dma_dev_destroy(da), 0);
	dg_device_destroy(a);
	assert_int_equal(fixture_faults(&f), 1);
	/* B: normal service */
	service_ok(db, b, buf + 8192, 1000);
	assert_int_equal(fixture_end(&f, db), 0);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_pages_first_map),
		cmocka_unit_test(test_table_pages_mid_map),
		cmocka_unit_test(test_iova_exhaustion),
		cmocka_unit_test(test_shadow_exhaustion),
		cmocka_unit_test(test_fault_queue_overflow),
		cmocka_unit_test(test_stuck_agent_iommu),
		cmocka_unit_test(test_stuck_agent_dma),
		cmocka_unit_test(test_device_disappears),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
