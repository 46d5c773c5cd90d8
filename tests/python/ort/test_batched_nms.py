"""ortops::BatchedNMS, mmdeploy::TRTBatchedNMS and mmdeploy::TRTBatchedRotatedNMS against slow
loops written here from the specs: per image, per class (or per image), filter by score, sort,
top-k, greedy NMS; then merge the kept candidates, sort, keep the best and pad.

The IoUs are written here too: torchvision's (ortops), the TensorRT plugin's jaccardOverlap
(TRTBatchedNMS) and, for the rotated node, the polygon IoU of references.py, which uses
another algorithm than the kernel's (random rotated cases are checked to keep every IoU clear
of the threshold). Box and score arithmetic runs in the element type, in the kernels' order,
so float32 results must agree exactly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import onnx
import pytest
import references
from onnx import TensorProto, helper
from references import cached

from ortest import IR_VERSION, run, session, skip_under_asan

OUTPUTS = ["num_detections", "detection_boxes", "detection_scores", "detection_classes", "detection_indices"]
Candidate = tuple  # (score, box index n, class c)


# ---------------------------------------------------------------- reference selection


def select(
    scores: np.ndarray,
    box: Callable[[int, int], list],
    *,
    passes: Callable[[np.floating], bool],
    iou: Callable[[list, list], float],
    iou_threshold: float,
    pre_topk: int,
    max_output: int,
    class_agnostic: bool = False,
    background: int = -1,
    class_first: bool = False,
    activate: Callable[[np.floating], np.floating] | None = None,
) -> list[Candidate]:
    """One image's detections: scores [N, C]; box(n, c) its coordinates; `iou(kept, candidate)`."""
    groups: dict[int, list[Candidate]] = {}
    for n in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[n, c]
            if c != background and passes(s):
                groups.setdefault(0 if class_agnostic else c, []).append((activate(s) if activate else s, n, c))
    order = (lambda t: (-t[0], t[2], t[1])) if class_first else (lambda t: (-t[0], t[1], t[2]))
    kept_all: list[Candidate] = []
    for candidates in groups.values():
        candidates.sort(key=order)
        if pre_topk >= 0:
            candidates = candidates[:pre_topk]
        kept: list[Candidate] = []
        for cand in candidates:
            if all(not (iou(box(k[1], k[2]), box(cand[1], cand[2])) > iou_threshold) for k in kept):
                kept.append(cand)
        kept_all += kept
    kept_all.sort(key=order)
    return kept_all[:max_output]


def torchvision_iou(offset: int, dt: type) -> Callable[[list, list], float]:
    """IoU as torchvision / ortops.NMS compute it, in dt, kept box first."""
    off = dt(offset)

    def iou(a: list, b: list) -> float:
        with np.errstate(all="ignore"):  # huge and infinite boxes overflow, as in the kernel
            w = max(dt(0), min(a[2], b[2]) - max(a[0], b[0]) + off)
            h = max(dt(0), min(a[3], b[3]) - max(a[1], b[1]) + off)
            inter = w * h
            area_a = (a[2] - a[0] + off) * (a[3] - a[1] + off)
            area_b = (b[2] - b[0] + off) * (b[3] - b[1] + off)
            return inter / (area_a + area_b - inter)

    return iou


def detection_output_iou(a: list, b: list) -> float:
    """TensorRT batchedNMSPlugin's jaccardOverlap (offset 0): an intersection box (zeros when
    disjoint), 0 unless its width and height are positive, inverted boxes of size 0."""
    dt = type(a[0])
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        inter_box = [dt(0)] * 4
    else:
        inter_box = [max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])]
    w, h = inter_box[2] - inter_box[0], inter_box[3] - inter_box[1]
    if not (w > 0 and h > 0):
        return dt(0)

    def size(box: list) -> np.floating:
        return dt(0) if box[2] < box[0] or box[3] < box[1] else (box[2] - box[0]) * (box[3] - box[1])

    inter = w * h
    return inter / (size(a) + size(b) - inter)


def compute_type(dtype: np.dtype) -> type:
    return np.float32 if dtype == np.float16 else dtype.type


@cached
def reference_batched_nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    iou_threshold: float = 0.5,
    score_threshold: float = 0.0,
    max_output_boxes: int = 100,
    pre_topk: int = -1,
    class_agnostic: int = 0,
    box_coding: int = 0,
    score_activation: int = 0,
    background_class: int = -1,
    offset: int = 0,
) -> list[np.ndarray]:
    """ortops::BatchedNMS's five outputs (float16 computes in float32 and rounds the outputs)."""
    dt = compute_type(boxes.dtype)
    b32, s32 = boxes.astype(dt), scores.astype(dt)
    batch, count, classes = scores.shape
    per_class = boxes.ndim == 4 and boxes.shape[2] != 1

    def corners(b: int, n: int, c: int) -> list:
        v = b32[b, n] if boxes.ndim == 3 else b32[b, n, c if per_class else 0]
        if box_coding == 1:
            two = dt(2)
            return [v[0] - v[2] / two, v[1] - v[3] / two, v[0] + v[2] / two, v[1] + v[3] / two]
        return list(v)

    threshold = float(np.float32(score_threshold))

    def sigmoid(s: np.floating) -> np.floating:
        with np.errstate(over="ignore"):
            return dt(1) / (dt(1) + np.exp(-s))

    activate = sigmoid if score_activation else None
    k = max_output_boxes
    num = np.zeros(batch, np.int64)
    out_boxes = np.zeros((batch, k, 4), dt)
    out_scores = np.zeros((batch, k), dt)
    out_classes = np.full((batch, k), -1, np.int64)
    out_indices = np.full((batch, k), -1, np.int64)
    for b in range(batch):
        detections = select(
            s32[b],
            lambda n, c, b=b: corners(b, n, c),
            passes=lambda s: float(activate(s) if activate else s) > threshold,
            iou=torchvision_iou(offset, dt),
            iou_threshold=dt(np.float32(iou_threshold)),
            pre_topk=pre_topk,
            max_output=k,
            class_agnostic=bool(class_agnostic),
            background=background_class,
            activate=activate,
        )
        num[b] = len(detections)
        for i, (s, n, c) in enumerate(detections):
            out_boxes[b, i], out_scores[b, i], out_classes[b, i], out_indices[b, i] = corners(b, n, c), s, c, n
    assert classes >= 0 and count >= 0
    return [num, out_boxes.astype(boxes.dtype), out_scores.astype(boxes.dtype), out_classes, out_indices]


