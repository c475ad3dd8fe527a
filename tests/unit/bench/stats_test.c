/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the benchmark statistics: median, spread and percentiles against values
 * computed directly from a sorted array, and histogram percentiles against the exact ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_summary_odd_even(void **state)
{
	(void)state;
	double odd[] = {5, 1, 4, 2, 3};
	double even[] = {10, 40, 20, 30};
	struct bench_summary s;

	bench_summarize(odd, 5, &s);
	assert_true(s.median == 3);
	assert_true(s.min == 1 && s.max == 5);
	assert_true(s.mean == 3);
	assert_true(fabs(s.spread - 4.0 / 3.0) < 1e-12);
	assert_true(odd[0] == 1 && odd[4] == 5); /* sorted in place */

	bench_summarize(even, 4, &s);
	assert_true(s.median == 25);
	assert_true(fabs(s.p90 - 37) < 1e-12); /* 0.9 * 3 = 2.7 -> 30 + 0.7 * 10 */
}

static void test_summary_empty_single(void **state)
{
	(void)state;
	double one = 7;
	struct bench_summary s;

	bench_summarize(&one, 1, &s);
	assert_true(s.median == 7 && s.spread == 0 && s.p99 == 7);
	bench_summarize(NULL, 0, &s);
	assert_true(isnan(s.median) && s.n == 0);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void test_percentile_random(void **state)
{
	(void)state;
	enum { N = 1001 };
	double v[N];
	uint64_t x = 88172645463325252ull;

	for (int i = 0; i < N; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		v[i] = (double)(x % 100000);
	}
	qsort(v, N, sizeof(v[0]), cmp_double);
	/* N - 1 = 1000 makes every tenth of a percent land on an element exactly. */
	for (int p = 0; p <= 1000; p += 7)
		assert_true(fabs(bench_percentile_sorted(v, N, p / 10.0) - v[p]) < 1e-6);
	/* Halfway between two ranks interpolates linearly. */
	assert_true(fabs(bench_percentile_sorted(v, N, 50.05) - (v[500] + v[501]) / 2) < 1e-6);
}

static void test_histogram(void **state)
{
	(void)state;
	struct bench_hist h, h2;

	memset(&h, 0, sizeof(h));
	memset(&h2, 0, sizeof(h2));
	for (uint64_t i = 1; i <= 1000; i++)
		bench_hist_add(i <= 500 ? &h : &h2, i);
	bench_hist_merge(&h, &h2);
	assert_int_equal(h.count, 1000);
	assert_int_equal(h.max, 1000);
	/* A log2 histogram answers within its bucket: the true value v lies in [v/2, 2v]. */
	for (int p = 1; p <= 100; p++) {
		double exact = 10.0 * p, got = bench_hist_percentile(&h, p);
		assert_true(got >= exact / 2 && got <= exact * 2);
	}
	assert_true(bench_hist_percentile(&h, 100) == 1000);
	memset(&h2, 0, sizeof(h2));
	assert_true(isnan(bench_hist_percentile(&h2, 50)));
}

static void test_parse_common(void **state)
{
	(void)state;
	char a0[] = "pt", a1[] = "--json", a2[] = "x.json", a3[] = "--mine", a4[] = "--ops",
	     a5[] = "100", a6[] = "--quick";
	char *argv[] = {a0, a1, a2, a3, a4, a5, a6, NULL};
	int argc = 7;
	struct bench_opts o;

	assert_int_equal(bench_parse_common(&argc, argv, &o), 0);
	assert_int_equal(argc, 2);
	assert_string_equal(argv[1], "--mine");
	assert_string_equal(o.json_path, "x.json");
	assert_int_equal(o.ops, 100);
	assert_true(o.quick);

	char b0[] = "pt", b1[] = "--ops", b2[] = "-3";
	char *bad[] = {b0, b1, b2, NULL};
	argc = 3;
	assert_int_equal(bench_parse_common(&argc, bad, &o), -22);
	char c0[] = "pt", c1[] = "--threads";
	char *missing[] = {c0, c1, NULL};
	argc = 2;
	assert_int_equal(bench_parse_common(&argc, missing, &o), -22);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_summary_odd_even),
		cmocka_unit_test(test_summary_empty_single),
		cmocka_unit_test(test_percentile_random),
		cmocka_unit_test(test_histogram),
		cmocka_unit_test(test_parse_common),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
