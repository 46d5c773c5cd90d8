"""NMSRotated (mmdeploy and ortops domains) against a slow NMS loop and an IoU written here.

The reference IoU uses a different algorithm from the kernel's Sutherland-Hodgman clipping:
it collects the corners of each box inside the other and the crossings of their edges, takes
their convex hull (Andrew's monotone chain) and measures it with the shoelace formula. It is
itself checked against closed-form areas first.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import references
from onnx import TensorProto, helper

from ortest import IR_VERSION, run, session

DOMAINS = [("mmdeploy", "NMSRotated"), ("ortops", "NMSRotated")]
DTYPES = [np.float32, np.float64]
# The reference is float64 like the kernel; random cases keep IoUs away from the thresholds by
# more than this, so the kept sets must agree exactly.
IOU_MARGIN = 1e-6


# ---------------------------------------------------------------- reference geometry


def corners(box) -> list[tuple[float, float]]:
    """(cx, cy) + R(theta) (+-w/2, +-h/2) with R = [[cos, -sin], [sin, cos]]."""
    cx, cy, w, h, theta = (float(v) for v in box)
    c, s = math.cos(theta), math.sin(theta)
    half = ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))
    return [(cx + c * x - s * y, cy + s * x + c * y) for x, y in half]


def inside(point, box, slack: float) -> bool:
    """Point within the rectangle, measured along the box's own axes."""
    cx, cy, w, h, theta = (float(v) for v in box)
    dx, dy = point[0] - cx, point[1] - cy
    along = dx * math.cos(theta) + dy * math.sin(theta)
    across = -dx * math.sin(theta) + dy * math.cos(theta)
    return abs(along) <= w / 2 + slack and abs(across) <= h / 2 + slack


def crossings(pa, pb) -> list[tuple[float, float]]:
    points = []
    for i in range(4):
        p, p2 = pa[i], pa[(i + 1) % 4]
        r = (p2[0] - p[0], p2[1] - p[1])
        for j in range(4):
            q, q2 = pb[j], pb[(j + 1) % 4]
            s = (q2[0] - q[0], q2[1] - q[1])
            denom = r[0] * s[1] - r[1] * s[0]
            if abs(denom) <= 1e-12 * (math.hypot(*r) * math.hypot(*s) + 1e-300):
                continue  # parallel: any overlap of the two edges ends at corners found by inside()
            qp = (q[0] - p[0], q[1] - p[1])
            t = (qp[0] * s[1] - qp[1] * s[0]) / denom
            u = (qp[0] * r[1] - qp[1] * r[0]) / denom
            if -1e-12 <= t <= 1 + 1e-12 and -1e-12 <= u <= 1 + 1e-12:
                points.append((p[0] + t * r[0], p[1] + t * r[1]))
    return points


def hull_area(points) -> float:
    points = sorted(set(points))
    if len(points) < 3:
        return 0.0

    def turn(o, a, b) -> float:
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    def half(seq):
        chain: list[tuple[float, float]] = []
        for p in seq:
            while len(chain) >= 2 and turn(chain[-2], chain[-1], p) <= 0:
                chain.pop()
            chain.append(p)
        return chain[:-1]

    hull = half(points) + half(points[::-1])
    return abs(sum(hull[i - 1][0] * hull[i][1] - hull[i][0] * hull[i - 1][1] for i in range(len(hull)))) / 2


def ref_iou(a, b) -> float:
    """Exact rotated IoU; 0 when either box has w <= 0 or h <= 0."""
    area_a, area_b = float(a[2]) * float(a[3]), float(b[2]) * float(b[3])
    if min(a[2], a[3], b[2], b[3]) <= 0:
        return 0.0
    pa, pb = corners(a), corners(b)
    slack = 1e-9 * max(float(a[2]), float(a[3]), float(b[2]), float(b[3]))
    points = [p for p in pa if inside(p, b, slack)] + [p for p in pb if inside(p, a, slack)] + crossings(pa, pb)
    inter = min(hull_area(points), area_a, area_b)
    return inter / (area_a + area_b - inter)


def ref_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, score_threshold: float) -> np.ndarray:
    """The slow greedy loop of references.py over this file's hull-based IoU."""
    return references.nms_rotated(boxes, scores, iou_threshold, score_threshold, iou=ref_iou)


def margin_to(boxes: np.ndarray, threshold: float) -> float:
    """Smallest |IoU - threshold| over all pairs in each batch (random cases must stay clear)."""
    threshold = float(np.float32(threshold))
    gaps = [math.inf]
    for batch in boxes:
        for i in range(len(batch)):
            gaps += [abs(ref_iou(batch[i], batch[j]) - threshold) for j in range(i)]
    return min(gaps)


