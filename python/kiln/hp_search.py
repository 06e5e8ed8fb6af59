"""Hyperparameter search for kiln.Trainer (transformers' Trainer.hyperparameter_search): each trial
trains a fresh model from `model_init` with the trial's values set on a copy of the arguments, in
output_dir/run-<n>, and is scored by compute_objective over its final evaluation. Backends: "optuna"
(Debian's python3-optuna: its samplers, pruners and storages; intermediate evaluations are reported
to the trial, and a pruned trial stops training), and Kiln's own "random" (seeded; the sampler of the C++
search, include/kiln/hp_search.h) and "grid" (the Cartesian product of categorical choices, in order).
"""
import inspect
import itertools
import os
from typing import Any, Dict, NamedTuple, Optional

from kiln.trainer_callback import TrainerCallback


class BestRun(NamedTuple):
    """transformers.trainer_utils.BestRun."""
    run_id: str
    objective: Any
    hyperparameters: Dict[str, Any]
    run_summary: Optional[Any] = None


def default_compute_objective(metrics):
    """HF's: the evaluation loss when it is the only metric, else the sum of the other metrics (speed
    metrics, epoch and memory metrics left out)."""
    metrics = dict(metrics)
    loss = metrics.pop("eval_loss", None)
    metrics.pop("epoch", None)
    for key in [k for k in metrics if k.endswith(("_runtime", "_per_second", "_compilation_time")) or "_mem_" in k]:
        metrics.pop(key)
    return loss if not metrics else sum(metrics.values())


def default_hp_space_optuna(trial):
    """HF's default space."""
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-6, 1e-4, log=True),
        "num_train_epochs": trial.suggest_int("num_train_epochs", 1, 5),
        "seed": trial.suggest_int("seed", 1, 40),
        "per_device_train_batch_size": trial.suggest_categorical("per_device_train_batch_size", [4, 8, 16, 32, 64]),
    }


class RandomTrial:
    """Kiln's trial for the "random" backend: optuna's suggest_* names over the C++ search's seeded
    sampler (include/kiln/hp_search.h), so that the same seed and order of suggestions draw what
    `kiln hpsearch --backend random --search-seed S` draws."""

    def __init__(self, number, sampler):
        self.number, self._sampler, self.params = number, sampler, {}

    def suggest_float(self, name, low, high, *, log=False, step=None):
        if log and step:
            raise ValueError(f"{name}: suggest_float takes log or step, not both (optuna's rule)")
        value = self._sampler.suggest_float(float(low), float(high), bool(log), float(step or 0))
        self.params[name] = value
        return value

    def suggest_int(self, name, low, high, step=1, log=False):
        value = self._sampler.suggest_int(int(low), int(high), int(step), bool(log))
        self.params[name] = value
        return value

    def suggest_categorical(self, name, choices):
        choices = list(choices)
        value = choices[self._sampler.suggest_index(len(choices))]
        self.params[name] = value
        return value

    def report(self, value, step):
        pass

    def should_prune(self):
        return False


class GridTrial(RandomTrial):
    """Kiln's trial for the "grid" backend: categorical choices only, one point of the grid each."""

    def __init__(self, number, point):
        super().__init__(number, None)
        self._point = point

    def suggest_float(self, name, *args, **kwargs):
        raise ValueError(f"backend 'grid' searches categorical choices only: give {name!r} with suggest_categorical")

    suggest_int = suggest_float

    def suggest_categorical(self, name, choices):
        value = self._point[name] if name in self._point else list(choices)[0]
        self.params[name] = value
        return value


class _GridShape:
    """Records the choices an hp_space asks for, to enumerate the grid."""

    def __init__(self):
        self.choices = {}

    def suggest_categorical(self, name, choices):
        self.choices[name] = list(choices)
        return self.choices[name][0]

    def suggest_float(self, name, *args, **kwargs):
        raise ValueError(f"backend 'grid' searches categorical choices only: give {name!r} with suggest_categorical")

    suggest_int = suggest_float


class _ReportToTrial(TrainerCallback):
    """Each evaluation's objective reported to the trial; a trial its pruner stops ends training."""

    def __init__(self, trial, compute_objective):
        self.trial, self.compute_objective, self.objective, self.pruned = trial, compute_objective, None, False

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.objective = self.compute_objective(dict(metrics or {}))
        self.trial.report(self.objective, state.global_step)
        if self.trial.should_prune():
            self.pruned = True
            control.should_training_stop = True


def trial_params(trial, hp_space):
    """The trial's values: hp_space(trial) for Kiln's and optuna's trials; a dict is taken as is."""
    if isinstance(trial, dict):
        return dict(trial)
    return dict(hp_space(trial))


def run_trial(trainer, trial, hp_space, compute_objective):
    """Trains a fresh model for the trial and returns (objective, pruned)."""
    params = trial_params(trial, hp_space)
    trial_trainer = trainer._for_trial(trial, params)
    report = _ReportToTrial(trial, compute_objective)
    trial_trainer.add_callback(report)
    trial_trainer.train()
    if report.pruned:
        return report.objective, True
    metrics = trial_trainer.evaluate()
    return compute_objective(metrics), False


def search(trainer, hp_space, compute_objective, n_trials, direction, backend, **kwargs):
    compute_objective = compute_objective or default_compute_objective
    backend = backend or "optuna"
    if backend == "optuna":
        import optuna
        hp_space = hp_space or default_hp_space_optuna
        create = {k: kwargs.pop(k) for k in list(kwargs) if k in inspect.signature(optuna.create_study).parameters}
        optimize = {k: kwargs.pop(k) for k in ("timeout", "n_jobs", "gc_after_trial") if k in kwargs}
        if kwargs:
            raise TypeError(f"hyperparameter_search: unexpected keyword arguments {sorted(kwargs)}")
        study = optuna.create_study(direction=direction, **create)

        def objective(trial):
            value, pruned = run_trial(trainer, trial, hp_space, compute_objective)
            if pruned:
                raise optuna.TrialPruned()
            return value

        study.optimize(objective, n_trials=n_trials, **optimize)
        best = study.best_trial
        return BestRun(str(best.number), best.value, best.params, study)
    if hp_space is None:
        raise ValueError(f"backend {backend!r} needs an hp_space")
    if backend == "random":
        from kiln._core import core
        sampler = core.HpSampler(int(kwargs.pop("seed", 0)))
        trials = (RandomTrial(n, sampler) for n in range(n_trials))
    elif backend == "grid":
        shape = _GridShape()
        hp_space(shape)
        names = list(shape.choices)
        points = [dict(zip(names, values)) for values in itertools.product(*shape.choices.values())]
        trials = (GridTrial(n, p) for n, p in enumerate(points[:n_trials]))
    else:
        raise ValueError(f"backend {backend!r} is not one of 'optuna', 'random', 'grid'")
    if kwargs:
        raise TypeError(f"hyperparameter_search: unexpected keyword arguments {sorted(kwargs)}")
    best = None
    for trial in trials:
        value, _ = run_trial(trainer, trial, hp_space, compute_objective)
        better = best is None or (value < best.objective if direction == "minimize" else value > best.objective)
        if better:
            best = BestRun(str(trial.number), value, dict(trial.params))
    return best


def run_dir(output_dir, trial):
    number = getattr(trial, "number", None)
    return output_dir if number is None else os.path.join(output_dir, f"run-{number}")
