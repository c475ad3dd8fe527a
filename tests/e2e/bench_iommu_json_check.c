/* SPDX-License-Identifier: MIT */
/*
 * tests/e2e/bench_iommu_json_check.c - check the JSON reports of dmaguard bench iotlb and
 * dmaguard bench invq (docs/bench-json.md): every case present, every number sane, and the
 * deterministic facts (hit rates of the cases that fit the IOTLB, no wait timeouts).
 *
 *   bench_iommu_json_check iotlb|invq FILE
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "json_check.h"

static int fail(const char *what, const char *c)
{
	fprintf(stderr, "bench_iommu_json_check: %s%s%s\n", what, c ? ": " : "", c ? c : "");
	return 1;
}

static const char *iotlb_cases[] = {
	"hit",		 "hit_read64",	"hit_ws16",	  "hit_ws256", "hit_ws1024",
	"hit_stale2047", "passthrough", "miss_walk",	  "ws_x2",     "ws_x4",
	"ws_x16",	 "list_first",	"list_stale2047", "range64k",  "range64k_sg",
	"range64k_cold", NULL};
static const char *invq_cases[] = {"submit_wait_1p",
				   "submit_wait_1p_lock",
				   "submit_wait_2p",
				   "submit_wait_2p_lock",
				   "submit_1p",
				   "submit_1p_lock",
				   "submit_2p",
				   "submit_2p_lock",
				   "unmap64_batched",
				   "unmap64_batched_lock",
				   "unmap64_perpage",
				   "unmap64_perpage_lock",
				   NULL};

int main(int argc, char **argv)
{
	json_error_t err;
	json_t *root, *results;
	const char **cases;
	bool iotlb;
	int bad = 0;

	if (argc != 3)
		return fail("usage: bench_iommu_json_check iotlb|invq FILE", NULL);
	iotlb = !strcmp(argv[1], "iotlb");
	cases = iotlb ? iotlb_cases : invq_cases;
	root = json_load_file(argv[2], 0, &err);
	if (!root)
		return fail("cannot parse", err.text);
	if (strcmp(json_string_value(json_object_get(root, "suite")) ?
			   json_string_value(json_object_get(root, "suite")) :
			   "",
		   argv[1]))
		bad |= fail("wrong suite", argv[1]);
	if (!json_is_object(json_object_get(root, "machine")))
		bad |= fail("no machine facts", NULL);
	results = json_object_get(root, "results");
	if (!json_is_array(results))
		return fail("no results array", NULL);
	for (const char **c = cases; *c; c++) {
		json_t *r = jc_find(results, *c);

		if (!r) {
			bad |= fail("missing case", *c);
			continue;
		}
		if (!(jc_num(r, "ns_per_op") > 0) || !(jc_num(r, "ns_min") > 0) ||
		    jc_num(r, "ns_max") < jc_num(r, "ns_min") || !(jc_num(r, "ops") > 0) ||
		    !(jc_num(r, "rounds") >= 1))
			bad |= fail("bad timing fields", *c);
		if (iotlb) {
			double h = jc_num(r, "hit_rate");

			/* Every case whose working set fits the IOTLB hits all the time. */
			if (!strncmp(*c, "hit", 3) && h < 0.999)
				bad |= fail("hit case below 100% hits", *c);
			if (!strcmp(*c, "miss_walk") &&
			    (h > 0.001 || jc_num(r, "walk_cache_hit_rate") < 0.99))
				bad |= fail("miss_walk should miss and walk from the walk cache",
					    *c);
			if (!strcmp(*c, "ws_x16") && !(h > 0 && h < 0.2))
				bad |= fail("ws_x16 hit rate", *c);
			/* Warm ranges hit every page; cold 64 KiB ranges miss 2 pages of 16
			   (the first fills the rest of its line, the ninth its own). */
			if (!strncmp(*c, "range64k", 8) && strcmp(*c, "range64k_cold") && h < 0.999)
				bad |= fail("warm range below 100% hits", *c);
			if (!strcmp(*c, "range64k_cold") && !(h > 0.874 && h < 0.876))
				bad |= fail("range64k_cold: not 2 misses per 16 pages", *c);
		} else {
			if (jc_num(r, "wait_timeouts") != 0)
				bad |= fail("a wait timed out", *c);
			if (!(jc_num(r, "producers") >= 1) ||
			    !json_is_boolean(json_object_get(r, "reference_queue")))
				bad |= fail("bad producers/reference_queue", *c);
			if (strstr(*c, "wait") || strstr(*c, "unmap64"))
				if (!(jc_num(r, "waits") > 0))
					bad |= fail("no waits counted", *c);
		}
	}
	json_decref(root);
	return bad;
}
