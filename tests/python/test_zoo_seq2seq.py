"""The zoo's encoder-decoder models, "bart" (HF BartForConditionalGeneration) and "t5" (HF
T5ForConditionalGeneration), against their torch definitions in seq2seq_models.py: state_dict keys
and order, logits and loss, generation through optimum's three parts with a KV cache against a
torch greedy loop over the same cache, and training through artifacts (per-step losses and
weights against torch's AdamW) and through kiln.Trainer.

Tolerances: logits max |kiln - torch| <= 1e-5 * max |torch| (float32 both sides); training losses
within 1e-4 relative over 8 AdamW steps.
"""
import numpy as np
import onnx
import onnx.numpy_helper
import pytest
import torch
from kiln_package import import_kiln
from seq2seq_models import BartForConditionalGeneration, T5ForConditionalGeneration

import_kiln()
import kiln  # noqa: E402
from kiln import nn as knn  # noqa: E402

TOL = 1e-5
BART = dict(vocab_size=60, max_position_embeddings=40, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_ffn_dim=64, decoder_ffn_dim=48, encoder_attention_heads=4, decoder_attention_heads=2,
            activation_function="gelu", dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, init_std=0.02,
            scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
            forced_eos_token_id=2)
T5 = dict(vocab_size=60, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4,
          relative_attention_num_buckets=8, relative_attention_max_distance=12, dropout_rate=0.1,
          layer_norm_epsilon=1e-6, initializer_factor=1.0, feed_forward_proj="relu", tie_word_embeddings=True,
          pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
T5_GATED = dict(T5, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
CASES = {"bart": ("bart", BART, BartForConditionalGeneration), "t5": ("t5", T5, T5ForConditionalGeneration),
         "t5_gated_untied": ("t5", T5_GATED, T5ForConditionalGeneration)}


def reference(case, seed=0):
    """The torch model, seeded, with N(0, 0.1) noise on every parameter and buffer (a tied matrix
    once), in eval mode; and the zoo model holding its weights."""
    name, config, make = CASES[case]
    torch.manual_seed(seed)
    ref = make(config)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for t in list(ref.parameters()) + list(ref.buffers()):
            t.add_(0.1 * torch.randn(t.shape, generator=gen))
    model = knn.zoo.create_model(name, **config)
    model.load_state_dict({k: v.numpy() for k, v in ref.state_dict().items()})
    return ref.eval(), model.eval()


def batch(config, seed, source=11, target=7, rows=3):
    """Source ids with the last row padded from the middle, decoder ids, and labels with -100 tails."""
    rng = np.random.default_rng(seed)
    pad, vocab = config["pad_token_id"], config["vocab_size"]
    ids = rng.integers(3, vocab, (rows, source))
    mask = np.ones((rows, source), np.int64)
    mask[-1, source // 2:] = 0
    ids[mask == 0] = pad
    labels = rng.integers(3, vocab, (rows, target))
    labels[0, target - 2:] = -100
    shifted = np.concatenate([np.full((rows, 1), config["decoder_start_token_id"]), labels[:, :-1]], axis=1)
    shifted[shifted == -100] = pad
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": shifted, "labels": labels}


def scaled_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def torch_inputs(b, names):
    return [torch.from_numpy(b[n]) for n in names]


@pytest.mark.parametrize("case", list(CASES))
def test_state_dict_keys_shapes_and_order_equal_the_reference(case):
    ref, model = reference(case)
    assert [(k, tuple(np.shape(v))) for k, v in model.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in ref.state_dict().items()]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("source,target", [(11, 7), (20, 17), (4, 1)])
def test_logits_and_loss_match(case, source, target):
    ref, model = reference(case)
    b = batch(CASES[case][1], seed=source, source=source, target=target)
    got = model(*[b[n] for n in ("input_ids", "attention_mask", "decoder_input_ids")])
    with torch.no_grad():
        want = ref(*torch_inputs(b, ("input_ids", "attention_mask", "decoder_input_ids")))
    assert scaled_error(got, want.numpy()) <= TOL
    loss, logits = model(*[b[n] for n in ("input_ids", "attention_mask", "decoder_input_ids", "labels")])
    with torch.no_grad():
        want_loss, _ = ref(*torch_inputs(b, ("input_ids", "attention_mask", "decoder_input_ids", "labels")))
    assert abs(float(loss) - want_loss.item()) <= TOL * abs(want_loss.item())
    assert scaled_error(logits, want.numpy()) <= TOL


@pytest.mark.parametrize("case", ["bart", "t5"])
def test_exported_parts_use_optimums_names_and_pass_the_checker(case):
    name, config, _ = CASES[case]
    _, model = reference(case)
    from kiln._core import core
    layers = config.get("decoder_layers") or config.get("num_decoder_layers")
    for part in ("model", "encoder", "decoder", "decoder_with_past"):
        proto = onnx.load_from_string(core.nn.zoo_export_bytes(name, dict(config, part=part), model._cmod))
        onnx.checker.check_model(proto, full_check=True)
        inputs = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
        outputs = [o.name for o in proto.graph.output]
        if part == "model":
            assert inputs == ["input_ids", "attention_mask", "decoder_input_ids"] and outputs == ["logits"]
        elif part == "encoder":
            assert inputs == ["input_ids", "attention_mask"] and outputs == ["last_hidden_state"]
        elif part == "decoder":
            assert inputs == ["input_ids", "encoder_attention_mask", "encoder_hidden_states"]
            assert outputs == ["logits"] + [f"present.{i}.{p}.{k}" for i in range(layers)
                                            for p in ("decoder", "encoder") for k in ("key", "value")]
        else:
            # Kiln's two additions to optimum's layout: the block cache's mask and the positions.
            assert inputs == ["input_ids", "encoder_attention_mask", "decoder_attention_mask",
                              "decoder_position_ids"] + [
                f"past_key_values.{i}.{p}.{k}" for i in range(layers) for p in ("decoder", "encoder")
                for k in ("key", "value")]
            assert outputs == ["logits"] + [f"present.{i}.decoder.{k}" for i in range(layers) for k in ("key", "value")]
        # One initializer for the tied matrix.
        names = [t.name for t in proto.graph.initializer]
        assert len(names) == len(set(names))
        assert not any(n.endswith("embed_tokens.weight") for n in names)


def torch_greedy(ref, ids, mask, start, steps):
    """Greedy decoding in torch through the reference's own KV cache (one token per step)."""
    with torch.no_grad():
        encoded = ref.encode(torch.from_numpy(ids), torch.from_numpy(mask))
        tokens = torch.full((ids.shape[0], 1), start, dtype=torch.int64)
        past, out = None, tokens
        for _ in range(steps):
            logits, past = ref.decode(tokens, encoded, torch.from_numpy(mask), past)
            tokens = logits[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, tokens], dim=1)
    return out.numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_generation_with_the_kv_cache_equals_torch_greedy(case):
    ref, model = reference(case)
    config = CASES[case][1]
    b = batch(config, seed=5, source=9)
    steps = 12
    # No eos: every row runs the full length, so torch's loop and Kiln's compare token for token.
    got = model.generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=steps, eos_token_id=None,
                         forced_eos_token_id=None)
    want = torch_greedy(ref, b["input_ids"], b["attention_mask"], config["decoder_start_token_id"], steps)
    np.testing.assert_array_equal(got, want)
    # Beam search through the three parts equals beam search over the whole model without a cache.
    from kiln._core import core
    whole = kiln.generation.Seq2SeqLM(core.nn.zoo_export_bytes(CASES[case][0], dict(config, part="model"),
                                                               model._cmod))
    for kwargs in ({"num_beams": 3, "max_new_tokens": 6}, {"num_beams": 2, "num_return_sequences": 2,
                                                            "max_new_tokens": 5, "no_repeat_ngram_size": 2}):
        cached = model.generate(b["input_ids"], attention_mask=b["attention_mask"], **kwargs)
        plain = kiln.generate(whole, b["input_ids"], attention_mask=b["attention_mask"],
                              **dict(kwargs, decoder_start_token_id=config["decoder_start_token_id"],
                                     eos_token_id=config["eos_token_id"], pad_token_id=config["pad_token_id"],
                                     forced_eos_token_id=config.get("forced_eos_token_id")))
        np.testing.assert_array_equal(cached, plain)


def torch_adamw_losses(ref, batches, lr):
    ref.train()
    for m in ref.modules():  # dropout off on both sides: the losses compare step by step
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    opt = torch.optim.AdamW(ref.parameters(), lr=lr)
    losses = []
    for b in batches:
        loss, _ = ref(*torch_inputs(b, ("input_ids", "attention_mask", "decoder_input_ids", "labels")))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("case", list(CASES))
def test_artifacts_train_to_torchs_losses_and_weights(case, tmp_path):
    from kiln.training import artifacts
    from kiln.training.api import CheckpointState, Module, Optimizer
    name, config, make = CASES[case]
    no_dropout = dict(config, **({"dropout": 0.0} if name == "bart" else {"dropout_rate": 0.0}))
    CASES["_no_dropout"] = (name, no_dropout, make)
    try:
        ref, model = reference("_no_dropout")
    finally:
        del CASES["_no_dropout"]
    batches = [batch(config, seed=100 + i % 2) for i in range(8)]  # two batches, four times each
    names = ["input_ids", "attention_mask", "decoder_input_ids", "labels"]
    model.train()
    model.export(tmp_path / "model.onnx", [(n, batches[0][n].shape) for n in names],
                 {n: {0: "batch", 1: "source" if n in names[:2] else "target"} for n in names},
                 input_dtypes=["int64"] * 4, output_names=["loss", "logits"])
    artifacts.generate_artifacts(str(tmp_path / "model.onnx"), optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=tmp_path / "art")
    state = CheckpointState.load_checkpoint(tmp_path / "art" / "checkpoint")
    module = Module(tmp_path / "art" / "training_model.onnx", state, tmp_path / "art" / "eval_model.onnx")
    optimizer = Optimizer(tmp_path / "art" / "optimizer_model.onnx", module)
    optimizer.set_learning_rate(3e-3)
    assert module.input_names() == names
    losses = []
    for b in batches:
        module.train()
        losses.append(float(module(*[b[n] for n in names])))
        optimizer.step()
        module.lazy_reset_grad()
    want = torch_adamw_losses(ref, batches, 3e-3)
    assert losses[-2] < losses[0] and losses[-1] < losses[1]
    bad = [(i, k, t) for i, (k, t) in enumerate(zip(losses, want)) if not abs(k - t) <= 1e-4 * abs(t)]
    assert not bad, bad
    for key, p in ref.named_parameters():
        if key.endswith("k_proj.bias"):
            # A key bias adds q.b to a whole row of scores, which softmax ignores: its gradient is
            # zero up to rounding, and AdamW turns that noise into full-size steps on either side.
            continue
        got = state.parameters[key].data
        assert np.max(np.abs(got - p.detach().numpy())) <= 1e-4 * max(1.0, float(p.abs().max())), key


def reversal_items(count, seed, config, length=6, reverse=True):
    """Source: `length` random tokens; target: them reversed, then eos (HF's labels, unpadded)."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(3, config["vocab_size"], (count, length))
    return [{"input_ids": r, "attention_mask": np.ones(length, np.int64),
             "labels": np.concatenate([r[::-1] if reverse else r, [config["eos_token_id"]]])} for r in rows]


# T5 with HF's initialisation learns the task more slowly than BART: without dropout, at a higher
# rate, and with buckets that tell every offset of a 7-token sentence apart.
TRAINER_CASES = {"bart": ({}, 3e-3),
                 "t5": ({"dropout_rate": 0.0, "relative_attention_num_buckets": 32,
                         "relative_attention_max_distance": 64}, 1e-2)}


@pytest.mark.parametrize("case", list(TRAINER_CASES))
def test_seq2seq_trainer_learns_reversal_and_generates_it(case, tmp_path):
    """kiln.Seq2SeqTrainer on the zoo model as HF's scripts use it: DataCollatorForSeq2Seq with the
    model (decoder_input_ids from the labels), the model's own loss, predict_with_generate."""
    from kiln.data_collator import DataCollatorForSeq2Seq
    from kiln.seq2seq_trainer import Seq2SeqTrainer, Seq2SeqTrainingArguments
    name, config, _ = CASES[case]
    overrides, learning_rate = TRAINER_CASES[case]
    config = dict(config, **overrides)
    knn.manual_seed(0)
    model = knn.zoo.create_model(name, **config)

    class Tokenizer:  # what the collator asks of a tokenizer: padding of the inputs
        pad_token_id = config["pad_token_id"]
        padding_side = "right"

        def pad(self, features, **kwargs):
            return {k: np.stack([f[k] for f in features]) for k in features[0]}

    evaluation = reversal_items(32, 1, config)

    def exact_match(p):
        predictions = np.asarray(p.predictions)[:, 1:8]  # after the decoder start token
        labels = np.asarray(p.label_ids)[:, :7]
        return {"exact_match": float((predictions == labels).all(axis=1).mean())}

    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=32,
                                    learning_rate=learning_rate, max_steps=1000, warmup_steps=20, save_strategy="no",
                                    report_to="none", seed=0,
                                    predict_with_generate=True, generation_max_length=8, logging_steps=100)
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=reversal_items(2048, 0, config),
                             eval_dataset=evaluation, compute_metrics=exact_match,
                             data_collator=DataCollatorForSeq2Seq(Tokenizer(), model=model))
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < 0.5 * before["eval_loss"], (before, after)
    assert after["eval_exact_match"] >= 0.7 > before["eval_exact_match"], (before, after)
    out = trainer.predict(evaluation)
    sources = np.stack([e["input_ids"] for e in evaluation])
    np.testing.assert_array_equal(out.predictions, model.generate(sources, max_length=8))


