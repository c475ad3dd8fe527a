/* SPDX-License-Identifier: MIT */
/*
 * bench/machine.c - what one cache line costs to move from one core to the other, measured
 * where the workloads run: the number that explains strict's remaining cost over identity
 * (docs/bench.md "Reading the table", docs/iommu.md "Shared cache lines"), and the suite
 * "machine" (`dmaguard bench machine`) that prints it alone.
 *
 * Two threads, pinned on the driver's and the device's CPUs of the workloads' first thread
 * pair (bench_pin_cpu(0) and (1), bench/workloads/wl_run.c), pass one cache line back and
 * forth: a 64-byte-aligned line holding one counter and nothing else. The driver-side thread
 * stores an odd value (release) and spins until the line holds the next even value (acquire);
 * the device-side thread spins for the odd value and stores the next even one. Each store
 * finds the line in the other core's cache, so each round trip is two one-way transfers.
 *
 * Timing: the driver-side thread reads CLOCK_MONOTONIC once per batch of XFER_BATCH round
 * trips (a clock read costs ~40 ns, a round trip ~130 ns on the bench VM: a batch is ~35 us,
 * the clock 0.1% of it) and runs batches until the run's duration has passed. A run's result
 * is the median over its batches of batch time / (2 x XFER_BATCH): a batch in which a thread
 * lost its CPU to other work (a shared machine, milliseconds at a time) is an outlier the
 * median drops instead of averaging it in. The report is the median of several short runs
 * with its spread ((max - min) / median; bench_summarize(), the tested statistics of
 * bench/stats.c), and each run's whole time per transfer, stalls included (wall). The spin
 * loops have no pause instruction (in a test program one added up to ~10 ns per transfer); a
 * thread that spins for XFER_YIELD_SPINS loads without seeing its partner yields its CPU.
 *
 * With fewer than two CPUs the two threads would share one and the ping-pong would measure
 * the scheduler, so nothing is measured (measured = false, JSON null).
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XFER_BATCH	 256
#define XFER_MAX_BATCHES 8192 /* per run: ~0.3 s at 65 ns per transfer */
#define XFER_YIELD_SPINS (1u << 22)
#define XFER_WARMUP_RT	 2000
#define XFER_QUIT	 UINT64_MAX
/* dmaguard bench machine: seconds per run (the workloads' header takes BENCH_XFER_RUN_S) */
#define XFER_SUITE_RUN_S 0.1

/* The line the two threads pass: the counter alone on it. */
struct xfer_line {
	_Alignas(64) _Atomic uint64_t v;
	char pad[64 - sizeof(uint64_t)];
};

struct xfer_ctx {
	struct xfer_line line;
	_Alignas(64) _Atomic int ready; /* pinned partners (0..2); apart from the line */
	_Atomic int pin_failed;
	unsigned int cpu[2];
	unsigned int runs;
	double run_s;
	double *samples; /* runs: the median batch of each */
	double *wall;	 /* runs: each one's whole time / its transfers, stalls included */
	double batch[XFER_MAX_BATCHES];
	uint64_t round_trips;
};

/* Spin until the line holds @want (or XFER_QUIT); returns what it holds. */
static uint64_t xfer_wait(struct xfer_line *l, uint64_t want)
{
	unsigned int spins = 0;

	for (;;) {
		uint64_t v = atomic_load_explicit(&l->v, memory_order_acquire);

		if (v == want || v == XFER_QUIT)
			return v;
		if (++spins == XFER_YIELD_SPINS) {
			spins = 0;
			sched_yield();
		}
	}
}

static void xfer_start(struct xfer_ctx *c, unsigned int side)
{
	if (bench_pin_cpu(c->cpu[side]))
		atomic_store(&c->pin_failed, 1);
	atomic_fetch_add(&c->ready, 1);
	while (atomic_load(&c->ready) < 2)
		sched_yield();
}

/* The device-side thread: answer every odd value with the next even one until told to quit. */
static void *xfer_partner(void *arg)
{
	struct xfer_ctx *c = arg;
	uint64_t want = 1;

	xfer_start(c, 1);
	while (xfer_wait(&c->line, want) != XFER_QUIT) {
		atomic_store_explicit(&c->line.v, want + 1, memory_order_release);
		want += 2;
	}
	return NULL;
}

