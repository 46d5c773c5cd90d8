"""NMS of rotated boxes: ``torch.ops.ortops.nms_rotated``, exported to ``ortops::NMSRotated``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch._boxes import check_batched_boxes_and_scores
from ortops.torch._export import onnx_opset, register_export, typed

# Corner signs in order around the rectangle: (-w/2, -h/2), (w/2, -h/2), (w/2, h/2), (-w/2, h/2).
_CORNER_SIGNS = ((-0.5, -0.5), (0.5, -0.5), (0.5, 0.5), (-0.5, 0.5))


def _corner_offsets(boxes: torch.Tensor) -> torch.Tensor:
    """``Tensor[M, 4, 2]``: R(theta) (+-w/2, +-h/2) for ``boxes`` ``Tensor[M, 5]``."""
    signs = boxes.new_tensor(_CORNER_SIGNS)
    local = signs * boxes[:, None, 2:4]
    cos, sin = torch.cos(boxes[:, 4:5]), torch.sin(boxes[:, 4:5])
    x = cos * local[..., 0] - sin * local[..., 1]
    y = sin * local[..., 0] + cos * local[..., 1]
    return torch.stack([x, y], -1)


def _inside(points: torch.Tensor, boxes: torch.Tensor, slack: torch.Tensor) -> torch.Tensor:
    """Whether ``points`` ``Tensor[M, P, 2]`` (relative to the frame origin) lie in ``boxes`` ``Tensor[M, 5]``."""
    delta = points - boxes[:, None, 0:2]
    cos, sin = torch.cos(boxes[:, None, 4]), torch.sin(boxes[:, None, 4])
    along = delta[..., 0] * cos + delta[..., 1] * sin
    across = -delta[..., 0] * sin + delta[..., 1] * cos
    return (along.abs() <= boxes[:, None, 2] / 2 + slack) & (across.abs() <= boxes[:, None, 3] / 2 + slack)


def _rotated_iou_pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of ``a[k]`` with ``b[k]`` for boxes ``Tensor[M, 5]``, in float64: ``Tensor[M]``.

    The intersection polygon's vertices are the corners of each box inside the other and the
    crossings of their edges; they are ordered by angle around their mean and measured as a
    fan of triangles. Each pair is evaluated in its first box's frame (centres subtracted) for
    precision. A box with w <= 0 or h <= 0 is empty: IoU 0.
    """
    m = a.shape[0]
    b = torch.cat([b[:, :2] - a[:, :2], b[:, 2:]], 1)
    a = torch.cat([torch.zeros_like(a[:, :2]), a[:, 2:]], 1)
    corners_a = _corner_offsets(a)  # [M, 4, 2]
    corners_b = _corner_offsets(b) + b[:, None, 0:2]
    slack = 1e-9 * torch.maximum(a[:, 2:4].amax(1), b[:, 2:4].amax(1))[:, None]

    # Edge crossings: a's edge i (p + t r) against b's edge j (q + u s), t, u in [0, 1].
    p, r = corners_a[:, :, None], (corners_a.roll(-1, 1) - corners_a)[:, :, None]
    q, s = corners_b[:, None], (corners_b.roll(-1, 1) - corners_b)[:, None]
    det = r[..., 0] * s[..., 1] - r[..., 1] * s[..., 0]  # [M, 4, 4]
    qp = q - p
    safe = torch.where(det == 0, torch.ones_like(det), det)
    t = (qp[..., 0] * s[..., 1] - qp[..., 1] * s[..., 0]) / safe
    u = (qp[..., 0] * r[..., 1] - qp[..., 1] * r[..., 0]) / safe
    crossing_ok = (det != 0) & (t >= 0) & (t <= 1) & (u >= 0) & (u <= 1)
    crossings = (p + t[..., None] * r).reshape(m, 16, 2)

    points = torch.cat([corners_a, corners_b, crossings], 1)  # [M, 24, 2]
    valid = torch.cat([_inside(corners_a, b, slack), _inside(corners_b, a, slack), crossing_ok.reshape(m, 16)], 1)
    count = valid.sum(1)
    mean = (points * valid[..., None]).sum(1) / count.clamp(min=1)[:, None]
    rel = points - mean[:, None]
    angle = torch.where(valid, torch.atan2(rel[..., 1], rel[..., 0]), torch.full_like(rel[..., 0], 10.0))
    order = angle.argsort(1)
    rel = rel.gather(1, order[..., None].expand(m, 24, 2))
    k = torch.arange(24, device=a.device)
    following = torch.where(k[None] + 1 < count[:, None], k[None] + 1, torch.zeros_like(k)[None])
    nxt = rel.gather(1, following[..., None].expand(m, 24, 2))
    fan = rel[..., 0] * nxt[..., 1] - rel[..., 1] * nxt[..., 0]
    inter = (fan * (k[None] < count[:, None])).sum(1).abs() / 2

    area_a, area_b = a[:, 2] * a[:, 3], b[:, 2] * b[:, 3]
    nonempty = (a[:, 2] > 0) & (a[:, 3] > 0) & (b[:, 2] > 0) & (b[:, 3] > 0) & (count >= 3)
    inter = torch.minimum(inter, torch.minimum(area_a, area_b))
    iou = inter / torch.where(nonempty, area_a + area_b - inter, torch.ones_like(inter))
    return torch.where(nonempty & torch.isfinite(iou), iou.clamp(max=1), torch.zeros_like(iou))


# Pairs per vectorised IoU call: bounds the temporaries (about 2 KB per pair).
_PAIR_CHUNK = 1 << 15


