"""A Hugging Face example script (hf_scripts/run_glue.py: transformers' run_glue.py with its imports
changed to kiln) runs as a script: HfArgumentParser over its dataclasses and TrainingArguments (flags,
and a JSON file), text rows with columns the model does not take (removed), the tokenizer as the
padding collator (tokenizer=), group_by_length, compute_metrics, save_model / save_metrics /
save_state; it learns the task and writes HF's files. HfArgumentParser's own rules are checked too."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Literal, Optional

import numpy as np
import pytest
from kiln_cli import build_dir
from kiln_package import import_kiln

import_kiln()
import kiln  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "hf_scripts" / "run_glue.py"
POSITIVE = "good great fine superb lovely happy".split()
NEGATIVE = "bad awful poor dreadful sad ugly".split()
NEUTRAL = "the a film plot actor scene was and it very".split()


def write_rows(path, n, seed):
    """Sentences of 3..25 words; label 1 when they hold more positive than negative words."""
    g = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            words = list(g.choice(NEUTRAL, int(g.integers(2, 20))))
            pos, neg = int(g.integers(0, 4)), int(g.integers(0, 4))
            if pos == neg:
                pos += 1
            words += list(g.choice(POSITIVE, pos)) + list(g.choice(NEGATIVE, neg))
            g.shuffle(words)
            f.write(json.dumps({"sentence": " ".join(words), "idx": i, "label": int(pos > neg)}) + "\n")


def run_script(*args):
    env = dict(os.environ, PYTHONPATH=str(build_dir() / "python"))
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=600)


def test_run_glue_trains_and_writes_hf_files(tmp_path):
    write_rows(tmp_path / "train.json", 400, 0)
    write_rows(tmp_path / "dev.json", 100, 1)
    out = tmp_path / "out"
    proc = run_script("--train_file", tmp_path / "train.json", "--validation_file", tmp_path / "dev.json",
                      "--output_dir", out, "--do_train", "--do_eval", "--per_device_train_batch_size", "16",
                      "--learning_rate", "3e-2", "--num_train_epochs", "6", "--group_by_length", "--max_seq_length",
                      "24", "--report_to", "none", "--save_strategy", "epoch", "--save_total_limit", "1",
                      "--disable_tqdm", "true", "--seed", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "all_results.json").read_text())
    assert results["eval_accuracy"] > 0.9, results
    assert results["train_samples"] == 400 and results["eval_samples"] == 100
    for name in ("model.onnx", "model.safetensors", "vocab.json", "trainer_state.json", "train_results.json",
                 "eval_results.json"):
        assert (out / name).is_file(), name
    checkpoints = [p for p in out.iterdir() if p.name.startswith("checkpoint-")]
    assert len(checkpoints) == 1 and (checkpoints[0] / "vocab.json").is_file()
    assert "eval_accuracy" in proc.stdout  # log_metrics' table

    # The same run from a JSON file of arguments (the script's other branch), padding to max length.
    config = {"train_file": str(tmp_path / "train.json"), "validation_file": str(tmp_path / "dev.json"),
              "output_dir": str(tmp_path / "json"), "do_train": True, "do_eval": True, "pad_to_max_length": True,
              "max_train_samples": 64, "num_train_epochs": 1, "report_to": "none", "save_strategy": "no",
              "disable_tqdm": True}
    (tmp_path / "args.json").write_text(json.dumps(config))
    proc = run_script(tmp_path / "args.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "json" / "all_results.json").read_text())["train_samples"] == 64

    proc = run_script("--output_dir", out, "--max_seq_lenght", "3")
    assert proc.returncode != 0 and "not used by the HfArgumentParser" in proc.stderr, proc.stderr[-2000:]


@dataclasses.dataclass
class Options:
    name: str
    count: int = 3
    flag: bool = False
    on: bool = True
    ratio: Optional[float] = None
    mode: Literal["a", "b"] = "a"
    items: List[int] = dataclasses.field(default_factory=lambda: [1])


def test_hf_argument_parser_rules(tmp_path):
    parser = kiln.HfArgumentParser((Options, kiln.TrainingArguments))
    opts, args = parser.parse_args_into_dataclasses(
        ["--name", "x", "--count", "5", "--flag", "--no_on", "--ratio", "0.5", "--mode", "b", "--items", "2", "3",
         "--output_dir", str(tmp_path), "--learning_rate", "1e-4", "--no_remove_unused_columns"])
    assert opts == Options("x", 5, True, False, 0.5, "b", [2, 3])
    assert isinstance(args, kiln.TrainingArguments)
    assert args.learning_rate == 1e-4 and args.output_dir == str(tmp_path) and args.remove_unused_columns is False
    opts, _, rest = parser.parse_args_into_dataclasses(["--name", "y", "--flag", "false", "--extra", "1"],
                                                       return_remaining_strings=True)
    assert opts.flag is False and rest == ["--extra", "1"]
    with pytest.raises(SystemExit):
        parser.parse_args_into_dataclasses(["--count", "2"])  # --name is required
    with pytest.raises(SystemExit):
        parser.parse_args_into_dataclasses(["--name", "x", "--mode", "c"])
    opts, args = parser.parse_dict({"name": "z", "seed": 7})
    assert opts.name == "z" and args.seed == 7
    with pytest.raises(ValueError, match="not used by the HfArgumentParser: \\['nope'\\]"):
        parser.parse_dict({"name": "z", "nope": 1})
