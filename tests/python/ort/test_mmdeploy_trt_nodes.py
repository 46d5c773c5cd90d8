"""mmdeploy's nodes that only its TensorRT plugins ran, in ONNX Runtime: MMCVDeformConv2d (four
padding values), GatherTopk, GridPriorsTRT, TRTBicubicInterpolate, TRTInstanceNormalization and
ScaledDotProductAttentionTRT. Each node is built with the attribute names and ONNX types
mmdeploy's exporter writes, and compared with a numpy reference written here (slow loops where
that is clearer). numpy only: this file also runs with onnxruntime 1.17.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import references
from onnx import AttributeProto

from ortest import exported_model, make_model, session

# The attributes each node carries in mmdeploy's files, with their ONNX types.
ENCODING = {
    "MMCVDeformConv2d": {
        "stride": AttributeProto.INTS,
        "padding": AttributeProto.INTS,
        "dilation": AttributeProto.INTS,
        "groups": AttributeProto.INT,
        "deform_groups": AttributeProto.INT,
    },
    "GatherTopk": {},
    "GridPriorsTRT": {"stride_h": AttributeProto.INT, "stride_w": AttributeProto.INT},
    "TRTBicubicInterpolate": {"scale_factor": AttributeProto.FLOATS, "align_corners": AttributeProto.INT},
    "TRTInstanceNormalization": {"epsilon": AttributeProto.FLOAT},
    "ScaledDotProductAttentionTRT": {},
}
OUTPUTS = {
    "MMCVDeformConv2d": ["output"],
    "GatherTopk": ["output"],
    "GridPriorsTRT": ["anchors"],
    "TRTBicubicInterpolate": ["output"],
    "TRTInstanceNormalization": ["Y"],
    "ScaledDotProductAttentionTRT": ["output", "attn"],
}


def run(op: str, inputs: dict[str, np.ndarray | None], *, check_encoding: bool = True, **attributes):
    """Runs ``mmdeploy::op`` on ``inputs`` (in input order; None leaves an optional input out),
    after checking that the node stores each attribute with the type mmdeploy writes."""
    spec = [(name, v.dtype, v.ndim) if v is not None else ("", np.float32, 0) for name, v in inputs.items()]
    model = make_model(op, "mmdeploy", spec, OUTPUTS[op], **attributes)
    if check_encoding:
        for attribute in model.graph.node[0].attribute:
            assert attribute.type == ENCODING[op][attribute.name], attribute.name
    feeds = {name: v for name, v in inputs.items() if v is not None}
    return session(model).run(None, feeds)


# --------------------------------------------------------------------------- MMCVDeformConv2d


def deform_case(rng, n, c, h, w, c_out, kernel, stride, padding, dilation, groups, dg, dtype=np.float32):
    """Inputs of a DeformConv2d module with (height, width) pairs, the offset sized as the
    exported module's offset convolution sizes it (padding ph rows and pw columns)."""
    kh, kw = kernel
    out_h = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    x = rng.normal(size=(n, c, h, w)).astype(dtype)
    offset = (rng.normal(size=(n, 2 * dg * kh * kw, out_h, out_w)) * 2).astype(dtype)
    weight = rng.normal(size=(c_out, c // groups, kh, kw)).astype(dtype)
    return x, offset, weight


def mmdeploy_deform_attributes(stride, padding, dilation, groups, dg) -> dict:
    """As mmdeploy's symbolic writes them: padding [ph, ph, pw, pw] (zip(padding, padding))."""
    return {
        "stride": list(stride),
        "padding": [p for pair in zip(padding, padding) for p in pair],
        "dilation": list(dilation),
        "groups": groups,
        "deform_groups": dg,
    }


DEFORM_CONFIGS = [
    # n, c, h, w, c_out, kernel, stride, padding, dilation, groups, deform_groups
    (1, 4, 7, 9, 3, (3, 3), (1, 1), (2, 0), (1, 1), 1, 1),
    (2, 4, 8, 6, 4, (3, 2), (2, 1), (1, 3), (1, 2), 2, 2),
    (1, 2, 6, 7, 2, (2, 3), (1, 2), (0, 1), (2, 1), 1, 2),
]


@pytest.mark.parametrize("config", DEFORM_CONFIGS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_deform_conv_pads_height_by_ph_and_width_by_pw(config, dtype) -> None:
    n, c, h, w, c_out, kernel, stride, padding, dilation, groups, dg = config
    x, offset, weight = deform_case(np.random.default_rng(1), *config, dtype=dtype)
    attrs = mmdeploy_deform_attributes(stride, padding, dilation, groups, dg)
    assert attrs["padding"] == [padding[0], padding[0], padding[1], padding[1]]
    (got,) = run("MMCVDeformConv2d", {"input": x, "offset": offset, "weight": weight}, **attrs)
    f64 = lambda a: a.astype(np.float64)  # noqa: E731
    expected = references.deform_conv2d(
        f64(x), f64(offset), f64(weight), None, None, stride, padding, dilation, groups, dg
    )
    assert got.dtype == dtype and got.shape == expected.shape
    tolerance = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


def test_deform_conv_float16_is_computed_in_float32() -> None:
    config = DEFORM_CONFIGS[1]
    x, offset, weight = deform_case(np.random.default_rng(2), *config, dtype=np.float16)
    attrs = mmdeploy_deform_attributes(*config[6:])
    (got,) = run("MMCVDeformConv2d", {"input": x, "offset": offset, "weight": weight}, **attrs)
    f64 = lambda a: a.astype(np.float64)  # noqa: E731
    expected = references.deform_conv2d(f64(x), f64(offset), f64(weight), None, None, *config[6:])
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=1e-2, atol=2e-2)


def assert_rounded_from_float32(half: np.ndarray, single: np.ndarray) -> None:
    """float16 results are the float32 kernel's, rounded once: within one float16 ulp of them."""
    assert half.dtype == np.float16
    rounded = single.astype(np.float16)
    np.testing.assert_array_equal(np.isnan(half), np.isnan(rounded))
    keep = np.isfinite(rounded)
    ulp = np.spacing(np.abs(rounded[keep])).astype(np.float64)
    assert (np.abs(half[keep].astype(np.float64) - rounded[keep].astype(np.float64)) <= ulp).all()


def test_deform_conv_float16_rounds_the_float32_result() -> None:
    config = DEFORM_CONFIGS[2]
    x, offset, weight = deform_case(np.random.default_rng(21), *config, dtype=np.float16)
    attrs = mmdeploy_deform_attributes(*config[6:])
    (half,) = run("MMCVDeformConv2d", {"input": x, "offset": offset, "weight": weight}, **attrs)
    feeds = {"input": x.astype(np.float32), "offset": offset.astype(np.float32), "weight": weight.astype(np.float32)}
    (single,) = run("MMCVDeformConv2d", feeds, **attrs)
    assert_rounded_from_float32(half, single)


def test_deform_conv_equals_mmcvs_node_with_two_padding_values() -> None:
    config = DEFORM_CONFIGS[1]
    x, offset, weight = deform_case(np.random.default_rng(3), *config)
    stride, padding, dilation, groups, dg = config[6:]
    feeds = {"input": x, "offset": offset, "weight": weight}
    (got,) = run("MMCVDeformConv2d", feeds, **mmdeploy_deform_attributes(stride, padding, dilation, groups, dg))
    model = make_model(
        "MMCVDeformConv2d",
        "mmcv",
        [(k, v.dtype, v.ndim) for k, v in feeds.items()],
        ["output"],
        stride=list(stride),
        padding=list(padding),
        dilation=list(dilation),
        groups=groups,
        deform_groups=dg,
    )
    (mmcv,) = session(model).run(None, feeds)
    np.testing.assert_array_equal(got, mmcv)


def test_deform_conv_defaults_empty_batch_and_nan_offsets() -> None:
    rng = np.random.default_rng(4)
    x, offset, weight = deform_case(rng, 2, 2, 5, 5, 3, (3, 3), (1, 1), (0, 0), (1, 1), 1, 1)
    (got,) = run("MMCVDeformConv2d", {"input": x, "offset": offset, "weight": weight})  # every attribute defaulted
    expected = references.deform_conv2d(x, offset, weight, None, None, (1, 1), (0, 0), (1, 1), 1, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    (empty,) = run("MMCVDeformConv2d", {"input": x[:0], "offset": offset[:0], "weight": weight})
    assert empty.shape == (0, 3, 3, 3)
    offset[0, :, 1, 1] = np.nan  # every tap of one output position: its samples read 0
    (got,) = run("MMCVDeformConv2d", {"input": x, "offset": offset, "weight": weight})
    assert got[0, :, 1, 1].tolist() == [0.0, 0.0, 0.0]
    assert np.isfinite(got).all()


@pytest.mark.parametrize(
    ("padding", "message"),
    [
        ([1, 2], r"attribute 'padding' must be \[pad_h, pad_h, pad_w, pad_w\] as mmdeploy writes it, got 2 values"),
        ([1, 2, 1, 2], r"attribute 'padding' must be .* as mmdeploy writes it, got 4 values with unequal pairs"),
        ([-1, -1, 0, 0], r"attribute 'padding' must be non-negative"),
    ],
)
def test_deform_conv_bad_padding_is_an_error(padding, message) -> None:
    x, offset, weight = deform_case(np.random.default_rng(5), 1, 2, 5, 5, 2, (3, 3), (1, 1), (1, 1), (1, 1), 1, 1)
    with pytest.raises(Exception, match=r"mmdeploy\.MMCVDeformConv2d: " + message):
        run("MMCVDeformConv2d", {"input": x, "offset": offset, "weight": weight}, padding=padding)


def test_deform_conv_offset_of_the_plugins_size_is_an_error() -> None:
    """Padding both axes by ph, as the plugin did, gives another output width than the offset's."""
    x, offset, weight = deform_case(np.random.default_rng(6), 1, 2, 5, 5, 2, (3, 3), (1, 1), (1, 0), (1, 1), 1, 1)
    wrong = np.zeros((1, 18, 5, 5), np.float32)  # what padding (1, 1) would need
    assert offset.shape == (1, 18, 5, 3)
    with pytest.raises(
        Exception,
        match=r"mmdeploy\.MMCVDeformConv2d: input 'offset' must have shape \[1, 18, 5, 3\] .*got \[1, 18, 5, 5\]",
    ):
        run("MMCVDeformConv2d", {"input": x, "offset": wrong, "weight": weight}, padding=[1, 1, 0, 0])


# --------------------------------------------------------------------------- GatherTopk


def gather_topk_reference(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """out[a..., k, c...] = x[a..., indices[a..., k], c...], one row at a time."""
    lead = indices.shape[:-1]
    out = np.empty((*indices.shape, *x.shape[indices.ndim :]), x.dtype)
    for a in np.ndindex(*lead):
        for k in range(indices.shape[-1]):
            out[a + (k,)] = x[a + (indices[a + (k,)],)]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("trailing", [(), (4,), (3, 2)])
def test_gather_topk(dtype, trailing) -> None:
    rng = np.random.default_rng(7)
    x = (rng.normal(size=(3, 10, *trailing)) * 100).astype(dtype)
    indices = np.stack([rng.permutation(10)[:6] for _ in range(3)]).astype(np.int64)
    indices[1, 2] = indices[1, 3]  # repeats are fine
    (got,) = run("GatherTopk", {"input": x, "indices": indices})
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, gather_topk_reference(x, indices))


@pytest.mark.parametrize(
    ("lead", "rows", "picks", "trailing"),
    [
        ((), 7, 5, ()),  # rank-1 indices: no batch dim
        ((), 7, 3, (2, 3)),
        ((2, 3), 9, 4, ()),
        ((2, 3), 9, 4, (5,)),
        ((2, 1, 3), 6, 6, (2, 2)),
        ((4, 2), 5, 0, (3,)),  # no picks
        ((0, 3), 5, 2, (3,)),  # an empty batch dim
    ],
)
def test_gather_topk_takes_any_number_of_leading_batch_dims(lead, rows, picks, trailing) -> None:
    """As mmdeploy's plugin: the indices' leading dims are batch dims shared with the input, and the
    output has the indices' shape followed by the input's trailing dims."""
    rng = np.random.default_rng(sum(lead) + rows + picks)
    x = rng.normal(size=(*lead, rows, *trailing)).astype(np.float32)
    indices = rng.integers(0, rows, (*lead, picks)).astype(np.int64)
    (got,) = run("GatherTopk", {"input": x, "indices": indices})
    assert got.shape == (*lead, picks, *trailing)
    np.testing.assert_array_equal(got, gather_topk_reference(x, indices))
    # The same as numpy's take_along_axis with the indices broadcast over the trailing dims.
    along = indices.reshape(*indices.shape, *(1,) * len(trailing))
    np.testing.assert_array_equal(got, np.take_along_axis(x, along, axis=len(lead)))


def test_gather_topk_as_mmdet_uses_it_after_topk() -> None:
    """bbox_pred [B, N, 4] and scores [B, N, C] gathered with TopK's int64 indices of the max score."""
    rng = np.random.default_rng(8)
    scores = rng.random((2, 50, 3)).astype(np.float32)
    boxes = rng.random((2, 50, 4)).astype(np.float32)
    topk = np.argsort(-scores.max(-1), axis=1, kind="stable")[:, :7].astype(np.int64)
    (got_scores,) = run("GatherTopk", {"input": scores, "indices": topk})
    (got_boxes,) = run("GatherTopk", {"input": boxes, "indices": topk})
    np.testing.assert_array_equal(got_scores, np.take_along_axis(scores, topk[:, :, None], 1))
    np.testing.assert_array_equal(got_boxes, np.take_along_axis(boxes, topk[:, :, None], 1))


def test_gather_topk_nan_empty_and_large() -> None:
    x = np.array([[[np.nan, 1.0], [np.inf, -0.0]]], np.float32)
    (got,) = run("GatherTopk", {"input": x, "indices": np.array([[1, 0, 1]], np.int64)})
    np.testing.assert_array_equal(got, x[0][[1, 0, 1]][None])
    (empty_k,) = run("GatherTopk", {"input": x, "indices": np.zeros((1, 0), np.int64)})
    assert empty_k.shape == (1, 0, 2)
    (empty_b,) = run("GatherTopk", {"input": x[:0], "indices": np.zeros((0, 4), np.int64)})
    assert empty_b.shape == (0, 4, 2)
    (empty_rows,) = run("GatherTopk", {"input": np.zeros((1, 3, 0), np.float32), "indices": np.array([[2]])})
    assert empty_rows.shape == (1, 1, 0)
    rng = np.random.default_rng(9)
    big = rng.normal(size=(4, 3000, 85)).astype(np.float32)  # several parallel ranges
    indices = rng.integers(0, 3000, (4, 1000)).astype(np.int64)
    (got,) = run("GatherTopk", {"input": big, "indices": indices})
    np.testing.assert_array_equal(got, gather_topk_reference(big, indices))


@pytest.mark.parametrize(
    ("x_shape", "indices", "message"),
    [
        ((2, 5, 3), [[0, 5], [1, 1]], r"input 'indices' \[2, 2\] holds 5 at \[0, 1\], outside \[0, N = 5\)"),
        ((2, 5, 3), [[0, 1], [-1, 1]], r"input 'indices' \[2, 2\] holds -1 at \[1, 0\]"),
        (
            (2, 0, 3),
            [[0], [0]],
            r"input 'indices' \[2, 1\] holds 0 at \[0, 0\], outside \[0, N = 0\) of input 'input' \[2, 0, 3\]",
        ),
        (
            (2, 5, 3),
            [[0, 1]],
            r"input 'indices' \[1, 2\] must have the leading dims of input 'input' \[2, 5, 3\]",
        ),
        (
            (2, 3, 5),
            np.zeros((2, 2, 1), np.int64),
            r"input 'indices' \[2, 2, 1\] must have the leading dims of input 'input' \[2, 3, 5\]",
        ),
        ((2, 3, 5), [[[0, 9], [0, 0], [0, 0]]] * 2, r"input 'indices' \[2, 3, 2\] holds 9 at \[0, 0, 1\]"),
        ((2, 5, 3), np.int64(0), r"input 'indices' must have rank 1 or more \(\[A\.\.\., K\]\), got shape \[\]"),
        (
            (5,),
            [[0, 1]],
            r"input 'input' \[5\] must have rank 2 or more \(\[A\.\.\., N, \.\.\.\], A\.\.\. the leading dims of "
            r"input 'indices' \[1, 2\]\)",
        ),
    ],
)
def test_gather_topk_bad_inputs_are_errors(x_shape, indices, message) -> None:
    x = np.zeros(x_shape, np.float32)
    with pytest.raises(Exception, match=r"mmdeploy\.GatherTopk: " + message):
        run("GatherTopk", {"input": x, "indices": np.array(indices, np.int64)})


# --------------------------------------------------------------------------- GridPriorsTRT


def grid_priors_reference(base: np.ndarray, h: int, w: int, stride_h: int, stride_w: int) -> np.ndarray:
    """mmdet's AnchorGenerator.single_level_grid_priors, one anchor at a time."""
    t = base.dtype.type
    out = []
    for y in range(h):
        for x in range(w):
            for anchor in base:
                sx, sy = t(x) * t(stride_w), t(y) * t(stride_h)
                out.append([anchor[0] + sx, anchor[1] + sy, anchor[2] + sx, anchor[3] + sy])
    return np.array(out, base.dtype).reshape(-1, 4)


def grid_priors_feeds(base: np.ndarray, h: int, w: int) -> dict[str, np.ndarray]:
    """As the exporter writes them: ConstantOfShape(int64 0) of [H] and [W] carry the size."""
    return {"base_anchors": base, "feat_h": np.zeros(h, np.int64), "feat_w": np.zeros(w, np.int64)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("h", "w", "stride_h", "stride_w"), [(4, 5, 8, 16), (1, 1, 4, 4), (7, 3, 32, 8), (50, 80, 8, 8)]
)
def test_grid_priors(dtype, h, w, stride_h, stride_w) -> None:
    base = np.array([[-22.6, -11.3, 22.6, 11.3], [-16, -16, 16, 16], [-11.3, -22.6, 11.3, 22.6]], dtype)
    (got,) = run("GridPriorsTRT", grid_priors_feeds(base, h, w), stride_h=stride_h, stride_w=stride_w)
    assert got.dtype == dtype and got.shape == (h * w * 3, 4)
    np.testing.assert_array_equal(got, grid_priors_reference(base, h, w, stride_h, stride_w))


def test_grid_priors_defaults_empty_nan_and_ignored_values() -> None:
    base = np.array([[0, 0, 4, 4], [np.nan, 1, 2, 3]], np.float32)
    feeds = grid_priors_feeds(base, 2, 3)
    feeds["feat_h"] += 7  # only the length is read
    (got,) = run("GridPriorsTRT", feeds)  # strides default to 1
    np.testing.assert_array_equal(got, grid_priors_reference(base, 2, 3, 1, 1))
    assert np.isnan(got[1::2, 0]).all() and not np.isnan(got[0::2]).any()
    for h, w, anchors in ((0, 3, 2), (2, 0, 2), (2, 3, 0)):
        (empty,) = run("GridPriorsTRT", grid_priors_feeds(base[:anchors], h, w), stride_h=4, stride_w=4)
        assert empty.shape == (0, 4)


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        (
            {"base_anchors": np.zeros((3, 5), np.float32)},
            r"input 'base_anchors' must have shape \[A, 4\], got \[3, 5\]",
        ),
        ({"base_anchors": np.zeros(4, np.float32)}, r"input 'base_anchors' must have rank 2, got shape \[4\]"),
        ({"feat_h": np.zeros((2, 2), np.int64)}, r"input 'feat_h' must have rank 1, got shape \[2, 2\]"),
    ],
)
def test_grid_priors_bad_inputs_are_errors(feeds, message) -> None:
    base = grid_priors_feeds(np.zeros((3, 4), np.float32), 2, 2)
    with pytest.raises(Exception, match=r"mmdeploy\.GridPriorsTRT: " + message):
        run("GridPriorsTRT", {**base, **feeds}, stride_h=8, stride_w=8)


# --------------------------------------------------------------------------- TRTBicubicInterpolate


def cubic_weights(t) -> list:
    """Keys' cubic convolution with A = -0.75, PyTorch's get_cubic_upsample_coefficients."""
    a = type(t)(-0.75)

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def bicubic_reference(x: np.ndarray, scale_h: float, scale_w: float, align_corners: bool) -> np.ndarray:
    """F.interpolate(x, scale_factor=(scale_h, scale_w), mode='bicubic', align_corners=...)
    point by point, coordinates in x's dtype, sums in float64; a same-size output is a copy
    (PyTorch's CUDA kernel and the plugin)."""
    t = x.dtype.type
    n, c, h, w = x.shape
    out_h, out_w = math.floor(h * scale_h), math.floor(w * scale_w)
    if (out_h, out_w) == (h, w):
        return x.copy()

    def taps(size, out_size, scale):
        if align_corners:
            ratio = t(size - 1) / t(out_size - 1) if out_size > 1 else t(0)
        else:
            ratio = t(1.0 / scale)
        result = []
        for i in range(out_size):
            src = ratio * t(i) if align_corners else ratio * (t(i) + t(0.5)) - t(0.5)
            first = math.floor(src)
            weights = cubic_weights(t(src - t(first)))
            result.append([(min(max(first - 1 + k, 0), size - 1), float(weights[k])) for k in range(4)])
        return result

    rows, columns = taps(h, out_h, scale_h), taps(w, out_w, scale_w)
    out = np.zeros((n, c, out_h, out_w))
    with np.errstate(invalid="ignore", over="ignore"):
        for b in range(n):
            for ch in range(c):
                plane = x[b, ch].astype(np.float64)
                for oy, row_taps in enumerate(rows):
                    for ox, column_taps in enumerate(columns):
                        out[b, ch, oy, ox] = sum(
                            wy * sum(wx * plane[iy, ix] for ix, wx in column_taps) for iy, wy in row_taps
                        )
    return out.astype(x.dtype)


BICUBIC_SCALES = [(2.0, 2.0), (3.0, 2.0), (1.5, 2.5), (0.5, 0.75), (1.0, 2.0)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("scale", BICUBIC_SCALES)
def test_bicubic(dtype, align_corners, scale) -> None:
    x = np.random.default_rng(10).normal(size=(2, 3, 5, 6)).astype(dtype)
    (got,) = run("TRTBicubicInterpolate", {"input": x}, scale_factor=list(scale), align_corners=align_corners)
    expected = bicubic_reference(x, *scale, bool(align_corners))
    assert got.dtype == dtype and got.shape == expected.shape
    tolerance = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


def test_bicubic_align_corners_left_out_means_false() -> None:
    """mmdeploy leaves align_corners out when the call passed None, which PyTorch reads as False."""
    x = np.random.default_rng(11).normal(size=(1, 2, 4, 4)).astype(np.float32)
    (got,) = run("TRTBicubicInterpolate", {"input": x}, scale_factor=[2.0, 2.0])
    np.testing.assert_allclose(got, bicubic_reference(x, 2.0, 2.0, False), rtol=2e-5, atol=2e-5)


def test_bicubic_size_from_a_float32_scale_factor() -> None:
    """The rewrite turns size=(7, 11) into scale factors 7/3 and 11/4 (Python floats); stored as
    float32, 3 * float32(7/3) is just below 7, and the output must still be 7 high."""
    assert 3 * float(np.float32(7 / 3)) < 7
    x = np.random.default_rng(12).normal(size=(1, 1, 3, 4)).astype(np.float32)
    (got,) = run("TRTBicubicInterpolate", {"input": x}, scale_factor=[7 / 3, 11 / 4], align_corners=0)
    assert got.shape == (1, 1, 7, 11)
    expected = bicubic_reference(x, 7 / 3, 11 / 4, False)[..., :7, :11]
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)


def test_bicubic_same_size_copies_nan_and_inf_stay_local() -> None:
    x = np.random.default_rng(13).normal(size=(1, 1, 6, 6)).astype(np.float32)
    x[0, 0, 2, 3] = np.inf
    x[0, 0, 4, 1] = np.nan
    (same,) = run("TRTBicubicInterpolate", {"input": x}, scale_factor=[1.0, 1.0], align_corners=0)
    np.testing.assert_array_equal(same, x)
    (got,) = run("TRTBicubicInterpolate", {"input": x}, scale_factor=[2.0, 2.0], align_corners=1)
    expected = bicubic_reference(x, 2.0, 2.0, True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = np.isfinite(expected)
    assert finite[0, 0, 0, 0] and finite[0, 0, -1, -1] and not finite.all()
    np.testing.assert_allclose(got[finite], expected[finite], rtol=2e-5, atol=2e-5)


def test_bicubic_empty_inputs_and_outputs() -> None:
    x = np.ones((0, 3, 4, 4), np.float32)
    (got,) = run("TRTBicubicInterpolate", {"input": x}, scale_factor=[2.0, 2.0], align_corners=0)
    assert got.shape == (0, 3, 8, 8)
    (got,) = run("TRTBicubicInterpolate", {"input": np.ones((1, 1, 3, 0), np.float32)}, scale_factor=[2.0, 2.0])
    assert got.shape == (1, 1, 6, 0)
    (got,) = run("TRTBicubicInterpolate", {"input": np.ones((1, 1, 3, 3), np.float32)}, scale_factor=[0.2, 1.0])
    assert got.shape == (1, 1, 0, 3)


def test_bicubic_large_image_in_parallel() -> None:
    x = np.random.default_rng(14).normal(size=(1, 2, 64, 48)).astype(np.float32)
    (got,) = run("TRTBicubicInterpolate", {"input": x}, scale_factor=[2.0, 3.0], align_corners=0)
    sub = bicubic_reference(x[:, :1, :8, :], 2.0, 3.0, False)  # the top rows depend only on the top rows
    np.testing.assert_allclose(got[:, :1, :12], sub[:, :, :12], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"scale_factor": [2.0]}, r"attribute 'scale_factor' must have 2 values \(scale_h, scale_w\), got 1"),
        ({"scale_factor": [2.0, -1.0]}, r"attribute 'scale_factor' values must be finite and positive, got 2, -1"),
        ({"scale_factor": [float("nan"), 1.0]}, r"attribute 'scale_factor' values must be finite and positive"),
        ({"scale_factor": [0.0, 1.0]}, r"attribute 'scale_factor' values must be finite and positive"),
        ({"scale_factor": 2.0}, r"attribute 'scale_factor' must be of type floats, got float"),
        ({"align_corners": 1}, r"attribute 'scale_factor' \(floats\) is required"),
        (
            {"scale_factor": [1e30, 1.0]},
            r"the output H = floor\(4 \* 1e\+30\) of input 'input' \[1, 1, 4, 4\] is too large",
        ),
    ],
)
def test_bicubic_bad_attributes_are_errors(attributes, message) -> None:
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(Exception, match=r"mmdeploy\.TRTBicubicInterpolate: " + message):
        run("TRTBicubicInterpolate", {"input": x}, check_encoding=False, **attributes)


