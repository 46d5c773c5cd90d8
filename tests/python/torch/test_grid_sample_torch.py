"""ortops::GridSample against torch.nn.functional.grid_sample, and the export round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ortops.torch

from ortest import run
from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


def case(dtype: torch.dtype, seed: int = 0, n: int = 2):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(n, 3, 6, 9, generator=g, dtype=dtype)
    grid = (torch.rand(n, 5, 7, 2, generator=g, dtype=dtype) * 2 - 1) * 1.4
    return features, grid


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("padding", list(PADDINGS))
@pytest.mark.parametrize("align", [False, True])
def test_onnx_matches_torch(dtype, mode, padding, align) -> None:
    features, grid = case(dtype, seed=MODES[mode] + 3 * PADDINGS[padding])
    attrs = dict(interpolation_mode=MODES[mode], padding_mode=PADDINGS[padding], align_corners=int(align))
    (got,) = run("grid_sampler", "mmcv", {"input": features.numpy(), "grid": grid.numpy()}, ["output"], **attrs)
    expected = torch.nn.functional.grid_sample(features, grid, mode, padding, align)
    np.testing.assert_allclose(got, expected.numpy(), **TOLERANCE[dtype])


def test_eager_is_torch_grid_sample_on_non_contiguous_input() -> None:
    features, grid = case(torch.float32)
    features = features.transpose(2, 3)
    torch.testing.assert_close(
        ortops.torch.grid_sample(features, grid, "bicubic", "reflection", True),
        torch.nn.functional.grid_sample(features, grid, "bicubic", "reflection", True),
    )


class Model(torch.nn.Module):
    def forward(self, features: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return ortops.torch.grid_sample(features, grid, "bilinear", "border", False) * 2


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip(exporter: str) -> None:
    features, grid = case(torch.float32)
    model = export(Model(), (features, grid), exporter, dynamic_dims=[{0: "n"}, {0: "n"}])
    assert custom_nodes(model) == ["ortops::GridSample"]
    features2, grid2 = case(torch.float32, seed=3, n=3)
    (got,) = run_onnx(model, (features2, grid2))
    np.testing.assert_allclose(got, Model()(features2, grid2).numpy(), **TOLERANCE[torch.float32])
