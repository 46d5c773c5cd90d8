"""The batched NMS family on groups of thousands of candidates, where thousands survive (a
region-proposal stage: 1 class, top-k 3000, keep 1000-2000, anchors that overlap), and on
many classes and images at once: ortops::BatchedNMS, mmdeploy::TRTBatchedNMS, TRT's
BatchedNMS_TRT / BatchedNMSDynamic_TRT and EfficientNMS_TRT, against references written
here.

The references follow the slow ones of test_batched_nms.py and test_trt_nodes.py step by
step, but test a candidate against all kept boxes of its group at once with numpy (element by
element the same float operations, the originals' min/max written out so that NaN and -0 pick
alike), which makes groups of thousands affordable. Each vectorised IoU is first checked
against its one-pair reference on boxes with NaN, infinities, inverted corners and zero size.
Adversarial cases put such boxes, ties and duplicates among the anchors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import test_batched_nms as tb
import test_trt_nodes as tt
from references import cached

from ortest import run

f32 = np.float32


# ---------------------------------------------------------------- element-wise IoUs


def _max(a, b):
    """std::max(a, b): (a < b) ? b : a."""
    return np.where(a < b, b, a)


def _min(a, b):
    """std::min(a, b): (b < a) ? b : a."""
    return np.where(b < a, b, a)


def torchvision_iou(kept: np.ndarray, c: np.ndarray, offset: int) -> np.ndarray:
    """BoxIoU(kept, candidate) with areas (x2 - x1 + offset) (y2 - y1 + offset), kept [m, 4]."""
    t = kept.dtype.type
    off = t(offset)
    with np.errstate(all="ignore"):
        w = _max(t(0), _min(kept[:, 2], c[2]) - _max(kept[:, 0], c[0]) + off)
        h = _max(t(0), _min(kept[:, 3], c[3]) - _max(kept[:, 1], c[1]) + off)
        inter = w * h
        area_k = (kept[:, 2] - kept[:, 0] + off) * (kept[:, 3] - kept[:, 1] + off)
        area_c = (c[2] - c[0] + off) * (c[3] - c[1] + off)
        return inter / (area_k + area_c - inter)


def detection_output_iou(kept: np.ndarray, c: np.ndarray) -> np.ndarray:
    """TensorRT's jaccardOverlap (TRTBatchedNMS): 0 unless the overlap has positive sides."""
    t = kept.dtype.type
    with np.errstate(all="ignore"):
        w = _min(kept[:, 2], c[2]) - _max(kept[:, 0], c[0])
        h = _min(kept[:, 3], c[3]) - _max(kept[:, 1], c[1])

        def area(b: np.ndarray) -> np.ndarray:
            inverted = (b[..., 2] < b[..., 0]) | (b[..., 3] < b[..., 1])
            return np.where(inverted, t(0), (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]))

        inter = w * h
        iou = inter / (area(kept) + area(c) - inter)
        return np.where((w > 0) & (h > 0), iou, t(0))


def _sorted_boxes(b: np.ndarray, normalized: int) -> tuple[np.ndarray, np.ndarray]:
    s = np.stack([np.fmin(b[..., 0], b[..., 2]), np.fmin(b[..., 1], b[..., 3])], -1)
    s = np.concatenate([s, np.stack([np.fmax(b[..., 0], b[..., 2]), np.fmax(b[..., 1], b[..., 3])], -1)], -1)
    w, h = s[..., 2] - s[..., 0], s[..., 3] - s[..., 1]
    size = w * h if normalized else (w + f32(1)) * (h + f32(1))
    return s, np.where((s[..., 2] < s[..., 0]) | (s[..., 3] < s[..., 1]), f32(0), size)


def batched_trt_iou(kept: np.ndarray, c: np.ndarray, normalized: int, caffe: int) -> np.ndarray:
    """BatchedNMS_TRT's IoU (allClassNMS.cu), float32, kept [m, 4] as the input gives them."""
    with np.errstate(all="ignore"):
        (a, size_a), (b, size_b) = _sorted_boxes(kept, normalized), _sorted_boxes(c, normalized)
        disjoint = (b[0] > a[:, 2]) | (b[2] < a[:, 0]) | (b[1] > a[:, 3]) | (b[3] < a[:, 1])
        inter = [np.where(disjoint, f32(0), f(a[:, i], b[i])) for i, f in enumerate([np.fmax] * 2 + [np.fmin] * 2)]
        plus = f32(0) if normalized or not caffe else f32(1)
        w, h = inter[2] - inter[0] + plus, inter[3] - inter[1] + plus
        size = w * h
        return np.where((w > 0) & (h > 0), size / (size_a + size_b - size), f32(0))


