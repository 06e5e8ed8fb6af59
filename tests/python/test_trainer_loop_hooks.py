"""HF's loop hooks in kiln.Trainer: a training_step override is traced into the training graph (Kiln
trains on the loss it passes to backward: per-step losses within 1e-4 relative and weights within
1e-4 of a PyTorch loop with the same step), and prediction_step / evaluation_loop overrides run
evaluate(), predict() and train()'s evaluations through the Python loop of kiln/trainer_eval_loop.py,
whose base gives the native loop's figures (loss within 1e-6 relative, predictions within 1e-6)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from kiln_package import import_kiln
from test_trainer_optimizers import EPOCHS, STEPS, N, Net, arguments, items
from training_parity import assert_trainer_matches, hf_trainer_loop

import_kiln()
import kiln  # noqa: E402

DECAY = 1e-3


class HFNet(torch.nn.Module):
    """An HF-style model: forward(x, labels=None) -> {"loss", "logits"}."""

    def __init__(self):
        super().__init__()
        self.net = Net()

    def forward(self, x, labels=None):
        logits = self.net(x)
        if labels is None:
            return {"logits": logits}
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def l2(model):
    return sum((p * p).sum() for p in model.parameters())


class Regularized(kiln.Trainer):
    """The training_step override HF users write: compute_loss plus a penalty, then backward."""

    def training_step(self, model, inputs, num_items_in_batch=None):
        model.train()
        inputs = self._prepare_inputs(inputs)
        loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
        loss = loss + DECAY * l2(model)
        self.accelerator.backward(loss)
        return loss.detach()


def batches(data):
    return [{"x": torch.from_numpy(np.stack([d["x"] for d in data[b:b + 8]])),
             "labels": torch.tensor([d["labels"] for d in data[b:b + 8]])} for b in range(0, len(data), 8)]


class _Penalized(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, **batch):
        return {"loss": self.model(**batch)["loss"] + DECAY * l2(self.model)}


def reference_ce(model, data):
    with torch.no_grad():
        return float(np.mean([model(**b)["loss"].item() for b in batches(data)]))


def test_a_training_step_override_is_what_kiln_trains(tmp_path):
    model, reference = HFNet(), HFNet()
    want = hf_trainer_loop(_Penalized(reference), batches(items()) * EPOCHS, 1e-2, STEPS)
    trainer = Regularized(model=model, args=arguments(tmp_path, weight_decay=0.0), train_dataset=items(),
                          eval_dataset=items())
    trainer.train()
    assert_trainer_matches(trainer, model, reference, want)
    # HF evaluates with compute_loss, not training_step: the penalty is not in eval_loss.
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] == pytest.approx(reference_ce(reference, items()), rel=1e-4)


def test_training_step_errors(tmp_path):
    class NoBackward(kiln.Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            return self.compute_loss(model, inputs).detach()

    with pytest.raises(ValueError, match="NoBackward.training_step.*called no backward"):
        NoBackward(model=HFNet(), args=arguments(tmp_path), train_dataset=items())

    class NotScalar(kiln.Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            model(**inputs)["logits"].backward(torch.ones(8, 3))

    with pytest.raises(ValueError, match="on a tensor of shape \\[1, 3\\]"):
        NotScalar(model=HFNet(), args=arguments(tmp_path), train_dataset=items())
    with pytest.raises(NotImplementedError, match="needs a torch model"):
        Regularized(model="mlp", args=arguments(tmp_path), train_dataset=items())


class Probabilities(kiln.Trainer):
    calls = 0

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        type(self).calls += 1
        loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        return loss, (None if logits is None else torch.softmax(logits, -1)), labels


def accuracy(p):
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean()),
            "row_sum": float(p.predictions.sum(-1).mean())}


def test_a_prediction_step_override_runs_evaluate_predict_and_trains_evaluations(tmp_path):
    args = arguments(tmp_path, eval_strategy="steps", eval_steps=3)
    trainer = Probabilities(model=Net(), args=args, train_dataset=items(), eval_dataset=items(),
                            compute_metrics=accuracy)
    plain = kiln.Trainer(model=Net(), args=arguments(tmp_path / "plain", eval_strategy="steps", eval_steps=3),
                         train_dataset=items(), eval_dataset=items(), compute_metrics=accuracy)
    trainer.train()
    plain.train()
    evals = [e for e in trainer.state.log_history if "eval_loss" in e]
    native = [e for e in plain.state.log_history if "eval_loss" in e]
    assert len(evals) == len(native) == STEPS // 3
    assert Probabilities.calls == len(evals) * (N // 8)
    for got, want in zip(evals, native):
        assert got["eval_loss"] == pytest.approx(want["eval_loss"], rel=1e-6)
        assert got["eval_accuracy"] == want["eval_accuracy"]
        assert got["eval_row_sum"] == pytest.approx(1.0, abs=1e-5)  # what the override returned
        assert want["eval_row_sum"] != pytest.approx(1.0, abs=1e-3)
    out = trainer.predict(items())
    base = plain.predict(items())
    np.testing.assert_allclose(out.predictions, torch.softmax(torch.from_numpy(base.predictions), -1).numpy(),
                               atol=1e-6)
    np.testing.assert_array_equal(out.label_ids, base.label_ids)
    assert out.metrics["test_loss"] == pytest.approx(base.metrics["test_loss"], rel=1e-6)
    assert out.metrics["test_accuracy"] == base.metrics["test_accuracy"]


class CountingLoop(kiln.Trainer):
    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                        metric_key_prefix="eval"):
        out = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        out.metrics[f"{metric_key_prefix}_batches"] = len(dataloader)
        out.metrics[f"{metric_key_prefix}_{description.lower()}"] = 1
        return out


class Events(kiln.TrainerCallback):
    def __init__(self):
        self.steps, self.evaluations = 0, []

    def on_prediction_step(self, args, state, control, **kwargs):
        self.steps += 1

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.evaluations.append(dict(metrics))


def test_an_evaluation_loop_override_and_the_base_loop_match_the_native_one(tmp_path):
    events = Events()
    trainer = CountingLoop(model=Net(), args=arguments(tmp_path), train_dataset=items(), eval_dataset=items(),
                           compute_metrics=accuracy, callbacks=[events])
    plain = kiln.Trainer(model=Net(), args=arguments(tmp_path / "plain"), train_dataset=items(),
                         eval_dataset=items(), compute_metrics=accuracy)
    trainer.train()
    plain.train()
    got, want = trainer.evaluate(), plain.evaluate()
    assert got["eval_batches"] == N // 8 and got["eval_evaluation"] == 1
    assert got["eval_loss"] == pytest.approx(want["eval_loss"], rel=1e-6)
    assert got["eval_accuracy"] == want["eval_accuracy"]
    assert events.steps == N // 8 and events.evaluations[-1]["eval_batches"] == N // 8
    assert trainer.state.log_history[-1]["eval_batches"] == N // 8  # logged as the native loop's are
    # Prediction without labels runs the model in torch with the trained weights (Kiln's eval model
    # needs the labels); with them, the eval model.
    unlabelled = [{"x": d["x"]} for d in items()]
    out = trainer.predict(unlabelled)
    assert out.label_ids is None and "test_loss" not in out.metrics and out.metrics["test_prediction"] == 1
    with torch.no_grad():
        want_logits = trainer.model(torch.from_numpy(np.stack([d["x"] for d in items()]))).numpy()
    np.testing.assert_allclose(out.predictions, want_logits, atol=1e-5)
    np.testing.assert_allclose(plain.predict(items()).predictions, want_logits, atol=1e-5)


def test_padded_predictions_are_gathered_with_minus_100():
    from kiln.trainer_eval_loop import _concat
    a, b = np.ones((2, 3), np.int64), np.full((1, 5), 2, np.int64)
    out = _concat(a, b)
    assert out.shape == (3, 5)
    np.testing.assert_array_equal(out[:2, 3:], -100)
    np.testing.assert_array_equal(out[2], 2)
