"""TensorRT's plugin nodes (domain TRT) against slow references written here from TensorRT's
sources (plugin/efficientNMSPlugin, plugin/batchedNMSPlugin with plugin/common/kernels,
plugin/roiAlignPlugin), and whole files written the way the YOLO exporters write them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from references import cached, roi_align_taps

import ortops

from ortest import run, session, yolov7_efficient_nms_node

f32 = np.float32
EFFICIENT_OUTPUTS = ["num_detections", "detection_boxes", "detection_scores", "detection_classes"]
BATCHED_OUTPUTS = ["num_detections", "nmsed_boxes", "nmsed_scores", "nmsed_classes"]


# --- EfficientNMS_TRT reference (efficientNMSInference.cu/.cuh), one float32 op at a time ---


def _reorder(box: list) -> list:
    """BoxCorner::reorder: each axis's pair put in order by the plugin's arithmetic swap."""
    v = [f32(x) for x in box]
    for lo, hi in ((0, 2), (1, 3)):
        if v[lo] > v[hi]:
            v[lo] = f32(v[lo] - v[hi])
            v[hi] = f32(v[lo] + v[hi])
            v[lo] = f32(v[hi] - v[lo])
    return v


def _area(v: list) -> np.float32:
    e0, e1 = f32(v[2] - v[0]), f32(v[3] - v[1])
    if e0 <= 0 or e1 <= 0:
        return f32(0)
    return f32(e0 * e1)


def _efficient_iou(candidate: list, kept: list) -> np.float32:
    a, b = _reorder(candidate), _reorder(kept)
    inter = [a[0] if a[0] > b[0] else b[0], a[1] if a[1] > b[1] else b[1]]
    inter += [a[2] if a[2] < b[2] else b[2], a[3] if a[3] < b[3] else b[3]]
    inter_area = _area(inter)
    if inter_area <= 0:
        return f32(0)
    union = f32(f32(_area(a) + _area(b)) - inter_area)
    if union <= 0:
        return f32(0)
    return f32(inter_area / union)


def _decode(box: np.ndarray, anchor: np.ndarray | None, coding: int) -> list:
    v = [f32(x) for x in box]
    with np.errstate(all="ignore"):
        if anchor is not None:
            a = [f32(x) for x in anchor]
            if coding == 0:
                v, a = _reorder(v), _reorder(a)
                return [f32(v[i] + a[i]) for i in range(4)]
            v = [
                f32(f32(v[0] * a[2]) + a[0]),
                f32(f32(v[1] * a[3]) + a[1]),
                f32(a[2] * np.exp(v[2])),
                f32(a[3] * np.exp(v[3])),
            ]
        if coding == 0:
            return v
        h0, h1 = f32(v[2] * f32(0.5)), f32(v[3] * f32(0.5))
        return [f32(v[0] - h0), f32(v[1] - h1), f32(v[0] + h0), f32(v[1] + h1)]


@cached
def efficient_nms_reference(
    boxes: np.ndarray,
    scores: np.ndarray,
    anchors: np.ndarray | None = None,
    score_threshold: float = 0.5,
    iou_threshold: float = 0.5,
    max_output_boxes: int = 100,
    background_class: int = -1,
    score_activation: int = 0,
    class_agnostic: int = 0,
    box_coding: int = 0,
    plugin_version: str = "1",
) -> list[np.ndarray]:
    """The plugin's filter, sort and NMS loop (all candidates, no 4096 limit, no dense path)."""
    batch, n, c = scores.shape[:3]
    threshold = f32(score_threshold)
    if score_activation:
        threshold = f32(-32768) if threshold <= 0 else f32(np.log(f32(threshold / f32(f32(1) - threshold))))
    k = max_output_boxes
    num = np.zeros((batch, 1), np.int32)
    out_boxes = np.zeros((batch, k, 4), np.float32)
    out_scores = np.zeros((batch, k), np.float32)
    out_classes = np.zeros((batch, k), np.int32)
    for b in range(batch):

        def box_of(i: int, cls: int, b: int = b) -> list:
            box = boxes[b, i] if boxes.ndim == 3 else boxes[b, i, 0 if boxes.shape[2] == 1 else cls]
            anchor = None if anchors is None else anchors[0 if anchors.shape[0] == 1 else b, i]
            return _decode(box, anchor, box_coding)

        candidates = [
            (f32(scores[b, i, cls].item()), i, cls)
            for i in range(n)
            for cls in range(c)
            if cls != background_class and f32(scores[b, i, cls].item()) >= threshold
        ]
        candidates.sort(key=lambda t: (-t[0], t[1], t[2]))
        kept: list[tuple] = []
        for score, i, cls in candidates:
            if len(kept) == k:
                break
            box = box_of(i, cls)
            if not any(
                (class_agnostic or kc == cls) and _efficient_iou(box, kbox) >= f32(iou_threshold)
                for _, _, kc, kbox in kept
            ):
                kept.append((score, i, cls, box))
        num[b, 0] = len(kept)
        for row, (score, _, cls, box) in enumerate(kept):
            out_boxes[b, row] = box
            out_scores[b, row] = f32(1) / (f32(1) + np.exp(-score)) if score_activation else score
            out_classes[b, row] = cls
    return [num, out_boxes, out_scores, out_classes]


def yolo_like(rng: np.random.Generator, batch: int, n: int, classes: int, objects: int = 6) -> tuple:
    """Corner boxes clustered around a few objects, and scores high near them, with ties."""
    centres = rng.uniform(20, 200, (batch, objects, 2))
    which = rng.integers(0, objects, (batch, n))
    xy = np.take_along_axis(centres, which[..., None], axis=1) + rng.normal(0, 4, (batch, n, 2))
    wh = rng.uniform(10, 40, (batch, n, 2))
    boxes = np.concatenate([xy - wh / 2, xy + wh / 2], axis=-1).astype(np.float32)
    scores = rng.uniform(0, 1, (batch, n, classes)) ** 3
    scores[..., 0] = np.round(scores[..., 0], 1)  # exact ties
    return boxes, scores.astype(np.float32)


def run_efficient(boxes, scores, anchors=None, **attributes: Any) -> list[np.ndarray]:
    inputs = {"boxes": boxes, "scores": scores}
    if anchors is not None:
        inputs["anchors"] = anchors
    return run("EfficientNMS_TRT", "TRT", inputs, EFFICIENT_OUTPUTS, **attributes)


def assert_efficient_equal(got: list[np.ndarray], expected: list[np.ndarray], exact: bool = True) -> None:
    assert [g.dtype for g in got] == [np.int32, np.float32, np.float32, np.int32]
    assert [g.shape for g in got] == [e.shape for e in expected]
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[3], expected[3])
    if exact:
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_array_equal(got[2], expected[2])
    else:  # exp and the sigmoid: the C library's against numpy's, a few ulp apart
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(got[2], expected[2], rtol=1e-6, atol=1e-7)


def to_centre_size(boxes: np.ndarray) -> np.ndarray:
    """Corner boxes as (centre, size), for box_coding 1."""
    return np.concatenate([(boxes[..., :2] + boxes[..., 2:]) / 2, boxes[..., 2:] - boxes[..., :2]], axis=-1).astype(
        np.float32
    )


