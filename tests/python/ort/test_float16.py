"""float16 kernels: each against the float32 kernel of the same op on the same values, upcast.

The float16 kernels load halves as float32, compute as the float32 kernel does (GroupNorm in
float64, as its float32 kernel), and round once when they store. So:

- ops that only select or copy elements (CornerPool, CumMax, CumMin) must give exactly the
  float32 kernel's values (bit for bit: the selected input half), and the same indices;
- arithmetic ops must give the float32 kernel's result rounded to float16: this checks within
  one float16 ulp of it (a relative 2^-10, about 1e-3; 2^-24 absolute near zero), the slack
  covering only that a float64 result rounded via float32 can land one ulp from one rounded
  directly. A kernel that accumulated in float16 would miss this by far.

Values are drawn in the float16 range (and NaN/infinity where the op defines them); every
op is also run on empty inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

import ortops

from ortest import run

F16 = np.float16


def halves(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    """Normal values times ``scale``, as float16."""
    return (rng.normal(size=shape) * scale).astype(F16)


def with_specials(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``x`` with a NaN, +inf and -inf at random places (when it has room for them)."""
    x = x.copy()
    if x.size > 4:
        x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    return x


def upcast(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: value.astype(np.float32) if value.dtype == F16 else value for name, value in inputs.items()}


def run_both(op: str, domain: str, inputs: dict[str, np.ndarray], outputs: list[str], **attributes):
    """(float16 kernel's outputs, float32 kernel's outputs on the same values upcast)."""
    half = run(op, domain, inputs, outputs, **attributes)
    single = run(op, domain, upcast(inputs), outputs, **attributes)
    for h, s in zip(half, single):
        assert h.shape == s.shape
        assert h.dtype == (F16 if s.dtype == np.float32 else s.dtype)
    return half, single


def assert_rounded(actual: np.ndarray, expected: np.ndarray) -> None:
    """``actual`` (float16) is ``expected`` (float32) rounded to float16, within one float16 ulp;
    NaN where it is NaN, infinities equal."""
    assert actual.dtype == F16 and actual.shape == expected.shape
    with np.errstate(over="ignore"):
        rounded = expected.astype(F16)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(rounded))
    np.testing.assert_array_equal(np.isinf(actual), np.isinf(rounded))
    finite = np.isfinite(rounded)
    np.testing.assert_array_equal(actual[np.isinf(actual)], rounded[np.isinf(rounded)])
    error = np.abs(actual[finite].astype(np.float32) - rounded[finite].astype(np.float32))
    ulp = np.spacing(np.abs(rounded[finite])).astype(np.float32)
    bad = error > ulp
    assert not bad.any(), (
        f"{bad.sum()} of {bad.size} values off by more than one float16 ulp, e.g. "
        f"{actual[finite][bad][:5]} for {expected[finite][bad][:5]}"
    )


