"""GridSample against torch.nn.functional.grid_sample (exported by torch.onnx at opset 16): the
output and the gradients of the input and the grid through ORTModule, for every mode, padding
mode and align_corners, float64 within 1e-10 relative to the largest element (torch's nearest
mode has no grid gradient: both are zero). Finite differences in
tests/autodiff/grid_sample_rules_test.cpp; ONNX's node cases in the conformance suite."""
import copy

import pytest
import torch
from kiln_package import import_kiln

import_kiln()
from kiln.training.ortmodule import ORTModule  # noqa: E402

pytestmark = pytest.mark.usefixtures("ortmodule_in_kiln")


class Sample(torch.nn.Module):
    def __init__(self, mode, padding_mode, align_corners):
        super().__init__()
        self.kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
        self.scale = torch.nn.Parameter(torch.ones(1, dtype=torch.float64))  # ORTModule needs a parameter

    def forward(self, x, grid):
        return torch.nn.functional.grid_sample(x * self.scale, grid, **self.kw)


def relative(got, want):
    return float((got - want).abs().max()) / max(float(want.abs().max()), 1e-30)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_matches_torch(mode, padding_mode, align_corners):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 5, 7, generator=g, dtype=torch.float64)
    grid = 2.6 * torch.rand(2, 4, 6, 2, generator=g, dtype=torch.float64) - 1.3  # some points outside
    plain = Sample(mode, padding_mode, align_corners)
    ours = ORTModule(copy.deepcopy(plain))
    weights = torch.randn(2, 3, 4, 6, generator=g, dtype=torch.float64)
    results = []
    for module in (plain, ours):
        xi, gi = x.clone().requires_grad_(), grid.clone().requires_grad_()
        y = module(xi, gi)
        (y * weights).sum().backward()
        results.append((y.detach(), xi.grad, gi.grad))
    (want_y, want_dx, want_dg), (got_y, got_dx, got_dg) = results
    assert relative(got_y, want_y) <= 1e-10
    assert relative(got_dx, want_dx) <= 1e-10
    if mode == "nearest":
        assert float(got_dg.abs().max()) == 0.0 and float(want_dg.abs().max()) == 0.0
    else:
        assert relative(got_dg, want_dg) <= 1e-10