def _suppression_matrix(boxes: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """``Tensor[N, N]`` bool: IoU(i, j) > iou_threshold, for boxes ``Tensor[N, 5]`` (float64).

    The exact IoU is computed only for pairs whose axis-aligned bounds overlap; every other
    pair has IoU 0.
    """
    n = boxes.shape[0]
    cos, sin = torch.cos(boxes[:, 4]).abs(), torch.sin(boxes[:, 4]).abs()
    w, h = boxes[:, 2].clamp(min=0), boxes[:, 3].clamp(min=0)
    half = torch.stack([cos * w + sin * h, sin * w + cos * h], 1) / 2
    low, high = boxes[:, :2] - half, boxes[:, :2] + half
    near = ((low[:, None] < high[None]) & (low[None] < high[:, None])).all(-1).triu(1)
    first, second = near.nonzero().unbind(1)
    suppress = torch.full((n, n), 0.0 > iou_threshold, dtype=torch.bool, device=boxes.device)
    for begin in range(0, len(first), _PAIR_CHUNK):
        i, j = first[begin : begin + _PAIR_CHUNK], second[begin : begin + _PAIR_CHUNK]
        over = _rotated_iou_pairs(boxes[i], boxes[j]) > iou_threshold
        suppress[i, j] = over
        suppress[j, i] = over
    return suppress


def _as_float32(value: float) -> float:
    """The value an ONNX float attribute stores, so eager and exported models decide alike."""
    return float(torch.tensor(value, dtype=torch.float32))


@torch.library.custom_op("ortops::nms_rotated", mutates_args=())
def _nms_rotated(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float
) -> torch.Tensor:
    check_batched_boxes_and_scores("nms_rotated", boxes, scores, 5)
    if not boxes.is_floating_point() or scores.dtype != boxes.dtype:
        raise ValueError(
            f"ortops.nms_rotated: boxes and scores must share a float dtype, got {boxes.dtype}, {scores.dtype}"
        )
    if not bool(torch.isfinite(boxes).all()) or not bool(torch.isfinite(scores).all()):
        raise ValueError("ortops.nms_rotated: boxes and scores must be finite (no NaN or Inf)")
    iou_threshold, score_threshold = _as_float32(iou_threshold), _as_float32(score_threshold)
    rows: list[torch.Tensor] = []
    for b in range(boxes.shape[0]):
        suppress = _suppression_matrix(boxes[b].double(), iou_threshold)
        for c in range(scores.shape[1]):
            order = torch.sort(scores[b, c], descending=True, stable=True).indices
            ranked = suppress[order][:, order]
            alive = torch.ones(len(order), dtype=torch.bool, device=boxes.device)
            for i in range(len(order)):
                if alive[i]:
                    alive[i + 1 :] &= ~ranked[i, i + 1 :]
            kept = order[alive & (scores[b, c][order] > score_threshold)]
            rows.append(torch.stack([torch.full_like(kept, b), torch.full_like(kept, c), kept], 1))
    if not rows:
        return torch.empty((0, 3), dtype=torch.int64, device=boxes.device)
    return torch.cat(rows)


@_nms_rotated.register_fake
def _(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float) -> torch.Tensor:
    return boxes.new_empty((torch.library.get_ctx().new_dynamic_size(), 3), dtype=torch.int64)


def nms_rotated(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float = 0.0
) -> torch.Tensor:
    """NMS of rotated boxes per batch and class, as mmdeploy's NMSRotated (exports to ``ortops::NMSRotated``).

    The rectangle of (cx, cy, w, h, theta) has corners (cx, cy) + R(theta) (+-w/2, +-h/2) with
    R = [[cos, -sin], [sin, cos]] (x right, y down). IoU is exact (polygon intersection, float64);
    a box with w <= 0 or h <= 0 has IoU 0 with every box. Thresholds are rounded to float32, as
    the ONNX attributes store them.

    Args:
        boxes: ``Tensor[B, N, 5]`` rotated boxes (cx, cy, w, h, theta), theta in radians; float32 or float64.
        scores: ``Tensor[B, C, N]`` scores per batch and class, same dtype as ``boxes``.
        iou_threshold: a box is suppressed when its IoU with a kept box is greater.
        score_threshold: kept boxes scoring at or below it are not returned, but they still
            suppress lower-scored boxes (the threshold applies after suppression).

    Returns:
        ``Tensor[K, 3]`` int64 rows (batch, class, box): per batch, then per class, in descending
        score order (ties: lower box index first).

    Raises:
        ValueError: on wrong shapes, differing dtypes, or NaN/Inf in ``boxes`` or ``scores``.
    """
    return torch.ops.ortops.nms_rotated(boxes, scores, float(iou_threshold), float(score_threshold))


@symbolic_helper.parse_args("v", "v", "f", "f")
def _symbolic(g, boxes, scores, iou_threshold, score_threshold):  # noqa: ANN001, ANN202 (TorchScript graph values)
    node = g.op("ortops::NMSRotated", boxes, scores, iou_threshold_f=iou_threshold, score_threshold_f=score_threshold)
    return typed(node, boxes, sizes=[None, 3], dtype=torch.int64)


def _translation(boxes, scores, iou_threshold: float, score_threshold: float):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.NMSRotated(boxes, scores, iou_threshold=iou_threshold, score_threshold=score_threshold)


register_export(
    torch.ops.ortops.nms_rotated.default,
    onnx_op="NMSRotated",
    function=nms_rotated,
    symbolic=_symbolic,
    translation=_translation,
)
