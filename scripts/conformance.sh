#!/usr/bin/env bash
# Runs ONNX's backend node conformance cases through Kiln.
# Usage: scripts/conformance.sh BUILD_DIR [--strict] [more kiln-conformance options]
# Generates the cases into BUILD_DIR/onnx-node-tests on first use (scripts/gen-onnx-node-tests) and
# writes one line per case ("passed|failed|skipped name  reason") to BUILD_DIR/conformance.txt
# (or to $KILN_CONFORMANCE_LIST).
set -euo pipefail
build=${1:?usage: conformance.sh BUILD_DIR [--strict]}
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
runner="$build/bin/kiln-conformance"
if [[ ! -x "$runner" ]]; then
  echo "conformance.sh: $runner is missing; build the kiln_conformance target first" >&2
  exit 1
fi
cases="$build/onnx-node-tests"
if [[ ! -d "$cases/node" ]]; then
  # Generate into a temp folder and move it into place, so an interrupted run is not mistaken
  # for a complete set next time.
  rm -rf "$cases.tmp"
  "$here/gen-onnx-node-tests" "$cases.tmp" >/dev/null
  mv "$cases.tmp" "$cases"
fi
exec "$runner" "$cases/node" --list "${KILN_CONFORMANCE_LIST:-$build/conformance.txt}" "$@"
