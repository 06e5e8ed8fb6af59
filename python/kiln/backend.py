"""ONNX's backend interface (onnx.backend.base.Backend) over Kiln's inference Session.

With it, tools written against ONNX's backend API run on Kiln, among them ONNX's own conformance
runner (onnx.backend.test.BackendTest; see tests/python/test_onnx_backend.py):

    import kiln.backend
    rep = kiln.backend.prepare(model)              # ModelProto, serialized bytes or a path
    outputs = rep.run([x])                         # or rep.run({"x": x}); outputs in graph order
    (y,) = kiln.backend.run_node(node, [x])        # one node, typed from the numpy inputs

Only the CPU device exists. Options (keyword arguments of prepare, run_model and run_node):
num_threads (0, the default: all cores). An unknown option raises TypeError rather than being
ignored, so a misspelt option is not silently without effect.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx
import onnx.checker
import onnx.defs
import onnx.mapping
import onnx.numpy_helper
import onnx.onnx_cpp2py_export.checker as c_checker
import onnx.shape_inference
from onnx import ModelProto, NodeProto, helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

import kiln
from kiln._core import core as _kiln

_OPTIONS = ("num_threads",)


def _session_options(kwargs: Mapping[str, Any], where: str) -> Dict[str, Any]:
    unknown = sorted(set(kwargs) - set(_OPTIONS))
    if unknown:
        raise TypeError(f"kiln.backend.{where}: unknown option(s) {', '.join(unknown)}; "
                        f"Kiln's backend accepts {', '.join(_OPTIONS)}")
    return {"num_threads": int(kwargs.get("num_threads", 0))}


def _device_type(device: str) -> Optional[int]:
    """The DeviceType of 'CPU', 'CUDA:1', ...; None for a string ONNX's Device cannot parse."""
    try:
        return Device(device).type
    except (AttributeError, ValueError, TypeError):
        return None


def _check_device(device: str, where: str) -> None:
    if _device_type(device) != DeviceType.CPU:
        raise kiln.Unsupported(f"kiln.backend.{where}: device '{device}' is not supported; "
                               f"Kiln's backend runs on 'CPU' only")


def _feed_value(name: str, value: Any) -> Any:
    # Sequence- and optional-typed values arrive as Python lists or None: kiln's Session takes them
    # as they are (a list feeds a sequence input, None an optional one; for a tensor input numpy
    # reads the list). Maps have no Kiln form: say which input it was.
    if isinstance(value, dict):
        raise kiln.Unsupported(f"kiln.backend: input '{name}' is a dict, but Kiln has no map values; "
                               f"its inputs are tensors, sequences (lists) and optionals (None)")
    if value is None or isinstance(value, (list, tuple)):
        return value
    return np.asarray(value)


class KilnBackendRep(BackendRep):
    """A model prepared for Kiln: one Session, run as many times as needed."""

    def __init__(self, session: Any, graph_input_names: Sequence[str]) -> None:
        self._session = session
        # Every graph input in declaration order, initializers included: ONNX's runner (and older
        # models, where each initializer is also an input) count positions over this list.
        self._graph_input_names = list(graph_input_names)

    @property
    def input_names(self) -> Sequence[str]:
        """The inputs a caller must feed (initializers excluded), in graph order."""
        return list(self._session.input_names)

    @property
    def output_names(self) -> Sequence[str]:
        return list(self._session.output_names)

    def _feeds(self, inputs: Any) -> Dict[str, Any]:
        if isinstance(inputs, Mapping):
            return {str(name): _feed_value(str(name), value) for name, value in inputs.items()}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"kiln.backend: run() takes a list, tuple or dict of inputs, not "
                            f"{type(inputs).__name__}")
        required = self.input_names
        # Positional inputs follow the inputs the caller must feed; when initializers are also
        # listed as graph inputs, a list as long as all graph inputs follows that list instead.
        if len(inputs) <= len(required):
            names = required
        elif len(inputs) <= len(self._graph_input_names):
            names = self._graph_input_names
        else:
            raise ValueError(f"kiln.backend: run() got {len(inputs)} inputs, but the model has "
                             f"{len(self._graph_input_names)} graph inputs ({', '.join(self._graph_input_names)})")
        return {name: _feed_value(name, value) for name, value in zip(names, inputs)}

    def run(self, inputs: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """Runs the model; returns its outputs in graph-output order (a namedtuple-like tuple,
        also indexable by output name)."""
        if kwargs:
            raise TypeError(f"kiln.backend: run() takes no options, got {', '.join(sorted(kwargs))}")
        names = self.output_names
        results = self._session.run(self._feeds(inputs), names)
        return namedtupledict("Outputs", names)(*[results[name] for name in names])


def _default_opset(domain: str) -> int:
    """The newest opset of a domain ONNX knows; 1 for other domains (ai.kiln, custom ones)."""
    if domain in ("", "ai.onnx"):
        return onnx.defs.onnx_opset_version()
    versions = onnx.defs.C.schema_version_map().get(domain)
    return versions[1] if versions else 1


def _tensor_type(dtype: Any, where: str) -> int:
    np_dtype = np.dtype(dtype)
    try:
        return onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np_dtype]
    except KeyError:
        raise kiln.Unsupported(f"kiln.backend.run_node: {where} has numpy dtype {np_dtype}, which has no "
                               f"ONNX tensor type") from None


