"""This session's ops against ONNX Runtime (onnxruntime-node through tests/python/ort_run.js), one
model each, the same inputs: Kiln's float outputs within 1e-5 of ORT's, relative to the largest
element, and integer outputs (quantized values, integer products) exactly equal.
They settle the readings of ONNX's text that torch never exercises: LSTM's clip (on the gates'
pre-activations, not on the cell before h), peepholes and non-default activations with alpha / beta, GRU's
linear_before_reset with sequence lengths in reverse, RNN's two activations, GridSample's bicubic
reflection, DFT with dft_length, STFT with a window, Scan's axes and directions, and the rounding
of the quantization ops."""
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from kiln_package import import_kiln
from onnx import TensorProto, helper

import_kiln()
from kiln import _kiln  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ORT_RUN = REPO / "tests" / "python" / "ort_run.js"
F = TensorProto.FLOAT


@pytest.fixture(scope="module")
def node():
    exe = shutil.which("node")
    assert exe, "node is not installed: run scripts/setup.sh (it installs Node.js and onnxruntime-node)"
    return exe


def ort_outputs(node, path, feeds, folder):
    """ONNX Runtime's outputs of the model at `path` on `feeds`, by name (files under `folder`)."""
    folder.mkdir(parents=True, exist_ok=True)
    args = []
    for name, value in feeds.items():
        np.save(folder / f"{name}.npy", value)
        args.append(f"{name}={folder / f'{name}.npy'}")
    proc = subprocess.run([node, str(ORT_RUN), str(path), str(folder / "ort"), *args], capture_output=True,
                          text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    names = json.loads(proc.stdout.strip().splitlines()[-1])["outputs"]
    return {n: np.load(folder / "ort" / f"out_{j}.npy") for j, n in enumerate(names)}


def run_both(node, tmp_path, graph, feeds, opset=17):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)  # (full_check's shape inference gets STFT's bins wrong in ONNX 1.12)
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    ort = ort_outputs(node, path, feeds, tmp_path)
    ours = _kiln.Session(str(path)).run(feeds)
    for name, want in ort.items():
        got = ours[name]
        assert got.shape == want.shape, f"{name}: Kiln {got.shape}, ORT {want.shape}"
        if not np.issubdtype(want.dtype, np.floating):  # integers (quantized values): exactly
            np.testing.assert_array_equal(got, want, err_msg=name)
            continue
        scale = max(float(np.abs(want).max(initial=0.0)), 1e-30)
        err = float(np.abs(got.astype(np.float64) - want).max(initial=0.0)) / scale
        assert err <= 1e-5, f"{name}: {err:.2e} relative to ORT"


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def recurrent(op, gates, dirs, attrs, inputs, outputs, seq=5, batch=3, size=4, hidden=3, layout=0, rng=None):
    rng = rng or np.random.default_rng(0)
    x_shape = [seq, batch, size] if layout == 0 else [batch, seq, size]
    state = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    values = {"X": rng.standard_normal(x_shape).astype(np.float32),
              "W": (0.6 * rng.standard_normal([dirs, gates * hidden, size])).astype(np.float32),
              "R": (0.6 * rng.standard_normal([dirs, gates * hidden, hidden])).astype(np.float32),
              "B": (0.3 * rng.standard_normal([dirs, 2 * gates * hidden])).astype(np.float32),
              "sequence_lens": np.array([seq, 2, seq - 1][:batch], np.int32),
              "initial_h": rng.standard_normal(state).astype(np.float32),
              "initial_c": rng.standard_normal(state).astype(np.float32),
              "P": (0.4 * rng.standard_normal([dirs, 3 * hidden])).astype(np.float32)}
    feeds = {k: values[k] for k in inputs if k}
    y_shape = [seq, dirs, batch, hidden] if layout == 0 else [batch, seq, dirs, hidden]
    outs = [vi(n, y_shape if n == "Y" else state) for n in outputs]
    graph = helper.make_graph([helper.make_node(op, inputs, outputs, hidden_size=hidden, layout=layout, **attrs)],
                              op.lower(), [vi(k, list(v.shape), TensorProto.INT32 if v.dtype == np.int32 else F)
                                           for k, v in feeds.items()], outs)
    return graph, feeds


