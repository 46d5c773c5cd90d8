"""Layer normalization of a residual sum: ``torch.ops.ortops.add_layer_norm``, exported to
``ortops::AddLayerNorm``."""

from __future__ import annotations

import torch

from ortops.torch._op import Arg, BadArgument, Op


def _check(input: torch.Tensor, residual: torch.Tensor) -> None:
    try:
        broadcast = torch.broadcast_shapes(input.shape, residual.shape)
    except RuntimeError:
        broadcast = None
    if broadcast != input.shape:
        raise BadArgument(
            f"input 'B' must have the shape of 'A', {list(input.shape)}, or broadcast to it, got {list(residual.shape)}"
        )


def _reference(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """The kernel's semantics are torch's (non-CPU tensors and gradients): the sum rounded to
    the element type, then layer norm over the last axis."""
    return torch.nn.functional.layer_norm(input + residual, [input.shape[-1]], weight, bias, eps)


ADD_LAYER_NORM = Op(
    "add_layer_norm",
    "AddLayerNorm",
    [
        Arg("input", torch.Tensor, "``Tensor[*, C]``, float32, float64 or float16, rank 1 or more.", "A"),
        Arg("residual", torch.Tensor, "``input``'s shape, or one that broadcasts to it.", "B"),
        Arg("weight", torch.Tensor, "``Tensor[C]`` per-element scale, or None (1).", "scale"),
        Arg("bias", torch.Tensor, "``Tensor[C]`` per-element bias, or None (0)."),
        Arg("eps", float, "added to the variance before the square root.", "epsilon"),
    ],
    check=_check,
    check_at_export=True,
    reference=_reference,
    differentiable=(0, 1, 2, 3),
)


@ADD_LAYER_NORM.public
def add_layer_norm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Layer normalization of a residual sum over the last axis (exports to
    ``ortops::AddLayerNorm``), as ``torch.nn.functional.layer_norm(input + residual, [C],
    weight, bias, eps)``: a post-norm transformer's sub-layer output.

    Returns:
        ``Tensor[*, C]``, ``input``'s shape: each row of ``input + residual`` (rounded to the
        element type) normalized by its mean and biased variance, then scaled and shifted.
    """
    # ortops::AddLayerNorm takes scale and bias as required inputs (ONNX Runtime 1.17 cannot
    # type a node that leaves an optional input out), so None becomes ones and zeros here.
    channels = input.shape[-1] if input.dim() >= 1 else 0
    if weight is None:
        weight = torch.ones(channels, dtype=input.dtype, device=input.device)
    if bias is None:
        bias = torch.zeros(channels, dtype=input.dtype, device=input.device)
    return ADD_LAYER_NORM(input, residual, weight, bias, float(eps))
