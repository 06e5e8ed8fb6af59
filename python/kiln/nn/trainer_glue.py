"""kiln.Trainer(model=<kiln.nn.Module>): the module as the forward ONNX file the Trainer trains,
and the trained weights back into the module.

The module is exported in training mode (BatchNorm with batch statistics, active Dropout) over the
shapes of the first training example with a dynamic batch dimension. Its inputs are named after
the dataset's columns: forward's parameter names when they are all columns, else the one column
that is not a label for a one-input model. Frozen parameters (requires_grad_(False)) travel in the
file's "kiln.frozen_params" metadata, which artifact generation honours.
"""
import inspect

import numpy as np

from kiln.errors import InvalidArgument
from kiln.nn.var import onnx_dtype


def _input_columns(module, columns, label_names):
    features = [c for c in columns if c not in label_names]
    forward_names = getattr(module, "_forward_names", None)  # zoo encoder-decoders: HF's argument names
    if forward_names is not None:
        named = [n for n in forward_names if n in columns]
        required = [n for n in forward_names if n != "labels"]
        if all(n in named for n in required):
            return named
        raise InvalidArgument(f"Trainer(model={module._get_name()}): forward takes {', '.join(forward_names)}; the "
                              f"dataset has {columns}. DataCollatorForSeq2Seq(tokenizer, model=model) makes "
                              "decoder_input_ids from the labels.")
    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    required = [p.name for p in params if p.default is p.empty]
    named = [p.name for p in params if p.name in columns]
    if required and all(n in columns for n in required):
        return named
    if len(features) == 1 and len(required) <= 1:
        return features
    raise InvalidArgument(f"Trainer(model={module._get_name()}): cannot tell which dataset columns feed forward"
                          f"({', '.join(p.name for p in params) or '*inputs'}); the dataset has {columns} (labels: "
                          f"{label_names}). Name forward's parameters after the columns.")


def export_for_trainer(module, dataset, label_names, path):
    """Writes the module's training ONNX file to `path`; returns its output names."""
    if dataset is None or len(dataset) == 0:
        raise InvalidArgument(f"Trainer(model={module._get_name()}): a kiln.nn module needs a train_dataset (it is "
                              "exported with the shapes of the first training example)")
    example = dataset[0]
    names = _input_columns(module, list(example), label_names)
    shapes, dtypes = {}, []
    for n in names:
        value = np.asarray(example[n])
        shapes[n] = (1,) + value.shape
        dtypes.append(onnx_dtype(value.dtype))
    was_training = module.training
    module.train(True)
    try:
        output_names = module._output_names(names) if hasattr(module, "_output_names") else None
        module.export(path, shapes, {n: {0: "batch"} for n in names}, input_dtypes=dtypes, output_names=output_names)
    finally:
        module.train(was_training)
    from kiln._core import core
    return list(core.onnx_io_names(path)[1])


def load_trained(module, values):
    """The Trainer's current weights (initializer name = state_dict key) into the module. Keys the
    checkpoint does not hold (buffers the training graph does not carry) keep their values."""
    state = module.state_dict()
    known = {k: v for k, v in values.items() if k in state}
    module.load_state_dict(known, strict=False)