def assert_same_halves(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit for bit (one NaN matches any NaN)."""
    assert actual.dtype == expected.dtype == F16
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    keep = ~np.isnan(actual)
    np.testing.assert_array_equal(actual.view(np.uint16)[keep], expected.view(np.uint16)[keep])


# ---------------------------------------------------------------------------- the manifest

FLOAT16_OPS = [
    "AddLayerNorm",  # tests/python/ort/test_add_layer_norm.py checks its values
    "CornerPool",
    "CumMax",
    "CumMin",
    "GroupNorm",
    "GridSample",
    "RoIAlign",
    "RoIAlignRotated",
    "DeformConv2d",
    "MultiScaleDeformableAttention",  # tests/python/ort/test_ms_deform_attn.py checks its values
    "MultiScaleDeformableAttentionFromOffsets",  # and test_ms_deform_attn_from_offsets.py
    "BatchedNMS",
]


@pytest.mark.parametrize("name", FLOAT16_OPS)
def test_manifest_lists_float16(name: str) -> None:
    (op,) = [o for o in ortops.ops() if o.domain == "ortops" and o.name == name]
    for spec in (*op.inputs, *op.outputs):
        if "float32" in spec.types:
            assert "float16" in spec.types, spec


def test_float32_only_compat_rows_stay_float32() -> None:
    for op in ortops.ops():
        if op.compat and op.inputs[0].types == ["float32"]:
            assert all("float16" not in s.types for s in (*op.inputs, *op.outputs)), op.qualified_name


# ---------------------------------------------------------------------------- CornerPool

CORNER_POOL = [("ortops", "CornerPool"), ("mmcv", "MMCVCornerPool")]


@pytest.mark.parametrize("domain,op", CORNER_POOL)
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 2, 6, 1), (2, 1, 4, 1100), (1, 3, 300, 5)])
def test_corner_pool_selects_the_same_halves(domain: str, op: str, mode: int, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(mode)
    x = with_specials(halves(rng, shape), rng)
    # Ties, signed zeros and subnormals too.
    x.reshape(-1)[: x.size // 4] = np.round(x.reshape(-1)[: x.size // 4])
    x.reshape(-1)[-3:] = np.array([-0.0, 6e-8, -6e-8], F16)
    (half,), (single,) = run_both(op, domain, {"input": x}, ["output"], mode=mode)
    assert_same_halves(half, single.astype(F16))
    # And every output is an input value of its own line (the scan copies, never computes).
    assert np.isin(half[~np.isnan(half)], x).all()


@pytest.mark.parametrize("shape", [(0, 2, 3, 3), (1, 0, 3, 3), (1, 2, 0, 3), (1, 2, 3, 0)])
def test_corner_pool_empty(shape: tuple[int, ...]) -> None:
    (half,) = run("CornerPool", "ortops", {"input": np.zeros(shape, F16)}, ["output"], mode=0)
    assert half.shape == shape and half.dtype == F16


# ---------------------------------------------------------------------------- CumMax / CumMin

CUMULATIVE = [("ortops", "CumMax"), ("ortops", "CumMin"), ("mmcv", "cummax"), ("mmcv", "cummin")]


@pytest.mark.parametrize("domain,op", CUMULATIVE)
@pytest.mark.parametrize("shape", [(), (9,), (3, 700), (4, 3, 1100), (2, 1, 3, 5)])
def test_cumulative_gives_the_same_values_and_indices(domain: str, op: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape))
    # Random bit patterns: every exponent, subnormals, both zeros, infinities and NaNs.
    x = rng.integers(0, 1 << 16, shape, dtype=np.uint16).view(F16)
    ties = rng.integers(-3, 4, shape).astype(F16)
    for values in (x, ties):
        for dim in range(-max(len(shape), 1), max(len(shape), 1)):
            (half, half_index), (single, single_index) = run_both(
                op, domain, {"input": values}, ["values", "indices"], dim=dim
            )
            np.testing.assert_array_equal(half_index, single_index)
            assert_same_halves(half, single.astype(F16))
            if values.ndim:  # each value is the input at its index, bit for bit
                axis = dim % values.ndim
                assert_same_halves(half, np.take_along_axis(values, half_index, axis))


def test_cumulative_nan_rules() -> None:
    x = np.array([1.0, np.nan, 2.0, np.nan, 0.0, np.inf], F16)
    values, indices = run("CumMax", "ortops", {"input": x}, ["values", "indices"], dim=0)
    np.testing.assert_array_equal(values, np.array([1, np.nan, np.nan, np.nan, np.nan, np.nan], F16))
    np.testing.assert_array_equal(indices, [0, 1, 1, 3, 3, 3])
    values, indices = run(
        "CumMin", "ortops", {"input": np.array([0.0, -0.0, np.inf, -np.inf], F16)}, ["values", "indices"], dim=0
    )
    np.testing.assert_array_equal(indices, [0, 1, 1, 3])  # -0 ties 0: the later position wins
    assert np.signbit(values[1])


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 2)])
def test_cumulative_empty(shape: tuple[int, ...]) -> None:
    values, indices = run("CumMax", "ortops", {"input": np.zeros(shape, F16)}, ["values", "indices"], dim=-1)
    assert values.shape == indices.shape == shape and values.dtype == F16


# ---------------------------------------------------------------------------- GroupNorm


def group_norm_inputs(rng: np.random.Generator, shape: tuple[int, ...], offset: float = 0.0) -> dict[str, np.ndarray]:
    c = shape[1]
    return {
        "X": (rng.normal(size=shape) * 3 + offset).astype(F16),
        "scale": (rng.random(c) + 0.5).astype(F16),
        "bias": rng.normal(size=c).astype(F16),
    }


@pytest.mark.parametrize("shape", [(2, 6), (1, 6, 7), (3, 6, 4, 5), (2, 6, 2, 3, 2), (2, 8, 64, 64)])
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm_is_the_float32_result_rounded(shape: tuple[int, ...], groups: int) -> None:
    if shape[1] % groups:
        groups = 2
    inputs = group_norm_inputs(np.random.default_rng(groups), shape)
    (half,), (single,) = run_both("GroupNorm", "ortops", inputs, ["Y"], num_groups=groups, epsilon=1e-5)
    assert_rounded(half, single)


def test_group_norm_large_mean() -> None:
    # Groups of 8192 values around 1000: the sums pass float16's range (65504) and the
    # spread is below its resolution there; the statistics must not be taken in float16.
    inputs = group_norm_inputs(np.random.default_rng(3), (2, 4, 64, 64), offset=1000.0)
    (half,), (single,) = run_both("GroupNorm", "ortops", inputs, ["Y"], num_groups=2)
    assert np.isfinite(half).all()
    assert_rounded(half, single)


def test_group_norm_nan_and_inf_spoil_their_group_only() -> None:
    inputs = group_norm_inputs(np.random.default_rng(4), (2, 4, 5, 5))
    inputs["X"][0, 0, 1, 1] = np.nan
    inputs["X"][1, 3, 2, 2] = np.inf
    (half,), (single,) = run_both("GroupNorm", "ortops", inputs, ["Y"], num_groups=2)
    assert np.isnan(half[0, :2]).all() and np.isnan(half[1, 2:]).all()
    assert np.isfinite(half[0, 2:]).all() and np.isfinite(half[1, :2]).all()
    assert_rounded(half, single)


@pytest.mark.parametrize("shape", [(0, 4, 3, 3), (2, 4, 0, 3), (2, 0, 5)])
def test_group_norm_empty(shape: tuple[int, ...]) -> None:
    inputs = {"X": np.zeros(shape, F16), "scale": np.ones(shape[1], F16), "bias": np.zeros(shape[1], F16)}
    (half,) = run("GroupNorm", "ortops", inputs, ["Y"], num_groups=1 if shape[1] == 0 else 2)
    assert half.shape == shape and half.dtype == F16


# ---------------------------------------------------------------------------- GridSample

GRID_SAMPLE = [("ortops", "GridSample"), ("mmcv", "grid_sampler"), ("mmdeploy", "grid_sampler")]


def grid_inputs(rng: np.random.Generator, n: int = 2, c: int = 5, h: int = 9, w: int = 11, out=(6, 7)):
    grid = rng.uniform(-1.3, 1.3, (n, *out, 2))
    # Edges, centres and half-way points (exact in float16), where rounding and padding rules act.
    grid[0, 0, :4] = [[-1, -1], [1, 1], [0, 0], [0.5, -0.5]]
    return {"input": halves(rng, (n, c, h, w), scale=4.0), "grid": grid.astype(F16)}


@pytest.mark.parametrize("domain,op", GRID_SAMPLE)
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_is_the_float32_result_rounded(domain: str, op: str, mode: int, padding: int, align: int) -> None:
    inputs = grid_inputs(np.random.default_rng(mode * 6 + padding * 2 + align))
    attributes = dict(interpolation_mode=mode, padding_mode=padding, align_corners=align)
    (half,), (single,) = run_both(op, domain, inputs, ["output"], **attributes)
    assert_rounded(half, single)


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding", [0, 1, 2])
def test_grid_sample_nan_and_inf(mode: int, padding: int) -> None:
    inputs = grid_inputs(np.random.default_rng(5))
    inputs["grid"][0, 1, :4] = [[np.nan, 0], [0, np.inf], [-np.inf, 0.5], [np.inf, np.inf]]
    inputs["input"][1, 2, 4, 5] = np.nan
    inputs["input"][1, 3, 0, 0] = np.inf
    attributes = dict(interpolation_mode=mode, padding_mode=padding, align_corners=0)
    (half,), (single,) = run_both("GridSample", "ortops", inputs, ["output"], **attributes)
    assert np.isnan(half[0, :, 1, 0]).all()  # a NaN coordinate gives NaN in every channel
    assert_rounded(half, single)


def test_grid_sample_large_values_round_to_infinity() -> None:
    # Values near float16's maximum: sums past 65504 are infinite in float16, as in float32 rounded.
    inputs = grid_inputs(np.random.default_rng(6))
    inputs["input"][:] = np.float16(60000)
    inputs["input"][0, 0, ::2] = np.float16(-60000)
    (half,), (single,) = run_both("GridSample", "ortops", inputs, ["output"], interpolation_mode=2)
    assert np.isinf(half).any() and (np.abs(single[np.isinf(half)]) >= 65520).all()
    assert_rounded(half, single)


@pytest.mark.parametrize("n,c,out", [(0, 3, (4, 4)), (2, 0, (4, 4)), (2, 3, (0, 4)), (2, 3, (4, 0))])
def test_grid_sample_empty(n: int, c: int, out: tuple[int, int]) -> None:
    inputs = {"input": np.zeros((n, c, 5, 5), F16), "grid": np.zeros((n, *out, 2), F16)}
    (half,) = run("GridSample", "ortops", inputs, ["output"])
    assert half.shape == (n, c, *out) and half.dtype == F16


# ---------------------------------------------------------------------------- RoIAlign

ROI_ALIGN = [("ortops", "RoIAlign"), ("mmcv", "MMCVRoiAlign")]


def roi_inputs(rng: np.random.Generator, n: int, c: int, h: int, w: int, r: int, scale: float, rotated: bool):
    """Features and rois in float16; roi coordinates in input-image pixels (map size / scale)."""
    image = np.array([w, h]) / scale
    centre = rng.uniform(-0.1, 1.1, (r, 2)) * image
    size = rng.uniform(0.05, 0.7, (r, 2)) * image
    index = rng.integers(0, n, (r, 1))
    if rotated:
        theta = rng.uniform(-np.pi, np.pi, (r, 1))
        rois = np.concatenate([index, centre, size, theta], axis=1)
    else:
        rois = np.concatenate([index, centre - size / 2, centre + size / 2], axis=1)
    return {"input": halves(rng, (n, c, h, w), scale=2.0), "rois": rois.astype(F16)}


def roi_attributes(sampling: int, aligned: int, scale: float, **more) -> dict:
    return dict(output_height=3, output_width=4, spatial_scale=scale, sampling_ratio=sampling, aligned=aligned, **more)


# 3 channels read each map directly; 16 channels with many rois take the channels-last copy.
@pytest.mark.parametrize("domain,op", ROI_ALIGN)
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("sampling", [0, 2])
@pytest.mark.parametrize("channels,rois", [(3, 7), (16, 40)])
def test_roi_align_is_the_float32_result_rounded(domain, op, mode, aligned, sampling, channels, rois) -> None:
    rng = np.random.default_rng(aligned * 2 + sampling)
    inputs = roi_inputs(rng, 2, channels, 9, 11, rois, 0.5, rotated=False)
    attributes = roi_attributes(sampling, aligned, 0.5, mode=mode)
    (half,), (single,) = run_both(op, domain, inputs, ["output"], **attributes)
    assert_rounded(half, single)


def test_roi_align_nan_features() -> None:
    inputs = roi_inputs(np.random.default_rng(8), 1, 4, 9, 11, 12, 1.0, rotated=False)
    inputs["input"][0, 1, 3:6, 3:6] = np.nan
    inputs["input"][0, 2, 4, 4] = np.inf
    (half,), (single,) = run_both("RoIAlign", "ortops", inputs, ["output"], **roi_attributes(2, 1, 1.0))
    assert np.isnan(single).any()
    assert_rounded(half, single)


def test_roi_align_non_finite_roi_is_an_error() -> None:
    inputs = roi_inputs(np.random.default_rng(9), 1, 2, 5, 5, 2, 1.0, rotated=False)
    inputs["rois"][1, 3] = np.inf
    with pytest.raises(Exception, match="roi 1 in input 'rois' is not finite"):
        run("RoIAlign", "ortops", inputs, ["output"])


@pytest.mark.parametrize("op", ["RoIAlign", "RoIAlignRotated"])
@pytest.mark.parametrize("n,c,h,w,r", [(1, 3, 5, 5, 0), (1, 0, 5, 5, 2), (1, 3, 0, 5, 2)])
def test_roi_align_empty(op: str, n: int, c: int, h: int, w: int, r: int) -> None:
    columns = 6 if op == "RoIAlignRotated" else 5
    inputs = {"input": np.zeros((n, c, h, w), F16), "rois": np.zeros((r, columns), F16)}
    (half,) = run(op, "ortops", inputs, ["output"], output_height=2, output_width=3)
    assert half.shape == (r, c, 2, 3) and half.dtype == F16
    assert not half.any()


# ---------------------------------------------------------------------------- RoIAlignRotated

ROI_ALIGN_ROTATED = [
    ("ortops", "RoIAlignRotated"),
    ("mmcv", "MMCVRoIAlignRotated"),
    ("mmdeploy", "MMCVRoIAlignRotated"),
]


@pytest.mark.parametrize("domain,op", ROI_ALIGN_ROTATED)
@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("sampling", [0, 2])
@pytest.mark.parametrize("clockwise", [0, 1])
@pytest.mark.parametrize("channels,rois", [(5, 9), (16, 40)])  # read in place; from a channels-last copy
def test_roi_align_rotated_is_the_float32_result_rounded(
    domain, op, aligned, sampling, clockwise, channels, rois
) -> None:
    rng = np.random.default_rng(aligned * 4 + sampling + clockwise)
    inputs = roi_inputs(rng, 2, channels, 10, 12, rois, 0.5, rotated=True)
    inputs["input"][1, 2, 2:4, 5:8] = np.nan
    attributes = roi_attributes(sampling, aligned, 0.5, clockwise=clockwise)
    (half,), (single,) = run_both(op, domain, inputs, ["output"], **attributes)
    assert_rounded(half, single)


# ---------------------------------------------------------------------------- DeformConv2d


def deform_inputs(
    rng: np.random.Generator, n: int, c: int, hw: tuple[int, int], c_out: int, groups: int, deform_groups: int, **conv
) -> tuple[dict[str, np.ndarray], dict]:
    kh, kw = 3, 3
    stride, padding, dilation = conv.get("stride", (1, 1)), conv.get("padding", (1, 1)), conv.get("dilation", (1, 1))
    out_h = (hw[0] + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (hw[1] + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    inputs = {
        "input": halves(rng, (n, c, *hw)),
        "offset": halves(rng, (n, 2 * deform_groups * kh * kw, out_h, out_w), scale=1.5),
        "weight": halves(rng, (c_out, c // groups, kh, kw), scale=0.3),
        "bias": halves(rng, (c_out,)),
        "mask": rng.random((n, deform_groups * kh * kw, out_h, out_w)).astype(F16),
    }
    attributes = dict(
        stride=list(stride),
        padding=list(padding),
        dilation=list(dilation),
        groups=groups,
        deform_groups=deform_groups,
    )
    return inputs, attributes


@pytest.mark.parametrize("modulated", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize(
    "groups,deform_groups,conv",
    [(1, 1, {}), (2, 1, {"stride": (2, 1)}), (1, 2, {"dilation": (2, 2), "padding": (2, 1)}), (2, 2, {})],
)
def test_deform_conv_is_the_float32_result_rounded(modulated, with_bias, groups, deform_groups, conv) -> None:
    rng = np.random.default_rng(groups * 2 + deform_groups)
    inputs, attributes = deform_inputs(rng, 2, 4, (7, 8), 6, groups, deform_groups, **conv)
    if not modulated:
        inputs["mask"] = np.zeros(0, F16)
    if not with_bias:
        inputs["bias"] = np.zeros(0, F16)
    (half,), (single,) = run_both("DeformConv2d", "ortops", inputs, ["output"], **attributes)
    assert_rounded(half, single)


def test_deform_conv_in_several_chunks() -> None:
    # 64 channels x 9 taps per position and 4096 positions: more than one chunk of columns.
    inputs, attributes = deform_inputs(np.random.default_rng(11), 1, 64, (64, 64), 8, 1, 1)
    (half,), (single,) = run_both("DeformConv2d", "ortops", inputs, ["output"], **attributes)
    assert_rounded(half, single)


def test_deform_conv_nan_and_inf() -> None:
    inputs, attributes = deform_inputs(np.random.default_rng(12), 1, 4, (6, 6), 3, 1, 1)
    inputs["offset"][0, 0, 2, 2] = np.nan  # a NaN offset reads 0
    inputs["offset"][0, 3, 1, 1] = np.inf
    inputs["input"][0, 1, 4, 4] = np.nan  # a NaN value spreads to the outputs that sample it
    (half,), (single,) = run_both("DeformConv2d", "ortops", inputs, ["output"], **attributes)
    assert np.isnan(single).any() and not np.isnan(single).all()
    assert_rounded(half, single)


def test_deform_conv_empty_batch() -> None:
    inputs, attributes = deform_inputs(np.random.default_rng(13), 0, 4, (6, 6), 3, 1, 1)
    (half,) = run("DeformConv2d", "ortops", inputs, ["output"], **attributes)
    assert half.shape == (0, 3, 6, 6) and half.dtype == F16