LSTM_IN = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


@pytest.mark.parametrize("attrs", [
    dict(direction="bidirectional", clip=0.7),
    dict(direction="forward", activations=["HardSigmoid", "Softsign", "Elu"], activation_alpha=[0.3, 0.8],
         activation_beta=[0.45]),
    dict(direction="reverse", input_forget=1),
], ids=["clip", "activations", "input_forget"])
def test_lstm(node, tmp_path, attrs):
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    graph, feeds = recurrent("LSTM", 4, dirs, attrs, LSTM_IN, ["Y", "Y_h", "Y_c"])
    run_both(node, tmp_path, graph, feeds)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_reverse_with_lengths(node, tmp_path, lbr):
    graph, feeds = recurrent("GRU", 3, 1, dict(direction="reverse", linear_before_reset=lbr),
                             LSTM_IN[:6], ["Y", "Y_h"])
    run_both(node, tmp_path, graph, feeds)


def test_rnn_bidirectional_with_two_activations(node, tmp_path):
    # (ONNX Runtime refuses layout 1; Kiln's is checked by ONNX's *_batchwise cases.)
    graph, feeds = recurrent("RNN", 1, 2, dict(direction="bidirectional", activations=["Relu", "Tanh"]),
                             LSTM_IN[:6], ["Y", "Y_h"])
    run_both(node, tmp_path, graph, feeds, opset=14)


@pytest.mark.parametrize("mode, padding", [("bicubic", "reflection"), ("bilinear", "border"), ("nearest", "zeros")])
def test_grid_sample(node, tmp_path, mode, padding):
    rng = np.random.default_rng(1)
    feeds = {"X": rng.standard_normal((2, 3, 5, 6)).astype(np.float32),
             "grid": (2.6 * rng.random((2, 4, 3, 2)) - 1.3).astype(np.float32)}
    graph = helper.make_graph(
        [helper.make_node("GridSample", ["X", "grid"], ["Y"], mode=mode, padding_mode=padding, align_corners=1)],
        "gs", [vi("X", [2, 3, 5, 6]), vi("grid", [2, 4, 3, 2])], [vi("Y", [2, 3, 4, 3])])
    run_both(node, tmp_path, graph, feeds, opset=16)


def test_dft_and_stft(node, tmp_path):
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((2, 12, 3, 2)).astype(np.float32),
             "s": rng.standard_normal((2, 40, 1)).astype(np.float32),
             "w": np.hanning(10).astype(np.float32)}
    inits = [helper.make_tensor("len", TensorProto.INT64, [], [16]),
             helper.make_tensor("step", TensorProto.INT64, [], [4])]
    graph = helper.make_graph(
        [helper.make_node("DFT", ["x", "len"], ["X"], axis=1, inverse=1),
         helper.make_node("STFT", ["s", "step", "w"], ["S"])],
        "signal", [vi("x", [2, 12, 3, 2]), vi("s", [2, 40, 1]), vi("w", [10])],
        [vi("X", [2, 16, 3, 2]), vi("S", [2, 8, 6, 2])], inits)
    run_both(node, tmp_path, graph, feeds)


def test_scan_axes_and_directions(node, tmp_path):
    rng = np.random.default_rng(3)
    body = helper.make_graph(
        [helper.make_node("Mul", ["s", "xt"], ["sx"]), helper.make_node("Tanh", ["sx"], ["s2"]),
         helper.make_node("Add", ["s2", "c"], ["yt"])],
        "body", [vi("s", [4]), vi("xt", [4])], [vi("s2", [4]), vi("yt", [4])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["s0", "x"], ["s_final", "y"], body=body, num_scan_inputs=1,
                          scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1],
                          scan_output_directions=[1])],
        "scan", [vi("s0", [4]), vi("x", [4, 6]), vi("c", [4])], [vi("s_final", [4]), vi("y", [4, 6])])
    feeds = {"s0": rng.standard_normal(4).astype(np.float32), "x": rng.standard_normal((4, 6)).astype(np.float32),
             "c": rng.standard_normal(4).astype(np.float32)}
    run_both(node, tmp_path, graph, feeds)