# ---------------------------------------------------------------- cases and runner


def case(rng: np.random.Generator, b: int, c: int, n: int, dtype: type = np.float32):
    """Clustered boxes (so suppression happens), a few exact duplicates and axis-aligned ones,
    scores on a coarse grid (so ties happen)."""
    centers = rng.uniform(0, 60, (b, max(1, n // 4), 2))
    pick = rng.integers(0, centers.shape[1], (b, n))
    cxy = np.take_along_axis(centers, pick[..., None], 1) + rng.normal(0, 2, (b, n, 2))
    wh = rng.uniform(3, 15, (b, n, 2))
    theta = rng.uniform(-math.pi, math.pi, (b, n, 1))
    theta[rng.random((b, n, 1)) < 0.2] = 0.0
    boxes = np.concatenate([cxy, wh, theta], -1)
    if n >= 4:
        boxes[:, 1] = boxes[:, 0]
    return boxes.astype(dtype), rng.choice(np.linspace(0, 1, 11), (b, c, n)).astype(dtype)


def nms(boxes, scores, iou: float, score: float, domain: str = "ortops", threads: int = 0) -> np.ndarray:
    (selected,) = run(
        "NMSRotated",
        domain,
        {"boxes": boxes, "scores": scores},
        ["selected"],
        threads=threads,
        iou_threshold=iou,
        score_threshold=score,
    )
    assert selected.dtype == np.int64 and selected.ndim == 2 and selected.shape[1] == 3
    return selected


# ---------------------------------------------------------------- the reference itself

SQRT2 = math.sqrt(2)
KNOWN = [
    ([0, 0, 4, 2, 0.3], [0, 0, 4, 2, 0.3], 1.0),  # identical
    ([5, 5, 4, 2, 0.0], [5, 5, 2, 4, math.pi / 2], 1.0),  # the same rectangle written two ways
    ([0, 0, 4, 4, 0], [2, 0, 4, 4, 0], 1 / 3),  # axis-aligned, half overlap
    ([0, 0, 4, 4, 0], [2, 2, 4, 4, math.pi], 1 / 7),  # quarter overlap, rotated by pi
    ([0, 0, 2, 2, 0], [0, 0, 2, 2, math.pi / 4], 1 / SQRT2),  # octagon 8 (sqrt2 - 1) over 8 - that
    ([0, 0, 2, 2, math.pi / 4], [SQRT2 / 2, SQRT2 / 2, 2, 2, math.pi / 4], 1 / 3),  # 45-degree squares, half overlap
    ([0, 0, 2, 2, math.pi / 4], [SQRT2, 0, 2, 2, math.pi / 4], 1 / 7),  # 45-degree squares, quarter overlap
    ([0, 0, 2, 2, 0], [SQRT2 + 1, 0, 2, 2, math.pi / 4], 0.0),  # diamond touching a side at a corner
    ([0, 0, 2, 2, 0], [10, 10, 2, 2, 1.0], 0.0),  # disjoint
    ([0, 0, 10, 10, 0.2], [0, 0, 2, 2, 1.1], 4 / 100),  # contained
    ([0, 0, 10, 2, 0.3], [0, 0, 10, 2, 0.3 + 1e-10], 1.0),  # nearly parallel edges everywhere
    ([0, 0, 2, 2, 0], [2, 0, 2, 2, 0], 0.0),  # touching edges
    ([0, 0, 2, 2, 0], [2, 2, 2, 2, 0], 0.0),  # touching corners
    ([0, 0, 0, 2, 0], [0, 0, 2, 2, 0], 0.0),  # zero width
    ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0], 0.0),  # two points at the same place
]


@pytest.mark.parametrize("a,b,expected", KNOWN)
def test_reference_iou_closed_forms(a, b, expected) -> None:
    assert ref_iou(a, b) == pytest.approx(expected, abs=1e-9)
    assert ref_iou(b, a) == pytest.approx(expected, abs=1e-9)


def test_reference_iou_matches_box_iou_when_axis_aligned() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        (x1, y1), (x2, y2) = rng.uniform(0, 10, 2), rng.uniform(0, 10, 2)
        (w1, h1), (w2, h2) = rng.uniform(0.5, 8, 2), rng.uniform(0.5, 8, 2)
        ix = max(0.0, min(x1 + w1 / 2, x2 + w2 / 2) - max(x1 - w1 / 2, x2 - w2 / 2))
        iy = max(0.0, min(y1 + h1 / 2, y2 + h2 / 2) - max(y1 - h1 / 2, y2 - h2 / 2))
        expected = ix * iy / (w1 * h1 + w2 * h2 - ix * iy)
        assert ref_iou([x1, y1, w1, h1, 0], [x2, y2, w2, h2, math.pi]) == pytest.approx(expected, abs=1e-12)


# ---------------------------------------------------------------- kernel IoU decisions


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a,b,expected", KNOWN)
def test_known_iou_decides_suppression(dtype, a, b, expected) -> None:
    """Two boxes with a known IoU: the lower-scored one goes exactly when IoU > threshold."""
    boxes = np.array([[a, b]], dtype)
    scores = np.array([[[0.9, 0.8]]], dtype)
    tolerance = 1e-5 if dtype == np.float32 else 1e-7
    for threshold in (expected - tolerance, expected + tolerance):
        got = nms(boxes, scores, threshold, 0.0)
        assert len(got) == (1 if expected > threshold else 2), (threshold, got)


def test_axis_aligned_boxes_agree_with_box_iou() -> None:
    """theta = 0 and the equivalent theta = pi / 2 with w, h swapped: plain box IoU decides."""
    rng = np.random.default_rng(11)
    for _ in range(30):
        cx, cy = rng.uniform(0, 10, (2, 2)).T
        w, h = rng.uniform(1, 8, (2, 2)).T
        ix = max(0.0, min(cx[0] + w[0] / 2, cx[1] + w[1] / 2) - max(cx[0] - w[0] / 2, cx[1] - w[1] / 2))
        iy = max(0.0, min(cy[0] + h[0] / 2, cy[1] + h[1] / 2) - max(cy[0] - h[0] / 2, cy[1] - h[1] / 2))
        iou = ix * iy / (w[0] * h[0] + w[1] * h[1] - ix * iy)
        boxes = np.array([[[cx[0], cy[0], w[0], h[0], 0], [cx[1], cy[1], h[1], w[1], math.pi / 2]]])
        for threshold in (iou - 1e-7, iou + 1e-7):
            got = nms(boxes, np.array([[[0.9, 0.8]]]), threshold, 0.0)
            assert len(got) == (1 if iou > threshold else 2), (iou, threshold)


def test_far_from_origin_is_translation_invariant() -> None:
    """Two nearly identical boxes at 1e5 decide like the same pair at the origin (float64)."""
    pair = np.array([[0, 0, 3, 1, 0.4], [0.01, 0, 3, 1, 0.4]])
    iou = ref_iou(pair[0], pair[1])
    for shift in (0.0, 1e5):
        boxes = pair.copy()
        boxes[:, :2] += shift
        for threshold in (iou - 1e-6, iou + 1e-6):
            got = nms(boxes[None], np.array([[[0.9, 0.8]]]), threshold, 0.0)
            assert len(got) == (1 if iou > threshold else 2), (shift, threshold)


# ---------------------------------------------------------------- NMS against the slow loop


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 1, 7), (2, 3, 24), (3, 2, 16)])
@pytest.mark.parametrize("iou,score", [(0.05, 0.0), (0.3, 0.35), (0.7, 0.95)])
def test_matches_slow_loop(domain, op, dtype, shape, iou, score) -> None:
    boxes, scores = case(np.random.default_rng(sum(shape) * 7 + int(iou * 100)), *shape, dtype)
    assert margin_to(boxes.astype(np.float64), iou) > IOU_MARGIN
    np.testing.assert_array_equal(nms(boxes, scores, iou, score, domain), ref_nms(boxes, scores, iou, score))


