#!/usr/bin/env python3
"""Source rules that the compiler and the linters do not check (run by `make lint`):

- the line budget: no source file passes 600 lines (docs/design.md: small files, one responsibility);
- includes name headers from an include root ("kiln/x.h", "layer/x.h") or the including file's own
  folder, never with "../", which would step around the layering the build enforces.
"""
import pathlib
import re
import subprocess
import sys

BUDGET = 600
ROOT = pathlib.Path(__file__).resolve().parent.parent
SUFFIXES = {".cpp", ".h", ".py", ".mjs", ".sh", ".cmake"}


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [ROOT / p for p in out.splitlines() if pathlib.Path(p).suffix in SUFFIXES and (ROOT / p).is_file()]


def main():
    problems = []
    files = tracked_files()
    for path in files:
        rel = path.relative_to(ROOT)
        text = path.read_text(errors="replace")
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > BUDGET:
            problems.append(f"{rel}: {lines} lines, over the budget of {BUDGET}: split it by responsibility")
        if path.suffix in {".cpp", ".h"}:
            for n, line in enumerate(text.splitlines(), 1):
                if re.match(r'\s*#\s*include\s+"\.\./', line):
                    problems.append(f"{rel}:{n}: include with '../' steps around the layering: {line.strip()}")
    for p in problems:
        print(p)
    print(f"check_sources: {len(files)} files, {len(problems)} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