def test_bad_configs_and_inputs_are_refused_by_name(tmp_path):
    with pytest.raises(kiln.errors.InvalidArgument, match="'part' must be one of model, encoder"):
        knn.zoo.create_model("bart", **dict(BART, part="decoder_only"))
    with pytest.raises(kiln.errors.InvalidArgument, match="feed_forward_proj 'gated-gelu-new'"):
        knn.zoo.create_model("t5", **dict(T5, feed_forward_proj="gated-gelu-new"))
    with pytest.raises(kiln.errors.Unsupported, match="feed_forward_proj 'swiglu'"):
        knn.zoo.create_model("t5", **dict(T5, feed_forward_proj="swiglu"))
    with pytest.raises(kiln.errors.InvalidArgument, match="relative_attention_max_distance"):
        knn.zoo.create_model("t5", **dict(T5, relative_attention_max_distance=4))
    with pytest.raises(kiln.errors.InvalidArgument, match="pad_token_id 60 is not below vocab_size 60"):
        knn.zoo.create_model("bart", **dict(BART, pad_token_id=60))
    with pytest.raises(kiln.errors.ShapeError, match="d_model .32. is not a multiple of decoder_attention_heads .5."):
        knn.zoo.create_model("bart", **dict(BART, decoder_attention_heads=5))
    _, model = reference("bart")
    b = batch(BART, seed=1)
    with pytest.raises(kiln.errors.InvalidArgument, match="takes 3 inputs .input_ids, attention_mask, decoder_input"):
        model(b["input_ids"], b["attention_mask"])
    with pytest.raises(kiln.errors.DTypeError, match="decoder_input_ids.*must be int64"):
        model(b["input_ids"], b["attention_mask"], b["decoder_input_ids"].astype(np.float32))
    with pytest.raises(kiln.errors.ShapeError, match="input 1 .* attention_mask. must have rank 2, got 1"):
        model(b["input_ids"], b["attention_mask"][0], b["decoder_input_ids"])
    with pytest.raises(kiln.errors.ShapeError, match="sequence length 41 exceeds max_position_embeddings 40"):
        model(np.ones((1, 41), np.int64), np.ones((1, 41), np.int64), np.ones((1, 2), np.int64))
    # The Trainer names what a dataset without decoder_input_ids lacks.
    items = [{"input_ids": b["input_ids"][0], "attention_mask": b["attention_mask"][0], "labels": b["labels"][0]}] * 4
    args = kiln.TrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to="none", save_strategy="no")
    with pytest.raises(kiln.errors.InvalidArgument, match="DataCollatorForSeq2Seq.*makes decoder_input_ids"):
        kiln.Trainer(model=model, args=args, train_dataset=items)


