/* SPDX-License-Identifier: MIT */
/*
 * tools/dmaguard/cmd_bench.c - "dmaguard bench [SUITE] [OPTIONS]".
 *
 * With no suite it runs the main job: the "workloads" suite when it is built in (the seed
 * scenarios under every policy), otherwise every registered suite in turn.
 */
#include "cli.h"

#include "bench.h"

#include <stdio.h>
#include <string.h>

static void bench_help(FILE *out)
{
	fprintf(out, "usage: dmaguard bench [SUITE] [OPTIONS]\n\nsuites:\n");
	for (struct bench_suite *s = bench_suites(); s; s = s->next)
		fprintf(out, "  %-10s %s\n", s->name, s->summary);
	fprintf(out, "\n'dmaguard bench SUITE --help' lists a suite's own options.\n\n");
	bench_usage_common(out);
}

static int cmd_bench(int argc, char **argv)
{
	struct bench_suite *s;

	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		bench_help(stdout);
		return 0;
	}
	if (argc >= 2 && argv[1][0] != '-') {
		s = bench_find(argv[1]);
		if (!s) {
			fprintf(stderr, "dmaguard bench: unknown suite '%s'\n\n", argv[1]);
			bench_help(stderr);
			return 2;
		}
		return s->main(argc - 1, argv + 1);
	}
	s = bench_find("workloads");
	if (s) {
		argv[0] = (char *)"workloads";
		return s->main(argc, argv);
	}
	if (!bench_suites()) {
		fprintf(stderr, "dmaguard bench: no suites built in\n");
		return 1;
	}
	int rc = 0;
	for (s = bench_suites(); s; s = s->next) {
		argv[0] = (char *)s->name;
		printf("== dmaguard bench %s ==\n", s->name);
		fflush(stdout);
		int r = s->main(argc, argv);
		if (r)
			rc = r;
	}
	return rc;
}

DG_CLI_COMMAND(bench, "bench", "measure what each protection policy costs", cmd_bench)