def _node_model(node: NodeProto, feeds: Mapping[str, np.ndarray], outputs_info: Optional[Sequence[Any]],
                opset_version: Optional[int]) -> ModelProto:
    """A model of the single node `node`: inputs typed from `feeds`, outputs from `outputs_info`
    (pairs of dtype and shape) or else left untyped."""
    inputs = [helper.make_tensor_value_info(name, _tensor_type(value.dtype, f"input '{name}'"), value.shape)
              for name, value in feeds.items()]
    output_names = [name for name in node.output if name]
    if outputs_info is not None:
        if len(outputs_info) != len(output_names):
            raise ValueError(f"kiln.backend.run_node: {node.op_type} node '{node.name}' has "
                             f"{len(output_names)} outputs but outputs_info describes {len(outputs_info)}")
        outputs = [helper.make_tensor_value_info(name, _tensor_type(dtype, f"output '{name}'"), shape)
                   for name, (dtype, shape) in zip(output_names, outputs_info)]
    else:
        outputs = [onnx.ValueInfoProto(name=name) for name in output_names]
    graph = helper.make_graph([node], f"kiln_run_node_{node.op_type}", inputs, outputs)
    domains = {"": _default_opset("")}
    if node.domain not in ("", "ai.onnx"):
        domains[node.domain] = _default_opset(node.domain)
    if opset_version is not None:
        domains["" if node.domain in ("", "ai.onnx") else node.domain] = int(opset_version)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in domains.items()],
                             producer_name="kiln.backend.run_node")


def _infer_output_types(model: ModelProto, node: NodeProto, feeds: Mapping[str, np.ndarray]) -> bool:
    """Types the graph outputs of a run_node model by ONNX's shape inference; an ONNX model needs
    a type and a shape (rank) for each graph output. Returns True when ONNX gave some output of a
    standard op its element type only (Compress, whose rank ONNX 1.12 does not infer): the model is
    then run without ONNX's checker, Kiln's own inference giving the shape."""
    def untyped(graph: onnx.GraphProto) -> list:
        return [o.name for o in graph.output
                if not o.type.HasField("tensor_type") or not o.type.tensor_type.HasField("shape")]

    inferred = onnx.shape_inference.infer_shapes(model)
    if untyped(inferred.graph):
        # Output shapes that depend on input values (Reshape's shape, Slice's starts, Squeeze's
        # axes, ...): inference reads such values from initializers, so infer again on a copy
        # whose small integer inputs are initializers holding the values fed.
        constant = ModelProto()
        constant.CopyFrom(model)
        constant.graph.initializer.extend(
            onnx.numpy_helper.from_array(value, name) for name, value in feeds.items()
            if value.dtype.kind in "iu" and value.size <= 1024)
        inferred = onnx.shape_inference.infer_shapes(constant)
    missing = untyped(inferred.graph)
    typed_only = [o.name for o in inferred.graph.output if o.name in missing and o.type.HasField("tensor_type")]
    if missing and node.domain in ("", "ai.onnx") and typed_only == missing:
        for output, typed in zip(model.graph.output, inferred.graph.output):
            output.type.CopyFrom(typed.type)
        return True
    if missing:
        raise ValueError(f"kiln.backend.run_node: ONNX cannot infer the type and rank of output(s) "
                         f"{', '.join(missing)} of {node.op_type} node '{node.name}'; pass outputs_info "
                         f"(a (dtype, shape) pair per output)")
    for output, typed in zip(model.graph.output, inferred.graph.output):
        output.type.CopyFrom(typed.type)
    return False


