"""LinearLRScheduler, as onnxruntime.training.api.LinearLRScheduler."""
from kiln._core import core
from kiln.training.api._args import float_arg, int_arg
from kiln.training.api.optimizer import Optimizer


class LinearLRScheduler:
    """Linear warm-up from 0 to initial_lr over warmup_step_count steps, then linear decay to 0 at
    total_step_count. Call step() after each optimizer step."""

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int, initial_lr: float):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be an Optimizer, not {type(optimizer).__name__}")
        self._scheduler = core.LinearLRScheduler(optimizer._optimizer,
                                                 int_arg(warmup_step_count, "warmup_step_count", 0),
                                                 int_arg(total_step_count, "total_step_count", 0),
                                                 float_arg(initial_lr, "initial_lr"))

    def step(self) -> None:
        self._scheduler.step()
