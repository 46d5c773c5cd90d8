"""ortops.torch.matrix_inverse against torch.linalg.inv, and the export round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-5}, torch.float64: {"rtol": 1e-10, "atol": 1e-12}}


def matrices(batch: tuple[int, ...], m: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.rand(*batch, m, m, generator=g, dtype=torch.float64) * 2 - 1 + m * torch.eye(m, dtype=torch.float64)
    ).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch,m", [((), 1), ((3,), 4), ((2, 2), 16)])
def test_eager_matches_torch(dtype: torch.dtype, batch: tuple[int, ...], m: int) -> None:
    x = matrices(batch, m, dtype)
    torch.testing.assert_close(ortops.torch.matrix_inverse(x), torch.linalg.inv(x), **TOLERANCE[dtype])


def test_eager_accepts_non_contiguous_input() -> None:
    x = matrices((3,), 5, torch.float64).transpose(-1, -2)
    assert not x.is_contiguous()
    torch.testing.assert_close(ortops.torch.matrix_inverse(x), torch.linalg.inv(x.contiguous()))


class InverseModel(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ortops.torch.matrix_inverse(x) * 2


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_export_roundtrip(exporter: str, dtype: torch.dtype) -> None:
    model = export(InverseModel(), (matrices((4,), 6, dtype),), exporter, dynamic_dims=[{0: "batch"}])
    assert custom_nodes(model) == ["ortops::MatrixInverse"]
    x = matrices((7,), 6, dtype, seed=3)
    (got,) = run_onnx(model, (x,))
    np.testing.assert_allclose(got, (2 * torch.linalg.inv(x)).numpy(), **TOLERANCE[dtype])
