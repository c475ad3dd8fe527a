/* SPDX-License-Identifier: MIT */
/*
 * bench/bench.h - the protocol every dmaguard benchmark follows (STYLE.md rule 12).
 *
 * A benchmark is a suite ("pt", "iova", "iotlb", ...) of named cases. Each case runs in one
 * of two modes:
 *  - timed: warm-up, then repeated fixed-size batches timed with CLOCK_MONOTONIC (one clock
 *    read per batch, never per operation); the result is ns per operation, reported as the
 *    median of several rounds with its spread, next to the baseline measured in the same run;
 *  - fixed count (--case NAME --ops N): exactly N operations, no timing loop, so that
 *    valgrind --tool=callgrind instruction counts of runs with 2N and N ops differ by exactly
 *    the cost of N operations.
 * Results go to stdout as a table and one grep-able summary line per case
 * ("RESULT suite=... case=... ns_per_op=..."), and to --json FILE (docs/bench-json.md).
 *
 * Suites register themselves with DG_BENCH_SUITE(); the dmaguard CLI dispatches by name.
 */
#ifndef DG_BENCH_BENCH_H
#define DG_BENCH_BENCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bench_suite {
	const char *name;		    /* "pt": dmaguard bench pt */
	const char *summary;		    /* one line for dmaguard bench --list */
	int (*main)(int argc, char **argv); /* argv[0] is the suite name; returns exit status */
	struct bench_suite *next;
};

void bench_register(struct bench_suite *suite);
struct bench_suite *bench_find(const char *name);
struct bench_suite *bench_suites(void);

#define DG_BENCH_SUITE(id, name_, summary_, main_)                         \
	static struct bench_suite bench_suite_##id = {                     \
		.name = name_, .summary = summary_, .main = main_};        \
	__attribute__((constructor)) static void bench_register_##id(void) \
	{                                                                  \
		bench_register(&bench_suite_##id);                         \
	}

/* Options every suite accepts (parsed by bench_parse_common). */
struct bench_opts {
	const char *json_path; /* --json FILE */
	const char *case_name; /* --case NAME: run only this case */
	uint64_t ops;	       /* --ops N: fixed-count mode (no timing) when non-zero */
	double duration_s;     /* --duration S: seconds per timed measurement */
	unsigned int threads;  /* --threads N (0: the suite's default) */
	unsigned int rounds;   /* --rounds N: timed repetitions for median and spread */
	bool quick;	       /* --quick: a smoke run of a few seconds in all */
	bool list;	       /* --list: print case names */
};

/*
 * Parse the common options; unknown options are left in argv (compacted, argc updated) for the
 * suite. Returns 0, or -EINVAL after printing the problem to stderr.
 */
int bench_parse_common(int *argc, char **argv, struct bench_opts *opts);
void bench_usage_common(FILE *out);
/*
 * An argument left after bench_parse_common() that suite @suite does not take: --help or -h
 * prints @usage on stdout and returns 0; anything else is reported, with @usage, on stderr
 * and returns 2 (a usage error). The suite's main returns what this returns.
 */
int bench_help_or_unknown(const char *suite, const char *arg, void (*usage)(FILE *out));

/* True when case @name is selected by --case (or no --case given). */
bool bench_case_selected(const struct bench_opts *opts, const char *name);

/* Monotonic ns. */
uint64_t bench_now_ns(void);

/* Keep @p alive so the compiler cannot drop the work that produced it. */
static inline void bench_do_not_optimize(const void *p)
{
	__asm__ __volatile__("" : : "r"(p) : "memory");
}

/* Pin the calling thread to CPU @cpu modulo the CPUs available; returns 0 or -errno. */
int bench_pin_cpu(unsigned int cpu);
unsigned int bench_ncpus(void);

/*
 * Statistics over a sample (bench/stats.c). The array is sorted in place.
 * spread is (max - min) / median, 0 for fewer than two samples.
 */
struct bench_summary {
	double median;
	double min;
	double max;
	double mean;
	double spread;
	double p90;
	double p99;
	size_t n;
};
void bench_summarize(double *samples, size_t n, struct bench_summary *out);
/*
 * Ratios of runs alternated with a baseline, each divided by the mean of the baseline runs
 * just before and just after it (B0 V0 B1 V1 B2 ...: before[i] = B_i, after[i] = B_i+1):
 * ratio[k] = value[i] / ((before[i] + after[i]) / 2), leaving out runs whose baseline is not
 * a positive finite number or whose value is negative or not finite. The k ratios kept are
 * summarized (sorted in place) into @out; returns k.
 */
size_t bench_alternating_ratios(const double *value, const double *before, const double *after,
				size_t n, double *ratio, struct bench_summary *out);
/* Linear-interpolated percentile (0..100) of a sorted array. */
double bench_percentile_sorted(const double *sorted, size_t n, double pct);

/*
 * Log2 latency histogram (ns): bucket i counts values in [2^i, 2^(i+1)); percentiles
 * interpolate inside a bucket. Cheap enough to record per operation in a thread.
 */
#define BENCH_HIST_BUCKETS 48
struct bench_hist {
	uint64_t bucket[BENCH_HIST_BUCKETS];
	uint64_t count;
	uint64_t max;
};
void bench_hist_add(struct bench_hist *h, uint64_t value);
void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src);
double bench_hist_percentile(const struct bench_hist *h, double pct);

