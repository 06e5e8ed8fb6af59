#!/usr/bin/env python3
"""Seed inputs for the fuzz harnesses, written by the tools users make these files with.

    fuzz/seeds.py SEEDS_DIR [CONFORMANCE_CASES_DIR]

numpy writes the .npy / .npz seeds, onnx the models (one with external data), gzip and the real
Fashion-MNIST files the IDX seeds; the CSV and CLI seeds are text. The Kiln-written formats
(safetensors, checkpoints, scheduler / trainer state, training arguments) come from kiln-fuzz-seeds,
which scripts/fuzz.sh runs beside this. Every ONNX model of the conformance cases, when their folder
is given, is a seed too. Harness input layouts are in the fuzz/*_fuzz.cpp headers.
"""
import gzip
import io
import pathlib
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def prefixed(first: bytes, second: bytes) -> bytes:  # fuzz_util.h's split_prefixed
    return struct.pack("<I", len(first)) + first + second


def put(root, harness, name, data: bytes):
    d = root / harness
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def npy_bytes(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def npz_bytes(compressed, **arrays):
    b = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(b, **arrays)
    return b.getvalue()


def small_model(external: bool) -> tuple[bytes, bytes]:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    weights = b""
    if external:
        weights = w.raw_data
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "weights.bin"), ("offset", "0"), ("length", str(len(weights)))):
            w.external_data.add(key=k, value=v)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "seed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), weights


def idx_bytes(images, labels):
    img = struct.pack(">I", 0x0803) + struct.pack(">III", *images.shape) + images.tobytes()
    lab = struct.pack(">I", 0x0801) + struct.pack(">I", labels.shape[0]) + labels.tobytes()
    return img, lab


def fashion_mnist(n):
    root = pathlib.Path("/usr/share/datasets/fashion-mnist")
    try:
        with gzip.open(root / "t10k-images-idx3-ubyte.gz") as f:
            raw = f.read(16 + n * 784)
        with gzip.open(root / "t10k-labels-idx1-ubyte.gz") as f:
            lab = f.read(8 + n)
    except OSError:
        return None
    images = np.frombuffer(raw[16:], dtype=np.uint8).reshape(n, 28, 28)
    return images, np.frombuffer(lab[8:], dtype=np.uint8)


def main():
    root = pathlib.Path(sys.argv[1])
    x = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
    y = np.array([0, 1, 2, 1], dtype=np.int64)
    for i, a in enumerate([x, y, np.float64(3.5), np.array([True, False]), x.astype(np.float16),
                           np.asfortranarray(x), np.zeros((0, 3), np.int32)]):
        put(root, "npy", f"numpy{i}.npy", npy_bytes(a))
    put(root, "npz", "savez.npz", npz_bytes(False, input=x, labels=y))
    put(root, "npz", "savez_compressed.npz", npz_bytes(True, input=x, labels=y))

    for external in (False, True):
        m, w = small_model(external)
        put(root, "onnx_model", f"matmul{'_external' if external else ''}.onnx", prefixed(m, w))
    if len(sys.argv) > 2:
        for i, path in enumerate(sorted(pathlib.Path(sys.argv[2]).glob("node/*/model.onnx"))):
            put(root, "onnx_model", f"conformance{i:04d}", prefixed(path.read_bytes(), b""))

    real = fashion_mnist(8)
    images, labels = real if real else (np.arange(8 * 4 * 4, dtype=np.uint8).reshape(8, 4, 4), np.arange(8, dtype=np.uint8))
    img, lab = idx_bytes(images, labels)
    put(root, "idx", "plain", prefixed(img, lab))
    put(root, "idx", "gzipped", prefixed(gzip.compress(img), gzip.compress(lab)))

    # CSV: the first byte picks the options (csv_fuzz.cpp): 0x00 a header and a "label" column;
    # 0x02 a header and the last column; 0x0b no header, the last column, ';' between fields.
    put(root, "csv", "header", b"\x00a,b,label\n1,2.5,0\n-3,4e2,1\n")
    put(root, "csv", "quoted_crlf", b"\x02\"a\",\"b,c\",y\r\n1,\"2\",3\r\n")
    put(root, "csv", "semicolons", b"\x0b1;2;3\n4;5;6\n")

    # logs.jsonl and logs.csv as the loggers write them (log_files_fuzz.cpp: byte 0 picks the file,
    # byte 1 the step resumed).
    put(root, "log_files", "jsonl", b"\x00\x02" + b"".join(
        b'{"loss": %.4f, "grad_norm": 1.5, "learning_rate": 0.001, "epoch": %.2f, "step": %d}\n' % (2.0 / s, s / 4, s)
        for s in range(1, 5)) + b'{"train_runtime": 1.25, "step": 4}\n{"loss": 0.3')
    put(root, "log_files", "csv", b"\x01\x02step,loss,grad_norm,learning_rate,epoch\n1,2,1.5,0.001,0.25\n"
                                  b"2,1,1.25,0.0009,0.5\n3,0.5,,0.0008,0.75\n")
    put(root, "cli_flags", "dims", b"\x00batch=2\x00seq=128")
    put(root, "cli_flags", "kiln_train", b"\x01--learning_rate\x003e-4\x00--num_train_epochs\x002\x00--eval_strategy\x00steps")
    put(root, "cli_flags", "hf", b"\x02--output_dir\x00out\x00--lr_scheduler_type\x00cosine\x00--warmup_ratio\x000.1"
                                 b"\x00--save_total_limit\x002\x00--bf16\x00false")


if __name__ == "__main__":
    main()
