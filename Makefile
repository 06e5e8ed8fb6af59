# Thin wrapper over CMake presets. `make demo` and `make test` set up a fresh Debian 12 machine
# (scripts/setup.sh installs packages with apt), build, and run. `make demo` installs and builds
# only what the `kiln` command needs; `make test` adds the test packages (PyTorch, ONNX, ONNX
# Runtime, ...) and builds everything.
PRESET ?= release
BUILD := build
JOBS ?= $(shell nproc)
# CI builds with warnings as errors.
CMAKE_FLAGS = $(if $(CI),-DKILN_WERROR=ON,)
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere reuses earlier builds.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= true

.PHONY: all setup setup-test configure build demo test test-large lint format conformance bench translation asan asan-build tsan tsan-build warm fuzz gauntlet clean

all: build

setup:
	bash scripts/setup.sh

setup-test:
	bash scripts/setup.sh --test

configure: setup
	cmake --preset $(PRESET) $(CMAKE_FLAGS)

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

demo: configure
	cmake --build --preset $(PRESET) -j $(JOBS) --target kiln_cli
	./$(BUILD)/bin/kiln train

test: setup-test build
	ctest --preset $(PRESET) -j $(JOBS)

# Tests too large for `make test` (tests/large: a model over protobuf's 2 GiB limit, ~12 GB of memory).
test-large: setup-test build
	KILN_BUILD_DIR=$(CURDIR)/$(BUILD) /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/large

# clang-format, clang-tidy (over src/, with the build's compile commands), ruff, and the source
# rules (line budget, include spellings). `make format` applies clang-format and ruff's fixes.
lint: setup-test configure
	bash scripts/lint.sh $(BUILD)

format:
	bash scripts/lint.sh --fix $(BUILD)

conformance: build
	bash scripts/conformance.sh $(BUILD)
	/usr/bin/python3 scripts/gen_ops_doc.py $(BUILD)

# bench/bench.py prints every table of issue 17 in one run (bench/README.md), then the AdamW step,
# ORTModule against PyTorch, data parallelism over MPI with its projected scaling, pipeline stages
# and device_iterations (issue 21), text generation with and without the KV cache (issue 23), and the
# Trainer's speed; a failing script does not stop the others.
bench: build
	-/usr/bin/python3 bench/bench.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/optimizer_step.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/ortmodule_step.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/distributed.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/pipeline.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/device_iterations.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/dataloader_workers.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/compile_cache.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/serialized_head.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/generation.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/scaling_projection.py
	/usr/bin/python3 bench/trainer_speed.py --build-dir $(BUILD)

# English -> Spanish translation on the Bibles Debian ships (examples/translation; figures in
# docs/text.md): about 32 minutes on 2 cores.
translation: build
	PYTHONPATH=$(BUILD)/python /usr/bin/python3 examples/translation/run_translation.py \
	    --output_dir $(BUILD)/translation --books Matthew-Revelation --vocab_size 2000 --max_length 40 \
	    --d_model 128 --layers 2 --max_steps 7000 --warmup_steps 400 --learning_rate 1.5e-3

# Sanitizers (clang 14; docs/reliability.md). asan: AddressSanitizer + UBSan over every C++ test and
# the ONNX conformance cases. tsan: ThreadSanitizer over the tests that run threads at once.
TSAN_TESTS ?= ^(DataLoader|ModuleThreadsF3|SessionThreadsF3)\.
FUZZ_SECONDS ?= 60
KILLS ?= 50
asan: asan-build
	ctest --preset asan -j $(JOBS)

asan-build: setup-test
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS) --target kiln_tests kiln_conformance kiln_fuzzers

tsan: tsan-build
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 OMP_NUM_THREADS=1 ctest --preset tsan -j $(JOBS) -R '$(TSAN_TESTS)'

tsan-build: setup-test
	cmake --preset tsan
	cmake --build --preset tsan -j $(JOBS) --target kiln_tests

# Everything CI builds and lints, without running the tests: CI's fresh clone on this machine then
# finds ccache and the clang-tidy cache warm (cold, the builds and clang-tidy take about an hour of
# CI's 90 minutes on 2 cores). Run it last, on the commit CI will take; it builds with CI's flags.
warm: CI = true
warm: build asan-build tsan-build lint

# libFuzzer over every reader for FUZZ_SECONDS each (scripts/fuzz.sh; findings under build-asan/fuzz).
fuzz: setup-test
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS) --target kiln_fuzzers
	bash scripts/fuzz.sh build-asan $(FUZZ_SECONDS)

# SIGKILLs at random moments of a training run; every checkpoint and the resumed run must match an
# uninterrupted one bit for bit (scripts/kill-gauntlet).
gauntlet: build
	/usr/bin/python3 scripts/kill-gauntlet $(KILLS) --build-dir $(BUILD)

clean:
	rm -rf build build-debug build-asan build-tsan
