"""Real-model PyTorch parity: ResNet-18, a ViT, a BERT-style encoder and a GPT-2-style decoder
(tests/python/zoo_models.py), exported with torch.onnx.export (opset 17, dynamic batch and sequence
axes) and run with `kiln run`, must match PyTorch's eval-mode forward within a max relative error of
1e-4 on the logits (max |kiln - torch| / max |torch|), at two batch sizes (and two sequence lengths
for the token models, so that one exported graph serves several shapes)."""
import numpy as np
import onnx
import pytest
import zoo_models
from kiln_cli import run_onnx

MAX_REL_ERR = 1e-4


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """name -> (torch model, ZooModel, ONNX path), each built and exported on first use, so that a
    model that fails to export fails its own tests only."""
    folder = tmp_path_factory.mktemp("zoo")
    cache = {}

    def get(name):
        if name not in cache:
            model, spec = zoo_models.build(name, size="test", seed=0)
            path = folder / f"{name}.onnx"
            zoo_models.export(model, spec, path)
            cache[name] = (model, spec, path)
        return cache[name]
    return get


def run_kiln_feeds(path, feeds, folder):
    """Runs `kiln run` on numpy feeds; returns (the output named 'logits', kiln's stdout)."""
    load, proc = run_onnx(path, feeds, folder)
    return load("logits"), proc.stdout


def max_rel_err(got, want):
    return float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))


CASES = [  # (model, batch, sequence length; ignored by the image models)
    ("resnet18", 1, 0), ("resnet18", 2, 0),
    ("vit", 1, 0), ("vit", 4, 0),
    ("bert", 1, 16), ("bert", 3, 11),
    ("gpt2", 1, 16), ("gpt2", 2, 9),
]


@pytest.mark.parametrize("name,batch,seq", CASES)
def test_logits_match_pytorch(kiln, zoo, name, batch, seq, tmp_path):
    model, spec, path = zoo(name)
    feeds = spec.inputs(batch, seq, np.random.default_rng(100 * batch + seq))
    want = zoo_models.forward(model, feeds)
    got, stdout = run_kiln_feeds(path, feeds, tmp_path)
    shape = ", ".join(str(d) for d in want.shape)
    assert f"output logits float[{shape}]" in stdout, stdout
    assert got.dtype == np.float32 and got.shape == want.shape
    err = max_rel_err(got, want)
    assert err <= MAX_REL_ERR, f"{name} batch {batch} seq {seq}: max relative error {err:.3g}"


# The ops each exported graph must contain: guards against an exporter change (or a model edit)
# quietly removing the part of the model a test is meant to exercise.
EXPECTED_OPS = {
    "resnet18": {"Conv", "Relu", "MaxPool", "Add", "GlobalAveragePool", "Flatten", "Gemm"},
    # Expand: the class token broadcast to the batch; Erf: exact GELU (opset 17 has no Gelu op).
    "vit": {"Conv", "Concat", "Expand", "LayerNormalization", "MatMul", "Softmax", "Erf", "Gemm"},
    # Range: position ids; Equal/Where: the padding mask; Tanh: the pooler.
    "bert": {"Gather", "Range", "LayerNormalization", "Equal", "Where", "Softmax", "Erf", "Tanh"},
    # Slice: the causal buffer cut to the sequence; Tanh: GPT-2's tanh-approximated GELU.
    "gpt2": {"Gather", "Range", "LayerNormalization", "Slice", "Equal", "Where", "Softmax", "Tanh"},
}


@pytest.mark.parametrize("name", list(EXPECTED_OPS))
def test_exported_graph_has_dynamic_axes_and_expected_ops(zoo, name):
    _, spec, path = zoo(name)
    graph = onnx.load(str(path)).graph
    ops = {n.op_type for n in graph.node}
    assert EXPECTED_OPS[name] <= ops, f"{name}: missing {EXPECTED_OPS[name] - ops}"
    for inp in graph.input:
        dims = inp.type.tensor_type.shape.dim
        for axis, label in spec.dynamic[inp.name].items():
            assert dims[axis].dim_param == label, f"{name} input {inp.name} axis {axis}: {dims[axis]}"


def test_bert_ignores_padded_tokens(kiln, zoo, tmp_path):
    """Kiln applies the attention mask: changing the token ids at padded positions leaves the logits
    unchanged, while changing an unpadded token changes them."""
    model, spec, path = zoo("bert")
    feeds = spec.inputs(3, 12, np.random.default_rng(5))
    mask = feeds["attention_mask"]
    assert (mask == 0).any(axis=1)[1:].all()  # rows 1 and 2 are padded
    base, _ = run_kiln_feeds(path, feeds, tmp_path / "base")

    changed = dict(feeds, input_ids=np.where(mask == 0, 7, feeds["input_ids"]))
    same, _ = run_kiln_feeds(path, changed, tmp_path / "padded")
    assert max_rel_err(same, base) <= 1e-5

    changed = dict(feeds, input_ids=feeds["input_ids"].copy())
    changed["input_ids"][:, 1] = (changed["input_ids"][:, 1] + 1) % model.tok.num_embeddings
    other, _ = run_kiln_feeds(path, changed, tmp_path / "unpadded")
    assert np.all(np.max(np.abs(other - base), axis=1) > 1e-3 * np.max(np.abs(base)))


def test_gpt2_is_causal(kiln, zoo, tmp_path):
    """Kiln applies the causal mask: changing the last token changes the last position's logits and
    no earlier position's."""
    model, spec, path = zoo("gpt2")
    feeds = spec.inputs(2, 10, np.random.default_rng(6))
    base, _ = run_kiln_feeds(path, feeds, tmp_path / "base")
    ids = feeds["input_ids"].copy()
    ids[:, -1] = (ids[:, -1] + 1) % model.wte.num_embeddings
    other, _ = run_kiln_feeds(path, {"input_ids": ids}, tmp_path / "changed")
    scale = np.max(np.abs(base))
    assert np.max(np.abs(other[:, :-1] - base[:, :-1])) <= 1e-5 * scale
    assert np.all(np.max(np.abs(other[:, -1] - base[:, -1]), axis=-1) > 1e-3 * scale)
