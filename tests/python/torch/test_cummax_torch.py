"""ortops.torch.cummax / cummin and the CumMax / CumMin / mmcv nodes against torch.cummax / torch.cummin."""

from __future__ import annotations

import pytest
import torch

import ortops.torch

from ortest import run
from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

PAIRS = [
    (ortops.torch.cummax, torch.cummax, "cummax", "CumMax"),
    (ortops.torch.cummin, torch.cummin, "cummin", "CumMin"),
]
SHAPES = [(), (6,), (3, 5), (2, 3, 4), (2, 3, 1, 4)]


def sample(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=generator).to(dtype)  # few distinct values: many ties
    if dtype.is_floating_point and x.numel() > 4:
        flat = x.view(-1)
        flat[torch.randint(0, x.numel(), (3,), generator=generator)] = torch.tensor(
            [float("nan"), float("inf"), float("-inf")], dtype=dtype
        )
    return x


def assert_same(got: tuple[torch.Tensor, torch.Tensor], expected: tuple[torch.Tensor, torch.Tensor]) -> None:
    values, indices = (torch.as_tensor(t) for t in got)
    assert values.dtype == expected[0].dtype and indices.dtype == torch.int64
    torch.testing.assert_close(values, expected[0], equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(indices, expected[1], rtol=0, atol=0)


@pytest.mark.parametrize("ours,reference,mmcv_op,ortops_op", PAIRS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("shape", SHAPES)
def test_eager_and_onnx_match_torch(ours, reference, mmcv_op, ortops_op, dtype, shape) -> None:
    x = sample(shape, dtype, seed=len(shape))
    for dim in range(-max(x.dim(), 1), max(x.dim(), 1)):
        expected = tuple(reference(x, dim))
        assert_same(ours(x, dim), expected)
        for domain, op in (("mmcv", mmcv_op), ("ortops", ortops_op)):
            for threads in (1, 2):
                assert_same(
                    run(op, domain, {"input": x.numpy()}, ["values", "indices"], threads=threads, dim=dim), expected
                )


@pytest.mark.parametrize("ours,reference,mmcv_op,ortops_op", PAIRS)
def test_nan_after_nan_and_infinities(ours, reference, mmcv_op, ortops_op) -> None:
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, 2.0, nan, 0.0, -inf, inf, inf], [-inf, -inf, inf, inf, 5.0, 5.0, nan, nan]])
    for dim in (0, 1):
        expected = tuple(reference(x, dim))
        assert_same(ours(x, dim), expected)
        assert_same(run(ortops_op, "ortops", {"input": x.numpy()}, ["values", "indices"], dim=dim), expected)
        wide = x.unsqueeze(-1).expand(2, 8, 1500).contiguous()  # the same scans on the row-at-a-time path
        assert_same(run(mmcv_op, "mmcv", {"input": wide.numpy()}, ["values", "indices"], dim=dim), reference(wide, dim))


@pytest.mark.parametrize("ours,reference,mmcv_op,ortops_op", PAIRS)
def test_non_contiguous_and_empty_inputs(ours, reference, mmcv_op, ortops_op) -> None:
    base = sample((4, 6, 5), torch.float32, seed=9)
    for x in (base.transpose(0, 2), base[:, ::2, 1:], base.permute(1, 2, 0)[..., ::3]):
        assert not x.is_contiguous()
        for dim in range(-3, 3):
            assert_same(ours(x, dim), tuple(reference(x, dim)))
    for shape in ((0,), (3, 0, 2), (0, 4)):
        x = torch.zeros(shape)
        for dim in range(-len(shape), len(shape)):
            values, indices = ours(x, dim)
            assert values.shape == shape and indices.shape == shape and indices.dtype == torch.int64
            got = run(ortops_op, "ortops", {"input": x.numpy()}, ["values", "indices"], dim=dim)
            assert got[0].shape == shape and got[1].shape == shape


def test_bad_dim_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"^ortops\.cummax: attribute 'dim' = 2 is out of range .*shape \[2, 3\]"):
        ortops.torch.cummax(torch.zeros(2, 3), 2)
    with pytest.raises(ValueError, match=r"^ortops\.cummin: attribute 'dim' = 1 is out of range"):
        ortops.torch.cummin(torch.zeros(()), 1)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        high, high_at = ortops.torch.cummax(x, -1)
        low, low_at = ortops.torch.cummin(x, 1)
        return high, high_at, low * 2, low_at


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_export_roundtrip(exporter: str, dtype: torch.dtype) -> None:
    model = export(Model(), (torch.randn(2, 3, 4, dtype=dtype),), exporter, dynamic_dims=[{0: "n", 1: "c", 2: "w"}])
    assert sorted(custom_nodes(model)) == ["ortops::CumMax", "ortops::CumMin"]
    for shape in ((3, 5, 2), (1, 1, 7)):
        x = sample(shape, dtype, seed=shape[1])
        got = run_onnx(model, (x,))
        for g, e in zip(got, Model()(x)):
            torch.testing.assert_close(torch.from_numpy(g), e, equal_nan=True, rtol=0, atol=0)
