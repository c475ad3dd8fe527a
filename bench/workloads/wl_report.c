/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_report.c - what "dmaguard bench" prints and writes: the header (with the
 * machine's cache-line transfer cost, bench/machine.c), the table (one row per workload and
 * configuration), the matrix of ratios, strict's cross-core transfers per I/O against its
 * extra time (that only where the rounds' transfers agreed and the runs held still; with the
 * range of the transfer measured at each round's start), the seed
 * comparison of DESIGN.md section 1, grep-able RESULT lines, JSON (docs/bench-json.md), CSV,
 * and the bar chart of ratios (gnuplot PNG/SVG, or ASCII).
 */
#include "wl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- derived figures ------------------------------------------------------------------------- */

void wl_result_derive(struct wl_result *res)
{
	const struct wl_totals *t = &res->tot;
	double ios = (double)t->ios, pages = (double)t->dev_bytes / 4096.0;

	res->dma_ns = t->dma_ios ? (double)t->dma_ns / (double)t->dma_ios : 0;
	res->xlat_ns = t->xlat_units && t->ios ?
			       (double)t->xlat_ns / (double)t->xlat_units * (double)t->units / ios :
			       0;
	res->miss_4k = pages > 0 ? (double)t->iotlb_misses / pages : 0;
	res->walks_4k = pages > 0 ? (double)t->walks / pages : 0;
	res->inval_io = ios > 0 ? (double)t->inval_cmds / ios : 0;
	res->waits_io = ios > 0 ? (double)t->waits / ios : 0;
	/* busy = 1 - idle / thread time; an idle run still open at an end of the interval is
	   counted when it closes, so clamp */
	double thr_ns = t->seconds * 1e9 * (res->threads ? res->threads : 1);

	res->drv_busy = thr_ns > 0 ? 1 - (double)t->drv_idle_ns / thr_ns : 0;
	res->dev_busy = thr_ns > 0 ? 1 - (double)t->dev_idle_ns / thr_ns : 0;
	res->drv_busy = res->drv_busy < 0 ? 0 : res->drv_busy > 1 ? 1 : res->drv_busy;
	res->dev_busy = res->dev_busy < 0 ? 0 : res->dev_busy > 1 ? 1 : res->dev_busy;
	switch (res->cfg) {
	case WL_IDENTITY:
	case WL_IDENTITY_2STEP:
	case WL_POOL:
	case WL_WINDOW:
		res->window_ns = -1; /* the buffers stay reachable for good */
		break;
	case WL_LAZY:
		res->window_ns = (double)t->lazy_window_ns;
		break;
	default:
		res->window_ns = 0;
		break;
	}
	res->subpage = t->maps ? (double)t->subpage_bytes / (double)t->maps : 0;
}

void wl_round_ratios(const double *value, const double *before, const double *after, size_t n,
		     double *ratio)
{
	for (size_t i = 0; i < n; i++) {
		double base = (before[i] + after[i]) / 2;

		ratio[i] = !(base > 0) || !(value[i] >= 0) || isinf(base) || isinf(value[i]) ?
				   NAN :
				   value[i] / base;
	}
}

/* ---- formatting ------------------------------------------------------------------------------ */

static void fmt_thr(char *buf, size_t n, const struct wl_workload *wl, double v)
{
	if (!strcmp(wl->unit, "IOPS"))
		snprintf(buf, n, v >= 1e6 ? "%.2fM IOPS" : "%.0fK IOPS",
			 v >= 1e6 ? v / 1e6 : v / 1e3);
	else if (!strcmp(wl->unit, "Mpps"))
		snprintf(buf, n, "%.2f Mpps", v);
	else
		snprintf(buf, n, "%.1f %s", v, wl->unit);
}

static void fmt_bytes(char *buf, size_t n, double b)
{
	if (b >= 1 << 30)
		snprintf(buf, n, "%.1f GiB", b / (1 << 30));
	else if (b >= 1 << 20)
		snprintf(buf, n, "%.1f MiB", b / (1 << 20));
	else if (b >= 1 << 10)
		snprintf(buf, n, "%.0f KiB", b / (1 << 10));
	else
		snprintf(buf, n, "%.0f B", b);
}

static const char *exposure(const struct wl_result *r)
{
	switch (r->cfg) {
	case WL_IDENTITY:
	case WL_IDENTITY_2STEP:
		return "all-memory";
	case WL_POOL:
		return "pool";
	case WL_WINDOW:
		return "window-direct";
	case WL_LAZY:
		return "window";
	case WL_BOUNCE:
		return "none";
	default:
		return r->subpage > 0 ? "sub-page" : "none";
	}
}

static void fmt_protection(char *buf, size_t n, const struct wl_result *r)
{
	char sz[32], sub[64] = "";

	if (r->subpage >= 0.5)
		snprintf(sub, sizeof(sub), "; %.0f B of other data per buffer", r->subpage);
	fmt_bytes(sz, sizeof(sz), (double)r->tot.persistent_bytes);
	switch (r->cfg) {
	case WL_IDENTITY:
	case WL_IDENTITY_2STEP:
		snprintf(buf, n, "none: the device reaches all memory");
		break;
	case WL_STRICT:
	case WL_STRICT_2STEP:
	case WL_LINUX:
		snprintf(buf, n, "no window%s", sub);
		break;
	case WL_LAZY:
		snprintf(buf, n, "window <= %.1f ms, %llu unmaps%s", r->window_ns / 1e6,
			 (unsigned long long)r->tot.lazy_window_unmaps, sub);
		break;
	case WL_WINDOW:
		snprintf(buf, n, "%s direct region exposed for good", sz);
		break;
	case WL_BOUNCE:
		snprintf(buf, n, "no window, no sub-page exposure%s", sub);
		break;
	case WL_POOL:
		snprintf(buf, n, "%s of pools exposed for good", sz);
		break;
	default:
		buf[0] = 0;
	}
}

/* The result of @wl (any workload if NULL) under @cfg, or NULL. */
static const struct wl_result *find(const struct wl_result *res, size_t n,
				    const struct wl_workload *wl, enum wl_cfg cfg)
{
	for (size_t i = 0; i < n; i++)
		if ((!wl || res[i].wl == wl) && res[i].cfg == cfg)
			return &res[i];
	return NULL;
}

/* The seeds of DESIGN.md section 1 that a workload here reproduces. */
static const struct {
	const char *where;
	const char *workload;
	double without, with;
	const char *unit;
} seeds[] = {
	{"Linux XDP 64 B (tboot forces the IOMMU on)", "xdp64", 20, 6, "Mpps"},
	{"Intel 82599 x4 bonded, iperf", "bond4", 37.6, 28.7, "Gbit/s"},
	{"ARM SMMUv3 50G NIC, TCP RX x8", "tcp-x8", 36, 12.6, "Gbit/s"},
	{"ARM SMMUv3 NVMe-oF 4K randread, 8 jobs", "nvme4k", 1080, 520, "K IOPS"},
};

/* How many of a result's rounds measured the transfer, and their figures' least and greatest
   (NaN both when none did). */
static unsigned int xfer_minmax(const struct wl_result *r, double *lo, double *hi)
{
	unsigned int k = 0;

	*lo = NAN;
	*hi = NAN;
	for (unsigned int i = 0; i < r->rounds; i++)
		if (isfinite(r->xfer_ns[i])) {
			*lo = k && *lo < r->xfer_ns[i] ? *lo : r->xfer_ns[i];
			*hi = k && *hi > r->xfer_ns[i] ? *hi : r->xfer_ns[i];
			k++;
		}
	return k;
}

/* The range of a result's per-round transfer figures, "min-max" ns ("-": none measured). */
static void xfer_range(char *buf, size_t n, const struct wl_result *r)
{
	double lo, hi;

	if (!xfer_minmax(r, &lo, &hi))
		snprintf(buf, n, "-");
	else
		snprintf(buf, n, "%.0f-%.0f", lo, hi);
}

/*
 * When strict's measured extra time per I/O (the note's "measured +ns") is shown: it is the
 * difference of two medians, strict's and identity's time per packet, which the host moves by
 * more than the transfers' whole share when the machine is loaded (318 ns was seen) or the
 * vCPUs move. It is printed only if
 *  - every round of the workload measured the transfer, and those figures and the header's
 *    (the one the note multiplies by) lie within a factor WL_NOTE_XFER_FACTOR: the price of a
 *    line held while the runs ran;
 *  - identity's runs and strict's runs each spread at most WL_NOTE_SPREAD_MAX ((max - min) /
 *    median of the throughputs): a spread s leaves a median's time per packet uncertain by up
 *    to about s / 2 of it, at 10% about 3 ns for xdp64 (57 ns a packet) and 5 ns for fwd64
 *    (95 ns), small against the lines' 14-28 ns (docs/bench.md "Reading the table").
 * Otherwise the column says "-", and a line under the note says which limit failed.
 */
#define WL_NOTE_XFER_FACTOR 1.5
#define WL_NOTE_SPREAD_MAX  0.10
#define WL_MAX_NOTE_ROWS    16 /* rows whose "-" the note explains (one per workload) */

/* Whether @r's measured extra time (against @id) may be shown, with @hdr_ns the header's
   transfer; if not, why, in @why. */
static bool note_extra_shown(const struct wl_result *r, const struct wl_result *id, double hdr_ns,
			     char *why, size_t n)
{
	double lo, hi;
	unsigned int k = xfer_minmax(r, &lo, &hi);
	size_t l = 0;

	why[0] = 0;
	if (k < r->rounds || !k)
		l += (size_t)snprintf(why + l, n - l, "; %u of %u rounds measured the transfer", k,
				      r->rounds);
	if (k) {
		lo = hdr_ns < lo ? hdr_ns : lo;
		hi = hdr_ns > hi ? hdr_ns : hi;
	}
	if (k && l < n && !(hi <= WL_NOTE_XFER_FACTOR * lo))
		l += (size_t)snprintf(why + l, n - l,
				      "; the transfer moved %.0f-%.0f ns (header and rounds: over "
				      "x%.1f)",
				      lo, hi, WL_NOTE_XFER_FACTOR);
	if (l < n && !(id->thr_s.spread <= WL_NOTE_SPREAD_MAX))
		l += (size_t)snprintf(why + l, n - l,
				      "; identity's runs spread %.0f%% (over %.0f%%)",
				      100 * id->thr_s.spread, 100 * WL_NOTE_SPREAD_MAX);
	if (l < n && !(r->thr_s.spread <= WL_NOTE_SPREAD_MAX))
		l += (size_t)snprintf(why + l, n - l, "; strict's runs spread %.0f%% (over %.0f%%)",
				      100 * r->thr_s.spread, 100 * WL_NOTE_SPREAD_MAX);
	return !why[0];
}

/*
 * Strict's device-side cross-core transfers per I/O against its extra time per I/O, for the
 * workloads whose every mapping is one page (the 64-byte NIC family: unit Mpps): one page-table
 * line per 8 new mappings (8 PTEs per line, IOVAs ascending; the device reads each line once
 * after the driver wrote it) and two lines per invalidation command (the slot, whose stamp the
 * device watches, and the acknowledgement; `published` was a third until devices watched the
 * stamp: docs/iommu.md "Shared cache lines"). Their count times the measured
 * transfer cost is the order of strict's extra time per I/O (docs/bench.md "Reading the
 * table"). The measured extra time is shown only where it can be read (note_extra_shown());
 * the last column is the range (min-max) of the transfer measured at the start of each round
 * of the workload (bench_workloads.c): how far the cost moved under the rounds.
 */
void wl_report_transfers(FILE *out, const struct wl_result *res, size_t n,
			 const struct bench_xfer *x)
{
	char why[WL_MAX_NOTE_ROWS][256];
	const char *whose[WL_MAX_NOTE_ROWS];
	unsigned int nwhy = 0;
	bool head = false;

	if (!x || !x->measured)
		return;
	for (size_t i = 0; i < n; i++) {
		const struct wl_result *r = &res[i], *id;

		if (r->cfg != WL_STRICT || strcmp(r->wl->unit, "Mpps") || !r->tot.ios)
			continue;
		id = find(res, n, r->wl, WL_IDENTITY);
		if (!id || !(id->thr_s.median > 0) || !(r->thr_s.median > 0))
			continue;
		double maps = (double)r->tot.maps / (double)r->tot.ios;
		double lines = maps / 8 + 2 * r->inval_io;
		/* ns per packet per thread pair */
		double extra = r->threads * 1e3 * (1 / r->thr_s.median - 1 / id->thr_s.median);
		char range[32], measured[32] = "-", reason[256];

		xfer_range(range, sizeof(range), r);
		if (note_extra_shown(r, id, x->ns.median, reason, sizeof(reason)))
			snprintf(measured, sizeof(measured), "%.1f", extra);
		else if (nwhy < WL_MAX_NOTE_ROWS) {
			snprintf(why[nwhy], sizeof(why[nwhy]), "%s", reason + 2);
			whose[nwhy++] = r->wl->name;
		}
		if (!head)
			fprintf(out,
				"\nstrict's device-side cross-core transfers per I/O (maps/8 + 2 x "
				"inval) x %.0f ns, against strict's extra time per I/O\n"
				"%-9s %7s %7s %9s %10s %13s %14s\n",
				x->ns.median, "workload", "maps", "inval", "lines/IO", "x xfer ns",
				"measured +ns", "xfer ns/round");
		head = true;
		fprintf(out, "%-9s %7.3f %7.4f %9.3f %10.1f %13s %14s\n", r->wl->name, maps,
			r->inval_io, lines, lines * x->ns.median, measured, range);
	}
	for (unsigned int k = 0; k < nwhy; k++)
		fprintf(out, "(%s: measured +ns not shown: %s)\n", whose[k], why[k]);
}

void wl_report_table(FILE *out, struct wl_result *res, size_t n, const struct wl_report_opts *o)
{
	char thr[32], prot[128], xfer[160];

	bench_xfer_format(xfer, sizeof(xfer), bench_machine_xfer());
	fprintf(out,
		"dmaguard bench: seed workloads, every policy against identity in the same run\n"
		"machine: %s, %u CPUs, load %.2f; %s\n"
		"%u thread pair%s; %u round%s of %.2f s per run, identity run before and after "
		"each\n\n",
		bench_cpu_model(), bench_ncpus(), o->loadavg, xfer, o->threads,
		o->threads > 1 ? "s" : "", o->rounds, o->rounds > 1 ? "s" : "", o->duration_s);
	fprintf(out, "%-9s %-14s %15s %6s %6s %8s %8s %7s %7s %6s %7s %7s  %s\n", "workload",
		"policy", "throughput", "ratio", "spread", "drv ns", "dev ns", "miss", "walks",
		"inval", "waits", "busy %", "protection");
	fprintf(out, "%-9s %-14s %15s %6s %6s %8s %8s %7s %7s %6s %7s %7s\n", "", "", "(median)",
		"to id", "", "/IO DMA", "/IO xlat", "/4K", "/4K", "/IO", "/IO", "drv/dev");
	for (size_t i = 0; i < n; i++) {
		struct wl_result *r = &res[i];

		if (i && res[i - 1].wl != r->wl)
			fputc('\n', out);
		fmt_thr(thr, sizeof(thr), r->wl, r->thr_s.median);
		fmt_protection(prot, sizeof(prot), r);
		fprintf(out,
			"%-9s %-14s %15s %6.3f %5.0f%% %8.1f %8.1f %7.3f %7.3f %6.3f %7.4f %3.0f/%3.0f  "
			"%s%s\n",
			r->wl->name, wl_cfg_name[r->cfg], thr, r->ratio_s.median,
			100 * r->ratio_s.spread, r->dma_ns, r->xlat_ns, r->miss_4k, r->walks_4k,
			r->inval_io, r->waits_io, 100 * r->drv_busy, 100 * r->dev_busy, prot,
			r->failed ? "  [FAILED]" : "");
	}

	/* the matrix of ratios; the two-step configurations' baseline is shown as a throughput */
	fprintf(out, "\nratio to identity (median of %u round%s)\n%-9s %15s", o->rounds,
		o->rounds > 1 ? "s" : "", "workload", "identity");
	for (unsigned int c = 1; c < WL_NCFG; c++)
		fprintf(out, c == WL_IDENTITY_2STEP ? " %15s" : " %9s", wl_cfg_name[c]);
	fputc('\n', out);
	for (size_t i = 0; i < n; i++) {
		if (res[i].cfg != WL_IDENTITY)
			continue;
		fmt_thr(thr, sizeof(thr), res[i].wl, res[i].thr_s.median);
		fprintf(out, "%-9s %15s", res[i].wl->name, thr);
		for (unsigned int c = 1; c < WL_NCFG; c++) {
			const struct wl_result *r = find(res, n, res[i].wl, (enum wl_cfg)c);

			if (c == WL_IDENTITY_2STEP) {
				if (r)
					fmt_thr(thr, sizeof(thr), r->wl, r->thr_s.median);
				fprintf(out, " %15s", r ? thr : "-");
			} else if (r) {
				fprintf(out, " %9.3f", r->ratio_s.median);
			} else {
				fprintf(out, " %9s", "-");
			}
		}
		fputc('\n', out);
	}
	if (find(res, n, NULL, WL_STRICT_2STEP))
		fprintf(out,
			"(%s: the drivers link buffers into per-ring IOVA slots, the two-step "
			"API; its ratio divides by %s, identity through the same drivers)\n",
			wl_cfg_name[WL_STRICT_2STEP], wl_cfg_name[WL_IDENTITY_2STEP]);
	wl_report_transfers(out, res, n, bench_machine_xfer());

	/* the seeds next to what this machine measured */
	fprintf(out,
		"\nseeds (DESIGN.md section 1): ratio with the IOMMU on there, and here\n"
		"%-42s %-17s %6s  %-9s %9s %9s %9s\n",
		"where", "seed", "ratio", "workload", "linux-ref", "strict", "lazy");
	for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++) {
		const struct wl_result *id = NULL;
		char seed[32];

		for (size_t i = 0; i < n; i++)
			if (!strcmp(res[i].wl->name, seeds[s].workload) &&
			    res[i].cfg == WL_IDENTITY)
				id = &res[i];
		snprintf(seed, sizeof(seed), "%g -> %g %s", seeds[s].without, seeds[s].with,
			 seeds[s].unit);
		fprintf(out, "%-42s %-17s %6.2f  %-9s", seeds[s].where, seed,
			seeds[s].with / seeds[s].without, seeds[s].workload);
		for (enum wl_cfg c = WL_LINUX;; c = c == WL_LINUX ? WL_STRICT : WL_LAZY) {
			const struct wl_result *r = id ? find(res, n, id->wl, c) : NULL;

			if (r)
				fprintf(out, " %9.3f", r->ratio_s.median);
			else
				fprintf(out, " %9s", "-");
			if (c == WL_LAZY)
				break;
		}
		fputc('\n', out);
	}
	fputc('\n', out);
	for (size_t i = 0; i < n; i++)
		wl_report_result_line(out, &res[i]);
	fflush(out);
}

