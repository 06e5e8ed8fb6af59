"""kiln.Trainer: Hugging Face's Trainer over Kiln's C++ one. A script written for
transformers.Trainer with an ONNX model and numpy datasets runs with the import changed:

    from kiln import Trainer, TrainingArguments, EvalPrediction

    def compute_metrics(p: EvalPrediction):
        preds, labels = p
        return {"accuracy": float((preds.argmax(-1) == labels).mean())}

    trainer = Trainer(model="mlp.onnx", args=TrainingArguments("run", num_train_epochs=3),
                      train_dataset=[{"input": x, "labels": y}, ...], eval_dataset=...,
                      compute_metrics=compute_metrics)
    trainer.train()
    trainer.evaluate()          # {"eval_loss": ..., "eval_accuracy": ...}

`model` is a forward ONNX file (a path or an onnx.ModelProto), an artifacts folder (made by
kiln.training.artifacts.generate_artifacts), a built-in model name (a kiln.nn.zoo name: "mlp",
"lenet", "resnet18", ..., with its default config; for another config pass
kiln.nn.zoo.create_model(name, **config)), a kiln.nn Module (exported in training mode with the first training
example's shapes; train() loads the trained weights back into it: kiln/nn/trainer_glue.py) or a
torch.nn.Module, a Hugging Face-style one included (the same through torch.onnx.export:
kiln/training/ortmodule/trainer_glue.py; kiln.ORTTrainer is this class under optimum's name). Kiln adds
the loss for a forward model; `loss` (Kiln's keyword) names it: CrossEntropyLoss, MSELoss,
BCEWithLogitsLoss, L1Loss or "none". The default is "none" when the model has an output named
"loss" (an HF model that computes its own loss from a "labels" input; that output must come first),
else CrossEntropyLoss against the model's first output and the "labels" column.

The loop runs in C++ with the GIL released; Python callbacks, Python datasets, compute_metrics and
preprocess_logits_for_metrics take it when called, and an exception they raise leaves train()
(evaluate(), predict()) as itself. compute_loss_func and a subclass's compute_loss and
training_step are traced into a torch model's training graph (torch.onnx.export), so their loss is
what Kiln trains; a subclass's prediction_step or evaluation_loop runs the evaluations in Python
(kiln/trainer_eval_loop.py). model_init
and hyperparameter_search (optuna, or Kiln's random / grid search) are HF's: kiln/hp_search.py.
`optimizers=(optimizer, lr_scheduler)`, optimizer_cls_and_kwargs and the create_optimizer /
create_scheduler / create_optimizer_and_scheduler hooks take torch optimizers and schedulers, which
Kiln reads and runs natively (kiln/trainer_optimizers.py); a subclass's `log` gets the loop's logs.

`data_collator` may be any callable with HF's contract (a list of items in, a dict of arrays or torch
tensors out, batch first): it is called under the GIL for every batch of training, evaluation and
prediction (kiln/trainer_data.py), and its batches may change shape from batch to batch (dynamic
padding); predictions and labels of different lengths are padded with -100 when gathered, as HF
does. A torch model is then exported with every input axis dynamic.
"""
import inspect
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping

from kiln._core import core
from kiln.errors import InvalidArgument
from kiln.trainer_callback import CallbackHandler
from kiln.trainer_data import (
    default_data_collator,
    is_custom_collator,
    iterable_as_sequence,
    remove_unused_columns,
    to_dataset,
)
from kiln.trainer_hooks import TrainerHooks, overrides
from kiln.trainer_utils import PredictionOutput, TrainOutput
from kiln.training_args import TrainingArguments


