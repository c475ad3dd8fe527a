/* SPDX-License-Identifier: MIT */
/*
 * bench_pt_json_check FILE timed|fixed - validate the JSON report of "dmaguard bench pt" (used
 * by bench_pt_test.sh) against docs/bench-json.md: timed reports hold every format x workload
 * case with one and two threads, positive times, consistent per-page numbers and a scaling
 * factor for two threads; fixed-count reports hold the one case run with its exact count.
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "json_check.h"

static const char *const cases[] = {
	"vtd/4k-seq",	   "vtd/4k-rand",    "vtd/2m",	       "vtd/256x4k",	 "lpae-s1/4k-seq",
	"lpae-s1/4k-rand", "lpae-s1/2m",     "lpae-s1/256x4k", "lpae-s2/4k-seq", "lpae-s2/4k-rand",
	"lpae-s2/2m",	   "lpae-s2/256x4k", "flat/4k-seq",    "flat/4k-rand",	 "flat/256x4k",
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

int main(int argc, char **argv)
{
	json_t *root, *results, *r;
	int seen[NCASES][3] = {{0}};
	bool timed;
	size_t i;

	if (argc != 3 || (strcmp(argv[2], "timed") && strcmp(argv[2], "fixed"))) {
		fprintf(stderr, "usage: bench_pt_json_check FILE timed|fixed\n");
		return 2;
	}
	timed = !strcmp(argv[2], "timed");
	root = jc_load(argv[1]);
	if (!root)
		return 1;
	results = jc_results(root, "pt");
	EXPECT(!strcmp(jc_str(root, "tool"), "dmaguard"), "tool");
	EXPECT(json_is_array(results), "results");
	json_array_foreach(results, i, r)
	{
		const char *name = jc_str(r, "case");
		json_int_t thr = json_integer_value(json_object_get(r, "threads"));
		size_t c;

		for (c = 0; c < NCASES && strcmp(cases[c], name); c++)
			;
		EXPECT(c < NCASES, "unknown case '%s'", name);
		EXPECT(thr == 1 || thr == 2, "%s: threads", name);
		EXPECT(strstr(name, jc_str(r, "workload")) && *jc_str(r, "workload"),
		       "%s: workload", name);
		EXPECT(!strncmp(jc_str(r, "format"), "vtd-ss", 6) ||
			       !strncmp(jc_str(r, "format"), "arm-lpae-s", 10) ||
			       !strcmp(jc_str(r, "format"), "flat"),
		       "%s: format", name);
		EXPECT(json_integer_value(json_object_get(r, "ops")) > 0, "%s: ops", name);
		if (c < NCASES && (thr == 1 || thr == 2))
			seen[c][thr]++;
		if (!timed) {
			EXPECT(!strcmp(jc_str(r, "mode"), "fixed"), "%s: mode", name);
			EXPECT(json_integer_value(json_object_get(r, "ops")) == 100, "%s: ops",
			       name);
			EXPECT(json_integer_value(json_object_get(r, "elapsed_ns")) > 0,
			       "%s: elapsed_ns", name);
			continue;
		}
		json_t *ns = json_object_get(r, "ns_per_op");
		double med = json_number_value(json_object_get(ns, "median"));
		double lo = json_number_value(json_object_get(ns, "min"));
		double hi = json_number_value(json_object_get(ns, "max"));
		json_int_t pages = json_integer_value(json_object_get(r, "pages_per_op"));
		json_int_t bytes = json_integer_value(json_object_get(r, "bytes_per_op"));

		EXPECT(!strcmp(jc_str(r, "mode"), "timed"), "%s: mode", name);
		EXPECT(med > 0 && lo > 0 && lo <= med && med <= hi, "%s: ns_per_op", name);
		EXPECT(json_number_value(json_object_get(ns, "spread")) >= 0, "%s: spread", name);
		EXPECT(json_integer_value(json_object_get(r, "rounds")) >= 1, "%s: rounds", name);
		EXPECT(pages == (strstr(name, "256x4k") ? 256 : 1), "%s: pages_per_op", name);
		EXPECT(bytes == (strstr(name, "256x4k") ? 0x100000 :
				 strstr(name, "2m")	? 0x200000 :
							  0x1000),
		       "%s: bytes_per_op", name);
		EXPECT(fabs(json_number_value(json_object_get(r, "ns_per_page")) * (double)pages -
			    med) < 1e-6 * med + 1e-9,
		       "%s: ns_per_page", name);
		EXPECT(json_number_value(json_object_get(r, "mops_per_s")) > 0, "%s: mops_per_s",
		       name);
		EXPECT((thr == 2) == (json_object_get(r, "scaling") != NULL), "%s: scaling", name);
		if (thr == 2)
			EXPECT(json_number_value(json_object_get(r, "scaling")) > 0, "%s: scaling",
			       name);
	}
	for (size_t c = 0; timed && c < NCASES; c++)
		EXPECT(seen[c][1] == 1 && seen[c][2] == 1, "%s: one result per thread count",
		       cases[c]);
	if (!timed)
		EXPECT(json_array_size(results) == 1, "fixed: one result");
	json_decref(root);
	return fails ? 1 : 0;
}
