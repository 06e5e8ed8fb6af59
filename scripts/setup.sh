#!/usr/bin/env bash
# Installs what Kiln needs on Debian 12 (run as root): with no argument, what building Kiln and
# running its demo need; with --test, also what the tests and `make lint` need (PyTorch, ONNX, ONNX
# Runtime and Ruff from npm, clang tools, sanitizers and libFuzzer). Idempotent: a machine that
# already has every package skips apt entirely.
set -euo pipefail
for_tests=false
[ "${1:-}" = "--test" ] && for_tests=true

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libprotobuf-dev protobuf-compiler libonnx-dev
  libdnnl-dev libopenblas-dev
  # OpenBLAS built on OpenMP: float32 products on CPUs without AVX-512 (src/kernels/cpu/blas.h)
  libopenblas0-openmp
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev
  python3-dev pybind11-dev python3-numpy
  openmpi-bin libopenmpi-dev
  libsentencepiece-dev
  dataset-fashion-mnist
)
if $for_tests; then
  packages+=(
    python3-pytest python3-onnx python3-torch python3-torchvision python3-sklearn
    python3-protobuf python3-crc32c python3-optuna
    # tokenizers and text metrics: references (SentencePiece, nltk's BLEU, the regex module for
    # GPT-2's pre-tokenizer pattern) and real English text (the fortunes)
    python3-sentencepiece python3-nltk python3-regex fortunes
    # the translation example's verse-aligned Bibles (English, Spanish) and their reader
    diatheke sword-text-web sword-text-sparv
    clang-format clang-tidy
    # clang's sanitizers, libFuzzer and OpenMP runtime, and llvm-symbolizer for their reports
    clang-14 libclang-rt-14-dev libomp-14-dev llvm-14
  )
  # Node.js with npm (ONNX Runtime as a peer in the tests, Ruff for `make lint`): Debian's packages
  # unless a node with npm is already installed (some distributions bundle npm and conflict).
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    packages+=(nodejs npm)
  fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

$for_tests || exit 0

# From npm, into the repository's node_modules (npm prunes what it was not asked for, so all three
# are installed together):
# - ONNX Runtime (CPU, inference only): the tests check that exported inference models give the
#   same outputs there. ONNXRUNTIME_NODE_INSTALL=skip keeps its installer from fetching GPU
#   binaries; the CPU build ships inside the package.
# - Ruff's WebAssembly build and a TOML reader, for scripts/ruff.mjs (Debian 12 has no ruff).
repo="$(cd "$(dirname "$0")/.." && pwd)"
npm_packages=(onnxruntime-node@1.30.0 @astral-sh/ruff-wasm-nodejs@0.17.3 smol-toml@1.4.2)
missing_npm=()
for spec in "${npm_packages[@]}"; do
  name="${spec%@*}" version="${spec##*@}"
  have="$(node -p "try{require('$repo/node_modules/$name/package.json').version}catch(e){''}" 2>/dev/null || true)"
  [ "$have" = "$version" ] || missing_npm+=("$spec")
done
if [ ${#missing_npm[@]} -gt 0 ]; then
  echo "setup: installing ${missing_npm[*]} from npm"
  (cd "$repo" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-save --no-audit --no-fund "${npm_packages[@]}")
fi
