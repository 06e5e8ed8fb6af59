"""Kiln's TensorBoard event files (include/kiln/tensorboard.h) decoded from the format spec.

Kiln's side is the gtest TensorBoardDump.Write, run with KILN_TB_DUMP=<dir>: it writes one event
file there. This test reads it with a TFRecord reader written here (uint64 little-endian length,
masked CRC32C of the length, data, masked CRC32C of the data; CRCs from python3-crc32c) and parses
each record as tensorflow.Event with protobuf classes built here from a FileDescriptorProto holding
the field numbers of event.proto / summary.proto (no tensorflow or tensorboard import). Values are
compared exactly as float32; wall times exactly as float64.
"""
import os
import re
import socket
import struct
import subprocess

import crc32c
import kiln_cli
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# The scalars of TensorBoardDump.Write (tests/trainer/tensorboard_test.cpp): tag, value, step, wall_time.
SCALARS = [
    ("train/loss", 2.302585092994046, 0, 1700000000.5),
    ("train/loss", 0.1, 1, 1700000001.25),
    ("train/learning_rate", 5e-05, 1, 1700000001.25),
    ("eval/accuracy", -3.75, 1099511627776, 1700000002.0),
    ("train/loss", 1e30, -1, 1700000003.0),
    ("train/grad_norm", 0.0, 7, 0.0),
]


