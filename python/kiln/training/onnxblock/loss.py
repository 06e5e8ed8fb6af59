"""Loss blocks with ONNX Runtime's names and call signatures and torch.nn's arithmetic.

Each loss takes the name of a model value and the name of its target (labels for
CrossEntropyLoss). A target name that is not yet in the model becomes a new graph input: float
targets take the input's type and shape, CrossEntropyLoss labels are int64 of shape [N, d1, ...].
A name that already is a graph input or a computed value is used as it is (ONNX Runtime does the
same; it lets two losses share a target, or compare two model outputs); a name that is a model
parameter, or a value of the wrong type, is an error.

reduction "mean" and "sum" give a scalar (torch's shape, not ONNX Runtime's [1, 1]); "none" gives
the per-element loss.
"""
from typing import Optional

import numpy as np
import onnx

from . import _model, blocks

_REDUCTIONS = ("mean", "sum", "none")


def _reduction_block(loss_name: str, reduction: str):
    """The block applying `reduction` (None for "none"); error naming the loss otherwise."""
    if reduction not in _REDUCTIONS:
        raise _model.OnnxBlockError(f"{loss_name}: reduction {reduction!r} is not supported; "
                                    "use 'mean', 'sum' or 'none'")
    return {"mean": lambda: blocks.ReduceMean(keepdims=False),
            "sum": lambda: blocks.ReduceSum(keepdims=False),
            "none": lambda: None}[reduction]()


def _as_array(value, what: str, loss_name: str):
    """A user weight (numpy array, list, torch tensor) as a numpy array."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.dtype.kind not in "fiu":
        raise _model.OnnxBlockError(f"{loss_name}: {what} must be numeric, got {array.dtype}")
    return array


class _Loss(blocks.Block):
    """Shared steps of the loss blocks: the target input and the reduction."""

    def _input_info(self, input_name: str):
        name = type(self).__name__
        _model.require_values(self.base, [input_name], name)
        info = _model.value_info(self.base, input_name)
        if info is None:
            raise _model.OnnxBlockError(f"{name}: the type of '{input_name}' is unknown (no value_info, and shape "
                                        "inference could not find it); declare it as a graph output")
        elem = info.type.tensor_type.elem_type
        if _model.np_dtype(elem).kind != "f":
            raise _model.OnnxBlockError(f"{name} needs a floating-point input, but '{input_name}' is "
                                        f"{_model.describe(info)}")
        return info

    def _target(self, input_name: str, input_info, target_name: str, labels: bool = False) -> str:
        """The name of the target value, adding a graph input when the model has none of that name."""
        name = type(self).__name__
        role = "labels" if labels else "target"
        if not isinstance(target_name, str) or not target_name:
            raise _model.OnnxBlockError(f"{name}: the {role} name must be a non-empty str, got {target_name!r}")
        if target_name == input_name:
            raise _model.OnnxBlockError(f"{name}: the {role} '{target_name}' is the loss input itself")
        kind = _model.kind_of(self.base, target_name)
        if kind == "initializer":
            raise _model.OnnxBlockError(
                f"{name}: {role} name '{target_name}' clashes with the model's initializer '{target_name}' "
                f"(a parameter); pass another {role} name")
        if kind is None:
            self.base.graph.input.append(self._new_target(target_name, input_info, labels))
            return target_name
        info = _model.value_info(self.base, target_name)
        if info is not None:
            elem = info.type.tensor_type.elem_type
            wanted_ok = elem in (onnx.TensorProto.INT32, onnx.TensorProto.INT64) if labels \
                else elem == input_info.type.tensor_type.elem_type
            if not wanted_ok:
                wanted = "int64 (or int32) class indices" if labels else _model.describe(input_info).split()[0]
                raise _model.OnnxBlockError(
                    f"{name}: {role} name '{target_name}' clashes with the model's {kind} '{target_name}', which is "
                    f"{_model.describe(info)}; the {role} must be {wanted}; pass another {role} name")
        return target_name

    @staticmethod
    def _new_target(target_name: str, input_info, labels: bool):
        target = onnx.ValueInfoProto()
        target.CopyFrom(input_info)
        target.name = target_name
        target.doc_string = ""
        tensor = target.type.tensor_type
        if labels:
            tensor.elem_type = onnx.TensorProto.INT64
            if tensor.HasField("shape"):
                del tensor.shape.dim[1]  # scores [N, C, d1...] -> labels [N, d1...]
        return target

    def _reduce(self, loss_name: str) -> str:
        return loss_name if self._reduce_block is None else self._reduce_block(loss_name)


class MSELoss(_Loss):
    """torch.nn.MSELoss: reduce((input - target)^2)."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self._reduce_block = _reduction_block("MSELoss", reduction)
        self._sub = blocks.Sub()
        self._mul = blocks.Mul()

    def build(self, loss_input_name: str, target_name: str = "target"):
        info = self._input_info(loss_input_name)
        target = self._target(loss_input_name, info, target_name)
        diff = self._sub(loss_input_name, target)
        return self._reduce(self._mul(diff, diff))


