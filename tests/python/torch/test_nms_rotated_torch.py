"""ortops.torch.nms_rotated: eager op against a slow loop, and export round trips.

torchvision has no rotated IoU and mmcv is not installed, so the reference is a slow loop
written here from the spec, with its own IoU (Sutherland-Hodgman clipping in plain Python,
unlike the eager op's vectorised corner-and-crossing polygon), checked on closed forms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import references
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

# Random cases keep every IoU farther than this from the threshold, so kept sets agree exactly.
IOU_MARGIN = 1e-6
DTYPES = [torch.float32, torch.float64]


def corners(box) -> list[tuple[float, float]]:
    cx, cy, w, h, theta = (float(v) for v in box)
    c, s = math.cos(theta), math.sin(theta)
    half = ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))
    return [(cx + c * x - s * y, cy + s * x + c * y) for x, y in half]


def shoelace(points) -> float:
    return sum(points[i - 1][0] * points[i][1] - points[i][0] * points[i - 1][1] for i in range(len(points))) / 2


def ref_iou(a, b) -> float:
    """Clip a's polygon by each edge line of b, then shoelace; 0 for boxes with w or h <= 0."""
    if min(float(a[2]), float(a[3]), float(b[2]), float(b[3])) <= 0:
        return 0.0
    polygon, clip = corners(a), corners(b)  # both counter-clockwise in a y-up frame
    for i in range(4):
        (ax, ay), (bx, by) = clip[i], clip[(i + 1) % 4]
        clipped = []
        for k, p in enumerate(polygon):
            q = polygon[(k + 1) % len(polygon)]
            side_p = (bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax)
            side_q = (bx - ax) * (q[1] - ay) - (by - ay) * (q[0] - ax)
            if side_p >= 0:
                clipped.append(p)
            if (side_p >= 0) != (side_q >= 0):
                t = side_p / (side_p - side_q)
                clipped.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))
        polygon = clipped
        if len(polygon) < 3:
            return 0.0
    area_a, area_b = float(a[2]) * float(a[3]), float(b[2]) * float(b[3])
    inter = min(abs(shoelace(polygon)), area_a, area_b)
    return inter / (area_a + area_b - inter)


def ref_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float) -> np.ndarray:
    """The slow greedy loop of references.py over this file's clipping IoU, in float64."""
    return references.nms_rotated(
        boxes.double().numpy(), scores.double().numpy(), iou_threshold, score_threshold, iou=ref_iou
    )


def clear_of(boxes: torch.Tensor, threshold: float) -> bool:
    threshold = float(np.float32(threshold))
    return all(
        abs(ref_iou(batch[i], batch[j]) - threshold) > IOU_MARGIN
        for batch in boxes.double().tolist()
        for i in range(len(batch))
        for j in range(i)
    )


def case(b: int, c: int, n: int, seed: int = 0, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(b, max(1, n // 4), 2, generator=g, dtype=torch.float64) * 60
    pick = torch.randint(0, centers.shape[1], (b, n), generator=g)
    xy = centers.gather(1, pick[..., None].expand(b, n, 2)) + torch.randn(b, n, 2, generator=g, dtype=torch.float64) * 2
    wh = torch.rand(b, n, 2, generator=g, dtype=torch.float64) * 12 + 3
    theta = (torch.rand(b, n, 1, generator=g, dtype=torch.float64) - 0.5) * 2 * math.pi
    theta[torch.rand(b, n, 1, generator=g) < 0.2] = 0
    boxes = torch.cat([xy, wh, theta], -1)
    if n >= 4:
        boxes[:, 1] = boxes[:, 0]  # an exact duplicate
    scores = torch.randint(0, 11, (b, c, n), generator=g).to(torch.float64) / 10  # ties
    return boxes.to(dtype), scores.to(dtype)


@pytest.mark.parametrize(
    "a,b,expected",
    [
        ([0, 0, 4, 2, 0.3], [0, 0, 4, 2, 0.3], 1.0),
        ([0, 0, 4, 4, 0], [2, 0, 4, 4, 0], 1 / 3),
        ([0, 0, 2, 2, 0], [0, 0, 2, 2, math.pi / 4], 1 / math.sqrt(2)),
        ([0, 0, 10, 10, 0.2], [0, 0, 2, 2, 1.1], 0.04),
        ([0, 0, 2, 2, 0], [2, 0, 2, 2, 0], 0.0),
        ([0, 0, 2, 2, 0], [9, 9, 2, 2, 0.5], 0.0),
        ([0, 0, 0, 2, 0], [0, 0, 2, 2, 0], 0.0),
    ],
)
def test_known_ious(a, b, expected) -> None:
    assert ref_iou(a, b) == pytest.approx(expected, abs=1e-9)
    for threshold in (expected - 1e-6, expected + 1e-6):
        boxes, scores = torch.tensor([[a, b]], dtype=torch.float64), torch.tensor([[[0.9, 0.8]]], dtype=torch.float64)
        got = ortops.torch.nms_rotated(boxes, scores, threshold)
        assert len(got) == (1 if expected > threshold else 2), (threshold, got)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 20), (3, 2, 12)])
