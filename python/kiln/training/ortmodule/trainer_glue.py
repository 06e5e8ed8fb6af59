"""kiln.Trainer(model=<torch.nn.Module>) (optimum's ORTTrainer's job): the module exported once as
the forward ONNX file Kiln's Trainer trains, and the trained weights back into the module.

The module is exported with torch.onnx.export (opset 17, training mode: BatchNorm on batch
statistics, Dropout active) over the first training example, with a dynamic batch dimension
(every input axis dynamic when a custom data_collator makes the batches). Its
inputs are the dataset columns its forward takes by name (a Hugging Face model's input_ids,
attention_mask and labels), else the one feature column of a one-input forward. Outputs are named
as a Hugging Face model's: a dict, a ModelOutput, a dataclass or a namedtuple by its keys ("loss"
first when labels go in; a dataclass or namedtuple in its fields' order), a
tuple as (loss, logits, ...) when labels go in, else (logits, ...); a single tensor "logits". A
model that returns its loss trains on it; otherwise the Trainer adds its loss (CrossEntropyLoss by
default) on the first output. Parameters keep their state_dict names, so checkpoints
(model.safetensors) load back with load_state_dict; frozen parameters (requires_grad False) stay
frozen. The training loop is Kiln's (C++), not ORTModule's: the whole step runs in one plan.
"""
from __future__ import annotations

import dataclasses
import inspect
import io

import numpy as np
import onnx
import torch

from kiln.errors import InvalidArgument
from kiln.nn.trainer_glue import _input_columns
from kiln.training.ortmodule._calls import _Fallback
from kiln.training.ortmodule._graphs import _strip_prefix


class _Named(torch.nn.Module):
    """The module called with the dataset's columns by name; its outputs flat, in `names`' order."""

    def __init__(self, module, inputs):
        super().__init__()
        self.inner = module
        self.inputs = inputs

    def forward(self, *tensors):  # noqa: D102
        return tuple(_outputs(_call(self.inner, self.inputs, tensors), "labels" in self.inputs)[1])


class _LossNamed(torch.nn.Module):
    """The Trainer's compute_loss(model, inputs, return_outputs=True) over the dataset's columns:
    outputs ("loss", then the model's outputs other than a loss of its own), traced into the graph."""

    def __init__(self, module, inputs, compute_loss):
        super().__init__()
        self.inner = module
        self.inputs = inputs
        self.compute_loss = compute_loss

    def forward(self, *tensors):  # noqa: D102
        return tuple(_loss_outputs(self.compute_loss, self.inner, dict(zip(self.inputs, tensors)))[1])


def _loss_outputs(compute_loss, module, inputs):
    """(names, tensors): "loss" from compute_loss, then the outputs it returned (their own loss left out)."""
    result = compute_loss(module, dict(inputs), return_outputs=True)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise InvalidArgument("compute_loss(model, inputs, return_outputs=True) must return (loss, outputs), as "
                              "HF's does")
    loss, outputs = result
    if not isinstance(loss, torch.Tensor) or any(d != 1 for d in loss.shape):  # shape: numel is traced
        raise InvalidArgument(f"compute_loss returned a loss of type {type(loss).__name__}"
                              f"{'' if not isinstance(loss, torch.Tensor) else ' and shape ' + str(list(loss.shape))}"
                              "; it must be a scalar tensor")
    names, flat = _outputs(outputs, False) if outputs is not None else ([], [])
    kept = [(n, t) for n, t in zip(names, flat) if n != "loss"]
    return ["loss"] + [n for n, _ in kept], [loss.reshape(())] + [t for _, t in kept]


