"""Batched matrix inverse: ``torch.ops.ortops.matrix_inverse``, exported to ``ortops::MatrixInverse``."""

from __future__ import annotations

import torch

from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_reference_autograd
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes


def _reference(input: torch.Tensor) -> torch.Tensor:
    """Non-CPU tensors and gradients."""
    # LAPACK leaves each inverse column-major; the op promises a contiguous result (as the fake
    # below says and as ONNX Runtime returns), whatever the input's strides.
    return torch.linalg.inv(input).contiguous()


@torch.library.custom_op("ortops::matrix_inverse", mutates_args=())
def _matrix_inverse(input: torch.Tensor) -> torch.Tensor:
    check_dtypes("MatrixInverse", "matrix_inverse", input)
    if input.dim() < 2 or input.shape[-1] != input.shape[-2]:
        raise ValueError(f"ortops.matrix_inverse: input must be [..., M, M], got {list(input.shape)}")
    if input.device.type != "cpu":
        return _reference(input)
    return kernel.run("MatrixInverse", (input,), {}, [input.shape])[0]


register_reference_autograd(_matrix_inverse, _reference, differentiable=(0,))


@_matrix_inverse.register_fake
def _(input: torch.Tensor) -> torch.Tensor:
    check_dtypes("MatrixInverse", "matrix_inverse", input)
    return input.new_empty(input.shape)


def matrix_inverse(input: torch.Tensor) -> torch.Tensor:
    """Inverse of each square matrix in a batch (exports to ``ortops::MatrixInverse``).

    Args:
        input: ``Tensor[*, M, M]``, float32 or float64, any number of batch dimensions.

    Returns:
        ``Tensor[*, M, M]``, contiguous, the inverses. Singular matrices (an exactly zero pivot
        in LU with partial pivoting) raise, as ``torch.linalg.inv`` does, and so does the ONNX
        Runtime kernel, naming the matrix. The kernel also rejects NaN or infinity, which eager
        passes on as NaN; it computes in float64, so its float32 results can be closer to the
        exact inverse than eager's (by up to cond(A) float32 ulps).
    """
    return torch.ops.ortops.matrix_inverse(input)


def _symbolic(g, input):  # noqa: ANN001, ANN202 (TorchScript graph values)
    return typed(g.op("ortops::MatrixInverse", input), input)


def _translation(input):  # noqa: ANN001, ANN202 (onnxscript values)
    return onnx_opset.MatrixInverse(input)


register_export(
    torch.ops.ortops.matrix_inverse.default,
    onnx_op="MatrixInverse",
    function=matrix_inverse,
    symbolic=_symbolic,
    translation=_translation,
)