void wl_report_result_line(FILE *out, const struct wl_result *r)
{
	double lo, hi;
	unsigned int k = xfer_minmax(r, &lo, &hi);

	/* xfer_ns_*: the rounds' transfer figures (nan when no round measured it) */
	fprintf(out,
		"RESULT suite=workloads workload=%s policy=%s throughput=%.4g unit=%s "
		"ratio=%.4f spread=%.4f driver_dma_ns=%.1f device_xlat_ns=%.1f "
		"misses_per_4k=%.4f waits_per_io=%.4f window_ns=%.0f subpage_bytes=%.0f "
		"xfer_ns_min=%.1f xfer_ns_max=%.1f xfer_rounds=%u ok=%d\n",
		r->wl->name, wl_cfg_name[r->cfg], r->thr_s.median, r->wl->unit, r->ratio_s.median,
		r->ratio_s.spread, r->dma_ns, r->xlat_ns, r->miss_4k, r->waits_io, r->window_ns,
		r->subpage, k ? lo : NAN, k ? hi : NAN, k, !r->failed);
}

/* ---- JSON -------------------------------------------------------------------------------------- */

static json_t *array_of(const double *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(v[i]));
	return a;
}

/* Per round: a number, or null where it was not measured (NaN). */
static json_t *array_or_null(const double *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, isfinite(v[i]) ? json_real(v[i]) : json_null());
	return a;
}

