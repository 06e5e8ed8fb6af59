"""The models bench/bench.py measures, at which sizes, and how each is built: seeded, so that the
parent (which exports it for Kiln and ONNX Runtime) and the PyTorch worker build the same one.

The architectures are those of the tests: tests/python/torch_models.py (mlp, lenet, lstm) and
tests/python/zoo_models.py (resnet18, bert, gpt2; size "bench")."""
from dataclasses import dataclass, replace

import common  # noqa: F401  (puts tests/python on sys.path)
import numpy as np
import torch
import torch_models
import zoo_models
from training_models import WithLoss
from training_parity import perturb


@dataclass(frozen=True)
class Case:
    """One model at one size. `steps` timed training steps after `warmup` (a round of the training
    tables), `runs` timed forward calls (a round of the forward table): about a second or two each
    at 2 threads on an idle machine, so that the whole of bench.py stays within 15 minutes."""
    model: str       # mlp, lenet, resnet18, bert, gpt2
    batch: int
    seq: int = 0     # tokens per sequence (bert, gpt2)
    image: int = 0   # the input side (resnet18)
    steps: int = 5
    runs: int = 5
    warmup: int = 3
    recompute: bool = False  # gradient checkpointing (`kiln artifacts --recompute`)
    bf16: bool = False       # mixed precision (`kiln artifacts --mixed-precision bf16`)

    @property
    def size(self):
        """The sequence length or the image size, as a table prints it."""
        return str(self.seq) if self.seq else f"{self.image}x{self.image}" if self.image else "-"

    @property
    def key(self):
        """A file-name stem that tells this size from the model's other sizes."""
        return (f"{self.model}_b{self.batch}_s{self.seq}_i{self.image}{'_recompute' if self.recompute else ''}"
                f"{'_bf16' if self.bf16 else ''}")


ROWS = {
    "mlp": Case("mlp", 128, steps=50, runs=200),
    "lenet": Case("lenet", 64, steps=30, runs=100),                      # BatchNorm in training mode
    "resnet18-32": Case("resnet18", 32, image=32, steps=8, runs=20),     # BatchNorm in training mode
    "resnet18-224": Case("resnet18", 8, image=224, steps=3, runs=3, warmup=2),
    "bert": Case("bert", 16, seq=128, steps=5, runs=6, warmup=2),       # 4 layers, d 256
    "gpt2": Case("gpt2", 8, seq=128, steps=5, runs=6, warmup=2),        # 4 layers, d 256, tied LM head
    "lstm": Case("lstm", 32, steps=10, runs=20),                          # 64 steps, 128 -> 256
}

# The scaling table: (row of ROWS, its sizes); the first size is the reference of the ratios.
SCALING = {
    "gpt2": [replace(ROWS["gpt2"], seq=128), replace(ROWS["gpt2"], seq=256, steps=3),
             replace(ROWS["gpt2"], seq=512, steps=2)],
    "resnet18-32": [replace(ROWS["resnet18-32"], batch=8, steps=20), replace(ROWS["resnet18-32"], batch=16, steps=12),
                    replace(ROWS["resnet18-32"], batch=32)],
}
THREADS_ROWS = ["bert", "gpt2"]  # the threads table
# The gradient-checkpointing table (issue 19): each case with and without recompute.
RECOMPUTE = {"gpt2": SCALING["gpt2"][-1], "resnet18-32": ROWS["resnet18-32"]}
# The mixed-precision table (issue 19): the transformers (the target) and two convolutional
# networks, in float32 and in bf16.
BF16_ROWS = ["bert", "gpt2", "lenet", "resnet18-32"]
BF16_TARGET_ROWS = ["bert", "gpt2"]
MATMUL_ROWS = ["bert", "gpt2"]   # achieved matmul throughput


def quick(case):
    """--quick: one warm-up step and two timed steps (runs); figures not for reporting."""
    return replace(case, steps=min(case.steps, 2), runs=min(case.runs, 3), warmup=1)


def _classes(case):
    if case.model in torch_models.MODELS:
        return 10
    return zoo_models.SIZES[case.model]["bench"].get("classes", 1000)


def training_case(case):
    """(torch module in training mode, one batch {input: array, ..., "labels"?}, the loss for
    `kiln artifacts`, BatchNorm in training mode). Weights get seeded noise so that no two
    initializers are equal (the exporter would merge them); GPT-2 carries its language-model loss
    inside (its output is the loss), the others are trained with cross-entropy over random labels."""
    rng = np.random.default_rng(0)
    if case.model in torch_models.MODELS:
        _, input_shape = torch_models.MODELS[case.model]
        module = perturb(torch_models.build(case.model, seed=0))
        feeds = {"input": rng.standard_normal((case.batch, *input_shape)).astype(np.float32)}
        loss, train = "CrossEntropyLoss", case.model == "lenet"
    else:
        model, spec = zoo_models.build(case.model, size="bench", seed=0, image=case.image or None)
        feeds = spec.inputs(case.batch, case.seq, rng)
        if case.model == "gpt2":  # the LM loss inside the model: its output is the loss
            feeds["y"] = feeds["input_ids"].copy()
            return WithLoss(model, "lm").train(), feeds, "none", False
        for m in model.modules():  # calibrate_batchnorm leaves a cumulative average; train as torch does
            if isinstance(m, torch.nn.BatchNorm2d):
                m.momentum = 0.1
        module, loss, train = perturb(model), "CrossEntropyLoss", case.model == "resnet18"
    feeds["labels"] = rng.integers(0, _classes(case), size=(case.batch,), dtype=np.int64)
    return module.train(), feeds, loss, train


def inference_case(case):
    """(torch module in eval mode, {input: array}) for the forward table, seeded."""
    rng = np.random.default_rng(0)
    if case.model in torch_models.MODELS:
        _, input_shape = torch_models.MODELS[case.model]
        feeds = {"input": rng.standard_normal((case.batch, *input_shape)).astype(np.float32)}
        return torch_models.build(case.model, seed=0), feeds
    model, spec = zoo_models.build(case.model, size="bench", seed=0, image=case.image or None)
    return model, spec.inputs(case.batch, case.seq, rng)


def export_inference(case, path):
    """Exports the eval-mode model with opset 17 and dynamic batch (and sequence) axes; returns
    its inputs ({input: array}, those the PyTorch worker's forward runs on)."""
    model, feeds = inference_case(case)
    if case.model in torch_models.MODELS:
        torch_models.export(model, torch_models.MODELS[case.model][1], path)
    else:
        zoo_models.export(model, zoo_models.zoo("bench", case.image or None)[case.model], path)
    return feeds