@pytest.mark.parametrize("box_coding", [0, 1])
@pytest.mark.parametrize("anchors", [None, "shared", "per_image"])
@pytest.mark.parametrize("score_activation", [0, 1])
@pytest.mark.parametrize("class_agnostic", [0, 1])
@pytest.mark.parametrize("per_class_boxes", [False, True])
def test_efficient_nms_matches_reference(box_coding, anchors, score_activation, class_agnostic, per_class_boxes):
    rng = np.random.default_rng(box_coding + 2 * score_activation + 4 * class_agnostic + 8 * per_class_boxes)
    batch, n, c = 3, 60, 4
    boxes, scores = yolo_like(rng, batch, n, c)
    if per_class_boxes:  # [B, N, C, 4]: each class's box jittered
        boxes = (boxes[:, :, None, :] + rng.normal(0, 2, (batch, n, c, 4))).astype(np.float32)
    if box_coding == 1:
        boxes = to_centre_size(boxes)
    else:  # some boxes with their corners swapped: the IoU reorders them
        boxes[:, ::7] = boxes[:, ::7][..., [2, 3, 0, 1]]
    anchor_input = None
    if anchors is not None:
        # Raw regressions and anchors in the coding: centre-size offsets are small (scaled by the
        # anchor size, sizes through exp); corner offsets are added (some corners swapped).
        count = 1 if anchors == "shared" else batch
        anchor_boxes, _ = yolo_like(rng, count, n, 1)
        if box_coding == 1:
            anchor_input = to_centre_size(anchor_boxes)
            boxes = rng.normal(0, 0.3, boxes.shape).astype(np.float32)
        else:
            anchor_input = anchor_boxes[..., [2, 1, 0, 3]].copy()  # x corners swapped: reordered first
            boxes = rng.normal(0, 3, boxes.shape).astype(np.float32)
    if score_activation:
        scores = (np.log(scores + 1e-3) - np.log1p(-scores + 1e-3)).astype(np.float32)  # logits
    attributes = dict(
        score_threshold=0.3,
        iou_threshold=0.45,
        max_output_boxes=25,
        background_class=1 if class_agnostic else -1,
        score_activation=score_activation,
        class_agnostic=class_agnostic,
        box_coding=box_coding,
        plugin_version="1",
    )
    got = run_efficient(boxes, scores, anchor_input, **attributes)
    expected = efficient_nms_reference(boxes, scores, anchor_input, **attributes)
    assert_efficient_equal(got, expected, exact=not score_activation and not (anchors and box_coding == 1))
    assert (got[0] > 0).all()


def test_efficient_nms_background_class_and_padding() -> None:
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 10.5], [50, 50, 60, 60]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.1], [0.95, 0.7, 0.2], [0.1, 0.6, 0.3]]], np.float32)
    num, out_boxes, out_scores, classes = run_efficient(
        boxes, scores, score_threshold=0.25, iou_threshold=0.5, max_output_boxes=6, background_class=0
    )
    # Class 0 is background; class 1: box 0 (0.8) suppresses box 1 (0.7); class 2: box 2 (0.3).
    assert num.tolist() == [[3]]
    np.testing.assert_array_equal(classes, [[1, 1, 2, 0, 0, 0]])
    np.testing.assert_array_equal(out_scores, np.array([[0.8, 0.6, 0.3, 0, 0, 0]], np.float32))
    np.testing.assert_array_equal(out_boxes[0, :3], boxes[0, [0, 2, 2]])
    assert not out_boxes[0, 3:].any()


def test_efficient_nms_threshold_comparisons_are_inclusive() -> None:
    """score >= score_threshold is a candidate; IoU >= iou_threshold suppresses."""
    boxes = np.array([[[0, 0, 4, 1], [0, 0, 2, 1], [2, 0, 4, 1]]], np.float32)  # IoU(0, 1) = IoU(0, 2) = 0.5
    scores = np.array([[[0.5], [0.4], [0.25]]], np.float32)
    num, _, out_scores, _ = run_efficient(boxes, scores, score_threshold=0.25, iou_threshold=0.5)
    assert num.tolist() == [[1]] and out_scores[0, 0] == f32(0.5)
    num, _, out_scores, _ = run_efficient(boxes, scores, score_threshold=0.25, iou_threshold=0.51)
    assert num.tolist() == [[3]]
    np.testing.assert_array_equal(out_scores[0, :3], np.array([0.5, 0.4, 0.25], np.float32))


def test_efficient_nms_iou_threshold_zero_suppresses_disjoint_boxes_of_a_class() -> None:
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]]], np.float32)
    scores = np.array([[[0.9, 0.1], [0.8, 0.1], [0.1, 0.7]]], np.float32)
    num, _, _, classes = run_efficient(boxes, scores, score_threshold=0.5, iou_threshold=0.0)
    assert num.tolist() == [[2]] and classes[0, :2].tolist() == [0, 1]
    num, _, _, _ = run_efficient(boxes, scores, score_threshold=0.5, iou_threshold=0.0, class_agnostic=1)
    assert num.tolist() == [[1]]


def test_efficient_nms_reversed_corners_overlap_but_are_output_as_given() -> None:
    boxes = np.array([[[10, 10, 0, 0], [0, 0, 10, 9]]], np.float32)  # box 0 with its corners swapped
    scores = np.array([[[0.9], [0.8]]], np.float32)
    num, out_boxes, _, _ = run_efficient(boxes, scores, score_threshold=0.5, iou_threshold=0.5)
    assert num.tolist() == [[1]]
    np.testing.assert_array_equal(out_boxes[0, 0], [10, 10, 0, 0])


def test_efficient_nms_score_activation_thresholds_logits_and_outputs_sigmoids() -> None:
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]]], np.float32)
    logits = np.array([[[2.0], [-1.0], [-3.0]]], np.float32)  # sigmoids 0.881, 0.269, 0.047
    num, _, out_scores, _ = run_efficient(boxes, logits, score_threshold=0.25, score_activation=1)
    assert num.tolist() == [[2]]
    np.testing.assert_allclose(out_scores[0, :2], 1 / (1 + np.exp(-logits[0, :2, 0])), rtol=1e-6)
    # A threshold of 0 or less lets every logit through.
    num, _, _, _ = run_efficient(boxes, logits, score_threshold=0.0, score_activation=1)
    assert num.tolist() == [[3]]


def test_efficient_nms_low_threshold_never_outputs_scores_below_it() -> None:
    """Below 0.007 the plugin's dense path lets below-threshold candidates into the output;
    ortops does not (see the schema's differences)."""
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]]], np.float32)
    scores = np.array([[[0.5], [0.002], [0.004]]], np.float32)
    num, _, out_scores, _ = run_efficient(boxes, scores, score_threshold=0.003, max_output_boxes=10)
    assert num.tolist() == [[2]]
    np.testing.assert_array_equal(out_scores[0, :3], np.array([0.5, 0.004, 0], np.float32))


@pytest.mark.parametrize(
    "shape",
    [
        (2, 0, 3),  # no anchors
        (0, 5, 3),  # no images
        (2, 5, 0),  # no classes
    ],
)
def test_efficient_nms_empty_inputs(shape) -> None:
    b, n, c = shape
    boxes = np.zeros((b, n, 4), np.float32)
    scores = np.zeros((b, n, c), np.float32)
    got = run_efficient(boxes, scores, score_threshold=0.0, max_output_boxes=4)
    assert [g.shape for g in got] == [(b, 1), (b, 4, 4), (b, 4), (b, 4)]
    assert not any(g.any() for g in got)


def test_efficient_nms_no_candidates_and_more_outputs_than_candidates() -> None:
    rng = np.random.default_rng(3)
    boxes, scores = yolo_like(rng, 2, 30, 3)
    got = run_efficient(boxes, scores, score_threshold=1.5, max_output_boxes=7)
    assert [g.shape for g in got] == [(2, 1), (2, 7, 4), (2, 7), (2, 7)]
    assert not any(g.any() for g in got)
    got = run_efficient(boxes, scores, score_threshold=0.0, iou_threshold=0.9, max_output_boxes=1000)
    expected = efficient_nms_reference(boxes, scores, None, 0.0, 0.9, 1000)
    assert_efficient_equal(got, expected)
    assert (got[0] < 1000).all() and not got[1][:, 95:].any()


def test_efficient_nms_accepts_the_other_layouts_of_the_plugin() -> None:
    """Scores [B, N, C, 1] and boxes [B, N, 1, 4] are the same as [B, N, C] and [B, N, 4]."""
    rng = np.random.default_rng(4)
    boxes, scores = yolo_like(rng, 2, 40, 3)
    expected = run_efficient(boxes, scores, score_threshold=0.2)
    for got in (
        run_efficient(boxes[:, :, None, :], scores, score_threshold=0.2),
        run_efficient(boxes, scores[..., None], score_threshold=0.2),
    ):
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)


def test_efficient_nms_nan() -> None:
    """NaN scores are never candidates; a box with a NaN coordinate has IoU NaN or 0 with every
    box, so it neither suppresses nor is suppressed; its output keeps the NaN."""
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, math.nan], [0, 0, 10, 9.5], [1, 1, 9, 9]]], np.float32)
    scores = np.array([[[math.nan], [0.9], [0.8], [0.7]]], np.float32)
    num, out_boxes, out_scores, _ = run_efficient(boxes, scores, score_threshold=0.1, iou_threshold=0.5)
    assert num.tolist() == [[2]]
    np.testing.assert_array_equal(out_scores[0, :2], np.array([0.9, 0.8], np.float32))
    assert np.isnan(out_boxes[0, 0, 3]) and out_boxes[0, 1].tolist() == [0, 0, 10, 9.5]
    expected = efficient_nms_reference(boxes, scores, None, 0.1, 0.5)
    np.testing.assert_array_equal(run_efficient(boxes, scores, score_threshold=0.1)[1], expected[1])


