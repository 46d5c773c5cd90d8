"""Soft-NMS: ``torch.ops.ortops.soft_nms``, exported to ``ortops::SoftNMS``."""

from __future__ import annotations

import torch

from ortops.torch._boxes import check_boxes_and_scores
from ortops.torch._op import Arg, BadArgument, Op

_METHODS = {"naive": 0, "linear": 1, "gaussian": 2}


def _check(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    iou_threshold: float,
    sigma: float,
    min_score: float,
    method: int,
    offset: int,
) -> None:
    """The kernel's checks, with its messages."""
    check_boxes_and_scores(boxes, scores)
    if method not in (0, 1, 2):
        raise BadArgument(f"method must be 0 (naive), 1 (linear) or 2 (gaussian), got {method}")
    if offset not in (0, 1):
        raise BadArgument(f"offset must be 0 or 1, got {offset}")
    if method == 2 and not sigma > 0:
        raise BadArgument(f"sigma must be > 0 for the gaussian method, got {sigma}")
    if iou_threshold != iou_threshold or min_score != min_score:
        raise BadArgument("iou_threshold and min_score must not be NaN")
    if bool(torch.isnan(boxes).any()) or bool(torch.isnan(scores).any()):
        raise BadArgument("boxes and scores must not contain NaN")


SOFT_NMS = Op(
    "soft_nms",
    "SoftNMS",
    [
        Arg("boxes", torch.Tensor, "``Tensor[N, 4]`` boxes as (x1, y1, x2, y2), float32 or float64."),
        Arg("scores", torch.Tensor, "``Tensor[N]``."),
        Arg("iou_threshold", float, "naive and linear methods decay boxes whose IoU is at least this."),
        Arg("sigma", float, "gaussian method's weight is exp(-IoU^2 / sigma); must be > 0 for that method."),
        Arg(
            "min_score",
            float,
            "boxes decayed below this are dropped (a box exactly at it is kept). As in mmcv, the first selected "
            "box is kept even when its score is below it.",
        ),
        Arg("method", int, '``"naive"``, ``"linear"`` or ``"gaussian"`` (or 0, 1, 2).'),
        Arg("offset", int, "0, or 1 for the legacy convention where a box's width is x2 - x1 + 1."),
    ],
    check=_check,
)


@SOFT_NMS.public
def soft_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    iou_threshold: float = 0.3,
    sigma: float = 0.5,
    min_score: float = 1e-3,
    method: str | int = "linear",
    offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Soft non-maximum suppression, as mmcv's ``soft_nms`` (exports to ``ortops::SoftNMS``).

    Returns:
        ``(dets, indices)``: ``Tensor[K, 5]`` kept boxes with decayed scores in selection order,
        and their ``Tensor[K]`` int64 indices. Among equal scores the box first in mmcv's working
        order is selected: that order starts as the input order, but each selection swaps the
        selected box with the one at the front of the remaining boxes, and a dropped box is
        replaced by the last remaining one, so ties are not always broken by the lower index.

    Raises:
        ValueError: on wrong shapes or dtypes, NaN in the inputs, an unknown method or offset,
            or ``sigma <= 0`` with the gaussian method.

    Runs ortops' CPU kernel (for CUDA tensors too, through copies). Not differentiable.
    """
    if isinstance(method, str) and method not in _METHODS:
        raise BadArgument(f"method must be one of {sorted(_METHODS)} or 0, 1, 2, got {method!r}")
    method_id = _METHODS[method] if isinstance(method, str) else int(method)
    return SOFT_NMS(boxes, scores, float(iou_threshold), float(sigma), float(min_score), method_id, int(offset))
