"""soft_nms and nms_match: eager against references.py, and the export round trips."""

from __future__ import annotations

import numpy as np
import pytest
import references
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx


def boxes_and_scores(n: int, seed: int = 0, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(max(1, n // 5), 2, generator=g, dtype=dtype) * 80
    xy = centers[torch.randint(0, len(centers), (n,), generator=g)] + torch.randn(n, 2, generator=g, dtype=dtype) * 3
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g, dtype=dtype) * 20 + 2], 1)
    return boxes, torch.rand(n, generator=g, dtype=dtype)


@pytest.mark.parametrize("method", ["naive", "linear", "gaussian"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_soft_nms_eager_matches_reference(method: str, dtype: torch.dtype) -> None:
    boxes, scores = boxes_and_scores(50, dtype=dtype)
    dets, indices = ortops.torch.soft_nms(boxes, scores, 0.3, 0.5, 0.05, method)
    expected_dets, expected_indices = references.soft_nms(
        boxes.numpy(), scores.numpy(), 0.3, 0.5, 0.05, ["naive", "linear", "gaussian"].index(method), 0
    )
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    np.testing.assert_allclose(dets.numpy(), expected_dets, rtol=1e-6, atol=1e-7)


def test_nms_match_eager_matches_reference() -> None:
    boxes = torch.stack([boxes_and_scores(30, seed=s)[0] for s in range(2)])
    scores = torch.rand(2, 3, 30, generator=torch.Generator().manual_seed(1))
    got = ortops.torch.nms_match(boxes, scores, 0.4, 0.3)
    np.testing.assert_array_equal(got.numpy(), references.nms_match(boxes.numpy(), scores.numpy(), 0.4, 0.3))


class SoftModel(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ortops.torch.soft_nms(boxes, scores, 0.3, 0.5, 0.01, "gaussian")


class MatchModel(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return ortops.torch.nms_match(boxes, scores, 0.5, 0.1)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_soft_nms_export_roundtrip(exporter: str) -> None:
    model = export(SoftModel(), boxes_and_scores(40), exporter, dynamic_dims=[{0: "n"}, {0: "n"}])
    assert custom_nodes(model) == ["ortops::SoftNMS"]
    boxes, scores = boxes_and_scores(77, seed=3)
    dets, indices = run_onnx(model, (boxes, scores))
    expected_dets, expected_indices = SoftModel()(boxes, scores)
    np.testing.assert_array_equal(indices, expected_indices.numpy())
    np.testing.assert_allclose(dets, expected_dets.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_nms_match_export_roundtrip(exporter: str) -> None:
    boxes = torch.stack([boxes_and_scores(20, seed=s)[0] for s in range(2)])
    scores = torch.rand(2, 2, 20, generator=torch.Generator().manual_seed(2))
    model = export(MatchModel(), (boxes, scores), exporter, dynamic_dims=[{0: "b", 1: "n"}, {0: "b", 2: "n"}])
    assert custom_nodes(model) == ["ortops::NMSMatch"]
    boxes2 = torch.stack([boxes_and_scores(33, seed=s)[0] for s in range(3)])
    scores2 = torch.rand(3, 2, 33, generator=torch.Generator().manual_seed(5))
    (got,) = run_onnx(model, (boxes2, scores2))
    np.testing.assert_array_equal(got, MatchModel()(boxes2, scores2).numpy())


def rotated_case(b: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(b, n, 2, generator=g) * 40
    sizes = torch.rand(b, n, 2, generator=g) * 12 + 3
    theta = (torch.rand(b, n, 1, generator=g) - 0.5) * 6
    return torch.cat([centers, sizes, theta], -1), torch.rand(b, 2, n, generator=g)


def test_nms_rotated_eager_matches_reference() -> None:
    boxes, scores = rotated_case(2, 25)
    got = ortops.torch.nms_rotated(boxes, scores, 0.2, 0.3)
    np.testing.assert_array_equal(got.numpy(), references.nms_rotated(boxes.numpy(), scores.numpy(), 0.2, 0.3))


class RotatedModel(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return ortops.torch.nms_rotated(boxes, scores, 0.3, 0.1)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_nms_rotated_export_roundtrip(exporter: str) -> None:
    model = export(RotatedModel(), rotated_case(1, 10), exporter, dynamic_dims=[{0: "b", 1: "n"}, {0: "b", 2: "n"}])
    assert custom_nodes(model) == ["ortops::NMSRotated"]
    boxes, scores = rotated_case(2, 17, seed=4)
    (got,) = run_onnx(model, (boxes, scores))
    np.testing.assert_array_equal(got, RotatedModel()(boxes, scores).numpy())
