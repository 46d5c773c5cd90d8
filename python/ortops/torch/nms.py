"""Non-maximum suppression: ``torch.ops.ortops.nms``, exported to ``ortops::NMS``."""

from __future__ import annotations

import torch

from ortops.torch._boxes import check_boxes_and_scores
from ortops.torch._op import Arg, Op

NMS = Op(
    "nms",
    "NMS",
    [
        Arg("boxes", torch.Tensor, "``Tensor[N, 4]`` boxes as (x1, y1, x2, y2), float32 or float64."),
        Arg("scores", torch.Tensor, "``Tensor[N]`` one score per box."),
        Arg("iou_threshold", float, "a box is dropped when its IoU with a kept box is strictly greater."),
        Arg("offset", int, "0, or 1 for the legacy convention where a box's width is x2 - x1 + 1."),
    ],
    check=check_boxes_and_scores,
)


@NMS.public
def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int = 0) -> torch.Tensor:
    """Greedy non-maximum suppression (exports to ``ortops::NMS``).

    Returns:
        ``Tensor[K]`` int64 indices of the kept boxes, highest score first; ties in score
        keep the lower index first. Equal to ``torchvision.ops.nms`` when ``offset`` is 0.

    Runs ortops' CPU kernel (for CUDA tensors too: boxes and scores are copied to the CPU
    and the indices back). Not differentiable: the result is a selection of indices.
    """
    return NMS(boxes, scores, float(iou_threshold), int(offset))
