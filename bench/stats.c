/* SPDX-License-Identifier: MIT */
/*
 * bench/stats.c - median, spread and percentiles of benchmark samples, and a log2 latency
 * histogram. Unit-tested against a sorted array in tests/unit/bench/.
 */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_percentile_sorted(const double *sorted, size_t n, double pct)
{
	if (!n)
		return NAN;
	if (pct <= 0)
		return sorted[0];
	if (pct >= 100)
		return sorted[n - 1];
	double pos = pct / 100.0 * (double)(n - 1);
	size_t lo = (size_t)pos;
	double frac = pos - (double)lo;

	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

void bench_summarize(double *samples, size_t n, struct bench_summary *out)
{
	double sum = 0;

	out->n = n;
	if (!n) {
		out->median = out->min = out->max = out->mean = out->p90 = out->p99 = NAN;
		out->spread = 0;
		return;
	}
	qsort(samples, n, sizeof(*samples), cmp_double);
	for (size_t i = 0; i < n; i++)
		sum += samples[i];
	out->min = samples[0];
	out->max = samples[n - 1];
	out->mean = sum / (double)n;
	out->median = bench_percentile_sorted(samples, n, 50);
	out->p90 = bench_percentile_sorted(samples, n, 90);
	out->p99 = bench_percentile_sorted(samples, n, 99);
	out->spread = (n > 1 && out->median != 0) ? (out->max - out->min) / fabs(out->median) : 0;
}

void bench_hist_add(struct bench_hist *h, uint64_t value)
{
	unsigned int b = value ? 63u - (unsigned int)__builtin_clzll(value) : 0;

	if (b >= BENCH_HIST_BUCKETS)
		b = BENCH_HIST_BUCKETS - 1;
	h->bucket[b]++;
	h->count++;
	if (value > h->max)
		h->max = value;
}

void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src)
{
	for (unsigned int i = 0; i < BENCH_HIST_BUCKETS; i++)
		dst->bucket[i] += src->bucket[i];
	dst->count += src->count;
	if (src->max > dst->max)
		dst->max = src->max;
}

double bench_hist_percentile(const struct bench_hist *h, double pct)
{
	if (!h->count)
		return NAN;
	if (pct < 0)
		pct = 0;
	if (pct > 100)
		pct = 100;
	/* The rank of the wanted value, 1-based; find its bucket, interpolate inside it. */
	double rank = pct / 100.0 * (double)h->count;
	uint64_t seen = 0;

	if (rank < 1)
		rank = 1;
	for (unsigned int i = 0; i < BENCH_HIST_BUCKETS; i++) {
		if (!h->bucket[i])
			continue;
		if ((double)(seen + h->bucket[i]) >= rank) {
			double lo = i ? (double)(1ull << i) : 0;
			double hi = (double)(1ull << (i + 1));
			double v = lo + (hi - lo) * ((rank - (double)seen) / (double)h->bucket[i]);
			return v > (double)h->max ? (double)h->max : v;
		}
		seen += h->bucket[i];
	}
	return (double)h->max;
}

size_t bench_alternating_ratios(const double *value, const double *before, const double *after,
				size_t n, double *ratio, struct bench_summary *out)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		double base = (before[i] + after[i]) / 2;

		/* a baseline that measured nothing says nothing about this run */
		if (!(base > 0) || !(value[i] >= 0) || isinf(base) || isinf(value[i]))
			continue;
		ratio[k++] = value[i] / base;
	}
	bench_summarize(ratio, k, out);
	return k;
}
