"""ortops.torch.nms_match: eager against the slow loop of references.py, and export round trips."""

from __future__ import annotations

import numpy as np
import pytest
import references
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx


def reference(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float) -> list:
    """The slow loop of references.py, on the tensors' values."""
    return references.nms_match(boxes.numpy(), scores.numpy(), iou_threshold, score_threshold).tolist()


def case(b: int, c: int, n: int, seed: int = 0, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(b, max(1, n // 4), 2, generator=g, dtype=dtype) * 50
    picks = torch.randint(0, centers.shape[1], (b, n), generator=g)
    xy = torch.gather(centers, 1, picks[..., None].expand(b, n, 2)) + torch.randn(b, n, 2, generator=g, dtype=dtype)
    boxes = torch.cat([xy, xy + torch.rand(b, n, 2, generator=g, dtype=dtype) * 10 + 4], -1)
    scores = (torch.rand(b, c, n, generator=g, dtype=dtype) * 10).round() / 10  # ties
    return boxes, scores


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1, 0), (0, 2, 4), (2, 3, 25), (3, 1, 12)])
@pytest.mark.parametrize("iou,score", [(0.3, 0.0), (0.5, 0.5)])
def test_eager_matches_reference(dtype: torch.dtype, shape: tuple[int, int, int], iou: float, score: float) -> None:
    boxes, scores = case(*shape, seed=sum(shape), dtype=dtype)
    got = ortops.torch.nms_match(boxes, scores, iou, score)
    assert got.dtype == torch.int64 and got.shape[1:] == (4,)
    assert got.tolist() == reference(boxes, scores, iou, score)


def test_non_contiguous_inputs() -> None:
    boxes, scores = case(2, 3, 20, seed=4)
    strided_boxes = boxes.transpose(1, 2).contiguous().transpose(1, 2)
    strided_scores = scores.transpose(0, 1).contiguous().transpose(0, 1)
    assert not strided_boxes.is_contiguous() and not strided_scores.is_contiguous()
    got = ortops.torch.nms_match(strided_boxes, strided_scores, 0.4, 0.2)
    assert got.tolist() == reference(boxes, scores, 0.4, 0.2)


def test_iou_exactly_at_threshold_suppresses() -> None:
    boxes = torch.tensor([[[0, 0, 10, 10], [0, 0, 10, 5]]], dtype=torch.float64)
    scores = torch.tensor([[[0.9, 0.8]]], dtype=torch.float64)
    assert ortops.torch.nms_match(boxes, scores, 0.5, 0.0).tolist() == [[0, 0, 0, 1]]
    above = float(np.nextafter(np.float32(0.5), np.float32(1)))
    assert ortops.torch.nms_match(boxes, scores, above, 0.0).shape == (0, 4)


def test_bad_arguments_are_errors() -> None:
    boxes, scores = case(2, 2, 5)
    with pytest.raises(ValueError, match=r"scores must have shape \[B, C, N\] = \[2, C, 5\], got \[2, 2, 4\]"):
        ortops.torch.nms_match(boxes, scores[..., :4], 0.5, 0.1)
    with pytest.raises(ValueError, match=r"boxes must have shape \[B, N, 4\], got \[5, 4\]"):
        ortops.torch.nms_match(boxes[0], scores, 0.5, 0.1)
    with pytest.raises(ValueError, match="iou_threshold must hold one value"):
        torch.ops.ortops.nms_match(boxes, scores, torch.tensor([0.5, 0.6]), torch.tensor([0.1]))
    with pytest.raises(ValueError, match="must not be NaN"):
        ortops.torch.nms_match(boxes, scores, float("nan"), 0.1)


class MatchModel(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return ortops.torch.nms_match(boxes + 1, scores, 0.45, 0.15)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip_with_dynamic_batch_and_n(exporter: str) -> None:
    model = export(MatchModel(), case(2, 3, 16), exporter, dynamic_dims=[{0: "b", 1: "n"}, {0: "b", 2: "n"}])
    assert custom_nodes(model) == ["ortops::NMSMatch"]
    for shape in [(3, 3, 31), (1, 3, 0)]:
        boxes, scores = case(*shape, seed=9)
        (got,) = run_onnx(model, (boxes, scores))
        np.testing.assert_array_equal(got, MatchModel()(boxes, scores).numpy())
        assert got.tolist() == reference(boxes + 1, scores, 0.45, 0.15)
