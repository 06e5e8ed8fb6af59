#!/usr/bin/env bash
# `make lint` (and, with --fix, `make format`): the source rules, clang-format, Ruff, clang-tidy.
#   scripts/lint.sh [--fix] BUILD_DIR
# clang-tidy reads BUILD_DIR/compile_commands.json (written by CMake's configure step).
set -uo pipefail
cd "$(dirname "$0")/.."
fix=false
[ "${1:-}" = "--fix" ] && { fix=true; shift; }
build="${1:-build}"
status=0

mapfile -t cxx < <(git ls-files -co --exclude-standard -- '*.cpp' '*.h' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
if $fix; then
  clang-format -i "${cxx[@]}"
  node scripts/ruff.mjs --fix || status=1
else
  echo "== source rules"; /usr/bin/python3 scripts/check_sources.py || status=1
  echo "== clang-format"
  if clang-format --dry-run --Werror "${cxx[@]}" 2>/tmp/kiln-format.$$; then
    echo "clang-format: ${#cxx[@]} files formatted"
  else
    grep -E '^[^ ].*: error:' /tmp/kiln-format.$$ | head -50
    echo "clang-format: files need formatting (make format applies it)"
    status=1
  fi
  rm -f /tmp/kiln-format.$$
  echo "== ruff"; node scripts/ruff.mjs || status=1
  echo "== clang-tidy"; /usr/bin/python3 scripts/tidy.py "$build" || status=1
fi
exit $status