def test_exported_control_flow(node, tmp_path):
    """A torch.jit.script'ed `if` and a `for` over range(n), exported by torch.onnx (If and Loop
    reading outer values), for both branches and several trip counts."""
    import warnings

    import torch
    from test_control_flow import Gated, Repeated

    torch.manual_seed(0)
    for name, module, feeds_list in (
            ("gated", Gated().eval(), [{"x": np.full((3, 5), s, np.float32)} for s in (1.0, -1.0)]),
            ("repeated", Repeated().eval(),
             [{"x": np.random.default_rng(4).random((3, 5), np.float32), "n": np.array(k, np.int64)}
              for k in (0, 3)])):
        path = tmp_path / f"{name}.onnx"
        args = tuple(torch.from_numpy(v) for v in feeds_list[0].values())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, str(path), input_names=list(feeds_list[0]), output_names=["y"],
                              opset_version=17)
        for i, feeds in enumerate(feeds_list):
            want = ort_outputs(node, path, feeds, tmp_path / f"{name}{i}")["y"]
            got = _kiln.Session(str(path)).run(feeds)["y"]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def q_tensor(name, dtype, shape, values):
    return helper.make_tensor(name, dtype, shape, values)


def test_quantization(node, tmp_path):
    """Quantize / dequantize per tensor and per axis, the dynamic form, and the integer products and
    convolutions with zero points (per-channel weights), all exact integers or one rounding."""
    rng = np.random.default_rng(5)
    U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
    inits = [
        helper.make_tensor("s", F, [], [0.05]), q_tensor("z8", I8, [], [-3]),
        helper.make_tensor("s_ax", F, [3], [0.02, 0.05, 0.1]), q_tensor("z_ax", U8, [3], [10, 128, 250]),
        q_tensor("az", U8, [], [7]), q_tensor("bz", U8, [5], [1, 2, 3, 250, 128]),
        helper.make_tensor("as", F, [], [0.03]), helper.make_tensor("bs", F, [], [0.02]),
        helper.make_tensor("ys", F, [], [0.5]), q_tensor("yz", U8, [], [100]),
        q_tensor("xz", U8, [], [9]), helper.make_tensor("ws", F, [4], [0.01, 0.02, 0.03, 0.005]),
        q_tensor("wz", I8, [4], [0, 0, 0, 0]), q_tensor("bias", I32, [4], [100, -50, 0, 2000]),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z8"], ["q8"]),
        helper.make_node("QuantizeLinear", ["x", "s_ax", "z_ax"], ["q_ax"], axis=1),
        helper.make_node("DequantizeLinear", ["q_ax", "s_ax", "z_ax"], ["dq_ax"], axis=1),
        helper.make_node("DynamicQuantizeLinear", ["x"], ["dy", "dy_s", "dy_z"]),
        helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["mm"]),
        helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz1", "ys", "yz"], ["qmm"]),
        helper.make_node("ConvInteger", ["img", "w", "xz"], ["ci"], pads=[1, 1, 1, 1], strides=[2, 1]),
        helper.make_node("QLinearConv", ["img", "s", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["qc"],
                         pads=[1, 1, 1, 1], strides=[2, 1]),
    ]
    inits.append(q_tensor("bz1", U8, [], [128]))
    graph = helper.make_graph(
        nodes, "quant",
        [vi("x", [2, 3, 4]), vi("a", [2, 3, 6], U8), vi("b", [6, 5], U8), vi("img", [1, 2, 5, 5], U8),
         vi("w", [4, 2, 3, 3], I8)],
        [vi("q8", [2, 3, 4], I8), vi("q_ax", [2, 3, 4], U8), vi("dq_ax", [2, 3, 4]), vi("dy", [2, 3, 4], U8),
         vi("dy_s", []), vi("dy_z", [], U8), vi("mm", [2, 3, 5], I32), vi("qmm", [2, 3, 5], U8),
         vi("ci", [1, 4, 3, 5], I32), vi("qc", [1, 4, 3, 5], U8)], inits)
    feeds = {"x": (rng.standard_normal((2, 3, 4)) * 4).astype(np.float32),
             "a": rng.integers(0, 256, (2, 3, 6), dtype=np.uint8), "b": rng.integers(0, 256, (6, 5), dtype=np.uint8),
             "img": rng.integers(0, 256, (1, 2, 5, 5), dtype=np.uint8),
             "w": rng.integers(-128, 128, (4, 2, 3, 3), dtype=np.int8)}
    run_both(node, tmp_path, graph, feeds)


