"""Datasets for kiln.Trainer: what Hugging Face scripts pass, as Kiln datasets.

- a kiln Dataset (kiln.TensorDataset, kiln.load_npz(...), ...): as it is;
- a dict of columns ({"input": X, "labels": y}): one TensorDataset;
- a list or tuple of dicts of arrays / numbers (HF's "list of dicts"): checked and stacked once
  into a TensorDataset, so that training never calls into Python per item;
- any other sequence (len + __getitem__ giving dicts: a torch-style map dataset, a datasets.Dataset):
  read item by item by the C++ loader, which takes the GIL for each item (augmentations run anew
  every epoch, as with a torch DataLoader).

With a data_collator other than the default (any callable taking a list of items and returning a
dict of arrays or torch tensors, batch first: HF's contract), every dataset is read through it: the
collator gets the raw items (a list of dicts of any shapes and types, a kiln Dataset's items as dicts
of numpy arrays) and its batches may differ in shape from one batch to the next (dynamic padding).

Columns "label" and "label_ids" are renamed "labels", as HF's default_data_collator does. Python
numbers and lists become float32 / int64 arrays (torch.tensor's choice); numpy arrays keep their
dtype.
"""
from collections.abc import Mapping

import numpy as np

from kiln._core import core
from kiln.errors import DTypeError, ShapeError

_RENAMED = {"label": "labels", "label_ids": "labels"}


def as_array(value, what):
    """A value of an item as a numpy array (numpy arrays as they are)."""
    if isinstance(value, np.ndarray):
        array = value
    else:
        try:
            array = np.asarray(value)
        except ValueError as e:
            raise ShapeError(f"{what}: cannot be made an array ({e})") from None
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        elif array.dtype.kind == "i":
            array = array.astype(np.int64)
    if array.dtype.kind not in "biuf":
        raise DTypeError(f"{what}: dtype {array.dtype} is not numeric; "
                         "Kiln datasets hold numbers (tokenize text first)")
    return array


def stack_items(items, what="dataset"):
    """A list of dicts with the same columns, shapes and dtypes as one TensorDataset; errors name
    the item and column that differ from item 0."""
    if len(items) == 0:
        raise ShapeError(f"{what} is empty")
    first = items[0]
    if not isinstance(first, Mapping):
        raise TypeError(f"{what}[0] is a {type(first).__name__}, not a dict of arrays (column name -> array)")
    keys = list(first.keys())
    columns = {k: [] for k in keys}
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise TypeError(f"{what}[{i}] is a {type(item).__name__}, not a dict of arrays (column name -> array)")
        if item.keys() != first.keys():
            missing = sorted(set(keys) - set(item.keys()))
            extra = sorted(set(item.keys()) - set(keys))
            raise ShapeError(f"{what}[{i}] has columns {sorted(item.keys())}, {what}[0] has {sorted(keys)} "
                             f"(missing {missing}, extra {extra})")
        for k in keys:
            columns[k].append(as_array(item[k], f"column '{k}' of {what}[{i}]"))
    stacked = {}
    for k, arrays in columns.items():
        shape, dtype = arrays[0].shape, arrays[0].dtype
        for i, a in enumerate(arrays):
            if a.shape != shape:
                raise ShapeError(f"column '{k}' of {what}[{i}] has shape {list(a.shape)}, "
                                 f"{what}[0]'s has {list(shape)}; "
                                 "items must share their shapes (pad them first)")
            if a.dtype != dtype:
                raise DTypeError(f"column '{k}' of {what}[{i}] has dtype {a.dtype}, {what}[0]'s has {dtype}")
        stacked[_RENAMED.get(k, k)] = np.stack(arrays)
    return core.TensorDataset(stacked)


def is_custom_collator(collator):
    """True for a data_collator Kiln must call (anything but None and default_data_collator)."""
    return collator is not None and collator is not default_data_collator


def to_dataset(dataset, what="dataset", collator=None):
    """A dataset argument as a kiln Dataset (None stays None); with a custom collator, one whose
    batches that collator makes from the raw items."""
    if dataset is None:
        return None
    if is_custom_collator(collator):
        if not callable(collator):
            raise TypeError(f"data_collator must be callable, not {type(collator).__name__}")
        if isinstance(dataset, Mapping):  # a dict of columns: its rows are the items
            dataset = to_dataset(dataset, what)
        elif not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(f"{what} must be a sequence of items or a dict of columns, not {type(dataset).__name__}")
        if len(dataset) == 0:
            raise ShapeError(f"{what} is empty")
        return core.collated_dataset(dataset, collator)
    if isinstance(dataset, core.Dataset):
        return dataset
    if isinstance(dataset, Mapping):
        columns = {_RENAMED.get(k, k): as_array(v, f"column '{k}' of {what}") for k, v in dataset.items()}
        return core.TensorDataset(columns)
    if isinstance(dataset, (list, tuple)):
        return stack_items(dataset, what)
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        return core.python_dataset(dataset)
    raise TypeError(f"{what} must be a sequence of dicts, a dict of columns or a kiln Dataset, not "
                    f"{type(dataset).__name__}")


def default_data_collator(features):
    """HF's default_data_collator over numpy: a list of dicts stacked into one dict of arrays
    ("label" / "label_ids" become "labels"). The Trainer collates this way itself."""
    batch = {}
    for k in features[0]:
        batch[_RENAMED.get(k, k)] = np.stack([as_array(f[k], f"column '{k}'") for f in features])
    return batch
