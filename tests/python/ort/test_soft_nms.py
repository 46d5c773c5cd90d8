"""SoftNonMaxSuppression (mmcv) and SoftNMS (ortops) against the working-list loop in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references

from ortest import run

DOMAINS = [("mmcv", "SoftNonMaxSuppression"), ("ortops", "SoftNMS")]
# Scores are decayed by the same float operations in the same order; only exp may differ.
TOLERANCE = {np.float32: {"rtol": 1e-6, "atol": 1e-7}, np.float64: {"rtol": 1e-14, "atol": 1e-15}}


def clustered(rng: np.random.Generator, n: int, dtype: type):
    centers = rng.uniform(0, 100, (max(1, n // 6), 2))[rng.integers(0, max(1, n // 6), n)]
    xy = centers + rng.normal(0, 3, (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(2, 25, (n, 2))], 1).astype(dtype)
    scores = rng.choice(np.linspace(0.01, 1, max(2, n // 2)), n).astype(dtype)  # with ties
    return boxes, scores


def soft(op: str, domain: str, boxes, scores, **attrs):
    return run(op, domain, {"boxes": boxes, "scores": scores}, ["dets", "indices"], **attrs)


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", [0, 1, 2])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("n", [0, 1, 2, 60])
def test_matches_reference(domain, op, dtype, method, offset, n) -> None:
    boxes, scores = clustered(np.random.default_rng(n + method), n, dtype)
    attrs = dict(iou_threshold=0.3, sigma=0.5, min_score=0.05, method=method, offset=offset)
    dets, indices = soft(op, domain, boxes, scores, **attrs)
    expected_dets, expected_indices = references.soft_nms(boxes, scores, 0.3, 0.5, 0.05, method, offset)
    assert dets.dtype == dtype and indices.dtype == np.int64
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_allclose(dets, expected_dets, **TOLERANCE[dtype])


def test_first_selected_box_is_kept_even_below_min_score() -> None:
    boxes = np.array([[0, 0, 1, 1], [5, 5, 6, 6]], np.float32)
    scores = np.array([0.01, 0.02], np.float32)
    dets, indices = soft("SoftNMS", "ortops", boxes, scores, min_score=0.5)
    np.testing.assert_array_equal(indices, [1])  # the original's quirk: box 0 is dropped, box 1 is not


def test_linear_decay_by_hand() -> None:
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 5]], np.float32)  # IoU 0.5
    scores = np.array([0.9, 0.8], np.float32)
    dets, indices = soft("SoftNMS", "ortops", boxes, scores, iou_threshold=0.3, method=1, min_score=0.0)
    np.testing.assert_array_equal(indices, [0, 1])
    np.testing.assert_allclose(dets[:, 4], [0.9, 0.8 * 0.5], rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_settings_do_not_matter(threads: int) -> None:
    boxes, scores = clustered(np.random.default_rng(1), 200, np.float32)
    dets, indices = run(
        "SoftNMS", "ortops", {"boxes": boxes, "scores": scores}, ["dets", "indices"], threads=threads, method=2
    )
    np.testing.assert_array_equal(indices, references.soft_nms(boxes, scores, 0.3, 0.5, 0.001, 2, 0)[1])


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_input_is_an_error(domain, op) -> None:
    boxes, scores = clustered(np.random.default_rng(0), 4, np.float32)
    with pytest.raises(Exception, match=r"input 'scores' must have shape \[N\] with N = 4"):
        soft(op, domain, boxes, scores[:3])
    with pytest.raises(Exception, match=r"attribute 'sigma' must be > 0 for the gaussian method, got 0"):
        soft(op, domain, boxes, scores, method=2, sigma=0.0)
    with pytest.raises(
        Exception, match=r"attribute 'method' must be 0 \(naive\), 1 \(linear\) or 2 \(gaussian\), got 3"
    ):
        soft(op, domain, boxes, scores, method=3)
    boxes[1, 2] = np.nan
    with pytest.raises(Exception, match="input 'boxes' contains NaN"):
        soft(op, domain, boxes, scores)


def mixed(rng: np.random.Generator, n: int):
    """Clustered boxes plus empty, inverted and huge ones, with many exact score ties."""
    boxes, scores = clustered(rng, n, np.float32)
    boxes[: n // 10, 2:] = boxes[: n // 10, :2]  # empty
    boxes[n // 10 : n // 5, 2:] = boxes[n // 10 : n // 5, :2] - 1  # inverted
    boxes[n // 5 : n // 4, 2:] += 300  # huge: covers many grid cells
    scores = np.round(scores * 4) / 4  # ties
    return boxes, scores.astype(np.float32)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("method,threshold", [(0, 0.3), (1, 0.3), (2, 0.3), (0, 0.0), (1, -0.5)])
@pytest.mark.parametrize("offset", [0, 1])
def test_indexed_and_all_pairs_paths_match_reference(seed, method, threshold, offset) -> None:
    """Positive-area boxes with a positive threshold (or gaussian) take the heap-and-grid path,
    the rest the all-pairs path; both must replay the original's selections and ties."""
    rng = np.random.default_rng(seed)
    for boxes, scores in (clustered(rng, 300, np.float32), mixed(rng, 200)):
        scores = (np.round(scores * 8) / 8).astype(np.float32)
        dets, indices = soft(
            "SoftNMS",
            "ortops",
            boxes,
            scores,
            iou_threshold=threshold,
            sigma=0.5,
            min_score=0.05,
            method=method,
            offset=offset,
        )
        expected_dets, expected_indices = references.soft_nms(boxes, scores, threshold, 0.5, 0.05, method, offset)
        np.testing.assert_array_equal(indices, expected_indices)
        np.testing.assert_allclose(dets, expected_dets, **TOLERANCE[np.float32])
