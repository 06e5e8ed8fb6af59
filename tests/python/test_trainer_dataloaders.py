"""HF's get_train_dataloader / get_eval_dataloader / get_test_dataloader overrides: Kiln's native
loop trains and evaluates on the subclass's own DataLoader, batch for batch and in its order, with
set_epoch called each epoch (the per-step losses equal a PyTorch loop over the same batches within
1e-4 relative), a resumed run replays the loader to the same losses, and evaluation covers the
loader's batches. The base methods return HF-style torch DataLoaders."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from kiln_package import import_kiln
from test_trainer_compute_loss import _WithLoss
from test_trainer_optimizers import EPOCHS, STEPS, N, Net, arguments, items
from training_parity import assert_trainer_matches, hf_trainer_loop

import_kiln()
import kiln  # noqa: E402


class EpochSampler(torch.utils.data.Sampler):
    """A permutation per epoch, drawn from the epoch number (a distributed sampler's contract)."""

    def __init__(self, n):
        self.n, self.epoch, self.epochs = n, 0, []

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.epochs.append(epoch)

    def __iter__(self):
        return iter(np.random.default_rng(self.epoch).permutation(self.n).tolist())

    def __len__(self):
        return self.n


def collate(features):
    return {"x": torch.from_numpy(np.stack([f["x"] for f in features])),
            "labels": torch.tensor([f["labels"] for f in features])}


class OwnLoader(kiln.Trainer):
    def get_train_dataloader(self):
        self.sampler = EpochSampler(len(self.train_dataset))
        return torch.utils.data.DataLoader(self.train_dataset, batch_size=8, sampler=self.sampler, collate_fn=collate)

    def get_eval_dataloader(self, eval_dataset=None):
        data = eval_dataset if eval_dataset is not None else self.eval_dataset
        return torch.utils.data.DataLoader(data[::-1], batch_size=5, collate_fn=collate)


def loader_batches():
    data = items()
    return [collate([data[i] for i in np.random.default_rng(epoch).permutation(N)[b:b + 8]])
            for epoch in range(EPOCHS) for b in range(0, N, 8)]


def test_a_subclass_loader_feeds_the_native_loop(tmp_path):
    model, reference = Net(), Net()
    want = hf_trainer_loop(_WithLoss(reference, F.cross_entropy), loader_batches(), 1e-2, STEPS)
    seen = {}

    def metrics(p):
        seen["labels"] = p.label_ids
        return {}

    trainer = OwnLoader(model=model, args=arguments(tmp_path, weight_decay=0.0), train_dataset=items(),
                        eval_dataset=items(), compute_metrics=metrics)
    trainer.train()
    assert_trainer_matches(trainer, model, reference, want)
    assert set(trainer.sampler.epochs) == {0, 1}  # set_epoch reached the sampler for each epoch
    out = trainer.evaluate()
    np.testing.assert_array_equal(seen["labels"], [d["labels"] for d in items()[::-1]])  # the loader's order
    with torch.no_grad():
        x = torch.from_numpy(np.stack([d["x"] for d in items()]))
        y = torch.tensor([d["labels"] for d in items()])
        loss = F.cross_entropy(reference(x), y).item()
    assert out["eval_loss"] == pytest.approx(loss, rel=1e-4)


def test_a_resumed_run_replays_the_loader(tmp_path):
    full = OwnLoader(model=Net(), args=arguments(tmp_path, save_strategy="steps", save_steps=4), train_dataset=items())
    full.train()
    resumed = OwnLoader(model=Net(), args=arguments(tmp_path), train_dataset=items())
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-8"))
    got = [e["loss"] for e in resumed.state.log_history if "loss" in e]
    assert got == [e["loss"] for e in full.state.log_history if "loss" in e]


def test_the_base_loaders_are_hf_style(tmp_path):
    trainer = kiln.Trainer(model=Net(), args=arguments(tmp_path), train_dataset=items(), eval_dataset=items())
    loader = trainer.get_train_dataloader()
    assert isinstance(loader, torch.utils.data.DataLoader) and len(loader) == N // 8
    batch = next(iter(trainer.get_eval_dataloader()))
    assert batch["x"].shape == (8, 5) and list(batch["labels"]) == [d["labels"] for d in items()[:8]]


def test_loader_errors_name_the_batch(tmp_path):
    class Short:
        """Claims 6 batches, yields 2."""

        def __len__(self):
            return 6

        def __iter__(self):
            data = items()
            return iter([collate(data[:8]), collate(data[8:16])])

    class Ragged(Short):
        def __iter__(self):
            batch = collate(items()[:8])
            batch["labels"] = batch["labels"][:4]
            return iter([batch] * 6)

    class NotDicts(Short):
        def __iter__(self):
            return iter([[1, 2]] * 6)

    for loader, error, message in [(Short(), ValueError, "ended after 2 batches; its length is 6"),
                                   (Ragged(), ValueError, "column 'labels' of the DataLoader's batch 0 has shape"),
                                   (NotDicts(), TypeError, "batch 0 is a list, not a dict")]:
        class Custom(kiln.Trainer):
            def get_train_dataloader(self, loader=loader):
                return loader

        with pytest.raises(error, match=message):
            Custom(model=Net(), args=arguments(tmp_path), train_dataset=items()).train()
    with pytest.raises(TypeError, match="has no length"):
        class Endless(kiln.Trainer):
            def get_train_dataloader(self):
                return iter([])

        Endless(model=Net(), args=arguments(tmp_path), train_dataset=items())
