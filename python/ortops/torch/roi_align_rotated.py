"""Rotated RoIAlign: ``torch.ops.ortops.roi_align_rotated``, exported to ``ortops::RoIAlignRotated``."""

from __future__ import annotations

import math

import torch

from ortops.torch._op import Arg, BadArgument, Op
from ortops.torch._sampling import roi_align_sample
from ortops.torch.roi_align import OUTPUT_SIZE, OUTPUT_SIZE_DOC, SAMPLING_RATIO, pooled_size


def _reference(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_height: int,
    output_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    aligned: int,
    clockwise: int,
) -> torch.Tensor:
    """The kernel's semantics in differentiable torch ops (non-CPU tensors and gradients)."""
    r, c = rois.shape[0], input.shape[1]
    out = input.new_zeros((r, c, output_height, output_width))
    shift = 0.5 if aligned else 0.0
    for i in range(r):  # each roi has its own rotation (and, adaptively, its own grid)
        roi = rois[i]
        center_w, center_h = roi[1] * spatial_scale - shift, roi[2] * spatial_scale - shift
        roi_w, roi_h = roi[3] * spatial_scale, roi[4] * spatial_scale
        theta = -roi[5] if clockwise else roi[5]
        if not aligned:
            roi_w, roi_h = roi_w.clamp(min=1), roi_h.clamp(min=1)
        grid_h = sampling_ratio if sampling_ratio > 0 else max(math.ceil(float(roi_h) / output_height), 0)
        grid_w = sampling_ratio if sampling_ratio > 0 else max(math.ceil(float(roi_w) / output_width), 0)
        if grid_h * grid_w == 0:
            continue
        bin_h, bin_w = roi_h / output_height, roi_w / output_width
        dtype = input.dtype
        device = input.device
        ph = torch.arange(output_height, dtype=dtype, device=device)[:, None, None, None]
        iy = (torch.arange(grid_h, dtype=dtype, device=device) + 0.5)[None, :, None, None]
        pw = torch.arange(output_width, dtype=dtype, device=device)[None, None, :, None]
        ix = (torch.arange(grid_w, dtype=dtype, device=device) + 0.5)[None, None, None, :]
        yy = -roi_h / 2 + ph * bin_h + iy * bin_h / grid_h
        xx = -roi_w / 2 + pw * bin_w + ix * bin_w / grid_w
        y = yy * torch.cos(theta) - xx * torch.sin(theta) + center_h
        x = yy * torch.sin(theta) + xx * torch.cos(theta) + center_w
        batch = roi[:1].long()
        samples = roi_align_sample(input, batch, y[None], x[None])[0]  # [C, oh, gh, ow, gw]
        out[i] = samples.sum(dim=(2, 4)) / (grid_h * grid_w)
    return out


def _check(input: torch.Tensor, rois: torch.Tensor) -> None:
    if input.dim() != 4 or rois.dim() != 2 or rois.shape[1] != 6:
        raise BadArgument(f"need input [N, C, H, W] and rois [R, 6], got {list(input.shape)} and {list(rois.shape)}")


ROI_ALIGN_ROTATED = Op(
    "roi_align_rotated",
    "RoIAlignRotated",
    [
        Arg("input", torch.Tensor, "``Tensor[N, C, H, W]`` feature maps, float32, float64 or float16."),
        Arg("rois", torch.Tensor, "``Tensor[R, 6]`` rois as (batch_index, cx, cy, w, h, theta), theta in radians."),
        *OUTPUT_SIZE,
        Arg("spatial_scale", float, "multiplies roi centres and sizes to give feature-map coordinates."),
        SAMPLING_RATIO,
        Arg("aligned", int, "shift the scaled centre by -0.5 pixel (True), or the legacy behaviour (False)."),
        Arg("clockwise", int, "theta turns clockwise."),
    ],
    check=_check,
    reference=_reference,
    differentiable=(0,),
    public_args=OUTPUT_SIZE_DOC,
)


@ROI_ALIGN_ROTATED.public
def roi_align_rotated(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size: int | tuple[int, int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    aligned: bool = True,
    clockwise: bool = False,
) -> torch.Tensor:
    """RoIAlign over rotated rois, average pooling (exports to ``ortops::RoIAlignRotated``).

    Returns:
        ``Tensor[R, C, output_height, output_width]``.
    """
    size = pooled_size(output_size)
    return ROI_ALIGN_ROTATED(
        input, rois, *size, float(spatial_scale), int(sampling_ratio), int(aligned), int(clockwise)
    )
