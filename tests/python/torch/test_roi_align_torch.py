"""ortops.torch.roi_align: avg mode against torchvision, max mode against references.py, export."""

from __future__ import annotations

import numpy as np
import pytest
import references
import torch
import torchvision

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

# torchvision scales rois in float64 (spatial_scale is a double there) and rounds once;
# ortops, like mmcv and ONNX, scales in the element type. Differences stay at float rounding.
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 2e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


def case(n: int, c: int, h: int, w: int, r: int, dtype: torch.dtype, scale: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(n, c, h, w, generator=g, dtype=dtype)
    size = torch.tensor([w / scale, h / scale], dtype=dtype)
    xy = (torch.rand(r, 2, generator=g, dtype=dtype) * 1.2 - 0.2) * size
    wh = torch.rand(r, 2, generator=g, dtype=dtype) * 0.6 * size
    batch = torch.randint(0, n, (r, 1), generator=g).to(dtype)
    return features, torch.cat([batch, xy, xy + wh], 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [0, 1, 3])
def test_avg_eager_matches_torchvision(dtype, aligned, sampling) -> None:
    features, rois = case(2, 4, 13, 17, 25, dtype, 0.25, seed=sampling)
    ours = ortops.torch.roi_align(features, rois, (5, 4), 0.25, sampling, "avg", aligned)
    theirs = torchvision.ops.roi_align(features, rois, (5, 4), 0.25, sampling, aligned)
    torch.testing.assert_close(ours, theirs, **TOLERANCE[dtype])


@pytest.mark.parametrize("sampling", [0, 2])
def test_max_eager_matches_reference(sampling) -> None:
    features, rois = case(2, 3, 9, 11, 8, torch.float64, 0.5, seed=7)
    ours = ortops.torch.roi_align(features, rois, 3, 0.5, sampling, "max", True)
    expected = references.roi_align(features.numpy(), rois.numpy(), 3, 3, 0.5, sampling, "max", True, compat=False)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_eager_accepts_non_contiguous_features() -> None:
    features, rois = case(1, 4, 10, 10, 5, torch.float32, 1.0)
    features = features.transpose(2, 3)
    assert not features.is_contiguous()
    torch.testing.assert_close(
        ortops.torch.roi_align(features, rois, 2, 1.0, 2), torchvision.ops.roi_align(features, rois, 2, 1.0, 2, True)
    )


class PoolModel(torch.nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(self, features: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return ortops.torch.roi_align(features, rois, (7, 6), 0.125, 2, self.mode, True) + 1


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_export_roundtrip(exporter: str, mode: str) -> None:
    features, rois = case(2, 8, 20, 24, 10, torch.float32, 0.125)
    model = export(PoolModel(mode), (features, rois), exporter, dynamic_dims=[{}, {0: "rois"}])
    assert custom_nodes(model) == ["ortops::RoIAlign"]
    features2, rois2 = case(2, 8, 20, 24, 31, torch.float32, 0.125, seed=4)
    (got,) = run_onnx(model, (features2, rois2))
    expected = PoolModel(mode)(features2, rois2)
    np.testing.assert_allclose(got, expected.numpy(), **TOLERANCE[torch.float32])
    if mode == "avg":
        vision = torchvision.ops.roi_align(features2, rois2, (7, 6), 0.125, 2, True) + 1
        np.testing.assert_allclose(got, vision.numpy(), **TOLERANCE[torch.float32])
