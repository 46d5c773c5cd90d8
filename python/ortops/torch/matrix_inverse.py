"""Batched matrix inverse: ``torch.ops.ortops.matrix_inverse``, exported to ``ortops::MatrixInverse``."""

from __future__ import annotations

import torch

from ortops.torch._op import Arg, BadArgument, Op


def _reference(input: torch.Tensor) -> torch.Tensor:
    """Non-CPU tensors and gradients."""
    # LAPACK leaves each inverse column-major; the op promises a contiguous result (as its
    # fake says and as ONNX Runtime returns), whatever the input's strides.
    return torch.linalg.inv(input).contiguous()


def _check(input: torch.Tensor) -> None:
    if input.dim() < 2 or input.shape[-1] != input.shape[-2]:
        raise BadArgument(f"input must be [..., M, M], got {list(input.shape)}")


MATRIX_INVERSE = Op(
    "matrix_inverse",
    "MatrixInverse",
    [Arg("input", torch.Tensor, "``Tensor[*, M, M]``, float32 or float64, any number of batch dimensions.", "X")],
    check=_check,
    reference=_reference,
    differentiable=(0,),
)


@MATRIX_INVERSE.public
def matrix_inverse(input: torch.Tensor) -> torch.Tensor:
    """Inverse of each square matrix in a batch (exports to ``ortops::MatrixInverse``).

    Returns:
        ``Tensor[*, M, M]``, contiguous, the inverses. Singular matrices (an exactly zero pivot
        in LU with partial pivoting) raise, as ``torch.linalg.inv`` does, and so does the ONNX
        Runtime kernel, naming the matrix. The kernel also rejects NaN or infinity, which eager
        passes on as NaN; it computes in float64, so its float32 results can be closer to the
        exact inverse than eager's (by up to cond(A) float32 ulps).
    """
    return MATRIX_INVERSE(input)
