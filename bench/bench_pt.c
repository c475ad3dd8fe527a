/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_pt.c - "dmaguard bench pt": what one map + unmap pair costs in each page-table
 * format (docs/pt.md has the numbers, docs/bench-json.md the JSON fields).
 *
 * Workloads, each an operation = one dg_pt_map() call plus one dg_pt_unmap() call of the same
 * range, IOVA = output address:
 *   4k-seq   one 4K page, IOVAs walking sequentially through a 64 MiB window
 *   4k-rand  one 4K page at a random page of a 1 GiB window (table cache misses)
 *   2m       one 2M leaf, sequential through a 1 GiB window (not for flat: 4K entries only)
 *   256x4k   256 4K pages (1 MiB) in one call each way, sequential through 256 MiB
 * per format (vtd = VT-d 4-level, lpae-s1 / lpae-s2 = ARM 4K granule 48-bit, flat = a 4 GiB
 * TCE-style window), with 1 and 2 threads (--threads N picks one count). Threads work on
 * disjoint windows 16 GiB apart that share the upper tables; each thread is pinned.
 *
 * Every window is prefaulted before measuring (each slot mapped and unmapped once), so the
 * tables exist and the loop measures the steady state: a leaf write and a leaf clear per page.
 *
 * Timed mode: per case, a warm-up round, then --rounds rounds sharing --duration seconds; each
 * thread reads the clock once per 256 operations. ns/op is per thread (elapsed / ops), the
 * median and spread are over rounds, "scaling" is the 2-thread throughput over 1-thread.
 * Fixed-count mode (--case NAME --ops N): exactly N operations on one thread, no clock in the
 * loop, for callgrind: instructions per op = (Ir(2N) - Ir(N)) / N.
 */
#include "bench.h"

#include <dmaguard/pt.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SZ_4K	  0x1000ull
#define SZ_1M	  0x100000ull
#define SZ_2M	  0x200000ull
#define SZ_1G	  0x40000000ull
#define RAND_LEN  (1u << 16) /* precomputed random slots per thread */
#define BATCH	  256	     /* operations between clock reads */
#define MAX_THR	  64
#define THR_SPACE (16 * SZ_1G) /* distance between two threads' windows */

struct pt_bench_fmt {
	const char *name;
	struct dg_pt_geometry geo;
	uint64_t base; /* first thread's window */
};

static const struct pt_bench_fmt fmts[] = {
	{"vtd", {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48}, 1ull << 39},
	{"lpae-s1",
	 {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48, .granule = SZ_4K},
	 1ull << 39},
	{"lpae-s2",
	 {.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 48, .oas = 48, .granule = SZ_4K},
	 1ull << 39},
	{"flat",
	 {.format = DG_PT_FMT_FLAT, .granule = SZ_4K, .window_base = 0, .window_size = 4 * SZ_1G},
	 0},
};

struct pt_bench_kind {
	const char *name;
	uint64_t size;	 /* bytes per map / unmap call */
	uint64_t pages;	 /* leaves per map / unmap call */
	uint64_t window; /* bytes walked through per thread (power of two) */
	bool random;
	bool radix_only; /* needs a leaf larger than the flat format's entries */
};

static const struct pt_bench_kind kinds[] = {
	{"4k-seq", SZ_4K, 1, 64 * SZ_1M, false, false},
	{"4k-rand", SZ_4K, 1, SZ_1G, true, false},
	{"2m", SZ_2M, 1, SZ_1G, false, true},
	{"256x4k", SZ_1M, 256, 256 * SZ_1M, false, false},
};

/* Per thread, on its own cache lines: the loop writes pos and err on every operation. */
struct pt_worker {
	struct dg_pt *pt;
	const struct pt_bench_kind *kind;
	uint64_t base;	  /* window start */
	uint64_t mask;	  /* slots - 1 */
	uint32_t *order;  /* random slot sequence (4k-rand) */
	uint64_t pos;	  /* next operation's sequence number */
	uint64_t ops;	  /* done in the last run */
	uint64_t elapsed; /* ns of the last timed run */
	double seconds;	  /* how long to run (timed mode) */
	unsigned int cpu;
	int err;
	pthread_t thread;
} __attribute__((aligned(128)));

