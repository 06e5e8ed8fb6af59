"""Hugging Face's optimizer hooks over Kiln's native optimizers: `optimizers=(optimizer, lr_scheduler)`,
`optimizer_cls_and_kwargs`, and subclasses' `create_optimizer` / `create_scheduler` /
`create_optimizer_and_scheduler`.

A torch optimizer is read, not run: its class and hyperparameters choose Kiln's update (the same
arithmetic: docs/ops.md) -- torch.optim.AdamW, Adam (without weight decay, which is AdamW's update),
SGD, Adagrad and transformers' Adafactor, from their first parameter group, with the learning rate of that group (its
`initial_lr` once a scheduler has set it). Groups may differ in weight_decay only (HF's split into
decayed and undecayed parameters): for a torch model the parameters of groups with weight_decay 0
are left undecayed by name, and the others share one weight_decay. Anything else (amsgrad, per-group
learning rates, another optimizer class) is a clear Unsupported.

A torch lr_scheduler is replayed: a copy of it, over a copy of its optimizer holding stand-in
parameters, is stepped to give the rate of each step, which Kiln's loop then uses (so any torch
scheduler that steps once per optimizer step works: LambdaLR and HF's get_*_schedule_with_warmup,
StepLR, OneCycleLR, ...; ReduceLROnPlateau does not).
"""
import copy
import warnings

from kiln.errors import Unsupported


def _torch():
    import torch
    return torch


def _same_except_decay(groups):
    first = groups[0]
    for i, g in enumerate(groups[1:], start=1):
        for key, value in first.items():
            if key in ("params", "weight_decay", "initial_lr"):
                continue
            if g.get(key) != value:
                raise Unsupported(f"optimizers: parameter group {i} has {key}={g.get(key)!r} and group 0 {value!r}; "
                                  "Kiln's parameter groups may differ in weight_decay only")


def optimizer_spec(optimizer, model=None):
    """The model spec's "optimizer" entry (python/src/lr_scheduler_py.cpp reads it) for a torch
    optimizer instance."""
    torch = _torch()
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise Unsupported(f"optimizers: a {type(optimizer).__name__} is not a torch.optim optimizer (Kiln reads "
                          "torch.optim.AdamW, Adam, SGD and Adagrad)")
    groups = optimizer.param_groups
    if not groups:
        raise Unsupported("optimizers: the optimizer has no parameter groups")
    _same_except_decay(groups)
    decays = sorted({float(g.get("weight_decay", 0.0)) for g in groups} - {0.0})
    if len(decays) > 1:
        raise Unsupported(f"optimizers: parameter groups with weight decays {decays}; Kiln applies one weight_decay "
                          "(and none to the groups with 0)")
    weight_decay = decays[0] if decays else 0.0
    g = groups[0]
    name = type(optimizer).__name__
    if isinstance(optimizer, torch.optim.AdamW) or (isinstance(optimizer, torch.optim.Adam) and weight_decay == 0):
        if g.get("amsgrad"):
            raise Unsupported(f"optimizers: {name}(amsgrad=True) is not one of Kiln's updates")
        spec = dict(type="AdamW", beta1=g["betas"][0], beta2=g["betas"][1], eps=g["eps"], weight_decay=weight_decay,
                    maximize=bool(g.get("maximize", False)))
    elif isinstance(optimizer, torch.optim.Adam):
        raise Unsupported("optimizers: torch.optim.Adam with weight_decay adds the decay to the gradient (L2), which "
                          "is not AdamW's decoupled decay; use torch.optim.AdamW (or weight_decay=0)")
    elif isinstance(optimizer, torch.optim.SGD):
        spec = dict(type="SGD", momentum=g["momentum"], dampening=g["dampening"], weight_decay=weight_decay,
                    nesterov=bool(g["nesterov"]), maximize=bool(g.get("maximize", False)))
    elif isinstance(optimizer, torch.optim.Adagrad):
        spec = dict(type="Adagrad", lr_decay=g["lr_decay"], eps=g["eps"], weight_decay=weight_decay,
                    initial_accumulator_value=g.get("initial_accumulator_value", 0.0),
                    maximize=bool(g.get("maximize", False)))
    elif name == "Adafactor" and "decay_rate" in g:  # transformers.optimization.Adafactor
        eps = g.get("eps", (1e-30, 1e-3))
        spec = dict(type="Adafactor", eps1=eps[0], eps2=eps[1], clip_threshold=g.get("clip_threshold", 1.0),
                    decay_rate=g["decay_rate"], beta1=g.get("beta1"), weight_decay=weight_decay,
                    scale_parameter=bool(g.get("scale_parameter", True)),
                    relative_step=bool(g.get("relative_step", True)), warmup_init=bool(g.get("warmup_init", False)))
    else:
        raise Unsupported(f"optimizers: {name} is not one of the optimizers Kiln runs (torch.optim.AdamW, Adam, SGD, "
                          "Adagrad, transformers' Adafactor; or TrainingArguments.optim)")
    lr = g.get("initial_lr", g["lr"])
    if lr is not None:  # None: Adafactor's relative_step, which computes its own
        spec["lr"] = float(lr)
    names = _parameter_names(model)
    if names is not None:
        spec["no_weight_decay"] = [names[id(p)] for grp in groups if float(grp.get("weight_decay", 0.0)) == 0.0
                                   for p in grp["params"] if id(p) in names]
    return spec


