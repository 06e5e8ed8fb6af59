"""Optimizer, as onnxruntime.training.api.Optimizer."""
from __future__ import annotations

import os

from kiln._core import core
from kiln.training.api._args import float_arg, path_arg
from kiln.training.api.module import Module


class Optimizer:
    """Updates the module's trainable parameters from their gradients with the optimizer model
    (AdamW or SGD, torch.optim's exact update), in place."""

    def __init__(self, optimizer_uri: str | os.PathLike, module: Module, shard=None):
        """`shard` (Kiln's own, for ZeRO): the (parameter, begin, end) element ranges this process
        updates, kiln.distributed.DataParallel.owned_ranges(); None updates every parameter."""
        if not isinstance(module, Module):
            raise TypeError(f"module must be a Module, not {type(module).__name__}")
        if shard is not None:
            shard = [(str(name), int(begin), int(end)) for name, begin, end in shard]
        self._optimizer = core.Optimizer(path_arg(optimizer_uri, "optimizer_uri"), module._model, shard)
        self._module = module

    def step(self) -> None:
        self._optimizer.step()

    def set_learning_rate(self, learning_rate: float) -> None:
        lr = float_arg(learning_rate, "learning_rate")
        if not lr >= 0:
            raise ValueError(f"learning_rate must be >= 0, got {learning_rate}")
        self._optimizer.set_learning_rate(lr)

    def get_learning_rate(self) -> float:
        return self._optimizer.get_learning_rate()
