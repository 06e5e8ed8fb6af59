"""HF's compute_loss hooks in kiln.Trainer: a subclass's compute_loss (class-weighted cross-entropy)
and compute_loss_func (label smoothing written out, on an HF-style model's dict output) are traced into the torch
model's training graph, so Kiln trains on their loss: per-step losses within 1e-4 relative and
final weights within 1e-4 of a plain PyTorch loop with the same loss (assert_trainer_matches), and
evaluation reports that loss too. Clear errors for a non-scalar loss and a model that cannot be
traced."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from kiln_package import import_kiln
from test_trainer_optimizers import EPOCHS, STEPS, N, Net, arguments, items
from training_parity import assert_trainer_matches, hf_trainer_loop

import_kiln()
import kiln  # noqa: E402

WEIGHTS = torch.tensor([0.2, 1.0, 3.0])


class _WithLoss(torch.nn.Module):
    def __init__(self, model, loss_fn):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, x, labels):
        return {"loss": self.loss_fn(self.model(x), labels)}


def torch_loop(model, loss_fn, lr=1e-2):
    """HF's default step in PyTorch (hf_trainer_loop) over the Trainer's sequential batches of 8."""
    data = items()
    batches = [{"x": torch.from_numpy(np.stack([d["x"] for d in data[b:b + 8]])),
                "labels": torch.tensor([d["labels"] for d in data[b:b + 8]])} for b in range(0, N, 8)]
    return hf_trainer_loop(_WithLoss(model, loss_fn), batches * EPOCHS, lr, STEPS)


class Weighted(kiln.Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        logits = model(**inputs)
        loss = F.cross_entropy(logits, labels, weight=WEIGHTS)
        return (loss, {"logits": logits}) if return_outputs else loss


def test_a_compute_loss_override_is_what_kiln_trains(tmp_path):
    model, reference = Net(), Net()
    want = torch_loop(reference, lambda logits, y: F.cross_entropy(logits, y, weight=WEIGHTS))
    trainer = Weighted(model=model, args=arguments(tmp_path, weight_decay=0.0), train_dataset=items(),
                       eval_dataset=items())
    trainer.train()
    assert_trainer_matches(trainer, model, reference, want)
    metrics = trainer.evaluate()
    data = items()
    with torch.no_grad():
        x = torch.from_numpy(np.stack([d["x"] for d in data]))
        y = torch.tensor([d["labels"] for d in data])
        batches = [F.cross_entropy(reference(x[b:b + 8]), y[b:b + 8], weight=WEIGHTS).item() for b in range(0, N, 8)]
    assert metrics["eval_loss"] == pytest.approx(float(np.mean(batches)), rel=1e-4)


class HFStyle(torch.nn.Module):
    """forward(x, labels=None) -> {"logits"}: the labels are the Trainer's to use."""

    def __init__(self):
        super().__init__()
        self.net = Net()

    def forward(self, x, labels=None):
        return {"logits": self.net(x)}


def test_compute_loss_func_on_an_hf_style_model(tmp_path):
    model, reference = HFStyle(), Net()

    def smoothed_ce(logits, labels):  # label smoothing 0.1 written out (torch 1.13 exports no label_smoothing)
        return 0.9 * F.cross_entropy(logits, labels) - 0.1 * F.log_softmax(logits, -1).mean(-1).mean()

    def smoothed(outputs, labels, num_items_in_batch=None):
        return smoothed_ce(outputs["logits"], labels)

    want = torch_loop(reference, smoothed_ce)
    trainer = kiln.Trainer(model=model, args=arguments(tmp_path, weight_decay=0.0), train_dataset=items(),
                           compute_loss_func=smoothed)
    trainer.train()
    assert_trainer_matches(trainer, model.net, reference, want)


def test_compute_loss_errors(tmp_path):
    class NotScalar(kiln.Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            inputs.pop("labels")
            logits = model(**inputs)
            return (logits, {"logits": logits}) if return_outputs else logits

    with pytest.raises(ValueError, match="it must be a scalar tensor"):
        NotScalar(model=Net(), args=arguments(tmp_path), train_dataset=items())
    with pytest.raises(NotImplementedError, match="needs a torch model"):
        Weighted(model="mlp", args=arguments(tmp_path), train_dataset=items())
    with pytest.raises(ValueError, match="leave loss out"):
        Weighted(model=Net(), args=arguments(tmp_path), train_dataset=items(), loss="CrossEntropyLoss")