def test_bicubic_bad_rank_is_an_error() -> None:
    with pytest.raises(
        Exception, match=r"mmdeploy\.TRTBicubicInterpolate: input 'input' must have rank 4, got shape \[1, 4, 4\]"
    ):
        run("TRTBicubicInterpolate", {"input": np.zeros((1, 4, 4), np.float32)}, scale_factor=[2.0, 2.0])


# --------------------------------------------------------------------------- TRTInstanceNormalization


def instance_norm_reference(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    out = np.empty_like(x64)
    for b in range(x.shape[0]):
        for c in range(x.shape[1]):
            values = x64[b, c]
            mean = values.mean()
            variance = ((values - mean) ** 2).mean()
            out[b, c] = (values - mean) / math.sqrt(variance + epsilon) * float(scale[c]) + float(bias[c])
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(2, 4, 30), (3, 2, 5, 7), (2, 3, 2, 3, 4), (4, 3)])
def test_instance_norm(dtype, shape) -> None:
    rng = np.random.default_rng(15)
    x = (rng.normal(size=shape) * 3 + 5).astype(dtype)
    scale, bias = rng.normal(size=shape[1]).astype(dtype), rng.normal(size=shape[1]).astype(dtype)
    (got,) = run("TRTInstanceNormalization", {"X": x, "scale": scale, "bias": bias}, epsilon=1e-5)
    assert got.dtype == dtype and got.shape == x.shape
    tolerance = {np.float32: 1e-5, np.float64: 1e-12, np.float16: 4e-3}[dtype]
    expected = instance_norm_reference(x, scale, bias, 1e-5)
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tolerance, atol=tolerance * 4)


