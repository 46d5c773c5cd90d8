"""float16 through ortops.torch: eager CPU calls run the float16 kernels, a float16 model exports
with both exporters and runs in ONNX Runtime, and gradients (the torch implementations) work.

The float16 kernels compute in float32 and round once, so their results are compared with the
float32 ops on the same (upcast) values within float16 tolerance: one float16 ulp (relative
2^-10), plus an absolute 1e-3 x the value range where the float32 result itself is a sum
that cancels.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

HALF_TOLERANCE = {"rtol": 2**-10, "atol": 1e-3}


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rois(count: int, gen: torch.Generator, size: float = 12.0, rotated: bool = False) -> torch.Tensor:
    index = torch.randint(0, 2, (count, 1), generator=gen).double()
    centre = torch.rand(count, 2, generator=gen, dtype=torch.float64) * size
    extent = torch.rand(count, 2, generator=gen, dtype=torch.float64) * size / 2 + 1
    if rotated:
        theta = (torch.rand(count, 1, generator=gen, dtype=torch.float64) - 0.5) * math.pi
        return torch.cat([index, centre, extent, theta], 1)
    return torch.cat([index, centre - extent / 2, centre + extent / 2], 1)


# Each op on float16 CPU tensors: (name, function of the inputs, inputs as float64).
def _cases() -> list[tuple[str, object, tuple[torch.Tensor, ...]]]:
    gen = _gen(1)
    x = torch.randn(2, 8, 12, 12, generator=gen, dtype=torch.float64) * 2
    grid = torch.rand(2, 7, 9, 2, generator=gen, dtype=torch.float64) * 2.4 - 1.2
    return [
        ("corner_pool", lambda a: ortops.torch.corner_pool(a, "top"), (x,)),
        ("cummax", lambda a: ortops.torch.cummax(a, 2), (x,)),
        ("cummin", lambda a: ortops.torch.cummin(a, -1), (x,)),
        (
            "group_norm",
            lambda a, w, b: ortops.torch.group_norm(a, 4, w, b),
            (x, torch.rand(8, generator=gen, dtype=torch.float64) + 0.5, torch.randn(8, generator=gen).double()),
        ),
        ("grid_sample", lambda a, g: ortops.torch.grid_sample(a, g, "bicubic", "reflection", False), (x, grid)),
        ("roi_align", lambda a, r: ortops.torch.roi_align(a, r, (3, 4), 1.0, 2), (x, _rois(9, gen))),
        (
            "roi_align_rotated",
            lambda a, r: ortops.torch.roi_align_rotated(a, r, (3, 3), 1.0, 0),
            (x, _rois(9, gen, rotated=True)),
        ),
        (
            "multi_scale_deformable_attention",
            lambda v, loc, w: ortops.torch.multi_scale_deformable_attention(
                v, torch.tensor([[5, 6], [2, 3]]), torch.tensor([0, 30]), loc, w
            ),
            (
                torch.randn(2, 36, 4, 32, generator=gen, dtype=torch.float64),
                torch.rand(2, 9, 4, 2, 3, 2, generator=gen, dtype=torch.float64) * 1.2 - 0.1,
                torch.rand(2, 9, 4, 2, 3, generator=gen, dtype=torch.float64),
            ),
        ),
        (
            "deform_conv2d",
            lambda a, o, w, b, m: ortops.torch.deform_conv2d(a, o, w, b, padding=1, mask=m),
            (
                x,
                torch.randn(2, 18, 12, 12, generator=gen, dtype=torch.float64),
                torch.randn(6, 8, 3, 3, generator=gen, dtype=torch.float64) * 0.2,
                torch.randn(6, generator=gen, dtype=torch.float64),
                torch.rand(2, 9, 12, 12, generator=gen, dtype=torch.float64),
            ),
        ),
        (
            "multiclass_nms",
            lambda b, s: ortops.torch.multiclass_nms(b, s, 0.5, 0.3, 10),
            (
                torch.cat([corner := torch.rand(2, 30, 2, generator=gen, dtype=torch.float64) * 50, corner + 8], -1),
                torch.rand(2, 30, 3, generator=gen, dtype=torch.float64),
            ),
        ),
        (
            "multi_scale_deformable_attention_from_offsets",
            lambda v, ref, off, w: ortops.torch.multi_scale_deformable_attention_from_offsets(
                v, torch.tensor([[5, 6], [2, 3]]), torch.tensor([0, 30]), ref, off, w
            ),
            (
                torch.randn(2, 36, 4, 32, generator=gen, dtype=torch.float64),
                torch.rand(2, 9, 2, 2, generator=gen, dtype=torch.float64),
                torch.rand(2, 9, 4, 2, 3, 2, generator=gen, dtype=torch.float64) * 6 - 3,
                torch.rand(2, 9, 4, 2, 3, generator=gen, dtype=torch.float64),
            ),
        ),
    ]


CASES = {name: (fn, args) for name, fn, args in _cases()}


def _outputs(result: object) -> list[torch.Tensor]:
    return list(result) if isinstance(result, tuple) else [result]  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(CASES))
def test_eager_float16_runs_the_float16_kernel(name: str) -> None:
    fn, args = CASES[name]
    half = [a.half() for a in args]
    got = _outputs(fn(*half))
    expected = _outputs(fn(*[a.float() for a in half]))  # the same values, float32 kernel
    for g, e in zip(got, expected):
        if e.dtype == torch.int64:
            torch.testing.assert_close(g, e, rtol=0, atol=0)
            continue
        assert g.dtype == torch.float16
        torch.testing.assert_close(g.float(), e.half().float(), rtol=2**-10, atol=2**-24)


class Head(torch.nn.Module):
    """Sampling, normalization, pooling and a scan, all in float16."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(8, generator=_gen(2)) + 0.5)
        self.bias = torch.nn.Parameter(torch.randn(8, generator=_gen(3)))

    def forward(self, x: torch.Tensor, grid: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = ortops.torch.grid_sample(x, grid, "bilinear", "zeros", False)
        y = ortops.torch.group_norm(y, 4, self.weight, self.bias)
        y = ortops.torch.corner_pool(y, "left")
        pooled = ortops.torch.roi_align(y, rois, (3, 3), 1.0, 2)
        values, indices = ortops.torch.cummax(pooled, 1)
        return values, indices


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_float16_model_exports_and_matches_float32(exporter: str) -> None:
    gen = _gen(4)
    x = torch.randn(2, 8, 12, 12, generator=gen) * 2
    grid = torch.rand(2, 10, 10, 2, generator=gen) * 2.2 - 1.1
    rois = _rois(6, gen, size=9.0).float()
    head = Head().eval()
    with torch.no_grad():
        expected_values, expected_indices = head(x, grid, rois)
        half_head = Head().eval().half()
        half_head.load_state_dict({k: v.half() for k, v in head.state_dict().items()})
        args = (x.half(), grid.half(), rois.half())
        eager_values, eager_indices = half_head(*args)
    onnx_model = export(half_head, args, exporter)
    assert custom_nodes(onnx_model) == [
        "ortops::GridSample",
        "ortops::GroupNorm",
        "ortops::CornerPool",
        "ortops::RoIAlign",
        "ortops::CumMax",
    ]
    values, indices = run_onnx(onnx_model, args)
    assert values.dtype == np.float16 and indices.dtype == np.int64
    # The file runs the kernels the eager call ran: the same bits.
    np.testing.assert_array_equal(values, eager_values.numpy())
    np.testing.assert_array_equal(indices, eager_indices.numpy())
    # Against float32 all the way through: float16 rounding of inputs and of every stage.
    span = float(expected_values.abs().max())
    np.testing.assert_allclose(values.astype(np.float32), expected_values.numpy(), rtol=1e-2, atol=1e-2 * span)


@pytest.mark.parametrize(
    "name",
    [
        "corner_pool",
        "cummax",
        "group_norm",
        "grid_sample",
        "roi_align",
        "roi_align_rotated",
        "deform_conv2d",
        "multi_scale_deformable_attention",
        "multi_scale_deformable_attention_from_offsets",
    ],
)
def test_float16_gradients_follow_float32(name: str) -> None:
    fn, args = CASES[name]
    grads = []
    for dtype in (torch.float16, torch.float32):
        inputs = [a.half().to(dtype).requires_grad_(i == 0) for i, a in enumerate(args)]
        out = _outputs(fn(*inputs))[0]
        out.backward(torch.ones_like(out))
        assert inputs[0].grad is not None and inputs[0].grad.dtype == dtype
        grads.append(inputs[0].grad.float())
    span = float(grads[1].abs().max())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-2, atol=1e-2 * span)
