/* SPDX-License-Identifier: MIT */
/* tools/dmaguard/cmd_info.c - "dmaguard info": version and the machine facts benchmarks record. */
#include "cli.h"

#include "bench.h"

#include <dmaguard/common.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int cmd_info(int argc, char **argv)
{
	if (argc > 1) {
		bool help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");

		if (!help)
			fprintf(stderr, "dmaguard info: unknown argument '%s'\n", argv[1]);
		fprintf(help ? stdout : stderr, "usage: dmaguard info\n"
						"Print the version, the CPU model and the CPUs "
						"available: what benchmark reports record.\n");
		return help ? 0 : 2;
	}
	printf("dmaguard %s\n", dg_version());
	printf("cpu: %s\n", bench_cpu_model());
	printf("cpus available: %u\n", bench_ncpus());
	return 0;
}

DG_CLI_COMMAND(info, "info", "print the version and machine facts", cmd_info)