def test_efficient_nms_is_the_same_on_one_thread_and_many() -> None:
    rng = np.random.default_rng(5)
    for batch in (1, 4):
        boxes, scores = yolo_like(rng, batch, 500, 8)
        inputs = {"boxes": boxes, "scores": scores}
        one = run("EfficientNMS_TRT", "TRT", inputs, EFFICIENT_OUTPUTS, threads=1, score_threshold=0.1)
        many = run("EfficientNMS_TRT", "TRT", inputs, EFFICIENT_OUTPUTS, threads=4, score_threshold=0.1)
        for a, b in zip(one, many):
            np.testing.assert_array_equal(a, b)


def test_efficient_nms_reads_int_attributes_written_as_one_value_lists() -> None:
    """yolov7's End2End export passes background_class and box_coding as Python tuples, which
    TorchScript's exporter writes as INTS attributes."""
    rng = np.random.default_rng(6)
    boxes, scores = yolo_like(rng, 1, 50, 3)
    centre = to_centre_size(boxes)
    expected = run_efficient(centre, scores, score_threshold=0.2, background_class=2, box_coding=1)
    got = run_efficient(centre, scores, score_threshold=0.2, background_class=[2], box_coding=[1])
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    with pytest.raises(
        Exception, match=r"TRT\.EfficientNMS_TRT: attribute 'box_coding' must be of type int, got ints holding 2"
    ):
        run_efficient(centre, scores, box_coding=[1, 1])


BAD_EFFICIENT_INPUTS = [
    ((2, 5, 3), (2, 5, 3, 1), None, r"input 'boxes' must have shape \[B, N, 4\] .*, got \[2, 5, 3\]"),
    ((2, 5, 4), (3, 5, 3), None, r"input 'boxes' must have shape .*B = 3.*got \[2, 5, 4\]"),
    ((2, 5, 4), (2, 6, 3), None, r"input 'boxes' must have shape .*N = 6.*got \[2, 5, 4\]"),
    ((2, 5, 2, 4), (2, 5, 3), None, r"input 'boxes' must have shape .*C = 3.*got \[2, 5, 2, 4\]"),
    ((2, 5, 4), (2, 5), None, r"input 'scores' must have shape \[B, N, C\] \(or \[B, N, C, 1\]\), got \[2, 5\]"),
    ((2, 5, 4), (2, 5, 3, 2), None, r"input 'scores' must have shape .*got \[2, 5, 3, 2\]"),
    ((2, 5, 4), (2, 5, 3), (3, 5, 4), r"input 'anchors' must have shape \[1, N, 4\] or \[B, N, 4\].*got \[3, 5, 4\]"),
    ((2, 5, 4), (2, 5, 3), (1, 5), r"input 'anchors' must have shape .*got \[1, 5\]"),
]


@pytest.mark.parametrize(("boxes", "scores", "anchors", "message"), BAD_EFFICIENT_INPUTS)
def test_efficient_nms_bad_inputs_are_errors(boxes, scores, anchors, message) -> None:
    anchor_input = None if anchors is None else np.zeros(anchors, np.float32)
    with pytest.raises(Exception, match=r"TRT\.EfficientNMS_TRT: " + message):
        run_efficient(np.zeros(boxes, np.float32), np.zeros(scores, np.float32), anchor_input)


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"box_coding": 2}, r"attribute 'box_coding' must be 0 \(corners\) or 1 \(centre-size\), got 2"),
        ({"score_activation": -1}, r"attribute 'score_activation' must be 0 or 1, got -1"),
        ({"class_agnostic": 3}, r"attribute 'class_agnostic' must be 0 or 1, got 3"),
        ({"max_output_boxes": 0}, r"attribute 'max_output_boxes' must be in \[1, 2147483647\], got 0"),
        ({"max_output_boxes": 1 << 40}, r"attribute 'max_output_boxes' must be in"),
        ({"score_threshold": math.nan}, r"attribute 'score_threshold' is NaN"),
        ({"iou_threshold": math.nan}, r"attribute 'iou_threshold' is NaN"),
        ({"iou_threshold": 1}, r"attribute 'iou_threshold' must be of type float, got int"),
        ({"plugin_version": 1}, r"attribute 'plugin_version' must be of type string, got int"),
    ],
)
def test_efficient_nms_bad_attributes_are_errors(attributes, message) -> None:
    with pytest.raises(Exception, match=r"TRT\.EfficientNMS_TRT: " + message):
        run_efficient(np.zeros((1, 2, 4), np.float32), np.zeros((1, 2, 1), np.float32), **attributes)


def test_efficient_nms_wrong_element_type_is_an_error() -> None:
    with pytest.raises(Exception, match="EfficientNMS_TRT"):
        run_efficient(np.zeros((1, 2, 4), np.float64), np.zeros((1, 2, 1), np.float64))


# --- whole files, as the YOLO exporters write them ------------------------------------------

NUM_CLASSES, STRIDE, GRID = 3, 8.0, 6  # one 6 x 6 feature map of a 48 x 48 image


def _initializer(name: str, value: np.ndarray) -> onnx.TensorProto:
    return helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape, value.ravel().tolist())


def _exported_outputs(names: list[str], batch: int, max_output: int) -> list[onnx.ValueInfoProto]:
    """The NMS outputs as both exporters leave them: dims named by the numbers they stand for
    (they set each dim's dim_param to str(size)), num_detections and classes int32."""
    shapes = [[batch, 1], [batch, max_output, 4], [batch, max_output], [batch, max_output]]
    types = [TensorProto.INT32, TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT32]
    return [
        helper.make_tensor_value_info(name, elem, [str(d) for d in shape])
        for name, elem, shape in zip(names, types, shapes)
    ]


def _head_outputs(batch: int, boxes: int) -> list[onnx.ValueInfoProto]:
    """The NMS node's inputs, also made graph outputs for the test (the exporters' files have
    only the four NMS outputs)."""
    return [
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [batch, boxes, 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, boxes, NUM_CLASSES]),
    ]


def yolov7_end2end_model(rng: np.random.Generator, batch: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """yolov7's Detect head (one level, 3 anchors) and models/experimental.py's ONNX_TRT, as
    export.py --end2end --grid writes them: opset 12, Sigmoid, Split into xy / wh / conf, grid
    and anchor arithmetic, scores = class scores * objectness, boxes as centre-size, then
    TRT::EfficientNMS_TRT with background_class and box_coding as one-value INTS (yolov7
    passes tuples), plugin_version "1", score_activation 0, attributes in TRT_NMS's order."""
    na, no, channels = 3, 5 + NUM_CLASSES, 8
    weights = {
        "w": rng.normal(0, 0.5, (na * no, channels, 1, 1)).astype(np.float32),
        # Low objectness and class biases, so that few boxes pass the threshold, as in a trained model.
        "bias": (rng.normal(0, 0.5, (na, no)) - 1.2 * (np.arange(no) >= 4)).ravel().astype(np.float32),
        "shape5": np.array([batch, na, no, GRID, GRID], np.int64),
        "xy_scale": np.array(2 * STRIDE, np.float32),
        "grid": (STRIDE * (np.stack(np.meshgrid(np.arange(GRID), np.arange(GRID)), -1) - 0.5))
        .reshape(1, 1, GRID, GRID, 2)
        .astype(np.float32),
        "anchor_grid": (4 * np.array([[12, 16], [19, 36], [40, 28]], np.float32)).reshape(1, na, 1, 1, 2),
        "flat": np.array([batch, -1, no], np.int64),
        "s0": np.array([0], np.int64),
        "s4": np.array([4], np.int64),
        "s5": np.array([5], np.int64),
        "send": np.array([no], np.int64),
        "axis2": np.array([2], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["features", "w", "bias"], ["conv"], name="/model.105/m.0/Conv"),
        helper.make_node("Reshape", ["conv", "shape5"], ["r5"]),
        helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 1, 3, 4, 2]),
        helper.make_node("Sigmoid", ["t5"], ["y"]),
        # Split takes its sizes as an attribute up to opset 12.
        helper.make_node("Split", ["y"], ["xy", "wh", "conf_cls"], axis=4, split=[2, 2, NUM_CLASSES + 1]),
    ]
    nodes += [
        helper.make_node("Mul", ["xy", "xy_scale"], ["xy_scaled"]),
        helper.make_node("Add", ["xy_scaled", "grid"], ["xy_out"]),
        helper.make_node("Mul", ["wh", "wh"], ["wh_sq"]),
        helper.make_node("Mul", ["wh_sq", "anchor_grid"], ["wh_out"]),
        helper.make_node("Concat", ["xy_out", "wh_out", "conf_cls"], ["cat"], axis=4),
        helper.make_node("Reshape", ["cat", "flat"], ["x"]),
        helper.make_node("Slice", ["x", "s0", "s4", "axis2"], ["boxes"]),
        helper.make_node("Slice", ["x", "s4", "s5", "axis2"], ["conf"]),
        helper.make_node("Slice", ["x", "s5", "send", "axis2"], ["cls"]),
        helper.make_node("Mul", ["cls", "conf"], ["scores"]),
        yolov7_efficient_nms_node(),
    ]
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [batch, channels, GRID, GRID])],
        _exported_outputs(["num_dets", "det_boxes", "det_scores", "det_classes"], batch, 100)
        + _head_outputs(batch, na * GRID * GRID),
        [_initializer(name, value) for name, value in weights.items()],
    )
    opsets = [helper.make_opsetid("", 12), helper.make_opsetid("TRT", 1)]
    model = helper.make_model(graph, ir_version=7, opset_imports=opsets, producer_name="pytorch")
    return model, weights


