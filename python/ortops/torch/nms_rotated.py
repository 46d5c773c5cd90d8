"""NMS of rotated boxes: ``torch.ops.ortops.nms_rotated``, exported to ``ortops::NMSRotated``."""

from __future__ import annotations

import torch

from ortops.torch._boxes import check_batched_boxes_and_scores
from ortops.torch._op import Arg, BadArgument, Op


def _check(boxes: torch.Tensor, scores: torch.Tensor) -> None:
    check_batched_boxes_and_scores(boxes, scores, 5)
    if not bool(torch.isfinite(boxes).all()) or not bool(torch.isfinite(scores).all()):
        raise BadArgument("boxes and scores must be finite (no NaN or Inf)")


NMS_ROTATED = Op(
    "nms_rotated",
    "NMSRotated",
    [
        Arg(
            "boxes",
            torch.Tensor,
            "``Tensor[B, N, 5]`` rotated boxes (cx, cy, w, h, theta), theta in radians; float32 or float64.",
        ),
        Arg("scores", torch.Tensor, "``Tensor[B, C, N]`` scores per batch and class, same dtype as ``boxes``."),
        Arg("iou_threshold", float, "a box is suppressed when its IoU with a kept box is greater."),
        Arg(
            "score_threshold",
            float,
            "kept boxes scoring at or below it are not returned, but they still suppress lower-scored boxes (the "
            "threshold applies after suppression).",
        ),
    ],
    check=_check,
)


@NMS_ROTATED.public
def nms_rotated(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float = 0.0
) -> torch.Tensor:
    """NMS of rotated boxes per batch and class, as mmdeploy's NMSRotated (exports to ``ortops::NMSRotated``).

    The rectangle of (cx, cy, w, h, theta) has corners (cx, cy) + R(theta) (+-w/2, +-h/2) with
    R = [[cos, -sin], [sin, cos]] (x right, y down). IoU is exact (polygon intersection, float64);
    a box with w <= 0 or h <= 0 has IoU 0 with every box. Thresholds are rounded to float32, as
    the ONNX attributes store them.

    Returns:
        ``Tensor[K, 3]`` int64 rows (batch, class, box): per batch, then per class, in descending
        score order (ties: lower box index first).

    Raises:
        ValueError: on wrong shapes, differing dtypes, or NaN/Inf in ``boxes`` or ``scores``.

    Runs ortops' CPU kernel (for CUDA tensors too, through copies). Not differentiable.
    """
    return NMS_ROTATED(boxes, scores, float(iou_threshold), float(score_threshold))
