"""Gradient parity with PyTorch: a model and its loss exported from torch as one graph (opset 17,
do_constant_folding=False so that initializers keep their state_dict names), differentiated by
`kiln grad`, run by `kiln run`; the loss and every parameter's gradient must match torch.autograd's:
||g_kiln - g_torch|| / ||g_torch|| <= 1e-4 (2-norm, float32 on both sides). The training graph is
saved and loaded back before it runs (that is what `kiln run` does with it).

Models (small sizes, so that the file runs in about two minutes on two cores):
- the MLP with an MSE and a cross-entropy loss;
- the LeNet-style CNN (Conv, MaxPool, AveragePool, BatchNorm) with BatchNorm in eval mode and in
  training mode (the gradient then flows through the batch statistics);
- torchvision's ResNet-18 in training mode on 2 x 3 x 64 x 64 images;
- the ViT, the BERT-style encoder (classification loss) and the GPT-2-style decoder (the language
  model loss over shifted tokens, with the LM head tied to the token embedding, which Kiln computes
  over the unsliced logits and padded labels), dropout 0.
"""
import numpy as np
import onnx
import pytest
import torch
import torch_models
import zoo_models
from kiln_cli import run_kiln
from training_models import Case, WithLoss, export_with_loss, zoo_case

TOL = 1e-4
ZERO = 1e-6  # a gradient below this fraction of the whole gradient's norm is zero (see compare)


def kiln_gradients(tmp_path, case, requires_grad=()):
    model_path = tmp_path / "model.onnx"
    export_with_loss(case, model_path)
    train_path = tmp_path / "train.onnx"
    extra = ["--requires-grad", ",".join(requires_grad)] if requires_grad else []
    proc = run_kiln("grad", model_path, "--loss", "loss", "--out", train_path, *extra)
    assert proc.returncode == 0, proc.stderr
    inputs = []
    for name, value in case.feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        inputs += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    out = tmp_path / "out"
    proc = run_kiln("run", train_path, *inputs, "--output-dir", out)
    assert proc.returncode == 0, proc.stderr
    return out


def torch_gradients(case):
    """The loss and {parameter name: gradient} from torch.autograd, in the mode the graph was
    exported in (the export itself may have run the module once: BatchNorm's running statistics
    then moved, which training mode does not read)."""
    module = case.module.train(case.train)
    module.zero_grad()
    loss = module(*case.tensors())
    loss.backward()
    return loss.item(), {name: p.grad.numpy() for name, p in module.named_parameters()}


def compare(out_dir, loss, grads):
    """The loss within TOL (relative, or absolute below 1), and every gradient within TOL relative.

    A gradient that is zero in exact arithmetic (the key bias of attention: softmax ignores a shift
    that is the same for every key) is float noise on both sides, about 1e-10 of the whole
    gradient's norm, and has no meaningful relative error: below ZERO of that norm in torch, it
    must be below ZERO of it in Kiln too."""
    kiln_loss = float(np.load(out_dir / "loss.npy"))
    assert abs(kiln_loss - loss) <= TOL * max(1.0, abs(loss)), f"loss: kiln {kiln_loss}, torch {loss}"
    total = np.sqrt(sum(np.linalg.norm(g) ** 2 for g in grads.values()))
    bad = {}
    for name, g_torch in grads.items():
        path = out_dir / f"{name}_grad.npy"
        assert path.exists(), f"kiln wrote no gradient for parameter {name}"
        g_kiln = np.load(path)
        assert g_kiln.shape == g_torch.shape, f"{name}: kiln {g_kiln.shape}, torch {g_torch.shape}"
        if np.linalg.norm(g_torch) <= ZERO * total:
            if not np.linalg.norm(g_kiln) <= ZERO * total:
                bad[name] = f"zero in torch, norm {np.linalg.norm(g_kiln):.2e} in kiln"
            continue
        rel = np.linalg.norm(g_kiln - g_torch) / np.linalg.norm(g_torch)
        if not rel <= TOL:
            bad[name] = f"{rel:.2e}"
    assert not bad, f"relative gradient errors above {TOL}: {bad}"


def check(tmp_path, case, requires_grad=()):
    out = kiln_gradients(tmp_path, case, requires_grad)
    compare(out, *torch_gradients(case))


def batch_axes(names):
    return {name: {0: "batch"} for name in names}


@pytest.mark.parametrize("loss_kind", ["mse", "ce"])
def test_mlp_gradients_match_torch(tmp_path, loss_kind):
    torch.manual_seed(0)
    module = WithLoss(torch_models.MLP(d_in=64, hidden=32, d_out=10), loss_kind)
    x = torch.randn(8, 64)
    y = torch.randn(8, 10) if loss_kind == "mse" else torch.randint(0, 10, (8,))
    check(tmp_path, Case(module, {"x": x.numpy(), "y": y.numpy()}, dynamic=batch_axes(["x", "y"])))


@pytest.mark.parametrize("train", [False, True], ids=["batchnorm_eval", "batchnorm_train"])
def test_lenet_gradients_match_torch(tmp_path, train):
    module = WithLoss(torch_models.build("lenet", seed=0), "ce")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (4,), generator=gen)
    check(tmp_path, Case(module, {"x": x.numpy(), "y": y.numpy()}, train=train, dynamic=batch_axes(["x", "y"])))


def test_resnet18_train_mode_gradients_match_torch(tmp_path):
    """BatchNormalization with training_mode=1: batch statistics, and their gradient."""
    torch.manual_seed(0)
    module = WithLoss(zoo_models.resnet18(num_classes=10), "ce")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 64, 64, generator=gen)
    y = torch.randint(0, 10, (2,), generator=gen)
    check(tmp_path, Case(module, {"x": x.numpy(), "y": y.numpy()}, train=True))


def test_vit_gradients_match_torch(tmp_path):
    check(tmp_path, zoo_case("vit", "test", batch=2, seq=0))


def test_bert_gradients_match_torch(tmp_path):
    """Padded batches (attention_mask), token/position/type embeddings (Gather), post-LayerNorm."""
    check(tmp_path, zoo_case("bert", "test", batch=2, seq=16))


def test_gpt2_gradients_match_torch(tmp_path):
    """Causal attention, tanh GELU, and the LM head tied to the token embedding: the embedding's
    gradient is the sum over its two uses. The causal mask is a float buffer that is no parameter,
    so the parameters to differentiate are named."""
    case = zoo_case("gpt2", "test", batch=2, seq=16)
    check(tmp_path, case, requires_grad=[n for n, _ in case.module.named_parameters()])
    # The shifted loss (logits[:, :-1] against ids[:, 1:], dynamic axes) reads the unsliced logits
    # and padded labels (ir/fusion.h, fold_score_slices_into_labels): no Slice of the logits, and
    # none of its gradient.
    ops = [n.op_type for n in onnx.load(str(tmp_path / "train.onnx")).graph.node]
    assert "SliceGrad" not in ops and ops.count("Pad") == 1
