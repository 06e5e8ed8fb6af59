#!/usr/bin/env bash
# Installs everything Kiln needs to build, test and run its demo on Debian 12 (run as root).
# Idempotent: a machine that already has every package skips apt entirely.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libprotobuf-dev protobuf-compiler libonnx-dev
  libdnnl-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev
  python3-dev pybind11-dev python3-numpy python3-pytest
  python3-onnx python3-torch python3-torchvision python3-sklearn
  python3-protobuf python3-crc32c
  dataset-fashion-mnist
)
# Node.js with npm (runs ONNX Runtime as a peer in the tests): Debian's packages unless a node
# with npm is already installed (some Node.js distributions bundle npm and conflict with them).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
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

# ONNX Runtime (CPU, inference only) from npm: the tests check that exported inference models give
# the same outputs there. ONNXRUNTIME_NODE_INSTALL=skip keeps its installer from fetching GPU
# binaries; the CPU build ships inside the package. Installed into the repository's node_modules.
ort_version=1.30.0
repo="$(cd "$(dirname "$0")/.." && pwd)"
installed="$(node -p "try{require('$repo/node_modules/onnxruntime-node/package.json').version}catch(e){''}" 2>/dev/null || true)"
if [ "$installed" != "$ort_version" ]; then
  echo "setup: installing onnxruntime-node@$ort_version"
  (cd "$repo" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-save --no-audit --no-fund "onnxruntime-node@$ort_version")
fi
