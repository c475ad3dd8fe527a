#!/bin/sh
# dmaguard bench (the workloads suite, what make run runs): a --quick run with no suite
# argument writes a JSON report that bench_workloads_json_check accepts (every workload x
# policy, ratios positive, counters consistent, the machine's cache-line transfer cost), CSV
# and the ASCII plot come out, fixed-count mode runs, --list names every workload, and bad
# options exit 2. The checker refuses a report without the transfer cost or with a negative
# one, and per-round transfer figures of the wrong count, negative, or missing outside --quick;
# `dmaguard bench machine` writes a report it accepts.
. "$(dirname "$0")/e2e_lib.sh"
"$exe" bench --quick --json "$tmp/out.json" --csv "$tmp/out.csv" --plot ascii \
	>"$tmp/out.txt" 2>"$tmp/err.txt" || { echo "FAIL: quick run"; cat "$tmp/err.txt"; fail=1; }
"$check" "$tmp/out.json" || fail=1
# the cache-line transfer cost: in the header, in the strict note, and in the JSON's machine
# section, where the checker refuses a report without it or with a negative median
grep -q '^machine: .*; cache-line transfer CPU 0 <-> 1: [0-9]* ns one way' "$tmp/out.txt" ||
	{ echo "FAIL: header has no cache-line transfer"; fail=1; }
grep -q "^strict's device-side cross-core transfers per I/O" "$tmp/out.txt" ||
	{ echo "FAIL: no strict transfers note"; fail=1; }
# expect_check_fails FILE WHAT: the checker refuses FILE and says WHAT
expect_check_fails() {
	if "$check" "$1" 2>"$tmp/check.txt"; then
		echo "FAIL: checker accepted $1 ($2)"
		fail=1
	elif ! grep -q -- "$2" "$tmp/check.txt"; then
		echo "FAIL: checker refused $1, but not for '$2':"
		cat "$tmp/check.txt"
		fail=1
	fi
}
sed 's/"cacheline_transfer_ns"/"cacheline_transfer_xx"/' "$tmp/out.json" >"$tmp/noxfer.json"
expect_check_fails "$tmp/noxfer.json" "cacheline_transfer_ns missing"
sed '/"cacheline_transfer_ns"/,/}/ s/"median": [^,]*/"median": -1.5/' "$tmp/out.json" \
	>"$tmp/negxfer.json"
expect_check_fails "$tmp/negxfer.json" "cacheline_transfer_ns.median -1.5"
# the transfer of every round (cacheline_transfer_ns_samples; --quick measures the first
# round of the first workload only, xdp64): the checker refuses an array of the wrong length,
# a negative figure, and a null in a run that is not --quick; the note gives xdp64's range
grep -q '^xdp64  .* [0-9][0-9]*-[0-9][0-9]*$' "$tmp/out.txt" ||
	{ echo "FAIL: no per-round transfer range for xdp64 in the transfers note"; fail=1; }
# fwd64 measured no round's transfer: its measured extra time is not shown, and the note says why
grep -q '^fwd64  .* - *-$' "$tmp/out.txt" && grep -q \
	'^(fwd64: measured +ns not shown: 0 of 1 rounds measured the transfer[;)]' "$tmp/out.txt" ||
	{ echo "FAIL: the transfers note shows fwd64's measured +ns, or not why not"; fail=1; }
sed '0,/"cacheline_transfer_ns_samples": \[$/s//&\n        1.5,/' "$tmp/out.json" \
	>"$tmp/xferlen.json"
expect_check_fails "$tmp/xferlen.json" "cacheline_transfer_ns_samples: 2, not one per round (1)"
sed '/"cacheline_transfer_ns_samples": \[$/{n;s/^\( *\)[0-9][0-9.e+-]*/\1-2.5/}' \
	"$tmp/out.json" >"$tmp/xferneg.json"
expect_check_fails "$tmp/xferneg.json" "cacheline_transfer_ns_samples.0. -2.5"
sed 's/"quick": true/"quick": false/' "$tmp/out.json" >"$tmp/xfernull.json"
expect_check_fails "$tmp/xfernull.json" "null in a run that is not --quick"
# two rounds: two figures per row (the second null in --quick), each throughput sample's round
# (the CSV: min and max, then the rounds' figures, ';' between them, empty where not measured;
# the RESULT lines: min, max and how many rounds measured it)
"$exe" bench workloads --quick --rounds 2 --duration 0.01 --workload xdp64 \
	--json "$tmp/two.json" --csv "$tmp/two.csv" >"$tmp/two.txt" 2>"$tmp/err.txt" ||
	{ echo "FAIL: two-round run"; cat "$tmp/err.txt"; fail=1; }
