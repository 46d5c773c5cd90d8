"""ONNX's NonMaxSuppression with ONNX Runtime's results: ``torch.ops.ortops.non_max_suppression``,
exported to ``ortops::NonMaxSuppression``."""

from __future__ import annotations

import math

import torch

from ortops.torch._boxes import check_batched_boxes_and_scores
from ortops.torch._op import Arg, BadArgument, Op


def _check(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    max_output_boxes_per_class: torch.Tensor,
    iou_threshold: torch.Tensor,
    score_threshold: torch.Tensor,
    center_point_box: int,
) -> None:
    check_batched_boxes_and_scores(boxes, scores, 4)
    for name, t in (
        ("max_output_boxes_per_class", max_output_boxes_per_class),
        ("iou_threshold", iou_threshold),
        ("score_threshold", score_threshold),
    ):
        if t.numel() != 1:
            raise BadArgument(f"{name} must hold one value, got shape {list(t.shape)}")
    iou = float(iou_threshold.reshape(-1)[0])
    if not 0.0 <= iou <= 1.0:  # NaN too, as ONNX Runtime refuses it
        raise BadArgument(f"iou_threshold must be in [0, 1], got {iou}")
    if center_point_box not in (0, 1):
        raise BadArgument(f"center_point_box must be 0 or 1, got {center_point_box}")


NON_MAX_SUPPRESSION = Op(
    "non_max_suppression",
    "NonMaxSuppression",
    [
        Arg("boxes", torch.Tensor, "``Tensor[B, N, 4]`` float32 boxes: two opposite corners, or (x, y, w, h)."),
        Arg("scores", torch.Tensor, "``Tensor[B, C, N]`` float32 scores per batch, class and box."),
        # Inputs of the node, as ONNX's NonMaxSuppression takes them: one value each.
        Arg(
            "max_output_boxes_per_class",
            torch.Tensor,
            "the most boxes kept per batch and class; 0 or less keeps none (as in ONNX).",
        ),
        Arg(
            "iou_threshold",
            torch.Tensor,
            "in [0, 1]: a box is dropped when its IoU with a kept box is strictly greater.",
        ),
        Arg(
            "score_threshold",
            torch.Tensor,
            "only boxes scoring strictly above this are considered; None: every box (NaN scores "
            "included, where a threshold drops them).",
        ),
        Arg("center_point_box", int, "0: boxes are corners; 1: boxes are (x_center, y_center, width, height)."),
    ],
    check=_check,
)


@NON_MAX_SUPPRESSION.public
def non_max_suppression(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    max_output_boxes_per_class: int,
    iou_threshold: float = 0.0,
    score_threshold: float | None = None,
    center_point_box: int = 0,
) -> torch.Tensor:
    """ONNX's ``NonMaxSuppression`` per batch and class, with ONNX Runtime's results (exports to
    ``ortops::NonMaxSuppression``, which ``ortops optimize`` also writes in place of the
    standard node).

    Returns:
        ``Tensor[K, 3]`` int64 rows (batch, class, box index): per batch, then class, then in
        the order kept (descending score; ties: lower index first).

    Runs ortops' CPU kernel (for CUDA tensors too, through copies). Not differentiable.
    """

    def as_tensor(value: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([value], dtype=dtype, device=boxes.device)

    # Without a score threshold the node gets no input there; the torch op always takes one,
    # so -inf stands for it, which differs only for NaN scores (kept by the absent input).
    threshold = -math.inf if score_threshold is None else float(score_threshold)
    return NON_MAX_SUPPRESSION(
        boxes,
        scores,
        as_tensor(int(max_output_boxes_per_class), torch.int64),
        as_tensor(float(iou_threshold), torch.float32),
        as_tensor(threshold, torch.float32),
        int(center_point_box),
    )
