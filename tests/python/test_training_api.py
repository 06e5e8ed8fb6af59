"""kiln.training.api as a drop-in for onnxruntime.training.api: ONNX Runtime's documented
on-device training example with only the import changed, parity with PyTorch over 20 AdamW steps
through the Python API (MLP, LeNet-style CNN, a BERT-style transformer), and the exceptions of
every error path."""
import pathlib
import threading
import time

import numpy as np
import onnx
import pytest
import torch
import torch_models
import zoo_models
from kiln_package import import_kiln
from training_parity import cross_entropy_loss, export_forward, load_initializers_into, perturb, torch_train

kiln = import_kiln()

STEPS = 20
LOSS_TOL = 1e-3  # relative, per step


def mlp_model(tmp_path, seed=0):
    torch.manual_seed(seed)
    module = perturb(torch_models.MLP())
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 784)).astype(np.float32)
    path = export_forward(module, {"input": x}, tmp_path / "mlp.onnx", output_names=["logits"])
    load_initializers_into(module, path)
    return module, path


def mlp_batch(i):
    rng = np.random.default_rng(1000 + i)
    return {"input": rng.standard_normal((16, 784)).astype(np.float32),
            "labels": rng.integers(0, 10, size=(16,), dtype=np.int64)}


def test_onnxruntime_documented_example_runs_with_the_import_changed(tmp_path):
    _, model_path = mlp_model(tmp_path)
    onnx_model = onnx.load(str(model_path))
    requires_grad = [p.name for p in onnx_model.graph.initializer if p.name != "net.0.bias"]
    frozen_params = ["net.0.bias"]
    path_to_output_artifact_directory = str(tmp_path / "artifacts")

    # --- ONNX Runtime's documentation, with `onnxruntime.training` replaced by `kiln.training` ---
    from kiln.training import artifacts

    artifacts.generate_artifacts(
        onnx_model,
        requires_grad=requires_grad,
        frozen_params=frozen_params,
        loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=artifacts.OptimType.AdamW,
        artifact_directory=path_to_output_artifact_directory,
    )

    from kiln.training.api import CheckpointState, Module, Optimizer

    state = CheckpointState.load_checkpoint(f"{path_to_output_artifact_directory}/checkpoint")
    module = Module(f"{path_to_output_artifact_directory}/training_model.onnx", state,
                    f"{path_to_output_artifact_directory}/eval_model.onnx")
    optimizer = Optimizer(f"{path_to_output_artifact_directory}/optimizer_model.onnx", module)

    losses = []
    for i in range(30):
        batch = mlp_batch(i % 2)
        module.train()
        training_loss = module(batch["input"], batch["labels"])
        optimizer.step()
        module.lazy_reset_grad()
        losses.append(float(training_loss))

    module.eval()
    eval_loss = module(mlp_batch(0)["input"], mlp_batch(0)["labels"])
    CheckpointState.save_checkpoint(state, tmp_path / "checkpoint")
    # --------------------------------------------------------------------------------------------

    assert isinstance(training_loss, np.ndarray) and training_loss.shape == ()
    assert losses[-1] < 0.5 * losses[0], losses
    assert np.isfinite(eval_loss)
    reloaded = CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    for name, parameter in state.parameters:
        np.testing.assert_array_equal(reloaded.parameters[name].data, parameter.data)
    assert reloaded.parameters["net.0.bias"].requires_grad is False
    assert module.input_names() == ["input", "labels"] and module.output_names() == ["loss"]


def bert_model(tmp_path):
    torch.manual_seed(0)
    module = perturb(zoo_models.Bert(**zoo_models.SIZES["bert"]["test"]))
    spec = zoo_models.zoo("test")["bert"]

    def batch(i):
        rng = np.random.default_rng(4000 + i)
        feeds = spec.inputs(2, 16, rng)
        feeds["labels"] = rng.integers(0, 3, size=(2,), dtype=np.int64)
        return feeds
    return module, batch


def lenet_model(tmp_path):
    torch.manual_seed(0)
    module = perturb(torch_models.LeNet())

    def batch(i):
        rng = np.random.default_rng(2000 + i)
        return {"input": rng.standard_normal((8, 1, 28, 28)).astype(np.float32),
                "labels": rng.integers(0, 10, size=(8,), dtype=np.int64)}
    return module, batch


