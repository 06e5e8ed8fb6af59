"""kiln.training.onnxblock: loss blocks and custom losses, evaluated by Kiln against torch.nn.

Each loss block (every reduction, weight, pos_weight, ignore_index) is applied with
build_loss_model to a tiny model (x * s, s a float initializer: the model output is exactly the
numpy product), the result passes onnx.checker (full check) and `kiln run` evaluates it. The
reference is torch.nn's loss in float64 on the same float32 model output; Kiln's float32 loss must
agree to 1e-6 relative (rtol 1e-6, atol 0), and have torch's shape. The float64 reference makes the
tolerance a statement about our graph's accuracy rather than about torch's float32 rounding
(torch's own float32 BCEWithLogitsLoss cancels digits for negative logits).

The package is imported from the repository's python/ folder as `kiln.training.onnxblock` (an
implicit namespace package until python/kiln/__init__.py exists).
"""
import json

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
import torch
from kiln_cli import run_kiln
from kiln_package import import_kiln
from onnx import TensorProto, helper

import_kiln()  # the package as built (build/python), as every test of the package imports it
from kiln.training import onnxblock  # noqa: E402

RTOL = 1e-6
SCALE = np.array([0.75], np.float32)


def tiny_model(shape, outputs=("scores",), opset=17):
    """x [N, ...] -> x * s (one output per name; the k-th is x * s + k), s a float initializer."""
    dims = ["N", *shape[1:]]
    nodes = [helper.make_node("Mul", ["x", "s"], [outputs[0]])]
    for k, name in enumerate(outputs[1:], start=1):
        nodes.append(helper.make_node("Add", [outputs[0], f"k{k}"], [name]))
    inits = [onnx.numpy_helper.from_array(SCALE, "s")]
    inits += [onnx.numpy_helper.from_array(np.array([k], np.float32), f"k{k}") for k in range(1, len(outputs))]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, dims) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def model_output(x, k=0):
    return x * SCALE + np.float32(k)  # float32 arithmetic: exactly what Kiln computes


