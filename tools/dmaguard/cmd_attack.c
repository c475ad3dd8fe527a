/* SPDX-License-Identifier: MIT */
/*
 * tools/dmaguard/cmd_attack.c - "dmaguard attack": a malicious device against every policy.
 *
 *   dmaguard attack [--policy P[,P...]] [--attack A[,A...]] [--iterations N] [--quick]
 *                   [--json FILE] [--verbose] [--reuse-after-timeout] [--virtual-clock] [--list]
 *
 * Runs every selected attack against every selected policy (bench/attack/attack.h), each on a
 * fresh machine, and prints one row per pair: attempts, refused, allowed, breaches, breaches
 * documented, bytes exposed, the longest stale window observed (and the one the library
 * reported), the fault cross-check and the verdict; then "RESULT suite=attack runs=N
 * failed=M". --virtual-clock runs the machines on atk_config.virtual_clock: pinned to one CPU
 * the output is then the same on every run (docs/attack.md's results table is one such run,
 * checked by tests/e2e/attack_doc_test.sh). Exit status: 0 when no pair is VULNERABLE or
 * BROKEN, 1 otherwise (or when a machine cannot be built or the JSON cannot be written), 2
 * for bad options. JSON fields: docs/bench-json.md, section "attack".
 */
#include "cli.h"

#include "attack/attack.h"
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void attack_help(FILE *out)
{
	fprintf(out,
		"usage: dmaguard attack [OPTIONS]\n\n"
		"A malicious device tries every known trick against every protection policy and\n"
		"reports what it reached (docs/attack.md).\n\n"
		"options:\n"
		"  --policy LIST     policies, comma separated (default: all)\n"
		"  --attack LIST     attacks, comma separated (default: all)\n"
		"  --iterations N    rounds of each attack (default 8; --quick: 3)\n"
		"  --quick           a smoke run\n"
		"  --json FILE       write the results as JSON (docs/bench-json.md)\n"
		"  --verbose         describe every undocumented breach and every anomaly\n"
		"                    on stderr\n"
		"  --reuse-after-timeout\n"
		"                    play a negligent driver that reuses memory even when an\n"
		"                    unmap said -ETIMEDOUT (what the withheld attack then gets)\n"
		"  --virtual-clock   time moves only when an attack waits, no housekeeping\n"
		"                    thread: reproducible when pinned to one CPU\n"
		"  --list            list policies and attacks\n\npolicies:");
	for (unsigned int p = 0; p < ATK_NR_POLICIES; p++)
		fprintf(out, " %s", atk_policy_name((enum atk_policy)p));
	fprintf(out, "\nattacks: ");
	for (unsigned int a = 0; a < ATK_NR_ATTACKS; a++)
		fprintf(out, " %s", atk_attack_name((enum atk_attack)a));
	fprintf(out, "\n");
}

/* Parse a comma separated list into a bitmask. Returns 0 or -EINVAL. */
static int parse_list(const char *arg, bool policies, unsigned int *mask)
{
	char *copy = strdup(arg), *save = NULL;
	int r = 0;

	if (!copy)
		return -ENOMEM;
	*mask = 0;
	for (char *t = strtok_r(copy, ",", &save); t && !r; t = strtok_r(NULL, ",", &save)) {
		enum atk_policy p;
		enum atk_attack a;

		if (policies && !atk_policy_parse(t, &p))
			*mask |= 1u << p;
		else if (!policies && !atk_attack_parse(t, &a))
			*mask |= 1u << a;
		else {
			fprintf(stderr, "dmaguard attack: unknown %s '%s'\n",
				policies ? "policy" : "attack", t);
			r = -EINVAL;
		}
	}
	free(copy);
	return r || *mask ? r : -EINVAL;
}

static json_t *result_json(const struct atk_result *r)
{
	json_t *o = json_object(), *doc = json_object();

	for (unsigned int d = 0; d < ATK_NR_DOCS; d++)
		json_object_set_new(doc, atk_doc_name((enum atk_doc)d),
				    json_integer((json_int_t)r->documented[d]));
#define U(k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
	json_object_set_new(o, "policy", json_string(atk_policy_name(r->policy)));
	json_object_set_new(o, "attack", json_string(atk_attack_name(r->attack)));
	U("attempts", r->attempts);
	U("refused", r->refused);
	U("allowed", r->allowed);
	U("breaches", r->breaches);
	U("breach_reads", r->breach_reads);
	U("breach_writes", r->breach_writes);
	U("bytes_exposed", r->bytes_exposed);
	U("skipped", r->skipped);
	json_object_set_new(o, "documented", doc);
	U("undocumented", r->undocumented);
	U("faults_recorded", r->faults_recorded);
	U("faults_missing", r->faults_missing);
	U("faults_unexpected", r->faults_unexpected);
	U("fault_overflow", r->fault_overflow);
	U("window_ns", r->window_ns);
	U("window_unmaps", r->window_unmaps);
	json_object_set_new(o, "window_open", json_boolean(r->window_open));
	if (r->policy == ATK_POL_LAZY) {
		U("library_window_ns", r->lib_window_ns);
		U("library_window_unmaps", r->lib_window_unmaps);
	} else {
		json_object_set_new(o, "library_window_ns", json_null());
		json_object_set_new(o, "library_window_unmaps", json_null());
	}
	U("unmap_timeouts", r->unmap_timeouts);
	U("legit_failures", r->legit_failures);
	U("elapsed_ns", r->elapsed_ns);
#undef U
	json_object_set_new(o, "verdict", json_string(atk_verdict_name(r->verdict)));
	return o;
}

