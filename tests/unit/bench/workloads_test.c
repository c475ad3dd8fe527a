/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of what the workloads suite adds to the benchmark protocol: alternated ratios
 * (bench_alternating_ratios) against values computed by hand, and per round in the rounds' order
 * (wl_round_ratios, the JSON's ratio_samples), the per-I/O figures derived from
 * a run's counters, the sg copies the emulated devices use (across segment boundaries, with
 * offsets), the spreading of queues over ports, the ASCII bar chart, the transfers note's
 * rule for showing strict's measured extra time (wl_report_transfers), the rounds' transfer
 * figures in the RESULT lines and the CSV (wl_report_result_line, wl_report_csv), the ring slots of
 * the two-step drivers (wl_slots.c) on a real strict and identity device, and the stuck-run
 * watchdog's verdict (starvation is not a stall).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wl.h"
#include "wl_nic.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void test_alternating_ratios(void **state)
{
	(void)state;
	/* B0=100 V0=50 B1=300 V1=100 B2=100 V2=200 B3=100: ratios 0.25, 0.5, 2 */
	double v[] = {50, 100, 200}, b[] = {100, 300, 100}, a[] = {300, 100, 100}, r[3];
	struct bench_summary s;

	assert_int_equal(bench_alternating_ratios(v, b, a, 3, r, &s), 3);
	assert_true(s.n == 3);
	assert_true(fabs(s.median - 0.5) < 1e-12);
	assert_true(fabs(s.min - 0.25) < 1e-12 && fabs(s.max - 2) < 1e-12);
	assert_true(fabs(s.spread - (2 - 0.25) / 0.5) < 1e-12);
	assert_true(r[0] == 0.25 && r[2] == 2); /* sorted in place */

	/* a run whose baselines measured nothing, or a value that is not a number, is left out */
	double v2[] = {10, 10, NAN, 30}, b2[] = {0, 20, 20, 20}, a2[] = {0, 20, 20, INFINITY};
	assert_int_equal(bench_alternating_ratios(v2, b2, a2, 4, r, &s), 1);
	assert_true(s.n == 1 && s.median == 0.5 && s.spread == 0);
	assert_int_equal(bench_alternating_ratios(v2, b2, a2, 0, r, &s), 0);
	assert_true(isnan(s.median));
}

/* wl_round_ratios: the rounds' order kept (not sorted), NaN for a round without a baseline;
   the same values as bench_alternating_ratios' sorted ones */
static void test_round_ratios(void **state)
{
	double v[] = {200, 50, 100, 80}, b[] = {100, 100, 50, 0}, a[] = {100, 100, 150, 0};
	double r[4], s[4];
	struct bench_summary sum;

	(void)state;
	wl_round_ratios(v, b, a, 4, r);
	assert_true(r[0] == 2 && r[1] == 0.5 && r[2] == 1);
	assert_true(isnan(r[3]));
	assert_int_equal(bench_alternating_ratios(v, b, a, 4, s, &sum), 3);
	assert_true(s[0] == 0.5 && s[1] == 1 && s[2] == 2 && sum.median == 1);
}

static void test_derive(void **state)
{
	(void)state;
	struct wl_result r = {.wl = &wl_xdp64, .cfg = WL_STRICT};

	r.tot = (struct wl_totals){.ios = 1000,
				   .dma_ns = 5000,
				   .dma_ios = 100,
				   .units = 2000,
				   .xlat_ns = 3000,
				   .xlat_units = 300,
				   .dev_bytes = 8192,
				   .iotlb_misses = 500,
				   .walks = 250,
				   .inval_cmds = 100,
				   .waits = 20,
				   .maps = 1000,
				   .subpage_bytes = 4032000};
	wl_result_derive(&r);
	assert_true(r.dma_ns == 50);		  /* 5000 ns over 100 sampled I/Os */
	assert_true(fabs(r.xlat_ns - 20) < 1e-9); /* 10 ns per unit, 2 units per I/O */
	assert_true(r.miss_4k == 250 && r.walks_4k == 125);
	assert_true(r.inval_io == 0.1 && r.waits_io == 0.02);
	assert_true(r.drv_busy == 0 && r.dev_busy == 0); /* no measured time: zeros */
	/* two thread pairs for 0.5 s: 1 s of thread time per side */
	r.threads = 2;
	r.tot.seconds = 0.5;
	r.tot.drv_idle_ns = 250000000;
	r.tot.dev_idle_ns = 1200000000; /* a run closed after the interval: clamped */
	wl_result_derive(&r);
	assert_true(fabs(r.drv_busy - 0.75) < 1e-12 && r.dev_busy == 0);
	assert_true(r.window_ns == 0 && r.subpage == 4032);

	r.cfg = WL_LAZY;
	r.tot.lazy_window_ns = 1234;
	wl_result_derive(&r);
	assert_true(r.window_ns == 1234);
	for (enum wl_cfg c = WL_IDENTITY; c < WL_NCFG; c++) {
		r.cfg = c;
		wl_result_derive(&r);
		if (c == WL_IDENTITY || c == WL_IDENTITY_2STEP || c == WL_POOL || c == WL_WINDOW)
			assert_true(r.window_ns == -1);
		else if (c != WL_LAZY)
			assert_true(r.window_ns == 0);
	}
	memset(&r.tot, 0, sizeof(r.tot)); /* nothing measured: zeros, never NaN */
	wl_result_derive(&r);
	assert_true(r.dma_ns == 0 && r.xlat_ns == 0 && r.miss_4k == 0 && r.waits_io == 0 &&
		    r.subpage == 0);
}