def evaluate(kiln, model, feeds, tmp_path):
    """Runs `model` with Kiln; returns {output name: array}. Output names here are file-safe."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    args = ["run", path]
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    out = tmp_path / "out"
    proc = run_kiln(*args, "--output-dir", out)
    assert proc.returncode == 0, proc.stderr
    return {o.name: np.load(out / f"{o.name}.npy") for o in model.graph.output}


def input_info(model, name):
    return next(v for v in model.graph.input if v.name == name)


def dims_of(info):
    return [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim]


def check_loss(kiln, tmp_path, block, shape, feeds, reference):
    """build_loss_model + checker + `kiln run`; compares the one output with `reference` (float64)."""
    model = tiny_model(shape)
    result, loss_name = onnxblock.build_loss_model(model, block)
    onnx.checker.check_model(result, full_check=True)
    assert [o.name for o in result.graph.output] == [loss_name]
    got = evaluate(kiln, result, feeds, tmp_path)[loss_name]
    want = reference.numpy()
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=0)
    return result


def f64(a):
    return torch.from_numpy(np.asarray(a, np.float64))


REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["MSELoss", "L1Loss"])
def test_regression_losses_match_torch(kiln, tmp_path, name, reduction):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    target = rng.standard_normal((4, 5)).astype(np.float32)
    ref = getattr(torch.nn, name)(reduction=reduction)(f64(model_output(x)), f64(target))
    result = check_loss(kiln, tmp_path, getattr(onnxblock.loss, name)(reduction=reduction), x.shape,
                        {"x": x, "target": target}, ref)
    target_info = input_info(result, "target")  # ONNX Runtime's default name, the output's type and shape
    assert target_info.type.tensor_type.elem_type == TensorProto.FLOAT and dims_of(target_info) == ["N", 5]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weights", ["none", "weight", "pos_weight", "both"])
def test_bce_with_logits_matches_torch(kiln, tmp_path, weights, reduction):
    rng = np.random.default_rng(2)
    x = (4 * rng.standard_normal((6, 3))).astype(np.float32)  # logits up to ~±12: the stable form matters
    target = rng.random((6, 3)).astype(np.float32)
    target[:3] = np.round(target[:3])  # hard 0/1 targets and soft ones
    weight = rng.random(3).astype(np.float32) + 0.5 if weights in ("weight", "both") else None
    pos_weight = rng.random(3).astype(np.float32) * 3 if weights in ("pos_weight", "both") else None
    torch_loss = torch.nn.BCEWithLogitsLoss(weight=None if weight is None else f64(weight), reduction=reduction,
                                            pos_weight=None if pos_weight is None else f64(pos_weight))
    ref = torch_loss(f64(model_output(x)), f64(target))
    block = onnxblock.loss.BCEWithLogitsLoss(weight=weight, reduction=reduction, pos_weight=pos_weight)
    check_loss(kiln, tmp_path, block, x.shape, {"x": x, "target": target}, ref)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, 2])
def test_cross_entropy_matches_torch(kiln, tmp_path, ignore_index, weighted, reduction):
    rng = np.random.default_rng(3)
    x = (2 * rng.standard_normal((8, 5))).astype(np.float32)
    labels = rng.integers(0, 5, 8).astype(np.int64)
    labels[:3] = 2  # some labels hit ignore_index when it is set
    weight = rng.random(5).astype(np.float32) + 0.5 if weighted else None
    kwargs = {} if ignore_index is None else {"ignore_index": ignore_index}
    ref = torch.nn.CrossEntropyLoss(weight=None if weight is None else f64(weight), reduction=reduction,
                                    **kwargs)(f64(model_output(x)), torch.from_numpy(labels))
    block = onnxblock.loss.CrossEntropyLoss(weight=weight, reduction=reduction, ignore_index=ignore_index)
    result = check_loss(kiln, tmp_path, block, x.shape, {"x": x, "labels": labels}, ref)
    labels_info = input_info(result, "labels")
    assert labels_info.type.tensor_type.elem_type == TensorProto.INT64 and dims_of(labels_info) == ["N"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_over_extra_dimensions(kiln, tmp_path, reduction):
    """Scores [N, C, D] take labels [N, D], as torch.nn.CrossEntropyLoss."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4, 6)).astype(np.float32)
    labels = rng.integers(0, 4, (3, 6)).astype(np.int64)
    ref = torch.nn.CrossEntropyLoss(reduction=reduction)(f64(model_output(x)), torch.from_numpy(labels))
    result = check_loss(kiln, tmp_path, onnxblock.loss.CrossEntropyLoss(reduction=reduction), x.shape,
                        {"x": x, "labels": labels}, ref)
    assert dims_of(input_info(result, "labels")) == ["N", 6]


class WeightedAverageLoss(onnxblock.Block):
    """ONNX Runtime's documented custom loss, verbatim (note: no super().__init__())."""

    def __init__(self):
        self._loss1 = onnxblock.loss.MSELoss()
        self._loss2 = onnxblock.loss.MSELoss()
        self._w1 = onnxblock.blocks.Constant(0.4)
        self._w2 = onnxblock.blocks.Constant(0.6)
        self._add = onnxblock.blocks.Add()
        self._mul = onnxblock.blocks.Mul()

    def build(self, loss_input_name1, loss_input_name2):
        return self._add(
            self._mul(self._w1(), self._loss1(loss_input_name1, target_name="target1")),
            self._mul(self._w2(), self._loss2(loss_input_name2, target_name="target2")),
        )


