#!/bin/sh
# The dmaguard CLI: help, version, info, unknown commands and bad options give the documented
# exit status (0 for success, 2 for usage errors); every command and every bench suite that
# --help lists answers its own --help with a usage line, as the top-level help promises.
. "$(dirname "$0")/e2e_lib.sh"
expect 0 "$exe" --help
expect 0 "$exe" --version
expect 0 "$exe" info
expect 2 "$exe"
expect 2 "$exe" no-such-command
expect 0 "$exe" bench --help
expect 2 "$exe" bench no-such-suite
"$exe" --version | grep -q '^dmaguard [0-9]' || { echo "FAIL: --version output"; fail=1; }
expect 2 "$exe" info --bogus
for cmd in $("$exe" --help | sed -n 's/^  \([a-z][a-z-]*\)  .*/\1/p'); do
	"$exe" "$cmd" --help 2>/dev/null | grep -q "^usage: dmaguard $cmd" ||
		{ echo "FAIL: '$cmd --help' prints no usage"; fail=1; }
done
for suite in $("$exe" bench --help | sed -n 's/^  \([a-z][a-z-]*\)  .*/\1/p'); do
	"$exe" bench "$suite" --help 2>/dev/null | grep -q "^usage: dmaguard bench" ||
		{ echo "FAIL: 'bench $suite --help' prints no usage"; fail=1; }
done
"$exe" bench vhost-pvp --help | grep -q -- '--dpdk-only' || { echo "FAIL: vhost-pvp --help"; fail=1; }
exit $fail