@pytest.mark.parametrize("shape", [(0, 3, 5), (2, 0, 5), (2, 3, 0), (0, 0, 0)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_inputs(shape, dtype) -> None:
    b, c, n = shape
    got = nms(np.zeros((b, n, 5), dtype), np.zeros((b, c, n), dtype), 0.5, -1.0)
    assert got.shape == (0, 3)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    boxes, scores = case(np.random.default_rng(3), 2, 4, 40)
    assert margin_to(boxes.astype(np.float64), 0.3) > IOU_MARGIN
    np.testing.assert_array_equal(nms(boxes, scores, 0.3, 0.2, threads=threads), ref_nms(boxes, scores, 0.3, 0.2))


def test_rows_are_per_batch_then_class_in_score_order() -> None:
    far = [[0, 0, 2, 1, 0], [10, 0, 2, 1, 0], [20, 0, 2, 1, 0]]  # no overlaps: everything is kept
    boxes = np.array([far, far], np.float32)
    scores = np.array([[[0.1, 0.3, 0.2], [0.9, 0.8, 0.7]], [[0.5, 0.5, 0.6], [0.2, 0.1, 0.3]]], np.float32)
    expected = [[0, 0, 1], [0, 0, 2], [0, 0, 0], [0, 1, 0], [0, 1, 1], [0, 1, 2]]
    expected += [[1, 0, 2], [1, 0, 0], [1, 0, 1], [1, 1, 2], [1, 1, 0], [1, 1, 1]]
    np.testing.assert_array_equal(nms(boxes, scores, 0.5, 0.0), expected)


def test_ties_keep_the_lower_index() -> None:
    box = [3, 4, 5, 2, 0.7]
    boxes = np.array([[box, [40, 40, 2, 2, 0], box, box]], np.float32)
    scores = np.full((1, 1, 4), 0.5, np.float32)
    np.testing.assert_array_equal(nms(boxes, scores, 0.5, 0.0), [[0, 0, 0], [0, 0, 1]])


def test_low_scores_still_suppress() -> None:
    boxes = np.array([[[0, 0, 4, 4, 0], [0.1, 0, 4, 4, 0], [20, 20, 4, 4, 0]]], np.float32)
    scores = np.array([[[0.2, 0.1, 0.9]]], np.float32)
    # Box 0 is kept but not emitted (0.2 <= 0.5), and box 1 stays suppressed by it.
    np.testing.assert_array_equal(nms(boxes, scores, 0.5, 0.5, "mmdeploy"), [[0, 0, 2]])
    # A score equal to the threshold is not emitted; just above is.
    np.testing.assert_array_equal(nms(boxes, scores, 0.5, 0.2), [[0, 0, 2]])
    np.testing.assert_array_equal(nms(boxes, scores, 0.5, 0.19), [[0, 0, 2], [0, 0, 0]])


@pytest.mark.parametrize("dtype", DTYPES)
def test_degenerate_boxes_have_zero_iou(dtype) -> None:
    boxes = np.array(
        [[[1, 1, 0, 0, 0], [1, 1, 0, 0, 0.5], [1, 1, 0, 3, 0.2], [1, 1, 3, 0, 0], [1, 1, -2, 3, 0], [1, 1, 3, 3, 0]]],
        dtype,
    )
    scores = np.array([[[0.9, 0.8, 0.7, 0.6, 0.5, 0.4]]], dtype)
    everything = [[0, 0, i] for i in range(6)]
    np.testing.assert_array_equal(nms(boxes, scores, 0.0, 0.0), everything)  # IoU 0 is not > 0
    # Any IoU, 0 included, is greater than a negative threshold: only the best box survives.
    np.testing.assert_array_equal(nms(boxes, scores, -0.5, 0.0), [[0, 0, 0]])


def test_huge_values_do_not_crash() -> None:
    boxes = np.array([[[0, 0, 1e300, 1e300, 0], [1, 0, 1e300, 1e300, 0], [0, 0, 1e-300, 1e-300, 0]]])
    got = nms(boxes, np.array([[[0.9, 0.8, 0.7]]]), 0.5, 0.0)
    assert got.shape[1] == 3 and got[0].tolist() == [0, 0, 0]
    got = nms(np.full((1, 2, 5), 1e30, np.float32), np.array([[[0.9, 0.8]]], np.float32), 1e30, 0.0)
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 1]])  # an unreachable IoU threshold keeps all


