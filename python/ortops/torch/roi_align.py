"""RoIAlign: ``torch.ops.ortops.roi_align``, exported to ``ortops::RoIAlign``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from ortops.torch._op import Arg, BadArgument, Op
from ortops.torch._sampling import roi_align_sample

# The kernel's bounds (csrc/ops/roi_align/roi_pooling.h): past them the op would run for
# minutes (here: allocate without end), so it reports the roi instead.
_MAX_SAMPLES_PER_AXIS = 1 << 16
_MAX_TAPS_PER_ROI = 1 << 24


#: The public functions of RoIAlign's family take ``output_size``; their ops, its two sides.
OUTPUT_SIZE = (Arg("output_height", int), Arg("output_width", int))
OUTPUT_SIZE_DOC = {"output_size": "pooled size, ``int`` or ``(height, width)``."}
SAMPLING_RATIO = Arg(
    "sampling_ratio", int, "samples per bin along each axis; 0: adaptive, ceil(roi size / output size)."
)


def pooled_size(output_size: int | tuple[int, int]) -> tuple[int, int]:
    """``output_size`` as (height, width)."""
    height, width = (output_size, output_size) if isinstance(output_size, int) else output_size
    return int(height), int(width)


def check_pooling(output_height: int, output_width: int, sampling_ratio: int) -> None:
    """The kernels' bounds on the pooled size and the samples per bin (RoIAlign's family)."""
    if output_height < 1 or output_width < 1 or output_height > _MAX_TAPS_PER_ROI // output_width:
        raise BadArgument(f"output size {output_height} x {output_width} is out of range")
    taps = _MAX_TAPS_PER_ROI // (output_height * output_width)
    if sampling_ratio > _MAX_SAMPLES_PER_AXIS or sampling_ratio * sampling_ratio > taps:
        raise BadArgument(
            f"a roi needs {sampling_ratio} x {sampling_ratio} samples per bin, more than this op allows "
            f"({taps} at an output size of {output_height} x {output_width}); lower sampling_ratio"
        )


def check_rois(rois: torch.Tensor, images: int, holder: str, read: torch.Tensor | None = None) -> None:
    """Every roi finite, its batch index (truncated toward zero, as mmcv) one of the ``images``
    that ``holder`` ("input has", "the features have") has. ``read`` (Tensor[R] bool): the rois
    the kernel reads, the only ones it checks; None: all."""
    if rois.shape[0] == 0:
        return
    finite = torch.isfinite(rois).all(1)
    if read is not None:
        finite = finite | ~read
    if not bool(finite.all()):
        raise BadArgument(f"roi {int((~finite).nonzero()[0, 0])} in input 'rois' is not finite")
    index = rois[:, 0].long()
    bad = (index < 0) | (index >= images)
    if read is not None:
        bad = bad & read
    if bool(bad.any()):
        r = int(bad.nonzero()[0, 0])
        raise BadArgument(f"roi {r} has batch index {float(rois[r, 0])}, but {holder} {images} images")


def _check(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    mode: str,
    aligned: int,
) -> None:
    """The kernel's checks, with its messages."""
    if input.dim() != 4 or rois.dim() != 2 or rois.shape[1] != 5:
        raise BadArgument(f"need input [N, C, H, W] and rois [R, 5], got {list(input.shape)} and {list(rois.shape)}")
    if mode not in ("avg", "max"):
        raise BadArgument(f"mode must be 'avg' or 'max', got {mode!r}")
    if aligned not in (0, 1):
        raise BadArgument(f"aligned must be 0 or 1, got {aligned}")
    check_pooling(output_height, output_width, sampling_ratio)
    check_rois(rois, input.shape[0], "input has")


