"""ortops::NonMaxSuppression against ONNX Runtime's own NonMaxSuppression (the CPU kernel of the
installed runtime): the same rows on random and adversarial inputs, and clear errors."""

from __future__ import annotations

import functools
import itertools
import re
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ortest import run

INT64_MAX = np.iinfo(np.int64).max
OPTIONAL = ("max_output_boxes_per_class", "iou_threshold", "score_threshold")


@functools.lru_cache(maxsize=64)
def _reference_session(present: tuple[bool, ...], center_point_box: int) -> ort.InferenceSession:
    """ONNX's NonMaxSuppression alone, on ONNX Runtime's CPU provider (no ortops)."""
    types = {"boxes": TensorProto.FLOAT, "scores": TensorProto.FLOAT, OPTIONAL[0]: TensorProto.INT64}
    names = ["boxes", "scores", *(name if there else "" for name, there in zip(OPTIONAL, present, strict=True))]
    while names[-1] == "":
        names.pop()
    inputs = [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), None) for n in names if n]
    node = helper.make_node("NonMaxSuppression", names, ["selected_indices"], center_point_box=center_point_box)
    output = helper.make_tensor_value_info("selected_indices", TensorProto.INT64, None)
    graph = helper.make_graph([node], "onnx_nms", inputs, [output])
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 11)])
    options = ort.SessionOptions()
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def feeds_of(boxes, scores, max_output, iou, score) -> dict[str, np.ndarray | None]:
    values = [max_output, iou, score]
    dtypes = [np.int64, np.float32, np.float32]
    feeds: dict[str, np.ndarray | None] = {"boxes": boxes, "scores": scores}
    for name, value, dtype in zip(OPTIONAL, values, dtypes, strict=True):
        feeds[name] = None if value is None else np.asarray(value, dtype)
    return feeds


def reference(boxes, scores, max_output=None, iou=None, score=None, center_point_box: int = 0) -> np.ndarray:
    feeds = feeds_of(boxes, scores, max_output, iou, score)
    present = tuple(feeds[name] is not None for name in OPTIONAL)
    session = _reference_session(present, center_point_box)
    return session.run(None, {k: v for k, v in feeds.items() if v is not None})[0]


def ortops_nms(
    boxes, scores, max_output=None, iou=None, score=None, center_point_box: int = 0, threads: int = 0
) -> np.ndarray:
    feeds = feeds_of(boxes, scores, max_output, iou, score)
    return run("NonMaxSuppression", "ortops", feeds, ["selected_indices"], threads, center_point_box=center_point_box)[
        0
    ]


def assert_same(boxes, scores, max_output=None, iou=None, score=None, center_point_box: int = 0, threads: int = 0):
    expected = reference(boxes, scores, max_output, iou, score, center_point_box)
    got = ortops_nms(boxes, scores, max_output, iou, score, center_point_box, threads)
    assert got.dtype == np.int64 and got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_array_equal(got, expected)
    return got


def clustered(rng: np.random.Generator, b: int, n: int, center_point_box: int, spread: float = 3.0) -> np.ndarray:
    """Boxes around a few centers (many overlaps), a quarter with flipped corners."""
    centers = rng.uniform(0, 80, (b, max(1, n // 6), 2))
    xy = np.take_along_axis(centers, rng.integers(0, centers.shape[1], (b, n, 1)), 1) + rng.normal(0, spread, (b, n, 2))
    size = rng.uniform(4, 20, (b, n, 2))
    if center_point_box:
        return np.concatenate([xy, size], -1).astype(np.float32)
    boxes = np.concatenate([xy, xy + size], -1)
    flip = rng.random((b, n)) < 0.25
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("present", list(itertools.product([False, True], repeat=3)))
def test_every_optional_input_combination(present, center_point_box) -> None:
    rng = np.random.default_rng(sum(present) + 10 * center_point_box)
    boxes = clustered(rng, 2, 40, center_point_box)
    scores = rng.choice(np.linspace(0, 1, 9), (2, 3, 40)).astype(np.float32)  # ties
    values = [[7], [0.4], [0.3]]
    args = [value if there else None for value, there in zip(values, present, strict=True)]
    assert_same(boxes, scores, *args, center_point_box=center_point_box)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("center_point_box", [0, 1])
def test_random_cases(seed, center_point_box) -> None:
    rng = np.random.default_rng(seed)
    b, c, n = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 120))
    boxes = clustered(rng, b, n, center_point_box, spread=float(rng.choice([0.5, 3, 20])))
    scores = rng.random((b, c, n)).astype(np.float32)
    if seed % 3 == 0:
        scores = np.round(scores * 4) / 4  # ties
    max_output = [int(rng.choice([1, 3, 50, INT64_MAX]))]
    iou = [float(rng.choice([0.0, 0.2, 0.5, 0.7, 1.0]))]
    score = None if seed % 2 else [float(rng.choice([-1.0, 0.25, 0.6]))]
    assert_same(boxes, scores, max_output, iou, score, center_point_box)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("center_point_box", [0, 1])
def test_small_integer_boxes_with_nan_and_infinities(seed, center_point_box) -> None:
    """Degenerate, inverted and identical boxes; NaN and infinities in boxes and scores (NaN
    scores without a score threshold are visited where ONNX Runtime's heap puts them)."""
    rng = np.random.default_rng(100 + seed)
    b, c, n = 2, 2, int(rng.integers(1, 60))
    boxes = rng.integers(-3, 8, (b, n, 4)).astype(np.float32)
    mask = rng.random(boxes.shape) < 0.08
    boxes[mask] = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38], mask.sum())
    scores = rng.integers(0, 4, (b, c, n)).astype(np.float32)
    mask = rng.random(scores.shape) < 0.15
    scores[mask] = rng.choice([np.nan, np.inf, -np.inf, -0.0], mask.sum())
    iou = [float(rng.choice([0.0, 0.1, 0.5, 1.0]))]
    score = [None, [0.0], [-np.inf], [np.nan]][seed % 4]
    assert_same(boxes, scores, [int(rng.integers(1, 30))], iou, score, center_point_box)


