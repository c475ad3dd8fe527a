#!/bin/sh
# dmaguard bench dma: a --quick run writes a JSON report that bench_dma_json_check accepts;
# fixed-count mode runs (a poll mode too); bad options exit 2.
. "$(dirname "$0")/e2e_lib.sh"
out=$tmp/out.json
"$exe" bench dma --quick --rounds 2 --duration 0.01 --json "$out" >/dev/null || { echo "FAIL: quick run"; fail=1; }
"$check" "$out" || fail=1
"$exe" bench dma --case strict/sg16/batch/t1 --ops 64 | grep -q 'fixed count' ||
	{ echo "FAIL: fixed-count mode"; fail=1; }
"$exe" bench dma --list | grep -q '^strict-2step/64/batch/t2$' || { echo "FAIL: --list"; fail=1; }
# a poll mode (callgrind's per-poll measurement; not in --quick): both batches end cleanly
"$exe" bench dma --case strict/64/poll4/t1 --ops 64 | grep -q 'fixed count' ||
	{ echo "FAIL: poll mode"; fail=1; }
expect_usage_errors "bench dma" "--case no-such-case" "--policy none" "--threads 3" "--bogus"
exit $fail