static json_t *rounds_of(const uint8_t *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

static json_t *result_json(const struct wl_result *r, const struct wl_result *id)
{
	const struct wl_totals *t = &r->tot;
	json_t *j = json_object();
	/* a policy's runs, one a round, are its rounds; a baseline has no ratio of its own */
	size_t nratio = wl_cfg_is_baseline(r->cfg) ? 0 : r->nruns;

	json_object_set_new(j, "workload", json_string(r->wl->name));
	json_object_set_new(j, "policy", json_string(wl_cfg_name[r->cfg]));
	json_object_set_new(j, "unit", json_string(r->wl->unit));
	json_object_set_new(j, "io", json_string(r->wl->io));
	json_object_set_new(j, "threads", json_integer(r->threads));
	if (r->qd)
		json_object_set_new(j, "qd", json_integer(r->qd));
	json_object_set_new(j, "ok", json_boolean(!r->failed));
	json_object_set_new(j, "throughput", json_real(r->thr_s.median));
	json_object_set_new(j, "baseline", json_string(wl_cfg_name[wl_cfg_baseline(r->cfg)]));
	json_object_set_new(j, "throughput_identity", json_real(id ? id->thr_s.median : 0));
	json_object_set_new(j, "throughput_samples", array_of(r->thr, r->nruns));
	json_object_set_new(j, "throughput_sample_rounds", rounds_of(r->thr_round, r->nruns));
	json_object_set_new(j, "ratio_to_identity", json_real(r->ratio_s.median));
	json_object_set_new(j, "ratio_spread", json_real(r->ratio_s.spread));
	json_object_set_new(j, "ratio_min", json_real(r->ratio_s.min));
	json_object_set_new(j, "ratio_max", json_real(r->ratio_s.max));
	json_object_set_new(j, "ratio_samples", array_or_null(r->ratio, nratio));
	json_object_set_new(j, "cacheline_transfer_ns_samples",
			    array_or_null(r->xfer_ns, r->rounds));
	json_object_set_new(j, "rounds", json_integer((json_int_t)nratio));
	json_object_set_new(j, "driver_dma_ns_per_io", json_real(r->dma_ns));
	json_object_set_new(j, "device_translate_ns_per_io", json_real(r->xlat_ns));
	json_object_set_new(j, "iotlb_misses_per_4k", json_real(r->miss_4k));
	json_object_set_new(j, "walks_per_4k", json_real(r->walks_4k));
	json_object_set_new(j, "invalidations_per_io", json_real(r->inval_io));
	json_object_set_new(j, "waits_per_io", json_real(r->waits_io));
	json_object_set_new(j, "driver_busy", json_real(r->drv_busy));
	json_object_set_new(j, "device_busy", json_real(r->dev_busy));
	json_object_set_new(j, "window_ns", json_real(r->window_ns));
	json_object_set_new(j, "window_unmaps", json_integer((json_int_t)t->lazy_window_unmaps));
	json_object_set_new(j, "subpage_exposed_bytes", json_real(r->subpage));
	json_object_set_new(j, "subpage_exposed_max", json_integer((json_int_t)t->subpage_max));
	json_object_set_new(j, "persistent_exposed_bytes",
			    json_integer((json_int_t)t->persistent_bytes));
	json_object_set_new(j, "exposes_all_memory", json_boolean(t->exposes_all));
	json_object_set_new(j, "exposure", json_string(exposure(r)));
	json_object_set_new(
		j, "counters",
		json_pack("{s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
			  "s:I, s:I, s:I}",
			  "seconds", t->seconds, "ios", (json_int_t)t->ios, "bytes",
			  (json_int_t)t->bytes, "device_bytes", (json_int_t)t->dev_bytes, "maps",
			  (json_int_t)t->maps, "unmaps", (json_int_t)t->unmaps, "run_maps",
			  (json_int_t)t->run_maps, "run_unmaps", (json_int_t)t->run_unmaps,
			  "iotlb_misses", (json_int_t)t->iotlb_misses, "walks",
			  (json_int_t)t->walks, "inval_cmds", (json_int_t)t->inval_cmds, "waits",
			  (json_int_t)t->waits, "faults", (json_int_t)t->run_faults, "errors",
			  (json_int_t)t->run_errors, "timeouts", (json_int_t)t->timeouts,
			  "driver_timed_ios", (json_int_t)t->dma_ios, "device_timed_units",
			  (json_int_t)t->xlat_units));
	return j;
}

int wl_report_json(const char *path, struct wl_result *res, size_t n,
		   const struct wl_report_opts *o)
{
	struct bench_report rep;
	int rc;

	if (bench_report_init(&rep, "workloads"))
		return -ENOMEM;
	json_object_set_new(rep.root, "run",
			    json_pack("{s:i, s:f, s:f, s:i, s:i, s:b, s:f}", "rounds",
				      (int)o->rounds, "duration_s", o->duration_s, "warmup_s",
				      o->warmup_s, "threads", (int)o->threads, "qd", (int)o->qd,
				      "quick", o->quick, "loadavg", o->loadavg));
	for (size_t i = 0; i < n; i++)
		bench_report_add(&rep, result_json(&res[i], find(res, n, res[i].wl,
								 wl_cfg_baseline(res[i].cfg))));
	rc = bench_report_write(&rep, path);
	bench_report_fini(&rep);
	return rc;
}

/* ---- CSV ---------------------------------------------------------------------------------------- */

void wl_report_csv_write(FILE *f, struct wl_result *res, size_t n)
{
	fprintf(f, "workload,policy,unit,throughput,throughput_identity,ratio_to_identity,"
		   "ratio_spread,driver_dma_ns_per_io,device_translate_ns_per_io,"
		   "iotlb_misses_per_4k,walks_per_4k,invalidations_per_io,waits_per_io,window_ns,"
		   "window_unmaps,subpage_exposed_bytes,persistent_exposed_bytes,exposure,ok,"
		   "cacheline_transfer_ns_min,cacheline_transfer_ns_max,"
		   "cacheline_transfer_ns_samples\n");
	for (size_t i = 0; i < n; i++) {
		const struct wl_result *r = &res[i],
				       *id = find(res, n, r->wl, wl_cfg_baseline(r->cfg));
		double lo, hi;

		fprintf(f,
			"%s,%s,%s,%.6g,%.6g,%.5f,%.5f,%.2f,%.2f,%.5f,%.5f,%.5f,%.5f,%.0f,%llu,%.1f,"
			"%llu,%s,%d,",
			r->wl->name, wl_cfg_name[r->cfg], r->wl->unit, r->thr_s.median,
			id ? id->thr_s.median : 0, r->ratio_s.median, r->ratio_s.spread, r->dma_ns,
			r->xlat_ns, r->miss_4k, r->walks_4k, r->inval_io, r->waits_io, r->window_ns,
			(unsigned long long)r->tot.lazy_window_unmaps, r->subpage,
			(unsigned long long)r->tot.persistent_bytes, exposure(r), !r->failed);
		/* the rounds' transfer figures: min and max (empty when no round measured it),
		   then every round's in order, ';' between them, empty where not measured */
		if (xfer_minmax(r, &lo, &hi))
			fprintf(f, "%.1f,%.1f,", lo, hi);
		else
			fputs(",,", f);
		for (unsigned int k = 0; k < r->rounds; k++) {
			if (k)
				fputc(';', f);
			if (isfinite(r->xfer_ns[k]))
				fprintf(f, "%.1f", r->xfer_ns[k]);
		}
		fputc('\n', f);
	}
}

int wl_report_csv(const char *path, struct wl_result *res, size_t n)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "bench workloads: cannot write %s: %s\n", path, strerror(errno));
		return -errno;
	}
	wl_report_csv_write(f, res, n);
	if (fclose(f)) {
		fprintf(stderr, "bench workloads: cannot write %s\n", path);
		return -EIO;
	}
	return 0;
}

