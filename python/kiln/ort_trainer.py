"""kiln.ORTTrainer and kiln.ORTTrainingArguments: optimum's names (optimum.onnxruntime) for Kiln's
Trainer and TrainingArguments, so an ORTTrainer script runs with its imports changed:

    from kiln import ORTTrainer, ORTTrainingArguments    # was: from optimum.onnxruntime import ...
    args = ORTTrainingArguments(output_dir="run", optim="adamw_ort_fused", num_train_epochs=3)
    trainer = ORTTrainer(model=torch_model, args=args, train_dataset=..., eval_dataset=...)
    trainer.train()

ORTTrainer is kiln.Trainer (which takes torch modules: kiln/training/ortmodule/trainer_glue.py).
ORTTrainingArguments is kiln.TrainingArguments plus optimum's own fields:
  optim="adamw_ort_fused"   ONNX Runtime's fused AdamW: Kiln's AdamW, which updates every parameter
                            in one fused pass (the same as "adamw_torch" here);
  use_module_with_loss      accepted; no effect: Kiln always trains the model and its loss as one graph;
  save_onnx, onnx_prefix    write the exported model to <output_dir>/<onnx_prefix or "model">_torch_exported.onnx;
  onnx_log_level            VERBOSE, INFO, WARNING (default), ERROR or FATAL; accepted, recorded in to_dict().
"""
from kiln.trainer import Trainer
from kiln.training_args import TrainingArguments

_LOG_LEVELS = ("VERBOSE", "INFO", "WARNING", "ERROR", "FATAL")


class ORTTrainingArguments(TrainingArguments):
    """optimum.onnxruntime.ORTTrainingArguments over Kiln's TrainingArguments."""

    _ORT_DEFAULTS = {"use_module_with_loss": False, "save_onnx": False, "onnx_prefix": None,
                     "onnx_log_level": "WARNING"}

    def __init__(self, output_dir=None, **kwargs):
        ort = {k: kwargs.pop(k) for k in list(kwargs) if k in self._ORT_DEFAULTS}
        optim = kwargs.get("optim")
        if optim == "adamw_ort_fused":
            kwargs["optim"] = "adamw_torch"
        super().__init__(output_dir, **kwargs)
        object.__setattr__(self, "_ort", {**self._ORT_DEFAULTS, "optim": optim or self._values["optim"]})
        for key, value in ort.items():
            self.__setattr__(key, value)

    def __getattr__(self, name):
        ort = self.__dict__.get("_ort")
        if ort is not None and name in ort:
            return ort[name]
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        if name in self._ORT_DEFAULTS:
            if name == "onnx_log_level" and str(getattr(value, "name", value)).upper() not in _LOG_LEVELS:
                raise ValueError(f"onnx_log_level must be one of {', '.join(_LOG_LEVELS)}, got {value!r}")
            if name == "onnx_log_level":
                value = str(getattr(value, "name", value)).upper()
            self._ort[name] = value
            return
        if name == "optim":
            self._ort["optim"] = value
            value = "adamw_torch" if value == "adamw_ort_fused" else value
        super().__setattr__(name, value)

    def to_dict(self):
        return {**super().to_dict(), **self._ort}

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"ORTTrainingArguments({fields})"

    __str__ = __repr__


class ORTTrainer(Trainer):
    """optimum.onnxruntime.ORTTrainer: kiln.Trainer under optimum's name."""
