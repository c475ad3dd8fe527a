#!/bin/sh
# dmaguard bench soak: a --quick run writes a JSON report that soak_json_check accepts (fields
# of docs/bench-json.md) and whose memory verdict says nothing grew, everything drained, no
# error and no failed check; the self-test (--leak) must make the verdict say memory grew;
# bad options exit 2.
. "$(dirname "$0")/e2e_lib.sh"
out=$tmp/out.json
leak=$tmp/leak.json
"$exe" bench soak --quick --json "$out" >/dev/null || { echo "FAIL: quick run exited $?"; fail=1; }
"$check" "$out" clean || fail=1
"$exe" bench soak --duration 0.6 --interval 0.1 --leak 20 --json "$leak" >/dev/null ||
	{ echo "FAIL: leak self-test exited $?"; fail=1; }
"$check" "$leak" leak || fail=1
"$exe" bench soak --list | grep -q '^soak$' || { echo "FAIL: --list"; fail=1; }
expect_usage_errors "bench soak" "--bogus" "--interval 0" "--threads 99" "--ops 10"
exit $fail
