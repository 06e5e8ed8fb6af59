"""Models with their loss, as one module whose output is the scalar loss, and their export for
`kiln grad`: used by the gradient parity tests (test_grad_parity.py).

Exports use opset 17 and do_constant_folding=False, so that every initializer keeps its state_dict
name ("model.<key>") and the gradient Kiln writes for it (`<name>_grad`) pairs with torch's.
"""
import warnings
from dataclasses import dataclass, field
from typing import Dict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def lm_loss(logits, ids):
    """GPT-2's language-model loss: position t predicts token t+1."""
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))


LOSSES = {
    "mse": lambda out, y: ((out - y) ** 2).mean(),  # torch 1.13 cannot export F.mse_loss
    "ce": F.cross_entropy,                            # exports as SoftmaxCrossEntropyLoss
    "lm": lm_loss,
}


class WithLoss(nn.Module):
    """model(*inputs) and a loss against the last argument, as one graph whose output is the loss.
    Its parameters are named "model.<state_dict key>", in torch and in the exported graph alike.

    Every parameter gets a little seeded noise: the exporter replaces an initializer whose value
    equals another's (the cloned layers of nn.TransformerEncoder, LayerNorm's ones, zero biases)
    by an Identity of that one, and the copy's name is then no initializer to differentiate.
    Distinct values also let a parity test see a gradient that lands on the wrong layer."""

    def __init__(self, model, loss, seed=11):
        super().__init__()
        self.model = model
        self.loss = loss
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=gen))

    def forward(self, *args):
        *inputs, target = args
        return LOSSES[self.loss](self.model(*inputs), target)


@dataclass
class Case:
    """A model with its loss and its named inputs (the target last, named "y"). `train`: BatchNorm
    normalises with batch statistics (exported with TrainingMode.TRAINING, so that
    BatchNormalization has training_mode=1); otherwise the module runs and is exported in eval
    mode, which for the dropout-free models here is the same math as training mode."""
    module: WithLoss
    feeds: Dict[str, np.ndarray]
    train: bool = False
    dynamic: Dict[str, Dict[int, str]] = field(default_factory=dict)

    def tensors(self):
        return tuple(torch.from_numpy(v) for v in self.feeds.values())


def export_with_loss(case, path):
    """Writes the model and its loss as ONNX; the graph's output is named "loss"."""
    mode = torch.onnx.TrainingMode.TRAINING if case.train else torch.onnx.TrainingMode.PRESERVE
    case.module.train(case.train)
    # Autograd on during the export keeps nn.TransformerEncoderLayer off its inference fast path,
    # which torch 1.13 cannot export (see zoo_models.export). The tracer's warnings (shapes turned
    # into Python numbers inside torch's attention code) and the exporter's (BatchNorm's counter
    # update is dropped) do not change the loss or its gradients.
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(case.module, case.tensors(), str(path), input_names=list(case.feeds),
                          output_names=["loss"], opset_version=17, do_constant_folding=False, training=mode,
                          dynamic_axes=case.dynamic)


def zoo_case(name, size, batch, seq, seed=0, classes=None):
    """A zoo model (zoo_models) with its training loss: cross-entropy over random labels of its
    classes, or for GPT-2 the LM loss whose target is the token sequence itself. ResNet-18 runs
    with BatchNorm in training mode."""
    import zoo_models

    model, spec = zoo_models.build(name, size=size, seed=seed)
    rng = np.random.default_rng(seed + 3)
    feeds = spec.inputs(batch, seq, rng)
    if name == "gpt2":
        feeds["y"] = feeds["input_ids"].copy()
        loss, y_axes = "lm", {0: "batch", 1: "seq"}
    else:
        n = classes or zoo_models.SIZES[name][size].get("classes") or {"resnet18": 1000, "vit": 10, "bert": 3}[name]
        feeds["y"] = rng.integers(0, n, size=(batch,), dtype=np.int64)
        loss, y_axes = "ce", {0: "batch"}
    return Case(WithLoss(model, loss), feeds, train=name == "resnet18", dynamic={**spec.dynamic, "y": y_axes})
