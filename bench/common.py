"""What the modules of bench/bench.py share: paths, the machine and versions a table names in its
header, medians, the PyTorch worker's two OpenMP wait policies, Kiln's error line and the peak
resident set of a process."""
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))  # torch_models, zoo_models, training_parity, ...

THREADS = 2
# The PyTorch worker runs once with the environment's OpenMP wait policy (OMP_WAIT_POLICY removed:
# libgomp's default spins a while before sleeping) and once with threads that sleep at once.
WAIT_POLICIES = {"default": None, "PASSIVE": "PASSIVE"}


class KilnError(RuntimeError):
    """Kiln failed; the message is the first line of its error output."""


def first_error_line(stderr, what):
    """The first line of `stderr` that names an error (else its first line), or `what` exited."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [f"{what} failed"])[0]


def run_kiln_tool(cmd, what):
    """Runs a Kiln executable; its stdout, or KilnError with the first line of its error."""
    try:
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    except OSError as e:  # not built, or being rebuilt
        raise KilnError(f"cannot run {cmd[0]}: {e.strerror}") from e
    if proc.returncode != 0:
        raise KilnError(first_error_line(proc.stderr, f"{what} (exit status {proc.returncode})"))
    return proc.stdout


def last_json_line(stdout):
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


def policy_env(policy):
    """The environment for a PyTorch worker under the wait policy named in WAIT_POLICIES."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if WAIT_POLICIES[policy]:
        env["OMP_WAIT_POLICY"] = WAIT_POLICIES[policy]
    return env


def median(values):
    return statistics.median(values) if values else float("nan")


def peak_rss_kb():
    """VmHWM, this process's own peak resident set: ru_maxrss survives exec on Linux, so a worker
    started by a large parent would report the parent's peak (as kiln-train-steps does too)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def save_feeds(feeds, folder, name):
    """Writes each input as `folder/NAME_INPUT.npy` for `kiln run --input`; {input name: path}."""
    feed_paths = {}
    for input_name, value in feeds.items():
        feed_paths[input_name] = Path(folder) / f"{name}_{input_name}.npy"
        np.save(feed_paths[input_name], value)
    return feed_paths


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown CPU"
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")]
    return names[0] if names else "unknown CPU"


def ort_version():
    package = REPO / "node_modules" / "onnxruntime-node" / "package.json"
    try:
        return json.loads(package.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return "not installed"


def header(title, rounds, what="median of"):
    """A table's title line and the line naming the date, the machine, the versions and threads."""
    import torch

    date = datetime.date.today().isoformat()
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    held = f" held to {cap} (Kiln and PyTorch; ONNX Runtime is not)" if cap else ""
    return (f"\n== {title} ==\n{date}, {cpu_model()}{held}, torch {torch.__version__}, "
            f"onnxruntime-node {ort_version()}, {THREADS} threads, {what} {rounds} round(s)")


# What --max-isa avx2 sets for every process of the run: oneDNN's cap (Kiln's own vector code
# follows it: src/kernels/cpu/simd_dispatch.h; PyTorch's oneDNN reads it too), PyTorch's ATen kernels
# and OpenBLAS's kernel choice.
ISA_CAPS = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
             "OPENBLAS_CORETYPE": "Haswell"},
}