/*
 * The JSON report: {"tool", "version", "suite", "machine": {cpu_model, cores[,
 * cacheline_transfer_ns]}, "results": [...]}.
 * Each result is an object the suite builds; bench_report_write() writes it to opts->json_path.
 */
struct bench_report {
	json_t *root;
	json_t *results;
};
int bench_report_init(struct bench_report *r, const char *suite);
void bench_report_add(struct bench_report *r, json_t *result); /* takes the reference */
int bench_report_write(struct bench_report *r, const char *path);
void bench_report_fini(struct bench_report *r);
/* bench_report_write() then bench_report_fini(); returns 0, or 1 if the write failed. */
int bench_report_close(struct bench_report *r, const char *path);

/* Machine facts for reports. */
const char *bench_cpu_model(void);

/*
 * The cost of one cache-line transfer between two cores (bench/machine.c): two threads pinned
 * on CPUs @cpu_a and @cpu_b (bench_pin_cpu() numbering) pass one line back and forth for @runs
 * runs of @run_s seconds; ns holds the ns per one-way transfer over the runs (median, spread).
 * With fewer than two CPUs, or a thread that could not be pinned, measured is false. Returns
 * 0 or -errno (no thread could be started).
 */
struct bench_xfer {
	struct bench_summary ns;   /* ns per one-way transfer: each run's median batch */
	struct bench_summary wall; /* each run's whole time / its transfers: stalls included */
	uint64_t round_trips;	   /* over all runs */
	unsigned int cpu[2];
	bool measured;
};
#define BENCH_XFER_RUNS	       5
#define BENCH_XFER_RUN_S       0.02  /* dmaguard bench workloads: 0.1 s in all */
#define BENCH_XFER_QUICK_RUN_S 0.004 /* --quick: 20 ms in all */
int bench_xfer_measure(unsigned int cpu_a, unsigned int cpu_b, unsigned int runs, double run_s,
		       struct bench_xfer *out);
/*
 * The measurement this process's reports carry: bench_report_init() puts it in the machine
 * section ("cacheline_transfer_ns", docs/bench-json.md) once a suite has set it.
 */
void bench_machine_set_xfer(const struct bench_xfer *x);
const struct bench_xfer *bench_machine_xfer(void); /* NULL until set */
/* {median, min, max, spread, wall_median, runs, round_trips, cpus}; null when not measured. */
json_t *bench_xfer_json(const struct bench_xfer *x);
/* One line for a report's header ("cache-line transfer CPU 0 <-> 1: 66 ns one way ..."). */
void bench_xfer_format(char *buf, size_t n, const struct bench_xfer *x);

#endif /* DG_BENCH_BENCH_H */
