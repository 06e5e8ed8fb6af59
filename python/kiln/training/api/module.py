"""Module, as onnxruntime.training.api.Module: runs the training or eval model over a
CheckpointState's parameters."""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from kiln._core import core
from kiln.training.api._args import bool_arg, float_arg, path_arg
from kiln.training.api.checkpoint_state import CheckpointState


class Module:
    """Trains (train mode: forward, loss and gradients, accumulated until lazy_reset_grad) or
    evaluates (eval mode) a model from its training artifacts.

    Args:
        train_model_uri: the training model (kiln.training.artifacts.generate_artifacts).
        state: the CheckpointState holding the parameters.
        eval_model_uri: the eval model, needed for eval mode and export_model_for_inferencing.
        device: "cpu".
        session_options: ignored apart from `intra_op_num_threads` when it has one (ORT's).
    """

    training: bool

    def __init__(self, train_model_uri: str | os.PathLike, state: CheckpointState,
                 eval_model_uri: str | os.PathLike | None = None, device: str = "cpu", session_options=None,
                 providers=None, provider_options=None):
        if not isinstance(state, CheckpointState):
            raise TypeError(f"state must be a CheckpointState, not {type(state).__name__}")
        if not isinstance(device, str):
            raise TypeError(f"device must be a str, not {type(device).__name__}")
        if device.lower() != "cpu":
            raise ValueError(f"device '{device}': Kiln trains on 'cpu' only for now")
        threads = getattr(session_options, "intra_op_num_threads", 0) or 0
        eval_path = None if eval_model_uri is None else path_arg(eval_model_uri, "eval_model_uri")
        self._model = core.Module(path_arg(train_model_uri, "train_model_uri"), state._state, eval_path, "cpu",
                                  int(threads))
        self._state = state
        self.training = True

    def __call__(self, *user_inputs: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
        """Runs the model on the user inputs (numpy arrays, in input_names() order); returns the
        single output, or a tuple of them."""
        for i, x in enumerate(user_inputs):
            if not isinstance(x, np.ndarray):
                raise TypeError(f"input {i} must be a numpy array, not {type(x).__name__}")
        outputs = self._model.run(list(user_inputs), self.training)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def train(self, mode: bool = True) -> "Module":
        self.training = bool_arg(mode, "mode")
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def lazy_reset_grad(self) -> None:
        """The next training call overwrites the gradients instead of adding to them."""
        self._model.lazy_reset_grad()

    def get_contiguous_parameters(self, trainable_only: bool = False) -> np.ndarray:
        return self._model.get_contiguous_parameters(bool_arg(trainable_only, "trainable_only"))

    def get_parameters_size(self, trainable_only: bool = True) -> int:
        return self._model.get_parameters_size(bool_arg(trainable_only, "trainable_only"))

    def copy_buffer_to_parameters(self, buffer: np.ndarray, trainable_only: bool = True) -> None:
        if not isinstance(buffer, np.ndarray):
            raise TypeError(f"buffer must be a numpy array, not {type(buffer).__name__}")
        self._model.copy_buffer_to_parameters(buffer, bool_arg(trainable_only, "trainable_only"))

    def export_model_for_inferencing(self, inference_model_uri: str | os.PathLike = "inference_model.onnx",
                                     graph_output_names: Sequence[str] | None = None,
                                     precision: str = "fp32") -> None:
        """Writes an inference model (standard ONNX ops, current parameters) computing
        `graph_output_names` (default: the eval model's outputs).

        `precision` (Kiln's keyword): "fp32" (the default) float32 throughout; "fp16" the whole
        graph in float16 with float32 inputs and outputs, as torch's model.half() exports it;
        "bf16" the parameters stored in bfloat16 and cast to float32 where read (ONNX Runtime's
        CPU provider has no bfloat16 kernels to compute with)."""
        if graph_output_names is None:
            graph_output_names = self._model.output_names(False)
        if isinstance(graph_output_names, str) or not all(isinstance(n, str) for n in graph_output_names):
            raise TypeError("graph_output_names must be a list of str")
        if not isinstance(precision, str):
            raise TypeError(f"precision must be a str, not {type(precision).__name__}")
        self._model.export_model_for_inferencing(path_arg(inference_model_uri, "inference_model_uri"),
                                                 list(graph_output_names), precision)

    def set_eval_precision(self, precision: str) -> None:
        """Kiln's: eval mode runs the whole eval model in "bf16" or "fp16" (Hugging Face's
        bf16_full_eval / fp16_full_eval), or in "fp32" again. The artifacts must be float32."""
        if not isinstance(precision, str):
            raise TypeError(f"precision must be a str, not {type(precision).__name__}")
        self._model.set_eval_precision(precision)

    @property
    def mixed_precision(self) -> str:
        """Kiln's: "bf16" or "fp16" for mixed-precision artifacts, else ""."""
        return self._model.mixed_precision()

    @property
    def loss_scale(self) -> float:
        """Kiln's: the scale an fp16 training model seeds its backward pass with (GradScaler sets
        it); 1.0 until set."""
        return self._model.loss_scale()

    @loss_scale.setter
    def loss_scale(self, value: float) -> None:
        self._model.set_loss_scale(float_arg(value, "loss_scale"))

    def input_names(self) -> list[str]:
        return self._model.input_names(self.training)

    def output_names(self) -> list[str]:
        return self._model.output_names(self.training)
