"""MaxRoiPool against torchvision.ops.roi_pool, which exports to it: output and the input's
gradient through ORTModule, float64 and float32, regions rounded after scaling, past the border,
overlapping, malformed (x2 < x1) and wholly outside. The maxima are exact; the gradients sum the
same values (float32: within 1e-6 of the largest). Against ONNX Runtime:
tests/python/test_ort_parity_ops.py::test_detection_and_the_rest."""
import copy

import pytest
import torch
import torchvision
from kiln_package import import_kiln

import_kiln()
from kiln.training.ortmodule import ORTModule  # noqa: E402

pytestmark = pytest.mark.usefixtures("ortmodule_in_kiln")


class Pool(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1, dtype=dtype))  # ORTModule needs a parameter

    def forward(self, x, boxes):
        return torchvision.ops.roi_pool(x * self.scale, boxes, output_size=(3, 2), spatial_scale=0.5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_roi_pool_matches_torchvision(dtype):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 9, 8, generator=g, dtype=dtype)
    boxes = torch.tensor([[0, 1.0, 2.0, 11.5, 14.0], [1, 4.2, 0.5, 9.9, 6.1], [1, -3.0, 5.0, 18.0, 20.0],
                          [0, 3.0, 3.0, 9.0, 9.0], [1, 9.0, 9.0, 2.0, 3.0], [0, 30.0, 30.0, 40.0, 40.0]], dtype=dtype)
    plain = Pool(dtype)
    ours = ORTModule(copy.deepcopy(plain))
    weights = torch.randn(6, 3, 3, 2, generator=g, dtype=dtype)
    results = []
    for module in (plain, ours):
        xi = x.clone().requires_grad_()
        y = module(xi, boxes)
        (y * weights).sum().backward()
        results.append((y.detach(), xi.grad))
    assert torch.equal(results[1][0], results[0][0])
    want, got = results[0][1], results[1][1]
    assert float((got - want).abs().max()) <= (1e-12 if dtype == torch.float64 else 1e-6) * float(want.abs().max())
