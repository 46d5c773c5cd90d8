"""Deformable convolutions (mmcv, mmdeploy, ortops) against the direct float64 loop in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references

from ortest import run

# The GEMM sums C/groups * kh * kw products; float32 rounding grows with that length.
TOLERANCE = {np.float32: {"rtol": 1e-4, "atol": 1e-4}, np.float64: {"rtol": 1e-10, "atol": 1e-10}}
MODULATED = [("mmcv", "MMCVModulatedDeformConv2d"), ("mmdeploy", "MMCVModulatedDeformConv2d")]


def case(rng, n, c, h, w, c_out, k, stride, padding, dilation, groups, dg, dtype=np.float32, spread=2.0):
    kh, kw = k
    out_h = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    out_w = (w + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    x = rng.normal(size=(n, c, h, w)).astype(dtype)
    offset = (rng.normal(size=(n, 2 * dg * kh * kw, out_h, out_w)) * spread).astype(dtype)
    mask = rng.random((n, dg * kh * kw, out_h, out_w)).astype(dtype)
    weight = rng.normal(size=(c_out, c // groups, kh, kw)).astype(dtype)
    bias = rng.normal(size=c_out).astype(dtype)
    attrs = dict(stride=[stride] * 2, padding=[padding] * 2, dilation=[dilation] * 2, groups=groups, deform_groups=dg)
    return x, offset, mask, weight, bias, attrs


CONFIGS = [
    # n, c, h, w, c_out, kernel, stride, padding, dilation, groups, deform_groups
    (1, 2, 5, 6, 3, (3, 3), 1, 1, 1, 1, 1),
    (2, 4, 6, 5, 4, (3, 3), 2, 1, 1, 2, 2),  # groups and deform groups together
    (1, 4, 7, 7, 2, (1, 3), 1, 0, 2, 1, 2),
    (1, 2, 4, 4, 2, (1, 1), 1, 0, 1, 1, 1),
]


def reference(x, offset, mask, weight, bias, attrs):
    return references.deform_conv2d(
        x,
        offset,
        weight,
        bias,
        mask,
        attrs["stride"],
        attrs["padding"],
        attrs["dilation"],
        attrs["groups"],
        attrs["deform_groups"],
    )


@pytest.mark.parametrize("domain,op", MODULATED)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("with_bias", [True, False])
def test_modulated_matches_reference(domain, op, config, with_bias) -> None:
    x, offset, mask, weight, bias, attrs = case(np.random.default_rng(config[1]), *config)
    feeds = {"input": x, "offset": offset, "mask": mask, "weight": weight}
    if with_bias:
        feeds["bias"] = bias
    (got,) = run(op, domain, feeds, ["output"], **attrs)
    expected = reference(x, offset, mask, weight, bias if with_bias else None, attrs)
    np.testing.assert_allclose(got, expected, **TOLERANCE[np.float32])


@pytest.mark.parametrize("config", CONFIGS)
def test_v1_matches_reference_as_mmcv_wrote_it(config) -> None:
    x, offset, _, weight, _, attrs = case(np.random.default_rng(config[2]), *config)
    (got,) = run(
        "MMCVDeformConv2d",
        "mmcv",
        {"input": x, "offset": offset, "weight": weight},
        ["output"],
        bias=0,
        im2col_step=32,
        **attrs,
    )
    np.testing.assert_allclose(got, reference(x, offset, None, weight, None, attrs), **TOLERANCE[np.float32])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", CONFIGS[:2])
def test_ortops_matches_reference(dtype, config) -> None:
    x, offset, mask, weight, bias, attrs = case(np.random.default_rng(7), *config, dtype=dtype)
    feeds = {"input": x, "offset": offset, "mask": mask, "weight": weight, "bias": bias}
    (got,) = run("DeformConv2d", "ortops", feeds, ["output"], **attrs)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, reference(x, offset, mask, weight, bias, attrs), **TOLERANCE[dtype])


def test_zero_offsets_and_unit_mask_are_a_plain_convolution() -> None:
    x, offset, mask, weight, bias, attrs = case(
        np.random.default_rng(3), 1, 3, 6, 6, 2, (3, 3), 1, 1, 1, 1, 1, dtype=np.float64
    )
    offset[:] = 0
    mask[:] = 1
    (got,) = run(
        "DeformConv2d",
        "ortops",
        {"input": x, "offset": offset, "mask": mask, "weight": weight, "bias": bias},
        ["output"],
        **attrs,
    )
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.einsum("ocij,nchwij->nohw", weight, np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3)))
    np.testing.assert_allclose(got, conv + bias[None, :, None, None], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    x, offset, mask, weight, bias, attrs = case(
        np.random.default_rng(1), 2, 8, 9, 9, 6, (3, 3), 1, 1, 1, 2, 2, spread=5.0
    )
    feeds = {"input": x, "offset": offset, "mask": mask, "weight": weight, "bias": bias}
    (got,) = run("DeformConv2d", "ortops", feeds, ["output"], threads=threads, **attrs)
    np.testing.assert_allclose(got, reference(x, offset, mask, weight, bias, attrs), **TOLERANCE[np.float32])


def test_empty_batch() -> None:
    x, offset, mask, weight, bias, attrs = case(np.random.default_rng(0), 0, 2, 5, 5, 3, (3, 3), 1, 1, 1, 1, 1)
    (got,) = run(
        "DeformConv2d",
        "ortops",
        {"input": x, "offset": offset, "mask": mask, "weight": weight, "bias": bias},
        ["output"],
        **attrs,
    )
    assert got.shape == (0, 3, 5, 5)


@pytest.mark.parametrize("domain,op", MODULATED)
def test_bad_input_is_an_error(domain, op) -> None:
    x, offset, mask, weight, bias, attrs = case(np.random.default_rng(0), 1, 4, 5, 5, 2, (3, 3), 1, 1, 1, 1, 1)
    feeds = {"input": x, "offset": offset, "mask": mask, "weight": weight}
    with pytest.raises(Exception, match=r"input 'offset' must have shape \[1, 18, 5, 5\], got \[1, 18, 4, 5\]"):
        run(op, domain, {**feeds, "offset": offset[:, :, :4].copy()}, ["output"], **attrs)
    with pytest.raises(Exception, match=r"input 'mask' must have shape \[1, 9, 5, 5\]"):
        run(op, domain, {**feeds, "mask": mask[:, :8].copy()}, ["output"], **attrs)
    with pytest.raises(Exception, match=r"C = 4, not divisible by deform_groups = 3"):
        run(op, domain, feeds, ["output"], **{**attrs, "deform_groups": 3})
    with pytest.raises(Exception, match=r"input 'weight' must have shape \[C_out, C / groups = 2, kh, kw\]"):
        run(op, domain, feeds, ["output"], **{**attrs, "groups": 2})
    with pytest.raises(Exception, match=r"attribute 'stride' must be positive"):
        run(op, domain, feeds, ["output"], **{**attrs, "stride": [0, 1]})
    with pytest.raises(Exception, match=r"input 'bias' must have shape \[2\], got \[3\]"):
        run(op, domain, {**feeds, "bias": np.zeros(3, np.float32)}, ["output"], **attrs)
