"""include_num_input_tokens_seen: "all" counts every element of input_ids (one per row without
them), "non_padding" HF's count of the attention mask's ones; padded rows of pad_on_batch_axis are
never seen."""
import numpy as np
from kiln_package import import_kiln
from test_python_trainer import blobs, export_mlp

kiln = import_kiln()


def tokens_seen(tmp_path, mode, data, **kwargs):
    args = kiln.TrainingArguments(output_dir=str(tmp_path / mode), report_to="none", disable_tqdm=True,
                                  save_strategy="no", per_device_train_batch_size=16, num_train_epochs=1,
                                  include_num_input_tokens_seen=mode, **kwargs)
    trainer = kiln.Trainer(model=export_mlp(tmp_path / "mlp.onnx"), args=args, train_dataset=data)
    trainer.train()
    return trainer.state.num_input_tokens_seen


def test_non_padding_counts_the_attention_masks_ones(tmp_path):
    rng = np.random.default_rng(0)
    data = blobs(100, 1)
    for item in data:  # columns the model does not read, as a tokenizer's output has them
        n = int(rng.integers(1, 12))
        item["input_ids"] = np.arange(12, dtype=np.int64)
        item["attention_mask"] = (np.arange(12) < n).astype(np.int64)
    ones = int(sum(item["attention_mask"].sum() for item in data))
    assert tokens_seen(tmp_path, "non_padding", data) == ones
    assert tokens_seen(tmp_path, "all", data) == 100 * 12
    assert tokens_seen(tmp_path, "all", blobs(100, 1)) == 100  # no input_ids: a token per row
    assert tokens_seen(tmp_path, "no", data) == 0
