"""The hooks of Hugging Face's Trainer that a subclass overrides, as kiln.Trainer runs them
(kiln/trainer.py mixes them in): compute_loss and training_step (traced into a torch model's graph),
prediction_step and evaluation_loop (a Python evaluation loop: kiln/trainer_eval_loop.py), the
optimizer and schedule hooks (torch objects read and run natively: kiln/trainer_optimizers.py) and
the dataloader hooks (a subclass's own DataLoader feeds the native loop)."""
from collections.abc import Mapping

from kiln._core import core
from kiln.errors import InvalidArgument
from kiln.trainer_eval_loop import EvaluationLoopHooks


def overrides(trainer, name):
    """Whether the trainer's class replaces Trainer.<name> (HF's subclassing hooks)."""
    from kiln.trainer import Trainer
    return getattr(type(trainer), name) is not getattr(Trainer, name)


class Accelerator:
    """trainer.accelerator, for the calls HF's training_step overrides make: backward(loss) runs
    loss.backward() (which Kiln records while it traces training_step), one process."""

    num_processes = 1
    process_index = 0
    is_main_process = True

    def backward(self, loss, **kwargs):
        loss.backward(**kwargs)

    def gather(self, tensor):
        return tensor

    def unwrap_model(self, model, **kwargs):
        del kwargs
        return model


