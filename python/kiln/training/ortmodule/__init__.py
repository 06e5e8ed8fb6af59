"""ORTModule over Kiln: train a torch.nn.Module with Kiln's engine, keeping the PyTorch script.

    from kiln.training.ortmodule import ORTModule   # was: from onnxruntime.training.ortmodule import ...
    model = ORTModule(model)
    loss = loss_fn(model(x), y)
    loss.backward()                                  # fills param.grad of the original module
    optimizer.step()                                 # any torch optimizer

The first call with an input signature (shapes, dtypes, which inputs require grad, train/eval mode)
exports the module with torch.onnx.export (opset 17, the module's mode), builds Kiln's gradient graph
of every output with respect to the parameters and inputs that require grad, and plans both; later
calls with that signature reuse them (a bounded cache, see MAX_CACHED_SIGNATURES). Parameters and
buffers are fed from the module's own tensors on every call (NumPy views of their storage, no copy),
so an optimizer's in-place update is seen without re-export.

What this version does and does not do (docs/torch.md says the same):
- backward runs Kiln's forward + backward graph from the saved inputs: the forward is computed
  twice per step (Kiln keeps no activations between the forward call and the backward call yet);
- inputs are positional tensors; outputs a tensor or nested tuples / lists / dicts of tensors;
- BatchNorm running statistics are not written back to the module in training mode, and Dropout
  draws Kiln's masks, not torch's;
- anything else (keyword or non-tensor inputs, an export failure, an op Kiln cannot run or
  differentiate) falls back to running the module in PyTorch with one warning naming the cause, as
  ORTModule's default fallback policy does; ORTMODULE_FALLBACK_POLICY=FALLBACK_DISABLE raises instead.
"""
from __future__ import annotations

import io
import os
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from kiln._core import core

__all__ = ["ORTModule", "DebugOptions", "LogLevel", "MAX_CACHED_SIGNATURES"]

MAX_CACHED_SIGNATURES = 8  # plans kept per module; the oldest is dropped (with a warning) beyond it
_VJP_LOSS = "kiln_vjp_loss"
_GRAD_OUTPUT = "kiln_grad_output_{}"


class LogLevel(IntEnum):
    """onnxruntime.training.ortmodule.LogLevel: what Kiln prints (VERBOSE prints each export)."""
    VERBOSE = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    FATAL = 4


@dataclass
class DebugOptions:
    """onnxruntime.training.ortmodule.DebugOptions: with save_onnx, each export writes
    <onnx_prefix>_torch_exported_<mode>.onnx and <onnx_prefix>_training_<mode>.onnx (mode: training
    or inference) in the working directory."""
    log_level: LogLevel = LogLevel.WARNING
    save_onnx: bool = False
    onnx_prefix: str = ""

    def __post_init__(self):
        if self.save_onnx and not self.onnx_prefix:
            raise ValueError("DebugOptions: save_onnx=True needs an onnx_prefix for the file names")
        self.log_level = LogLevel(self.log_level)


class _Fallback(Exception):
    """Why a call cannot run on Kiln (the fallback policy decides what happens)."""


def _flatten(value, what):
    """(tensors, structure) of a nested tuple / list / dict of tensors."""
    if isinstance(value, torch.Tensor):
        return [value], None
    if isinstance(value, (tuple, list)):
        tensors, parts = [], []
        for item in value:
            t, s = _flatten(item, what)
            tensors += t
            parts.append((len(t), s))
        return tensors, (type(value), parts)
    if isinstance(value, dict):
        tensors, parts = [], []
        for key, item in value.items():
            t, s = _flatten(item, what)
            tensors += t
            parts.append((key, len(t), s))
        return tensors, (dict, parts)
    raise _Fallback(f"{what} holds a {type(value).__name__}; Kiln's ORTModule takes tensors and nested "
                    "tuples, lists and dicts of them")


def _unflatten(tensors, structure):
    if structure is None:
        return tensors[0]
    kind, parts = structure
    at, items = 0, []
    if kind is dict:
        out = {}
        for key, n, s in parts:
            out[key] = _unflatten(tensors[at:at + n], s)
            at += n
        return out
    for n, s in parts:
        items.append(_unflatten(tensors[at:at + n], s))
        at += n
    return kind(items) if kind in (tuple, list) else kind(*items)


def _numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor's storage (a copy only when it is not contiguous)."""
    return t.detach().contiguous().numpy()


