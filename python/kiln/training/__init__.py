"""onnxruntime.training's on-device training names, over Kiln: `api` (CheckpointState, Module,
Optimizer, LinearLRScheduler), `artifacts` (generate_artifacts, LossType, OptimType) and
`onnxblock` (custom losses). Submodules load on first use, so `onnxblock` needs no compiled core."""
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and linters only: at run time __getattr__ imports them lazily
    from . import api, artifacts, onnxblock

__all__ = ["api", "artifacts", "onnxblock"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
