"""Multi-level RoIAlign (ortops::MultiLevelRoIAlign and mmdeploy's two TensorRT-plugin nodes)
against slow references written here: each roi's level from its scale, the rescale, then the
single-level RoIAlign loops of references.py on that level."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import references
from onnx import helper
from references import cached

from ortest import make_model, run, session

F32 = np.float32
# The kernel and the per-level references do the same float32 arithmetic sample by sample;
# only the summation may round differently.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
STRIDES = [4.0, 8.0, 16.0, 32.0]
FLT_MAX = float(np.finfo(np.float32).max)

ORTOPS = ("ortops", "MultiLevelRoIAlign")
MMDEPLOY = ("mmdeploy", "MMCVMultiLevelRoiAlign")
ROTATED = ("mmdeploy", "MMCVMultiLevelRotatedRoiAlign")


# --------------------------------------------------------------------------- references


def map_levels(areas: np.ndarray, finest_scale: int, levels: int) -> np.ndarray:
    """mmdet's map_roi_levels in float32: floor(log2(sqrt(area) / finest + 1e-6)) clamped to
    [0, levels - 1]; a negative area (NaN scale) goes to level 0, as the plugins do."""
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.sqrt(areas.astype(F32))
        level = np.floor(np.log2(scale / F32(finest_scale) + F32(1e-6)))
    level = np.where(np.isnan(level), F32(0), level)
    return np.clip(level, 0, levels - 1).astype(np.int64)


def mmdet_rescale(boxes: np.ndarray, factor: float) -> np.ndarray:
    """mmdet's roi_rescale: (x1, y1, x2, y2) scaled by `factor` about the centre."""
    if factor == 1.0:
        return boxes
    f, half = F32(factor), F32(0.5)
    cx, cy = (boxes[:, 0] + boxes[:, 2]) * half, (boxes[:, 1] + boxes[:, 3]) * half
    hw, hh = (boxes[:, 2] - boxes[:, 0]) * f * half, (boxes[:, 3] - boxes[:, 1]) * f * half
    return np.stack([cx - hw, cy - hh, cx + hw, cy + hh], 1)


def plugin_rescale(boxes: np.ndarray, factor: float) -> np.ndarray:
    """trt_multi_level_roi_align's rescale: half side (side + 1) * factor / 2 - 0.5, for factor > 0."""
    if not factor > 0:
        return boxes
    half, one = F32(0.5), F32(1)
    cx, cy = (boxes[:, 0] + boxes[:, 2]) * half, (boxes[:, 1] + boxes[:, 3]) * half
    hw = (boxes[:, 2] - boxes[:, 0] + one) * (F32(factor) * half) - half
    hh = (boxes[:, 3] - boxes[:, 1] + one) * (F32(factor) * half) - half
    return np.stack([cx - hw, cy - hh, cx + hw, cy + hh], 1)


