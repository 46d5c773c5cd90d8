"""NMS with matches: ``torch.ops.ortops.nms_match``, exported to ``ortops::NMSMatch``."""

from __future__ import annotations

import math

import torch

from ortops.torch._boxes import check_batched_boxes_and_scores
from ortops.torch._op import Arg, BadArgument, Op


def _check(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: torch.Tensor, score_threshold: torch.Tensor
) -> None:
    check_batched_boxes_and_scores(boxes, scores, 4)
    for name, t in (("iou_threshold", iou_threshold), ("score_threshold", score_threshold)):
        if t.numel() != 1:
            raise BadArgument(f"{name} must hold one value, got shape {list(t.shape)}")
    if bool(torch.isnan(boxes).any()) or bool(torch.isnan(scores).any()):
        raise BadArgument("boxes and scores must not contain NaN")
    if math.isnan(float(iou_threshold.reshape(-1)[0])) or math.isnan(float(score_threshold.reshape(-1)[0])):
        raise BadArgument(f"the thresholds must not be NaN, got {float(iou_threshold)} and {float(score_threshold)}")


NMS_MATCH = Op(
    "nms_match",
    "NMSMatch",
    [
        Arg("boxes", torch.Tensor, "``Tensor[B, N, 4]`` boxes as (x1, y1, x2, y2)."),
        Arg("scores", torch.Tensor, "``Tensor[B, C, N]``."),
        # Inputs of the node, float32 values as in the original's float32 inputs.
        Arg(
            "iou_threshold",
            torch.Tensor,
            "a box is suppressed when its IoU with a kept box is at least this. IoU is inter / (area1 + area2 - "
            "inter + 1e-10) without offset, rounded to float32 as in mmdeploy; the threshold is used as a float32 "
            "value.",
        ),
        Arg(
            "score_threshold",
            torch.Tensor,
            "only kept boxes scoring strictly above this report their matches (the others still suppress boxes).",
        ),
    ],
    check=_check,
)


@NMS_MATCH.public
def nms_match(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float) -> torch.Tensor:
    """Greedy NMS per batch and class that reports which kept box suppressed which
    (mmdeploy's NMSMatch; exports to ``ortops::NMSMatch``).

    Returns:
        ``Tensor[K, 4]`` int64 rows (batch, class, kept box, suppressed box): per batch, then class,
        then kept box in score order (ties: lower index first), suppressed boxes in suppression order.

    Runs ortops' CPU kernel (for CUDA tensors too, through copies). Not differentiable.
    """

    def as_tensor(value: float) -> torch.Tensor:
        return torch.tensor([float(value)], dtype=torch.float32, device=boxes.device)

    return NMS_MATCH(boxes, scores, as_tensor(iou_threshold), as_tensor(score_threshold))