def test_detection_and_the_rest(node, tmp_path):
    """NonMaxSuppression, RoiAlign (both coordinate modes, max and avg), MaxRoiPool, MaxUnpool, Det,
    ReverseSequence, TfIdfVectorizer (TFIDF) and MelWeightMatrix in one model. (MaxUnpool with an
    output_shape larger than the unpooled one is left out: ONNX Runtime puts X[j] at flat index I[j]
    of the larger output, which fails ONNX's own test_maxunpool_export_with_output_shape; Kiln
    follows that case, keeping each index's coordinates.)"""
    rng = np.random.default_rng(6)
    I64 = TensorProto.INT64
    boxes = rng.random((1, 6, 4)).astype(np.float32) * 10
    inits = [helper.make_tensor("max_out", I64, [], [3]), helper.make_tensor("iou", F, [], [0.3]),
             helper.make_tensor("score", F, [], [0.2]), helper.make_tensor("bi", I64, [3], [0, 1, 1]),
             helper.make_tensor("lens", I64, [3], [4, 1, 3]), helper.make_tensor("up_shape", I64, [4], [1, 2, 4, 4]),
             helper.make_tensor("mels", I64, [], [6]), helper.make_tensor("dft_len", I64, [], [32]),
             helper.make_tensor("rate", I64, [], [16000]), helper.make_tensor("lo", F, [], [100.0]),
             helper.make_tensor("hi", F, [], [7000.0])]
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score"], ["nms"]),
        helper.make_node("RoiAlign", ["img", "rois", "bi"], ["ra_avg"], output_height=2, output_width=3,
                         spatial_scale=0.5, sampling_ratio=2),
        helper.make_node("RoiAlign", ["img", "rois", "bi"], ["ra_max"], output_height=2, output_width=2,
                         mode="max", coordinate_transformation_mode="output_half_pixel"),
        helper.make_node("MaxRoiPool", ["img", "pool_rois"], ["roi_pooled"], pooled_shape=[3, 2], spatial_scale=0.5),
        helper.make_node("MaxPool", ["pool_in"], ["pooled", "idx"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("MaxUnpool", ["pooled", "idx", "up_shape"], ["unpooled"], kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Det", ["m"], ["det"]),
        helper.make_node("ReverseSequence", ["seq", "lens"], ["rev"], time_axis=0, batch_axis=1),
        helper.make_node("TfIdfVectorizer", ["tokens"], ["tfidf"], mode="TFIDF", min_gram_length=1,
                         max_gram_length=2, max_skip_count=1, ngram_counts=[0, 3], ngram_indexes=[0, 1, 2, 3, 4],
                         pool_int64s=[2, 3, 5, 2, 3, 3, 5], weights=[0.5, 1.0, 2.0, 1.5, 3.0]),
        helper.make_node("MelWeightMatrix", ["mels", "dft_len", "rate", "lo", "hi"], ["mel"]),
    ]
    graph = helper.make_graph(
        nodes, "rest",
        [vi("boxes", [1, 6, 4]), vi("scores", [1, 2, 6]), vi("img", [2, 3, 8, 8]), vi("rois", [3, 4]),
         vi("pool_rois", [4, 5]),
         vi("pool_in", [1, 2, 4, 4]), vi("m", [2, 3, 3]), vi("seq", [4, 3, 2]), vi("tokens", [2, 6], I64)],
        [vi("nms", [None, 3], I64), vi("ra_avg", [3, 3, 2, 3]), vi("ra_max", [3, 3, 2, 2]),
         vi("roi_pooled", [4, 3, 3, 2]),
         vi("unpooled", [1, 2, 4, 4]), vi("det", [2]), vi("rev", [4, 3, 2]), vi("tfidf", [2, 5]), vi("mel", [17, 6])],
        inits)
    feeds = {"boxes": boxes, "scores": rng.random((1, 2, 6)).astype(np.float32),
             "img": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
             "rois": np.array([[0.5, 1, 9, 12], [2, 2, 6, 7], [-2, 3, 14, 15]], np.float32),
             # (batch, x1, y1, x2, y2): rounded after scaling, past the border, x2 < x1
             "pool_rois": np.array([[0, 1, 2, 11.5, 14], [1, 4.2, 0.5, 9.9, 6.1], [1, -3, 5, 18, 20],
                                    [0, 7, 7, 3, 2]], np.float32),
             "pool_in": rng.standard_normal((1, 2, 4, 4)).astype(np.float32),
             "m": rng.standard_normal((2, 3, 3)).astype(np.float32),
             "seq": rng.standard_normal((4, 3, 2)).astype(np.float32),
             "tokens": rng.integers(1, 6, (2, 6), dtype=np.int64)}
    run_both(node, tmp_path, graph, feeds)


def test_sequences_and_optionals(node, tmp_path):
    """The sequence ops, SequenceMap and the optional ops inside a model of tensor inputs and outputs
    (what ort_run.js feeds and reads): splits by lengths and into rows without the axis, insertion at
    a fed position, erasure, negative positions, concatenation along an axis and a new one, a map
    whose body doubles each element, an optional holding a tensor and an empty one of a declared type."""
    I64 = TensorProto.INT64
    body = helper.make_graph([helper.make_node("Add", ["e", "e"], ["d"])], "double", [vi("e", None)], [vi("d", None)])
    empty_type = helper.make_tensor_type_proto(F, None)
    nodes = [
        helper.make_node("SplitToSequence", ["x", "lengths"], ["parts"], axis=1),
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        helper.make_node("SequenceAt", ["rows", "minus_one"], ["last_row"]),
        helper.make_node("Neg", ["last_row"], ["neg_row"]),
        helper.make_node("SequenceInsert", ["rows", "neg_row", "pos"], ["rows2"]),
        helper.make_node("SequenceErase", ["rows2", "zero"], ["rows3"]),
        helper.make_node("ConcatFromSequence", ["rows3"], ["stacked"], axis=0, new_axis=1),
        helper.make_node("SequenceLength", ["rows3"], ["n"]),
        helper.make_node("SequenceAt", ["parts", "minus_one"], ["last_part"]),
        helper.make_node("SequenceMap", ["parts"], ["doubled"], body=body),
        helper.make_node("ConcatFromSequence", ["doubled"], ["joined"], axis=-1),
        helper.make_node("Optional", ["last_part"], ["opt"]),
        helper.make_node("OptionalHasElement", ["opt"], ["has"]),
        helper.make_node("OptionalGetElement", ["opt"], ["got"]),
        helper.make_node("Optional", [], ["nothing"], type=empty_type),
        helper.make_node("OptionalHasElement", ["nothing"], ["has_nothing"]),
        helper.make_node("Cast", ["has"], ["has_i"], to=I64),
        helper.make_node("Cast", ["has_nothing"], ["has_nothing_i"], to=I64),
    ]
    inits = [helper.make_tensor("lengths", I64, [3], [1, 2, 3]), helper.make_tensor("minus_one", I64, [], [-1]),
             helper.make_tensor("zero", I64, [], [0])]
    graph = helper.make_graph(
        nodes, "sequences", [vi("x", [4, 6]), vi("pos", [], I64)],
        [vi("stacked", [4, 6]), vi("n", [], I64), vi("joined", [4, 6]), vi("got", [4, 3]), vi("has_i", [], I64),
         vi("has_nothing_i", [], I64)], inits)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    for pos in (1, -2, 4):
        (tmp_path / f"pos{pos}").mkdir()
        run_both(node, tmp_path / f"pos{pos}", graph, {"x": x, "pos": np.array(pos, np.int64)})
