"""Building blocks: each appends ONNX nodes to the current base model and returns output names.

The names, constructor arguments and `build` signatures are ONNX Runtime's
(onnxruntime.training.onnxblock.blocks). Two deliberate differences, both so that Kiln's artifact
generator sees what the user meant:
- constants (Constant, Pow's exponent, Clip's bounds, loss weights) are Constant nodes, not
  initializers: Kiln trains every floating-point initializer that reaches the loss by default, and a
  loss weight is not a parameter;
- Constant is a float scalar (ONNX Runtime: shape [1]), so a weighted sum of scalar losses stays a
  scalar, as torch's losses are.
"""
from abc import ABC, abstractmethod
from typing import Optional

import numpy as np
import onnx
import onnx.numpy_helper

from . import _model


class Block(ABC):
    """Base class of all blocks. Subclasses implement `build(*names)`, which edits `self.base`
    (the current model) and returns the name(s) of its output(s); calling the block runs `build`
    on the model registered by `onnxblock.base(model)` / `onnxblock.empty_base()`."""

    def __init__(self):
        self.base = None

    @abstractmethod
    def build(self, *args, **kwargs):
        """Adds this block's nodes on top of the named inputs; returns the output name(s)."""

    def __call__(self, *args, **kwargs):
        # Subclasses written for ONNX Runtime often skip super().__init__(): set base here.
        self.base = _model.current_model(type(self).__name__)
        return self.build(*args, **kwargs)

    # Helpers for subclasses: emit one node / one constant into the current model.
    def _node(self, op_type: str, inputs, token: Optional[str] = None, **attributes) -> str:
        _model.require_values(self.base, inputs, type(self).__name__)
        token = token or op_type.lower()
        output = _model.fresh_name(self.base, f"{token}_output")
        node = onnx.helper.make_node(op_type, list(inputs), [output], name=_model.fresh_name(self.base, op_type),
                                     **{k: v for k, v in attributes.items() if v is not None})
        self.base.graph.node.append(node)
        return output

    def _constant(self, value, token: str, dtype=np.float32) -> str:
        array = np.asarray(value, dtype=dtype)
        output = _model.fresh_name(self.base, token)
        self.base.graph.node.append(onnx.helper.make_node(
            "Constant", [], [output], name=_model.fresh_name(self.base, "Constant"),
            value=onnx.numpy_helper.from_array(array, output)))
        return output

    def _dtype_of(self, name: str, default=np.float32):
        """The numpy dtype of value `name` when known (constants then match it), else `default`."""
        info = _model.value_info(self.base, name)
        return _model.np_dtype(info.type.tensor_type.elem_type) if info is not None else np.dtype(default)


class _UnaryOp(Block):
    """One node of `op_name` on one input."""

    def __init__(self, op_name: str):
        super().__init__()
        self._op_name = op_name

    def build(self, input_name: str):
        return self._node(self._op_name, [input_name])


class _BinaryOp(Block):
    """One node of `op_name` on two inputs (numpy broadcasting, as ONNX defines it)."""

    def __init__(self, op_name: str):
        super().__init__()
        self._op_name = op_name

    def build(self, input_name1: str, input_name2: str):
        return self._node(self._op_name, [input_name1, input_name2])


class Add(_BinaryOp):
    """Adds a Add node to the model."""

    def __init__(self):
        super().__init__("Add")


class Sub(_BinaryOp):
    """Adds a Sub node to the model."""

    def __init__(self):
        super().__init__("Sub")


class Mul(_BinaryOp):
    """Adds a Mul node to the model."""

    def __init__(self):
        super().__init__("Mul")


class Div(_BinaryOp):
    """Adds a Div node to the model."""

    def __init__(self):
        super().__init__("Div")


class MatMul(_BinaryOp):
    """Adds a MatMul node to the model."""

    def __init__(self):
        super().__init__("MatMul")


class Neg(_UnaryOp):
    """Adds a Neg node to the model."""

    def __init__(self):
        super().__init__("Neg")


class Abs(_UnaryOp):
    """Adds a Abs node to the model."""

    def __init__(self):
        super().__init__("Abs")


class Sigmoid(_UnaryOp):
    """Adds a Sigmoid node to the model."""

    def __init__(self):
        super().__init__("Sigmoid")


class Log(_UnaryOp):
    """Adds a Log node to the model."""

    def __init__(self):
        super().__init__("Log")


class Exp(_UnaryOp):
    """Adds a Exp node to the model."""

    def __init__(self):
        super().__init__("Exp")


class Sqrt(_UnaryOp):
    """Adds a Sqrt node to the model."""

    def __init__(self):
        super().__init__("Sqrt")


class Relu(_UnaryOp):
    """Adds a Relu node to the model."""

    def __init__(self):
        super().__init__("Relu")


class Tanh(_UnaryOp):
    """Adds a Tanh node to the model."""

    def __init__(self):
        super().__init__("Tanh")


class Softplus(_UnaryOp):
    """Adds a Softplus node to the model."""

    def __init__(self):
        super().__init__("Softplus")


class Reciprocal(_UnaryOp):
    """Adds a Reciprocal node to the model."""

    def __init__(self):
        super().__init__("Reciprocal")


class Identity(_UnaryOp):
    """Adds a Identity node to the model."""

    def __init__(self):
        super().__init__("Identity")


# Opset from which the reduction takes `axes` as an input instead of an attribute.
_AXES_AS_INPUT_SINCE = {"ReduceSum": 13, "ReduceMean": 18}


