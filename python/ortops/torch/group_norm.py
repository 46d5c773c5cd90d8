"""Group normalization: ``torch.ops.ortops.group_norm``, exported to ``ortops::GroupNorm``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_reference_autograd
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes


def _reference(
    input: torch.Tensor, num_groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """The kernel's semantics are torch's (non-CPU tensors and gradients)."""
    return torch.nn.functional.group_norm(input, num_groups, weight, bias, eps)


@torch.library.custom_op("ortops::group_norm", mutates_args=())
def _group_norm(
    input: torch.Tensor, num_groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    check_dtypes("GroupNorm", "group_norm", input, weight, bias)
    if input.device.type != "cpu":
        return _reference(input, num_groups, weight, bias, eps)
    attributes = {"num_groups": num_groups, "epsilon": eps}
    return kernel.run("GroupNorm", (input, weight, bias), attributes, [input.shape])[0]


register_reference_autograd(_group_norm, _reference, differentiable=(0, 2, 3))


@_group_norm.register_fake
def _(input: torch.Tensor, num_groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    check_dtypes("GroupNorm", "group_norm", input, weight, bias)
    return torch.empty_like(input)


def group_norm(
    input: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Group normalization (exports to ``ortops::GroupNorm``), as ``torch.nn.functional.group_norm``.

    Args:
        input: ``Tensor[N, C, *]``, float32, float64 or float16, rank 2 or more.
        num_groups: number of groups; must divide C.
        weight: ``Tensor[C]`` per-channel scale, or None (1).
        bias: ``Tensor[C]`` per-channel bias, or None (0).
        eps: added to the variance before the square root.

    Returns:
        ``Tensor[N, C, *]``, normalized over each group of ``C / num_groups`` channels and all
        spatial positions, then scaled and shifted per channel.
    """
    # ortops::GroupNorm takes scale and bias as required inputs (ONNX Runtime 1.17 cannot
    # type a node that leaves an optional input out), so None becomes ones and zeros here.
    channels = input.shape[1] if input.dim() >= 2 else 0
    if weight is None:
        weight = torch.ones(channels, dtype=input.dtype, device=input.device)
    if bias is None:
        bias = torch.zeros(channels, dtype=input.dtype, device=input.device)
    return torch.ops.ortops.group_norm(input, int(num_groups), weight, bias, float(eps))


@symbolic_helper.parse_args("v", "i", "v", "v", "f")
def _symbolic(g, input, num_groups, weight, bias, eps):  # noqa: ANN001, ANN202 (TorchScript graph values)
    return typed(g.op("ortops::GroupNorm", input, weight, bias, num_groups_i=num_groups, epsilon_f=eps), input)


def _translation(input, num_groups: int, weight, bias, eps: float):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.GroupNorm(input, weight, bias, num_groups=num_groups, epsilon=eps)


register_export(
    torch.ops.ortops.group_norm.default,
    onnx_op="GroupNorm",
    function=group_norm,
    symbolic=_symbolic,
    translation=_translation,
)