@pytest.mark.parametrize("iou,score", [(0.05, 0.0), (0.3, 0.35), (0.7, 0.95)])
def test_eager_matches_slow_loop(dtype, shape, iou, score) -> None:
    boxes, scores = case(*shape, seed=sum(shape) + int(iou * 100), dtype=dtype)
    assert clear_of(boxes, iou)
    got = ortops.torch.nms_rotated(boxes, scores, iou, score)
    assert got.dtype == torch.int64 and got.shape[1] == 3
    np.testing.assert_array_equal(got.numpy(), ref_nms(boxes, scores, iou, score))


def test_non_contiguous_inputs() -> None:
    boxes, scores = case(2, 3, 16, seed=9)
    strided_boxes = boxes.transpose(1, 2).contiguous().transpose(1, 2)
    strided_scores = torch.cat([scores, scores], 2)[..., ::2]
    strided_scores[...] = scores
    assert not strided_boxes.is_contiguous() and not strided_scores.is_contiguous()
    assert clear_of(boxes, 0.2)
    got = ortops.torch.nms_rotated(strided_boxes, strided_scores, 0.2, 0.1)
    np.testing.assert_array_equal(got.numpy(), ref_nms(boxes, scores, 0.2, 0.1))


def test_low_scores_still_suppress_and_degenerate_boxes() -> None:
    boxes = torch.tensor([[[0, 0, 4, 4, 0], [0.1, 0, 4, 4, 0], [20, 20, 4, 4, 0], [20, 20, 0, 4, 0]]])
    scores = torch.tensor([[[0.2, 0.1, 0.9, 0.95]]])
    got = ortops.torch.nms_rotated(boxes, scores, 0.5, 0.5)
    np.testing.assert_array_equal(got.numpy(), [[0, 0, 3], [0, 0, 2]])  # box 1 suppressed by unemitted box 0


@pytest.mark.parametrize("shape", [(0, 2, 4), (2, 0, 4), (2, 3, 0)])
def test_empty_inputs(shape) -> None:
    b, c, n = shape
    got = ortops.torch.nms_rotated(torch.zeros(b, n, 5), torch.zeros(b, c, n), 0.5, -1.0)
    assert got.shape == (0, 3) and got.dtype == torch.int64


def test_bad_inputs() -> None:
    boxes, scores = case(1, 2, 4)
    with pytest.raises(ValueError, match=r"boxes must have shape \[B, N, 5\], got \[1, 4, 4\]"):
        ortops.torch.nms_rotated(boxes[..., :4], scores, 0.5)
    with pytest.raises(ValueError, match=r"scores must have shape \[B, C, N\] = \[1, C, 4\], got \[1, 2, 3\]"):
        ortops.torch.nms_rotated(boxes, scores[..., :3], 0.5)
    with pytest.raises(ValueError, match="scores is float64, but the inputs before it are float32"):
        ortops.torch.nms_rotated(boxes, scores.double(), 0.5)
    bad = boxes.clone()
    bad[0, 1, 2] = math.nan
    with pytest.raises(ValueError, match="must be finite"):
        ortops.torch.nms_rotated(bad, scores, 0.5)
    with pytest.raises(ValueError, match="must be finite"):
        ortops.torch.nms_rotated(boxes, scores.clone().fill_(math.inf), 0.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu() -> None:
    boxes, scores = case(2, 3, 30, seed=5)
    got = ortops.torch.nms_rotated(boxes.cuda(), scores.cuda(), 0.3, 0.2)
    assert got.device.type == "cuda"
    np.testing.assert_array_equal(got.cpu().numpy(), ortops.torch.nms_rotated(boxes, scores, 0.3, 0.2).numpy())


class Model(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return ortops.torch.nms_rotated(boxes, scores, 0.3, 0.15)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_export_roundtrip(exporter: str, dtype: torch.dtype) -> None:
    dynamic = [{0: "batch", 1: "boxes"}, {0: "batch", 1: "classes", 2: "boxes"}]
    model = export(Model(), case(1, 2, 10, seed=1, dtype=dtype), exporter, dynamic_dims=dynamic)
    assert custom_nodes(model) == ["ortops::NMSRotated"]
    for shape, seed in (((2, 3, 23), 4), ((1, 1, 0), 0), ((3, 1, 7), 6)):
        boxes, scores = case(*shape, seed=seed, dtype=dtype)
        assert clear_of(boxes, 0.3)
        (got,) = run_onnx(model, (boxes, scores))
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, Model()(boxes, scores).numpy())
        np.testing.assert_array_equal(got, ref_nms(boxes, scores, 0.3, 0.15))
