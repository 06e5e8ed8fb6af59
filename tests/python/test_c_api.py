"""Kiln's C API (include/kiln/c_api.h, libkiln_c.so):

- examples/c/train_mnist.c (built by CMake as C99 with -Wall -Wextra -Wpedantic -Werror) trains the
  zoo's LeNet on Fashion-MNIST through it, and its per-step losses (1e-6 relative) and trained
  trainable parameters (1e-6; not the convolution biases BatchNorm cancels) equal those of the same run
  through the C++ API (kiln.training's bindings):
  artifacts, AdamW, a linear decay, the same batches;
- Python's ctypes loads the library and trains a step, and its errors come back as statuses with a
  code and a message (never an exception or an abort); checkpoint properties, parameters (type,
  shape, copy, update) and a checkpoint from bytes; an inference session on the exported model gives
  the Python backend's outputs (1e-6);
- the library exports the Kiln* functions and nothing else, and the header compiles as C++;
- string tensors and sequence outputs, which a buffer of numbers cannot hold, are
  KILN_NOT_IMPLEMENTED statuses naming them.
"""
import ctypes
import gzip
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from kiln_cli import build_dir
from kiln_package import import_kiln

kiln = import_kiln()
from kiln import nn  # noqa: E402
from kiln.training import artifacts  # noqa: E402
from kiln.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer  # noqa: E402

DATA = Path("/usr/share/datasets/fashion-mnist")
REPO = Path(__file__).resolve().parents[2]
STEPS, BATCH = 6, 16
pytestmark = pytest.mark.skipif(not DATA.exists(), reason="dataset-fashion-mnist is not installed")


