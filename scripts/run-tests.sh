#!/bin/sh
# make test: build and run every test, in every build that applies, then print one line
# "N passed, N failed" (also kept in build/test-summary.txt for .ci/run).
#
#   build/       release build: unit, fuzz replay, stress, cli and qemu suites;
#                unit tests again under valgrind memcheck
#   build-asan/  ASan + UBSan (no recovery): unit, fuzz replay, stress, cli
#   build-tsan/  ThreadSanitizer: stress
# Environment: DG_TEST_SKIP_QEMU=1 leaves out the QEMU guest suite (for quick local runs only;
# CI runs everything).
set -u
cd "$(dirname "$0")/.."
top=$(pwd)
jobs=$(nproc 2>/dev/null || echo 2)
passed=0
failed=0
failures=""

note() { printf '\n== %s ==\n' "$*"; }

count_meson() { # $1 label, $2 log file
	ok=$(awk '/^Ok:/{print $2}' "$2" | tail -n 1)
	xf=$(awk '/^Expected Fail:/{print $3}' "$2" | tail -n 1)
	fl=$(awk '/^Fail:/{print $2}' "$2" | tail -n 1)
	up=$(awk '/^Unexpected Pass:/{print $3}' "$2" | tail -n 1)
	to=$(awk '/^Timeout:/{print $2}' "$2" | tail -n 1)
	ok=${ok:-0}; xf=${xf:-0}; fl=${fl:-0}; up=${up:-0}; to=${to:-0}
	passed=$((passed + ok + xf))
	bad=$((fl + up + to))
	if grep -q '^No suitable tests defined' "$2"; then
		return 0 # this build has no test of these suites yet
	fi
	if [ -z "$(awk '/^Ok:/' "$2")" ]; then
		bad=$((bad + 1)) # meson did not even get to run the tests
	fi
	if [ "$bad" -gt 0 ]; then
		failed=$((failed + bad))
		failures="$failures $1"
	fi
}

one_check() { # $1 label, then the command
	label=$1
	shift
	if "$@"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failures="$failures $label"
	fi
}

setup_build() { # $1 dir, then meson options
	dir=$1
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
	fi
	ninja -C "$dir" -j "$jobs" >"$dir.build.log" 2>&1 || { tail -n 60 "$dir.build.log"; return 1; }
}

run_suites() { # $1 label, $2 dir, $3 extra meson test args, then suites
	label=$1 dir=$2 extra=$3
	shift 3
	args=""
	for s in "$@"; do
		args="$args --suite $s"
	done
	log="$dir/meson-test-$label.log"
	# shellcheck disable=SC2086
	meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs" $extra $args \
		>"$log" 2>&1
	grep -E '^ *[0-9]+/[0-9]+ ' "$log" | grep -v ' OK ' | sort -u || true
	grep -E '^(Ok|Fail|Timeout|Skipped):' "$log" | tr '\n' ' '
	echo
	count_meson "$label" "$log"
}

rm -f build/test-summary.txt
scripts/install-deps.sh base || exit 1
if [ -z "${DG_TEST_SKIP_QEMU:-}" ]; then
	scripts/install-deps.sh e2e || exit 1
fi

note "format (.clang-format)"
one_check format scripts/check-format.sh

note "release build"
if setup_build build; then
	passed=$((passed + 1))
	suites="unit fuzz stress cli"
	[ -z "${DG_TEST_SKIP_QEMU:-}" ] && suites="$suites qemu"
	# shellcheck disable=SC2086
	run_suites release build "" $suites
	note "valgrind memcheck (unit)"
	run_suites memcheck build "--setup=memcheck" unit
	note "install and example"
	one_check install scripts/test-install.sh build
else
	failed=$((failed + 1))
	failures="$failures build"
fi

note "ASan + UBSan build"
if setup_build build-asan -Dbuildtype=debug -Doptimization=1 -Db_sanitize=address,undefined \
	-Db_lundef=false -Dc_args=-fno-sanitize-recover=all; then
	passed=$((passed + 1))
	ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		run_suites asan build-asan "" unit fuzz stress cli
else
	failed=$((failed + 1))
	failures="$failures build-asan"
fi

note "ThreadSanitizer build"
if setup_build build-tsan -Dbuildtype=debug -Doptimization=1 -Db_sanitize=thread \
	-Db_lundef=false; then
	passed=$((passed + 1))
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 run_suites tsan build-tsan "" stress
else
	failed=$((failed + 1))
	failures="$failures build-tsan"
fi

mkdir -p build
summary="$passed passed, $failed failed"
echo "$summary" >"$top/build/test-summary.txt"
[ -n "$failures" ] && printf '\nfailing:%s\n' "$failures"
echo
echo "$summary"
[ "$failed" -eq 0 ]
