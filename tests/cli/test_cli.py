"""The `kiln` command line: help and version, `inspect`, `run`, and every bad input answered with
exit status 1 and exactly one stderr line `kiln: error: ...` that names what is wrong."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import torch_models  # noqa: E402
from kiln_cli import assert_cli_error as assert_error  # noqa: E402
from kiln_cli import kiln_path, run_kiln


@pytest.fixture(scope="module", autouse=True)
def kiln_built():
    assert kiln_path().exists(), f"{kiln_path()} does not exist: build kiln_cli or set KILN_BUILD_DIR"




def save_model(graph, path, opsets=(("", 17),)):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    onnx.save(model, str(path))
    return path


def relu_model(path, out_name="y"):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], [out_name])], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["batch", 3])])
    return save_model(graph, path)


def add_model(path):
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"])], "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    return save_model(graph, path)


def npy(path, array):
    np.save(path, array)
    return path


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    model = torch_models.build("mlp")
    torch_models.export(model, (784,), path)
    return model, path


# ---- help, version, usage ----

def test_version():
    proc = run_kiln("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == "kiln 0.1.0"


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["inspect", "--help"]])
def test_help(args):
    proc = run_kiln(*args)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: kiln" in proc.stdout
    if args[0] == "run":
        for option in ["--input", "--output-dir", "--threads", "--repeat"]:
            assert option in proc.stdout
    if args[0] == "inspect":
        assert "--json" in proc.stdout


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["run"], ["run", "m.onnx", "--threads", "-1"],
                                  ["inspect", "a.onnx", "b.onnx"]])
def test_bad_usage_exits_2(args):
    proc = run_kiln(*args)
    assert proc.returncode == 2
    # Issue 16, F8: usage errors are "kiln: error: ..." like every other error.
    assert proc.stderr.startswith("kiln: error: "), proc.stderr


def test_unknown_and_missing_commands_list_the_valid_ones():  # issue 16, F8
    proc = run_kiln("bogus")
    assert proc.returncode == 2
    first = proc.stderr.splitlines()[0]
    assert first.startswith("kiln: error: unknown command 'bogus'; the commands are: "), first
    for command in ["artifacts", "inspect", "run", "train"]:
        assert command in first
    assert "A subcommand is required" not in proc.stderr
    proc = run_kiln()
    assert proc.stderr.startswith("kiln: error: a command is required: "), proc.stderr


def test_an_option_given_twice_is_a_kiln_error(tmp_path):  # issue 16, F8
    proc = run_kiln("run", str(tmp_path / "m.onnx"), "--threads", "1", "--threads", "2")
    assert proc.returncode == 2
    assert proc.stderr.startswith("kiln: error: "), proc.stderr
    assert "threads" in proc.stderr


# ---- inspect ----

def test_inspect_json_on_torch_model(mlp):
    model, path = mlp
    proc = run_kiln("inspect", path, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["op_counts"] == {"Gemm": 3, "Relu": 2}
    assert info["num_nodes"] == 5
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert info["parameters"] == {"count": n_params, "bytes": 4 * n_params, "initializers": 6}
    assert info["inputs"] == [{"name": "input", "dtype": "float", "shape": ["batch", 784]}]
    assert info["outputs"] == [{"name": "output", "dtype": "float", "shape": ["batch", 10]}]
    assert info["opsets"] == {"ai.onnx": 17}
    assert info["producer"]["name"] == "pytorch"
    assert info["ir_version"] >= 7
    assert info["all_ops_supported"] is True and info["unsupported_ops"] == []


def test_inspect_text_on_torch_model(mlp):
    proc = run_kiln("inspect", mlp[1])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for expected in ["  input: float[batch, 784]", "  output: float[batch, 10]", "  Gemm: 3", "  Relu: 2",
                     "ops: 5 nodes", "opsets: ai.onnx=17", "all ops supported"]:
        assert expected in lines, proc.stdout
    assert "parameters: 269322 (1077288 bytes in 6 initializers)" in lines


def unsupported_model(path):
    """Binarizer of ai.onnx.ml (ONNX's classical-ML domain), an op Kiln does not implement."""
    graph = helper.make_graph(
        [helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)], "binarizer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 3])])
    return save_model(graph, path, opsets=(("", 17), ("ai.onnx.ml", 3)))


def custom_op_model(path):
    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")], "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return save_model(graph, path, opsets=(("", 17), ("com.example", 1)))


def test_inspect_lists_unsupported_ops(tmp_path):
    info = json.loads(run_kiln("inspect", "--json", unsupported_model(tmp_path / "unsupported.onnx")).stdout)
    assert info["unsupported_ops"] == [{"op": "Binarizer", "domain": "ai.onnx.ml", "opset": 3}]
    assert info["all_ops_supported"] is False
    proc = run_kiln("inspect", custom_op_model(tmp_path / "custom.onnx"))
    assert proc.returncode == 0, proc.stderr
    assert "unsupported ops:" in proc.stdout and "all ops supported" not in proc.stdout
    assert "  Frobnicate (domain com.example, opset 1)" in proc.stdout.splitlines()
    assert "  com.example:Frobnicate: 1" in proc.stdout.splitlines()


# ---- run ----

def test_run_writes_outputs_and_reports_them(tmp_path):
    model = relu_model(tmp_path / "relu.onnx", out_name="onnx::Relu/1")
    x = np.array([[-1.5, 0.0, 2.0], [3.0, -0.25, 0.5]], dtype=np.float32)
    proc = run_kiln("run", model, "--input", f"x={npy(tmp_path / 'x.npy', x)}", "--output-dir", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    # The name holds ':' and '/', which become '_' in the file name.
    out_file = tmp_path / "out" / "onnx__Relu_1.npy"
    assert proc.stdout.splitlines() == [f"output onnx::Relu/1 float[2, 3] -> {out_file}"]
    np.testing.assert_array_equal(np.load(out_file), np.maximum(x, 0))


def test_kiln_sgemm_picks_the_product_library_and_refuses_other_values(tmp_path):
    """KILN_SGEMM (src/kernels/cpu/blas.h): onednn and openblas (OpenBLAS's OpenMP build, where
    installed) give numpy's product within float32 rounding; any other value is an error naming it."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [5, 7]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [7, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 3])])
    model = save_model(graph, tmp_path / "matmul.onnx")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    inputs = ["-i", f"a={npy(tmp_path / 'a.npy', a)}", "-i", f"b={npy(tmp_path / 'b.npy', b)}"]
    choices = ["onednn"]
    if Path("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0").exists():
        choices.append("openblas")
    for choice in choices:
        out = tmp_path / choice
        proc = run_kiln("run", model, *inputs, "--output-dir", out, env={"KILN_SGEMM": choice})
        assert proc.returncode == 0, proc.stderr
        np.testing.assert_allclose(np.load(out / "y.npy"), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert_error(run_kiln("run", model, *inputs, env={"KILN_SGEMM": "mkl"}), "KILN_SGEMM='mkl'",
                 "expected onednn or openblas")


def test_run_repeat_prints_timing(tmp_path):
    model = relu_model(tmp_path / "relu.onnx")
    x = npy(tmp_path / "x.npy", np.ones((4, 3), np.float32))
    proc = run_kiln("run", model, "-i", f"x={x}", "--threads", "1", "--repeat", "3")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1].split()
    assert last[0] == "time_ms" and last[3] == "runs=3", last
    mean, best = float(last[1].split("=")[1]), float(last[2].split("=")[1])
    assert 0 < best <= mean


def test_run_profile_nodes_lists_the_slowest_nodes_with_shapes(tmp_path):
    model = relu_model(tmp_path / "relu.onnx")
    x = npy(tmp_path / "x.npy", np.ones((4, 3), np.float32))
    proc = run_kiln("run", model, "-i", f"x={x}", "--repeat", "2", "--profile-nodes", "5")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index("slowest 1 nodes (ms per run, shapes):")
    assert "(Relu)" in lines[at + 1] and lines[at + 1].endswith("[4, 3] -> [4, 3]"), lines[at + 1]
    assert not any(line.startswith("profile over") for line in lines)  # the per-op table needs --profile


# ---- bad inputs: exit 1, one line, names the problem ----

def test_truncated_model(tmp_path, mlp):
    data = Path(mlp[1]).read_bytes()
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(data[: len(data) // 2])
    assert_error(run_kiln("run", bad), bad)
    assert_error(run_kiln("inspect", bad), bad)


def test_random_bytes_model(tmp_path):
    bad = tmp_path / "random.onnx"
    bad.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    assert_error(run_kiln("run", bad), bad)


def test_subgraphs_nested_past_the_limit_are_a_clear_error(tmp_path):
    """Issue 16: ONNX files nest graphs in If/Loop attributes; protobuf's nesting is bounded (100
    levels) so that a crafted file cannot overflow the stack, and the error says so."""
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    leaf = helper.make_graph([helper.make_node("Constant", [], ["y"], value=helper.make_tensor(
        "v", TensorProto.FLOAT, [1], [1.0]))], "leaf", [], [out])
    graph = leaf
    for i in range(150):
        graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=graph, else_branch=leaf)],
                                  f"g{i}", [], [out])
    top = helper.make_graph(graph.node, "top", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [out])
    deep = tmp_path / "deep.onnx"
    deep.write_bytes(helper.make_model(top, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    assert_error(run_kiln("inspect", deep), "nested deeper than 100 levels")


def test_missing_model(tmp_path):
    assert_error(run_kiln("run", tmp_path / "absent.onnx"), tmp_path / "absent.onnx")


def test_op_kiln_lacks(tmp_path):
    x = npy(tmp_path / "x.npy", np.ones((1, 1, 3, 3), np.float32))
    assert_error(run_kiln("run", unsupported_model(tmp_path / "unsupported.onnx"), "-i", f"x={x}"), "Binarizer",
                 "not implemented")


def test_op_in_custom_domain(tmp_path):
    x = npy(tmp_path / "x.npy", np.ones(3, np.float32))
    assert_error(run_kiln("run", custom_op_model(tmp_path / "c.onnx"), "-i", f"x={x}"), "Frobnicate", "com.example")


def test_wrong_shape(tmp_path):
    x = npy(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    assert_error(run_kiln("run", relu_model(tmp_path / "r.onnx"), "-i", f"x={x}"),
                 "'x'", "float[batch, 3]", "[2, 4]")


def test_wrong_dtype(tmp_path):
    x = npy(tmp_path / "x.npy", np.ones((2, 3), np.float64))
    assert_error(run_kiln("run", relu_model(tmp_path / "r.onnx"), "-i", f"x={x}"), "'x'", "float", "double")


def test_missing_input(tmp_path):
    x = npy(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    assert_error(run_kiln("run", add_model(tmp_path / "add.onnx"), "-i", f"x={x}"), "'y'", "missing")


def test_unknown_input_name(tmp_path):
    x = npy(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    assert_error(run_kiln("run", relu_model(tmp_path / "r.onnx"), "-i", f"x={x}", "-i", f"bogus={x}"), "'bogus'")


def test_input_spec_without_equals(tmp_path):
    assert_error(run_kiln("run", relu_model(tmp_path / "r.onnx"), "-i", "x.npy"), "NAME=FILE.npy", "x.npy")


def external_data_model(folder, location):
    """MatMul with its weight W stored in an external file at `location` (relative to the model)."""
    folder.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save(model, str(path))
    return path


def test_external_data_works_when_present(tmp_path):
    model = external_data_model(tmp_path / "m", "weights.bin")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    proc = run_kiln("run", model, "-i", f"x={npy(tmp_path / 'x.npy', x)}", "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"),
                               x @ np.arange(12, dtype=np.float32).reshape(4, 3), rtol=1e-6)


def test_missing_external_data_file(tmp_path):
    model = external_data_model(tmp_path / "m", "gone.bin")
    x = npy(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    assert_error(run_kiln("run", model, "-i", f"x={x}"), "gone.bin", "'W'")


def test_external_data_outside_model_folder(tmp_path):
    model = external_data_model(tmp_path / "m", "../outside.bin")
    # The file exists, so only the path rule can reject it.
    (tmp_path / "outside.bin").write_bytes((tmp_path / "m" / "weights.bin").read_bytes())
    x = npy(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    assert_error(run_kiln("run", model, "-i", f"x={x}"), "../outside.bin", "outside")


def test_missing_npy(tmp_path):
    absent = tmp_path / "absent.npy"
    assert_error(run_kiln("run", relu_model(tmp_path / "r.onnx"), "-i", f"x={absent}"), absent, "'x'")


def test_garbage_npy(tmp_path):
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"definitely not an array\n" * 10)
    assert_error(run_kiln("run", relu_model(tmp_path / "r.onnx"), "-i", f"x={junk}"), junk, "not a .npy file")


def test_truncated_npy(tmp_path):
    cut = tmp_path / "cut.npy"
    np.save(cut, np.ones((2, 3), np.float32))
    cut.write_bytes(cut.read_bytes()[:-5])
    assert_error(run_kiln("run", relu_model(tmp_path / "r.onnx"), "-i", f"x={cut}"), cut, "truncated")


def test_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    x = npy(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    assert_error(run_kiln("run", relu_model(tmp_path / "r.onnx"), "-i", f"x={x}", "-o", blocker / "sub"),
                 blocker / "sub")


# ---- kiln-conformance: ONNX-style case folders, statuses, tolerances ----

def conformance_case(root, name, model, inputs, outputs):
    """A case folder as ONNX's generator writes it: model.onnx and test_data_set_0/*.pb."""
    data = root / name / "test_data_set_0"
    data.mkdir(parents=True)
    onnx.save(model, str(root / name / "model.onnx"))
    for prefix, arrays in (("input", inputs), ("output", outputs)):
        for i, a in enumerate(arrays):
            (data / f"{prefix}_{i}.pb").write_bytes(numpy_helper.from_array(a).SerializeToString())


def add_graph_model(elem_type, shape):
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "add",
        [helper.make_tensor_value_info("a", elem_type, shape), helper.make_tensor_value_info("b", elem_type, shape)],
        [helper.make_tensor_value_info("c", elem_type, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conformance_runner(tmp_path):
    runner = kiln_path().parent / "kiln-conformance"
    assert runner.exists(), f"{runner} does not exist: build the kiln_conformance target"
    root = tmp_path / "node"
    f32 = add_graph_model(TensorProto.FLOAT, [4])
    a = np.array([1.0, np.nan, -2.0, 1000.0], np.float32)
    b = np.array([0.5, 1.0, 2.0, 24.0], np.float32)
    exact = a + b
    # ONNX's rule: |got - want| <= 1e-7 + 1e-3 * |want|; 1024 * 1e-3 = 1.024.
    conformance_case(root, "test_pass_nan", f32, [a, b], [exact])
    conformance_case(root, "test_pass_within_rtol", f32, [a, b], [exact + np.float32([0, 0, 0, -1.0])])
    conformance_case(root, "test_fail_beyond_rtol", f32, [a, b], [exact + np.float32([0, 0, 0, -1.1])])
    conformance_case(root, "test_fail_nan_expected_number", f32, [a, b], [np.float32([np.nan, 0, 0, 1024])])
    conformance_case(root, "test_fail_shape", f32, [a, b], [exact[:3]])
    big = np.array([2**60, 7], np.int64)
    i64 = add_graph_model(TensorProto.INT64, [2])
    # 2**60 + 1 and 2**60 are the same double: integers must compare exactly, not as doubles.
    conformance_case(root, "test_fail_int_off_by_one", i64, [big, np.array([1, 1], np.int64)],
                     [np.array([2**60, 8], np.int64)])
    conformance_case(root, "test_pass_int", i64, [big, np.array([1, 1], np.int64)], [big + 1])
    unsupported = onnx.load(str(unsupported_model(tmp_path / "unsupported.onnx")))
    conformance_case(root, "test_skip_unsupported", unsupported, [np.ones((1, 1, 3, 3), np.float32)],
                     [np.ones((1, 1, 3, 3), np.float32)])

    listing = tmp_path / "list.txt"
    proc = subprocess.run([str(runner), str(root), "--list", str(listing)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "3 passed, 4 failed, 1 skipped"
    lines = {line.split()[1]: line for line in listing.read_text().splitlines()}
    assert len(lines) == 8
    for name, line in lines.items():
        assert line.split()[0] == {"pass": "passed", "fail": "failed", "skip": "skipped"}[name.split("_")[1]], line
    assert ("element [3]" in lines["test_fail_beyond_rtol"]
            and "1 of 4 elements differ" in lines["test_fail_beyond_rtol"])
    assert ("element [0]" in lines["test_fail_nan_expected_number"]
            and "2 of 4" in lines["test_fail_nan_expected_number"])
    assert "shape [4], expected [3]" in lines["test_fail_shape"]
    assert "got 1152921504606846977, expected 1152921504606846976; 1 of 2 elements differ" in \
        lines["test_fail_int_off_by_one"]
    assert "Binarizer" in lines["test_skip_unsupported"]

    strict = subprocess.run([str(runner), str(root), "--strict", "--filter", "fail_shape"],
                            capture_output=True, text=True)
    assert strict.returncode == 1 and strict.stdout.splitlines()[-1] == "0 passed, 1 failed, 0 skipped"
    ok = subprocess.run([str(runner), str(root), "--strict", "--filter", "pass"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1] == "3 passed, 0 failed, 0 skipped"