@cached
def reference(
    node: tuple[str, str],
    features: list[np.ndarray],
    rois: np.ndarray,
    out_h: int,
    out_w: int,
    sampling: int,
    strides: list[float],
    finest_scale: int,
    factor: float,
    max_mode: bool,
    aligned: bool,
    clockwise: bool = False,
) -> np.ndarray:
    """The node's output: per level, the single-level reference on the rois of that level."""
    levels = len(features)
    rotated = node == ROTATED
    boxes = rois[:, 1:].astype(F32)
    areas = boxes[:, 2] * boxes[:, 3] if rotated else (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    level = map_levels(areas, finest_scale, levels)
    out = np.zeros((len(rois), features[0].shape[1], out_h, out_w), F32)
    for lv in range(levels):
        chosen = np.nonzero(level == lv)[0]
        if len(chosen) == 0:
            continue
        stride = strides[lv]
        scale = 1.0 / stride
        b = boxes[chosen].copy()
        if rotated:
            if factor > 0:  # mmrotate's roi_rescale: w and h times the factor
                b[:, 2:4] *= F32(factor)
            # The plugin raises the sides to 1 whatever `aligned`: that is the reference's
            # legacy (aligned=False) path, with the -0.5 pixel shift of the centre done here
            # (exact: the strides are powers of two).
            if aligned:
                b[:, 0:2] -= F32(0.5 * stride)
            pooled = references.roi_align_rotated(
                features[lv], np.concatenate([rois[chosen, :1], b], 1), out_h, out_w, scale, sampling, False, clockwise
            )
        else:
            b = mmdet_rescale(b, factor) if node == ORTOPS else plugin_rescale(b, factor)
            if node == MMDEPLOY and aligned:
                # The plugin raises negative sides to 0: the same as moving x2 (y2) onto x1 (y1).
                b[:, 2], b[:, 3] = np.maximum(b[:, 2], b[:, 0]), np.maximum(b[:, 3], b[:, 1])
            level_rois = np.concatenate([rois[chosen, :1], b], 1).astype(F32)
            mode = "max" if max_mode else "avg"
            pooled = references.roi_align(
                features[lv], level_rois, out_h, out_w, scale, sampling, mode, aligned, compat=False
            )
            if node == MMDEPLOY and max_mode and sampling <= 0:
                # The plugin's max starts from -FLT_MAX, which a bin without samples keeps.
                sides = level_rois[:, 3:5] * F32(scale) - level_rois[:, 1:3] * F32(scale)
                if not aligned:
                    sides = np.maximum(sides, 1)
                empty = (np.ceil(sides[:, 1] / out_h) <= 0) | (np.ceil(sides[:, 0] / out_w) <= 0)
                pooled[empty] = -FLT_MAX
        out[chosen] = pooled
    return out


# --------------------------------------------------------------------------- helpers


def pyramid(rng: np.random.Generator, n: int, c: int, image_h: int, image_w: int, strides=STRIDES) -> list:
    """One [n, c, H_l, W_l] map per stride, the sizes an FPN gives an image_h x image_w image."""
    return [rng.normal(size=(n, c, int(np.ceil(image_h / s)), int(np.ceil(image_w / s)))).astype(F32) for s in strides]


def boxes_over_levels(rng: np.random.Generator, count: int, n: int, image_h: int, image_w: int) -> np.ndarray:
    """Rois of scales from 2 to 160 pixels (every level for finest_scale 8), some past the edges."""
    scale = np.exp(rng.uniform(np.log(2), np.log(160), count))
    aspect = np.exp(rng.uniform(-0.7, 0.7, count))
    w, h = scale * aspect, scale / aspect
    cx, cy = rng.uniform(-0.1, 1.1, count) * image_w, rng.uniform(-0.1, 1.1, count) * image_h
    index = rng.integers(0, n, count)
    return np.stack([index, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1).astype(F32)


def rotated_over_levels(rng: np.random.Generator, count: int, n: int, image_h: int, image_w: int) -> np.ndarray:
    axis = boxes_over_levels(rng, count, n, image_h, image_w)
    cx, cy = (axis[:, 1] + axis[:, 3]) / 2, (axis[:, 2] + axis[:, 4]) / 2
    w, h = axis[:, 3] - axis[:, 1], axis[:, 4] - axis[:, 2]
    theta = rng.uniform(-np.pi, np.pi, count)
    return np.stack([axis[:, 0], cx, cy, w, h, theta], 1).astype(F32)


def feeds(rois: np.ndarray, features: list[np.ndarray]) -> dict[str, np.ndarray]:
    return {"rois": rois, **{f"features_{i}": f for i, f in enumerate(features)}}


def attributes(
    node: tuple[str, str],
    out_h: int,
    out_w: int,
    sampling: int,
    strides: list[float],
    finest: int,
    factor: float,
    max_mode: bool,
    aligned: bool,
    clockwise: bool = False,
) -> dict:
    """Every attribute, with the ONNX types the node has (mmdeploy's exporter writes them all)."""
    a = dict(
        output_height=out_h,
        output_width=out_w,
        sampling_ratio=sampling,
        featmap_strides=[float(s) for s in strides],
        finest_scale=finest,
        roi_scale_factor=float(factor),
        aligned=int(aligned),
    )
    if node == ORTOPS:
        a["pool_mode"] = "max" if max_mode else "avg"
    elif node == MMDEPLOY:
        a["pool_mode"] = 0 if max_mode else 1
    else:
        a["clockwise"] = int(clockwise)
    return a


def run_node(node: tuple[str, str], rois, features, threads: int = 0, **attrs) -> np.ndarray:
    domain, op = node
    (got,) = run(op, domain, feeds(rois, features), ["output"], threads=threads, **attrs)
    return got


# --------------------------------------------------------------------------- against the references


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY], ids=lambda n: n[1])
@pytest.mark.parametrize("max_mode", [False, True], ids=["avg", "max"])
@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("sampling", [0, 2])
@pytest.mark.parametrize("factor", [1.0, 1.5])
def test_matches_reference(node, max_mode: bool, aligned: int, sampling: int, factor: float) -> None:
    rng = np.random.default_rng(aligned * 4 + sampling + (8 if factor != 1 else 0))
    features = pyramid(rng, 2, 3, 72, 100)
    rois = boxes_over_levels(rng, 24, 2, 72, 100)
    a = attributes(node, 3, 2, sampling, STRIDES, 8, factor, max_mode, bool(aligned))
    got = run_node(node, rois, features, **a)
    expected = reference(node, features, rois, 3, 2, sampling, STRIDES, 8, factor, max_mode, bool(aligned))
    assert got.dtype == F32 and got.shape == (24, 3, 3, 2)
    # Every level is used, so the test exercises the mapping.
    levels = map_levels((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]), 8, 4)
    assert set(levels.tolist()) == {0, 1, 2, 3}
    np.testing.assert_allclose(got, expected, **TOLERANCE)