def _sampling_grids(
    roi_h: torch.Tensor, roi_w: torch.Tensor, out_h: int, out_w: int, sampling_ratio: int
) -> torch.Tensor:
    """Samples per bin along y and x for each roi: Tensor[R, 2] int64, checked against the bounds."""
    grids = []
    for size, bins in ((roi_h, out_h), (roi_w, out_w)):
        if sampling_ratio > 0:
            grid = torch.full_like(size, sampling_ratio)
        else:
            grid = torch.ceil(size / bins)  # in the rois' dtype, as the kernel computes it
            grid = torch.where(grid > 0, grid, 0)  # empty or negative sizes: no samples
        if bool((grid > _MAX_SAMPLES_PER_AXIS).any()):
            raise BadArgument(
                f"a roi needs {float(grid.max())} samples per bin along one axis, more than "
                f"{_MAX_SAMPLES_PER_AXIS}; lower sampling_ratio or check the rois"
            )
        grids.append(grid.long())
    grid = torch.stack(grids, 1)
    over = grid.prod(1) > _MAX_TAPS_PER_ROI // (out_h * out_w)
    if bool(over.any()):
        grid_h, grid_w = grid[int(over.nonzero()[0, 0])].tolist()
        raise BadArgument(
            f"a roi needs {grid_h} x {grid_w} samples per bin, more than this op allows; lower 'sampling_ratio' "
            "or check the rois"
        )
    return grid