def trt_rotated_iou(kept: list, candidate: list) -> float:
    """The plugin's rotated IoU: 1 when either box's w * h (in its dtype) is below 1e-14,
    else that of the rectangles, whose corners are those of the absolute sizes."""
    if any(box[2] * box[3] < 1e-14 for box in (kept, candidate)):
        return 1.0
    return references.rotated_iou(*([*box[:2], abs(box[2]), abs(box[3]), box[4]] for box in (kept, candidate)))


@cached
def reference_trt(
    boxes: np.ndarray,
    scores: np.ndarray,
    *,
    keep_topk: int,
    background_label_id: int = -1,
    iou_threshold: float = 0.5,
    score_threshold: float = 0.05,
    topk: int = -1,
    clip_boxes: int = 0,
    rotated: bool = False,
) -> list[np.ndarray]:
    """TRTBatchedNMS's dets, labels, index (TRTBatchedRotatedNMS: dets, labels)."""
    dt = boxes.dtype.type
    batch, count, per, size = boxes.shape
    shared = per == 1
    threshold = dt(np.float32(score_threshold))
    if rotated:
        iou: Callable[[list, list], float] = trt_rotated_iou
        iou_limit: float = float(np.float32(iou_threshold))
    else:
        iou, iou_limit = detection_output_iou, dt(np.float32(iou_threshold))
    dets = np.zeros((batch, keep_topk, size + 1), dt)
    labels = np.full((batch, keep_topk), -1, np.int64)
    index = np.full((batch, keep_topk), -1, np.int64)
    for b in range(batch):
        detections = select(
            scores[b],
            lambda n, c, b=b: list(boxes[b, n, 0 if shared else c]),
            passes=lambda s: s > threshold,
            iou=iou,
            iou_threshold=iou_limit,
            pre_topk=topk if 0 < topk <= count else -1,
            max_output=keep_topk,
            background=background_label_id,
            class_first=True,
        )
        for i, (s, n, c) in enumerate(detections):
            box = boxes[b, n, 0 if shared else c]
            dets[b, i, :size] = np.fmax(np.fmin(box, dt(1)), dt(0)) if clip_boxes else box
            dets[b, i, size] = s
            labels[b, i] = c
            index[b, i] = n if shared else c * count + n
    return [dets, labels] if rotated else [dets, labels, index]


# ---------------------------------------------------------------- cases


