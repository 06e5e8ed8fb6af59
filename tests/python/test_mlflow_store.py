"""Kiln's MLflow file store (src/trainer/loggers/mlflow_store.cpp, MLflowCallback) read the way MLflow's
FileStore reads it (mlflow/store/tracking/file_store.py): meta.yaml files with PyYAML (MLflow's
read_yaml is yaml.safe_load), params and tags as whole files, metric lines split on spaces into
int(timestamp), float(value), int(step). MLflow itself is not installed; the expected layout, keys
and types are MLflow's.

Two sources: the gtest MLflowDump.Write (tests/trainer/mlflow_callback_test.cpp) with
KILN_MLFLOW_DUMP set, and `kiln train --report_to mlflow jsonl csv`, whose store, logs.jsonl and
logs.csv are checked against the trainer_state.json log_history of the same run (values exactly).
"""
import ast
import csv
import getpass
import json
import math
import os
import re
import subprocess
import uuid

import kiln_cli
import numpy as np
import yaml

EXPERIMENT_KEYS = {"artifact_location", "creation_time", "experiment_id", "last_update_time", "lifecycle_stage", "name"}
RUN_KEYS = {"artifact_uri", "end_time", "entry_point_name", "experiment_id", "lifecycle_stage", "run_id", "run_name",
            "run_uuid", "source_name", "source_type", "source_version", "start_time", "status", "tags", "user_id"}
RUNNING, FINISHED = 1, 3
SOURCE_TYPE_LOCAL = 4


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def experiments(root):
    """{name: id} of the active experiments (FileStore._get_active_experiments + their meta.yaml)."""
    out = {}
    for d in root.iterdir():
        if d.is_dir() and d.name not in (".trash", "models"):
            out[load_yaml(d / "meta.yaml")["name"]] = d.name
    return out


def check_experiment(root, exp_id, name):
    meta = load_yaml(root / exp_id / "meta.yaml")
    assert set(meta) == EXPERIMENT_KEYS, meta
    assert meta["experiment_id"] == exp_id and isinstance(meta["experiment_id"], str)
    assert meta["name"] == name
    assert meta["lifecycle_stage"] == "active"
    assert meta["artifact_location"] == (root / exp_id).as_uri()
    assert isinstance(meta["creation_time"], int) and meta["creation_time"] == meta["last_update_time"]
    assert meta["creation_time"] > 1.6e12  # milliseconds


def check_run(root, exp_id, run_id, run_name, status):
    meta = load_yaml(root / exp_id / run_id / "meta.yaml")
    assert set(meta) == RUN_KEYS, meta
    assert re.fullmatch(r"[0-9a-f]{32}", run_id) and uuid.UUID(run_id).version == 4
    assert meta["run_id"] == meta["run_uuid"] == run_id
    assert meta["experiment_id"] == exp_id
    assert meta["run_name"] == run_name
    assert meta["artifact_uri"] == (root / exp_id).as_uri() + f"/{run_id}/artifacts"
    assert meta["lifecycle_stage"] == "active"
    assert meta["status"] == status
    assert meta["source_type"] == SOURCE_TYPE_LOCAL
    assert meta["source_name"] == meta["source_version"] == meta["entry_point_name"] == ""
    assert meta["tags"] == []
    assert meta["user_id"] == getpass.getuser()
    assert isinstance(meta["start_time"], int) and meta["start_time"] > 1.6e12
    if status == FINISHED:
        assert isinstance(meta["end_time"], int) and meta["end_time"] >= meta["start_time"]
    else:
        assert meta["end_time"] is None
    for sub in ("metrics", "params", "artifacts", "tags"):
        assert (root / exp_id / run_id / sub).is_dir(), sub
    return meta


def files_under(folder):
    """{relative posix path: text} of every file (FileStore._get_resource_files walks sub-folders)."""
    out = {}
    for dirpath, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, folder).replace(os.sep, "/")] = open(p).read()
    return out


def metric_histories(run_dir):
    """{key: [(timestamp, value, step)]} as FileStore._get_metric_from_line parses each line."""
    out = {}
    for key, text in files_under(run_dir / "metrics").items():
        history = []
        for line in text.splitlines():
            parts = line.strip().split(" ")
            assert len(parts) == 3, line
            history.append((int(parts[0]), float(parts[1]), int(parts[2])))
        out[key] = history
    return out


