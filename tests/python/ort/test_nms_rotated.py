"""NMSRotated (mmdeploy, ortops) against the polygon reference in references.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import references

from ortest import run

DOMAINS = [("mmdeploy", "NMSRotated"), ("ortops", "NMSRotated")]


def case(rng: np.random.Generator, b: int, c: int, n: int, dtype: type = np.float32):
    centers = rng.uniform(0, 50, (b, max(1, n // 4), 2))
    cxy = np.stack([centers[i][rng.integers(0, centers.shape[1], n)] for i in range(b)]) + rng.normal(0, 2, (b, n, 2))
    wh = rng.uniform(4, 16, (b, n, 2))
    theta = rng.uniform(-math.pi, math.pi, (b, n, 1))
    boxes = np.concatenate([cxy, wh, theta], -1).astype(dtype)
    return boxes, rng.choice(np.linspace(0, 1, 21), (b, c, n)).astype(dtype)


def nms(op, domain, boxes, scores, iou: float, score: float, threads: int = 0):
    return run(
        op,
        domain,
        {"boxes": boxes, "scores": scores},
        ["selected"],
        threads=threads,
        iou_threshold=iou,
        score_threshold=score,
    )[0]


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1, 0), (1, 1, 1), (2, 3, 24)])
@pytest.mark.parametrize("iou,score", [(0.1, 0.0), (0.5, 0.3)])
def test_matches_reference(domain, op, dtype, shape, iou, score) -> None:
    boxes, scores = case(np.random.default_rng(sum(shape)), *shape, dtype)
    got = nms(op, domain, boxes, scores, iou, score)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, references.nms_rotated(boxes, scores, iou, score))


@pytest.mark.parametrize(
    "a,b,expected",
    [
        ([0, 0, 4, 2, 0.3], [0, 0, 4, 2, 0.3], 1.0),  # identical
        ([0, 0, 4, 4, 0], [2, 0, 4, 4, 0], 1 / 3),  # axis-aligned, half overlap
        ([0, 0, 2, 2, 0], [0, 0, 2, 2, math.pi / 4], 1 / math.sqrt(2)),  # octagon 8(sqrt2 - 1) over 8 - that
        ([0, 0, 2, 2, 0], [10, 10, 2, 2, 1.0], 0.0),  # disjoint
        ([0, 0, 10, 10, 0.2], [0, 0, 2, 2, 1.1], 4 / 100),  # contained
        ([0, 0, 2, 2, 0], [2, 0, 2, 2, 0], 0.0),  # touching edges
    ],
)
def test_iou_known_cases_decide_suppression(a, b, expected) -> None:
    """Two boxes with known IoU: the lower-scored one goes exactly when IoU > threshold."""
    boxes = np.array([[a, b]], np.float64)
    scores = np.array([[[0.9, 0.8]]], np.float64)
    assert references.rotated_iou(boxes[0, 0], boxes[0, 1]) == pytest.approx(expected, abs=1e-9)
    for threshold in (expected - 1e-6, expected + 1e-6):
        got = nms("NMSRotated", "ortops", boxes, scores, threshold, 0.0)
        assert len(got) == (1 if expected > threshold else 2), (threshold, got)


def test_low_scores_still_suppress() -> None:
    boxes = np.array([[[0, 0, 4, 4, 0], [0.1, 0, 4, 4, 0], [20, 20, 4, 4, 0]]], np.float32)
    scores = np.array([[[0.2, 0.1, 0.9]]], np.float32)
    got = nms("NMSRotated", "mmdeploy", boxes, scores, 0.5, 0.5)
    np.testing.assert_array_equal(got, [[0, 0, 2]])  # box 0 is not emitted, yet box 1 stays suppressed


def test_zero_size_boxes_are_kept() -> None:
    boxes = np.array([[[1, 1, 0, 0, 0], [1, 1, 0, 0, 0.5]]], np.float32)
    scores = np.array([[[0.9, 0.8]]], np.float32)
    np.testing.assert_array_equal(nms("NMSRotated", "ortops", boxes, scores, 0.0, 0.0), [[0, 0, 0], [0, 0, 1]])


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    boxes, scores = case(np.random.default_rng(3), 2, 4, 30)
    np.testing.assert_array_equal(
        nms("NMSRotated", "ortops", boxes, scores, 0.3, 0.2, threads), references.nms_rotated(boxes, scores, 0.3, 0.2)
    )


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_input_is_an_error(domain, op) -> None:
    boxes, scores = case(np.random.default_rng(0), 1, 2, 4)
    with pytest.raises(Exception, match=r"input 'boxes' must have shape \[B, N, 5\]"):
        nms(op, domain, boxes[..., :4].copy(), scores, 0.5, 0.0)
    with pytest.raises(Exception, match=r"input 'scores' must have shape \[B, C, N\] = \[1, C, 4\], got \[1, 2, 3\]"):
        nms(op, domain, boxes, scores[..., :3].copy(), 0.5, 0.0)
    boxes[0, 1, 4] = np.inf
    with pytest.raises(Exception, match="input 'boxes' is not finite"):
        nms(op, domain, boxes, scores, 0.5, 0.0)
