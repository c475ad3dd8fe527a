/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/bench_workloads.c - "dmaguard bench" (suite "workloads"): the seed
 * workloads of DESIGN.md section 1, each under every policy, the Linux-like reference and
 * identity, with every ratio to identity measured in the same run.
 *
 * Protocol (STYLE.md rule 12), per workload and round:
 *
 *   identity  strict  identity  lazy  identity ... linux-ref  identity
 *   identity-2step  strict-2step  identity-2step
 *
 * every configuration's run sits between two runs of its baseline (identity through the same
 * drivers: identity, or identity-2step for the two-step drivers, wl_slots.c) and its ratio is
 * its throughput divided by their mean (bench_alternating_ratios), so a machine that speeds
 * up or slows
 * down during the round moves both sides. The report gives the median ratio over the rounds
 * and its spread ((max - min) / median), the median throughput, and per-I/O counters summed
 * over the rounds. Each run builds a fresh IOMMU, DMA layer and devices (wl_env.c), warms up,
 * measures for --duration seconds with driver and device threads pinned on their own CPUs,
 * drains, checks that nothing leaked or faulted, and tears down.
 *
 * Defaults are sized for the newcomer's `make run` on 2 cores: 5 rounds of 0.12 s per run
 * (about two and a half minutes for all 9 workloads x 9 configurations). Short runs keep a ratio's two
 * identity runs within a fraction of a second of it (a shared host's speed moves by 2x within
 * seconds), and five rounds give the median something to reject outliers with; --quick is one round of
 * 30 ms (a few seconds in all, used by make test).
 *
 * Before the runs, the cost of one cache-line transfer between the driver's and the device's
 * CPU (bench/machine.c: 0.1 s, --quick 20 ms) goes into the header and the JSON's machine
 * section: strict's remaining cost over identity is lines the two cores pass (docs/bench.md
 * "Reading the table"). It moves with the host's placement of the vCPUs, so it is measured
 * again, shortly (a few ms, wl.h WL_XFER_ROUND_RUNS), at the start of every round of every
 * workload: each result keeps the figure of each round (JSON cacheline_transfer_ns_samples,
 * next to ratio_samples, and the CSV's cacheline_transfer_ns_* columns; the range in the
 * transfers note, min and max in the RESULT lines). --quick measures only the first round of
 * the first workload.
 */
#include "wl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct wl_workload *const workloads[] = {
	&wl_xdp64,  &wl_xdp64_2k, &wl_xdp64_4k, &wl_fwd64,  &wl_bond4,
	&wl_tcp_x1, &wl_tcp_x4,	  &wl_tcp_x8,	&wl_nvme4k,
};
#define NWL (sizeof(workloads) / sizeof(workloads[0]))

struct opts {
	struct bench_opts c;
	bool want_wl[NWL];
	bool want_cfg[WL_NCFG];
	unsigned int qd;
	const char *csv, *plot;
	double warmup_s;
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dmaguard bench [workloads] [OPTIONS]\n"
		"  --workload LIST  only these workloads (comma-separated; see --list)\n"
		"  --policy LIST    only these configurations (identity is always measured):\n"
		"                   strict, lazy, window, bounce, pool, linux-ref, strict-2step\n"
		"                   (strict-2step brings its own baseline, identity-2step)\n"
		"  --qd N           nvme4k queue depth per job (default %u)\n"
		"  --csv FILE       write the results as CSV\n"
		"  --plot TARGET    bar chart of the ratios: FILE.png or FILE.svg (gnuplot), or\n"
		"                   'ascii' (printed)\n"
		"  --threads N      driver/device thread pairs (default 1)\n"
		"  --duration S     seconds per measured run (default 0.12; --quick 0.03)\n"
		"  --rounds N       rounds of alternated runs (default 5; --quick 1)\n"
		"  --case W/P --ops N  fixed count: one run of workload W under P doing N I/Os\n"
		"                   per driver thread (plus those in flight), no timing\n\n",
		WL_DEFAULT_QD);
	bench_usage_common(out);
}

