"""torch.nn.functional's role for kiln.nn: functions over Vars that emit ONNX (opset 17) nodes into
the graph being traced, written as torch.onnx.export writes them. Each computes its output shape
(-1 for a dimension known only at run time), because the tracer does not infer shapes.

Arguments that are numbers or numpy arrays where a tensor is expected become constants of the
other operand's dtype (torch's type promotion for Python scalars).
"""
import builtins
import math

import numpy as np

from kiln._core import core
from kiln.errors import InvalidArgument, ShapeError, Unsupported
from kiln.nn.var import SymDim, Var, onnx_dtype

_nn = core.nn
_count = builtins.sum  # this module defines torch's sum

__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "leaky_relu", "softmax", "log_softmax", "dropout", "linear",
           "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "layer_norm", "embedding", "cat", "stack",
           "matmul", "add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "abs", "reshape", "flatten",
           "transpose", "permute", "unsqueeze", "squeeze", "mean", "sum", "cast"]


# ---- Emitting ------------------------------------------------------------------------------------
def _emit(op_type, inputs, dtype, shape, **attrs):
    """One node, one output."""
    return _emit_multi(op_type, inputs, [(dtype, shape)], **attrs)[0]


def _emit_multi(op_type, inputs, outputs, **attrs):
    cvars = [None if v is None else v._v for v in inputs]
    outs = [(onnx_dtype(d), [int(x) for x in s]) for d, s in outputs]
    return [Var(v) for v in _nn._op(op_type, cvars, attrs, outs)]


def _dims(x):
    return list(x._v.shape)


def _const(value, dtype, hint="const"):
    return Var(_nn._constant(np.asarray(value, dtype=np.dtype(dtype) if not isinstance(dtype, str) else None), hint))


def _ints(values, hint="shape"):
    return Var(_nn._constant(np.asarray(values, dtype=np.int64).reshape(-1), hint))


def _as_var(v, like):
    """A Var for a Var, a number or an array (a constant of `like`'s dtype for numbers)."""
    if isinstance(v, Var):
        return v
    if isinstance(v, (bool, int, float)):
        if like is None:
            raise TypeError(f"a number ({v!r}) where a tensor is expected and no Var gives its dtype")
        return Var(_nn._constant(np.asarray(v, dtype=like.dtype), "scalar"))
    if isinstance(v, np.ndarray):
        return Var(_nn._constant(np.ascontiguousarray(v), "const"))
    if hasattr(v, "detach") and hasattr(v, "numpy"):  # a torch tensor
        return Var(_nn._constant(v.detach().cpu().numpy(), "const"))
    raise TypeError(f"expected a kiln.nn.Var, a number or a numpy array, got {type(v).__name__}")


def _axis(dim, rank, what):
    if not -rank <= dim < max(rank, 1):
        raise IndexError(f"{what}: Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], "
                         f"but got {dim})")
    return dim % rank if rank else 0


def _broadcast(a, b, what):
    """numpy's broadcasting over shapes with -1 for unknown dims."""
    ra, rb = a[::-1], b[::-1]
    out = []
    for i in range(max(len(a), len(b))):
        x = ra[i] if i < len(ra) else 1
        y = rb[i] if i < len(rb) else 1
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif x < 0:
            out.append(y)
        elif y < 0:
            out.append(x)
        else:
            raise ShapeError(f"{what}: shapes {list(a)} and {list(b)} do not broadcast")
    return out[::-1]


def _binary(op_type, a, b, dtype=None):
    if not isinstance(a, Var):
        a = _as_var(a, b)
    b = _as_var(b, a)
    if a.dtype != b.dtype:
        raise TypeError(f"{op_type}: operands of dtypes {a.dtype} and {b.dtype}; cast one (x.to(dtype)) first")
    return _emit(op_type, [a, b], a.dtype if dtype is None else dtype, _broadcast(_dims(a), _dims(b), op_type))


def _unary(op_type, x, **attrs):
    return _emit(op_type, [x], x.dtype, _dims(x), **attrs)


