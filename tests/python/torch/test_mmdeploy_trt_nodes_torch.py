"""mmdeploy's TensorRT-only nodes against the PyTorch functions its exporter rewrote into them:
torchvision's deform_conv2d (mmcv's DeformConv2d), F.interpolate(mode='bicubic'),
F.instance_norm / F.group_norm, F.scaled_dot_product_attention, topk-index gathering and
mmdet's anchor grid (written here with torch as mmdet computes it). Each node is built as
mmdeploy writes it (names, attribute types) and run in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision

from ortest import make_model, session

TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-4}, torch.float64: {"rtol": 1e-10, "atol": 1e-10}}


def run(op: str, inputs: dict[str, torch.Tensor | None], outputs: list[str], **attributes) -> list[np.ndarray]:
    """``mmdeploy::op`` on torch tensors (None leaves an optional input out)."""
    arrays = {name: None if t is None else t.detach().numpy() for name, t in inputs.items()}
    spec = [(name, a.dtype, a.ndim) if a is not None else ("", np.float32, 0) for name, a in arrays.items()]
    model = make_model(op, "mmdeploy", spec, outputs, **attributes)
    return session(model).run(None, {name: a for name, a in arrays.items() if a is not None})


def close(got: np.ndarray, expected: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    tolerance = {k: v * scale for k, v in TOLERANCE[dtype].items()}
    np.testing.assert_allclose(got, expected.detach().numpy(), **tolerance)


# --------------------------------------------------------------------------- MMCVDeformConv2d


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation", "groups", "deform_groups"),
    [
        ((3, 3), (1, 1), (2, 0), (1, 1), 1, 1),
        ((3, 3), (2, 1), (0, 2), (1, 2), 2, 2),
        ((2, 3), (1, 2), (1, 3), (2, 1), 1, 2),
    ],
)
def test_deform_conv_is_torchvision_with_ph_other_than_pw(
    dtype, kernel, stride, padding, dilation, groups, deform_groups
):
    g = torch.Generator().manual_seed(0)
    n, c, h, w, c_out = 2, 4, 9, 8, 6
    kh, kw = kernel
    out_h = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    x = torch.randn(n, c, h, w, generator=g, dtype=dtype)
    offset = torch.randn(n, 2 * deform_groups * kh * kw, out_h, out_w, generator=g, dtype=dtype) * 2
    weight = torch.randn(c_out, c // groups, kh, kw, generator=g, dtype=dtype)
    expected = torchvision.ops.deform_conv2d(x, offset, weight, stride=stride, padding=padding, dilation=dilation)
    (got,) = run(
        "MMCVDeformConv2d",
        {"input": x, "offset": offset, "weight": weight},
        ["output"],
        stride=list(stride),
        padding=[p for pair in zip(padding, padding) for p in pair],  # mmdeploy's symbolic
        dilation=list(dilation),
        groups=groups,
        deform_groups=deform_groups,
    )
    close(got, expected, dtype)


# --------------------------------------------------------------------------- GatherTopk


@pytest.mark.parametrize("shape", [(2, 100), (2, 100, 4), (3, 100, 2, 5)])
def test_gather_topk_is_torch_indexing_by_topk_indices(shape):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g)
    _, indices = torch.rand(shape[:2], generator=g).topk(17)  # int64, as the file holds them
    batch = torch.arange(shape[0]).unsqueeze(-1)
    (got,) = run("GatherTopk", {"input": x, "indices": indices}, ["output"])
    np.testing.assert_array_equal(got, x[batch, indices].numpy())


# --------------------------------------------------------------------------- GridPriorsTRT


def mmdet_grid_priors(base_anchors: torch.Tensor, feat_h: int, feat_w: int, stride_h: int, stride_w: int):
    """mmdet's AnchorGenerator.single_level_grid_priors: shifts meshgridded row-major."""
    shift_x = torch.arange(0, feat_w).to(base_anchors.dtype) * stride_w
    shift_y = torch.arange(0, feat_h).to(base_anchors.dtype) * stride_h
    shift_yy, shift_xx = torch.meshgrid(shift_y, shift_x, indexing="ij")
    shift_xx, shift_yy = shift_xx.reshape(-1), shift_yy.reshape(-1)
    shifts = torch.stack([shift_xx, shift_yy, shift_xx, shift_yy], dim=-1)
    return (base_anchors[None, :, :] + shifts[:, None, :]).view(-1, 4)


