#!/bin/sh
# Instructions per operation of a benchmark case, from callgrind: runs the case's fixed-count
# mode with N and 2N operations and prints (Ir(2N) - Ir(N)) / N, in total and per function
# (functions with at least 1 instruction per operation). Setup costs cancel out.
#   scripts/callgrind-per-op.sh SUITE CASE [N]      e.g. scripts/callgrind-per-op.sh pt vtd/4k-seq
# DMAGUARD=path/to/dmaguard overrides build/tools/dmaguard/dmaguard.
# --fair-sched=yes: valgrind runs one thread at a time, and with its default scheduling a thread
# spinning on another's progress (a driver polling for the device's acknowledgement) can keep
# the CPU for minutes (bench workloads --case tcp-x1/strict ran 10 minutes without it, 2 s with).
set -eu
suite=$1
case=$2
n=${3:-10000}
exe=${DMAGUARD:-build/tools/dmaguard/dmaguard}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for k in 1 2; do
	valgrind --tool=callgrind --fair-sched=yes --callgrind-out-file="$tmp/cg.$k" \
		"$exe" bench "$suite" --case "$case" --ops $((k * n)) >/dev/null 2>&1
	callgrind_annotate --threshold=100 "$tmp/cg.$k" |
		sed -n 's/^ *\([0-9,][0-9,]*\) *([ 0-9.]*%) *\(.*\)$/\1\t\2/p' | tr -d ',' \
		>"$tmp/f.$k"
done
awk -F'\t' -v n="$n" -v c="$case" '
	NR == FNR { a[$2] = $1; next }
	{ d = ($1 - a[$2]) / n; if ($2 ~ /PROGRAM TOTALS/) total = d; else if (d >= 1) printf "  %8.1f  %s\n", d, $2 }
	END { printf "%s: %.1f instructions per operation\n", c, total }' "$tmp/f.1" "$tmp/f.2"
