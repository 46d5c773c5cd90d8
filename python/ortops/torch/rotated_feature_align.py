"""Rotated feature alignment: ``torch.ops.ortops.rotated_feature_align`` -> ``ortops::RotatedFeatureAlign``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_reference_autograd
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes
from ortops.torch._sampling import roi_align_sample


def _check(features: torch.Tensor, best_rbboxes: torch.Tensor, points: int) -> None:
    check_dtypes("RotatedFeatureAlign", "rotated_feature_align", features, best_rbboxes)
    if features.dim() != 4:
        raise ValueError(f"ortops.rotated_feature_align: features must be [N, C, H, W], got {list(features.shape)}")
    n, _, h, w = features.shape
    if best_rbboxes.shape != (n, h, w, 5):
        raise ValueError(
            f"ortops.rotated_feature_align: best_rbboxes must be [{n}, {h}, {w}, 5], got {list(best_rbboxes.shape)}"
        )
    if points not in (1, 5):
        raise ValueError(f"ortops.rotated_feature_align: points must be 1 or 5, got {points}")


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


@torch.library.custom_op("ortops::rotated_feature_align", mutates_args=())
def _rotated_feature_align(
    features: torch.Tensor, best_rbboxes: torch.Tensor, spatial_scale: float, points: int
) -> torch.Tensor:
    _check(features, best_rbboxes, points)
    if features.device.type != "cpu":
        return _reference(features, best_rbboxes, spatial_scale, points)
    attributes = {"spatial_scale": spatial_scale, "points": points}
    return kernel.run("RotatedFeatureAlign", (features, best_rbboxes), attributes, [features.shape])[0]


register_reference_autograd(_rotated_feature_align, _reference, differentiable=(0,))


@_rotated_feature_align.register_fake
def _(features: torch.Tensor, best_rbboxes: torch.Tensor, spatial_scale: float, points: int) -> torch.Tensor:
    check_dtypes("RotatedFeatureAlign", "rotated_feature_align", features, best_rbboxes)
    return torch.empty_like(features)


def rotated_feature_align(
    features: torch.Tensor, best_rbboxes: torch.Tensor, spatial_scale: float = 1.0, points: int = 1
) -> torch.Tensor:
    """Adds to each pixel the features sampled at its rotated box (exports to ``ortops::RotatedFeatureAlign``).

    Args:
        features: ``Tensor[N, C, H, W]``, float32 or float64.
        best_rbboxes: ``Tensor[N, H, W, 5]``, one box per pixel as (x, y, w, h, angle), angle in
            radians. (mmcv's op took (y, x, w, h, angle); the ``mmcv`` ONNX domain keeps that.)
        spatial_scale: multiplies centres and sizes.
        points: 1 samples the centre; 5 also the four corners.

    Returns:
        ``Tensor[N, C, H, W]``: features plus the bilinear samples (RoIAlign's rule).
    """
    return torch.ops.ortops.rotated_feature_align(features, best_rbboxes, float(spatial_scale), int(points))


@symbolic_helper.parse_args("v", "v", "f", "i")
def _symbolic(g, features, best_rbboxes, spatial_scale, points):  # noqa: ANN001, ANN202 (TorchScript graph values)
    node = g.op("ortops::RotatedFeatureAlign", features, best_rbboxes, spatial_scale_f=spatial_scale, points_i=points)
    return typed(node, features)


def _translation(features, best_rbboxes, spatial_scale: float, points: int):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.RotatedFeatureAlign(features, best_rbboxes, spatial_scale=spatial_scale, points=points)


register_export(
    torch.ops.ortops.rotated_feature_align.default,
    onnx_op="RotatedFeatureAlign",
    function=rotated_feature_align,
    symbolic=_symbolic,
    translation=_translation,
)