def clustered(rng: np.random.Generator, batch: int, count: int, classes: int, per_class: bool) -> np.ndarray:
    """[B, N, 4] (or [B, N, C, 4]) corner boxes around a few centres, so suppression happens."""
    centres = rng.uniform(0, 100, (batch, max(1, count // 5), 2))
    pick = rng.integers(0, centres.shape[1], (batch, count))
    xy = np.take_along_axis(centres, pick[..., None], 1) + rng.normal(0, 3, (batch, count, 2))
    wh = rng.uniform(2, 20, (batch, count, 2))
    if per_class:
        xy = xy[:, :, None] + rng.normal(0, 1, (batch, count, classes, 2))
        wh = np.repeat(wh[:, :, None], classes, 2)
    return np.concatenate([xy, xy + wh], -1)


def make_case(
    seed: int, batch: int, count: int, classes: int, layout: str, dtype: type, box_coding: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """boxes in `layout` ("shared" [B, N, 4], "shared4" [B, N, 1, 4], "per_class" [B, N, C, 4])
    and scores [B, N, C] on a grid of 21 values (so ties happen)."""
    rng = np.random.default_rng(seed)
    corners = clustered(rng, batch, count, classes, layout == "per_class")
    if box_coding == 1:
        corners = np.concatenate([(corners[..., :2] + corners[..., 2:]) / 2, corners[..., 2:] - corners[..., :2]], -1)
    if layout == "shared4":
        corners = corners[:, :, None]
    scores = rng.choice(np.linspace(0, 1, 21), (batch, count, classes))
    return corners.astype(dtype), scores.astype(dtype)


def batched_nms(boxes: np.ndarray, scores: np.ndarray, threads: int = 0, **attributes) -> list[np.ndarray]:
    return run("BatchedNMS", "ortops", {"boxes": boxes, "scores": scores}, OUTPUTS, threads=threads, **attributes)


def assert_outputs_equal(got: list[np.ndarray], expected: list[np.ndarray], rtol: float = 0.0) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        if rtol:
            np.testing.assert_allclose(g, e, rtol=rtol)
        else:
            np.testing.assert_array_equal(g, e)


def message(domain: str, op: str, text: str) -> str:
    return rf"{domain}\.{op}: .*{re.escape(text)}"


def assert_huge_count_fails(
    nms: Callable[..., list[np.ndarray]],
    boxes: np.ndarray,
    scores: np.ndarray,
    count: str,
    overflowing: int,
    domain: str,
    op: str,
) -> None:
    """The detections per image (the attribute `count`) at 2**40 fail to allocate, as an
    error that names the node; at `overflowing`, where the outputs' sizes overflow, they are
    refused as too large."""
    with pytest.raises(Exception, match=rf"{domain}\.{op}: "):
        nms(boxes, scores, **{count: 2**40})
    with pytest.raises(Exception, match=message(domain, op, "is too large")):
        nms(boxes, scores, **{count: overflowing})


# ---------------------------------------------------------------- ortops::BatchedNMS


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("layout", ["shared", "shared4", "per_class"])
@pytest.mark.parametrize("box_coding", [0, 1])
@pytest.mark.parametrize("class_agnostic", [0, 1])
def test_matches_reference(dtype: type, layout: str, box_coding: int, class_agnostic: int) -> None:
    boxes, scores = make_case(box_coding * 2 + class_agnostic, 3, 40, 4, layout, dtype, box_coding)
    attributes = {
        "iou_threshold": 0.45,
        "score_threshold": 0.3,
        "max_output_boxes": 25,
        "class_agnostic": class_agnostic,
        "box_coding": box_coding,
    }
    got = batched_nms(boxes, scores, **attributes)
    expected = reference_batched_nms(boxes, scores, **attributes)
    assert_outputs_equal(got, expected)
    assert 0 < got[0].min() and got[0].max() <= 25


@pytest.mark.parametrize("pre_topk", [-1, 0, 1, 3, 1000])
@pytest.mark.parametrize("max_output_boxes", [0, 1, 7, 500])
@pytest.mark.parametrize("offset", [0, 1])
def test_limits_and_offset(pre_topk: int, max_output_boxes: int, offset: int) -> None:
    boxes, scores = make_case(pre_topk + max_output_boxes + 1, 2, 60, 3, "shared", np.float32)
    attributes = {"pre_topk": pre_topk, "max_output_boxes": max_output_boxes, "offset": offset, "iou_threshold": 0.3}
    assert_outputs_equal(batched_nms(boxes, scores, **attributes), reference_batched_nms(boxes, scores, **attributes))


@pytest.mark.parametrize("iou_threshold", [-0.5, 0.0, 0.5, 1.0])
@pytest.mark.parametrize("score_threshold", [-1.0, 0.0, 0.5, 1.0])
def test_thresholds(iou_threshold: float, score_threshold: float) -> None:
    boxes, scores = make_case(7, 2, 30, 3, "per_class", np.float64)
    attributes = {"iou_threshold": iou_threshold, "score_threshold": score_threshold, "max_output_boxes": 40}
    assert_outputs_equal(batched_nms(boxes, scores, **attributes), reference_batched_nms(boxes, scores, **attributes))


def test_omitted_attributes_take_the_documented_defaults() -> None:
    boxes, scores = make_case(3, 2, 50, 3, "shared", np.float32)
    assert_outputs_equal(batched_nms(boxes, scores), reference_batched_nms(boxes, scores))


@pytest.mark.parametrize("background_class", [-1, 0, 2, 3, 100])
def test_background_class_never_detected(background_class: int) -> None:
    boxes, scores = make_case(11, 2, 30, 3, "shared", np.float32)
    attributes = {"background_class": background_class, "score_threshold": 0.2, "max_output_boxes": 60}
    got = batched_nms(boxes, scores, **attributes)
    assert_outputs_equal(got, reference_batched_nms(boxes, scores, **attributes))
    assert background_class not in got[3][got[3] >= 0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_score_activation(dtype: type) -> None:
    """Logits on a grid of 0.01 in [-8, 8]: their sigmoids are distinct and clear of the threshold
    by far more than an ulp, so a libm exp that differs from numpy's in the last bit cannot
    change the selection; the scores are compared to a relative 1e-6."""
    rng = np.random.default_rng(5)
    boxes, _ = make_case(5, 2, 50, 4, "shared", dtype)
    logits = rng.choice(np.arange(-800, 801) / 100, (2, 50, 4)).astype(dtype)
    attributes = {"score_activation": 1, "score_threshold": 0.7, "max_output_boxes": 30, "iou_threshold": 0.4}
    got = batched_nms(boxes, logits, **attributes)
    expected = reference_batched_nms(boxes, logits, **attributes)
    for i in (0, 1, 3, 4):
        np.testing.assert_array_equal(got[i], expected[i])
    np.testing.assert_allclose(got[2], expected[2], rtol=1e-6)
    assert (got[2][got[3] >= 0] > np.float32(0.7)).all()


def sigmoid32(x: np.ndarray) -> np.ndarray:
    return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def one_box_per_score(logits: np.ndarray, dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint boxes, one per logit, one class: NMS keeps every candidate."""
    n = len(logits)
    x = np.arange(n, dtype=np.float64)[:, None] * 10
    boxes = np.concatenate([x, x * 0, x + 5, x * 0 + 5], 1)[None].astype(dtype)
    return boxes, logits.reshape(1, n, 1).astype(dtype)


@pytest.mark.parametrize("threshold", [0.01, 0.25, 0.5, 0.9, 0.999])
def test_sigmoid_cutoff_is_sharp(threshold: float) -> None:
    """Float32 logits around logit(threshold), about four per ulp of the sigmoid there: the
    detections are exactly the logits from some x0 up (the test is monotone), their scores
    exceed the threshold, and x0 is within two sigmoid ulps of where the float64 sigmoid,
    rounded to float32, crosses it."""
    limit = np.float32(threshold)
    ulp = float(np.spacing(limit))
    step = ulp / (threshold * (1 - threshold)) / 4
    logits = np.unique((math.log(threshold / (1 - threshold)) + np.arange(-200, 201) * step).astype(np.float32))
    boxes, scores = one_box_per_score(logits)
    num, _, out_scores, _, out_indices = batched_nms(
        boxes, scores, score_activation=1, score_threshold=threshold, max_output_boxes=len(logits)
    )
    kept = np.sort(out_indices[0, : num[0]])
    assert (out_scores[0, : num[0]] > limit).all()
    assert 0 < len(kept) < len(logits) and (kept == np.arange(kept[0], len(logits))).all()
    exact = int(np.argmax(sigmoid32(logits) > limit))
    assert abs(int(kept[0]) - exact) <= 8


def test_sigmoid_cutoff_at_zero_and_one() -> None:
    logits = np.array([-np.inf, -200, -100, -50, 0, 10, 16, 17, 20, 50, np.inf, np.nan], np.float32)
    boxes, scores = one_box_per_score(logits)

    def kept(threshold: float) -> list[int]:
        num, _, _, _, indices = batched_nms(
            boxes, scores, score_activation=1, score_threshold=threshold, max_output_boxes=len(logits)
        )
        return sorted(indices[0, : num[0]].tolist())

    # sigmoid > 0: every logit whose float sigmoid has not underflowed to 0 (exp(100) overflows
    # float32, so -100 and below give 0), NaN never.
    assert kept(0.0) == list(range(3, 11))
    assert kept(-0.5) == list(range(11))  # every score but NaN
    assert kept(1.0) == []  # a float sigmoid reaches 1 but never exceeds it
    # Just below 1: only logits whose float sigmoid rounds to exactly 1 pass (exp(-17) is below
    # half an ulp of 1, exp(-16) is not).
    below_one = float(np.nextafter(np.float32(1), np.float32(0)))
    assert kept(below_one) == [7, 8, 9, 10]
    assert kept(2.0) == []


def test_equal_scores_order_by_box_then_class() -> None:
    boxes = np.array([[[0, 0, 1, 1], [10, 10, 11, 11], [20, 20, 21, 21]]], np.float32)
    scores = np.full((1, 3, 2), 0.5, np.float32)
    num, _, _, classes, indices = batched_nms(boxes, scores, max_output_boxes=6)
    assert num[0] == 6
    np.testing.assert_array_equal(indices[0], [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(classes[0], [0, 1, 0, 1, 0, 1])


def test_thresholds_are_strict() -> None:
    """A score equal to the threshold is not a candidate; an IoU equal to the threshold does not
    suppress (boxes [0, 0, 2, 1] and [0, 0, 1, 1] have IoU exactly 0.5)."""
    boxes = np.array([[[0, 0, 2, 1], [0, 0, 1, 1], [5, 5, 6, 6]]], np.float32)
    scores = np.array([[[0.9], [0.8], [0.25]]], np.float32)
    num, *_ = batched_nms(boxes, scores, iou_threshold=0.5, score_threshold=0.25)
    assert num[0] == 2
    num, *_ = batched_nms(boxes, scores, iou_threshold=0.4999, score_threshold=0.2)
    assert num[0] == 2  # box 1 suppressed, box 2 now a candidate


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch", [1, 4])
def test_thread_counts_agree(threads: int, batch: int) -> None:
    boxes, scores = make_case(batch, batch, 300, 6, "shared", np.float32)
    attributes = {"score_threshold": 0.5, "max_output_boxes": 150}
    got = batched_nms(boxes, scores, threads=threads, **attributes)
    assert_outputs_equal(got, reference_batched_nms(boxes, scores, **attributes))


@pytest.mark.parametrize(
    "shape,box_shape",
    [((2, 0, 3), (2, 0, 4)), ((2, 5, 0), (2, 5, 4)), ((0, 5, 3), (0, 5, 4)), ((2, 5, 0), (2, 5, 0, 4))],
    ids=["no boxes", "no classes", "no images", "no classes, per class"],
)
def test_empty_inputs(shape: tuple, box_shape: tuple) -> None:
    boxes, scores = np.zeros(box_shape, np.float32), np.zeros(shape, np.float32)
    got = batched_nms(boxes, scores, max_output_boxes=3)
    assert_outputs_equal(got, reference_batched_nms(boxes, scores, max_output_boxes=3))
    assert got[1].shape == (shape[0], 3, 4) and (got[3] == -1).all()


def test_all_scores_below_threshold_give_padding_only() -> None:
    boxes, scores = make_case(1, 2, 20, 3, "shared", np.float32)
    num, out_boxes, out_scores, classes, indices = batched_nms(boxes, scores * 0.5, score_threshold=0.5)
    assert (num == 0).all() and (out_boxes == 0).all() and (out_scores == 0).all()
    assert (classes == -1).all() and (indices == -1).all()


def test_nan_scores_are_never_candidates_and_nan_boxes_never_suppress() -> None:
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 10], [1, 1, np.nan, 10], [0, 0, 10, 10]]], np.float32)
    scores = np.array([[[np.nan], [0.9], [0.8], [0.7]]], np.float32)
    num, out_boxes, out_scores, _, indices = batched_nms(boxes, scores, max_output_boxes=4)
    # Box 0 (NaN score) is no candidate; box 2 (NaN coordinate) neither suppresses box 3's twin
    # nor is suppressed; box 3 goes under box 1.
    assert num[0] == 2
    np.testing.assert_array_equal(indices[0], [1, 2, -1, -1])
    assert np.isnan(out_boxes[0, 1, 2]) and out_scores[0, 1] == np.float32(0.8)


def test_infinite_scores_rank_first() -> None:
    boxes, scores = one_box_per_score(np.array([0.5, np.inf, -np.inf, 0.7], np.float32))
    num, _, out_scores, _, indices = batched_nms(boxes, scores, score_threshold=-np.inf)
    assert num[0] == 3
    np.testing.assert_array_equal(indices[0, :3], [1, 3, 0])
    assert out_scores[0, 0] == np.inf


def test_degenerate_boxes_match_reference() -> None:
    """Zero-size, inverted, infinite and huge boxes."""
    rng = np.random.default_rng(2)
    xy = rng.uniform(0, 50, (1, 40, 2))
    wh = rng.choice([0.0, -3.0, 5.0, 1e30], (1, 40, 2))
    boxes = np.concatenate([xy, xy + wh], -1).astype(np.float32)
    boxes[0, 5] = [-np.inf, -np.inf, np.inf, np.inf]
    scores = rng.choice(np.linspace(0, 1, 11), (1, 40, 2)).astype(np.float32)
    for offset in (0, 1):
        attributes = {"iou_threshold": 0.3, "max_output_boxes": 80, "offset": offset}
        assert_outputs_equal(
            batched_nms(boxes, scores, **attributes), reference_batched_nms(boxes, scores, **attributes)
        )


def test_float16_is_float32_rounded() -> None:
    boxes, scores = make_case(4, 2, 40, 3, "shared", np.float16, box_coding=1)
    attributes = {"box_coding": 1, "max_output_boxes": 30}
    half = batched_nms(boxes, scores, **attributes)
    single = batched_nms(boxes.astype(np.float32), scores.astype(np.float32), **attributes)
    for h, s in zip(half, single):
        np.testing.assert_array_equal(h, s.astype(h.dtype))
    assert half[1].dtype == np.float16


@skip_under_asan
def test_huge_max_output_boxes_is_an_allocation_error() -> None:
    boxes, scores = make_case(1, 1, 5, 2, "shared", np.float32)
    assert_huge_count_fails(batched_nms, boxes, scores, "max_output_boxes", 2**62, "ortops", "BatchedNMS")
    # No image: the outputs are empty whatever their second dimension.
    got = batched_nms(boxes[:0], scores[:0], max_output_boxes=2**40)
    assert got[1].shape == (0, 2**40, 4)


BAD_INPUTS = [
    ("boxes rank", (2, 5, 4, 4, 1), (2, 5, 3), "input 'boxes' must have shape [B, N, 4] or [B, N, C, 4]"),
    ("boxes width", (2, 5, 5), (2, 5, 3), "got [2, 5, 5]"),
    ("boxes count", (2, 6, 4), (2, 5, 3), "with [B, N, C] = [2, 5, 3]"),
    ("boxes batch", (1, 5, 4), (2, 5, 3), "got [1, 5, 4]"),
    ("boxes classes", (2, 5, 2, 4), (2, 5, 3), "got [2, 5, 2, 4]"),
    ("scores rank", (2, 5, 4), (2, 5), "input 'scores' must have rank 3, got shape [2, 5]"),
]


@pytest.mark.parametrize("case,box_shape,score_shape,text", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_are_errors(case: str, box_shape: tuple, score_shape: tuple, text: str) -> None:
    with pytest.raises(Exception, match=message("ortops", "BatchedNMS", text)):
        batched_nms(np.zeros(box_shape, np.float32), np.zeros(score_shape, np.float32))


BAD_ATTRIBUTES = [
    ({"offset": 2}, "attribute 'offset' must be 0 or 1, got 2"),
    ({"box_coding": 2}, "attribute 'box_coding' must be 0 or 1, got 2"),
    ({"class_agnostic": -1}, "attribute 'class_agnostic' must be 0 or 1"),
    ({"score_activation": 3}, "attribute 'score_activation' must be 0 or 1"),
    ({"max_output_boxes": -1}, "attribute 'max_output_boxes' must be >= 0, got -1"),
    ({"pre_topk": -2}, "attribute 'pre_topk' must be -1 (all) or >= 0, got -2"),
    ({"background_class": -2}, "attribute 'background_class' must be -1 (none) or a class id"),
    ({"iou_threshold": float("nan")}, "attribute 'iou_threshold' is NaN"),
    ({"score_threshold": float("nan")}, "attribute 'score_threshold' is NaN"),
    ({"max_output_boxes": 1.5}, "attribute 'max_output_boxes' must be of type int, got float"),
]


@pytest.mark.parametrize("attributes,text", BAD_ATTRIBUTES, ids=[str(a) for a, _ in BAD_ATTRIBUTES])
def test_bad_attributes_are_errors(attributes: dict, text: str) -> None:
    boxes, scores = make_case(0, 1, 4, 2, "shared", np.float32)
    with pytest.raises(Exception, match=message("ortops", "BatchedNMS", text)):
        batched_nms(boxes, scores, **attributes)


def test_wrong_dtype_is_an_error() -> None:
    with pytest.raises(Exception, match="BatchedNMS"):
        batched_nms(np.zeros((1, 2, 4), np.int32), np.zeros((1, 2, 3), np.int32))


# ---------------------------------------------------------------- mmdeploy::TRTBatchedNMS


def trt_nms(boxes: np.ndarray, scores: np.ndarray, return_index: int = 1, threads: int = 0, **attributes):
    # reference_trt's defaults (the node's own are the plugin's zero-initialised ones).
    defaults = {"iou_threshold": 0.5, "score_threshold": 0.05, "clip_boxes": 0, "background_label_id": -1}
    attributes = {"num_classes": scores.shape[2], **defaults, **attributes}
    outputs = ["dets", "labels", "index"][: 2 + return_index]
    return run(
        "TRTBatchedNMS",
        "mmdeploy",
        {"boxes": boxes, "scores": scores},
        outputs,
        threads=threads,
        return_index=return_index,
        **attributes,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["shared4", "per_class"])
@pytest.mark.parametrize("topk", [-1, 0, 3, 30, 1000])
@pytest.mark.parametrize("keep_topk", [1, 20])
def test_trt_matches_reference(dtype: type, layout: str, topk: int, keep_topk: int) -> None:
    boxes, scores = make_case(topk + keep_topk + 1, 2, 40, 3, layout, dtype)
    attributes = {"keep_topk": keep_topk, "topk": topk, "iou_threshold": 0.45, "score_threshold": 0.3}
    got = trt_nms(boxes, scores, **attributes)
    assert [g.dtype for g in got] == [dtype, np.int64, np.int64]
    assert_outputs_equal(got, reference_trt(boxes, scores, **attributes))


def test_trt_equal_scores_order_by_class_then_box() -> None:
    """The plugin's last step is a stable sort of per-class lists: ties go class first."""
    boxes = np.array([[[[0, 0, 1, 1]], [[10, 10, 11, 11]], [[20, 20, 21, 21]]]], np.float32)
    scores = np.full((1, 3, 2), 0.5, np.float32)
    dets, labels, index = trt_nms(boxes, scores, keep_topk=6, score_threshold=0.1)
    np.testing.assert_array_equal(labels[0], [0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(index[0], [0, 1, 2, 0, 1, 2])
    assert (dets[0, :, 4] == 0.5).all()


def test_trt_without_index_has_two_outputs() -> None:
    boxes, scores = make_case(1, 2, 30, 3, "shared4", np.float64)
    with_index = trt_nms(boxes, scores, keep_topk=10)
    without = trt_nms(boxes, scores, return_index=0, keep_topk=10)
    assert len(without) == 2
    assert_outputs_equal(without, with_index[:2])


def test_trt_clip_boxes_and_is_normalized() -> None:
    boxes, scores = make_case(8, 2, 30, 2, "shared4", np.float32)
    boxes = boxes / 50 - 0.5  # partly inside [0, 1]
    boxes[0, 3, 0, 2] = np.nan
    scores[0, 3] = 0.99
    attributes = {"keep_topk": 15, "clip_boxes": 1, "iou_threshold": 0.5, "score_threshold": 0.1}
    got = trt_nms(boxes, scores, **attributes)
    assert_outputs_equal(got, reference_trt(boxes, scores, **attributes))
    assert got[0][..., :4].min() >= 0 and got[0][..., :4].max() <= 1
    assert (got[0][0][got[2][0] == 3][:, 2] == 1).all()  # the NaN coordinate, clamped as fminf / fmaxf do
    assert (got[2][0] == 3).any()
    for is_normalized in (0, 1):
        assert_outputs_equal(trt_nms(boxes, scores, is_normalized=is_normalized, **attributes), got)


@pytest.mark.parametrize("background_label_id", [-1, 0, 1, 5])
def test_trt_background(background_label_id: int) -> None:
    boxes, scores = make_case(2, 1, 30, 3, "per_class", np.float32)
    attributes = {"keep_topk": 40, "background_label_id": background_label_id, "score_threshold": 0.2}
    got = trt_nms(boxes, scores, **attributes)
    assert_outputs_equal(got, reference_trt(boxes, scores, **attributes))
    assert background_label_id not in got[1]


def test_trt_degenerate_boxes_match_reference() -> None:
    rng = np.random.default_rng(4)
    xy = rng.uniform(0, 30, (2, 40, 1, 2))
    wh = rng.choice([0.0, -2.0, 4.0, 9.0], (2, 40, 1, 2))
    boxes = np.concatenate([xy, xy + wh], -1).astype(np.float32)
    scores = rng.choice(np.linspace(0, 1, 11), (2, 40, 2)).astype(np.float32)
    for iou in (0.0, 0.3, 0.7):
        attributes = {"keep_topk": 50, "iou_threshold": iou, "score_threshold": 0.05}
        assert_outputs_equal(trt_nms(boxes, scores, **attributes), reference_trt(boxes, scores, **attributes))


def test_trt_keep_topk_beyond_candidates_pads() -> None:
    """Where the plugin writes nothing (keep_topk > topk), ortops pads as always."""
    boxes, scores = make_case(6, 2, 10, 2, "shared4", np.float32)
    attributes = {"keep_topk": 50, "topk": 5, "score_threshold": 0.0}
    got = trt_nms(boxes, scores, **attributes)
    assert_outputs_equal(got, reference_trt(boxes, scores, **attributes))
    assert (got[1][:, 10:] == -1).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_trt_thread_counts_agree(threads: int) -> None:
    boxes, scores = make_case(12, 3, 200, 5, "shared4", np.float32)
    attributes = {"keep_topk": 100, "score_threshold": 0.4}
    assert_outputs_equal(
        trt_nms(boxes, scores, threads=threads, **attributes), reference_trt(boxes, scores, **attributes)
    )


@skip_under_asan
def test_trt_huge_keep_topk_is_an_allocation_error() -> None:
    boxes, scores = make_case(1, 1, 5, 2, "shared4", np.float32)
    assert_huge_count_fails(trt_nms, boxes, scores, "keep_topk", 2**61, "mmdeploy", "TRTBatchedNMS")


def test_trt_empty_inputs() -> None:
    for box_shape, score_shape in [((2, 0, 1, 4), (2, 0, 3)), ((0, 5, 1, 4), (0, 5, 3)), ((1, 4, 1, 4), (1, 4, 0))]:
        boxes, scores = np.zeros(box_shape, np.float32), np.zeros(score_shape, np.float32)
        dets, labels, index = trt_nms(boxes, scores, keep_topk=4)
        assert dets.shape == (box_shape[0], 4, 5) and (labels == -1).all() and (index == -1).all()


TRT_BAD = [
    ({"num_classes": 4}, "(1, 5, 1, 4)", "input 'scores' must have shape [B, N, num_classes] with num_classes = 4"),
    ({}, "(1, 5, 2, 4)", "input 'boxes' must have shape [B, N, 1, 4] or [B, N, C, 4]"),
    ({}, "(1, 5, 4)", "input 'boxes' must have rank 4"),
    ({"keep_topk": -1}, "(1, 5, 1, 4)", "attribute 'keep_topk' must be >= 0"),
    ({"clip_boxes": 2}, "(1, 5, 1, 4)", "attribute 'clip_boxes' must be 0 or 1"),
    ({"is_normalized": 7}, "(1, 5, 1, 4)", "attribute 'is_normalized' must be 0 or 1"),
    ({"return_index": 0}, "(1, 5, 1, 4)", "attribute 'return_index' is 0, so the node must have 2 outputs, got 3"),
]


@pytest.mark.parametrize("attributes,box_shape,text", TRT_BAD, ids=[t for *_, t in TRT_BAD])
def test_trt_bad_inputs_are_errors(attributes: dict, box_shape: str, text: str) -> None:
    boxes = np.zeros(eval(box_shape), np.float32)  # noqa: S307 (a literal tuple)
    scores = np.zeros((1, 5, 3), np.float32)
    outputs = ["dets", "labels", "index"]
    full = {"num_classes": 3, "keep_topk": 4, "return_index": 1, **attributes}
    with pytest.raises(Exception, match=message("mmdeploy", "TRTBatchedNMS", text)):
        run("TRTBatchedNMS", "mmdeploy", {"boxes": boxes, "scores": scores}, outputs, **full)


def test_trt_return_index_needs_the_third_output() -> None:
    boxes, scores = np.zeros((1, 5, 1, 4), np.float32), np.zeros((1, 5, 3), np.float32)
    with pytest.raises(Exception, match=message("mmdeploy", "TRTBatchedNMS", "so the node must have 3 outputs, got 2")):
        run(
            "TRTBatchedNMS",
            "mmdeploy",
            {"boxes": boxes, "scores": scores},
            ["d", "l"],
            num_classes=3,
            keep_topk=4,
            return_index=1,
        )


def mmdeploy_file(keep_topk: int, return_index: bool) -> onnx.ModelProto:
    """The node as mmdeploy's TensorRT export writes it: every attribute, opset 11, and graph
    outputs typed from the PyTorch stand-in (float dets, int64 labels and index)."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    outputs = ["dets", "labels", "index"][: 2 + return_index]
    node = helper.make_node(
        "TRTBatchedNMS",
        ["boxes4", "scores"],
        outputs,
        "TRTBatchedNMS_0",
        domain="mmdeploy",
        num_classes=3,
        background_label_id=-1,
        iou_threshold=0.5,
        score_threshold=0.05,
        topk=100,
        keep_topk=keep_topk,
        is_normalized=0,
        clip_boxes=0,
        return_index=int(return_index),
    )
    unsqueeze = helper.make_node("Unsqueeze", ["boxes"], ["boxes4"], "Unsqueeze_0", axes=[2])
    value_infos = [helper.make_tensor_value_info("dets", f, [1, keep_topk, 5])]
    value_infos += [helper.make_tensor_value_info(name, i64, [1, keep_topk]) for name in outputs[1:]]
    graph = helper.make_graph(
        [unsqueeze, node],
        "mmdeploy",
        [helper.make_tensor_value_info("boxes", f, [1, 30, 4]), helper.make_tensor_value_info("scores", f, [1, 30, 3])],
        value_infos,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("mmdeploy", 1)], producer_name="pytorch"
    )
    model.ir_version = min(IR_VERSION, 6)
    return model


@pytest.mark.parametrize("return_index", [False, True])
def test_trt_runs_the_file_mmdeploy_writes(return_index: bool) -> None:
    boxes, scores = make_case(9, 1, 30, 3, "shared", np.float32)
    got = session(mmdeploy_file(20, return_index)).run(None, {"boxes": boxes, "scores": scores})
    expected = reference_trt(boxes[:, :, None], scores, keep_topk=20, topk=100, score_threshold=0.05)
    assert_outputs_equal(got, expected[: 2 + return_index])


# ---------------------------------------------------------------- mmdeploy::TRTBatchedRotatedNMS


def rotated_case(seed: int, batch: int, count: int, classes: int, per_class: bool, dtype: type):
    rng = np.random.default_rng(seed)
    per = classes if per_class else 1
    centres = rng.uniform(0, 60, (batch, max(1, count // 4), 2))
    pick = rng.integers(0, centres.shape[1], (batch, count))
    cxy = np.take_along_axis(centres, pick[..., None], 1)[:, :, None] + rng.normal(0, 2, (batch, count, per, 2))
    wh = rng.uniform(3, 15, (batch, count, per, 2))
    theta = rng.uniform(-math.pi, math.pi, (batch, count, per, 1))
    boxes = np.concatenate([cxy, wh, theta], -1).astype(dtype)
    return boxes, rng.choice(np.linspace(0, 1, 11), (batch, count, classes)).astype(dtype)


def rotated_margin(boxes: np.ndarray, threshold: float) -> float:
    """Smallest |IoU - threshold| over the pairs the NMS may compare."""
    limit = float(np.float32(threshold))
    flat = boxes.reshape(boxes.shape[0], -1, 5)
    return min(
        (
            abs(references.rotated_iou(batch[i], batch[j]) - limit)
            for batch in flat
            for i in range(len(batch))
            for j in range(i)
        ),
        default=math.inf,
    )


def trt_rotated(boxes: np.ndarray, scores: np.ndarray, threads: int = 0, **attributes):
    defaults = {"iou_threshold": 0.5, "score_threshold": 0.05, "clip_boxes": 0, "background_label_id": -1}
    attributes = {"num_classes": scores.shape[2], **defaults, **attributes}
    return run(
        "TRTBatchedRotatedNMS",
        "mmdeploy",
        {"boxes": boxes, "scores": scores},
        ["dets", "labels"],
        threads=threads,
        **attributes,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("per_class", [False, True])
@pytest.mark.parametrize("topk", [-1, 4])
def test_trt_rotated_matches_reference(dtype: type, per_class: bool, topk: int) -> None:
    boxes, scores = rotated_case(3 + per_class, 2, 24, 3, per_class, dtype)
    attributes = {"keep_topk": 20, "topk": topk, "iou_threshold": 0.1, "score_threshold": 0.25}
    assert rotated_margin(boxes, 0.1) > 1e-6
    got = trt_rotated(boxes, scores, **attributes)
    assert got[0].shape == (2, 20, 6) and got[1].dtype == np.int64
    assert_outputs_equal(got, reference_trt(boxes, scores, rotated=True, **attributes))


def test_trt_rotated_clip_boxes() -> None:
    """clip_boxes clamps all five values (theta too)."""
    boxes = np.array(
        [[[[0.5, 0.5, 0.4, 0.4, 2.0]], [[0.5, 1.5, 0.4, 0.4, -2.0]], [[0.52, 0.5, 0.4, 0.4, 2.0]]]], np.float32
    )
    scores = np.array([[[0.9], [0.8], [0.7]]], np.float32)
    dets, labels = trt_rotated(boxes, scores, keep_topk=4, clip_boxes=1, iou_threshold=0.5, score_threshold=0.1)
    np.testing.assert_array_equal(labels[0], [0, 0, -1, -1])
    np.testing.assert_allclose(dets[0, 0], [0.5, 0.5, 0.4, 0.4, 1.0, 0.9], rtol=1e-7)
    np.testing.assert_allclose(dets[0, 1], [0.5, 1.0, 0.4, 0.4, 0.0, 0.8], rtol=1e-7)
    assert (dets[0, 2:] == 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trt_rotated_tiny_boxes_have_iou_one(dtype: type) -> None:
    """As the plugin: a box whose w * h is below 1e-14 (zero, a negative side, or just tiny)
    has IoU 1 with every box, so a kept one suppresses every later box of its class anywhere
    and one that comes later is suppressed by any kept box; a threshold of 1 keeps them. Both
    sides negative make the rectangle of their absolute values."""
    far = [[[10, 10, 4, 4, 0.3]], [[90, 10, 4, 4, 0.0]], [[10, 90, 2, 6, 1.0]]]
    tiny = [[[50, 50, 0, 0, 0.0]], [[0, 0, 1e-8, 1e-7, 0.0]], [[70, 70, -3, 2, 0.0]], [[50, 50, 3, 0, 0.5]]]
    for t in tiny:
        for first in (True, False):
            boxes = np.array([[t, *far] if first else [*far, t]], dtype)
            scores = np.array([[[0.9], [0.8], [0.7], [0.6]]], dtype)
            dets, labels = trt_rotated(boxes, scores, keep_topk=4, iou_threshold=0.5, score_threshold=0.1)
            assert labels[0].tolist() == ([0, -1, -1, -1] if first else [0, 0, 0, -1]), (t, first)
            np.testing.assert_array_equal(dets[0, 0, :5], boxes[0, 0, 0])
            dets, labels = trt_rotated(boxes, scores, keep_topk=4, iou_threshold=1.0, score_threshold=0.1)
            assert labels[0].tolist() == [0, 0, 0, 0]
    both_negative = np.array([[[[10, 10, 4, 4, 0.3]], [[10.5, 10, -4, -4, 0.3]]]], dtype)
    dets, labels = trt_rotated(both_negative, np.array([[[0.9], [0.8]]], dtype), keep_topk=2, iou_threshold=0.5)
    assert labels[0].tolist() == [0, -1]  # IoU 7/9 of two 4 x 4 squares


@pytest.mark.parametrize("seed", range(4))
def test_trt_rotated_with_tiny_boxes_matches_reference(seed: int) -> None:
    boxes, scores = rotated_case(40 + seed, 2, 30, 3, seed % 2 == 1, np.float32)
    kind = np.random.default_rng(seed).integers(0, 8, boxes.shape[:3])
    boxes[kind == 0, 2:4] = 0
    boxes[kind == 1, 2] *= -1
    boxes[kind == 2, 2:4] *= -1
    boxes[kind == 3, 2:4] *= 1e-8
    attributes = {"keep_topk": 40, "iou_threshold": 0.3, "score_threshold": 0.15}
    assert rotated_margin(np.abs(boxes), 0.3) > 1e-6
    got = trt_rotated(boxes, scores, **attributes)
    assert_outputs_equal(got, reference_trt(boxes, scores, rotated=True, **attributes))


@pytest.mark.parametrize("threads", [1, 2])
def test_trt_rotated_thread_counts_agree(threads: int) -> None:
    boxes, scores = rotated_case(21, 1, 60, 4, False, np.float64)
    attributes = {"keep_topk": 50, "iou_threshold": 0.2, "score_threshold": 0.3}
    assert rotated_margin(boxes, 0.2) > 1e-6
    got = trt_rotated(boxes, scores, threads=threads, **attributes)
    assert_outputs_equal(got, reference_trt(boxes, scores, rotated=True, **attributes))


def test_trt_rotated_bad_inputs_are_errors() -> None:
    scores = np.zeros((1, 5, 3), np.float32)
    with pytest.raises(Exception, match=message("mmdeploy", "TRTBatchedRotatedNMS", "[B, N, 1, 5] or [B, N, C, 5]")):
        trt_rotated(np.zeros((1, 5, 1, 4), np.float32), scores, keep_topk=3)
    with pytest.raises(Exception, match=message("mmdeploy", "TRTBatchedRotatedNMS", "attribute 'num_classes'")):
        run(
            "TRTBatchedRotatedNMS",
            "mmdeploy",
            {"boxes": np.zeros((1, 5, 1, 5), np.float32), "scores": scores},
            ["d", "l"],
            keep_topk=3,
        )
