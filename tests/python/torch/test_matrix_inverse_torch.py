"""ortops.torch.matrix_inverse, eager and in ONNX Runtime, against torch.linalg.inv; export round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

# Eager CPU calls run the same kernel as ONNX Runtime (tolerances below).
# ONNX Runtime's kernel computes in float64: against torch's float32 LAPACK the difference is
# torch's own error, ~cond(A) * M * eps32; these matrices (random + M * I) have cond < 3.
ONNX_TOLERANCE = {torch.float32: {"rtol": 2e-5, "atol": 1e-6}, torch.float64: {"rtol": 1e-12, "atol": 1e-14}}


def matrices(batch: tuple[int, ...], m: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """random + M * I with the rows shuffled, so the kernel's LU has to swap rows."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(*batch, m, m, generator=g, dtype=torch.float64) * 2 - 1 + m * torch.eye(m, dtype=torch.float64)
    return x[..., torch.randperm(m, generator=g), :].to(dtype)


class InverseModel(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ortops.torch.matrix_inverse(x) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch,m", [((), 1), ((3,), 4), ((2, 2), 16), ((0,), 3)])
def test_eager_matches_torch(dtype: torch.dtype, batch: tuple[int, ...], m: int) -> None:
    x = matrices(batch, m, dtype)
    got = ortops.torch.matrix_inverse(x)  # ortops' LU kernel against LAPACK's
    torch.testing.assert_close(got, torch.linalg.inv(x), **ONNX_TOLERANCE[dtype])
    assert got.is_contiguous()


def test_eager_non_contiguous_input() -> None:
    x = matrices((3,), 5, torch.float64).transpose(-1, -2)
    assert not x.is_contiguous()
    got = ortops.torch.matrix_inverse(x)
    torch.testing.assert_close(got, torch.linalg.inv(x.contiguous()), **ONNX_TOLERANCE[torch.float64])
    assert got.is_contiguous()


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "batch-strided"])
def test_fake_matches_eager(layout: str) -> None:
    x = matrices((3,), 5, torch.float64)
    x = {"contiguous": x, "transposed": x.mT, "batch-strided": x.transpose(0, 1).contiguous().transpose(0, 1)}[layout]
    torch.library.opcheck(torch.ops.ortops.matrix_inverse.default, (x,))


def test_eager_errors() -> None:
    with pytest.raises(ValueError, match=r"\[..., M, M\], got \[2, 3\]"):
        ortops.torch.matrix_inverse(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="matrix 0 of 1 in input 'X' is singular"):
        ortops.torch.matrix_inverse(torch.zeros(2, 2))


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_export_roundtrip(exporter: str, dtype: torch.dtype) -> None:
    model = export(InverseModel(), (matrices((4,), 6, dtype),), exporter, dynamic_dims=[{0: "batch"}])
    assert custom_nodes(model) == ["ortops::MatrixInverse"]
    for batch in (7, 1):
        x = matrices((batch,), 6, dtype, seed=batch)
        (got,) = run_onnx(model, (x,))
        np.testing.assert_allclose(got, (2 * torch.linalg.inv(x)).numpy(), **ONNX_TOLERANCE[dtype])


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_two_dynamic_batch_dims_non_contiguous_input(exporter: str) -> None:
    model = export(InverseModel(), (matrices((2, 3), 8, torch.float32),), exporter, dynamic_dims=[{0: "a", 1: "b"}])
    x = matrices((5, 4), 8, torch.float32, seed=5).mT
    assert not x.is_contiguous()
    (got,) = run_onnx(model, (x,))
    assert got.shape == (5, 4, 8, 8)
    np.testing.assert_allclose(got, (2 * torch.linalg.inv(x)).numpy(), **ONNX_TOLERANCE[torch.float32])


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_exported_model_names_the_singular_matrix(exporter: str) -> None:
    model = export(InverseModel(), (matrices((4,), 3, torch.float64),), exporter, dynamic_dims=[{0: "batch"}])
    x = matrices((4,), 3, torch.float64)
    x[2, 1] = x[2, 0]
    with pytest.raises(Exception, match="matrix 2 of 4 in input 'X' is singular"):
        run_onnx(model, (x,))
