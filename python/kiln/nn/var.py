"""Symbolic values: what a kiln.nn forward computes with.

A Python forward runs once per export (and once per input signature when the module is called on
arrays); its arguments are Var objects, and every operation on them adds ONNX nodes to the graph
being traced. A Var knows its dtype and shape; a dimension that is only known when the model runs
(a dynamic axis such as the batch) is a SymDim, which reshape / view / expand accept and turn into
the Shape arithmetic torch.onnx.export records for `x.view(x.size(0), -1)`.
"""
import numpy as np

from kiln.errors import Unsupported

# ONNX type names (Kiln's dtype_name) <-> numpy dtypes.
_NUMPY = {"float": np.float32, "double": np.float64, "float16": np.float16, "int64": np.int64, "int32": np.int32,
          "int16": np.int16, "int8": np.int8, "uint64": np.uint64, "uint32": np.uint32, "uint16": np.uint16,
          "uint8": np.uint8, "bool": np.bool_}
_ONNX = {np.dtype(v): k for k, v in _NUMPY.items()}


def onnx_dtype(dtype):
    """An ONNX type name for a numpy dtype (or a name already)."""
    if isinstance(dtype, str) and dtype in _NUMPY or dtype == "bfloat16":
        return dtype
    try:
        return _ONNX[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"dtype {dtype!r} has no Kiln equivalent") from None


class SymDim:
    """A dimension known only when the model runs: axis `axis` of the traced value `var`."""
    __slots__ = ("var", "axis")

    def __init__(self, var, axis):
        self.var, self.axis = var, axis

    def __repr__(self):
        return f"SymDim({self.var.name}[{self.axis}])"

    def _unsupported(self, *_):
        raise Unsupported(f"{self!r}: arithmetic on a dynamic dimension is not traced by kiln.nn; pass it "
                          "directly to reshape / view / expand, or use -1")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __floordiv__ = __rfloordiv__ = _unsupported
    __index__ = __int__ = _unsupported


class Size(tuple):
    """torch.Size's role: a tuple of ints and SymDims."""

    def numel(self):
        n = 1
        for d in self:
            if isinstance(d, SymDim):
                raise Unsupported(f"numel of a shape with a dynamic dimension ({self!r})")
            n *= d
        return n


class Var:
    """A value of the graph being traced (torch.Tensor's role inside forward)."""
    __slots__ = ("_v",)

    def __init__(self, v):
        self._v = v  # kiln._kiln.nn._Var

    # ---- Metadata ----------------------------------------------------------------------------
    @property
    def name(self):
        return self._v.name

    @property
    def dtype(self):
        name = self._v.dtype
        return np.dtype(_NUMPY[name]) if name in _NUMPY else name

    @property
    def shape(self):
        return Size(SymDim(self._v, i) if d < 0 else d for i, d in enumerate(self._v.shape))

    def size(self, dim=None):
        s = self.shape
        return s if dim is None else s[dim]

    @property
    def ndim(self):
        return len(self._v.shape)

    def dim(self):
        return self.ndim

    def __len__(self):
        d = self.shape[0]
        if isinstance(d, SymDim):
            raise Unsupported(f"len() of {self!r}: its first dimension is dynamic")
        return d

    def __repr__(self):
        dims = ", ".join("?" if d < 0 else str(d) for d in self._v.shape)
        return f"Var('{self.name}', {self._v.dtype}, [{dims}])"

    def __bool__(self):
        raise Unsupported(f"{self!r}: the truth value of a traced value is known only when the model runs "
                          "(data-dependent control flow is not traced)")

    # ---- Arithmetic --------------------------------------------------------------------------
    def __add__(self, o): return F.add(self, o)
    def __radd__(self, o): return F.add(o, self)
    def __sub__(self, o): return F.sub(self, o)
    def __rsub__(self, o): return F.sub(o, self)
    def __mul__(self, o): return F.mul(self, o)
    def __rmul__(self, o): return F.mul(o, self)
    def __truediv__(self, o): return F.div(self, o)
    def __rtruediv__(self, o): return F.div(o, self)
    def __matmul__(self, o): return F.matmul(self, o)
    def __rmatmul__(self, o): return F.matmul(o, self)
    def __pow__(self, o): return F.pow(self, o)
    def __neg__(self): return F.neg(self)
    def __lt__(self, o): return F.compare("Less", self, o)
    def __gt__(self, o): return F.compare("Greater", self, o)

    # ---- torch.Tensor's methods --------------------------------------------------------------
    def reshape(self, *shape): return F.reshape(self, _shape_args(shape))
    def view(self, *shape): return F.reshape(self, _shape_args(shape))
    def flatten(self, start_dim=0, end_dim=-1): return F.flatten(self, start_dim, end_dim)
    def transpose(self, dim0, dim1): return F.transpose(self, dim0, dim1)
    def permute(self, *dims): return F.permute(self, _shape_args(dims))
    def unsqueeze(self, dim): return F.unsqueeze(self, dim)
    def squeeze(self, dim=None): return F.squeeze(self, dim)
    def mean(self, dim=None, keepdim=False): return F.mean(self, dim, keepdim)
    def sum(self, dim=None, keepdim=False): return F.sum(self, dim, keepdim)
    def softmax(self, dim): return F.softmax(self, dim)
    def log_softmax(self, dim): return F.log_softmax(self, dim)
    def relu(self): return F.relu(self)
    def sigmoid(self): return F.sigmoid(self)
    def tanh(self): return F.tanh(self)
    def exp(self): return F.exp(self)
    def log(self): return F.log(self)
    def sqrt(self): return F.sqrt(self)
    def abs(self): return F.abs(self)
    def matmul(self, o): return F.matmul(self, o)
    def contiguous(self): return self
    def float(self): return F.cast(self, np.float32)
    def to(self, dtype): return F.cast(self, dtype)
    def type_as(self, other): return F.cast(self, other.dtype)
    @property
    def T(self): return F.permute(self, list(range(self.ndim))[::-1])  # noqa: E301,N802


def _shape_args(args):
    """view(2, 3) and view((2, 3)) alike."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return list(args[0])
    return list(args)


from kiln.nn import functional as F  # noqa: E402  (functional uses Var)
