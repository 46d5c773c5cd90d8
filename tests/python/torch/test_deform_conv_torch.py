"""ortops.torch.deform_conv2d (eager and exported) and the ONNX kernels against torchvision.ops.deform_conv2d."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

import ortops.torch

from ortest import run
from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

# An output element sums L = C/groups * kh * kw products; both sides round each product and the
# partial sums in the dtype (in different orders), so the bound grows with L: atol = ULPS * L * eps.
ULPS = 16
RTOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def tolerance(dtype: torch.dtype, weight: torch.Tensor) -> dict[str, float]:
    length = int(np.prod(weight.shape[1:]))
    return {"rtol": RTOL[dtype], "atol": ULPS * max(length, 1) * torch.finfo(dtype).eps}


def pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else v


def case(n, c, h, w, c_out, k, stride, padding, dilation, groups, dg, dtype=torch.float32, seed=0, spread=3.0):
    g = torch.Generator().manual_seed(seed)
    kh, kw = k
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    out_h = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    out_w = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    x = torch.randn(n, c, h, w, generator=g, dtype=dtype)
    offset = torch.randn(n, 2 * dg * kh * kw, out_h, out_w, generator=g, dtype=dtype) * spread
    mask = torch.rand(n, dg * kh * kw, out_h, out_w, generator=g, dtype=dtype)
    weight = torch.randn(c_out, c // groups, kh, kw, generator=g, dtype=dtype)
    bias = torch.randn(c_out, generator=g, dtype=dtype)
    return x, offset, mask, weight, bias


CONFIGS = [
    # n, c, h, w, c_out, kernel, stride, padding, dilation, groups, deform_groups
    (2, 4, 8, 7, 6, (3, 3), 1, 1, 1, 1, 1),
    (1, 4, 9, 9, 4, (3, 3), 2, 1, 1, 2, 2),  # groups and deform groups together
    (1, 6, 8, 8, 3, (3, 1), 1, 2, 2, 1, 3),
    (3, 2, 5, 6, 2, (1, 1), 1, 0, 1, 1, 2),
    (2, 6, 7, 9, 4, (2, 3), (2, 1), (0, 2), (2, 1), 2, 3),  # non-square everything
    (1, 8, 6, 6, 8, (3, 3), 1, 1, 1, 8, 4),  # depthwise with deform groups
]
IDS = [f"cfg{i}" for i in range(len(CONFIGS))]


def onnx_attrs(config) -> dict:
    stride, padding, dilation, groups, dg = config[6:]
    return dict(
        stride=list(pair(stride)),
        padding=list(pair(padding)),
        dilation=list(pair(dilation)),
        groups=groups,
        deform_groups=dg,
    )


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_bias,with_mask", [(True, True), (False, False), (True, False), (False, True)])
def test_eager_and_onnx_match_torchvision(config, dtype, with_bias, with_mask) -> None:
    x, offset, mask, weight, bias = case(*config, dtype=dtype)
    stride, padding, dilation = config[6:9]
    bias, mask = (bias if with_bias else None), (mask if with_mask else None)
    expected = torchvision.ops.deform_conv2d(x, offset, weight, bias, stride, padding, dilation, mask)
    got = ortops.torch.deform_conv2d(x, offset, weight, bias, stride, padding, dilation, mask)
    torch.testing.assert_close(got, expected, **tolerance(dtype, weight))
    empty = np.zeros(0, x.numpy().dtype)
    feeds = {
        "input": x.numpy(),
        "offset": offset.numpy(),
        "weight": weight.numpy(),
        "bias": empty if bias is None else bias.numpy(),
        "mask": empty if mask is None else mask.numpy(),
    }
    (onnx_out,) = run("DeformConv2d", "ortops", feeds, ["output"], **onnx_attrs(config))
    np.testing.assert_allclose(onnx_out, expected.numpy(), **tolerance(dtype, weight))


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_compat_nodes_match_torchvision(config) -> None:
    x, offset, mask, weight, bias = case(*config, seed=4)
    stride, padding, dilation = config[6:9]
    attrs = onnx_attrs(config)
    feeds = {"input": x.numpy(), "offset": offset.numpy(), "mask": mask.numpy(), "weight": weight.numpy()}
    expected = torchvision.ops.deform_conv2d(x, offset, weight, bias, stride, padding, dilation, mask)
    for domain in ("mmcv", "mmdeploy"):
        (got,) = run("MMCVModulatedDeformConv2d", domain, {**feeds, "bias": bias.numpy()}, ["output"], **attrs)
        np.testing.assert_allclose(got, expected.numpy(), **tolerance(torch.float32, weight))
    v1_feeds = {"input": feeds["input"], "offset": feeds["offset"], "weight": feeds["weight"]}
    (v1,) = run("MMCVDeformConv2d", "mmcv", v1_feeds, ["output"], bias=0, im2col_step=32, **attrs)
    v1_expected = torchvision.ops.deform_conv2d(x, offset, weight, None, stride, padding, dilation)
    np.testing.assert_allclose(v1, v1_expected.numpy(), **tolerance(torch.float32, weight))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_samples_on_and_outside_the_border(dtype) -> None:
    """Offsets that land samples exactly on -1, 0, H-1, H and just inside/outside them."""
    x, offset, mask, weight, bias = case(2, 4, 5, 6, 3, (3, 3), 1, 1, 1, 1, 2, dtype=dtype)
    kh = kw = 3
    out_h, out_w = offset.shape[2:]
    h, w = x.shape[2:]
    g = torch.Generator().manual_seed(9)
    targets_y = torch.tensor([-1.0, -0.999, -1.001, -0.5, 0.0, h - 1, h - 0.5, h - 0.001, h, h + 0.001, -4.0, h + 3.0])
    targets_x = torch.tensor([-1.0, -0.999, -1.001, -0.5, 0.0, w - 1, w - 0.5, w - 0.001, w, w + 0.001, -4.0, w + 3.0])
    taps = torch.arange(kh * kw)
    base_y = (torch.arange(out_h) - 1)[None, :, None] + (taps // kw)[:, None, None]
    base_x = (torch.arange(out_w) - 1)[None, None, :] + (taps % kw)[:, None, None]
    pick_y = targets_y[torch.randint(len(targets_y), (2, 2, kh * kw, out_h, out_w), generator=g)]
    pick_x = targets_x[torch.randint(len(targets_x), (2, 2, kh * kw, out_h, out_w), generator=g)]
    offset = torch.stack([pick_y - base_y, pick_x - base_x], dim=3).reshape(offset.shape).to(dtype)
    expected = torchvision.ops.deform_conv2d(x, offset, weight, bias, 1, 1, 1, mask)
    torch.testing.assert_close(
        ortops.torch.deform_conv2d(x, offset, weight, bias, 1, 1, 1, mask), expected, **tolerance(dtype, weight)
    )
    feeds = {k: v.numpy() for k, v in dict(input=x, offset=offset, weight=weight, bias=bias, mask=mask).items()}
    attrs = dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, deform_groups=2)
    for threads in (1, 2):
        (got,) = run("DeformConv2d", "ortops", feeds, ["output"], threads=threads, **attrs)
        np.testing.assert_allclose(got, expected.numpy(), **tolerance(dtype, weight))


def test_non_contiguous_inputs() -> None:
    x, offset, mask, weight, bias = case(2, 4, 9, 9, 4, (3, 3), 2, 1, 1, 2, 2, seed=3)
    nc_x = x.transpose(2, 3).contiguous().transpose(2, 3)
    nc_offset = offset.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    nc_mask = torch.cat([mask, mask], dim=1)[:, : mask.shape[1]]
    nc_weight = weight.permute(3, 2, 1, 0).contiguous().permute(3, 2, 1, 0)
    nc_bias = torch.stack([bias, bias], dim=1)[:, 0]
    assert not any(t.is_contiguous() for t in (nc_x, nc_offset, nc_mask, nc_weight, nc_bias))
    expected = torchvision.ops.deform_conv2d(x, offset, weight, bias, 2, 1, 1, mask)
    got = ortops.torch.deform_conv2d(nc_x, nc_offset, nc_weight, nc_bias, 2, 1, 1, nc_mask)
    torch.testing.assert_close(got, expected, **tolerance(torch.float32, weight))
    # The same strided tensors, seen by numpy without a copy, into the kernel.
    feeds = dict(input=nc_x, offset=nc_offset, weight=nc_weight, bias=nc_bias, mask=nc_mask)
    attrs = dict(stride=[2, 2], padding=[1, 1], dilation=[1, 1], groups=2, deform_groups=2)
    (onnx_out,) = run("DeformConv2d", "ortops", {k: v.numpy() for k, v in feeds.items()}, ["output"], **attrs)
    np.testing.assert_allclose(onnx_out, expected.numpy(), **tolerance(torch.float32, weight))


def test_empty_batch() -> None:
    x, offset, mask, weight, bias = case(0, 4, 6, 6, 5, (3, 3), 1, 1, 1, 1, 1)
    got = ortops.torch.deform_conv2d(x, offset, weight, bias, 1, 1, 1, mask)
    assert got.shape == (0, 5, 6, 6)


def test_bad_offset_channels() -> None:
    x, offset, mask, weight, bias = case(1, 4, 6, 6, 5, (3, 3), 1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="offset has 17 channels, not a multiple of 2 \\* kh \\* kw = 18"):
        ortops.torch.deform_conv2d(x, offset[:, :17], weight, bias, 1, 1, 1)


class Model(torch.nn.Module):
    def __init__(self, modulated: bool, with_bias: bool) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.weight = torch.nn.Parameter(torch.randn(6, 2, 3, 3, generator=g))
        self.bias = torch.nn.Parameter(torch.randn(6, generator=g)) if with_bias else None
        self.modulated = modulated

    def forward(self, x: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return ortops.torch.deform_conv2d(x, offset, self.weight, self.bias, 1, 1, 1, mask if self.modulated else None)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("modulated,with_bias", [(True, True), (False, False)])
def test_export_roundtrip(exporter: str, modulated: bool, with_bias: bool) -> None:
    # groups = 2 (C = 4, weight C/groups = 2), deform_groups = 2, dynamic batch and spatial dims.
    x, offset, mask, _, _ = case(1, 4, 6, 7, 6, (3, 3), 1, 1, 1, 2, 2)
    model = Model(modulated, with_bias).eval()
    dims = [{0: "n", 2: "h", 3: "w"}] * 3
    onnx_model = export(model, (x, offset, mask), exporter, dynamic_dims=dims)
    assert custom_nodes(onnx_model) == ["ortops::DeformConv2d"]
    x2, offset2, mask2, _, _ = case(3, 4, 9, 5, 6, (3, 3), 1, 1, 1, 2, 2, seed=2)
    (got,) = run_onnx(onnx_model, (x2, offset2, mask2))
    with torch.no_grad():
        expected = torchvision.ops.deform_conv2d(
            x2, offset2, model.weight, model.bias, 1, 1, 1, mask2 if modulated else None
        )
    np.testing.assert_allclose(got, expected.numpy(), **tolerance(torch.float32, model.weight))