def test_save_pretrained_folders_load_back_through_auto_model_for_seq2seq_lm(tmp_path):
    import json
    for case in ("bart", "t5_gated_untied"):
        ref, model = reference(case)
        model.save_pretrained(tmp_path / case)
        config = json.loads((tmp_path / case / "config.json").read_text())
        assert config["architectures"] == [{"bart": "BartForConditionalGeneration",
                                            "t5": "T5ForConditionalGeneration"}[CASES[case][0]]]
        # HF's config fields Kiln does not read stay in the folder's config and do not disturb it.
        config.update(encoder_layerdrop=0.0, classifier_dropout=0.0, transformers_version="4.30.0")
        (tmp_path / case / "config.json").write_text(json.dumps(config))
        again = kiln.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / case).eval()
        b = batch(CASES[case][1], seed=3)
        inputs = [b[n] for n in ("input_ids", "attention_mask", "decoder_input_ids")]
        np.testing.assert_array_equal(np.asarray(again(*inputs)), np.asarray(model(*inputs)))
        assert again.generation_config.decoder_start_token_id == CASES[case][1]["decoder_start_token_id"]
    with pytest.raises(kiln.errors.InvalidArgument, match="not a causal-lm model"):
        kiln.AutoModelForCausalLM.from_pretrained(tmp_path / "bart")


