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

With TrainingArguments.remove_unused_columns (HF's default True), items lose the columns the
model's forward does not take before they are collated or stacked (remove_unused_columns below;
HF's RemoveColumnsCollator), so that text next to its tokens is no error.

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


class RemoveColumnsCollator:
    """HF's: a data_collator that gets each item without the columns the model does not take
    (remove_unused_columns=True)."""

    def __init__(self, data_collator, signature_columns, logger=None, model_name=None, description=None):
        del logger, model_name, description
        self.data_collator = data_collator
        self.signature_columns = list(signature_columns)

    def _remove_columns(self, feature):
        if not isinstance(feature, Mapping):
            return feature
        return {k: v for k, v in feature.items() if k in self.signature_columns}

    def __call__(self, features):
        return self.data_collator([self._remove_columns(f) for f in features])


class _WithoutColumns:
    """A sequence whose dict items keep only `columns` (remove_unused_columns without a collator)."""

    def __init__(self, sequence, columns):
        self.sequence = sequence
        self.columns = columns
        if getattr(sequence, "_kiln_stream", False):  # an IterableDataset's stream stays one
            self._kiln_stream = True

    def __len__(self):
        return len(self.sequence)

    def __getitem__(self, index):
        item = self.sequence[index]
        return {k: v for k, v in item.items() if k in self.columns} if isinstance(item, Mapping) else item


def remove_unused_columns(dataset, what, signature_columns):
    """The dataset without the columns the model does not take (HF's remove_unused_columns): a dict of
    columns or a sequence of dict items filtered, a kiln Dataset as it is (its columns are read by
    name). ValueError, as HF's, when no column is left."""
    if signature_columns is None or dataset is None or isinstance(dataset, core.Dataset):
        return dataset
    keep = set(signature_columns)
    if isinstance(dataset, Mapping):
        columns = list(dataset)
        filtered = {k: v for k, v in dataset.items() if k in keep}
    elif hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__") and len(dataset) > 0 and \
            isinstance(dataset[0], Mapping):
        columns = list(dataset[0])
        filtered = [{k: v for k, v in item.items() if k in keep} for item in dataset] \
            if isinstance(dataset, (list, tuple)) else _WithoutColumns(dataset, keep)
    else:
        return dataset
    if not any(c in keep for c in columns):
        raise ValueError(f"No columns in the {what} match the model's forward method signature "
                         f"({', '.join(signature_columns)}). The following columns have been ignored: "
                         f"[{', '.join(columns)}]. Please check the dataset and model. You may need to set "
                         "`remove_unused_columns=False` in `TrainingArguments`.")
    return filtered


def is_iterable_dataset(dataset):
    """An IterableDataset (torch's, datasets', a generator...): iterable, without a length."""
    return (dataset is not None and not isinstance(dataset, (Mapping, core.Dataset)) and hasattr(dataset, "__iter__")
            and not hasattr(dataset, "__len__"))


class _InOrderReader:
    """Random access, for the C++ loader, over something read front to back (a stream, a DataLoader):
    item i is the i-th one read since the last rewind. An index before the position rewinds and reads
    again (a resumed run skips items by reading them, as HF does); items read past, asked for out of
    order by loader threads, wait in a buffer -- only this rank's (i % world == rank: the C++ loader
    reads such a dataset in order and shards it that way). Thread-safe. Subclasses give _rewind()
    and _next()."""

    def __init__(self, length, rank, world):
        import threading
        self.length, self.rank, self.world = length, rank, world
        self._lock = threading.Lock()
        self._buffer = {}
        self._cursor = 0

    def __len__(self):
        return self.length

    def _restart(self):
        self._cursor = 0
        self._buffer.clear()
        self._rewind()

    def __getitem__(self, index):
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} is out of range for {self.length} items")
        with self._lock:
            if index in self._buffer:
                return self._buffer.pop(index)
            if index < self._cursor:
                self._restart()
            while True:
                item = self._next()
                at = self._cursor
                self._cursor += 1
                if at == index:
                    return item
                if at % self.world == self.rank:
                    self._buffer[at] = item


class IterableAsSequence(_InOrderReader):
    """An IterableDataset as the Trainer's training data: the stream, started again (set_epoch(pass)
    first, as HF calls it every epoch) whenever it ends, for `length` items in all; a rewind replays
    it from pass 0."""
    _kiln_stream = True

    def __init__(self, iterable, length, rank=0, world=1):
        super().__init__(length, rank, world)
        self.iterable = iterable
        self._restart()

    def _rewind(self):
        self._pass = 0
        self._begin_pass()

    def _begin_pass(self):
        if hasattr(self.iterable, "set_epoch"):
            self.iterable.set_epoch(self._pass)
        self._iterator = iter(self.iterable)

    def _next(self):
        for attempt in range(2):
            try:
                return next(self._iterator)
            except StopIteration:
                if attempt == 1 or self._cursor == 0:
                    break
                self._pass += 1
                self._begin_pass()
        raise ValueError("the IterableDataset yielded no items" + (f" in pass {self._pass}" if self._pass else ""))


class LoaderBatches(_InOrderReader):
    """A DataLoader (a subclass's get_*_dataloader: any iterable of batch dicts with a length) as a
    sequence of its batches (core.batches_dataset makes them the C++ loop's batches): item i is batch
    i of the current epoch. set_epoch(e), which the loop calls at each epoch, starts epoch e (the
    loader's, its sampler's or its batch sampler's set_epoch first, as HF calls them); a rewind
    replays the epoch, so a resumed run is exact when the loader's order depends only on the epoch
    (a seeded sampler)."""

    def __init__(self, loader, rank=0, world=1):
        if not hasattr(loader, "__len__"):
            raise TypeError(f"the DataLoader ({type(loader).__name__}) has no length; the Trainer counts its batches")
        super().__init__(len(loader), rank, world)
        self.loader, self._epoch = loader, 0
        self._restart()

    def _rewind(self):
        sampler = getattr(self.loader, "sampler", None)
        batch_sampler = getattr(self.loader, "batch_sampler", None)
        for obj in (self.loader, sampler, batch_sampler, getattr(batch_sampler, "sampler", None)):
            if obj is not None and hasattr(obj, "set_epoch"):
                obj.set_epoch(self._epoch)
        self._iterator = iter(self.loader)

    def _next(self):
        try:
            return next(self._iterator)
        except StopIteration:
            raise ValueError(f"the DataLoader ended after {self._cursor} batches; its length is "
                             f"{self.length}") from None

    def set_epoch(self, epoch):
        with self._lock:
            if epoch != self._epoch or self._cursor > 0:
                self._epoch = epoch
                self._restart()


def iterable_as_sequence(dataset, what, args, training):
    """An IterableDataset as a sequence: a training one as the stream read for max_steps (HF's rule:
    it must be set), an evaluation one read once into a list (it is finite)."""
    if not is_iterable_dataset(dataset):
        return dataset
    if not training:
        items = list(dataset)
        if not items:
            raise ValueError(f"{what}: the IterableDataset yielded no items")
        return items
    if args.max_steps is None or args.max_steps <= 0:
        raise ValueError(f"args.max_steps must be set to a positive value if dataloader does not have a length, was "
                         f"{args.max_steps}")
    world = max(1, int(args.world_size))
    length = args.max_steps * args.per_device_train_batch_size * args.gradient_accumulation_steps * world
    return IterableAsSequence(dataset, length, int(args.process_index), world)


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