/* @n round trips from the driver side; *next is the next odd value to send. */
static void xfer_round_trips(struct xfer_ctx *c, uint64_t *next, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		atomic_store_explicit(&c->line.v, *next, memory_order_release);
		xfer_wait(&c->line, *next + 1);
		*next += 2;
	}
}

/* The driver-side thread: warm up, then the timed runs; finally tell the partner to quit. */
static void *xfer_driver(void *arg)
{
	struct xfer_ctx *c = arg;
	uint64_t next = 1;

	xfer_start(c, 0);
	/* unpinned threads could share a CPU, where each transfer would cost a time slice */
	if (atomic_load(&c->pin_failed))
		c->runs = 0;
	else
		xfer_round_trips(c, &next, XFER_WARMUP_RT);
	for (unsigned int r = 0; r < c->runs; r++) {
		uint64_t t0 = bench_now_ns(), t = t0, limit = (uint64_t)(c->run_s * 1e9);
		size_t nb = 0;
		struct bench_summary s;

		do {
			uint64_t tb = t;

			xfer_round_trips(c, &next, XFER_BATCH);
			t = bench_now_ns();
			c->batch[nb++] = (double)(t - tb) / (2.0 * XFER_BATCH);
		} while (t - t0 < limit && nb < XFER_MAX_BATCHES);
		bench_summarize(c->batch, nb, &s);
		c->samples[r] = s.median;
		c->wall[r] = (double)(t - t0) / (2.0 * XFER_BATCH * (double)nb);
		c->round_trips += nb * XFER_BATCH;
	}
	atomic_store_explicit(&c->line.v, XFER_QUIT, memory_order_release);
	return NULL;
}

int bench_xfer_measure(unsigned int cpu_a, unsigned int cpu_b, unsigned int runs, double run_s,
		       struct bench_xfer *out)
{
	struct xfer_ctx *c;
	pthread_t t[2];
	int e;

	memset(out, 0, sizeof(*out));
	out->cpu[0] = cpu_a;
	out->cpu[1] = cpu_b;
	out->ns.median = out->ns.min = out->ns.max = out->ns.mean = NAN;
	out->wall = out->ns;
	if (bench_ncpus() < 2 || cpu_a % bench_ncpus() == cpu_b % bench_ncpus() || !runs ||
	    !(run_s > 0))
		return 0;
	c = aligned_alloc(64, (sizeof(*c) + 63) / 64 * 64);
	if (!c)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->cpu[0] = cpu_a;
	c->cpu[1] = cpu_b;
	c->runs = runs;
	c->run_s = run_s;
	c->samples = calloc(runs, sizeof(double));
	c->wall = calloc(runs, sizeof(double));
	if (!c->samples || !c->wall) {
		free(c->samples);
		free(c->wall);
		free(c);
		return -ENOMEM;
	}
	e = pthread_create(&t[1], NULL, xfer_partner, c);
	if (!e) {
		e = pthread_create(&t[0], NULL, xfer_driver, c);
		if (e) { /* the partner waits for a ready driver: let it go */
			atomic_fetch_add(&c->ready, 1);
			atomic_store(&c->line.v, XFER_QUIT);
		} else {
			pthread_join(t[0], NULL);
		}
		pthread_join(t[1], NULL);
	}
	if (!e && !atomic_load(&c->pin_failed)) {
		bench_summarize(c->samples, runs, &out->ns);
		bench_summarize(c->wall, runs, &out->wall);
		out->round_trips = c->round_trips;
		out->measured = true;
	}
	free(c->samples);
	free(c->wall);
	free(c);
	return -e;
}

/* ---- the machine facts of this process's reports --------------------------------------------- */

static struct bench_xfer machine_xfer;
static bool machine_xfer_set;

void bench_machine_set_xfer(const struct bench_xfer *x)
{
	machine_xfer = *x;
	machine_xfer_set = true;
}

const struct bench_xfer *bench_machine_xfer(void)
{
	return machine_xfer_set ? &machine_xfer : NULL;
}

