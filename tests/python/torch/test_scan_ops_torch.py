"""cummax, cummin and corner pooling against torch.cummax/cummin, and the export round trips."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ortops.torch

from ortest import run
from roundtrip import EXPORTERS, custom_nodes, export, run_onnx


@pytest.mark.parametrize("op,reference", [("cummax", torch.cummax), ("cummin", torch.cummin)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_onnx_matches_torch(op, reference, dtype) -> None:
    x = torch.randint(-3, 4, (3, 4, 5)).to(dtype)
    for dim in (-3, -1, 0, 1, 2):
        values, indices = run(op, "mmcv", {"input": x.numpy()}, ["values", "indices"], dim=dim)
        expected = reference(x, dim)
        np.testing.assert_array_equal(values, expected.values.numpy())
        np.testing.assert_array_equal(indices, expected.indices.numpy())


@pytest.mark.parametrize(
    "mode,dim,flip", [("top", 2, True), ("bottom", 2, False), ("left", 3, True), ("right", 3, False)]
)
def test_corner_pool_is_flipped_cummax(mode, dim, flip) -> None:
    x = torch.randn(2, 3, 6, 7).transpose(2, 3)  # non-contiguous
    expected = torch.cummax(x.flip(dim), dim).values.flip(dim) if flip else torch.cummax(x, dim).values
    torch.testing.assert_close(ortops.torch.corner_pool(x, mode), expected)
    (got,) = run(
        "MMCVCornerPool",
        "mmcv",
        {"input": x.contiguous().numpy()},
        ["output"],
        mode=["top", "bottom", "left", "right"].index(mode),
    )
    np.testing.assert_array_equal(got, expected.numpy())


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        values, indices = ortops.torch.cummax(x, -1)
        low, _ = ortops.torch.cummin(x, 1)
        return values + low, indices, ortops.torch.corner_pool(x, "left")


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip(exporter: str) -> None:
    x = torch.randn(1, 2, 5, 6)
    model = export(Model(), (x,), exporter, dynamic_dims=[{0: "n", 2: "h", 3: "w"}])
    assert sorted(custom_nodes(model)) == ["ortops::CornerPool", "ortops::CumMax", "ortops::CumMin"]
    x2 = torch.randn(2, 2, 7, 3)
    got = run_onnx(model, (x2,))
    for g, e in zip(got, Model()(x2)):
        np.testing.assert_array_equal(g, e.numpy())
