"""SoftNonMaxSuppression (mmcv) and SoftNMS (ortops) against the working-list loop in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references
from onnx import TensorProto, helper

from ortest import IR_VERSION, run, session

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


def grid_stress_sets(rng: np.random.Generator, dtype: type):
    """Inputs aimed at the indexed path's grid and selection board: one dense cluster where
    every box meets every other, tiny boxes spread far apart under a few boxes that cover
    everything (more cells than boxes, wide boxes), and signed-zero and negative score ties."""
    xy = rng.normal(50, 2, (160, 2))
    dense = np.concatenate([xy, xy + rng.uniform(20, 30, (160, 2))], 1)
    dense_scores = rng.choice([0.25, 0.5, 0.75, 1.0], 160)
    xy = rng.uniform(0, 1e4, (120, 2))
    spread = np.concatenate([xy, xy + rng.uniform(0.5, 3, (120, 2))], 1)
    spread[:4] = [[-10, -10, 1e4 + 10, 1e4 + 10], [0, 0, 5e3, 5e3], [5e3, 5e3, 1e4, 1e4], [1e6, 1e6, 1e6 + 1, 1e6 + 1]]
    spread_scores = rng.choice([0.1, 0.2, 0.3], 120)
    zeros_scores = rng.choice([-0.0, 0.0, -0.5, 0.5], 160)
    return [
        (dense.astype(dtype), dense_scores.astype(dtype), 0.001),
        (spread.astype(dtype), spread_scores.astype(dtype), 0.001),
        (dense.astype(dtype), zeros_scores.astype(dtype), -1.0),
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", [1, 2])
def test_indexed_path_on_dense_spread_and_signed_zero_inputs(dtype, method) -> None:
    for boxes, scores, min_score in grid_stress_sets(np.random.default_rng(11), dtype):
        dets, indices = soft(
            "SoftNMS", "ortops", boxes, scores, iou_threshold=0.3, sigma=0.5, min_score=min_score, method=method
        )
        expected_dets, expected_indices = references.soft_nms(boxes, scores, 0.3, 0.5, min_score, method, 0)
        np.testing.assert_array_equal(indices, expected_indices)
        np.testing.assert_allclose(dets, expected_dets, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", [1, 2])
def test_indexed_path_equals_the_literal_replay_on_thousands_of_boxes(dtype, method) -> None:
    """Too many boxes for the Python reference: the kernel's own all-pairs path (the original's
    loop, taken when any box is empty) is the reference. The empty box comes last with a score
    below min_score, so the first pass drops it without moving any other box."""
    rng = np.random.default_rng(21)
    centers = rng.uniform(0, 1000, (60, 2))[rng.integers(0, 60, 3000)]
    xy = centers + rng.normal(0, 8, (3000, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(20, 120, (3000, 2))], 1).astype(dtype)
    scores = (np.round(rng.random(3000) * 64) / 64).astype(dtype)  # many exact ties
    attrs = dict(iou_threshold=0.3, sigma=0.5, min_score=0.01, method=method)
    dets, indices = soft("SoftNMS", "ortops", boxes, scores, **attrs)
    empty = np.array([[5000, 5000, 5000, 5000]], dtype)
    all_dets, all_indices = soft(
        "SoftNMS", "ortops", np.concatenate([boxes, empty]), np.append(scores, dtype(0)), **attrs
    )
    np.testing.assert_array_equal(indices, all_indices)
    np.testing.assert_array_equal(dets, all_dets)
    assert 100 < len(indices) < 3000


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_ties_follow_the_working_order_not_the_index(domain, op) -> None:
    """mmcv swaps the selected box to the front: selecting box 2 first moves box 0 behind box 1,
    so of the equal scores 0 and 1, box 1 comes first."""
    boxes = np.array([[0, 0, 1, 1], [5, 5, 6, 6], [10, 10, 11, 11]], np.float32)
    scores = np.array([0.5, 0.5, 0.9], np.float32)
    np.testing.assert_array_equal(soft(op, domain, boxes, scores)[1], [2, 1, 0])
    np.testing.assert_array_equal(soft(op, domain, boxes[:2], scores[:2])[1], [0, 1])  # no swap: lower index first


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_iou_and_min_score_exactly_at_their_thresholds(domain, op, dtype) -> None:
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 5]], dtype)  # IoU exactly 0.5 (offset 0)
    scores = np.array([0.9, 0.8], dtype)
    decayed = dtype(0.8) * dtype(0.5)
    # Naive at IoU == threshold: weight 0; a score of 0 is not below min_score 0, so it stays.
    dets, indices = soft(op, domain, boxes, scores, iou_threshold=0.5, method=0, min_score=0.0)
    np.testing.assert_array_equal(indices, [0, 1])
    assert dets[1, 4] == 0
    assert soft(op, domain, boxes, scores, iou_threshold=0.5, method=0, min_score=1e-6)[1].tolist() == [0]
    # Linear at IoU == threshold: weight 1 - 0.5; just above the threshold: weight 1.
    dets, _ = soft(op, domain, boxes, scores, iou_threshold=0.5, method=1, min_score=0.0)
    assert dets[1, 4] == decayed
    above = float(np.nextafter(np.float32(0.5), np.float32(1)))
    dets, _ = soft(op, domain, boxes, scores, iou_threshold=above, method=1, min_score=0.0)
    assert dets[1, 4] == dtype(0.8)
    # A decayed score exactly at min_score is kept (the test is score < min_score).
    at = float(np.float32(0.4))
    if dtype == np.float32:
        assert soft(op, domain, boxes, scores, iou_threshold=0.5, method=1, min_score=at)[1].tolist() == [0, 1]
    above = float(np.nextafter(np.float32(decayed), np.float32(1)))
    assert soft(op, domain, boxes, scores, iou_threshold=0.5, method=1, min_score=above)[1].tolist() == [0]


@pytest.mark.parametrize("offset", [0, 1])
def test_offset_changes_the_iou(offset: int) -> None:
    boxes = np.array([[0, 0, 9, 9], [0, 0, 9, 4]], np.float64)  # IoU 36/81 (offset 0) or 50/100 (offset 1)
    scores = np.array([0.9, 0.8], np.float64)
    dets, _ = soft("SoftNMS", "ortops", boxes, scores, iou_threshold=0.0, method=1, min_score=0.0, offset=offset)
    iou = 0.5 if offset else 36 / 81
    np.testing.assert_allclose(dets[1, 4], 0.8 * (1 - iou), **TOLERANCE[np.float64])


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_gaussian_decay_by_hand(domain, op) -> None:
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 5], [50, 50, 60, 60]], np.float64)
    scores = np.array([0.9, 0.8, 0.7], np.float64)
    dets, indices = soft(op, domain, boxes, scores, sigma=0.5, method=2, min_score=0.0)
    np.testing.assert_array_equal(indices, [0, 2, 1])  # 0.8 * exp(-0.25 / 0.5) = 0.485 < 0.7
    np.testing.assert_allclose(dets[:, 4], [0.9, 0.7, 0.8 * np.exp(-0.5)], **TOLERANCE[np.float64])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("method", [0, 1, 2])
def test_infinite_scores_and_overflowing_areas_replay_the_original(seed: int, method: int) -> None:
    """inf * 0 and inf / inf make NaN scores; whatever the original then does, so do we."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 10, (14, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(3, 8, (14, 2))], 1).astype(np.float32)
    scores = rng.choice([0.2, 0.5, 0.9, np.inf, -np.inf], 14).astype(np.float32)
    huge = (boxes * np.float32(4e18)).astype(np.float32)  # areas overflow float32
    for b, s in ((boxes, scores), (huge, np.abs(np.nan_to_num(scores, posinf=0.7, neginf=0.3)))):
        dets, indices = soft("SoftNMS", "ortops", b, s, iou_threshold=0.3, sigma=0.5, min_score=0.05, method=method)
        expected_dets, expected_indices = references.soft_nms(b, s, 0.3, 0.5, 0.05, method, 0)
        np.testing.assert_array_equal(indices, expected_indices)
        np.testing.assert_allclose(dets, expected_dets, equal_nan=True, **TOLERANCE[np.float32])