def test_instance_norm_float16_rounds_the_float32_result() -> None:
    rng = np.random.default_rng(22)
    x = (rng.normal(size=(2, 3, 500)) * 4 + 100).astype(np.float16)
    scale, bias = rng.normal(size=3).astype(np.float16), rng.normal(size=3).astype(np.float16)
    (half,) = run("TRTInstanceNormalization", {"X": x, "scale": scale, "bias": bias}, epsilon=1e-5)
    f32 = {"X": x.astype(np.float32), "scale": scale.astype(np.float32), "bias": bias.astype(np.float32)}
    (single,) = run("TRTInstanceNormalization", f32, epsilon=1e-5)
    assert_rounded_from_float32(half, single)


def test_instance_norm_as_mmdeploys_group_norm() -> None:
    """The group_norm symbolic: X reshaped to [N, G, -1], scale ones and bias zeros of the input's
    type, then the affine weight and bias per channel (ordinary nodes, done here in numpy)."""
    rng = np.random.default_rng(16)
    n, c, h, w, groups = 2, 6, 4, 5, 3
    x = rng.normal(size=(n, c, h, w)).astype(np.float32)
    gamma, beta = rng.normal(size=c).astype(np.float32), rng.normal(size=c).astype(np.float32)
    ones, zeros = np.ones(groups, np.float32), np.zeros(groups, np.float32)
    (normed,) = run(
        "TRTInstanceNormalization", {"X": x.reshape(n, groups, -1), "scale": ones, "bias": zeros}, epsilon=1e-5
    )
    got = normed.reshape(x.shape) * gamma[:, None, None] + beta[:, None, None]
    grouped = x.astype(np.float64).reshape(n, groups, -1)
    mean, var = grouped.mean(-1, keepdims=True), grouped.var(-1, keepdims=True)
    expected = ((grouped - mean) / np.sqrt(var + 1e-5)).reshape(x.shape) * gamma[:, None, None] + beta[:, None, None]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_instance_norm_default_epsilon_constant_channels_nan_and_empty() -> None:
    x = np.array([[[1.0, 1.0, 1.0], [1.0, np.nan, 2.0], [0.0, 3.0, 6.0]]], np.float32)
    scale, bias = np.array([2.0, 1.0, 1.0], np.float32), np.array([0.5, 0.0, 0.0], np.float32)
    (got,) = run("TRTInstanceNormalization", {"X": x, "scale": scale, "bias": bias})  # epsilon defaults to 1e-5
    np.testing.assert_array_equal(got[0, 0], [0.5, 0.5, 0.5])  # zero variance: the bias
    assert np.isnan(got[0, 1]).all()  # NaN spreads over its channel only
    np.testing.assert_allclose(got[0, 2], instance_norm_reference(x[:, 2:], scale[2:], bias[2:], 1e-5)[0, 0], rtol=1e-6)
    for shape in ((0, 3, 4), (2, 0, 4), (2, 3, 0)):
        (empty,) = run(
            "TRTInstanceNormalization",
            {
                "X": np.zeros(shape, np.float32),
                "scale": np.ones(shape[1], np.float32),
                "bias": np.zeros(shape[1], np.float32),
            },
        )
        assert empty.shape == shape