@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("clockwise", [0, 1])
@pytest.mark.parametrize("sampling", [0, 2])
@pytest.mark.parametrize("factor", [-1.0, 1.0, 1.25])
def test_rotated_matches_reference(aligned: int, clockwise: int, sampling: int, factor: float) -> None:
    rng = np.random.default_rng(aligned * 2 + clockwise + 4 * sampling)
    features = pyramid(rng, 2, 2, 64, 80)
    rois = rotated_over_levels(rng, 20, 2, 64, 80)
    rois[0, 3:5] = [0.5, 3.0]  # a side below 1 after scaling, which the plugin raises to 1
    a = attributes(ROTATED, 2, 3, sampling, STRIDES, 8, factor, False, bool(aligned), bool(clockwise))
    got = run_node(ROTATED, rois, features, **a)
    expected = reference(ROTATED, features, rois, 2, 3, sampling, STRIDES, 8, factor, False, bool(aligned), clockwise)
    assert set(map_levels(rois[:, 3] * rois[:, 4], 8, 4).tolist()) == {0, 1, 2, 3}
    np.testing.assert_allclose(got, expected, **TOLERANCE)


def test_ortops_node_is_per_level_roi_align() -> None:
    """The node equals the graph it replaces: RoIAlign (ortops) of each level on its rois."""
    rng = np.random.default_rng(40)
    features = pyramid(rng, 2, 4, 80, 64)
    rois = boxes_over_levels(rng, 30, 2, 80, 64)
    got = run_node(ORTOPS, rois, features, featmap_strides=STRIDES, finest_scale=8, output_height=4, output_width=4)
    level = map_levels((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]), 8, 4)
    for lv, stride in enumerate(STRIDES):
        chosen = level == lv
        (single,) = run(
            "RoIAlign",
            "ortops",
            {"input": features[lv], "rois": rois[chosen]},
            ["output"],
            output_height=4,
            output_width=4,
            spatial_scale=1.0 / stride,
            sampling_ratio=0,
            mode="avg",
            aligned=1,
        )
        np.testing.assert_array_equal(got[chosen], single)  # the same arithmetic, bit for bit


# --------------------------------------------------------------------------- level mapping


def level_maps(n: int = 1) -> list[np.ndarray]:
    """Maps for strides 1, 2, 4, 8 of a 256 x 256 image whose every value is their level + 1:
    the output names the level a roi was pooled from."""
    return [np.full((n, 1, 256 >> lv, 256 >> lv), float(lv + 1), F32) for lv in range(4)]


