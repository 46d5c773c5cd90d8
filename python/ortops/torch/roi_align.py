"""RoIAlign: ``torch.ops.ortops.roi_align``, exported to ``ortops::RoIAlign``."""

from __future__ import annotations

import math

import torch
from torch.onnx import symbolic_helper

from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._sampling import roi_align_sample


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
    # Every (ph, iy) row with every (pw, ix) column: points [R, out_h, grid_h, out_w, grid_w].
    shape = (r, out_h, grid_h, out_w, grid_w)
    y = y[:, :, :, None, None].expand(shape)
    x = x[:, None, None, :, :].expand(shape)
    values = roi_align_sample(input, rois[:, 0].long(), y, x)
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
