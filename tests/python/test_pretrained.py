"""Hugging Face model folders (kiln/nn/pretrained.py): a folder laid out as transformers writes it
(config.json with HF's extra fields, model.safetensors written here by an independent writer, GPT-2's
mask buffers and no tied lm_head.weight) loads into the zoo entry its architectures name and gives
the outputs of the weights it was written from (exactly: the same kernels); save_pretrained round
trips; AutoBackbone.from_pretrained takes a whole model's folder; backbone outputs are HF's
BackboneOutput and still a list; offline hub names, wrong tasks and bad files are clear errors."""
import json
import logging

import numpy as np
import pytest
from kiln_package import import_kiln
from training_parity import write_safetensors

import_kiln()
import kiln  # noqa: E402
from kiln.nn import zoo  # noqa: E402

BERT = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=24, num_labels=3)
GPT2 = dict(vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=16)
RESNET = dict(num_channels=3, num_labels=4, depths=[1, 1, 1, 1], hidden_sizes=[8, 16, 16, 32], embedding_size=8)


def hf_folder(folder, architecture, model_type, config, weights, **extra):
    folder.mkdir(parents=True, exist_ok=True)
    values = {"architectures": [architecture], "model_type": model_type, "transformers_version": "4.46.0",
              "torch_dtype": "float32", **config, **extra}
    (folder / "config.json").write_text(json.dumps(values))
    write_safetensors(folder / "model.safetensors", weights, {"format": "pt"})
    return folder


def randomized(module, seed):
    g = np.random.default_rng(seed)
    state = {k: np.array(v, copy=True) for k, v in module.state_dict().items()}
    for k, v in state.items():
        if v.dtype == np.float32 and not k.endswith(("running_var", "num_batches_tracked")):
            state[k] = (v + 0.05 * g.standard_normal(v.shape)).astype(np.float32)
    module.load_state_dict(state)
    return state


def tokens(vocab, shape, seed=0):
    return np.random.default_rng(seed).integers(1, vocab, shape).astype(np.int64)


def test_an_hf_bert_folder_loads_and_predicts_as_its_weights(tmp_path, caplog):
    ref = zoo.create_model("bert", **BERT)
    ref.eval()
    weights = randomized(ref, 1)
    labels = {"0": "neg", "1": "neutral", "2": "pos"}
    cfg = {k: v for k, v in BERT.items() if k != "num_labels"}  # num_labels from id2label, as HF writes it
    folder = hf_folder(tmp_path / "bert", "BertForSequenceClassification", "bert", cfg, weights, id2label=labels,
                       label2id={v: int(k) for k, v in labels.items()}, problem_type="single_label_classification")
    with caplog.at_level(logging.WARNING):
        model = kiln.AutoModelForSequenceClassification.from_pretrained(folder)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    model.eval()
    ids, mask = tokens(60, (2, 9)), np.ones((2, 9), np.int64)
    types = np.zeros((2, 9), np.int64)
    np.testing.assert_array_equal(model(ids, mask, types), ref(ids, mask, types))
    assert model.config.id2label == labels and model.config.num_labels == 3 and model.config.problem_type

    # save_pretrained round trip: HF's extra fields kept, the zoo's config complete.
    model.save_pretrained(tmp_path / "saved")
    written = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert written["architectures"] == ["BertForSequenceClassification"] and written["id2label"] == labels
    assert written["hidden_size"] == 16 and written["layer_norm_eps"] == 1e-12
    again = kiln.AutoModel.from_pretrained(tmp_path / "saved")
    again.eval()
    np.testing.assert_array_equal(again(ids, mask, types), ref(ids, mask, types))
    assert kiln.AutoConfig.from_pretrained(tmp_path / "saved").num_hidden_layers == 2

    # A new head: a size mismatch is an error unless asked to initialize it anew (HF's rule).
    with pytest.raises(ValueError, match="size mismatch for classifier.bias: \\[3\\] in the file, \\[5\\]"):
        kiln.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=5)
    five = kiln.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=5, ignore_mismatched_sizes=True)
    five.eval()
    assert five(ids, mask, types).shape == (2, 5)
    np.testing.assert_array_equal(five.state_dict()["bert.pooler.dense.weight"], weights["bert.pooler.dense.weight"])


