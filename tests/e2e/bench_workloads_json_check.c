/* SPDX-License-Identifier: MIT */
/*
 * bench_workloads_json_check FILE [WORKLOAD,...] - validate the JSON report of "dmaguard
 * bench" (the workloads suite) against the schema of docs/bench-json.md:
 *  - the document: tool, suite "workloads", machine {cpu_model, cores, cacheline_transfer_ns
 *    (check_xfer: positive and finite, present)}, run {...};
 *  - every workload (all nine, or the list given) x every configuration is there exactly once,
 *    with the documented fields of the documented types;
 *  - values: throughput > 0, ratio_to_identity > 0 and finite (1 for the baselines), the
 *    baseline named (identity; identity-2step for the two-step configurations) and its
 *    throughput repeated in every row it is the baseline of, one ratio sample per round;
 *  - the cache-line transfer of every round (cacheline_transfer_ns_samples, check_round_xfer:
 *    one per round, positive and finite or null where not measured, the same in every row of
 *    a workload) and the round of every throughput sample (throughput_sample_rounds);
 *    ratio_samples in the rounds' order (check_ratio_order);
 *  - counters consistent: every streaming map of a run was unmapped, no fault, no error,
 *    I/Os done, and what each configuration must or must not do: identity reaches all memory
 *    and never invalidates (identity-2step too); strict, strict-2step and the Linux-like
 *    reference have no window and wait (the
 *    reference at least once per I/O); lazy has a window >= 0; bounce exposes no sub-page
 *    bytes and never invalidates; pool and window (direct) keep their memory exposed for
 *    good and never invalidate per I/O; the sub-page exposure of a strict (and strict-2step)
 *    xdp64 buffer is
 *    exactly 4096 - 64, of xdp64-2k 4096 - 2048, of xdp64-4k zero.
 * The report of `dmaguard bench machine` (suite "machine") is checked too: its machine section
 * as above and its one result, the same measurement.
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_check.h"

static const char *const workloads[] = {"xdp64",  "xdp64-2k", "xdp64-4k", "fwd64", "bond4",
					"tcp-x1", "tcp-x4",   "tcp-x8",	  "nvme4k"};
static const char *const units[] = {"Mpps",   "Mpps",	"Mpps",	  "Mpps", "Gbit/s",
				    "Gbit/s", "Gbit/s", "Gbit/s", "IOPS"};
#define NWL (sizeof(workloads) / sizeof(workloads[0]))
static const char *const configs[] = {"identity",  "strict",	     "lazy",
				      "window",	   "bounce",	     "pool",
				      "linux-ref", "identity-2step", "strict-2step"};
#define IDENTITY_2STEP 7
#define NCFG	       (sizeof(configs) / sizeof(configs[0]))

static const char *const number_fields[] = {"throughput",
					    "throughput_identity",
					    "ratio_to_identity",
					    "ratio_spread",
					    "ratio_min",
					    "ratio_max",
					    "driver_dma_ns_per_io",
					    "device_translate_ns_per_io",
					    "iotlb_misses_per_4k",
					    "walks_per_4k",
					    "invalidations_per_io",
					    "waits_per_io",
					    "driver_busy",
					    "device_busy",
					    "window_ns",
					    "subpage_exposed_bytes"};
static const char *const integer_fields[] = {"threads", "rounds", "window_unmaps",
					     "subpage_exposed_max", "persistent_exposed_bytes"};
static const char *const counter_fields[] = {"ios",    "bytes",	     "device_bytes", "maps",
					     "unmaps", "run_maps",   "run_unmaps",   "iotlb_misses",
					     "walks",  "inval_cmds", "waits",	     "faults",
					     "errors", "timeouts"};

static int index_of(const char *const *v, size_t n, const char *s)
{
	for (size_t i = 0; s && i < n; i++)
		if (!strcmp(v[i], s))
			return (int)i;
	return -1;
}

static double num(json_t *r, const char *k)
{
	json_t *v = json_object_get(r, k);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

static long long cnt(json_t *r, const char *k)
{
	json_t *v = json_object_get(json_object_get(r, "counters"), k);

	return json_is_integer(v) ? json_integer_value(v) : -1;
}

/*
 * machine.cacheline_transfer_ns (bench/machine.c): an object whose median, min and max are
 * positive and finite, min <= median <= max, with its spread, runs, round trips, the two CPUs
 * and the median with stalls; null only on a machine of one CPU (nothing to measure). A report
 * without it fails.
 */