class Trainer(TrainerHooks):
    def __init__(self, model=None, args=None, data_collator=None, train_dataset=None, eval_dataset=None,
                 processing_class=None, model_init=None, compute_loss_func=None, compute_metrics=None,
                 callbacks=None, optimizers=(None, None), optimizer_cls_and_kwargs=None,
                 preprocess_logits_for_metrics=None, *, loss=None, tokenizer=None, eval_data_collator=None):
        # HF's model_init: the model made by it (with no argument, or the trial) for every trial of a
        # hyperparameter search and for train(trial=...); the first one now.
        self.model_init = model_init
        self._init_kwargs = dict(args=args, data_collator=data_collator, train_dataset=train_dataset,
                                 eval_dataset=eval_dataset, processing_class=processing_class,
                                 compute_metrics=compute_metrics, callbacks=callbacks,
                                 preprocess_logits_for_metrics=preprocess_logits_for_metrics, loss=loss,
                                 eval_data_collator=eval_data_collator)
        if model is None and model_init is not None:
            model = _call_model_init(model_init, None)
        self.compute_loss_func = compute_loss_func
        self.optimizer, self.lr_scheduler = tuple(optimizers or (None, None))
        self.optimizer_cls_and_kwargs = optimizer_cls_and_kwargs
        if self.optimizer is not None and optimizer_cls_and_kwargs is not None:
            raise RuntimeError("Passing both `optimizers` and `optimizer_cls_and_kwargs` arguments is incompatible.")
        if model is None:
            raise RuntimeError("`Trainer` requires either a `model` or `model_init` argument")
        if tokenizer is not None:  # HF's name before processing_class (and the one ORTTrainer scripts use)
            if processing_class is not None:
                raise ValueError("Trainer: pass tokenizer or processing_class, not both (tokenizer is the older name "
                                 "of processing_class)")
            processing_class = tokenizer
        if args is None:
            args = TrainingArguments(output_dir="trainer_output")
        if not isinstance(args, TrainingArguments):  # ORTTrainingArguments is one
            raise TypeError(f"args must be a kiln.TrainingArguments, not {type(args).__name__}")
        self.model = model
        self.args = args
        if data_collator is None and _is_tokenizer(processing_class):  # HF: pad with the tokenizer
            from kiln.data_collator import DataCollatorWithPadding
            data_collator = DataCollatorWithPadding(processing_class)
        self.data_collator = data_collator if data_collator is not None else default_data_collator
        # optimum-graphcore's eval_data_collator (IPUTrainer): evaluation and prediction batches' own.
        self.eval_data_collator = eval_data_collator if eval_data_collator is not None else self.data_collator
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.processing_class = processing_class
        self.compute_metrics = compute_metrics
        self.preprocess_logits_for_metrics = preprocess_logits_for_metrics
        if isinstance(eval_dataset, Mapping) and not _is_columns(eval_dataset):
            raise NotImplementedError("eval_dataset: a dict of named evaluation datasets is evaluated by "
                                      "trainer.evaluate(), not during train(); pass one dataset here")
        self._signature_columns = _signature_columns(model, args) if args.remove_unused_columns else None
        self._one_input_model = (getattr(model, "_kiln_nn_module", False) or _is_torch_module(model)) and \
            len(_required_parameters(model)) <= 1
        if overrides(self, "get_train_dataloader"):  # the subclass's own batches
            train = self._loader_dataset(self.get_train_dataloader())
        else:
            train = self._dataset(train_dataset, "train_dataset", self.data_collator)
        evaluation = self._eval_dataset(eval_dataset, "eval_dataset", "get_eval_dataloader")
        callbacks = [cb() if isinstance(cb, type) else cb for cb in (callbacks or [])]
        with tempfile.TemporaryDirectory(prefix="kiln-model-") as tmp:
            if getattr(model, "_kiln_nn_module", False):  # a kiln.nn.Module: exported here, weights back after train()
                from kiln.nn.trainer_glue import export_for_trainer
                path = os.path.join(tmp, "model.onnx")
                spec = _onnx_spec(path, export_for_trainer(model, train, args.label_names or ["labels"], path), loss)
            elif _is_torch_module(model):  # a torch.nn.Module: the same, through torch.onnx.export
                from kiln.training.ortmodule.trainer_glue import export_for_trainer as export_torch
                path = os.path.join(tmp, "model.onnx")
                traced = self._traces_loss()
                if traced and loss is not None:
                    raise InvalidArgument("loss=... and a compute_loss (or compute_loss_func): the graph's loss is "
                                          "compute_loss's; leave loss out")
                outputs = export_torch(model, train, args.label_names or ["labels"], path,
                                       dynamic_shapes=is_custom_collator(self.data_collator),
                                       compute_loss=None if not traced else self._traced_training_step
                                       if overrides(self, "training_step") else self.compute_loss)
                spec = _onnx_spec(path, outputs, loss)
                if getattr(args, "save_onnx", False):  # ORTTrainingArguments: the exported graph kept
                    _keep_onnx(path, args)
            else:
                if self._traces_loss():
                    raise NotImplementedError("compute_loss / compute_loss_func / training_step are traced into "
                                              "the graph with torch.onnx.export, which needs a torch model; give an "
                                              "ONNX model its loss when exporting it (its first output 'loss')")
                spec = _model_spec(model, loss, tmp)
            spec["optimizer"] = self._optimizer_spec(train)
            if processing_class is not None and callable(getattr(processing_class, "save_pretrained", None)):
                callbacks.append(_SaveProcessingClass(processing_class))  # HF saves it in every checkpoint
            self._core = core.Trainer(spec, args._core, args, model, train, evaluation, compute_metrics,
                                      preprocess_logits_for_metrics, callbacks)
        self.callback_handler = CallbackHandler(self._core)
        self._pending_eval, self._last_eval_output = None, None
        if self._evaluation_overridden() or overrides(self, "training_step"):  # kiln/trainer_eval_loop.py
            self._core.set_evaluation_hook(self._run_evaluation)
        if overrides(self, "log"):  # the loop's logs go through the subclass's log
            self._core.set_log_hook(lambda logs: self.log(logs))
        if self.lr_scheduler is not None or overrides(self, "create_scheduler") or \
                overrides(self, "create_optimizer_and_scheduler"):
            self._core.set_scheduler_factory(self._schedule)
        self._check_columns(train, "train_dataset", training=True)
        self._check_columns(evaluation, "eval_dataset", training=False)

    # ---- Running -------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """resume_from_checkpoint: None/False (fresh), True (the last checkpoint in output_dir) or a
        checkpoint folder. Returns TrainOutput(global_step, training_loss, metrics)."""
        if trial is not None:  # HF: the trial's values on the arguments, and a fresh model from model_init
            from kiln import hp_search
            if self.model_init is None:
                raise RuntimeError("train(trial=...) needs a model_init to make the trial's model")
            params = hp_search.trial_params(trial, lambda t: t.params)
            trained = self._for_trial(trial, params)
            out = trained.train(resume_from_checkpoint, None, ignore_keys_for_eval, **kwargs)
            self.__dict__.update({k: v for k, v in trained.__dict__.items() if k not in ("model_init", "_init_kwargs")})
            return out
        if kwargs:
            raise TypeError(f"train() got unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        if resume_from_checkpoint is True:
            resume = "true"
        elif resume_from_checkpoint in (None, False):
            resume = ""
        else:
            resume = os.fspath(resume_from_checkpoint)
        step, loss, metrics = self._core.train(resume)
        if getattr(self.model, "_kiln_nn_module", False):
            from kiln.nn.trainer_glue import load_trained
            load_trained(self.model, self._core.parameter_values())
        elif _is_torch_module(self.model):
            from kiln.training.ortmodule.trainer_glue import load_trained as load_torch
            load_torch(self.model, self._core.parameter_values())
        return TrainOutput(step, loss, metrics)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
        """The metrics of one evaluation, prefixed by metric_key_prefix; a dict of named datasets
        gives one evaluation each, prefixed "<prefix>_<name>_" (HF's rule)."""
        if isinstance(eval_dataset, Mapping) and not _is_columns(eval_dataset):
            metrics = {}
            for name, dataset in eval_dataset.items():
                metrics.update(self.evaluate(dataset, ignore_keys, f"{metric_key_prefix}_{name}"))
            return metrics
        dataset = self._eval_dataset(eval_dataset, "eval_dataset", "get_eval_dataloader")
        self._check_columns(dataset, "eval_dataset", training=False)
        self._pending_eval = eval_dataset
        try:
            return self._core.evaluate(dataset, metric_key_prefix)
        finally:
            self._pending_eval = None

    def predict(self, test_dataset, ignore_keys=None, metric_key_prefix="test"):
        """PredictionOutput(predictions, label_ids, metrics). Without labels in the dataset, as HF:
        predictions only (label_ids None, no test_loss)."""
        dataset = self._eval_dataset(test_dataset, "test_dataset", "get_test_dataloader")
        self._check_columns(dataset, "test_dataset", training=False, labels_optional=True)
        self._pending_eval, self._last_eval_output = test_dataset, None
        try:
            predictions, label_ids, metrics = self._core.predict(dataset, metric_key_prefix)
        finally:
            self._pending_eval = None
        if self._last_eval_output is not None:  # a subclass's evaluation_loop / prediction_step ran it
            predictions, label_ids = self._last_eval_output.predictions, self._last_eval_output.label_ids
        return PredictionOutput(predictions, label_ids, metrics)

    def hyperparameter_search(self, hp_space=None, compute_objective=None, n_trials=20, direction="minimize",
                              backend=None, hp_name=None, **kwargs):
        """transformers' Trainer.hyperparameter_search (kiln/hp_search.py): n_trials trainings of a fresh
        model_init model with hp_space's values, in output_dir/run-<n>; returns the best BestRun.
        backend: "optuna" (the default; kwargs go to optuna.create_study and study.optimize), "random"
        (seed=...) or "grid"."""
        if self.model_init is None:
            raise RuntimeError("To use hyperparameter search, you need to pass your model through a model_init "
                               "function.")
        if direction not in ("minimize", "maximize"):
            raise ValueError(f"direction must be 'minimize' or 'maximize', not {direction!r}")
        from kiln import hp_search
        del hp_name  # names the trials in Ray / W&B only
        return hp_search.search(self, hp_space, compute_objective, n_trials, direction, backend, **kwargs)

    def _for_trial(self, trial, params):
        """A Trainer for one trial: a copy of the arguments with the trial's values (HF converts each to
        the type of the argument's current value) and output_dir/run-<n>, and model_init's model."""
        from kiln import hp_search
        values = self.args.to_dict()
        for key, value in params.items():
            if key not in values:
                raise AttributeError(f"Trying to set {key} in the hyperparameter search but there is no "
                                     "corresponding field in `TrainingArguments`.")
            old = values[key]
            values[key] = type(old)(value) if old is not None and not isinstance(old, (list, dict)) else value
        values["output_dir"] = hp_search.run_dir(self.args.output_dir, trial)
        kwargs = dict(self._init_kwargs)
        plain = type(self.args) is TrainingArguments
        kwargs["args"] = TrainingArguments(**values) if plain else _copy_args(self.args, values)
        return type(self)(model=_call_model_init(self.model_init, trial), model_init=self.model_init, **kwargs)

    # ---- State, logs and files -----------------------------------------------------------------
    @property
    def state(self):
        return self._core.state

    @property
    def control(self):
        return self._core.control

    def log(self, logs, start_time=None):
        """HF's Trainer.log: adds epoch, appends to state.log_history and calls on_log."""
        del start_time
        self._core.log(dict(logs))

    def save_model(self, output_dir=None, _internal_call=False):
        """model.onnx (inference) and model.safetensors in output_dir (default args.output_dir), and the
        processing_class (tokenizer) by its save_pretrained, as HF saves it."""
        self._core.save_model("" if output_dir is None else os.fspath(output_dir))
        if self.processing_class is not None and callable(getattr(self.processing_class, "save_pretrained", None)) \
                and self.args.should_save:
            self.processing_class.save_pretrained(os.fspath(output_dir or self.args.output_dir))

    def save_state(self):
        self._core.save_state()

    def log_metrics(self, split, metrics):
        self._core.log_metrics(split, dict(metrics))

    def save_metrics(self, split, metrics, combined=True):
        self._core.save_metrics(split, dict(metrics), combined)

    def is_world_process_zero(self):
        return self.args.process_index == 0

    def is_local_process_zero(self):
        return self.args.local_process_index == 0

    def floating_point_ops(self, inputs):
        """HF's estimate of a batch's training FLOPs: 6 x parameters x tokens (the elements of
        input_ids, else one per example)."""
        return self._core.floating_point_ops({k: v for k, v in dict(inputs).items()})

    @staticmethod
    def num_examples(dataloader):
        """HF's num_examples: the examples of a dataloader's dataset (of the dataset itself, given one)."""
        return len(getattr(dataloader, "dataset", dataloader))

    def num_parameters(self, only_trainable=False):
        return self._core.num_parameters(only_trainable)

    def optimizer_state_bytes(self):
        """Kiln's own: the bytes of optimizer state (Adam's moments) this process holds; under ZeRO
        (a DeepSpeed config with stage 1 or 2) its rank's shard only."""
        return self._core.optimizer_state_bytes()

    # ---- Callbacks -----------------------------------------------------------------------------
    def add_callback(self, callback):
        self.callback_handler.add_callback(callback)

    def pop_callback(self, callback):
        return self.callback_handler.pop_callback(callback)

    def remove_callback(self, callback):
        self.callback_handler.remove_callback(callback)

    # ---- Helpers -------------------------------------------------------------------------------
    def _dataset(self, dataset, what, collator):
        """A dataset argument as a kiln Dataset: unused columns removed (remove_unused_columns), then
        collated by `collator` when it is a custom one."""
        dataset = iterable_as_sequence(dataset, what, self.args, training=what == "train_dataset")
        return to_dataset(self._without_unused_columns(dataset, what), what, collator)

    def _without_unused_columns(self, dataset, what):
        keep = self._signature_columns
        if keep is not None and self.args.group_by_length:
            keep = keep + [self.args.length_column_name]  # HF's sampler reads it before the removal
        if keep is not None and self.args.include_num_input_tokens_seen not in (False, "no"):
            keep = keep + ["input_ids", "attention_mask"]  # what the token count reads
        if keep is not None and self._one_input_model and not _feature_columns_match(dataset, keep, self.args):
            keep = None  # Kiln's rule for one-input modules: the one column that is not a label feeds it
        return remove_unused_columns(dataset, what, keep)

    def _check_columns(self, dataset, what, training, labels_optional=False):
        """InvalidArgument (a ValueError) naming the model inputs a dataset lacks."""
        if dataset is None or len(dataset) == 0:
            return
        have = dataset.columns()
        need = self._core.input_names(training)
        if labels_optional:
            label_names = self.args.label_names or ["labels"]
            need = [n for n in need if n not in label_names]
        missing = [n for n in need if n not in have]
        if missing:
            raise InvalidArgument(f"{what} lacks the column(s) {missing} that the model takes (model inputs: {need}; "
                                  f"{what} columns: {have})")


# HF's hooks of its Python loop, which Kiln's C++ loop has no place for yet.
def _is_tokenizer(obj):
    """A tokenizer-like processing_class (HF pads with it when no data_collator is given)."""
    return obj is not None and (callable(getattr(obj, "pad", None)) or hasattr(obj, "pad_token_id"))


def _forward_parameters(module):
    """The names forward takes, or None when it takes *args / **kwargs only."""
    if getattr(module, "_forward_names", None) is not None:  # zoo encoder-decoders: HF's argument names
        return list(module._forward_names)
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return names or None


def _required_parameters(module):
    if getattr(module, "_forward_names", None) is not None:
        return [n for n in module._forward_names if n != "labels"]
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _feature_columns_match(dataset, keep, args):
    """Whether a dataset's first item has a column the forward takes that is not a label."""
    labels = {"label", "label_ids", *(args.label_names or ["labels"])}
    try:
        first = dataset[0] if not isinstance(dataset, Mapping) else dataset
    except (IndexError, KeyError, TypeError, NotImplementedError):
        return True
    return not isinstance(first, Mapping) or any(c in keep and c not in labels for c in first)


def _signature_columns(model, args):
    """HF's _set_signature_columns_if_needed: the columns the model takes (a torch or kiln.nn
    forward's parameters, an ONNX model's inputs, a built-in model's), plus "label", "label_ids" and
    the label names; None when they cannot be told (nothing is removed then)."""
    names = None
    if getattr(model, "_kiln_nn_module", False) or _is_torch_module(model):
        names = _forward_parameters(model)
    elif hasattr(model, "SerializeToString") and hasattr(model, "graph"):
        initializers = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in initializers]
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, "training_model.onnx")):
            names = list(core.onnx_io_names(os.path.join(path, "training_model.onnx"))[0])
        elif os.path.isfile(path):
            names = list(core.onnx_io_names(path)[0])
        elif path in core.builtin_model_names():
            from kiln.nn import zoo
            names = [n for n, _ in zoo.example_inputs(path)]
    if names is None:
        return None
    return names + [n for n in ["label", "label_ids"] + list(args.label_names or ["labels"]) if n not in names]


