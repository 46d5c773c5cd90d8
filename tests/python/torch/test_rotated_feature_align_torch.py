"""ortops.torch.rotated_feature_align against references.py, and the export round trip."""

from __future__ import annotations

import numpy as np
import pytest
import references
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx


def case(n: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(n, 3, 6, 7, generator=g, dtype=dtype)
    centers = torch.rand(n, 6, 7, 2, generator=g, dtype=dtype) * 10 - 1
    sizes = torch.rand(n, 6, 7, 2, generator=g, dtype=dtype) * 5
    angle = (torch.rand(n, 6, 7, 1, generator=g, dtype=dtype) - 0.5) * 6
    return features, torch.cat([centers, sizes, angle], -1)


@pytest.mark.parametrize("points", [1, 5])
def test_eager_matches_reference(points: int) -> None:
    features, boxes = case(2, torch.float64)
    ours = ortops.torch.rotated_feature_align(features, boxes, 1.0, points)
    expected = references.rotated_feature_align(features.numpy(), boxes.numpy(), 1.0, points, y_first=False)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-10, atol=1e-12)


class Model(torch.nn.Module):
    def forward(self, features: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        return ortops.torch.rotated_feature_align(features, boxes, 0.5, 5)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip(exporter: str) -> None:
    features, boxes = case(1, torch.float32)
    model = export(Model(), (features, boxes), exporter, dynamic_dims=[{0: "n"}, {0: "n"}])
    assert custom_nodes(model) == ["ortops::RotatedFeatureAlign"]
    features2, boxes2 = case(3, torch.float32, seed=1)
    (got,) = run_onnx(model, (features2, boxes2))
    np.testing.assert_allclose(got, Model()(features2, boxes2).numpy(), rtol=1e-5, atol=1e-5)