static void check_xfer(json_t *machine)
{
	json_t *x = json_object_get(machine, "cacheline_transfer_ns");
	json_t *cpus = json_object_get(x, "cpus");
	double med = num(x, "median"), lo = num(x, "min"), hi = num(x, "max");

	EXPECT(x, "machine.cacheline_transfer_ns missing");
	if (!x)
		return;
	if (json_is_null(x)) {
		EXPECT(json_integer_value(json_object_get(machine, "cores")) < 2,
		       "machine.cacheline_transfer_ns null on %lld CPUs",
		       json_integer_value(json_object_get(machine, "cores")));
		return;
	}
	EXPECT(json_is_object(x), "machine.cacheline_transfer_ns not an object");
	EXPECT(med > 0 && isfinite(med), "machine.cacheline_transfer_ns.median %g", med);
	EXPECT(lo > 0 && isfinite(lo) && hi > 0 && isfinite(hi) && lo <= med && med <= hi,
	       "machine.cacheline_transfer_ns: min %g median %g max %g", lo, med, hi);
	EXPECT(num(x, "spread") >= 0 && isfinite(num(x, "spread")),
	       "machine.cacheline_transfer_ns.spread %g", num(x, "spread"));
	EXPECT(num(x, "wall_median") > 0 && isfinite(num(x, "wall_median")),
	       "machine.cacheline_transfer_ns.wall_median %g", num(x, "wall_median"));
	EXPECT(json_integer_value(json_object_get(x, "runs")) >= 1 &&
		       json_integer_value(json_object_get(x, "round_trips")) >= 1,
	       "machine.cacheline_transfer_ns: runs, round_trips");
	EXPECT(json_is_array(cpus) && json_array_size(cpus) == 2 &&
		       json_integer_value(json_array_get(cpus, 0)) !=
			       json_integer_value(json_array_get(cpus, 1)),
	       "machine.cacheline_transfer_ns.cpus: two different CPUs");
}

/* The report of `dmaguard bench machine`: the machine section and its one result. */
static int check_machine_report(json_t *root)
{
	json_t *results = json_object_get(root, "results"), *r = json_array_get(results, 0);
	json_t *x = json_object_get(json_object_get(root, "machine"), "cacheline_transfer_ns");

	check_xfer(json_object_get(root, "machine"));
	EXPECT(json_is_array(results) && json_array_size(results) == 1, "machine: one result");
	EXPECT(!strcmp(json_string_value(json_object_get(r, "case")) ?: "", "cacheline_transfer"),
	       "machine: case");
	EXPECT(json_equal(json_object_get(r, "ns_per_op"), x),
	       "machine: the result differs from the machine section");
	json_decref(root);
	if (fails)
		fprintf(stderr, "bench_workloads_json_check: %d failures\n", fails);
	return fails ? 1 : 0;
}

/* The run's rounds and --quick, the machine's cores, and the rounds' transfer figures seen. */
static long long run_rounds;
static bool run_quick;
static long long cores;
static int xfer_measured;
static json_t *xfer_of[NWL]; /* the first row's cacheline_transfer_ns_samples, per workload */

/*
 * cacheline_transfer_ns_samples (bench_workloads.c round_xfer()): one figure per round of the
 * run, each positive and finite, or null where it was not measured: every round of a run that
 * is not --quick (on two CPUs or more), the first round of the first workload only in --quick.
 * Every row of a workload has the same figures (one measurement per round, before its runs).
 * throughput_sample_rounds: the round of each throughput sample, in order; a policy's row has
 * one sample per round, the same ones as its ratio_samples.
 */