def fashion(n):
    with gzip.open(DATA / "train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16)[:n * 784].reshape(n, 1, 28, 28)
    with gzip.open(DATA / "train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:n].astype(np.int64)
    return images.astype(np.float32) / np.float32(255), labels


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    path = tmp_path_factory.mktemp("lenet") / "lenet.onnx"
    nn.zoo.create_model("lenet").export(str(path), [("input", (BATCH, 1, 28, 28))], output_names=["logits"])
    return path


@pytest.fixture(scope="module")
def c_run(lenet, tmp_path_factory):
    out = tmp_path_factory.mktemp("c")
    proc = subprocess.run([str(build_dir() / "examples" / "train_mnist"), str(lenet), str(out),
                           str(DATA / "train-images-idx3-ubyte.gz"), str(DATA / "train-labels-idx1-ubyte.gz"),
                           str(STEPS), str(BATCH)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    losses = [float(line.split()[3]) for line in proc.stdout.splitlines() if line.startswith("step ")]
    return out, losses, proc.stdout


def test_the_c_example_trains_as_the_cpp_api(c_run, lenet, tmp_path):
    out, c_losses, stdout = c_run
    assert len(c_losses) == STEPS
    assert "eval model output 0: loss" in stdout
    artifacts.generate_artifacts(str(lenet), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path)
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    module = Module(str(tmp_path / "training_model.onnx"), state, str(tmp_path / "eval_model.onnx"))
    optimizer = Optimizer(str(tmp_path / "optimizer_model.onnx"), module)
    scheduler = LinearLRScheduler(optimizer, 0, STEPS, 1e-3)
    x, y = fashion(STEPS * BATCH)
    want = []
    for s in range(STEPS):
        module.train()
        want.append(float(module(x[s * BATCH:(s + 1) * BATCH], y[s * BATCH:(s + 1) * BATCH])))
        optimizer.step()
        scheduler.step()
        module.lazy_reset_grad()
    # oneDNN's convolution gradients sum in an order that depends on the threads the process got, so
    # two processes agree to rounding, not bit for bit.
    np.testing.assert_allclose(c_losses, want, rtol=1e-6)
    assert want[-1] < want[0]
    trained = CheckpointState.load_checkpoint(str(out / "checkpoint"))
    for name, parameter in state.parameters:
        if (name.startswith("conv") and name.endswith(".bias")) or not parameter.requires_grad:
            # A bias before BatchNorm has no effect on the loss, so its gradient is rounding noise,
            # which AdamW's division by its own scale makes an update of the learning rate's size;
            # the running statistics follow it.
            continue
        np.testing.assert_allclose(trained.parameters[name].data, parameter.data, rtol=1e-5, atol=1e-6, err_msg=name)
    assert (out / "inference.onnx").stat().st_size > 0


class Status(ctypes.Structure):
    pass


def library():
    lib = ctypes.CDLL(str(build_dir() / "lib" / "libkiln_c.so"))
    status = ctypes.POINTER(Status)
    for name in ("KilnLoadCheckpoint", "KilnCreateTrainingSession", "KilnCreateTensorWithDataAsValue",
                 "KilnCreateTensor", "KilnTrainStep", "KilnGetTensorMutableData", "KilnOptimizerStep",
                 "KilnTrainingSessionGetTrainingModelOutputCount", "KilnGetParametersSize", "KilnSetLearningRate"):
        getattr(lib, name).restype = status
    lib.KilnGetErrorMessage.restype = ctypes.c_char_p
    lib.KilnGetErrorCode.argtypes = [status]
    lib.KilnGetErrorMessage.argtypes = [status]
    lib.KilnReleaseStatus.argtypes = [status]
    return lib


def error_of(lib, status):
    """(code, message) of a status, released; None for success."""
    if not status:
        return None
    out = lib.KilnGetErrorCode(status), lib.KilnGetErrorMessage(status).decode()
    lib.KilnReleaseStatus(status)
    return out


def ok(lib, status):
    assert error_of(lib, status) is None


def test_ctypes_trains_a_step_and_gets_errors_as_statuses(c_run, tmp_path):
    out, c_losses, _ = c_run
    lib = library()
    art = out / "artifacts"
    state, session = ctypes.c_void_p(), ctypes.c_void_p()
    ok(lib, lib.KilnLoadCheckpoint(str(art / "checkpoint").encode(), ctypes.byref(state)))
    ok(lib, lib.KilnCreateTrainingSession(None, state, str(art / "training_model.onnx").encode(), None,
                                          str(art / "optimizer_model.onnx").encode(), ctypes.byref(session)))
    count = ctypes.c_size_t()
    ok(lib, lib.KilnTrainingSessionGetTrainingModelOutputCount(session, ctypes.byref(count)))
    x, y = fashion(BATCH)
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    values = []
    for array, code in ((x, 1), (y, 7)):
        shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        v = ctypes.c_void_p()
        data = array.ctypes.data_as(ctypes.c_void_p)
        ok(lib, lib.KilnCreateTensorWithDataAsValue(data, ctypes.c_size_t(array.nbytes), shape,
                                                    ctypes.c_size_t(array.ndim), code, ctypes.byref(v)))
        values.append(v)
    inputs = (ctypes.c_void_p * 2)(*[v.value for v in values])
    outputs = (ctypes.c_void_p * count.value)()
    ok(lib, lib.KilnTrainStep(session, ctypes.c_size_t(2), inputs, count, outputs))
    data = ctypes.c_void_p()
    ok(lib, lib.KilnGetTensorMutableData(ctypes.c_void_p(outputs[0]), ctypes.byref(data)))
    assert ctypes.cast(data, ctypes.POINTER(ctypes.c_float))[0] == pytest.approx(c_losses[0], rel=1e-6)
    ok(lib, lib.KilnOptimizerStep(session))
    size = ctypes.c_size_t()
    ok(lib, lib.KilnGetParametersSize(session, ctypes.byref(size), True))
    assert size.value > 1000
    # Errors: statuses naming what went wrong.
    code, message = error_of(lib, lib.KilnTrainStep(session, ctypes.c_size_t(1), inputs, count, outputs))
    assert code == 2 and "input" in message, message
    code, message = error_of(lib, lib.KilnLoadCheckpoint(str(tmp_path / "missing").encode(),
                                                         ctypes.byref(ctypes.c_void_p())))
    assert code == 3 and "missing" in message, message
    (tmp_path / "bad").write_bytes(b"not a checkpoint")
    code, message = error_of(lib, lib.KilnLoadCheckpoint(str(tmp_path / "bad").encode(),
                                                         ctypes.byref(ctypes.c_void_p())))
    assert code == 4, message
    shape = (ctypes.c_int64 * 2)(2, -1)
    code, message = error_of(lib, lib.KilnCreateTensor(shape, ctypes.c_size_t(2), 1, ctypes.byref(ctypes.c_void_p())))
    assert code == 2 and "negative" in message, message
    code, message = error_of(lib, lib.KilnCreateTensorWithDataAsValue(x.ctypes.data_as(ctypes.c_void_p),
                                                                      ctypes.c_size_t(12), shape, ctypes.c_size_t(0), 1,
                                                                      ctypes.byref(ctypes.c_void_p())))
    assert code == 2 and "data_len is 12" in message, message
    code, message = error_of(lib, lib.KilnSetLearningRate(None, ctypes.c_float(0.1)))
    assert code == 2 and "session is NULL" in message, message
    for v in values + [ctypes.c_void_p(o) for o in outputs]:
        lib.KilnReleaseValue(v)
    lib.KilnReleaseTrainingSession(session)
    lib.KilnReleaseCheckpointState(state)
    lib.KilnReleaseStatus(None)


def test_only_the_c_functions_are_exported_and_the_header_is_cpp_too(tmp_path):
    nm = subprocess.run(["nm", "-D", "--defined-only", str(build_dir() / "lib" / "libkiln_c.so")],
                        capture_output=True, text=True, check=True).stdout
    symbols = [line.split()[-1] for line in nm.splitlines() if line.strip()]
    assert symbols and all(s.startswith("Kiln") for s in symbols), [s for s in symbols if not s.startswith("Kiln")]
    assert {"KilnTrainStep", "KilnGenerateArtifacts", "KilnExportModelForInferencing"} <= set(symbols)
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    source = tmp_path / "use.cpp"
    source.write_text('#include "kiln/c_api.h"\nint main() { KilnReleaseStatus(KilnSetSeed(1)); return 0; }\n')
    proc = subprocess.run([compiler, "-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only",
                           f"-I{REPO / 'include'}", str(source)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_checkpoint_properties_parameters_and_inference_sessions(c_run, tmp_path):
    out, _, _ = c_run
    lib = library()
    for name in ("KilnLoadCheckpointFromBuffer", "KilnAddProperty", "KilnGetProperty", "KilnGetParameterTypeAndShape",
                 "KilnUpdateParameter", "KilnGetParameter", "KilnCreateSession", "KilnRun", "KilnSessionGetInputName",
                 "KilnSessionGetOutputCount", "KilnSaveCheckpoint"):
        getattr(lib, name).restype = ctypes.POINTER(Status)
    blob = (out / "checkpoint").read_bytes()
    state = ctypes.c_void_p()
    ok(lib, lib.KilnLoadCheckpointFromBuffer(blob, ctypes.c_size_t(len(blob)), ctypes.byref(state)))
    code, message = error_of(lib, lib.KilnLoadCheckpointFromBuffer(blob[:100], ctypes.c_size_t(100),
                                                                   ctypes.byref(ctypes.c_void_p())))
    assert code == 4 and "checkpoint buffer" in message, message
    # Properties of the three types, through a saved checkpoint and back.
    ok(lib, lib.KilnAddProperty(state, b"epoch", 0, ctypes.byref(ctypes.c_int64(7))))
    ok(lib, lib.KilnAddProperty(state, b"best", 1, ctypes.byref(ctypes.c_float(0.25))))
    ok(lib, lib.KilnAddProperty(state, b"run", 2, ctypes.c_char_p(b"lenet-c")))
    ok(lib, lib.KilnSaveCheckpoint(state, str(tmp_path / "saved").encode(), True))
    saved = CheckpointState.load_checkpoint(str(tmp_path / "saved"))
    assert saved.properties["epoch"] == 7 and saved.properties["best"] == 0.25 and saved.properties["run"] == "lenet-c"
    kind, value = ctypes.c_int(), ctypes.c_void_p()
    ok(lib, lib.KilnGetProperty(state, b"run", ctypes.byref(kind), ctypes.byref(value)))
    assert kind.value == 2 and ctypes.cast(value, ctypes.c_char_p).value == b"lenet-c"
    lib.KilnFree(value)
    ok(lib, lib.KilnGetProperty(state, b"epoch", ctypes.byref(kind), ctypes.byref(value)))
    assert kind.value == 0 and ctypes.cast(value, ctypes.POINTER(ctypes.c_int64))[0] == 7
    lib.KilnFree(value)
    code, message = error_of(lib, lib.KilnGetProperty(state, b"nope", ctypes.byref(kind), ctypes.byref(value)))
    assert code == 2 and "nope" in message, message
    # Parameters: type and shape, a copy out, an update in (a wrong shape is an error).
    name = b"conv1.weight"
    elem, rank, dims = ctypes.c_int(), ctypes.c_size_t(), (ctypes.c_int64 * 8)()
    ok(lib, lib.KilnGetParameterTypeAndShape(state, name, ctypes.byref(elem), ctypes.byref(rank), dims,
                                             ctypes.c_size_t(8)))
    shape = tuple(dims[:rank.value])
    assert elem.value == 1 and shape == saved.parameters["conv1.weight"].data.shape
    value_out = ctypes.c_void_p()
    ok(lib, lib.KilnGetParameter(state, name, ctypes.byref(value_out)))
    data = ctypes.c_void_p()
    ok(lib, lib.KilnGetTensorMutableData(value_out, ctypes.byref(data)))
    got = np.ctypeslib.as_array(ctypes.cast(data, ctypes.POINTER(ctypes.c_float)), shape=shape).copy()
    np.testing.assert_array_equal(got, saved.parameters["conv1.weight"].data)
    lib.KilnReleaseValue(value_out)
    fresh = np.full(shape, 0.5, np.float32)
    v = ctypes.c_void_p()
    ok(lib, lib.KilnCreateTensorWithDataAsValue(fresh.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(fresh.nbytes),
                                                (ctypes.c_int64 * len(shape))(*shape), ctypes.c_size_t(len(shape)), 1,
                                                ctypes.byref(v)))
    ok(lib, lib.KilnUpdateParameter(state, name, v))
    ok(lib, lib.KilnGetParameter(state, name, ctypes.byref(value_out)))
    ok(lib, lib.KilnGetTensorMutableData(value_out, ctypes.byref(data)))
    assert ctypes.cast(data, ctypes.POINTER(ctypes.c_float))[3] == 0.5
    lib.KilnReleaseValue(value_out)
    code, message = error_of(lib, lib.KilnUpdateParameter(state, b"fc3.bias", v))
    assert code == 2 and "fc3.bias" in message, message
    lib.KilnReleaseValue(v)
    lib.KilnReleaseCheckpointState(state)
    # The exported inference model through an inference session: the C++ API's predictions.
    session = ctypes.c_void_p()
    ok(lib, lib.KilnCreateSession(str(out / "inference.onnx").encode(), None, ctypes.byref(session)))
    input_name = ctypes.c_char_p()
    ok(lib, lib.KilnSessionGetInputName(session, ctypes.c_size_t(0), ctypes.byref(input_name)))
    x, _ = fashion(BATCH)
    x = np.ascontiguousarray(x)
    xv = ctypes.c_void_p()
    dims = (ctypes.c_int64 * 4)(*x.shape)
    ok(lib, lib.KilnCreateTensorWithDataAsValue(x.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(x.nbytes), dims,
                                                ctypes.c_size_t(4), 1, ctypes.byref(xv)))
    names_in = (ctypes.c_char_p * 1)(input_name.value)
    names_out = (ctypes.c_char_p * 1)(b"logits")
    result = (ctypes.c_void_p * 1)()
    ok(lib, lib.KilnRun(session, names_in, (ctypes.c_void_p * 1)(xv.value), ctypes.c_size_t(1), names_out,
                        ctypes.c_size_t(1), result))
    ok(lib, lib.KilnGetTensorMutableData(ctypes.c_void_p(result[0]), ctypes.byref(data)))
    logits = np.ctypeslib.as_array(ctypes.cast(data, ctypes.POINTER(ctypes.c_float)), shape=(BATCH, 10)).copy()
    import onnx

    from kiln import backend
    want = backend.prepare(onnx.load(str(out / "inference.onnx"))).run([x])[0]
    np.testing.assert_allclose(logits, want, rtol=1e-6, atol=1e-6)
    assert logits.std() > 0
    code, message = error_of(lib, lib.KilnRun(session, names_in, (ctypes.c_void_p * 1)(xv.value), ctypes.c_size_t(1),
                                              (ctypes.c_char_p * 1)(b"nothing"), ctypes.c_size_t(1), result))
    assert code == 2 and "nothing" in message, message
    lib.KilnFree(input_name)
    lib.KilnReleaseValue(ctypes.c_void_p(result[0]))
    lib.KilnReleaseValue(xv)
    lib.KilnReleaseSession(session)


def test_strings_and_sequences_are_not_in_the_c_api(tmp_path):
    """A KilnValue is a buffer of numbers: a string element type, and a string or sequence output of an
    inference session, are KILN_NOT_IMPLEMENTED statuses naming them; the numeric output of the same
    run comes back."""
    import onnx
    from onnx import TensorProto, helper

    lib = library()
    for name in ("KilnCreateSession", "KilnRun"):
        getattr(lib, name).restype = ctypes.POINTER(Status)
    code, message = error_of(lib, lib.KilnCreateTensor((ctypes.c_int64 * 1)(2), ctypes.c_size_t(1), 8,
                                                       ctypes.byref(ctypes.c_void_p())))
    assert code == 5 and "string tensors are not in the C API" in message, message
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["text"], to=TensorProto.STRING),
         helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0),
         helper.make_node("Neg", ["x"], ["neg"])], "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("text", TensorProto.STRING, [2]),
         helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("neg", TensorProto.FLOAT, [2])])
    path = tmp_path / "mixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    session = ctypes.c_void_p()
    ok(lib, lib.KilnCreateSession(str(path).encode(), None, ctypes.byref(session)))
    x = np.array([1.5, -2.0], np.float32)
    xv = ctypes.c_void_p()
    ok(lib, lib.KilnCreateTensorWithDataAsValue(x.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(x.nbytes),
                                                (ctypes.c_int64 * 1)(2), ctypes.c_size_t(1), 1, ctypes.byref(xv)))
    result = (ctypes.c_void_p * 1)()

    def run(output):
        return lib.KilnRun(session, (ctypes.c_char_p * 1)(b"x"), (ctypes.c_void_p * 1)(xv.value), ctypes.c_size_t(1),
                           (ctypes.c_char_p * 1)(output), ctypes.c_size_t(1), result)

    for output, kind in ((b"text", "string"), (b"parts", "sequence")):
        code, message = error_of(lib, run(output))
        assert code == 5 and f"output '{output.decode()}' is" in message and kind in message, message
        assert "the C API returns tensors of numbers only" in message, message
    ok(lib, run(b"neg"))
    data = ctypes.c_void_p()
    ok(lib, lib.KilnGetTensorMutableData(ctypes.c_void_p(result[0]), ctypes.byref(data)))
    assert list(np.ctypeslib.as_array(ctypes.cast(data, ctypes.POINTER(ctypes.c_float)), shape=(2,))) == [-1.5, 2.0]
    lib.KilnReleaseValue(ctypes.c_void_p(result[0]))
    lib.KilnReleaseValue(xv)
    lib.KilnReleaseSession(session)
