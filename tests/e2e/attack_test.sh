#!/bin/sh
# dmaguard attack: a --quick run of every attack against every policy exits 0 and writes a
# JSON report that attack_json_check accepts (fields of docs/bench-json.md, each policy's
# promises); one pair can be selected; --virtual-clock runs (and says so in the summary); a
# negligent driver is reported VULNERABLE (exit 1); --list; bad options exit 2.
. "$(dirname "$0")/e2e_lib.sh"
out=$tmp/out.json
one=$tmp/one.json
neg=$tmp/neg.json
virt=$tmp/virt.json
"$exe" attack --quick --json "$out" >/dev/null || { echo "FAIL: quick run exited $?"; fail=1; }
"$check" "$out" all || fail=1
"$exe" attack --policy strict,bounce --attack stale --iterations 2 --json "$one" |
	grep -q '^RESULT suite=attack runs=2 failed=0$' || { echo "FAIL: one pair"; fail=1; }
"$check" "$one" 2 || fail=1
grep -q '"virtual_clock": false' "$one" || { echo "FAIL: summary.virtual_clock not false"; fail=1; }
"$exe" attack --virtual-clock --policy lazy,strict --attack stale-window --iterations 2 \
	--json "$virt" >/dev/null || { echo "FAIL: --virtual-clock run exited $?"; fail=1; }
"$check" "$virt" 2 || fail=1
grep -q '"virtual_clock": true' "$virt" || { echo "FAIL: summary.virtual_clock not true"; fail=1; }
"$exe" attack --policy strict --attack withheld --iterations 2 --reuse-after-timeout \
	--json "$neg" >/dev/null
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: negligent driver exited $rc, expected 1"; fail=1; }
grep -q '"verdict": "VULNERABLE"' "$neg" || { echo "FAIL: negligent driver not VULNERABLE"; fail=1; }
"$exe" attack --list | grep -q '^policy linux-ref$' || { echo "FAIL: --list"; fail=1; }
"$exe" attack --list | grep -q '^attack stale-window$' || { echo "FAIL: --list"; fail=1; }
expect_usage_errors "attack" "--policy nope" "--attack" "--iterations 0" "--bogus" \
	"--attack stale,,x"
exit $fail
