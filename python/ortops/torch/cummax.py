"""Cumulative max/min with indices: ``torch.ops.ortops.cummax`` / ``cummin`` -> ``ortops::CumMax`` / ``CumMin``."""

from __future__ import annotations

import torch

from ortops.torch._op import Arg, Op


def _declare(name: str, onnx_op: str) -> Op:
    scan = getattr(torch, name)
    return Op(
        name,
        onnx_op,
        [
            Arg("input", torch.Tensor, "``Tensor[*]`` of any rank, float32, float64, float16 or int64."),
            Arg("dim", int, "the axis to scan; negative counts from the end."),
        ],
        # torch's own scan: on other devices, and for the gradient (the values' gradient flows
        # to the position each came from).
        reference=lambda input, dim: tuple(scan(input, dim)),
        differentiable=(0,),
    )


CUMMAX = _declare("cummax", "CumMax")
CUMMIN = _declare("cummin", "CumMin")


@CUMMAX.public
def cummax(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.cummax`` that exports to ``ortops::CumMax``.

    Returns:
        ``(values, indices)``, both shaped like ``input``; indices are int64. On ties the later
        position wins; NaN propagates.
    """
    return CUMMAX(input, int(dim))


@CUMMIN.public
def cummin(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.cummin`` that exports to ``ortops::CumMin`` (see ``ortops.torch.cummax``)."""
    return CUMMIN(input, int(dim))
