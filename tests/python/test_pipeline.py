"""Pipeline parallelism over MPI ranks (IPUConfig's layers_per_ipu): `mpirun -np N` runs of
kiln.graphcore.IPUTrainer (pipeline_train.py) against one process training the same model on the
same data with the same accumulation.

- The zoo GPT-2 (4 layers, tied embedding and LM head: a parameter of the first and the last stage)
  and BERT (4 layers, the attention mask crossing every stage) in 2 stages, 4 stages (GPT-2), and 2
  stages x 2 replicas: per-step losses within 1e-6 relative and every parameter within 1e-5 of the
  one-process run (observed: the 2- and 4-stage runs equal to ~1e-7, BERT's bit for bit; the
  replicated runs average two half batches, ~1e-6). The stage copies of the shared parameter end equal.
- 1F1B and GPipe schedules train alike.
- A pipelined run evaluates, predicts and saves its model as one process does; its checkpoints are
  ordinary ones, from which a pipelined run resumes bit for bit and one process resumes too.
- Mixed precision in stages (not built) is a clear error, as are stage counts that do not fit the
  layers or the ranks.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from kiln_cli import build_dir

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "pipeline_train.py"
MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="Open MPI is not installed (scripts/setup.sh installs it)")


def run(out, n, model, layers, batch, replicas=1, *extra, expect_ok=True):
    command = [sys.executable, SCRIPT, "--model", model, "--layers", *layers, "--replicas", replicas,
               "--batch", batch, "--accum", 4, "--steps", 4, "--out", out, *extra]
    if n > 1:
        command = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", n, "-x",
                   f"KILN_BUILD_DIR={build_dir()}", *command]
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300)
    if not expect_ok:
        return proc
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    weights = {}
    for r in range(n):
        for name, value in np.load(out / f"rank{r}.npz").items():
            if name in weights:  # a shared parameter, or a replica's copy: the same everywhere
                np.testing.assert_allclose(value, weights[name], rtol=0, atol=1e-7, err_msg=f"copies of {name}")
            weights[name] = value
    return json.loads((out / "losses.json").read_text()), weights


def assert_same_training(got, want, weight_rtol=1e-5):
    (losses, weights), (ref_losses, ref_weights) = got, want
    assert len(losses) == len(ref_losses) == 4
    for step, (a, b) in enumerate(zip(losses, ref_losses)):
        assert abs(a - b) <= 1e-6 * abs(b), f"step {step + 1}: loss {a} vs {b}"
    assert set(weights) == set(ref_weights)
    for name, w in ref_weights.items():
        err = float(np.abs(weights[name] - w).max()) / max(1.0, float(np.abs(w).max()))
        assert err <= weight_rtol, f"{name}: relative error {err:.3g}"


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """One process, batch 4 (and 8, the replicated runs' total), 4 micro-batches per update."""
    base = tmp_path_factory.mktemp("reference")
    out = {}
    for model in ("gpt2", "bert"):
        for batch in (4, 8):
            out[model, batch] = run(base / f"{model}{batch}", 1, model, [4], batch, 1, "--arg", "adam_epsilon=1e-4")
    return out


@pytest.mark.parametrize("model,layers", [("gpt2", [2, 2]), ("gpt2", [1, 1, 1, 1]), ("bert", [1, 3])])
def test_stages_train_as_one_process(tmp_path, references, model, layers):
    got = run(tmp_path, len(layers), model, layers, 4, 1, "--arg", "adam_epsilon=1e-4")
    assert_same_training(got, references[model, 4])


@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_two_stages_by_two_replicas_train_as_one_process(tmp_path, references, model):
    """Adam's epsilon 1e-4: two replicas average two half batches, whose rounding Adam would
    otherwise amplify on parameters whose gradient is nearly zero (docs/distributed.md)."""
    got = run(tmp_path, 4, model, [2, 2], 4, 2, "--arg", "adam_epsilon=1e-4")
    assert_same_training(got, references[model, 8])


def test_a_serialized_lm_head_in_the_last_stage_trains_as_one_process(tmp_path, references):
    """embedding_serialization_factor: the last stage's head and loss in vocabulary blocks
    (docs/ipu.md), the same training as the whole head in one process."""
    got = run(tmp_path, 2, "gpt2", [2, 2], 4, 1, "--arg", "adam_epsilon=1e-4",
              "--arg", 'ipu_config_overrides="embedding_serialization_factor=4"')
    assert_same_training(got, references["gpt2", 4])
    last = onnx.load(str(tmp_path / "run" / "artifacts" / "stage-1" / "training_model.onnx"))
    assert [n.op_type for n in last.graph.node].count("LinearCrossEntropy") == 1


def test_gpipe_schedule_trains_as_1f1b(tmp_path, references):
    got = run(tmp_path, 4, "gpt2", [1, 1, 1, 1], 4, 1, "--schedule", "gpipe", "--arg", "adam_epsilon=1e-4")
    assert_same_training(got, references["gpt2", 4])


def test_a_pipelined_run_evaluates_predicts_and_saves_as_one_process(tmp_path):
    """evaluate / predict through the stages' eval models (30 examples in batches of 8: a short last
    batch) and save_model (the stages' parameters gathered into model.safetensors and the forward
    model): the same eval loss (1e-6), predictions (1e-5) and saved weights (1e-5) as one process."""
    one, two = tmp_path / "one", tmp_path / "two"
    args = ["--eval-examples", 30, "--arg", "per_device_eval_batch_size=8"]
    run(one, 1, "gpt2", [4], 4, 1, *args)
    run(two, 2, "gpt2", [2, 2], 4, 1, *args)
    m1, m2 = (json.loads((d / "eval.json").read_text()) for d in (one, two))
    assert abs(m1["eval_loss"] - m2["eval_loss"]) <= 1e-6 * abs(m1["eval_loss"]), (m1, m2)
    p1, p2 = np.load(one / "predictions.npy"), np.load(two / "predictions.npy")
    assert p1.shape == p2.shape and p1.shape[0] == 30
    np.testing.assert_allclose(p2, p1, rtol=0, atol=1e-5 * float(np.abs(p1).max()))
    import onnx
    from onnx import numpy_helper
    saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(two / "run" / "model.onnx").graph.initializer}
    reference = {t.name: numpy_helper.to_array(t) for t in onnx.load(one / "run" / "model.onnx").graph.initializer}
    assert set(saved) == set(reference)
    for name, w in reference.items():
        if w.dtype.kind == "f":
            np.testing.assert_allclose(saved[name], w, rtol=0, atol=1e-5 * max(1.0, float(np.abs(w).max())),
                                       err_msg=name)
    assert (two / "run" / "model.safetensors").exists()