def mmdet_base_anchors(size: int, scales, ratios) -> torch.Tensor:
    """mmdet's gen_single_level_base_anchors (center offset 0)."""
    ratios, scales = torch.tensor(ratios), torch.tensor(scales)
    h_ratios = torch.sqrt(ratios)
    w_ratios = 1 / h_ratios
    ws = (size * w_ratios[:, None] * scales[None, :]).view(-1)
    hs = (size * h_ratios[:, None] * scales[None, :]).view(-1)
    return torch.stack([-0.5 * ws, -0.5 * hs, 0.5 * ws, 0.5 * hs], dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("feat_h", "feat_w", "stride"), [(25, 38, (16, 16)), (13, 7, (32, 16)), (1, 3, (8, 4))])
def test_grid_priors_is_mmdets(dtype, feat_h, feat_w, stride):
    base = mmdet_base_anchors(stride[0], [8, 10.08, 12.7], [0.5, 1.0, 2.0]).to(dtype)
    stride_w, stride_h = stride  # mmdet's strides are (w, h)
    feeds = {
        "base_anchors": base,
        "feat_h": torch.zeros(feat_h, dtype=torch.int64),  # ConstantOfShape of the unsqueezed size
        "feat_w": torch.zeros(feat_w, dtype=torch.int64),
    }
    (got,) = run("GridPriorsTRT", feeds, ["anchors"], stride_h=stride_h, stride_w=stride_w)
    np.testing.assert_array_equal(got, mmdet_grid_priors(base, feat_h, feat_w, stride_h, stride_w).numpy())


# --------------------------------------------------------------------------- TRTBicubicInterpolate


def bicubic_node(x: torch.Tensor, scale_factor: list[float], align_corners: bool | None) -> np.ndarray:
    """As mmdeploy's rewrite writes it: scale_factor FLOATS, align_corners INT (absent for None)."""
    attributes = {"scale_factor": [float(s) for s in scale_factor]}
    if align_corners is not None:
        attributes["align_corners"] = int(align_corners)
    (got,) = run("TRTBicubicInterpolate", {"input": x}, ["output"], **attributes)
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("align_corners", [False, True, None])
@pytest.mark.parametrize("scale", [(2.0, 2.0), (3.0, 4.0), (1.5, 2.5), (0.5, 0.6), (1.0, 3.0)])
def test_bicubic_is_f_interpolate(dtype, align_corners, scale):
    x = torch.randn(2, 3, 10, 12, generator=torch.Generator().manual_seed(2), dtype=dtype)
    # The file holds the factors as float32 (0.6 becomes 0.60000002): the float64 reference uses those.
    stored = [float(np.float32(s)) for s in scale]
    expected = F.interpolate(x, scale_factor=stored, mode="bicubic", align_corners=align_corners)
    close(bicubic_node(x, list(scale), align_corners), expected, dtype)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(7, 11), (23, 17), (5, 5)])
def test_bicubic_by_size_as_the_rewrite_turns_it_into_scale_factors(align_corners, size):
    x = torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(3))
    scale = [float(out / size_in) for out, size_in in zip(size, x.shape[2:])]  # the rewrite's computation
    expected = F.interpolate(x, scale_factor=scale, mode="bicubic", align_corners=align_corners)
    assert tuple(expected.shape[2:]) == size
    got = bicubic_node(x, scale, align_corners)
    assert got.shape == expected.shape
    close(got, expected, torch.float32)


