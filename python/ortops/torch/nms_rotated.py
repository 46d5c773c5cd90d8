"""NMS of rotated boxes: ``torch.ops.ortops.nms_rotated``, exported to ``ortops::NMSRotated``."""

from __future__ import annotations

import math

import torch
from torch.onnx import symbolic_helper

from ortops.torch._export import onnx_opset, register_export, typed


def _corners(box: list[float]) -> list[tuple[float, float]]:
    cx, cy, w, h, theta = box
    c, s = math.cos(theta), math.sin(theta)
    return [
        (cx + c * dx - s * dy, cy + s * dx + c * dy)
        for dx, dy in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))
    ]


def _area(points: list[tuple[float, float]]) -> float:
    return sum(points[i - 1][0] * points[i][1] - points[i][0] * points[i - 1][1] for i in range(len(points))) / 2


def _intersection(a: list[float], b: list[float]) -> float:
    """Sutherland-Hodgman clipping of one rectangle by the other, in float64."""
    subject, clip = _corners(a), _corners(b)
    if _area(subject) == 0 or _area(clip) == 0:
        return 0.0
    if _area(clip) < 0:
        clip = clip[::-1]
    for i in range(4):
        (ax, ay), (bx, by) = clip[i], clip[(i + 1) % 4]
        side = [(bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax) for p in subject]
        clipped = []
        for k, p in enumerate(subject):
            q, sp, sq = subject[(k + 1) % len(subject)], side[k], side[(k + 1) % len(subject)]
            if sp >= 0:
                clipped.append(p)
            if (sp >= 0) != (sq >= 0):
                t = sp / (sp - sq)
                clipped.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))
        subject = clipped
        if not subject:
            return 0.0
    return abs(_area(subject)) if len(subject) >= 3 else 0.0


@torch.library.custom_op("ortops::nms_rotated", mutates_args=())
def _nms_rotated(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float
) -> torch.Tensor:
    rows: list[list[int]] = []
    for b in range(boxes.shape[0]):
        box_list = boxes[b].double().tolist()
        for c in range(scores.shape[1]):
            score = scores[b, c]
            order = torch.sort(score, descending=True, stable=True).indices.tolist()
            kept: list[int] = []
            for i in order:
                suppressed = False
                for k in kept:
                    inter = _intersection(box_list[k], box_list[i])
                    union = box_list[k][2] * box_list[k][3] + box_list[i][2] * box_list[i][3] - inter
                    iou = inter / union if union != 0 else math.nan
                    if iou > iou_threshold:
                        suppressed = True
                        break
                if not suppressed:
                    kept.append(i)
            rows += [[b, c, i] for i in kept if float(score[i]) > score_threshold]
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)


@_nms_rotated.register_fake
def _(boxes, scores, iou_threshold, score_threshold):  # noqa: ANN001, ANN202
    return boxes.new_empty((torch.library.get_ctx().new_dynamic_size(), 3), dtype=torch.int64)


def nms_rotated(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float = 0.0
) -> torch.Tensor:
    """NMS of rotated boxes per batch and class, as mmdeploy's NMSRotated (exports to ``ortops::NMSRotated``).

    Args:
        boxes: ``Tensor[B, N, 5]`` rotated boxes (cx, cy, w, h, theta), theta in radians.
        scores: ``Tensor[B, C, N]``.
        iou_threshold: a box is suppressed when its rotated IoU with a kept box is greater.
        score_threshold: kept boxes at or below it are not returned (they still suppress).

    Returns:
        ``Tensor[K, 3]`` int64 rows (batch, class, box), per batch, class, in score order.
    """
    return torch.ops.ortops.nms_rotated(boxes, scores, float(iou_threshold), float(score_threshold))


@symbolic_helper.parse_args("v", "v", "f", "f")
def _symbolic(g, boxes, scores, iou_threshold, score_threshold):  # noqa: ANN001, ANN202
    node = g.op("ortops::NMSRotated", boxes, scores, iou_threshold_f=iou_threshold, score_threshold_f=score_threshold)
    return typed(node, boxes, sizes=[None, 3], dtype=torch.int64)


def _translation(boxes, scores, iou_threshold: float, score_threshold: float):  # noqa: ANN001, ANN202
    return onnx_opset.NMSRotated(boxes, scores, iou_threshold=iou_threshold, score_threshold=score_threshold)


register_export(
    torch.ops.ortops.nms_rotated.default,
    onnx_op="NMSRotated",
    function=nms_rotated,
    symbolic=_symbolic,
    translation=_translation,
)
