"""HF's optimizer hooks in kiln.Trainer (kiln/trainer_optimizers.py), each against a plain PyTorch
loop over the same batches (sequential sampling, gradients clipped to norm 1.0 as the Trainer does)
with the same torch optimizer and scheduler: per-step losses within 1e-4 relative and final weights
within 1e-4 (assert_trainer_matches). Covered: optimizers=(AdamW with HF's decay / no-decay groups,
a linear warm-up LambdaLR), optim="adagrad" with optim_args, optimizer_cls_and_kwargs (SGD with
momentum), create_optimizer and create_scheduler overrides (Adagrad, StepLR), a `log` override,
and the clear errors for what Kiln does not run."""
import copy

import numpy as np
import pytest
import torch
from kiln_package import import_kiln
from training_parity import assert_trainer_matches

import_kiln()
import kiln  # noqa: E402

N, BATCH, EPOCHS = 48, 8, 2
STEPS = EPOCHS * N // BATCH


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(5, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.norm(self.fc1(x))))


def items():
    g = np.random.default_rng(0)
    x = g.standard_normal((N, 5)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 1).astype(np.int64)
    return [{"x": xi, "labels": int(yi)} for xi, yi in zip(x, y)]


def arguments(tmp_path, **more):
    values = dict(per_device_train_batch_size=BATCH, num_train_epochs=EPOCHS, logging_steps=1, save_strategy="no",
                  report_to=[], disable_tqdm=True, train_sampling_strategy="sequential", learning_rate=1e-2)
    values.update(more)
    return kiln.TrainingArguments(str(tmp_path / "run"), **values)


def torch_loop(model, optimizer, scheduler=None):
    data = items()
    losses = []
    for _ in range(EPOCHS):
        for b in range(0, N, BATCH):
            x = torch.from_numpy(np.stack([d["x"] for d in data[b:b + BATCH]]))
            y = torch.tensor([d["labels"] for d in data[b:b + BATCH]])
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            losses.append(loss.item())
    return losses


def hf_groups(model, weight_decay):
    """HF's create_optimizer grouping: no weight decay on biases and LayerNorm weights."""
    no_decay = [n for n, _ in model.named_parameters() if n.endswith("bias") or n.startswith("norm.")]
    return [{"params": [p for n, p in model.named_parameters() if n not in no_decay], "weight_decay": weight_decay},
            {"params": [p for n, p in model.named_parameters() if n in no_decay], "weight_decay": 0.0}]


def linear_warmup(optimizer, warmup, total):
    def factor(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def test_optimizers_argument_adamw_groups_and_a_lambda_schedule(tmp_path):
    model, reference = Net(), Net()
    opt = torch.optim.AdamW(hf_groups(model, 0.1), lr=3e-2, betas=(0.8, 0.99), eps=1e-7)
    sched = linear_warmup(opt, 3, STEPS)
    ref_opt = torch.optim.AdamW(hf_groups(reference, 0.1), lr=3e-2, betas=(0.8, 0.99), eps=1e-7)
    want = torch_loop(reference, ref_opt, linear_warmup(ref_opt, 3, STEPS))
    trainer = kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=items(), optimizers=(opt, sched))
    trainer.train()
    assert_trainer_matches(trainer, model, reference, want)
    rates = [e["learning_rate"] for e in trainer.state.log_history if "learning_rate" in e]
    assert rates[0] == pytest.approx(3e-2 / 3) and rates[-1] == pytest.approx(0.0, abs=1e-12)


def test_optim_adagrad_with_optim_args(tmp_path):
    model, reference = Net(), Net()
    args = arguments(tmp_path, optim="adagrad", optim_args="lr_decay=0.01,initial_accumulator_value=0.1",
                     weight_decay=0.05, lr_scheduler_type="constant")
    ref_opt = torch.optim.Adagrad(hf_groups(reference, 0.05), lr=1e-2, lr_decay=0.01, initial_accumulator_value=0.1)
    want = torch_loop(reference, ref_opt)
    trainer = kiln.Trainer(model=model, args=args, train_dataset=items())
    trainer.train()
    assert_trainer_matches(trainer, model, reference, want)
    with pytest.raises(ValueError, match="'betas' is not an argument of torch.optim.Adagrad"):
        arguments(tmp_path, optim="adagrad", optim_args="betas=1")
    with pytest.raises(ValueError, match="lr_decay=fast is not a number >= 0"):
        arguments(tmp_path, optim="adagrad", optim_args="lr_decay=fast")
    with pytest.raises(ValueError, match="'x' is not key=value"):
        arguments(tmp_path, optim="adagrad", optim_args="x")
    with pytest.raises(NotImplementedError, match="optim_args for optim='adagrad' only"):
        arguments(tmp_path, optim_args="lr_decay=1")


