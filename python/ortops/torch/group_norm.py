"""Group normalization: ``torch.ops.ortops.group_norm``, exported to ``ortops::GroupNorm``."""

from __future__ import annotations

import torch

from ortops.torch._op import Arg, Op


def _reference(
    input: torch.Tensor, num_groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """The kernel's semantics are torch's (non-CPU tensors and gradients)."""
    return torch.nn.functional.group_norm(input, num_groups, weight, bias, eps)


GROUP_NORM = Op(
    "group_norm",
    "GroupNorm",
    [
        Arg("input", torch.Tensor, "``Tensor[N, C, *]``, float32, float64 or float16, rank 2 or more.", "X"),
        Arg("num_groups", int, "number of groups; must divide C."),
        Arg("weight", torch.Tensor, "``Tensor[C]`` per-channel scale, or None (1).", "scale"),
        Arg("bias", torch.Tensor, "``Tensor[C]`` per-channel bias, or None (0)."),
        Arg("eps", float, "added to the variance before the square root.", "epsilon"),
    ],
    reference=_reference,
    differentiable=(0, 2, 3),
)


@GROUP_NORM.public
def group_norm(
    input: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Group normalization (exports to ``ortops::GroupNorm``), as ``torch.nn.functional.group_norm``.

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
    return GROUP_NORM(input, int(num_groups), weight, bias, float(eps))
