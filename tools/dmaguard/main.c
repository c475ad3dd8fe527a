/* SPDX-License-Identifier: MIT */
/*
 * tools/dmaguard/main.c - the dmaguard command: dispatch to a registered subcommand.
 */
#include "cli.h"

#include <dmaguard/common.h>

#include <stdio.h>
#include <string.h>

static struct cli_command *commands;

void cli_register(struct cli_command *cmd)
{
	struct cli_command **pp = &commands;

	while (*pp && strcmp((*pp)->name, cmd->name) < 0)
		pp = &(*pp)->next;
	cmd->next = *pp;
	*pp = cmd;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: dmaguard COMMAND [ARGS]\n\ncommands:\n");
	for (struct cli_command *c = commands; c; c = c->next)
		fprintf(out, "  %-10s %s\n", c->name, c->summary);
	fprintf(out, "\n'dmaguard COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("dmaguard %s\n", dg_version());
		return 0;
	}
	for (struct cli_command *c = commands; c; c = c->next)
		if (!strcmp(c->name, argv[1]))
			return c->main(argc - 1, argv + 1);
	fprintf(stderr, "dmaguard: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