def test_overflowing_bounds_fall_back_to_the_plain_scan() -> None:
    """A float64 box whose bounding box overflows makes the kernel skip its overlap grid; the
    other boxes must come out the same, and the huge box overlaps nothing."""
    boxes, scores = case(np.random.default_rng(5), 2, 3, 24, np.float64)
    assert margin_to(boxes, 0.3) > IOU_MARGIN
    far = boxes.copy()
    far[1, 5] = [1.7e308, 0, 1e308, 1, 0]
    expected = ref_nms(np.where(np.arange(24)[:, None] == 5, [1e6, 0, 1, 1, 0], boxes[1])[None], scores[1:], 0.3, 0.2)
    got = nms(far, scores, 0.3, 0.2)
    np.testing.assert_array_equal(got[got[:, 0] == 0], ref_nms(boxes[:1], scores[:1], 0.3, 0.2))
    np.testing.assert_array_equal(got[got[:, 0] == 1][:, 1:], expected[:, 1:])


# ---------------------------------------------------------------- nodes as mmdeploy wrote them


def mmdeploy_model(dtype: int, **attributes: float) -> onnx.ModelProto:
    """One node as mmdeploy's symbolic wrote it: g.op("mmdeploy::NMSRotated", boxes, scores,
    iou_threshold_f=float(...), score_threshold_f=float(...)) (older versions: no score_threshold)."""
    node = helper.make_node("NMSRotated", ["boxes", "scores"], ["selected"], name="NMSRotated_0", domain="mmdeploy")
    node.attribute.extend(helper.make_attribute(name, float(value)) for name, value in attributes.items())
    graph = helper.make_graph(
        [node],
        "mmdeploy_nms_rotated",
        [
            helper.make_tensor_value_info("boxes", dtype, ["batch", "num_boxes", 5]),
            helper.make_tensor_value_info("scores", dtype, ["batch", "num_classes", "num_boxes"]),
        ],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3])],
    )
    opsets = [helper.make_opsetid("", 11), helper.make_opsetid("mmdeploy", 1)]
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=opsets)


