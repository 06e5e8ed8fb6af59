"""Kiln's datasets (include/kiln/data.h) for kiln.Trainer: columns of arrays and file readers.

    train = kiln.data.TensorDataset({"input": X, "labels": y})
    train = kiln.data.load_npz("train.npz")                    # every array a column
    train = kiln.data.load_csv("train.csv", label_column="label")
    train = kiln.data.load_jsonl("train.jsonl", skip_text=True)  # sequences of any length: pad them
                                                               # with a collator (kiln.data_collator)
    len(train); train[0]                                       # {"input": array, "labels": array}
"""
from kiln._core import core

Dataset = core.Dataset
TensorDataset = core.TensorDataset
load_npz = core.load_npz
load_npy = core.load_npy
load_csv = core.load_csv
load_idx = core.load_idx
load_jsonl = core.load_jsonl

__all__ = ["Dataset", "TensorDataset", "load_npz", "load_npy", "load_csv", "load_idx", "load_jsonl"]
