# Thin wrapper over CMake presets. `make demo` and `make test` set up a fresh Debian 12 machine
# (scripts/setup.sh installs packages with apt), build, and run. `make demo` installs and builds
# only what the `kiln` command needs; `make test` adds the test packages (PyTorch, ONNX, ONNX
# Runtime, ...) and builds everything.
PRESET ?= release
BUILD := build
JOBS ?= $(shell nproc)
# CI builds with warnings as errors.
CMAKE_FLAGS := $(if $(CI),-DKILN_WERROR=ON,)
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere reuses earlier builds.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= true

.PHONY: all setup setup-test configure build demo test lint format conformance bench clean

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

# clang-format, clang-tidy (over src/, with the build's compile commands), ruff, and the source
# rules (line budget, include spellings). `make format` applies clang-format and ruff's fixes.
lint: setup-test configure
	bash scripts/lint.sh $(BUILD)

format:
	bash scripts/lint.sh --fix $(BUILD)

conformance: build
	bash scripts/conformance.sh $(BUILD)
	/usr/bin/python3 scripts/gen_ops_doc.py $(BUILD)

# Forward first, then one training step per model; a model that fails in one table (exit 1) does
# not stop the other table from being printed.
bench: build
	-/usr/bin/python3 bench/forward.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/train_step.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/train_full_step.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/optimizer_step.py --build-dir $(BUILD)
	/usr/bin/python3 bench/trainer_speed.py --build-dir $(BUILD)

clean:
	rm -rf build build-debug build-asan