# Reads the points (y, x), Tensor[R', *] each, of the rois `rows` (Tensor[R'] int64 indices;
# None: every roi): Tensor[R', C, *]. RoIAlign reads one input; the multi-level op, each
# roi's level.
Sampler = Callable[[Optional[torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]


def _geometry(
    rois: torch.Tensor, spatial_scale: float | torch.Tensor, output_height: int, output_width: int, aligned: int
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """The scaled rois' corners, bin sizes and sizes, each a (y, x) pair of Tensor[R], with the
    kernel's operation order. ``spatial_scale`` is one for all rois or Tensor[R] (one per roi)."""
    shift = 0.5 if aligned else 0.0
    start_w = rois[:, 1] * spatial_scale - shift
    start_h = rois[:, 2] * spatial_scale - shift
    roi_w = rois[:, 3] * spatial_scale - shift - start_w
    roi_h = rois[:, 4] * spatial_scale - shift - start_h
    if not aligned:
        roi_w, roi_h = roi_w.clamp(min=1), roi_h.clamp(min=1)
    return (start_h, start_w), (roi_h / output_height, roi_w / output_width), (roi_h, roi_w)


def _pool_rois(
    sample: Sampler,
    rows: torch.Tensor | None,
    channels: int,
    start: tuple[torch.Tensor, torch.Tensor],
    bin_size: tuple[torch.Tensor, torch.Tensor],
    output_size: tuple[int, int],
    grid: tuple[int, int],
    max_mode: bool,
) -> torch.Tensor:
    """RoIAlign for rois that share one sampling grid: Tensor[R, C, out_h, out_w].

    ``start`` and ``bin_size`` are (y, x) pairs of Tensor[R]: the scaled roi's corner and its
    bin size; ``grid`` is the samples per bin along (y, x); ``sample`` reads rois ``rows``.
    """
    (out_h, out_w), (grid_h, grid_w) = output_size, grid
    r, dtype, device = start[0].shape[0], start[0].dtype, start[0].device
    if grid_h * grid_w == 0:
        return start[0].new_zeros((r, channels, out_h, out_w))  # no samples (max mode too: an empty bin is 0)
    # y[r, ph, iy] and x[r, pw, ix] with the kernel's operation order: start + p * bin + (i + 0.5) * bin / grid.
    axes = []
    for begin, size, bins, samples in zip(start, bin_size, (out_h, out_w), (grid_h, grid_w), strict=True):
        p = torch.arange(bins, dtype=dtype, device=device)[None, :, None]
        i = (torch.arange(samples, dtype=dtype, device=device) + 0.5)[None, None, :]
        axes.append(begin[:, None, None] + p * size[:, None, None] + i * size[:, None, None] / samples)
    # Every (ph, iy) row with every (pw, ix) column: points [R, out_h, grid_h, out_w, grid_w].
    shape = (r, out_h, grid_h, out_w, grid_w)
    y = axes[0][:, :, :, None, None].expand(shape)
    x = axes[1][:, None, None, :, :].expand(shape)
    values = sample(rows, y, x)
    values = values.permute(0, 1, 2, 4, 3, 5).reshape(r, channels, out_h, out_w, grid_h * grid_w)
    return values.amax(-1) if max_mode else values.sum(-1) / (grid_h * grid_w)


def _pool(
    sample: Sampler,
    channels: int,
    geometry: tuple[tuple[torch.Tensor, torch.Tensor], ...],
    output_size: tuple[int, int],
    sampling_ratio: int,
    max_mode: bool,
) -> torch.Tensor:
    """RoIAlign of every roi from its ``_geometry``, read through ``sample``: Tensor[R, C, out_h, out_w]."""
    (start_h, start_w), (bin_h, bin_w), (roi_h, roi_w) = geometry
    if sampling_ratio > 0:
        # One grid for every roi, and no data-dependent control flow, so that torch.compile
        # can trace this (it is the backward). The bound was checked on the forward call.
        grid = (sampling_ratio, sampling_ratio)
        return _pool_rois(sample, None, channels, (start_h, start_w), (bin_h, bin_w), output_size, grid, max_mode)
    out = start_h.new_zeros((start_h.shape[0], channels, *output_size))
    grids = _sampling_grids(roi_h, roi_w, *output_size, sampling_ratio)
    # Rois with the same adaptive sampling grid are pooled together.
    for grid in grids.unique(dim=0).tolist():
        group = (grids == grids.new_tensor(grid)).all(1).nonzero()[:, 0]
        out[group] = _pool_rois(
            sample,
            group,
            channels,
            (start_h[group], start_w[group]),
            (bin_h[group], bin_w[group]),
            output_size,
            (grid[0], grid[1]),
            max_mode,
        )
    return out


def _reference(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_height: int,
    output_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    mode: str,
    aligned: int,
) -> torch.Tensor:
    """The kernel's semantics in differentiable torch ops (non-CPU tensors and gradients)."""
    r, c = rois.shape[0], input.shape[1]
    if r == 0 or c == 0:
        return input.new_zeros((r, c, output_height, output_width))
    batch = rois[:, 0].long()

    def sample(rows: torch.Tensor | None, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return roi_align_sample(input, batch if rows is None else batch[rows], y, x)

    geometry = _geometry(rois, spatial_scale, output_height, output_width, aligned)
    return _pool(sample, c, geometry, (output_height, output_width), sampling_ratio, mode == "max")


ROI_ALIGN = Op(
    "roi_align",
    "RoIAlign",
    [
        Arg("input", torch.Tensor, "``Tensor[N, C, H, W]`` feature maps, float32, float64 or float16."),
        Arg(
            "rois",
            torch.Tensor,
            "``Tensor[R, 5]`` rois as (batch_index, x1, y1, x2, y2) in image coordinates, same dtype as ``input``; "
            "the batch index is truncated toward zero and must name an image, and every value must be finite "
            "(else ``ValueError``, as the kernel's error).",
        ),
        *OUTPUT_SIZE,
        Arg(
            "spatial_scale",
            float,
            "multiplies roi coordinates to give feature-map coordinates (the exported node stores it as a float32 "
            "attribute).",
        ),
        SAMPLING_RATIO,
        Arg(
            "mode",
            str,
            '``"avg"`` (equal to ``torchvision.ops.roi_align``) or ``"max"`` (largest bilinearly interpolated '
            "sample; a bin with no samples gives 0).",
        ),
        Arg("aligned", int, "shift rois by -0.5 pixel (True), or the legacy behaviour (False)."),
    ],
    check=_check,
    reference=_reference,
    differentiable=(0,),
    public_args=OUTPUT_SIZE_DOC,
)


@ROI_ALIGN.public
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

    Returns:
        ``Tensor[R, C, output_height, output_width]``.

    CPU tensors run ortops' kernel; others a torch implementation of the same semantics.
    Differentiable with respect to ``input`` (not ``rois``, as torchvision's).
    """
    return ROI_ALIGN(
        input, rois, *pooled_size(output_size), float(spatial_scale), int(sampling_ratio), mode, int(aligned)
    )
