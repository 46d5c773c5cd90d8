"""RoIAlign: ``torch.ops.ortops.roi_align``, exported to ``ortops::RoIAlign``."""

from __future__ import annotations

import math

import torch
from torch.onnx import symbolic_helper

from ortops.torch._export import onnx_opset, register_export, typed


def _axis_taps(coord: torch.Tensor, size: int) -> tuple[torch.Tensor, ...]:
    """Per-axis part of RoIAlign's bilinear rule: (valid, low, high, weight_low, weight_high)."""
    valid = (coord >= -1) & (coord <= size)
    coord = coord.clamp(min=0)
    low = coord.floor().long()  # coord >= 0, so floor is C++'s truncation
    at_edge = low >= size - 1
    low = torch.where(at_edge, torch.full_like(low, size - 1), low)
    high = torch.where(at_edge, low, low + 1)
    coord = torch.where(at_edge, low.to(coord.dtype), coord)
    frac = coord - low.to(coord.dtype)
    return valid, low.clamp(min=0), high.clamp(min=0), 1 - frac, frac


def _pool_rois(
    input: torch.Tensor,
    rois: torch.Tensor,
    out_h: int,
    out_w: int,
    scale: float,
    grid_h: int,
    grid_w: int,
    max_mode: bool,
    aligned: bool,
) -> torch.Tensor:
    """RoIAlign for rois that share one sampling grid size: Tensor[R, C, out_h, out_w]."""
    n, c, h, w = input.shape
    r = rois.shape[0]
    dtype = input.dtype
    shift = 0.5 if aligned else 0.0
    start_w = rois[:, 1] * scale - shift
    start_h = rois[:, 2] * scale - shift
    roi_w = rois[:, 3] * scale - shift - start_w
    roi_h = rois[:, 4] * scale - shift - start_h
    if not aligned:
        roi_w, roi_h = roi_w.clamp(min=1), roi_h.clamp(min=1)
    bin_h, bin_w = roi_h / out_h, roi_w / out_w
    if grid_h * grid_w == 0 or h == 0 or w == 0:
        return input.new_zeros((r, c, out_h, out_w))  # no samples, or every sample reads 0
    ph = torch.arange(out_h, dtype=dtype, device=input.device)
    pw = torch.arange(out_w, dtype=dtype, device=input.device)
    iy = torch.arange(grid_h, dtype=dtype, device=input.device) + 0.5
    ix = torch.arange(grid_w, dtype=dtype, device=input.device) + 0.5
    # y[r, ph, iy] and x[r, pw, ix], with the same operation order as the C++ kernel.
    y = (
        start_h[:, None, None]
        + ph[None, :, None] * bin_h[:, None, None]
        + iy[None, None, :] * bin_h[:, None, None] / grid_h
    )
    x = (
        start_w[:, None, None]
        + pw[None, :, None] * bin_w[:, None, None]
        + ix[None, None, :] * bin_w[:, None, None] / grid_w
    )
    vy, y0, y1, hy, ly = _axis_taps(y, h)
    vx, x0, x1, hx, lx = _axis_taps(x, w)
    images = input[rois[:, 0].long()]  # [R, C, H, W]
    flat = images.reshape(r, c, h * w)

    def gather(yi: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
        index = (yi[:, :, :, None, None] * w + xi[:, None, None, :, :]).reshape(r, 1, -1)
        return flat.gather(2, index.expand(r, c, index.shape[-1])).reshape(r, c, out_h, grid_h, out_w, grid_w)

    def weight(wy: torch.Tensor, wx: torch.Tensor) -> torch.Tensor:
        return (wy[:, :, :, None, None] * wx[:, None, None, :, :])[:, None]

    values = (
        weight(hy, hx) * gather(y0, x0)
        + weight(hy, lx) * gather(y0, x1)
        + weight(ly, hx) * gather(y1, x0)
        + weight(ly, lx) * gather(y1, x1)
    )
    valid = (vy[:, :, :, None, None] & vx[:, None, None, :, :])[:, None]
    values = values * valid  # samples outside the map read 0
    values = values.permute(0, 1, 2, 4, 3, 5).reshape(r, c, out_h, out_w, grid_h * grid_w)
    return values.amax(-1) if max_mode else values.sum(-1) / (grid_h * grid_w)


@torch.library.custom_op("ortops::roi_align", mutates_args=())
def _roi_align(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_height: int,
    output_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    mode: str,
    aligned: int,
) -> torch.Tensor:
    if input.dim() != 4 or rois.dim() != 2 or rois.shape[1] != 5:
        raise ValueError(
            f"ortops.roi_align: need input [N, C, H, W] and rois [R, 5], got {list(input.shape)}, {list(rois.shape)}"
        )
    if mode not in ("avg", "max"):
        raise ValueError(f"ortops.roi_align: mode must be 'avg' or 'max', got {mode!r}")
    max_mode = mode == "max"
    r, c = rois.shape[0], input.shape[1]
    out = input.new_zeros((r, c, output_height, output_width))
    if sampling_ratio > 0:
        if r:
            out = _pool_rois(
                input,
                rois,
                output_height,
                output_width,
                spatial_scale,
                sampling_ratio,
                sampling_ratio,
                max_mode,
                bool(aligned),
            )
        return out
    # Adaptive sampling: each roi has its own grid, so rois are pooled one at a time.
    shift = 0.5 if aligned else 0.0
    for i in range(r):
        roi = rois[i : i + 1]
        roi_w = float(roi[0, 3] * spatial_scale - shift - (roi[0, 1] * spatial_scale - shift))
        roi_h = float(roi[0, 4] * spatial_scale - shift - (roi[0, 2] * spatial_scale - shift))
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        grid_h = max(math.ceil(roi_h / output_height), 0)
        grid_w = max(math.ceil(roi_w / output_width), 0)
        out[i] = _pool_rois(
            input, roi, output_height, output_width, spatial_scale, grid_h, grid_w, max_mode, bool(aligned)
        )[0]
    return out


@_roi_align.register_fake
def _(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_height: int,
    output_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    mode: str,
    aligned: int,
) -> torch.Tensor:
    return input.new_empty((rois.shape[0], input.shape[1], output_height, output_width))


def roi_align(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size: int | tuple[int, int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    mode: str = "avg",
    aligned: bool = True,
) -> torch.Tensor:
    """RoIAlign, Detectron style (exports to ``ortops::RoIAlign``).

    Args:
        input: ``Tensor[N, C, H, W]`` feature maps, float32 or float64.
        rois: ``Tensor[R, 5]`` rois as (batch_index, x1, y1, x2, y2) in image coordinates.
        output_size: pooled size, ``int`` or ``(height, width)``.
        spatial_scale: multiplies roi coordinates to give feature-map coordinates.
        sampling_ratio: samples per bin along each axis; 0: adaptive, ceil(roi size / output size).
        mode: ``"avg"`` (equal to ``torchvision.ops.roi_align``) or ``"max"`` (largest
            bilinearly interpolated sample; a bin with no samples gives 0).
        aligned: shift rois by -0.5 pixel (True), or the legacy behaviour (False).

    Returns:
        ``Tensor[R, C, output_height, output_width]``.
    """
    height, width = (output_size, output_size) if isinstance(output_size, int) else output_size
    return torch.ops.ortops.roi_align(
        input, rois, int(height), int(width), float(spatial_scale), int(sampling_ratio), mode, int(bool(aligned))
    )


@symbolic_helper.parse_args("v", "v", "i", "i", "f", "i", "s", "i")
def _symbolic(g, input, rois, output_height, output_width, spatial_scale, sampling_ratio, mode, aligned):  # noqa: ANN001, ANN202
    pooled = g.op(
        "ortops::RoIAlign",
        input,
        rois,
        output_height_i=output_height,
        output_width_i=output_width,
        spatial_scale_f=spatial_scale,
        sampling_ratio_i=sampling_ratio,
        mode_s=mode,
        aligned_i=aligned,
    )
    channels = symbolic_helper._get_tensor_dim_size(input, 1)
    return typed(pooled, input, sizes=[None, channels, output_height, output_width])


def _translation(  # noqa: ANN202 (onnxscript values)
    input,  # noqa: ANN001
    rois,  # noqa: ANN001
    output_height: int,
    output_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    mode: str,
    aligned: int,
):
    return onnx_opset.RoIAlign(
        input,
        rois,
        output_height=output_height,
        output_width=output_width,
        spatial_scale=spatial_scale,
        sampling_ratio=sampling_ratio,
        mode=mode,
        aligned=aligned,
    )


register_export(
    torch.ops.ortops.roi_align.default,
    onnx_op="RoIAlign",
    function=roi_align,
    symbolic=_symbolic,
    translation=_translation,
)
