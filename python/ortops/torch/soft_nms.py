"""Soft-NMS: ``torch.ops.ortops.soft_nms``, exported to ``ortops::SoftNMS``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_no_gradient
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes

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
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f"ortops.soft_nms: boxes must have shape [N, 4], got {list(boxes.shape)}")
    if scores.shape != boxes.shape[:1]:
        raise ValueError(f"ortops.soft_nms: scores must have shape [{boxes.shape[0]}], got {list(scores.shape)}")
    if method not in (0, 1, 2):
        raise ValueError(f"ortops.soft_nms: method must be 0 (naive), 1 (linear) or 2 (gaussian), got {method}")
    if offset not in (0, 1):
        raise ValueError(f"ortops.soft_nms: offset must be 0 or 1, got {offset}")
    if method == 2 and not sigma > 0:
        raise ValueError(f"ortops.soft_nms: sigma must be > 0 for the gaussian method, got {sigma}")
    if iou_threshold != iou_threshold or min_score != min_score:
        raise ValueError("ortops.soft_nms: iou_threshold and min_score must not be NaN")
    if bool(torch.isnan(boxes).any()) or bool(torch.isnan(scores).any()):
        raise ValueError("ortops.soft_nms: boxes and scores must not contain NaN")


@torch.library.custom_op("ortops::soft_nms", mutates_args=())
def _soft_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    iou_threshold: float,
    sigma: float,
    min_score: float,
    method: int,
    offset: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_dtypes("SoftNMS", "soft_nms", boxes, scores)
    _check(boxes, scores, iou_threshold, sigma, min_score, method, offset)
    # Any device: the selection is sequential, so the CPU kernel serves CUDA tensors too.
    attributes = {"iou_threshold": iou_threshold, "sigma": sigma, "min_score": min_score, "method": method}
    dets, kept = kernel.run("SoftNMS", (boxes.cpu(), scores.cpu()), {**attributes, "offset": offset})
    return dets.to(boxes.device), kept.to(boxes.device)


register_no_gradient(_soft_nms, "soft_nms")


@_soft_nms.register_fake
def _(boxes, scores, iou_threshold, sigma, min_score, method, offset):  # noqa: ANN001, ANN202
    check_dtypes("SoftNMS", "soft_nms", boxes, scores)
    kept = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((kept, 5)), boxes.new_empty((kept,), dtype=torch.int64)


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

    Args:
        boxes: ``Tensor[N, 4]`` boxes as (x1, y1, x2, y2), float32 or float64.
        scores: ``Tensor[N]``.
        iou_threshold: naive and linear methods decay boxes whose IoU is at least this.
        sigma: gaussian method's weight is exp(-IoU^2 / sigma); must be > 0 for that method.
        min_score: boxes decayed below this are dropped (a box exactly at it is kept). As in
            mmcv, the first selected box is kept even when its score is below it.
        method: ``"naive"``, ``"linear"`` or ``"gaussian"`` (or 0, 1, 2).
        offset: 0, or 1 for the legacy convention where a box's width is x2 - x1 + 1.

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
        raise ValueError(f"ortops.soft_nms: method must be one of {sorted(_METHODS)} or 0, 1, 2, got {method!r}")
    method_id = _METHODS[method] if isinstance(method, str) else int(method)
    return torch.ops.ortops.soft_nms(
        boxes, scores, float(iou_threshold), float(sigma), float(min_score), method_id, int(offset)
    )


@symbolic_helper.parse_args("v", "v", "f", "f", "f", "i", "i")
def _symbolic(g, boxes, scores, iou_threshold, sigma, min_score, method, offset):  # noqa: ANN001, ANN202
    dets, indices = g.op(
        "ortops::SoftNMS",
        boxes,
        scores,
        iou_threshold_f=iou_threshold,
        sigma_f=sigma,
        min_score_f=min_score,
        method_i=method,
        offset_i=offset,
        outputs=2,
    )
    return typed(dets, boxes, sizes=[None, 5]), typed(indices, boxes, sizes=[None], dtype=torch.int64)


def _translation(boxes, scores, iou_threshold: float, sigma: float, min_score: float, method: int, offset: int):  # noqa: ANN001, ANN202
    return onnx_opset.SoftNMS(
        boxes, scores, iou_threshold=iou_threshold, sigma=sigma, min_score=min_score, method=method, offset=offset
    )


register_export(
    torch.ops.ortops.soft_nms.default,
    onnx_op="SoftNMS",
    function=soft_nms,
    symbolic=_symbolic,
    translation=_translation,
)