static int parse_list(const char *arg, const char *what, bool *want, unsigned int n,
		      const char *(*name)(unsigned int))
{
	char *copy = strdup(arg), *save = NULL;
	int r = 0;

	if (!copy)
		return -ENOMEM;
	for (unsigned int i = 0; i < n; i++)
		want[i] = false;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned int i;

		for (i = 0; i < n && strcmp(tok, name(i)); i++)
			;
		if (i == n) {
			fprintf(stderr, "bench workloads: unknown %s '%s'\n", what, tok);
			r = -EINVAL;
			break;
		}
		want[i] = true;
	}
	free(copy);
	return r;
}

static const char *wl_name(unsigned int i)
{
	return workloads[i]->name;
}

static const char *cfg_name(unsigned int i)
{
	return wl_cfg_name[i];
}

static bool has_opt(int argc, char **argv, const char *opt)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], opt))
			return true;
	return false;
}

static int parse(int argc, char **argv, struct opts *o)
{
	bool dur = has_opt(argc, argv, "--duration"), rounds = has_opt(argc, argv, "--rounds");

	memset(o, 0, sizeof(*o));
	if (bench_parse_common(&argc, argv, &o->c))
		return -EINVAL;
	for (unsigned int i = 0; i < NWL; i++)
		o->want_wl[i] = true;
	for (unsigned int i = 0; i < WL_NCFG; i++)
		o->want_cfg[i] = true;
	o->qd = WL_DEFAULT_QD;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			exit(0);
		}
		if (!strcmp(a, "--workload") || !strcmp(a, "--policy") || !strcmp(a, "--qd") ||
		    !strcmp(a, "--csv") || !strcmp(a, "--plot")) {
			if (!v) {
				fprintf(stderr, "bench workloads: %s needs a value\n", a);
				return -EINVAL;
			}
			i++;
		}
		if (!strcmp(a, "--workload")) {
			if (parse_list(v, "workload", o->want_wl, NWL, wl_name))
				return -EINVAL;
		} else if (!strcmp(a, "--policy")) {
			if (parse_list(v, "policy", o->want_cfg, WL_NCFG, cfg_name))
				return -EINVAL;
			o->want_cfg[WL_IDENTITY] = true;
			for (unsigned int c = 0; c < WL_NCFG; c++)
				if (o->want_cfg[c])
					o->want_cfg[wl_cfg_baseline((enum wl_cfg)c)] = true;
		} else if (!strcmp(a, "--qd")) {
			char *end;
			unsigned long q = strtoul(v, &end, 0);

			if (*end || !q || q > WL_MAX_QD || v[0] == '-') {
				fprintf(stderr, "bench workloads: --qd must be 1..%u\n", WL_MAX_QD);
				return -EINVAL;
			}
			o->qd = (unsigned int)q;
		} else if (!strcmp(a, "--csv")) {
			o->csv = v;
		} else if (!strcmp(a, "--plot")) {
			size_t l = strlen(v);

			if (strcmp(v, "ascii") &&
			    (l < 5 || (strcmp(v + l - 4, ".png") && strcmp(v + l - 4, ".svg")))) {
				fprintf(stderr,
					"bench workloads: --plot wants FILE.png, FILE.svg or ascii\n");
				return -EINVAL;
			}
			o->plot = v;
		} else {
			fprintf(stderr, "bench workloads: unknown option '%s'\n\n", a);
			usage(stderr);
			return -EINVAL;
		}
	}
	if (o->c.quick) {
		o->c.duration_s = dur ? o->c.duration_s : 0.03;
		o->c.rounds = rounds ? o->c.rounds : 1;
	} else {
		o->c.duration_s = dur ? o->c.duration_s : 0.12;
		o->c.rounds = rounds ? o->c.rounds : 5;
	}
	if (o->c.rounds > WL_MAX_ROUNDS) {
		fprintf(stderr, "bench workloads: --rounds must be 1..%u\n", WL_MAX_ROUNDS);
		return -EINVAL;
	}
	if (o->c.threads > WL_MAX_THREADS) {
		fprintf(stderr, "bench workloads: --threads must be 1..%u\n", WL_MAX_THREADS);
		return -EINVAL;
	}
	o->warmup_s = o->c.duration_s / 4 < 0.05 ? o->c.duration_s / 4 : 0.05;
	if (o->c.ops && !o->c.case_name) {
		fprintf(stderr, "bench workloads: --ops needs --case WORKLOAD/POLICY\n");
		return -EINVAL;
	}
	return 0;
}

