# Thin wrapper over CMake presets. `make demo` and `make test` set up a fresh Debian 12 machine
# (scripts/setup.sh installs packages with apt), build, and run.
PRESET ?= release
BUILD := build
JOBS ?= $(shell nproc)
# CI builds with warnings as errors.
CMAKE_FLAGS := $(if $(CI),-DKILN_WERROR=ON,)

.PHONY: all setup configure build demo test conformance bench clean

all: build

setup:
	bash scripts/setup.sh

configure: setup
	cmake --preset $(PRESET) $(CMAKE_FLAGS)

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

demo: build
	./$(BUILD)/bin/kiln train

test: build
	ctest --preset $(PRESET) -j $(JOBS)

conformance: build
	bash scripts/conformance.sh $(BUILD)
	/usr/bin/python3 scripts/gen_ops_doc.py $(BUILD)

# Forward first, then one training step per model; a model that fails in one table (exit 1) does
# not stop the other table from being printed.
bench: build
	-/usr/bin/python3 bench/forward.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/train_step.py --build-dir $(BUILD)
	-/usr/bin/python3 bench/train_full_step.py --build-dir $(BUILD)
	/usr/bin/python3 bench/trainer_speed.py --build-dir $(BUILD)

clean:
	rm -rf build build-debug build-asan
