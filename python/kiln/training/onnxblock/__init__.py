"""kiln.training.onnxblock: ONNX Runtime's onnxblock for writing custom losses.

    from kiln.training import artifacts, onnxblock

    class WeightedAverageLoss(onnxblock.Block):
        def __init__(self):
            self._loss1 = onnxblock.loss.MSELoss()
            self._loss2 = onnxblock.loss.MSELoss()
            self._w1 = onnxblock.blocks.Constant(0.4)
            self._w2 = onnxblock.blocks.Constant(0.6)
            self._add = onnxblock.blocks.Add()
            self._mul = onnxblock.blocks.Mul()

        def build(self, loss_input_name1, loss_input_name2):
            return self._add(self._mul(self._w1(), self._loss1(loss_input_name1, target_name="target1")),
                             self._mul(self._w2(), self._loss2(loss_input_name2, target_name="target2")))

    artifacts.generate_artifacts(model, loss=WeightedAverageLoss(), optimizer=artifacts.OptimType.AdamW)

Blocks only add forward nodes; Kiln's C++ generator builds the gradient graph from the model that
`build_loss_model` returns (ONNX Runtime's TrainingBlock builds it in Python).
"""
import os
from typing import List, Tuple

import onnx

from . import _model, blocks, loss
from ._model import OnnxBlockError, base, empty_base
from .blocks import Block


def _output_names(output, requester: str) -> List[str]:
    names = [output] if isinstance(output, str) else list(output) if isinstance(output, (list, tuple)) else None
    if not names or not all(isinstance(n, str) and n for n in names):
        raise OnnxBlockError(f"{requester}.build must return an output name or a non-empty list/tuple of names, "
                             f"got {output!r}")
    if len(set(names)) != len(names):
        raise OnnxBlockError(f"{requester}.build returned a name twice: {names}")
    return names


def _register_outputs(model: onnx.ModelProto, output, requester: str) -> List[str]:
    """Makes the block's output(s) the model's graph outputs, in order (the first is the loss)."""
    names = _output_names(output, requester)
    _model.require_values(model, names, requester)
    infos = []
    for name in names:
        info = _model.value_info(model, name)
        if info is None:
            raise OnnxBlockError(f"{requester}: the type of output '{name}' is unknown (ONNX shape inference "
                                 "could not find it)")
        clone = onnx.ValueInfoProto()
        clone.CopyFrom(info)
        infos.append(clone)
    del model.graph.output[:]
    model.graph.output.extend(infos)
    return names


class ForwardBlock(Block):
    """A block whose output(s) become the graph outputs; `to_model_proto()` returns that model."""

    def __init__(self):
        super().__init__()
        self._model = None

    def to_model_proto(self) -> onnx.ModelProto:
        if self._model is None:
            raise OnnxBlockError(f"{type(self).__name__}: call the block inside onnxblock.base(model) before "
                                 "to_model_proto()")
        return self._model

    def __call__(self, *args, **kwargs):
        self.base = _model.current_model(type(self).__name__)
        output = self.build(*args, **kwargs)
        _register_outputs(self.base, output, type(self).__name__)
        self._model = onnx.ModelProto()
        self._model.CopyFrom(self.base)
        return output