def test_documented_custom_loss(kiln, tmp_path):
    model = tiny_model((4, 3), outputs=("output1", "output2"))
    result, loss_name = onnxblock.build_loss_model(model, WeightedAverageLoss())
    onnx.checker.check_model(result, full_check=True)
    assert [o.name for o in result.graph.output] == [loss_name]
    assert [i.name for i in result.graph.input] == ["x", "target1", "target2"]
    assert [t.name for t in result.graph.initializer] == ["s", "k1"]  # the weights are Constant nodes
    rng = np.random.default_rng(5)
    x, t1, t2 = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(3))
    got = evaluate(kiln, result, {"x": x, "target1": t1, "target2": t2}, tmp_path)[loss_name]
    mse = torch.nn.MSELoss()
    # The weights are float32 constants (0.4f, 0.6f), as in ONNX Runtime: the reference uses them too.
    want = np.float32(0.4) * mse(f64(model_output(x)), f64(t1)).item() + \
        np.float32(0.6) * mse(f64(model_output(x, 1)), f64(t2)).item()
    assert got.shape == ()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=0)


def test_documented_custom_loss_goes_through_kiln_artifacts(kiln, tmp_path):
    """Kiln's generator takes the model with loss "none"; only `s` and `k1` are parameters (the
    loss weights are constants), and the eval model gives the same loss."""
    model = tiny_model((4, 3), outputs=("output1", "output2"))
    result, loss_name = onnxblock.build_loss_model(model, WeightedAverageLoss())
    onnx.save(result, tmp_path / "forward.onnx")
    proc = run_kiln("artifacts", tmp_path / "forward.onnx", "--loss", "none", "--optimizer", "SGD",
                    "--out", tmp_path / "art")
    assert proc.returncode == 0, proc.stderr
    train = onnx.load(tmp_path / "art" / "training_model.onnx")
    params = json.loads(next(p.value for p in train.metadata_props if p.key == "kiln.parameters"))
    assert sorted(params) == ["k1", "s"]
    rng = np.random.default_rng(6)
    x, t1, t2 = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(3))
    feeds = {"x": x, "target1": t1, "target2": t2, "s": SCALE, "k1": np.array([1], np.float32)}
    eval_model = onnx.load(tmp_path / "art" / "eval_model.onnx")
    got = evaluate(kiln, eval_model, feeds, tmp_path)[eval_model.graph.output[0].name]
    want = evaluate(kiln, result, {k: feeds[k] for k in ("x", "target1", "target2")}, tmp_path)[loss_name]
    np.testing.assert_array_equal(got, want)


class LossAndScores(onnxblock.TrainingBlock):
    """A TrainingBlock that keeps the model output next to the loss."""

    def __init__(self):
        super().__init__()
        self.loss = onnxblock.loss.CrossEntropyLoss()

    def build(self, scores):
        return self.loss(scores, labels_name="y"), scores


def test_training_block_keeps_outputs_and_parameters(kiln, tmp_path):
    model = tiny_model((5, 4))
    block = LossAndScores()
    with pytest.raises(RuntimeError, match="LossAndScores"):
        block.parameters()  # not built yet
    block.requires_grad("s")
    block.requires_grad("x2", True)
    block.requires_grad("x2", False)  # moves to frozen, as in ONNX Runtime
    assert onnxblock.gradient_settings(block) == (["s"], ["x2"])
    result, loss_name = onnxblock.build_loss_model(model, block)
    assert [o.name for o in result.graph.output] == [loss_name, "scores"]
    trainable, frozen = block.parameters()
    assert [t.name for t in trainable] == ["s"] and frozen == []
    with pytest.raises(NotImplementedError, match="generate_artifacts"):
        block.to_model_proto()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = rng.integers(0, 4, 5).astype(np.int64)
    out = evaluate(kiln, result, {"x": x, "y": y}, tmp_path)
    np.testing.assert_array_equal(out["scores"], model_output(x))
    want = torch.nn.CrossEntropyLoss()(f64(out["scores"]), torch.from_numpy(y)).numpy()
    np.testing.assert_allclose(out[loss_name], want, rtol=RTOL, atol=0)