def _reorder(b: np.ndarray) -> np.ndarray:
    v = b.astype(f32).copy()
    for lo, hi in ((0, 2), (1, 3)):
        swap = v[..., lo] > v[..., hi]
        low = np.where(swap, v[..., lo] - v[..., hi], v[..., lo])
        high = np.where(swap, low + v[..., hi], v[..., hi])
        v[..., lo], v[..., hi] = np.where(swap, high - low, low), high
    return v


def _corner_area(v: np.ndarray) -> np.ndarray:
    e0, e1 = v[..., 2] - v[..., 0], v[..., 3] - v[..., 1]
    return np.where((e0 <= 0) | (e1 <= 0), f32(0), e0 * e1)


def efficient_iou(c: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """EfficientNMS_TRT's IoU of (candidate, kept [m, 4]), float32."""
    with np.errstate(all="ignore"):
        a, b = _reorder(c), _reorder(kept)
        inter = np.stack(
            [
                np.where(a[0] > b[:, 0], a[0], b[:, 0]),
                np.where(a[1] > b[:, 1], a[1], b[:, 1]),
                np.where(a[2] < b[:, 2], a[2], b[:, 2]),
                np.where(a[3] < b[:, 3], a[3], b[:, 3]),
            ],
            -1,
        )
        inter_area = _corner_area(inter)
        union = _corner_area(a) + _corner_area(b) - inter_area
        iou = np.where(union <= 0, f32(0), inter_area / union)
        return np.where(inter_area <= 0, f32(0), iou)


def special_boxes(rng: np.random.Generator, n: int, dtype: type) -> np.ndarray:
    """Overlapping boxes, a third of them with NaN, infinities, inverted corners, zero size,
    -0 or duplicates."""
    xy = rng.uniform(0, 20, (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0.5, 10, (n, 2))], 1)
    specials = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    for i in rng.choice(n, n // 3, replace=False):
        kind = rng.integers(0, 4)
        if kind == 0:
            boxes[i, rng.integers(0, 4)] = rng.choice(specials)
        elif kind == 1:
            boxes[i] = boxes[i, [2, 3, 0, 1]]
        elif kind == 2:
            boxes[i, 2:] = boxes[i, :2]
        else:
            boxes[i] = boxes[rng.integers(0, n)]
    return boxes.astype(dtype)


def _same(got: np.ndarray, expected: list) -> None:
    expected = np.array(expected, got.dtype)
    np.testing.assert_array_equal(got, expected)  # NaN positions must match too


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vectorised_ious_are_the_one_pair_references(dtype: type) -> None:
    rng = np.random.default_rng(1)
    boxes = special_boxes(rng, 60, dtype)
    boxes32 = boxes.astype(f32)
    with np.errstate(all="ignore"):
        for c in boxes:
            for offset in (0, 1):
                one = tb.torchvision_iou(offset, boxes.dtype.type)
                _same(torchvision_iou(boxes, c, offset), [one(list(k), list(c)) for k in boxes])
            _same(detection_output_iou(boxes, c), [tb.detection_output_iou(list(k), list(c)) for k in boxes])
        for c in boxes32:
            _same(efficient_iou(c, boxes32), [tt._efficient_iou(list(c), list(k)) for k in boxes32])
            for normalized in (0, 1):
                for caffe in (0, 1):
                    expected = [tt._batched_iou(k, c, normalized, caffe) for k in boxes32]
                    _same(batched_trt_iou(boxes32, c, normalized, caffe), expected)


# ---------------------------------------------------------------- greedy selection, vectorised


def greedy(
    ranked: list,
    box_of: Callable[[tuple], np.ndarray],
    suppresses: Callable[[np.ndarray, np.ndarray], np.ndarray],
    limit: int,
) -> list:
    """The candidates of `ranked` that no earlier kept one suppresses, at most `limit`;
    suppresses(kept boxes [m, k], candidate box [k]) -> bool [m]."""
    kept: list = []
    boxes = None
    for candidate in ranked:
        if len(kept) == limit:
            break
        box = box_of(candidate)
        if boxes is None:
            boxes = np.empty((min(limit, len(ranked)), len(box)), box.dtype)
        if kept and suppresses(boxes[: len(kept)], box).any():
            continue
        boxes[len(kept)] = box
        kept.append(candidate)
    return kept


def greedy_per_group(
    groups: dict[int, list],
    order: Callable[[tuple], tuple],
    pre_topk: int,
    box_of: Callable[[tuple], np.ndarray],
    suppresses: Callable[[np.ndarray, np.ndarray], np.ndarray],
    limit: int,
) -> list:
    """:func:`greedy` in each group of candidates, ranked by `order` and cut to the best
    `pre_topk` first (all when negative); every group's kept ones, ranked by `order`."""
    kept: list = []
    for candidates in groups.values():
        ranked = sorted(candidates, key=order)
        kept += greedy(ranked if pre_topk < 0 else ranked[:pre_topk], box_of, suppresses, limit)
    return sorted(kept, key=order)


def batched_nms_reference(boxes, scores, iou_threshold, score_threshold, max_output_boxes, pre_topk, **kwargs):
    """ortops::BatchedNMS (score_activation 0), as tb.reference_batched_nms."""
    class_agnostic, box_coding = kwargs.get("class_agnostic", 0), kwargs.get("box_coding", 0)
    background, offset = kwargs.get("background_class", -1), kwargs.get("offset", 0)
    dt = tb.compute_type(boxes.dtype)
    b32, s32 = boxes.astype(dt), scores.astype(dt)
    batch, count, classes = scores.shape
    per_class = boxes.ndim == 4 and boxes.shape[2] != 1
    v = b32
    if box_coding == 1:
        two = dt(2)
        v = np.concatenate([v[..., :2] - v[..., 2:] / two, v[..., :2] + v[..., 2:] / two], -1)

    def corners(b: int, n: int, c: int) -> np.ndarray:
        return v[b, n] if boxes.ndim == 3 else v[b, n, c if per_class else 0]

    threshold = float(np.float32(score_threshold))
    limit_iou = dt(np.float32(iou_threshold))
    k = max_output_boxes
    out = [np.zeros(batch, np.int64), np.zeros((batch, k, 4), dt), np.zeros((batch, k), dt)]
    out += [np.full((batch, k), -1, np.int64), np.full((batch, k), -1, np.int64)]
    for b in range(batch):
        n_idx, c_idx = np.nonzero(s32[b] > threshold)
        groups: dict[int, list] = {}
        for n, c in zip(n_idx.tolist(), c_idx.tolist()):
            if c != background:
                groups.setdefault(0 if class_agnostic else c, []).append((s32[b, n, c], n, c))
        kept_all = greedy_per_group(
            groups,
            lambda t: (-t[0], t[1], t[2]),
            pre_topk,
            lambda t, b=b: corners(b, t[1], t[2]),
            lambda kept, c: torchvision_iou(kept, c, offset) > limit_iou,
            k,
        )
        detections = kept_all[:k]
        out[0][b] = len(detections)
        for i, (s, n, c) in enumerate(detections):
            out[1][b, i], out[2][b, i], out[3][b, i], out[4][b, i] = corners(b, n, c), s, c, n
    return [out[0], out[1].astype(boxes.dtype), out[2].astype(boxes.dtype), out[3], out[4]]


def trt_batched_nms_reference(boxes, scores, keep_topk, iou_threshold, score_threshold, topk=-1, **kwargs):
    """mmdeploy::TRTBatchedNMS (clip_boxes 0, background -1), as tb.reference_trt."""
    dt = boxes.dtype.type
    batch, count, per, _ = boxes.shape
    shared = per == 1
    threshold, limit_iou = dt(np.float32(score_threshold)), dt(np.float32(iou_threshold))
    pre = topk if 0 < topk <= count else -1
    dets = np.zeros((batch, keep_topk, 5), dt)
    labels = np.full((batch, keep_topk), -1, np.int64)
    index = np.full((batch, keep_topk), -1, np.int64)
    for b in range(batch):
        n_idx, c_idx = np.nonzero(scores[b] > threshold)
        groups: dict[int, list] = {}
        for n, c in zip(n_idx.tolist(), c_idx.tolist()):
            groups.setdefault(c, []).append((scores[b, n, c], n, c))
        kept_all = greedy_per_group(
            groups,
            lambda t: (-t[0], t[2], t[1]),
            pre,
            lambda t, b=b: boxes[b, t[1], 0 if shared else t[2]],
            lambda kept, c: detection_output_iou(kept, c) > limit_iou,
            keep_topk,
        )
        for i, (s, n, c) in enumerate(kept_all[:keep_topk]):
            dets[b, i, :4], dets[b, i, 4] = boxes[b, n, 0 if shared else c], s
            labels[b, i], index[b, i] = c, n if shared else c * count + n
    return [dets, labels, index]


@cached
def batched_trt_reference(boxes, scores, **a):
    """BatchedNMS(Dynamic)_TRT, as tt.batched_nms_reference."""
    batch, n = scores.shape[:2]
    k = a["keepTopK"]
    num = np.zeros((batch, 1), np.int32)
    out_boxes, out_scores = np.zeros((batch, k, 4), boxes.dtype), np.zeros((batch, k), boxes.dtype)
    out_classes = np.full((batch, k), -1, boxes.dtype)
    for b in range(batch):
        detections = []
        for c in range(a["numClasses"]):
            if c == a["backgroundLabelId"]:
                continue
            column = 0 if a["shareLocation"] else c
            column_scores = scores[b, :, c].astype(f32)
            (idx,) = np.nonzero(column_scores > f32(a["scoreThreshold"]))
            candidates = sorted(((column_scores[i], int(i)) for i in idx), key=lambda t: -t[0])
            kept = greedy(
                candidates[: a["topK"]],
                lambda t, b=b, column=column: boxes[b, t[1], column].astype(f32),
                lambda kept, box: (
                    batched_trt_iou(kept, box, a["isNormalized"], a["caffeSemantics"]) > f32(a["iouThreshold"])
                ),
                len(candidates),
            )
            detections += [(s, c, i, boxes[b, i, column].astype(f32)) for s, i in kept]
        detections.sort(key=lambda t: -t[0])
        detections = detections[:k]
        num[b, 0] = len(detections)
        for row, (s, c, _, box) in enumerate(detections):
            out_boxes[b, row] = np.fmax(np.fmin(box, f32(1)), f32(0)) if a["clipBoxes"] else box
            out_scores[b, row], out_classes[b, row] = s, c
    return [num, out_boxes, out_scores, out_classes]


@cached
def efficient_reference(boxes, scores, score_threshold, iou_threshold, max_output_boxes, class_agnostic=0, **_):
    """EfficientNMS_TRT (corner boxes, no anchors, no activation), as tt.efficient_nms_reference."""
    batch = scores.shape[0]
    k = max_output_boxes
    num = np.zeros((batch, 1), np.int32)
    out_boxes, out_scores = np.zeros((batch, k, 4), f32), np.zeros((batch, k), f32)
    out_classes = np.zeros((batch, k), np.int32)
    for b in range(batch):
        n_idx, c_idx = np.nonzero(scores[b].astype(f32) >= f32(score_threshold))
        candidates = sorted(
            ((f32(scores[b, n, c]), int(n), int(c)) for n, c in zip(n_idx, c_idx)), key=lambda t: (-t[0], t[1], t[2])
        )
        kept: list = []
        kept_boxes = np.empty((k, 4), f32)
        kept_classes = np.empty(k, np.int64)
        for s, n, c in candidates:
            m = len(kept)
            if m == k:
                break
            box = boxes[b, n].astype(f32)
            if m:
                same = True if class_agnostic else kept_classes[:m] == c
                if (same & (efficient_iou(box, kept_boxes[:m]) >= f32(iou_threshold))).any():
                    continue
            kept.append((s, n, c))
            kept_boxes[m], kept_classes[m] = box, c
        num[b, 0] = len(kept)
        for row, (s, n, c) in enumerate(kept):
            out_boxes[b, row], out_scores[b, row], out_classes[b, row] = boxes[b, n], s, c
    return [num, out_boxes, out_scores, out_classes]


def test_vectorised_references_are_the_slow_ones() -> None:
    """On cases small enough for the slow references, adversarial boxes included."""
    rng = np.random.default_rng(3)
    for trial in range(6):
        boxes = np.stack([special_boxes(rng, 40, np.float32) for _ in range(2)])
        scores = rng.choice(np.linspace(0, 1, 9), (2, 40, 3)).astype(np.float32)
        iou = [0.0, 0.3, 0.7][trial % 3]
        with np.errstate(all="ignore"):
            got = batched_nms_reference(boxes, scores, iou, 0.2, 30, 25, offset=trial % 2, class_agnostic=trial // 3)
            kwargs = dict(offset=trial % 2, class_agnostic=trial // 3)
            expected = tb.reference_batched_nms(boxes, scores, iou, 0.2, 30, 25, **kwargs)
            tb.assert_outputs_equal(got, expected)
            got = trt_batched_nms_reference(boxes[:, :, None], scores, 20, iou, 0.2, topk=25)
            expected = tb.reference_trt(
                boxes[:, :, None], scores, keep_topk=20, iou_threshold=iou, score_threshold=0.2, topk=25
            )
            tb.assert_outputs_equal(got, expected)
            a = tt.batched_attributes(3, topK=25, keepTopK=20, iouThreshold=iou, isNormalized=trial % 2)
            tb.assert_outputs_equal(
                batched_trt_reference(boxes[:, :, None], scores, **a),
                tt.batched_nms_reference(boxes[:, :, None], scores, **a),
            )
            e = dict(score_threshold=0.2, iou_threshold=iou, max_output_boxes=30, class_agnostic=trial // 3)
            tb.assert_outputs_equal(
                efficient_reference(boxes, scores, **e), tt.efficient_nms_reference(boxes, scores, **e)
            )


# ---------------------------------------------------------------- cases


def proposals(rng: np.random.Generator, batch: int, n: int, classes: int = 1, size: float = 400.0) -> np.ndarray:
    """[B, N, 4] region proposals: anchors of three aspect ratios on four levels' grids, only
    slightly moved, taken where a smooth score field is high, so that they come in dense
    clusters where neighbouring anchors overlap by 0.5-0.8."""
    out = []
    for _ in range(batch):
        peaks = rng.uniform(0, size, (6, 2))
        boxes = []
        for stride in (4, 8, 16, 32):
            g = np.arange(0, size, stride) + stride / 2
            centre = np.stack(np.meshgrid(g, g), -1).reshape(-1, 1, 2)
            wh = np.array([(8 * stride / np.sqrt(r), 8 * stride * np.sqrt(r)) for r in (0.5, 1.0, 2.0)])
            centre, wh = np.broadcast_arrays(centre, wh[None])
            near = np.exp(-(((centre[:, 0, None] - peaks[None]) ** 2).sum(-1) / (2 * (4 * stride) ** 2))).max(1)
            pick = np.argsort(-(near + rng.uniform(0, 0.2, len(near))))[: n // 4]
            c = centre[pick].reshape(-1, 2) + rng.normal(0, 0.03, (len(pick) * 3, 2)) * wh[pick].reshape(-1, 2)
            s = wh[pick].reshape(-1, 2) * np.exp(rng.normal(0, 0.03, (len(pick) * 3, 2)))
            boxes.append(np.concatenate([c - s / 2, c + s / 2], 1))
        out.append(np.concatenate(boxes)[rng.permutation(n)])
    return np.stack(out)


def adversarial(rng: np.random.Generator, boxes: np.ndarray, share: float, nan: bool) -> np.ndarray:
    """Replaces `share` of the boxes with inverted, empty, duplicated or (with `nan`) NaN and
    infinite ones."""
    boxes = boxes.copy()
    flat = boxes.reshape(-1, boxes.shape[-1])
    for i in rng.choice(len(flat), int(len(flat) * share), replace=False):
        kind = rng.integers(0, 5 if nan else 3)
        if kind == 0:
            flat[i] = flat[i, [2, 3, 0, 1]]
        elif kind == 1:
            flat[i, 2:] = flat[i, :2]
        elif kind == 2:
            flat[i] = flat[rng.integers(0, len(flat))]
        elif kind == 3:
            flat[i, rng.integers(0, 4)] = np.nan
        else:
            flat[i, rng.integers(0, 4)] = rng.choice([np.inf, -np.inf])
    return boxes


def scores_for(rng: np.random.Generator, batch: int, n: int, classes: int, ties: bool) -> np.ndarray:
    scores = rng.uniform(0, 1, (batch, n, classes))
    return np.round(scores * 40) / 40 if ties else scores


# (name, batch, boxes, classes, ties, share of adversarial boxes, NaN/Inf among them), each with
# the IoU thresholds it runs at: the region-proposal ones (0.7, 0.8), where every box is
# tested against hundreds of kept ones, and 0, 1 and a negative one, where overlap tests
# cannot stand for the IoU.
LARGE = [
    ("proposals", 1, 3000, 1, False, 0.0, False, (0.7, 0.8)),
    ("proposals_ties", 1, 3000, 1, True, 0.0, False, (0.3, 0.0)),
    ("proposals_batch", 2, 1500, 1, True, 0.0, False, (1.0, -0.2)),
    ("classes", 2, 800, 4, True, 0.0, False, (0.6,)),
    ("adversarial", 1, 2000, 2, True, 0.1, False, (0.5, 0.0)),
    ("adversarial_nan", 2, 1200, 2, True, 0.05, True, (0.5,)),
]
RUNS = [(spec, iou) for spec in LARGE for iou in spec[-1]]
IDS = [f"{spec[0]}-{iou}" for spec, iou in RUNS]


def case(name: str, batch: int, n: int, classes: int, ties: bool, share: float, nan: bool, *_):
    rng = np.random.default_rng(sum(map(ord, name)))
    boxes = adversarial(rng, proposals(rng, batch, n), share, nan) if share else proposals(rng, batch, n)
    return boxes, scores_for(rng, batch, n, classes, ties)


@pytest.mark.parametrize("spec,iou", RUNS, ids=IDS)
def test_batched_nms(spec, iou: float) -> None:
    boxes, scores = case(*spec)
    k = RUNS.index((spec, iou))
    dtype = (np.float32, np.float64)[k % 2]
    attributes = dict(iou_threshold=iou, score_threshold=0.1, max_output_boxes=1500, pre_topk=2500, offset=k // 2 % 2)
    attributes["class_agnostic"] = int(spec[3] > 1 and k % 3 == 0)
    b, s = boxes.astype(dtype), scores.astype(dtype)
    got = run("BatchedNMS", "ortops", {"boxes": b, "scores": s}, tb.OUTPUTS, **attributes)
    tb.assert_outputs_equal(got, batched_nms_reference(b, s, **attributes))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_batched_nms_float16_and_centre_size(dtype: type) -> None:
    boxes, scores = case(*LARGE[0])
    centre = np.concatenate([(boxes[..., :2] + boxes[..., 2:]) / 2, boxes[..., 2:] - boxes[..., :2]], -1)
    b, s = centre.astype(dtype), scores.astype(dtype)
    attributes = dict(iou_threshold=0.7, score_threshold=0.0, max_output_boxes=2000, pre_topk=3000, box_coding=1)
    got = run("BatchedNMS", "ortops", {"boxes": b, "scores": s}, tb.OUTPUTS, **attributes)
    tb.assert_outputs_equal(got, batched_nms_reference(b, s, **attributes))


@pytest.mark.parametrize("spec,iou", RUNS, ids=IDS)
def test_trt_batched_nms(spec, iou: float) -> None:
    boxes, scores = case(*spec)
    dtype = (np.float64, np.float32)[RUNS.index((spec, iou)) % 2]
    b, s = boxes[:, :, None].astype(dtype), scores.astype(dtype)
    attributes = dict(keep_topk=1000 if iou < 0.75 else 2000, iou_threshold=iou, score_threshold=0.1, topk=3000)
    got = tb.trt_nms(b, s, **attributes)
    tb.assert_outputs_equal(got, trt_batched_nms_reference(b, s, **attributes))


def test_trt_batched_nms_per_class_boxes() -> None:
    boxes, scores = case(*LARGE[3])
    rng = np.random.default_rng(0)
    per_class = boxes[:, :, None] + rng.normal(0, 1, (*boxes.shape[:2], scores.shape[2], 1))
    attributes = dict(keep_topk=1200, iou_threshold=0.6, score_threshold=0.2, topk=600)
    got = tb.trt_nms(per_class, scores, **attributes)
    tb.assert_outputs_equal(got, trt_batched_nms_reference(per_class, scores, **attributes))


@pytest.mark.parametrize("spec,iou", RUNS, ids=IDS)
def test_batched_nms_trt(spec, iou: float) -> None:
    boxes, scores = case(*spec)
    normalized, caffe = [(0, 1), (0, 0), (1, 1)][RUNS.index((spec, iou)) % 3]
    b = (boxes * (1 / 400 if normalized else 1))[:, :, None].astype(f32)
    a = tt.batched_attributes(spec[3], topK=3000, keepTopK=2000, scoreThreshold=0.1, iouThreshold=iou)
    a.update(isNormalized=normalized, caffeSemantics=caffe, clipBoxes=0)
    got = tt.run_batched(b, scores.astype(f32), **a)
    tb.assert_outputs_equal(got, batched_trt_reference(b, scores.astype(f32), **a))


@pytest.mark.parametrize("spec,iou", RUNS, ids=IDS)
def test_efficient_nms(spec, iou: float) -> None:
    boxes, scores = case(*spec)
    e = dict(score_threshold=0.1, iou_threshold=iou, max_output_boxes=2000, class_agnostic=int(spec[3] > 1))
    got = tt.run_efficient(boxes.astype(f32), scores.astype(f32), **e)
    tb.assert_outputs_equal(got, efficient_reference(boxes.astype(f32), scores.astype(f32), **e))


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    boxes, scores = case(*LARGE[3])
    attributes = dict(iou_threshold=0.6, score_threshold=0.1, max_output_boxes=900, pre_topk=-1)
    got = run("BatchedNMS", "ortops", {"boxes": boxes, "scores": scores}, tb.OUTPUTS, threads=threads, **attributes)
    tb.assert_outputs_equal(got, batched_nms_reference(boxes, scores, **attributes))


# ---------------------------------------------------------------- mmdeploy::TRTBatchedRotatedNMS


def _far_apart(a, b) -> bool:
    """Rectangles whose circumscribed circles do not meet (their IoU is exactly 0)."""
    reach = (np.hypot(float(a[2]), float(a[3])) + np.hypot(float(b[2]), float(b[3]))) / 2
    return np.hypot(float(a[0]) - float(b[0]), float(a[1]) - float(b[1])) > reach * 1.001


_TRT_ROTATED_IOU = tb.trt_rotated_iou


def rotated_iou(kept, candidate) -> float:
    """tb.trt_rotated_iou, skipping the polygons of rectangles far apart."""
    tiny = any(box[2] * box[3] < 1e-14 for box in (kept, candidate))
    if not tiny and _far_apart(np.abs(kept), np.abs(candidate)):
        return 0.0
    return _TRT_ROTATED_IOU(kept, candidate)


@pytest.mark.parametrize("iou", [0.3, 0.6])
def test_trt_rotated_groups_of_hundreds(iou: float) -> None:
    """Two classes of 300 rotated boxes each, clustered, with zero-size, one-side-negative and
    tiny boxes (IoU 1 with every box), kept early and late."""
    rng = np.random.default_rng(int(iou * 10))
    boxes, scores = tb.rotated_case(60 + int(iou * 10), 1, 300, 2, False, np.float32)
    boxes[:, :, :, :2] *= 3  # spread the clusters over a larger image
    kind = rng.integers(0, 40, boxes.shape[:3])
    boxes[kind == 0, 2:4] = 0
    boxes[kind == 1, 2] *= -1
    boxes[kind == 2, 2:4] *= 1e-8
    scores = rng.uniform(0, 1, scores.shape).astype(np.float32)
    scores[0, np.nonzero(kind[0, :, 0] == 0)[0][0], 1] = 1.0  # class 1's best is a zero-size box
    proper = boxes[0, :, 0][np.abs(boxes[0, :, 0, 2] * boxes[0, :, 0, 3]) >= 1e-14]
    limit = float(np.float32(iou))
    margin = min(
        abs(tb.references.rotated_iou(np.abs(a), np.abs(b)) - limit)
        for i, a in enumerate(proper)
        for b in proper[:i]
        if not _far_apart(np.abs(a), np.abs(b))
    )
    assert margin > 1e-6
    attributes = {"keep_topk": 400, "topk": -1, "iou_threshold": iou, "score_threshold": 0.05}
    got = tb.trt_rotated(boxes, scores, **attributes)
    tb.trt_rotated_iou = rotated_iou  # the reference's rotated IoU, faster
    try:
        expected = tb.reference_trt(boxes, scores, rotated=True, **attributes)
    finally:
        tb.trt_rotated_iou = _TRT_ROTATED_IOU
    tb.assert_outputs_equal(got, expected)
