/* SPDX-License-Identifier: MIT */
/*
 * bench_dma_json_check FILE - validate the JSON report of "dmaguard bench dma" (used by
 * bench_dma_test.sh): the documented fields (docs/bench-json.md) are there with sane values,
 * every configuration was measured next to identity, and the deterministic work counter
 * (invalidation waits per operation) shows what each policy does: strict waits once per unmap
 * alone and once per batch of 32 in a batch, the Linux-like reference once per page even in a
 * batch, identity, bounce, pool and the direct window never.
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "json_check.h"

static const char *const configs[] = {"identity",  "strict", "strict-2step", "lazy",	 "window",
				      "window-4k", "bounce", "pool",	     "linux-ref"};
#define NCFG (sizeof(configs) / sizeof(configs[0]))

static bool near(double a, double b)
{
	return fabs(a - b) < 1e-6;
}

int main(int argc, char **argv)
{
	json_t *root, *results, *r;
	int seen[NCFG] = {0};
	size_t i;

	if (argc != 2) {
		fprintf(stderr, "usage: bench_dma_json_check FILE\n");
		return 2;
	}
	root = jc_load(argv[1]);
	if (!root)
		return 1;
	results = jc_results(root, "dma");
	EXPECT(json_is_array(results) && json_array_size(results) >= 40, "results");
	json_array_foreach(results, i, r)
	{
		const char *name = json_string_value(json_object_get(r, "case"));
		const char *pol = json_string_value(json_object_get(r, "policy"));
		const char *size = json_string_value(json_object_get(r, "size"));
		const char *mode = json_string_value(json_object_get(r, "mode"));
		json_t *ns = json_object_get(r, "ns_per_op");
		double waits = json_number_value(json_object_get(r, "waits_per_op"));
		double vs = json_number_value(json_object_get(r, "vs_identity"));
		json_int_t bytes = json_integer_value(json_object_get(r, "bytes"));
		bool batch;
		size_t c;

		EXPECT(name && pol && size && mode, "result %zu: case, policy, size, mode", i);
		if (!name || !pol || !size || !mode)
			continue;
		batch = !strcmp(mode, "batch") || !strcmp(mode, "bulk"); /* bulk: into a batch */
		EXPECT(batch || !strcmp(mode, "single"), "%s: mode", name);
		for (c = 0; c < NCFG && strcmp(pol, configs[c]); c++)
			;
		EXPECT(c < NCFG, "%s: policy %s", name, pol);
		if (c < NCFG)
			seen[c]++;
		EXPECT(json_number_value(json_object_get(ns, "median")) > 0, "%s: ns_per_op", name);
		EXPECT(json_integer_value(json_object_get(ns, "rounds")) >= 1, "%s: rounds", name);
		EXPECT(json_integer_value(json_object_get(r, "ops")) > 0, "%s: ops", name);
		EXPECT(json_integer_value(json_object_get(r, "threads")) >= 1, "%s: threads", name);
		EXPECT(bytes >= 64, "%s: bytes", name);
		EXPECT(json_is_boolean(json_object_get(r, "device_thread")), "%s: device_thread",
		       name);
		EXPECT(vs > 0, "%s: vs_identity", name);
		if (!strcmp(pol, "identity"))
			EXPECT(near(vs, 1), "%s: identity over itself", name);
		if (!strcmp(pol, "linux-ref"))
			EXPECT(json_is_null(json_object_get(r, "linux_ref_over")), "%s: ratio",
			       name);
		/* invalidation waits per map+unmap: the policy's signature */
		if (!strcmp(pol, "identity") || !strcmp(pol, "bounce") || !strcmp(pol, "pool") ||
		    !strcmp(pol, "window"))
			EXPECT(waits == 0, "%s: %.3f waits/op, expected none", name, waits);
		if (!strcmp(pol, "strict") || !strcmp(pol, "strict-2step") ||
		    !strcmp(pol, "window-4k"))
			EXPECT(near(waits, batch ? 1.0 / 32 : 1.0), "%s: %.4f waits/op", name,
			       waits);
		if (!strcmp(pol, "lazy"))
			EXPECT(waits < 0.1, "%s: %.3f waits/op: lazy should not wait", name, waits);
		if (!strcmp(pol, "linux-ref")) {
			/* one per page: the buffer starts 64 bytes into its page */
			double pages = !strcmp(size, "sg16") ? 16 :
							       (double)((bytes + 64 + 4095) / 4096);

			EXPECT(near(waits, pages), "%s: %.3f waits/op, expected %.0f", name, waits,
			       pages);
		}
		if (strcmp(pol, "linux-ref"))
			EXPECT(json_number_value(json_object_get(r, "linux_ref_over")) > 0,
			       "%s: linux_ref_over", name);
	}
	for (size_t c = 0; c < NCFG; c++)
		EXPECT(seen[c] > 0, "configuration %s not measured", configs[c]);
	json_decref(root);
	return fails ? 1 : 0;
}