class ElementwiseChain(onnxblock.ForwardBlock):
    """Every unary/binary block once, as separate outputs."""

    def build(self, v):
        b = onnxblock.blocks
        positive = b.Abs()(v)
        return (b.Sigmoid()(v), b.Log()(positive), b.Neg()(v), b.Relu()(v), b.Exp()(v), b.Sqrt()(positive),
                b.Tanh()(v), b.Softplus()(v), b.Identity()(v), b.Pow(3.0)(v), b.Div()(v, b.Constant(4.0)()),
                b.Sub()(v, b.Constant(1.5)()), b.Clip(-0.5, 0.25)(v), b.Clip(clip_max=0.1)(v),
                b.ReduceSum(axes=[1], keepdims=False)(v), b.ReduceMean()(v), b.ReduceMean(axes=[0])(v))


def test_blocks_evaluate(kiln, tmp_path):
    model = tiny_model((3, 4))
    with onnxblock.base(model) as handle:
        names = ElementwiseChain()("scores")
        result = handle.model
    onnx.checker.check_model(result, full_check=True)
    x = np.random.default_rng(8).standard_normal((3, 4)).astype(np.float32)
    v = model_output(x).astype(np.float64)
    want = [1 / (1 + np.exp(-v)), np.log(np.abs(v)), -v, np.maximum(v, 0), np.exp(v), np.sqrt(np.abs(v)), np.tanh(v),
            np.log1p(np.exp(v)), v, v ** 3, v / 4, v - 1.5, np.clip(v, -0.5, 0.25), np.minimum(v, 0.1),
            v.sum(axis=1), v.mean(keepdims=True), v.mean(axis=0, keepdims=True)]
    got = evaluate(kiln, result, {"x": x}, tmp_path)
    for name, w in zip(names, want):
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=0, err_msg=name)


@pytest.mark.parametrize("opset", [12, 17])
def test_reduction_axes_follow_the_opset(opset):
    """ReduceSum takes axes as an input from opset 13, ReduceMean from 18 (attributes before)."""
    with onnxblock.base(tiny_model((3, 4), opset=opset)) as handle:
        onnxblock.blocks.ReduceSum(axes=[1])("scores")
        onnxblock.blocks.ReduceMean(axes=[1])("scores")
        nodes = {n.op_type: n for n in handle.model.graph.node}
        onnx.checker.check_model(handle.model, full_check=True)
    reduce_sum, reduce_mean = nodes["ReduceSum"], nodes["ReduceMean"]
    assert len(reduce_sum.input) == (2 if opset >= 13 else 1)
    assert [a.name for a in reduce_sum.attribute if a.name == "axes"] == ([] if opset >= 13 else ["axes"])
    assert len(reduce_mean.input) == 1 and any(a.name == "axes" for a in reduce_mean.attribute)


def test_empty_base():
    with onnxblock.empty_base() as handle:
        assert handle.model.opset_import[0].version == onnx.defs.onnx_opset_version()
    with onnxblock.empty_base(opset_version=13) as handle:
        assert handle.model.opset_import[0].version == 13


# --- errors ---------------------------------------------------------------------------------------

def test_block_outside_a_base_model():
    with pytest.raises(RuntimeError, match=r"Add: no base model.*onnxblock\.base"):
        onnxblock.blocks.Add()("a", "b")
    with pytest.raises(RuntimeError, match="MSELoss: no base model"):
        onnxblock.loss.MSELoss()("scores")


def test_bases_do_not_nest():
    model = tiny_model((2, 2))
    with onnxblock.base(model):
        with pytest.raises(RuntimeError, match="do not nest"):
            with onnxblock.empty_base():
                pass


def test_unknown_value_is_named():
    with onnxblock.base(tiny_model((2, 2))):
        with pytest.raises(ValueError, match="Mul: 'nope' is not a value of the model"):
            onnxblock.blocks.Mul()("scores", "nope")


@pytest.mark.parametrize("name", ["MSELoss", "L1Loss", "BCEWithLogitsLoss", "CrossEntropyLoss"])
def test_unknown_reduction(name):
    for error in (ValueError, RuntimeError):  # ONNX Runtime raises RuntimeError
        with pytest.raises(error, match=f"{name}: reduction 'avg' is not supported"):
            getattr(onnxblock.loss, name)(reduction="avg")