static void test_sg_copy(void **state)
{
	(void)state;
	uint8_t a[5], b[3], c[8], src[16], dst[16];
	struct dg_sg sg[3] = {{a, sizeof(a)}, {b, sizeof(b)}, {c, sizeof(c)}};

	for (int i = 0; i < 16; i++)
		src[i] = (uint8_t)(i + 1);
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	memset(c, 0, sizeof(c));
	/* 9 bytes from offset 4: the last byte of a, all of b, 5 bytes of c */
	wl_sg_copy_to(sg, 3, 4, src, 9);
	assert_true(a[3] == 0 && a[4] == 1);
	assert_true(b[0] == 2 && b[2] == 4);
	assert_true(c[0] == 5 && c[4] == 9 && c[5] == 0);
	memset(dst, 0, sizeof(dst));
	wl_sg_copy_from(sg, 3, 4, dst, 9);
	assert_memory_equal(dst, src, 9);
	/* past the end: copies what there is and stops */
	wl_sg_copy_to(sg, 3, 14, src, 16);
	assert_true(c[6] == 1 && c[7] == 2);
	wl_sg_copy_to(sg, 2, 0, src, 0); /* nothing */
	assert_true(a[0] == 0);
	/* inside the first segment, up to its last byte */
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	wl_sg_copy_to(sg, 3, 1, src + 10, 4);
	assert_true(a[0] == 0 && a[1] == 11 && a[4] == 14 && b[0] == 0);
	memset(dst, 0, sizeof(dst));
	wl_sg_copy_from(sg, 3, 2, dst, 3);
	assert_true(dst[0] == 12 && dst[2] == 14 && dst[3] == 0);
	/* one byte past it goes on into the second segment */
	wl_sg_copy_to(sg, 3, 0, src, 6);
	assert_true(a[0] == 1 && a[4] == 5 && b[0] == 6 && b[1] == 0);
	memset(dst, 0, sizeof(dst));
	wl_sg_copy_from(sg, 3, 0, dst, 6);
	assert_memory_equal(dst, src, 6);
	wl_sg_copy_to(sg, 3, 3, src + 12, 3); /* from inside it, one byte past its end */
	assert_true(a[2] == 3 && a[3] == 13 && a[4] == 14 && b[0] == 15 && b[1] == 0);
	/* from the first segment's end: all in the second */
	wl_sg_copy_to(sg, 3, 5, src + 8, 2);
	assert_true(a[4] == 14 && b[0] == 9 && b[1] == 10);
	wl_sg_copy_to(sg, 0, 0, src, 4); /* no segment: nothing */
	assert_true(a[0] == 1);
}

static void test_port_queues(void **state)
{
	(void)state;
	for (uint32_t q = 0; q <= 9; q++)
		for (unsigned int ports = 1; ports <= 5; ports++) {
			unsigned int sum = 0, lo = ~0u, hi = 0;

			for (unsigned int p = 0; p < ports; p++) {
				unsigned int n = nic_port_queues(q, p, ports);

				sum += n;
				lo = n < lo ? n : lo;
				hi = n > hi ? n : hi;
			}
			/* 0 queues means one per port; otherwise all of them, spread evenly */
			assert_int_equal(sum, q ? q : ports);
			assert_true(hi - lo <= 1);
		}
}

