"""How bench/bench.py measures each side, outside its tables: Kiln (`kiln artifacts` +
`kiln-train-steps` for a training step, `kiln run --repeat` for a forward pass), PyTorch (a
bench/torch_worker.py process per measurement, under each OpenMP wait policy) and ONNX Runtime
(bench/ort_time.js). A `Bench` keeps what it exported and what it measured, so that a table reuses
another's measurement of the same case instead of running it again."""
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import flops
import numpy as np
import onnx
from cases import ROWS, SCALING, export_inference, quick, training_case
from common import (
    REPO,
    THREADS,
    WAIT_POLICIES,
    KilnError,
    last_json_line,
    median,
    policy_env,
    run_kiln_tool,
    save_feeds,
)
from onnx import TensorProto, helper
from training_parity import export_forward, write_manifest

WORKER = Path(__file__).resolve().parent / "torch_worker.py"
ORT_TIME = Path(__file__).resolve().parent / "ort_time.js"


class PeerError(RuntimeError):
    """PyTorch or ONNX Runtime failed; the message says which and why."""


def torch_measure(what, case_args, policy):
    """One bench/torch_worker.py process under a wait policy of WAIT_POLICIES: {"mean_ms", "peak_rss_kb"}."""
    proc = subprocess.run([sys.executable, str(WORKER), what, *map(str, case_args)], capture_output=True,
                          text=True, env=policy_env(policy))
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise PeerError(f"PyTorch failed: {lines[-1]}")
    return last_json_line(proc.stdout)


def case_args(case):
    return [case.model, "--batch", case.batch, "--seq", case.seq, "--image", case.image, "--warmup", case.warmup,
            "--steps", case.steps, "--runs", case.runs, "--bf16", int(case.bf16)]


def kiln_run_ms(kiln, model_path, feed_paths, runs, threads=THREADS):
    """`kiln run MODEL --threads T --repeat N`: the mean of N runs after one warm-up run."""
    inputs = [arg for name, path in feed_paths.items() for arg in ("--input", f"{name}={path}")]
    out = run_kiln_tool([kiln, "run", model_path, *inputs, "--threads", threads, "--repeat", runs], "kiln run")
    line = out.strip().splitlines()[-1]
    fields = dict(f.split("=", 1) for f in line.split()[1:])
    if not line.startswith("time_ms") or int(fields["runs"]) != runs:
        raise KilnError(f"unexpected timing line from kiln run: {line!r}")
    return float(fields["mean"])


def ort_ms(model_path, feed_paths, runs):
    """bench/ort_time.js: onnxruntime-node's mean of N runs after one warm-up run."""
    specs = [f"{name}={path}" for name, path in feed_paths.items()]
    proc = subprocess.run(["node", str(ORT_TIME), str(model_path), str(runs), *specs], capture_output=True,
                          text=True, cwd=REPO)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise PeerError(f"ORT failed: {lines[-1]}")
    return last_json_line(proc.stdout)["mean_ms"]


