"""Non-maximum suppression: ``torch.ops.ortops.nms`` and its export to ``ortops::NMS``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_no_gradient
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes


@torch.library.custom_op("ortops::nms", mutates_args=())
def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int) -> torch.Tensor:
    check_dtypes("NMS", "nms", boxes, scores)
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f"ortops.nms: boxes must have shape [N, 4], got {list(boxes.shape)}")
    if scores.shape != boxes.shape[:1]:
        raise ValueError(f"ortops.nms: scores must have shape [{boxes.shape[0]}], got {list(scores.shape)}")
    # Any device: the boxes are few and the greedy loop sequential, so the CPU kernel serves CUDA too.
    (indices,) = kernel.run("NMS", (boxes.cpu(), scores.cpu()), {"iou_threshold": iou_threshold, "offset": offset})
    return indices.to(boxes.device)


register_no_gradient(_nms, "nms")


@_nms.register_fake
def _(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int) -> torch.Tensor:
    check_dtypes("NMS", "nms", boxes, scores)
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

    Runs ortops' CPU kernel (for CUDA tensors too: boxes and scores are copied to the CPU
    and the indices back). Not differentiable: the result is a selection of indices.
    """
    return torch.ops.ortops.nms(boxes, scores, float(iou_threshold), int(offset))


@symbolic_helper.parse_args("v", "v", "f", "i")
def _symbolic(g, boxes, scores, iou_threshold, offset):  # noqa: ANN001, ANN202 (TorchScript graph values)
    indices = g.op("ortops::NMS", boxes, scores, iou_threshold_f=iou_threshold, offset_i=offset)
    return typed(indices, boxes, sizes=[None], dtype=torch.int64)


def _translation(boxes, scores, iou_threshold: float, offset: int):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.NMS(boxes, scores, iou_threshold=iou_threshold, offset=offset)


register_export(torch.ops.ortops.nms.default, onnx_op="NMS", function=nms, symbolic=_symbolic, translation=_translation)