class L1Loss(_Loss):
    """torch.nn.L1Loss: reduce(|input - target|)."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self._reduce_block = _reduction_block("L1Loss", reduction)
        self._sub = blocks.Sub()
        self._abs = blocks.Abs()

    def build(self, loss_input_name: str, target_name: Optional[str] = "target"):
        info = self._input_info(loss_input_name)
        target = self._target(loss_input_name, info, target_name)
        return self._reduce(self._abs(self._sub(loss_input_name, target)))


class BCEWithLogitsLoss(_Loss):
    """torch.nn.BCEWithLogitsLoss: weight * (pos_weight * y * softplus(-x) + (1 - y) * softplus(x)).

    softplus(-x) = -log(sigmoid(x)) and softplus(x) = -log(1 - sigmoid(x)); written this way both
    terms are non-negative for targets in [0, 1], so nothing cancels, and Kiln's Softplus does not
    overflow: accurate to a few ulps where log(sigmoid(x)) would lose digits.
    `weight` broadcasts against the loss (torch: a weight per batch element); `pos_weight` against
    the last dimension (a weight per class).
    """

    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None):
        super().__init__()
        self._reduce_block = _reduction_block("BCEWithLogitsLoss", reduction)
        self._weight = None if weight is None else _as_array(weight, "weight", "BCEWithLogitsLoss")
        self._pos_weight = None if pos_weight is None else _as_array(pos_weight, "pos_weight", "BCEWithLogitsLoss")

    def build(self, loss_input_name: str, target_name: str = "target"):
        info = self._input_info(loss_input_name)
        y = self._target(loss_input_name, info, target_name)
        dtype = _model.np_dtype(info.type.tensor_type.elem_type)
        x = loss_input_name
        positive = blocks.Mul()(y, blocks.Softplus()(blocks.Neg()(x)))
        if self._pos_weight is not None:
            positive = blocks.Mul()(positive, self._constant(self._pos_weight, "bceloss.pos_weight", dtype))
        one_minus_y = blocks.Sub()(self._constant(1.0, "bceloss.one", dtype), y)
        negative = blocks.Mul()(one_minus_y, blocks.Softplus()(x))
        loss = blocks.Add()(positive, negative)
        if self._weight is not None:
            loss = blocks.Mul()(loss, self._constant(self._weight, "bceloss.weight", dtype))
        return self._reduce(loss)


class CrossEntropyLoss(_Loss):
    """torch.nn.CrossEntropyLoss over scores [N, C, d1...] and int64 labels [N, d1...], as ONNX's
    SoftmaxCrossEntropyLoss: `weight` [C] rescales each class ("mean" divides by the summed
    weights of the counted labels); labels equal to `ignore_index` count for nothing."""

    _MIN_OPSET = 12  # SoftmaxCrossEntropyLoss

    def __init__(self, weight=None, reduction: str = "mean", ignore_index: Optional[int] = None):
        super().__init__()
        _reduction_block("CrossEntropyLoss", reduction)  # validates
        self._reduction = reduction
        self._weight = None if weight is None else _as_array(weight, "weight", "CrossEntropyLoss")
        if self._weight is not None and self._weight.ndim != 1:
            raise _model.OnnxBlockError(f"CrossEntropyLoss: weight must be 1-D (one per class), got shape "
                                        f"{list(self._weight.shape)}")
        self._ignore_index = None if ignore_index is None else int(ignore_index)

    def build(self, scores_input_name: str, labels_name: str = "labels"):
        opset = _model.opset_version(self.base)
        if opset < self._MIN_OPSET:
            raise _model.OnnxBlockError(f"CrossEntropyLoss needs opset {self._MIN_OPSET} or newer "
                                        f"(SoftmaxCrossEntropyLoss); model '{self.base.graph.name}' imports {opset}")
        info = self._input_info(scores_input_name)
        dims = info.type.tensor_type.shape.dim if info.type.tensor_type.HasField("shape") else None
        if dims is not None and len(dims) < 2:
            raise _model.OnnxBlockError(f"CrossEntropyLoss needs scores of shape [N, C, ...], but "
                                        f"'{scores_input_name}' is {_model.describe(info)}")
        if self._weight is not None and dims is not None and dims[1].HasField("dim_value") \
                and dims[1].dim_value != self._weight.shape[0]:
            raise _model.OnnxBlockError(f"CrossEntropyLoss: weight has {self._weight.shape[0]} entries but "
                                        f"'{scores_input_name}' ({_model.describe(info)}) has "
                                        f"{dims[1].dim_value} classes")
        labels = self._target(scores_input_name, info, labels_name, labels=True)
        inputs = [scores_input_name, labels]
        if self._weight is not None:
            dtype = _model.np_dtype(info.type.tensor_type.elem_type)
            inputs.append(self._constant(self._weight, "celoss.weight", dtype))
        return self._node("SoftmaxCrossEntropyLoss", inputs, token="loss", reduction=self._reduction,
                          ignore_index=self._ignore_index)


__all__ = ["MSELoss", "L1Loss", "BCEWithLogitsLoss", "CrossEntropyLoss"]
