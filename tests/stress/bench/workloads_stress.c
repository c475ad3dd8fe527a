/* SPDX-License-Identifier: MIT */
/*
 * workloads_stress THREADS OPS [all] - every workload of "dmaguard bench" in fixed-count
 * mode under identity, strict and one more configuration (lazy, window, bounce, pool and
 * linux-ref in turn; "all": every configuration): THREADS driver/device thread pairs, OPS
 * I/Os per driver thread (tcp: OPS / 16, each I/O is 64 KiB). Under ThreadSanitizer this checks the rings' release/acquire
 * protocol (descriptors, doorbells, status words, NVMe phase bits) and the drain; in every
 * build, that each run does its I/Os with correct data (the driver checks every frame and
 * block, the device every send), no fault, no error, and gives back every buffer and mapping
 * (wl_run_once() fails otherwise).
 */
#include "wl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	const struct wl_workload *wls[] = {&wl_xdp64,  &wl_xdp64_2k, &wl_xdp64_4k,
					   &wl_fwd64,  &wl_bond4,    &wl_tcp_x1,
					   &wl_tcp_x4, &wl_tcp_x8,   &wl_nvme4k};
	unsigned int threads = argc > 1 ? (unsigned int)atoi(argv[1]) : 1;
	uint64_t ops = argc > 2 ? strtoull(argv[2], NULL, 0) : 2000;
	bool all = argc > 3 && !strcmp(argv[3], "all");
	int failed = 0;

	if (!threads || threads > WL_MAX_THREADS || !ops) {
		fprintf(stderr, "usage: workloads_stress THREADS OPS\n");
		return 2;
	}
	for (size_t w = 0; w < sizeof(wls) / sizeof(wls[0]); w++)
		for (unsigned int c = 0; c < WL_NCFG; c++) {
			/* identity, strict and strict-2step always, one of the others in turn */
			bool always = c <= WL_STRICT || c == WL_STRICT_2STEP;

			if (!all && !always && c != WL_LAZY + w % (WL_IDENTITY_2STEP + 1 - WL_LAZY))
				continue;
			/* unpinned: a thread starved on its CPU by other load can move to the
			   other one (pinned, sanitizer runs side by side under load stalled) */
			struct wl_run_opts o = {.threads = threads,
						.unpinned = true,
						.qd = 8,
						.ops = wls[w]->unit_bits && !wls[w]->fixed_ports ?
							       (ops + 15) / 16 :
							       ops};
			struct wl_totals t = {0};
			double thr;
			int e = wl_run_once(wls[w], (enum wl_cfg)c, &o, &t, &thr);
			unsigned int nthr = wl_threads_for(wls[w], threads);

			if (e || t.ios < o.ops * nthr || t.run_maps != t.run_unmaps ||
			    t.run_faults || t.run_errors) {
				fprintf(stderr,
					"FAIL %s/%s: rc %d, %llu I/Os (want %llu), %llu maps, %llu "
					"unmaps, %llu faults, %llu errors\n",
					wls[w]->name, wl_cfg_name[c], e, (unsigned long long)t.ios,
					(unsigned long long)(o.ops * nthr),
					(unsigned long long)t.run_maps,
					(unsigned long long)t.run_unmaps,
					(unsigned long long)t.run_faults,
					(unsigned long long)t.run_errors);
				failed++;
			}
		}
	printf("workloads_stress: %d failures\n", failed);
	return failed ? 1 : 0;
}