class KilnBackend(Backend):
    """onnx.backend.base.Backend over Kiln: prepare, run_model, run_node, supports_device."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> KilnBackendRep:
        """Checks `model` (ModelProto, serialized bytes, or a path) and creates a Kiln Session for it."""
        _check_device(device, "prepare")
        options = _session_options(kwargs, "prepare")
        # ONNX's base Backend.prepare runs the checker; keep that contract.
        if isinstance(model, (str, os.PathLike)):
            # A path goes to Kiln as a path, so that external data is read from the model's folder
            # (and a model over 2 GB, which protobuf cannot hold in one message, still loads).
            source = os.fspath(model)
            onnx.checker.check_model(source)
            proto = onnx.load(source, load_external_data=False)
        elif isinstance(model, (bytes, bytearray, ModelProto)):
            proto = model if isinstance(model, ModelProto) else onnx.load_from_string(bytes(model))
            super().prepare(proto, device)
            source = bytes(model) if isinstance(model, (bytes, bytearray)) else model.SerializeToString()
        else:
            raise TypeError(f"kiln.backend.prepare: model must be an onnx.ModelProto, bytes or a path, "
                            f"not {type(model).__name__}")
        session = _kiln.Session(source, num_threads=options["num_threads"])
        return KilnBackendRep(session, [value.name for value in proto.graph.input])

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> Tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Optional[Sequence[Tuple[Any, Tuple[int, ...]]]] = None,
                 **kwargs: Any) -> Tuple[Any, ...]:
        """Runs one node on `inputs`: a list following the node's present (non-empty) inputs, or a
        dict by input name. kwargs: opset_version (default: the newest for the node's domain) and
        the session options."""
        _check_device(device, "run_node")
        opset_version = kwargs.pop("opset_version", None)
        options = _session_options(kwargs, "run_node")
        present = [name for name in node.input if name]
        if isinstance(inputs, Mapping):
            given = dict(inputs)
        else:
            if len(inputs) != len(present):
                raise ValueError(f"kiln.backend.run_node: {node.op_type} node '{node.name}' has "
                                 f"{len(present)} inputs ({', '.join(present)}), got {len(inputs)} values")
            given = dict(zip(present, inputs))
        if set(given) != set(present):
            raise ValueError(f"kiln.backend.run_node: {node.op_type} node '{node.name}' takes inputs "
                             f"({', '.join(present)}), got values for ({', '.join(map(str, given))})")
        feeds = {name: _feed_value(name, given[name]) for name in present}
        model = _node_model(node, feeds, outputs_info, opset_version)
        # The node is checked against its schema at the model's opsets. (ONNX's base run_node
        # checks it at the default domain's opset only, which rejects nodes of other domains.)
        context = c_checker.CheckerContext()
        context.ir_version = model.ir_version
        context.opset_imports = {opset.domain: opset.version for opset in model.opset_import}
        onnx.checker.check_node(node, context)
        unchecked = _infer_output_types(model, node, feeds) if outputs_info is None else False
        session = _kiln.Session(model.SerializeToString(), num_threads=options["num_threads"], check=not unchecked)
        return KilnBackendRep(session, list(feeds)).run(feeds)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return _device_type(device) == DeviceType.CPU


# Module-level entry points, as ONNX backends conventionally expose them (BackendTest takes the
# module `kiln.backend` itself as its backend).
backend = KilnBackend
prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
run_node = KilnBackend.run_node
supports_device = KilnBackend.supports_device
