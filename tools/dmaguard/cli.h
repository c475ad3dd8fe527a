/* SPDX-License-Identifier: MIT */
/*
 * tools/dmaguard/cli.h - subcommands of the dmaguard tool register here.
 *
 * Each subcommand (bench, attack, vhost, info) lives in its own file and registers itself with
 * DG_CLI_COMMAND; main.c only dispatches, so adding a command touches no shared file but the
 * meson source list.
 */
#ifndef DG_TOOLS_CLI_H
#define DG_TOOLS_CLI_H

#include <stdio.h>

struct cli_command {
	const char *name;
	const char *summary;
	int (*main)(int argc, char **argv); /* argv[0] is the command name */
	struct cli_command *next;
};

void cli_register(struct cli_command *cmd);

#define DG_CLI_COMMAND(id, name_, summary_, main_)                       \
	static struct cli_command cli_command_##id = {                   \
		.name = name_, .summary = summary_, .main = main_};      \
	__attribute__((constructor)) static void cli_register_##id(void) \
	{                                                                \
		cli_register(&cli_command_##id);                         \
	}

#endif /* DG_TOOLS_CLI_H */