def test_mmdeploy_node_as_exported() -> None:
    boxes, scores = case(np.random.default_rng(21), 2, 3, 20)
    assert margin_to(boxes.astype(np.float64), 0.1) > IOU_MARGIN
    model = mmdeploy_model(TensorProto.FLOAT, iou_threshold=0.1, score_threshold=0.05)
    (got,) = session(model).run(None, {"boxes": boxes, "scores": scores})
    np.testing.assert_array_equal(got, ref_nms(boxes, scores, 0.1, 0.05))


def test_mmdeploy_node_without_score_threshold() -> None:
    boxes, scores = case(np.random.default_rng(22), 1, 2, 20)
    assert margin_to(boxes.astype(np.float64), 0.5) > IOU_MARGIN
    (got,) = session(mmdeploy_model(TensorProto.FLOAT, iou_threshold=0.5)).run(None, {"boxes": boxes, "scores": scores})
    np.testing.assert_array_equal(got, ref_nms(boxes, scores, 0.5, 0.0))


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_shapes_are_errors(domain, op) -> None:
    boxes, scores = case(np.random.default_rng(0), 1, 2, 4)
    with pytest.raises(Exception, match=r"input 'boxes' must have shape \[B, N, 5\] .*got \[1, 4, 4\]"):
        nms(boxes[..., :4].copy(), scores, 0.5, 0.0, domain)
    with pytest.raises(Exception, match=r"input 'boxes' must have rank 3, got shape \[4, 5\]"):
        nms(boxes[0], scores, 0.5, 0.0, domain)
    with pytest.raises(Exception, match=r"input 'scores' must have rank 3, got shape \[2, 4\]"):
        nms(boxes, scores[0], 0.5, 0.0, domain)
    with pytest.raises(Exception, match=r"input 'scores' must have shape \[B, C, N\] = \[1, C, 4\].*got \[1, 2, 3\]"):
        nms(boxes, scores[..., :3].copy(), 0.5, 0.0, domain)
    with pytest.raises(Exception, match=r"input 'scores' must have shape \[B, C, N\] = \[1, C, 4\].*got \[2, 2, 4\]"):
        nms(boxes, np.concatenate([scores, scores]), 0.5, 0.0, domain)


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_errors(domain, op, value) -> None:
    boxes, scores = case(np.random.default_rng(0), 2, 2, 4)
    bad = boxes.copy()
    bad[1, 2, 4] = value
    with pytest.raises(Exception, match=r"input 'boxes' must be finite, got -?(nan|inf) at \[1, 2, 4\]"):
        nms(bad, scores, 0.5, 0.0, domain)
    bad = scores.copy()
    bad[0, 1, 3] = value
    with pytest.raises(Exception, match=r"input 'scores' must be finite, got -?(nan|inf) at \[0, 1, 3\]"):
        nms(boxes, bad, 0.5, 0.0, domain)


def test_nan_threshold_is_an_error() -> None:
    boxes, scores = case(np.random.default_rng(0), 1, 1, 3)
    with pytest.raises(Exception, match="attribute 'iou_threshold' is NaN"):
        nms(boxes, scores, float("nan"), 0.0)


def test_mixed_or_integer_types_are_rejected() -> None:
    boxes, scores = case(np.random.default_rng(0), 1, 1, 3)
    # Rejected by ONNX Runtime's type checks when the session is built (wording varies by version).
    with pytest.raises(Exception, match="NMSRotated"):
        nms(boxes, scores.astype(np.float64), 0.5, 0.0)
    with pytest.raises(Exception, match="NMSRotated"):
        nms(boxes.astype(np.int64), scores.astype(np.int64), 0.5, 0.0)


def test_no_boxes_with_a_huge_class_count_allocates_nothing():
    # [B, C, 0] scores hold no data whatever C is: the answer is empty, at once (the fuzz test
    # found the kernel reserving per-(batch, class) memory first).
    boxes = np.zeros((7, 0, 5), np.float32)
    scores = np.zeros((7, 1 << 31, 0), np.float32)
    (selected,) = run("NMSRotated", "mmdeploy", {"boxes": boxes, "scores": scores}, ["selected"])
    assert selected.shape == (0, 3) and selected.dtype == np.int64


