"""kiln.nn.Module: torch.nn.Module's interface over kiln::nn's C++ modules.

Every Module owns a C++ module (`_cmod`): a built-in layer's own, or, for a Python subclass, a
kiln._kiln.nn._PythonModule whose forward calls back into the subclass's forward with Vars.
Assigning a Module or a Parameter to an attribute registers it in C++ (torch's __setattr__), so the
C++ tree has torch's names and state_dict keys; `_modules` holds the Python objects of the
children. Parameters read as numpy arrays sharing the module's memory, and as Vars while forward
is traced.

Calling a module on Vars (inside a forward) traces it; calling it on arrays (numpy, torch tensors,
lists) runs the model in Kiln and returns numpy arrays, firing the hooks.
"""
import os
import weakref
from collections import OrderedDict, namedtuple

import numpy as np

from kiln._core import core
from kiln.errors import InvalidArgument, Unsupported
from kiln.nn.var import Var, onnx_dtype

_nn = core.nn


class Parameter:
    """torch.nn.Parameter's role: a value to register as a parameter when assigned to a module."""

    def __init__(self, data, requires_grad=True):
        self.data = np.array(_to_numpy(data), copy=True)
        self.requires_grad = bool(requires_grad)

    def __repr__(self):
        return f"Parameter containing:\n{self.data!r}"


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict(strict=False) returns (torch's named tuple)."""

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class StateDictError(InvalidArgument, RuntimeError):
    """load_state_dict's failure: torch raises RuntimeError with this text; Kiln's is also a ValueError."""


class RemovableHandle:
    """What register_forward_hook returns: remove() detaches the hook."""

    def __init__(self, handle):
        self._handle = handle

    def remove(self):
        self._handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _to_numpy(value):
    """numpy arrays as they are; torch tensors and Parameters as numpy; anything else through asarray."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, Parameter):
        return value.data
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):  # torch.Tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _wrap(cmod):
    """The Python object of a C++ module: a Python subclass's own object, else a wrapper of the
    kiln.nn class bound to its C++ class (NativeModule for classes the zoo keeps to itself)."""
    if isinstance(cmod, _nn._PythonModule):
        return cmod.owner()
    from kiln.nn import layers
    cls = layers.NATIVE_CLASSES.get(type(cmod).__name__, NativeModule)
    obj = cls.__new__(cls)
    obj._init_native(cmod)
    return obj


class Module:
    """Base class of kiln.nn models. Subclasses call super().__init__() first and implement
    forward(*vars) with Var operators, kiln.nn.functional and their submodules."""

    _kiln_nn_module = True  # what kiln.Trainer looks for

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() passed arguments to Module.__init__, which takes none")
        self._init_native(_nn._PythonModule(type(self).__name__, weakref.ref(self)))

    def _init_native(self, cmod):
        d = self.__dict__
        d["_cmod"] = cmod
        d["_modules"] = OrderedDict()
        d["_pending"] = None  # the Python arguments of the call being traced
        d["_single_output"] = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # ---- Attributes: torch's registration -----------------------------------------------------
    def __setattr__(self, name, value):
        d = self.__dict__
        if "_cmod" not in d:
            if isinstance(value, (Module, Parameter)):
                raise AttributeError(f"cannot assign {'module' if isinstance(value, Module) else 'parameter'} "
                                     "before Module.__init__() call")
            object.__setattr__(self, name, value)
            return
        if isinstance(value, Module):
            current = self._children().get(name)
            if current is value:
                return
            if current is not None:
                raise Unsupported(f"{type(self).__name__}.{name}: replacing a submodule is not supported by kiln.nn "
                                  "(build the module with the final one)")
            self._cmod.add_module(name, value._cmod)
            self._modules[name] = value
            return
        found = self._cmod.local_tensor(name)
        if isinstance(value, Parameter):
            if found is None:
                self._cmod.register_parameter(name, value.data, value.requires_grad)
                return
            value = value.data
        if found is not None and value is not None and not isinstance(value, Var):
            current = found[1]
            new = _to_numpy(value)
            if new.shape != current.shape:
                raise Unsupported(f"{type(self).__name__}.{name}: assigning a {found[0]} of shape {new.shape} over one "
                                  f"of shape {current.shape} (kiln.nn copies into registered tensors)")
            np.copyto(current, new, casting="unsafe")
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name):  # only for names not found the usual way
        d = self.__dict__
        if "_cmod" in d:
            children = self._children()
            if name in children:
                return children[name]
            found = d["_cmod"].local_tensor(name)
            if found is not None:
                return Var(_nn._parameter(d["_cmod"], name)) if _nn._tracing() else found[1]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        if name in self.__dict__.get("_modules", {}) or self._cmod.local_tensor(name) is not None:
            raise Unsupported(f"{type(self).__name__}: deleting '{name}' is not supported by kiln.nn")
        object.__delattr__(self, name)

    def __dir__(self):
        names = set(super().__dir__()) | set(self._children())
        names |= {n for n, _ in self._cmod.named_parameters(False)} | {n for n, _ in self._cmod.named_buffers(False)}
        return sorted(names)

    def _children(self):
        """name -> Python child, synchronised with the C++ tree (children registered in C++ by
        built-in modules and zoo models get wrappers on first use)."""
        mods = self.__dict__["_modules"]
        native = self._cmod.named_children()
        if len(native) != len(mods):
            fresh = OrderedDict((n, mods[n] if n in mods else _wrap(c)) for n, c in native)
            mods.clear()
            mods.update(fresh)
        return mods

    def register_parameter(self, name, param):
        if param is None:
            raise Unsupported(f"{type(self).__name__}.register_parameter('{name}', None): "
                              "kiln.nn has no empty parameters")
        if not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(kiln.nn.Parameter or None required)")
        self._cmod.register_parameter(name, param.data, param.requires_grad)

    def register_buffer(self, name, tensor, persistent=True):
        if tensor is None:
            raise Unsupported(f"{type(self).__name__}.register_buffer('{name}', None): kiln.nn has no empty buffers")
        self._cmod.register_buffer(name, np.array(_to_numpy(tensor), copy=True), persistent)

    def add_module(self, name, module):
        if not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self.__setattr__(name, module)

    register_module = add_module

    # ---- Traversal ----------------------------------------------------------------------------
    def named_children(self):
        return iter(list(self._children().items()))

    def children(self):
        return iter(list(self._children().values()))

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        memo = set() if memo is None else memo
        if remove_duplicate and id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._children().items():
            yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        for name, value in self._cmod.named_parameters(recurse):
            yield (f"{prefix}.{name}" if prefix else name), value

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        for name, value in self._cmod.named_buffers(recurse):
            yield (f"{prefix}.{name}" if prefix else name), value

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target):
        """torch's: AttributeError "<Class> has no attribute `x`" / "`x` is not an nn.Module"."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            children = mod._children()
            if item not in children:
                if mod._cmod.local_tensor(item) is not None:
                    raise AttributeError(f"`{item}` is not an nn.Module")
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = children[item]
        return mod

    def get_parameter(self, target):
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        found = mod._cmod.local_tensor(name)
        if found is None:
            raise AttributeError(f"{mod._get_name()} has no attribute `{name}`")
        if found[0] != "parameter":
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return found[1]

    def get_buffer(self, target):
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        found = mod._cmod.local_tensor(name)
        if found is None or found[0] != "buffer":
            raise AttributeError(f"`{name}` is not a buffer")
        return found[1]

    def _get_name(self):
        return self._cmod.type_name

    # ---- Modes and freezing -------------------------------------------------------------------
    @property
    def training(self):
        return self._cmod.training

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self._cmod.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        self._cmod.requires_grad_(bool(requires_grad))
        return self

    def frozen_parameters(self):
        """The state_dict keys of the parameters with requires_grad False (frozen_params in artifacts)."""
        return list(self._cmod.frozen_parameters())

    def num_parameters(self, only_trainable=False):
        return self._cmod.num_parameters(only_trainable)

    # ---- state_dict ---------------------------------------------------------------------------
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """An OrderedDict of numpy arrays under torch's keys, sharing the module's memory (as torch's
        tensors do: copy them to keep a snapshot)."""
        out = OrderedDict() if destination is None else destination
        for key, value in self._cmod.state_dict():
            out[prefix + key] = value
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Values may be numpy arrays or torch tensors (converted as torch's copy_ converts dtypes).
        strict: missing or unexpected keys raise StateDictError (a RuntimeError, with torch's text);
        shape mismatches always do. Returns _IncompatibleKeys(missing_keys, unexpected_keys)."""
        arrays = {str(k): np.asarray(_to_numpy(v), order="C") for k, v in state_dict.items()}
        try:
            missing, unexpected = self._cmod.load_state_dict(arrays, bool(strict))
        except InvalidArgument as e:
            if str(e).startswith("Error(s) in loading state_dict"):
                raise StateDictError(str(e)) from None
            raise
        return _IncompatibleKeys(list(missing), list(unexpected))

    def save_safetensors(self, path):
        self._cmod.save_safetensors(os.fspath(path))

    def save_pretrained(self, save_directory, **kwargs):
        """A zoo model as a Hugging Face folder: config.json and model.safetensors (kiln/nn/pretrained.py)."""
        from kiln.nn.pretrained import save_pretrained
        save_pretrained(self, save_directory, **kwargs)

    def load_safetensors(self, path, strict=True):
        """A safetensors or .npz file keyed by state_dict keys."""
        return self.load_state_dict(_nn.load_weights_file(os.fspath(path)), strict)

    # ---- Hooks --------------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, input_tuple), called with numpy arrays when the model runs in Kiln (after the
        run, in call order). Hooks observe: returning a value is an error (Kiln cannot replace
        tensors of a run that already happened)."""
        _no_hook_options(prepend, with_kwargs)
        ref = weakref.ref(self)

        def call(inputs):
            if hook(ref(), tuple(inputs)) is not None:
                raise Unsupported(f"forward pre-hook {hook!r} returned a value: kiln.nn hooks observe, they cannot "
                                  "replace inputs")
        return RemovableHandle(self._cmod.register_forward_pre_hook(call))

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """hook(module, input_tuple, output): output is an array, or a tuple for several outputs."""
        _no_hook_options(prepend, with_kwargs)
        ref = weakref.ref(self)

        def call(inputs, outputs):
            out = outputs[0] if len(outputs) == 1 else tuple(outputs)
            if hook(ref(), tuple(inputs), out) is not None:
                raise Unsupported(f"forward hook {hook!r} returned a value: kiln.nn hooks observe, they cannot "
                                  "replace outputs")
        return RemovableHandle(self._cmod.register_forward_hook(call))

    # ---- Calling ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if _nn._tracing() or any(isinstance(a, Var) for a in args) or any(isinstance(v, Var) for v in kwargs.values()):
            return self._trace_call(args, kwargs)
        if kwargs:
            raise TypeError(f"{self._get_name()}: keyword arguments are taken while tracing (inside a forward); "
                            "run the model on positional arrays")
        outs = self._cmod.run([np.asarray(_to_numpy(a), order="C") for a in args])
        return outs[0] if len(outs) == 1 and self._single_output else tuple(outs)

    def _trace_call(self, args, kwargs):
        """A call inside a forward: through the C++ Module::call (scope, hooks' record)."""
        if isinstance(self._cmod, _nn._PythonModule):
            self.__dict__["_pending"] = (args, kwargs)
            inputs = [a._v for a in args if isinstance(a, Var)]
        else:
            if kwargs:
                raise TypeError(f"{self._get_name()}() got keyword arguments {sorted(kwargs)}; kiln.nn passes the "
                                "inputs of built-in modules by position")
            from kiln.nn.functional import _as_var
            like = next((a for a in args if isinstance(a, Var)), None)
            inputs = [None if a is None else _as_var(a, like)._v for a in args]
        outs = [Var(v) if v.name else None for v in _nn._call(self._cmod, inputs)]
        return outs[0] if len(outs) == 1 and self._single_output else tuple(outs)

    def _kiln_forward(self, cvars):
        """Called by C++ (the _PythonModule's forward): the Python forward over Vars, its outputs as
        the C++ values."""
        pending = self.__dict__["_pending"]
        self.__dict__["_pending"] = None
        args, kwargs = pending if pending is not None else ([Var(v) for v in cvars], {})
        out = self.forward(*args, **kwargs)
        single = isinstance(out, Var)
        self.__dict__["_single_output"] = single
        outs = [out] if single else list(out) if isinstance(out, (tuple, list)) else None
        if outs is None or not all(o is None or isinstance(o, Var) for o in outs):
            raise TypeError(f"{type(self).__name__}.forward returned {type(out).__name__}; it must return a Var or "
                            "a tuple of Vars")
        return [o._v if o is not None else _nn._none() for o in outs]

    # ---- Export -------------------------------------------------------------------------------
    def generate(self, input_ids=None, **kwargs):
        """Text generation from a zoo causal LM (kiln.generation.generate: HF's GenerationConfig
        names; a KV cache through the model's decoder-with-past export)."""
        from kiln.generation import generate
        return generate(self, input_ids, **kwargs)

    def export(self, path, input_shapes, dynamic_axes=None, *, input_dtypes=None, output_names=None, opset=17):
        """torch.onnx.export's role: forward traced once over inputs of these shapes, written to `path`
        with initializers named by the state_dict keys. input_shapes: {"input": (1, 1, 28, 28), ...}
        (in forward's argument order), a list of (name, shape), or one shape (the input "input").
        dynamic_axes: {"input": {0: "batch"}} or {"input": [0]}, outputs too. input_dtypes: one
        dtype per input (a dict by name, or a list; default float32). output_names: default
        "output" (output0, output1, ... for several). The module's current mode decides what is
        exported: train() gives training-mode BatchNorm and active Dropout."""
        args = _export_args(input_shapes, dynamic_axes, input_dtypes, output_names, opset)
        self._cmod.export_onnx(os.fspath(path), *args)

    def to_onnx(self, input_shapes, dynamic_axes=None, *, input_dtypes=None, output_names=None, opset=17):
        """As export(), returning an onnx.ModelProto."""
        import onnx
        return onnx.load_from_string(self.to_onnx_bytes(input_shapes, dynamic_axes, input_dtypes=input_dtypes,
                                                        output_names=output_names, opset=opset))

    def to_onnx_bytes(self, input_shapes, dynamic_axes=None, *, input_dtypes=None, output_names=None, opset=17):
        return self._cmod.to_onnx_bytes(*_export_args(input_shapes, dynamic_axes, input_dtypes, output_names, opset))

    # ---- repr ---------------------------------------------------------------------------------
    def extra_repr(self):
        return ""

    def __repr__(self):
        return self._cmod.repr()


class NativeModule(Module):
    """A C++ module without a kiln.nn class of its own (inner blocks of zoo models)."""

    def __init__(self, *args, **kwargs):
        raise TypeError("NativeModule wraps modules built in C++; it is not constructed directly")


def _no_hook_options(prepend, with_kwargs):
    if prepend or with_kwargs:
        raise Unsupported("register_forward_hook(prepend=/with_kwargs=) is not supported by kiln.nn")


def _export_args(input_shapes, dynamic_axes, input_dtypes, output_names, opset):
    if isinstance(input_shapes, dict):
        inputs = [(str(k), [int(d) for d in v]) for k, v in input_shapes.items()]
    elif input_shapes and all(isinstance(d, (int, np.integer)) for d in input_shapes):
        inputs = [("input", [int(d) for d in input_shapes])]
    else:
        inputs = [(str(k), [int(d) for d in v]) for k, v in input_shapes]
    axes = {}
    for name, spec in (dynamic_axes or {}).items():
        if isinstance(spec, dict):
            axes[str(name)] = {int(a): str(n) for a, n in spec.items()}
        else:  # torch's list form: generated names
            axes[str(name)] = {int(a): f"{name}_dynamic_axes_{i + 1}" for i, a in enumerate(spec)}
    if input_dtypes is None:
        dtypes = []
    elif isinstance(input_dtypes, dict):
        unknown = set(input_dtypes) - {n for n, _ in inputs}
        if unknown:
            raise InvalidArgument(f"input_dtypes names {sorted(unknown)}, "
                                  f"which are not inputs ({[n for n, _ in inputs]})")
        dtypes = [onnx_dtype(input_dtypes.get(n, np.float32)) for n, _ in inputs]
    else:
        dtypes = [onnx_dtype(d) for d in input_dtypes]
    return inputs, axes, dtypes, list(output_names or []), int(opset)
