"""RoIAlign over a feature pyramid with each roi's level given (torchvision's MultiScaleRoIAlign
after its LevelMapper): ``torch.ops.ortops.roi_align_by_level``, exported to
``ortops::RoIAlignByLevel``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ortops.torch._op import Arg, BadArgument, Op, Tensors
from ortops.torch.multi_level_roi_align import check_pyramid, pool_levels
from ortops.torch.roi_align import OUTPUT_SIZE, OUTPUT_SIZE_DOC, SAMPLING_RATIO, check_pooling, check_rois, pooled_size


def _check(
    features: Sequence[torch.Tensor],
    rois: torch.Tensor,
    levels: torch.Tensor,
    output_height: int,
    output_width: int,
    spatial_scales: Sequence[float],
    sampling_ratio: int,
    mode: str,
    aligned: int,
) -> None:
    """The kernel's checks, with its messages where it has them (the torch implementation,
    which runs on other devices, checks nothing itself)."""
    check_pyramid(features, rois)
    if levels.dim() != 1 or levels.shape[0] != rois.shape[0]:
        raise BadArgument(
            f"input 'levels' must hold one level per roi, shape [{rois.shape[0]}], got {list(levels.shape)}"
        )
    if len(spatial_scales) != len(features):
        raise BadArgument(
            f"spatial_scales lists {len(spatial_scales)} scales, but there are {len(features)} feature maps"
        )
    if not all(math.isfinite(s) for s in spatial_scales):
        raise BadArgument(f"spatial_scales must hold finite scales, got {list(spatial_scales)}")
    if mode not in ("avg", "max"):
        raise BadArgument(f"mode must be 'avg' or 'max', got {mode!r}")
    check_pooling(output_height, output_width, sampling_ratio)
    if aligned not in (0, 1):
        raise BadArgument(f"aligned must be 0 or 1, got {aligned}")
    # A roi on no level gives zeros and is not read, so the kernel does not check it.
    on_level = (levels >= 0) & (levels < len(features))
    check_rois(rois, features[0].shape[0], "the features have", read=on_level)


def _reference(
    features: list[torch.Tensor],
    rois: torch.Tensor,
    levels: torch.Tensor,
    output_height: int,
    output_width: int,
    spatial_scales: list[float],
    sampling_ratio: int,
    mode: str,
    aligned: int,
) -> torch.Tensor:
    """The kernel's semantics in differentiable torch ops (non-CPU tensors and gradients)."""
    return pool_levels(
        features, rois, levels, spatial_scales, output_height, output_width, sampling_ratio, mode == "max", aligned
    )


ROI_ALIGN_BY_LEVEL = Op(
    "roi_align_by_level",
    "RoIAlignByLevel",
    [
        Arg(
            "features",
            Tensors,
            "one ``Tensor[N, C, H_l, W_l]`` per level, finest first, float32, all of the same N and C.",
        ),
        Arg(
            "rois",
            torch.Tensor,
            "``Tensor[R, 5]`` rois as (batch_index, x1, y1, x2, y2) in image coordinates, float32; every roi on a "
            "level must be finite and its batch index name an image.",
        ),
        Arg(
            "levels",
            torch.Tensor,
            "``Tensor[R]`` int64, each roi's level (an index into ``features``); a roi whose level is outside "
            "[0, L) gives zeros and is neither read nor checked.",
        ),
        *OUTPUT_SIZE,
        Arg(
            "spatial_scales",
            list[float],
            "the spatial scale of each level (one per feature map): multiplies roi coordinates on that level.",
        ),
        SAMPLING_RATIO,
        Arg(
            "mode",
            str,
            '``"avg"`` or ``"max"`` (largest bilinearly interpolated sample; a bin with no samples gives 0).',
        ),
        Arg("aligned", int, "shift rois by -0.5 pixel (True), or the legacy behaviour (False)."),
    ],
    check=_check,
    reference=_reference,
    differentiable=(0,),
    public_args=OUTPUT_SIZE_DOC,
)


@ROI_ALIGN_BY_LEVEL.public
def roi_align_by_level(
    features: Sequence[torch.Tensor],
    rois: torch.Tensor,
    levels: torch.Tensor,
    output_size: int | tuple[int, int],
    spatial_scales: Sequence[float],
    sampling_ratio: int = 0,
    mode: str = "avg",
    aligned: bool = True,
) -> torch.Tensor:
    """RoIAlign over a feature pyramid with each roi's level given, as torchvision's
    ``MultiScaleRoIAlign`` pools after its ``LevelMapper`` (exports to ``ortops::RoIAlignByLevel``).

    Roi r is pooled from ``features[levels[r]]`` as ``ortops.torch.roi_align`` with
    ``spatial_scale = spatial_scales[levels[r]]``.

    Returns:
        ``Tensor[R, C, output_height, output_width]``.

    CPU tensors run ortops' kernel; others a torch implementation of the same semantics.
    Differentiable with respect to ``features`` (not ``rois``). float32 only: the ONNX node
    is registered for float32 alone.
    """
    return ROI_ALIGN_BY_LEVEL(
        list(features),
        rois,
        levels,
        *pooled_size(output_size),
        [float(s) for s in spatial_scales],
        int(sampling_ratio),
        mode,
        int(aligned),
    )
