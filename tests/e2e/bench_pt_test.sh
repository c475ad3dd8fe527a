#!/bin/sh
# dmaguard bench pt: a --quick run writes a JSON report that bench_pt_json_check accepts;
# fixed-count mode runs exactly --ops operations; --list; bad options exit 2.
. "$(dirname "$0")/e2e_lib.sh"
out=$tmp/out.json
fixed=$tmp/fixed.json
"$exe" bench pt --quick --rounds 2 --duration 0.04 --json "$out" >/dev/null ||
	{ echo "FAIL: quick run"; fail=1; }
"$check" "$out" timed || fail=1
"$exe" bench pt --case lpae-s2/256x4k --ops 100 --json "$fixed" |
	grep -q '^RESULT suite=pt case=lpae-s2/256x4k mode=fixed ops=100 ' ||
	{ echo "FAIL: fixed-count mode"; fail=1; }
"$check" "$fixed" fixed || fail=1
"$exe" bench pt --list | grep -q '^flat/4k-rand$' || { echo "FAIL: --list"; fail=1; }
"$exe" bench pt --list | grep -q '^flat/2m$' && { echo "FAIL: flat has no 2m case"; fail=1; }
expect_usage_errors "bench pt" "--case no-such-case" "--threads 65" "--bogus" "--ops 0"
exit $fail
