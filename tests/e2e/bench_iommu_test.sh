#!/bin/sh
# dmaguard bench iotlb / invq: --quick runs write JSON reports that bench_iommu_json_check
# accepts; fixed-count mode runs; unknown cases and options exit 2.
set -u
exe=$1
check=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail=0
for suite in iotlb invq; do
	"$exe" bench $suite --duration 0.02 --rounds 2 --quick --json "$out" >/dev/null ||
		{ echo "FAIL: $suite quick run"; fail=1; }
	"$check" $suite "$out" || fail=1
	"$exe" bench $suite --list | grep -q . || { echo "FAIL: $suite --list"; fail=1; }
	for bad in "--case no-such-case" "--bogus"; do
		# shellcheck disable=SC2086
		"$exe" bench $suite $bad >/dev/null 2>&1
		rc=$?
		[ "$rc" -eq 2 ] || { echo "FAIL: 'bench $suite $bad' exited $rc, expected 2"; fail=1; }
	done
done
"$exe" bench iotlb --case hit_stale2047 --ops 1000 | grep -q 'case=hit_stale2047 ops=1000 fixed_count=1' ||
	{ echo "FAIL: iotlb fixed-count mode"; fail=1; }
"$exe" bench invq --case unmap64_perpage --ops 10 | grep -q 'fixed_count=1' ||
	{ echo "FAIL: invq fixed-count mode"; fail=1; }
exit $fail
