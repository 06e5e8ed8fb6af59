"""Forward FLOPs of an exported ONNX model, counted from its graph: every MatMul, Gemm and Conv
node at the shapes ONNX shape inference gives it (with data propagation, so that a Reshape whose
target shape is computed from Shape ops still has a known output), for the model as exported
with concrete input shapes. A multiply-add counts as two FLOPs:

- MatMul [..., M, K] @ [..., K, N]: 2*M*N*K times the broadcast batch dimensions (numpy's rules;
  a 1-D operand is a row or a column);
- Gemm A[M, K] (transA: [K, M]) @ B[K, N] (transB: [N, K]): 2*M*N*K (the bias add not counted);
- Conv X[N, Cin, ...], W[Cout, Cin/group, k...] -> Y[N, Cout, out...]: 2*N*Cout*prod(out)*(Cin/group)*prod(k).

A node whose shapes shape inference cannot make concrete raises ValueError: the count is exact
or absent."""
import math

import numpy as np
import onnx
from onnx import shape_inference

MATMUL_OPS = ("MatMul", "Gemm")
CONV_OPS = ("Conv",)


def _shapes(model):
    """{value name: tuple of dims, None for a dim that is not a number} after shape inference."""
    inferred = shape_inference.infer_shapes(model, data_prop=True)
    graph = inferred.graph
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape"):
            dims = info.type.tensor_type.shape.dim
            shapes[info.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
    return graph, shapes


def _concrete(node, shapes, index, kind="input"):
    names = node.input if kind == "input" else node.output
    shape = shapes.get(names[index]) if index < len(names) else None
    if shape is None or any(d is None for d in shape):
        raise ValueError(f"{node.op_type} node {node.name!r}: {kind} {index} has no concrete shape ({shape})")
    return shape


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def matmul_node_flops(node, shapes):
    a, b = _concrete(node, shapes, 0), _concrete(node, shapes, 1)
    if len(a) == 1:
        a = (1, *a)
    if len(b) == 1:
        b = (*b, 1)
    batch = np.broadcast_shapes(a[:-2], b[:-2])
    m, k, n = a[-2], a[-1], b[-1]
    if b[-2] != k:
        raise ValueError(f"MatMul node {node.name!r}: inner dimensions {a} @ {b} differ")
    return 2 * m * n * k * math.prod(batch)


def gemm_node_flops(node, shapes):
    a, b = _concrete(node, shapes, 0), _concrete(node, shapes, 1)
    m, k = (a[1], a[0]) if _attr(node, "transA", 0) else a
    n = b[0] if _attr(node, "transB", 0) else b[1]
    return 2 * m * n * k


def conv_node_flops(node, shapes):
    w, y = _concrete(node, shapes, 1), _concrete(node, shapes, 0, "output")
    batch, c_out, out = y[0], y[1], y[2:]
    return 2 * batch * c_out * math.prod(out) * w[1] * math.prod(w[2:])


NODE_FLOPS = {"MatMul": matmul_node_flops, "Gemm": gemm_node_flops, "Conv": conv_node_flops}


def count(model, ops=MATMUL_OPS):
    """Forward FLOPs of the nodes whose op type is in `ops` (of NODE_FLOPS), for an ONNX model (a
    ModelProto or a path) whose inputs have concrete shapes."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    unknown = set(ops) - set(NODE_FLOPS)
    if unknown:
        raise ValueError(f"no FLOP count for {sorted(unknown)}; known: {sorted(NODE_FLOPS)}")
    graph, shapes = _shapes(model)
    return sum(NODE_FLOPS[n.op_type](n, shapes) for n in graph.node if n.op_type in ops)


def matmul_flops(model):
    """FLOPs of every MatMul and Gemm node."""
    return count(model, MATMUL_OPS)


def matmul_conv_flops(model):
    """FLOPs of every MatMul, Gemm and Conv node."""
    return count(model, MATMUL_OPS + CONV_OPS)
