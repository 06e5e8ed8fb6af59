"""Data-parallel training over MPI (issue 20): `mpirun -np N` runs of kiln.Trainer (ddp_train.py)
and of `kiln train` against one process.

- N ranks x per-device batch B give the per-step losses and final weights of 1 rank x batch N*B,
  within 1e-5 relative (not bitwise: the ranks' partial sums meet in another order than one
  process's; in practice a few float32 roundings), under SGD (see SGD below), for N = 2 and 4,
  with and without gradient accumulation, on the zoo LeNet with
  BatchNorm (ddp_sync_batchnorm: every rank normalizes with the global batch's statistics) and on
  the zoo GPT-2; one run over MPI's TCP transport (--mca btl tcp,self).
- Every rank reports its place as HF's TrainingArguments does; all end with the same weights;
  evaluation is sharded and gathered in dataset order, metrics as one process computes them.
- Only rank 0 writes the run's files and prints the results of `kiln train`.
- A rank killed with SIGKILL ends the job at once (no hang), and resuming from the last complete
  checkpoint gives the uninterrupted run's weights bit for bit.
- Ranks started with other arguments, or another model, fail at start-up naming the difference;
  a non-finite loss on one rank skips the update on all.
- The on-device API (kiln.training.api with kiln.distributed.DataParallel) under mpirun trains as
  one process with the whole batch, with and without ZeRO and gradient accumulation.
"""
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from kiln_cli import build_dir, kiln_path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "ddp_train.py"
MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="Open MPI is not installed (scripts/setup.sh installs it)")


def mpirun(n, *command, mca_tcp=False, timeout=300):
    args = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(n)]
    if mca_tcp:
        args += ["--mca", "btl", "tcp,self"]
    env_args = ["-x", f"KILN_BUILD_DIR={build_dir()}"]
    return subprocess.run(args + env_args + [str(c) for c in command], capture_output=True, text=True,
                          timeout=timeout)


def train(out, n, model, batch, accum=1, steps=6, *extra, mca_tcp=False):
    command = [sys.executable, SCRIPT, "--model", model, "--batch", batch, "--accum", accum, "--steps", steps,
               "--out", out, *extra]
    proc = mpirun(n, *command, mca_tcp=mca_tcp) if n > 1 else subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "losses.json").read_text()), dict(np.load(out / "weights.npz"))


def assert_close(got, want, what, rtol=1e-5):
    scale = max(1e-30, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(np.asarray(got, dtype=np.float64) - np.asarray(want, dtype=np.float64)))) / scale
    assert err <= rtol, f"{what}: relative error {err:.3g}"


CASES = [("lenet", 2, 1), ("lenet", 4, 2), ("gpt2", 2, 2), ("gpt2", 4, 1)]


# SGD for the weights' comparison: AdamW divides each gradient by its own running scale, so a
# parameter whose gradient is zero in exact arithmetic (a convolution's bias before BatchNorm, the
# keys' bias in attention) moves by the learning rate's size on rounding noise alone, and any two
# summation orders end it in different places.
SGD = ["--arg", 'optim="sgd"', "--arg", "learning_rate=0.05"]


@pytest.mark.parametrize("model,n,accum", CASES)
def test_n_ranks_train_as_one_process_with_n_times_the_batch(tmp_path, model, n, accum):
    extra = SGD + (["--sync-bn"] if model == "lenet" else [])
    batch = 4
    ranks, ranks_weights = train(tmp_path / "ranks", n, model, batch, accum, 6, *extra, mca_tcp=(n == 2))
    one, one_weights = train(tmp_path / "one", 1, model, batch * n, accum, 6, *extra)
    assert len(ranks) == len(one) == 6
    assert_close(ranks, one, "per-step losses")
    assert set(ranks_weights) == set(one_weights)
    for name in one_weights:
        assert_close(ranks_weights[name], one_weights[name], name)
    places = [json.loads((tmp_path / "ranks" / f"rank{r}.json").read_text()) for r in range(n)]
    for r, place in enumerate(places):
        assert place["rank"] == place["process_index"] == r
        assert place["world_size"] == place["args_world_size"] == n and place["backend"] == "mpi"
        assert place["local_rank"] == place["local_process_index"] == r  # one host
        assert place["should_log"] == place["should_save"] == place["is_world_process_zero"] == (r == 0)
        assert place["weights"] == places[0]["weights"], "the ranks ended with different weights"


