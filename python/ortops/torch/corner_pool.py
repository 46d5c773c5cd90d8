"""Corner pooling: ``torch.ops.ortops.corner_pool``, exported to ``ortops::CornerPool``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_reference_autograd
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes

_MODES = {"top": 0, "bottom": 1, "left": 2, "right": 3}


def _reference(input: torch.Tensor, mode: int) -> torch.Tensor:
    """The kernel's semantics in differentiable torch ops (non-CPU tensors and gradients)."""
    dim = 2 if mode <= 1 else 3
    if mode in (0, 2):  # top and left run toward the start: cummax of the flipped map
        return torch.cummax(input.flip(dim), dim).values.flip(dim)
    return torch.cummax(input, dim).values


@torch.library.custom_op("ortops::corner_pool", mutates_args=())
def _corner_pool(input: torch.Tensor, mode: int) -> torch.Tensor:
    check_dtypes("CornerPool", "corner_pool", input)
    if input.dim() != 4 or mode not in range(4):
        raise ValueError(f"ortops.corner_pool: need input [N, C, H, W] and mode 0..3, got {list(input.shape)}, {mode}")
    if input.device.type != "cpu":
        return _reference(input, mode)
    return kernel.run("CornerPool", (input,), {"mode": mode}, [input.shape])[0]


register_reference_autograd(_corner_pool, _reference, differentiable=(0,))


@_corner_pool.register_fake
def _(input: torch.Tensor, mode: int) -> torch.Tensor:
    check_dtypes("CornerPool", "corner_pool", input)
    return torch.empty_like(input)


def corner_pool(input: torch.Tensor, mode: str | int) -> torch.Tensor:
    """Corner pooling (exports to ``ortops::CornerPool``).

    Args:
        input: ``Tensor[N, C, H, W]``, float32, float64 or float16.
        mode: ``"top"`` (running max from the bottom row up), ``"bottom"``, ``"left"`` (from the
            right edge leftward) or ``"right"``; or 0..3 in that order.

    Returns:
        ``Tensor[N, C, H, W]``.
    """
    if isinstance(mode, str):
        if mode not in _MODES:
            raise ValueError(f"ortops.corner_pool: mode must be one of {list(_MODES)} or 0..3, got {mode!r}")
        mode = _MODES[mode]
    return torch.ops.ortops.corner_pool(input, int(mode))


@symbolic_helper.parse_args("v", "i")
def _symbolic(g, input, mode):  # noqa: ANN001, ANN202 (TorchScript graph values)
    return typed(g.op("ortops::CornerPool", input, mode_i=mode), input)


def _translation(input, mode: int):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.CornerPool(input, mode=mode)


register_export(
    torch.ops.ortops.corner_pool.default,
    onnx_op="CornerPool",
    function=corner_pool,
    symbolic=_symbolic,
    translation=_translation,
)
