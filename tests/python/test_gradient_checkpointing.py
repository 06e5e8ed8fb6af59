"""Gradient checkpointing from Python and the command line: TrainingArguments(gradient_checkpointing=
True) trains a torch model with dropout to bitwise the same losses and weights as without (the
recomputed forward runs the same kernels and draws the same dropout masks); generate_artifacts(
recompute=...) and `kiln artifacts --recompute` write training models with "/recompute" copies,
automatic or at named boundaries; `kiln inspect --training --gradient_checkpointing` reports the
planned peak memory with and without; bad boundaries are clear errors. Gradients against the plain
backward on the zoo's GPT-2, BERT and ResNet models: tests/training/recompute_test.cpp."""
import copy
import io

import numpy as np
import onnx
import pytest
import torch
from kiln_cli import run_kiln
from kiln_package import import_kiln

import_kiln()
import kiln  # noqa: E402
from kiln.training import artifacts  # noqa: E402

WIDTH, BLOCKS = 16, 3


class ResidualMLP(torch.nn.Module):
    """Residual blocks x + W2 dropout(gelu(W1 LayerNorm(x))), an HF-style loss on a linear head."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(), torch.nn.Dropout(0.1),
            torch.nn.Linear(4 * WIDTH, WIDTH)) for _ in range(BLOCKS))
        self.head = torch.nn.Linear(WIDTH, 3)

    def forward(self, x, labels=None):
        for block in self.blocks:
            x = x + block(x)
        logits = self.head(x)
        out = {"logits": logits}
        if labels is not None:
            out = {"loss": torch.nn.functional.cross_entropy(logits, labels), **out}
        return out


def items(n=48, seed=0):
    g = np.random.default_rng(seed)
    return [{"x": g.standard_normal(WIDTH).astype(np.float32), "labels": int(g.integers(0, 3))} for _ in range(n)]


def train(tmp_path, name, model, **more):
    args = kiln.TrainingArguments(output_dir=str(tmp_path / name), per_device_train_batch_size=8, num_train_epochs=2,
                                  learning_rate=1e-2, logging_steps=1, save_strategy="no", report_to=[],
                                  disable_tqdm=True, **more)
    trainer = kiln.Trainer(model=model, args=args, train_dataset=items())
    trainer.train()
    return [e["loss"] for e in trainer.state.log_history if "loss" in e]


def test_the_trainer_with_gradient_checkpointing_is_bitwise_the_same(tmp_path):
    torch.manual_seed(0)
    plain_model = ResidualMLP()
    recomputed_model = copy.deepcopy(plain_model)
    torch.manual_seed(1)  # the same dropout seeds drawn at export
    plain = train(tmp_path, "plain", plain_model)
    torch.manual_seed(1)
    recomputed = train(tmp_path, "recompute", recomputed_model, gradient_checkpointing=True,
                       gradient_checkpointing_kwargs={"use_reentrant": False})
    assert len(plain) == 12 and plain == recomputed
    for (name, a), (_, b) in zip(plain_model.named_parameters(), recomputed_model.named_parameters()):
        assert torch.equal(a, b), name
    training = onnx.load(str(tmp_path / "recompute" / "artifacts" / "training_model.onnx"))
    assert any(n.name.endswith("/recompute") for n in training.graph.node)
    with pytest.raises(ValueError, match="'boundaries' must be a list of value names"):
        kiln.TrainingArguments(output_dir=str(tmp_path), gradient_checkpointing_kwargs={"boundaries": "x"})


def forward_onnx(path):
    torch.manual_seed(2)
    model = ResidualMLP().eval()
    buffer = io.BytesIO()
    torch.onnx.export(model, (torch.randn(4, WIDTH),), buffer, input_names=["x"], output_names=["logits"],
                      opset_version=17, do_constant_folding=False, dynamic_axes={"x": {0: "batch"}})
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.save(proto, str(path))
    return proto


def recompute_nodes(folder):
    graph = onnx.load(str(folder / "training_model.onnx")).graph
    return [n for n in graph.node if n.name.endswith("/recompute")]


def test_generate_artifacts_and_the_command_line(tmp_path):
    proto = forward_onnx(tmp_path / "mlp.onnx")
    LossType = artifacts.LossType
    artifacts.generate_artifacts(proto, loss=LossType.CrossEntropyLoss, artifact_directory=tmp_path / "plain")
    artifacts.generate_artifacts(proto, loss=LossType.CrossEntropyLoss, artifact_directory=tmp_path / "auto",
                                 recompute=True)
    assert not recompute_nodes(tmp_path / "plain")
    automatic = recompute_nodes(tmp_path / "auto")
    assert automatic
    # The output of the first block's residual Add, named: one boundary, the blocks after it recomputed.
    first_add = next(n.output[0] for n in proto.graph.node if n.op_type == "Add" and n.name.count("/") == 1)
    artifacts.generate_artifacts(proto, loss=LossType.CrossEntropyLoss, artifact_directory=tmp_path / "named",
                                 recompute=[first_add])
    assert 0 < len(recompute_nodes(tmp_path / "named")) < len(automatic)
    with pytest.raises(ValueError, match="gradient checkpointing boundary 'nope' is not a value"):
        artifacts.generate_artifacts(proto, loss=LossType.CrossEntropyLoss, artifact_directory=tmp_path / "bad",
                                     recompute=["nope"])
    with pytest.raises(TypeError, match="recompute must be a list of value names"):
        artifacts.generate_artifacts(proto, loss=LossType.CrossEntropyLoss, artifact_directory=tmp_path / "bad",
                                     recompute="x")

    done = run_kiln("artifacts", tmp_path / "mlp.onnx", "--loss", "CrossEntropyLoss", "--optimizer", "AdamW", "--out",
                    tmp_path / "cli", "--recompute")
    assert done.returncode == 0, done.stderr
    assert len(recompute_nodes(tmp_path / "cli")) == len(automatic)
    bad = run_kiln("artifacts", tmp_path / "mlp.onnx", "--loss", "CrossEntropyLoss", "--optimizer", "AdamW", "--out",
                   tmp_path / "cli2", "--recompute-boundaries", first_add)
    assert bad.returncode != 0 and "--recompute-boundaries needs --recompute" in bad.stderr


def test_inspect_reports_the_memory_with_and_without(tmp_path):
    forward_onnx(tmp_path / "mlp.onnx")
    proto = onnx.load(str(tmp_path / "mlp.onnx"))
    reduce = onnx.helper.make_node("ReduceMean", ["logits"], ["loss"], keepdims=0)
    proto.graph.node.append(reduce)
    proto.graph.output.append(onnx.helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, []))
    onnx.save(proto, str(tmp_path / "with_loss.onnx"))
    done = run_kiln("inspect", tmp_path / "with_loss.onnx", "--training", "--loss", "loss", "--dim", "batch=256",
                    "--gradient_checkpointing")
    assert done.returncode == 0, done.stderr
    assert "with gradient checkpointing:" in done.stdout and "% less" in done.stdout, done.stdout
    alone = run_kiln("inspect", tmp_path / "with_loss.onnx", "--gradient_checkpointing")
    assert alone.returncode != 0 and "--gradient_checkpointing needs --training" in alone.stderr
