"""Hugging Face's trainer_utils results: EvalPrediction, TrainOutput, PredictionOutput, EvalLoopOutput."""
from typing import Dict, NamedTuple, Optional, Tuple, Union

import numpy as np


class EvalPrediction:
    """What compute_metrics receives: predictions (the logits, or what preprocess_logits_for_metrics
    made of them) and label_ids, numpy arrays over the whole evaluation set. Unpacks as HF's:
    `predictions, labels = eval_pred`. inputs (the model's main input) and losses (each example's
    batch loss) are there when TrainingArguments.include_for_metrics names them ("inputs", "loss"),
    and then unpack too, as HF's do; else None."""

    def __init__(self, predictions, label_ids, inputs=None, losses=None):
        self.predictions = predictions
        self.label_ids = label_ids
        self.inputs = inputs
        self.losses = losses
        self.elements = (self.predictions, self.label_ids)
        if self.inputs is not None:
            self.elements += (self.inputs,)
        if self.losses is not None:
            self.elements += (self.losses,)

    def __iter__(self):
        return iter(self.elements)

    def __getitem__(self, idx):
        if idx < 0 or idx >= len(self.elements):
            raise IndexError("tuple index out of range")
        return self.elements[idx]

    def __len__(self):
        return len(self.elements)


class TrainOutput(NamedTuple):
    global_step: int
    training_loss: float
    metrics: Dict[str, float]


class PredictionOutput(NamedTuple):
    predictions: Union[np.ndarray, Tuple[np.ndarray]]
    label_ids: Optional[Union[np.ndarray, Tuple[np.ndarray]]]
    metrics: Optional[Dict[str, float]]


class EvalLoopOutput(NamedTuple):
    """What evaluation_loop returns (HF's)."""
    predictions: Optional[Union[np.ndarray, Tuple[np.ndarray]]]
    label_ids: Optional[Union[np.ndarray, Tuple[np.ndarray]]]
    metrics: Optional[Dict[str, float]]
    num_samples: Optional[int]


class IntervalStrategy:
    """HF's strategy names, for scripts that pass IntervalStrategy.STEPS."""
    NO = "no"
    STEPS = "steps"
    EPOCH = "epoch"


class SaveStrategy(IntervalStrategy):
    BEST = "best"


def set_seed(seed, deterministic=False):
    """HF's set_seed: seeds numpy's global generator (Kiln's own draws are seeded by
    TrainingArguments.seed)."""
    del deterministic
    np.random.seed(seed)
