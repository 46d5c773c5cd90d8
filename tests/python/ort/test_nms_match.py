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


# ---------------------------------------------------------------- many boxes, adversarial values


def _max(a, b):
    """std::max(a, b) of the original: (a < b) ? b : a, element-wise (numpy's NaN rule differs)."""
    return np.where(a < b, b, a)


def _min(a, b):
    """std::min(a, b): (b < a) ? b : a."""
    return np.where(b < a, b, a)


def vectorised_reference(boxes: np.ndarray, scores: np.ndarray, iou: float, score: float) -> np.ndarray:
    """references.nms_match with each kept box's pairs computed at once: the same operations in
    the boxes' dtype, element by element, written with the originals' min/max (so infinite
    boxes give the same NaN), for cases too large for the one-pair-at-a-time loop."""
    t = boxes.dtype.type
    iou_limit, score_limit = np.float32(iou), float(np.float32(score))
    rows = []
    for b in range(boxes.shape[0]):
        box = boxes[b]
        with np.errstate(invalid="ignore", over="ignore"):
            area = (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = np.lexsort((np.arange(len(s)), -s.astype(np.float64)))
            alive = np.ones(len(s), bool)
            for rank, i in enumerate(order):
                if not alive[i]:
                    continue
                later = order[rank + 1 :]
                later = later[alive[later]]
                o = box[later]
                with np.errstate(invalid="ignore", over="ignore"):
                    w = _max(t(0), _min(box[i, 2], o[:, 2]) - _max(box[i, 0], o[:, 0]))
                    h = _max(t(0), _min(box[i, 3], o[:, 3]) - _max(box[i, 1], o[:, 1]))
                    inter = w * h
                    union = area[i] + area[later] - inter
                    quotient = inter.astype(np.float64) / (union.astype(np.float64) + 1e-10)
                    matched = later[quotient.astype(np.float32) >= iou_limit]
                alive[matched] = False
                if float(s[i]) > score_limit:
                    rows += [[b, c, i, j] for j in matched]
    return np.array(rows, np.int64).reshape(-1, 4)


def anchors_like(rng: np.random.Generator, b: int, c: int, n: int, dtype: type = np.float32):
    """Anchor-shaped boxes of a dense detector (three aspect ratios and three sizes on a grid,
    slightly moved), as NMSMatch sees them after a per-level top-k, with few distinct scores."""
    side = max(1, int(np.sqrt(n / 9)) + 1)
    cells = rng.integers(0, side * side, (b, n))
    centre = np.stack([cells % side, cells // side], -1) * 8.0 + rng.normal(0, 0.7, (b, n, 2))
    size = (
        rng.choice([16.0, 20.0, 25.0], (b, n, 1))
        * np.array([[1.0, 1.0], [1.4, 0.7], [0.7, 1.4]])[rng.integers(0, 3, (b, n))]
    )
    boxes = np.concatenate([centre - size / 2, centre + size / 2], -1).astype(dtype)
    scores = rng.choice(np.linspace(0, 1, 37), (b, c, n)).astype(dtype)
    return boxes, scores


def test_vectorised_reference_is_the_slow_loop() -> None:
    rng = np.random.default_rng(31)
    for dtype in (np.float32, np.float64):
        boxes, scores = anchors_like(rng, 2, 2, 40, dtype)
        boxes[0, :5] = [[1, 1, 1, 1], [3, 3, 2, 2], [0, 0, np.inf, 5], [-np.inf, 0, np.inf, 5], [0, 0, 1e38, 1e38]]
        for iou in (0.0, 0.3, 0.5, 1.0):
            with np.errstate(invalid="ignore", over="ignore"):
                expected = references.nms_match(boxes, scores, iou, 0.2)
            np.testing.assert_array_equal(vectorised_reference(boxes, scores, iou, 0.2), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [63, 64, 65, 130, 700])
@pytest.mark.parametrize("iou", [0.5, 0.7, 0.95])
def test_many_anchor_boxes(dtype, n, iou) -> None:
    """Enough boxes per class that every kept box scans several blocks of later boxes, with
    partial blocks at the end (63 to 65), batch 2 and 3 classes, many equal scores."""
    boxes, scores = anchors_like(np.random.default_rng(n + int(iou * 100)), 2, 3, n, dtype)
    got = match("NMSMatch", "mmdeploy", boxes, scores, iou, 0.3)
    np.testing.assert_array_equal(got, vectorised_reference(boxes, scores, iou, 0.3))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("iou", [-0.5, 0.0, 1e-38, 1e-30, 0.5, 1.0, 1.5])
def test_adversarial_boxes(dtype, iou) -> None:
    """Inverted boxes (negative areas, so IoU can exceed 1 or be negative), empty ones, exact
    duplicates, infinite and huge coordinates (unions near the largest float), tiny boxes
    whose IoU hangs on the 1e-10, and thresholds at 0, below and above the float range's
    ends: everything the kernel decides without computing the IoU must agree with the loop."""
    rng = np.random.default_rng(5)
    boxes, scores = anchors_like(rng, 2, 4, 150, dtype)
    special = [
        [10, 10, 0, 0],  # inverted: positive area
        [0, 10, 10, 0],  # inverted on one axis: negative area
        [5, 5, 5, 5],
        [0, 0, 1e-6, 1e-6],
        [0, 0, 2e-6, 1e-6],
        [0, 0, np.inf, 5],
        [-np.inf, -np.inf, np.inf, np.inf],
        [0, 0, 1.5e19, 1.5e19],  # area about 2e38: unions overflow float32
        [1, 1, 1.5e19, 1.5e19],
        [-1e38, -1, 1e38, 1],
    ]
    for k, box in enumerate(special):
        boxes[:, 10 * k : 10 * k + 3] = box  # three copies each, spread over the score order
    got = match("NMSMatch", "mmdeploy", boxes, scores, iou, 0.1)
    np.testing.assert_array_equal(got, vectorised_reference(boxes, scores, iou, 0.1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ious_one_rounding_either_side_of_the_threshold(dtype) -> None:
    """Pairs whose IoU rounds to exactly the threshold, or to the float just below or above it:
    each decision is the original's, however close (the kernel may skip the exact IoU only
    for pairs that cannot reach the threshold)."""
    rng = np.random.default_rng(8)
    for _ in range(40):
        a = rng.uniform(0, 50, 2)
        kept = np.concatenate([a, a + rng.uniform(1, 30, 2)])
        other = kept + rng.normal(0, 2, 4)
        other[2:] = np.maximum(other[2:], other[:2] + 0.5)
        pair = np.array([[kept, other]], dtype)
        w = max(0.0, min(pair[0, 0, 2], pair[0, 1, 2]) - max(pair[0, 0, 0], pair[0, 1, 0]))
        h = max(0.0, min(pair[0, 0, 3], pair[0, 1, 3]) - max(pair[0, 0, 1], pair[0, 1, 1]))
        t = pair.dtype.type
        inter = t(w) * t(h)
        areas = [(p[2] - p[0]) * (p[3] - p[1]) for p in pair[0]]
        value = np.float32(float(inter) / (float(areas[0] + areas[1] - inter) + 1e-10))
        if value <= 0:
            continue
        for threshold in (np.nextafter(value, np.float32(0)), value, np.nextafter(value, np.float32(2))):
            got = match("NMSMatch", "mmdeploy", pair, np.array([[[0.9, 0.8]]], dtype), float(threshold), 0.0)
            assert len(got) == (1 if value >= threshold else 0), (pair, value, threshold)


@pytest.mark.parametrize("threads", [1, 2])
def test_many_classes_and_images(threads: int) -> None:
    boxes, scores = anchors_like(np.random.default_rng(12), 3, 7, 90)
    got = match("NMSMatch", "mmdeploy", boxes, scores, 0.5, 0.5, threads)
    np.testing.assert_array_equal(got, vectorised_reference(boxes, scores, 0.5, 0.5))
