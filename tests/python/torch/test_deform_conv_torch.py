"""ortops.torch.deform_conv2d and the ONNX kernels against torchvision.ops.deform_conv2d."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

import ortops.torch

from ortest import run
from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-4}, torch.float64: {"rtol": 1e-10, "atol": 1e-10}}


def case(n, c, h, w, c_out, k, stride, padding, dilation, groups, dg, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    kh, kw = k
    out_h = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    out_w = (w + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    x = torch.randn(n, c, h, w, generator=g, dtype=dtype)
    offset = torch.randn(n, 2 * dg * kh * kw, out_h, out_w, generator=g, dtype=dtype) * 3
    mask = torch.rand(n, dg * kh * kw, out_h, out_w, generator=g, dtype=dtype)
    weight = torch.randn(c_out, c // groups, kh, kw, generator=g, dtype=dtype)
    bias = torch.randn(c_out, generator=g, dtype=dtype)
    return x, offset, mask, weight, bias


CONFIGS = [
    (2, 4, 8, 7, 6, (3, 3), 1, 1, 1, 1, 1),
    (1, 4, 9, 9, 4, (3, 3), 2, 1, 1, 2, 2),
    (1, 6, 8, 8, 3, (3, 1), 1, 2, 2, 1, 3),
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("modulated", [True, False])
def test_eager_and_onnx_match_torchvision(config, dtype, modulated) -> None:
    x, offset, mask, weight, bias = case(*config, dtype=dtype)
    stride, padding, dilation, groups, dg = config[6:]
    mask = mask if modulated else None
    expected = torchvision.ops.deform_conv2d(x, offset, weight, bias, stride, padding, dilation, mask)
    torch.testing.assert_close(
        ortops.torch.deform_conv2d(x, offset, weight, bias, stride, padding, dilation, mask),
        expected,
        **TOLERANCE[dtype],
    )
    attrs = dict(stride=[stride] * 2, padding=[padding] * 2, dilation=[dilation] * 2, groups=groups, deform_groups=dg)
    ones = torch.ones(offset.shape[0], offset.shape[1] // 2, *offset.shape[2:], dtype=dtype)
    feeds = {"input": x, "offset": offset, "mask": mask if modulated else ones, "weight": weight, "bias": bias}
    (got,) = run("DeformConv2d", "ortops", {k: v.numpy() for k, v in feeds.items()}, ["output"], **attrs)
    np.testing.assert_allclose(got, expected.numpy(), **TOLERANCE[dtype])


def test_compat_nodes_match_torchvision() -> None:
    x, offset, mask, weight, bias = case(*CONFIGS[1])
    attrs = dict(stride=[2, 2], padding=[1, 1], dilation=[1, 1], groups=2, deform_groups=2)
    np_feeds = {
        "input": x.numpy(),
        "offset": offset.numpy(),
        "mask": mask.numpy(),
        "weight": weight.numpy(),
        "bias": bias.numpy(),
    }
    (modulated,) = run("MMCVModulatedDeformConv2d", "mmdeploy", np_feeds, ["output"], **attrs)
    expected = torchvision.ops.deform_conv2d(x, offset, weight, bias, 2, 1, 1, mask)
    np.testing.assert_allclose(modulated, expected.numpy(), **TOLERANCE[torch.float32])
    v1_feeds = {"input": np_feeds["input"], "offset": np_feeds["offset"], "weight": np_feeds["weight"]}
    (v1,) = run("MMCVDeformConv2d", "mmcv", v1_feeds, ["output"], bias=0, im2col_step=32, **attrs)
    np.testing.assert_allclose(
        v1, torchvision.ops.deform_conv2d(x, offset, weight, None, 2, 1, 1).numpy(), **TOLERANCE[torch.float32]
    )


def test_eager_accepts_non_contiguous_input() -> None:
    x, offset, mask, weight, bias = case(*CONFIGS[0])
    x = x.transpose(2, 3).contiguous().transpose(2, 3)
    torch.testing.assert_close(
        ortops.torch.deform_conv2d(x, offset, weight, bias, 1, 1, 1, mask),
        torchvision.ops.deform_conv2d(x, offset, weight, bias, 1, 1, 1, mask),
        **TOLERANCE[torch.float32],
    )


class Model(torch.nn.Module):
    def __init__(self, modulated: bool) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(5, 4, 3, 3, generator=torch.Generator().manual_seed(1)))
        self.modulated = modulated

    def forward(self, x: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return ortops.torch.deform_conv2d(x, offset, self.weight, None, 1, 1, 1, mask if self.modulated else None)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("modulated", [True, False])
def test_export_roundtrip(exporter: str, modulated: bool) -> None:
    x, offset, mask, _, _ = case(1, 4, 6, 6, 5, (3, 3), 1, 1, 1, 1, 1)
    model = Model(modulated).eval()
    onnx_model = export(model, (x, offset, mask), exporter, dynamic_dims=[{0: "n"}, {0: "n"}, {0: "n"}])
    assert custom_nodes(onnx_model) == ["ortops::DeformConv2d"]
    x2, offset2, mask2, _, _ = case(3, 4, 6, 6, 5, (3, 3), 1, 1, 1, 1, 1, seed=2)
    (got,) = run_onnx(onnx_model, (x2, offset2, mask2))
    with torch.no_grad():
        expected = model(x2, offset2, mask2)
    np.testing.assert_allclose(got, expected.numpy(), **TOLERANCE[torch.float32])
