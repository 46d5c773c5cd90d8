"""Grid sampling: ``torch.ops.ortops.grid_sample``, exported to ``ortops::GridSample``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_reference_autograd
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes

_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


def _reference(
    input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int, align_corners: int
) -> torch.Tensor:
    """The kernel's semantics are torch's (non-CPU tensors and gradients)."""
    mode = {v: k for k, v in _MODES.items()}[interpolation_mode]
    padding = {v: k for k, v in _PADDINGS.items()}[padding_mode]
    return torch.nn.functional.grid_sample(input, grid, mode, padding, bool(align_corners))


@torch.library.custom_op("ortops::grid_sample", mutates_args=())
def _grid_sample(
    input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int, align_corners: int
) -> torch.Tensor:
    check_dtypes("GridSample", "grid_sample", input, grid)
    attributes = (interpolation_mode, padding_mode, align_corners)
    if input.device.type != "cpu":
        return _reference(input, grid, *attributes)
    names = ("interpolation_mode", "padding_mode", "align_corners")
    known = input.dim() == 4 and grid.dim() == 4  # else the kernel reports the shapes
    shape = (input.shape[0], input.shape[1], grid.shape[1], grid.shape[2]) if known else None
    return kernel.run("GridSample", (input, grid), dict(zip(names, attributes)), [shape])[0]


register_reference_autograd(_grid_sample, _reference, differentiable=(0, 1))


@_grid_sample.register_fake
def _(
    input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int, align_corners: int
) -> torch.Tensor:
    check_dtypes("GridSample", "grid_sample", input, grid)
    return input.new_empty((input.shape[0], input.shape[1], grid.shape[1], grid.shape[2]))


def grid_sample(
    input: torch.Tensor,
    grid: torch.Tensor,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
) -> torch.Tensor:
    """``torch.nn.functional.grid_sample`` (2-D) that exports to ``ortops::GridSample``.

    Args:
        input: ``Tensor[N, C, H_in, W_in]``, float32, float64 or float16.
        grid: ``Tensor[N, H_out, W_out, 2]`` points (x, y) in [-1, 1].
        mode: ``"bilinear"``, ``"nearest"`` or ``"bicubic"``.
        padding_mode: ``"zeros"``, ``"border"`` or ``"reflection"``.
        align_corners: whether -1 and 1 are the centres (True) or the outer edges (False) of the
            corner pixels.

    Returns:
        ``Tensor[N, C, H_out, W_out]``.

    CPU tensors run ortops' kernel, others ``torch.nn.functional.grid_sample``; gradients
    (input and grid) are torch's.
    """
    return torch.ops.ortops.grid_sample(input, grid, _MODES[mode], _PADDINGS[padding_mode], int(bool(align_corners)))


@symbolic_helper.parse_args("v", "v", "i", "i", "i")
def _symbolic(g, input, grid, interpolation_mode, padding_mode, align_corners):  # noqa: ANN001, ANN202
    node = g.op(
        "ortops::GridSample",
        input,
        grid,
        interpolation_mode_i=interpolation_mode,
        padding_mode_i=padding_mode,
        align_corners_i=align_corners,
    )
    batch, channels = (symbolic_helper._get_tensor_dim_size(input, i) for i in (0, 1))
    return typed(node, input, sizes=[batch, channels, None, None])


def _translation(input, grid, interpolation_mode: int, padding_mode: int, align_corners: int):  # noqa: ANN001, ANN202
    return onnx_opset.GridSample(
        input, grid, interpolation_mode=interpolation_mode, padding_mode=padding_mode, align_corners=align_corners
    )


register_export(
    torch.ops.ortops.grid_sample.default,
    onnx_op="GridSample",
    function=grid_sample,
    symbolic=_symbolic,
    translation=_translation,
)
