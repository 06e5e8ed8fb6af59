"""RoiAlign against torchvision.ops.roi_align (exported by torchvision's ONNX symbolic): output and
the input's gradient through ORTModule, fixed and adaptive sampling, float64 within 1e-10 relative
to the largest element. Only aligned=True: torchvision 0.14 exports aligned=False at opset 16+
without coordinate_transformation_mode, which then means half_pixel, not torchvision's own
arithmetic (ONNX Runtime computes the same half_pixel result from that file). The
output_half_pixel mode is checked by finite differences (tests/autodiff/roi_align_rules_test.cpp)
and ONNX's test_roialign_aligned_false case."""
import copy

import pytest
import torch
import torchvision
from kiln_package import import_kiln

import_kiln()
from kiln.training.ortmodule import ORTModule  # noqa: E402

pytestmark = pytest.mark.usefixtures("ortmodule_in_kiln")


class Pool(torch.nn.Module):
    def __init__(self, aligned, sampling_ratio):
        super().__init__()
        self.aligned, self.sampling_ratio = aligned, sampling_ratio
        self.scale = torch.nn.Parameter(torch.ones(1, dtype=torch.float64))  # ORTModule needs a parameter

    def forward(self, x, boxes):
        return torchvision.ops.roi_align(x * self.scale, boxes, output_size=(3, 2), spatial_scale=0.5,
                                         sampling_ratio=self.sampling_ratio, aligned=self.aligned)


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align_matches_torchvision(sampling_ratio):
    aligned = True
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 9, 8, generator=g, dtype=torch.float64)
    boxes = torch.tensor([[0, 1.0, 2.0, 11.5, 14.0], [1, 4.2, 0.5, 9.9, 6.1], [1, -3.0, 5.0, 18.0, 20.0]],
                         dtype=torch.float64)
    plain = Pool(aligned, sampling_ratio)
    ours = ORTModule(copy.deepcopy(plain))
    weights = torch.randn(3, 3, 3, 2, generator=g, dtype=torch.float64)
    results = []
    for module in (plain, ours):
        xi = x.clone().requires_grad_()
        y = module(xi, boxes)
        (y * weights).sum().backward()
        results.append((y.detach(), xi.grad))
    for got, want in zip(results[1], results[0]):
        assert float((got - want).abs().max()) <= 1e-10 * float(want.abs().max())