static void check_round_xfer(json_t *r, const char *wl, const char *cfg, int w, bool id)
{
	json_t *x = json_object_get(r, "cacheline_transfer_ns_samples"), *v;
	json_t *rounds = json_object_get(r, "throughput_sample_rounds");
	json_t *thr = json_object_get(r, "throughput_samples");
	size_t i;
	long long prev = 0;

	EXPECT(json_is_array(x) && (long long)json_array_size(x) == run_rounds,
	       "%s/%s: cacheline_transfer_ns_samples: %zu, not one per round (%lld)", wl, cfg,
	       json_is_array(x) ? json_array_size(x) : 0, run_rounds);
	json_array_foreach(x, i, v)
	{
		double ns = json_is_number(v) ? json_number_value(v) : NAN;

		EXPECT(json_is_null(v) || (ns > 0 && isfinite(ns)),
		       "%s/%s: cacheline_transfer_ns_samples[%zu] %g", wl, cfg, i, ns);
		EXPECT(!json_is_null(v) || run_quick || cores < 2,
		       "%s/%s: cacheline_transfer_ns_samples[%zu] null in a run that is not "
		       "--quick",
		       wl, cfg, i);
		xfer_measured += !json_is_null(v);
	}
	if (!xfer_of[w])
		xfer_of[w] = x;
	EXPECT(json_equal(x, xfer_of[w]),
	       "%s/%s: cacheline_transfer_ns_samples differ from the workload's other rows", wl,
	       cfg);
	EXPECT(json_is_array(rounds) && json_is_array(thr) &&
		       json_array_size(rounds) == json_array_size(thr),
	       "%s/%s: throughput_sample_rounds: not one per throughput sample", wl, cfg);
	json_array_foreach(rounds, i, v)
	{
		long long k = json_is_integer(v) ? json_integer_value(v) : -1;

		EXPECT(k >= prev && k < run_rounds && (id || k == (long long)i),
		       "%s/%s: throughput_sample_rounds[%zu] %lld", wl, cfg, i, k);
		prev = k;
	}
}

/*
 * ratio_samples in the rounds' order (bench_workloads.c, wl_round_ratios()): round i's ratio is
 * throughput_samples[i] over the mean of two of the baseline's runs, the one before (its
 * round i, or the previous round's last) and the one after (its round i): some pair of the
 * baseline's samples of rounds i - 1 and i must give throughput_samples[i] / ratio_samples[i].
 * A sorted array puts another round's ratio there.
 */
static void check_ratio_order(json_t *r, json_t *base, const char *wl, const char *cfg)
{
	json_t *ratios = json_object_get(r, "ratio_samples"), *v;
	json_t *thr = json_object_get(r, "throughput_samples");
	json_t *bthr = json_object_get(base, "throughput_samples");
	json_t *brnd = json_object_get(base, "throughput_sample_rounds");
	size_t i;

	json_array_foreach(ratios, i, v)
	{
		double want = json_number_value(json_array_get(thr, i)) / json_number_value(v);
		bool found = false;

		if (json_is_null(v))
			continue;
		for (size_t p = 0; p < json_array_size(bthr) && !found; p++)
			for (size_t q = p + 1; q < json_array_size(bthr) && !found; q++) {
				long long rp = json_integer_value(json_array_get(brnd, p));
				long long rq = json_integer_value(json_array_get(brnd, q));
				double m = (json_number_value(json_array_get(bthr, p)) +
					    json_number_value(json_array_get(bthr, q))) /
					   2;

				found = rq == (long long)i && (rp == rq || rp + 1 == rq) &&
					fabs(m - want) <= 1e-9 * fabs(want);
			}
		EXPECT(found,
		       "%s/%s: ratio_samples[%zu] %g: no pair of the baseline's runs of its round "
		       "gives it (not in the rounds' order?)",
		       wl, cfg, i, json_number_value(v));
	}
}

