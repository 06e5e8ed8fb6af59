"""What the training parity tests (test_training_parity.py), the inference-export tests
(test_inference_export.py) and bench/bench.py share: exporting a forward model whose
initializers are its torch parameters, generating artifacts with `kiln artifacts`, running
`kiln-train-steps` over saved batches, reading a checkpoint, and the PyTorch reference loop.

Exports use opset 17 and do_constant_folding=False, so every initializer keeps its state_dict name
and a Kiln parameter pairs with torch's by name.
"""
import json
import struct
import subprocess
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F
from kiln_cli import build_dir, run_kiln
from torch import nn

# ----------------------------------------------------------------------------------- safetensors

# The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a
# JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
# then the tensor bytes; offsets count from the first byte after the header.
SAFETENSORS_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
    "BOOL": np.bool_,
}


def write_safetensors(path, tensors, metadata=None):
    """The safetensors layout, written independently of Kiln: 8-byte little-endian header length,
    JSON header (with __metadata__ when given), tensor bytes."""
    codes = {np.dtype(v): k for k, v in SAFETENSORS_DTYPES.items()}
    header, blobs, offset = ({"__metadata__": metadata} if metadata else {}), [], 0
    for name, value in tensors.items():
        value = np.ascontiguousarray(value)
        data = value.tobytes()
        header[name] = {"dtype": codes[value.dtype], "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def read_safetensors(path):
    """({name: numpy array}, {metadata key: value}); metadata values that are JSON are decoded.
    A file that contradicts the format fails an assertion naming it."""
    data = Path(path).read_bytes()
    assert len(data) >= 8, f"{path}: {len(data)} bytes, shorter than the 8-byte header length"
    (n,) = struct.unpack("<Q", data[:8])
    assert 8 + n <= len(data), f"{path}: header length {n} runs past the end ({len(data)} bytes)"
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    metadata = {}
    for key, value in header.pop("__metadata__", {}).items():
        try:
            metadata[key] = json.loads(value)
        except (TypeError, json.JSONDecodeError):
            metadata[key] = value
    tensors = {}
    for name, info in header.items():
        dtype = SAFETENSORS_DTYPES.get(info["dtype"])
        assert dtype is not None, f"{path}: tensor {name} has dtype {info['dtype']}, which this reader lacks"
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        assert 0 <= begin <= end <= len(body), f"{path}: tensor {name} offsets {begin}..{end} past {len(body)}"
        assert end - begin == count * np.dtype(dtype).itemsize, f"{path}: tensor {name} {shape} has {end - begin} bytes"
        tensors[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape).copy()
    return tensors, metadata


# ----------------------------------------------------------------------------------- comparisons

def weight_error(got, want):
    """max |a - b| / max(1, max |b|): relative for large weights, absolute for small ones."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"shapes differ: kiln {got.shape}, torch {want.shape}"
    return float(np.max(np.abs(got - want), initial=0.0) / max(1.0, float(np.max(np.abs(want), initial=0.0))))


def relative_error(got, want):
    """max |a - b| / max |b| (for tensors such as optimizer moments whose scale is far below 1)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"shapes differ: kiln {got.shape}, torch {want.shape}"
    scale = float(np.max(np.abs(want), initial=0.0))
    if scale > 0:
        return float(np.max(np.abs(got - want), initial=0.0) / scale)
    return float(np.max(np.abs(got), initial=0.0))


# ------------------------------------------------------------------------------------ torch side

def perturb(module, seed=11, scale=0.02):
    """Adds seeded noise to every parameter: the exporter replaces an initializer whose value equals
    another's (zero biases, LayerNorm's ones, cloned encoder layers) by an Identity of that one,
    and the copy is then no initializer to train (see training_models.WithLoss). Distinct values
    also let a test see an update that lands on the wrong parameter."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return module


def perturb_batchnorm_stats(module, seed=12):
    """Distinct running statistics for every BatchNorm (the defaults, zeros and ones, would be
    deduplicated by the exporter like any equal initializers)."""
    gen = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
            m.running_var.copy_(1.0 + 0.2 * torch.rand(m.running_var.shape, generator=gen))
    return module


def export_forward(module, feeds, path, output_names=("output",), train=False):
    """Exports `module(*feeds)` with opset 17 and do_constant_folding=False (initializers keep their
    state_dict names). `train`: BatchNormalization with training_mode=1 and Dropout in training
    mode (TrainingMode.TRAINING); otherwise the module is exported in eval mode (frozen BatchNorm), which for the
    dropout-free models here is the training math. Autograd stays on during the export, which keeps
    nn.TransformerEncoderLayer off its inference fast path (torch 1.13 cannot export it)."""
    # Not TrainingMode.EVAL: the exporter would fold BatchNorm into the preceding Conv, and the
    # BatchNorm parameters would be no initializers of their own. PRESERVE with the module in eval
    # mode keeps BatchNormalization (training_mode=0) with its parameters.
    mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.PRESERVE
    module.train(train)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(module, args, str(path), input_names=list(feeds), output_names=list(output_names),
                          opset_version=17, do_constant_folding=False, training=mode)
    return path


def load_initializers_into(module, onnx_path):
    """Sets the module's parameters and buffers from the exported model's initializers (tracing in
    training mode runs the module once, which moves BatchNorm's running statistics: both sides
    must start from what the ONNX file holds). Returns the state_dict keys found; every parameter
    must be one of them."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(onnx_path)).graph.initializer}
    found = []
    with torch.no_grad():
        for key, value in module.state_dict(keep_vars=True).items():
            if key in inits and inits[key].shape == tuple(value.shape):
                value.copy_(torch.from_numpy(inits[key].copy()))
                found.append(key)
    missing = [n for n, _ in module.named_parameters() if n not in found]
    assert not missing, f"{onnx_path}: parameters without an initializer of their name: {missing}"
    return found


def cross_entropy_loss(outputs, labels):
    return F.cross_entropy(outputs, labels)


def torch_train(module, batches, make_optimizer, loss_fn, train=True, make_scheduler=None):
    """Runs len(batches) steps of zero_grad, forward, loss, backward, optimizer.step (and
    scheduler.step, as kiln-train-steps orders them). `batches` are dicts of numpy arrays: the
    model inputs, then "labels" when `loss_fn` takes them (loss_fn is None when the module's output
    is the loss). Returns (per-step losses, the optimizer)."""
    module.train(train)
    optimizer = make_optimizer(module.parameters())
    scheduler = make_scheduler(optimizer) if make_scheduler else None
    losses = []
    for batch in batches:
        tensors = {k: torch.from_numpy(v) for k, v in batch.items()}
        labels = tensors.pop("labels", None)
        optimizer.zero_grad(set_to_none=True)
        out = module(*tensors.values())
        loss = out if loss_fn is None else loss_fn(out, labels)
        loss.backward()
        optimizer.step()
        if scheduler:
            scheduler.step()
        losses.append(loss.item())
    return losses, optimizer


def hf_trainer_loop(model, batches, lr, total_steps):
    """The Hugging Face Trainer's default step in plain PyTorch over batches of keyword arguments
    (model(**batch)["loss"]): AdamW (weight decay 0, eps 1e-8), a linear decay to 0 over
    total_steps, gradients clipped to norm 1.0. Returns the per-step losses."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: max(0.0, (total_steps - step) / total_steps))
    losses = []
    for batch in batches:
        loss = model(**batch)["loss"]
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def assert_trainer_matches(trainer, model, reference, want, tolerance=1e-4):
    """A kiln.Trainer run against hf_trainer_loop's: the logged per-step losses within `tolerance`
    relative of `want`, and the trained module's parameters within `tolerance` of the reference's."""
    logged = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(logged) == len(want)
    for step, (got, exp) in enumerate(zip(logged, want)):
        assert abs(got - exp) <= tolerance * abs(exp), f"step {step}: Kiln {got}, PyTorch {exp}"
    trained = dict(model.named_parameters())
    for name, p in reference.named_parameters():
        assert (trained[name] - p).abs().max().item() <= tolerance, name


# ------------------------------------------------------------------------------------- Kiln side

def train_steps_path():
    return build_dir() / "bin" / "kiln-train-steps"


def generate_artifacts(model_path, out_dir, *args):
    """`kiln artifacts MODEL --out DIR ARGS...`; asserts success and returns DIR."""
    proc = run_kiln("artifacts", model_path, "--out", out_dir, *args)
    assert proc.returncode == 0, f"kiln artifacts failed: {proc.stderr.strip()}"
    return Path(out_dir)


def write_manifest(folder, batches, name="batches"):
    """Saves each batch's arrays as folder/NAME_{i}_{input}.npy and writes folder/NAME.json, the
    list of {input: file} that kiln-train-steps reads (paths relative to the manifest)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, batch in enumerate(batches):
        entry = {}
        for input_name, value in batch.items():
            file = f"{name}_{i}_{input_name}.npy"
            np.save(folder / file, value)
            entry[input_name] = file
        entries.append(entry)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(entries))
    return path


def run_train_steps(artifact_dir, *args, timeout=600):
    """Runs kiln-train-steps; returns (per-step records, the summary record, the eval records
    {"eval_batch", "outputs": names}). Fails with its stderr."""
    exe = train_steps_path()
    assert exe.exists(), f"{exe} does not exist: build the kiln_train_steps target or set KILN_BUILD_DIR"
    proc = subprocess.run([str(exe), str(artifact_dir), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"kiln-train-steps failed ({proc.returncode}): {proc.stderr.strip()}"
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    steps = [r for r in records if "step" in r]
    summary = [r for r in records if "mean_ms" in r]
    assert len(summary) == 1, f"kiln-train-steps printed no summary line: {proc.stdout[-2000:]}"
    evals = [r for r in records if "eval_batch" in r]
    return steps, summary[0], evals