class _Plan:
    """One input signature's exported forward and its gradient graph, planned by Kiln Sessions."""

    def __init__(self, module: torch.nn.Module, args: tuple, debug: DebugOptions):
        self.training = module.training
        mode = "training" if self.training else "inference"
        captured = []
        hook = module.register_forward_hook(lambda _m, _i, out: captured.append(out))
        buffer = io.BytesIO()
        self.input_names = [f"input_{i}" for i in range(len(args))]
        try:
            with torch.no_grad():
                torch.onnx.export(module, args, buffer, opset_version=17, do_constant_folding=False,
                                  training=torch.onnx.TrainingMode.TRAINING if self.training
                                  else torch.onnx.TrainingMode.EVAL,
                                  input_names=self.input_names, keep_initializers_as_inputs=True)
        except Exception as e:  # noqa: BLE001 (any export failure is a reason to fall back)
            raise _Fallback(f"torch.onnx.export failed: {type(e).__name__}: {e}") from e
        finally:
            hook.remove()
        if not captured:
            raise _Fallback("the module's forward hook did not run during export")
        outputs, self.structure = _flatten(captured[-1], "the module's output")
        exported = onnx.load_from_string(buffer.getvalue())
        graph = exported.graph
        self.output_names = [o.name for o in graph.output]
        if len(self.output_names) != len(outputs):
            raise _Fallback(f"the export has {len(self.output_names)} outputs for the module's {len(outputs)} tensors")
        self.differentiable = [o.is_floating_point() for o in outputs]
        # Parameters and buffers the graph reads, fed from the module on every call (by state_dict name).
        state = dict(module.state_dict(keep_vars=True))
        initializers = {i.name for i in graph.initializer}
        self.state_names = [n for n in state if n in initializers]
        graph_inputs = [i.name for i in graph.input]
        missing = [n for n in self.input_names if n not in graph_inputs]
        if missing:
            raise _Fallback(f"the export dropped input(s) {missing} (the forward does not read them)")
        trainable = [n for n in self.state_names if isinstance(state[n], torch.nn.Parameter) and state[n].requires_grad]
        grad_inputs = [n for n, a in zip(self.input_names, args) if a.requires_grad]
        self.forward = core.Session(buffer.getvalue())
        self.wrt = trainable + grad_inputs
        self.grads, self.backward = {}, None
        if self.wrt and any(self.differentiable):
            grad_bytes = self._vjp_model(exported, args, grad_inputs)
            try:
                grad_model, self.grads = core.build_gradient_graph(grad_bytes, _VJP_LOSS, self.wrt)
            except Exception as e:  # noqa: BLE001 (Kiln's Unsupported etc.: the fallback policy decides)
                raise _Fallback(f"Kiln cannot differentiate the exported graph: {e}") from e
            self.backward = core.Session(grad_model)
            if debug.save_onnx:
                onnx.save(onnx.load_from_string(grad_model), f"{debug.onnx_prefix}_training_{mode}.onnx")
        if debug.save_onnx:
            onnx.save(exported, f"{debug.onnx_prefix}_torch_exported_{mode}.onnx")
        if debug.log_level <= LogLevel.VERBOSE:
            print(f"kiln ORTModule: exported {len(graph.node)} nodes ({mode}); gradients of {self.wrt}")

    def _vjp_model(self, exported, args, grad_inputs) -> bytes:
        """The forward with loss = sum over outputs j of sum(output_j * dY_j), dY_j fed: its gradient
        with respect to each parameter is the vector-Jacobian product torch's backward asks for.
        Inputs that require grad become overridable initializers, so Kiln differentiates them."""
        model = onnx.ModelProto()
        model.CopyFrom(exported)
        g = model.graph
        terms = []
        for j, (out, diff) in enumerate(zip(g.output, self.differentiable)):
            if not diff:
                continue
            dy = _GRAD_OUTPUT.format(j)
            dy_info = g.input.add()
            dy_info.name = dy
            dy_info.type.CopyFrom(out.type)
            prod, term = f"kiln_vjp_prod_{j}", f"kiln_vjp_term_{j}"
            g.node.append(helper.make_node("Mul", [out.name, dy], [prod]))
            g.node.append(helper.make_node("ReduceSum", [prod], [term], keepdims=0))
            terms.append(term)
        g.node.append(helper.make_node("Sum", terms, [_VJP_LOSS]))
        g.output.append(helper.make_tensor_value_info(_VJP_LOSS, TensorProto.FLOAT, []))
        for name, arg in zip(self.input_names, args):
            if name in grad_inputs:
                g.initializer.append(numpy_helper.from_array(np.zeros(tuple(arg.shape), _numpy(arg).dtype), name))
        return model.SerializeToString()

    def feeds(self, inputs, state):
        f = {name: _numpy(t) for name, t in zip(self.input_names, inputs)}
        f.update({name: _numpy(t) for name, t in zip(self.state_names, state)})
        return f


