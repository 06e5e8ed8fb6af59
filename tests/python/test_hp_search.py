"""model_init and hyperparameter_search (issue 22, item 6): HF's semantics over kiln.Trainer. A
6-trial optuna search over the learning rate and the batch size of LeNet on Fashion-MNIST finds a
better objective than its worst trial and repeats with a seeded sampler; Kiln's random (seeded) and
grid backends; a pruner stops trials through the intermediate evaluations; train(trial=...) applies
a trial's values to a fresh model_init model."""
import gzip
from pathlib import Path

import numpy as np
import pytest
from kiln_package import import_kiln

kiln = import_kiln()
optuna = pytest.importorskip("optuna")  # Debian's python3-optuna (scripts/setup.sh installs it)

DATA = Path("/usr/share/datasets/fashion-mnist")


def fashion(split, n, offset=0):
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(DATA / f"{prefix}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[offset:offset + n]
    with gzip.open(DATA / f"{prefix}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[offset:offset + n]
    return {"input": (images.astype(np.float32) / 255 - 0.286) / 0.353, "labels": labels.astype(np.int64)}


def trainer(tmp_path, **kwargs):
    args = kiln.TrainingArguments(output_dir=str(tmp_path), report_to="none", disable_tqdm=True, save_strategy="no",
                                  max_steps=15, per_device_eval_batch_size=128, **kwargs)
    return kiln.Trainer(model_init=lambda: "lenet", args=args, train_dataset=fashion("train", 512),
                        eval_dataset=fashion("test", 256))


def space(trial):
    return {"learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-1, log=True),
            "per_device_train_batch_size": trial.suggest_categorical("per_device_train_batch_size", [8, 32])}


def test_optuna_search_finds_a_better_trial_and_repeats_with_a_seed(tmp_path):
    def search(folder):
        t = trainer(folder)
        best = t.hyperparameter_search(hp_space=space, n_trials=6, direction="minimize", backend="optuna",
                                       sampler=optuna.samplers.RandomSampler(seed=3))
        return best

    best = search(tmp_path / "a")
    study = best.run_summary
    values = [t.value for t in study.trials]
    assert len(values) == 6 and best.objective == min(values) < max(values)
    assert set(best.hyperparameters) == {"learning_rate", "per_device_train_batch_size"}
    assert all((tmp_path / "a" / f"run-{n}").is_dir() for n in range(6))
    again = search(tmp_path / "b")
    assert again.hyperparameters == best.hyperparameters and again.objective == best.objective


def test_kiln_random_and_grid_backends(tmp_path):
    def grid(trial):
        return {"learning_rate": trial.suggest_categorical("learning_rate", [1e-3, 3e-2]),
                "per_device_train_batch_size": trial.suggest_categorical("per_device_train_batch_size", [8, 16])}

    best = trainer(tmp_path / "g").hyperparameter_search(hp_space=grid, n_trials=10, backend="grid")
    assert best.hyperparameters["learning_rate"] in (1e-3, 3e-2) and len(list((tmp_path / "g").glob("run-*"))) == 4
    r1 = trainer(tmp_path / "r1").hyperparameter_search(hp_space=space, n_trials=3, backend="random", seed=5)
    r2 = trainer(tmp_path / "r2").hyperparameter_search(hp_space=space, n_trials=3, backend="random", seed=5)
    assert r1 == r2
    with pytest.raises(ValueError, match="categorical choices only"):
        trainer(tmp_path / "x").hyperparameter_search(hp_space=space, n_trials=1, backend="grid")


def test_a_pruner_stops_trials_through_intermediate_evaluations(tmp_path):
    """A pruner that stops every trial after its first evaluation past step 6: no trial completes, so
    there is no best one (optuna's, and HF's, ValueError); the study in its storage shows each pruned
    at step 10, the first evaluation after its warm-up, before the 15 steps."""
    t = trainer(tmp_path, eval_strategy="steps", eval_steps=5)
    storage = optuna.storages.InMemoryStorage()
    with pytest.raises(ValueError, match="No trials are completed"):
        t.hyperparameter_search(hp_space=space, n_trials=3, backend="optuna", storage=storage, study_name="pruned",
                                sampler=optuna.samplers.RandomSampler(seed=0),
                                pruner=optuna.pruners.ThresholdPruner(upper=0.0, n_warmup_steps=6))
    trials = optuna.load_study(study_name="pruned", storage=storage).trials
    assert [tr.state for tr in trials] == [optuna.trial.TrialState.PRUNED] * 3
    assert all(max(tr.intermediate_values) == 10 for tr in trials)


def test_model_init_and_train_with_a_trial(tmp_path):
    t = trainer(tmp_path)
    out = t.train(trial={"learning_rate": 0.05, "per_device_train_batch_size": 16})
    assert out.global_step == 15 and t.args.learning_rate == 0.05 and t.args.per_device_train_batch_size == 16
    with pytest.raises(RuntimeError, match="model_init"):
        kiln.Trainer(model="lenet", args=kiln.TrainingArguments(output_dir=str(tmp_path / "n")),
                     train_dataset=fashion("train", 16)).hyperparameter_search(n_trials=1)
