"""ZeRO over MPI (issue 20): DeepSpeed configs given to kiln.Trainer (`deepspeed=`) under
`mpirun -np N` (ddp_train.py), against the same run without ZeRO (stage 0, torch DDP's semantics).

- Stages 1 and 2 give stage 0's per-step losses and final weights within 1e-6 relative (bit for
  bit with 2 ranks, where a sum of two is the same in any order; with 4, MPI's reduce-scatter and
  allreduce add the ranks' gradients in different orders), with and without gradient
  accumulation, for 2 and 4 ranks, over TCP in one case, with reduce-scatter and with allreduce
  (reduce_scatter false), overlapped or not. The 4-rank reduce-scatter case trains with SGD (as
  test_distributed.py's comparisons do): Adam divides each gradient by its own running scale, and
  turns the last-bit differences of another summation order into differences of ~1e-6. AdamW
  elsewhere, with adam_epsilon 1e-4: a parameter whose
  gradient is zero in exact arithmetic (attention's key bias) gets rounding noise that depends on
  the order of the sums, and with torch's eps of 1e-8 Adam turns that noise into steps of the
  learning rate's size; 1e-4 keeps them negligible while the real gradients (~1e-3) still train.
- Each rank holds 1/N of the optimizer state (Adam's two moments), measured on the Trainer.
- fp16 with DeepSpeed's loss scaler (hysteresis): every rank skips the same updates.
- Checkpoints: each rank writes its optimizer shard and rank 0 the manifest; resuming with the
  same world size reproduces the uninterrupted run bit for bit; with another world size (the same
  global batch) and in one process without ZeRO, within 1e-6; `kiln evaluate` reads the model of
  a checkpoint written by N ranks.
"""
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from kiln_cli import kiln_path
from test_distributed import MPIRUN, SCRIPT, assert_close, mpirun, train

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="Open MPI is not installed (scripts/setup.sh installs it)")


def zero(stage, **more):
    """A DeepSpeed config as HF's examples write them, "auto" values filled from the arguments."""
    config = {"zero_optimization": {"stage": stage, "overlap_comm": True, "reduce_scatter": True,
                                    "reduce_bucket_size": "auto", "allgather_bucket_size": 5e4,
                                    "contiguous_gradients": True},
              "gradient_clipping": "auto", "gradient_accumulation_steps": "auto",
              "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
              "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                        "weight_decay": "auto"}}}
    config["zero_optimization"].update(more)
    return ["--arg", "deepspeed=" + json.dumps(config), *EPS]


EPS = ["--arg", "adam_epsilon=1e-4"]  # see above


def places(out, n):
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


SGD = ["--arg", 'optim="sgd"', "--arg", "learning_rate=0.05"]
CASES = [  # model, ranks, accumulation, stage, more zero_optimization keys, over TCP, optimizer
    ("lenet", 2, 1, 1, {}, True, EPS),
    ("gpt2", 2, 2, 2, {}, False, EPS),
    ("gpt2", 4, 1, 2, {"overlap_comm": False}, False, SGD),
    ("gpt2", 4, 2, 2, {"reduce_scatter": False, "reduce_bucket_size": 3000}, False, EPS),
    ("gpt2", 4, 1, 1, {}, False, EPS),
]


@pytest.mark.parametrize("model,n,accum,stage,more,tcp,optimizer", CASES)
def test_zero_stages_train_as_stage_0_with_a_shard_of_the_optimizer_state(tmp_path, model, n, accum, stage, more,
                                                                          tcp, optimizer):
    extra = optimizer + (["--sync-bn"] if model == "lenet" else [])
    ddp, ddp_weights = train(tmp_path / "ddp", n, model, 4, accum, 6, *extra, mca_tcp=tcp)
    config = zero(stage, **more)
    if optimizer is SGD:  # no optimizer section, and no moments to shard
        config = ["--arg", "deepspeed=" + json.dumps({"zero_optimization": {"stage": stage, **more}})]
    sharded, sharded_weights = train(tmp_path / "zero", n, model, 4, accum, 6, *extra, *config, mca_tcp=tcp)
    assert_close(sharded, ddp, "per-step losses", rtol=1e-6)
    for name in ddp_weights:
        assert_close(sharded_weights[name], ddp_weights[name], name, rtol=1e-6)
    full = places(tmp_path / "ddp", n)[0]["optimizer_state_bytes"]
    shards = [p["optimizer_state_bytes"] for p in places(tmp_path / "zero", n)]
    assert sum(shards) == full  # every element's moments, once
    # Equal ranges of the flattened parameters (the last rank's may be shorter by < N elements).
    assert max(shards) - min(shards) <= 8 * n, shards
    assert len({p["weights"] for p in places(tmp_path / "zero", n)}) == 1


def test_fp16_loss_scaling_from_the_config_agrees_across_the_shards(tmp_path):
    # DeepSpeed's fp16 section: a scale of 2^30 overflows; with hysteresis 2 the first overflow
    # only holds the scale, the second halves it. Each rank checks its own range of the gradients,
    # and all must skip together: ZeRO-2 ends where stage 0 does, bit for bit.
    fp16 = {"enabled": "auto", "initial_scale_power": 30, "hysteresis": 2}
    runs = {}
    for stage in (0, 2):
        config = {"fp16": fp16, "zero_optimization": {"stage": stage}}
        command = [sys.executable, SCRIPT, "--model", "gpt2", "--batch", 4, "--steps", 6, "--out",
                   tmp_path / str(stage), "--arg", "fp16=true", "--arg", "deepspeed=" + json.dumps(config), *EPS]
        proc = mpirun(2, *command)
        assert proc.returncode == 0, proc.stderr[-3000:]
        scales = [int(s) for s in re.findall(r"not finite at loss scale (\d+)", proc.stderr)]
        assert scales[:3] == [2**30, 2**30, 2**29], scales  # held once, then halved; rank 0 reports
        runs[stage] = (json.loads((tmp_path / str(stage) / "losses.json").read_text()),
                       dict(np.load(tmp_path / str(stage) / "weights.npz")))
    assert runs[0][0] == runs[2][0]
    for name, value in runs[0][1].items():
        assert np.array_equal(runs[2][1][name], value), name


def checkpoint_run(out, n, batch, *extra, resume=False):
    command = [sys.executable, SCRIPT, "--model", "gpt2", "--batch", batch, "--steps", 6, "--out", out,
               "--arg", 'save_strategy="steps"', "--arg", "save_steps=3", *extra]
    if resume:
        command.append("--resume")
    proc = mpirun(n, *command) if n > 1 else subprocess.run([str(c) for c in command], capture_output=True,
                                                             text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "losses.json").read_text()), dict(np.load(out / "weights.npz"))


