"""bench/flops.py counts 2*M*N*K for a MatMul (batched and broadcast) and a Gemm (transposed
operands), 2*N*Cout*Hout*Wout*(Cin/group)*kh*kw for a Conv, including shapes only data propagation
makes concrete (a Reshape to a computed shape), and refuses a shape it cannot make concrete."""
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import flops  # noqa: E402


def model(nodes, inputs, output, initializers=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
                              initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_matmul_is_2mnk():
    m = model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [3, 5]), ("b", [5, 7])], "y")
    assert flops.matmul_flops(m) == 2 * 3 * 7 * 5


def test_batched_matmul_counts_the_broadcast_batch():
    m = model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [2, 4, 3, 5]), ("b", [4, 5, 7])], "y")
    assert flops.matmul_flops(m) == 2 * 4 * (2 * 3 * 7 * 5)


def test_gemm_with_transposed_operands():
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1)
    m = model([node], [("a", [5, 3]), ("b", [7, 5]), ("c", [7])], "y")
    assert flops.matmul_flops(m) == 2 * 3 * 7 * 5


def test_conv_with_groups_and_stride():
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=2, strides=[2, 2], pads=[1, 1, 1, 1])
    m = model([node], [("x", [2, 4, 9, 9]), ("w", [6, 2, 3, 3])], "y")
    # Hout = Wout = (9 + 2 - 3) // 2 + 1 = 5; Cin / group = 2
    assert flops.matmul_conv_flops(m) == 2 * 2 * 6 * 5 * 5 * 2 * 3 * 3
    assert flops.matmul_flops(m) == 0


def test_matmul_after_a_reshape_to_a_computed_shape():
    # x.view(-1, x.shape[2]) as the exporter writes it: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
    consts = [helper.make_tensor("two", TensorProto.INT64, [], [2]),
              helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
              helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])]
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "two"], ["k"]),
             helper.make_node("Unsqueeze", ["k", "zero"], ["k1"]),
             helper.make_node("Concat", ["minus_one", "k1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("MatMul", ["r", "b"], ["y"])]
    m = model(nodes, [("x", [2, 3, 5]), ("b", [5, 7])], "y", consts)
    assert flops.matmul_flops(m) == 2 * 6 * 7 * 5


def test_a_symbolic_dimension_is_refused():
    m = model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", ["batch", 5]), ("b", [5, 7])], "y")
    with pytest.raises(ValueError, match="no concrete shape"):
        flops.matmul_flops(m)