def test_an_hf_gpt2_folder_with_mask_buffers_and_a_tied_head(tmp_path, caplog):
    ref = zoo.create_model("gpt2", **GPT2)
    ref.eval()
    weights = randomized(ref, 2)
    weights["lm_head.weight"] = weights["transformer.wte.weight"]  # one tensor, tied
    ref.load_state_dict(weights)
    weights.pop("lm_head.weight")  # HF leaves the tied head out of the file
    for layer in range(2):  # older transformers saved the causal masks
        weights[f"transformer.h.{layer}.attn.bias"] = np.tril(np.ones((16, 16), np.float32))[None, None]
    folder = hf_folder(tmp_path / "gpt2", "GPT2LMHeadModel", "gpt2", GPT2, weights)
    with caplog.at_level(logging.WARNING):
        model = kiln.AutoModelForCausalLM.from_pretrained(folder)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    model.eval()
    ids = tokens(50, (2, 7))
    np.testing.assert_array_equal(model(ids), ref(ids))
    with pytest.raises(ValueError, match="not a sequence-classification model"):
        kiln.AutoModelForSequenceClassification.from_pretrained(folder)


def test_backbones_from_a_model_folder_return_backbone_outputs(tmp_path):
    net = zoo.create_model("resnet18", **RESNET)
    net.eval()
    weights = randomized(net, 3)
    net.save_pretrained(tmp_path / "resnet")
    written = json.loads((tmp_path / "resnet" / "config.json").read_text())
    assert written["model_type"] == "resnet" and written["architectures"] == ["ResNetForImageClassification"]
    backbone = kiln.AutoBackbone.from_pretrained(tmp_path / "resnet", out_indices=(2, 4))
    backbone.eval()
    reference = kiln.AutoBackbone.from_config("resnet18", out_indices=(2, 4), **RESNET)
    reference.load_state_dict({k: v for k, v in weights.items() if not k.startswith("fc.")})
    reference.eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    out, want = backbone(x), reference(x)
    assert isinstance(out, kiln.nn.backbone.BackboneOutput) and isinstance(out, list)
    assert len(out.feature_maps) == 2 and out.hidden_states is None
    for got, expected in zip(out.feature_maps, want):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(out[1], want[1])  # indexable as before
    loaded = zoo.from_pretrained(tmp_path / "resnet")
    loaded.eval()
    np.testing.assert_array_equal(loaded(x), net(x))


def test_folder_errors(tmp_path):
    with pytest.raises(OSError, match="downloads nothing"):
        kiln.AutoModel.from_pretrained("bert-base-uncased")
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match="has no config.json"):
        kiln.AutoModel.from_pretrained(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text("{\"model_type\": ")
    with pytest.raises(kiln.CorruptFile, match="not valid JSON"):
        kiln.AutoModel.from_pretrained(tmp_path / "empty")
    unknown = {"model_type": "llama", "architectures": ["LlamaModel"]}
    (tmp_path / "empty" / "config.json").write_text(json.dumps(unknown))
    with pytest.raises(NotImplementedError, match="not a model Kiln's zoo has"):
        kiln.AutoModel.from_pretrained(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text(json.dumps({"model_type": "gpt2", **GPT2}))
    (tmp_path / "empty" / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(OSError, match="pytorch_model.bin: Kiln reads safetensors only"):
        kiln.AutoModel.from_pretrained(tmp_path / "empty")
    with pytest.raises(ValueError, match="has no config field 'hidden'"):
        zoo.from_pretrained(tmp_path / "empty", hidden=3)
    own = kiln.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="writes zoo models"):
        own.save_pretrained(tmp_path / "own")
