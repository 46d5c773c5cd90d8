"""ortops.torch.corner_pool and the CornerPool / MMCVCornerPool nodes against flipped torch.cummax and a
row-by-row torch.maximum sweep."""

from __future__ import annotations

import pytest
import torch

import ortops.torch

from ortest import run
from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

# mode: (name, axis, whether the scan runs toward the start of the axis)
MODES = {0: ("top", 2, True), 1: ("bottom", 2, False), 2: ("left", 3, True), 3: ("right", 3, False)}


def flipped_cummax(x: torch.Tensor, mode: int) -> torch.Tensor:
    """The spec's definition: torch.cummax on the input flipped for top and left."""
    _, dim, backward = MODES[mode]
    return torch.cummax(x.flip(dim), dim).values.flip(dim) if backward else torch.cummax(x, dim).values


def sweep(x: torch.Tensor, mode: int) -> torch.Tensor:
    """One row (column) at a time with torch.maximum, which also propagates NaN."""
    _, dim, backward = MODES[mode]
    out = x.clone()
    size = x.shape[dim]
    order = range(size - 2, -1, -1) if backward else range(1, size)
    for i in order:
        previous = out.select(dim, i + 1 if backward else i - 1)
        out.select(dim, i).copy_(torch.maximum(out.select(dim, i), previous))
    return out


def sample(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator, dtype=dtype)
    if x.numel() > 4:
        flat = x.view(-1)
        flat[torch.randint(0, x.numel(), (3,), generator=generator)] = torch.tensor(
            [float("nan"), float("inf"), float("-inf")], dtype=dtype
        )
    return x


def assert_equal(got, expected: torch.Tensor) -> None:
    torch.testing.assert_close(torch.as_tensor(got), expected, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(2, 3, 6, 7), (1, 1, 1, 5), (1, 2, 5, 1), (2, 2, 3, 1030)])
def test_eager_and_onnx_match_torch(mode, dtype, shape) -> None:
    x = sample(shape, dtype, seed=mode)
    expected = flipped_cummax(x, mode)
    assert_equal(sweep(x, mode), expected)  # the two references agree
    name = MODES[mode][0]
    assert_equal(ortops.torch.corner_pool(x, name), expected)
    assert_equal(ortops.torch.corner_pool(x, mode), expected)
    for domain, op in (("mmcv", "MMCVCornerPool"), ("ortops", "CornerPool")):
        for threads in (1, 2):
            assert_equal(run(op, domain, {"input": x.numpy()}, ["output"], threads=threads, mode=mode)[0], expected)


@pytest.mark.parametrize("mode", MODES)
def test_non_contiguous_and_empty_inputs(mode) -> None:
    base = sample((2, 3, 8, 6), torch.float32, seed=4)
    for x in (base.transpose(2, 3), base[:, ::2, 1:, ::2], base.permute(1, 0, 3, 2)):
        assert not x.is_contiguous()
        assert_equal(ortops.torch.corner_pool(x, mode), sweep(x, mode))
    for shape in ((0, 2, 3, 3), (1, 2, 0, 3), (1, 2, 3, 0)):
        x = torch.zeros(shape)
        assert ortops.torch.corner_pool(x, mode).shape == shape
        assert run("CornerPool", "ortops", {"input": x.numpy()}, ["output"], mode=mode)[0].shape == shape


def test_bad_mode_or_rank_is_an_error() -> None:
    x = torch.zeros(1, 1, 2, 2)
    with pytest.raises(ValueError, match=r"mode must be one of \['top', 'bottom', 'left', 'right'\] or 0..3, got 'up'"):
        ortops.torch.corner_pool(x, "up")
    with pytest.raises(ValueError, match=r"need input \[N, C, H, W\] and mode 0..3, got \[1, 1, 2, 2\], 4"):
        ortops.torch.corner_pool(x, 4)
    with pytest.raises(ValueError, match=r"need input \[N, C, H, W\] and mode 0..3, got \[2, 2\], 0"):
        ortops.torch.corner_pool(torch.zeros(2, 2), "top")


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        top = ortops.torch.corner_pool(x, "top")
        left = ortops.torch.corner_pool(x, "left")
        return top + left, ortops.torch.corner_pool(x, 1), ortops.torch.corner_pool(x, "right")


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip(exporter: str) -> None:
    model = export(Model(), (torch.randn(1, 2, 5, 6),), exporter, dynamic_dims=[{0: "n", 2: "h", 3: "w"}])
    assert sorted(custom_nodes(model)) == ["ortops::CornerPool"] * 4
    modes = sorted(
        next(a.i for a in n.attribute if a.name == "mode") for n in model.graph.node if n.op_type == "CornerPool"
    )
    assert modes == [0, 1, 2, 3]
    for shape in ((2, 2, 7, 3), (1, 2, 1, 9)):
        x = sample(shape, torch.float32, seed=shape[2])
        for g, e in zip(run_onnx(model, (x,)), Model()(x)):
            assert_equal(g, e)