@pytest.mark.parametrize("max_output", [3, INT64_MAX])
def test_nan_scores_in_some_classes_only(max_output) -> None:
    """Classes with NaN scores (visited in the heap's order) beside classes without (visited by
    descending score), in several batches: each class's order is its own (the device path
    replays the heap only for the classes that need it)."""
    rng = np.random.default_rng(11)
    boxes = clustered(rng, 3, 200, 0, spread=10)
    scores = np.round(rng.random((3, 4, 200)) * 8).astype(np.float32) / 8  # ties
    for b, c in [(0, 1), (1, 3), (2, 0), (2, 2)]:
        scores[b, c, rng.random(200) < 0.1] = np.nan
    assert_same(boxes, scores, [max_output], [0.3])
    assert_same(boxes, scores, [max_output], [0.3], [0.5])


def test_classes_with_no_candidate_or_every_box() -> None:
    """A score threshold that one class passes nowhere, another everywhere, the rest in part."""
    rng = np.random.default_rng(12)
    boxes = clustered(rng, 2, 150, 1, spread=8)
    scores = rng.random((2, 3, 150)).astype(np.float32)
    scores[:, 0] *= np.float32(0.1)
    scores[:, 2] = scores[:, 2] * np.float32(0.1) + np.float32(0.9)
    assert_same(boxes, scores, [INT64_MAX], [0.5], [0.2], center_point_box=1)
    assert_same(boxes, scores, [4], [0.5], [0.2], center_point_box=1)


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_thresholds_at_exact_iou_values(center_point_box) -> None:
    """Each pair's float32 IoU, computed as ONNX Runtime does, as the threshold: borderline
    pairs must decide alike (strictly greater suppresses)."""
    rng = np.random.default_rng(7)
    boxes = clustered(rng, 1, 30, center_point_box, spread=1.0)
    boxes = (boxes * np.float32(1.1) ** rng.integers(-3, 3, boxes.shape)).astype(np.float32)
    scores = rng.random((1, 1, 30)).astype(np.float32)
    for i, j in rng.integers(0, 30, (12, 2)):
        iou = pair_iou(boxes[0, i], boxes[0, j], center_point_box)
        if 0 <= iou <= 1:
            assert_same(boxes, scores, [100], [iou], None, center_point_box)
            assert_same(boxes, scores, [100], [np.nextafter(iou, np.float32(0))], None, center_point_box)


def pair_iou(a: np.ndarray, b: np.ndarray, center_point_box: int) -> np.float32:
    """The float32 IoU of two boxes as ONNX Runtime's kernel rounds it (for the thresholds)."""

    def corners(box: np.ndarray) -> tuple[np.float32, ...]:
        if center_point_box:
            hw, hh = box[2] / np.float32(2), box[3] / np.float32(2)
            return box[1] - hh, box[0] - hw, box[1] + hh, box[0] + hw
        return min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]), max(box[1], box[3])

    (a0, a1, a2, a3), (b0, b1, b2, b3) = corners(a), corners(b)
    area_a, area_b = (a2 - a0) * (a3 - a1), (b2 - b0) * (b3 - b1)
    inter = np.float32((min(a2, b2) - max(a0, b0)) * (min(a3, b3) - max(a1, b1)))
    return np.float32(inter / np.float32(np.float32(area_a + area_b) - inter))


