"""The PyTorch compositions that the benchmarks time ortops' nodes against: shared by bench.py
(CPU) and bench_cuda.py (GPU), so both anchors compute the same thing."""

from __future__ import annotations

import torch


def ms_deform_attn_composition(
    value: torch.Tensor, levels: list[tuple[int, int]], locations: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """mmcv's multi_scale_deformable_attn_pytorch: one grid_sample per level, then the weighted sum."""
    batch, _, heads, dim = value.shape
    _, queries, _, count, points, _ = locations.shape
    per_level = value.split([h * w for h, w in levels], dim=1)
    samples = []
    for level, (h, w) in enumerate(levels):
        maps = per_level[level].flatten(2).transpose(1, 2).reshape(batch * heads, dim, h, w)
        grid = (2 * locations[:, :, :, level] - 1).transpose(1, 2).flatten(0, 1)
        samples.append(torch.nn.functional.grid_sample(maps, grid, "bilinear", "zeros", align_corners=False))
    weights = weights.transpose(1, 2).reshape(batch * heads, 1, queries, count * points)
    out = (torch.stack(samples, dim=-2).flatten(-2) * weights).sum(-1).view(batch, heads * dim, queries)
    return out.transpose(1, 2).contiguous()
