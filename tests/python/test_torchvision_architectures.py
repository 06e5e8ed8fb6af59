"""torchvision's architectures beyond ResNet train through Kiln's ORTModule as in PyTorch: each
exports in train mode (BatchNorm over the batch; dropouts and stochastic depth set to p = 0, whose
masks no two libraries draw alike), and

- in float64, the first step's loss equals PyTorch's within 1e-9 relative and every parameter's
  gradient within 1e-6 of that parameter's largest (plus 1e-12 of the model's largest, for the
  biases a BatchNorm follows, whose gradient is rounding residue), then three SGD steps keep the losses
  within 1e-7, 1e-7 and 1e-5 relative: ONNX's float attributes are float32 (HardSigmoid's alpha is
  1/6 rounded to float32 in the exported graph; BatchNorm's epsilon is set to its float32 value on
  the PyTorch side too), and at batch 2 training amplifies any difference about 100-fold a step:
  regnet_y_400mf's losses differ by 2e-15, 8e-12, 8e-10, 1.7e-7, 6e-6 and 8e-3 relative over its
  first step and five SGD steps (2026-12-02, an Intel Xeon; the same order as rounding alone, which
  moves with the CPU's summation order);
- in float32 (oneDNN's kernels), the logits are within 1e-4 of their largest.

Float32 gradients are not compared element by element: at batch 2 and 64x64 pixels a BatchNorm
output lands within float32's rounding of a ReLU's kink (shufflenet's conv5 has one at -3.5e-5),
and PyTorch's own float32 gradients then differ from its float64 ones by percents there too.

The architectures bring the ops the ResNets lack: grouped and depthwise convolutions with
squeeze-and-excitation (RegNetY, MobileNetV3, EfficientNet), Hardswish and Hardsigmoid, SiLU,
channel shuffles and splits (ShuffleNetV2), inception branches with ceil-mode pooling (GoogLeNet),
channels-last LayerNorm, GELU and layer scale (ConvNeXt)."""
import copy

import pytest
import torch
from kiln_package import import_kiln

import_kiln()
from kiln.training.ortmodule import ORTModule  # noqa: E402

torchvision = pytest.importorskip("torchvision")
pytestmark = pytest.mark.usefixtures("ortmodule_in_kiln")

ARCHITECTURES = ["regnet_y_400mf", "mobilenet_v3_small", "shufflenet_v2_x0_5", "efficientnet_b0", "googlenet",
                 "convnext_tiny"]


def build(name):
    torch.manual_seed(3)
    extra = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    model = getattr(torchvision.models, name)(weights=None, num_classes=10, **extra)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) or type(module).__name__ == "StochasticDepth":
            module.p = 0.0
        if isinstance(module, torch.nn.BatchNorm2d):  # ONNX's epsilon attribute is a float32
            module.eps = float(torch.tensor(module.eps, dtype=torch.float32))
    return model.train()


def step(model, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.item()


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_architecture_trains_as_in_pytorch(name):
    g = torch.Generator().manual_seed(4)
    data = [(torch.randn(2, 3, 64, 64, generator=g, dtype=torch.float64), torch.randint(0, 10, (2,), generator=g))
            for _ in range(4)]
    plain = build(name).double()
    ours = ORTModule(copy.deepcopy(plain))
    first = [step(model, *data[0]) for model in (plain, ours)]
    assert abs(first[1] - first[0]) <= 1e-9 * abs(first[0]), first
    theirs = dict(ours.named_parameters())
    # A bias that a BatchNorm follows has a gradient of exactly 0 in exact arithmetic: what either
    # side computes is rounding residue, of the order of float64's epsilon times the gradients it
    # cancels. Its floor is therefore relative to the model's largest gradient.
    model_scale = max(p.grad.abs().max().item() for p in plain.parameters())
    for key, p in plain.named_parameters():
        scale = p.grad.abs().max().item()
        diff = (theirs[key].grad - p.grad).abs().max().item()
        assert diff <= 1e-6 * scale + 1e-12 * model_scale, f"{key}: {diff} (largest {scale}; model {model_scale})"
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.002, momentum=0.9) for m in (plain, ours)]
    for i, (x, y) in enumerate(data[1:]):
        losses = []
        for model, opt in zip((plain, ours), optimizers):
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(step(model, x, y))
        bound = max(1e-7, 1e-9 * 100**i)  # the ~100-fold growth a step (the module docstring)
        assert abs(losses[1] - losses[0]) <= bound * abs(losses[0]), f"step {i + 1}: {losses}"

    plain32 = build(name)
    x32 = data[0][0].float()
    want = plain32(x32).detach()
    got = ORTModule(copy.deepcopy(plain32))(x32).detach()
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
