/* SPDX-License-Identifier: MIT */
/* tools/dmaguard/cmd_info.c - "dmaguard info": version and the machine facts benchmarks record. */
#include "cli.h"

#include "bench.h"

#include <dmaguard/common.h>

#include <stdio.h>

static int cmd_info(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	printf("dmaguard %s\n", dg_version());
	printf("cpu: %s\n", bench_cpu_model());
	printf("cpus available: %u\n", bench_ncpus());
	return 0;
}

DG_CLI_COMMAND(info, "info", "print the version and machine facts", cmd_info)