static void test_threads_for(void **state)
{
	(void)state;
	assert_int_equal(wl_threads_for(&wl_xdp64, 0), 1);
	assert_int_equal(wl_threads_for(&wl_xdp64, 3), 3);
	assert_int_equal(wl_threads_for(&wl_bond4, 8), 4);
	assert_int_equal(wl_threads_for(&wl_tcp_x1, 2), 1);
	assert_int_equal(wl_threads_for(&wl_nvme4k, 16), 8);
	assert_int_equal(wl_threads_for(&wl_xdp64, 1000), WL_MAX_THREADS);
}

/* wl_plot_ascii() of @r at @width columns, as a string to free. */
static char *plot(struct wl_result *r, size_t n, unsigned int width)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	wl_plot_ascii(f, r, n, width);
	fclose(f);
	return buf;
}

static void test_plot_ascii(void **state)
{
	(void)state;
	struct wl_result r[3] = {{.wl = &wl_xdp64, .cfg = WL_IDENTITY},
				 {.wl = &wl_xdp64, .cfg = WL_STRICT},
				 {.wl = &wl_fwd64, .cfg = WL_POOL}};
	char *buf;

	r[0].ratio_s.median = 1.0;
	r[1].ratio_s.median = 0.5;
	r[2].ratio_s.median = 2.0; /* the longest bar sets the scale */
	buf = plot(r, 3, 20);
	/* identity: 10 of 20 columns, then the 1.0 mark right after */
	assert_non_null(strstr(buf, "xdp64     identity        1.000 ##########|"));
	assert_non_null(strstr(buf, "          strict          0.500 #####     |"));
	assert_non_null(strstr(buf, "fwd64     pool            2.000 ####################"));
	free(buf);
	/* A wild ratio is clipped at 2.0 and the others keep their length; a tiny one still
	   shows one bar. */
	r[1].ratio_s.median = 0.001;
	r[2].ratio_s.median = 40.0;
	buf = plot(r, 3, 20);
	assert_non_null(strstr(buf, "xdp64     identity        1.000 ##########|"));
	assert_non_null(strstr(buf, "          strict          0.001 #         |"));
	assert_non_null(strstr(buf, "fwd64     pool           40.000 ####################>"));
	free(buf);
}

/* The RESULT line of @r, as the table prints it; the caller frees it. */
static char *result_line(const struct wl_result *r)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	wl_report_result_line(f, r);
	fclose(f);
	return buf;
}

/* The line of @text that starts with @prefix (copied into @line), or false. */
static bool line_of(const char *text, const char *prefix, char *line, size_t n)
{
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		size_t l = strcspn(p, "\n");

		if (!strncmp(p, prefix, strlen(prefix))) {
			snprintf(line, n, "%.*s", (int)l, p);
			return true;
		}
	}
	return false;
}

/*
 * The rounds' transfer figures in the RESULT lines (min, max, how many rounds measured it;
 * nan when none did) and in the CSV (min, max, then every round's, ';' between them, empty
 * where not measured).
 */
static void test_report_xfer_rounds(void **state)
{
	struct wl_result r[3] = {{.wl = &wl_xdp64, .cfg = WL_IDENTITY, .rounds = 3},
				 {.wl = &wl_xdp64, .cfg = WL_STRICT, .rounds = 3},
				 {.wl = &wl_fwd64, .cfg = WL_IDENTITY, .rounds = 2}};
	const double xdp[3] = {72.3, NAN, 56.1};
	char *buf, line[1024];
	size_t len = 0;
	FILE *f;

	(void)state;
	for (unsigned int i = 0; i < 3; i++)
		r[0].xfer_ns[i] = r[1].xfer_ns[i] = xdp[i];
	r[2].xfer_ns[0] = r[2].xfer_ns[1] = NAN;
	r[1].failed = true;
	buf = result_line(&r[1]);
	assert_non_null(strstr(buf, "RESULT suite=workloads workload=xdp64 policy=strict "));
	assert_non_null(strstr(buf, " xfer_ns_min=56.1 xfer_ns_max=72.3 xfer_rounds=2 ok=0\n"));
	free(buf);
	buf = result_line(&r[2]);
	assert_non_null(strstr(buf, " xfer_ns_min=nan xfer_ns_max=nan xfer_rounds=0 ok=1\n"));
	free(buf);

	buf = NULL;
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	wl_report_csv_write(f, r, 3);
	fclose(f);
	assert_true(len > 0);
	assert_true(line_of(buf, "workload,", line, sizeof(line)));
	assert_non_null(strstr(line, ",exposure,ok,cacheline_transfer_ns_min,"
				     "cacheline_transfer_ns_max,cacheline_transfer_ns_samples"));
	assert_true(line_of(buf, "xdp64,identity,", line, sizeof(line)));
	assert_non_null(strstr(line, ",all-memory,1,56.1,72.3,72.3;;56.1"));
	assert_true(line_of(buf, "xdp64,strict,", line, sizeof(line)));
	assert_non_null(strstr(line, ",0,56.1,72.3,72.3;;56.1"));
	assert_true(line_of(buf, "fwd64,identity,", line, sizeof(line)));
	assert_non_null(strstr(line, ",all-memory,1,,,;"));
	/* as many cells in every line as in the header */
	for (const char *p = buf; *p; p = strchr(p, '\n') + 1) {
		size_t commas = 0, l = strcspn(p, "\n");

		for (size_t i = 0; i < l; i++)
			commas += p[i] == ',';
		assert_int_equal(commas, 21);
	}
	free(buf);
}

