"""NMSMatch (mmdeploy, ortops) against the slow loop written from the spec in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references
from onnx import TensorProto, helper, numpy_helper

from ortest import IR_VERSION, run, session

DOMAINS = [("mmdeploy", "NMSMatch"), ("ortops", "NMSMatch")]


def case(rng: np.random.Generator, b: int, c: int, n: int, dtype: type = np.float32):
    centers = rng.uniform(0, 60, (b, max(1, n // 4), 2))
    xy = np.take_along_axis(centers, rng.integers(0, centers.shape[1], (b, n, 1)), 1) + rng.normal(0, 2, (b, n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 15, (b, n, 2))], -1).astype(dtype)
    scores = rng.choice(np.linspace(0, 1, 11), (b, c, n)).astype(dtype)  # many ties
    return boxes, scores


def match(op, domain, boxes, scores, iou: float, score: float, threads: int = 0) -> np.ndarray:
    feeds = {
        "boxes": boxes,
        "scores": scores,
        "iou_threshold": np.array([iou], np.float32),
        "score_threshold": np.array([score], np.float32),
    }
    return run(op, domain, feeds, ["matches"], threads=threads)[0]


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1, 0), (0, 2, 5), (2, 0, 5), (1, 1, 1), (2, 3, 30), (3, 2, 17)])
@pytest.mark.parametrize("iou,score", [(0.3, 0.0), (0.5, 0.45), (0.7, 0.9), (0.0, 0.5)])
def test_matches_reference(domain, op, dtype, shape, iou, score) -> None:
    boxes, scores = case(np.random.default_rng(sum(shape)), *shape, dtype)
    got = match(op, domain, boxes, scores, iou, score)
    assert got.dtype == np.int64 and got.shape[1:] == (4,)
    np.testing.assert_array_equal(got, references.nms_match(boxes, scores, iou, score))


def test_reference_by_hand() -> None:
    """The reference itself, on a case worked out on paper."""
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 8], [20, 20, 30, 30], [0, 0, 10, 9], [21, 20, 30, 30]]], np.float32)
    scores = np.array([[[0.5, 0.9, 0.8, 0.3, 0.2]]], np.float32)
    # Order 1, 2, 0, 3, 4. Box 1 suppresses 0 (IoU 0.8) then 3 (0.8/0.9); box 2 suppresses 4 (0.9).
    expected = [[0, 0, 1, 0], [0, 0, 1, 3], [0, 0, 2, 4]]
    np.testing.assert_array_equal(references.nms_match(boxes, scores, 0.75, 0.0), expected)
    np.testing.assert_array_equal(match("NMSMatch", "ortops", boxes, scores, 0.75, 0.0), expected)


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_iou_exactly_at_threshold_suppresses(domain, op, dtype) -> None:
    """IoU 50 / (100 + 1e-10) rounds to 0.5 in float32, as in the original: it reaches 0.5."""
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 5]]], dtype)
    scores = np.array([[[0.9, 0.8]]], dtype)
    np.testing.assert_array_equal(match(op, domain, boxes, scores, 0.5, 0.0), [[0, 0, 0, 1]])
    above = float(np.nextafter(np.float32(0.5), np.float32(1)))
    assert match(op, domain, boxes, scores, above, 0.0).shape == (0, 4)


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_score_threshold_is_strict_and_low_boxes_still_suppress(domain, op) -> None:
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 9], [0, 0, 10, 8], [50, 50, 60, 60], [50, 50, 60, 59]]], np.float32)
    scores = np.array([[[0.4, 0.3, 0.2, 0.6, 0.1]]], np.float32)
    # Box 0 scores exactly 0.4: it suppresses 1 and 2 but reports nothing; box 3 reports box 4.
    np.testing.assert_array_equal(match(op, domain, boxes, scores, 0.5, 0.4), [[0, 0, 3, 4]])
    expected = [[0, 0, 3, 4], [0, 0, 0, 1], [0, 0, 0, 2]]  # kept boxes in score order
    np.testing.assert_array_equal(match(op, domain, boxes, scores, 0.5, 0.39), expected)


def test_equal_scores_take_the_lower_index_first() -> None:
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10]]], np.float32)
    scores = np.array([[[0.5, 0.5, 0.5]]], np.float32)
    np.testing.assert_array_equal(match("NMSMatch", "ortops", boxes, scores, 0.5, 0.0), [[0, 0, 0, 1], [0, 0, 0, 2]])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_empty_and_infinite_boxes() -> None:
    """Empty boxes have IoU 0 (0 / 1e-10); infinite ones give NaN IoU, which suppresses nothing."""
    boxes = np.array([[[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, np.inf, 5], [0, 0, np.inf, 5], [3, 3, 2, 2]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6, 0.5]]], np.float32)
    for iou in (0.0, 0.5):
        got = match("NMSMatch", "ortops", boxes, scores, iou, 0.0)
        np.testing.assert_array_equal(got, references.nms_match(boxes, scores, iou, 0.0))
    assert match("NMSMatch", "ortops", boxes, scores, 0.0, 0.0).shape[0] > 0  # IoU 0 reaches a threshold of 0


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    boxes, scores = case(np.random.default_rng(4), 3, 5, 40)
    np.testing.assert_array_equal(
        match("NMSMatch", "ortops", boxes, scores, 0.4, 0.2, threads), references.nms_match(boxes, scores, 0.4, 0.2)
    )


def test_node_as_mmdeploy_exported_it() -> None:
    """mmdeploy's symbolic: thresholds as float32 [1] Constant nodes feeding mmdeploy::NMSMatch."""
    nodes = [
        helper.make_node(
            "Constant", [], ["iou"], value=numpy_helper.from_array(np.array([0.45], np.float32), "iou_value")
        ),
        helper.make_node(
            "Constant", [], ["score"], value=numpy_helper.from_array(np.array([0.05], np.float32), "score_value")
        ),
        helper.make_node("NMSMatch", ["boxes", "scores", "iou", "score"], ["matches"], domain="mmdeploy"),
    ]
    graph = helper.make_graph(
        nodes,
        "nms_match",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, "n", 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3, "n"]),
        ],
        [helper.make_tensor_value_info("matches", TensorProto.INT64, ["k", 4])],
    )
    model = helper.make_model(
        graph,
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("mmdeploy", 1)],
    )
    boxes, scores = case(np.random.default_rng(7), 1, 3, 25)
    (got,) = session(model).run(None, {"boxes": boxes, "scores": scores})
    np.testing.assert_array_equal(got, references.nms_match(boxes, scores, 0.45, 0.05))


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_input_is_an_error(domain, op) -> None:
    boxes, scores = case(np.random.default_rng(0), 2, 2, 5)
    with pytest.raises(Exception, match=r"input 'scores' must have shape \[B, C, N\] = \[2, C, 5\], got \[2, 2, 4\]"):
        match(op, domain, boxes, scores[..., :4], 0.5, 0.1)
    with pytest.raises(Exception, match=r"input 'scores' must have shape \[B, C, N\] = \[2, C, 5\], got \[1, 2, 5\]"):
        match(op, domain, boxes, scores[:1], 0.5, 0.1)
    with pytest.raises(Exception, match=r"input 'boxes' must have shape \[B, N, 4\], got \[2, 5, 3\]"):
        match(op, domain, np.ascontiguousarray(boxes[..., :3]), scores, 0.5, 0.1)
    with pytest.raises(Exception, match=r"input 'boxes'.*rank 3.*\[5, 4\]"):
        match(op, domain, boxes[0], scores, 0.5, 0.1)
    feeds = {
        "boxes": boxes,
        "scores": scores,
        "iou_threshold": np.array([0.5, 0.6], np.float32),
        "score_threshold": np.array([0.1], np.float32),
    }
    with pytest.raises(Exception, match=r"input 'iou_threshold' must hold one value, got shape \[2\]"):
        run(op, domain, feeds, ["matches"])
    feeds["iou_threshold"], feeds["score_threshold"] = np.array([0.5], np.float32), np.zeros((0,), np.float32)
    with pytest.raises(Exception, match=r"input 'score_threshold' must hold one value, got shape \[0\]"):
        run(op, domain, feeds, ["matches"])
    with pytest.raises(Exception, match="input 'iou_threshold' is NaN"):
        match(op, domain, boxes, scores, float("nan"), 0.1)
    boxes[1, 2, 0] = np.nan
    with pytest.raises(Exception, match="input 'boxes' contains NaN"):
        match(op, domain, boxes, scores, 0.5, 0.1)
    boxes[1, 2, 0], scores[0, 1, 3] = 0, np.nan
    with pytest.raises(Exception, match="input 'scores' contains NaN"):
        match(op, domain, boxes, scores, 0.5, 0.1)


def test_no_boxes_with_a_huge_class_count_allocates_nothing():
    boxes = np.zeros((7, 0, 4), np.float32)
    scores = np.zeros((7, 1 << 31, 0), np.float32)
    thresholds = {"iou_threshold": np.array([0.5], np.float32), "score_threshold": np.array([0.0], np.float32)}
    (matches,) = run("NMSMatch", "mmdeploy", {"boxes": boxes, "scores": scores, **thresholds}, ["matches"])
    assert matches.shape == (0, 4) and matches.dtype == np.int64
