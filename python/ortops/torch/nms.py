"""Non-maximum suppression: ``torch.ops.ortops.nms`` and its export to ``ortops::NMS``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch._export import onnx_opset, register_export, typed


@torch.library.custom_op("ortops::nms", mutates_args=())
def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int) -> torch.Tensor:
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f"ortops.nms: boxes must have shape [N, 4], got {list(boxes.shape)}")
    if scores.shape != boxes.shape[:1]:
        raise ValueError(f"ortops.nms: scores must have shape [{boxes.shape[0]}], got {list(scores.shape)}")
    order = torch.sort(scores, descending=True, stable=True).indices
    sorted_boxes = boxes[order]
    x1, y1, x2, y2 = sorted_boxes.unbind(1)
    areas = (x2 - x1 + offset) * (y2 - y1 + offset)
    left = torch.maximum(x1[:, None], x1[None, :])
    top = torch.maximum(y1[:, None], y1[None, :])
    right = torch.minimum(x2[:, None], x2[None, :])
    bottom = torch.minimum(y2[:, None], y2[None, :])
    inter = (right - left + offset).clamp(min=0) * (bottom - top + offset).clamp(min=0)
    overlaps = (inter / (areas[:, None] + areas[None, :] - inter)) > iou_threshold
    keep = torch.ones(len(order), dtype=torch.bool, device=boxes.device)
    for i in range(len(order)):
        if keep[i]:
            keep[i + 1 :] &= ~overlaps[i, i + 1 :]
    return order[keep]


@_nms.register_fake
def _(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int) -> torch.Tensor:
    kept = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((kept,), dtype=torch.int64)


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int = 0) -> torch.Tensor:
    """Greedy non-maximum suppression (exports to ``ortops::NMS``).

    Args:
        boxes: ``Tensor[N, 4]`` boxes as (x1, y1, x2, y2), float32 or float64.
        scores: ``Tensor[N]`` one score per box.
        iou_threshold: a box is dropped when its IoU with a kept box is strictly greater.
        offset: 0, or 1 for the legacy convention where a box's width is x2 - x1 + 1.

    Returns:
        ``Tensor[K]`` int64 indices of the kept boxes, highest score first; ties in score
        keep the lower index first. Equal to ``torchvision.ops.nms`` when ``offset`` is 0.
    """
    return torch.ops.ortops.nms(boxes, scores, float(iou_threshold), int(offset))


@symbolic_helper.parse_args("v", "v", "f", "i")
def _symbolic(g, boxes, scores, iou_threshold, offset):  # noqa: ANN001, ANN202 (TorchScript graph values)
    indices = g.op("ortops::NMS", boxes, scores, iou_threshold_f=iou_threshold, offset_i=offset)
    return typed(indices, boxes, sizes=[None], dtype=torch.int64)


def _translation(boxes, scores, iou_threshold: float, offset: int):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.NMS(boxes, scores, iou_threshold=iou_threshold, offset=offset)


register_export(torch.ops.ortops.nms.default, onnx_op="NMS", function=nms, symbolic=_symbolic, translation=_translation)