LEVEL_STRIDES = [1.0, 2.0, 4.0, 8.0]


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY], ids=lambda n: n[1])
def test_each_roi_goes_to_its_level(node) -> None:
    # finest_scale 56: scale < 112 -> 0, < 224 -> 1, < 448 -> 2, else 3 (clamped).
    sides = np.array([1, 50, 111.9, 112, 150, 223.9, 224, 447, 448, 2000, 1e6], F32)
    # Centred on the origin, so that the one sample (aligned: at -0.5, clamped to 0) is on every map.
    rois = np.stack([np.zeros_like(sides), -sides / 2, -sides / 2, sides / 2, sides / 2], 1)
    expected_levels = [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3]
    np.testing.assert_array_equal(map_levels((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]), 56, 4),
                                  expected_levels)  # fmt: skip
    pool_mode = "avg" if node == ORTOPS else 1
    a = dict(featmap_strides=LEVEL_STRIDES, output_height=1, output_width=1, sampling_ratio=1, aligned=1)
    got = run_node(node, rois, level_maps(), pool_mode=pool_mode, **a)
    np.testing.assert_array_equal(got[:, 0, 0, 0], np.array(expected_levels) + 1)


def test_rotated_rois_go_to_the_level_of_their_own_area() -> None:
    # w h, not the area of the axis-aligned hull: a long thin roi at 45 degrees (hull scale
    # 153, level 1) stays on level 0.
    rois = np.array(
        [
            [0, 100, 100, 200, 16, np.pi / 4],  # scale 56.6: level 0
            [0, 100, 100, 150, 150, 0.3],  # level 1
            [0, 100, 100, 300, 300, 0],  # level 2
            [0, 100, 100, 2, 2, 1],  # level 0
        ],
        F32,
    )
    got = run_node(ROTATED, rois, level_maps(), featmap_strides=LEVEL_STRIDES, output_height=1, output_width=1)
    np.testing.assert_allclose(got[:, 0, 0, 0], [1, 2, 3, 1], rtol=1e-6)


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY], ids=lambda n: n[1])
def test_level_is_chosen_before_the_rescale(node) -> None:
    """Doubled, these rois would go one level up (mmdet and the plugin choose first)."""
    rois = np.array([[0, 10, 10, 110, 110], [0, 10, 10, 250, 250]], F32)  # scales 100 and 240
    a = dict(featmap_strides=LEVEL_STRIDES, output_height=1, output_width=1, sampling_ratio=1)
    got = run_node(node, rois, level_maps(), roi_scale_factor=2.0, **a)
    np.testing.assert_allclose(got[:, 0, 0, 0], [1, 3], rtol=1e-6)


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY], ids=lambda n: n[1])
def test_negative_area_goes_to_level_zero(node) -> None:
    """mmdet's NaN scale assigns no level (output 0); the plugins' float-to-int gives level 0."""
    rois = np.array([[0, 100, 0, 0, 100], [0, 0, 0, 300, 300]], F32)  # areas -10000 and 90000
    a = dict(featmap_strides=LEVEL_STRIDES, output_height=1, output_width=1, sampling_ratio=1)
    got = run_node(node, rois, level_maps(), **a)
    np.testing.assert_allclose(got[:, 0, 0, 0], [1, 3], rtol=1e-6)


def test_rescale_differs_between_mmdet_and_the_plugin() -> None:
    """mmdet scales x2 - x1; the plugin (x2 - x1 + 1): a ramp in x shows the wider box."""
    ramp = np.tile(np.arange(64, dtype=F32), (1, 1, 64, 1))
    rois = np.array([[0, 10, 10, 30, 30]], F32)
    common = dict(featmap_strides=[1.0], output_height=1, output_width=2, sampling_ratio=1, aligned=0)
    ours = run_node(ORTOPS, rois, [ramp], roi_scale_factor=2.0, pool_mode="avg", **common)
    plugin = run_node(MMDEPLOY, rois, [ramp], roi_scale_factor=2.0, pool_mode=1, **common)
    # mmdet: [0, 40] -> bins sampled at x = 10, 30; plugin: [-0.5, 40.5] -> 9.625 + 0.5 ... = 9.75, 30.25.
    np.testing.assert_allclose(ours[0, 0, 0], [10.0, 30.0])
    np.testing.assert_allclose(plugin[0, 0, 0], [9.75, 30.25])
    # A factor of 1 is no rescale in both.
    np.testing.assert_array_equal(
        run_node(ORTOPS, rois, [ramp], roi_scale_factor=1.0, pool_mode="avg", **common),
        run_node(MMDEPLOY, rois, [ramp], roi_scale_factor=1.0, pool_mode=1, **common),
    )


