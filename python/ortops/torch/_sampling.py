"""Bilinear sampling by RoIAlign's rule, shared by the eager RoIAlign family."""

from __future__ import annotations

import torch


def roi_align_sample(input: torch.Tensor, batch: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Samples images ``batch`` of ``input`` at points (y, x), as the C++ kernels do.

    Args:
        input: ``Tensor[N, C, H, W]``.
        batch: ``Tensor[R]`` int64, the image each row of points reads.
        y, x: ``Tensor[R, *]`` point coordinates in pixels.

    Returns:
        ``Tensor[R, C, *]``. A point with y < -1, y > H, x < -1 or x > W (or NaN) reads 0;
        otherwise coordinates below 0 clamp to 0 and the last row/column repeats past the edge.
    """
    n, c, h, w = input.shape
    r, points_shape = y.shape[0], y.shape[1:]
    if h == 0 or w == 0 or r == 0:
        return input.new_zeros((r, c, *points_shape))
    # Channels first over all images, so points index (image, pixel) without copying per roi.
    planes = input.permute(1, 0, 2, 3).reshape(c, n * h * w)
    return sample_planes(planes, batch.long() * (h * w), h, w, y, x)


def sample_planes(
    planes: torch.Tensor,
    base: torch.Tensor,
    height: int | torch.Tensor,
    width: int | torch.Tensor,
    y: torch.Tensor,
    x: torch.Tensor,
) -> torch.Tensor:
    """:func:`roi_align_sample` over maps of several sizes (one per pyramid level) at once.

    Args:
        planes: ``Tensor[C, P]``, every map's pixels of every channel, row-major per map.
        base: ``Tensor[R]`` int64, where the map each row of points reads starts in ``planes``.
        height, width: that map's size, one for every row or ``Tensor[R]`` int64 per row.
        y, x: ``Tensor[R, *]`` point coordinates in pixels.

    Returns:
        ``Tensor[R, C, *]``, by RoIAlign's rule; a map of height or width 0 reads 0.
    """
    c, r, points_shape = planes.shape[0], y.shape[0], y.shape[1:]
    if r == 0 or planes.shape[1] == 0:
        return planes.new_zeros((r, c, *points_shape))
    y, x = y.reshape(r, -1), x.reshape(r, -1)
    h = height[:, None] if isinstance(height, torch.Tensor) else height
    w = width[:, None] if isinstance(width, torch.Tensor) else width
    inside = (y >= -1) & (y <= h) & (x >= -1) & (x <= w) & (h > 0) & (w > 0)
    y, x = y.clamp(min=0), x.clamp(min=0)
    y_low, x_low = y.floor().long(), x.floor().long()  # y, x >= 0: floor is C++'s truncation
    y_edge, x_edge = y_low >= h - 1, x_low >= w - 1
    y_low, x_low = torch.where(y_edge, h - 1, y_low), torch.where(x_edge, w - 1, x_low)
    y_high, x_high = torch.where(y_edge, y_low, y_low + 1), torch.where(x_edge, x_low, x_low + 1)
    y, x = torch.where(y_edge, y_low.to(y.dtype), y), torch.where(x_edge, x_low.to(x.dtype), x)
    ly, lx = y - y_low.to(y.dtype), x - x_low.to(x.dtype)
    hy, hx = 1 - ly, 1 - lx
    start = base[:, None]
    last = planes.shape[1] - 1

    def read(yi: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
        # Clamped into the map, and into `planes` for a point of an empty map (read as 0).
        pixel, column = yi.clamp(min=0).clamp(max=h - 1), xi.clamp(min=0).clamp(max=w - 1)
        index = (start + pixel * w + column).clamp(0, last).reshape(-1)
        return planes[:, index].reshape(c, r, -1).permute(1, 0, 2)

    value = (
        (hy * hx)[:, None] * read(y_low, x_low)
        + (hy * lx)[:, None] * read(y_low, x_high)
        + (ly * hx)[:, None] * read(y_high, x_low)
        + (ly * lx)[:, None] * read(y_high, x_high)
    )
    return (value * inside[:, None]).reshape(r, c, *points_shape)