def mlp_case(tmp_path):
    torch.manual_seed(0)
    return perturb(torch_models.MLP()), mlp_batch


@pytest.mark.parametrize("make", [mlp_case, lenet_model, bert_model], ids=["mlp", "lenet", "bert"])
def test_adamw_losses_match_torch_through_the_python_api(tmp_path, make):
    from kiln.training import artifacts
    from kiln.training.api import CheckpointState, Module, Optimizer

    module, batch = make(tmp_path)
    batches = [batch(i) for i in range(STEPS)]
    inputs = {k: v for k, v in batches[0].items() if k != "labels"}
    path = export_forward(module, inputs, tmp_path / "model.onnx", output_names=["logits"])
    load_initializers_into(module, path)
    artifacts.generate_artifacts(str(path), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path / "art")
    state = CheckpointState.load_checkpoint(tmp_path / "art" / "checkpoint")
    model = Module(tmp_path / "art" / "training_model.onnx", state, tmp_path / "art" / "eval_model.onnx")
    optimizer = Optimizer(tmp_path / "art" / "optimizer_model.onnx", model)
    assert model.input_names() == [*inputs, "labels"]
    kiln_losses = []
    for b in batches:
        model.train()
        kiln_losses.append(float(model(*[b[n] for n in model.input_names()])))
        optimizer.step()
        model.lazy_reset_grad()
    torch_losses, _ = torch_train(module, batches, lambda p: torch.optim.AdamW(p, lr=1e-3), cross_entropy_loss,
                                  train=False)
    bad = [(i, k, t) for i, (k, t) in enumerate(zip(kiln_losses, torch_losses)) if not abs(k - t) <= LOSS_TOL * abs(t)]
    assert not bad, bad
    for name, p in module.named_parameters():
        got, want = state.parameters[name].data, p.detach().numpy()
        assert np.max(np.abs(got - want)) <= 1e-3 * max(1.0, np.max(np.abs(want))), name


@pytest.fixture
def trained(tmp_path):
    from kiln.training import artifacts
    from kiln.training.api import CheckpointState, Module, Optimizer

    _, path = mlp_model(tmp_path)
    art = tmp_path / "art"
    artifacts.generate_artifacts(onnx.load(str(path)), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=art)
    state = CheckpointState.load_checkpoint(art / "checkpoint")
    module = Module(art / "training_model.onnx", state, art / "eval_model.onnx")
    optimizer = Optimizer(art / "optimizer_model.onnx", module)
    return art, state, module, optimizer


def test_state_parameters_properties_and_buffers(trained, tmp_path):
    from kiln.training.api import CheckpointState, Parameter

    art, state, module, optimizer = trained
    names = [name for name, _ in state.parameters]
    assert names[:2] == ["net.0.weight", "net.0.bias"] and len(state.parameters) == len(names)
    p = state.parameters["net.0.weight"]
    assert isinstance(p, Parameter) and p.name == "net.0.weight" and p.requires_grad and p.grad is None
    b = mlp_batch(0)
    module(b["input"], b["labels"])
    assert p.grad.shape == p.data.shape and np.any(p.grad != 0)
    new = np.full(p.data.shape, 0.5, np.float32)
    p.data = new
    np.testing.assert_array_equal(state.parameters["net.0.weight"].data, new)
    state.parameters["net.0.weight"] = new * 2
    np.testing.assert_array_equal(p.data, new * 2)

    state.properties["epoch"] = 3
    state.properties["best"] = 0.25
    state.properties["run"] = "baseline"
    assert "epoch" in state.properties and dict(state.properties) == {"best": 0.25, "epoch": 3, "run": "baseline"}
    CheckpointState.save_checkpoint(state, tmp_path / "ckpt", include_optimizer_state=True)
    again = CheckpointState.load_checkpoint(tmp_path / "ckpt")
    assert again.properties["epoch"] == 3 and isinstance(again.properties["epoch"], int)
    assert again.properties["best"] == 0.25 and again.properties["run"] == "baseline"

    size = module.get_parameters_size()
    flat = module.get_contiguous_parameters()
    assert flat.dtype == np.float32 and flat.shape == (module.get_parameters_size(False),) and size == flat.size
    module.copy_buffer_to_parameters(np.zeros(size, np.float32))
    assert not np.any(module.get_contiguous_parameters(trainable_only=True))

    optimizer.set_learning_rate(0.125)
    assert optimizer.get_learning_rate() == 0.125


