"""Grid sampling: ``torch.ops.ortops.grid_sample``, exported to ``ortops::GridSample``."""

from __future__ import annotations

import torch

from ortops.torch._op import Arg, BadArgument, Op

_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


def _reference(
    input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int, align_corners: int
) -> torch.Tensor:
    """The kernel's semantics are torch's (non-CPU tensors and gradients)."""
    mode = {v: k for k, v in _MODES.items()}[interpolation_mode]
    padding = {v: k for k, v in _PADDINGS.items()}[padding_mode]
    return torch.nn.functional.grid_sample(input, grid, mode, padding, bool(align_corners))


GRID_SAMPLE = Op(
    "grid_sample",
    "GridSample",
    [
        Arg("input", torch.Tensor, "``Tensor[N, C, H_in, W_in]``, float32, float64 or float16."),
        Arg("grid", torch.Tensor, "``Tensor[N, H_out, W_out, 2]`` points (x, y) in [-1, 1]."),
        Arg("interpolation_mode", int),
        Arg("padding_mode", int, '``"zeros"``, ``"border"`` or ``"reflection"``.'),
        Arg(
            "align_corners",
            int,
            "whether -1 and 1 are the centres (True) or the outer edges (False) of the corner pixels.",
        ),
    ],
    reference=_reference,
    differentiable=(0, 1),
    public_args={"mode": '``"bilinear"``, ``"nearest"`` or ``"bicubic"``.'},
)


def _choice(name: str, value: str, choices: dict[str, int]) -> int:
    if value not in choices:
        raise BadArgument(f"{name} must be one of {list(choices)}, got {value!r}")
    return choices[value]


@GRID_SAMPLE.public
def grid_sample(
    input: torch.Tensor,
    grid: torch.Tensor,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
) -> torch.Tensor:
    """``torch.nn.functional.grid_sample`` (2-D) that exports to ``ortops::GridSample``.

    Returns:
        ``Tensor[N, C, H_out, W_out]``.

    CPU tensors run ortops' kernel, others ``torch.nn.functional.grid_sample``; gradients
    (input and grid) are torch's.
    """
    interpolation = _choice("mode", mode, _MODES)
    padding = _choice("padding_mode", padding_mode, _PADDINGS)
    return GRID_SAMPLE(input, grid, interpolation, padding, int(bool(align_corners)))
