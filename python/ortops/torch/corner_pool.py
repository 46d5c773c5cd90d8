"""Corner pooling: ``torch.ops.ortops.corner_pool``, exported to ``ortops::CornerPool``."""

from __future__ import annotations

import torch

from ortops.torch._op import Arg, BadArgument, Op

_MODES = {"top": 0, "bottom": 1, "left": 2, "right": 3}


def _reference(input: torch.Tensor, mode: int) -> torch.Tensor:
    """The kernel's semantics in differentiable torch ops (non-CPU tensors and gradients)."""
    dim = 2 if mode <= 1 else 3
    if mode in (0, 2):  # top and left run toward the start: cummax of the flipped map
        return torch.cummax(input.flip(dim), dim).values.flip(dim)
    return torch.cummax(input, dim).values


def _check(input: torch.Tensor, mode: int) -> None:
    if input.dim() != 4 or mode not in range(4):
        raise BadArgument(f"need input [N, C, H, W] and mode 0..3, got {list(input.shape)}, {mode}")


CORNER_POOL = Op(
    "corner_pool",
    "CornerPool",
    [
        Arg("input", torch.Tensor, "``Tensor[N, C, H, W]``, float32, float64 or float16."),
        Arg(
            "mode",
            int,
            '``"top"`` (running max from the bottom row up), ``"bottom"``, ``"left"`` (from the right edge '
            'leftward) or ``"right"``; or 0..3 in that order.',
        ),
    ],
    check=_check,
    reference=_reference,
    differentiable=(0,),
)


@CORNER_POOL.public
def corner_pool(input: torch.Tensor, mode: str | int) -> torch.Tensor:
    """Corner pooling (exports to ``ortops::CornerPool``).

    Returns:
        ``Tensor[N, C, H, W]``.
    """
    if isinstance(mode, str):
        if mode not in _MODES:
            raise BadArgument(f"mode must be one of {list(_MODES)} or 0..3, got {mode!r}")
        mode = _MODES[mode]
    return CORNER_POOL(input, int(mode))
