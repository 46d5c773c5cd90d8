"""NMS in both domains against a slow loop written here from the spec."""

from __future__ import annotations

import numpy as np
import pytest
from references import cached

from ortest import run

DOMAINS = [("mmcv", "NonMaxSuppression"), ("ortops", "NMS")]


@cached
def reference_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, offset: int) -> np.ndarray:
    """Greedy NMS one pair at a time, in the boxes' own dtype."""
    dt = boxes.dtype.type
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    kept: list[int] = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for i in order:
            ok = True
            for k in kept:
                a, b = boxes[i], boxes[k]
                w = max(dt(0), min(a[2], b[2]) - max(a[0], b[0]) + dt(offset))
                h = max(dt(0), min(a[3], b[3]) - max(a[1], b[1]) + dt(offset))
                inter = w * h
                area_a = (a[2] - a[0] + dt(offset)) * (a[3] - a[1] + dt(offset))
                area_b = (b[2] - b[0] + dt(offset)) * (b[3] - b[1] + dt(offset))
                if inter / (area_a + area_b - inter) > dt(iou_threshold):
                    ok = False
                    break
            if ok:
                kept.append(i)
    return np.array(kept, dtype=np.int64)


def random_boxes(rng: np.random.Generator, n: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """Clustered boxes (so suppression happens) with a few exact score ties."""
    centers = rng.uniform(0, 100, (max(1, n // 5), 2))[rng.integers(0, max(1, n // 5), n)]
    xy = centers + rng.normal(0, 3, (n, 2))
    wh = rng.uniform(1, 20, (n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(dtype)
    scores = rng.choice(np.linspace(0, 1, max(2, n // 2)), n).astype(dtype)
    return boxes, scores


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 2, 17, 300])
@pytest.mark.parametrize("iou_threshold", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("offset", [0, 1])
def test_matches_reference(domain: str, op: str, dtype: type, n: int, iou_threshold: float, offset: int) -> None:
    rng = np.random.default_rng(n * 7 + offset)
    boxes, scores = random_boxes(rng, n, dtype)
    (got,) = run(
        op, domain, {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=iou_threshold, offset=offset
    )
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, reference_nms(boxes, scores, iou_threshold, offset))


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_ties_keep_lower_index_first(domain: str, op: str) -> None:
    boxes = np.array([[0, 0, 1, 1], [10, 10, 11, 11], [0, 0, 1, 1], [20, 20, 21, 21]], np.float32)
    scores = np.array([0.5, 0.5, 0.5, 0.5], np.float32)
    (got,) = run(op, domain, {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.5, offset=0)
    np.testing.assert_array_equal(got, [0, 1, 3])


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_degenerate_boxes_are_kept(domain: str, op: str) -> None:
    # Zero-area boxes have IoU 0/0 = NaN with each other, which suppresses nothing.
    boxes = np.array([[5, 5, 5, 5], [5, 5, 5, 5], [3, 3, 2, 2]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    (got,) = run(op, domain, {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.1, offset=0)
    np.testing.assert_array_equal(got, [0, 1, 2])


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_infinite_scores_order_first(domain: str, op: str) -> None:
    boxes = np.array([[0, 0, 1, 1], [10, 10, 11, 11], [20, 20, 21, 21]], np.float32)
    scores = np.array([0.5, np.inf, -np.inf], np.float32)
    (got,) = run(op, domain, {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.5, offset=0)
    np.testing.assert_array_equal(got, [1, 0, 2])


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    boxes, scores = random_boxes(np.random.default_rng(0), 500, np.float32)
    (got,) = run("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], threads=threads, iou_threshold=0.5)
    np.testing.assert_array_equal(got, reference_nms(boxes, scores, 0.5, 0))


BAD_INPUTS = [
    (
        "scores length",
        np.zeros((3, 4), np.float32),
        np.zeros(2, np.float32),
        "input 'scores' must have shape [N] with N = 3",
    ),
    (
        "boxes columns",
        np.zeros((3, 5), np.float32),
        np.zeros(3, np.float32),
        "input 'boxes' must have shape [N, 4], got [3, 5]",
    ),
    ("NaN box", np.array([[0, 0, np.nan, 1]], np.float32), np.ones(1, np.float32), "input 'boxes' contains NaN"),
    ("NaN score", np.array([[0, 0, 1, 1]], np.float32), np.array([np.nan], np.float32), "input 'scores' contains NaN"),
]


@pytest.mark.parametrize("case,boxes,scores,message", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_input_is_an_error(
    case: str, boxes: np.ndarray, scores: np.ndarray, message: str, domain: str, op: str
) -> None:
    with pytest.raises(Exception, match=rf"{domain}\.{op}: .*{message}".replace("[", r"\[").replace("]", r"\]")):
        run(op, domain, {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.5, offset=0)


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_wrong_rank_is_an_error(domain: str, op: str) -> None:
    with pytest.raises(Exception, match="must have rank 2, got shape \\[12\\]"):
        run(op, domain, {"boxes": np.zeros(12, np.float32), "scores": np.zeros(3, np.float32)}, ["indices"])


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_wrong_dtype_is_an_error(domain: str, op: str) -> None:
    with pytest.raises(Exception, match=op):
        run(op, domain, {"boxes": np.zeros((2, 4), np.int32), "scores": np.zeros(2, np.int32)}, ["indices"])


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_offset_attribute_is_an_error(domain: str, op: str) -> None:
    with pytest.raises(Exception, match="attribute 'offset' must be 0 or 1, got 7"):
        run(
            op,
            domain,
            {"boxes": np.zeros((2, 4), np.float32), "scores": np.zeros(2, np.float32)},
            ["indices"],
            offset=7,
        )


def test_omitted_attributes_take_the_documented_defaults() -> None:
    boxes, scores = random_boxes(np.random.default_rng(3), 200, np.float32)
    (got,) = run("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"])
    np.testing.assert_array_equal(got, reference_nms(boxes, scores, 0.5, 0))


def mixed_boxes(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Tiny, typical, huge (covering many grid cells), inverted and zero-size boxes together."""
    xy = rng.uniform(-50, 500, (n, 2))
    kind = rng.integers(0, 5, n)[:, None]
    wh = np.select(
        [kind == 0, kind == 1, kind == 2, kind == 3],
        [
            rng.uniform(0.01, 1, (n, 2)),
            rng.uniform(5, 40, (n, 2)),
            rng.uniform(200, 800, (n, 2)),
            -rng.uniform(1, 5, (n, 2)),
        ],
        np.zeros((n, 2)),
    )
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    return boxes, rng.random(n).astype(np.float32)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("iou_threshold", [-0.5, 0.0, 0.1, 0.5, 0.95])
@pytest.mark.parametrize("offset", [0, 1])
def test_mixed_sizes_match_reference(seed: int, iou_threshold: float, offset: int) -> None:
    boxes, scores = mixed_boxes(np.random.default_rng(seed), 250)
    (got,) = run(
        "NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=iou_threshold, offset=offset
    )
    np.testing.assert_array_equal(got, reference_nms(boxes, scores, iou_threshold, offset))


def test_infinite_coordinates_match_reference() -> None:
    boxes, scores = random_boxes(np.random.default_rng(9), 60, np.float32)
    boxes[3] = [-np.inf, -np.inf, np.inf, np.inf]
    boxes[7, 2] = np.inf
    (got,) = run("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.3)
    np.testing.assert_array_equal(got, reference_nms(boxes, scores, 0.3, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, 17, 33, 70])
@pytest.mark.parametrize("iou_threshold", [-0.1, 0.0, 0.5, 0.9])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("infinite", [False, True])
def test_box_counts_around_vector_widths(
    dtype: type, n: int, iou_threshold: float, offset: int, infinite: bool
) -> None:
    # One tight cluster, so that many kept boxes share a grid cell (or, with infinite
    # coordinates or a negative threshold, the list of all kept boxes): the vectorised test of
    # a candidate against them meets every count of boxes left over after whole vectors.
    rng = np.random.default_rng(n + offset)
    xy = rng.normal(50, 2, (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(18, 22, (n, 2))], axis=1).astype(dtype)
    if infinite:
        boxes[n // 2] = [-np.inf, 40, np.inf, 60]
    scores = rng.random(n).astype(dtype)
    (got,) = run(
        "NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=iou_threshold, offset=offset
    )
    np.testing.assert_array_equal(got, reference_nms(boxes, scores, iou_threshold, offset))


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("n", [1, 7, 17, 33])
def test_identical_boxes(domain: str, op: str, n: int) -> None:
    boxes = np.tile(np.array([[1.0, 2.0, 11.0, 12.0]], np.float32), (n, 1))
    scores = np.random.default_rng(n).choice(np.array([0.25, 0.5], np.float32), n)
    best = np.flatnonzero(scores == scores.max())
    # IoU 1 suppresses all but the first of the best; at threshold 1 (strictly greater) none.
    (got,) = run(op, domain, {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.5)
    np.testing.assert_array_equal(got, best[:1])
    (got,) = run(op, domain, {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=1.0)
    np.testing.assert_array_equal(got, reference_nms(boxes, scores, 1.0, 0))
    assert len(got) == n


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_signed_zero_and_infinite_scores_order(dtype: type) -> None:
    # -0 and +0 scores tie (lower index first); -inf is last. Disjoint boxes: all kept.
    scores = np.array([0.0, -0.0, -np.inf, 0.0, -0.0, np.inf, 1.0], dtype)
    boxes = np.array([[10.0 * i, 0.0, 10.0 * i + 5, 5.0] for i in range(len(scores))], dtype)
    (got,) = run("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"])
    np.testing.assert_array_equal(got, [5, 6, 0, 1, 3, 4, 2])


@pytest.mark.parametrize("n", [63, 64, 65, 127, 128, 129, 191, 192, 193])
@pytest.mark.parametrize("iou_threshold", [0.0, 0.4])
def test_counts_around_chunks_of_64(n: int, iou_threshold: float) -> None:
    # The device's greedy pass resolves 64 boxes (one mask word) per step: counts on either
    # side of a word's end, with suppression within and across words.
    boxes, scores = random_boxes(np.random.default_rng(n), n, np.float32)
    (got,) = run("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=iou_threshold)
    np.testing.assert_array_equal(got, reference_nms(boxes, scores, iou_threshold, 0))


def vectorised_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """reference_nms's greedy loop with each kept box tested against all later ones at once, in
    float32 arithmetic of the same steps (fast enough for tens of thousands of boxes)."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    b = boxes[order]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    removed = np.zeros(len(b), bool)
    kept = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for i in range(len(b)):
            if removed[i]:
                continue
            kept.append(i)
            rest = b[i + 1 :]
            w = np.maximum(np.float32(0), np.minimum(b[i, 2], rest[:, 2]) - np.maximum(b[i, 0], rest[:, 0]))
            h = np.maximum(np.float32(0), np.minimum(b[i, 3], rest[:, 3]) - np.maximum(b[i, 1], rest[:, 1]))
            inter = w * h
            removed[i + 1 :] |= inter / (area[i] + area[i + 1 :] - inter) > np.float32(iou_threshold)
    return order[np.array(kept, dtype=np.int64)]


def test_tens_of_thousands_of_boxes() -> None:
    # 24k boxes: the device's suppression mask is made in bands of rows (at most 32 MiB each),
    # three here, with the removed set carried from band to band.
    rng = np.random.default_rng(24)
    boxes, scores = random_boxes(rng, 24000, np.float32)
    boxes *= np.float32(20)
    (got,) = run("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.5)
    expected = vectorised_nms(boxes, scores, 0.5)
    assert 2000 < len(expected) < 20000
    np.testing.assert_array_equal(got, expected)