# ---- Elementwise ---------------------------------------------------------------------------------
def add(a, b): return _binary("Add", a, b)
def sub(a, b): return _binary("Sub", a, b)
def mul(a, b): return _binary("Mul", a, b)
def div(a, b): return _binary("Div", a, b)
def compare(op_type, a, b): return _binary(op_type, a, b, dtype=np.bool_)
def neg(x): return _unary("Neg", x)
def exp(x): return _unary("Exp", x)
def log(x): return _unary("Log", x)
def sqrt(x): return _unary("Sqrt", x)
def abs(x): return _unary("Abs", x)  # noqa: A001 (torch's name)
def relu(x, inplace=False): return _unary("Relu", x)
def sigmoid(x): return _unary("Sigmoid", x)
def tanh(x): return _unary("Tanh", x)
def leaky_relu(x, negative_slope=0.01, inplace=False): return _unary("LeakyRelu", x, alpha=float(negative_slope))


def pow(x, exponent):  # noqa: A001 (torch's name)
    return _emit("Pow", [x, _as_var(exponent, x)], x.dtype, _dims(x))


def silu(x, inplace=False):
    return mul(x, sigmoid(x))


def gelu(x, approximate="none"):
    """The formulas torch exports at opset 17 (ONNX's Gelu is opset 20)."""
    if approximate == "none":
        inner = _unary("Erf", div(x, math.sqrt(2.0)))
    elif approximate == "tanh":
        inner = tanh(mul(add(x, mul(mul(mul(x, x), x), 0.044715)), math.sqrt(2.0 / math.pi)))
    else:
        raise InvalidArgument(f"gelu: approximate argument must be either none or tanh (got '{approximate}')")
    return mul(mul(x, add(inner, 1.0)), 0.5)


def softmax(x, dim=None, dtype=None):
    if dim is None:
        raise InvalidArgument("softmax: pass dim (torch's implicit dim choice is deprecated)")
    return _unary("Softmax", x if dtype is None else cast(x, dtype), axis=_axis(dim, x.ndim, "softmax"))


def log_softmax(x, dim=None, dtype=None):
    if dim is None:
        raise InvalidArgument("log_softmax: pass dim (torch's implicit dim choice is deprecated)")
    return _unary("LogSoftmax", x if dtype is None else cast(x, dtype), axis=_axis(dim, x.ndim, "log_softmax"))


