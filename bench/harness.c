/* SPDX-License-Identifier: MIT */
/*
 * bench/harness.c - suite registry, common options, pinning, machine facts and the JSON report
 * shared by every benchmark (see bench.h for the protocol).
 */
#include "bench.h"

#include <dmaguard/common.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct bench_suite *suite_list;

void bench_register(struct bench_suite *suite)
{
	struct bench_suite **pp = &suite_list;

	/* Keep the list sorted by name so --list and the default run are stable. */
	while (*pp && strcmp((*pp)->name, suite->name) < 0)
		pp = &(*pp)->next;
	suite->next = *pp;
	*pp = suite;
}

struct bench_suite *bench_find(const char *name)
{
	for (struct bench_suite *s = suite_list; s; s = s->next)
		if (!strcmp(s->name, name))
			return s;
	return NULL;
}

struct bench_suite *bench_suites(void)
{
	return suite_list;
}

void bench_usage_common(FILE *out)
{
	fprintf(out, "common options:\n"
		     "  --json FILE     write results as JSON (docs/bench-json.md)\n"
		     "  --quick         a smoke run of a few seconds\n"
		     "  --duration S    seconds per timed measurement\n"
		     "  --rounds N      timed repetitions (median and spread)\n"
		     "  --threads N     threads where the suite takes a count\n"
		     "  --case NAME     run only this case\n"
		     "  --ops N         fixed-count mode: exactly N operations, no timing\n"
		     "  --list          list the cases\n");
}

static int parse_u64(const char *opt, const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-') {
		fprintf(stderr, "bench: %s wants a non-negative integer, got '%s'\n", opt, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int bench_help_or_unknown(const char *suite, const char *arg, void (*usage)(FILE *out))
{
	if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "bench %s: unknown option '%s'\n\n", suite, arg);
	usage(stderr);
	return 2;
}

int bench_parse_common(int *argc, char **argv, struct bench_opts *opts)
{
	int out = 1;

	memset(opts, 0, sizeof(*opts));
	opts->duration_s = 0.5;
	opts->rounds = 5;
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < *argc ? argv[i + 1] : NULL;
		uint64_t v;

		if (!strcmp(a, "--quick")) {
			opts->quick = true;
			continue;
		}
		if (!strcmp(a, "--list")) {
			opts->list = true;
			continue;
		}
		if (strcmp(a, "--json") && strcmp(a, "--case") && strcmp(a, "--ops") &&
		    strcmp(a, "--duration") && strcmp(a, "--threads") && strcmp(a, "--rounds")) {
			argv[out++] = argv[i];
			continue;
		}
		if (!val) {
			fprintf(stderr, "bench: %s needs a value\n", a);
			return -EINVAL;
		}
		i++;
		if (!strcmp(a, "--json")) {
			opts->json_path = val;
		} else if (!strcmp(a, "--case")) {
			opts->case_name = val;
		} else if (!strcmp(a, "--duration")) {
			char *end;
			double d = strtod(val, &end);
			if (end == val || *end || !(d > 0) || d > 86400.0 * 7) {
				fprintf(stderr, "bench: --duration wants seconds > 0, got '%s'\n",
					val);
				return -EINVAL;
			}
			opts->duration_s = d;
		} else {
			if (parse_u64(a, val, &v))
				return -EINVAL;
			if (!strcmp(a, "--ops")) {
				if (!v) {
					fprintf(stderr, "bench: --ops must be at least 1\n");
					return -EINVAL;
				}
				opts->ops = v;
			} else if (!strcmp(a, "--threads")) {
				if (!v || v > 1024) {
					fprintf(stderr, "bench: --threads must be 1..1024\n");
					return -EINVAL;
				}
				opts->threads = (unsigned int)v;
			} else {
				if (!v || v > 1000) {
					fprintf(stderr, "bench: --rounds must be 1..1000\n");
					return -EINVAL;
				}
				opts->rounds = (unsigned int)v;
			}
		}
	}
	argv[out] = NULL;
	*argc = out;
	if (opts->quick) {
		opts->duration_s = opts->duration_s < 0.1 ? opts->duration_s : 0.1;
		opts->rounds = opts->rounds < 3 ? opts->rounds : 3;
	}
	return 0;
}

bool bench_case_selected(const struct bench_opts *opts, const char *name)
{
	return !opts->case_name || !strcmp(opts->case_name, name);
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The CPUs the process may use, read once before any thread pins itself: a thread inherits its
 * creator's affinity, so asking sched_getaffinity() from a worker created by a pinned thread
 * would see one CPU only.
 */
static cpu_set_t initial_cpus;
static int initial_cpus_ok;

__attribute__((constructor)) static void bench_read_initial_cpus(void)
{
	initial_cpus_ok = sched_getaffinity(0, sizeof(initial_cpus), &initial_cpus) == 0 &&
			  CPU_COUNT(&initial_cpus) > 0;
}

unsigned int bench_ncpus(void)
{
	if (initial_cpus_ok)
		return (unsigned int)CPU_COUNT(&initial_cpus);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned int)n : 1;
}

int bench_pin_cpu(unsigned int cpu)
{
	cpu_set_t one;
	unsigned int n, seen = 0;

	if (!initial_cpus_ok)
		return -ENOSYS;
	n = (unsigned int)CPU_COUNT(&initial_cpus);
	cpu %= n;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &initial_cpus))
			continue;
		if (seen++ == cpu) {
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			return -pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
		}
	}
	return -EINVAL;
}

const char *bench_cpu_model(void)
{
	static char model[128];
	char line[256];
	FILE *f;

	if (model[0])
		return model;
	snprintf(model, sizeof(model), "unknown");
	f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return model;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "model name", 10)) {
			char *p = strchr(line, ':');
			if (p) {
				p++;
				while (*p == ' ' || *p == '\t')
					p++;
				p[strcspn(p, "\n")] = 0;
				snprintf(model, sizeof(model), "%s", p);
			}
			break;
		}
	}
	fclose(f);
	return model;
}

int bench_report_init(struct bench_report *r, const char *suite)
{
	r->root = json_object();
	r->results = json_array();
	if (!r->root || !r->results) {
		json_decref(r->root);
		json_decref(r->results);
		return -ENOMEM;
	}
	json_object_set_new(r->root, "tool", json_string("dmaguard"));
	json_object_set_new(r->root, "version", json_string(dg_version()));
	json_object_set_new(r->root, "suite", json_string(suite));
	json_t *machine = json_pack("{s:s, s:i}", "cpu_model", bench_cpu_model(), "cores",
				    (json_int_t)bench_ncpus());

	if (machine && bench_machine_xfer())
		json_object_set_new(machine, "cacheline_transfer_ns",
				    bench_xfer_json(bench_machine_xfer()));
	json_object_set_new(r->root, "machine", machine);
	json_object_set(r->root, "results", r->results);
	return 0;
}

void bench_report_add(struct bench_report *r, json_t *result)
{
	json_array_append_new(r->results, result);
}

int bench_report_write(struct bench_report *r, const char *path)
{
	if (!path)
		return 0;
	if (json_dump_file(r->root, path, JSON_INDENT(2) | JSON_SORT_KEYS)) {
		fprintf(stderr, "bench: cannot write %s\n", path);
		return -EIO;
	}
	return 0;
}

void bench_report_fini(struct bench_report *r)
{
	json_decref(r->results);
	json_decref(r->root);
	r->root = r->results = NULL;
}

int bench_report_close(struct bench_report *r, const char *path)
{
	int rc = bench_report_write(r, path) ? 1 : 0;

	bench_report_fini(r);
	return rc;
}
