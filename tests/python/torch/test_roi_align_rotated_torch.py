"""ortops.torch.roi_align_rotated against references.py, and the export round trip."""

from __future__ import annotations

import numpy as np
import pytest
import references
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx


def case(r: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(2, 3, 12, 14, generator=g, dtype=dtype)
    centers = torch.rand(r, 2, generator=g, dtype=dtype) * torch.tensor([28.0, 24.0], dtype=dtype)
    sizes = torch.rand(r, 2, generator=g, dtype=dtype) * 12
    theta = (torch.rand(r, 1, generator=g, dtype=dtype) - 0.5) * 6
    batch = torch.randint(0, 2, (r, 1), generator=g).to(dtype)
    return features, torch.cat([batch, centers, sizes, theta], 1)


@pytest.mark.parametrize("sampling", [0, 2])
@pytest.mark.parametrize("clockwise", [False, True])
def test_eager_matches_reference(sampling: int, clockwise: bool) -> None:
    features, rois = case(6, torch.float64)
    ours = ortops.torch.roi_align_rotated(features, rois, (3, 2), 0.5, sampling, True, clockwise)
    expected = references.roi_align_rotated(features.numpy(), rois.numpy(), 3, 2, 0.5, sampling, True, clockwise)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-10, atol=1e-12)


class Model(torch.nn.Module):
    def forward(self, features: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return ortops.torch.roi_align_rotated(features, rois, (4, 4), 0.5, 2, True, False)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip(exporter: str) -> None:
    features, rois = case(5, torch.float32)
    model = export(Model(), (features, rois), exporter, dynamic_dims=[{}, {0: "rois"}])
    assert custom_nodes(model) == ["ortops::RoIAlignRotated"]
    features2, rois2 = case(9, torch.float32, seed=2)
    (got,) = run_onnx(model, (features2, rois2))
    np.testing.assert_allclose(got, Model()(features2, rois2).numpy(), rtol=1e-5, atol=1e-5)
