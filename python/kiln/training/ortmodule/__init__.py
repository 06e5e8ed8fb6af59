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
- Kiln's gradient graph is split where the output gradients enter: the forward call runs the part
  that does not need them and returns, besides the outputs, the activations the backward reads
  (the stash: written by Kiln straight into NumPy arrays, held by the autograd node, and reused by
  the next forward once its backward has read them); the backward call runs the rest from them,
  the output gradients and the inputs and parameters saved for backward. A graph is backpropagated
  once: retain_graph=True is not supported;
- a call's arguments may be positional or keyword tensors, None, bools, numbers and strings, nested
  in tuples, lists and dicts: the tensors are fed, the rest are constants of the plan (part of its
  signature); outputs are tensors and constants nested in tuples, lists, dicts, namedtuples and
  dataclasses (Hugging Face's ModelOutput);
- the wrapped module's own forward (pre-)hooks run around each call, not in the graph;
- BatchNorm running statistics (and num_batches_tracked) are written back to the module after each
  training-mode call; Dropout draws Kiln's masks, not torch's, from seeds drawn from torch's
  generator at export (torch.manual_seed makes a run repeat its masks);
- tensors cross as NumPy arrays over the same memory through DLPack (bool ones through the buffer
  protocol), no copy unless a tensor is not contiguous;
- anything else (an argument or output of another type, a forward returning no tensor, an export
  failure, an op Kiln cannot run or differentiate) falls back to running the module in PyTorch
  with one warning naming the cause, as ORTModule's default fallback policy does;
  ORTMODULE_FALLBACK_POLICY=FALLBACK_DISABLE raises instead.
"""
from __future__ import annotations

import io
import os
import sys
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

from kiln._core import core
from kiln.training.ortmodule._calls import _Call, _Fallback, _flatten, _signature, _unflatten
from kiln.training.ortmodule._graphs import _fed_as_inputs, _split, _strip_prefix

__all__ = ["ORTModule", "DebugOptions", "LogLevel", "MAX_CACHED_SIGNATURES"]

MAX_CACHED_SIGNATURES = 8  # plans kept per module; the oldest is dropped (with a warning) beyond it
_VJP_LOSS = "kiln_vjp_loss"
_GRAD_OUTPUT = "kiln_grad_output_{}"


class LogLevel(IntEnum):
    """onnxruntime.training.ortmodule.LogLevel: what Kiln prints (INFO and VERBOSE: a line per export)."""
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


def _numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor's storage through DLPack (a copy only when the tensor is not
    contiguous). Bool tensors, which this NumPy's DLPack does not carry, go through the buffer
    protocol, also without a copy."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.bool:
        return t.numpy()
    return np.from_dlpack(t)


def _tensor(a) -> torch.Tensor:
    """A torch tensor over a NumPy array's memory through DLPack (the arrays Kiln writes); the
    buffer protocol for what DLPack cannot export (bool, read-only arrays). No copy either way."""
    a = np.asarray(a)
    if a.dtype != np.bool_ and a.flags.writeable:
        return torch.from_dlpack(a)
    return torch.from_numpy(a)


class _Bound:
    """A Kiln Session run by position (Session.run_bound): each output is written by the kernel that
    computes it into an array allocated here, with the dtype and shape the first run gave (a plan
    serves one input signature, so they do not change): no copy out of Kiln's arena."""

    def __init__(self, session):
        self.session = session
        self.inputs, self.outputs = list(session.input_names), list(session.output_names)
        self.likes = None
        self.spare = {}  # output name -> arrays handed back by recycle(), for the next runs

    def recycle(self, arrays: dict):
        """Arrays of earlier runs that nothing will read again (the stash after its backward): the
        next run writes into them instead of new ones. Large arrays are mapped fresh from the OS on
        every allocation (glibc maps blocks over 32 MB), and touching new pages costs more than the
        kernel writing them: gpt2's [8, 128, 8192] logits and their loss values are such arrays."""
        for name, a in arrays.items():
            kept = self.spare.setdefault(name, [])
            if len(kept) < 2:
                kept.append(a)

    def _take(self, name, like):
        kept = self.spare.get(name, [])
        for i in range(len(kept)):
            if sys.getrefcount(kept[i]) <= 2:  # the list and the call's argument: no one else holds it
                return kept.pop(i)
        return np.empty(*like)

    def run(self, feeds: dict) -> dict:
        outputs = [None] * len(self.outputs) if self.likes is None else [
            self._take(name, like) for name, like in zip(self.outputs, self.likes)]
        result = self.session.run_bound([feeds[name] for name in self.inputs], outputs)
        if self.likes is None:
            self.likes = [(a.shape, a.dtype) for a in result]
        return dict(zip(self.outputs, result))


def _free_name(name: str, taken: set) -> str:
    """`name`, or `name` with underscores added until it is not in `taken`."""
    while name in taken:
        name += "_"
    return name


class _Plan:
    """One input signature's exported forward and its gradient graph, planned by Kiln Sessions."""

    def __init__(self, module: torch.nn.Module, args: tuple, structure, debug: DebugOptions):
        """`args`: the call's tensors, flat; `structure` puts them back into the call's (args, kwargs)."""
        started = time.perf_counter()
        self.training = module.training
        mode = "training" if self.training else "inference"
        call = _Call(module, structure)
        buffers = dict(module.named_buffers())
        saved = {name: b.detach().clone() for name, b in buffers.items()}
        # The wrapped module's own hooks run around the Kiln call (ORTModule.forward), not in the graph.
        hooks = module._forward_pre_hooks, module._forward_hooks
        module._forward_pre_hooks, module._forward_hooks = OrderedDict(), OrderedDict()
        buffer = io.BytesIO()
        # Names no state_dict key has: the parameters keep their own names in the graph.
        taken = set(module.state_dict())
        self.input_names = [_free_name(f"input_{i}", taken) for i in range(len(args))]
        try:
            with torch.no_grad(), warnings.catch_warnings():
                if debug.log_level > LogLevel.INFO:  # torch.onnx's notes on tracing, as ORTModule hides them
                    warnings.simplefilter("ignore", UserWarning)
                    warnings.simplefilter("ignore", torch.jit.TracerWarning)
                # PRESERVE: the module's own mode, without the eval-mode export's folding of BatchNorm
                # into the convolution before it (fixed weights, which the next optimizer step stales).
                torch.onnx.export(call, tuple(args), buffer, opset_version=17, do_constant_folding=False,
                                  training=torch.onnx.TrainingMode.PRESERVE,
                                  input_names=self.input_names, keep_initializers_as_inputs=True)
        except _Fallback:
            raise
        except Exception as e:  # noqa: BLE001 (any export failure is a reason to fall back)
            raise _Fallback(f"torch.onnx.export failed: {type(e).__name__}: {e}") from e
        finally:
            module._forward_pre_hooks, module._forward_hooks = hooks
            # Tracing ran the module: a training-mode BatchNorm updated its statistics; undo that.
            with torch.no_grad():
                for name, value in saved.items():
                    buffers[name].copy_(value)
        if not call.captured:
            raise _Fallback("the module's forward did not run during export")
        outputs, self.structure = _flatten(call.captured[-1], "the module's output", constants=True)
        exported = onnx.load_from_string(buffer.getvalue())
        _strip_prefix(exported.graph, "inner.")
        _seed_dropout(exported.graph)
        graph = exported.graph
        self.output_names = [o.name for o in graph.output]
        if len(self.output_names) != len(outputs):
            raise _Fallback(f"the export has {len(self.output_names)} outputs for the module's {len(outputs)} tensors")
        self.differentiable = [o.is_floating_point() for o in outputs]
        # Parameters and buffers the graph reads, fed from the module on every call (by state_dict name):
        # parameters go through autograd (saved for backward), buffers as NumPy copies beside it.
        state = dict(module.state_dict(keep_vars=True))
        initializers = {i.name for i in graph.initializer}
        self.param_names = [n for n in state if n in initializers and isinstance(state[n], torch.nn.Parameter)]
        self.buffer_names = [n for n in state if n in initializers and not isinstance(state[n], torch.nn.Parameter)]
        self.updates = self._running_statistics(graph, state) if self.training else []
        graph_inputs = {i.name for i in graph.input}
        # An input the forward does not read is not in the export: it is not fed (and gets no gradient).
        self.read = [n in graph_inputs for n in self.input_names]
        trainable = [n for n in self.param_names if state[n].requires_grad]
        grad_inputs = [n for n, a, r in zip(self.input_names, args, self.read) if a.requires_grad and r]
        self.wrt = trainable + grad_inputs
        self.grads, self.stash_names, self.backward, self._backward_graph, self._static = {}, [], None, None, set()
        fed = {n for n, r in zip(self.input_names, self.read) if r} | set(self.param_names) | set(self.buffer_names)
        forward_model = exported
        if self.wrt and any(self.differentiable):
            grad_bytes = self._vjp_model(exported, args, grad_inputs)
            try:
                grad_model, self.grads = core.build_gradient_graph(grad_bytes, _VJP_LOSS, self.wrt)
            except Exception as e:  # noqa: BLE001 (Kiln's Unsupported etc.: the fallback policy decides)
                raise _Fallback(f"Kiln cannot differentiate the exported graph: {e}") from e
            training = onnx.load_from_string(grad_model)
            if debug.save_onnx:
                onnx.save(training, f"{debug.onnx_prefix}_training_{mode}.onnx")
            forward_model, self._backward_graph, self.stash_names, self._static = _split(
                training, self.output_names + [out for _, out in self.updates], list(self.grads.values()), fed)
        if debug.save_onnx:
            onnx.save(exported, f"{debug.onnx_prefix}_torch_exported_{mode}.onnx")
        if forward_model is exported:
            forward_model = onnx.ModelProto()
            forward_model.CopyFrom(exported)
            _fed_as_inputs(forward_model, fed)
        try:
            self.forward = _Bound(core.Session(forward_model.SerializeToString(), check=self._backward_graph is None))
        except Exception as e:  # noqa: BLE001
            raise _Fallback(f"Kiln cannot run the exported graph: {e}") from e
        self.seconds = time.perf_counter() - started
        if debug.log_level <= LogLevel.INFO:
            print(f"kiln ORTModule: exported and planned the {mode} graph of a new input signature in "
                  f"{self.seconds:.2f} s", file=sys.stderr)
        if debug.log_level <= LogLevel.VERBOSE:
            print(f"kiln ORTModule: {len(graph.node)} nodes; gradients of {self.wrt}", file=sys.stderr)

    @staticmethod
    def _running_statistics(graph, state):
        """[(buffer name, graph output with its new value)] for each training-mode BatchNormalization:
        its running mean and variance outputs become graph outputs, written back after each call."""
        updates = []
        for node in graph.node:
            training = any(a.name == "training_mode" and a.i for a in node.attribute)
            if node.op_type != "BatchNormalization" or not training or len(node.input) < 5:
                continue
            for k in (1, 2):
                if len(node.output) <= k or not node.output[k] or node.input[k + 2] not in state:
                    continue
                updates.append((node.input[k + 2], node.output[k]))
                if node.output[k] not in {o.name for o in graph.output}:
                    stat = next(i for i in graph.initializer if i.name == node.input[k + 2])
                    graph.output.append(helper.make_tensor_value_info(node.output[k], stat.data_type, list(stat.dims)))
        return updates

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
        dtype = next(o.type.tensor_type.elem_type for o, d in zip(g.output, self.differentiable) if d)
        g.output.append(helper.make_tensor_value_info(_VJP_LOSS, dtype, []))
        for name, arg in zip(self.input_names, args):
            if name in grad_inputs:
                g.initializer.append(numpy_helper.from_array(np.zeros(tuple(arg.shape), _numpy(arg).dtype), name))
        return model.SerializeToString()

    def backward_session(self, stash: dict):
        """The backward part's Session, made at the first backward call: its stash inputs take the
        dtypes and shapes of the arrays the forward part returned (fixed for this signature)."""
        if self.backward is None:
            g = self._backward_graph.graph
            for name in self.stash_names:
                if name in self._static:  # the same on every call of this signature: a constant
                    g.initializer.append(numpy_helper.from_array(np.asarray(stash[name]), name))
                    continue
                info = g.input.add()
                info.CopyFrom(helper.make_tensor_value_info(
                    name, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[stash[name].dtype], list(stash[name].shape)))
            self.backward = _Bound(core.Session(self._backward_graph.SerializeToString()))
            self._backward_graph = None
            self.stash_names = [n for n in self.stash_names if n not in self._static]
        return self.backward

    def feeds(self, inputs, params, buffers):
        f = {name: _numpy(t) for name, t, read in zip(self.input_names, inputs, self.read) if read}
        f.update({name: _numpy(t) for name, t in zip(self.param_names, params)})
        f.update(buffers)
        return f


class _KilnFunction(torch.autograd.Function):
    """Forward on the forward part of Kiln's training graph; backward on the rest (see _split)."""

    @staticmethod
    def forward(ctx, plan, n_inputs, buffers, updated, *tensors):  # noqa: D102 (torch's signature)
        """buffers: {name: NumPy array} fed beside the tensors; `updated` receives the new values of
        the running statistics (plan.updates) for the caller to write back."""
        inputs, params = tensors[:n_inputs], tensors[n_inputs:]
        out = plan.forward.run(plan.feeds(inputs, params, buffers))
        results = [_tensor(out[name]) for name in plan.output_names]
        updated.update({buffer: out[name] for buffer, name in plan.updates})
        ctx.stash = {name: out[name] for name in plan.stash_names}
        ctx.buffers = buffers
        ctx.plan, ctx.n_inputs = plan, n_inputs
        ctx.output_likes = [(tuple(r.shape), r.numpy().dtype) for r in results]
        ctx.save_for_backward(*tensors)
        ctx.mark_non_differentiable(*[r for r, d in zip(results, plan.differentiable) if not d])
        return tuple(results)

    @staticmethod
    def backward(ctx, *grad_outputs):  # noqa: D102
        plan, n = ctx.plan, ctx.n_inputs
        tensors = ctx.saved_tensors
        names = plan.input_names + plan.param_names
        wanted = [plan.grads.get(name) if ctx.needs_input_grad[4 + i] else None for i, name in enumerate(names)]
        if not plan.grads or not any(wanted):
            return (None, None, None, None, *[None] * len(tensors))
        if ctx.stash is None:
            raise RuntimeError("Kiln's ORTModule runs each forward's backward once: its saved activations are "
                               "released by the first backward (retain_graph=True is not supported)")
        session = plan.backward_session(ctx.stash)
        feeds = plan.feeds(tensors[:n], tensors[n:], ctx.buffers)
        feeds.update({name: ctx.stash[name] for name in plan.stash_names})
        for j, (g, diff) in enumerate(zip(grad_outputs, plan.differentiable)):
            if diff:
                feeds[_GRAD_OUTPUT.format(j)] = _numpy(g) if g is not None else np.zeros(*ctx.output_likes[j])
        out = session.run(feeds)
        # The stash is read: its arrays serve the next forward call (unless something else holds one).
        stash, ctx.stash = ctx.stash, None
        plan.forward.recycle({name: stash[name] for name in plan.stash_names if name not in plan.output_names})
        del stash, feeds
        grads = [_tensor(out[w]) if w else None for w in wanted]
        return (None, None, None, None, *grads)


def _seed_dropout(graph):
    """Each Dropout's seed drawn from torch's default generator when the module is exported: under
    torch.manual_seed a run draws the same masks again (Kiln's masks, not torch's: the generators
    differ); each call draws new ones (the seed and the call's index)."""
    for node in graph.node:
        if node.op_type == "Dropout" and not any(a.name == "seed" for a in node.attribute):
            node.attribute.append(helper.make_attribute("seed", int(torch.randint(0, 2**31 - 1, (1,)).item())))


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

    def named_modules(self, *args, **kwargs):  # noqa: D102
        return self._torch_module.named_modules(*args, **kwargs)

    def get_submodule(self, target: str) -> torch.nn.Module:  # noqa: D102
        return self._torch_module.get_submodule(target)

    def get_parameter(self, target: str) -> torch.nn.Parameter:  # noqa: D102
        return self._torch_module.get_parameter(target)

    def get_buffer(self, target: str) -> torch.Tensor:  # noqa: D102
        return self._torch_module.get_buffer(target)

    def add_module(self, name: str, module) -> None:  # noqa: D102
        raise NotImplementedError("ORTModule does not support adding modules to it (add them to the wrapped "
                                  "module before wrapping it)")

    def register_module(self, name: str, module) -> None:  # noqa: D102
        self.add_module(name, module)

    def to(self, *args, **kwargs):  # noqa: D102
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        if device is not None and torch.device(device).type != "cpu":
            raise RuntimeError(f"Kiln's ORTModule runs on the CPU; cannot move it to {device}")
        self._torch_module.to(*args, **kwargs)
        self._plans.clear()
        return self

    def forward(self, *args, **kwargs):  # noqa: D102
        # The wrapped module's own forward pre-hooks and hooks run here, as its __call__ would run them.
        module = self._torch_module
        for hook in list(module._forward_pre_hooks.values()):
            changed = hook(module, args)
            if changed is not None:
                args = changed if isinstance(changed, tuple) else (changed,)
        out = self._call(args, kwargs)
        for hook in list(module._forward_hooks.values()):
            changed = hook(module, args, out)
            if changed is not None:
                out = changed
        return out

    def _call(self, args, kwargs):
        if self._fallback_reason is None:
            try:
                return self._run(args, kwargs)
            except _Fallback as e:
                if _fallback_disabled():
                    raise RuntimeError(f"Kiln's ORTModule cannot run this module: {e}") from e
                self._fallback_reason = str(e)
                self._warn(f"Kiln's ORTModule falls back to PyTorch for this module: {e}")
        return self._torch_module.forward(*args, **kwargs)

    def _warn(self, message: str):
        """A RuntimeWarning, unless DebugOptions' log_level is above WARNING."""
        if self._debug.log_level <= LogLevel.WARNING:
            warnings.warn(message, RuntimeWarning, stacklevel=4)

    def _run(self, args, kwargs):
        tensors, structure = _flatten((tuple(args), dict(kwargs)), "the call", constants=True)
        for i, a in enumerate(tensors):
            if a.device.type != "cpu":
                raise _Fallback(f"input tensor {i} is on {a.device}; Kiln's ORTModule runs on the CPU")
        key = (tuple((tuple(a.shape), a.dtype, a.requires_grad) for a in tensors), _signature(structure),
               self._torch_module.training)
        plan = self._plans.get(key)
        if plan is None:
            plan = _Plan(self._torch_module, tensors, structure, self._debug)
            self._plans[key] = plan
            if len(self._plans) > MAX_CACHED_SIGNATURES:
                self._plans.popitem(last=False)
                self._warn(f"Kiln's ORTModule has seen more than {MAX_CACHED_SIGNATURES} input signatures "
                           "(shapes, dtypes, requires_grad, non-tensor arguments, mode); the oldest plan is dropped "
                           "and re-exported if it comes back. Pad inputs to a few shapes to avoid re-exporting.")
        else:
            self._plans.move_to_end(key)
        args = tensors
        state = dict(self._torch_module.state_dict(keep_vars=True))
        params = [state[n] for n in plan.param_names]
        # Views of the buffers; those written back after the call are copied, for the backward.
        written = {name for name, _ in plan.updates}
        buffers = {n: _numpy(state[n]).copy() if n in written else _numpy(state[n]) for n in plan.buffer_names}
        updated = {}
        outputs = _KilnFunction.apply(plan, len(args), buffers, updated, *args, *params)
        self._write_back(updated, state)
        return _unflatten(list(outputs), plan.structure)

    @staticmethod
    def _write_back(updated, state):
        """BatchNorm's running statistics into the module's buffers, num_batches_tracked counted as
        torch counts it (once per training-mode call)."""
        counted = set()
        with torch.no_grad():
            for name, value in updated.items():
                state[name].copy_(_tensor(value))
                prefix = name.rsplit(".", 1)[0]
                tracked = state.get(f"{prefix}.num_batches_tracked")
                if tracked is not None and prefix not in counted:
                    tracked.add_(1)
                    counted.add(prefix)
