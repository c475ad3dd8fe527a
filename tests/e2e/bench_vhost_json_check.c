/* SPDX-License-Identifier: MIT */
/*
 * tests/e2e/bench_vhost_json_check.c - check the JSON report of dmaguard bench vhost-pvp
 * (docs/bench-json.md): the four in-process cases present with sane numbers, no IOTLB miss
 * and no access outside the memory table during the measurement (everything was cached after
 * the warm-up), and, when present, well-formed DPDK results (case dpdk-DIRECTION/BACK_END,
 * direction fe-be or be-fe, back end dmaguard or net_vhost, positive windows, vs_net_vhost
 * only for dmaguard). No timing is asserted.
 *
 *   bench_vhost_json_check FILE
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "json_check.h"

static int fail(const char *what, const char *c)
{
	fprintf(stderr, "bench_vhost_json_check: %s%s%s\n", what, c ? ": " : "", c ? c : "");
	return 1;
}

int main(int argc, char **argv)
{
	static const char *const cases[] = {"off", "strict", "lazy", "gen", NULL};
	json_error_t err;
	json_t *root, *results, *r;
	size_t i;
	int bad = 0;

	if (argc != 2)
		return fail("usage: bench_vhost_json_check FILE", NULL);
	root = json_load_file(argv[1], 0, &err);
	if (!root)
		return fail("cannot parse", err.text);
	if (strcmp(jc_str(root, "suite"), "vhost-pvp"))
		bad |= fail("wrong suite", jc_str(root, "suite"));
	if (!json_is_object(json_object_get(root, "machine")))
		bad |= fail("no machine facts", NULL);
	results = json_object_get(root, "results");
	if (!json_is_array(results))
		return fail("no results array", NULL);
	for (const char *const *c = cases; *c; c++) {
		json_t *ns, *be;
		bool off = !strcmp(*c, "off"), gen = !strcmp(*c, "gen");

		r = jc_find(results, *c);
		if (!r) {
			bad |= fail("missing case", *c);
			continue;
		}
		ns = json_object_get(r, "ns_per_packet");
		be = json_object_get(r, "backend");
		if (!(jc_num(r, "mpps") > 0) || !(jc_num(r, "packets") > 0) ||
		    !json_is_object(ns) || !(jc_num(ns, "median") > 0) ||
		    jc_num(ns, "max") < jc_num(ns, "min") || !(jc_num(ns, "rounds") >= 1))
			bad |= fail("bad rate fields", *c);
		if (jc_num(r, "frame_bytes") != 64 || !(jc_num(r, "burst") >= 1))
			bad |= fail("bad frame_bytes/burst", *c);
		if (strcmp(jc_str(r, "iommu"), off ? "off" : "on") ||
		    strcmp(jc_str(r, "guest_policy"), off ? "none" :
						      gen ? "strict" :
							    *c))
			bad |= fail("bad iommu/guest_policy", *c);
		if (strcmp(jc_str(r, "back_end_mode"), gen ? "gen" : "loop") ||
		    strcmp(jc_str(r, "direction"), gen ? "be-fe" : "fe-be-fe"))
			bad |= fail("bad back_end_mode/direction", *c);
		if (off || gen ? !json_is_null(json_object_get(r, "vs_off")) ||
					 !json_is_null(json_object_get(r, "vs_off_best")) :
				 !(jc_num(r, "vs_off") > 0) || !(jc_num(r, "vs_off_best") > 0))
			bad |= fail("bad vs_off/vs_off_best", *c);
		if (!json_is_object(be) || jc_num(be, "iotlb_misses") != 0 ||
		    jc_num(be, "outside_memtable") != 0 || jc_num(be, "iotlb_cache_fills") != 0 ||
		    jc_num(be, "ring_translations") != 0)
			bad |= fail("the measurement missed, refilled or left the memory table",
				    *c);
	}
	json_array_foreach(results, i, r)
	{
		const char *c = jc_str(r, "case");

		if (strncmp(c, "dpdk-", 5))
			continue;
		const char *d = jc_str(r, "direction"), *b = jc_str(r, "back_end");
		json_t *w = json_object_get(r, "windows"), *x,
		       *vs = json_object_get(r, "vs_net_vhost");
		bool ours = !strcmp(b, "dmaguard");
		char want[64];
		size_t k;

		snprintf(want, sizeof(want), "dpdk-%s/%s", d, b);
		if (!(jc_num(r, "mpps") > 0) || (strcmp(b, "dmaguard") && strcmp(b, "net_vhost")) ||
		    (strcmp(d, "fe-be") && strcmp(d, "be-fe")) || strcmp(c, want) ||
		    strcmp(jc_str(r, "front_end"), "virtio_user") ||
		    jc_num(r, "frame_bytes") != 64 || !(jc_num(r, "seconds") > 0))
			bad |= fail("bad DPDK result", c);
		if (!json_is_array(w) || json_array_size(w) < 1 || json_array_size(w) > 8)
			bad |= fail("bad DPDK windows", c);
		json_array_foreach(w, k, x)
		{
			if (!(json_is_number(x) && json_number_value(x) > 0))
				bad |= fail("bad DPDK window", c);
		}
		if (ours ? !json_is_null(vs) && !(json_is_number(vs) && json_number_value(vs) > 0) :
			   !json_is_null(vs))
			bad |= fail("bad vs_net_vhost", c);
	}
	json_decref(root);
	return bad;
}
