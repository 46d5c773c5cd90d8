"""Rotated feature alignment: ``torch.ops.ortops.rotated_feature_align`` -> ``ortops::RotatedFeatureAlign``."""

from __future__ import annotations

import torch

from ortops.torch._op import Arg, BadArgument, Op
from ortops.torch._sampling import roi_align_sample


def _check(features: torch.Tensor, best_rbboxes: torch.Tensor, points: int) -> None:
    if features.dim() != 4:
        raise BadArgument(f"features must be [N, C, H, W], got {list(features.shape)}")
    n, _, h, w = features.shape
    if best_rbboxes.shape != (n, h, w, 5):
        raise BadArgument(f"best_rbboxes must be [{n}, {h}, {w}, 5], got {list(best_rbboxes.shape)}")
    if points not in (1, 5):
        raise BadArgument(f"points must be 1 or 5, got {points}")


def _reference(features: torch.Tensor, best_rbboxes: torch.Tensor, spatial_scale: float, points: int) -> torch.Tensor:
    """The kernel's semantics in differentiable torch ops (non-CPU tensors and gradients)."""
    n = features.shape[0]
    x, y = best_rbboxes[..., 0] * spatial_scale, best_rbboxes[..., 1] * spatial_scale
    xs, ys = [x], [y]
    if points == 5:
        half_w, half_h, angle = (
            best_rbboxes[..., 2] * spatial_scale / 2,
            best_rbboxes[..., 3] * spatial_scale / 2,
            best_rbboxes[..., 4],
        )
        wx, wy = torch.cos(angle) * half_w, torch.sin(angle) * half_w
        hx, hy = -torch.sin(angle) * half_h, torch.cos(angle) * half_h
        for sx, sy in ((1, 1), (-1, 1), (-1, -1), (1, -1)):
            xs.append(x + sx * wx + sy * hx)
            ys.append(y + sx * wy + sy * hy)
    batch = torch.arange(n, device=features.device)
    samples = roi_align_sample(features, batch, torch.stack(ys, -1), torch.stack(xs, -1))  # [N, C, H, W, points]
    return features + samples.sum(-1)


ROTATED_FEATURE_ALIGN = Op(
    "rotated_feature_align",
    "RotatedFeatureAlign",
    [
        Arg("features", torch.Tensor, "``Tensor[N, C, H, W]``, float32 or float64."),
        Arg(
            "best_rbboxes",
            torch.Tensor,
            "``Tensor[N, H, W, 5]``, one box per pixel as (x, y, w, h, angle), angle in radians. (mmcv's op took "
            "(y, x, w, h, angle); the ``mmcv`` ONNX domain keeps that.)",
        ),
        Arg("spatial_scale", float, "multiplies centres and sizes."),
        Arg("points", int, "1 samples the centre; 5 also the four corners."),
    ],
    check=_check,
    reference=_reference,
    differentiable=(0,),
)


@ROTATED_FEATURE_ALIGN.public
def rotated_feature_align(
    features: torch.Tensor, best_rbboxes: torch.Tensor, spatial_scale: float = 1.0, points: int = 1
) -> torch.Tensor:
    """Adds to each pixel the features sampled at its rotated box (exports to ``ortops::RotatedFeatureAlign``).

    Returns:
        ``Tensor[N, C, H, W]``: features plus the bilinear samples (RoIAlign's rule).
    """
    return ROTATED_FEATURE_ALIGN(features, best_rbboxes, float(spatial_scale), int(points))