class TrainingBlock(Block):
    """A block whose first output is the loss; `requires_grad` chooses the trained parameters.

    Calling it (inside onnxblock.base) makes its output(s) the graph outputs and records the
    parameters; `parameters()` then returns (trainable, frozen) initializers as ONNX Runtime does.
    The gradient graph is built by kiln.training.artifacts.generate_artifacts, not here.
    """

    def __init__(self):
        super().__init__()
        self._requires_grad = {}  # dicts as ordered sets: the order is the checkpoint's order
        self._frozen_params = {}
        self._parameters = None

    def _state(self, key):
        # Subclasses written for ONNX Runtime may not call super().__init__().
        return self.__dict__.setdefault(key, {} if key != "_parameters" else None)

    def requires_grad(self, argument_name: str, value: bool = True):
        """Marks parameter `argument_name` as trainable (value=True) or frozen (value=False)."""
        if not isinstance(argument_name, str) or not argument_name:
            raise OnnxBlockError(f"requires_grad: the parameter name must be a non-empty str, got {argument_name!r}")
        trainable, frozen = self._state("_requires_grad"), self._state("_frozen_params")
        (trainable if value else frozen)[argument_name] = None
        (frozen if value else trainable).pop(argument_name, None)

    def parameters(self) -> Tuple[List[onnx.TensorProto], List[onnx.TensorProto]]:
        """(trainable, frozen) initializers named by requires_grad; RuntimeError before the block ran."""
        if self._state("_parameters") is None:
            raise OnnxBlockError(f"{type(self).__name__}: call the block inside onnxblock.base(model) (or pass it to "
                                 "generate_artifacts) before asking for its parameters")
        return self._parameters

    def to_model_proto(self):
        raise NotImplementedError(
            "Kiln builds the training and eval models in C++: use kiln.training.artifacts.generate_artifacts(model, "
            "loss=<this block>, ...), or onnxblock.build_loss_model(model, block) for the forward model with the loss")

    def __call__(self, *args, **kwargs):
        self.base = _model.current_model(type(self).__name__)
        output = self.build(*args, **kwargs)
        _register_outputs(self.base, output, type(self).__name__)
        trainable, frozen = self._state("_requires_grad"), self._state("_frozen_params")
        initializers = self.base.graph.initializer
        self._parameters = ([t for t in initializers if t.name in trainable],
                            [t for t in initializers if t.name in frozen])
        return output


class _LossTrainingBlock(TrainingBlock):
    """Wraps a plain Block (or ForwardBlock) given as a loss, as ONNX Runtime's generate_artifacts does."""

    def __init__(self, inner: Block):
        super().__init__()
        self._inner = inner

    def build(self, *inputs_to_loss):
        return self._inner(*inputs_to_loss)


def gradient_settings(block: Block) -> Tuple[List[str], List[str]]:
    """(requires_grad, frozen_params) names set on a TrainingBlock with requires_grad(), in the order
    given; ([], []) for other blocks."""
    if not isinstance(block, TrainingBlock):
        return [], []
    return list(block._state("_requires_grad")), list(block._state("_frozen_params"))


def build_loss_model(model, block: Block) -> Tuple[onnx.ModelProto, str]:
    """Applies `block` to a copy of `model`, the model's graph outputs as its arguments in order,
    and returns (model, loss output name). The returned model's outputs are the block's: the loss,
    then any other names its build() returned; targets and labels are new graph inputs. The model
    passes onnx.checker.check_model(full_check=True)."""
    if isinstance(model, (str, bytes, os.PathLike)):
        model = onnx.load(os.fspath(model))
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"build_loss_model: model must be an onnx.ModelProto or a path, got {type(model).__name__}")
    if not isinstance(block, Block):
        raise TypeError(f"build_loss_model: the loss must be an onnxblock.Block, got {type(block).__name__}")
    if not model.graph.output:
        raise OnnxBlockError(f"build_loss_model: model '{model.graph.name}' has no graph outputs for the loss to read")
    name = type(block).__name__
    training_block = block if isinstance(block, TrainingBlock) else _LossTrainingBlock(block)
    with base(model) as handle:
        output = training_block(*[o.name for o in model.graph.output])
        result = handle.model
    names = _output_names(output, name)
    loss_info = _model.value_info(result, names[0])
    if _model.np_dtype(loss_info.type.tensor_type.elem_type).kind != "f":
        raise OnnxBlockError(f"{name}: the loss '{names[0]}' is {_model.describe(loss_info)}, not floating-point")
    try:
        onnx.checker.check_model(result, full_check=True)
    except onnx.checker.ValidationError as e:
        raise OnnxBlockError(f"{name}: the model with the loss fails ONNX's checker: {e}") from e
    except onnx.shape_inference.InferenceError as e:
        raise OnnxBlockError(f"{name}: the model with the loss fails ONNX's shape inference: {e}") from e
    return result, names[0]


def custom_op_library(custom_op_library_path):
    """ONNX Runtime loads custom-op libraries here; Kiln cannot run ONNX Runtime's custom ops."""
    raise NotImplementedError(f"kiln.training.onnxblock.custom_op_library({custom_op_library_path!r}): Kiln does not "
                              "load ONNX Runtime custom-op libraries")


__all__ = ["Block", "ForwardBlock", "TrainingBlock", "base", "blocks", "build_loss_model", "custom_op_library",
           "empty_base", "gradient_settings", "loss", "OnnxBlockError"]