def test_nominal_checkpoint_and_export(trained, tmp_path):
    from kiln.training import artifacts
    from kiln.training.api import CheckpointState, Module

    art, state, module, optimizer = trained
    b = mlp_batch(0)
    for _ in range(2):
        module(b["input"], b["labels"])
        optimizer.step()
        module.lazy_reset_grad()
    module.export_model_for_inferencing(tmp_path / "inference.onnx", ["logits"])
    inference = onnx.load(str(tmp_path / "inference.onnx"))
    onnx.checker.check_model(inference, full_check=True)
    session = kiln._kiln.Session(str(tmp_path / "inference.onnx"))
    logits = session.run({"input": b["input"]})["logits"]
    module.eval()
    eval_loss = module(b["input"], b["labels"])
    ce = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(b["labels"])).item()
    assert abs(float(eval_loss) - ce) <= 1e-5 * abs(ce)

    artifacts.generate_artifacts(onnx.load(str(art.parent / "mlp.onnx")), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path / "nominal",
                                 nominal_checkpoint=True)
    nominal = CheckpointState.load_checkpoint(tmp_path / "nominal" / "checkpoint")
    m = Module(tmp_path / "nominal" / "training_model.onnx", nominal)
    with pytest.raises(ValueError, match="nominal"):
        m(b["input"], b["labels"])
    m.copy_buffer_to_parameters(module.get_contiguous_parameters(), trainable_only=False)
    assert np.isfinite(m(b["input"], b["labels"]))


def test_linear_lr_scheduler(trained):
    from kiln.training.api import LinearLRScheduler

    _, _, _, optimizer = trained
    scheduler = LinearLRScheduler(optimizer, warmup_step_count=2, total_step_count=4, initial_lr=1.0)
    lrs = [optimizer.get_learning_rate()]
    for _ in range(5):
        scheduler.step()
        lrs.append(optimizer.get_learning_rate())
    assert lrs == pytest.approx([0.0, 0.5, 1.0, 0.5, 0.0, 0.0])


def test_paths_may_be_pathlike(trained):
    from kiln.training.api import CheckpointState

    art, *_ = trained
    assert isinstance(art, pathlib.Path)
    assert len(CheckpointState.load_checkpoint(art / "checkpoint").parameters) > 0


def test_error_paths_raise_the_documented_exceptions(trained, tmp_path):
    from kiln.training import artifacts
    from kiln.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer

    art, state, module, optimizer = trained
    with pytest.raises(KeyError, match="nope"):
        state.parameters["nope"]
    with pytest.raises(KeyError, match="nope"):
        state.properties["nope"]
    with pytest.raises(TypeError):
        state.properties["x"] = [1, 2]
    with pytest.raises(ValueError, match="net.0.weight"):
        state.parameters["net.0.weight"].data = np.zeros((3, 3), np.float32)
    with pytest.raises(TypeError, match="net.0.weight"):
        state.parameters["net.0.weight"].data = np.zeros(state.parameters["net.0.weight"].data.shape, np.float64)
    with pytest.raises(TypeError):
        Module(123, state)
    with pytest.raises(TypeError):
        Module(art / "training_model.onnx", "not a state")
    with pytest.raises(ValueError, match="cuda"):
        Module(art / "training_model.onnx", state, device="cuda")
    with pytest.raises(OSError, match="missing"):
        CheckpointState.load_checkpoint(tmp_path / "missing")
    (tmp_path / "bad").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(kiln.CorruptFile, match="bad"):
        CheckpointState.load_checkpoint(tmp_path / "bad")
    with pytest.raises(ValueError, match="labels"):
        module(mlp_batch(0)["input"])  # one input short
    with pytest.raises(ValueError, match="input"):
        module(np.zeros((2, 5), np.float32), mlp_batch(0)["labels"])
    with pytest.raises(TypeError):
        module([1, 2, 3], mlp_batch(0)["labels"])
    with pytest.raises(TypeError):
        optimizer.set_learning_rate("fast")
    with pytest.raises(ValueError):
        optimizer.set_learning_rate(-1.0)
    with pytest.raises(TypeError):
        Optimizer(art / "optimizer_model.onnx", "module")
    with pytest.raises(ValueError):
        LinearLRScheduler(optimizer, -1, 10, 1e-3)
    with pytest.raises(NotImplementedError, match="ort_format"):
        artifacts.generate_artifacts(str(art.parent / "mlp.onnx"), loss=artifacts.LossType.MSELoss, ort_format=True)
    with pytest.raises(NotImplementedError, match="custom_op_library"):
        artifacts.generate_artifacts(str(art.parent / "mlp.onnx"), custom_op_library="libx.so")
    with pytest.raises(TypeError):
        artifacts.generate_artifacts(str(art.parent / "mlp.onnx"), loss="MSELoss")
    with pytest.raises(ValueError, match="both"):
        artifacts.generate_artifacts(str(art.parent / "mlp.onnx"), requires_grad=["net.0.weight"],
                                     frozen_params=["net.0.weight"], loss=artifacts.LossType.MSELoss,
                                     artifact_directory=tmp_path / "x")
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="eval"):
        m = Module(art / "training_model.onnx", state)
        m.eval()
        m(mlp_batch(0)["input"], mlp_batch(0)["labels"])


