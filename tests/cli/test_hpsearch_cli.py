"""`kiln hpsearch`: Kiln's random / grid search over `kiln train` runs (include/kiln/hp_search.h).
A seeded random search trains every trial in output_dir/run-<n>, reports the best by HF's default
objective (here eval_accuracy, maximized) and writes hp_search.json; Python's backend "random"
draws the same values for the same seed and order; a grid search runs the grid; bad spaces are
errors naming the file and parameter."""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from kiln_cli import assert_cli_error, run_kiln  # noqa: E402
from kiln_package import import_kiln  # noqa: E402


def write_data(folder):
    rng = np.random.default_rng(0)
    means = rng.normal(size=(4, 1, 28, 28))
    for name, n in (("train", 256), ("eval", 128)):
        y = rng.integers(0, 4, n)
        x = (rng.normal(size=(n, 1, 28, 28)) + 0.3 * means[y]).astype(np.float32)
        np.savez(folder / f"{name}.npz", input=x, labels=y)


def search(tmp_path, space, *flags):
    (tmp_path / "space.json").write_text(json.dumps(space))
    return run_kiln("hpsearch", "--model", "mlp", "--model-config", '{"num_labels": 4}', "--train-data",
                    tmp_path / "train.npz", "--eval-data", tmp_path / "eval.npz", "--hp-space", tmp_path / "space.json",
                    "--output_dir", tmp_path / "out", "--save_strategy", "no", "--disable_tqdm", "true",
                    "--report_to", "none", *flags, timeout=600)


def test_random_search_trains_each_trial_and_reports_the_best(tmp_path):
    write_data(tmp_path)
    space = {"learning_rate": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True},
             "per_device_train_batch_size": [16, 32]}
    proc = search(tmp_path, space, "--n-trials", "3", "--search-seed", "5", "--direction", "maximize")
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "hp_search.json").read_text())
    trials = result["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2]
    for t in trials:
        assert t["objective"] == t["metrics"]["eval_accuracy"]
        assert (tmp_path / "out" / f"run-{t['number']}" / "artifacts").is_dir()
    best = max(trials, key=lambda t: t["objective"])
    assert result["best_run"]["run_id"] == str(best["number"])
    assert result["best_run"]["hyperparameters"] == best["params"]
    assert f"best run {best['number']}" in proc.stdout
    # Python's random backend draws the same values for the same seed and order of suggestions.
    import_kiln()
    from kiln._core import core
    from kiln.hp_search import RandomTrial
    sampler = core.HpSampler(5)
    for t in trials:
        trial = RandomTrial(t["number"], sampler)
        trial.suggest_float("learning_rate", 1e-5, 1e-2, log=True)
        trial.suggest_categorical("per_device_train_batch_size", [16, 32])
        assert trial.params == t["params"], (trial.params, t["params"])


def test_grid_search_and_errors(tmp_path):
    write_data(tmp_path)
    proc = search(tmp_path, {"learning_rate": [1e-6, 3e-3]}, "--backend", "grid", "--direction", "maximize")
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "hp_search.json").read_text())
    assert [t["params"] for t in result["trials"]] == [{"learning_rate": 1e-6}, {"learning_rate": 3e-3}]
    assert result["best_run"]["hyperparameters"] == {"learning_rate": 3e-3}  # 1e-6 does not learn in 16 steps
    assert_cli_error(search(tmp_path, {"learning_rate": {"type": "float", "low": 1, "high": 0}}),
                     "parameter 'learning_rate': low 1 is above high 0")
    assert_cli_error(search(tmp_path, {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2}},
                            "--backend", "grid"), "categorical choices only")
    assert_cli_error(search(tmp_path, {"lr": [1, 2]}), "Trying to set lr in the hyperparameter search")