# ---------------------------------------------------------------- mmdeploy's node: degenerate boxes
#
# mmdeploy's kernel (csrc/mmdeploy/backend_ops/onnxruntime/nms_rotated/nms_rotated.cpp in
# mmdeploy 1.x) computes every IoU in float32: corners from the centres shifted to the pair's
# mean, edge crossings, the corners of each box passing an inside test of the other, a hull
# by Graham scan after std::sort (libstdc++'s), a fan of triangles summed through double. The
# node follows it exactly for every pair with a box that is not proper (sides > 0 and w h
# >= 1): below that its fixed tolerances move the IoU by more than a rounding, and a box with
# an edge of length 0 passes every point as inside. The mirror below repeats those steps on
# numpy float32 scalars (each operation rounds as the C++ does on x86-64 without FMA).

F32 = np.float32


def _original_sort(points: list, lo: int, hi: int, before) -> None:
    """libstdc++'s std::sort of points[lo:hi], in place: introsort's partitions around a
    median of three while a range holds more than 16, then insertion sort of the whole."""

    def partition(first: int, last: int) -> None:
        while last - first > 16:
            a, b, c = first + 1, first + (last - first) // 2, last - 1
            if before(points[a], points[b]):
                median = b if before(points[b], points[c]) else c if before(points[a], points[c]) else a
            else:
                median = a if before(points[a], points[c]) else c if before(points[b], points[c]) else b
            points[first], points[median] = points[median], points[first]
            left, right = first + 1, last
            while True:
                while before(points[left], points[first]):
                    left += 1
                right -= 1
                while before(points[first], points[right]):
                    right -= 1
                if not left < right:
                    break
                points[left], points[right] = points[right], points[left]
                left += 1
            partition(left, last)
            last = left

    if hi <= lo:
        return
    partition(lo, hi)
    for i in range(lo + 1, hi):
        value, j = points[i], i
        if i - lo < 16 and before(value, points[lo]):
            points[lo + 1 : i + 1] = points[lo:i]
            j = lo
        else:
            while before(value, points[j - 1]):
                points[j] = points[j - 1]
                j -= 1
        points[j] = value


def _sub(a, b):
    return (a[0] - b[0], a[1] - b[1])


def _cross(a, b):
    return a[0] * b[1] - b[0] * a[1]


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1]


def _hull_before(a, b) -> bool:
    turn = _cross(a, b)
    if abs(float(turn)) < 1e-6:
        return bool(_dot(a, a) < _dot(b, b))
    return bool(turn > 0)


def _original_hull_area(points: list) -> np.float32:
    n = len(points)
    low = 0
    for i in range(1, n):
        if points[i][1] < points[low][1] or (points[i][1] == points[low][1] and points[i][0] < points[low][0]):
            low = i
    start = points[low]
    q = [_sub(p, start) for p in points]
    q[0], q[low] = q[low], q[0]
    _original_sort(q, 1, n, _hull_before)
    k = 1
    while k < n and not float(_dot(q[k], q[k])) > 1e-8:
        k += 1
    if k == n:
        return F32(0)
    q[1] = q[k]
    m = 2
    for i in range(k + 1, n):
        while m > 1 and _cross(_sub(q[i], q[m - 2]), _sub(q[m - 1], q[m - 2])) >= 0:
            m -= 1
        q[m] = q[i]
        m += 1
    if m <= 2:
        return F32(0)
    twice = F32(0)
    for i in range(1, m - 1):
        twice = F32(float(twice) + abs(float(_cross(_sub(q[i], q[0]), _sub(q[i + 1], q[0])))))
    return F32(float(twice) / 2.0)


def _original_corners(box, x, y) -> list:
    theta = float(box[4])
    c, s = F32(math.cos(theta)) * F32(0.5), F32(math.sin(theta)) * F32(0.5)
    w, h = F32(box[2]), F32(box[3])
    p0 = (x - s * h - c * w, y + c * h - s * w)
    p1 = (x + s * h - c * w, y - c * h - s * w)
    return [p0, p1, (F32(2) * x - p0[0], F32(2) * y - p0[1]), (F32(2) * x - p1[0], F32(2) * y - p1[1])]