# --------------------------------------------------------------------------- plugin defaults and quirks


def test_mmdeploy_defaults_are_the_plugins() -> None:
    """Absent attributes take the plugin creator's defaults: 7 x 7, max pooling, sampling 2,
    no rescale, finest scale 56, not aligned."""
    rng = np.random.default_rng(7)
    features = pyramid(rng, 1, 2, 64, 64)
    rois = boxes_over_levels(rng, 6, 1, 64, 64)
    got = run_node(MMDEPLOY, rois, features, featmap_strides=STRIDES)
    expected = reference(MMDEPLOY, features, rois, 7, 7, 2, STRIDES, 56, -1.0, True, False)
    np.testing.assert_allclose(got, expected, **TOLERANCE)
    got = run_node(ROTATED, rotated_over_levels(rng, 6, 1, 64, 64), features, featmap_strides=STRIDES)
    assert got.shape == (6, 2, 7, 7)


def test_mmdeploy_max_mode_of_an_empty_bin_is_minus_flt_max() -> None:
    rois = np.array([[0, 4, 4, 4, 4]], F32)  # aligned: a zero-size roi, no adaptive samples
    features = [np.ones((1, 1, 8, 8), F32)]
    got = run_node(MMDEPLOY, rois, features, featmap_strides=[1.0], pool_mode=0, sampling_ratio=0, aligned=1)
    np.testing.assert_array_equal(got, np.full((1, 1, 7, 7), -FLT_MAX, F32))
    ours = run_node(ORTOPS, rois, features, featmap_strides=[1.0], pool_mode="max", sampling_ratio=0, aligned=1)
    np.testing.assert_array_equal(ours, np.zeros((1, 1, 7, 7), F32))


def test_mmdeploy_aligned_raises_negative_sides_to_zero() -> None:
    """The plugin clamps an inverted roi to zero size; mmcv's RoIAlign samples it backwards."""
    ramp = np.tile(np.arange(32, dtype=F32), (1, 1, 32, 1))
    rois = np.array([[0, 20, 10, 10, 20]], F32)  # x2 < x1
    common = dict(featmap_strides=[1.0], output_height=1, output_width=2, sampling_ratio=1, aligned=1)
    plugin = run_node(MMDEPLOY, rois, [ramp], pool_mode=1, **common)
    ours = run_node(ORTOPS, rois, [ramp], pool_mode="avg", **common)
    np.testing.assert_allclose(plugin[0, 0, 0], [19.5, 19.5])  # both bins at x1 - 0.5
    np.testing.assert_allclose(ours[0, 0, 0], [17.0, 12.0])  # bins centred at 17 and 12


def test_mmdeploy_extra_strides_are_ignored() -> None:
    rng = np.random.default_rng(8)
    features = pyramid(rng, 1, 2, 48, 48, STRIDES[:2])
    rois = boxes_over_levels(rng, 8, 1, 48, 48)
    a = attributes(MMDEPLOY, 2, 2, 2, STRIDES, 8, 1.0, False, True)
    got = run_node(MMDEPLOY, rois, features, **a)
    expected = reference(MMDEPLOY, features, rois, 2, 2, 2, STRIDES[:2], 8, 1.0, False, True)
    np.testing.assert_allclose(got, expected, **TOLERANCE)


