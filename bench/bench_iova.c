/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_iova.c - "dmaguard bench iova": what an IOVA alloc+free costs.
 *
 * Allocators, measured in the same run:
 *   dg        the augmented tree with per-CPU magazines (dmaguard's default)
 *   dg-nomag  the augmented tree alone (every operation goes to the tree)
 *   linux     the Linux 6.1 reference: cached-node linear walk, no magazines
 * Patterns, each on a space of 2^48 bytes with 4 KiB granules and a background of LIVE
 * long-lived ranges (1k, 64k, 1M by default; --live N[,N...]):
 *   ring         each thread keeps a ring of 256 one-page buffers: free the oldest, allocate
 *                a new one (a NIC RX ring)
 *   mixed        each thread keeps 256 buffers of 4 KiB .. 256 KiB: free a random one,
 *                allocate a random size (storage and TSO traffic)
 *   adversarial  the background is LIVE one-page ranges separated by one-page holes, with a
 *                one-page range H of each thread above them, so Linux's cached node sits
 *                above the holes; a round is: allocate two pages (no hole fits), free them,
 *                free H, allocate H again (which puts Linux's cached node back on top).
 *                A round is two alloc+free pairs and counts as two operations.
 *   maghit       allocate and free one page, no background: the magazine hit path
 * with 1 and 2 threads (--threads N for just N), each thread pinned to its own CPU.
 *
 * An operation is one alloc+free pair; ns_per_op is the wall time of a round divided by the
 * operations each thread did in it (so with 2 threads it is the cost each thread sees), the
 * median of --rounds rounds of --duration / 4 seconds in all (--quick: --duration). nodes_per_op is the
 * deterministic work counter (tree nodes examined per operation), magazine_hit_rate the
 * share of allocations served without the tree, speedup_vs_linux the Linux reference's
 * ns_per_op divided by this allocator's for the same pattern, live ranges and threads.
 *
 * Fixed-count mode (--case NAME --ops N): the case's setup and 256 warm-up operations, then
 * exactly N operations per thread with no clock reads, so callgrind instruction counts of an
 * N and a 2N run differ by N operations.
 */
#include "bench.h"
#include "lockstep.h"

#include <dmaguard/iova.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G	   4096ull
#define SPACE_END  ((1ull << 48) - 1)
#define POOL	   256
#define MAX_THR	   2
#define WARMUP_OPS 256

enum pattern { PAT_RING, PAT_MIXED, PAT_ADV, PAT_MAGHIT, NPAT };
static const char *const pat_name[NPAT] = {"ring", "mixed", "adversarial", "maghit"};

enum config { CFG_DG, CFG_NOMAG, CFG_LINUX, NCFG };
static const char *const cfg_name[NCFG] = {"dg", "dg-nomag", "linux"};

struct thr {
	struct dg_iova_space *s;
	enum pattern pat;
	uint64_t buf[POOL];
	uint64_t size[POOL];
	unsigned int head;
	uint64_t h; /* adversarial: this thread's range above the holes */
	uint64_t rng;
	pthread_t tid;
};

static void die(const char *what, int err)
{
	fprintf(stderr, "bench iova: %s failed: %s\n", what, strerror(-err));
	exit(1);
}

static inline uint64_t rnd(uint64_t *st)
{
	uint64_t z = (*st += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline void xalloc(struct dg_iova_space *s, uint64_t size, uint64_t *iova)
{
	int err = dg_iova_alloc(s, size, UINT64_MAX, 0, iova);

	if (err)
		die("alloc", err);
}

static inline void xfree(struct dg_iova_space *s, uint64_t iova, uint64_t size)
{
	int err = dg_iova_free(s, iova, size);

	if (err)
		die("free", err);
}

/* One step of the pattern; returns the alloc+free pairs it did. */
static inline unsigned int step(struct thr *t)
{
	static const uint64_t mixed_pages[] = {1, 2, 4, 8, 16, 32, 64};
	struct dg_iova_space *s = t->s;
	uint64_t x;

	switch (t->pat) {
	case PAT_RING:
		xfree(s, t->buf[t->head], G);
		xalloc(s, G, &t->buf[t->head]);
		t->head = (t->head + 1) % POOL;
		return 1;
	case PAT_MIXED: {
		uint64_t r = rnd(&t->rng);
		unsigned int i = r % POOL;

		xfree(s, t->buf[i], t->size[i]);
		t->size[i] = mixed_pages[(r >> 32) % 7] * G;
		xalloc(s, t->size[i], &t->buf[i]);
		return 1;
	}
	case PAT_ADV:
		xalloc(s, 2 * G, &x);
		xfree(s, x, 2 * G);
		xfree(s, t->h, G);
		xalloc(s, G, &t->h);
		return 2;
	default:
		xalloc(s, G, &x);
		xfree(s, x, G);
		return 1;
	}
}

/* @ops operations on one thread (bench_lockstep's run callback: @arg is its struct thr). */
static void run_ops(void *arg, uint64_t ops)
{
	struct thr *t = arg;
	uint64_t done = 0, x;

	if (t->pat == PAT_MAGHIT) {
		/* the tightest loop, so callgrind sees the allocator and little else */
		for (; done < ops; done++) {
			if (dg_iova_alloc(t->s, G, UINT64_MAX, 0, &x) || dg_iova_free(t->s, x, G))
				die("maghit", -EIO);
		}
		return;
	}
	while (done < ops)
		done += step(t);
}

/* ---- setup ---- */

static struct dg_iova_space *make_space(enum config c)
{
	struct dg_iova_config cfg = {
		.start = 0,
		.end = SPACE_END,
		.granule = G,
		.algo = c == CFG_LINUX ? DG_IOVA_ALGO_LINUX_REFERENCE : DG_IOVA_ALGO_AUGMENTED,
		.flags = c == CFG_NOMAG ? DG_IOVA_CFG_NO_MAGAZINES : 0,
	};
	struct dg_iova_space *s = dg_iova_create(&cfg);

	if (!s)
		die("create", -errno);
	return s;
}

/* The background and every thread's state, for up to MAX_THR threads. */
static void setup(struct dg_iova_space *s, enum pattern p, uint64_t live, struct thr *t)
{
	uint64_t x;

	for (unsigned int i = 0; i < MAX_THR; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		t[i].s = s;
		t[i].pat = p;
		t[i].rng = 0x1234 + i;
	}
	if (p == PAT_ADV) {
		uint64_t *tmp = malloc(2 * live * sizeof(*tmp));

		if (!tmp)
			die("malloc", -ENOMEM);
		for (unsigned int i = 0; i < MAX_THR; i++)
			xalloc(s, G, &t[i].h);
		for (uint64_t i = 0; i < 2 * live; i++)
			xalloc(s, G, &tmp[i]);
		for (uint64_t i = 0; i < 2 * live; i += 2)
			xfree(s, tmp[i], G);
		free(tmp);
	} else if (p != PAT_MAGHIT) {
		for (uint64_t i = 0; i < live; i++)
			xalloc(s, G, &x);
	}
	if (p == PAT_RING || p == PAT_MIXED) {
		for (unsigned int i = 0; i < MAX_THR; i++) {
			for (unsigned int k = 0; k < POOL; k++) {
				t[i].size[k] = p == PAT_RING ? G : (1ull << (k % 7)) * G;
				xalloc(s, t[i].size[k], &t[i].buf[k]);
			}
		}
	}
}

/* ---- results ---- */

struct result {
	char name[64];
	enum pattern pat;
	enum config cfg;
	uint64_t live;
	unsigned int threads;
	struct bench_summary ns;
	double nodes_per_op, hit_rate, mops;
	uint64_t ops;
	double speedup; /* vs linux, 0 if none */
};

static struct result *results;
static size_t nresults, capresults;

static void live_label(uint64_t live, char *buf, size_t n)
{
	if (live >= 1000000 && live % 1000000 == 0)
		snprintf(buf, n, "%llum", (unsigned long long)(live / 1000000));
	else if (live >= 1024 && live % 1024 == 0)
		snprintf(buf, n, "%lluk", (unsigned long long)(live / 1024));
	else
		snprintf(buf, n, "%llu", (unsigned long long)live);
}

static void case_name(char *buf, size_t n, enum pattern p, uint64_t live, enum config c,
		      unsigned int thr)
{
	char l[32];

	if (p == PAT_MAGHIT) {
		snprintf(buf, n, "maghit/%s/t%u", cfg_name[c], thr);
		return;
	}
	live_label(live, l, sizeof(l));
	snprintf(buf, n, "%s/%s/%s/t%u", pat_name[p], l, cfg_name[c], thr);
}

/* Measure one case on a prepared space. */
static void measure(const struct bench_opts *o, struct thr *t, const char *name, enum pattern p,
		    enum config c, uint64_t live, unsigned int nthr)
{
	struct dg_iova_space *s = t[0].s;
	struct dg_iova_stats a, b;
	struct bench_lockstep ls;

	bench_lockstep_start(&ls, nthr, t, sizeof(t[0]), run_ops, NULL, NULL);

	struct result r = {.pat = p, .cfg = c, .live = live, .threads = nthr};
	snprintf(r.name, sizeof(r.name), "%s", name);
	bench_lockstep_round(&ls, WARMUP_OPS);
	dg_iova_get_stats(s, &a);
	if (o->ops) {
		bench_lockstep_round(&ls, o->ops);
		r.ops = o->ops;
	} else {
		double budget_ns = o->duration_s * 1e9 / (o->quick ? 1.0 : 4.0) / o->rounds;
		double samples[1000];
		uint64_t per_round = bench_lockstep_calibrate(&ls, budget_ns, 2, 1ull << 30), ns;

		dg_iova_get_stats(s, &a);
		for (unsigned int i = 0; i < o->rounds; i++) {
			ns = bench_lockstep_round(&ls, per_round);
			samples[i] = (double)ns / (double)per_round;
			r.ops += per_round;
		}
		bench_summarize(samples, o->rounds, &r.ns);
		r.mops = r.ns.median > 0 ? 1e3 * nthr / r.ns.median : 0;
	}
	dg_iova_get_stats(s, &b);
	uint64_t allocs = b.allocs - a.allocs;
	r.nodes_per_op =
		(double)(b.tree_nodes_visited - a.tree_nodes_visited) / (double)(r.ops * nthr);
	r.hit_rate = allocs ? (double)(b.magazine_hits - a.magazine_hits) / (double)allocs : 0;
	bench_lockstep_stop(&ls);
	if (o->ops) {
		printf("case %s: %llu ops per thread done (fixed count), %.2f nodes/op\n", name,
		       (unsigned long long)o->ops, r.nodes_per_op);
		return;
	}
	printf("  %-30s %10.1f ns/op  +-%4.0f%%  %9.2f nodes/op  hits %5.1f%%\n", name, r.ns.median,
	       100 * r.ns.spread, r.nodes_per_op, 100 * r.hit_rate);
	fflush(stdout);
	if (nresults == capresults) {
		capresults = capresults ? 2 * capresults : 64;
		results = realloc(results, capresults * sizeof(*results));
		if (!results)
			die("realloc", -ENOMEM);
	}
	results[nresults++] = r;
}

static int parse_live(const char *arg, uint64_t *live, unsigned int *n)
{
	char *copy = strdup(arg), *save = NULL;

	*n = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long long v = strtoull(tok, &end, 0);

		if (*end == 'k' || *end == 'K')
			v *= 1024, end++;
		else if (*end == 'm' || *end == 'M')
			v *= 1000000, end++;
		if (*end || !v || v > 4000000 || *n == 8) {
			fprintf(stderr, "bench iova: --live wants counts 1..4m, got '%s'\n", tok);
			free(copy);
			return -EINVAL;
		}
		live[(*n)++] = v;
	}
	free(copy);
	return *n ? 0 : -EINVAL;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: dmaguard bench iova [--live N[,N...]] [OPTIONS]\n"
		     "  --live LIST   background live ranges per case (default 1k,64k,1m;\n"
		     "                --quick: 1k); suffixes k (1024) and m (10^6)\n\n");
	bench_usage_common(out);
}

static json_t *result_json(const struct result *r)
{
	json_t *j = json_pack("{s:s, s:s, s:I, s:i, s:s, s:b, s:f, s:f, s:I}", "case", r->name,
			      "pattern", pat_name[r->pat], "live_ranges", (json_int_t)r->live,
			      "threads", r->threads, "allocator",
			      r->cfg == CFG_LINUX ? "linux-reference" : "dmaguard", "magazines",
			      r->cfg == CFG_DG, "nodes_per_op", r->nodes_per_op,
			      "magazine_hit_rate", r->hit_rate, "ops", (json_int_t)r->ops);

	json_object_set_new(j, "ns_per_op",
			    json_pack("{s:f, s:f, s:f, s:f, s:i}", "median", r->ns.median, "min",
				      r->ns.min, "max", r->ns.max, "spread", r->ns.spread, "rounds",
				      (int)r->ns.n));
	json_object_set_new(j, "mops_per_s", json_real(r->mops));
	json_object_set_new(j, "speedup_vs_linux",
			    r->speedup > 0 ? json_real(r->speedup) : json_null());
	return j;
}

static int iova_main(int argc, char **argv)
{
	struct bench_opts o;
	uint64_t live[8] = {1024, 65536, 1000000};
	unsigned int nlive = 3, thr_list[2] = {1, 2}, nthr_list = 2;
	struct thr *t;
	struct bench_report rep;
	char name[64];

	if (bench_parse_common(&argc, argv, &o))
		return 2;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--live") && i + 1 < argc) {
			if (parse_live(argv[++i], live, &nlive))
				return 2;
			continue;
		}
		return bench_help_or_unknown("iova", argv[i], usage);
	}
	if (o.quick && nlive == 3 && live[2] == 1000000)
		nlive = 1;
	if (o.threads) {
		if (o.threads > MAX_THR) {
			fprintf(stderr, "bench iova: --threads must be 1..%u\n", MAX_THR);
			return 2;
		}
		thr_list[0] = o.threads;
		nthr_list = 1;
	}
	if (o.list) {
		for (int p = 0; p < NPAT; p++)
			for (unsigned int l = 0; l < (p == PAT_MAGHIT ? 1 : nlive); l++)
				for (int c = 0; c < NCFG; c++)
					for (unsigned int k = 0; k < nthr_list; k++) {
						case_name(name, sizeof(name), p, live[l], c,
							  thr_list[k]);
						printf("%s\n", name);
					}
		return 0;
	}
	t = calloc(MAX_THR, sizeof(*t));
	if (!t)
		return 1;
	if (!o.ops)
		printf("dmaguard bench iova: alloc+free per operation, %s\n", bench_cpu_model());
	bool any = false;
	for (int p = 0; p < NPAT; p++) {
		for (unsigned int l = 0; l < (p == PAT_MAGHIT ? 1 : nlive); l++) {
			for (int c = 0; c < NCFG; c++) {
				bool want = false;

				for (unsigned int k = 0; k < nthr_list; k++) {
					case_name(name, sizeof(name), p, live[l], c, thr_list[k]);
					want |= bench_case_selected(&o, name);
				}
				if (!want)
					continue;
				struct dg_iova_space *s = make_space(c);

				setup(s, p, live[l], t);
				for (unsigned int k = 0; k < nthr_list; k++) {
					case_name(name, sizeof(name), p, live[l], c, thr_list[k]);
					if (!bench_case_selected(&o, name))
						continue;
					any = true;
					measure(&o, t, name, p, c, live[l], thr_list[k]);
				}
				if (dg_iova_check(s, stderr)) {
					fprintf(stderr, "bench iova: allocator check failed\n");
					exit(1);
				}
				dg_iova_destroy(s);
			}
		}
	}
	free(t);
	if (!any) {
		fprintf(stderr, "bench iova: no case named '%s' (see --list)\n",
			o.case_name ? o.case_name : "");
		return 2;
	}
	if (o.ops)
		return 0;

	/* Ratios to the Linux reference, and dmaguard's best and worst pattern. */
	double best = 0, worst = 0;
	const char *best_name = "", *worst_name = "";
	for (size_t i = 0; i < nresults; i++) {
		struct result *r = &results[i];

		for (size_t j = 0; j < nresults && r->cfg != CFG_LINUX; j++) {
			const struct result *q = &results[j];

			if (q->cfg == CFG_LINUX && q->pat == r->pat && q->live == r->live &&
			    q->threads == r->threads && r->ns.median > 0)
				r->speedup = q->ns.median / r->ns.median;
		}
		if (r->cfg == CFG_DG && r->threads == 1 && r->pat != PAT_MAGHIT) {
			if (!best || r->ns.median < best) {
				best = r->ns.median;
				best_name = r->name;
			}
			if (r->ns.median > worst) {
				worst = r->ns.median;
				worst_name = r->name;
			}
		}
	}
	printf("\n  %-30s %10s %10s %12s\n", "case", "ns/op", "nodes/op", "vs linux");
	for (size_t i = 0; i < nresults; i++) {
		const struct result *r = &results[i];
		char ratio[32] = "-";

		if (r->speedup > 0)
			snprintf(ratio, sizeof(ratio), "%.1fx", r->speedup);
		printf("  %-30s %10.1f %10.2f %12s\n", r->name, r->ns.median, r->nodes_per_op,
		       ratio);
		printf("RESULT suite=iova case=%s ns_per_op=%.1f nodes_per_op=%.2f hit_rate=%.3f "
		       "speedup_vs_linux=%.2f threads=%u\n",
		       r->name, r->ns.median, r->nodes_per_op, r->hit_rate, r->speedup, r->threads);
	}
	if (best > 0)
		printf("\ndmaguard (magazines, 1 thread): best %s %.1f ns, worst %s %.1f ns, "
		       "worst/best %.2f\n",
		       best_name, best, worst_name, worst, worst / best);

	if (bench_report_init(&rep, "iova"))
		return 1;
	for (size_t i = 0; i < nresults; i++)
		bench_report_add(&rep, result_json(&results[i]));
	json_object_set_new(rep.root, "summary",
			    json_pack("{s:s, s:f, s:s, s:f, s:f}", "best_case", best_name,
				      "best_ns_per_op", best, "worst_case", worst_name,
				      "worst_ns_per_op", worst, "worst_over_best",
				      best > 0 ? worst / best : 0.0));
	int rc = bench_report_close(&rep, o.json_path);
	free(results);
	results = NULL;
	nresults = capresults = 0;
	return rc;
}

DG_BENCH_SUITE(iova, "iova", "IOVA allocator: alloc+free per pattern, dmaguard vs Linux 6.1",
	       iova_main)