def masked_crc(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_masked_crc_known_answer():
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    assert masked_crc(b"123456789") == 0xC78AB0E5


def event_class():
    """tensorflow.Event / Summary / Summary.Value with the field numbers of the .proto files."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="kiln_test_event.proto", package="tensorflow", syntax="proto3")

    def add(msg, name, number, type_, label=F.LABEL_OPTIONAL, type_name=None):
        f = msg.field.add(name=name, number=number, type=type_, label=label)
        if type_name:
            f.type_name = type_name

    summary = fdp.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    add(value, "tag", 1, F.TYPE_STRING)
    add(value, "simple_value", 2, F.TYPE_FLOAT)
    add(value, "tensor", 8, F.TYPE_MESSAGE, type_name=".tensorflow.TensorProto")
    add(value, "metadata", 9, F.TYPE_MESSAGE, type_name=".tensorflow.SummaryMetadata")
    # tensor.proto / tensor_shape.proto / summary.proto: what a text summary uses.
    dim = fdp.message_type.add(name="TensorShapeDim")
    add(dim, "size", 1, F.TYPE_INT64)
    shape = fdp.message_type.add(name="TensorShapeProto")
    add(shape, "dim", 2, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".tensorflow.TensorShapeDim")
    tensor = fdp.message_type.add(name="TensorProto")
    add(tensor, "dtype", 1, F.TYPE_INT32)
    add(tensor, "tensor_shape", 2, F.TYPE_MESSAGE, type_name=".tensorflow.TensorShapeProto")
    add(tensor, "string_val", 8, F.TYPE_BYTES, F.LABEL_REPEATED)
    plugin = fdp.message_type.add(name="PluginData")
    add(plugin, "plugin_name", 1, F.TYPE_STRING)
    add(plugin, "content", 2, F.TYPE_BYTES)
    metadata = fdp.message_type.add(name="SummaryMetadata")
    add(metadata, "plugin_data", 1, F.TYPE_MESSAGE, type_name=".tensorflow.PluginData")
    add(summary, "value", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".tensorflow.Summary.Value")
    event = fdp.message_type.add(name="Event")
    add(event, "wall_time", 1, F.TYPE_DOUBLE)
    add(event, "step", 2, F.TYPE_INT64)
    add(event, "file_version", 3, F.TYPE_STRING)
    add(event, "summary", 5, F.TYPE_MESSAGE, type_name=".tensorflow.Summary")

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.21
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def read_records(path):
    data = path.read_bytes()
    records, at = [], 0
    while at < len(data):
        assert at + 12 <= len(data), f"truncated record header at byte {at}"
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        assert length_crc == masked_crc(header), f"length CRC at byte {at}"
        assert at + 12 + length + 4 <= len(data), f"truncated record at byte {at}"
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        assert body_crc == masked_crc(body), f"data CRC at byte {at}"
        records.append(body)
        at += 16 + length
    return records


def test_event_file_decodes(tmp_path):
    exe = kiln_cli.build_dir() / "bin" / "kiln_tests"
    assert exe.exists(), f"{exe} does not exist: build the kiln_tests target or set KILN_BUILD_DIR"
    proc = subprocess.run([str(exe), "--gtest_filter=TensorBoardDump.*"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "KILN_TB_DUMP": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = list(tmp_path.iterdir())
    assert len(files) == 1, files
    name = files[0].name
    m = re.fullmatch(r"events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+)", name)
    assert m, name
    assert m.group(2) == socket.gethostname()

    Event = event_class()
    events = []
    for body in read_records(files[0]):
        e = Event()
        e.ParseFromString(body)
        events.append(e)
    assert len(events) == len(SCALARS) + 1

    assert events[0].file_version == "brain.Event:2"
    assert events[0].wall_time > 1.6e9
    assert not events[0].HasField("summary")

    for e, (tag, value, step, wall_time) in zip(events[1:], SCALARS):
        assert e.file_version == ""
        assert e.wall_time == wall_time
        assert e.step == step
        assert len(e.summary.value) == 1
        v = e.summary.value[0]
        assert v.tag == tag
        assert v.simple_value == float(np.float32(value)), (tag, v.simple_value, value)


def read_events(path):
    Event = event_class()
    events = []
    for body in read_records(path):
        e = Event()
        e.ParseFromString(body)
        events.append(e)
    return events


def test_trainer_reports_to_tensorboard(tmp_path):
    """report_to tensorboard: the args as a text summary, then every log as scalars at global_step
    under HF's tags (train/..., eval/...), equal (as float32) to the run's log_history."""
    import json

    logdir, out = tmp_path / "tb", tmp_path / "out"
    proc = kiln_cli.run_kiln("train", "--model", "mlp", "--max_steps", "40", "--logging_steps", "10",
                             "--eval_strategy", "steps", "--eval_steps", "20", "--save_strategy", "no",
                             "--report_to", "tensorboard", "--logging_dir", logdir, "--output_dir", out,
                             "--disable_tqdm", "true")
    assert proc.returncode == 0, proc.stderr
    files = sorted(logdir.iterdir())
    # Training writes one file; the evaluation `kiln train` runs after training opens another, as
    # HF's TensorBoardCallback re-creates its writer after on_train_end.
    assert len(files) == 2, files
    events = [e for f in files for e in read_events(f)]
    texts = [e for e in events if e.summary.value and e.summary.value[0].HasField("tensor")]
    scalars = [(v.tag, e.step, v.simple_value) for e in events for v in e.summary.value if not v.HasField("tensor")]
    assert len(texts) == 2
    t = texts[0].summary.value[0]
    assert t.tag == "args/text_summary"
    assert t.metadata.plugin_data.plugin_name == "text"
    assert t.tensor.dtype == 7 and [d.size for d in t.tensor.tensor_shape.dim] == [1]
    args = json.loads(t.tensor.string_val[0])
    assert args["max_steps"] == 40 and args["report_to"] == ["tensorboard"]

    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    expected = []
    for entry in history:
        for key, value in entry.items():
            if key == "step":
                continue
            tag = ("eval/" + key[5:]) if key.startswith("eval_") else ("train/" + key)
            expected.append((tag, entry["step"], float(np.float32(value))))
    assert sorted(scalars) == sorted(expected)
    losses = [(step, v) for tag, step, v in scalars if tag == "train/loss"]
    assert [s for s, _ in losses] == [10, 20, 30, 40]
    assert sorted(s for tag, s, _ in scalars if tag == "eval/loss") == [20, 40, 40]
