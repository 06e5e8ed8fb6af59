"""HF's evaluation_loop and prediction_step as kiln.Trainer runs them when a subclass overrides one
(or training_step, whose loss is not compute_loss's): evaluate(), predict() and the evaluations of
train() then run this Python loop instead of the native one (Trainer.set_evaluation_hook in C++),
which logs its metrics and calls the callbacks as for its own.

prediction_step runs a batch through Kiln's eval model (Trainer.prediction_step in C++) when that
model is what HF's prediction_step would compute (the model's own loss, or compute_loss traced); a
torch model whose training graph is a training_step override's, or a batch without the eval model's
inputs (prediction without labels), runs in torch as HF's does, with the weights Kiln trained so far
loaded into it. The loop is HF's: per-batch losses repeated over the batch, predictions and labels
gathered with -100 padding, preprocess_logits_for_metrics, compute_metrics, include_for_metrics,
metrics prefixed. One process only."""
import math
import time
from collections.abc import Mapping

import numpy as np

from kiln.trainer_utils import EvalLoopOutput, EvalPrediction

PADDING_INDEX = -100


class EvaluationLoopHooks:
    """HF's evaluation hooks (mixed into kiln.Trainer through kiln/trainer_hooks.py)."""

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """HF's: (loss, logits, labels) of one batch, torch tensors (numpy arrays without torch);
        logits and labels None under prediction_loss_only."""
        label_names = list(self.args.label_names or ["labels"])
        native = self._core.input_names(False)
        if not self._eval_graph_is_training_step() and all(n in inputs for n in native):
            loss, logits, labels = self._core.prediction_step({n: _to_numpy(inputs[n]) for n in inputs},
                                                              bool(prediction_loss_only))
            if len(label_names) > 1:
                labels = tuple(_to_numpy(inputs[n]) for n in label_names if n in inputs) or None
            out = (_as_tensor(np.float32(loss)), None if logits is None else _as_tensor(logits),
                   None if labels is None else _as_tensor(labels))
            return (out[0], None, None) if prediction_loss_only else out
        return self._torch_prediction_step(model, inputs, prediction_loss_only, ignore_keys, label_names)

    def _torch_prediction_step(self, model, inputs, prediction_loss_only, ignore_keys, label_names):
        from kiln.trainer import _is_torch_module
        if not _is_torch_module(model):
            raise ValueError(f"Trainer.prediction_step: the batch lacks the eval model's inputs "
                             f"{self._core.input_names(False)} (it has {sorted(inputs)})")
        import torch

        from kiln.training.ortmodule.trainer_glue import _call
        inputs = self._prepare_inputs(inputs)
        ignore_keys = list(ignore_keys or [])
        has_labels = all(inputs.get(k) is not None for k in label_names)
        labels = None
        if has_labels:
            labels = tuple(inputs[n].detach() for n in label_names)
            labels = labels[0] if len(labels) == 1 else labels
        with torch.no_grad():
            if has_labels:
                loss, outputs = self.compute_loss(model, inputs, return_outputs=True)
                loss = loss.mean().detach()
                skip = ignore_keys + ["loss"]
                logits = tuple(v for k, v in outputs.items() if k not in skip) if isinstance(outputs, Mapping) \
                    else tuple(outputs[1:])
            else:
                loss = None
                features = {k: v for k, v in inputs.items() if k not in label_names}
                outputs = _call(model, list(features), list(features.values()))
                logits = tuple(v for k, v in outputs.items() if k not in ignore_keys) \
                    if isinstance(outputs, Mapping) else (outputs if isinstance(outputs, tuple) else (outputs,))
        if prediction_loss_only:
            return loss, None, None
        logits = tuple(t.detach() for t in logits if t is not None)
        return loss, (logits[0] if len(logits) == 1 else logits), labels

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                        metric_key_prefix="eval"):
        """HF's: prediction_step over every batch of `dataloader`, then compute_metrics over the gathered
        predictions and labels. Returns EvalLoopOutput(predictions, label_ids, metrics, num_samples)."""
        del description
        args = self.args
        if prediction_loss_only is None:
            prediction_loss_only = args.prediction_loss_only
        model = self._model_for_evaluation()
        include = set(args.include_for_metrics or [])
        if getattr(args, "include_inputs_for_metrics", False):
            include.add("inputs")
        main_input = getattr(model, "main_input_name", "input_ids")
        losses, preds, labels, inputs_seen = [], None, None, None
        num_samples = 0
        for batch in dataloader:
            batch_size = _batch_size(batch)
            loss, logits, label = self.prediction_step(model, batch, prediction_loss_only, ignore_keys=ignore_keys)
            num_samples += batch_size
            if loss is not None:
                losses.append(np.repeat(np.asarray(_to_numpy(loss), dtype=np.float32).reshape(-1)[:1], batch_size))
            if "inputs" in include and main_input in batch:
                inputs_seen = _concat(inputs_seen, _nested_numpy(batch[main_input]))
            if logits is not None:
                if self.preprocess_logits_for_metrics is not None:
                    logits = self.preprocess_logits_for_metrics(logits, label)
                preds = _concat(preds, _nested_numpy(logits))
            if label is not None:
                labels = _concat(labels, _nested_numpy(label))
            self._core.on_prediction_step()
        all_losses = np.concatenate(losses) if losses else None
        metrics = {}
        if self.compute_metrics is not None and preds is not None and labels is not None:
            extras = {}
            if "inputs" in include:
                extras["inputs"] = inputs_seen
            if "loss" in include:
                extras["losses"] = all_losses
            metrics = dict(self.compute_metrics(EvalPrediction(predictions=preds, label_ids=labels, **extras)))
        metrics = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in metrics.items()}
        if all_losses is not None and all_losses.size:
            metrics[f"{metric_key_prefix}_loss"] = float(all_losses.mean())
        metrics = {k if k.startswith(f"{metric_key_prefix}_") else f"{metric_key_prefix}_{k}": v
                   for k, v in metrics.items()}
        return EvalLoopOutput(predictions=preds, label_ids=labels, metrics=metrics, num_samples=num_samples)

    def _prepare_inputs(self, inputs):
        """HF's: the batch ready for the model (torch tensors; numpy arrays become tensors)."""
        import torch
        return {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
                for k, v in dict(inputs).items()}

    # ---- Kiln's side ---------------------------------------------------------------------------
    def _evaluation_overridden(self):
        from kiln.trainer_hooks import overrides
        return overrides(self, "prediction_step") or overrides(self, "evaluation_loop")

    def _eval_graph_is_training_step(self):
        from kiln.trainer_hooks import overrides
        return overrides(self, "training_step")

    def _model_for_evaluation(self):
        """self.model, a torch or kiln.nn module holding the weights trained so far."""
        from kiln.trainer import _is_torch_module
        if _is_torch_module(self.model):
            from kiln.training.ortmodule.trainer_glue import load_trained
            load_trained(self.model, self._core.parameter_values())
            self.model.eval()
        elif getattr(self.model, "_kiln_nn_module", False):
            from kiln.nn.trainer_glue import load_trained
            load_trained(self.model, self._core.parameter_values())
        return self.model

    def _run_evaluation(self, metric_key_prefix, description):
        """The C++ Trainer's evaluation hook: the evaluation or prediction pending from evaluate() /
        predict() (self._pending_eval), or of eval_dataset for train()'s own; returns the metrics with
        HF's speed metrics, keeps the predictions for predict()."""
        dataset = self._pending_eval if self._pending_eval is not None else self.eval_dataset
        self._pending_eval = None
        loader = self.get_eval_dataloader(dataset) if description == "Evaluation" else \
            self.get_test_dataloader(dataset)
        start = time.time()
        was_training = getattr(self.model, "training", None)
        try:
            output = self.evaluation_loop(loader, description=description,
                                          prediction_loss_only=True if self.compute_metrics is None and
                                          description == "Evaluation" else None,
                                          metric_key_prefix=metric_key_prefix)
        finally:
            if was_training is not None:
                self.model.train(was_training)
        runtime = time.time() - start
        steps = math.ceil(output.num_samples / max(1, self.args.per_device_eval_batch_size))
        metrics = dict(output.metrics)
        metrics[f"{metric_key_prefix}_runtime"] = round(runtime, 4)
        metrics[f"{metric_key_prefix}_samples_per_second"] = round(output.num_samples / runtime, 3) if runtime else 0.0
        metrics[f"{metric_key_prefix}_steps_per_second"] = round(steps / runtime, 3) if runtime else 0.0
        self._last_eval_output = output
        return metrics


