"""Input checks shared by the NMS ops, with the kernels' messages."""

from __future__ import annotations

import torch

from ortops.torch._op import BadArgument


def check_boxes_and_scores(boxes: torch.Tensor, scores: torch.Tensor) -> None:
    """Raises unless ``boxes`` is ``Tensor[N, 4]`` and ``scores`` ``Tensor[N]``."""
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise BadArgument(f"boxes must have shape [N, 4], got {list(boxes.shape)}")
    if scores.shape != boxes.shape[:1]:
        raise BadArgument(f"scores must have shape [{boxes.shape[0]}], got {list(scores.shape)}")


def check_batched_boxes_and_scores(boxes: torch.Tensor, scores: torch.Tensor, box_size: int) -> None:
    """Raises unless ``boxes`` is ``Tensor[B, N, box_size]`` and ``scores`` ``Tensor[B, C, N]``."""
    if boxes.dim() != 3 or boxes.shape[2] != box_size:
        raise BadArgument(f"boxes must have shape [B, N, {box_size}], got {list(boxes.shape)}")
    if scores.dim() != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise BadArgument(
            f"scores must have shape [B, C, N] = [{boxes.shape[0]}, C, {boxes.shape[1]}], got {list(scores.shape)}"
        )