def original_iou(kept, candidate) -> np.float32:
    """mmdeploy's float32 IoU of (kept box, candidate), step by step."""
    kept, candidate = np.asarray(kept, F32), np.asarray(candidate, F32)
    shift_x, shift_y = float(kept[0] + candidate[0]) / 2.0, float(kept[1] + candidate[1]) / 2.0
    a = _original_corners(kept, F32(float(kept[0]) - shift_x), F32(float(kept[1]) - shift_y))
    b = _original_corners(candidate, F32(float(candidate[0]) - shift_x), F32(float(candidate[1]) - shift_y))
    edges_a = [_sub(a[(i + 1) % 4], a[i]) for i in range(4)]
    edges_b = [_sub(b[(i + 1) % 4], b[i]) for i in range(4)]
    points = []
    with np.errstate(all="ignore"):
        for i in range(4):
            for j in range(4):
                det = _cross(edges_b[j], edges_a[i])
                if abs(float(det)) <= 1e-14:
                    continue
                between = _sub(b[j], a[i])
                t_a, t_b = _cross(edges_b[j], between) / det, _cross(edges_a[i], between) / det
                if 0 <= t_a <= 1 and 0 <= t_b <= 1:
                    points.append((a[i][0] + edges_a[i][0] * t_a, a[i][1] + edges_a[i][1] * t_a))
        for corners, rect, edges in ((a, b, edges_b), (b, a, edges_a)):
            along_sq, across_sq = _dot(edges[0], edges[0]), _dot(edges[3], edges[3])
            for p in corners:
                offset = _sub(p, rect[0])
                along, across = _dot(offset, edges[0]), -_dot(offset, edges[3])
                if along >= 0 and across >= 0 and along <= along_sq and across <= across_sq:
                    points.append(p)
        inter = _original_hull_area(points) if len(points) > 2 else F32(0)
        return inter / (kept[2] * kept[3] + candidate[2] * candidate[3] - inter)


def is_proper(box) -> bool:
    w, h = F32(box[2]), F32(box[3])
    return bool(w > 0 and h > 0 and w * h >= 1)


def mmdeploy_iou(kept, candidate) -> float:
    """The node's IoU: the exact one for two proper boxes, else the original's."""
    if is_proper(kept) and is_proper(candidate):
        return ref_iou(kept, candidate)
    return float(original_iou(kept, candidate))


