#!/bin/sh
# dmaguard bench iova: a --quick run writes a JSON report that bench_iova_json_check accepts;
# fixed-count mode runs; bad options exit 2.
. "$(dirname "$0")/e2e_lib.sh"
out=$tmp/out.json
"$exe" bench iova --quick --rounds 2 --duration 0.02 --json "$out" >/dev/null || { echo "FAIL: quick run"; fail=1; }
"$check" "$out" || fail=1
"$exe" bench iova --case adversarial/1k/dg-nomag/t1 --ops 100 | grep -q 'fixed count' ||
	{ echo "FAIL: fixed-count mode"; fail=1; }
"$exe" bench iova --list | grep -q '^maghit/dg/t1$' || { echo "FAIL: --list"; fail=1; }
expect_usage_errors "bench iova" "--case no-such-case" "--live 0" "--threads 3" "--bogus"
exit $fail