static void check_result(json_t *r, const char *wl, const char *cfg, int w)
{
	const char *unit = json_string_value(json_object_get(r, "unit"));
	json_t *ratios = json_object_get(r, "ratio_samples");
	bool id = !strcmp(cfg, "identity") || !strcmp(cfg, "identity-2step");
	const char *base = json_string_value(json_object_get(r, "baseline"));

	for (size_t k = 0; k < sizeof(number_fields) / sizeof(number_fields[0]); k++)
		EXPECT(json_is_number(json_object_get(r, number_fields[k])), "%s/%s: %s number", wl,
		       cfg, number_fields[k]);
	for (size_t k = 0; k < sizeof(integer_fields) / sizeof(integer_fields[0]); k++)
		EXPECT(json_is_integer(json_object_get(r, integer_fields[k])), "%s/%s: %s integer",
		       wl, cfg, integer_fields[k]);
	for (size_t k = 0; k < sizeof(counter_fields) / sizeof(counter_fields[0]); k++)
		EXPECT(cnt(r, counter_fields[k]) >= 0, "%s/%s: counters.%s", wl, cfg,
		       counter_fields[k]);
	EXPECT(json_is_string(json_object_get(r, "io")), "%s/%s: io", wl, cfg);
	EXPECT(base && !strcmp(base, strstr(cfg, "-2step") ? "identity-2step" : "identity"),
	       "%s/%s: baseline %s", wl, cfg, base ? base : "(none)");
	EXPECT(json_is_string(json_object_get(r, "exposure")), "%s/%s: exposure", wl, cfg);
	EXPECT(json_is_boolean(json_object_get(r, "exposes_all_memory")),
	       "%s/%s: exposes_all_memory", wl, cfg);
	EXPECT(json_is_true(json_object_get(r, "ok")), "%s/%s: ok", wl, cfg);
	EXPECT(unit && !strcmp(unit, units[w]), "%s/%s: unit %s, expected %s", wl, cfg,
	       unit ? unit : "(none)", units[w]);

	double thr = num(r, "throughput"), ratio = num(r, "ratio_to_identity");

	EXPECT(thr > 0 && isfinite(thr), "%s/%s: throughput %g", wl, cfg, thr);
	EXPECT(ratio > 0 && isfinite(ratio), "%s/%s: ratio %g", wl, cfg, ratio);
	EXPECT(num(r, "ratio_min") <= ratio && ratio <= num(r, "ratio_max"),
	       "%s/%s: ratio outside [min, max]", wl, cfg);
	EXPECT(json_is_array(ratios) && (long long)json_array_size(ratios) ==
						json_integer_value(json_object_get(r, "rounds")),
	       "%s/%s: one ratio sample per round", wl, cfg);
	EXPECT(json_is_array(json_object_get(r, "throughput_samples")), "%s/%s: throughput_samples",
	       wl, cfg);
	check_round_xfer(r, wl, cfg, w, id);
	/* counters */
	EXPECT(cnt(r, "run_maps") == cnt(r, "run_unmaps"), "%s/%s: %lld maps but %lld unmaps", wl,
	       cfg, cnt(r, "run_maps"), cnt(r, "run_unmaps"));
	EXPECT(cnt(r, "faults") == 0, "%s/%s: %lld faults", wl, cfg, cnt(r, "faults"));
	EXPECT(cnt(r, "errors") == 0, "%s/%s: %lld errors", wl, cfg, cnt(r, "errors"));
	EXPECT(cnt(r, "ios") > 0 && cnt(r, "bytes") > 0 && cnt(r, "device_bytes") > 0,
	       "%s/%s: no I/O measured", wl, cfg);
	EXPECT(cnt(r, "maps") > 0, "%s/%s: no maps measured", wl, cfg);
	EXPECT(cnt(r, "walks") <= cnt(r, "iotlb_misses") + cnt(r, "ios"),
	       "%s/%s: more walks than misses", wl, cfg);
	EXPECT(num(r, "driver_dma_ns_per_io") >= 0 && num(r, "device_translate_ns_per_io") >= 0,
	       "%s/%s: negative time", wl, cfg);
	EXPECT(num(r, "driver_busy") >= 0 && num(r, "driver_busy") <= 1 &&
		       num(r, "device_busy") >= 0 && num(r, "device_busy") <= 1,
	       "%s/%s: busy fractions %g %g", wl, cfg, num(r, "driver_busy"),
	       num(r, "device_busy"));

	/* what each configuration does and protects */
	double win = num(r, "window_ns"), sub = num(r, "subpage_exposed_bytes");
	double inval = num(r, "invalidations_per_io"), waits = num(r, "waits_per_io");
	bool all = json_is_true(json_object_get(r, "exposes_all_memory"));
	long long persist = json_integer_value(json_object_get(r, "persistent_exposed_bytes"));

	if (id) {
		EXPECT(ratio == 1.0, "%s/%s: ratio %g", wl, cfg, ratio);
		EXPECT(all && win == -1, "%s/%s: must expose all memory for good", wl, cfg);
		EXPECT(inval == 0 && waits == 0 && num(r, "iotlb_misses_per_4k") == 0,
		       "%s/%s: translated or invalidated", wl, cfg);
	} else {
		EXPECT(!all, "%s/%s: exposes all memory", wl, cfg);
	}
	if (!strcmp(cfg, "strict") || !strcmp(cfg, "linux-ref") || !strcmp(cfg, "strict-2step")) {
		EXPECT(win == 0, "%s/%s: window %g", wl, cfg, win);
		EXPECT(waits > 0 && inval > 0, "%s/%s: no invalidation", wl, cfg);
		/* The other configurations run leaf-direct devices (docs/iommu.md), which read
		   the cached last-level table and may not miss at all in a short window. */
		if (!strcmp(cfg, "linux-ref"))
			EXPECT(num(r, "iotlb_misses_per_4k") > 0, "%s/%s: no IOTLB miss", wl, cfg);
	}
	/* One wait per page unmapped, counted against the interval's unmaps (per I/O, the
	 * interval's ends cut I/Os in flight: 0.85 in a --quick window on a loaded machine, and
	 * twice 0.15-0.49 under ASan at load 8-15, where a starved driver's interval held few
	 * I/Os). Batched unmaps give 1/64 or less, so 0.5 still tells the two apart. */
	if (!strcmp(cfg, "linux-ref"))
		EXPECT(cnt(r, "waits") >= cnt(r, "unmaps") / 2,
		       "%s/linux-ref: %lld waits for %lld unmaps, expected one per page", wl,
		       cnt(r, "waits"), cnt(r, "unmaps"));
	if (!strcmp(cfg, "lazy"))
		EXPECT(win >= 0, "%s/lazy: window %g", wl, win);
	if (!strcmp(cfg, "bounce"))
		EXPECT(sub == 0 && inval == 0 && waits == 0 && win == 0,
		       "%s/bounce: sub-page %g, %g invalidations per I/O, window %g", wl, sub,
		       inval, win);
	if (!strcmp(cfg, "pool") || !strcmp(cfg, "window"))
		EXPECT(win == -1 && persist > 0 && inval == 0,
		       "%s/%s: window %g, %lld bytes exposed for good, %g invalidations per I/O",
		       wl, cfg, win, persist, inval);
	if ((!strcmp(cfg, "strict") || !strcmp(cfg, "strict-2step")) && w <= 2) {
		double want = w == 0 ? 4096 - 64 : w == 1 ? 4096 - 2048 : 0;

		EXPECT(fabs(sub - want) < 0.5, "%s/%s: %g sub-page bytes, expected %g", wl, cfg,
		       sub, want);
	}
}

