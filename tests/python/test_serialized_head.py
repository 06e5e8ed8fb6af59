"""IPUConfig's embedding_serialization_factor (and projection_serialization_factor) on a CPU: the
LM head's product and its loss computed in vocabulary blocks (ai.kiln.LinearCrossEntropy,
src/training/serialized_head.h). A torch GPT-2-style model with Hugging Face's causal-LM loss
(shifted logits and labels, cross_entropy with ignore_index -100), exported by torch.onnx, trains
through kiln.Trainer with the factor as without it: per-step losses within 1e-5 relative and
weights within 1e-5 (SGD, so that no update divides by a tiny gradient); the training model holds
one LinearCrossEntropy and no logits, the evaluation still has them."""
import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from kiln_package import import_kiln
from zoo_models import GPT2

kiln = import_kiln()

VOCAB, SEQ, N = 300, 16, 24


class CausalLM(torch.nn.Module):
    """HF's GPT2LMHeadModel contract: forward(input_ids, labels) -> {"loss", "logits"}."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.gpt = GPT2(vocab=VOCAB, max_len=SEQ, dim=32, heads=4, layers=2)

    def forward(self, input_ids, labels=None):
        logits = self.gpt(input_ids)
        if labels is None:
            return {"logits": logits}
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}


def items():
    g = np.random.default_rng(3)
    out = []
    for _ in range(N):
        ids = g.integers(0, VOCAB, SEQ).astype(np.int64)
        labels = ids.copy()
        labels[g.integers(0, SEQ, 3)] = -100  # padding HF's collators mark
        out.append({"input_ids": ids, "labels": labels})
    return out


def run(tmp_path, name, overrides=None):
    model = CausalLM()
    extra = {"ipu_config_overrides": overrides} if overrides else {}
    args = kiln.TrainingArguments(str(tmp_path / name), per_device_train_batch_size=4, per_device_eval_batch_size=4,
                                  num_train_epochs=1, logging_steps=1, save_strategy="no", report_to=[],
                                  disable_tqdm=True, optim="sgd", learning_rate=0.5,
                                  train_sampling_strategy="sequential", **extra)
    trainer = kiln.Trainer(model=model, args=args, train_dataset=items(), eval_dataset=items()[:8])
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return trainer, model, losses


@pytest.mark.parametrize("overrides", ["embedding_serialization_factor=4", "projection_serialization_factor=7"])
def test_a_serialized_head_trains_as_the_whole_one(tmp_path, overrides):
    _, whole_model, whole = run(tmp_path, "whole")
    trainer, model, part = run(tmp_path, "part", overrides)
    assert len(part) == len(whole) == N // 4
    np.testing.assert_allclose(part, whole, rtol=1e-5)
    want = dict(whole_model.named_parameters())
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), want[name].detach().numpy(), atol=1e-5, err_msg=name)
    training = onnx.load(str(tmp_path / "part" / "artifacts" / "training_model.onnx"))
    ops = [n.op_type for n in training.graph.node]
    assert ops.count("LinearCrossEntropy") == 1 and "SoftmaxCrossEntropyLoss" not in ops
    assert [o.name for o in training.graph.output if o.name == "logits"] == []
    metrics = trainer.evaluate()  # the eval model is whole: predictions and a loss
    assert np.isfinite(metrics["eval_loss"])
    assert trainer.predict(items()[:4]).predictions.shape == (4, SEQ, VOCAB)


def test_without_a_head_and_its_cross_entropy_it_is_a_clear_error(tmp_path):
    class Regression(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 1)

        def forward(self, x, labels=None):
            y = self.fc(x)[:, 0]
            return {"loss": ((y - labels) ** 2).mean(), "logits": y}

    data = [{"x": np.ones(4, np.float32), "labels": np.float32(1)}] * 8
    args = kiln.TrainingArguments(str(tmp_path / "r"), max_steps=1, report_to=[], disable_tqdm=True,
                                  ipu_config_overrides="embedding_serialization_factor=2")
    with pytest.raises(kiln.Unsupported, match="the model has no SoftmaxCrossEntropyLoss"):
        kiln.Trainer(model=Regression(), args=args, train_dataset=data).train()


def test_an_artifacts_folder_cannot_be_serialized_after_the_fact(tmp_path):
    """The serialization rewrites the training model when Kiln generates it: a folder of artifacts
    generated before is refused, naming what to give instead."""
    from kiln.training import artifacts
    model = CausalLM()
    path = tmp_path / "lm.onnx"
    ids = torch.zeros(2, SEQ, dtype=torch.int64)
    torch.onnx.export(model, (ids, ids), path, input_names=["input_ids", "labels"], output_names=["loss", "logits"],
                      opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    artifacts.generate_artifacts(str(path), loss=None, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=tmp_path / "art")
    args = kiln.TrainingArguments(str(tmp_path / "run"), max_steps=1, report_to=[], disable_tqdm=True,
                                  ipu_config_overrides="embedding_serialization_factor=2")
    with pytest.raises(kiln.Unsupported, match="give the Trainer the ONNX model"):
        kiln.Trainer(model=str(tmp_path / "art"), args=args, train_dataset=items())
