"""optimum-graphcore's names (optimum.graphcore) over Kiln, so that an IPUTrainer script runs on CPU
ranks with its imports changed:

    from kiln.graphcore import IPUConfig, IPUTrainer, IPUTrainingArguments   # was: optimum.graphcore
    ipu_config = IPUConfig.from_pretrained("ipu_config.json")   # a folder, a file or a dict
    args = IPUTrainingArguments(output_dir="run", per_device_train_batch_size=8, fp32=True)
    trainer = IPUTrainer(model=..., ipu_config=ipu_config, args=args, train_dataset=..., eval_dataset=...)
    trainer.train()

What each IPUConfig field does on Kiln (replication_factor: MPI ranks; device_iterations: optimizer
updates per call; replicated_tensor_sharding: ZeRO stage 1; ...) is in include/kiln/ipu_config.h and
docs/ipu.md. IPUTrainingArguments is kiln.TrainingArguments whose fp32 defaults to False, as
optimum's: training runs in float16 mixed precision with loss scaling unless fp32=True (or bf16=True).
"""
import copy
import json
import os

from kiln._core import core
from kiln.seq2seq_trainer import Seq2SeqFields, Seq2SeqTrainer
from kiln.trainer import Trainer
from kiln.training_args import TrainingArguments


class IPUConfig:
    """optimum.graphcore.IPUConfig: its fields, defaults and checks (the C++ IPUConfig's), as attributes."""

    CONFIG_NAME = "ipu_config.json"

    def __init__(self, **kwargs):
        object.__setattr__(self, "_values", core.ipu_config_resolve(_plain(kwargs)))
        object.__setattr__(self, "_mode", "training")

    # ---- optimum's constructors and writers -----------------------------------------------------
    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        values = dict(config_dict)
        values.update(kwargs)
        return cls(**values)

    @classmethod
    def from_pretrained(cls, path_or_dict, **kwargs):
        """A folder holding ipu_config.json, a JSON file, JSON text or a dict; kwargs override fields."""
        if isinstance(path_or_dict, dict):
            values = dict(path_or_dict)
        else:
            values = core.ipu_config_load(os.fspath(path_or_dict))
        values.update(kwargs)
        return cls(**values)

    def save_pretrained(self, save_directory, **kwargs):
        """Writes save_directory/ipu_config.json (atomically; the folder is created)."""
        core.ipu_config_save(self._values, os.fspath(save_directory))

    def to_dict(self):
        return copy.deepcopy(self._values)

    def to_json_string(self, use_diff=False):
        return json.dumps(self._values, indent=2, sort_keys=True) + "\n"

    def update_from_string(self, update_str):
        """optimum's ipu_config_overrides: "device_iterations=4,layers_per_ipu=[1 3]"."""
        object.__setattr__(self, "_values", core.ipu_config_update(self._values, update_str))

    def layers_per_stage(self, num_layers):
        """Kiln's own: layers_per_ipu with its -1 wildcards filled for a model of num_layers layers."""
        return core.ipu_layers_per_stage(self._values, num_layers)

    # ---- optimum's training / inference modes --------------------------------------------------
    def train(self):
        object.__setattr__(self, "_mode", "training")
        return self

    def eval(self):
        object.__setattr__(self, "_mode", "inference")
        return self

    @property
    def mode(self):
        return self._mode

    # ---- Attributes ------------------------------------------------------------------------------
    def __getattr__(self, name):
        values = self.__dict__.get("_values")
        if values is None:
            raise AttributeError(name)
        if name.startswith("_") and name[1:] in values:  # optimum's managed attributes (_layers_per_ipu)
            inference = f"inference_{name[1:]}"
            return values[inference] if self._mode == "inference" and inference in values else values[name[1:]]
        if name in values:
            return values[name]
        raise AttributeError(f"'IPUConfig' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError(f"IPUConfig has no field '{name}'")
        values = dict(self._values)
        values[name] = _plain(value)
        object.__setattr__(self, "_values", core.ipu_config_resolve(values))

    def __eq__(self, other):
        return isinstance(other, IPUConfig) and self._values == other._values

    def __repr__(self):
        return f"IPUConfig {self.to_json_string()}"


class IPUTrainingArguments(TrainingArguments):
    """optimum.graphcore.IPUTrainingArguments: kiln.TrainingArguments with fp32 defaulting to False."""

    def __init__(self, output_dir=None, **kwargs):
        kwargs.setdefault("fp32", False)
        super().__init__(output_dir, **kwargs)


class IPUSeq2SeqTrainingArguments(Seq2SeqFields, IPUTrainingArguments):
    """optimum.graphcore.IPUSeq2SeqTrainingArguments: IPUTrainingArguments with transformers'
    Seq2SeqTrainingArguments fields (predict_with_generate: kiln/seq2seq_trainer.py)."""


class IPUTrainer(Trainer):
    """optimum.graphcore.IPUTrainer: kiln.Trainer run under an IPUConfig (passed to the C++ Trainer with
    the arguments), with optimum's eval_data_collator for evaluation and prediction batches."""

    def __init__(self, model=None, ipu_config=None, args=None, data_collator=None, eval_data_collator=None,
                 train_dataset=None, eval_dataset=None, tokenizer=None, compute_metrics=None, callbacks=None,
                 optimizers=(None, None), preprocess_logits_for_metrics=None, force_to_pipelined=False, **kwargs):
        if ipu_config is None:
            raise TypeError("IPUTrainer needs an ipu_config (an IPUConfig, a dict, or a path to ipu_config.json)")
        if not isinstance(ipu_config, IPUConfig):
            ipu_config = IPUConfig.from_pretrained(ipu_config)
        if args is None:
            args = IPUTrainingArguments(output_dir="trainer_output")
        if args.ipu_config_overrides:  # optimum applies the overrides to the trainer's config
            ipu_config = IPUConfig.from_dict(ipu_config.to_dict())
            ipu_config.update_from_string(args.ipu_config_overrides)
        run_args = copy.copy(args)
        values = args.to_dict()
        values.update(ipu_config_name=ipu_config.to_json_string(), ipu_config_overrides=None)
        base = {k: v for k, v in values.items() if k in set(core.TrainingArguments.option_names())}
        run_args._set_core(core.TrainingArguments(base))
        self.ipu_config = ipu_config
        super().__init__(model=model, args=run_args, data_collator=data_collator, train_dataset=train_dataset,
                         eval_dataset=eval_dataset, tokenizer=tokenizer, compute_metrics=compute_metrics,
                         callbacks=callbacks, optimizers=optimizers,
                         preprocess_logits_for_metrics=preprocess_logits_for_metrics,
                         eval_data_collator=eval_data_collator, **kwargs)
        self.args = args  # the user's object, as optimum keeps it


class IPUSeq2SeqTrainer(Seq2SeqTrainer, IPUTrainer):
    """optimum.graphcore.IPUSeq2SeqTrainer: IPUTrainer with Seq2SeqTrainer's generation in evaluate /
    predict (predict_with_generate runs HF's Python evaluation loop, which pipelined and distributed
    runs refuse)."""


def _plain(value):
    """Tuples as lists, numpy scalars as Python numbers: what JSON holds."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value
