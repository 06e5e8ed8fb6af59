"""Kiln's metrics (include/kiln/metrics.h) against scikit-learn on random data.

Kiln's side is the gtest MetricsDump.Request, run with KILN_METRICS_DUMP=<dir>: it reads
<dir>/request.json and the .npy inputs it names, and writes <dir>/response.json. Data: several
seeds, imbalanced classes, a class that never gets predicted, a class that is only predicted, tied
scores for top-k, float32 and float64 logits, int32 and int64 labels, single and multi-output
regression. Tolerance: 1e-12 relative (Kiln sums in double with compensation; numpy pairwise).
"""
import json
import math
import os
import subprocess

import kiln_cli
import numpy as np
import pytest
from sklearn import metrics as skm

SEEDS = [0, 1, 2, 3]
REL = 1e-12


def kiln_tests():
    exe = kiln_cli.build_dir() / "bin" / "kiln_tests"
    assert exe.exists(), f"{exe} does not exist: build the kiln_tests target or set KILN_BUILD_DIR"
    return exe


def classification_data(seed):
    """Imbalanced labels over 5 classes; predictions never say class 3 and sometimes say 5 (absent from labels)."""
    rng = np.random.default_rng(seed)
    n, c = 200 + 37 * seed, 6
    labels = rng.choice(5, size=n, p=[0.5, 0.2, 0.15, 0.1, 0.05])
    logits = rng.normal(size=(n, c))
    logits[np.arange(n), labels] += rng.uniform(0, 2.5, size=n)  # better than chance
    logits[:, 3] = -10.0                                         # class 3 is never predicted
    # quantised scores so that top-k sees many ties
    scores = np.round(rng.uniform(size=(n, c)) * 4) / 4
    return logits, labels, scores


def regression_data(seed, outputs):
    rng = np.random.default_rng(100 + seed)
    n = 150 + seed
    shape = (n,) if outputs == 0 else (n, outputs)
    targets = rng.normal(size=shape) * 3 + 1
    preds = targets + rng.normal(size=shape)
    if outputs >= 2:
        targets[:, 1] = 2.5  # a constant output: force_finite
    return preds, targets


def build_cases(d):
    """Writes the inputs under d and returns (request cases, sklearn's expected answers)."""
    cases, expected = [], []

    def save(name, array):
        np.save(d / name, array)
        return name

    for seed in SEEDS:
        logits, labels, scores = classification_data(seed)
        dtype = np.float32 if seed % 2 else np.float64
        lab_dtype = np.int32 if seed % 2 else np.int64
        lg = save(f"logits{seed}.npy", logits.astype(dtype))
        lb = save(f"labels{seed}.npy", labels.astype(lab_dtype))
        sc = save(f"scores{seed}.npy", scores.astype(dtype))
        y_pred = np.argmax(logits.astype(dtype), axis=1)
        ids = save(f"ids{seed}.npy", y_pred.astype(np.int64))
        assert 3 not in set(y_pred) and 3 in set(labels)
        cases.append({"metric": "accuracy", "predictions": lg, "labels": lb})
        expected.append({"value": skm.accuracy_score(labels, y_pred)})
        cases.append({"metric": "accuracy", "predictions": ids, "labels": lb})
        expected.append({"value": skm.accuracy_score(labels, y_pred)})
        for k in (1, 2, 3, 5):
            cases.append({"metric": "top_k", "predictions": sc, "labels": lb, "k": k})
            expected.append({"value": skm.top_k_accuracy_score(labels, scores.astype(dtype), k=k,
                                                               labels=np.arange(scores.shape[1]))})
        for average in ("micro", "macro", "weighted"):
            for p in (lg, ids):
                cases.append({"metric": "prf", "predictions": p, "labels": lb, "average": average})
                pr, rc, f1, _ = skm.precision_recall_fscore_support(labels, y_pred, average=average, zero_division=0)
                expected.append({"precision": pr, "recall": rc, "f1": f1})
        for outputs in (0, 1, 3):
            preds, targets = regression_data(seed, outputs)
            pp = save(f"rp{seed}_{outputs}.npy", preds)
            tt = save(f"rt{seed}_{outputs}.npy", targets)
            for metric, fn in (("mse", skm.mean_squared_error), ("mae", skm.mean_absolute_error),
                               ("r2", skm.r2_score)):
                cases.append({"metric": metric, "predictions": pp, "labels": tt})
                expected.append({"value": fn(targets, preds)})
    for loss in (0.0, 2.3, 12.5):
        cases.append({"metric": "perplexity", "loss": loss})
        expected.append({"value": math.exp(loss)})
    return cases, expected


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    d = tmp_path_factory.mktemp("metrics_dump")
    cases, expected = build_cases(d)
    (d / "request.json").write_text(json.dumps({"cases": cases}))
    proc = subprocess.run([str(kiln_tests()), "--gtest_filter=MetricsDump.Request"], capture_output=True, text=True,
                          env={**os.environ, "KILN_METRICS_DUMP": str(d)}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((d / "response.json").read_text())["results"]
    assert len(results) == len(cases)
    return cases, expected, results


def test_matches_sklearn(dump):
    cases, expected, results = dump
    failures = []
    for case, want, got in zip(cases, expected, results):
        assert "error" not in got, (case, got)
        for key, value in want.items():
            if not math.isclose(got[key], float(value), rel_tol=REL, abs_tol=0.0 if value else 1e-300):
                failures.append((case, key, value, got[key]))
    assert not failures, failures[:10]


def test_cases_are_not_trivial(dump):
    """The random data must exercise what it claims: imperfect scores and zero-division classes."""
    cases, expected, _ = dump
    values = [w["value"] for c, w in zip(cases, expected) if c["metric"] in ("accuracy", "top_k")]
    assert any(0.3 < v < 0.95 for v in values)
    macro = [w["precision"] for c, w in zip(cases, expected) if c.get("average") == "macro"]
    micro = [w["precision"] for c, w in zip(cases, expected) if c.get("average") == "micro"]
    assert all(a != b for a, b in zip(macro, micro))


def test_errors_reach_the_dump(tmp_path):
    np.save(tmp_path / "p.npy", np.zeros((4, 3), np.float32))
    np.save(tmp_path / "l.npy", np.zeros(5, np.int64))
    (tmp_path / "request.json").write_text(json.dumps({"cases": [
        {"metric": "accuracy", "predictions": "p.npy", "labels": "l.npy"},
        {"metric": "prf", "predictions": "p.npy", "labels": "p.npy", "average": "binary"}]}))
    proc = subprocess.run([str(kiln_tests()), "--gtest_filter=MetricsDump.Request"], capture_output=True, text=True,
                          env={**os.environ, "KILN_METRICS_DUMP": str(tmp_path)}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "response.json").read_text())["results"]
    assert "float[4, 3]" in results[0]["error"] and "int64[5]" in results[0]["error"]
    assert "'binary'" in results[1]["error"]
