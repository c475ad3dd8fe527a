# shellcheck shell=sh
# shellcheck disable=SC2034 # check, tmp and fail are for the sourcing script
# tests/e2e/e2e_lib.sh - what the CLI test scripts share. Source it first thing, with
#   . "$(dirname "$0")/e2e_lib.sh"
# It takes the script's arguments: exe, the dmaguard binary, and check, the suite's JSON
# checker (the bench and attack scripts); tmp is a directory for the script's files, removed
# when the script exits. A check that fails prints "FAIL: ..." and sets fail=1; the script
# ends with exit $fail.
set -u
exe=$1
check=${2-}
tmp=$(mktemp -d /tmp/dg-e2e-XXXXXX) # short: vhost sockets go in it
trap 'rm -rf "$tmp"' EXIT
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