def test_omitted_attributes_take_the_schema_defaults() -> None:
    boxes, scores = clustered(np.random.default_rng(5), 40, np.float32)
    dets, indices = soft("SoftNMS", "ortops", boxes, scores)
    expected_dets, expected_indices = references.soft_nms(boxes, scores, 0.3, 0.5, 0.001, 1, 0)
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_allclose(dets, expected_dets, **TOLERANCE[np.float32])


def test_node_as_mmcv_exported_it() -> None:
    """mmcv's SoftNMSop.symbolic: all five attributes, floats as floats, method and offset as ints."""
    node = helper.make_node(
        "SoftNonMaxSuppression",
        ["boxes", "scores"],
        ["dets", "inds"],
        domain="mmcv",
        iou_threshold=0.3,
        sigma=0.5,
        min_score=1e-3,
        method=2,
        offset=0,
    )
    graph = helper.make_graph(
        [node],
        "soft_nms",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n"]),
        ],
        [
            helper.make_tensor_value_info("dets", TensorProto.FLOAT, ["k", 5]),
            helper.make_tensor_value_info("inds", TensorProto.INT64, ["k"]),
        ],
    )
    model = helper.make_model(
        graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("mmcv", 1)]
    )
    boxes, scores = clustered(np.random.default_rng(9), 80, np.float32)
    dets, indices = session(model).run(None, {"boxes": boxes, "scores": scores})
    expected_dets, expected_indices = references.soft_nms(boxes, scores, 0.3, 0.5, 1e-3, 2, 0)
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_allclose(dets, expected_dets, **TOLERANCE[np.float32])


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_more_bad_inputs_are_errors(domain, op) -> None:
    boxes, scores = clustered(np.random.default_rng(0), 4, np.float32)
    with pytest.raises(Exception, match=r"input 'boxes' must have shape \[N, 4\], got \[4, 3\]"):
        soft(op, domain, np.ascontiguousarray(boxes[:, :3]), scores)
    with pytest.raises(Exception, match=r"input 'boxes'.*rank 2.*\[16\]"):
        soft(op, domain, boxes.reshape(-1), scores)
    with pytest.raises(Exception, match=r"attribute 'sigma' must be > 0 for the gaussian method, got -1"):
        soft(op, domain, boxes, scores, method=2, sigma=-1.0)
    with pytest.raises(Exception, match=r"attribute 'offset' must be 0 or 1, got 2"):
        soft(op, domain, boxes, scores, offset=2)
    with pytest.raises(Exception, match=r"attribute 'method' must be .* got -1"):
        soft(op, domain, boxes, scores, method=-1)
    with pytest.raises(Exception, match="must not be NaN"):
        soft(op, domain, boxes, scores, min_score=float("nan"))
    scores[2] = np.nan
    with pytest.raises(Exception, match="input 'scores' contains NaN"):
        soft(op, domain, boxes, scores)
    # sigma only matters to the gaussian method: 0 is accepted by the others.
    soft(op, domain, boxes, np.nan_to_num(scores), method=1, sigma=0.0)