def test_pipelined_checkpoints_resume_exactly_and_are_one_process_checkpoints(tmp_path):
    """A 2-stage run saving every 2 updates: a fresh 2-stage run resumed from checkpoint-2 ends with the
    uninterrupted run's losses and weights bit for bit; the checkpoint is an ordinary one (every
    parameter in model.safetensors, every slot in optimizer.safetensors), which one process resumes
    from to the same weights (1e-5: its accumulation order differs from the stages')."""
    save = ["--arg", 'save_strategy="steps"', "--arg", "save_steps=2", "--arg", "adam_epsilon=1e-4"]
    losses, weights = run(tmp_path / "full", 2, "gpt2", [2, 2], 4, 1, *save)
    checkpoint = tmp_path / "full" / "run" / "checkpoint-2"
    assert (checkpoint / "model.safetensors").exists() and (checkpoint / "optimizer.safetensors").exists()
    resumed_losses, resumed = run(tmp_path / "resumed", 2, "gpt2", [2, 2], 4, 1, *save, "--resume", checkpoint)
    assert resumed_losses == losses[2:]
    for name, w in weights.items():
        np.testing.assert_array_equal(resumed[name], w, err_msg=name)
    one_losses, one = run(tmp_path / "one", 1, "gpt2", [4], 4, 1, *save, "--resume", checkpoint)
    assert_same_training((losses[:2] + one_losses, one), (losses, weights))


def test_pipelined_runs_say_what_they_cannot_do(tmp_path):
    proc = run(tmp_path / "a", 2, "gpt2", [3, 2], 4, expect_ok=False)
    assert proc.returncode != 0 and "places 5 layers; the model has 4" in proc.stderr
    proc = run(tmp_path / "b", 3, "gpt2", [2, 2], 4, expect_ok=False)
    assert proc.returncode != 0 and "= 2 ranks, but the run has 3" in proc.stderr
    proc = run(tmp_path / "c", 2, "gpt2", [2, 2], 4, 1, "--arg", "fp32=false", expect_ok=False)
    assert proc.returncode != 0 and "pipeline stages train in float32" in proc.stderr