/* ---- plots --------------------------------------------------------------------------------------- */

/*
 * Bars scale to the largest ratio of the run, at most WL_PLOT_TOP (a wild ratio from a disturbed
 * round would otherwise squash every other bar to nothing); a longer bar is clipped and ends in
 * '>' (in the last column). Any positive ratio gets at least one '#'.
 */
#define WL_PLOT_TOP 2.0

void wl_plot_ascii(FILE *out, struct wl_result *res, size_t n, unsigned int width)
{
	double top = 1.0;

	for (size_t i = 0; i < n; i++)
		if (res[i].ratio_s.median > top && isfinite(res[i].ratio_s.median))
			top = res[i].ratio_s.median;
	if (top > WL_PLOT_TOP)
		top = WL_PLOT_TOP;
	fprintf(out, "\nratio to identity ('|' marks 1.0)\n");
	for (size_t i = 0; i < n; i++) {
		const struct wl_result *r = &res[i];
		double v = isfinite(r->ratio_s.median) && r->ratio_s.median > 0 ?
				   r->ratio_s.median :
				   0;
		bool clipped = v > top;
		unsigned int bar = clipped ? width : (unsigned int)(v / top * width + 0.5);
		unsigned int one = (unsigned int)(1.0 / top * width + 0.5);

		if (v > 0 && bar == 0)
			bar = 1;
		if (i && res[i - 1].wl != r->wl)
			fputc('\n', out);
		fprintf(out, "%-9s %-14s %6.3f ", i && res[i - 1].wl == r->wl ? "" : r->wl->name,
			wl_cfg_name[r->cfg], v);
		for (unsigned int k = 0; k <= width; k++)
			fputc(k < bar ? '#' : clipped ? '>' : k == one ? '|' : ' ', out);
		fputc('\n', out);
	}
	fflush(out);
}

