"""kiln.Seq2SeqTrainer (transformers' Seq2SeqTrainer): predict_with_generate over a zoo GPT-2 taught
to continue periodic sequences (three random tokens repeated). Evaluation generates with the weights
trained so far (the same ids as model.generate on the prompts, padded with the pad token to
max_length as HF pads them),
compute_metrics sees the generated ids, generation arguments come from the TrainingArguments or
the evaluate / predict call, and training makes the copies right."""
import numpy as np
import pytest
from kiln_package import import_kiln

import_kiln()
import kiln  # noqa: E402
from kiln import nn  # noqa: E402
from kiln.seq2seq_trainer import Seq2SeqTrainer, Seq2SeqTrainingArguments  # noqa: E402

VOCAB, PERIOD, LENGTH, NEW = 12, 3, 8, 1  # the positions past LENGTH are never trained


class CopyLM(nn.Module):
    """The zoo GPT-2 with its logits as [batch, vocab, positions] for the Trainer's cross-entropy,
    and its generate."""

    def __init__(self):
        super().__init__()
        self.gpt = nn.zoo.create_model("gpt2", n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=16,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)

    def forward(self, input_ids):
        return self.gpt(input_ids).transpose(1, 2)

    def generate(self, input_ids, **kwargs):
        return self.gpt.generate(input_ids, **kwargs)


def sequences(count, seed):
    """Rows of PERIOD random tokens repeated, LENGTH + NEW + 1 long."""
    rng = np.random.default_rng(seed)
    rows = [np.resize(rng.integers(1, VOCAB, PERIOD), LENGTH + NEW + 1) for _ in range(count)]
    return np.stack(rows).astype(np.int64)


def items(rows):
    return [{"input_ids": r[:LENGTH], "labels": r[1:LENGTH + 1]} for r in rows]


EVAL = sequences(16, 7)


def continuation_accuracy(p):
    """compute_metrics over the generated ids: the NEW tokens after the prompt against the sequence."""
    generated = np.asarray(p.predictions)[:, LENGTH:LENGTH + NEW]
    return {"continuation_accuracy": float((generated == EVAL[:, LENGTH:LENGTH + NEW]).mean())}


def make_trainer(tmp_path, **extra):
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=16,
                                    per_device_eval_batch_size=8, learning_rate=3e-3, max_steps=300,
                                    eval_strategy="no", save_strategy="no", report_to="none", seed=0,
                                    predict_with_generate=True, generation_max_length=LENGTH + NEW, **extra)
    return Seq2SeqTrainer(model=CopyLM(), args=args, train_dataset=items(sequences(512, 0)),
                          eval_dataset=items(EVAL), compute_metrics=continuation_accuracy), items(EVAL)


def test_arguments_have_the_seq2seq_fields():
    args = Seq2SeqTrainingArguments(output_dir="x", predict_with_generate=True, generation_num_beams=3)
    d = args.to_dict()
    assert d["predict_with_generate"] is True and d["generation_num_beams"] == 3 and d["sortish_sampler"] is False
    assert args.learning_rate == 5e-5
    with pytest.raises(ValueError, match="generation_num_beams"):
        Seq2SeqTrainingArguments(output_dir="x", generation_num_beams=0)
    assert kiln.ORTSeq2SeqTrainingArguments(output_dir="x", predict_with_generate=True).predict_with_generate
    assert kiln.graphcore.IPUSeq2SeqTrainingArguments(output_dir="x", predict_with_generate=True).fp16


def test_evaluation_generates_with_the_trained_weights(tmp_path):
    trainer, eval_items = make_trainer(tmp_path)
    before = trainer.evaluate()["eval_continuation_accuracy"]
    trainer.train()
    metrics = trainer.evaluate()
    assert metrics["eval_continuation_accuracy"] > 0.9 > before + 0.3, (before, metrics)
    assert "eval_loss" in metrics
    # predict: the generated ids, as model.generate gives them with the trained weights.
    out = trainer.predict(eval_items)
    prompts = np.stack([e["input_ids"] for e in eval_items])
    want = trainer.model.generate(prompts, max_length=LENGTH + NEW)
    np.testing.assert_array_equal(out.predictions, want)
    assert out.predictions.shape == (16, LENGTH + NEW)
    assert out.label_ids.shape == (16, LENGTH + NEW)  # padded to max_length with the pad token
    # Generation arguments of the call win over the TrainingArguments'.
    short = trainer.predict(eval_items, max_new_tokens=2, num_beams=2)
    assert short.predictions.shape == (16, LENGTH + 2)
    np.testing.assert_array_equal(short.predictions,
                                  trainer.model.generate(prompts, max_new_tokens=2, num_beams=2))


def test_without_predict_with_generate_the_native_loop_evaluates(tmp_path):
    trainer, eval_items = make_trainer(tmp_path, generation_num_beams=2)
    trainer.args.predict_with_generate = False
    native = Seq2SeqTrainer(model=trainer.model, args=trainer.args, train_dataset=items(sequences(64, 0)),
                            eval_dataset=eval_items)
    assert not native._evaluation_overridden()
    metrics = native.evaluate()
    assert "eval_loss" in metrics and "eval_continuation_accuracy" not in metrics


def test_unknown_generation_arguments_are_refused_by_name(tmp_path):
    trainer, eval_items = make_trainer(tmp_path)
    with pytest.raises(TypeError, match=r"unknown generation arguments \['num_beam'\]"):
        trainer.evaluate(num_beam=2)
    with pytest.raises(TypeError, match=r"unknown generation arguments \['max_tokens'\]"):
        trainer.predict(eval_items, max_tokens=3)