def _to_numpy(value):
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _nested_numpy(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_nested_numpy(v) for v in value)
    return _to_numpy(value)


def _as_tensor(array):
    try:
        import torch
    except ImportError:
        return array
    return torch.from_numpy(np.ascontiguousarray(array))


def _batch_size(batch):
    for value in (batch.values() if isinstance(batch, Mapping) else batch):
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return 1


def _concat(gathered, new):
    """HF's nested_concat with padding_index -100: along the first axis, the other axes padded."""
    if gathered is None:
        return new
    if isinstance(new, (tuple, list)):
        return type(new)(_concat(g, n) for g, n in zip(gathered, new))
    if gathered.ndim == 0 or new.ndim == 0:
        return np.concatenate([gathered.reshape(-1), new.reshape(-1)])
    if gathered.shape[1:] == new.shape[1:]:
        return np.concatenate([gathered, new])
    shape = [gathered.shape[0] + new.shape[0]] + [max(a, b) for a, b in zip(gathered.shape[1:], new.shape[1:])]
    out = np.full(shape, PADDING_INDEX, dtype=np.result_type(gathered, new))
    out[tuple(slice(0, d) for d in gathered.shape)] = gathered
    out[(slice(gathered.shape[0], shape[0]),) + tuple(slice(0, d) for d in new.shape[1:])] = new
    return out