def _call(module, inputs, tensors):
    """forward by keyword when its parameters are named after the columns, else positionally (the
    one feature column of a one-input forward such as nn.Sequential's)."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        params = {}
    if all(n in params for n in inputs):
        return module(**dict(zip(inputs, tensors)))
    return module(*tensors)


def _outputs(out, with_labels):
    """(names, tensors) of a forward's output, named as a Hugging Face model's."""
    if isinstance(out, torch.Tensor):
        return ["logits"], [out]
    if dataclasses.is_dataclass(out) and not isinstance(out, type):  # a ModelOutput-like dataclass
        out = {f.name: getattr(out, f.name) for f in dataclasses.fields(out)}
    elif isinstance(out, tuple) and hasattr(out, "_asdict"):  # a namedtuple: by its field names
        out = out._asdict()
    if isinstance(out, dict):
        items = [(k, v) for k, v in out.items() if v is not None]
    elif isinstance(out, (tuple, list)):
        first = ["loss", "logits"] if with_labels else ["logits"]
        items = [(first[i] if i < len(first) else f"output_{i}", v) for i, v in enumerate(out) if v is not None]
    else:
        raise InvalidArgument(f"Trainer(model=<torch module>): its forward returned a {type(out).__name__}; "
                              "return a tensor, a tuple or a dict (ModelOutput) of tensors")
    names, flat = [], []
    for key, value in items:
        if isinstance(value, torch.Tensor):
            names.append(str(key))
            flat.append(value)
        elif isinstance(value, (tuple, list)):  # hidden_states and the like: one output per tensor
            for i, v in enumerate(value):
                if isinstance(v, torch.Tensor):
                    names.append(f"{key}_{i}")
                    flat.append(v)
    if not flat:
        raise InvalidArgument("Trainer(model=<torch module>): its forward returned no tensor")
    return names, flat


def export_for_trainer(module: torch.nn.Module, dataset, label_names, path, dynamic_shapes=False,
                       compute_loss=None) -> list:
    """Writes the module's training ONNX file to `path`; returns its output names. dynamic_shapes
    (a custom data_collator, whose batches may be padded to their own length): every input axis is
    dynamic, not only the batch. compute_loss (a Trainer's, HF's signature): the graph computes
    compute_loss(module, batch, return_outputs=True) over every column of the batch, so a custom
    loss is traced into it; its first output is that loss."""
    name = type(module).__name__
    if dataset is None or len(dataset) == 0:
        raise InvalidArgument(f"Trainer(model={name}): a torch module needs a train_dataset (it is exported with the "
                              "shapes of the first training example)")
    example = dataset[0]
    inputs = list(example) if compute_loss is not None else _input_columns(module, list(example), label_names)
    tensors = [torch.from_numpy(np.ascontiguousarray(np.asarray(example[n])[None])) for n in inputs]
    named = _LossNamed(module, inputs, compute_loss) if compute_loss is not None else _Named(module, inputs)
    buffers = {k: b.detach().clone() for k, b in module.named_buffers()}
    was_training = module.training
    module.train(True)
    buffer = io.BytesIO()
    try:
        with torch.no_grad():
            if compute_loss is not None:
                names, flat = _loss_outputs(compute_loss, module, dict(zip(inputs, tensors)))
            else:
                names, flat = _outputs(_call(module, inputs, tensors), "labels" in inputs)
            ranks = [t.dim() for t in flat]
            if dynamic_shapes:
                axes = {n: {i: "batch" if i == 0 else f"{n}_{i}" for i in range(t.dim())}
                        for n, t in zip(inputs, tensors)}
            else:
                axes = {n: {0: "batch"} for n in inputs}
            axes.update({n: {0: "batch"} for n, r in zip(names, ranks) if r > 0})
            torch.onnx.export(named, tuple(tensors), buffer, opset_version=17, do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING, input_names=inputs, output_names=names,
                              dynamic_axes=axes)
    except InvalidArgument:
        raise
    except Exception as e:  # noqa: BLE001 (the exporter's own errors, named)
        raise InvalidArgument(f"Trainer(model={name}): torch.onnx.export failed: {type(e).__name__}: {e}") from e
    finally:
        module.train(was_training)
        with torch.no_grad():  # the calls above ran training-mode BatchNorms: their statistics back
            for key, value in module.named_buffers():
                value.copy_(buffers[key])
    model = onnx.load_from_string(buffer.getvalue())
    try:
        _strip_prefix(model.graph, "inner.")
    except _Fallback as e:
        raise InvalidArgument(f"Trainer(model={name}): {e}; rename the dataset column or the parameter") from None
    frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
    if frozen:
        entry = model.metadata_props.add()
        entry.key, entry.value = "kiln.frozen_params", ",".join(frozen)
    onnx.save(model, path)
    return [o.name for o in model.graph.output]


def load_trained(module: torch.nn.Module, values: dict):
    """The Trainer's weights (initializer name = state_dict key) into the module, in place. Keys the
    training graph does not carry keep their values; tied parameters share the one they load."""
    state = module.state_dict()
    known = {k: torch.from_numpy(np.array(v)).to(state[k].dtype) for k, v in values.items() if k in state}
    module.load_state_dict(known, strict=False)