# --------------------------------------------------------------------------- shapes and edge cases


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY, ROTATED], ids=lambda n: n[1])
def test_empty_rois(node) -> None:
    features = pyramid(np.random.default_rng(1), 2, 3, 16, 16, STRIDES[:2])
    rois = np.zeros((0, 6 if node == ROTATED else 5), F32)
    got = run_node(node, rois, features, featmap_strides=STRIDES[:2], output_height=3, output_width=2)
    assert got.shape == (0, 3, 3, 2)


def test_zero_channels_and_empty_levels() -> None:
    rois = np.array([[0, 0, 0, 5, 5], [0, 0, 0, 900, 900]], F32)
    no_channels = [np.zeros((1, 0, 8, 8), F32), np.zeros((1, 0, 4, 4), F32)]
    got = run_node(ORTOPS, rois, no_channels, featmap_strides=[1.0, 2.0], output_height=2, output_width=2)
    assert got.shape == (2, 0, 2, 2)
    # A level of H = 0 reads 0 everywhere; the other level still pools.
    features = [np.ones((1, 2, 8, 8), F32), np.ones((1, 2, 0, 4), F32)]
    got = run_node(ORTOPS, rois, features, featmap_strides=[1.0, 2.0], output_height=2, output_width=2)
    np.testing.assert_array_equal(got[0], np.ones((2, 2, 2), F32))
    np.testing.assert_array_equal(got[1], np.zeros((2, 2, 2), F32))


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY], ids=lambda n: n[1])
def test_degenerate_and_huge_boxes(node) -> None:
    rng = np.random.default_rng(9)
    features = pyramid(rng, 2, 2, 40, 40)
    rois = np.array(
        [
            [0, 5, 5, 5, 5],  # a point
            [1, 5, 5, 5, 30],  # a vertical line
            [1, 30, 30, 10, 10],  # inverted
            [0, -1e6, -1e6, 1e6, 1e6],  # huge: the last level, sampled mostly outside
            [0, -500, -500, -400, -400],  # outside the image
        ],
        F32,
    )
    for aligned in (0, 1):
        for max_mode in (False, True):
            a = attributes(node, 2, 2, 2, STRIDES, 8, 1.0, max_mode, bool(aligned))
            got = run_node(node, rois, features, **a)
            expected = reference(node, features, rois, 2, 2, 2, STRIDES, 8, 1.0, max_mode, bool(aligned))
            np.testing.assert_allclose(got, expected, **TOLERANCE, err_msg=f"aligned {aligned} max {max_mode}")


def test_huge_box_with_adaptive_sampling_is_an_error_not_a_hang() -> None:
    features = [np.zeros((1, 1, 4, 4), F32)]
    rois = np.array([[0, 0, 0, 1e9, 1e9]], F32)
    with pytest.raises(Exception, match=r"ortops\.MultiLevelRoIAlign: .*samples per bin"):
        run_node(ORTOPS, rois, features, featmap_strides=[1.0], sampling_ratio=0)


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY, ROTATED], ids=lambda n: n[1])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_rois_are_an_error(node, value: float) -> None:
    rois = np.zeros((2, 6 if node == ROTATED else 5), F32)
    rois[1, 2] = value
    with pytest.raises(Exception, match=rf"{node[0]}\.{node[1]}: roi 1 in input 'rois' is not finite"):
        run_node(node, rois, [np.zeros((1, 1, 4, 4), F32)], featmap_strides=[1.0])


def test_one_level_and_many_levels() -> None:
    rng = np.random.default_rng(12)
    one = pyramid(rng, 2, 2, 32, 32, [4.0])
    rois = boxes_over_levels(rng, 10, 2, 32, 32)
    got = run_node(ORTOPS, rois, one, featmap_strides=[4.0], finest_scale=8, roi_scale_factor=1.25)
    expected = reference(ORTOPS, one, rois, 7, 7, 0, [4.0], 8, 1.25, False, True)
    np.testing.assert_allclose(got, expected, **TOLERANCE)
    # More levels than the plugin's arrays hold (10).
    strides = [float(2**k) for k in range(12)]
    many = [np.full((1, 1, 4, 4), float(k), F32) for k in range(12)]
    rois = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 2**11, 2**11], [0, 0, 0, 2**14, 2**14]], F32)
    got = run_node(MMDEPLOY, rois, many, featmap_strides=strides, finest_scale=1, output_height=1, output_width=1)
    np.testing.assert_array_equal(got[:, 0, 0, 0], [0, 11, 11])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("max_mode", [False, True], ids=["avg", "max"])
