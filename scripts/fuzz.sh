#!/bin/sh
# make fuzz: build every harness with clang's libFuzzer (and ASan+UBSan) and run each for
# FUZZ_SECONDS (default 60), starting from its seed corpus (tests/fuzz/corpus/NAME) and growing
# its own corpus under fuzz-out/NAME. FUZZ_TARGETS="attack dma" runs only those harnesses;
# FUZZ_JOBS=N runs N fuzzing processes per harness (libFuzzer -fork). A crash leaves its input
# in fuzz-out/NAME/crash-* (replay: build-fuzz/tests/fuzz/fuzz_NAME FILE, or the standalone
# build/tests/fuzz/fuzz_NAME FILE) and makes the script exit 1 after the other harnesses ran.
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh base fuzz
secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
if [ ! -f build-fuzz/build.ninja ]; then
	CC=clang meson setup build-fuzz -Dfuzz_engine=libfuzzer -Dbuildtype=debug -Doptimization=1 \
		-Db_sanitize=address,undefined -Db_lundef=false
fi
ninja -C build-fuzz
mkdir -p fuzz-out
failed=""
for exe in build-fuzz/tests/fuzz/fuzz_*; do
	[ -x "$exe" ] || continue
	name=$(basename "$exe")
	base=${name#fuzz_}
	if [ -n "${FUZZ_TARGETS:-}" ]; then
		case " $FUZZ_TARGETS " in
		*" $base "*) ;;
		*) continue ;;
		esac
	fi
	# seeds: tests/fuzz/corpus/NAME, or the layer's folder (vhost_msg -> vhost)
	seed_dir=tests/fuzz/corpus/$base
	[ -d "$seed_dir" ] || seed_dir=tests/fuzz/corpus/${base%%_*}
	[ -d "$seed_dir" ] || seed_dir=
	mkdir -p "fuzz-out/$base"
	echo "== $name for ${secs}s (seeds: ${seed_dir:-none}) =="
	fork=""
	[ "$jobs" -gt 1 ] && fork="-fork=$jobs"
	# shellcheck disable=SC2086
	if ! "$exe" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="fuzz-out/$base/" \
		$fork "fuzz-out/$base" ${seed_dir:+"$seed_dir"}; then
		failed="$failed $base"
	fi
done
if [ -n "$failed" ]; then
	echo "fuzz: failures in:$failed (inputs in fuzz-out/NAME/crash-*)"
	exit 1
fi
echo "fuzz: no failure"
