#!/bin/sh
# dmaguard bench iotlb / invq: --quick runs write JSON reports that bench_iommu_json_check
# accepts; fixed-count mode runs; unknown cases and options exit 2.
. "$(dirname "$0")/e2e_lib.sh"
out=$tmp/out.json
for suite in iotlb invq; do
	"$exe" bench $suite --duration 0.02 --rounds 2 --quick --json "$out" >/dev/null ||
		{ echo "FAIL: $suite quick run"; fail=1; }
	"$check" $suite "$out" || fail=1
	"$exe" bench $suite --list | grep -q . || { echo "FAIL: $suite --list"; fail=1; }
	expect_usage_errors "bench $suite" "--case no-such-case" "--bogus"
done
"$exe" bench iotlb --case hit_stale2047 --ops 1000 | grep -q 'case=hit_stale2047 ops=1000 fixed_count=1' ||
	{ echo "FAIL: iotlb fixed-count mode"; fail=1; }
"$exe" bench invq --case unmap64_perpage --ops 10 | grep -q 'fixed_count=1' ||
	{ echo "FAIL: invq fixed-count mode"; fail=1; }
exit $fail
