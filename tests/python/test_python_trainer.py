"""kiln.Trainer as a drop-in for transformers.Trainer: an HF-style script (torch MLP exported to
ONNX, numpy list-of-dict datasets, compute_metrics over EvalPrediction), the order of callback
events against the order HF's loop documents, steering by a returned TrainerControl, early
stopping on a plateau, exceptions leaving train() as themselves, argument and dataset errors, and
the callback list operations."""
import math
import warnings

import numpy as np
import pytest
import torch
from kiln_package import import_kiln
from torch import nn

kiln = import_kiln()

N_FEATURES, N_CLASSES = 8, 4


class SmallMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(N_FEATURES, 32), nn.ReLU(), nn.Linear(32, N_CLASSES))

    def forward(self, x):
        return self.net(x)


def export_mlp(path, seed=0):
    """The MLP as a forward ONNX model with a dynamic batch: input "input" [B, 8], output "logits"."""
    torch.manual_seed(seed)
    module = SmallMLP().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(module, (torch.zeros(2, N_FEATURES),), str(path), input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                          opset_version=17, do_constant_folding=False)
    return str(path)


def blobs(n, seed):
    """Four well-separated Gaussian clusters, as HF's "list of dicts" of numpy values."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(123).standard_normal((N_CLASSES, N_FEATURES)).astype(np.float32) * 4
    labels = rng.integers(0, N_CLASSES, size=n)
    x = centers[labels] + rng.standard_normal((n, N_FEATURES)).astype(np.float32) * 0.5
    return [{"input": x[i].astype(np.float32), "labels": np.int64(labels[i])} for i in range(n)]


def compute_accuracy(eval_pred):
    predictions, labels = eval_pred  # HF's tuple unpacking
    assert eval_pred.inputs is None
    return {"accuracy": float((np.argmax(predictions, axis=-1) == labels).mean())}


def quiet_args(tmp_path, **kwargs):
    base = dict(report_to="none", disable_tqdm=True, save_strategy="no", per_device_train_batch_size=16,
                per_device_eval_batch_size=32)
    base.update(kwargs)
    return kiln.TrainingArguments(output_dir=str(tmp_path / "run"), **base)


@pytest.fixture(scope="module")
def mlp_path(tmp_path_factory):
    return export_mlp(tmp_path_factory.mktemp("model") / "mlp.onnx")


# ---- (a) an HF-style script ----------------------------------------------------------------------

def test_hf_style_script_learns_a_separable_set(mlp_path, tmp_path):
    # --- as written for transformers.Trainer, with `from kiln import ...` ---
    from kiln import EvalPrediction, Trainer, TrainingArguments  # noqa: F401

    train_dataset, eval_dataset = blobs(256, seed=1), blobs(128, seed=2)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), num_train_epochs=5, learning_rate=1e-2,
                             per_device_train_batch_size=16, per_device_eval_batch_size=32, logging_steps=5,
                             eval_strategy="epoch", save_strategy="no", report_to="none", disable_tqdm=True)
    trainer = Trainer(model=mlp_path, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                      compute_metrics=compute_accuracy)
    result = trainer.train()
    metrics = trainer.evaluate()
    # ---

    assert isinstance(result, kiln.TrainOutput)
    assert result.global_step == 5 * (256 // 16) == trainer.state.global_step
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 80 // 5
    assert losses[-1] < 0.2 * losses[0], losses  # the loss falls
    assert math.isfinite(result.training_loss) and result.training_loss < losses[0]
    assert metrics["eval_accuracy"] > 0.9, metrics  # chance is 0.25
    assert set(metrics) >= {"eval_loss", "eval_accuracy"}
    evals = [e for e in trainer.state.log_history if "eval_accuracy" in e]
    # eval_strategy "epoch": one evaluation per epoch, then the one evaluate() made
    assert [e["epoch"] for e in evals] == [1.0, 2.0, 3.0, 4.0, 5.0, 5.0]

    out = trainer.predict(eval_dataset)
    assert isinstance(out, kiln.PredictionOutput)
    assert out.predictions.shape == (128, N_CLASSES) and out.label_ids.shape == (128,)
    labels = np.array([item["labels"] for item in eval_dataset])
    np.testing.assert_array_equal(out.label_ids, labels)
    assert out.metrics["test_accuracy"] == pytest.approx(metrics["eval_accuracy"], abs=0)


def test_model_proto_dict_of_columns_and_a_python_sequence_train_alike(mlp_path, tmp_path):
    import onnx

    items = blobs(64, seed=3)

    class MapDataset:  # a torch-style map dataset: read item by item through Python
        def __len__(self):
            return len(items)

        def __getitem__(self, i):
            return items[i]

    columns = {"input": np.stack([it["input"] for it in items]), "labels": np.array([it["labels"] for it in items])}
    losses = []
    for dataset, model in [(items, mlp_path), (MapDataset(), onnx.load(mlp_path)), (columns, mlp_path)]:
        trainer = kiln.Trainer(model=model, args=quiet_args(tmp_path, max_steps=6), train_dataset=dataset)
        losses.append(trainer.train().training_loss)
    # The same items in the same seeded order: the same run, bit for bit.
    assert losses[0] == losses[1] == losses[2], losses


# ---- (b) the order of events ---------------------------------------------------------------------

EVENTS = ["on_init_end", "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_step_begin",
          "on_pre_optimizer_step", "on_optimizer_step", "on_substep_end", "on_step_end", "on_evaluate",
          "on_predict", "on_save", "on_log", "on_prediction_step"]


class Recorder(kiln.TrainerCallback):
    """Records (event, state.global_step) for every event; no super().__init__() (HF needs none)."""

    def __init__(self):
        self.events = []

    def __getattribute__(self, name):
        if name in EVENTS:
            def record(args, state, control, **kwargs):
                assert isinstance(args, kiln.TrainingArguments)
                assert isinstance(control, kiln.TrainerControl)
                self.events.append((name, state.global_step))
            return record
        return object.__getattribute__(self, name)


def hf_event_order(n_train, batch_size, accum, epochs, logging_steps, eval_steps, save_steps, eval_batches):
    """The events HF's Trainer._inner_training_loop fires with DefaultFlowCallback, as
    (event, global_step), for a dataset whose batches fill whole accumulation groups."""
    batches = math.ceil(n_train / batch_size)
    max_steps = batches // accum * epochs
    events = [("on_init_end", 0), ("on_train_begin", 0)]
    step = last_logged = 0
    stop = False
    for _ in range(epochs):
        events.append(("on_epoch_begin", step))
        for b in range(batches):
            if b % accum == 0:
                events.append(("on_step_begin", step))
            if (b + 1) % accum != 0:
                events.append(("on_substep_end", step))
                continue
            events += [("on_pre_optimizer_step", step), ("on_optimizer_step", step)]
            step += 1
            events.append(("on_step_end", step))
            stop = step >= max_steps
            should_log = step % logging_steps == 0
            should_evaluate = step % eval_steps == 0
            should_save = step % save_steps == 0 or stop  # save_strategy "steps" also saves at the end
            if should_log and step > last_logged:
                events.append(("on_log", step))
                last_logged = step
            if should_evaluate:  # evaluate(): a step per batch, the metrics logged, on_evaluate
                events += [("on_prediction_step", step)] * eval_batches + [("on_log", step), ("on_evaluate", step)]
            if should_save:
                events.append(("on_save", step))
            if stop:
                break
        events.append(("on_epoch_end", step))
        if stop:
            break
    events += [("on_log", step), ("on_train_end", step)]  # the run's summary, then the end
    return events


def test_events_follow_hf_order_with_accumulation_eval_and_save(mlp_path, tmp_path):
    recorder = Recorder()
    args = quiet_args(tmp_path, per_device_train_batch_size=2, per_device_eval_batch_size=2,
                      gradient_accumulation_steps=2, num_train_epochs=2, logging_steps=2, eval_strategy="steps",
                      eval_steps=2, save_strategy="steps", save_steps=3)
    trainer = kiln.Trainer(model=mlp_path, args=args, train_dataset=blobs(8, seed=4), eval_dataset=blobs(3, seed=5),
                           callbacks=[recorder])
    trainer.train()
    expected = hf_event_order(n_train=8, batch_size=2, accum=2, epochs=2, logging_steps=2, eval_steps=2,
                              save_steps=3, eval_batches=2)
    assert recorder.events == expected
    assert (tmp_path / "run" / "checkpoint-3").is_dir() and (tmp_path / "run" / "checkpoint-4").is_dir()


def test_events_receive_hf_keyword_arguments(mlp_path, tmp_path):
    seen = {}

    class Kwargs(kiln.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            seen.setdefault("on_log", (dict(logs), set(kwargs)))

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            seen["on_evaluate"] = dict(metrics)

        def on_step_end(self, args, state, control, model=None, lr_scheduler=None, train_dataloader=None, **kwargs):
            seen["on_step_end"] = (model, lr_scheduler.get_last_lr(), len(train_dataloader), args.learning_rate)

    trainer = kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path, max_steps=2, logging_steps=1, learning_rate=0.5,
                                                           lr_scheduler_type="constant"),
                           train_dataset=blobs(32, seed=6), eval_dataset=blobs(8, seed=7), callbacks=[Kwargs])
    trainer.train()
    trainer.evaluate()
    logs, kwargs = seen["on_log"]
    assert list(logs)[:1] == ["loss"] and logs["learning_rate"] == pytest.approx(0.5, rel=1e-6)
    assert {"model", "optimizer", "lr_scheduler", "train_dataloader", "eval_dataloader"} <= kwargs
    assert "eval_loss" in seen["on_evaluate"]
    model, lr, n_batches, learning_rate = seen["on_step_end"]
    assert model == mlp_path and lr == [pytest.approx(0.5, rel=1e-6)] and n_batches == 32 // 16
    assert learning_rate == 0.5


def test_the_gil_is_released_while_training(mlp_path, tmp_path):
    """A Python thread runs while train() is inside the C++ loop; a callback that overrides only
    on_train_begin / on_train_end is not called (and takes no GIL) for the other events."""
    import threading

    inside = threading.Event()
    finished = threading.Event()

    class Bracket(kiln.TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            inside.set()

        def on_train_end(self, args, state, control, **kwargs):
            inside.clear()
            finished.set()

    trainer = kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path, max_steps=300, per_device_train_batch_size=64),
                           train_dataset=blobs(512, seed=20), callbacks=[Bracket()])
    thread = threading.Thread(target=trainer.train)
    thread.start()
    counted = 0
    while not finished.is_set():
        if inside.is_set():
            counted += 1
    thread.join()
    assert trainer.state.global_step == 300
    assert counted > 100  # 0 if train() held the GIL from on_train_begin to on_train_end


# ---- (c) a callback steering the loop ------------------------------------------------------------

def test_returned_control_stops_training_at_that_step(mlp_path, tmp_path):
    class StopAtThree(kiln.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                return kiln.TrainerControl(should_training_stop=True)
            return None

    trainer = kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path, max_steps=20), train_dataset=blobs(64, seed=8),
                           callbacks=[StopAtThree()])
    out = trainer.train()
    assert out.global_step == 3 == trainer.state.global_step
    assert trainer.state.max_steps == 20


def test_control_flag_set_in_place_reaches_the_loop(mlp_path, tmp_path):
    class EpochStop(kiln.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_epoch_stop = True  # one update per epoch (the loop resets it at epoch begin)

    trainer = kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path, num_train_epochs=3),
                           train_dataset=blobs(64, seed=9), callbacks=[EpochStop])
    assert trainer.train().global_step == 3  # not 3 epochs x 4 updates


# ---- (d) early stopping --------------------------------------------------------------------------

def test_early_stopping_stops_a_plateau_after_patience_evaluations(mlp_path, tmp_path):
    patience = 2
    args = quiet_args(tmp_path, learning_rate=0.0, max_steps=50, eval_strategy="steps", eval_steps=1,
                      save_strategy="steps", save_steps=1, load_best_model_at_end=True,
                      metric_for_best_model="loss", save_total_limit=1)
    early = kiln.EarlyStoppingCallback(early_stopping_patience=patience)
    trainer = kiln.Trainer(model=mlp_path, args=args, train_dataset=blobs(32, seed=10),
                           eval_dataset=blobs(16, seed=11), callbacks=[early])
    out = trainer.train()
    # Evaluation 1 sets the best metric; 2 .. patience+1 do not improve on it (lr 0: equal losses).
    assert out.global_step == patience + 1
    eval_losses = [e["eval_loss"] for e in trainer.state.log_history if "eval_loss" in e]
    assert len(eval_losses) == patience + 1 and len(set(eval_losses)) == 1
    assert early.early_stopping_patience_counter == patience


# ---- (e) exceptions ------------------------------------------------------------------------------

class StepTwoError(Exception):
    pass


def test_exception_in_a_callback_leaves_train_as_itself(mlp_path, tmp_path):
    class Boom(kiln.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise StepTwoError(f"boom at step {state.global_step}")

    trainer = kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path, max_steps=5), train_dataset=blobs(64, seed=12),
                           callbacks=[Boom()])
    with pytest.raises(StepTwoError, match=r"^boom at step 2$") as info:
        trainer.train()
    assert type(info.value) is StepTwoError
    assert trainer.state.global_step == 2


def test_exception_in_compute_metrics_and_bad_metrics(mlp_path, tmp_path):
    def failing(eval_pred):
        raise KeyError("no such metric")

    trainer = kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path), eval_dataset=blobs(8, seed=13),
                           compute_metrics=failing)
    with pytest.raises(KeyError, match="no such metric") as info:
        trainer.evaluate()
    assert type(info.value) is KeyError

    trainer = kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path), eval_dataset=blobs(8, seed=13),
                           compute_metrics=lambda p: {"name": "text"})
    with pytest.raises(TypeError, match="compute_metrics returned 'name'"):
        trainer.evaluate()


# ---- (f) errors ----------------------------------------------------------------------------------

def test_training_arguments_errors():
    with pytest.raises(TypeError, match="unexpected keyword argument 'learning_rat'"):
        kiln.TrainingArguments(output_dir="x", learning_rat=1e-3)
    with pytest.raises(ValueError, match="bogus"):
        kiln.TrainingArguments(output_dir="x", eval_strategy="bogus")
    args = kiln.TrainingArguments(output_dir="x", learning_rate=3e-4)
    assert args.learning_rate == 3e-4 and args.to_dict()["learning_rate"] == 3e-4
    assert kiln.TrainingArguments().output_dir == "trainer_output"  # HF v5's default
    args.num_train_epochs = 7
    assert args.to_dict()["num_train_epochs"] == 7
    with pytest.raises(AttributeError):
        args.no_such_field = 1
    import json
    assert json.loads(args.to_json_string())["learning_rate"] == 3e-4


def test_dataset_errors_name_the_column_and_item(mlp_path, tmp_path):
    items = blobs(16, seed=14)
    renamed = [{"x": it["input"], "labels": it["labels"]} for it in items]
    with pytest.raises(ValueError, match=r"train_dataset lacks the column\(s\) \['input'\]"):
        kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path), train_dataset=renamed)

    ragged = list(items)
    ragged[5] = {"input": np.zeros(3, np.float32), "labels": np.int64(0)}
    with pytest.raises(kiln.ShapeError, match=r"column 'input' of train_dataset\[5\] has shape \[3\]"):
        kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path), train_dataset=ragged)

    mixed = list(items)
    mixed[7] = {"input": items[7]["input"].astype(np.float64), "labels": np.int64(0)}
    with pytest.raises(TypeError, match=r"column 'input' of train_dataset\[7\] has dtype float64"):
        kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path), train_dataset=mixed)

    missing = list(items)
    missing[2] = {"input": items[2]["input"]}
    with pytest.raises(ValueError, match=r"train_dataset\[2\] has columns \['input'\].*missing \['labels'\]"):
        kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path), train_dataset=missing)

    with pytest.raises(RuntimeError, match="model_init should not return None"):
        kiln.Trainer(model_init=lambda: None)
    with pytest.raises(NotImplementedError, match="optimizers"):
        kiln.Trainer(model=mlp_path, optimizers=(object(), None))


# ---- (g) the callback list -----------------------------------------------------------------------

def test_add_pop_remove_callback_with_classes_and_instances(mlp_path, tmp_path):
    trainer = kiln.Trainer(model=mlp_path, args=quiet_args(tmp_path))
    names = lambda: [type(cb).__name__ for cb in trainer.callback_handler.callbacks]  # noqa: E731
    assert names() == ["DefaultFlowCallback", "PrinterCallback"]  # disable_tqdm: HF's PrinterCallback

    printer = trainer.pop_callback(kiln.PrinterCallback)
    assert isinstance(printer, kiln.PrinterCallback) and names() == ["DefaultFlowCallback"]
    assert trainer.pop_callback(kiln.PrinterCallback) is None

    trainer.add_callback(kiln.PrinterCallback)  # a class: instantiated
    recorder = Recorder()
    trainer.add_callback(recorder)
    assert names() == ["DefaultFlowCallback", "PrinterCallback", "Recorder"]
    assert trainer.callback_handler.callbacks[2] is recorder
    assert trainer.pop_callback(recorder) is recorder
    assert names() == ["DefaultFlowCallback", "PrinterCallback"]

    trainer.add_callback(recorder)
    trainer.remove_callback(Recorder)  # by class
    trainer.remove_callback(trainer.callback_handler.callbacks[1])  # by instance
    assert names() == ["DefaultFlowCallback"]

    class Patient(kiln.EarlyStoppingCallback):  # a Python subclass of a built-in keeps its type
        pass

    patient = Patient(early_stopping_patience=4)
    trainer.add_callback(patient)
    assert trainer.callback_handler.callbacks[-1] is patient and patient.early_stopping_patience == 4
    assert trainer.pop_callback(kiln.EarlyStoppingCallback) is patient


# ---- a model that computes its own loss (HF's convention), and predict without labels ------------

class MLPWithLoss(nn.Module):
    """As an HF model: forward(input, labels) -> (loss, logits)."""

    def __init__(self):
        super().__init__()
        self.body = SmallMLP()

    def forward(self, x, labels):
        logits = self.body(x)
        return nn.functional.cross_entropy(logits, labels), logits


def test_model_with_its_own_loss_and_unlabelled_predict(tmp_path):
    torch.manual_seed(0)
    path = str(tmp_path / "with_loss.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(MLPWithLoss().eval(), (torch.zeros(2, N_FEATURES), torch.zeros(2, dtype=torch.int64)), path,
                          input_names=["input", "labels"], output_names=["loss", "logits"],
                          dynamic_axes={"input": {0: "batch"}, "labels": {0: "batch"}, "logits": {0: "batch"}},
                          opset_version=17, do_constant_folding=False)
    trainer = kiln.Trainer(model=path, args=quiet_args(tmp_path, num_train_epochs=4, learning_rate=1e-2),
                           train_dataset=blobs(256, seed=1), eval_dataset=blobs(128, seed=2),
                           compute_metrics=compute_accuracy)
    trainer.train()
    metrics = trainer.evaluate()
    # The model's own loss is the eval loss; its second output feeds compute_metrics.
    assert metrics["eval_accuracy"] > 0.9 and metrics["eval_loss"] < 0.5, metrics

    test = blobs(40, seed=3)
    labelled = trainer.predict(test)
    unlabelled = trainer.predict([{"input": d["input"]} for d in test])
    assert unlabelled.label_ids is None and "test_loss" not in unlabelled.metrics
    assert "test_loss" in labelled.metrics
    np.testing.assert_allclose(unlabelled.predictions, labelled.predictions, rtol=0, atol=1e-6)
    assert unlabelled.predictions.shape == (40, N_CLASSES)


class LossOnly(nn.Module):
    """forward(input, labels) -> loss alone: nothing to predict from."""

    def __init__(self):
        super().__init__()
        self.body = SmallMLP()

    def forward(self, x, labels):
        return nn.functional.cross_entropy(self.body(x), labels)


def test_unlabelled_predict_needs_a_prediction_output(tmp_path):
    path = str(tmp_path / "loss_only.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(LossOnly().eval(), (torch.zeros(2, N_FEATURES), torch.zeros(2, dtype=torch.int64)), path,
                          input_names=["input", "labels"], output_names=["loss"],
                          dynamic_axes={"input": {0: "batch"}, "labels": {0: "batch"}}, opset_version=17,
                          do_constant_folding=False)
    trainer = kiln.Trainer(model=path, args=quiet_args(tmp_path, max_steps=2), train_dataset=blobs(32, seed=1))
    with pytest.raises(ValueError, match="no 'labels' column and the model has no prediction output"):
        trainer.predict([{"input": d["input"]} for d in blobs(8, seed=3)])