/* "12.3ms" / "-" */
static const char *fmt_ns(char *buf, size_t len, uint64_t ns, bool open)
{
	if (!ns && !open)
		snprintf(buf, len, "-");
	else if (ns < 1000000)
		snprintf(buf, len, "%s%.1fus", open ? ">" : "", ns / 1e3);
	else
		snprintf(buf, len, "%s%.1fms", open ? ">" : "", ns / 1e6);
	return buf;
}

static void print_row(const struct atk_result *r)
{
	char win[32], lib[32];
	uint64_t doc = 0;

	for (unsigned int d = 0; d < ATK_NR_DOCS; d++)
		doc += r->documented[d];
	fmt_ns(win, sizeof(win), r->window_ns, r->window_open);
	if (r->policy == ATK_POL_LAZY)
		fmt_ns(lib, sizeof(lib), r->lib_window_ns, false);
	else
		snprintf(lib, sizeof(lib), "-");
	printf("%-10s %-13s %8" PRIu64 " %7" PRIu64 " %7" PRIu64 " %8" PRIu64 " %8" PRIu64
	       " %10" PRIu64 " %9s %9s %7" PRIu64 "/%-7" PRIu64 " %s\n",
	       atk_policy_name(r->policy), atk_attack_name(r->attack), r->attempts, r->refused,
	       r->allowed, r->breaches, doc, r->bytes_exposed, win, lib, r->faults_recorded,
	       r->refused, atk_verdict_name(r->verdict));
}

static int cmd_attack(int argc, char **argv)
{
	unsigned int pmask = (1u << ATK_NR_POLICIES) - 1, amask = (1u << ATK_NR_ATTACKS) - 1;
	struct atk_config cfg = {0};
	const char *json_path = NULL;
	struct bench_report rep;
	unsigned int bad = 0, runs = 0;
	bool quick = false, list = false;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			attack_help(stdout);
			return 0;
		} else if (!strcmp(a, "--quick")) {
			quick = true;
		} else if (!strcmp(a, "--verbose")) {
			cfg.log = stderr;
		} else if (!strcmp(a, "--reuse-after-timeout")) {
			cfg.reuse_after_timeout = true;
		} else if (!strcmp(a, "--virtual-clock")) {
			cfg.virtual_clock = true;
		} else if (!strcmp(a, "--list")) {
			list = true;
		} else if (!v && (!strcmp(a, "--policy") || !strcmp(a, "--attack") ||
				  !strcmp(a, "--iterations") || !strcmp(a, "--json"))) {
			fprintf(stderr, "dmaguard attack: %s needs a value\n", a);
			return 2;
		} else if (!strcmp(a, "--policy")) {
			if (parse_list(argv[++i], true, &pmask))
				return 2;
		} else if (!strcmp(a, "--attack")) {
			if (parse_list(argv[++i], false, &amask))
				return 2;
		} else if (!strcmp(a, "--iterations")) {
			char *end;
			unsigned long n = strtoul(argv[++i], &end, 10);

			if (*end || !n || n > 1000 || argv[i][0] == '-') {
				fprintf(stderr, "dmaguard attack: --iterations wants 1..1000\n");
				return 2;
			}
			cfg.iterations = (unsigned int)n;
		} else if (!strcmp(a, "--json")) {
			json_path = argv[++i];
		} else {
			fprintf(stderr, "dmaguard attack: unknown option '%s'\n\n", a);
			attack_help(stderr);
			return 2;
		}
	}
	if (list) {
		for (unsigned int p = 0; p < ATK_NR_POLICIES; p++)
			printf("policy %s\n", atk_policy_name((enum atk_policy)p));
		for (unsigned int a = 0; a < ATK_NR_ATTACKS; a++)
			printf("attack %s\n", atk_attack_name((enum atk_attack)a));
		return 0;
	}
	if (quick && !cfg.iterations)
		cfg.iterations = 3;
	if (bench_report_init(&rep, "attack"))
		return 1;
	printf("%-10s %-13s %8s %7s %7s %8s %8s %10s %9s %9s %15s %s\n", "policy", "attack",
	       "attempts", "refused", "allowed", "breaches", "document", "bytes", "window",
	       "lib-wind", "faults/refused", "verdict");
	for (unsigned int p = 0; p < ATK_NR_POLICIES; p++) {
		for (unsigned int a = 0; a < ATK_NR_ATTACKS; a++) {
			struct atk_result r;
			int e;

			if (!(pmask >> p & 1) || !(amask >> a & 1))
				continue;
			e = atk_run((enum atk_policy)p, (enum atk_attack)a, &cfg, &r);
			if (e) {
				fprintf(stderr,
					"dmaguard attack: %s/%s: cannot build the machine: %s\n",
					atk_policy_name((enum atk_policy)p),
					atk_attack_name((enum atk_attack)a), strerror(-e));
				bench_report_fini(&rep);
				return 1;
			}
			runs++;
			print_row(&r);
			fflush(stdout);
			bad += r.verdict == ATK_VULNERABLE || r.verdict == ATK_BROKEN;
			bench_report_add(&rep, result_json(&r));
		}
	}
	json_object_set_new(rep.root, "summary",
			    json_pack("{s:i, s:i, s:i, s:b}", "runs", (json_int_t)runs, "failed",
				      (json_int_t)bad, "iterations",
				      (json_int_t)(cfg.iterations ? cfg.iterations : 8),
				      "virtual_clock", (int)cfg.virtual_clock));
	printf("RESULT suite=attack runs=%u failed=%u\n", runs, bad);
	if (bench_report_write(&rep, json_path)) {
		bench_report_fini(&rep);
		return 1;
	}
	bench_report_fini(&rep);
	return bad ? 1 : 0;
}

DG_CLI_COMMAND(attack, "attack", "a malicious device against every policy: what it reaches",
	       cmd_attack)
