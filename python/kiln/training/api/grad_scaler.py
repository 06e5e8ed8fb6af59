"""GradScaler: dynamic loss scaling for float16 training models (Kiln's addition to the
onnxruntime.training.api names), with torch.cuda.amp.GradScaler's semantics and method names.

    module = Module("art/training_model.onnx", state)   # generate_artifacts(..., mixed_precision="fp16")
    scaler = GradScaler(module)                        # the module's loss scale is now 65536
    for x, y in batches:
        loss = module(x, y)                            # gradients come out scaled
        scaler.step(optimizer)                         # unscales them; skips the update if not finite
        scaler.update()                                # grows or backs off the scale
        module.lazy_reset_grad()
"""
from __future__ import annotations

from kiln._core import core
from kiln.training.api._args import bool_arg, float_arg, int_arg
from kiln.training.api.module import Module
from kiln.training.api.optimizer import Optimizer


class GradScaler:
    """Scales an fp16 training model's loss by `init_scale` (2^16); before each update the
    gradients are divided back and checked, and an update whose gradients are not all finite is
    skipped, the scale multiplied by `backoff_factor`; after `growth_interval` finite updates in a
    row the scale is multiplied by `growth_factor`. `enabled=False` makes every method a pass-through
    (torch's convention for code that runs with and without fp16). `dynamic=False` (Kiln's keyword)
    keeps the scale fixed at `init_scale`, as IPUConfig's loss_scaling does, while still skipping
    updates whose gradients are not finite."""

    def __init__(self, module: Module, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True,
                 dynamic: bool = True):
        if not isinstance(module, Module):
            raise TypeError(f"module must be a Module, not {type(module).__name__}")
        self._enabled = bool_arg(enabled, "enabled")
        self._module = module
        self._scaler = core.GradScaler(float_arg(init_scale, "init_scale"), float_arg(growth_factor, "growth_factor"),
                                       float_arg(backoff_factor, "backoff_factor"),
                                       int_arg(growth_interval, "growth_interval"), bool_arg(dynamic, "dynamic"))
        self._found_inf = None  # this update's check, once unscale_ ran
        if self._enabled:
            if not module._model.scales_loss():
                raise ValueError("GradScaler: the training model takes no loss scale; generate its artifacts with "
                                 "mixed_precision=\"fp16\" (or pass enabled=False)")
            module.loss_scale = self._scaler.scale()

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scaler.scale() if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._scaler.state_dict()["growth_factor"]

    def get_backoff_factor(self) -> float:
        return self._scaler.state_dict()["backoff_factor"]

    def get_growth_interval(self) -> int:
        return self._scaler.state_dict()["growth_interval"]

    def unscale_(self, optimizer: Optimizer | None = None, factor: float = 1.0) -> bool:
        """Divides the module's accumulated gradients by the scale (and multiplies them by
        `factor`, 1 / accumulation steps say), once per update; returns whether any is inf or NaN.
        `optimizer` is accepted for torch's signature."""
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be an Optimizer, not {type(optimizer).__name__}")
        if not self._enabled:
            return False
        if self._found_inf is not None:
            raise RuntimeError("unscale_() has already been called since the last update()")
        self._found_inf = bool(self._scaler.unscale(self._module._model, float_arg(factor, "factor")))
        return self._found_inf

    def step(self, optimizer: Optimizer) -> bool:
        """Unscales the gradients (unless unscale_ did) and runs optimizer.step() when they are all
        finite; returns whether it stepped."""
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be an Optimizer, not {type(optimizer).__name__}")
        if not self._enabled:
            optimizer.step()
            return True
        if self._found_inf is None:
            self.unscale_()
        if self._found_inf:
            return False
        optimizer.step()
        return True

    def update(self, new_scale: float | None = None) -> None:
        """Backs off or grows the scale after this update's check (or sets `new_scale`), and gives
        the module the new scale."""
        if not self._enabled:
            return
        if new_scale is not None:
            state = self._scaler.state_dict()
            state["scale"] = float_arg(new_scale, "new_scale")
            self._scaler.load_state_dict(state)
        else:
            if self._found_inf is None:
                raise RuntimeError("update() needs this update's gradients checked: call step() or unscale_() first")
            self._scaler.update(self._found_inf)
        self._found_inf = None
        self._module.loss_scale = self._scaler.scale()

    def state_dict(self) -> dict:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker."""
        return self._scaler.state_dict() if self._enabled else {}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, not {type(state_dict).__name__}")
        self._scaler.load_state_dict(state_dict)
        self._module.loss_scale = self._scaler.scale()