/* The transfers note of @r with the header's transfer at @hdr_ns (not measured if <= 0); the
   caller frees it. */
static char *note(const struct wl_result *r, size_t n, double hdr_ns)
{
	struct bench_xfer x = {.measured = hdr_ns > 0, .ns = {.median = hdr_ns}};
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	wl_report_transfers(f, r, n, &x);
	fclose(f);
	return buf;
}

/*
 * The note of @r (xdp64's identity and strict rows) with the header's transfer at @hdr_ns:
 * xdp64's "measured +ns" is @measured ("-" or the figure), and the note has @text (NULL: no
 * "not shown" line at all).
 */
static void expect_note(const struct wl_result *r, double hdr_ns, const char *measured,
			const char *text)
{
	char *buf = note(r, 2, hdr_ns), line[512], name[32], m[32], range[32];
	double maps, inval, lines, ns;

	assert_true(line_of(buf, "xdp64 ", line, sizeof(line)));
	assert_int_equal(sscanf(line, "%31s %lf %lf %lf %lf %31s %31s", name, &maps, &inval, &lines,
				&ns, m, range),
			 7);
	assert_string_equal(m, measured);
	if (text)
		assert_non_null(strstr(buf, text));
	else
		assert_null(strstr(buf, "not shown"));
	free(buf);
}

/*
 * The transfers note shows strict's measured extra time only when it can be read: every round
 * measured the transfer, its figures and the header's within x1.5, identity's and strict's
 * runs each spread at most 10%; otherwise "-" and a line saying which limit failed.
 */
static void test_transfers_note(void **state)
{
	struct wl_result r[2] = {{.wl = &wl_xdp64, .cfg = WL_IDENTITY, .threads = 1, .rounds = 2},
				 {.wl = &wl_xdp64, .cfg = WL_STRICT, .threads = 1, .rounds = 2}};
	char *buf;

	(void)state;
	r[0].thr_s = (struct bench_summary){.median = 20, .spread = 0.05};
	r[1].thr_s = (struct bench_summary){.median = 16, .spread = 0.08};
	r[1].tot.ios = 1000;
	r[1].tot.maps = 1000;
	r[1].inval_io = 0.03;
	r[0].xfer_ns[0] = r[1].xfer_ns[0] = 60;
	r[0].xfer_ns[1] = r[1].xfer_ns[1] = 89.9; /* 60-89.9: within x1.5 */
	expect_note(r, 60, "12.5", NULL);	  /* 1e3 / 16 - 1e3 / 20 ns a packet */
	/* the header's figure counts too: 60 against 91 */
	expect_note(r, 91, "-",
		    "(xdp64: measured +ns not shown: the transfer moved 60-91 ns (header and "
		    "rounds: over x1.5))\n");
	/* exactly x1.5 is in the band; just over it is not */
	r[1].xfer_ns[1] = 90;
	expect_note(r, 60, "12.5", NULL);
	r[1].xfer_ns[1] = 90.1;
	expect_note(r, 60, "-", "the transfer moved 60-90 ns");
	/* a round that did not measure it */
	r[1].xfer_ns[1] = NAN;
	expect_note(r, 60, "-",
		    "(xdp64: measured +ns not shown: 1 of 2 rounds measured the transfer)\n");
	r[1].xfer_ns[1] = 60;
	/* identity's runs spread over 10%, then strict's: each named alone */
	r[0].thr_s.spread = 0.11;
	expect_note(r, 60, "-",
		    "(xdp64: measured +ns not shown: identity's runs spread 11% (over 10%))\n");
	r[0].thr_s.spread = 0.10;
	r[1].thr_s.spread = 0.45;
	expect_note(r, 60, "-",
		    "(xdp64: measured +ns not shown: strict's runs spread 45% (over 10%))\n");
	r[1].thr_s.spread = 0.10; /* at the limits: shown */
	expect_note(r, 60, "12.5", NULL);
	/* everything at once, in one line */
	r[0].thr_s.spread = 0.5;
	r[1].thr_s.spread = 0.3;
	r[1].xfer_ns[0] = 200;
	expect_note(r, 60, "-",
		    "(xdp64: measured +ns not shown: the transfer moved 60-200 ns (header and "
		    "rounds: over x1.5); identity's runs spread 50% (over 10%); strict's runs "
		    "spread 30% (over 10%))\n");
	/* no transfer measured at all: no note */
	buf = note(r, 2, 0);
	assert_string_equal(buf, "");
	free(buf);
}