@pytest.mark.parametrize(
    ("x_shape", "channels", "message"),
    [
        ((2, 3, 4), 4, r"input 'scale' must have shape \[C\] = \[3\], got \[4\]"),
        ((3,), 3, r"input 'X' must have rank 2 or more \(\[N, C, \.\.\.\]\), got shape \[3\]"),
    ],
)
def test_instance_norm_bad_inputs_are_errors(x_shape, channels, message) -> None:
    feeds = {
        "X": np.zeros(x_shape, np.float32),
        "scale": np.ones(channels, np.float32),
        "bias": np.zeros(3, np.float32),
    }
    with pytest.raises(Exception, match=r"mmdeploy\.TRTInstanceNormalization: " + message):
        run("TRTInstanceNormalization", feeds, epsilon=1e-5)


def test_instance_norm_bad_epsilon_is_an_error() -> None:
    feeds = {"X": np.zeros((1, 2, 3), np.float32), "scale": np.ones(2, np.float32), "bias": np.zeros(2, np.float32)}
    with pytest.raises(Exception, match=r"mmdeploy\.TRTInstanceNormalization: attribute 'epsilon' must be finite"):
        run("TRTInstanceNormalization", feeds, epsilon=-1.0)


# --------------------------------------------------------------------------- ScaledDotProductAttentionTRT