class _SaveProcessingClass:
    """HF's checkpoints hold the tokenizer: its save_pretrained into each checkpoint folder."""

    def __init__(self, processing_class):
        self.processing_class = processing_class

    def on_save(self, args, state, control, **kwargs):
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and os.path.isdir(folder):
            self.processing_class.save_pretrained(folder)


def _call_model_init(model_init, trial):
    """HF's call_model_init: model_init() or model_init(trial), as its signature takes."""
    n = len(inspect.signature(model_init).parameters)
    model = model_init() if n == 0 else model_init(trial)
    if model is None:
        raise RuntimeError("model_init should not return None.")
    return model


def _copy_args(args, values):
    """A copy of a TrainingArguments subclass object with these values."""
    import copy
    out = copy.copy(args)
    from kiln._core import core as _core
    names = set(_core.TrainingArguments.option_names())
    out._set_core(_core.TrainingArguments({k: v for k, v in values.items() if k in names}))
    return out


def _is_torch_module(model):
    torch = sys.modules.get("torch")  # a torch module implies torch is imported
    return torch is not None and isinstance(model, torch.nn.Module)


def _keep_onnx(path, args):
    """ORTTrainingArguments(save_onnx=True): the exported forward as <output_dir>/<onnx_prefix>_torch_exported.onnx."""
    os.makedirs(args.output_dir, exist_ok=True)
    shutil.copyfile(path, os.path.join(args.output_dir, f"{args.onnx_prefix or 'model'}_torch_exported.onnx"))


