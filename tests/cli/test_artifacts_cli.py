"""`kiln artifacts`: the four files ONNX Runtime's generate_artifacts writes, checker-valid, and
clear one-line errors that leave nothing behind."""
import sys
from pathlib import Path

import onnx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import torch_models  # noqa: E402
from kiln_cli import assert_cli_error as assert_error  # noqa: E402
from kiln_cli import run_kiln


def mlp(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "mlp.onnx"
    torch.onnx.export(torch_models.MLP(d_in=32, hidden=16, d_out=4), (torch.randn(2, 32),), str(path),
                      input_names=["x"], output_names=["logits"], opset_version=17, do_constant_folding=False,
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return path




def test_artifacts_writes_four_files(tmp_path):
    out = tmp_path / "art"
    proc = run_kiln("artifacts", mlp(tmp_path), "--loss", "CrossEntropyLoss", "--optimizer", "AdamW",
                    "--frozen-params", "net.0.bias", "--additional-output-names", "logits", "--prefix", "p_",
                    "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(f.name for f in out.iterdir()) == [
        "p_checkpoint", "p_eval_model.onnx", "p_optimizer_model.onnx", "p_training_model.onnx"]
    train = onnx.load(str(out / "p_training_model.onnx"))
    onnx.checker.check_model(train)
    inputs = [i.name for i in train.graph.input]
    assert inputs[:2] == ["x", "labels"] and "net.0.bias" in inputs  # frozen: an input, no gradient
    outputs = [o.name for o in train.graph.output]
    assert outputs[:2] == ["loss", "logits"]
    assert "net.0.weight_grad" in outputs and "net.0.bias_grad" not in outputs
    labels = next(i for i in train.graph.input if i.name == "labels")
    assert labels.type.tensor_type.elem_type == onnx.TensorProto.INT64
    evalm = onnx.load(str(out / "p_eval_model.onnx"))
    onnx.checker.check_model(evalm)
    assert [o.name for o in evalm.graph.output] == ["loss", "logits"]
    assert all(n.domain in ("", "ai.onnx") for n in evalm.graph.node)
    opt = onnx.load(str(out / "p_optimizer_model.onnx"))
    onnx.checker.check_model(opt)
    assert {n.op_type for n in opt.graph.node} == {"AdamWStep"}
    grads = [o[:-len("_grad")] for o in outputs if o.endswith("_grad")]
    assert [n.input[2] for n in opt.graph.node] == grads  # one update per trainable parameter
    decay = [a.f for a in opt.graph.node[0].attribute if a.name == "weight_decay"]
    assert decay and abs(decay[0] - 0.01) < 1e-9


def test_artifacts_sgd_and_nominal_checkpoint(tmp_path):
    out = tmp_path / "art"
    proc = run_kiln("artifacts", mlp(tmp_path), "--loss", "MSELoss", "--optimizer", "SGD", "--momentum", "0.9",
                    "--nesterov", "--nominal-checkpoint", "--out", out)
    assert proc.returncode == 0, proc.stderr
    opt = onnx.load(str(out / "optimizer_model.onnx"))
    node = opt.graph.node[0]
    assert node.op_type == "SGDStep" and len(node.input) == 5  # with a momentum buffer
    ckpt = (out / "checkpoint").read_bytes()
    header = int.from_bytes(ckpt[:8], "little")
    assert len(ckpt) == 8 + header  # names, dtypes and shapes only: no tensor data


def test_artifacts_errors_name_what_is_wrong_and_write_nothing(tmp_path):
    model = mlp(tmp_path)
    out = tmp_path / "art"
    assert_error(run_kiln("artifacts", model, "--loss", "HingeLoss", "--optimizer", "AdamW", "--out", out),
                 "unknown loss 'HingeLoss'", "CrossEntropyLoss")
    assert_error(run_kiln("artifacts", model, "--loss", "MSELoss", "--optimizer", "Adam", "--out", out),
                 "unknown optimizer 'Adam'", "AdamW, SGD")
    assert_error(run_kiln("artifacts", model, "--loss", "MSELoss", "--optimizer", "AdamW", "--requires-grad",
                          "net.0.weight", "--frozen-params", "net.0.weight", "--out", out),
                 "'net.0.weight' is listed both in requires_grad and in frozen_params")
    assert_error(run_kiln("artifacts", model, "--loss", "none", "--optimizer", "AdamW", "--out", out),
                 "not a scalar")
    assert_error(run_kiln("artifacts", model, "--loss", "MSELoss", "--optimizer", "SGD", "--nesterov",
                          "--out", out), "Nesterov")
    assert not out.exists()


def test_an_invalid_forward_node_is_named_in_the_gradient_error(tmp_path):
    """Issue 16, F8: an out-of-range Softmax axis was reported only as "MatMul gradient needs the
    ranks ...; they are unknown": the reason the ranks are unknown is now part of the message."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["s"], axis=4), helper.make_node("MatMul", ["s", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [w])
    model = tmp_path / "softmax.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    assert_error(run_kiln("artifacts", model, "--loss", "MSELoss", "--optimizer", "AdamW", "--out", tmp_path / "a"),
                 "Softmax: axis 4 is out of range for input float[2, 3] (rank 2)")


def test_a_model_older_than_opset_13_is_refused_before_anything_is_written(tmp_path):
    """Issue 16, F8: artifacts from an opset-1 model were written, and `kiln train` then rejected
    them (SoftmaxCrossEntropyLoss does not exist at opset 1)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((3, 4), 0.1, np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w])
    model = tmp_path / "opset1.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)]), str(model))
    out = tmp_path / "art"
    assert_error(run_kiln("artifacts", model, "--loss", "CrossEntropyLoss", "--optimizer", "AdamW", "--out", out),
                 "imports opset 1 of the default ONNX domain", "from opset 13 on")
    assert not out.exists()
