/* SPDX-License-Identifier: MIT */
/*
 * soak_json_check FILE clean|leak - validate the JSON report of "dmaguard bench soak" (used by
 * soak_test.sh) against docs/bench-json.md: every field with its type, intervals with
 * requests for every policy, and the verdict: "clean" expects no memory growth, everything
 * drained, no error and no failed check; "leak" (the --leak self-test) expects the verdict to
 * have caught the mappings kept live.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "json_check.h"

static const char *const policies[] = {"identity", "strict", "lazy",	 "window",
				       "bounce",   "pool",   "linux-ref"};
static const char *const ints[] = {
	"threads",	   "rss_first_half_kib", "rss_growth_kib",  "table_pages_start",
	"table_pages_end", "table_pages_growth", "table_pages_q2",  "table_pages_q4",
	"live_max",	   "iova_held_max",	 "iova_held_bound", "errors",
	"wait_timeouts",   "back_pressure",	 "check_failures",
};
static const char *const reals[] = {"duration_s",
				    "interval_s",
				    "mops_per_s_mean",
				    "mops_per_cpu_s_mean",
				    "first_quarter_mops_per_cpu_s",
				    "last_quarter_mops_per_cpu_s",
				    "trend_pct",
				    "trend_wall_pct"};
static const char *const bools[] = {"downward_trend", "memory_grew", "drained",
				    "table_pages_judged", "rss_judged"};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static json_t *get(json_t *o, const char *k)
{
	return json_object_get(o, k);
}

int main(int argc, char **argv)
{
	json_t *root, *r, *iv, *e;
	bool clean;
	size_t i;

	if (argc != 3 || (strcmp(argv[2], "clean") && strcmp(argv[2], "leak"))) {
		fprintf(stderr, "usage: soak_json_check FILE clean|leak\n");
		return 2;
	}
	clean = !strcmp(argv[2], "clean");
	root = jc_load(argv[1]);
	if (!root)
		return 1;
	EXPECT(json_is_string(get(root, "suite")) &&
		       !strcmp(json_string_value(get(root, "suite")), "soak"),
	       "suite");
	EXPECT(json_array_size(get(root, "results")) == 1, "one result");
	r = json_array_get(get(root, "results"), 0);
	for (i = 0; i < N(ints); i++)
		EXPECT(json_is_integer(get(r, ints[i])) && json_integer_value(get(r, ints[i])) >= 0,
		       "%s", ints[i]);
	for (i = 0; i < N(reals); i++)
		EXPECT(json_is_number(get(r, reals[i])), "%s", reals[i]);
	for (i = 0; i < N(bools); i++)
		EXPECT(json_is_boolean(get(r, bools[i])), "%s", bools[i]);
	for (i = 0; i < N(policies); i++)
		EXPECT(json_integer_value(get(get(r, "requests"), policies[i])) > 0,
		       "no request under %s", policies[i]);
	iv = get(r, "intervals");
	EXPECT(json_array_size(iv) >= 5, "%zu intervals", json_array_size(iv));
	json_array_foreach(iv, i, e)
	{
		EXPECT(json_is_number(get(e, "t_s")) && json_is_number(get(e, "mops_per_s")) &&
			       json_is_number(get(e, "mops_per_cpu_s")),
		       "interval %zu: times", i);
		EXPECT(json_is_object(get(e, "requests")), "interval %zu: requests", i);
		EXPECT(json_integer_value(get(e, "rss_kib")) > 0, "interval %zu: rss_kib", i);
		EXPECT(json_integer_value(get(e, "table_pages")) > 0, "interval %zu: table pages",
		       i);
		EXPECT(json_is_integer(get(e, "live_mappings")) &&
			       json_is_integer(get(e, "iova_held")) &&
			       json_is_integer(get(e, "bounce_in_use")),
		       "interval %zu: counters", i);
	}
	EXPECT(json_integer_value(get(r, "errors")) == 0, "errors");
	EXPECT(json_integer_value(get(r, "check_failures")) == 0, "check failures");
	EXPECT(json_is_true(get(r, "drained")), "not drained");
	if (clean) {
		EXPECT(json_is_false(get(r, "memory_grew")), "memory grew");
		EXPECT(json_integer_value(get(r, "live_max")) == 0, "mappings live at a barrier");
		EXPECT(json_integer_value(get(r, "iova_held_max")) <=
			       json_integer_value(get(r, "iova_held_bound")),
		       "IOVAs held beyond the flush queues");
	} else {
		EXPECT(json_is_true(get(r, "memory_grew")), "the self-test leak was not caught");
		EXPECT(json_integer_value(get(r, "live_max")) > 0, "live_max");
	}
	json_decref(root);
	return fails ? 1 : 0;
}
