"""`kiln train --train-data FILE.jsonl`: token sequences of different lengths (JSON Lines, a text
column next to the tokens as `datasets` writes them) train the zoo's BERT classifier with batches
padded to their longest and grouped by length; its loss falls and it learns the task. A malformed
line is an error naming the file and line."""
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from kiln_cli import assert_cli_error, run_kiln  # noqa: E402

BERT = ('{"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, '
        '"intermediate_size": 64, "num_labels": 2, "pad_token_id": 0}')


def write_task(path, n, seed):
    """label 1 when most tokens are above 50; lengths 3..20."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            ids = [rng.randint(5, 99) for _ in range(rng.randint(3, 20))]
            label = int(sum(t > 50 for t in ids) * 2 > len(ids))
            f.write(json.dumps({"text": " ".join(map(str, ids)), "input_ids": ids, "token_type_ids": [0] * len(ids),
                                "label": label}) + "\n")


def test_bert_trains_on_json_lines_with_dynamic_padding(tmp_path):
    write_task(tmp_path / "train.jsonl", 512, 0)
    write_task(tmp_path / "test.jsonl", 128, 1)
    proc = run_kiln("train", "--model", "bert", "--model-config", BERT, "--train-data", tmp_path / "train.jsonl",
                    "--eval-data", tmp_path / "test.jsonl", "--output_dir", tmp_path / "out", "--num_train_epochs",
                    "10", "--learning_rate", "3e-3", "--per_device_train_batch_size", "16", "--group_by_length", "true",
                    "--logging_steps", "40", "--save_strategy", "no", "--disable_tqdm", "true", timeout=600)
    assert proc.returncode == 0, proc.stderr
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    losses = [e["loss"] for e in history if "loss" in e]
    assert len(losses) == 8 and losses[-1] < 0.5 * losses[0], losses
    accuracy = [e["eval_accuracy"] for e in history if "eval_accuracy" in e][-1]
    assert accuracy > 0.75, accuracy


def test_json_lines_errors(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"input_ids": [1, 2], "label": 0}\n{"input_ids": [1, 2, "label": 1}\n')
    assert_cli_error(run_kiln("train", "--model", "bert", "--model-config", BERT, "--train-data",
                              tmp_path / "bad.jsonl", "--output_dir", tmp_path / "out"), "bad.jsonl' line 2")
    (tmp_path / "text.jsonl").write_text('{"text": "a b", "label": 0}\n')
    assert_cli_error(run_kiln("train", "--model", "bert", "--model-config", BERT, "--train-data",
                              tmp_path / "text.jsonl", "--output_dir", tmp_path / "out", "--remove_unused_columns",
                              "false"), "column 'text' holds a string")


def test_metrics_flag_names_the_evaluation_metrics_or_none(tmp_path):
    """--metrics: accuracy is the default; a comma list of others, or none (a language model, whose
    labels are one per token, has no per-example accuracy)."""
    write_task(tmp_path / "train.jsonl", 64, 0)
    common = ["train", "--model", "bert", "--model-config", BERT, "--train-data", tmp_path / "train.jsonl",
              "--eval-data", tmp_path / "train.jsonl", "--max_steps", "2", "--save_strategy", "no",
              "--disable_tqdm", "true"]
    proc = run_kiln(*common, "--output_dir", tmp_path / "a", "--metrics", "f1_macro,precision_macro", timeout=300)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "a" / "eval_results.json").read_text())
    assert "eval_f1_macro" in metrics and "eval_precision_macro" in metrics and "eval_accuracy" not in metrics
    proc = run_kiln(*common, "--output_dir", tmp_path / "b", "--metrics", "none", timeout=300)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "b" / "eval_results.json").read_text())
    assert "eval_loss" in metrics and not any(k.startswith("eval_f1") or k == "eval_accuracy" for k in metrics)
    assert_cli_error(run_kiln(*common, "--output_dir", tmp_path / "c", "--metrics", "acuracy"), "acuracy")