"$check" "$tmp/two.json" xdp64 || fail=1
tr -d ' \n' <"$tmp/two.json" | grep -q '"cacheline_transfer_ns_samples":\[[0-9.e+-]*,null\]' ||
	{ echo "FAIL: two-round run: cacheline_transfer_ns_samples not [figure, null]"; fail=1; }
# (every row of the nine configurations)
[ "$(grep -c '^xdp64,.*,\([0-9.][0-9.]*\),\1,\1;$' "$tmp/two.csv")" -eq 9 ] ||
	{ echo "FAIL: two-round run: CSV rows' transfer not 'x,x,x;'"; cat "$tmp/two.csv"; fail=1; }
[ "$(grep -c '^RESULT .* xfer_ns_min=\([0-9.]*\) xfer_ns_max=\1 xfer_rounds=1 ok=1$' \
	"$tmp/two.txt")" -eq 9 ] || { echo "FAIL: two-round run: RESULT xfer_ns_*"; fail=1; }
# without --quick every round measures it: the checker takes no null there
"$exe" bench workloads --rounds 2 --duration 0.01 --workload xdp64 --json "$tmp/full.json" \
	--csv "$tmp/full.csv" >"$tmp/full.txt" 2>"$tmp/err.txt" ||
	{ echo "FAIL: two-round run without --quick"; cat "$tmp/err.txt"; fail=1; }
"$check" "$tmp/full.json" xdp64 || fail=1
[ "$(grep -c '^xdp64,.*,[0-9.][0-9.]*,[0-9.][0-9.]*,[0-9.][0-9.]*;[0-9.][0-9.]*$' \
	"$tmp/full.csv")" -eq 9 ] || { echo "FAIL: two-round run without --quick: CSV"; fail=1; }
[ "$(grep -c '^RESULT .* xfer_ns_min=[0-9.]* xfer_ns_max=[0-9.]* xfer_rounds=2 ok=1$' \
	"$tmp/full.txt")" -eq 9 ] || { echo "FAIL: two-round run without --quick: RESULT"; fail=1; }
# the suite alone: its report passes the same check, and a negative median fails it
"$exe" bench machine --quick --json "$tmp/machine.json" >"$tmp/machine.txt" 2>&1 ||
	{ echo "FAIL: bench machine"; cat "$tmp/machine.txt"; fail=1; }
grep -q '^RESULT suite=machine case=cacheline_transfer ns_per_op=[0-9]' "$tmp/machine.txt" ||
	{ echo "FAIL: bench machine RESULT line"; fail=1; }
"$check" "$tmp/machine.json" || fail=1
sed '/"cacheline_transfer_ns"/,/}/ s/"median": [^,]*/"median": -1.5/' "$tmp/machine.json" \
	>"$tmp/negmachine.json"
expect_check_fails "$tmp/negmachine.json" "cacheline_transfer_ns.median -1.5"
# on one CPU there is nothing to measure: null, which the checker takes only with one core
if command -v taskset >/dev/null 2>&1; then
	taskset -c 0 "$exe" bench machine --quick --json "$tmp/one.json" >"$tmp/one.txt" 2>&1 ||
		{ echo "FAIL: bench machine on one CPU"; cat "$tmp/one.txt"; fail=1; }
	grep -q 'cache-line transfer not measured' "$tmp/one.txt" ||
		{ echo "FAIL: bench machine on one CPU measured"; fail=1; }
	"$check" "$tmp/one.json" || fail=1
	sed 's/"cores": 1,/"cores": 2,/' "$tmp/one.json" >"$tmp/nulltwo.json"
	expect_check_fails "$tmp/nulltwo.json" "cacheline_transfer_ns null on 2 CPUs"