json_t *bench_xfer_json(const struct bench_xfer *x)
{
	const struct bench_summary *s = &x->ns;

	if (!x->measured || !(s->median > 0) || !isfinite(s->median) || !isfinite(s->min) ||
	    !isfinite(s->max))
		return json_null();
	return json_pack("{s:f, s:f, s:f, s:f, s:f, s:i, s:I, s:[i, i]}", "median", s->median,
			 "min", s->min, "max", s->max, "spread", s->spread, "wall_median",
			 isfinite(x->wall.median) ? x->wall.median : 0.0, "runs", (int)s->n,
			 "round_trips", (json_int_t)x->round_trips, "cpus", (int)x->cpu[0],
			 (int)x->cpu[1]);
}

void bench_xfer_format(char *buf, size_t n, const struct bench_xfer *x)
{
	if (!x || !x->measured)
		snprintf(buf, n, "cache-line transfer not measured (fewer than 2 CPUs)");
	else
		snprintf(buf, n,
			 "cache-line transfer CPU %u <-> %u: %.0f ns one way (median of %zu runs, "
			 "spread %.0f%%; %.0f ns with the threads' stalls)",
			 x->cpu[0], x->cpu[1], x->ns.median, x->ns.n, 100 * x->ns.spread,
			 x->wall.median);
}

/* ---- the suite ------------------------------------------------------------------------------- */

static void machine_usage(FILE *out)
{
	fprintf(out,
		"usage: dmaguard bench machine [OPTIONS]\n"
		"  the cost of one cache-line transfer between the CPUs the workloads pin their\n"
		"  driver and device threads on (CPU 0 and 1): ns per one-way transfer\n"
		"  --rounds N       runs (median and spread; default 5)\n"
		"  --duration S     seconds per run (default 0.1; --quick 0.004)\n\n");
	bench_usage_common(out);
}

static bool has_opt(int argc, char **argv, const char *opt)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], opt))
			return true;
	return false;
}

static int machine_main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_xfer x;
	struct bench_report rep;
	bool dur = has_opt(argc, argv, "--duration"), rounds = has_opt(argc, argv, "--rounds");
	char line[160];
	int e;

	if (bench_parse_common(&argc, argv, &o))
		return 2;
	if (argc > 1)
		return bench_help_or_unknown("machine", argv[1], machine_usage);
	if (o.list) {
		printf("cacheline_transfer\n");
		return 0;
	}
	if (o.ops || (o.case_name && strcmp(o.case_name, "cacheline_transfer"))) {
		fprintf(stderr, "bench machine: one timed case, cacheline_transfer (no --ops)\n");
		return 2;
	}
	o.duration_s = dur ? o.duration_s : o.quick ? BENCH_XFER_QUICK_RUN_S : XFER_SUITE_RUN_S;
	o.rounds = rounds ? o.rounds : BENCH_XFER_RUNS;
	e = bench_xfer_measure(0, 1, o.rounds, o.duration_s, &x);
	if (e) {
		fprintf(stderr, "bench machine: %s\n", strerror(-e));
		return 1;
	}
	bench_machine_set_xfer(&x);
	bench_xfer_format(line, sizeof(line), &x);
	printf("machine: %s, %u CPUs\n%s\n", bench_cpu_model(), bench_ncpus(), line);
	if (x.measured)
		printf("RESULT suite=machine case=cacheline_transfer ns_per_op=%.1f min=%.1f "
		       "max=%.1f spread=%.4f wall_ns_per_op=%.1f runs=%zu round_trips=%llu\n",
		       x.ns.median, x.ns.min, x.ns.max, x.ns.spread, x.wall.median, x.ns.n,
		       (unsigned long long)x.round_trips);
	if (!o.json_path)
		return 0;
	if (bench_report_init(&rep, "machine"))
		return 1;
	bench_report_add(&rep, json_pack("{s:s, s:o}", "case", "cacheline_transfer", "ns_per_op",
					 bench_xfer_json(&x)));
	return bench_report_close(&rep, o.json_path);
}

DG_BENCH_SUITE(machine, "machine",
	       "one cache-line transfer between the driver's and the device's CPU, ns one way",
	       machine_main)
