"""A drop-in for onnxruntime.training.api: change the import, keep the code.

    from kiln.training.api import CheckpointState, Module, Optimizer, LinearLRScheduler
"""
from kiln.training.api.checkpoint_state import CheckpointState, Parameter, Parameters, Properties
from kiln.training.api.lr_scheduler import LinearLRScheduler
from kiln.training.api.module import Module
from kiln.training.api.optimizer import Optimizer

__all__ = ["CheckpointState", "Parameter", "Parameters", "Properties", "Module", "Optimizer", "LinearLRScheduler"]