int wl_report_plot(const char *target, struct wl_result *res, size_t n)
{
	char data[] = "/tmp/dmaguard-plot-XXXXXX";
	size_t l = strlen(target);
	bool svg = l > 4 && !strcmp(target + l - 4, ".svg");
	int fd = mkstemp(data), rc = 0;
	FILE *f, *gp;

	if (fd < 0)
		return -errno;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		unlink(data);
		return -ENOMEM;
	}
	/* one line per workload: its name, then the ratio of every configuration */
	fprintf(f, "workload");
	for (unsigned int c = 0; c < WL_NCFG; c++)
		fprintf(f, " %s", wl_cfg_name[c]);
	fputc('\n', f);
	for (size_t i = 0; i < n; i++) {
		if (res[i].cfg != WL_IDENTITY)
			continue;
		fprintf(f, "%s", res[i].wl->name);
		for (unsigned int c = 0; c < WL_NCFG; c++) {
			const struct wl_result *r = find(res, n, res[i].wl, (enum wl_cfg)c);

			fprintf(f, " %.4f", r ? r->ratio_s.median : NAN);
		}
		fputc('\n', f);
	}
	fclose(f);
	gp = popen("gnuplot", "w");
	if (!gp) {
		fprintf(stderr, "bench workloads: cannot run gnuplot (try --plot ascii)\n");
		unlink(data);
		return -ENOENT;
	}
	fprintf(gp,
		"set terminal %s size 1200,600 noenhanced\n"
		"set output '%s'\n"
		"set title 'dmaguard bench: throughput as a ratio to identity (same run)'\n"
		"set style data histograms\nset style histogram clustered gap 1\n"
		"set style fill solid 0.8 border -1\nset boxwidth 0.9\n"
		"set ylabel 'ratio to identity'\nset yrange [0:*]\nset grid ytics\n"
		"set key outside right top\nset xtics rotate by -30\n"
		"set datafile missing 'nan'\n"
		"plot for [c=2:%u] '%s' using c:xtic(1) title columnheader(c)\n",
		svg ? "svg" : "pngcairo", target, WL_NCFG + 1, data);
	rc = pclose(gp);
	unlink(data);
	if (rc) {
		fprintf(stderr, "bench workloads: gnuplot failed to write %s\n", target);
		return -EIO;
	}
	return 0;
}
