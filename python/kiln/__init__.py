"""Kiln: train ONNX models natively.

    from kiln.training import api, artifacts, onnxblock   # onnxruntime.training's names
    import kiln.backend                                    # onnx.backend over Kiln
    from kiln import Trainer, TrainingArguments            # transformers' Trainer API

The compiled core (kiln._kiln) is loaded by the modules that need it, so pure-Python parts such as
onnxblock import without it.
"""
from kiln.errors import (  # noqa: F401
    CorruptFile,
    DTypeError,
    InvalidArgument,
    InvalidModel,
    KilnError,
    KilnIOError,
    KilnKeyError,
    ShapeError,
    Unsupported,
)

__all__ = ["CorruptFile", "DTypeError", "InvalidArgument", "InvalidModel", "KilnError", "KilnIOError",
           "KilnKeyError", "ShapeError", "Unsupported"]
__version__ = "0.1.0"

# Hugging Face's Trainer API, loaded on first use (it needs the compiled core).
_LAZY = {
    "TrainingArguments": "kiln.training_args",
    "Trainer": "kiln.trainer",
    "ORTTrainer": "kiln.ort_trainer",
    "ORTTrainingArguments": "kiln.ort_trainer",
    "TrainerCallback": "kiln.trainer_callback",
    "TrainerState": "kiln.trainer_callback",
    "TrainerControl": "kiln.trainer_callback",
    "CallbackHandler": "kiln.trainer_callback",
    "DefaultFlowCallback": "kiln.trainer_callback",
    "ProgressCallback": "kiln.trainer_callback",
    "PrinterCallback": "kiln.trainer_callback",
    "EarlyStoppingCallback": "kiln.trainer_callback",
    "TensorBoardCallback": "kiln.trainer_callback",
    "EvalPrediction": "kiln.trainer_utils",
    "TrainOutput": "kiln.trainer_utils",
    "PredictionOutput": "kiln.trainer_utils",
    "EvalLoopOutput": "kiln.trainer_utils",
    "IntervalStrategy": "kiln.trainer_utils",
    "SaveStrategy": "kiln.trainer_utils",
    "set_seed": "kiln.trainer_utils",
    "default_data_collator": "kiln.trainer_data",
    "HfArgumentParser": "kiln.hf_argparser",
    "DataCollatorWithPadding": "kiln.data_collator",
    "DataCollatorForLanguageModeling": "kiln.data_collator",
    "DataCollatorForSeq2Seq": "kiln.data_collator",
    "Seq2SeqTrainer": "kiln.seq2seq_trainer",
    "Seq2SeqTrainingArguments": "kiln.seq2seq_trainer",
    "ORTSeq2SeqTrainer": "kiln.seq2seq_trainer",
    "ORTSeq2SeqTrainingArguments": "kiln.seq2seq_trainer",
    "GenerationConfig": "kiln.generation",
    "generate": "kiln.generation",
    "Dataset": "kiln.data",
    "TensorDataset": "kiln.data",
    "AutoBackbone": "kiln.nn.backbone",
    "AutoConfig": "kiln.nn.pretrained",
    "AutoModel": "kiln.nn.pretrained",
    "AutoModelForSequenceClassification": "kiln.nn.pretrained",
    "AutoModelForCausalLM": "kiln.nn.pretrained",
    "AutoModelForSeq2SeqLM": "kiln.nn.pretrained",
    "AutoModelForImageClassification": "kiln.nn.pretrained",
    "BestRun": "kiln.hp_search",
    "IPUConfig": "kiln.graphcore",
    "IPUTrainer": "kiln.graphcore",
    "IPUTrainingArguments": "kiln.graphcore",
    "IPUSeq2SeqTrainer": "kiln.graphcore",
    "IPUSeq2SeqTrainingArguments": "kiln.graphcore",
}
__all__ += list(_LAZY)


_SUBMODULES = ("nn", "data", "data_collator", "training", "backend", "distributed", "graphcore")


def __getattr__(name):
    if name in _SUBMODULES:  # `import kiln` then kiln.nn, as torch.nn after `import torch`
        import importlib
        return importlib.import_module(f"kiln.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kiln' has no attribute '{name}'")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
