"""Cumulative max/min with indices: ``torch.ops.ortops.cummax`` / ``cummin`` -> ``ortops::CumMax`` / ``CumMin``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.onnx import symbolic_helper

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_reference_autograd
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes


def _scan(onnx_op: str, input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    check_dtypes(onnx_op, onnx_op.lower(), input)
    if input.device.type != "cpu":
        values, indices = (torch.cummax if onnx_op == "CumMax" else torch.cummin)(input, dim)
        return values, indices
    values, indices = kernel.run(onnx_op, (input,), {"dim": dim}, [input.shape, input.shape])
    return values, indices


@torch.library.custom_op("ortops::cummax", mutates_args=())
def _cummax(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _scan("CumMax", input, dim)


@torch.library.custom_op("ortops::cummin", mutates_args=())
def _cummin(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _scan("CumMin", input, dim)


def _fake_for(onnx_op: str) -> Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]:
    def fake(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        check_dtypes(onnx_op, onnx_op.lower(), input)
        return torch.empty_like(input), torch.empty_like(input, dtype=torch.int64)

    return fake


_cummax.register_fake(_fake_for("CumMax"))
_cummin.register_fake(_fake_for("CumMin"))
# The values' gradient flows to the position each came from, as torch's own.
register_reference_autograd(_cummax, lambda input, dim: torch.cummax(input, dim), differentiable=(0,))
register_reference_autograd(_cummin, lambda input, dim: torch.cummin(input, dim), differentiable=(0,))


def cummax(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.cummax`` that exports to ``ortops::CumMax``.

    Args:
        input: ``Tensor[*]`` of any rank, float32, float64, float16 or int64.
        dim: the axis to scan; negative counts from the end.

    Returns:
        ``(values, indices)``, both shaped like ``input``; indices are int64. On ties the later
        position wins; NaN propagates.
    """
    return torch.ops.ortops.cummax(input, int(dim))


def cummin(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.cummin`` that exports to ``ortops::CumMin`` (see :func:`cummax`)."""
    return torch.ops.ortops.cummin(input, int(dim))


def _symbolic_for(onnx_op: str) -> Callable[..., object]:
    @symbolic_helper.parse_args("v", "i")
    def symbolic(g, input, dim):  # noqa: ANN001, ANN202 (TorchScript graph values)
        values, indices = g.op(f"ortops::{onnx_op}", input, dim_i=dim, outputs=2)
        return typed(values, input), typed(indices, input, dtype=torch.int64)

    return symbolic


def _cummax_translation(input, dim: int):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.CumMax(input, dim=dim)


def _cummin_translation(input, dim: int):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.CumMin(input, dim=dim)


register_export(
    torch.ops.ortops.cummax.default,
    onnx_op="CumMax",
    function=cummax,
    symbolic=_symbolic_for("CumMax"),
    translation=_cummax_translation,
)
register_export(
    torch.ops.ortops.cummin.default,
    onnx_op="CumMin",
    function=cummin,
    symbolic=_symbolic_for("CumMin"),
    translation=_cummin_translation,
)