@pytest.mark.parametrize("case", ["bart", "t5"])
def test_the_block_cache_plans_once_per_block_past_64_tokens(case):
    """70 new tokens: the zoo's decoder with past is fed a 64-slot block, then a 128-slot one (two
    plans), and the tokens still equal torch's greedy loop over its growing cache."""
    name, config, make = CASES[case]
    if name == "bart":
        config = dict(config, max_position_embeddings=80)
    CASES["_long"] = (name, config, make)
    try:
        ref, model = reference("_long")
    finally:
        del CASES["_long"]
    b = batch(config, seed=9, source=6, rows=2)
    steps = 70
    got = model.generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=steps, eos_token_id=None,
                         forced_eos_token_id=None)
    want = torch_greedy(ref, b["input_ids"], b["attention_mask"], config["decoder_start_token_id"], steps)
    np.testing.assert_array_equal(got, want)
    lm = model.__dict__["_kiln_generation_lm"][1]
    assert lm._lm.decoder_with_past_plans == 2


def test_a_decoder_with_past_takes_kilns_two_cache_inputs_together():
    """decoder_attention_mask without decoder_position_ids (here made a constant of the graph) is
    refused: a block cache needs both."""
    from kiln._core import core
    _, model = reference("bart")
    parts = [core.nn.zoo_export_bytes("bart", dict(BART, part=p), model._cmod)
             for p in ("encoder", "decoder", "decoder_with_past")]
    with_past = onnx.load_from_string(parts[2])
    positions = next(i for i in with_past.graph.input if i.name == "decoder_position_ids")
    with_past.graph.input.remove(positions)
    with_past.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros((1, 1), np.int64),
                                                                    "decoder_position_ids"))
    with pytest.raises(kiln.errors.InvalidArgument, match="decoder_attention_mask and decoder_position_ids together"):
        kiln.generation.Seq2SeqLM(parts[0], parts[1], with_past.SerializeToString())
