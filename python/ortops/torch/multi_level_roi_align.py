"""Multi-level RoIAlign (an FPN RoI extractor): ``torch.ops.ortops.multi_level_roi_align``,
exported to ``ortops::MultiLevelRoIAlign``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ortops.torch import roi_align as single
from ortops.torch._op import Arg, BadArgument, Op, Tensors
from ortops.torch._sampling import sample_planes


def check_pyramid(features: Sequence[torch.Tensor], rois: torch.Tensor) -> None:
    """The shapes every multi-level op's kernel checks: one or more feature maps [N, C, H_l, W_l]
    of one N and C, and rois [R, 5]."""
    if not features:
        raise BadArgument("needs at least one feature map, got none")
    first = features[0]
    for i, level in enumerate(features):
        if level.dim() != 4 or level.shape[:2] != first.shape[:2]:
            raise BadArgument(
                f"every level needs the same N and C, but features[{i}] has shape {list(level.shape)} "
                f"and features[0] {list(first.shape)}"
            )
    if rois.dim() != 2 or rois.shape[1] != 5:
        raise BadArgument(f"rois must have shape [R, 5], got {list(rois.shape)}")


def _check(
    features: Sequence[torch.Tensor],
    rois: torch.Tensor,
    output_height: int,
    output_width: int,
    featmap_strides: Sequence[float],
    sampling_ratio: int,
    finest_scale: int,
    roi_scale_factor: float,
    pool_mode: str,
    aligned: int,
) -> None:
    """The kernel's checks, with its messages where it has them (the torch implementation,
    which runs on other devices, checks nothing itself)."""
    check_pyramid(features, rois)
    if len(featmap_strides) != len(features):
        raise BadArgument(
            f"featmap_strides lists {len(featmap_strides)} strides, but there are {len(features)} feature maps"
        )
    if not all(math.isfinite(s) and s > 0 for s in featmap_strides):
        raise BadArgument(f"featmap_strides must hold positive finite strides, got {list(featmap_strides)}")
    if finest_scale <= 0:
        raise BadArgument(f"finest_scale must be positive, got {finest_scale}")
    if not (math.isfinite(roi_scale_factor) and roi_scale_factor > 0):
        raise BadArgument(f"roi_scale_factor must be positive and finite, got {roi_scale_factor}")
    if pool_mode not in ("avg", "max"):
        raise BadArgument(f"pool_mode must be 'avg' or 'max', got {pool_mode!r}")
    single.check_pooling(output_height, output_width, sampling_ratio)
    if aligned not in (0, 1):
        raise BadArgument(f"aligned must be 0 or 1, got {aligned}")
    single.check_rois(rois, features[0].shape[0], "the features have")


def map_levels(rois: torch.Tensor, finest_scale: int, levels: int) -> torch.Tensor:
    """mmdet's ``map_roi_levels``: each roi's level, Tensor[R] int64.

    floor(log2(sqrt(w h) / finest_scale + 1e-6)) clamped to [0, levels - 1], in the rois'
    dtype as the kernel computes it; a roi of negative area (NaN scale) goes to level 0.
    """
    area = (rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2])
    level = torch.floor(torch.log2(torch.sqrt(area) / finest_scale + 1e-6))
    level = torch.nan_to_num(level, nan=0.0)
    return level.clamp(0, levels - 1).long()


def rescale(rois: torch.Tensor, factor: float) -> torch.Tensor:
    """mmdet's ``roi_rescale``: each roi's width and height times ``factor``, about its centre."""
    if factor == 1.0:
        return rois
    cx, cy = (rois[:, 1] + rois[:, 3]) * 0.5, (rois[:, 2] + rois[:, 4]) * 0.5
    half_w, half_h = (rois[:, 3] - rois[:, 1]) * factor * 0.5, (rois[:, 4] - rois[:, 2]) * factor * 0.5
    return torch.stack([rois[:, 0], cx - half_w, cy - half_h, cx + half_w, cy + half_h], 1)


def pool_levels(
    features: Sequence[torch.Tensor],
    rois: torch.Tensor,
    level: torch.Tensor,
    spatial_scales: Sequence[float],
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    max_mode: bool,
    aligned: int,
) -> torch.Tensor:
    """RoIAlign's torch implementation, each roi reading its own level: roi r pooled from
    ``features[level[r]]`` with spatial scale ``spatial_scales[level[r]]``; a roi whose level is
    outside [0, L) gives zeros.

    Args:
        features: one ``Tensor[N, C, H_l, W_l]`` per level.
        rois: ``Tensor[R, 5]``, (batch_index, x1, y1, x2, y2).
        level: ``Tensor[R]`` int64, each roi's level.

    Returns:
        ``Tensor[R, C, output_height, output_width]``.

    Without data-dependent shapes (each roi's level selects its map by index, not the rois by
    level), so that torch.compile can trace it for a fixed ``sampling_ratio`` (it is the
    backward).
    """
    r, c = rois.shape[0], features[0].shape[1]
    if r == 0 or c == 0:
        return rois.new_zeros((r, c, output_height, output_width))
    # Every level's maps as one [C, P] matrix of pixels; per roi, its level's size, spatial
    # scale and where its image starts in that matrix. A roi on no level keeps size 0, which
    # sample_planes reads as 0.
    planes = torch.cat([f.permute(1, 0, 2, 3).reshape(c, -1) for f in features], 1)
    height, width, start = torch.zeros_like(level), torch.zeros_like(level), torch.zeros_like(level)
    scale = torch.zeros_like(rois[:, 0])
    offset = 0
    for index, (feature, spatial_scale) in enumerate(zip(features, spatial_scales)):
        here = level == index
        height = torch.where(here, feature.shape[2], height)
        width = torch.where(here, feature.shape[3], width)
        start = torch.where(here, offset, start)
        scale = torch.where(here, spatial_scale, scale)  # a double rounded to the rois' dtype, as the kernel's
        offset = offset + feature.shape[0] * feature.shape[2] * feature.shape[3]
    # A roi on no level is not checked: it may be NaN or far away, which would give NaN (NaN
    # times a zero weight) or a huge adaptive grid; it is pooled as a box of zeros instead.
    on_level = (level >= 0) & (level < len(features))
    rois = torch.where(on_level[:, None], rois, 0)
    base = start + rois[:, 0].long() * height * width

    def sample(rows: torch.Tensor | None, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if rows is None:
            return sample_planes(planes, base, height, width, y, x)
        return sample_planes(planes, base[rows], height[rows], width[rows], y, x)

    geometry = single._geometry(rois, scale, output_height, output_width, aligned)
    return single._pool(sample, c, geometry, (output_height, output_width), sampling_ratio, max_mode)


def _reference(
    features: list[torch.Tensor],
    rois: torch.Tensor,
    output_height: int,
    output_width: int,
    featmap_strides: list[float],
    sampling_ratio: int,
    finest_scale: int,
    roi_scale_factor: float,
    pool_mode: str,
    aligned: int,
) -> torch.Tensor:
    """The kernel's semantics in differentiable torch ops (non-CPU tensors and gradients):
    each roi's level by mmdet's mapping, from the roi before it is rescaled."""
    level = map_levels(rois, finest_scale, len(features))
    scales = [1.0 / stride for stride in featmap_strides]  # as mmdet: 1 / stride in double, then float32
    return pool_levels(
        features,
        rescale(rois, roi_scale_factor),
        level,
        scales,
        output_height,
        output_width,
        sampling_ratio,
        pool_mode == "max",
        aligned,
    )


MULTI_LEVEL_ROI_ALIGN = Op(
    "multi_level_roi_align",
    "MultiLevelRoIAlign",
    [
        Arg(
            "features",
            Tensors,
            "one ``Tensor[N, C, H_l, W_l]`` per level, finest first, float32, all of the same N and C.",
        ),
        Arg(
            "rois",
            torch.Tensor,
            "``Tensor[R, 5]`` rois as (batch_index, x1, y1, x2, y2) in image coordinates, float32; every value "
            "must be finite and the batch index name an image.",
        ),
        *single.OUTPUT_SIZE,
        Arg("featmap_strides", list[float], "the stride of each level (one per feature map)."),
        single.SAMPLING_RATIO,
        Arg("finest_scale", int, "roi scale under which a roi stays on the finest level."),
        Arg("roi_scale_factor", float, "multiplies each roi's width and height after its level is chosen."),
        Arg("pool_mode", str, '``"avg"`` or ``"max"`` (largest bilinearly interpolated sample of a bin).'),
        Arg("aligned", int, "shift rois by -0.5 pixel (True), or the legacy behaviour (False)."),
    ],
    check=_check,
    reference=_reference,
    differentiable=(0,),
    public_args=single.OUTPUT_SIZE_DOC,
)


@MULTI_LEVEL_ROI_ALIGN.public
def multi_level_roi_align(
    features: Sequence[torch.Tensor],
    rois: torch.Tensor,
    output_size: int | tuple[int, int],
    featmap_strides: Sequence[float],
    sampling_ratio: int = 0,
    finest_scale: int = 56,
    roi_scale_factor: float = 1.0,
    pool_mode: str = "avg",
    aligned: bool = True,
) -> torch.Tensor:
    """An FPN RoI extractor, mmdet's ``SingleRoIExtractor`` over RoIAlign, as one op (exports
    to ``ortops::MultiLevelRoIAlign``).

    Each roi goes to one level by its scale s = sqrt(w h): level = floor(log2(s / finest_scale
    + 1e-6)), clamped to the levels there are (a roi of negative area: level 0). Then, when
    ``roi_scale_factor`` is not 1, it is scaled about its centre, and pooled from its level as
    ``ortops.torch.roi_align`` with ``spatial_scale = 1 / featmap_strides[level]``.

    Returns:
        ``Tensor[R, C, output_height, output_width]``.

    CPU tensors run ortops' kernel; others a torch implementation of the same semantics.
    Differentiable with respect to ``features`` (not ``rois``). float32 only: the ONNX node
    is registered for float32 alone.
    """
    return MULTI_LEVEL_ROI_ALIGN(
        list(features),
        rois,
        *single.pooled_size(output_size),
        [float(s) for s in featmap_strides],
        int(sampling_ratio),
        int(finest_scale),
        float(roi_scale_factor),
        pool_mode,
        int(aligned),
    )