def _is_columns(mapping):
    """A dict of columns (arrays / lists) rather than a dict of named datasets."""
    return not any(isinstance(v, (Mapping, core.Dataset)) or
                   (isinstance(v, (list, tuple)) and v and isinstance(v[0], Mapping)) for v in mapping.values())


def _model_spec(model, loss, tmp):
    """The C++ ModelSource for a model argument, with the loss rule of the module docstring."""
    if hasattr(model, "SerializeToString") and hasattr(model, "graph"):  # an onnx.ModelProto
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        outputs = [o.name for o in model.graph.output]
        return _onnx_spec(path, outputs, loss)
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be an ONNX file, an onnx.ModelProto, an artifacts folder, a built-in model "
                        f"name, a kiln.nn Module or a torch.nn.Module, not {type(model).__name__}")
    path = os.fspath(model)
    if os.path.isdir(path):
        _no_loss(loss, "an artifacts folder (its training model has its loss)")
        return {"kind": "artifacts", "path": path}
    if os.path.isfile(path):
        _, outputs = core.onnx_io_names(path)
        return _onnx_spec(path, outputs, loss)
    if path in core.builtin_model_names():
        _no_loss(loss, "a built-in model (trained with CrossEntropyLoss)")
        return {"kind": "builtin", "path": path}
    raise FileNotFoundError(f"model '{path}' is neither an ONNX file, an artifacts folder nor a built-in model "
                            f"({', '.join(core.builtin_model_names())})")


def _onnx_spec(path, outputs, loss):
    if loss is None:
        loss = "none" if "loss" in outputs else "CrossEntropyLoss"
    loss = str(getattr(loss, "name", loss))  # kiln.training.artifacts.LossType too
    if loss.lower() == "none" and outputs and outputs[0] != "loss" and "loss" in outputs:
        raise InvalidArgument(f"loss='none' takes the model's first output as the loss, but the outputs are {outputs}: "
                              "export the model with 'loss' first (HF's order: loss, logits)")
    return {"kind": "onnx", "path": path, "loss": loss}


def _no_loss(loss, what):
    if loss is not None:
        raise InvalidArgument(f"loss={loss!r}: the model is {what}; loss applies to a forward ONNX model")
