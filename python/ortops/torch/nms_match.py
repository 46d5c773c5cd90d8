"""NMS with matches: ``torch.ops.ortops.nms_match``, exported to ``ortops::NMSMatch``."""

from __future__ import annotations

import torch

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_no_gradient
from ortops.torch._boxes import check_batched_boxes_and_scores
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes


@torch.library.custom_op("ortops::nms_match", mutates_args=())
def _nms_match(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: torch.Tensor, score_threshold: torch.Tensor
) -> torch.Tensor:
    check_dtypes("NMSMatch", "nms_match", boxes, scores, iou_threshold, score_threshold)
    check_batched_boxes_and_scores("nms_match", boxes, scores, 4)
    for name, t in (("iou_threshold", iou_threshold), ("score_threshold", score_threshold)):
        if t.numel() != 1:
            raise ValueError(f"ortops.nms_match: {name} must hold one value, got shape {list(t.shape)}")
    if bool(torch.isnan(boxes).any()) or bool(torch.isnan(scores).any()):
        raise ValueError("ortops.nms_match: boxes and scores must not contain NaN")
    # The thresholds are float32 values, as in the original's float32 inputs.
    iou_limit = float(iou_threshold.reshape(-1)[0].float())
    score_limit = float(score_threshold.reshape(-1)[0].float())
    if iou_limit != iou_limit or score_limit != score_limit:
        raise ValueError("ortops.nms_match: the thresholds must not be NaN")
    # Any device: the CPU kernel serves CUDA tensors too (the selection is sequential).
    (matches,) = kernel.run("NMSMatch", (boxes.cpu(), scores.cpu(), iou_threshold.cpu(), score_threshold.cpu()), {})
    return matches.to(boxes.device)


register_no_gradient(_nms_match, "nms_match")


@_nms_match.register_fake
def _(boxes, scores, iou_threshold, score_threshold):  # noqa: ANN001, ANN202
    check_dtypes("NMSMatch", "nms_match", boxes, scores, iou_threshold, score_threshold)
    return boxes.new_empty((torch.library.get_ctx().new_dynamic_size(), 4), dtype=torch.int64)


def nms_match(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float) -> torch.Tensor:
    """Greedy NMS per batch and class that reports which kept box suppressed which
    (mmdeploy's NMSMatch; exports to ``ortops::NMSMatch``).

    Args:
        boxes: ``Tensor[B, N, 4]`` boxes as (x1, y1, x2, y2).
        scores: ``Tensor[B, C, N]``.
        iou_threshold: a box is suppressed when its IoU with a kept box is at least this. IoU is
            inter / (area1 + area2 - inter + 1e-10) without offset, rounded to float32 as in
            mmdeploy; the threshold is used as a float32 value.
        score_threshold: only kept boxes scoring strictly above this report their matches (the
            others still suppress boxes).

    Returns:
        ``Tensor[K, 4]`` int64 rows (batch, class, kept box, suppressed box): per batch, then class,
        then kept box in score order (ties: lower index first), suppressed boxes in suppression order.

    Runs ortops' CPU kernel (for CUDA tensors too, through copies). Not differentiable.
    """
    as_tensor = lambda v: torch.tensor([v], dtype=torch.float32, device=boxes.device)  # noqa: E731
    return torch.ops.ortops.nms_match(boxes, scores, as_tensor(float(iou_threshold)), as_tensor(float(score_threshold)))


def _symbolic(g, boxes, scores, iou_threshold, score_threshold):  # noqa: ANN001, ANN202 (TorchScript graph values)
    return typed(
        g.op("ortops::NMSMatch", boxes, scores, iou_threshold, score_threshold),
        boxes,
        sizes=[None, 4],
        dtype=torch.int64,
    )


def _translation(boxes, scores, iou_threshold, score_threshold):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.NMSMatch(boxes, scores, iou_threshold, score_threshold)


register_export(
    torch.ops.ortops.nms_match.default,
    onnx_op="NMSMatch",
    function=nms_match,
    symbolic=_symbolic,
    translation=_translation,
)
