"""Helpers to run the `kiln` command from tests and benchmarks.

The build folder comes from the environment variable KILN_BUILD_DIR (default: <repo>/build).
"""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def build_dir():
    return Path(os.environ.get("KILN_BUILD_DIR", REPO / "build")).resolve()


def kiln_path():
    return build_dir() / "bin" / "kiln"


def run_kiln(*args, timeout=300, env=None):
    """Runs `kiln ARGS...` and returns the CompletedProcess (text mode; never raises on failure).
    `env`: variables to set on top of this process's environment."""
    exe = kiln_path()
    if not exe.exists():
        raise FileNotFoundError(f"{exe} does not exist: build the kiln_cli target or set KILN_BUILD_DIR")
    full_env = None if env is None else {**os.environ, **env}
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=full_env)


def run_nn_export(*args, timeout=300):
    """Runs `kiln-nn-export ARGS...` (tools/nn_export: the Kiln side of the torch.nn and zoo parity
    tests), asserting success; returns the CompletedProcess."""
    exe = build_dir() / "bin" / "kiln-nn-export"
    assert exe.exists(), f"{exe} does not exist: build the kiln_nn_export target or set KILN_BUILD_DIR"
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"kiln-nn-export {' '.join(map(str, args))}: exit {proc.returncode}\n{proc.stderr}"
    return proc


def run_onnx(path, feeds, out_dir, *extra):
    """`kiln run PATH` on numpy feeds (saved as OUT_DIR/<name>.npy; outputs in OUT_DIR/out), asserting
    success. Returns a function that loads an output by name, and the CompletedProcess."""
    import numpy as np

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    args = []
    for name, value in feeds.items():
        np.save(out_dir / f"{name}.npy", value)
        args += ["--input", f"{name}={out_dir / (name + '.npy')}"]
    proc = run_kiln("run", path, *args, "--output-dir", out_dir / "out", *extra)
    assert proc.returncode == 0, f"kiln run {path}: {proc.stderr}"
    return (lambda name: np.load(out_dir / "out" / f"{name}.npy")), proc


def assert_cli_error(proc, *needles):
    """A failed `kiln` run: exit status 1 and one line `kiln: error: ...` containing every needle."""
    assert proc.returncode == 1, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kiln: error: "), proc.stderr
    for needle in needles:
        assert str(needle) in lines[0], f"{needle!r} not in {lines[0]!r}"
