"""ortops.torch.group_norm and ortops::GroupNorm against torch.nn.functional.group_norm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


def inputs(
    shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=dtype) * 3 + 1
    c = shape[1]
    return x, torch.rand(c, generator=g, dtype=dtype) + 0.5, torch.randn(c, generator=g, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eager_is_torch_group_norm_on_non_contiguous_input(dtype: torch.dtype) -> None:
    x, w, b = inputs((2, 6, 5, 4), dtype)
    x = x.transpose(2, 3)
    torch.testing.assert_close(ortops.torch.group_norm(x, 3, w, b), torch.nn.functional.group_norm(x, 3, w, b))


class GroupNormModel(torch.nn.Module):
    def __init__(self, groups: int, affine: tuple[bool, bool], channels: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.groups = groups
        self.weight = torch.nn.Parameter(torch.rand(channels, dtype=dtype) + 0.5) if affine[0] else None
        self.bias = torch.nn.Parameter(torch.randn(channels, dtype=dtype)) if affine[1] else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ortops.torch.group_norm(x, self.groups, self.weight, self.bias, 1e-5)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("affine", [(True, True), (False, False), (False, True), (True, False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_export_roundtrip(exporter: str, affine: tuple[bool, bool], dtype: torch.dtype) -> None:
    model = GroupNormModel(4, affine, 8, dtype).eval()
    x, _, _ = inputs((2, 8, 6, 5), dtype)
    onnx_model = export(model, (x,), exporter, dynamic_dims=[{0: "n", 2: "h", 3: "w"}])
    assert custom_nodes(onnx_model) == ["ortops::GroupNorm"]
    x2, _, _ = inputs((3, 8, 7, 9), dtype, seed=1)
    (got,) = run_onnx(onnx_model, (x2,))
    with torch.no_grad():
        expected = torch.nn.functional.group_norm(x2, 4, model.weight, model.bias, 1e-5)
    np.testing.assert_allclose(got, expected.numpy(), **TOLERANCE[dtype])
