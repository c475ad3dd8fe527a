# shellcheck shell=sh
# shellcheck disable=SC2034,SC2154 # fail is read, and exe set, by the sourcing script
# tests/e2e/e2e_lib.sh - the checks the CLI test scripts share. Source it with
#   . "$(dirname "$0")/e2e_lib.sh"
# after setting exe (the dmaguard binary). A check that fails prints "FAIL: ..." and sets
# fail=1; the script ends with exit $fail.
fail=0

# expect STATUS CMD...: CMD (output discarded) exits with STATUS.
expect() {
	want=$1
	shift
	"$@" >/dev/null 2>&1
	got=$?
	if [ "$got" -ne "$want" ]; then
		echo "FAIL: '$*' exited $got, expected $want"
		fail=1
	fi
}

# expect_usage_errors "WORDS" BAD...: "$exe WORDS BAD" exits 2 (a usage error) for each BAD,
# a string of options split at blanks.
expect_usage_errors() {
	words=$1
	shift
	for bad in "$@"; do
		# shellcheck disable=SC2086
		"$exe" $words $bad >/dev/null 2>&1
		rc=$?
		[ "$rc" -eq 2 ] || { echo "FAIL: '$words $bad' exited $rc, expected 2"; fail=1; }
	done
}
