"""kiln.Trainer with torch modules (kiln.ORTTrainer, kiln.ORTTrainingArguments: optimum's names):
a Hugging Face-style model that computes its own loss from `labels`, trained by the Trainer, logs
the losses of a plain PyTorch loop with the same AdamW, linear schedule and gradient clipping
(full-batch steps, so the sampler's order does not matter: per-step losses within 1e-4 relative,
final parameters within 1e-4), and the trained weights are in the module afterwards; a plain
module gets the Trainer's cross-entropy; a checkpoint's model.safetensors holds the module's
state_dict keys and loads back with load_state_dict; ORTTrainingArguments' own fields; the errors for
a torch model the Trainer cannot take (no train_dataset, an export failure, a non-tensor output, a
parameter named as a dataset column);
tokenizer= as processing_class's older name; a dataclass output trains as the dict one."""
import copy
import dataclasses
import json
import os
import struct

import numpy as np
import pytest
import torch
from kiln_package import import_kiln
from training_parity import assert_trainer_matches, hf_trainer_loop

import_kiln()
import kiln  # noqa: E402

N, FEATURES, CLASSES, STEPS, LR = 32, 6, 3, 12, 1e-2


class HFStyle(torch.nn.Module):
    """forward(x, labels=None) -> {"loss", "logits"}, as a transformers model returns."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh())
        self.head = torch.nn.Linear(16, CLASSES)

    def forward(self, x, labels=None):
        logits = self.head(self.body(x))
        out = {"logits": logits}
        if labels is not None:
            out = {"loss": torch.nn.functional.cross_entropy(logits, labels), **out}
        return out


def data(seed=0):
    g = np.random.default_rng(seed)
    x = g.standard_normal((N, FEATURES)).astype(np.float32)
    y = g.integers(0, CLASSES, N).astype(np.int64)
    return x, y, [{"x": x[i], "labels": y[i]} for i in range(N)]


def args(tmp_path, **more):
    return kiln.ORTTrainingArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=N,
                                     max_steps=STEPS, learning_rate=LR, logging_steps=1, save_strategy="no",
                                     report_to=[], disable_tqdm=True, **more)


def test_a_hugging_face_style_model_trains_as_a_pytorch_loop(tmp_path):
    torch.manual_seed(0)
    model = HFStyle()
    reference = copy.deepcopy(model)
    x, y, items = data()
    trainer = kiln.ORTTrainer(model=model, args=args(tmp_path, optim="adamw_ort_fused"), train_dataset=items)
    trainer.train()
    batch = {"x": torch.from_numpy(x), "labels": torch.from_numpy(y)}
    want = hf_trainer_loop(reference, [batch] * STEPS, LR, STEPS)
    assert len(want) == STEPS
    assert_trainer_matches(trainer, model, reference, want)


def read_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        body = f.read()
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[key] = torch.from_numpy(np.frombuffer(body[begin:end], dtype=np.float32).reshape(info["shape"]).copy())
    return out


def test_a_plain_module_with_the_trainers_loss_and_its_checkpoint(tmp_path):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.ReLU(), torch.nn.Linear(8, CLASSES))
    model[0].weight.requires_grad_(False)  # frozen: the Trainer leaves it as it is
    frozen = model[0].weight.detach().clone()
    before = model[2].weight.detach().clone()
    _, _, items = data(1)
    trainer = kiln.Trainer(model=model, args=kiln.TrainingArguments(
        output_dir=str(tmp_path / "plain"), per_device_train_batch_size=8, num_train_epochs=2, save_strategy="epoch",
        report_to=[], disable_tqdm=True, learning_rate=1e-2), train_dataset=items)
    trainer.train()
    assert torch.equal(model[0].weight, frozen)
    assert not torch.equal(model[2].weight, before)  # trained, and back in the module
    checkpoint = tmp_path / "plain" / "checkpoint-8" / "model.safetensors"
    saved = read_safetensors(checkpoint)
    assert set(saved) <= set(model.state_dict()) and "2.weight" in saved
    fresh = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.ReLU(), torch.nn.Linear(8, CLASSES))
    fresh.load_state_dict(saved, strict=False)
    torch.testing.assert_close(fresh[2].weight, model[2].weight)


def test_ort_training_arguments_fields(tmp_path):
    a = kiln.ORTTrainingArguments(output_dir=str(tmp_path), optim="adamw_ort_fused", use_module_with_loss=True,
                                  onnx_log_level="info")
    assert a.optim == "adamw_ort_fused" and a.to_dict()["optim"] == "adamw_ort_fused"
    assert a.use_module_with_loss and a.onnx_log_level == "INFO" and a.learning_rate == 5e-5
    with pytest.raises(ValueError, match="onnx_log_level must be one of"):
        kiln.ORTTrainingArguments(output_dir=str(tmp_path), onnx_log_level="LOUD")
    with pytest.raises(TypeError, match="unexpected keyword argument 'not_a_field'"):
        kiln.ORTTrainingArguments(output_dir=str(tmp_path), not_a_field=1)
    torch.manual_seed(2)
    _, _, items = data(2)
    kiln.ORTTrainer(model=HFStyle(), args=args(tmp_path, save_onnx=True, onnx_prefix="hf"), train_dataset=items)
    assert os.path.exists(tmp_path / "run" / "hf_torch_exported.onnx")
    assert issubclass(kiln.ORTTrainer, kiln.Trainer) and isinstance(a, kiln.TrainingArguments)


def test_tokenizer_is_processing_class_under_its_older_name(tmp_path):
    _, _, items = data(3)
    marker = object()
    trainer = kiln.ORTTrainer(model=HFStyle(), args=args(tmp_path), train_dataset=items, tokenizer=marker)
    assert trainer.processing_class is marker and trainer.tokenizer is marker
    with pytest.raises(ValueError, match="not both"):
        kiln.ORTTrainer(model=HFStyle(), args=args(tmp_path), train_dataset=items, tokenizer=marker,
                        processing_class=marker)


class Eigen(torch.nn.Module):  # torch.onnx cannot export linalg_eigvalsh at opset 17
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        h = self.fc(x)
        return torch.linalg.eigvalsh(h.T @ h)


class Words(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        return "logits"


def test_a_torch_model_the_trainer_cannot_take_is_a_clear_error(tmp_path):
    _, _, items = data(4)
    with pytest.raises(kiln.InvalidArgument, match="a torch module needs a train_dataset"):
        kiln.Trainer(model=HFStyle(), args=args(tmp_path))
    with pytest.raises(kiln.InvalidArgument, match="Trainer\\(model=Eigen\\): torch.onnx.export failed: "
                                                   "UnsupportedOperatorError"):
        kiln.Trainer(model=Eigen(), args=args(tmp_path), train_dataset=items)
    with pytest.raises(kiln.InvalidArgument, match="its forward returned a str"):
        kiln.Trainer(model=Words(), args=args(tmp_path), train_dataset=items)
    with pytest.raises(kiln.InvalidArgument, match=r"Trainer\(model=Scaled\): the export names values \['x'\] like "
                                                   "the module's parameters; rename the dataset column"):
        kiln.Trainer(model=Scaled(), args=args(tmp_path), train_dataset=items)


class Scaled(torch.nn.Module):  # a parameter named as the dataset column its forward takes
    def __init__(self):
        super().__init__()
        self.x = torch.nn.Parameter(torch.ones(FEATURES))
        self.fc = torch.nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        return self.fc(x * self.x)


@dataclasses.dataclass
class Output:  # a ModelOutput-like dataclass that is not a dict
    loss: torch.Tensor = None
    logits: torch.Tensor = None


class DataclassStyle(HFStyle):
    def forward(self, x, labels=None):
        return Output(**super().forward(x, labels))


def test_a_dataclass_output_trains_as_the_dict_one(tmp_path):
    torch.manual_seed(5)
    as_dict = HFStyle()
    as_dataclass = DataclassStyle()
    as_dataclass.load_state_dict(as_dict.state_dict())
    _, _, items = data(5)
    losses = []
    for name, model in (("dict", as_dict), ("dataclass", as_dataclass)):
        trainer = kiln.Trainer(model=model, args=args(tmp_path / name), train_dataset=items)
        trainer.train()
        losses.append([e["loss"] for e in trainer.state.log_history if "loss" in e])
    assert len(losses[0]) == STEPS and losses[0] == losses[1]