def yolov7_head_reference(features: np.ndarray, weights: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    conv = np.einsum("bchw,oc->bohw", features, weights["w"][:, :, 0, 0]) + weights["bias"][None, :, None, None]
    y = 1 / (1 + np.exp(-conv.reshape(weights["shape5"]).transpose(0, 1, 3, 4, 2)))
    xy = y[..., :2] * weights["xy_scale"] + weights["grid"]
    wh = y[..., 2:4] ** 2 * weights["anchor_grid"]
    x = np.concatenate([xy, wh, y[..., 4:]], -1).reshape(features.shape[0], -1, 5 + NUM_CLASSES)
    return x[..., :4], x[..., 5:] * x[..., 4:5]


def yolov8_tensorrt_model(rng: np.random.Generator, batch: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """YOLOv8-TensorRT's PostDetect (models/common.py) without the DFL: distances to the box
    sides from each anchor point, boxes as corners times the stride, sigmoid class scores,
    transposed to [B, N, 4] and [B, N, C], then TRT::EfficientNMS_TRT with its TRT_NMS's
    attributes (iou 0.65 and score 0.25 from export.py's defaults, plain ints) at opset 11."""
    channels = 8
    points = (np.stack(np.meshgrid(np.arange(GRID), np.arange(GRID)), 0).reshape(2, -1) + 0.5).astype(np.float32)
    weights = {
        "w": rng.normal(0, 0.5, (4 + NUM_CLASSES, channels, 1, 1)).astype(np.float32),
        "bias": (rng.normal(0, 0.5, (4 + NUM_CLASSES,)) - 3.0 * (np.arange(4 + NUM_CLASSES) >= 4)).astype(np.float32),
        "flat": np.array([batch, 4 + NUM_CLASSES, -1], np.int64),
        "anchors": points[None],  # [1, 2, N]
        "stride": np.array(STRIDE, np.float32),
        "minus_one": np.array(-1, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["features", "w", "bias"], ["conv"], name="/model.22/Conv"),
        helper.make_node("Reshape", ["conv", "flat"], ["y"]),
        helper.make_node("Split", ["y"], ["lt", "rb", "cls"], axis=1, split=[2, 2, NUM_CLASSES]),
        helper.make_node("Sigmoid", ["cls"], ["cls_sig"]),
        helper.make_node("Exp", ["lt"], ["lt_d"]),
        helper.make_node("Exp", ["rb"], ["rb_d"]),
        helper.make_node("Mul", ["lt_d", "minus_one"], ["neg_lt"]),
        helper.make_node("Add", ["anchors", "neg_lt"], ["x1y1"]),
        helper.make_node("Add", ["anchors", "rb_d"], ["x2y2"]),
        helper.make_node("Concat", ["x1y1", "x2y2"], ["xyxy"], axis=1),
        helper.make_node("Mul", ["xyxy", "stride"], ["boxes_t"]),
        helper.make_node("Transpose", ["boxes_t"], ["boxes"], perm=[0, 2, 1]),
        helper.make_node("Transpose", ["cls_sig"], ["scores"], perm=[0, 2, 1]),
        helper.make_node(
            "EfficientNMS_TRT",
            ["boxes", "scores"],
            ["num_dets", "bboxes", "scores_out", "labels"],
            name="/model.22/EfficientNMS_TRT",
            domain="TRT",
            iou_threshold=0.65,
            score_threshold=0.25,
            max_output_boxes=100,
            background_class=-1,
            box_coding=0,
            plugin_version="1",
            score_activation=0,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, channels, GRID, GRID])],
        _exported_outputs(["num_dets", "bboxes", "scores_out", "labels"], batch, 100)
        + _head_outputs(batch, GRID * GRID),
        [_initializer(name, value) for name, value in weights.items()],
    )
    graph.node[0].input[0] = "images"
    opsets = [helper.make_opsetid("", 11), helper.make_opsetid("TRT", 1)]
    model = helper.make_model(graph, ir_version=6, opset_imports=opsets, producer_name="pytorch")
    return model, weights


def yolov8_head_reference(features: np.ndarray, weights: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    conv = np.einsum("bchw,oc->bohw", features, weights["w"][:, :, 0, 0]) + weights["bias"][None, :, None, None]
    y = conv.reshape(features.shape[0], 4 + NUM_CLASSES, -1)
    x1y1 = weights["anchors"] - np.exp(y[:, :2])
    x2y2 = weights["anchors"] + np.exp(y[:, 2:4])
    boxes = np.concatenate([x1y1, x2y2], 1) * STRIDE
    return boxes.transpose(0, 2, 1), (1 / (1 + np.exp(-y[:, 4:]))).transpose(0, 2, 1)


@pytest.mark.parametrize("exporter", ["yolov7", "yolov8_tensorrt"])
@pytest.mark.parametrize("batch", [1, 3])
def test_yolo_exported_file_runs_unchanged(exporter: str, batch: int) -> None:
    rng = np.random.default_rng(batch)
    make = yolov7_end2end_model if exporter == "yolov7" else yolov8_tensorrt_model
    head_reference = yolov7_head_reference if exporter == "yolov7" else yolov8_head_reference
    model, weights = make(rng, batch)
    if not onnx.defs.has("EfficientNMS_TRT", domain="TRT"):
        onnx.checker.check_model(model)  # as the exporters check it (the TRT domain is unknown to onnx)
    elif exporter == "yolov7":
        # Once ortops.register_onnx_schemas() has run (as an earlier test may have done), onnx
        # knows the op, with int attributes: it cannot also allow yolov7's one-value INTS.
        with pytest.raises(onnx.checker.ValidationError, match="Mismatched attribute type .*background_class"):
            onnx.checker.check_model(model)
    assert ortops.check_model(model) == []
    features = rng.normal(0, 1, (batch, 8, GRID, GRID)).astype(np.float32)
    nms_node = model.graph.node[-1]
    attributes = {a.name: helper.get_attribute_value(a) for a in nms_node.attribute}
    num, det_boxes, det_scores, det_classes, boxes, scores = session(model).run(
        None, {model.graph.input[0].name: features}
    )

    # The standard ONNX head against numpy, then the NMS against the reference on the head's
    # own outputs (so that rounding in the head cannot move a box across a threshold).
    ref_boxes, ref_scores = head_reference(features, weights)
    assert boxes.shape == (batch, GRID * GRID * (3 if exporter == "yolov7" else 1), 4)
    assert scores.shape == (*boxes.shape[:2], NUM_CLASSES)
    np.testing.assert_allclose(boxes, ref_boxes, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-4, atol=1e-6)
    expected = efficient_nms_reference(
        boxes,
        scores,
        None,
        score_threshold=attributes["score_threshold"],
        iou_threshold=attributes["iou_threshold"],
        max_output_boxes=attributes["max_output_boxes"],
        background_class=np.ravel(attributes["background_class"])[0],
        box_coding=np.ravel(attributes["box_coding"])[0],
    )
    assert_efficient_equal([num, det_boxes, det_scores, det_classes], expected)
    assert (num > 0).all() and (num < 100).all(), num.ravel()
    assert num.shape == (batch, 1) and det_boxes.shape == (batch, 100, 4)


# --- BatchedNMS_TRT / BatchedNMSDynamic_TRT reference (allClassNMS.cu, gatherNMSOutputs.cu) ---


def _sorted_box(box: np.ndarray, normalized: int) -> tuple[list, np.float32]:
    v = [f32(x) for x in box]
    s = [np.fmin(v[0], v[2]), np.fmin(v[1], v[3]), np.fmax(v[0], v[2]), np.fmax(v[1], v[3])]
    if s[2] < s[0] or s[3] < s[1]:
        return s, f32(0)
    w, h = f32(s[2] - s[0]), f32(s[3] - s[1])
    return s, f32(w * h) if normalized else f32(f32(w + f32(1)) * f32(h + f32(1)))


def _batched_iou(kept: np.ndarray, candidate: np.ndarray, normalized: int, caffe: int) -> np.float32:
    (a, size_a), (b, size_b) = _sorted_box(kept, normalized), _sorted_box(candidate, normalized)
    inter = [f32(0)] * 4
    if not (b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]):
        inter = [np.fmax(a[0], b[0]), np.fmax(a[1], b[1]), np.fmin(a[2], b[2]), np.fmin(a[3], b[3])]
    plus = f32(0) if normalized or not caffe else f32(1)
    w, h = f32(f32(inter[2] - inter[0]) + plus), f32(f32(inter[3] - inter[1]) + plus)
    if not (w > 0 and h > 0):
        return f32(0)
    size = f32(w * h)
    with np.errstate(all="ignore"):
        return f32(size / f32(f32(size_a + size_b) - size))