def attention_reference(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """mmdeploy's ScaledDotProductAttentionTRT.forward, in float64, one row at a time."""
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    b, nt, e = q.shape
    full_mask = None if mask is None else np.broadcast_to(mask.astype(np.float64), (b, nt, k.shape[1]))
    attn = np.empty((b, nt, k.shape[1]))
    with np.errstate(invalid="ignore"):
        for i in range(b):
            for t in range(nt):
                scores = k64[i] @ (q64[i, t] / math.sqrt(e)) if e else np.zeros(k.shape[1])
                if full_mask is not None:
                    scores = scores + full_mask[i, t]
                shifted = np.exp(scores - scores.max()) if scores.size else scores
                attn[i, t] = shifted / shifted.sum()
    return attn @ v64, attn


def attention_inputs(rng, b, nt, ns, e, ev=None, dtype=np.float32):
    q = rng.normal(size=(b, nt, e)).astype(dtype)
    k = rng.normal(size=(b, ns, e)).astype(dtype)
    v = rng.normal(size=(b, ns, e if ev is None else ev)).astype(dtype)
    return q, k, v


def check_attention(got, expected) -> None:
    for g, x in zip(got, expected):
        assert g.dtype == np.float32 and g.shape == x.shape
        np.testing.assert_allclose(g, x, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize(
    ("b", "nt", "ns", "e", "ev"),
    [
        (2, 5, 7, 8, 8),
        (6, 3, 4, 16, 5),
        (1, 1, 1, 1, 1),
        (3, 40, 30, 64, 64),
        (40, 100, 100, 8, 8),
        # rows of keys around and past the widest level's 16 lanes, and ViT-B/16's 197
        (2, 3, 15, 8, 8),
        (2, 3, 17, 8, 8),
        (2, 4, 197, 16, 16),
    ],
)
def test_attention_without_mask(b, nt, ns, e, ev) -> None:
    q, k, v = attention_inputs(np.random.default_rng(17), b, nt, ns, e, ev)
    got = run("ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v})  # three inputs, as written
    check_attention(got, attention_reference(q, k, v))
    np.testing.assert_allclose(got[1].sum(-1), 1, rtol=1e-5)


@pytest.mark.parametrize("mask_shape", [(5, 7), (2, 5, 7), (1, 5, 7), (2, 1, 7), (7,), (), (5, 1)])
def test_attention_with_additive_mask(mask_shape) -> None:
    rng = np.random.default_rng(18)
    q, k, v = attention_inputs(rng, 2, 5, 7, 8)
    mask = np.asarray(rng.normal(size=mask_shape) * 3, np.float32)
    if mask.ndim:
        mask.reshape(-1)[:: max(mask.size // 3, 1)] = -np.inf  # forbidden positions
    got = run("ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v, "attn_mask": mask})
    check_attention(got, attention_reference(q, k, v, mask))


def test_attention_with_a_mask_per_item_over_several_slabs() -> None:
    """Large enough that the weights are computed in several slabs of batch items."""
    rng = np.random.default_rng(23)
    q, k, v = attention_inputs(rng, 30, 100, 100, 8)
    mask = (rng.normal(size=(30, 100, 100)) * 2).astype(np.float32)
    got = run("ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v, "attn_mask": mask})
    check_attention(got, attention_reference(q, k, v, mask))


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_many_small_items_in_a_task_each(threads: int) -> None:
    """At least four items per core: each item's products and softmax run as one task."""
    rng = np.random.default_rng(24)
    items = 4 * (os.cpu_count() or 1) + 3
    q, k, v = attention_inputs(rng, items, 9, 21, 8, 5)
    mask = (rng.normal(size=(items, 1, 21)) * 2).astype(np.float32)
    feeds = {"query": q, "key": k, "value": v, "attn_mask": mask}
    model = make_model(
        "ScaledDotProductAttentionTRT",
        "mmdeploy",
        [(n, a.dtype, a.ndim) for n, a in feeds.items()],
        OUTPUTS["ScaledDotProductAttentionTRT"],
    )
    check_attention(session(model, threads).run(None, feeds), attention_reference(q, k, v, mask))


def test_attention_fully_masked_rows_and_nan_give_nan() -> None:
    rng = np.random.default_rng(19)
    q, k, v = attention_inputs(rng, 2, 3, 4, 8)
    mask = np.zeros((3, 4), np.float32)
    mask[1] = -np.inf
    q[1, 2, 0] = np.nan
    output, attn = run("ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v, "attn_mask": mask})
    nan_rows = np.zeros((2, 3), bool)
    nan_rows[:, 1] = True
    nan_rows[1, 2] = True
    np.testing.assert_array_equal(np.isnan(attn).all(-1), nan_rows)
    np.testing.assert_array_equal(np.isnan(output).all(-1), nan_rows)
    assert not np.isnan(attn[~nan_rows]).any()
    expected = attention_reference(q, k, v, mask)
    np.testing.assert_allclose(attn[~nan_rows], expected[1][~nan_rows], rtol=2e-5, atol=2e-6)


def test_attention_empty_dims() -> None:
    rng = np.random.default_rng(20)
    q, k, v = attention_inputs(rng, 2, 3, 0, 4)
    output, attn = run("ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v})
    assert attn.shape == (2, 3, 0) and output.shape == (2, 3, 4) and not output.any()
    q, k, v = attention_inputs(rng, 0, 3, 5, 4)
    output, attn = run("ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v})
    assert output.shape == (0, 3, 4) and attn.shape == (0, 3, 5)
    q, k, v = attention_inputs(rng, 2, 3, 5, 0, 4)  # E = 0: every score 0, uniform weights
    output, attn = run("ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v})
    np.testing.assert_allclose(attn, np.full((2, 3, 5), 0.2), rtol=1e-6)
    np.testing.assert_allclose(output, np.broadcast_to(v.mean(1, keepdims=True), (2, 3, 4)), rtol=1e-5, atol=1e-6)
    q, k, v = attention_inputs(rng, 2, 3, 5, 4, 0)
    output, attn = run("ScaledDotProductAttentionTRT", {"query": q, "key": k, "value": v})
    assert output.shape == (2, 3, 0)
    check_attention([attn], [attention_reference(q, k, v)[1]])


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"key": (2, 7, 9)}, r"input 'key' \[2, 7, 9\] must be \[B, Ns, E\] with B and E of input 'query' \[2, 5, 8\]"),
        ({"key": (3, 7, 8)}, r"input 'key' \[3, 7, 8\] must be \[B, Ns, E\]"),
        (
            {"value": (2, 6, 8)},
            r"input 'value' \[2, 6, 8\] must be \[B, Ns, Ev\] with B of input 'query' \[2, 5, 8\] "
            r"and Ns of input 'key' \[2, 7, 8\]",
        ),
        ({"query": (2, 5)}, r"input 'query' must have rank 3, got shape \[2, 5\]"),
        ({"attn_mask": (5, 6)}, r"input 'attn_mask' \[5, 6\] does not broadcast to \[B, Nt, Ns\] = \[2, 5, 7\]"),
        ({"attn_mask": (3, 5, 7)}, r"input 'attn_mask' \[3, 5, 7\] does not broadcast"),
        ({"attn_mask": (1, 2, 5, 7)}, r"input 'attn_mask' must have rank 3 or less"),
    ],
)
def test_attention_bad_inputs_are_errors(shapes, message) -> None:
    base = {"query": (2, 5, 8), "key": (2, 7, 8), "value": (2, 7, 8), "attn_mask": None}
    feeds = {name: None if shape is None else np.zeros(shape, np.float32) for name, shape in {**base, **shapes}.items()}
    with pytest.raises(Exception, match=r"mmdeploy\.ScaledDotProductAttentionTRT: " + message):
        run("ScaledDotProductAttentionTRT", feeds)


# --------------------------------------------------------------------------- a whole exported graph


def test_mmdet_dense_head_graph_as_mmdeploy_exports_it_for_tensorrt() -> None:
    """Opset 11, IR version 6, as mmdeploy writes a dense head's post-processing for TensorRT:
    the anchors from GridPriorsTRT, sized by ConstantOfShape of the feature map's dims; TopK of
    the best class score, and GatherTopk of the boxes, scores and anchors by its int64 indices."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import ortops

    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    base = np.array([[-22.6, -11.3, 22.6, 11.3], [-16, -16, 16, 16], [-11.3, -22.6, 11.3, 22.6]], np.float32)
    zero = helper.make_tensor("zero", i64, [1], [0])
    nodes = [
        helper.make_node("Shape", ["features"], ["shape"], "Shape_0"),
        helper.make_node("Gather", ["shape", "two"], ["feat_h"], "Gather_1", axis=0),
        helper.make_node("Gather", ["shape", "three"], ["feat_w"], "Gather_2", axis=0),
        helper.make_node("Unsqueeze", ["feat_h"], ["feat_h_1d"], "Unsqueeze_3", axes=[0]),
        helper.make_node("Unsqueeze", ["feat_w"], ["feat_w_1d"], "Unsqueeze_4", axes=[0]),
        helper.make_node("ConstantOfShape", ["feat_h_1d"], ["zero_h"], "ConstantOfShape_5", value=zero),
        helper.make_node("ConstantOfShape", ["feat_w_1d"], ["zero_w"], "ConstantOfShape_6", value=zero),
        helper.make_node(
            "GridPriorsTRT",
            ["base_anchors", "zero_h", "zero_w"],
            ["priors"],
            "GridPriorsTRT_7",
            domain="mmdeploy",
            stride_h=8,
            stride_w=8,
        ),
        helper.make_node("Unsqueeze", ["priors"], ["batched_priors"], "Unsqueeze_8", axes=[0]),
        helper.make_node("ReduceMax", ["scores"], ["max_scores"], "ReduceMax_9", axes=[-1], keepdims=0),
        helper.make_node("TopK", ["max_scores", "k"], ["top_scores", "top_indices"], "TopK_10", axis=-1),
        helper.make_node("GatherTopk", ["boxes", "top_indices"], ["kept_boxes"], "GatherTopk_11", domain="mmdeploy"),
        helper.make_node("GatherTopk", ["scores", "top_indices"], ["kept_scores"], "GatherTopk_12", domain="mmdeploy"),
    ]
    initializers = [
        numpy_helper.from_array(base, "base_anchors"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array(3, np.int64), "three"),
        numpy_helper.from_array(np.array([20], np.int64), "k"),
    ]
    graph = helper.make_graph(
        nodes,
        "exported",
        [
            helper.make_tensor_value_info("features", f, [1, 8, "h", "w"]),
            helper.make_tensor_value_info("scores", f, [1, "n", 4]),
            helper.make_tensor_value_info("boxes", f, [1, "n", 4]),
        ],
        [
            helper.make_tensor_value_info("batched_priors", f, [1, "p", 4]),
            helper.make_tensor_value_info("kept_boxes", f, [1, 20, 4]),
            helper.make_tensor_value_info("kept_scores", f, [1, 20, 4]),
            helper.make_tensor_value_info("top_scores", f, [1, 20]),
        ],
        initializer=initializers,
    )
    model = exported_model(graph, "mmdeploy")
    ortops.register_onnx_schemas()
    onnx.checker.check_model(model)
    assert ortops.check_model(model) == []
    rng = np.random.default_rng(24)
    h, w = 5, 7
    n = h * w * len(base)
    feeds = {
        "features": rng.normal(size=(1, 8, h, w)).astype(np.float32),
        "scores": rng.random((1, n, 4)).astype(np.float32),
        "boxes": rng.random((1, n, 4)).astype(np.float32),
    }
    priors, boxes, scores, top = session(model, cpu_fallback=True).run(None, feeds)
    np.testing.assert_array_equal(priors[0], grid_priors_reference(base, h, w, 8, 8))
    order = np.argsort(-feeds["scores"].max(-1)[0], kind="stable")[:20]
    np.testing.assert_array_equal(top[0], feeds["scores"].max(-1)[0][order])
    np.testing.assert_array_equal(boxes[0], feeds["boxes"][0][order])
    np.testing.assert_array_equal(scores[0], feeds["scores"][0][order])
