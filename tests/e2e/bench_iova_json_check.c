/* SPDX-License-Identifier: MIT */
/*
 * bench_iova_json_check FILE - validate the JSON report of "dmaguard bench iova" (used by
 * bench_iova_test.sh): the documented fields (docs/bench-json.md) are there with sane
 * values, every allocator and pattern was measured, and the work counters show what the
 * benchmark is about: the Linux reference walks past every live range on the adversarial
 * pattern, dmaguard's tree does not, and dmaguard's magazines serve the ring pattern.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "json_check.h"

int main(int argc, char **argv)
{
	json_t *root, *results, *r, *summary;
	size_t i;
	int seen_linux_adv = 0, seen_nomag_adv = 0, seen_dg_ring = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: bench_iova_json_check FILE\n");
		return 2;
	}
	root = jc_load(argv[1]);
	if (!root)
		return 1;
	results = jc_results(root, "iova");
	EXPECT(json_is_array(results) && json_array_size(results) >= 24, "results");
	json_array_foreach(results, i, r)
	{
		const char *name = json_string_value(json_object_get(r, "case"));
		const char *pat = json_string_value(json_object_get(r, "pattern"));
		const char *alloc = json_string_value(json_object_get(r, "allocator"));
		json_t *ns = json_object_get(r, "ns_per_op");
		double nodes = json_number_value(json_object_get(r, "nodes_per_op"));
		double hits = json_number_value(json_object_get(r, "magazine_hit_rate"));
		int mags = json_is_true(json_object_get(r, "magazines"));
		json_int_t live = json_integer_value(json_object_get(r, "live_ranges"));

		EXPECT(name && pat && alloc, "result %zu: case, pattern, allocator", i);
		if (!name || !pat || !alloc)
			continue;
		EXPECT(json_number_value(json_object_get(ns, "median")) > 0, "%s: ns_per_op", name);
		EXPECT(json_integer_value(json_object_get(ns, "rounds")) >= 1, "%s: rounds", name);
		EXPECT(json_integer_value(json_object_get(r, "ops")) > 0, "%s: ops", name);
		EXPECT(json_integer_value(json_object_get(r, "threads")) >= 1, "%s: threads", name);
		EXPECT(json_is_number(json_object_get(r, "mops_per_s")), "%s: mops_per_s", name);
		EXPECT(hits >= 0 && hits <= 1, "%s: hit rate", name);
		if (!strcmp(alloc, "linux-reference")) {
			EXPECT(json_is_null(json_object_get(r, "speedup_vs_linux")), "%s: ratio",
			       name);
			EXPECT(!mags && hits == 0, "%s: the reference has no magazines", name);
			if (!strcmp(pat, "adversarial")) {
				seen_linux_adv = 1;
				/*
				 * One thread walks all N live nodes per op. With two threads the
				 * other's frees move the cached node between steps, so only half
				 * of that is certain.
				 */
				double floor = json_integer_value(json_object_get(r, "threads")) >
							       1 ?
						       (double)live / 2 :
						       (double)live;
				EXPECT(nodes >= floor, "%s: %.1f nodes/op < %.0f (live %lld)", name,
				       nodes, floor, (long long)live);
			}
		} else {
			EXPECT(!strcmp(alloc, "dmaguard"), "%s: allocator", name);
			EXPECT(json_number_value(json_object_get(r, "speedup_vs_linux")) > 0,
			       "%s: speedup_vs_linux", name);
			if (!strcmp(pat, "adversarial") && !mags) {
				seen_nomag_adv = 1;
				EXPECT(nodes < 100, "%s: %.1f nodes/op", name, nodes);
			}
			if (!strcmp(pat, "ring") && mags) {
				seen_dg_ring = 1;
				EXPECT(hits > 0.99, "%s: hit rate %.3f", name, hits);
			}
		}
	}
	EXPECT(seen_linux_adv && seen_nomag_adv && seen_dg_ring, "cases missing");
	summary = json_object_get(root, "summary");
	EXPECT(json_number_value(json_object_get(summary, "worst_over_best")) >= 1, "summary");
	if (!fails)
		printf("bench iova JSON: %zu results OK\n", json_array_size(results));
	json_decref(root);
	return fails ? 1 : 0;
}
