"""NMSMatch (mmdeploy, ortops) against the loop in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references

from ortest import run

DOMAINS = [("mmdeploy", "NMSMatch"), ("ortops", "NMSMatch")]


def case(rng: np.random.Generator, b: int, c: int, n: int, dtype: type = np.float32):
    centers = rng.uniform(0, 60, (b, max(1, n // 4), 2))
    xy = np.stack([centers[i][rng.integers(0, centers.shape[1], n)] for i in range(b)]) + rng.normal(0, 2, (b, n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 15, (b, n, 2))], -1).astype(dtype)
    scores = rng.choice(np.linspace(0, 1, 11), (b, c, n)).astype(dtype)
    return boxes, scores


def match(op, domain, boxes, scores, iou: float, score: float, threads: int = 0):
    feeds = {
        "boxes": boxes,
        "scores": scores,
        "iou_threshold": np.array([iou], np.float32),
        "score_threshold": np.array([score], np.float32),
    }
    return run(op, domain, feeds, ["matches"], threads=threads)[0]


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1, 0), (1, 1, 1), (2, 3, 30)])
@pytest.mark.parametrize("iou,score", [(0.3, 0.0), (0.5, 0.45), (0.7, 0.9)])
def test_matches_reference(domain, op, dtype, shape, iou, score) -> None:
    boxes, scores = case(np.random.default_rng(sum(shape)), *shape, dtype)
    got = match(op, domain, boxes, scores, iou, score)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, references.nms_match(boxes, scores, iou, score))


def test_iou_exactly_at_threshold_suppresses() -> None:
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 5]]], np.float32)  # IoU 0.5 (less 1e-10)
    scores = np.array([[[0.9, 0.8]]], np.float32)
    np.testing.assert_array_equal(match("NMSMatch", "ortops", boxes, scores, 0.49, 0.0), [[0, 0, 0, 1]])
    assert match("NMSMatch", "ortops", boxes, scores, 0.51, 0.0).shape == (0, 4)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    boxes, scores = case(np.random.default_rng(4), 3, 4, 40)
    np.testing.assert_array_equal(
        match("NMSMatch", "ortops", boxes, scores, 0.4, 0.2, threads), references.nms_match(boxes, scores, 0.4, 0.2)
    )


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_input_is_an_error(domain, op) -> None:
    boxes, scores = case(np.random.default_rng(0), 2, 2, 5)
    with pytest.raises(Exception, match=r"input 'scores' must have shape \[B, C, N\] = \[2, C, 5\], got \[2, 2, 4\]"):
        match(op, domain, boxes, scores[..., :4], 0.5, 0.1)
    feeds = {
        "boxes": boxes,
        "scores": scores,
        "iou_threshold": np.array([0.5, 0.6], np.float32),
        "score_threshold": np.array([0.1], np.float32),
    }
    with pytest.raises(Exception, match=r"input 'iou_threshold' must hold one value, got shape \[2\]"):
        run(op, domain, feeds, ["matches"])
