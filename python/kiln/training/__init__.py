"""onnxruntime.training's names, over Kiln: `api` (CheckpointState, Module, Optimizer,
LinearLRScheduler), `artifacts` (generate_artifacts, LossType, OptimType), `onnxblock` (custom
losses) and `ortmodule` (ORTModule, DebugOptions, LogLevel; `kiln.training.ORTModule` too).
Submodules load on first use, so `onnxblock` needs no compiled core and only `ortmodule` needs torch."""
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and linters only: at run time __getattr__ imports them lazily
    from . import api, artifacts, onnxblock, ortmodule
    from .ortmodule import ORTModule

__all__ = ["api", "artifacts", "onnxblock", "ortmodule", "ORTModule"]


def __getattr__(name):
    if name == "ORTModule":
        return importlib.import_module(f"{__name__}.ortmodule").ORTModule
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