static struct dg_dma_dev *slots_dev(struct dg_iommu **mmu, struct dg_dma **dma,
				    struct dg_device **dev, enum dg_dma_policy policy)
{
	struct dg_iommu_config ic;
	struct dg_dma_dev_config dc;
	struct dg_dma_dev *dd;

	dg_iommu_config_init(&ic);
	ic.log = NULL;
	*mmu = dg_iommu_create(&ic);
	assert_non_null(*mmu);
	*dma = dg_dma_create(*mmu, NULL);
	assert_non_null(*dma);
	*dev = dg_device_create(*mmu, 7);
	assert_non_null(*dev);
	dg_dma_dev_config_init(&dc);
	dc.policy = policy;
	dd = dg_dma_dev_create(*dma, *dev, &dc);
	assert_non_null(dd);
	return dd;
}

static void slots_dev_fini(struct dg_iommu *mmu, struct dg_dma *dma, struct dg_device *dev,
			   struct dg_dma_dev *dd)
{
	assert_int_equal(dg_dma_dev_destroy(dd), 0);
	dg_device_destroy(dev);
	dg_dma_destroy(dma);
	dg_iommu_destroy(mmu);
}

/* Where the device reaches through @dma (NULL: it faults). */
static void *slots_reach(struct dg_device *dev, uint64_t dma)
{
	struct dg_sg sg;
	unsigned int nr = 0;
	int e = dg_dev_translate(dev, dma, 64, DG_ACCESS_WRITE, &sg, 1, &nr);

	dg_dev_offline(dev); /* the test thread is the device: waits must not wait for it */
	return e ? NULL : sg.addr;
}