fi
expect_usage_errors "bench machine" "--bogus" "--ops 5" "--case nope"
[ "$(wc -l <"$tmp/out.csv")" -eq 82 ] || { echo "FAIL: CSV has $(wc -l <"$tmp/out.csv") lines"; fail=1; }
head -n 1 "$tmp/out.csv" | grep -q '^workload,policy,unit,throughput,' || { echo "FAIL: CSV header"; fail=1; }
# the rounds' transfer in the CSV and the RESULT lines: --quick measures xdp64's only round
head -n 1 "$tmp/out.csv" | grep -q \
	',ok,cacheline_transfer_ns_min,cacheline_transfer_ns_max,cacheline_transfer_ns_samples$' ||
	{ echo "FAIL: CSV header: no cacheline_transfer_ns columns"; fail=1; }
grep -q '^xdp64,strict,.*,1,\([0-9.][0-9.]*\),\1,\1$' "$tmp/out.csv" ||
	{ echo "FAIL: CSV: xdp64/strict's transfer"; fail=1; }
grep -q '^fwd64,strict,.*,1,,,$' "$tmp/out.csv" || { echo "FAIL: CSV: fwd64/strict's transfer"; fail=1; }
grep -q '^RESULT suite=workloads workload=xdp64 policy=strict .* xfer_ns_min=\([0-9.][0-9.]*\) xfer_ns_max=\1 xfer_rounds=1 ok=1$' \
	"$tmp/out.txt" ||
	{ echo "FAIL: RESULT: xdp64/strict's transfer"; fail=1; }
grep -q '^RESULT suite=workloads workload=fwd64 policy=strict .* xfer_ns_min=nan xfer_ns_max=nan xfer_rounds=0 ok=1$' \
	"$tmp/out.txt" ||
	{ echo "FAIL: RESULT: fwd64/strict's transfer"; fail=1; }
grep -q '^ *strict  *[0-9.]* #' "$tmp/out.txt" || { echo "FAIL: ASCII plot"; fail=1; }
[ "$(grep -c '^RESULT suite=workloads ' "$tmp/out.txt")" -eq 81 ] || { echo "FAIL: RESULT lines"; fail=1; }
grep -q '^seeds (DESIGN.md section 1)' "$tmp/out.txt" || { echo "FAIL: seed table"; fail=1; }
# a subset, two threads, a queue depth
"$exe" bench workloads --quick --workload nvme4k,bond4 --policy strict,bounce --threads 2 --qd 8 \
	--json "$tmp/sub.json" >/dev/null 2>"$tmp/err.txt" || { echo "FAIL: subset run"; cat "$tmp/err.txt"; fail=1; }
grep -c '"policy"' "$tmp/sub.json" | grep -q '^6$' || { echo "FAIL: subset has $(grep -c '"policy"' "$tmp/sub.json") results"; fail=1; }
grep -q '"qd": 8' "$tmp/sub.json" || { echo "FAIL: qd"; fail=1; }
"$exe" bench workloads --case tcp-x4/strict --ops 64 | grep -q 'fixed count' ||
	{ echo "FAIL: fixed-count mode"; fail=1; }
# every buffer is written at set-up (wl_env.c): a TSO send's payload past its header ends in
# WL_FILL under every configuration, or the device counts a bad send and the run exits 1 (a page
# nobody wrote reads as the kernel's zero page, which made identity's sends cheaper than pool's)
for cfg in identity strict window pool; do
	"$exe" bench workloads --case tcp-x1/$cfg --ops 64 >"$tmp/fill.txt" 2>&1 ||
		{ echo "FAIL: tcp-x1/$cfg: payload not as written at set-up"; cat "$tmp/fill.txt"; fail=1; }
done
"$exe" bench workloads --case fwd64/strict-2step --ops 256 | grep -q 'fixed count' ||
	{ echo "FAIL: fixed-count mode, strict-2step"; fail=1; }
[ "$("$exe" bench workloads --list | grep -c -E '^(xdp64|xdp64-2k|xdp64-4k|fwd64|bond4|tcp-x1|tcp-x4|tcp-x8|nvme4k) ')" -eq 9 ] ||
	{ echo "FAIL: --list"; fail=1; }
expect_usage_errors "bench workloads" "--workload nope" "--policy none" "--qd 0" "--plot x.gif" \
	"--case xdp64 --ops 5" "--ops 5" "--bogus" "--threads 99"
exit $fail
