"""Rotated RoIAlign in all three domains against the slow loop in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references

from ortest import pool

DOMAINS = [("mmcv", "MMCVRoIAlignRotated"), ("mmdeploy", "MMCVRoIAlignRotated"), ("ortops", "RoIAlignRotated")]
TOLERANCE = {np.float32: {"rtol": 1e-5, "atol": 1e-5}, np.float64: {"rtol": 1e-12, "atol": 1e-13}}


def make_case(rng: np.random.Generator, n: int, c: int, h: int, w: int, r: int, dtype: type, scale: float):
    features = rng.normal(size=(n, c, h, w)).astype(dtype)
    centers = rng.uniform(-0.1, 1.1, (r, 2)) * [w / scale, h / scale]
    sizes = rng.uniform(0, 0.7, (r, 2)) * [w / scale, h / scale]
    theta = rng.uniform(-np.pi, np.pi, (r, 1))
    rois = np.concatenate([rng.integers(0, n, (r, 1)), centers, sizes, theta], axis=1).astype(dtype)
    return features, rois


def attrs(scale: float, sampling: int, aligned: int, clockwise: int) -> dict:
    return dict(
        output_height=3,
        output_width=2,
        spatial_scale=scale,
        sampling_ratio=sampling,
        aligned=aligned,
        clockwise=clockwise,
    )


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("clockwise", [0, 1])
@pytest.mark.parametrize("sampling", [0, 2])
def test_matches_reference(domain, op, dtype, aligned, clockwise, sampling) -> None:
    features, rois = make_case(np.random.default_rng(aligned + 2 * clockwise), 2, 3, 10, 12, 5, dtype, 0.5)
    (got,) = pool(op, domain, features, rois, **attrs(0.5, sampling, aligned, clockwise))
    expected = references.roi_align_rotated(features, rois, 3, 2, 0.5, sampling, bool(aligned), bool(clockwise))
    assert got.dtype == dtype
    np.testing.assert_allclose(got, expected, **TOLERANCE[dtype])


def test_zero_angle_equals_axis_aligned_roi_align() -> None:
    rng = np.random.default_rng(3)
    features = rng.normal(size=(1, 2, 9, 9)).astype(np.float64)
    boxes = np.array([[0, 1.0, 2.0, 7.0, 6.5], [0, 3.0, 0.5, 8.0, 8.0]])
    rotated = np.stack(
        [
            boxes[:, 0],
            (boxes[:, 1] + boxes[:, 3]) / 2,
            (boxes[:, 2] + boxes[:, 4]) / 2,
            boxes[:, 3] - boxes[:, 1],
            boxes[:, 4] - boxes[:, 2],
            np.zeros(2),
        ],
        1,
    )
    (got,) = pool("RoIAlignRotated", "ortops", features, rotated, **attrs(1.0, 2, 1, 0))
    (plain,) = pool("RoIAlign", "ortops", features, boxes, output_height=3, output_width=2, sampling_ratio=2)
    np.testing.assert_allclose(got, plain, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    features, rois = make_case(np.random.default_rng(8), 2, 4, 12, 12, 30, np.float32, 1.0)
    (got,) = pool("RoIAlignRotated", "ortops", features, rois, threads=threads, **attrs(1.0, 0, 1, 0))
    np.testing.assert_allclose(
        got, references.roi_align_rotated(features, rois, 3, 2, 1.0, 0, True, False), **TOLERANCE[np.float32]
    )


def pool_each_roi_alone(op: str, domain: str, features: np.ndarray, rois: np.ndarray, **a) -> np.ndarray:
    """The rois one run each: too few reads for a channels-last copy to pay, so the planar path."""
    return np.concatenate([pool(op, domain, features, rois[r : r + 1], **a)[0] for r in range(len(rois))])


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [8, 9, 17, 33, 70])
def test_channels_last_path_gives_the_planar_paths_bits(domain, op, dtype, channels) -> None:
    """Enough rois and channels that the kernel pools from a channels-last copy: the dispatched
    loop (vectors of channels, then the channels left over) adds and divides in the planar
    loop's order, so the outputs are bit-equal, at channel counts that are not multiples of any
    vector width, on rois across and beyond the edges, empty ones and batch 2."""
    rng = np.random.default_rng(channels)
    features, rois = make_case(rng, 2, channels, 8, 9, 40, dtype, 0.5)
    rois[:4, 1:] = [[0, 0, 6, 6, 0.5], [20, 24, 8, 8, 1.0], [5, 5, 0, 0, 0], [-3, 17, 9, 2, -2.0]]
    for aligned, clockwise, sampling in ((1, 1, 2), (0, 0, 0), (1, 0, 0), (0, 1, 2)):
        a = attrs(0.5, sampling, aligned, clockwise)
        (together,) = pool(op, domain, features, rois, **a)
        np.testing.assert_array_equal(together, pool_each_roi_alone(op, domain, features, rois, **a))
        expected = references.roi_align_rotated(features, rois, 3, 2, 0.5, sampling, bool(aligned), bool(clockwise))
        np.testing.assert_allclose(together, expected, **TOLERANCE[dtype])


def test_empty_rois() -> None:
    (got,) = pool(
        "RoIAlignRotated",
        "ortops",
        np.zeros((1, 3, 4, 4), np.float32),
        np.zeros((0, 6), np.float32),
        **attrs(1.0, 2, 1, 0),
    )
    assert got.shape == (0, 3, 3, 2)


BAD = [
    (
        "batch index",
        np.array([[1, 2, 2, 2, 2, 0]], np.float32),
        r"roi 0 has batch index 1, but input 'input' has 1 images",
    ),
    ("NaN angle", np.array([[0, 2, 2, 2, 2, np.nan]], np.float32), r"roi 0 in input 'rois' is not finite"),
    ("rois [R, 5]", np.zeros((1, 5), np.float32), r"input 'rois' must have shape \[R, 6\]"),
    ("huge roi", np.array([[0, 2, 2, 1e9, 1e9, 0]], np.float32), r"samples per bin"),
]


@pytest.mark.parametrize("case,rois,message", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_input_is_an_error(case, rois, message, domain, op) -> None:
    with pytest.raises(Exception, match=rf"{domain}\.{op}: .*{message}"):
        pool(op, domain, np.zeros((1, 1, 4, 4), np.float32), rois, **attrs(1.0, 0, 1, 0))
