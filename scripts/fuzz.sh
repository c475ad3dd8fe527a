#!/bin/sh
# make fuzz: build every harness with clang's libFuzzer (and ASan+UBSan) and run each for
# FUZZ_SECONDS (default 60), starting from and growing its corpus under fuzz-out/.
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh base fuzz
secs=${FUZZ_SECONDS:-60}
if [ ! -f build-fuzz/build.ninja ]; then
	CC=clang meson setup build-fuzz -Dfuzz_engine=libfuzzer -Dbuildtype=debug -Doptimization=1 \
		-Db_sanitize=address,undefined -Db_lundef=false
fi
ninja -C build-fuzz
mkdir -p fuzz-out
for exe in build-fuzz/tests/fuzz/fuzz_*; do
	[ -x "$exe" ] || continue
	name=$(basename "$exe")
	mkdir -p "fuzz-out/$name"
	seed_dir=$(find tests/fuzz -type d -name "${name#fuzz_}" -path '*corpus*' | head -n 1)
	echo "== $name for ${secs}s =="
	"$exe" -max_total_time="$secs" -print_final_stats=1 "fuzz-out/$name" ${seed_dir:+"$seed_dir"}
done