def test_sharded_checkpoints_resume_with_the_same_or_another_world_size(tmp_path):
    losses, weights = checkpoint_run(tmp_path / "straight", 2, 4, *zero(2))
    folder = tmp_path / "straight" / "run" / "checkpoint-3"
    files = sorted(p.name for p in folder.iterdir())
    assert "optimizer_shards.json" in files and "optimizer.safetensors" not in files
    assert "optimizer-rank0-of-2.safetensors" in files and "optimizer-rank1-of-2.safetensors" in files
    manifest = json.loads((folder / "optimizer_shards.json").read_text())
    assert manifest["world_size"] == 2 and manifest["zero_stage"] == 2 and manifest["step"] == 3
    assert [s["rank"] for s in manifest["shards"]] == [0, 1]

    def resumed(name, n, batch, *extra):
        out = tmp_path / name
        shutil.copytree(tmp_path / "straight" / "run", out / "run")
        shutil.rmtree(out / "run" / "checkpoint-6")  # resume from checkpoint-3
        return checkpoint_run(out, n, batch, *extra, resume=True)

    # The same world size: bit for bit.
    again, again_weights = resumed("same", 2, 4, *zero(2))
    assert again == losses
    for name, value in weights.items():
        assert np.array_equal(again_weights[name], value), name
    # Four ranks (the same global batch of 8), stage 1: the shards re-cut.
    four, four_weights = resumed("four", 4, 2, *zero(1))
    shards = [p["optimizer_state_bytes"] for p in places(tmp_path / "four", 4)]
    assert_close(four, losses, "losses on 4 ranks", rtol=1e-6)
    for name, value in weights.items():
        assert_close(four_weights[name], value, name, rtol=1e-6)
    # One process, no ZeRO: every shard read back into whole moments.
    one, one_weights = resumed("one", 1, 8, *EPS)
    assert_close(one, losses, "losses in one process", rtol=1e-6)
    for name, value in weights.items():
        assert_close(one_weights[name], value, name, rtol=1e-6)
    assert sum(shards) == places(tmp_path / "one", 1)[0]["optimizer_state_bytes"]
    assert max(shards) - min(shards) <= 8 * 4, shards


def test_a_damaged_shard_set_is_a_clear_error(tmp_path):
    checkpoint_run(tmp_path / "run1", 2, 4, *zero(2))
    folder = tmp_path / "run1" / "run" / "checkpoint-3"
    shutil.rmtree(folder.parent / "checkpoint-6")
    (folder / "optimizer-rank1-of-2.safetensors").unlink()
    command = [sys.executable, SCRIPT, "--model", "gpt2", "--batch", 8, "--steps", 6, "--out", tmp_path / "run1",
               "--resume", *EPS]
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "optimizer-rank1-of-2.safetensors" in proc.stderr, proc.stderr[-2000:]


def test_kiln_train_with_a_deepspeed_config_file_and_evaluate_its_checkpoint(tmp_path):
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 2}, "gradient_clipping": "auto",
                                  "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}))
    out = tmp_path / "out"
    proc = mpirun(2, kiln_path(), "train", "--output_dir", out, "--max_steps", 4, "--per_device_train_batch_size", 16,
                  "--save_strategy", "steps", "--save_steps", 4, "--disable_tqdm", "true", "--deepspeed", config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checkpoint = out / "checkpoint-4"
    assert (checkpoint / "optimizer_shards.json").exists()
    evaluated = subprocess.run([str(kiln_path()), "evaluate", "--resume_from_checkpoint", str(checkpoint),
                                "--output_dir", str(tmp_path / "eval")], capture_output=True, text=True, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "eval_loss" in evaluated.stdout
    # A config that disagrees with the arguments stops every rank at start, naming the values.
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 8}))
    proc = mpirun(2, kiln_path(), "train", "--output_dir", tmp_path / "bad", "--max_steps", 1,
                  "--per_device_train_batch_size", 16, "--deepspeed", config)
    assert proc.returncode != 0
    assert "ds train_micro_batch_size_per_gpu=8 vs hf per_device_train_batch_size=16" in proc.stderr