/* One operation: map the slot, unmap it. Returns 0 or the failing call's errno. */
static inline int pt_bench_op(struct pt_worker *w)
{
	uint64_t slot = w->order ? w->order[w->pos & (RAND_LEN - 1)] : (w->pos & w->mask);
	uint64_t iova = w->base + slot * w->kind->size, unmapped;
	struct dg_pt_gather g;
	int err;

	w->pos++;
	dg_pt_gather_init(&g);
	err = dg_pt_map(w->pt, iova, iova, w->kind->size, DG_PROT_READ | DG_PROT_WRITE, &g);
	if (!err)
		err = dg_pt_unmap(w->pt, iova, w->kind->size, &g, &unmapped);
	if (g.nr_tables)
		dg_pt_gather_release(w->pt, &g);
	return err;
}

static void *pt_bench_thread(void *arg)
{
	struct pt_worker *w = arg;
	uint64_t start, now, budget = (uint64_t)(w->seconds * 1e9);

	bench_pin_cpu(w->cpu);
	w->ops = 0;
	start = bench_now_ns();
	do {
		for (unsigned int i = 0; i < BATCH; i++) {
			w->err = pt_bench_op(w);
			if (w->err)
				return NULL;
		}
		w->ops += BATCH;
		now = bench_now_ns();
	} while (now - start < budget);
	w->elapsed = now - start;
	return NULL;
}

/* Map and unmap every slot of the window once, so its tables exist. */
static int pt_bench_prefault(struct pt_worker *w)
{
	for (uint64_t s = 0; s <= w->mask; s++) {
		uint64_t iova = w->base + s * w->kind->size, unmapped;
		struct dg_pt_gather g;
		int err;

		dg_pt_gather_init(&g);
		err = dg_pt_map(w->pt, iova, iova, w->kind->size, DG_PROT_READ, &g);
		if (!err)
			err = dg_pt_unmap(w->pt, iova, w->kind->size, &g, &unmapped);
		dg_pt_gather_release(w->pt, &g);
		if (err)
			return err;
	}
	return 0;
}

struct pt_case {
	char name[48];
	const struct pt_bench_fmt *fmt;
	const struct pt_bench_kind *kind;
};

struct pt_result {
	double ns_med, ns_min, ns_max, spread, mops;
	uint64_t ops;
};

static int pt_bench_setup(const struct pt_case *c, unsigned int threads, struct dg_pt **ptp,
			  struct pt_worker *w)
{
	struct dg_pt *pt = dg_pt_create(&c->fmt->geo, NULL, NULL);
	uint64_t rnd = 0x2545f4914f6cdd1dull;

	if (!pt) {
		fprintf(stderr, "bench pt: %s: create: %s\n", c->name, strerror(errno));
		return -1;
	}
	for (unsigned int t = 0; t < threads; t++) {
		uint64_t space = c->fmt->geo.format == DG_PT_FMT_FLAT ?
					 c->fmt->geo.window_size / (threads > 1 ? threads : 1) :
					 THR_SPACE;
		int err;

		memset(&w[t], 0, sizeof(w[t]));
		w[t].pt = pt;
		w[t].kind = c->kind;
		w[t].base = c->fmt->base + t * space;
		w[t].mask = c->kind->window / c->kind->size - 1;
		w[t].cpu = t;
		if (c->kind->window > space) {
			fprintf(stderr, "bench pt: %s: %u threads do not fit the window\n", c->name,
				threads);
			dg_pt_destroy(pt);
			return -1;
		}
		if (c->kind->random) {
			w[t].order = malloc(RAND_LEN * sizeof(*w[t].order));
			if (!w[t].order)
				abort();
			for (unsigned int i = 0; i < RAND_LEN; i++) {
				rnd ^= rnd << 13;
				rnd ^= rnd >> 7;
				rnd ^= rnd << 17;
				w[t].order[i] = (uint32_t)(rnd & w[t].mask);
			}
		}
		err = pt_bench_prefault(&w[t]);
		if (err) {
			fprintf(stderr, "bench pt: %s: prefault: %s\n", c->name, strerror(-err));
			dg_pt_destroy(pt);
			return -1;
		}
	}
	*ptp = pt;
	return 0;
}

static void pt_bench_teardown(struct dg_pt *pt, struct pt_worker *w, unsigned int threads)
{
	for (unsigned int t = 0; t < threads; t++)
		free(w[t].order);
	dg_pt_destroy(pt);
}