def degenerate_case(rng: np.random.Generator, b: int, c: int, n: int, apart: bool = False):
    """Clustered boxes of which about half are points, segments, rows of zeros (a padded
    first stage), sub-pixel, negative in one or both sides; distinct scores. `apart`: the
    proper boxes on a grid too coarse for any two to overlap (their IoU is exactly 0, so a
    threshold of 0 or 1 decides them alike in every arithmetic)."""
    boxes, _ = case(rng, b, c, n, np.float32)
    if apart:
        cells = rng.permutation(n * n)[:n]
        boxes[:, :, 0], boxes[:, :, 1] = (cells % n) * 30.0, (cells // n) * 30.0
    kind = rng.integers(0, 10, (b, n))
    boxes[kind == 0, 2:4] = 0
    boxes[kind == 1, 2] = 0
    boxes[kind == 2, 3] = 0
    boxes[kind == 3, :4] = 0
    boxes[kind == 4, 2:4] *= 0.05
    boxes[kind == 5, 2:4] *= 1e-8
    boxes[kind == 6, 2] *= -1
    boxes[kind == 7, 2:4] *= -1
    scores = rng.permutation(np.linspace(0.01, 1, b * c * n)).reshape(b, c, n).astype(np.float32)
    return boxes, scores


def proper_margin(boxes: np.ndarray, threshold: float) -> float:
    """margin_to over the pairs of proper boxes (the others follow the original exactly)."""
    proper = [np.array([box for box in batch if is_proper(box)]).reshape(-1, 5) for batch in boxes]
    return min((margin_to(p[None].astype(np.float64), threshold) for p in proper), default=math.inf)


ZERO_ROW = [0, 0, 0, 0, 0.3]


@pytest.mark.parametrize(
    "kept,candidate,expected",
    [
        ([3, 4, 0, 0, 0.2], [-5, 1, 0, 0, 1.0], "nan"),  # two points anywhere: 0 / 0
        ([10, 10, 4, 2, 0.4], [10, 10, 4, 2, 0.4], 1.0),
        ([10, 10, 4, 4, 0.0], [10, 10, 2, 2, 0.0], 0.25),
        ([0, 0, 2, 2, 0.0], [7, 7, 2, 2, 0.0], 0.0),
    ],
)
def test_original_iou_by_hand(kept, candidate, expected) -> None:
    got = float(original_iou(kept, candidate))
    assert math.isnan(got) if expected == "nan" else got == pytest.approx(expected, abs=1e-6)


def test_original_iou_of_a_point_with_a_box_anywhere_is_huge_or_nan() -> None:
    """The point's inside test passes the box's corners wherever they are, so the intersection
    is the box's own area and the union w h - that: 0 or a rounding away from it."""
    rng = np.random.default_rng(2)
    signs = set()
    for _ in range(200):
        box = [*rng.uniform(-500, 500, 2), *rng.uniform(1, 90, 2), rng.uniform(-3, 3)]
        for pair in ((ZERO_ROW, box), (box, ZERO_ROW)):
            iou = float(original_iou(*pair))
            assert math.isnan(iou) or abs(iou) > 1e3, (pair, iou)
            signs.add(math.copysign(1, iou) if not math.isnan(iou) else 0)
    assert signs == {-1.0, 1.0}  # which of the two the rounding gives varies


def test_mmdeploy_reference_agrees_with_the_one_pair_reference_on_proper_boxes() -> None:
    boxes, _ = case(np.random.default_rng(40), 1, 1, 12)
    for i in range(12):
        for j in range(12):
            assert original_iou(boxes[0, i], boxes[0, j]) == pytest.approx(ref_iou(boxes[0, i], boxes[0, j]), abs=1e-5)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("iou", [-0.5, 0.0, 0.3, 0.7, 1.0])
def test_mmdeploy_degenerate_boxes_follow_the_original(seed: int, iou: float) -> None:
    """Every pair with a box that is not proper decides as mmdeploy's float32 code decides,
    whichever of the two is kept; ortops' own node keeps its IoU of 0 for such boxes."""
    apart = iou in (0.0, 1.0)
    boxes, scores = degenerate_case(np.random.default_rng(seed), 2, 2, 18, apart)
    assert apart or proper_margin(boxes, iou) > IOU_MARGIN
    got = nms(boxes, scores, iou, 0.1, "mmdeploy")
    np.testing.assert_array_equal(got, references.nms_rotated(boxes, scores, iou, 0.1, iou=mmdeploy_iou))
    if 0 < iou < 1:
        sized = [batch[(batch[:, 2] > 0) & (batch[:, 3] > 0)] for batch in boxes]
        assert min(margin_to(b[None].astype(np.float64), iou) for b in sized) > IOU_MARGIN
        expected = references.nms_rotated(boxes, scores, iou, 0.1, iou=ref_iou)
        np.testing.assert_array_equal(nms(boxes, scores, iou, 0.1, "ortops"), expected)


def test_zero_rows_of_a_two_stage_export() -> None:
    """As in an oriented R-CNN: the first stage pads with zero rows, the second scores them
    (here all at 0.376, below some real detections and above others). In mmdeploy's node each
    is suppressed by a kept box, or kept and then suppresses later boxes, as the original
    decides; two of them never suppress each other (0 / 0). ortops' node keeps them all."""
    rng = np.random.default_rng(9)
    real, _ = case(rng, 1, 1, 30)
    zero_rows = np.tile(np.array(ZERO_ROW, np.float32), (1, 20, 1))
    zero_rows[0, :, 4] = rng.uniform(-3, 3, 20)  # the angle regressed for a zero roi
    zero_rows[0, ::3, :2] = -0.0
    zero_rows[0, 1::5, :2] = real[0, 1::5, :2][:4]  # a few at real boxes' centres
    boxes = np.concatenate([real, zero_rows], 1)
    scores = np.concatenate([rng.uniform(0, 1, (1, 1, 30)), np.full((1, 1, 20), 0.376)], 2).astype(np.float32)
    scores = np.concatenate([scores, np.concatenate([scores[:, :, :30] * 0.3, scores[:, :, 30:]], 2)], 1)
    got = nms(boxes, scores, 0.1, 0.05, "mmdeploy")
    np.testing.assert_array_equal(got, references.nms_rotated(boxes, scores, 0.1, 0.05, iou=mmdeploy_iou))
    clean = nms(boxes, scores, 0.1, 0.05, "ortops")
    zero_rows = [(rows[:, 1] == c) & (rows[:, 2] >= 30) for rows in (got, clean) for c in (0, 1)]
    assert [int(m.sum()) for m in zero_rows[2:]] == [20, 20]  # ortops: kept, IoU 0
    # Class 0: real boxes come first and suppress most zero rows. Class 1: the zero rows come
    # first, none suppresses another, and they suppress real boxes.
    assert zero_rows[0].sum() < 20 and zero_rows[1].sum() == 20
    real_in_class_1 = [int(((rows[:, 1] == 1) & (rows[:, 2] < 30)).sum()) for rows in (got, clean)]
    assert real_in_class_1[0] < real_in_class_1[1]


@pytest.mark.parametrize("threads", [1, 2])
def test_mmdeploy_degenerate_boxes_many(threads: int) -> None:
    """Enough boxes for the overlap grid, with not-proper boxes kept early and late."""
    boxes, scores = degenerate_case(np.random.default_rng(77), 1, 3, 70)
    assert proper_margin(boxes, 0.4) > IOU_MARGIN
    got = nms(boxes, scores, 0.4, 0.0, "mmdeploy", threads)
    np.testing.assert_array_equal(got, references.nms_rotated(boxes, scores, 0.4, 0.0, iou=mmdeploy_iou))
