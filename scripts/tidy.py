#!/usr/bin/env python3
"""clang-tidy over src/ with the checks in .clang-tidy, in parallel, remembering clean files.

    scripts/tidy.py BUILD_DIR [-j N] [FILE...]

A file is checked again only when what clang-tidy would see changes: the key is a hash of the
configuration, clang-tidy's version, the compile command and the preprocessed source (headers
included). Clean results are remembered under $XDG_CACHE_HOME/kiln-tidy (~/.cache/kiln-tidy), so
a fresh clone on a machine that has checked the same code before starts warm.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import pathlib
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The compile commands are GCC's: clang does not know some of its warning options (-Wno-restrict),
# and CI's -Werror would make that, and any clang-only compiler warning, a hard error. Findings are
# clang-tidy's checks; compiler warnings are GCC's job in the build.
CLANG_ARGS = ["--extra-arg=-Wno-unknown-warning-option", "--extra-arg=-Wno-error"]
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "kiln-tidy"


def preprocessed(entry):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out = []
    skip = False
    for a in args:  # drop the output and dependency-file options: -E writes to stdout
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-MD", "-MMD", "-c"):
            continue
        out.append(a)
    # ccache as a launcher would cache -E output; call the compiler itself.
    if pathlib.Path(out[0]).name == "ccache":
        out = out[1:]
    r = subprocess.run(out + ["-E", "-P"], cwd=entry["directory"], capture_output=True)
    if r.returncode != 0:
        return None
    return r.stdout


def key_of(entry, salt):
    h = hashlib.sha256(salt)
    # Paths relative to the checkout, so that a clone elsewhere hits the same entries.
    # -Werror (CI's build) is left out: clang-tidy runs without it (see CLANG_ARGS).
    command = entry.get("command", " ".join(entry.get("arguments", [])))
    command = " ".join(a for a in command.split() if a != "-Werror")
    h.update(command.replace(str(ROOT), "<root>").encode())
    pre = preprocessed(entry)
    if pre is None:
        return None
    h.update(pre.replace(str(ROOT).encode(), b"<root>"))
    return h.hexdigest()


def check(entry, build_dir, salt):
    key = key_of(entry, salt)
    if key and (CACHE / key).exists():
        return entry["file"], True, "", True
    r = subprocess.run(["clang-tidy", "-p", str(build_dir), "--quiet", *CLANG_ARGS, entry["file"]],
                       capture_output=True, text=True)
    ok = r.returncode == 0
    if ok and key:
        CACHE.mkdir(parents=True, exist_ok=True)
        (CACHE / key).touch()
    report = "\n".join(line for line in (r.stdout + r.stderr).splitlines()
                       if not line.endswith("warnings generated.") and line.strip())
    return entry["file"], ok, report, False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    build_dir = pathlib.Path(a.build_dir).resolve()
    entries = json.loads((build_dir / "compile_commands.json").read_text())
    src = str(ROOT / "src") + os.sep
    wanted = {str(pathlib.Path(f).resolve()) for f in a.files}
    entries = [e for e in entries if e["file"].startswith(src) and (not wanted or e["file"] in wanted)]
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True).stdout
    salt = ((ROOT / ".clang-tidy").read_text() + version).encode()
    failed = cached = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.j) as pool:
        for file, ok, report, hit in pool.map(lambda e: check(e, build_dir, salt), entries):
            cached += hit
            if not ok:
                failed += 1
                print(report or f"{file}: clang-tidy failed")
    print(f"clang-tidy: {len(entries)} files ({cached} unchanged since a clean check), {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