static void test_slots(void **state)
{
	(void)state;
	struct dg_iommu *mmu;
	struct dg_dma *dma;
	struct dg_device *dev;
	struct dg_dma_dev *dd = slots_dev(&mmu, &dma, &dev, DG_DMA_STRICT);
	uint8_t *mem = aligned_alloc(4096, 8 * 4096);
	struct wl_slots s;
	struct dg_dma_batch b;
	uint64_t d[4], d2;
	uint32_t k[4], k2;

	assert_non_null(mem);
	assert_int_equal(wl_slots_init(&s, dd, 4, 64), 0);
	assert_int_equal(s.slot_bytes, 4096); /* whole granules */
	/* consecutive slots: consecutive pages of the range, the buffer's offset kept */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(wl_slots_link(&s, mem + i * 4096 + 128, 64, DG_DMA_FROM_DEVICE,
					       &d[i], &k[i]),
				 0);
		assert_int_equal(k[i], i);
		assert_int_equal(d[i], s.st.addr + (uint64_t)i * 4096 + 128);
		assert_ptr_equal(slots_reach(dev, d[i]), mem + i * 4096 + 128);
	}
	/* wrapped onto a linked slot: refused, nothing handed out */
	assert_int_equal(wl_slots_link(&s, mem + 4 * 4096, 64, DG_DMA_FROM_DEVICE, &d2, &k2),
			 -EEXIST);
	assert_int_equal(s.next, 0);
	/* unlinked in a batch that has not ended: still refused (the old page is mapped) */
	dg_dma_batch_begin(dd, &b);
	assert_int_equal(wl_slots_unlink(&s, 0, 64, DG_DMA_FROM_DEVICE, &b), 0);
	assert_int_equal(wl_slots_link(&s, mem + 4 * 4096, 64, DG_DMA_FROM_DEVICE, &d2, &k2),
			 -EEXIST);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_null(slots_reach(dev, d[0])); /* strict: gone once the batch ended */
	assert_int_equal(wl_slots_link(&s, mem + 4 * 4096 + 128, 64, DG_DMA_FROM_DEVICE, &d2, &k2),
			 0);
	assert_int_equal(k2, 0);
	assert_int_equal(d2, d[0]);
	assert_ptr_equal(slots_reach(dev, d2), mem + 4 * 4096 + 128);
	/* a wrong length is refused; the range cannot go while slots are linked */
	assert_int_equal(wl_slots_unlink(&s, 1, 65, DG_DMA_FROM_DEVICE, NULL), -EINVAL);
	assert_int_equal(wl_slots_fini(&s), -EBUSY);
	for (int i = 0; i < 4; i++)
		assert_int_equal(wl_slots_unlink(&s, (uint32_t)i, 64, DG_DMA_FROM_DEVICE, NULL), 0);
	assert_int_equal(wl_slots_fini(&s), 0);

	/* sg: pages apart in memory become one contiguous DMA segment under strict */
	struct dg_dma_sg sg[3] = {{.addr = mem + 6 * 4096, .len = 4096},
				  {.addr = mem + 2 * 4096, .len = 4096},
				  {.addr = mem + 4 * 4096, .len = 100}};
	unsigned int nr = 0;

	assert_int_equal(wl_slots_init(&s, dd, 2, 3 * 4096), 0);
	assert_int_equal(wl_slots_link_sg(&s, sg, 3, DG_DMA_TO_DEVICE, &nr, &k2), 0);
	assert_int_equal(nr, 1);
	assert_int_equal(sg[0].dma_addr, s.st.addr);
	assert_int_equal(sg[0].dma_len, 2 * 4096 + 100);
	assert_int_equal(s.next, 1);
	/* a list longer than a slot: refused with nothing linked */
	struct dg_dma_sg big[4] = {{.addr = mem, .len = 64},
				   {.addr = mem + 4096, .len = 64},
				   {.addr = mem + 8192, .len = 64},
				   {.addr = mem + 12288, .len = 64}};

	assert_int_equal(wl_slots_link_sg(&s, big, 4, DG_DMA_TO_DEVICE, &nr, &k2), -ERANGE);
	assert_int_equal(wl_slots_unlink_sg(&s, 0, sg, 3, DG_DMA_TO_DEVICE, NULL), 0);
	assert_int_equal(wl_slots_fini(&s), 0);
	slots_dev_fini(mmu, dma, dev, dd);

	/* identity: host addresses, so the same list stays three segments */
	dd = slots_dev(&mmu, &dma, &dev, DG_DMA_IDENTITY);
	assert_int_equal(wl_slots_init(&s, dd, 2, 3 * 4096), 0);
	assert_int_equal(wl_slots_link_sg(&s, sg, 3, DG_DMA_TO_DEVICE, &nr, &k2), 0);
	assert_int_equal(nr, 3);
	assert_int_equal(sg[1].dma_addr, (uintptr_t)(mem + 2 * 4096));
	assert_int_equal(wl_slots_unlink_sg(&s, 0, sg, 3, DG_DMA_TO_DEVICE, NULL), 0);
	assert_int_equal(wl_slots_fini(&s), 0);
	slots_dev_fini(mmu, dma, dev, dd);
	free(mem);
}

/* ---- the stuck-run watchdog ---------------------------------------------------------------- */