@pytest.mark.parametrize(("shape", "scale"), [((3, 5, 70, 90), (2.0, 1.5)), ((2, 3, 151, 201), (0.45, 0.7))])
def test_bicubic_large_images_split_across_tasks(shape, scale):
    """Large enough for several tasks, each starting and ending inside a plane: the rows a task has
    interpolated along x belong to one plane and must not be read for the next one, nor assumed
    by a task that starts halfway down a plane. Downscaling reads rows that are not consecutive."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(5))
    stored = [float(np.float32(s)) for s in scale]
    expected = F.interpolate(x, scale_factor=stored, mode="bicubic", align_corners=False)
    close(bicubic_node(x, list(scale), False), expected, torch.float32)


# --------------------------------------------------------------------------- TRTInstanceNormalization


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(2, 3, 17), (2, 4, 6, 5), (1, 2, 3, 4, 5)])
def test_instance_norm_is_f_instance_norm(dtype, shape):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(*shape, generator=g, dtype=dtype) * 2 + 3
    scale, bias = torch.randn(shape[1], generator=g, dtype=dtype), torch.randn(shape[1], generator=g, dtype=dtype)
    (got,) = run("TRTInstanceNormalization", {"X": x, "scale": scale, "bias": bias}, ["Y"], epsilon=1e-5)
    close(got, F.instance_norm(x, weight=scale, bias=bias, eps=1e-5), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("groups", "shape"), [(4, (2, 8, 5, 6)), (1, (3, 6, 4)), (6, (2, 6, 3, 3))])
def test_instance_norm_as_mmdeploys_group_norm_is_f_group_norm(dtype, groups, shape):
    """mmdeploy's group_norm symbolic for TensorRT: Reshape [N, G, -1], the node with scale ones and
    bias zeros, Reshape back, then Mul by weight and Add bias per channel."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    weight, bias = torch.randn(shape[1], generator=g, dtype=dtype), torch.randn(shape[1], generator=g, dtype=dtype)
    feeds = {"X": x.reshape(shape[0], groups, -1), "scale": torch.ones(groups, dtype=dtype)}
    feeds["bias"] = torch.zeros(groups, dtype=dtype)
    (normed,) = run("TRTInstanceNormalization", feeds, ["Y"], epsilon=1e-5)
    per_channel = (-1,) + (1,) * (len(shape) - 2)
    got = torch.from_numpy(normed).reshape(shape) * weight.reshape(per_channel) + bias.reshape(per_channel)
    close(got.numpy(), F.group_norm(x, groups, weight, bias, eps=1e-5), dtype)


# --------------------------------------------------------------------------- ScaledDotProductAttentionTRT


def mmdeploy_forward(q, k, v, mask=None):
    """ScaledDotProductAttentionTRT.forward in mmdeploy."""
    attn = torch.bmm(q / q.shape[-1] ** 0.5, k.transpose(-2, -1))
    if mask is not None:
        attn = attn + mask
    attn = attn.softmax(-1)
    return torch.bmm(attn, v), attn


@pytest.mark.parametrize("mask_shape", [None, (7, 9), (12, 7, 9), (1, 7, 9)])
def test_attention_is_f_scaled_dot_product_attention(mask_shape):
    g = torch.Generator().manual_seed(6)
    b, nt, ns, e = 12, 7, 9, 16  # batch 3 x 4 heads, as multi_head_attention_forward flattens them
    q, k, v = (torch.randn(b, n, e, generator=g) for n in (nt, ns, ns))
    mask = None
    if mask_shape is not None:
        mask = torch.randn(*mask_shape, generator=g)
        mask[..., 0, 2:5] = float("-inf")
    output, attn = run(
        "ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v, "attn_mask": mask}, ["output", "attn"]
    )
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    close(output, expected, torch.float32, scale=0.1)
    expected_output, expected_attn = mmdeploy_forward(q, k, v, mask)
    close(output, expected_output, torch.float32, scale=0.1)
    close(attn, expected_attn, torch.float32, scale=0.1)


def test_attention_with_values_of_another_width():
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(4, 5, 8, generator=g), torch.randn(4, 6, 8, generator=g)
    v = torch.randn(4, 6, 3, generator=g)
    output, attn = run("ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v}, ["output", "attn"])
    close(output, F.scaled_dot_product_attention(q, k, v), torch.float32, scale=0.1)
    close(attn, mmdeploy_forward(q, k, v)[1], torch.float32, scale=0.1)