class Bench:
    """The executables, a scratch folder, and what has been exported and measured so far."""

    def __init__(self, build_dir, folder, rounds, quick=False):
        self.kiln = build_dir / "bin" / "kiln"
        self.train_steps = build_dir / "bin" / "kiln-train-steps"
        self.folder, self.rounds, self.quick = Path(folder), rounds, quick
        self._forward_models, self._artifacts, self._inference = {}, {}, {}
        self.kiln_train = {}  # (case, threads) -> [kiln-train-steps summaries] or KilnError
        self.torch_train = {}  # case -> {policy: [worker results]} or PeerError

    def case(self, name):
        """The row `name` of cases.ROWS (with --quick's fewer steps)."""
        return quick(ROWS[name]) if self.quick else ROWS[name]

    def sizes(self, name):
        """The scaling table's sizes of the row `name` (cases.SCALING)."""
        return [quick(c) if self.quick else c for c in SCALING[name]]

    # ------------------------------------------------------------------------- training step

    def forward_model(self, case):
        """The case's forward graph as `kiln artifacts` takes it (concrete shapes), and its batch."""
        if case.recompute or case.bf16:  # the same forward graph
            return self.forward_model(replace(case, recompute=False, bf16=False))
        if case not in self._forward_models:
            module, feeds, loss, train = training_case(case)
            inputs = {k: v for k, v in feeds.items() if k != "labels"}
            path = export_forward(module, inputs, self.folder / f"{case.key}_train.onnx",
                                  output_names=["loss" if loss == "none" else "logits"], train=train)
            self._forward_models[case] = (path, feeds, loss)
        return self._forward_models[case]

    def artifacts(self, case):
        """(artifact folder, batch manifest); KilnError when `kiln artifacts` fails."""
        if case not in self._artifacts:
            path, feeds, loss = self.forward_model(case)
            out = self.folder / f"{case.key}_artifacts"
            try:
                run_kiln_tool([self.kiln, "artifacts", path, "--loss", loss, "--optimizer", "AdamW", "--lr", "1e-3",
                               "--out", out, *(["--recompute"] if case.recompute else []),
                               *(["--mixed-precision", "bf16"] if case.bf16 else [])], "kiln artifacts")
                self._artifacts[case] = (out, write_manifest(self.folder / f"{case.key}_data", [feeds]))
            except KilnError as e:
                self._artifacts[case] = e
        if isinstance(self._artifacts[case], KilnError):
            raise self._artifacts[case]
        return self._artifacts[case]

    def kiln_train_round(self, case, threads=THREADS):
        """One kiln-train-steps process: {"mean_ms", "peak_rss_kb", ...}; KilnError when it fails."""
        artifacts, manifest = self.artifacts(case)
        out = run_kiln_tool([self.train_steps, artifacts, "--batches", manifest, "--threads", threads,
                             "--warmup", case.warmup, "--steps", case.warmup + case.steps], "kiln-train-steps")
        return last_json_line(out)

    def train_rounds(self, case, threads=THREADS, with_torch=False):
        """Rounds of Kiln's training step (and PyTorch's under each wait policy, alternating with
        Kiln's), unless already measured. Fills kiln_train (and torch_train)."""
        key = (case, threads)
        need_kiln, need_torch = key not in self.kiln_train, with_torch and case not in self.torch_train
        kiln, peer = [], {policy: [] for policy in WAIT_POLICIES}
        for _ in range(self.rounds if need_kiln or need_torch else 0):
            if need_kiln and not isinstance(kiln, KilnError):
                try:
                    kiln.append(self.kiln_train_round(case, threads))
                except KilnError as e:
                    kiln = e
            if need_torch and not isinstance(peer, PeerError):
                try:
                    for policy in WAIT_POLICIES:
                        peer[policy].append(torch_measure("train", case_args(case), policy))
                except PeerError as e:
                    peer = e
        if need_kiln:
            self.kiln_train[key] = kiln
        if need_torch:
            self.torch_train[case] = peer

    def kiln_train_ms(self, case, threads=THREADS):
        """The median Kiln step time; KilnError when Kiln failed."""
        self.train_rounds(case, threads)
        result = self.kiln_train[(case, threads)]
        if isinstance(result, KilnError):
            raise result
        return median([r["mean_ms"] for r in result])

    def kiln_train_memory(self, case, threads=THREADS):
        """(median planned activation arena in MiB, largest peak RSS in MiB) of Kiln's training step."""
        self.train_rounds(case, threads)
        result = self.kiln_train[(case, threads)]
        if isinstance(result, KilnError):
            raise result
        return (median([r["training_peak_bytes"] for r in result]) / 2**20,
                max(r["peak_rss_kb"] for r in result) / 1024)

    def torch_train_ms(self, case):
        """{policy: median step ms}, the best policy's peak RSS in MB; PeerError when PyTorch failed."""
        self.train_rounds(case, with_torch=True)
        result = self.torch_train[case]
        if isinstance(result, PeerError):
            raise result
        ms = {policy: median([r["mean_ms"] for r in runs]) for policy, runs in result.items()}
        best = min(ms, key=ms.get)
        return ms, max(r["peak_rss_kb"] for r in result[best]) / 1024

    def forward_flops(self, case, ops=flops.MATMUL_OPS):
        """Forward FLOPs of the case's exported training forward graph (bench/flops.py)."""
        return flops.count(self.forward_model(case)[0], ops)

    # --------------------------------------------------------------------------- inference

    def inference(self, case):
        """(the eval-mode ONNX model with dynamic axes, {input: .npy path})."""
        if case not in self._inference:
            path = self.folder / f"{case.key}_infer.onnx"
            feeds = export_inference(case, path)
            self._inference[case] = (path, save_feeds(feeds, self.folder, f"{case.key}_infer"))
        return self._inference[case]

    def matmul_model(self, n):
        """A one-node MatMul model of two float32 N x N inputs, and its inputs."""
        path = self.folder / f"matmul{n}.onnx"
        square = [n, n]
        graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "matmul",
                                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, square) for x in "ab"],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, square)])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        rng = np.random.default_rng(0)
        feeds = {x: rng.standard_normal((n, n)).astype(np.float32) for x in "ab"}
        return path, save_feeds(feeds, self.folder, f"matmul{n}")
