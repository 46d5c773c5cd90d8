"""Rotated feature alignment in both domains against the slow loop in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references

from ortest import run

DOMAINS = [("mmcv", "MMCVRotatedFeatureAlign", True), ("ortops", "RotatedFeatureAlign", False)]
TOLERANCE = {np.float32: {"rtol": 1e-5, "atol": 1e-5}, np.float64: {"rtol": 1e-12, "atol": 1e-12}}


def align(op: str, domain: str, features: np.ndarray, boxes: np.ndarray, **attributes: object) -> np.ndarray:
    """The node's one output for `features` and `best_rbboxes` = `boxes`."""
    (output,) = run(op, domain, {"features": features, "best_rbboxes": boxes}, ["output"], **attributes)
    return output


def make_case(rng: np.random.Generator, n: int, c: int, h: int, w: int, dtype: type, scale: float):
    features = rng.normal(size=(n, c, h, w)).astype(dtype)
    centers = rng.uniform(-2, max(h, w) + 2, (n, h, w, 2)) / scale
    sizes = rng.uniform(0, 6, (n, h, w, 2)) / scale
    angle = rng.uniform(-np.pi, np.pi, (n, h, w, 1))
    return features, np.concatenate([centers, sizes, angle], -1).astype(dtype)


@pytest.mark.parametrize("domain,op,y_first", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("points", [1, 5])
def test_matches_reference(domain, op, y_first, dtype, points) -> None:
    features, boxes = make_case(np.random.default_rng(points), 2, 3, 6, 7, dtype, 0.5)
    got = align(op, domain, features, boxes, spatial_scale=0.5, points=points)
    np.testing.assert_allclose(
        got, references.rotated_feature_align(features, boxes, 0.5, points, y_first), **TOLERANCE[dtype]
    )


def test_mmcv_reads_y_first_and_ortops_x_first() -> None:
    features = np.zeros((1, 1, 4, 6), np.float32)
    features[0, 0, 1, 3] = 1.0  # y = 1, x = 3
    boxes = np.zeros((1, 4, 6, 5), np.float32)
    boxes[..., 0], boxes[..., 1] = 1.0, 3.0
    mmcv = align("MMCVRotatedFeatureAlign", "mmcv", features, boxes, spatial_scale=1.0, points=1)
    ortops = align("RotatedFeatureAlign", "ortops", features, boxes, spatial_scale=1.0, points=1)
    assert mmcv[0, 0, 0, 0] == 1.0  # sampled (y=1, x=3)
    assert ortops[0, 0, 0, 0] == 0.0  # sampled (x=1, y=3)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    features, boxes = make_case(np.random.default_rng(4), 2, 4, 9, 8, np.float32, 1.0)
    got = align("RotatedFeatureAlign", "ortops", features, boxes, threads=threads, points=5)
    np.testing.assert_allclose(
        got, references.rotated_feature_align(features, boxes, 1.0, 5, False), **TOLERANCE[np.float32]
    )


def test_empty() -> None:
    got = align("RotatedFeatureAlign", "ortops", np.zeros((0, 2, 3, 3), np.float32), np.zeros((0, 3, 3, 5), np.float32))
    assert got.shape == (0, 2, 3, 3)


@pytest.mark.parametrize("domain,op,y_first", DOMAINS)
def test_bad_input_is_an_error(domain, op, y_first) -> None:
    features = np.zeros((1, 2, 3, 4), np.float32)
    with pytest.raises(
        Exception, match=r"input 'best_rbboxes' must have shape \[N, H, W, 5\] = \[1, 3, 4, 5\], got \[1, 4, 3, 5\]"
    ):
        align(op, domain, features, np.zeros((1, 4, 3, 5), np.float32))
    boxes = np.zeros((1, 3, 4, 5), np.float32)
    boxes[0, 1, 1, 2] = np.nan
    with pytest.raises(Exception, match="input 'best_rbboxes' contains NaN"):
        align(op, domain, features, boxes)
    with pytest.raises(Exception, match="attribute 'points' must be 1 or 5, got 3"):
        align(op, domain, features, np.zeros((1, 3, 4, 5), np.float32), points=3)