@pytest.mark.parametrize("threads", [1, 0])
@pytest.mark.parametrize("center_point_box", [0, 1])
def test_many_boxes(threads, center_point_box) -> None:
    """Enough boxes for the grid to matter, several classes on the session's threads."""
    rng = np.random.default_rng(3)
    boxes = clustered(rng, 2, 3000, center_point_box, spread=30)
    scores = rng.random((2, 4, 3000)).astype(np.float32)
    assert_same(boxes, scores, [INT64_MAX], [0.45], [0.05], center_point_box, threads)
    assert_same(boxes, scores, [100], [0.0], None, center_point_box, threads)


def test_equal_scores_take_the_lower_index_first() -> None:
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 10], [50, 50, 60, 60], [50, 50, 60, 60]]], np.float32)
    scores = np.full((1, 1, 4), 0.5, np.float32)
    got = assert_same(boxes, scores, [10], [0.5])
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 2]])


@pytest.mark.parametrize(
    "shape", [(0, 3, 5), (2, 0, 5), (2, 3, 0), (0, 0, 0)], ids=["no batch", "no class", "no box", "nothing"]
)
def test_empty_inputs(shape) -> None:
    b, c, n = shape
    got = assert_same(np.zeros((b, n, 4), np.float32), np.zeros((b, c, n), np.float32), [5], [0.5])
    assert got.shape == (0, 3)


@pytest.mark.parametrize("max_output", [None, [0], [-3], [1], [INT64_MAX], 2, [[2]], [2, 9]])
def test_max_output_values_and_shapes(max_output) -> None:
    """Absent, 0 or negative: nothing kept; a scalar, [1] or more values: the first (as ONNX
    Runtime reads it)."""
    rng = np.random.default_rng(1)
    boxes, scores = clustered(rng, 2, 30, 0), rng.random((2, 2, 30)).astype(np.float32)
    assert_same(boxes, scores, max_output, 0.5, None)


def test_nan_score_threshold_keeps_nothing() -> None:
    rng = np.random.default_rng(2)
    got = assert_same(clustered(rng, 1, 10, 0), rng.random((1, 1, 10)).astype(np.float32), [5], [0.5], [np.nan])
    assert got.shape == (0, 3)


def expect_error(message: str, boxes, scores, *args: Any, **attributes: Any) -> None:
    with pytest.raises(Exception, match=rf"ortops\.NonMaxSuppression: .*{re.escape(message)}"):
        ortops_nms(boxes, scores, *args, **attributes)


def test_errors() -> None:
    boxes, scores = np.zeros((1, 5, 4), np.float32), np.zeros((1, 2, 5), np.float32)
    expect_error("input 'boxes' must have shape [B, N, 4], got [1, 5, 3]", boxes[..., :3], scores, [1])
    expect_error("input 'boxes' must have shape [B, N, 4], got [5, 4]", boxes[0], scores, [1])
    expect_error("input 'scores' must have shape [B, C, N] = [1, C, 5] (boxes' B and N), got [1, 2, 4]", boxes,
                 scores[..., :4], [1])  # fmt: skip
    expect_error("got [2, 2, 5]", boxes, np.zeros((2, 2, 5), np.float32), [1])
    expect_error("got [2, 5]", boxes, scores[0], [1])
    for bad in [np.nan, -0.1, 1.5]:
        expect_error(f"input 'iou_threshold' must be in [0, 1], got {bad:g}", boxes, scores, [1], [bad])
    expect_error("input 'max_output_boxes_per_class' must hold one value, got shape [0]", boxes, scores, np.zeros(0))
    expect_error("input 'iou_threshold' must hold one value, got shape [0]", boxes, scores, [1], np.zeros(0))
    expect_error("input 'score_threshold' must hold one value, got shape [0]", boxes, scores, [1], 0.5, np.zeros(0))
    expect_error("attribute 'center_point_box' must be 0 or 1, got 2", boxes, scores, [1], center_point_box=2)


@pytest.mark.parametrize("bad", [np.nan, -0.1, 1.5])
def test_onnx_runtime_rejects_the_same_iou_thresholds(bad) -> None:
    """The errors above are ONNX Runtime's own decisions, not ortops' (NaN included)."""
    boxes, scores = np.zeros((1, 5, 4), np.float32), np.zeros((1, 2, 5), np.float32)
    with pytest.raises(Exception, match=r"iou_threshold must be in range \[0, 1\]"):
        reference(boxes, scores, [1], [bad])