def _parameter_names(model):
    torch = _torch()
    if isinstance(model, torch.nn.Module):
        return {id(p): n for n, p in model.named_parameters()}
    return None


def instantiate(optimizer_cls, kwargs, model, args):
    """HF's optimizer_cls_and_kwargs: optimizer_cls(params, **kwargs) with HF's groups (weight_decay
    on all but biases and LayerNorm weights: Kiln applies that rule itself) and lr from kwargs or
    args.learning_rate."""
    torch = _torch()
    kwargs = dict(kwargs or {})
    kwargs.setdefault("lr", args.learning_rate)
    stand_in = [torch.nn.Parameter(torch.zeros(1))]
    decay = kwargs.pop("weight_decay", args.weight_decay)
    optimizer = optimizer_cls([{"params": stand_in, "weight_decay": decay}], **kwargs)
    spec = optimizer_spec(optimizer, None)
    return optimizer, spec


def stand_in_optimizer(args):
    """What HF's self.optimizer would be for schedulers a subclass builds (create_scheduler): an AdamW
    with the arguments' learning rate over a stand-in parameter."""
    torch = _torch()
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)


class ScheduleReplay:
    """lr_at(step): the rate a torch scheduler gives after `step` steps, from a copy of it."""

    def __init__(self, scheduler):
        torch = _torch()
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            raise Unsupported("optimizers: ReduceLROnPlateau steps on a metric; use lr_scheduler_type="
                              "'reduce_lr_on_plateau' (Kiln's, with HF's kwargs)")
        if not hasattr(scheduler, "optimizer") or not hasattr(scheduler, "step"):
            raise Unsupported(f"optimizers: {type(scheduler).__name__} is not a torch lr_scheduler")
        optimizer = scheduler.optimizer
        memo = {id(p): torch.nn.Parameter(torch.zeros(1)) for g in optimizer.param_groups for p in g["params"]}
        memo[id(optimizer.state)] = {}
        self._scheduler = copy.deepcopy(scheduler, memo)
        self._rates = [float(self._scheduler.optimizer.param_groups[0]["lr"])]

    def __call__(self, step):
        while len(self._rates) <= step:
            with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": no optimizer runs
                warnings.simplefilter("ignore")
                self._scheduler.step()
            self._rates.append(float(self._scheduler.optimizer.param_groups[0]["lr"]))
        return self._rates[step]
