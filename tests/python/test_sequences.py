"""Sequences and optionals from Python: kiln._kiln.Session takes a list (or tuple) of arrays for a
sequence input and None for an empty optional, and returns a sequence as a list of arrays and an
empty optional as None; errors name the input. A module torch.jit.script's with Python lists
(torch.split, a loop appending to a list, len) exports to SplitToSequence, SequenceInsert, Loop
and ConcatFromSequence, and runs in Kiln exactly as in torch for several widths. The ops themselves
are checked by ONNX's sequence and optional cases (the conformance suite), against ONNX Runtime in
test_ort_parity_ops.py, and in tests/runtime/sequence_test.cpp."""
import warnings

import numpy as np
import onnx
import pytest
import torch
from kiln_package import import_kiln
from onnx import TensorProto, helper

kiln = import_kiln()
import kiln.errors  # noqa: E402, F811 (the package import_kiln() loaded)
from kiln import _kiln  # noqa: E402

F = TensorProto.FLOAT


def save(tmp_path, nodes, inputs, outputs, opset=16):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_lists_in_lists_out_none_for_empty_optionals(tmp_path):
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    path = save(tmp_path,
                [helper.make_node("SequenceInsert", ["s", "x"], ["s2"]),
                 helper.make_node("SequenceLength", ["s2"], ["n"]),
                 helper.make_node("OptionalHasElement", ["o"], ["has"]),
                 helper.make_node("Identity", ["o"], ["o2"])],
                [helper.make_value_info("s", seq_type), helper.make_tensor_value_info("x", F, [2]),
                 helper.make_value_info("o", opt_type)],
                [helper.make_value_info("s2", seq_type), helper.make_tensor_value_info("n", TensorProto.INT64, []),
                 helper.make_tensor_value_info("has", TensorProto.BOOL, []), helper.make_value_info("o2", opt_type)])
    s = _kiln.Session(path)
    a, b, x = np.ones((3,), np.float32), np.zeros((1, 2), np.float32), np.array([5, 6], np.float32)
    out = s.run({"s": [a, b], "x": x, "o": None})
    assert isinstance(out["s2"], list) and len(out["s2"]) == 3
    for got, want in zip(out["s2"], [a, b, x]):
        np.testing.assert_array_equal(got, want)
    assert int(out["n"]) == 3 and not bool(out["has"]) and out["o2"] is None
    out = s.run({"s": (), "x": x, "o": np.array([1, 2], np.float32)})
    np.testing.assert_array_equal(out["s2"][0], x)
    assert bool(out["has"])
    np.testing.assert_array_equal(out["o2"], [1, 2])
    with pytest.raises(kiln.errors.DTypeError, match=r"input 's' expects sequence\(float\[\?\]\) but was given "
                                                       r"optional tensor\(float\)"):
        s.run({"s": None, "x": x, "o": None})
    with pytest.raises(kiln.errors.DTypeError, match=r"sequence of float given element 1 of type int64\[1\]"):
        s.run({"s": [a, np.array([1], np.int64)], "x": x, "o": None})


class ListModule(torch.nn.Module):
    def forward(self, x):
        parts = torch.split(x, 2, dim=1)
        out = []
        for i, p in enumerate(parts):
            out.append(p * float(i + 1))
        return torch.cat(out, dim=1), len(parts)


def test_scripted_list_code_runs_as_in_torch(tmp_path):
    m = torch.jit.script(ListModule())
    path = tmp_path / "lists.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(3, 7),), str(path), opset_version=16, input_names=["x"],
                          output_names=["y", "n"], dynamic_axes={"x": {1: "w"}})
    ops = set()

    def collect(g):
        for n in g.node:
            ops.add(n.op_type)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    collect(a.g)
    collect(onnx.load(str(path)).graph)
    assert {"SplitToSequence", "SequenceInsert", "SequenceAt", "ConcatFromSequence", "Loop"} <= ops
    s = _kiln.Session(str(path))
    torch.manual_seed(0)
    for width in (7, 4, 1):
        x = torch.randn(3, width)
        y, n = m(x)
        got = s.run({"x": x.numpy()})
        np.testing.assert_array_equal(got["y"], y.numpy())  # the same products: exactly equal
        assert int(got["n"]) == n