def test_optimizer_cls_and_kwargs(tmp_path):
    model, reference = Net(), Net()
    args = arguments(tmp_path, lr_scheduler_type="constant", learning_rate=0.05)
    ref_opt = torch.optim.SGD(hf_groups(reference, 0.0), lr=0.05, momentum=0.9, nesterov=True)
    want = torch_loop(reference, ref_opt)
    trainer = kiln.Trainer(model=model, args=args, train_dataset=items(),
                           optimizer_cls_and_kwargs=(torch.optim.SGD, {"momentum": 0.9, "nesterov": True}))
    trainer.train()
    assert_trainer_matches(trainer, model, reference, want)
    assert isinstance(trainer.optimizer, torch.optim.SGD)


def test_create_optimizer_and_create_scheduler_overrides(tmp_path):
    class MyTrainer(kiln.Trainer):
        def create_optimizer(self):
            self.optimizer = torch.optim.Adagrad(self.model.parameters(), lr=0.1)
            return self.optimizer

        def create_scheduler(self, num_training_steps, optimizer=None):
            self.seen_steps = num_training_steps
            self.lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
            return self.lr_scheduler

    model, reference = Net(), Net()
    ref_opt = torch.optim.Adagrad(reference.parameters(), lr=0.1)
    want = torch_loop(reference, ref_opt, torch.optim.lr_scheduler.StepLR(ref_opt, step_size=4, gamma=0.5))
    trainer = MyTrainer(model=model, args=arguments(tmp_path), train_dataset=items())
    trainer.train()
    assert trainer.seen_steps == STEPS
    assert_trainer_matches(trainer, model, reference, want)


def test_a_log_override_sees_the_loops_logs(tmp_path):
    class Logging(kiln.Trainer):
        def log(self, logs, start_time=None):
            logs = dict(logs)
            if "loss" in logs:
                logs["loss_x2"] = 2 * logs["loss"]
            if "eval_loss" in logs:
                logs["custom_eval"] = 1.0
            super().log(logs, start_time)

    trainer = Logging(model=Net(), args=arguments(tmp_path), train_dataset=items(), eval_dataset=items())
    trainer.train()
    trainer.evaluate()
    steps = [e for e in trainer.state.log_history if "loss" in e]
    assert len(steps) == STEPS and all(e["loss_x2"] == 2 * e["loss"] for e in steps)
    assert trainer.state.log_history[-1]["custom_eval"] == 1.0

    class Silent(kiln.Trainer):
        def log(self, logs, start_time=None):
            pass

    quiet = Silent(model=Net(), args=arguments(tmp_path / "q"), train_dataset=items())
    quiet.train()
    assert not any("loss" in e for e in quiet.state.log_history)


def test_what_kiln_does_not_run_is_a_clear_error(tmp_path):
    model = Net()
    cases = [
        (torch.optim.Adam(model.parameters(), weight_decay=0.1), "L2"),
        (torch.optim.AdamW(model.parameters(), amsgrad=True), "amsgrad"),
        (torch.optim.RMSprop(model.parameters()), "RMSprop is not one of the optimizers"),
        (torch.optim.SGD([{"params": [model.fc1.weight], "lr": 0.1}, {"params": [model.fc2.weight], "lr": 0.2}],
                         lr=0.1), "differ in weight_decay only"),
    ]
    for optimizer, message in cases:
        with pytest.raises(NotImplementedError, match=message):
            kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=items(), optimizers=(optimizer, None))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = kiln.Trainer(model=copy.deepcopy(model), args=arguments(tmp_path), train_dataset=items(),
                           optimizers=(opt, torch.optim.lr_scheduler.ReduceLROnPlateau(opt)))
    with pytest.raises(NotImplementedError, match="ReduceLROnPlateau steps on a metric"):
        trainer.train()
    with pytest.raises(RuntimeError, match="incompatible"):
        kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=items(), optimizers=(opt, None),
                     optimizer_cls_and_kwargs=(torch.optim.SGD, {}))