def test_channels_last_path_and_thread_counts(threads: int, max_mode: bool) -> None:
    """Enough rois and channels that the levels are pooled from channels-last copies."""
    rng = np.random.default_rng(13)
    features = pyramid(rng, 2, 16, 40, 48)
    rois = boxes_over_levels(rng, 120, 2, 40, 48)
    a = attributes(ORTOPS, 2, 3, 2, STRIDES, 8, 1.0, max_mode, True)
    got = run_node(ORTOPS, rois, features, threads=threads, **a)
    expected = reference(ORTOPS, features, rois, 2, 3, 2, STRIDES, 8, 1.0, max_mode, True)
    np.testing.assert_allclose(got, expected, **TOLERANCE)


def test_fractional_batch_index_truncates_toward_zero() -> None:
    features = [np.stack([np.full((1, 4, 4), 1.0), np.full((1, 4, 4), 2.0)]).astype(F32)]
    rois = np.array([[1.9, 0, 0, 3, 3], [-0.5, 0, 0, 3, 3]], F32)
    got = run_node(ORTOPS, rois, features, featmap_strides=[1.0], output_height=1, output_width=1)
    np.testing.assert_array_equal(got[:, 0, 0, 0], [2.0, 1.0])


# --------------------------------------------------------------------------- bad inputs

