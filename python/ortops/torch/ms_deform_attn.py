"""Multi-scale deformable attention: ``torch.ops.ortops.multi_scale_deformable_attention``,
exported to ``ortops::MultiScaleDeformableAttention``, and
``torch.ops.ortops.multi_scale_deformable_attention_from_offsets`` (reference points and offsets
in place of the locations), exported to ``ortops::MultiScaleDeformableAttentionFromOffsets``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ortops.torch._op import Arg, BadArgument, Op


def _check(value: torch.Tensor, spatial_shapes: torch.Tensor, level_start_index: torch.Tensor) -> None:
    """The kernel's checks of the levels, for the torch implementation (the kernel makes them
    itself, with its own messages)."""
    if value.device.type == "cpu":
        return
    keys = value.shape[1]
    sizes = spatial_shapes.tolist()
    starts = level_start_index.tolist()
    total = 0
    for level, ((h, w), start) in enumerate(zip(sizes, starts)):
        if h < 0 or w < 0 or start != total:
            raise BadArgument(
                f"level {level} has size ({h}, {w}) and starts at {start}; sizes must be "
                f"non-negative and level_start_index the running sums of H_l * W_l ({total} here)"
            )
        total += h * w
    if total != keys or len(starts) != len(sizes):
        raise BadArgument(
            f"the {len(sizes)} levels hold {total} rows of value, which has {keys}; level_start_index lists "
            f"{len(starts)} levels"
        )


def _reference(
    value: torch.Tensor,
    spatial_shapes: torch.Tensor,
    level_start_index: torch.Tensor,
    sampling_locations: torch.Tensor,
    attention_weights: torch.Tensor,
    points_per_level: list[int],
) -> torch.Tensor:
    """The kernel's semantics in differentiable torch ops (non-CPU tensors and gradients).

    mmcv's own torch version runs grid_sample per level, which needs the level sizes as
    Python ints; this gathers the four neighbours of every point from ``value`` with indices
    computed from the size tensors instead, so it also traces with symbolic shapes (the
    backward under ``torch.compile`` and AOT autograd).
    """
    batch, keys, heads, dim = value.shape
    queries = sampling_locations.shape[1]
    # Both layouts are runs of points level after level: [B, Q, H, samples], each point's level
    # sizes and start gathered by its level.
    if points_per_level:
        counts = torch.tensor(points_per_level, device=value.device)
    else:
        levels, points = sampling_locations.shape[3:5]
        counts = torch.full((levels,), points, dtype=torch.int64, device=value.device)
        sampling_locations = sampling_locations.flatten(3, 4)
        attention_weights = attention_weights.flatten(3, 4)
    samples = sampling_locations.shape[3]
    level_of_point = torch.repeat_interleave(torch.arange(len(counts), device=value.device), counts)
    point_shape = (1, 1, 1, samples)
    height, width = (spatial_shapes[level_of_point, i].view(point_shape) for i in (0, 1))
    start = level_start_index[level_of_point].view(point_shape)
    # As the kernel: pixel (loc * size - 0.5); a point outside (-1, W_l) x (-1, H_l), NaN
    # included, reads nothing.
    x = sampling_locations[..., 0] * width.to(value.dtype) - 0.5
    y = sampling_locations[..., 1] * height.to(value.dtype) - 0.5
    inside = (x > -1) & (x < width) & (y > -1) & (y < height)
    x, y = torch.where(inside, x, 0), torch.where(inside, y, 0)
    x0, y0 = x.floor(), y.floor()
    lx, ly = x - x0, y - y0
    hx, hy = 1 - lx, 1 - ly
    x0, y0 = x0.long(), y0.long()
    # [B, heads, S + 1, D]: row S is zeros, which neighbours outside the map read.
    rows = torch.cat([value.transpose(1, 2), value.new_zeros((batch, heads, 1, dim))], 2)
    count = queries * samples
    total = value.new_zeros((batch, heads, count, dim))
    for dy, dx, bilinear in ((0, 0, hy * hx), (0, 1, hy * lx), (1, 0, ly * hx), (1, 1, ly * lx)):
        yy, xx = y0 + dy, x0 + dx
        valid = inside & (yy >= 0) & (yy < height) & (xx >= 0) & (xx < width)
        index = torch.where(valid, start + yy * width + xx, keys)  # [B, Q, heads, samples]
        index = index.transpose(1, 2).reshape(batch, heads, count, 1).expand(batch, heads, count, dim)
        weight = torch.where(valid, bilinear * attention_weights, 0).transpose(1, 2).reshape(batch, heads, count, 1)
        total = total + rows.gather(2, index) * weight
    out = total.view(batch, heads, queries, samples, dim).sum(3)  # [B, heads, Q, D]
    return out.transpose(1, 2).reshape(batch, queries, heads * dim)


def _documented_layout(shapes: list[Any], attributes: dict[str, Any]) -> list[Any]:
    """With ``points_per_level``, locations (or offsets) ``[B, Q, H, sum(P_l), 2]`` and weights
    ``[B, Q, H, sum(P_l)]``, the node's last two inputs, seen as the documented
    ``[B, Q, H, L, P, 2]`` and ``[B, Q, H, L, P]`` with one level of all the points: the output's
    ``[B, Q, H * D]`` binds the same (an ``L`` bound before, by the reference points, stays)."""
    *levels, locations, weights = shapes
    if not attributes.get("points_per_level") or locations is None or weights is None:
        return shapes  # (None: a rank the exporter does not know)
    return [*levels, [*locations[:3], 1, *locations[3:]], [*weights[:3], 1, *weights[3:]]]


MULTI_SCALE_DEFORMABLE_ATTENTION = Op(
    "multi_scale_deformable_attention",
    "MultiScaleDeformableAttention",
    [
        Arg(
            "value",
            torch.Tensor,
            "``Tensor[B, S, H, D]``, float32, float64 or float16: every level's ``H_l x W_l`` map flattened "
            "row-major, level after level (``S = sum H_l * W_l``), ``H`` heads of ``D`` channels.",
        ),
        Arg(
            "spatial_shapes", torch.Tensor, "``Tensor[L, 2]`` int64, ``(H_l, W_l)`` per level.", "value_spatial_shapes"
        ),
        Arg(
            "level_start_index",
            torch.Tensor,
            "``Tensor[L]`` int64, where each level starts in ``S`` (``0, H_0 * W_0, ...``; checked).",
            "value_level_start_index",
        ),
        Arg(
            "sampling_locations",
            torch.Tensor,
            "``Tensor[B, Q, H, L, P, 2]`` points ``(x, y)`` normalised to each level (0 and 1 are its outer "
            "edges), or ``Tensor[B, Q, H, sum(P_l), 2]`` with ``points_per_level``; cast to ``value``'s dtype, "
            "as mmcv does.",
        ),
        Arg(
            "attention_weights",
            torch.Tensor,
            "``Tensor[B, Q, H, L, P]`` (used as given: softmax them before), or ``Tensor[B, Q, H, sum(P_l)]`` "
            "with ``points_per_level``; cast to ``value``'s dtype.",
        ),
        Arg(
            "points_per_level",
            list[int],
            "``P_l`` of each level where they differ (D-FINE's and DEIM's ``[3, 6, 3]``): the points of "
            "level ``l`` are the ``l``-th run of ``P_l``; empty: one ``P`` per level, from the shapes.",
        ),
    ],
    check=_check,
    reference=_reference,
    differentiable=(0, 3, 4),
    documented_layout=_documented_layout,
)


@MULTI_SCALE_DEFORMABLE_ATTENTION.public
def multi_scale_deformable_attention(
    value: torch.Tensor,
    spatial_shapes: torch.Tensor,
    level_start_index: torch.Tensor,
    sampling_locations: torch.Tensor,
    attention_weights: torch.Tensor,
    points_per_level: Sequence[int] = (),
) -> torch.Tensor:
    """Multi-scale deformable attention (Deformable DETR), mmcv's
    ``multi_scale_deformable_attn_pytorch`` as one op that exports to
    ``ortops::MultiScaleDeformableAttention``.

    Returns:
        ``Tensor[B, Q, H * D]``: per query and head, the weighted sum of the points' bilinear
        samples (zeros padding, ``align_corners=False``); a non-finite location contributes 0.

    CPU tensors run ortops' kernel, others a torch implementation of the same semantics.
    Differentiable with respect to value, sampling_locations and attention_weights.
    """
    return MULTI_SCALE_DEFORMABLE_ATTENTION(
        value,
        spatial_shapes,
        level_start_index,
        sampling_locations.to(value.dtype),
        attention_weights.to(value.dtype),
        list(points_per_level),
    )


def _reference_from_offsets(
    value: torch.Tensor,
    spatial_shapes: torch.Tensor,
    level_start_index: torch.Tensor,
    reference_points: torch.Tensor,
    sampling_offsets: torch.Tensor,
    attention_weights: torch.Tensor,
    points_per_level: list[int],
) -> torch.Tensor:
    """The locations as the node computes them, ``reference_points`` of each point's level plus
    its offset divided by the level's ``(W_l, H_l)`` (in ``value``'s dtype), given to
    :func:`_reference`; its autograd differentiates through them to the points and offsets."""
    # (W_l, H_l) per level: the offsets' (x, y) order.
    normaliser = spatial_shapes.flip(-1).to(value.dtype)
    if points_per_level:  # [B, Q, H, sum(P_l), 2]: each point takes its level's row
        counts = torch.tensor(points_per_level, device=value.device)
        level_of_point = torch.repeat_interleave(torch.arange(len(counts), device=value.device), counts)
        reference = reference_points[:, :, None, level_of_point]
        normaliser = normaliser[level_of_point]
    else:  # [B, Q, H, L, P, 2]
        reference = reference_points[:, :, None, :, None]
        normaliser = normaliser[:, None]
    locations = reference + sampling_offsets / normaliser
    return _reference(value, spatial_shapes, level_start_index, locations, attention_weights, points_per_level)


MULTI_SCALE_DEFORMABLE_ATTENTION_FROM_OFFSETS = Op(
    "multi_scale_deformable_attention_from_offsets",
    "MultiScaleDeformableAttentionFromOffsets",
    [
        *MULTI_SCALE_DEFORMABLE_ATTENTION.args[:3],
        Arg(
            "reference_points",
            torch.Tensor,
            "``Tensor[B, Q, L, 2]`` each query's reference point ``(x, y)`` on each level, normalised to the "
            "level as locations are (0 and 1 are its outer edges); cast to ``value``'s dtype.",
        ),
        Arg(
            "sampling_offsets",
            torch.Tensor,
            "``Tensor[B, Q, H, L, P, 2]`` each point's offset ``(x, y)`` from its level's reference point, in "
            "pixels of that level, or ``Tensor[B, Q, H, sum(P_l), 2]`` with ``points_per_level``; cast to "
            "``value``'s dtype.",
        ),
        *MULTI_SCALE_DEFORMABLE_ATTENTION.args[4:],
    ],
    check=_check,
    reference=_reference_from_offsets,
    differentiable=(0, 3, 4, 5),
    documented_layout=_documented_layout,
)


@MULTI_SCALE_DEFORMABLE_ATTENTION_FROM_OFFSETS.public
def multi_scale_deformable_attention_from_offsets(
    value: torch.Tensor,
    spatial_shapes: torch.Tensor,
    level_start_index: torch.Tensor,
    reference_points: torch.Tensor,
    sampling_offsets: torch.Tensor,
    attention_weights: torch.Tensor,
    points_per_level: Sequence[int] = (),
) -> torch.Tensor:
    """Multi-scale deformable attention given each query's reference points and each point's
    offset from them (Deformable DETR's encoder, mmcv's ``MultiScaleDeformableAttention`` with
    2-d reference points), one op that exports to
    ``ortops::MultiScaleDeformableAttentionFromOffsets``.

    The location of point ``p`` of level ``l`` is ``reference_points[b, q, l] +
    sampling_offsets[b, q, h, l, p] / (W_l, H_l)``, divided, then added, in ``value``'s dtype
    (the kernel computes float16 data in float32); the rest is
    ``multi_scale_deformable_attention``'s. One node in place of the model's Div and Add, which
    broadcast over every sample.

    Returns:
        ``Tensor[B, Q, H * D]``: per query and head, the weighted sum of the points' bilinear
        samples (zeros padding, ``align_corners=False``); a non-finite location contributes 0.

    CPU tensors run ortops' kernel, others a torch implementation of the same semantics.
    Differentiable with respect to value, reference_points, sampling_offsets and
    attention_weights.
    """
    return MULTI_SCALE_DEFORMABLE_ATTENTION_FROM_OFFSETS(
        value,
        spatial_shapes,
        level_start_index,
        reference_points.to(value.dtype),
        sampling_offsets.to(value.dtype),
        attention_weights.to(value.dtype),
        list(points_per_level),
    )