@cached
def batched_nms_reference(
    boxes: np.ndarray,
    scores: np.ndarray,
    shareLocation: int,  # noqa: N803 - the plugin's attribute names
    backgroundLabelId: int,  # noqa: N803
    numClasses: int,  # noqa: N803
    topK: int,  # noqa: N803
    keepTopK: int,  # noqa: N803
    scoreThreshold: float,  # noqa: N803
    iouThreshold: float,  # noqa: N803
    isNormalized: int = 1,  # noqa: N803
    clipBoxes: int = 1,  # noqa: N803
    caffeSemantics: int = 1,  # noqa: N803
    **_: Any,
) -> list[np.ndarray]:
    """Per class: scores > threshold sorted (stable), the first topK through greedy NMS
    (IoU > threshold); then all kept sorted by score (stable over class-major order) and the
    first keepTopK gathered; padding: box 0, score 0, class -1."""
    batch, n = scores.shape[:2]
    dtype = boxes.dtype
    num = np.zeros((batch, 1), np.int32)
    out_boxes = np.zeros((batch, keepTopK, 4), dtype)
    out_scores = np.zeros((batch, keepTopK), dtype)
    out_classes = np.full((batch, keepTopK), -1, dtype)
    for b in range(batch):
        detections = []
        for c in range(numClasses):
            if c == backgroundLabelId:
                continue
            column = 0 if shareLocation else c
            candidates = [(f32(scores[b, i, c]), i) for i in range(n) if f32(scores[b, i, c]) > f32(scoreThreshold)]
            candidates.sort(key=lambda t: -t[0])  # stable: lower box first on ties
            kept: list[tuple] = []
            for score, i in candidates[:topK]:
                box = boxes[b, i, column].astype(np.float32)
                if not any(
                    _batched_iou(kbox, box, isNormalized, caffeSemantics) > f32(iouThreshold) for _, _, kbox in kept
                ):
                    kept.append((score, i, box))
            detections += [(score, c, i, box) for score, i, box in kept]
        detections.sort(key=lambda t: -t[0])  # stable: class-major, then rank within the class
        detections = detections[:keepTopK]
        num[b, 0] = len(detections)
        for row, (score, c, _, box) in enumerate(detections):
            out_boxes[b, row] = np.fmax(np.fmin(box, f32(1)), f32(0)) if clipBoxes else box
            out_scores[b, row] = score
            out_classes[b, row] = c
    return [num, out_boxes, out_scores, out_classes]


def run_batched(boxes, scores, op: str = "BatchedNMSDynamic_TRT", **attributes: Any) -> list[np.ndarray]:
    return run(op, "TRT", {"boxes": boxes, "scores": scores}, BATCHED_OUTPUTS, **attributes)


def batched_attributes(classes: int, **overrides: Any) -> dict[str, Any]:
    attributes = dict(
        shareLocation=1,
        backgroundLabelId=-1,
        numClasses=classes,
        topK=12,
        keepTopK=10,
        scoreThreshold=0.2,
        iouThreshold=0.45,
        isNormalized=1,
        clipBoxes=1,
        caffeSemantics=1,
    )
    attributes.update(overrides)
    return attributes


