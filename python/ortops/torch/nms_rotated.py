"""NMS of rotated boxes: ``torch.ops.ortops.nms_rotated``, exported to ``ortops::NMSRotated``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_no_gradient
from ortops.torch._boxes import check_batched_boxes_and_scores
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes


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
    check_dtypes("NMSRotated", "nms_rotated", boxes, scores)
    # Any device: the CPU kernel serves CUDA tensors too (the selection is sequential).
    attributes = {"iou_threshold": iou_threshold, "score_threshold": score_threshold}
    (selected,) = kernel.run("NMSRotated", (boxes.cpu(), scores.cpu()), attributes)
    return selected.to(boxes.device)


register_no_gradient(_nms_rotated, "nms_rotated")


@_nms_rotated.register_fake
def _(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float) -> torch.Tensor:
    check_dtypes("NMSRotated", "nms_rotated", boxes, scores)
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

    Runs ortops' CPU kernel (for CUDA tensors too, through copies). Not differentiable.
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
