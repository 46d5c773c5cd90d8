"""Multi-class NMS with fixed-size outputs: ``torch.ops.ortops.multiclass_nms``, exported to
``ortops::BatchedNMS``.

Named ``multiclass_nms`` rather than ``batched_nms``: ``torchvision.ops.batched_nms`` takes one
image's flat list of boxes with a class per box and returns a variable number of kept
indices, while this op takes a batch of images with a score per box and class and returns
padded, fixed-size detections (a count, boxes, scores, classes and box indices per image).
"""

from __future__ import annotations

import math

import torch

from ortops.torch._op import Arg, BadArgument, Op


def _check(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    iou_threshold: float,
    score_threshold: float,
    max_output_boxes: int,
    pre_topk: int,
    box_coding: int,
    background_class: int,
    offset: int,
) -> None:
    """The kernel's checks, so that an export fails where the file would not run."""
    if scores.dim() != 3:
        raise BadArgument(f"scores must have shape [B, N, C], got {list(scores.shape)}")
    batch, count, classes = scores.shape
    shared = boxes.dim() == 3 or (boxes.dim() == 4 and boxes.shape[2] == 1)
    if (
        boxes.dim() not in (3, 4)
        or tuple(boxes.shape[:2]) != (batch, count)
        or boxes.shape[-1] != 4
        or not (shared or boxes.shape[2] == classes)
    ):
        raise BadArgument(
            f"boxes must have shape [B, N, 4] or [B, N, C, 4] with [B, N, C] = "
            f"{list(scores.shape)} (the shape of scores), got {list(boxes.shape)}"
        )
    if math.isnan(iou_threshold) or math.isnan(score_threshold):
        raise BadArgument("iou_threshold and score_threshold must not be NaN")
    if max_output_boxes < 0:
        raise BadArgument(f"max_output_boxes must be >= 0, got {max_output_boxes}")
    if pre_topk < -1:
        raise BadArgument(f"pre_topk must be -1 (all) or >= 0, got {pre_topk}")
    if background_class < -1:
        raise BadArgument(f"background_class must be -1 (none) or a class id, got {background_class}")
    if box_coding not in (0, 1):
        raise BadArgument(f"box_coding must be 0 (corners) or 1 (centre, size), got {box_coding}")
    if offset not in (0, 1):
        raise BadArgument(f"offset must be 0 or 1, got {offset}")


MULTICLASS_NMS = Op(
    "multiclass_nms",
    "BatchedNMS",
    [
        Arg(
            "boxes",
            torch.Tensor,
            "``Tensor[B, N, 4]`` boxes shared by every class, or ``Tensor[B, N, C, 4]`` one per class; (x1, y1, x2, "
            "y2), or (cx, cy, w, h) with ``box_coding=1``. float32, float64 or float16.",
        ),
        Arg("scores", torch.Tensor, "``Tensor[B, N, C]``, same dtype as ``boxes``."),
        Arg("iou_threshold", float, "a candidate is dropped when its IoU with a kept one is strictly greater."),
        Arg(
            "score_threshold",
            float,
            "candidates are the scores strictly greater than this (with ``score_activation``, their sigmoids). "
            "Thresholds are rounded to float32, as the ONNX attributes store them.",
        ),
        Arg("max_output_boxes", int, "detections per image, the outputs' second dimension."),
        Arg(
            "pre_topk",
            int,
            "per class (per image when class-agnostic), only the best this many candidates enter NMS; -1: all.",
        ),
        Arg("class_agnostic", bool, "one NMS over all classes of an image."),
        Arg("box_coding", int, "0 for corners, 1 for centre and size; the outputs are corners either way."),
        Arg(
            "score_activation",
            bool,
            "the scores are logits: the op behaves as if ``scores.sigmoid()`` had been passed (computed in the "
            "input dtype); only candidates pay for the sigmoid.",
        ),
        Arg("background_class", int, "a class that never gives a detection; -1 for none."),
        Arg("offset", int, "0, or 1 for the legacy IoU convention where a box's width is x2 - x1 + 1."),
    ],
    check=_check,
    check_at_export=True,
)


@MULTICLASS_NMS.public
def multiclass_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    iou_threshold: float,
    score_threshold: float,
    max_output_boxes: int,
    pre_topk: int = -1,
    class_agnostic: bool = False,
    box_coding: int = 0,
    score_activation: bool = False,
    background_class: int = -1,
    offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multi-class NMS per image with fixed-size, padded outputs (exports to ``ortops::BatchedNMS``).

    Per image, every (box, class) whose score is strictly greater than ``score_threshold`` is a
    candidate (``background_class`` never is). Per class (or per image with ``class_agnostic``)
    the best ``pre_topk`` candidates go through greedy NMS, a candidate being dropped when its
    IoU with a kept one is strictly greater than ``iou_threshold``; the image's detections are
    the best ``max_output_boxes`` kept candidates by descending score (equal scores: lower box
    index, then lower class, first). With ``class_agnostic=False`` this is
    ``torchvision.ops.batched_nms`` on the candidates followed by a top-k; unlike it, this takes
    a batch of images with a score per class and returns fixed shapes, so that the exported
    graph has static output shapes.

    Returns:
        ``(num_detections, boxes, scores, classes, indices)``: ``Tensor[B]`` int64 counts,
        ``Tensor[B, K, 4]`` corner boxes, ``Tensor[B, K]`` scores (descending), ``Tensor[B, K]``
        int64 classes and ``Tensor[B, K]`` int64 box indices into N, with K = ``max_output_boxes``.
        Rows past an image's count are padding: boxes and scores 0, classes and indices -1.

    Raises:
        ValueError: on wrong shapes or dtypes, NaN thresholds or out-of-range attributes.

    NaN scores are never candidates; a box with a NaN coordinate neither suppresses nor is
    suppressed. Runs ortops' CPU kernel (for CUDA tensors too, through copies). Not
    differentiable.
    """
    return MULTICLASS_NMS(
        boxes,
        scores,
        float(iou_threshold),
        float(score_threshold),
        int(max_output_boxes),
        int(pre_topk),
        bool(class_agnostic),
        int(box_coding),
        bool(score_activation),
        int(background_class),
        int(offset),
    )
