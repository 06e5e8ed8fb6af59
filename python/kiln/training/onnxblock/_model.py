"""The model that onnxblock blocks edit, and the facts about it that blocks need.

`base(model)` and `empty_base()` register the current model (one at a time, as in ONNX Runtime);
blocks reach it through `current_model()`. The helpers below look values up by name, make fresh
names and read the opset, so that each block stays a few lines of node emission.
"""
import contextlib
import copy
import itertools

import numpy as np
import onnx


class OnnxBlockError(ValueError, RuntimeError):
    """A misuse of onnxblock. ONNX Runtime raises RuntimeError for most of these, Python code
    expects ValueError for a bad argument value: this is both, so either `except` works."""


class ModelAccessor:
    """Holds the model the blocks edit; `model` is that (copied) ModelProto, edited in place."""

    def __init__(self, model: onnx.ModelProto):
        self._model = model
        # Names that existed before any block ran: a loss target may reuse a value that blocks
        # made, but must not silently alias a model parameter.
        self.original_names = all_names(model)

    @property
    def model(self) -> onnx.ModelProto:
        return self._model


_CURRENT = None


def current_model(requester: str) -> onnx.ModelProto:
    """The model of the innermost base()/empty_base(); RuntimeError naming `requester` outside one."""
    if _CURRENT is None:
        raise OnnxBlockError(
            f"{requester}: no base model to add to; call blocks inside `with onnxblock.base(model):` "
            "or `with onnxblock.empty_base():`")
    return _CURRENT.model


def current_accessor() -> ModelAccessor:
    current_model("onnxblock")
    return _CURRENT


@contextlib.contextmanager
def _register(model: onnx.ModelProto):
    global _CURRENT  # pylint: disable=global-statement
    if _CURRENT is not None:
        raise OnnxBlockError("a base model is already registered: onnxblock.base()/empty_base() do not nest")
    _CURRENT = ModelAccessor(model)
    try:
        yield _CURRENT
    finally:
        _CURRENT = None


@contextlib.contextmanager
def base(model: onnx.ModelProto):
    """Registers a copy of `model` for blocks to edit; yields the accessor (`handle.model`)."""
    if model is None:
        raise OnnxBlockError("onnxblock.base(None): give a ModelProto, or use onnxblock.empty_base() "
                             "to build a model from scratch")
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"onnxblock.base expects an onnx.ModelProto, got {type(model).__name__}")
    with _register(copy.deepcopy(model)) as accessor:
        yield accessor


@contextlib.contextmanager
def empty_base(opset_version=None):
    """Registers a new empty model (default opset: the newest this onnx package knows)."""
    model = onnx.ModelProto()
    model.ir_version = onnx.IR_VERSION
    model.producer_name = "kiln.onnxblock"
    model.graph.name = "graph"
    model.opset_import.extend([onnx.helper.make_opsetid("", opset_version or onnx.defs.onnx_opset_version())])
    with _register(model) as accessor:
        yield accessor


def all_names(model: onnx.ModelProto) -> set:
    """Every value and node name used in the main graph."""
    g = model.graph
    names = {v.name for v in itertools.chain(g.input, g.output, g.value_info)}
    names.update(t.name for t in g.initializer)
    for node in g.node:
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
    names.discard("")
    return names


_COUNTER = itertools.count(1)


def fresh_name(model: onnx.ModelProto, token: str) -> str:
    """A name free in `model`, "<token>_<n>" (file-system safe, as `kiln run` names output files)."""
    used = all_names(model)
    while True:
        name = f"{token}_{next(_COUNTER)}"
        if name not in used:
            return name


def opset_version(model: onnx.ModelProto) -> int:
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            return op.version
    raise OnnxBlockError(f"model '{model.graph.name}' imports no default-domain (ai.onnx) opset")


def produced_names(model: onnx.ModelProto) -> set:
    """Values that exist at run time: graph inputs, initializers, node outputs."""
    g = model.graph
    names = {v.name for v in g.input}
    names.update(t.name for t in g.initializer)
    for node in g.node:
        names.update(node.output)
    names.discard("")
    return names


def require_values(model: onnx.ModelProto, names, requester: str) -> None:
    """ValueError naming the first of `names` that no graph input, initializer or node makes."""
    known = produced_names(model)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{requester}: value names are str, got {type(name).__name__} ({name!r})")
        if name and name not in known:
            raise OnnxBlockError(f"{requester}: '{name}' is not a value of the model "
                                 "(no graph input, initializer or node output has that name)")


def kind_of(model: onnx.ModelProto, name: str):
    """'graph input', 'initializer', 'node output' or None: what `name` is in the model."""
    g = model.graph
    if any(v.name == name for v in g.input):
        return "graph input"
    if any(t.name == name for t in g.initializer):
        return "initializer"
    if any(name in node.output for node in g.node):
        return "node output"
    return None


def value_info(model: onnx.ModelProto, name: str):
    """The declared or inferred ValueInfoProto of `name`, or None when its type is unknown."""
    g = model.graph
    for v in itertools.chain(g.input, g.output, g.value_info):
        if v.name == name and v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
            return v
    for t in g.initializer:
        if t.name == name:
            return onnx.helper.make_tensor_value_info(name, t.data_type, list(t.dims))
    # An intermediate value: ask ONNX's shape inference on a copy (the model itself is left alone).
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference failing only means the type stays unknown
        return None
    for v in inferred.graph.value_info:
        if v.name == name and v.type.tensor_type.elem_type:
            return v
    return None


def np_dtype(elem_type: int):
    """The numpy dtype of an ONNX TensorProto element type (onnx 1.12 has no helper for it)."""
    return np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[elem_type])


def describe(info) -> str:
    """'float32 [N, 3]' for messages."""
    if info is None:
        return "of unknown type"
    t = info.type.tensor_type
    dtype = onnx.TensorProto.DataType.Name(t.elem_type).lower()
    if not t.HasField("shape"):
        return f"{dtype} of unknown shape"
    dims = [d.dim_param if d.HasField("dim_param") else str(d.dim_value) if d.HasField("dim_value") else "?"
            for d in t.shape.dim]
    return f"{dtype} [{', '.join(dims)}]"