def test_an_iterable_dataset_is_sharded_across_ranks(tmp_path):
    """Each rank reads the stream and keeps its share (items r, r + N, ...): 2 ranks of batch 4 see
    the items a sequential batch of 8 sees, and train to the same losses and weights."""
    ranks, ranks_weights = train(tmp_path / "ranks", 2, "lenet", 4, 1, 6, "--stream", "--sync-bn", *SGD)
    one, one_weights = train(tmp_path / "one", 1, "lenet", 8, 1, 6, "--sync-bn", *SGD, "--arg",
                             'train_sampling_strategy="sequential"')
    assert_close(ranks, one, "per-step losses")
    for name in one_weights:
        assert_close(ranks_weights[name], one_weights[name], name)


def test_without_synchronized_batchnorm_each_rank_normalizes_its_own_batch(tmp_path):
    # torch DDP's default: per-rank batch statistics, so the run is not the big-batch one.
    ranks, _ = train(tmp_path / "ranks", 2, "lenet", 4)
    one, _ = train(tmp_path / "one", 1, "lenet", 8)
    assert abs(ranks[0] - one[0]) / one[0] > 1e-4  # the first forward already normalizes differently


def test_evaluation_is_sharded_and_gathered_in_dataset_order(tmp_path):
    train(tmp_path / "ranks", 2, "lenet", 4, 1, 4, "--sync-bn", "--eval-examples", "37")
    train(tmp_path / "one", 1, "lenet", 8, 1, 4, "--eval-examples", "37")
    got = json.loads((tmp_path / "ranks" / "rank1.json").read_text())["metrics"]
    want = json.loads((tmp_path / "one" / "rank0.json").read_text())["metrics"]
    assert got["eval_order"] == want["eval_order"]  # every prediction, in dataset order
    assert got["eval_accuracy"] == want["eval_accuracy"]
    assert got["eval_loss"] == pytest.approx(want["eval_loss"], rel=1e-5)


