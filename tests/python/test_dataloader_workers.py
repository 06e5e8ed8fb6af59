"""Background data loading (dataloader_num_workers, dataloader_prefetch_factor,
dataloader_persistent_workers): batches loaded on worker threads ahead of the step give the same
training, bit for bit, as loading them in the training thread, whatever the worker count, prefetch
factor or persistence; an error in a worker surfaces from train() naming the batch; HF's argument
check."""
import time

import numpy as np
import pytest
from kiln_package import import_kiln
from test_python_trainer import blobs, export_mlp

kiln = import_kiln()


class SlowDataset:
    """A map-style dataset (HF's __getitem__ / __len__) whose items take a while to load, and that
    can fail at one index."""

    def __init__(self, items, delay=0.0, fail_at=None):
        self.items, self.delay, self.fail_at = items, delay, fail_at

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"item {i} is unreadable")
        if self.delay:
            time.sleep(self.delay)
        return self.items[i]


def train(tmp_path, name, dataset, **kwargs):
    args = kiln.TrainingArguments(output_dir=str(tmp_path / name), report_to="none", disable_tqdm=True,
                                  save_strategy="no", per_device_train_batch_size=16, num_train_epochs=2,
                                  logging_steps=1, learning_rate=0.01, **kwargs)
    losses = []

    class Record(kiln.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                losses.append(logs["loss"])

    trainer = kiln.Trainer(model=export_mlp(tmp_path / "mlp.onnx"), args=args, train_dataset=dataset,
                           callbacks=[Record()])
    trainer.train()
    return losses, trainer._core.parameter_values()


@pytest.mark.parametrize("workers,prefetch,persistent", [(1, None, False), (2, None, True), (3, 1, False)])
def test_workers_train_exactly_as_the_training_thread(tmp_path, workers, prefetch, persistent):
    data = SlowDataset(blobs(200, 1))  # 13 batches per epoch, the last short
    want_losses, want = train(tmp_path, "plain", data)
    extra = {"dataloader_prefetch_factor": prefetch} if prefetch else {}
    got_losses, got = train(tmp_path, "workers", data, dataloader_num_workers=workers,
                            dataloader_persistent_workers=persistent, **extra)
    assert got_losses == want_losses and len(got_losses) == 26
    for k in want:
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]), err_msg=k)


def test_a_failing_item_surfaces_from_train_as_itself_with_its_index(tmp_path):
    """The user's own exception, from train() (not from the constructor, which reads item 0), with a
    note naming the item."""
    args = kiln.TrainingArguments(output_dir=str(tmp_path / "run"), report_to="none", disable_tqdm=True,
                                  save_strategy="no", per_device_train_batch_size=16, dataloader_num_workers=2)
    trainer = kiln.Trainer(model=export_mlp(tmp_path / "mlp.onnx"), args=args,
                           train_dataset=SlowDataset(blobs(200, 1), fail_at=37))
    with pytest.raises(ValueError, match="item 37 is unreadable") as raised:
        trainer.train()
    assert "while Kiln loaded item 37 of the dataset" in getattr(raised.value, "__notes__", [])


def test_prefetch_factor_needs_workers():
    with pytest.raises(ValueError, match="dataloader_prefetch_factor can only be set when data is loaded"):
        kiln.TrainingArguments(output_dir="x", dataloader_prefetch_factor=2)
    with pytest.raises(ValueError, match="dataloader_prefetch_factor must be a positive integer"):
        kiln.TrainingArguments(output_dir="x", dataloader_num_workers=1, dataloader_prefetch_factor=0)