GOOD_FEATURES = [np.zeros((2, 3, 8, 8), F32), np.zeros((2, 3, 4, 4), F32)]
BAD_INPUTS = [
    ("levels with different N", [np.zeros((2, 3, 8, 8), F32), np.zeros((1, 3, 4, 4), F32)], None,
     r"every level needs the same N and C, but input 'features\[1\]' has shape \[1, 3, 4, 4\] and "
     r"'features\[0\]' \[2, 3, 8, 8\]"),
    ("levels with different C", [np.zeros((2, 3, 8, 8), F32), np.zeros((2, 4, 4, 4), F32)], None,
     r"every level needs the same N and C"),
    ("level of rank 3", [np.zeros((2, 3, 8, 8), F32), np.zeros((3, 4, 4), F32)], None,
     r"input 'features\[1\]' must have rank 4, got shape \[3, 4, 4\]"),
    ("rois [R, 4]", GOOD_FEATURES, np.zeros((2, 4), F32), r"input 'rois' must have shape \[R, {columns}\]"),
    ("rois rank 1", GOOD_FEATURES, np.zeros(5, F32), r"input 'rois' must have rank 2, got shape \[5\]"),
    ("batch index", GOOD_FEATURES, "index 2", r"roi 0 has batch index 2, but input 'features\[0\]' has 2 images"),
]  # fmt: skip


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY, ROTATED], ids=lambda n: n[1])
@pytest.mark.parametrize("case,features,rois,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs_are_errors(node, case, features, rois, message) -> None:
    columns = 6 if node == ROTATED else 5
    if rois is None:
        rois = np.zeros((1, columns), F32)
    elif isinstance(rois, str):
        rois = np.zeros((1, columns), F32)
        rois[0, 0] = 2
    with pytest.raises(Exception, match=rf"{node[0]}\.{node[1]}: {message.format(columns=columns)}"):
        run_node(node, rois, features, featmap_strides=[4.0, 8.0])


BAD_ATTRIBUTES = [
    (ORTOPS, {"featmap_strides": [4.0]}, r"'featmap_strides' lists 1 strides, but the node has 2 inputs 'features'"),
    (ORTOPS, {"featmap_strides": [4.0, 8.0, 16.0]}, r"lists 3 strides, but the node has 2 inputs"),
    (MMDEPLOY, {"featmap_strides": [4.0]}, r"lists 1 strides, but the node has 2 inputs"),
    (ROTATED, {"featmap_strides": [4.0]}, r"lists 1 strides, but the node has 2 inputs"),
    (MMDEPLOY, {"featmap_strides": [4.0, 0.0]}, r"'featmap_strides' must hold positive finite strides, got 0"),
    (ORTOPS, {"featmap_strides": [4.0, float("nan")]}, r"must hold positive finite strides, got nan"),
    (ORTOPS, {"pool_mode": "sum"}, r"attribute 'pool_mode' must be \"avg\" or \"max\", got \"sum\""),
    (MMDEPLOY, {"pool_mode": 2}, r"attribute 'pool_mode' must be 0 \(max\) or 1 \(avg\), got 2"),
    (ROTATED, {"clockwise": 2}, r"attribute 'clockwise' must be 0 or 1, got 2"),
    (MMDEPLOY, {"aligned": 2}, r"attribute 'aligned' must be 0 or 1, got 2"),
    (ORTOPS, {"roi_scale_factor": 0.0}, r"attribute 'roi_scale_factor' must be positive, got 0"),
    (MMDEPLOY, {"roi_scale_factor": float("inf")}, r"attribute 'roi_scale_factor' must be finite, got inf"),
    (ORTOPS, {"finest_scale": 0}, r"attribute 'finest_scale' must be positive, got 0"),
    (ORTOPS, {"output_height": 0}, r"must be at least 1, got 0"),
    (ROTATED, {"sampling_ratio": 1 << 20}, r"'sampling_ratio' must be at most 65536"),
    (ORTOPS, {"featmap_strides": [4, 8]}, r"attribute 'featmap_strides' must be of type floats, got ints"),
    (MMDEPLOY, {"pool_mode": "max"}, r"attribute 'pool_mode' must be of type int, got string"),
]


@pytest.mark.parametrize(
    "node,overrides,message", BAD_ATTRIBUTES, ids=[f"{n[1]}-{next(iter(o))}" for n, o, _ in BAD_ATTRIBUTES]
)
def test_bad_attributes_are_errors(node, overrides, message) -> None:
    rois = np.zeros((1, 6 if node == ROTATED else 5), F32)
    a = {"featmap_strides": [4.0, 8.0], **overrides}
    with pytest.raises(Exception, match=rf"{node[0]}\.{node[1]}: .*{message}"):
        run_node(node, rois, GOOD_FEATURES, **a)


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY, ROTATED], ids=lambda n: n[1])
def test_empty_featmap_strides_is_an_error(node) -> None:
    rois = np.zeros((1, 6 if node == ROTATED else 5), F32)
    model = make_model(node[1], node[0], [("rois", F32, 2), ("f0", F32, 4), ("f1", F32, 4)], ["output"])
    empty = helper.make_attribute("featmap_strides", [], attr_type=onnx.AttributeProto.FLOATS)
    model.graph.node[0].attribute.append(empty)
    with pytest.raises(Exception, match=r"'featmap_strides' must list the stride of each level, got an empty list"):
        session(model).run(None, {"rois": rois, "f0": GOOD_FEATURES[0], "f1": GOOD_FEATURES[1]})


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY, ROTATED], ids=lambda n: n[1])
def test_featmap_strides_is_required(node) -> None:
    rois = np.zeros((1, 6 if node == ROTATED else 5), F32)
    with pytest.raises(Exception, match=rf"{node[0]}\.{node[1]}: attribute 'featmap_strides' \(floats\) is required"):
        run_node(node, rois, GOOD_FEATURES)


@pytest.mark.parametrize("node", [ORTOPS, MMDEPLOY, ROTATED], ids=lambda n: n[1])
def test_float64_is_not_a_kernel_type(node) -> None:
    """float32 only (ONNX Runtime 1.17 cannot type a variadic op of several element types)."""
    rois = np.zeros((1, 6 if node == ROTATED else 5), np.float64)
    features = [f.astype(np.float64) for f in GOOD_FEATURES]
    with pytest.raises(Exception, match=rf"\({node[1]}\)"):
        run_node(node, rois, features, featmap_strides=[4.0, 8.0])