def test_kiln_train_under_mpirun_writes_once(tmp_path):
    out = tmp_path / "out"
    proc = mpirun(2, kiln_path(), "train", "--output_dir", out, "--max_steps", 4, "--per_device_train_batch_size", 16,
                  "--save_strategy", "steps", "--save_steps", 2, "--disable_tqdm", "true", "--ddp_sync_batchnorm",
                  "true", "--logging_steps", 1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(re.findall(r"^accuracy [0-9.]+ on 10000 examples", proc.stdout, re.M)) == 1
    assert proc.stdout.count("***** train metrics *****") == 1
    assert proc.stdout.count("'loss':") == 4  # the log lines of rank 0 only
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    for name in ("model.onnx", "model.safetensors", "trainer_state.json", "eval_results.json"):
        assert (out / name).exists(), name
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and state["is_world_process_zero"]


def test_a_killed_rank_ends_the_job_and_the_run_resumes_exactly(tmp_path):
    run = ["--sync-bn", "--arg", 'save_strategy="steps"', "--arg", "save_steps=2", "--arg", "ddp_timeout=30"]
    command = [sys.executable, SCRIPT, "--model", "lenet", "--batch", 4, "--steps", 8, "--out", tmp_path / "killed"]
    start = time.monotonic()
    proc = mpirun(2, *command, *run, "--kill-rank", 1, "--kill-step", 5)
    assert proc.returncode != 0
    assert time.monotonic() - start < 60, "the surviving rank hung"
    assert "exited on signal 9" in proc.stdout + proc.stderr
    assert sorted(p.name for p in (tmp_path / "killed" / "run").glob("checkpoint-*")) == ["checkpoint-2",
                                                                                       "checkpoint-4"]
    resumed = mpirun(2, *command, *run, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight, weights = train(tmp_path / "straight", 2, "lenet", 4, 1, 8, *run)
    assert json.loads((tmp_path / "killed" / "losses.json").read_text()) == straight
    got = dict(np.load(tmp_path / "killed" / "weights.npz"))
    for name, value in weights.items():
        assert np.array_equal(got[name], value), name


def test_ranks_with_other_arguments_or_another_model_fail_at_start(tmp_path):
    base = [MPIRUN, "--allow-run-as-root", "--oversubscribe"]
    kiln = str(kiln_path())
    common = ["train", "--max_steps", "1", "--save_strategy", "no", "--disable_tqdm", "true"]
    proc = subprocess.run(base + ["-np", "1", kiln, *common, "--output_dir", str(tmp_path / "a"), ":", "-np", "1",
                                  kiln, *common, "--output_dir", str(tmp_path / "a"), "--learning_rate", "0.01"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "rank 1 was started with other arguments than rank 0: learning_rate (0.001 on rank 0, 0.01 on rank 1)" in \
        proc.stderr
    proc = subprocess.run(base + ["-np", "1", kiln, *common, "--output_dir", str(tmp_path / "b"), ":", "-np", "1",
                                  kiln, *common, "--output_dir", str(tmp_path / "b"), "--model-config",
                                  '{"num_labels": 11}'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "rank 1 starts from another model than rank 0: initializer 'fc3." in proc.stderr


def test_a_non_finite_loss_on_one_rank_skips_the_update_on_all(tmp_path):
    # One example of 16 holds a NaN: in the 2 epochs of 4 steps of 2 ranks x 4 it lands on one
    # rank twice (whichever); that rank's loss is NaN, and every rank must skip those updates.
    def run(name, nan):
        out = tmp_path / name
        command = [sys.executable, SCRIPT, "--model", "lenet", "--batch", 4, "--steps", 4, "--out", out, "--sync-bn",
                   "--examples", 16, "--nan-example", 5 if nan else -1]
        proc = mpirun(2, *command)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [json.loads((out / f"rank{r}.json").read_text())["weights"] for r in range(2)]

    with_nan = run("nan", True)
    assert with_nan[0] == with_nan[1], "the ranks disagreed on skipping the update"
    assert with_nan != run("finite", False)


@pytest.mark.parametrize("n,zero_stage,accum,optim", [(2, 0, 1, "sgd"), (2, 2, 2, "adamw"), (4, 1, 1, "sgd")])
def test_the_on_device_api_under_mpirun_trains_as_one_process(tmp_path, n, zero_stage, accum, optim):
    script = HERE / "ddp_ondevice.py"
    common = ["--zero-stage", zero_stage, "--accum", accum, "--optim", optim]
    proc = mpirun(n, sys.executable, script, "--out", tmp_path / "ranks", *common)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    alone = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "one"),
                            *[str(c) for c in common]], capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr[-3000:]
    ranks = [json.loads((tmp_path / "ranks" / f"rank{r}.json").read_text()) for r in range(n)]
    one = json.loads((tmp_path / "one" / "rank0.json").read_text())
    mean_losses = np.mean([r["losses"] for r in ranks], axis=0)  # equal rows per rank
    assert_close(mean_losses, one["losses"], "per-step losses")
    for r in ranks:
        assert r["weights"] == ranks[0]["weights"], "the ranks ended with different weights"
    assert_close(ranks[0]["weights"], one["weights"], "weights")
    owned = [r["owned"] for r in ranks]
    assert sum(owned) == one["total"] if zero_stage else owned == [one["total"]] * n


def test_an_evaluation_loop_override_is_refused_under_mpirun(tmp_path):
    """A subclass's prediction_step runs HF's Python evaluation loop on one process: a distributed
    run refuses it at construction, on every rank, naming why."""
    script = tmp_path / "override.py"
    script.write_text(f"""import sys
sys.path.insert(0, {str(HERE)!r})
import numpy as np
from kiln_package import import_kiln
kiln = import_kiln()

class Custom(kiln.Trainer):
    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)

items = [{{"input": np.zeros((1, 28, 28), np.float32), "labels": 1}}] * 8
args = kiln.TrainingArguments({str(tmp_path / "run")!r}, max_steps=1, report_to=[], disable_tqdm=True)
try:
    Custom(model="lenet", args=args, train_dataset=items)
except NotImplementedError as e:
    print("refused:", e)
""")
    proc = mpirun(2, sys.executable, script)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Both ranks print it (their lines may interleave).
    assert proc.stdout.count("prediction_step override runs on one process; this run is distributed") == 2, \
        proc.stdout