def dropout(x, p=0.5, training=True, inplace=False):
    """As nn.Dropout exports: the identity outside training, else Dropout(x, ratio, True)."""
    if not 0.0 <= p <= 1.0:
        raise InvalidArgument(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training:
        return x
    if p >= 1.0:
        return mul(x, 0.0)
    ratio = _const(p, x.dtype, "ratio")
    mode = _const(True, np.bool_, "training_mode")
    return _emit_multi("Dropout", [x, ratio, mode], [(x.dtype, _dims(x)), (np.bool_, _dims(x))])[0]


def cast(x, dtype):
    name = onnx_dtype(dtype)
    if name == x._v.dtype:
        return x
    to = {"float": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7, "bool": 9,
          "float16": 10, "double": 11, "uint32": 12, "uint64": 13, "bfloat16": 16}[name]
    return _emit("Cast", [x], name, _dims(x), to=to)


# ---- Layers as functions -------------------------------------------------------------------------
def linear(x, weight, bias=None):
    """Gemm(transB=1) for 2-D inputs, else MatMul by the transposed weight (+ Add), as torch exports."""
    out_f, in_f = _dims(weight)
    if _dims(x)[-1] not in (in_f, -1):
        raise ShapeError(f"linear: mat1 and mat2 shapes cannot be multiplied ({_dims(x)} and [{in_f}, {out_f}] "
                         "transposed)")
    shape = _dims(x)[:-1] + [out_f]
    if x.ndim == 2:
        return _emit("Gemm", [x, weight] + ([bias] if bias is not None else []), x.dtype, shape,
                     alpha=1.0, beta=1.0, transB=1)
    y = _emit("MatMul", [x, transpose(weight, 0, 1)], x.dtype, shape)
    return y if bias is None else add(y, bias)


def _pair(v, n=2):
    return list(v) if isinstance(v, (tuple, list)) else [v] * n


def _window(size, k, s, p, d, ceil_mode=False):
    if size < 0:
        return -1
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    if x.ndim != 4:
        raise ShapeError(f"conv2d: expected a 4-D input [N, C, H, W], got {_dims(x)}")
    k, s, d = _dims(weight)[2:], _pair(stride), _pair(dilation)
    if isinstance(padding, str):
        raise Unsupported(f"conv2d(padding='{padding}') as a function: use nn.Conv2d or numbers")
    p = _pair(padding)
    n, _, h, w = _dims(x)
    shape = [n, _dims(weight)[0], _window(h, k[0], s[0], p[0], d[0]), _window(w, k[1], s[1], p[1], d[1])]
    inputs = [x, weight] + ([bias] if bias is not None else [])
    return _emit("Conv", inputs, x.dtype, shape, kernel_shape=k, strides=s, pads=p + p, dilations=d, group=groups)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if return_indices:
        raise Unsupported("max_pool2d(return_indices=True)")
    k = _pair(kernel_size)
    s, p, d = _pair(stride if stride is not None else kernel_size), _pair(padding), _pair(dilation)
    n, c, h, w = _dims(x)
    shape = [n, c, _window(h, k[0], s[0], p[0], d[0], ceil_mode), _window(w, k[1], s[1], p[1], d[1], ceil_mode)]
    return _emit("MaxPool", [x], x.dtype, shape, kernel_shape=k, strides=s, pads=p + p, dilations=d,
                 ceil_mode=int(ceil_mode))


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    k = _pair(kernel_size)
    s, p = _pair(stride if stride is not None else kernel_size), _pair(padding)
    n, c, h, w = _dims(x)
    shape = [n, c, _window(h, k[0], s[0], p[0], 1, ceil_mode), _window(w, k[1], s[1], p[1], 1, ceil_mode)]
    return _emit("AveragePool", [x], x.dtype, shape, kernel_shape=k, strides=s, pads=p + p,
                 ceil_mode=int(ceil_mode), count_include_pad=int(count_include_pad))


def adaptive_avg_pool2d(x, output_size):
    if _pair(output_size) != [1, 1]:
        raise Unsupported(f"adaptive_avg_pool2d to {output_size} as a function: use nn.AdaptiveAvgPool2d")
    n, c = _dims(x)[:2]
    return _emit("GlobalAveragePool", [x], x.dtype, [n, c, 1, 1])


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    ns = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    if _dims(x)[-len(ns):] != ns:
        raise ShapeError(f"layer_norm: normalized_shape {ns} does not match the input's trailing dims {_dims(x)}")
    if weight is None:
        weight = _const(np.ones(ns), x.dtype, "ones")
    return _emit("LayerNormalization", [x, weight, bias], x.dtype, _dims(x), axis=-len(ns), epsilon=float(eps))


def embedding(indices, weight):
    return _emit("Gather", [weight, indices], weight.dtype, _dims(indices) + _dims(weight)[1:])


# ---- Combining -----------------------------------------------------------------------------------
def matmul(a, b):
    if not isinstance(a, Var):
        a = _as_var(a, b)
    b = _as_var(b, a)
    da, db = _dims(a), _dims(b)
    if not da or not db:
        raise ShapeError("matmul: both arguments need at least one dimension")
    a2 = [1] + da if len(da) == 1 else da
    b2 = db + [1] if len(db) == 1 else db
    if -1 not in (a2[-1], b2[-2]) and a2[-1] != b2[-2]:
        raise ShapeError(f"matmul: shapes {da} and {db} cannot be multiplied")
    shape = _broadcast(a2[:-2], b2[:-2], "matmul") + [a2[-2], b2[-1]]
    if len(da) == 1:
        shape.pop(-2)
    if len(db) == 1:
        shape.pop(-1)
    return _emit("MatMul", [a, b], a.dtype, shape)


def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise InvalidArgument("cat: expected a non-empty list of Vars")
    rank = tensors[0].ndim
    axis = _axis(dim, rank, "cat")
    shape = list(_dims(tensors[0]))
    for t in tensors[1:]:
        d = _dims(t)
        if len(d) != rank or any(i != axis and -1 not in (d[i], shape[i]) and d[i] != shape[i] for i in range(rank)):
            raise ShapeError(f"cat: sizes of tensors must match except in dimension {dim}: {_dims(tensors[0])} vs {d}")
        shape[axis] = -1 if -1 in (shape[axis], d[axis]) else shape[axis] + d[axis]
    return _emit("Concat", tensors, tensors[0].dtype, shape, axis=axis)


def stack(tensors, dim=0):
    tensors = list(tensors)
    return cat([unsqueeze(t, dim) for t in tensors], dim)


# ---- Shape ---------------------------------------------------------------------------------------
def _target(shape):
    """The int64 target of a Reshape: a constant, or Shape/Gather pieces for SymDims concatenated."""
    if not any(isinstance(d, SymDim) for d in shape):
        return _ints(shape)
    pieces, run = [], []
    for d in shape:
        if isinstance(d, SymDim):
            if run:
                pieces.append(_ints(run))
                run = []
            src = Var(d.var)
            whole = _emit("Shape", [src], np.int64, [src.ndim])
            pieces.append(_emit("Gather", [whole, _ints([d.axis], "axis")], np.int64, [1], axis=0))
        else:
            run.append(int(d))
    if run:
        pieces.append(_ints(run))
    return _emit("Concat", pieces, np.int64, [len(shape)], axis=0)


def reshape(x, shape):
    shape = list(shape)
    dims = _dims(x)
    if _count(1 for d in shape if not isinstance(d, SymDim) and d == -1) > 1:
        raise InvalidArgument(f"reshape {dims} -> {shape}: only one dimension can be inferred")
    out = [-1 if isinstance(d, SymDim) else int(d) for d in shape]
    if -1 in out and -1 not in dims:
        known = math.prod(d for d in out if d != -1)
        total = math.prod(dims)
        if known == 0 or total % known or _count(1 for d in out if d == -1) > 1:
            if not any(isinstance(d, SymDim) for d in shape):
                raise ShapeError(f"shape '{shape}' is invalid for input of size {total}")
        elif _count(1 for d in out if d == -1) == 1:
            out[out.index(-1)] = total // known
    elif -1 not in out and -1 not in dims and math.prod(out) != math.prod(dims):
        raise ShapeError(f"shape '{shape}' is invalid for input of size {math.prod(dims)}")
    return _emit("Reshape", [x, _target(shape)], x.dtype, out)


def flatten(x, start_dim=0, end_dim=-1):
    dims = _dims(x)
    if not dims:
        return reshape(x, [1])
    s, e = _axis(start_dim, len(dims), "flatten"), _axis(end_dim, len(dims), "flatten")
    merged = -1 if -1 in dims[s:e + 1] else math.prod(dims[s:e + 1])
    if s == 1 and e == len(dims) - 1:
        return _emit("Flatten", [x], x.dtype, [dims[0], merged], axis=1)
    sym = x.shape
    target = list(sym[:s]) + [-1 if merged == -1 else merged] + list(sym[e + 1:])
    return reshape(x, target)


def transpose(x, dim0, dim1):
    r = x.ndim
    perm = list(range(r))
    a, b = _axis(dim0, r, "transpose"), _axis(dim1, r, "transpose")
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, perm)


