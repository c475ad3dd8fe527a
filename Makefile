# dmaguard - a thin layer over meson + ninja. The README's two commands:
#   make run    install what is missing, build, run the main job (dmaguard bench)
#   make test   install what is missing, build every configuration, run every test
BUILD ?= build
BENCH_ARGS ?=

.PHONY: all deps build run test install fuzz format check-format clean

all: build

deps:
	@scripts/install-deps.sh base

$(BUILD)/build.ninja:
	@scripts/install-deps.sh base
	meson setup $(BUILD)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

run: build
	$(BUILD)/tools/dmaguard/dmaguard bench $(BENCH_ARGS)

test:
	@scripts/run-tests.sh

install: build
	meson install -C $(BUILD)

fuzz:
	@scripts/fuzz.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

check-format:
	@scripts/check-format.sh

clean:
	rm -rf build build-asan build-tsan build-fuzz build.*.log build-*.log
