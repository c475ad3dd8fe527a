#!/bin/sh
# The dmaguard CLI: help, version, info, unknown commands and bad options give the documented
# exit status (0 for success, 2 for usage errors).
. "$(dirname "$0")/e2e_lib.sh"
expect 0 "$exe" --help
expect 0 "$exe" --version
expect 0 "$exe" info
expect 2 "$exe"
expect 2 "$exe" no-such-command
expect 0 "$exe" bench --help
expect 2 "$exe" bench no-such-suite
"$exe" --version | grep -q '^dmaguard [0-9]' || { echo "FAIL: --version output"; fail=1; }
exit $fail