/* --case WORKLOAD/POLICY */
static int parse_case(const char *name, unsigned int *w, enum wl_cfg *c)
{
	const char *slash = strchr(name, '/');

	if (!slash)
		goto bad;
	for (*w = 0; *w < NWL; (*w)++)
		if (strlen(workloads[*w]->name) == (size_t)(slash - name) &&
		    !strncmp(workloads[*w]->name, name, (size_t)(slash - name)))
			break;
	for (unsigned int i = 0; i < WL_NCFG; i++)
		if (!strcmp(slash + 1, wl_cfg_name[i])) {
			*c = (enum wl_cfg)i;
			if (*w < NWL)
				return 0;
		}
bad:
	fprintf(stderr, "bench workloads: no case '%s' (WORKLOAD/POLICY, see --list)\n", name);
	return -EINVAL;
}

static double loadavg(void)
{
	double l = -1;
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}

/* ---- progress on stderr ------------------------------------------------------------------------ */

static bool progress_on;
static unsigned int progress_done, progress_total;

static void progress(const char *wl, const char *cfg, unsigned int round, unsigned int rounds)
{
	if (!progress_on)
		return;
	fprintf(stderr, "\r\033[K[%3u/%u] %s %s, round %u/%u", progress_done, progress_total, wl,
		cfg, round + 1, rounds);
	fflush(stderr);
}

static void progress_end(void)
{
	if (progress_on)
		fprintf(stderr, "\r\033[K");
}

/* ---- the run ------------------------------------------------------------------------------------ */

/*
 * The cache-line transfer at the start of a round (wl.h, WL_XFER_ROUND_RUNS): ns one way, NaN
 * when not measured (fewer than two CPUs, a thread not pinned, or --quick past its first one).
 * Measured between runs, when no workload thread is left on the two CPUs.
 */
static double round_xfer(bool quick)
{
	static bool measured_once;
	struct bench_xfer x;

	if (quick && measured_once)
		return NAN;
	measured_once = true;
	if (bench_xfer_measure(0, 1, WL_XFER_ROUND_RUNS, WL_XFER_ROUND_RUN_S, &x) || !x.measured)
		return NAN;
	return x.ns.median;
}

static int fixed_count(const struct opts *o)
{
	struct wl_run_opts ro = {.ops = o->c.ops, .threads = o->c.threads, .qd = o->qd};
	struct wl_totals t = {0};
	enum wl_cfg c;
	unsigned int w;
	double thr;

	if (parse_case(o->c.case_name, &w, &c))
		return 2;
	int e = wl_run_once(workloads[w], c, &ro, &t, &thr);

	printf("case %s/%s: %llu I/Os (fixed count, %llu per driver thread asked), %llu maps, "
	       "%llu invalidation commands, %llu waits, %llu IOTLB misses\n",
	       workloads[w]->name, wl_cfg_name[c], (unsigned long long)t.ios,
	       (unsigned long long)o->c.ops, (unsigned long long)t.maps,
	       (unsigned long long)t.inval_cmds, (unsigned long long)t.waits,
	       (unsigned long long)t.iotlb_misses);
	return e ? 1 : 0;
}