class TrainerHooks(EvaluationLoopHooks):
    """The overridable hooks (kiln.Trainer's base class)."""

    accelerator = Accelerator()

    # ---- The loss (HF's compute_loss and compute_loss_func) --------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """HF's: the model's own loss (outputs["loss"], or outputs[0]), or compute_loss_func(outputs,
        labels, num_items_in_batch) with the labels popped from the inputs. Kiln traces it (or a
        subclass's override) into the training graph of a torch model (torch.onnx.export over the first
        batch), so the loss it computes is what Kiln trains on; num_items_in_batch is None (Kiln's losses
        are per-batch means)."""
        labels = None
        if self.compute_loss_func is not None and "labels" in inputs:
            inputs = dict(inputs)
            labels = inputs.pop("labels")
        outputs = model(**inputs)
        if labels is not None:
            loss = self.compute_loss_func(outputs, labels, num_items_in_batch=num_items_in_batch)
        elif isinstance(outputs, Mapping):
            if "loss" not in outputs:
                raise ValueError("The model did not return a loss from the inputs, only the following keys: "
                                 f"{','.join(outputs.keys())}. For reference, the inputs it received are "
                                 f"{','.join(inputs.keys())}.")
            loss = outputs["loss"]
        else:
            loss = outputs[0]
        return (loss, outputs) if return_outputs else loss

    def _traces_loss(self):
        return overrides(self, "compute_loss") or overrides(self, "training_step") or \
            self.compute_loss_func is not None

    # ---- The step (HF's training_step, traced) ---------------------------------------------------
    def training_step(self, model, inputs, num_items_in_batch=None):
        """HF's: compute_loss over the batch, then backward. Kiln traces it (or a subclass's override)
        into the training graph of a torch model: the loss trained on is what it passes to backward
        (loss.backward() or self.accelerator.backward(loss); the sum when it calls backward more than
        once), and the graph's outputs for evaluation are the model's first call's. Kiln averages the
        gradients of accumulated micro-batches itself: do not divide by gradient_accumulation_steps."""
        model.train()
        inputs = self._prepare_inputs(inputs)
        loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
        self.accelerator.backward(loss)
        return loss.detach()

    def _traced_training_step(self, model, inputs, return_outputs=True):
        """training_step as compute_loss(model, inputs, return_outputs=True) for the tracer: the loss
        its backward calls received, and the outputs of its first call of the model."""
        import torch
        losses, outputs = [], []

        def record_backward(tensor, gradient=None, retain_graph=None, create_graph=None, inputs=None):
            del retain_graph, create_graph, inputs
            if gradient is not None or any(d != 1 for d in tensor.shape):  # shape, not numel (a traced value)
                raise InvalidArgument(f"{type(self).__name__}.training_step called backward on a tensor of shape "
                                      f"{list(tensor.shape)}: Kiln trains on a scalar loss")
            losses.append(tensor.reshape(()))

        hook = model.register_forward_hook(lambda module, args, out: outputs.append(out))
        original = torch.Tensor.backward
        torch.Tensor.backward = record_backward
        try:
            self.training_step(model, inputs)
        finally:
            torch.Tensor.backward = original
            hook.remove()
        if not losses:
            raise InvalidArgument(f"{type(self).__name__}.training_step(model, inputs) called no backward: Kiln trains "
                                  "on the loss passed to loss.backward() or self.accelerator.backward(loss)")
        loss = losses[0]
        for more in losses[1:]:
            loss = loss + more
        return (loss, outputs[0] if outputs else None) if return_outputs else loss

    # ---- Optimizer and schedule (HF's hooks; kiln/trainer_optimizers.py) -------------------------
    def create_optimizer(self):
        """HF's hook: a subclass returns (and sets as self.optimizer) a torch optimizer, whose class and
        hyperparameters Kiln runs natively. The base returns the `optimizers` one, or None (Kiln's own,
        from TrainingArguments.optim)."""
        return self.optimizer

    def create_scheduler(self, num_training_steps, optimizer=None):
        """HF's hook: a subclass returns (and sets as self.lr_scheduler) a torch lr_scheduler, called
        when training starts; Kiln replays it for each step's rate. The base returns the `optimizers`
        one, or None (TrainingArguments.lr_scheduler_type)."""
        return self.lr_scheduler

    def create_optimizer_and_scheduler(self, num_training_steps):
        self.create_optimizer()
        optimizer = self.optimizer
        self.create_scheduler(num_training_steps=num_training_steps, optimizer=optimizer)

    def _optimizer_spec(self, train):
        """The torch optimizer Kiln is to run, as the model spec's entry (None: TrainingArguments.optim)."""
        from kiln import trainer_optimizers as opt
        if self.optimizer_cls_and_kwargs is not None:
            cls, kwargs = self.optimizer_cls_and_kwargs
            self.optimizer, spec = opt.instantiate(cls, kwargs, self.model, self.args)
            return spec
        if overrides(self, "create_optimizer_and_scheduler"):
            self.create_optimizer_and_scheduler(self._num_training_steps(train))
        elif overrides(self, "create_optimizer"):
            made = self.create_optimizer()
            self.optimizer = made if made is not None else self.optimizer
        return None if self.optimizer is None else opt.optimizer_spec(self.optimizer, self.model)

    def _num_training_steps(self, train):
        """HF's count of optimizer steps: max_steps, else epochs x updates per epoch."""
        import math
        args = self.args
        if args.max_steps and args.max_steps > 0:
            return args.max_steps
        if train is None:
            return 0
        batches = math.ceil(len(train) / (args.per_device_train_batch_size * max(1, args.world_size)))
        return math.ceil(args.num_train_epochs * max(1, batches // args.gradient_accumulation_steps))

    def _schedule(self, base_lr, warmup, total):
        """The scheduler factory the C++ loop calls when training starts: lr_at(step)."""
        del base_lr, warmup
        from kiln import trainer_optimizers as opt
        if overrides(self, "create_scheduler") and not overrides(self, "create_optimizer_and_scheduler"):
            if self.optimizer is None:
                self.optimizer = opt.stand_in_optimizer(self.args)
            made = self.create_scheduler(num_training_steps=total, optimizer=self.optimizer)
            self.lr_scheduler = made if made is not None else self.lr_scheduler
        if self.lr_scheduler is None:
            raise RuntimeError("create_scheduler set no lr_scheduler")
        return opt.ScheduleReplay(self.lr_scheduler)

    @property
    def tokenizer(self):
        """HF's older name of processing_class."""
        return self.processing_class

    # ---- Dataloaders (HF's hooks: a subclass's own DataLoaders feed Kiln's loop) ------------------
    def get_train_dataloader(self):
        """HF's: a torch DataLoader over train_dataset with the data_collator, the train batch size and
        a sampler seeded by data_seed (else seed). Kiln's loop reads its own loader unless a subclass
        overrides this; then it trains on the returned loader's batches, in its order, set_epoch called
        each epoch."""
        import torch
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        generator = torch.Generator()
        generator.manual_seed(int(seed))
        return torch.utils.data.DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size,
                                           sampler=torch.utils.data.RandomSampler(self.train_dataset,
                                                                                  generator=generator),
                                           collate_fn=self.data_collator, drop_last=self.args.dataloader_drop_last)

    def get_eval_dataloader(self, eval_dataset=None):
        """HF's: a sequential torch DataLoader over eval_dataset (default self.eval_dataset)."""
        return self._sequential_loader(eval_dataset if eval_dataset is not None else self.eval_dataset)

    def get_test_dataloader(self, test_dataset):
        return self._sequential_loader(test_dataset)

    def _sequential_loader(self, dataset):
        import torch
        if dataset is None:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        dataset = self._without_unused_columns(dataset, "eval_dataset")  # HF's loaders drop them too
        return torch.utils.data.DataLoader(dataset, batch_size=self.args.per_device_eval_batch_size, shuffle=False,
                                           collate_fn=self.eval_data_collator)

    def _loader_dataset(self, loader):
        from kiln.trainer_data import LoaderBatches
        return core.batches_dataset(LoaderBatches(loader, int(self.args.process_index), max(1, self.args.world_size)))

    def _eval_dataset(self, dataset, what, hook):
        """An evaluation dataset: the subclass's loader's batches when it overrides the hook."""
        if overrides(self, hook):
            if dataset is None and hook == "get_eval_dataloader" and self.eval_dataset is None:
                return None
            loader = self.get_eval_dataloader(dataset) if hook == "get_eval_dataloader" else \
                self.get_test_dataloader(dataset)
            return self._loader_dataset(loader)
        return self._dataset(dataset, what, self.eval_data_collator)

