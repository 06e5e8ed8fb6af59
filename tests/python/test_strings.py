"""String tensors from Python: kiln._kiln.Session takes numpy str, bytes and object arrays for string
inputs and returns object arrays of str. Cast to string writes each float32, float64 and integer
as numpy's astype(str) does (numpy makes ONNX's test data), over random values spanning every
exponent Kiln switches format at, and Cast from string reads numpy's strings back to the same
floats. StringNormalizer is checked by ONNX's cases (the conformance suite) and in
tests/kernels/string_test.cpp."""
import numpy as np
import onnx
import pytest
from kiln_package import import_kiln
from onnx import TensorProto, helper

kiln = import_kiln()
import kiln.errors  # noqa: E402, F811 (the package import_kiln() loaded)
from kiln import _kiln  # noqa: E402

S = TensorProto.STRING


def cast_model(tmp_path, src, dst):
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=dst)], "cast",
                              [helper.make_tensor_value_info("x", src, [None])],
                              [helper.make_tensor_value_info("y", dst, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path = tmp_path / f"cast_{src}_{dst}.onnx"
    onnx.save(model, str(path))
    return _kiln.Session(str(path))


@pytest.mark.parametrize("dtype, code", [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)])
def test_numbers_to_strings_as_numpy_writes_them(tmp_path, dtype, code):
    rng = np.random.default_rng(0)
    # Magnitudes from 1e-30 to 1e30 (both sides of the 1e-4 and 1e16 format switches), integers,
    # signed zeros, nan and infinities.
    x = (rng.standard_normal(4000) * 10.0 ** rng.integers(-30, 31, 4000)).astype(dtype)
    x = np.concatenate([x, np.array([0.0, -0.0, 1.0, 1e-4, 1e16, 123456789.0, np.nan, np.inf, -np.inf], dtype)])
    got = cast_model(tmp_path, code, S).run({"x": x})["y"]
    assert got.dtype == object
    np.testing.assert_array_equal(got, x.astype(str).astype(object))
    back = cast_model(tmp_path, S, code).run({"x": got})["y"]
    np.testing.assert_array_equal(back, x)  # the shortest digits read back to the same values


def test_strings_in_every_numpy_form_and_integers(tmp_path):
    s = cast_model(tmp_path, S, TensorProto.INT64)
    for strings in (np.array(["7", "-12"]), np.array([b"7", b"-12"]), np.array(["7", "-12"], dtype=object)):
        np.testing.assert_array_equal(s.run({"x": strings})["y"], [7, -12])
    with pytest.raises(kiln.errors.InvalidArgument, match=r"element 1: \"x\" is not a int64 value"):
        s.run({"x": np.array(["1", "x"])})
    with pytest.raises(kiln.errors.DTypeError, match="element 0 is a int; string tensors hold str or bytes"):
        s.run({"x": np.array([1, "a"], dtype=object)})
    ints = np.array([0, -5, 2**40], np.int64)
    np.testing.assert_array_equal(cast_model(tmp_path, TensorProto.INT64, S).run({"x": ints})["y"],
                                  ints.astype(str).astype(object))
