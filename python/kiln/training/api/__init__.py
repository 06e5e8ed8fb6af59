"""A drop-in for onnxruntime.training.api: change the import, keep the code.

    from kiln.training.api import CheckpointState, Module, Optimizer, LinearLRScheduler

GradScaler (dynamic loss scaling for fp16 artifacts) is Kiln's addition.
"""
from kiln.training.api.checkpoint_state import CheckpointState, Parameter, Parameters, Properties
from kiln.training.api.grad_scaler import GradScaler
from kiln.training.api.lr_scheduler import LinearLRScheduler
from kiln.training.api.module import Module
from kiln.training.api.optimizer import Optimizer

__all__ = ["CheckpointState", "Parameter", "Parameters", "Properties", "Module", "Optimizer", "LinearLRScheduler",
           "GradScaler"]
