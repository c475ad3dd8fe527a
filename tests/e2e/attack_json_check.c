/* SPDX-License-Identifier: MIT */
/*
 * attack_json_check FILE all|N - validate the JSON report of "dmaguard attack" (used by
 * attack_test.sh) against docs/bench-json.md: "all" expects every policy x attack pair, N
 * exactly N results. Every result must have every field with its type, consistent counts
 * (attempts = refused + allowed + breaches, every refused access with its fault record, every
 * breach documented), and each policy's promise: no breach under strict, linux-ref and bounce
 * (but strict's and linux-ref's documented sub-page exposure), lazy's observed window within
 * the reported one, identity's breaches all documented as all_memory. The summary: runs
 * matching the results, none failed, virtual_clock a boolean.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_check.h"

static const char *const policies[] = {"identity", "strict", "lazy",	 "window",
				       "bounce",   "pool",   "linux-ref"};
static const char *const attacks[] = {"stale",	      "stale-window", "subpage",  "perm",
				      "out-of-range", "other-domain", "detached", "withheld"};
static const char *const ints[] = {
	"attempts",	  "refused",	       "allowed",	 "breaches",	 "breach_reads",
	"breach_writes",  "bytes_exposed",     "skipped",	 "undocumented", "faults_recorded",
	"faults_missing", "faults_unexpected", "fault_overflow", "window_ns",	 "window_unmaps",
	"unmap_timeouts", "legit_failures",    "elapsed_ns",
};
static const char *const docs[] = {"all_memory", "direct_region", "pool_memory",
				   "subpage",	 "lazy_window",	  "unconfirmed"};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static long long num(json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

static int index_of(const char *const *names, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], s))
			return (int)i;
	return -1;
}

static void check_result(json_t *r, int seen[N(policies)][N(attacks)])
{
	const char *pol = jc_str(r, "policy"), *att = jc_str(r, "attack"),
		   *verdict = jc_str(r, "verdict");
	int p = index_of(policies, N(policies), pol), a = index_of(attacks, N(attacks), att);
	json_t *doc = json_object_get(r, "documented");
	long long ndoc = 0;

	EXPECT(p >= 0 && a >= 0, "unknown pair %s/%s", pol, att);
	if (p < 0 || a < 0)
		return;
	seen[p][a]++;
	for (size_t i = 0; i < N(ints); i++)
		EXPECT(json_is_integer(json_object_get(r, ints[i])) && num(r, ints[i]) >= 0,
		       "%s/%s: %s", pol, att, ints[i]);
	EXPECT(json_is_boolean(json_object_get(r, "window_open")), "%s/%s: window_open", pol, att);
	EXPECT(json_is_object(doc), "%s/%s: documented", pol, att);
	for (size_t i = 0; i < N(docs); i++) {
		EXPECT(json_is_integer(json_object_get(doc, docs[i])), "%s/%s: documented.%s", pol,
		       att, docs[i]);
		ndoc += num(doc, docs[i]);
	}
	EXPECT(!strcmp(verdict, "protected") || !strcmp(verdict, "documented"), "%s/%s: verdict %s",
	       pol, att, verdict);
	EXPECT(num(r, "attempts") > 0, "%s/%s: no attempt", pol, att);
	EXPECT(num(r, "attempts") == num(r, "refused") + num(r, "allowed") + num(r, "breaches"),
	       "%s/%s: attempts != refused + allowed + breaches", pol, att);
	EXPECT(num(r, "refused") == num(r, "faults_recorded") + num(r, "fault_overflow"),
	       "%s/%s: a refused access without its fault record", pol, att);
	EXPECT(!num(r, "faults_missing") && !num(r, "faults_unexpected") &&
		       !num(r, "legit_failures") && !num(r, "undocumented"),
	       "%s/%s: missing/unexpected faults, failures or undocumented breaches", pol, att);
	EXPECT(ndoc == num(r, "breaches"), "%s/%s: documented != breaches", pol, att);
	EXPECT(num(r, "breaches") == num(r, "breach_reads") + num(r, "breach_writes"),
	       "%s/%s: breach reads + writes", pol, att);
	EXPECT(!strcmp(verdict, "documented") == (num(r, "breaches") > 0), "%s/%s: verdict", pol,
	       att);
	if (!strcmp(pol, "bounce") ||
	    ((!strcmp(pol, "strict") || !strcmp(pol, "linux-ref")) && strcmp(att, "subpage")))
		EXPECT(num(r, "breaches") == 0, "%s/%s: a breach", pol, att);
	if (!strcmp(pol, "strict") || !strcmp(pol, "linux-ref"))
		EXPECT(num(doc, "subpage") == num(r, "breaches"), "%s/%s: not sub-page", pol, att);
	if (!strcmp(att, "detached"))
		EXPECT(num(r, "refused") == num(r, "attempts"), "%s/detached: allowed access", pol);
	if (!strcmp(pol, "lazy")) {
		EXPECT(json_is_integer(json_object_get(r, "library_window_ns")),
		       "lazy/%s: library_window_ns", att);
		EXPECT(num(r, "window_ns") <= num(r, "library_window_ns"),
		       "lazy/%s: observed window beyond the reported one", att);
	} else {
		EXPECT(json_is_null(json_object_get(r, "library_window_ns")),
		       "%s/%s: library_window_ns not null", pol, att);
	}
	if (!strcmp(pol, "identity"))
		EXPECT(num(doc, "all_memory") == num(r, "breaches"), "identity/%s: all_memory",
		       att);
}

int main(int argc, char **argv)
{
	int seen[N(policies)][N(attacks)] = {{0}};
	json_t *root, *results, *r;
	size_t i;

	if (argc != 3) {
		fprintf(stderr, "usage: attack_json_check FILE all|N\n");
		return 2;
	}
	root = jc_load(argv[1]);
	if (!root)
		return 1;
	results = jc_results(root, "attack");
	EXPECT(!strcmp(jc_str(root, "tool"), "dmaguard"), "tool");
	EXPECT(json_is_array(results), "results");
	json_array_foreach(results, i, r) check_result(r, seen);
	if (!strcmp(argv[2], "all")) {
		for (size_t p = 0; p < N(policies); p++)
			for (size_t a = 0; a < N(attacks); a++)
				EXPECT(seen[p][a] == 1, "%s/%s seen %d times", policies[p],
				       attacks[a], seen[p][a]);
	} else {
		EXPECT(json_array_size(results) == strtoul(argv[2], NULL, 10), "%zu results",
		       json_array_size(results));
	}
	json_t *sum = json_object_get(root, "summary");
	EXPECT(num(sum, "runs") == (long long)json_array_size(results) && num(sum, "failed") == 0,
	       "summary");
	EXPECT(json_is_boolean(json_object_get(sum, "virtual_clock")), "summary.virtual_clock");
	json_decref(root);
	return fails ? 1 : 0;
}