@pytest.mark.parametrize("op", ["BatchedNMSDynamic_TRT", "BatchedNMS_TRT"])
@pytest.mark.parametrize("share_location", [0, 1])
@pytest.mark.parametrize("normalized", [0, 1])
@pytest.mark.parametrize("caffe", [0, 1])
@pytest.mark.parametrize("clip", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_batched_nms_matches_reference(op, share_location, normalized, caffe, clip, dtype) -> None:
    rng = np.random.default_rng(share_location + 2 * normalized + 4 * caffe + 8 * clip)
    batch, n, c = 2, 50, 4
    boxes, scores = yolo_like(rng, batch, n, c, objects=4)
    scores = np.sort(rng.uniform(0, 1, (batch, n, c)) ** 2, axis=None).reshape(batch, n, c)  # all distinct
    scores = rng.permuted(scores.reshape(-1)).reshape(batch, n, c).astype(dtype)
    if normalized:
        boxes = boxes / 250  # mostly in [0, 1]: clipping changes a few
    boxes = boxes[:, :, None, :] if share_location else boxes[:, :, None, :] + rng.normal(0, 1, (batch, n, c, 4))
    boxes = boxes.astype(dtype)
    boxes[:, ::9] = boxes[:, ::9][..., [2, 3, 0, 1]]  # corners swapped: sorted for the IoU, output as given
    attributes = batched_attributes(
        c,
        shareLocation=share_location,
        backgroundLabelId=2 if caffe else -1,
        isNormalized=normalized,
        clipBoxes=clip,
        caffeSemantics=caffe,
    )
    got = run_batched(boxes, scores, op, **attributes)
    expected = batched_nms_reference(boxes, scores, **attributes)
    assert [g.dtype for g in got] == [np.int32, dtype, dtype, dtype]
    assert got[0].shape == ((batch, 1) if op == "BatchedNMSDynamic_TRT" else (batch,))
    np.testing.assert_array_equal(got[0].reshape(batch, 1), expected[0])
    for g, e in zip(got[1:], expected[1:]):
        np.testing.assert_array_equal(g, e)
    assert (got[0] > 3).all() and (got[0] <= 10).all()


def test_batched_nms_per_class_top_k_and_strict_comparisons() -> None:
    boxes = np.array([[[[0, 0, 4, 1]], [[0, 0, 2, 1]], [[2, 0, 4, 1]], [[10, 10, 11, 11]]]], np.float32)
    scores = np.array([[[0.9, 0.3], [0.8, 0.3], [0.7, 0.2], [0.6, 0.5]]], np.float32)  # IoU(0, 1) = 0.5
    attributes = batched_attributes(2, topK=3, keepTopK=3, scoreThreshold=0.3, iouThreshold=0.5, clipBoxes=0)
    num, out_boxes, out_scores, classes = run_batched(boxes, scores, **attributes)
    # Class 0's top 3 are boxes 0, 1, 2 (box 3 is 4th): IoU 0.5 is not > 0.5, all kept; class 1:
    # only box 3 is > 0.3. keepTopK 3 keeps the three best of the four.
    assert num.tolist() == [[3]]
    np.testing.assert_array_equal(out_scores, np.array([[0.9, 0.8, 0.7]], np.float32))
    np.testing.assert_array_equal(classes, [[0, 0, 0]])
    num, _, out_scores, classes = run_batched(boxes, scores, **{**attributes, "iouThreshold": 0.49, "keepTopK": 3})
    assert num.tolist() == [[2]]
    np.testing.assert_array_equal(out_scores, np.array([[0.9, 0.5, 0]], np.float32))
    np.testing.assert_array_equal(classes, [[0, 1, -1]])


def test_batched_nms_ties_come_in_class_order() -> None:
    boxes = np.array([[[[0, 0, 1, 1]], [[5, 5, 6, 6]]]], np.float32)
    scores = np.array([[[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]], np.float32)
    _, _, _, classes = run_batched(boxes, scores, **batched_attributes(3, keepTopK=6))
    np.testing.assert_array_equal(classes, [[0, 0, 1, 1, 2, 2]])
    # A cut through the tie keeps the lower classes (the plugin's stable sort of class lists).
    _, out_boxes, _, classes = run_batched(boxes, scores, **batched_attributes(3, keepTopK=3, clipBoxes=0))
    np.testing.assert_array_equal(classes, [[0, 0, 1]])
    np.testing.assert_array_equal(out_boxes[0, :, 0], [0, 5, 0])


def test_batched_nms_caffe_semantics_makes_disjoint_pixel_boxes_overlap() -> None:
    """With isNormalized 0 and caffeSemantics 1 the empty intersection of disjoint boxes gets
    +1 width and height: two disjoint points have IoU 1 / (1 + 1 - 1) = 1."""
    boxes = np.array([[[[0, 0, 0, 0]], [[1.5, 0, 1.5, 0]]]], np.float32)
    scores = np.array([[[0.9], [0.8]]], np.float32)
    attributes = batched_attributes(1, isNormalized=0, clipBoxes=0)
    assert run_batched(boxes, scores, **attributes)[0].tolist() == [[1]]
    assert run_batched(boxes, scores, **{**attributes, "caffeSemantics": 0})[0].tolist() == [[2]]
    assert run_batched(boxes, scores, **{**attributes, "isNormalized": 1})[0].tolist() == [[2]]


def test_batched_nms_padding_and_empty_inputs() -> None:
    rng = np.random.default_rng(8)
    boxes, scores = yolo_like(rng, 2, 20, 3)
    boxes = boxes[:, :, None, :] / 250
    num, out_boxes, out_scores, classes = run_batched(boxes, scores, **batched_attributes(3, scoreThreshold=1.0))
    assert num.tolist() == [[0], [0]] and not out_boxes.any() and not out_scores.any() and (classes == -1).all()
    for shape in ((0, 5, 3), (2, 0, 3)):
        got = run_batched(
            np.zeros((*shape[:2], 1, 4), np.float32), np.zeros(shape, np.float32), **batched_attributes(3)
        )
        assert [g.shape for g in got] == [(shape[0], 1), (shape[0], 10, 4), (shape[0], 10), (shape[0], 10)]
        assert not got[0].any() and (got[3] == -1).all()
    got = run_batched(boxes, scores, **batched_attributes(3, keepTopK=0))
    assert [g.shape for g in got] == [(2, 1), (2, 0, 4), (2, 0), (2, 0)]


def test_batched_nms_nan() -> None:
    """NaN scores are never candidates; min and max ignore a NaN corner (CUDA's fminf / fmaxf)."""
    boxes = np.array([[[[0, 0, 1, 1]], [[0, 0, 1, math.nan]], [[0, 0, 1, 0.9]], [[0, 0, 1, 1]]]], np.float32)
    scores = np.array([[[math.nan], [0.9], [0.8], [0.7]]], np.float32)
    attributes = batched_attributes(1, clipBoxes=0)
    got = run_batched(boxes, scores, **attributes)
    expected = batched_nms_reference(boxes, scores, **attributes)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    # Box 1 reads as (0, 0, 1, 0), without area: IoU 0 with every box; box 2 suppresses box 3.
    assert got[0].tolist() == [[2]]
    np.testing.assert_array_equal(got[2], np.array([[0.9, 0.8] + [0] * 8], np.float32))


def test_batched_nms_is_the_same_on_one_thread_and_many() -> None:
    rng = np.random.default_rng(9)
    for batch in (1, 3):
        boxes, scores = yolo_like(rng, batch, 300, 6)
        inputs = {"boxes": boxes[:, :, None, :], "scores": scores}
        attributes = batched_attributes(6, topK=100, keepTopK=50, isNormalized=0, clipBoxes=0)
        one = run("BatchedNMSDynamic_TRT", "TRT", inputs, BATCHED_OUTPUTS, threads=1, **attributes)
        many = run("BatchedNMSDynamic_TRT", "TRT", inputs, BATCHED_OUTPUTS, threads=4, **attributes)
        for a, b in zip(one, many):
            np.testing.assert_array_equal(a, b)


BAD_BATCHED = [
    (
        (2, 5, 1, 4),
        (2, 5, 4),
        {},
        r"input 'scores' must have shape \[B, N, numClasses\] .*numClasses = 3, got \[2, 5, 4\]",
    ),
    ((2, 5, 4), (2, 5, 3), {}, r"input 'boxes' must have shape \[B, N, 1, 4\] with B = 2 and N = 5 .*got \[2, 5, 4\]"),
    (
        (2, 5, 1, 4),
        (2, 5, 3),
        {"shareLocation": 0},
        r"input 'boxes' must have shape \[B, N, 3, 4\] .*got \[2, 5, 1, 4\]",
    ),
    ((2, 6, 1, 4), (2, 5, 3), {}, r"input 'boxes' must have shape \[B, N, 1, 4\] .*N = 5.*got \[2, 6, 1, 4\]"),
    ((2, 5, 1, 4), (2, 5, 3), {"keepTopK": 13}, r"attribute 'keepTopK' must be in \[0, topK = 12\]"),
    ((2, 5, 1, 4), (2, 5, 3), {"topK": 0}, r"attribute 'topK' must be in \[1, 2147483647\], got 0"),
    ((2, 5, 1, 4), (2, 5, 3), {"numClasses": 0}, r"attribute 'numClasses' must be in \[1, "),
    ((2, 5, 1, 4), (2, 5, 3), {"shareLocation": 2}, r"attribute 'shareLocation' must be 0 or 1, got 2"),
    ((2, 5, 1, 4), (2, 5, 3), {"isNormalized": -1}, r"attribute 'isNormalized' must be 0 or 1, got -1"),
    ((2, 5, 1, 4), (2, 5, 3), {"iouThreshold": math.nan}, r"attribute 'iouThreshold' is NaN"),
    ((2, 5, 1, 4), (2, 5, 3), {"numClasses": None}, r"attribute 'numClasses' \(int\) is required"),
]


@pytest.mark.parametrize(("boxes", "scores", "overrides", "message"), BAD_BATCHED)
def test_batched_nms_bad_inputs_are_errors(boxes, scores, overrides, message) -> None:
    attributes = {k: v for k, v in {**batched_attributes(3), **overrides}.items() if v is not None}
    for op in ("BatchedNMSDynamic_TRT", "BatchedNMS_TRT"):
        with pytest.raises(Exception, match=rf"TRT\.{op}: " + message):
            run_batched(np.zeros(boxes, np.float32), np.zeros(scores, np.float32), op, **attributes)


def mmyolo_batched_nms_model(rng: np.random.Generator, batch: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """mmyolo's easydeploy for TensorRT 7 (projects/easydeploy/nms/trt_nms.py _batched_nms):
    boxes unsqueezed to [B, N, 1, 4], TRT::BatchedNMSDynamic_TRT with exactly its attributes
    (topK = min(pre_topk 1000, 4096), isNormalized 0, clipBoxes 0, scoreBits 16,
    caffeSemantics 1), classes cast to int32 after it; the YOLOv8-style head above."""
    model, weights = yolov8_tensorrt_model(rng, batch)
    graph = model.graph
    del graph.node[-1]
    del graph.output[:4]
    graph.node.extend(
        [
            helper.make_node("Unsqueeze", ["boxes"], ["boxes_4d"], axes=[2]),  # opset 11: axes attribute
            helper.make_node(
                "BatchedNMSDynamic_TRT",
                ["boxes_4d", "scores"],
                ["num_dets", "det_boxes", "det_scores", "det_classes_f"],
                name="/BatchedNMSDynamic_TRT",
                domain="TRT",
                shareLocation=1,
                plugin_version="1",
                backgroundLabelId=-1,
                numClasses=NUM_CLASSES,
                topK=1000,
                keepTopK=100,
                scoreThreshold=0.25,
                iouThreshold=0.65,
                isNormalized=0,
                clipBoxes=0,
                scoreBits=16,
                caffeSemantics=1,
            ),
            helper.make_node("Cast", ["det_classes_f"], ["labels"], to=TensorProto.INT32),
        ]
    )
    head_outputs = list(graph.output)
    del graph.output[:]
    graph.output.extend(_exported_outputs(["num_dets", "det_boxes", "det_scores", "labels"], batch, 100))
    graph.output.extend(head_outputs)
    return model, weights


@pytest.mark.parametrize("batch", [1, 2])
def test_mmyolo_batched_nms_file_runs_unchanged(batch: int) -> None:
    rng = np.random.default_rng(10 + batch)
    model, _ = mmyolo_batched_nms_model(rng, batch)
    onnx.checker.check_model(model)
    assert ortops.check_model(model) == []
    features = rng.normal(0, 1, (batch, 8, GRID, GRID)).astype(np.float32)
    num, det_boxes, det_scores, labels, boxes, scores = session(model).run(None, {"images": features})
    attributes = {a.name: helper.get_attribute_value(a) for a in model.graph.node[-2].attribute}
    expected = batched_nms_reference(boxes[:, :, None, :], scores, **attributes)
    np.testing.assert_array_equal(num, expected[0])
    np.testing.assert_array_equal(det_boxes, expected[1])
    np.testing.assert_array_equal(det_scores, expected[2])
    np.testing.assert_array_equal(labels, expected[3].astype(np.int32))
    assert labels.dtype == np.int32 and (num > 0).all()


# --- ROIAlign_TRT reference (roiAlignKernel.cu), one float32 op at a time ---------------------


def _bilinear(plane: np.ndarray, y: np.float32, x: np.float32, average: int) -> np.float32:
    taps = roi_align_taps(f32, *plane.shape, y, x)
    if not taps:
        return f32(0)
    corners = [f32(weight * plane[row, column]) for row, column, weight in taps]
    if average:
        return f32(f32(f32(corners[0] + corners[1]) + corners[2]) + corners[3])
    return np.fmax(np.fmax(np.fmax(corners[0], corners[1]), corners[2]), corners[3])


@cached
def roi_align_trt_reference(
    x: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    coordinate_transformation_mode: int = 1,
    mode: int = 1,
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
    **_: Any,
) -> np.ndarray:
    """RoIAlignForward's loops, in its operation order (a bin without samples: 0, where the
    plugin divides 0 by 0)."""
    features, rois = x.astype(np.float32), rois.astype(np.float32)
    out = np.zeros((len(rois), x.shape[1], output_height, output_width), np.float32)
    scale, offset = f32(spatial_scale), f32(0.5 if coordinate_transformation_mode else 0)
    for r, roi in enumerate(rois):
        start_w, start_h = f32(roi[0] * scale) - offset, f32(roi[1] * scale) - offset
        width, height = f32(f32(roi[2] * scale) - offset) - start_w, f32(f32(roi[3] * scale) - offset) - start_h
        if not coordinate_transformation_mode:
            width, height = np.fmax(width, f32(1)), np.fmax(height, f32(1))
        bin_h, bin_w = f32(height / f32(output_height)), f32(width / f32(output_width))
        grid_h = sampling_ratio or max(0, int(np.ceil(f32(height / f32(output_height)))))
        grid_w = sampling_ratio or max(0, int(np.ceil(f32(width / f32(output_width)))))
        for c in range(x.shape[1]):
            plane = features[batch_indices[r], c]
            for ph in range(output_height):
                for pw in range(output_width):
                    if grid_h * grid_w == 0:
                        continue
                    y_off, x_off = f32(start_h + f32(ph * bin_h)), f32(start_w + f32(pw * bin_w))
                    y_fac, x_fac = f32(bin_h / f32(grid_h)), f32(bin_w / f32(grid_w))
                    values = [
                        _bilinear(
                            plane,
                            f32(y_off + f32(f32(iy + 0.5) * y_fac)),
                            f32(x_off + f32(f32(ix + 0.5) * x_fac)),
                            mode,
                        )
                        for iy in range(grid_h)
                        for ix in range(grid_w)
                    ]
                    if mode:
                        total = f32(0)
                        for v in values:
                            total = f32(total + v)
                        out[r, c, ph, pw] = f32(total / f32(len(values)))
                    else:
                        best = values[0]
                        for v in values[1:]:
                            best = np.fmax(best, v)
                        out[r, c, ph, pw] = best
    return out.astype(x.dtype)


# The plugin's sample positions are (i + 0.5) * (bin / grid); ortops' RoIAlign computes
# (i + 0.5) * bin / grid: a last-bit difference in a position (float16: in the float32 result,
# which can then round to the neighbouring half).
ROI_TOLERANCE = {np.float32: {"rtol": 1e-5, "atol": 1e-6}, np.float16: {"rtol": 1e-3, "atol": 1e-4}}


def roi_case(rng: np.random.Generator, n: int, c: int, h: int, w: int, r: int, scale: float) -> tuple:
    x = rng.normal(size=(n, c, h, w)).astype(np.float32)
    image_w, image_h = w / scale, h / scale
    xy = rng.uniform(-0.2, 1.0, (r, 2)) * [image_w, image_h]
    wh = rng.uniform(0, 0.6, (r, 2)) * [image_w, image_h]
    rois = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    return x, rois, rng.integers(0, n, r).astype(np.int32)


def run_roi_align(x, rois, batch_indices, **attributes: Any) -> np.ndarray:
    (y,) = run("ROIAlign_TRT", "TRT", {"X": x, "rois": rois, "batch_indices": batch_indices}, ["Y"], **attributes)
    return y


@pytest.mark.parametrize("half_pixel", [0, 1])
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("sampling", [0, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_roi_align_matches_reference(half_pixel, mode, sampling, dtype) -> None:
    rng = np.random.default_rng(half_pixel + 2 * mode + 4 * sampling)
    x, rois, indices = roi_case(rng, 2, 3, 9, 11, 7, 0.5)
    x, rois = x.astype(dtype), rois.astype(dtype)
    attributes = dict(
        coordinate_transformation_mode=half_pixel,
        mode=mode,
        output_height=3,
        output_width=4,
        sampling_ratio=sampling,
        spatial_scale=0.5,
        plugin_version="1",
    )
    got = run_roi_align(x, rois, indices, **attributes)
    assert got.dtype == dtype and got.shape == (7, 3, 3, 4)
    np.testing.assert_allclose(got, roi_align_trt_reference(x, rois, indices, **attributes), **ROI_TOLERANCE[dtype])


@pytest.mark.parametrize("mode", [0, 1])
def test_roi_align_channels_last_path_and_many_rois(mode) -> None:
    """Enough channels and rois for the channels-last copy (avg mode); the same results."""
    rng = np.random.default_rng(11)
    x, rois, indices = roi_case(rng, 2, 16, 12, 10, 40, 0.25)
    attributes = dict(mode=mode, output_height=2, output_width=2, sampling_ratio=2, spatial_scale=0.25)
    np.testing.assert_allclose(
        run_roi_align(x, rois, indices, **attributes),
        roi_align_trt_reference(x, rois, indices, **attributes),
        **ROI_TOLERANCE[np.float32],
    )


def test_roi_align_max_skips_nan_corners_on_the_channels_last_path_too() -> None:
    """Enough channels and rois for the channels-last copy, whose vector max must skip a NaN
    corner or sample lane by lane as the scalar path does: NaN patches in some channels. (Pixel
    (0, 0) stays finite: a sample outside the map reads it with weight 0, as the CPU kernels of
    torchvision, mmcv and ONNX Runtime do, where the plugin's CUDA kernel reads nothing.)"""
    rng = np.random.default_rng(13)
    x, rois, indices = roi_case(rng, 2, 19, 12, 10, 40, 0.25)  # 19: vectors and leftover channels
    x[0, 3, 2:6, 1:5] = np.nan
    x[1, 16:, 1::3, 1::2] = np.nan
    x[:, 7, 4, 4] = np.nan
    attributes = dict(mode=0, output_height=2, output_width=3, sampling_ratio=2, spatial_scale=0.25)
    got = run_roi_align(x, rois, indices, **attributes)
    expected = roi_align_trt_reference(x, rois, indices, **attributes)
    assert np.isnan(expected).any() and np.isnan(x[indices.astype(np.int64)]).any()
    np.testing.assert_allclose(got, expected, **ROI_TOLERANCE[np.float32])


@pytest.mark.parametrize("half_pixel", [0, 1])
@pytest.mark.parametrize("mode", [0, 1])
def test_roi_align_agrees_with_onnx_roi_align(half_pixel, mode) -> None:
    """ONNX's RoiAlign (opset 16) in ONNX Runtime: the same sampling, max of weighted corners in
    max mode; its sample positions round in another order, so only to float tolerance."""
    rng = np.random.default_rng(12 + half_pixel + 2 * mode)
    x, rois, indices = roi_case(rng, 2, 4, 10, 12, 9, 0.5)
    attributes = dict(output_height=3, output_width=2, sampling_ratio=0, spatial_scale=0.5)
    got = run_roi_align(x, rois, indices, coordinate_transformation_mode=half_pixel, mode=mode, **attributes)
    node = helper.make_node(
        "RoiAlign",
        ["X", "rois", "batch_indices"],
        ["Y"],
        mode="avg" if mode else "max",
        coordinate_transformation_mode="half_pixel" if half_pixel else "output_half_pixel",
        **attributes,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape)),
            helper.make_tensor_value_info("rois", TensorProto.FLOAT, list(rois.shape)),
            helper.make_tensor_value_info("batch_indices", TensorProto.INT64, [len(rois)]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 16)])
    (expected,) = session(model).run(None, {"X": x, "rois": rois, "batch_indices": indices.astype(np.int64)})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_roi_align_empty_bins_rois_and_maps() -> None:
    x = np.ones((1, 2, 4, 4), np.float32)
    point = np.array([[1, 1, 1, 1]], np.float32)  # half_pixel: size 0, adaptive grid empty
    for mode in (0, 1):
        got = run_roi_align(x, point, np.zeros(1, np.int32), mode=mode, output_height=2, output_width=2)
        np.testing.assert_array_equal(got, np.zeros((1, 2, 2, 2), np.float32))
    got = run_roi_align(x, np.zeros((0, 4), np.float32), np.zeros(0, np.int32), output_height=2, output_width=3)
    assert got.shape == (0, 2, 2, 3)
    got = run_roi_align(
        np.zeros((1, 2, 0, 4), np.float32), (point + [0, 0, 2, 2]).astype(np.float32), np.zeros(1, np.int32), mode=0
    )
    np.testing.assert_array_equal(got, np.zeros((1, 2, 1, 1), np.float32))


def test_roi_align_max_takes_the_largest_weighted_corner() -> None:
    """One sample at the centre of pixels (4, 4, 4, 8), each weighted 1/4: max mode gives the
    largest w_i * v_i, 2, not the interpolated value 5 (which avg mode gives)."""
    x = np.array([[[[4, 4], [4, 8]]]], np.float32)
    roi = np.array([[0, 0, 2, 2]], np.float32)  # half_pixel: (-0.5, -0.5) to (1.5, 1.5), one bin
    attributes = dict(output_height=1, output_width=1, sampling_ratio=1)
    assert run_roi_align(x, roi, np.zeros(1, np.int32), mode=0, **attributes).item() == 2
    assert run_roi_align(x, roi, np.zeros(1, np.int32), mode=1, **attributes).item() == 5


def test_roi_align_max_skips_a_nan_corner_as_cudas_fmaxf() -> None:
    """A NaN corner is skipped (w_i * v_i of the others: 2), unless every corner is NaN; and a
    NaN sample is skipped among a bin's samples."""
    roi = np.array([[0, 0, 2, 2]], np.float32)
    attributes = dict(output_height=1, output_width=1, sampling_ratio=1, mode=0)
    for nan_at in range(4):  # first and last corner included: a plain comparison fails one of them
        one_nan = np.array([4, 4, 4, 8], np.float32)
        one_nan[nan_at] = math.nan
        expected = 1 if nan_at == 3 else 2
        got = run_roi_align(one_nan.reshape(1, 1, 2, 2), roi, np.zeros(1, np.int32), **attributes).item()
        assert got == expected, nan_at
    all_nan = np.full((1, 1, 2, 2), math.nan, np.float32)
    assert math.isnan(run_roi_align(all_nan, roi, np.zeros(1, np.int32), **attributes).item())
    # Two samples per axis over a 4x4 map whose left half is NaN: the right samples decide.
    half_nan = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    half_nan[..., :2] = math.nan
    wide = np.array([[0, 0, 4, 4]], np.float32)
    value = run_roi_align(half_nan, wide, np.zeros(1, np.int32), **{**attributes, "sampling_ratio": 2}).item()
    assert not math.isnan(value) and value > 0


@pytest.mark.parametrize(
    ("x", "rois", "indices", "message"),
    [
        ((1, 2, 4, 4), (3, 5), (3,), r"input 'rois' must have shape \[R, 4\] as \(x1, y1, x2, y2\), got \[3, 5\]"),
        ((1, 2, 4, 4), (3, 4), (2,), r"input 'batch_indices' must have shape \[R\] with R = 3 .*got \[2\]"),
        ((1, 2, 4, 4), (3, 4), (3, 1), r"input 'batch_indices' must have rank 1, got shape \[3, 1\]"),
        ((2, 4, 4), (3, 4), (3,), r"input 'X' must have rank 4, got shape \[2, 4, 4\]"),
    ],
)
def test_roi_align_bad_shapes_are_errors(x, rois, indices, message) -> None:
    with pytest.raises(Exception, match=r"TRT\.ROIAlign_TRT: " + message):
        run_roi_align(np.zeros(x, np.float32), np.zeros(rois, np.float32), np.zeros(indices, np.int32))


def test_roi_align_bad_values_are_errors() -> None:
    x, roi = np.zeros((2, 1, 4, 4), np.float32), np.array([[0, 0, 2, 2]], np.float32)
    with pytest.raises(Exception, match=r"TRT\.ROIAlign_TRT: input 'batch_indices' names image 2 for roi 0, but"):
        run_roi_align(x, roi, np.array([2], np.int32))
    with pytest.raises(Exception, match=r"TRT\.ROIAlign_TRT: input 'batch_indices' names image -1"):
        run_roi_align(x, roi, np.array([-1], np.int32))
    with pytest.raises(Exception, match=r"TRT\.ROIAlign_TRT: roi 0 in input 'rois' is not finite"):
        run_roi_align(x, np.array([[0, 0, math.nan, 2]], np.float32), np.zeros(1, np.int32))
    with pytest.raises(Exception, match=r"TRT\.ROIAlign_TRT: a roi needs .* samples per bin"):
        run_roi_align(x, np.array([[0, 0, 1e30, 1e30]], np.float32), np.zeros(1, np.int32))
    with pytest.raises(Exception, match="ROIAlign_TRT"):
        run_roi_align(x, roi, np.zeros(1, np.int64))  # int64 indices: ONNX's RoiAlign, not the plugin


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"mode": 2}, r"attribute 'mode' must be 0 \(max\) or 1 \(avg\), got 2"),
        ({"coordinate_transformation_mode": -1}, r"attribute 'coordinate_transformation_mode' must be 0"),
        ({"output_height": 0}, r"attributes 'output_height' and 'output_width' must be at least 1, got 0 and 1"),
        ({"output_width": 1 << 40}, r"output size 1 x 1099511627776 is too large"),
        ({"sampling_ratio": -1}, r"attribute 'sampling_ratio' must be in \[0, 65536\], got -1"),
        ({"spatial_scale": 0.0}, r"attribute 'spatial_scale' must be positive and finite, got 0"),
        ({"spatial_scale": math.inf}, r"attribute 'spatial_scale' must be finite, got inf"),
        ({"mode": "avg"}, r"attribute 'mode' must be of type int, got string"),
    ],
)
def test_roi_align_bad_attributes_are_errors(attributes, message) -> None:
    with pytest.raises(Exception, match=r"TRT\.ROIAlign_TRT: " + message):
        run_roi_align(
            np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 4), np.float32), np.zeros(1, np.int32), **attributes
        )
