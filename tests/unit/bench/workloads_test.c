/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of what the workloads suite adds to the benchmark protocol: alternated ratios
 * (bench_alternating_ratios) against values computed by hand, the per-I/O figures derived from
 * a run's counters, the sg copies the emulated devices use (across segment boundaries, with
 * offsets), the spreading of queues over ports, and the ASCII bar chart.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wl.h"
#include "wl_nic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	assert_true(r.window_ns == 0 && r.subpage == 4032);

	r.cfg = WL_LAZY;
	r.tot.lazy_window_ns = 1234;
	wl_result_derive(&r);
	assert_true(r.window_ns == 1234);
	for (enum wl_cfg c = WL_IDENTITY; c < WL_NCFG; c++) {
		r.cfg = c;
		wl_result_derive(&r);
		if (c == WL_IDENTITY || c == WL_POOL || c == WL_WINDOW)
			assert_true(r.window_ns == -1);
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

static void test_plot_ascii(void **state)
{
	(void)state;
	struct wl_result r[3] = {{.wl = &wl_xdp64, .cfg = WL_IDENTITY},
				 {.wl = &wl_xdp64, .cfg = WL_STRICT},
				 {.wl = &wl_fwd64, .cfg = WL_POOL}};
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	r[0].ratio_s.median = 1.0;
	r[1].ratio_s.median = 0.5;
	r[2].ratio_s.median = 2.0; /* the longest bar sets the scale */
	wl_plot_ascii(f, r, 3, 20);
	fclose(f);
	/* identity: 10 of 20 columns, then the 1.0 mark right after */
	assert_non_null(strstr(buf, "xdp64     identity   1.000 ##########|"));
	assert_non_null(strstr(buf, "          strict     0.500 #####     |"));
	assert_non_null(strstr(buf, "fwd64     pool       2.000 ####################"));
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alternating_ratios),
		cmocka_unit_test(test_derive),
		cmocka_unit_test(test_sg_copy),
		cmocka_unit_test(test_port_queues),
		cmocka_unit_test(test_threads_for),
		cmocka_unit_test(test_plot_ascii),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