def test_custom_onnxblock_loss_trains(tmp_path):
    """ONNX Runtime's documented custom loss: a TrainingBlock over the model's output."""
    from kiln.training import artifacts, onnxblock
    from kiln.training.api import CheckpointState, Module, Optimizer

    class MyTrainingBlock(onnxblock.TrainingBlock):
        def __init__(self):
            super().__init__()
            self.loss = onnxblock.loss.CrossEntropyLoss()

        def build(self, output_name):
            return self.loss(output_name)

    _, path = mlp_model(tmp_path)
    artifacts.generate_artifacts(onnx.load(str(path)), loss=MyTrainingBlock(), optimizer=artifacts.OptimType.SGD,
                                 artifact_directory=tmp_path / "art")
    state = CheckpointState.load_checkpoint(tmp_path / "art" / "checkpoint")
    module = Module(tmp_path / "art" / "training_model.onnx", state)
    optimizer = Optimizer(tmp_path / "art" / "optimizer_model.onnx", module)
    optimizer.set_learning_rate(0.1)
    b = mlp_batch(0)
    losses = []
    for _ in range(10):
        losses.append(float(module(b["input"], b["labels"])))
        optimizer.step()
        module.lazy_reset_grad()
    assert losses[-1] < losses[0]


def test_the_gil_is_released_while_a_step_runs(tmp_path):
    """Python threads keep running while a training step is inside Kiln."""
    from kiln.training import artifacts
    from kiln.training.api import CheckpointState, Module, Optimizer

    torch.manual_seed(0)
    torch.onnx.export(torch_models.MLP(), (torch.randn(2, 784),), str(tmp_path / "mlp.onnx"), input_names=["input"],
                      output_names=["logits"], opset_version=17, dynamic_axes={"input": {0: "batch"}})
    artifacts.generate_artifacts(str(tmp_path / "mlp.onnx"), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path / "art")
    state = CheckpointState.load_checkpoint(tmp_path / "art" / "checkpoint")
    module = Module(tmp_path / "art" / "training_model.onnx", state)
    optimizer = Optimizer(tmp_path / "art" / "optimizer_model.onnx", module)
    big = np.random.default_rng(0).standard_normal((16384, 784)).astype(np.float32)
    labels = np.zeros(16384, np.int64)
    done = threading.Event()

    errors = []

    def work():
        try:
            for _ in range(3):
                module(big, labels)
                optimizer.step()
                module.lazy_reset_grad()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            done.set()

    # How fast this thread counts alone.
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.05:
        n += 1
    rate = n / (time.perf_counter() - start)
    thread = threading.Thread(target=work)
    start, n = time.perf_counter(), 0
    thread.start()
    while not done.is_set():
        n += 1
    elapsed = time.perf_counter() - start
    thread.join()
    assert not errors, errors
    # Holding the GIL for the step would leave this loop a few 5 ms slices between calls.
    print(f"counted {n} in {elapsed:.3f} s; alone {rate * elapsed:.0f}")
    assert n >= 0.3 * rate * elapsed, (n, rate * elapsed)