def permute(x, dims):
    r = x.ndim
    perm = [_axis(d, r, "permute") for d in dims]
    if sorted(perm) != list(range(r)):
        raise InvalidArgument(f"permute: {list(dims)} is not a permutation of the {r} dims of {_dims(x)}")
    return _emit("Transpose", [x], x.dtype, [_dims(x)[p] for p in perm], perm=perm)


def unsqueeze(x, dim):
    r = x.ndim + 1
    axis = _axis(dim, r, "unsqueeze")
    shape = _dims(x)
    shape.insert(axis, 1)
    return _emit("Unsqueeze", [x, _ints([axis], "axes")], x.dtype, shape)


def squeeze(x, dim=None):
    dims = _dims(x)
    if dim is None:
        if -1 in dims:
            raise Unsupported(f"squeeze() of {dims}: which dynamic dims are 1 is unknown; name the dim")
        axes = [i for i, d in enumerate(dims) if d == 1]
    else:
        axes = [_axis(dim, len(dims), "squeeze")]
        if dims[axes[0]] not in (1, -1):
            return x  # torch leaves a dim that is not 1 alone
    return _emit("Squeeze", [x, _ints(axes, "axes")], x.dtype, [d for i, d in enumerate(dims) if i not in axes])


def _reduce(op_type, x, dim, keepdim):
    dims = _dims(x)
    if dim is None:
        axes = list(range(len(dims)))
    else:
        axes = sorted(_axis(d, len(dims), op_type) for d in (dim if isinstance(dim, (tuple, list)) else [dim]))
    shape = [1 if i in axes else d for i, d in enumerate(dims)] if keepdim else \
        [d for i, d in enumerate(dims) if i not in axes]
    if op_type == "ReduceSum":  # opset 13: axes is an input
        return _emit(op_type, [x, _ints(axes, "axes")], x.dtype, shape, keepdims=int(keepdim))
    return _emit(op_type, [x], x.dtype, shape, axes=axes, keepdims=int(keepdim))


def mean(x, dim=None, keepdim=False):
    return _reduce("ReduceMean", x, dim, keepdim)


def sum(x, dim=None, keepdim=False):  # noqa: A001 (torch's name)
    return _reduce("ReduceSum", x, dim, keepdim)