static void test_watch_verdict(void **state)
{
	const uint64_t lim = 10000000000ull; /* 10 s; a thread "ran" after 50 ms of CPU */
	int64_t all_ran[3] = {60000000, 2000000000, 50000000};
	int64_t one_starved[3] = {60000000, 0, 3000000000};
	int64_t exited[3] = {-1, 60000000, 70000000};

	(void)state;
	/* within the limit: wait, whatever ran */
	assert_int_equal(wl_watch_verdict(lim, lim, all_ran, 3), WL_WATCH_WAIT);
	/* past it, every live thread had the CPU and none moved: stuck */
	assert_int_equal(wl_watch_verdict(lim + 1, lim, all_ran, 3), WL_WATCH_STUCK);
	assert_int_equal(wl_watch_verdict(lim + 1, lim, exited, 3), WL_WATCH_STUCK);
	/* one of them did not get a CPU (49.9 ms is not enough): starvation, wait */
	one_starved[1] = 49999999;
	assert_int_equal(wl_watch_verdict(2 * lim, lim, one_starved, 3), WL_WATCH_WAIT);
	/* ... but not for ever: a thread that never runs again is reported */
	assert_int_equal(wl_watch_verdict(6 * lim, lim, one_starved, 3), WL_WATCH_WAIT);
	assert_int_equal(wl_watch_verdict(6 * lim + 1, lim, one_starved, 3), WL_WATCH_STARVED);
	assert_int_equal(wl_watch_verdict(6 * lim + 1, lim, all_ran, 3), WL_WATCH_STARVED);
}

/* A workload with no buffers: the driver does one I/O per poll, the device nothing. */
static atomic_bool starve_once;

static void no_classes(const struct wl_run *r, unsigned int port, struct wl_class *cls,
		       unsigned int *ncls)
{
	(void)r;
	(void)port;
	(void)cls;
	*ncls = 0;
}

static int fake_init(struct wl_port *p)
{
	(void)p;
	return 0;
}

static void fake_fini(struct wl_port *p)
{
	(void)p;
}

static bool fake_idle(const struct wl_port *p)
{
	(void)p;
	return true;
}

static bool fake_dev_poll(struct wl_dev *d, struct wl_port *p)
{
	(void)d;
	(void)p;
	return false;
}

#define STARVE_LIMIT_NS 300000000ull /* the watchdog limit of this test: 0.3 s */

/*
 * After its first I/O (the watchdog reads the CPU clocks at that progress, so the thread's
 * start-up does not count), the driver's thread gets no CPU for 3 watchdog limits once (a
 * sleep: what a pinned thread starved on a loaded machine looks like, see wl_run.c); then
 * one I/O per poll.
 */
static bool starved_drv_poll(struct wl_drv *d, struct wl_port *p)
{
	struct timespec ts = {0, 3 * STARVE_LIMIT_NS};

	(void)p;
	if (!d->posting)
		return false;
	wl_drv_poll_start(d);
	wl_drv_poll_end(d, 1, 64);
	if (atomic_exchange(&starve_once, false))
		nanosleep(&ts, NULL);
	return true;
}

static const struct wl_workload wl_starved = {
	.name = "starved",
	.summary = "a driver thread off its CPU for 3 watchdog limits",
	.unit = "Mpps",
	.io = "packet",
	.unit_div = 1e6,
	.max_threads = 1,
	.classes = no_classes,
	.port_init = fake_init,
	.port_fini = fake_fini,
	.drv_poll = starved_drv_poll,
	.drv_idle = fake_idle,
	.dev_poll = fake_dev_poll,
};

/*
 * A run whose driver thread does not run for 3 watchdog limits is not stuck: no progress
 * while a thread had no CPU is starvation (on this machine, seen for over 5 s under load).
 * The watchdog used to count wall time only and called it stuck (-ETIMEDOUT).
 */
static void test_watch_starved_run(void **state)
{
	struct wl_run_opts o = {.threads = 1, .ops = 100, .stuck_ns = STARVE_LIMIT_NS};
	struct wl_totals t = {0};
	double thr;

	(void)state;
	atomic_store(&starve_once, true);
	assert_int_equal(wl_run_once(&wl_starved, WL_IDENTITY, &o, &t, &thr), 0);
	assert_false(atomic_load(&starve_once)); /* the driver did sleep */
	assert_true(t.ios >= 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alternating_ratios),
		cmocka_unit_test(test_slots),
		cmocka_unit_test(test_round_ratios),
		cmocka_unit_test(test_derive),
		cmocka_unit_test(test_sg_copy),
		cmocka_unit_test(test_port_queues),
		cmocka_unit_test(test_threads_for),
		cmocka_unit_test(test_plot_ascii),
		cmocka_unit_test(test_report_xfer_rounds),
		cmocka_unit_test(test_transfers_note),
		cmocka_unit_test(test_watch_verdict),
		cmocka_unit_test(test_watch_starved_run),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