class _KilnFunction(torch.autograd.Function):
    """Forward on Kiln's forward Session; backward on its gradient Session (forward recomputed)."""

    @staticmethod
    def forward(ctx, plan, n_inputs, *tensors):  # noqa: D102 (torch's signature)
        inputs, state = tensors[:n_inputs], tensors[n_inputs:]
        out = plan.forward.run(plan.feeds(inputs, state), plan.output_names)
        results = [torch.from_numpy(np.asarray(out[name])) for name in plan.output_names]
        ctx.plan, ctx.n_inputs = plan, n_inputs
        ctx.output_likes = [(tuple(r.shape), r.numpy().dtype) for r in results]
        ctx.save_for_backward(*tensors)
        ctx.mark_non_differentiable(*[r for r, d in zip(results, plan.differentiable) if not d])
        return tuple(results)

    @staticmethod
    def backward(ctx, *grad_outputs):  # noqa: D102
        plan, n = ctx.plan, ctx.n_inputs
        tensors = ctx.saved_tensors
        names = plan.input_names + plan.state_names
        wanted = [plan.grads.get(name) if ctx.needs_input_grad[2 + i] else None for i, name in enumerate(names)]
        if plan.backward is None or not any(wanted):
            return (None, None, *[None] * len(tensors))
        feeds = plan.feeds(tensors[:n], tensors[n:])
        for j, (g, diff) in enumerate(zip(grad_outputs, plan.differentiable)):
            if diff:
                feeds[_GRAD_OUTPUT.format(j)] = _numpy(g) if g is not None else np.zeros(*ctx.output_likes[j])
        out = plan.backward.run(feeds, [w for w in wanted if w])
        grads = [torch.from_numpy(np.asarray(out[w])) if w else None for w in wanted]
        return (None, None, *grads)


def _fallback_disabled() -> bool:
    return "FALLBACK_DISABLE" in os.environ.get("ORTMODULE_FALLBACK_POLICY", "")


class ORTModule(torch.nn.Module):
    """onnxruntime.training.ortmodule.ORTModule over Kiln (see the module docstring)."""

    def __init__(self, module: torch.nn.Module, debug_options: DebugOptions | None = None):
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ORTModule wraps a torch.nn.Module, got {type(module).__name__}")
        super().__init__()
        self._torch_module = module
        self._debug = debug_options or DebugOptions()
        self._plans: OrderedDict = OrderedDict()
        self._fallback_reason: str | None = None

    @property
    def module(self) -> torch.nn.Module:
        """The wrapped torch module (its parameters are the ones trained)."""
        return self._torch_module

    # The wrapped module's names, as onnxruntime's ORTModule reports them (no "_torch_module." prefix).
    def state_dict(self, *args, **kwargs):  # noqa: D102
        return self._torch_module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True):  # noqa: D102
        return self._torch_module.load_state_dict(state_dict, strict=strict)

    def named_parameters(self, prefix: str = "", recurse: bool = True, **kwargs):  # noqa: D102
        return self._torch_module.named_parameters(prefix=prefix, recurse=recurse, **kwargs)

    def parameters(self, recurse: bool = True):  # noqa: D102
        return self._torch_module.parameters(recurse=recurse)

    def named_buffers(self, prefix: str = "", recurse: bool = True, **kwargs):  # noqa: D102
        return self._torch_module.named_buffers(prefix=prefix, recurse=recurse, **kwargs)

    def buffers(self, recurse: bool = True):  # noqa: D102
        return self._torch_module.buffers(recurse=recurse)

    def to(self, *args, **kwargs):  # noqa: D102
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        if device is not None and torch.device(device).type != "cpu":
            raise RuntimeError(f"Kiln's ORTModule runs on the CPU; cannot move it to {device}")
        self._torch_module.to(*args, **kwargs)
        self._plans.clear()
        return self

    def forward(self, *args, **kwargs):  # noqa: D102
        if self._fallback_reason is None:
            try:
                return self._run(args, kwargs)
            except _Fallback as e:
                if _fallback_disabled():
                    raise RuntimeError(f"Kiln's ORTModule cannot run this module: {e}") from e
                self._fallback_reason = str(e)
                warnings.warn(f"Kiln's ORTModule falls back to PyTorch for this module: {e}", RuntimeWarning,
                              stacklevel=2)
        return self._torch_module(*args, **kwargs)

    def _run(self, args, kwargs):
        if kwargs:
            raise _Fallback(f"keyword inputs ({', '.join(kwargs)}) are not supported yet; pass them positionally")
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                raise _Fallback(f"input {i} is a {type(a).__name__}; Kiln's ORTModule takes tensor inputs")
            if a.device.type != "cpu":
                raise _Fallback(f"input {i} is on {a.device}; Kiln's ORTModule runs on the CPU")
        key = (tuple((tuple(a.shape), a.dtype, a.requires_grad) for a in args), self._torch_module.training)
        plan = self._plans.get(key)
        if plan is None:
            plan = _Plan(self._torch_module, args, self._debug)
            self._plans[key] = plan
            if len(self._plans) > MAX_CACHED_SIGNATURES:
                self._plans.popitem(last=False)
                warnings.warn(f"Kiln's ORTModule has seen more than {MAX_CACHED_SIGNATURES} input signatures "
                              "(shapes, dtypes, requires_grad, mode); the oldest plan is dropped and re-exported "
                              "if it comes back. Pad inputs to a few shapes to avoid re-exporting.",
                              RuntimeWarning, stacklevel=3)
        else:
            self._plans.move_to_end(key)
        state = dict(self._torch_module.state_dict(keep_vars=True))
        tensors = [state[n] for n in plan.state_names]
        outputs = _KilnFunction.apply(plan, len(args), *args, *tensors)
        return _unflatten(list(outputs), plan.structure)