class _Reduce(Block):
    """A reduction over `axes` (all when None). ONNX Runtime's blocks take no arguments and keep
    the reduced dimensions (ONNX's default); the loss blocks pass keepdims=False for a scalar."""

    def __init__(self, op_name: str, axes=None, keepdims: bool = True):
        super().__init__()
        self._op_name = op_name
        self._axes = None if axes is None else [int(a) for a in axes]
        self._keepdims = int(bool(keepdims))

    def build(self, input_name: str):
        inputs = [input_name]
        attributes = {"keepdims": self._keepdims}
        if self._axes is not None:
            if _model.opset_version(self.base) >= _AXES_AS_INPUT_SINCE[self._op_name]:
                inputs.append(self._constant(self._axes, "axes", dtype=np.int64))
            else:
                attributes["axes"] = self._axes
        return self._node(self._op_name, inputs, **attributes)


class ReduceMean(_Reduce):
    """Adds a ReduceMean node to the model."""

    def __init__(self, axes=None, keepdims: bool = True):
        super().__init__("ReduceMean", axes, keepdims)


class ReduceSum(_Reduce):
    """Adds a ReduceSum node to the model."""

    def __init__(self, axes=None, keepdims: bool = True):
        super().__init__("ReduceSum", axes, keepdims)


class Pow(Block):
    """Raises the input to a constant float `exponent`."""

    def __init__(self, exponent):
        super().__init__()
        self._exponent = exponent

    def build(self, pow_input_name: str):
        exponent = self._constant(self._exponent, "pow_exponent")
        return self._node("Pow", [pow_input_name, exponent])


class Constant(Block):
    """A float32 scalar constant; `build()` takes no input and returns its name."""

    def __init__(self, value_float):
        super().__init__()
        self._value = float(value_float)

    def build(self):
        return self._constant(self._value, "constant")


class Clip(Block):
    """Clips the input to [clip_min, clip_max]; a bound left None is open."""

    def __init__(self, clip_min=None, clip_max=None):
        super().__init__()
        self._min = clip_min
        self._max = clip_max

    def build(self, clip_input_name: str):
        _model.require_values(self.base, [clip_input_name], "Clip")
        dtype = self._dtype_of(clip_input_name)  # ONNX's Clip wants bounds of the input's type
        low = "" if self._min is None else self._constant(self._min, "clip_min", dtype)
        high = "" if self._max is None else self._constant(self._max, "clip_max", dtype)
        inputs = [clip_input_name, low, high]
        while inputs[-1] == "":
            inputs.pop()
        return self._node("Clip", inputs)


class Cast(Block):
    """Casts the input to `to` (an onnx.TensorProto data type)."""

    def __init__(self, to):
        super().__init__()
        self._to = int(to)

    def build(self, cast_input_name: str):
        return self._node("Cast", [cast_input_name], to=self._to)


class Gemm(Block):
    """alpha * A' B' + beta * C with A' = A or A^T, B' likewise; C is optional."""

    def __init__(self, alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0):  # noqa: N803
        super().__init__()
        self._attributes = {"alpha": float(alpha), "beta": float(beta), "transA": int(transA), "transB": int(transB)}

    def build(self, a_name: str, b_name: str, c_name: Optional[str] = None):
        inputs = [a_name, b_name] + ([c_name] if c_name else [])
        return self._node("Gemm", inputs, **self._attributes)


class Linear(Block):
    """A fully connected layer y = alpha * x W + beta * b whose weight [in, out] and bias [out] are
    new initializers drawn from numpy's global generator (as ONNX Runtime does): parameters that
    Kiln trains."""

    def __init__(self, in_features, out_features, bias=True, alpha=1.0, beta=1.0):
        super().__init__()
        self._in_features = int(in_features)
        self._out_features = int(out_features)
        self._bias = bias
        self._alpha = float(alpha)
        self._beta = float(beta)

    def build(self, linear_input_name: str):
        _model.require_values(self.base, [linear_input_name], "Linear")
        weight = _model.fresh_name(self.base, "linear.weight")
        self.base.graph.initializer.append(onnx.numpy_helper.from_array(
            np.random.randn(self._in_features, self._out_features).astype(np.float32), weight))
        inputs = [linear_input_name, weight]
        if self._bias:
            bias = _model.fresh_name(self.base, "linear.bias")
            self.base.graph.initializer.append(onnx.numpy_helper.from_array(
                np.random.randn(self._out_features).astype(np.float32), bias))
            inputs.append(bias)
        return self._node("Gemm", inputs, token="linear", alpha=self._alpha, beta=self._beta)


class PassThrough(Block):
    """Returns its inputs' names unchanged, as a tuple (ONNX Runtime's no-loss block)."""

    def build(self, *input_names):
        return input_names


class InputLike(Block):
    """Adds a graph input with the type and shape of the graph input or output named `like`."""

    def __init__(self, like: str):
        super().__init__()
        self._like = like

    def build(self, input_name: Optional[str] = None):
        g = self.base.graph
        source = next((v for v in g.input if v.name == self._like), None) or \
            next((v for v in g.output if v.name == self._like), None)
        if source is None:
            raise LookupError(f"InputLike: no graph input or output is named '{self._like}'")
        name = input_name or _model.fresh_name(self.base, "input")
        if name in _model.all_names(self.base):
            raise _model.OnnxBlockError(f"InputLike: the model already has a value named '{name}'")
        clone = onnx.ValueInfoProto()
        clone.CopyFrom(source)
        clone.name = name
        g.input.append(clone)
        return name


__all__ = [
    "Block", "Add", "Sub", "Mul", "Div", "MatMul", "Neg", "Abs", "Sigmoid", "Log", "Exp", "Sqrt", "Relu", "Tanh",
    "Softplus", "Reciprocal", "Identity", "ReduceMean", "ReduceSum", "Pow", "Constant", "Clip", "Cast", "Gemm",
    "Linear", "PassThrough", "InputLike",
]