static int bench_workloads_main(int argc, char **argv)
{
	struct opts o;
	struct wl_result *res;
	size_t nres = 0;
	unsigned int ncfg = 0, nwl = 0;
	int rc = 0;

	if (parse(argc, argv, &o))
		return 2;
	if (o.c.list) {
		for (unsigned int w = 0; w < NWL; w++)
			printf("%-10s %s (%s)\n", workloads[w]->name, workloads[w]->summary,
			       workloads[w]->unit);
		printf("\npolicies: identity (baseline)");
		for (unsigned int c = 1; c < WL_NCFG; c++)
			printf(", %s", wl_cfg_name[c]);
		printf("\ncases for --case: WORKLOAD/POLICY, e.g. xdp64/strict\n");
		return 0;
	}
	if (o.c.ops)
		return fixed_count(&o);
	if (o.c.case_name) {
		enum wl_cfg c;
		unsigned int w;

		if (parse_case(o.c.case_name, &w, &c))
			return 2;
		for (unsigned int i = 0; i < NWL; i++)
			o.want_wl[i] = i == w;
		for (unsigned int i = 0; i < WL_NCFG; i++)
			o.want_cfg[i] = i == WL_IDENTITY || i == c || i == wl_cfg_baseline(c);
	}
	for (unsigned int c = 0; c < WL_NCFG; c++)
		ncfg += o.want_cfg[c];
	for (unsigned int w = 0; w < NWL; w++)
		nwl += o.want_wl[w];
	res = calloc((size_t)nwl * ncfg, sizeof(*res));
	if (!res)
		return 1;

	struct wl_report_opts ro = {.duration_s = o.c.duration_s,
				    .warmup_s = o.warmup_s,
				    .rounds = o.c.rounds,
				    .threads = o.c.threads ? o.c.threads : 1,
				    .qd = o.qd,
				    .quick = o.c.quick,
				    .loadavg = loadavg()};
	struct wl_run_opts run = {.warmup_s = o.warmup_s,
				  .duration_s = o.c.duration_s,
				  .threads = o.c.threads,
				  .qd = o.qd};

	/* the cost of one cache-line transfer between the first pair's driver and device CPUs
	   (wl_run.c pins driver i on 2i, device i on 2i + 1), measured before the runs load the
	   machine: the header and the JSON's machine section carry it */
	struct bench_xfer xfer;

	if (bench_xfer_measure(0, 1, BENCH_XFER_RUNS,
			       o.c.quick ? BENCH_XFER_QUICK_RUN_S : BENCH_XFER_RUN_S, &xfer))
		xfer.measured = false;
	bench_machine_set_xfer(&xfer);
	progress_on = isatty(2);
	progress_total = 0;
	for (unsigned int c = 0; c < WL_NCFG; c++) /* a policy's run and its baseline's after */
		progress_total += o.want_cfg[c] && !wl_cfg_is_baseline((enum wl_cfg)c) ? 2 : 0;
	for (unsigned int c = 0; c < WL_NCFG; c++) /* a baseline's first run of the round */
		progress_total += o.want_cfg[c] && wl_cfg_is_baseline((enum wl_cfg)c);
	progress_total *= nwl * o.c.rounds;
	fprintf(stderr,
		"dmaguard bench: %u workloads x %u configurations, %u round%s of %.2f s per run "
		"(about %.0f s)\n",
		nwl, ncfg, o.c.rounds, o.c.rounds > 1 ? "s" : "", o.c.duration_s,
		progress_total * (o.c.duration_s + o.warmup_s + 0.03));
	for (unsigned int w = 0; w < NWL; w++) {
		const struct wl_workload *wl = workloads[w];
		struct wl_result *row = &res[nres];
		size_t base = nres;
		double before[WL_MAX_ROUNDS][WL_NCFG], after[WL_MAX_ROUNDS][WL_NCFG];

		if (!o.want_wl[w])
			continue;
		for (unsigned int c = 0; c < WL_NCFG; c++) {
			if (!o.want_cfg[c])
				continue;
			res[nres] = (struct wl_result){.wl = wl,
						       .cfg = (enum wl_cfg)c,
						       .threads = wl_threads_for(wl, o.c.threads),
						       .qd = wl == &wl_nvme4k ? o.qd : 0};
			nres++;
		}
		for (unsigned int r = 0; r < o.c.rounds; r++) {
			/* the last run's configuration and throughput */
			enum wl_cfg last = WL_NCFG;
			double last_thr = 0;
			double xns = round_xfer(o.c.quick);

			for (size_t k = 0; k < nres - base; k++) {
				row[k].xfer_ns[r] = xns;
				row[k].rounds = r + 1;
			}

			for (size_t k = 0; k < nres - base; k++) {
				struct wl_result *x = &row[k], *bl = NULL;
				enum wl_cfg want = wl_cfg_baseline(x->cfg);
				bool is_base = want == x->cfg;

				for (size_t i = 0; i < nres - base; i++)
					if (row[i].cfg == want)
						bl = &row[i];
				/* a baseline runs first in its round; each policy is followed by
				   its baseline, and preceded by it (again, if another baseline ran
				   last) */
				if (is_base && last == x->cfg)
					continue;
				for (int pass = 0; pass < (is_base ? 1 : 3); pass++) {
					struct wl_result *y = pass == 1 ? x : bl;
					double thr = 0;
					int e;

					if (pass == 0 && !is_base && last == want) {
						before[r][x->cfg] = last_thr;
						continue;
					}
					progress(wl->name, wl_cfg_name[y->cfg], r, o.c.rounds);
					e = wl_run_once(wl, y->cfg, &run, &y->tot, &thr);
					progress_done++;
					if (e) {
						y->failed = true;
						rc = 1;
					}
					y->thr_round[y->nruns] = (uint8_t)r;
					y->thr[y->nruns++] = thr;
					last = y->cfg;
					last_thr = thr;
					if (pass == 0 && !is_base)
						before[r][x->cfg] = thr;
					else if (pass == 2)
						after[r][x->cfg] = thr;
				}
			}
		}
		/* ratios: each policy run against the baseline runs around it */
		for (size_t k = 0; k < nres - base; k++) {
			struct wl_result *x = &row[k];
			double v[WL_MAX_ROUNDS], b[WL_MAX_ROUNDS], a[WL_MAX_ROUNDS];

			if (wl_cfg_is_baseline(x->cfg)) {
				double s[WL_MAX_ROUNDS * WL_NCFG];

				memcpy(s, x->thr, x->nruns * sizeof(double));
				bench_summarize(s, x->nruns, &x->thr_s);
				for (unsigned int i = 0; i < o.c.rounds; i++)
					x->ratio[i] = 1.0;
				x->ratio_s = (struct bench_summary){.median = 1,
								    .min = 1,
								    .max = 1,
								    .mean = 1,
								    .spread = 0,
								    .p90 = 1,
								    .p99 = 1,
								    .n = o.c.rounds};
				/* a baseline row's spread: how much the baseline itself moved */
				x->ratio_s.spread = x->thr_s.spread;
				continue;
			}
			/* a policy runs once a round: its run i is round i's */
			for (unsigned int i = 0; i < x->nruns; i++) {
				v[i] = x->thr[i];
				b[i] = before[i][x->cfg];
				a[i] = after[i][x->cfg];
			}
			double tmp[WL_MAX_ROUNDS];

			/* the summary sorts its copy; x->ratio keeps the rounds' order (the JSON's
			   ratio_samples, next to each round's transfer figure) */
			size_t kept = bench_alternating_ratios(v, b, a, x->nruns, tmp, &x->ratio_s);

			wl_round_ratios(v, b, a, x->nruns, x->ratio);
			memcpy(tmp, x->thr, x->nruns * sizeof(double));
			bench_summarize(tmp, x->nruns, &x->thr_s);
			if (kept != x->nruns)
				x->failed = true;
		}
		for (size_t k = base; k < nres; k++)
			wl_result_derive(&res[k]);
	}
	progress_end();

	wl_report_table(stdout, res, nres, &ro);
	if (o.c.json_path && wl_report_json(o.c.json_path, res, nres, &ro))
		rc = 1;
	if (o.csv && wl_report_csv(o.csv, res, nres))
		rc = 1;
	if (o.plot) {
		if (!strcmp(o.plot, "ascii"))
			wl_plot_ascii(stdout, res, nres, 50);
		else if (wl_report_plot(o.plot, res, nres))
			rc = 1;
	}
	for (size_t k = 0; k < nres; k++)
		if (res[k].failed)
			fprintf(stderr, "bench workloads: %s/%s FAILED (see above)\n",
				res[k].wl->name, wl_cfg_name[res[k].cfg]);
	free(res);
	return rc;
}

DG_BENCH_SUITE(
	workloads, "workloads",
	"the seed workloads (xdp64, fwd64, bond4, tcp, nvme4k) under every policy vs identity",
	bench_workloads_main)
