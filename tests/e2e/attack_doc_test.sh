#!/bin/sh
# docs/attack.md's results are what today's code prints. The page's "Results" holds the output
# of `taskset -c 0 dmaguard attack --virtual-clock` (block "attack-output") and the
# breaches/attempts matrix made from it (block "attack-matrix"). On a virtual clock and one
# CPU the run is reproducible (no housekeeping thread; time moves only when the attack waits;
# the library's per-CPU structures - lazy flush queues, bounce areas - are those of CPU 0),
# so this script runs the command again and compares both blocks with the page: a change
# that moves any figure (a count, a verdict, a virtual window) fails until the page is
# updated. Where the thread cannot be pinned to CPU 0 (no taskset, CPU 0 not allowed) only
# the verdict column is compared: verdicts do not depend on the CPU.
#   DG_UPDATE_DOC=1 tests/e2e/attack_doc_test.sh build/tools/dmaguard/dmaguard
# rewrites both blocks from a fresh run instead (then review the diff and the page's prose).
. "$(dirname "$0")/e2e_lib.sh"
doc=$(dirname "$0")/../../docs/attack.md
run=$tmp/run.txt

# block NAME: the lines between "<!-- NAME -->" and "<!-- NAME end -->", fences dropped.
block() {
	awk -v b="<!-- $1 -->" -v e="<!-- $1 end -->" '
		$0 == e { on = 0 }
		on && !/^```/ { print }
		$0 == b { on = 1 }' "$doc"
}

# matrix < OUTPUT: breaches/attempts per policy (rows) and attack (columns), in run order.
matrix() {
	awk 'NR == 1 || /^RESULT/ { next }
		!($1 in ps) { ps[$1] = 1; pol[++np] = $1 }
		!($2 in as) { as[$2] = 1; att[++na] = $2 }
		{ cell[$1, $2] = $6 "/" $3 }
		END {
			printf "| policy |"
			for (a = 1; a <= na; a++) printf " %s |", att[a]
			printf "\n|---|"
			for (a = 1; a <= na; a++) printf "---|"
			printf "\n"
			for (p = 1; p <= np; p++) {
				printf "| %s |", pol[p]
				for (a = 1; a <= na; a++) printf " %s |", cell[pol[p], att[a]]
				printf "\n"
			}
		}'
}

verdicts() { awk 'NR > 1 && !/^RESULT/ { print $1, $2, $NF }'; }

# replace NAME FILE [FENCE]: the page with block NAME's content replaced by FILE (in a code
# fence when FENCE is given).
replace() {
	awk -v b="<!-- $1 -->" -v e="<!-- $1 end -->" -v f="$2" -v fence="${3-}" '
		$0 == e { on = 0 }
		on { next }
		{ print }
		$0 == b {
			on = 1
			if (fence) print "```"
			while ((getline l < f) > 0) print l
			if (fence) print "```"
		}' "$doc"
}

[ -f "$doc" ] || { echo "FAIL: $doc missing"; exit 1; }
if command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null; then
	pinned=1
	taskset -c 0 "$exe" attack --virtual-clock >"$run"
else
	pinned=0
	echo "NOTE: cannot pin to CPU 0: comparing the verdicts only"
	"$exe" attack --virtual-clock >"$run"
fi
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: dmaguard attack --virtual-clock exited $rc"; fail=1; }
grep -q '^RESULT suite=attack runs=56 failed=0$' "$run" ||
	{ echo "FAIL: not 56 clean runs"; fail=1; }
matrix <"$run" >"$tmp/matrix.md"

if [ -n "${DG_UPDATE_DOC:-}" ]; then
	[ "$pinned" = 1 ] || { echo "FAIL: DG_UPDATE_DOC needs a run pinned to CPU 0"; exit 1; }
	replace attack-output "$run" fence >"$tmp/doc1" && cp "$tmp/doc1" "$doc"
	replace attack-matrix "$tmp/matrix.md" >"$tmp/doc2" && cp "$tmp/doc2" "$doc"
	echo "updated $doc"
	exit $fail
fi

block attack-output >"$tmp/page.txt"
block attack-matrix >"$tmp/page-matrix.md"
[ -s "$tmp/page.txt" ] || { echo "FAIL: no attack-output block in $doc"; exit 1; }
[ -s "$tmp/page-matrix.md" ] || { echo "FAIL: no attack-matrix block in $doc"; exit 1; }
verdicts <"$run" >"$tmp/v-run"
verdicts <"$tmp/page.txt" >"$tmp/v-page"
if ! diff -u "$tmp/v-page" "$tmp/v-run"; then
	echo "FAIL: docs/attack.md's verdicts are not what dmaguard attack says (above: - page, + run)"
	fail=1
fi
if [ "$pinned" = 1 ]; then
	if ! diff -u "$tmp/page.txt" "$run"; then
		echo "FAIL: docs/attack.md's attack-output is not what the code prints (- page, + run)"
		fail=1
	fi
	if ! diff -u "$tmp/page-matrix.md" "$tmp/matrix.md"; then
		echo "FAIL: docs/attack.md's attack-matrix is not what the code prints (- page, + run)"
		fail=1
	fi
	[ "$fail" = 0 ] || echo "(DG_UPDATE_DOC=1 $0 $exe rewrites both blocks)"
fi
exit $fail