int main(int argc, char **argv)
{
	int seen[NWL][NCFG] = {{0}};
	bool want[NWL];
	double ident[NWL][2] = {{0}}; /* identity, identity-2step */
	json_t *base_row[NWL][2] = {{NULL}};
	json_t *root, *results, *r, *machine;
	size_t i;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: bench_workloads_json_check FILE [WORKLOAD,...]\n");
		return 2;
	}
	for (size_t w = 0; w < NWL; w++)
		want[w] = argc == 2;
	if (argc == 3) {
		char *list = strdup(argv[2]), *save = NULL;

		for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			int w = index_of(workloads, NWL, t);

			EXPECT(w >= 0, "unknown workload %s", t);
			if (w >= 0)
				want[w] = true;
		}
		free(list);
	}
	root = jc_load(argv[1]);
	if (!root)
		return 1;
	EXPECT(!strcmp(json_string_value(json_object_get(root, "tool")) ?: "", "dmaguard"), "tool");
	machine = json_object_get(root, "machine");
	EXPECT(json_is_string(json_object_get(machine, "cpu_model")), "machine.cpu_model");
	EXPECT(json_integer_value(json_object_get(machine, "cores")) >= 1, "machine.cores");
	if (!strcmp(json_string_value(json_object_get(root, "suite")) ?: "", "machine"))
		return check_machine_report(root);
	EXPECT(!strcmp(json_string_value(json_object_get(root, "suite")) ?: "", "workloads"),
	       "suite");
	check_xfer(machine);
	run_rounds = json_integer_value(json_object_get(json_object_get(root, "run"), "rounds"));
	run_quick = json_is_true(json_object_get(json_object_get(root, "run"), "quick"));
	cores = json_integer_value(json_object_get(machine, "cores"));
	EXPECT(run_rounds >= 1, "run.rounds");
	results = json_object_get(root, "results");
	EXPECT(json_is_array(results), "results");
	json_array_foreach(results, i, r)
	{
		const char *wl = json_string_value(json_object_get(r, "workload"));
		const char *cfg = json_string_value(json_object_get(r, "policy"));
		int w = index_of(workloads, NWL, wl), c = index_of(configs, NCFG, cfg);

		EXPECT(w >= 0 && c >= 0, "result %zu: workload %s policy %s", i, wl ? wl : "?",
		       cfg ? cfg : "?");
		if (w < 0 || c < 0)
			continue;
		seen[w][c]++;
		check_result(r, wl, cfg, w);
		if (c == 0 || c == IDENTITY_2STEP) {
			ident[w][c != 0] = num(r, "throughput");
			base_row[w][c != 0] = r;
		}
	}
	json_array_foreach(results, i, r)
	{
		int w = index_of(workloads, NWL, json_string_value(json_object_get(r, "workload")));
		const char *cfg = json_string_value(json_object_get(r, "policy"));
		bool two = cfg && strstr(cfg, "-2step");

		if (w >= 0)
			EXPECT(num(r, "throughput_identity") == ident[w][two],
			       "result %zu: throughput_identity differs from its baseline's", i);
		if (w >= 0 && base_row[w][two] && base_row[w][two] != r)
			check_ratio_order(r, base_row[w][two], workloads[w], cfg);
	}
	for (size_t w = 0; w < NWL; w++)
		for (size_t c = 0; c < NCFG; c++)
			EXPECT(seen[w][c] == (want[w] ? 1 : 0), "%s/%s: %d results", workloads[w],
			       configs[c], seen[w][c]);
	EXPECT(xfer_measured || cores < 2 || !json_array_size(results),
	       "cacheline_transfer_ns_samples: no round measured the transfer");
	json_decref(root);
	if (fails)
		fprintf(stderr, "bench_workloads_json_check: %d failures\n", fails);
	return fails ? 1 : 0;
}