def test_target_clash_errors():
    class Clash(onnxblock.Block):
        def __init__(self, target):
            super().__init__()
            self.target = target

        def build(self, scores):
            return onnxblock.loss.MSELoss()(scores, target_name=self.target)

    with pytest.raises(ValueError, match="target name 's' clashes with the model's initializer 's'"):
        onnxblock.build_loss_model(tiny_model((2, 3)), Clash("s"))

    class Labels(onnxblock.Block):
        def build(self, scores):
            return onnxblock.loss.CrossEntropyLoss()(scores, labels_name="x")

    with pytest.raises(ValueError, match=r"labels name 'x' clashes with the model's graph input 'x', which is float "
                                         r"\[N, 3\]"):
        onnxblock.build_loss_model(tiny_model((2, 3)), Labels())


def test_shared_target_is_reused():
    """Two losses naming the same target share one graph input (ONNX Runtime's behaviour)."""
    class Shared(onnxblock.Block):
        def build(self, scores):
            return onnxblock.blocks.Add()(onnxblock.loss.MSELoss()(scores, "t"), onnxblock.loss.L1Loss()(scores, "t"))

    result, _ = onnxblock.build_loss_model(tiny_model((2, 3)), Shared())
    assert [i.name for i in result.graph.input] == ["x", "t"]


def test_build_loss_model_argument_errors():
    model = tiny_model((2, 3))
    with pytest.raises(TypeError, match="onnxblock.Block, got str"):
        onnxblock.build_loss_model(model, "MSELoss")
    with pytest.raises(TypeError, match="onnx.ModelProto or a path, got int"):
        onnxblock.build_loss_model(3, onnxblock.loss.MSELoss())
    with pytest.raises(ValueError, match="CrossEntropyLoss needs opset 12 or newer"):
        onnxblock.build_loss_model(tiny_model((2, 3), opset=11), onnxblock.loss.CrossEntropyLoss())
    with pytest.raises(ValueError, match=r"weight has 4 entries but 'scores' \(float \[N, 3\]\) has 3 classes"):
        onnxblock.build_loss_model(model, onnxblock.loss.CrossEntropyLoss(weight=np.ones(4, np.float32)))


class LayerBlocks(onnxblock.ForwardBlock):
    """Linear (new parameters), Gemm, MatMul, Cast, InputLike and PassThrough."""

    def build(self, v):
        b = onnxblock.blocks
        other = b.InputLike("scores")("other")  # a new graph input typed like the output
        (same,) = b.PassThrough()(v)
        linear = b.Linear(4, 2)(same)
        weight = self.base.graph.initializer[-2].name
        return linear, b.Gemm(alpha=2.0, transB=1)(v, other), b.MatMul()(v, weight), b.Cast(TensorProto.INT64)(v)


def test_layer_blocks_evaluate(kiln, tmp_path):
    np.random.seed(9)  # Linear draws its parameters from numpy's global generator, as ONNX Runtime does
    with onnxblock.base(tiny_model((3, 4))) as handle:
        block = LayerBlocks()
        names = block("scores")
        result = block.to_model_proto()
        assert result == handle.model and [o.name for o in result.graph.output] == list(names)
    onnx.checker.check_model(result, full_check=True)
    weight, bias = (onnx.numpy_helper.to_array(t).astype(np.float64) for t in result.graph.initializer[1:])
    assert weight.shape == (4, 2) and bias.shape == (2,)
    assert [dims_of(i) for i in result.graph.input] == [["N", 4], ["N", 4]]
    rng = np.random.default_rng(10)
    x, other = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    got = evaluate(kiln, result, {"x": x, "other": other}, tmp_path)
    v = model_output(x).astype(np.float64)
    # Sums of 4 products may land near 0, where a relative bound means nothing: atol 1e-6 (values ~1).
    np.testing.assert_allclose(got[names[0]], v @ weight + bias, rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(got[names[1]], 2 * v @ other.astype(np.float64).T, rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(got[names[2]], v @ weight, rtol=RTOL, atol=1e-6)
    np.testing.assert_array_equal(got[names[3]], model_output(x).astype(np.int64))  # Cast truncates, as astype