/* One timed round on @threads threads; returns total ops/s, *ns gets ns/op per thread. */
static int pt_bench_round(struct pt_worker *w, unsigned int threads, double seconds, double *mops,
			  double *ns, uint64_t *ops)
{
	double rate = 0, per = 0;

	for (unsigned int t = 0; t < threads; t++) {
		w[t].seconds = seconds;
		if (pthread_create(&w[t].thread, NULL, pt_bench_thread, &w[t])) {
			fprintf(stderr, "bench pt: cannot start a thread\n");
			return -1;
		}
	}
	for (unsigned int t = 0; t < threads; t++)
		pthread_join(w[t].thread, NULL);
	for (unsigned int t = 0; t < threads; t++) {
		if (w[t].err) {
			fprintf(stderr, "bench pt: map/unmap failed: %s\n", strerror(-w[t].err));
			return -1;
		}
		rate += (double)w[t].ops * 1e9 / (double)w[t].elapsed;
		per += (double)w[t].elapsed / (double)w[t].ops;
		*ops += w[t].ops;
	}
	*mops = rate / 1e6;
	*ns = per / threads;
	return 0;
}

static int pt_bench_timed(const struct pt_case *c, unsigned int threads, const struct bench_opts *o,
			  struct pt_result *r)
{
	struct pt_worker w[MAX_THR];
	struct dg_pt *pt;
	double ns[1000], mops[1000], per_round = o->duration_s / o->rounds, warm_ns, warm_mops;
	struct bench_summary s, sm;
	uint64_t warm_ops = 0;

	if (pt_bench_setup(c, threads, &pt, w))
		return -1;
	memset(r, 0, sizeof(*r));
	if (pt_bench_round(w, threads, per_round / 2, &warm_mops, &warm_ns, &warm_ops))
		goto fail;
	for (unsigned int i = 0; i < o->rounds; i++)
		if (pt_bench_round(w, threads, per_round, &mops[i], &ns[i], &r->ops))
			goto fail;
	bench_summarize(ns, o->rounds, &s);
	bench_summarize(mops, o->rounds, &sm);
	r->ns_med = s.median;
	r->ns_min = s.min;
	r->ns_max = s.max;
	r->spread = s.spread;
	r->mops = sm.median;
	pt_bench_teardown(pt, w, threads);
	return 0;
fail:
	pt_bench_teardown(pt, w, threads);
	return -1;
}

static int pt_bench_fixed(const struct pt_case *c, uint64_t n, struct bench_report *rep)
{
	struct pt_worker w[1];
	struct dg_pt *pt;
	uint64_t start, elapsed;

	if (pt_bench_setup(c, 1, &pt, w))
		return -1;
	start = bench_now_ns();
	for (uint64_t i = 0; i < n; i++) {
		int err = pt_bench_op(&w[0]);

		if (err) {
			fprintf(stderr, "bench pt: %s: %s\n", c->name, strerror(-err));
			pt_bench_teardown(pt, w, 1);
			return -1;
		}
	}
	elapsed = bench_now_ns() - start;
	printf("RESULT suite=pt case=%s mode=fixed ops=%" PRIu64 " elapsed_ns=%" PRIu64 "\n",
	       c->name, n, elapsed);
	bench_report_add(rep,
			 json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I}", "case", c->name, "format",
				   dg_pt_format_name(c->fmt->geo.format), "workload", c->kind->name,
				   "mode", "fixed", "ops", (json_int_t)n, "threads", (json_int_t)1,
				   "elapsed_ns", (json_int_t)elapsed));
	pt_bench_teardown(pt, w, 1);
	return 0;
}

static size_t pt_cases(struct pt_case *out)
{
	size_t n = 0;

	for (size_t f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++)
		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
			if (kinds[k].radix_only && fmts[f].geo.format == DG_PT_FMT_FLAT)
				continue;
			snprintf(out[n].name, sizeof(out[n].name), "%s/%s", fmts[f].name,
				 kinds[k].name);
			out[n].fmt = &fmts[f];
			out[n].kind = &kinds[k];
			n++;
		}
	return n;
}