def hf_metric_name(key):
    """HF's MLflowCallback sanitisation of metric names."""
    return re.sub(r"[^0-9A-Za-z_\-\.\ :/]", "_", key)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


# The logs of MLflowDump.Write: (step, {key: value}).
DUMP_LOGS = [
    (5, {"loss": 2.5, "grad_norm": 0.125, "learning_rate": 0.001, "epoch": 0.5}),
    (10, {"loss": 1.25, "grad_norm": float("nan"), "learning_rate": 5e-05, "epoch": 1.0}),
    (10, {"eval_loss": 1.5, "eval_top(1)": 0.75, "eval/acc": 1e-07}),
]


def test_gtest_store_reads_as_mlflow(tmp_path):
    exe = kiln_cli.build_dir() / "bin" / "kiln_tests"
    assert exe.exists(), f"{exe} does not exist: build the kiln_tests target or set KILN_BUILD_DIR"
    root = tmp_path / "mlruns"
    proc = subprocess.run([str(exe), "--gtest_filter=MLflowDump.*"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KILN_MLFLOW_DUMP": str(root)})
    assert proc.returncode == 0, proc.stdout + proc.stderr

    assert (root / ".trash").is_dir()
    exps = experiments(root)
    assert set(exps) == {"Default", "kiln-dump"}
    assert exps["Default"] == "0"
    assert re.fullmatch(r"[1-9][0-9]{17}", exps["kiln-dump"])
    check_experiment(root, "0", "Default")
    check_experiment(root, exps["kiln-dump"], "kiln-dump")

    exp_id = exps["kiln-dump"]
    runs = [d.name for d in (root / exp_id).iterdir() if d.is_dir()]
    assert len(runs) == 1
    run_dir = root / exp_id / runs[0]
    meta = check_run(root, exp_id, runs[0], "dump-run", FINISHED)

    tags = files_under(run_dir / "tags")
    assert tags.pop("mlflow.source.name").endswith("kiln_tests")
    assert tags == {"mlflow.runName": "dump-run", "mlflow.user": getpass.getuser(), "mlflow.source.type": "LOCAL",
                    "team": "kiln", "attempt": "2"}

    params = files_under(run_dir / "params")
    expected = {"learning_rate": "0.001", "report_to": "['mlflow', 'jsonl']", "run_name": "dump-run",
                "num_train_epochs": "3.0", "logging_steps": "500", "label_names": "None", "do_train": "False",
                "lr_scheduler_kwargs": "{}", "optim": "adamw_torch", "seed": "42", "eval_steps": "None",
                "adam_epsilon": "1e-08"}
    assert {k: params[k] for k in expected} == expected

    histories = metric_histories(run_dir)
    want = {}
    for step, logs in DUMP_LOGS:
        for k, v in logs.items():
            want.setdefault(hf_metric_name(k), []).append((v, step))
    assert set(histories) == set(want) == {"loss", "grad_norm", "learning_rate", "epoch", "eval_loss", "eval_top_1_",
                                           "eval/acc"}
    for key, history in histories.items():
        assert len(history) == len(want[key]), key
        for (_, value, step), (want_value, want_step) in zip(history, want[key]):
            assert same(value, want_value) and step == want_step, (key, value, step)
        for ts, _, _ in history:
            assert meta["start_time"] <= ts <= meta["end_time"]
    # One timestamp per log.
    assert histories["loss"][1][0] == histories["grad_norm"][1][0]


def train(kiln, tmp_path, env, *extra):
    proc = subprocess.run([str(kiln), "train", "--model", "mlp", "--train-data", str(tmp_path / "data.npz"),
                           "--eval-data", str(tmp_path / "data.npz"), "--output_dir", str(tmp_path / "out"),
                           "--max_steps", "30", "--logging_steps", "5", "--save_steps", "10",
                           "--per_device_train_batch_size", "16", "--disable_tqdm", "true", "--run_name", "e2e",
                           "--report_to", "mlflow", "jsonl", "csv", *map(str, extra)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_kiln_train_reports_to_mlflow_jsonl_and_csv(kiln, tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", input=rng.standard_normal((64, 1, 28, 28)).astype(np.float32),
             labels=rng.integers(0, 10, size=64).astype(np.int64))
    store = tmp_path / "store dir"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HF_MLFLOW_LOG_ARTIFACTS"}
    env["MLFLOW_TRACKING_URI"] = store.as_uri()  # a file: URI with a %20
    out = tmp_path / "out"
    proc = train(kiln, tmp_path, env)
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "loss" in e] == [5, 10, 15, 20, 25, 30]
    assert "eval_loss" in history[-1]  # the final evaluate() logs too

    # logs.jsonl: the log_history objects (trainer_state.json sorts their keys, as HF's does), keys in
    # the order of the logs, which PrinterCallback prints (without total_flos).
    lines = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    assert lines == history
    printed = [ast.literal_eval(line) for line in proc.stdout.splitlines() if line.startswith("{'")]
    assert [[k for k in e if k not in ("step", "total_flos")] for e in lines] == [list(p) for p in printed]
    assert all(list(e)[-1] == "step" for e in lines)

    # logs.csv: step first, then the keys as first seen; every number round-trips exactly.
    with open(out / "logs.csv", newline="") as f:
        rows = list(csv.reader(f))
    keys = []
    for e in lines:  # the logs' order
        keys += [k for k in e if k != "step" and k not in keys]
    assert rows[0] == ["step"] + keys
    assert len(rows) == len(history) + 1
    for row, e in zip(rows[1:], history):
        assert int(row[0]) == e["step"]
        for k, cell in zip(keys, row[1:]):
            assert (cell == "") == (k not in e), (k, cell)
            if cell:
                assert float(cell) == e[k], (k, cell, e[k])

    # The MLflow store: Default experiment, one finished run named by run_name.
    assert experiments(store) == {"Default": "0"}
    check_experiment(store, "0", "Default")
    runs = [d.name for d in (store / "0").iterdir() if d.is_dir()]
    assert len(runs) == 1
    run_dir = store / "0" / runs[0]
    check_run(store, "0", runs[0], "e2e", FINISHED)
    # Params: str() of every training_args.json value, as HF logs args.to_dict().
    args = json.loads((out / "checkpoint-30" / "training_args.json").read_text())
    assert files_under(run_dir / "params") == {k: str(v) for k, v in args.items()}
    assert files_under(run_dir / "tags")["mlflow.runName"] == "e2e"
    # Metrics: every logged value at its step, exactly.
    want = {}
    for e in history:
        for k, v in e.items():
            if k != "step":
                want.setdefault(hf_metric_name(k), []).append((v, e["step"]))
    got = {k: [(v, s) for _, v, s in h] for k, h in metric_histories(run_dir).items()}
    assert got == want

    # Resume from checkpoint-20 into the same MLflow run: logs.jsonl and logs.csv lose the steps after
    # 20 and get them again, equal to the uninterrupted run's (timings aside); MLflow keeps both.
    csv_before = rows
    env["MLFLOW_RUN_ID"] = runs[0]
    proc = train(kiln, tmp_path, env, "--resume_from_checkpoint", out / "checkpoint-20")
    assert "keeps param 'resume_from_checkpoint'" in proc.stderr
    timing = re.compile(r"runtime|per_second|train_loss|total_flos")
    resumed = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    assert len(resumed) == len(lines)
    for a, b in zip(resumed, lines):
        assert list(a) == list(b)
        for k in a:
            if not timing.search(k):
                assert a[k] == b[k], (k, a[k], b[k])
    with open(out / "logs.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == csv_before[0] and len(rows) == len(csv_before)
    assert rows[:7] == csv_before[:7]  # header and the six training logs, byte for byte
    check_run(store, "0", runs[0], "e2e", FINISHED)
    assert len([d for d in (store / "0").iterdir() if d.is_dir()]) == 1
    loss = [(v, s) for _, v, s in metric_histories(run_dir)["loss"]]
    assert loss == want["loss"] + want["loss"][4:]  # steps 25 and 30 again, same values
