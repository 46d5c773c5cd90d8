"""RoIAlign in both domains against the slow loop in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references

from ortest import pool, run

DOMAINS = [("mmcv", "MMCVRoiAlign", True), ("ortops", "RoIAlign", False)]
# Same arithmetic as the reference, sample by sample; only the summation may round differently.
TOLERANCE = {np.float32: {"rtol": 1e-5, "atol": 1e-6}, np.float64: {"rtol": 1e-12, "atol": 1e-14}}


def make_case(rng: np.random.Generator, n: int, c: int, h: int, w: int, r: int, dtype: type, scale: float):
    features = rng.normal(size=(n, c, h, w)).astype(dtype)
    image_w, image_h = w / scale, h / scale
    xy = rng.uniform(-0.2, 1.0, (r, 2)) * [image_w, image_h]
    wh = rng.uniform(0, 0.6, (r, 2)) * [image_w, image_h]
    rois = np.concatenate([rng.integers(0, n, (r, 1)), xy, xy + wh], axis=1).astype(dtype)
    return features, rois


def attrs(out: int, scale: float, sampling: int, mode: str, aligned: int) -> dict:
    return dict(
        output_height=out,
        output_width=out + 1,
        spatial_scale=scale,
        sampling_ratio=sampling,
        mode=mode,
        aligned=aligned,
    )


@pytest.mark.parametrize("domain,op,compat", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("sampling", [0, 2])
def test_matches_reference(domain, op, compat, dtype, mode, aligned, sampling) -> None:
    rng = np.random.default_rng(aligned * 2 + sampling)
    features, rois = make_case(rng, 2, 3, 9, 11, 6, dtype, 0.5)
    a = attrs(3, 0.5, sampling, mode, aligned)
    (got,) = pool(op, domain, features, rois, **a)
    expected = references.roi_align(features, rois, 3, 4, 0.5, sampling, mode, bool(aligned), compat)
    assert got.dtype == dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("domain,op,compat", DOMAINS)
def test_rois_on_and_beyond_the_edges(domain, op, compat) -> None:
    features = np.arange(2 * 5 * 6, dtype=np.float32).reshape(1, 2, 5, 6)
    rois = np.array(
        [[0, -3, -3, 2, 2], [0, 4, 3, 9, 8], [0, -10, -10, -5, -5], [0, 0, 0, 6, 5], [0, 5.5, 4.5, 5.5, 4.5]],
        np.float32,
    )
    for mode in ("avg", "max"):
        for aligned in (0, 1):
            (got,) = pool(op, domain, features, rois, **attrs(2, 1.0, 2, mode, aligned))
            expected = references.roi_align(features, rois, 2, 3, 1.0, 2, mode, bool(aligned), compat)
            np.testing.assert_allclose(got, expected, **TOLERANCE[np.float32])


@pytest.mark.parametrize("domain,op,compat", DOMAINS)
def test_empty_adaptive_grid_in_max_mode(domain, op, compat) -> None:
    # aligned=1 allows a zero-size roi; adaptive sampling then has no samples per bin.
    features = np.ones((1, 1, 4, 4), np.float32)
    rois = np.array([[0, 1, 1, 1, 1]], np.float32)
    (got,) = pool(op, domain, features, rois, **attrs(2, 1.0, 0, "max", 1))
    np.testing.assert_array_equal(got, np.full((1, 1, 2, 3), -10000.0 if compat else 0.0, np.float32))
    (got,) = pool(op, domain, features, rois, **attrs(2, 1.0, 0, "avg", 1))
    np.testing.assert_array_equal(got, np.zeros((1, 1, 2, 3), np.float32))


@pytest.mark.parametrize("domain,op,compat", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zero_and_negative_size_rois(domain, op, compat, dtype) -> None:
    """aligned=1 keeps zero and negative sizes (negative bins, empty adaptive grids); aligned=0
    clamps the sides to 1."""
    features = np.random.default_rng(3).normal(size=(2, 2, 7, 8)).astype(dtype)
    rois = np.array(
        [[0, 5, 4, 2, 1], [1, 6, 6, 5.5, 3], [1, 3, 3, 3, 3], [0, 2, 2, 2.2, 1.9], [1, 7.9, 6.9, -1, -1]], dtype
    )
    for mode in ("avg", "max"):
        for aligned in (0, 1):
            for sampling in (0, 2):
                a = attrs(2, 1.0, sampling, mode, aligned)
                (got,) = pool(op, domain, features, rois, **a)
                expected = references.roi_align(features, rois, 2, 3, 1.0, sampling, mode, bool(aligned), compat)
                np.testing.assert_allclose(got, expected, **TOLERANCE[dtype], err_msg=f"{mode} {aligned} {sampling}")


@pytest.mark.parametrize("domain,op,compat", DOMAINS)
def test_fractional_batch_index_truncates_toward_zero(domain, op, compat) -> None:
    """mmcv casts the index to int: 1.9 reads image 1 and -0.5 reads image 0."""
    features = np.stack([np.full((1, 4, 4), 1.0), np.full((1, 4, 4), 2.0)]).astype(np.float32)
    rois = np.array([[1.9, 0, 0, 3, 3], [-0.5, 0, 0, 3, 3]], np.float32)
    (got,) = pool(op, domain, features, rois, **attrs(1, 1.0, 2, "avg", 1))
    np.testing.assert_array_equal(got[:, 0], [[[2.0, 2.0]], [[1.0, 1.0]]])


def test_max_mode_below_minus_10000_shows_the_mmcv_quirk() -> None:
    features = np.full((1, 1, 4, 4), -20000.0, np.float32)
    rois = np.array([[0, 0, 0, 3, 3]], np.float32)
    feeds = {"input": features, "rois": rois}
    (mmcv,) = run("MMCVRoiAlign", "mmcv", feeds, ["output"], **attrs(1, 1.0, 2, "max", 1))
    (ortops,) = run("RoIAlign", "ortops", feeds, ["output"], **attrs(1, 1.0, 2, "max", 1))
    np.testing.assert_array_equal(mmcv, np.full((1, 1, 1, 2), -10000.0, np.float32))
    np.testing.assert_array_equal(ortops, np.full((1, 1, 1, 2), -20000.0, np.float32))


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    features, rois = make_case(np.random.default_rng(5), 2, 4, 12, 10, 40, np.float32, 0.25)
    a = attrs(2, 0.25, 0, "avg", 1)
    (got,) = pool("RoIAlign", "ortops", features, rois, threads=threads, **a)
    expected = references.roi_align(features, rois, 2, 3, 0.25, 0, "avg", True, False)
    np.testing.assert_allclose(got, expected, **TOLERANCE[np.float32])


def test_mmcv_style_node() -> None:
    """The node as mmcv 1.x's symbolic wrote it: every attribute, mode as a string."""
    features, rois = make_case(np.random.default_rng(1), 1, 2, 8, 8, 3, np.float32, 0.125)
    (got,) = pool(
        "MMCVRoiAlign",
        "mmcv",
        features,
        rois,
        output_height=7,
        output_width=7,
        spatial_scale=0.125,
        sampling_ratio=0,
        mode="avg",
        aligned=1,
    )
    np.testing.assert_allclose(
        got, references.roi_align(features, rois, 7, 7, 0.125, 0, "avg", True, True), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("shape", [(0, 5), (3, 5)])
def test_empty_rois_or_channels(shape) -> None:
    features = np.zeros((1, 0 if shape[0] else 3, 4, 4), np.float32)
    rois = np.zeros(shape, np.float32)
    (got,) = pool("RoIAlign", "ortops", features, rois, **attrs(2, 1.0, 2, "avg", 1))
    assert got.shape == (shape[0], features.shape[1], 2, 3)


def test_empty_feature_map_reads_zero() -> None:
    rois = np.array([[0, 0, 0, 3, 3]], np.float32)
    (got,) = pool("RoIAlign", "ortops", np.zeros((1, 2, 0, 5), np.float32), rois, **attrs(2, 1.0, 2, "max", 1))
    np.testing.assert_array_equal(got, np.zeros((1, 2, 2, 3), np.float32))


BAD = [
    (
        "batch index",
        np.array([[2, 0, 0, 1, 1]], np.float32),
        {},
        r"roi 0 has batch index 2, but input 'input' has 2 images",
    ),
    ("negative index", np.array([[-1, 0, 0, 1, 1]], np.float32), {}, r"roi 0 has batch index -1"),
    ("NaN roi", np.array([[0, 0, np.nan, 1, 1]], np.float32), {}, r"roi 0 in input 'rois' is not finite"),
    ("inf roi", np.array([[0, 0, 0, np.inf, 1]], np.float32), {}, r"roi 0 in input 'rois' is not finite"),
    ("rois [R, 4]", np.zeros((2, 4), np.float32), {}, r"input 'rois' must have shape \[R, 5\]"),
    (
        "mode",
        np.zeros((1, 5), np.float32),
        {"mode": "sum"},
        r"attribute 'mode' must be \"avg\" or \"max\", got \"sum\"",
    ),
    ("output size", np.zeros((1, 5), np.float32), {"output_height": 0}, r"must be at least 1, got 0"),
    ("huge roi", np.array([[0, 0, 0, 1e9, 1e9]], np.float32), {"sampling_ratio": 0}, r"samples per bin"),
    (
        "huge roi, fixed sampling",
        np.array([[0, 0, 0, 1e9, 1e9]], np.float32),
        {"sampling_ratio": 8192, "output_height": 1, "output_width": 1},
        r"needs 8192 x 8192 samples per bin, more than this op allows",
    ),
    (
        "huge output",
        np.zeros((1, 5), np.float32),
        {"output_height": 1 << 32, "output_width": 1 << 32},
        r"output size 4294967296 x 4294967296 is too large",
    ),
    ("aligned", np.zeros((1, 5), np.float32), {"aligned": 2}, r"attribute 'aligned' must be 0 or 1, got 2"),
    ("rois rank 1", np.zeros(5, np.float32), {}, r"input 'rois' must have rank 2, got shape \[5\]"),
    ("rois rank 3", np.zeros((1, 1, 5), np.float32), {}, r"input 'rois' must have rank 2, got shape \[1, 1, 5\]"),
    (
        "huge sampling",
        np.zeros((1, 5), np.float32),
        {"sampling_ratio": 1 << 20},
        r"'sampling_ratio' must be at most 65536",
    ),
]


@pytest.mark.parametrize("case,rois,overrides,message", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("domain,op,compat", DOMAINS)
def test_bad_input_is_an_error(case, rois, overrides, message, domain, op, compat) -> None:
    features = np.zeros((2, 1, 4, 4), np.float32)
    a = {**attrs(2, 1.0, 2, "avg", 1), **overrides}
    with pytest.raises(Exception, match=rf"{domain}\.{op}: .*{message}"):
        pool(op, domain, features, rois, **a)


WRONG_DTYPES = [
    ("int64 rois", np.float32, np.int64),
    ("float16 input, float rois", np.float16, np.float32),  # float16 itself is a kernel type
    ("float input, double rois", np.float32, np.float64),
]


@pytest.mark.parametrize("case,input_dtype,rois_dtype", WRONG_DTYPES, ids=[w[0] for w in WRONG_DTYPES])
@pytest.mark.parametrize("domain,op,compat", DOMAINS)
def test_wrong_dtype_is_an_error(case, input_dtype, rois_dtype, domain, op, compat) -> None:
    # ONNX Runtime rejects the node before the kernel runs, with a message that names the op.
    feeds = {"input": np.zeros((1, 1, 4, 4), input_dtype), "rois": np.zeros((1, 5), rois_dtype)}
    with pytest.raises(Exception, match=rf"\({op}\)"):
        run(op, domain, feeds, ["output"])


def test_wrong_rank_is_an_error() -> None:
    with pytest.raises(Exception, match=r"input 'input' must have rank 4, got shape \[4, 4\]"):
        pool("RoIAlign", "ortops", np.zeros((4, 4), np.float32), np.zeros((1, 5), np.float32))


@pytest.mark.parametrize("domain,op,compat", DOMAINS)
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("sampling", [0, 2])
def test_many_rois_and_channels_take_the_channels_last_path(domain, op, compat, mode, sampling) -> None:
    """Enough rois and channels that the kernel pools from a channels-last copy."""
    features, rois = make_case(np.random.default_rng(11), 2, 16, 6, 7, 60, np.float32, 0.5)
    rois[0] = [1, 0, 0, 0, 0]  # an empty adaptive grid too
    (got,) = pool(op, domain, features, rois, **attrs(2, 0.5, sampling, mode, 1))
    expected = references.roi_align(features, rois, 2, 3, 0.5, sampling, mode, True, compat)
    np.testing.assert_allclose(got, expected, **TOLERANCE[np.float32])


def pool_each_roi_alone(op: str, domain: str, features: np.ndarray, rois: np.ndarray, **a) -> np.ndarray:
    """The rois one run each: too few reads for a channels-last copy to pay, so the planar path."""
    return np.concatenate([pool(op, domain, features, rois[r : r + 1], **a)[0] for r in range(len(rois))])


@pytest.mark.parametrize("domain,op,compat", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("channels", [8, 9, 17, 33, 70])
def test_channels_last_path_gives_the_planar_paths_bits(domain, op, compat, dtype, mode, channels) -> None:
    """The dispatched channels-last loop (vectors of channels, then the channels left over) adds
    and divides in the planar loop's order: bit-equal outputs, at channel counts that are not
    multiples of any vector width, on rois across and beyond the edges, empty ones and batch 2."""
    rng = np.random.default_rng(channels)
    features, rois = make_case(rng, 2, channels, 8, 9, 40, dtype, 0.5)
    rois[:4, 1:] = [[-4, -4, 3, 3], [10, 12, 30, 30], [0, 0, 0, 0], [5, 5, 5, 5]]  # border, beyond, empty
    for sampling in (0, 2):
        a = attrs(2, 0.5, sampling, mode, 1)
        (together,) = pool(op, domain, features, rois, **a)
        np.testing.assert_array_equal(together, pool_each_roi_alone(op, domain, features, rois, **a))
        expected = references.roi_align(features, rois, 2, 3, 0.5, sampling, mode, True, compat)
        np.testing.assert_allclose(together, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("channels", [1, 3, 17])
def test_channel_counts_match_reference(channels: int) -> None:
    features, rois = make_case(np.random.default_rng(5), 2, channels, 7, 6, 50, np.float32, 0.5)
    (got,) = pool("RoIAlign", "ortops", features, rois, **attrs(3, 0.5, 2, "avg", 1))
    expected = references.roi_align(features, rois, 3, 4, 0.5, 2, "avg", True, False)
    np.testing.assert_allclose(got, expected, **TOLERANCE[np.float32])


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_float16_channels_last_rounds_the_float32_result(mode: str) -> None:
    """Float16 pools in float32 from the channels-last copy, then rounds once on store."""
    features, rois = make_case(np.random.default_rng(3), 2, 19, 6, 7, 60, np.float32, 0.5)
    features = features.astype(np.float16)
    a = attrs(2, 0.5, 2, mode, 1)
    (half,) = pool("RoIAlign", "ortops", features, rois.astype(np.float16), **a)
    (single,) = pool("RoIAlign", "ortops", features.astype(np.float32), rois.astype(np.float16).astype(np.float32), **a)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, single.astype(np.float16))