static void pt_usage(FILE *out)
{
	fprintf(out,
		"usage: dmaguard bench pt [OPTIONS]\n\n"
		"map + unmap cost per operation of each page-table format (docs/pt.md).\n"
		"Cases are FORMAT/WORKLOAD: formats vtd lpae-s1 lpae-s2 flat, workloads\n"
		"4k-seq 4k-rand 2m 256x4k; one and two threads unless --threads N.\n"
		"--duration S is the time per case and thread count, shared by the rounds.\n\n");
	bench_usage_common(out);
}

static int pt_bench_main(int argc, char **argv)
{
	struct pt_case cases[32];
	size_t ncases = pt_cases(cases);
	struct bench_opts o;
	struct bench_report rep;
	unsigned int counts[2] = {1, 2}, ncounts = 2;
	bool any = false;
	int rc = 0;

	if (bench_parse_common(&argc, argv, &o))
		return 2;
	if (argc > 1)
		return bench_help_or_unknown("pt", argv[1], pt_usage);
	if (o.list) {
		for (size_t i = 0; i < ncases; i++)
			printf("%s\n", cases[i].name);
		return 0;
	}
	if (o.threads) {
		if (o.threads > MAX_THR) {
			fprintf(stderr, "bench pt: at most %d threads\n", MAX_THR);
			return 2;
		}
		counts[0] = o.threads;
		ncounts = 1;
	}
	for (size_t i = 0; i < ncases; i++)
		any |= bench_case_selected(&o, cases[i].name);
	if (!any) {
		fprintf(stderr, "bench pt: no case '%s' (--list shows them)\n", o.case_name);
		return 2;
	}
	if (bench_report_init(&rep, "pt"))
		return 1;

	if (o.ops) {
		for (size_t i = 0; i < ncases && !rc; i++)
			if (bench_case_selected(&o, cases[i].name))
				rc = pt_bench_fixed(&cases[i], o.ops, &rep) ? 1 : 0;
		goto out;
	}

	printf("%-18s %3s %10s %8s %10s %9s %8s\n", "case", "thr", "ns/op", "spread", "ns/page",
	       "Mops/s", "scaling");
	for (size_t i = 0; i < ncases && !rc; i++) {
		double mops1 = 0;

		if (!bench_case_selected(&o, cases[i].name))
			continue;
		for (unsigned int t = 0; t < ncounts; t++) {
			struct pt_result r;
			double pages = (double)cases[i].kind->pages;
			json_t *j;

			if (pt_bench_timed(&cases[i], counts[t], &o, &r)) {
				rc = 1;
				break;
			}
			if (counts[t] == 1)
				mops1 = r.mops;
			printf("%-18s %3u %10.1f %7.1f%% %10.2f %9.2f", cases[i].name, counts[t],
			       r.ns_med, 100 * r.spread, r.ns_med / pages, r.mops);
			if (counts[t] > 1 && mops1 > 0)
				printf(" %7.2fx", r.mops / mops1);
			printf("\n");
			printf("RESULT suite=pt case=%s threads=%u ns_per_op=%.1f spread=%.3f "
			       "ns_per_page=%.2f mops=%.3f\n",
			       cases[i].name, counts[t], r.ns_med, r.spread, r.ns_med / pages,
			       r.mops);
			fflush(stdout);
			j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:i, s:I, s:{s:f, s:f, "
				      "s:f, s:f}, s:f, s:f}",
				      "case", cases[i].name, "format",
				      dg_pt_format_name(cases[i].fmt->geo.format), "workload",
				      cases[i].kind->name, "mode", "timed", "threads",
				      (int)counts[t], "pages_per_op", (json_int_t)pages,
				      "bytes_per_op", (json_int_t)cases[i].kind->size, "rounds",
				      (int)o.rounds, "ops", (json_int_t)r.ops, "ns_per_op",
				      "median", r.ns_med, "min", r.ns_min, "max", r.ns_max,
				      "spread", r.spread, "ns_per_page", r.ns_med / pages,
				      "mops_per_s", r.mops);
			if (counts[t] > 1 && mops1 > 0)
				json_object_set_new(j, "scaling", json_real(r.mops / mops1));
			bench_report_add(&rep, j);
		}
	}
out:
	if (!rc && bench_report_write(&rep, o.json_path))
		rc = 1;
	bench_report_fini(&rep);
	return rc;
}

DG_BENCH_SUITE(pt, "pt", "IO page tables: map + unmap cost per format, 1 and 2 threads",
	       pt_bench_main)
