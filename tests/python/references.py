"""Slow, obviously correct references written from the op specs, shared by the test folders.

Plain Python loops over numpy arrays, one sample at a time, in the input's dtype where the
original kernels compute in it. No torch here: the ONNX-Runtime-level tests run without it.

The test command runs the ONNX-Runtime-level tests in several suites (the main one, the
emulated device, each instruction-set level, under the sanitizers), which compute the same
references from the same seeded inputs, and these loops are about half of each suite's time.
With ``ORTOPS_REFERENCE_CACHE`` set to a folder (scripts/test.sh sets it), a reference marked
``@cached`` keeps each result there under a hash of its inputs, its name, numpy's version and
the test sources, so that only the first suite to need a result computes it. Unset, as when
pytest is run by hand, every reference runs every time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import math
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

Reference = TypeVar("Reference", bound=Callable[..., Any])
_CACHE = os.environ.get("ORTOPS_REFERENCE_CACHE")


@functools.cache
def _cache_salt() -> bytes:
    """numpy's version and every test source: a change to either is a new key."""
    digest = hashlib.sha256(np.__version__.encode())
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.digest()


def cached(reference: Reference) -> Reference:
    """``reference``, its results kept in ``ORTOPS_REFERENCE_CACHE`` (see the module docstring)."""
    if not _CACHE:
        return reference

    @functools.wraps(reference)
    def from_cache(*args: Any, **kwargs: Any) -> Any:
        try:
            inputs = pickle.dumps((reference.__module__, reference.__qualname__, args, sorted(kwargs.items())), 5)
        except Exception:  # an argument that does not pickle (a function): no cache
            return reference(*args, **kwargs)
        path = Path(_CACHE) / f"{reference.__name__}-{hashlib.sha256(_cache_salt() + inputs).hexdigest()}.pickle"
        try:
            return pickle.loads(path.read_bytes())
        except FileNotFoundError:
            pass
        result = reference(*args, **kwargs)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}")  # suites side by side: whole files only
        partial.write_bytes(pickle.dumps(result, 5))
        os.replace(partial, path)
        return result

    return from_cache  # type: ignore[return-value]


def roi_align_taps(t: type, h: int, w: int, y: Any, x: Any) -> list[tuple[int, int, Any]]:
    """The bilinear taps of the point (y, x) of an [h, w] plane by the RoIAlign rule, in the
    element type t: (row, column, weight) of its four neighbours (a point beyond the last
    row or column is clamped to it), or none for a point outside (-1, h) x (-1, w)."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return []
    y, x = max(y, t(0)), max(x, t(0))
    y_low, x_low = int(y), int(x)
    if y_low >= h - 1:
        y_low = y_high = h - 1
        y = t(y_low)
    else:
        y_high = y_low + 1
    if x_low >= w - 1:
        x_low = x_high = w - 1
        x = t(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - t(y_low), x - t(x_low)
    hy, hx = t(1) - ly, t(1) - lx
    return [(y_low, x_low, hy * hx), (y_low, x_high, hy * lx), (y_high, x_low, ly * hx), (y_high, x_high, ly * lx)]


def roi_align_sample(plane: np.ndarray, y: float, x: float) -> Any:
    """One bilinear sample of a [H, W] plane by the RoIAlign rule, in the plane's dtype; of
    [..., H, W] planes, one per plane (the same arithmetic, element by element)."""
    h, w = plane.shape[-2:]
    taps = roi_align_taps(plane.dtype.type, h, w, y, x) if h and w else []
    if not taps:
        return np.zeros(plane.shape[:-2], plane.dtype)[()]
    (row, column, weight), *rest = taps
    total = weight * plane[..., row, column]
    for row, column, weight in rest:
        total = total + weight * plane[..., row, column]
    return total


def running_max(first: Any, rest: list) -> Any:
    """Python's max([first, *rest]) element by element: a later value replaces the running
    one only when greater (so a NaN that leads stays, and a later NaN is passed over)."""
    best = first
    for value in rest:
        best = np.where(value > best, value, best)
    return best


def _bins(t: type, roi_h: Any, roi_w: Any, out_h: int, out_w: int, sampling_ratio: int, aligned: bool) -> tuple:
    """A roi's sides (legacy, not aligned: at least 1), bin sizes and samples per bin along
    each axis (sampling_ratio, or adaptive: ceil(side / output size)), by the RoIAlign rule in
    the element type t."""
    if not aligned:
        roi_h, roi_w = max(roi_h, t(1)), max(roi_w, t(1))
    grid_h = sampling_ratio if sampling_ratio > 0 else max(math.ceil(roi_h / t(out_h)), 0)
    grid_w = sampling_ratio if sampling_ratio > 0 else max(math.ceil(roi_w / t(out_w)), 0)
    return roi_h, roi_w, roi_h / t(out_h), roi_w / t(out_w), grid_h, grid_w


@cached
def roi_align(
    features: np.ndarray,
    rois: np.ndarray,
    out_h: int,
    out_w: int,
    spatial_scale: float,
    sampling_ratio: int,
    mode: str,
    aligned: bool,
    compat: bool,
) -> np.ndarray:
    """RoIAlign as the spec describes it; compat=True keeps mmcv's max-mode start of -10000."""
    t = features.dtype.type
    n, c, h, w = features.shape
    out = np.zeros((len(rois), c, out_h, out_w), features.dtype)
    scale, shift = t(spatial_scale), t(0.5 if aligned else 0.0)
    for r, roi in enumerate(rois):
        image = int(roi[0])
        start_w, start_h = roi[1] * scale - shift, roi[2] * scale - shift
        roi_w, roi_h = roi[3] * scale - shift - start_w, roi[4] * scale - shift - start_h
        roi_h, roi_w, bin_h, bin_w, grid_h, grid_w = _bins(t, roi_h, roi_w, out_h, out_w, sampling_ratio, aligned)
        planes = features[image] if c else np.empty((0, h, w), features.dtype)  # every channel at once
        for ph in range(out_h):
            for pw in range(out_w):
                samples = [
                    roi_align_sample(
                        planes,
                        start_h + t(ph) * bin_h + t(iy + 0.5) * bin_h / t(grid_h),
                        start_w + t(pw) * bin_w + t(ix + 0.5) * bin_w / t(grid_w),
                    )
                    for iy in range(grid_h)
                    for ix in range(grid_w)
                ]
                if mode == "avg":
                    total = t(0)
                    for s in samples:
                        total += s
                    out[r, :, ph, pw] = total / t(max(len(samples), 1))
                elif compat:
                    out[r, :, ph, pw] = running_max(np.full(c, -10000, features.dtype), samples)
                else:
                    out[r, :, ph, pw] = running_max(samples[0], samples[1:]) if samples else t(0)
    return out


@cached
def roi_align_rotated(
    features: np.ndarray,
    rois: np.ndarray,
    out_h: int,
    out_w: int,
    spatial_scale: float,
    sampling_ratio: int,
    aligned: bool,
    clockwise: bool,
) -> np.ndarray:
    """Rotated RoIAlign (average) as the spec describes it, one sample at a time."""
    t = features.dtype.type
    n, c, h, w = features.shape
    out = np.zeros((len(rois), c, out_h, out_w), features.dtype)
    scale, shift = t(spatial_scale), t(0.5 if aligned else 0.0)
    for r, roi in enumerate(rois):
        cx, cy = roi[1] * scale - shift, roi[2] * scale - shift
        roi_w, roi_h = roi[3] * scale, roi[4] * scale
        theta = -roi[5] if clockwise else roi[5]
        cos_t, sin_t = t(np.cos(theta)), t(np.sin(theta))
        roi_h, roi_w, bin_h, bin_w, grid_h, grid_w = _bins(t, roi_h, roi_w, out_h, out_w, sampling_ratio, aligned)
        planes = features[int(roi[0])] if c else np.empty((0, h, w), features.dtype)  # every channel at once
        for ph in range(out_h):
            for pw in range(out_w):
                total = t(0)
                for iy in range(grid_h):
                    yy = -roi_h / t(2) + t(ph) * bin_h + t(iy + 0.5) * bin_h / t(grid_h)
                    for ix in range(grid_w):
                        xx = -roi_w / t(2) + t(pw) * bin_w + t(ix + 0.5) * bin_w / t(grid_w)
                        total += roi_align_sample(planes, yy * cos_t - xx * sin_t + cy, yy * sin_t + xx * cos_t + cx)
                out[r, :, ph, pw] = total / t(max(grid_h * grid_w, 1))
    return out


@cached
def rotated_feature_align(
    features: np.ndarray, boxes: np.ndarray, spatial_scale: float, points: int, y_first: bool
) -> np.ndarray:
    """Rotated feature alignment as the spec describes it; y_first reads boxes as (y, x, w, h, a)."""
    t = features.dtype.type
    n, c, h, w = features.shape
    out = features.copy()
    scale = t(spatial_scale)
    for i in range(n):
        for row in range(h):
            for col in range(w):
                box = boxes[i, row, col]
                y, x = (box[0], box[1]) if y_first else (box[1], box[0])
                y, x = y * scale, x * scale
                pts = [(y, x)]
                if points == 5:
                    half_w, half_h, a = box[2] * scale / t(2), box[3] * scale / t(2), box[4]
                    wx, wy = t(np.cos(a)) * half_w, t(np.sin(a)) * half_w
                    hx, hy = -t(np.sin(a)) * half_h, t(np.cos(a)) * half_h
                    pts += [
                        (y + wy + hy, x + wx + hx),
                        (y - wy + hy, x - wx + hx),
                        (y - wy - hy, x - wx - hx),
                        (y + wy - hy, x + wx - hx),
                    ]
                for ch in range(c):
                    value = features[i, ch, row, col]
                    for py, px in pts:
                        value += roi_align_sample(features[i, ch], py, px)
                    out[i, ch, row, col] = value
    return out


def _unnormalize(coord: float, size: int, align: bool) -> float:
    t = type(coord)  # every operand in the coordinate's own type, whatever numpy's casting rules
    one, two = t(1), t(2)
    return ((coord + one) / two) * t(size - 1) if align else ((coord + one) * t(size) - one) / two


def _reflect(coord: float, twice_low: int, twice_high: int) -> float:
    t = type(coord)
    if twice_low == twice_high:
        return t(0)
    low, span = t(twice_low / 2), t((twice_high - twice_low) / 2)
    coord = abs(coord - low)
    extra = t(np.fmod(coord, span))
    flips = math.floor(coord / span)
    return extra + low if flips % 2 == 0 else span - extra + low


def _pad(coord: float, size: int, padding: str, align: bool) -> float:
    t = type(coord)
    if padding == "border":
        return min(t(size - 1), max(coord, t(0)))
    if padding == "reflection":
        coord = t(_reflect(coord, 0, 2 * (size - 1)) if align else _reflect(coord, -1, 2 * size - 1))
        return min(t(size - 1), max(coord, t(0)))
    return coord


def _cubic_weights(t: float) -> list[float]:
    a = -0.75

    def near(x: float) -> float:
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: float) -> float:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@cached
def grid_sample(features: np.ndarray, grid: np.ndarray, mode: str, padding: str, align: bool) -> np.ndarray:
    """PyTorch's 2-D grid_sample written point by point: coordinates in the input dtype (so
    nearest rounding at exact half-way points agrees), sums in float64, result in the dtype."""
    n, c, h, w = features.shape
    _, out_h, out_w, _ = grid.shape
    out = np.zeros((n, c, out_h, out_w), np.float64)
    f = features.astype(np.float64)

    def inside(y: int, x: int) -> bool:
        return 0 <= y < h and 0 <= x < w

    for b in range(n):
        for i in range(out_h):
            for j in range(out_w):
                gx, gy = grid[b, i, j, 0], grid[b, i, j, 1]
                x, y = _unnormalize(gx, w, align), _unnormalize(gy, h, align)
                if mode == "bicubic":
                    x0, y0 = math.floor(x), math.floor(y)
                    wx, wy = _cubic_weights(float(x - x0)), _cubic_weights(float(y - y0))
                    for ch in range(c):
                        rows = []
                        for r in range(4):
                            values = []
                            for k in range(4):
                                t = type(x)
                                xx, yy = _pad(t(x0 - 1 + k), w, padding, align), _pad(t(y0 - 1 + r), h, padding, align)
                                xi, yi = int(xx), int(yy)
                                values.append(f[b, ch, yi, xi] if inside(yi, xi) else 0.0)
                            rows.append(sum(v * q for v, q in zip(values, wx)))
                        out[b, ch, i, j] = sum(v * q for v, q in zip(rows, wy))
                    continue
                x, y = _pad(x, w, padding, align), _pad(y, h, padding, align)
                if mode == "nearest":
                    xi, yi = int(np.rint(x)), int(np.rint(y))  # half to even, as nearbyint
                    if inside(yi, xi):
                        out[b, :, i, j] = f[b, :, yi, xi]
                    continue
                x0, y0 = math.floor(x), math.floor(y)
                x, y = float(x), float(y)
                for yi, xi, weight in (
                    (y0, x0, (x0 + 1 - x) * (y0 + 1 - y)),
                    (y0, x0 + 1, (x - x0) * (y0 + 1 - y)),
                    (y0 + 1, x0, (x0 + 1 - x) * (y - y0)),
                    (y0 + 1, x0 + 1, (x - x0) * (y - y0)),
                ):
                    if inside(yi, xi):
                        out[b, :, i, j] += f[b, :, yi, xi] * weight
    return out.astype(features.dtype)


@cached
def cumulative_extreme(x: np.ndarray, dim: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """torch.cummax/cummin one line at a time: ties take the later position, NaN takes over."""
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    moved = np.moveaxis(x, dim, -1)
    values, indices = np.empty_like(moved), np.empty(moved.shape, np.int64)
    for line in np.ndindex(moved.shape[:-1]):
        best, where = None, 0
        for i, v in enumerate(moved[line]):
            if best is None or v != v or (best == best and (v >= best if largest else v <= best)):
                best, where = v, i
            values[line + (i,)], indices[line + (i,)] = best, where
    return np.moveaxis(values, -1, dim), np.moveaxis(indices, -1, dim)


def corner_pool(x: np.ndarray, mode: int) -> np.ndarray:
    """Running max from the bottom (0 top), top (1 bottom), right (2 left), left (3 right)."""
    dim = 2 if mode <= 1 else 3
    if mode in (0, 2):
        return np.flip(cumulative_extreme(np.flip(x, dim), dim, True)[0], dim)
    return cumulative_extreme(x, dim, True)[0]


def _iou(a: np.ndarray, b: np.ndarray, offset) -> float:
    t = type(a[0])
    w = max(t(0), min(a[2], b[2]) - max(a[0], b[0]) + t(offset))
    h = max(t(0), min(a[3], b[3]) - max(a[1], b[1]) + t(offset))
    area_a = (a[2] - a[0] + t(offset)) * (a[3] - a[1] + t(offset))
    area_b = (b[2] - b[0] + t(offset)) * (b[3] - b[1] + t(offset))
    inter = w * h
    with np.errstate(invalid="ignore", divide="ignore"):
        return inter / (area_a + area_b - inter)


_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
_LIBM.expf.restype, _LIBM.expf.argtypes = ctypes.c_float, [ctypes.c_float]


def c_exp(x: np.floating) -> np.floating:
    """exp from the C library, as the original C++ kernels call it (numpy's own SIMD exp
    may differ in the last bit, which can reorder ties between decayed scores)."""
    if isinstance(x, np.float32):
        return np.float32(_LIBM.expf(float(x)))
    return type(x)(math.exp(float(x)))


@cached
def soft_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold, sigma, min_score, method: int, offset: int):
    """Soft-NMS with mmcv's working-list order: returns (dets [K, 5], indices [K])."""
    t = boxes.dtype.type
    work = [[boxes[i].copy(), scores[i], i] for i in range(len(scores))]
    n = len(work)
    i = 0
    while i < n:
        best = i
        for pos in range(i + 1, n):
            if work[best][1] < work[pos][1]:
                best = pos
        work[i], work[best] = work[best], work[i]
        pos = i + 1
        while pos < n:
            iou = _iou(work[i][0], work[pos][0], offset)
            if method == 0:
                weight = t(0) if iou >= t(iou_threshold) else t(1)
            elif method == 1:
                weight = t(1) - iou if iou >= t(iou_threshold) else t(1)
            else:
                weight = t(c_exp(-(iou * iou) / t(sigma)))
            work[pos][1] = t(work[pos][1] * weight)
            if work[pos][1] < t(min_score):
                work[pos] = work[n - 1]
                n -= 1
                continue
            pos += 1
        i += 1
    dets = np.array([[*w[0], w[1]] for w in work[:n]], boxes.dtype).reshape(-1, 5)
    return dets, np.array([w[2] for w in work[:n]], np.int64)


@cached
def nms_match(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, score_threshold: float) -> np.ndarray:
    """mmdeploy's NMSMatch, one pair at a time: rows (batch, class, kept, suppressed).

    Box arithmetic in the boxes' dtype; 1e-10 added to the union in float64 and the quotient
    rounded to float32 (the original's return type); the thresholds arrive as float32
    tensors, so their float32 values are compared. Equal scores: lower index first.
    """
    iou_limit, score_limit = np.float32(iou_threshold), float(np.float32(score_threshold))
    rows = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = sorted(range(boxes.shape[1]), key=lambda i: (-s[i], i))
            suppressed: set[int] = set()
            for rank, i in enumerate(order):
                if i in suppressed:
                    continue
                matched = []
                for j in order[rank + 1 :]:
                    if j in suppressed:
                        continue
                    a, o = boxes[b, i], boxes[b, j]
                    t = type(a[0])
                    w = max(t(0), min(a[2], o[2]) - max(a[0], o[0]))
                    h = max(t(0), min(a[3], o[3]) - max(a[1], o[1]))
                    inter = w * h
                    union = (a[2] - a[0]) * (a[3] - a[1]) + (o[2] - o[0]) * (o[3] - o[1]) - inter
                    if np.float32(float(inter) / (float(union) + 1e-10)) >= iou_limit:
                        suppressed.add(j)
                        matched.append(j)
                if float(s[i]) > score_limit:
                    rows += [[b, c, i, j] for j in matched]
    return np.array(rows, np.int64).reshape(-1, 4)


def rotated_corners(box) -> list[tuple[float, float]]:
    """Corners of (cx, cy, w, h, theta): (cx, cy) + R(theta) (+-w/2, +-h/2)."""
    cx, cy, w, h, theta = (float(v) for v in box)
    c, s = math.cos(theta), math.sin(theta)
    return [
        (cx + c * dx - s * dy, cy + s * dx + c * dy)
        for dx, dy in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))
    ]


def _inside(point, polygon) -> bool:
    """Inside or on a convex polygon of either orientation."""
    signs = []
    for i in range(len(polygon)):
        (ax, ay), (bx, by) = polygon[i], polygon[(i + 1) % len(polygon)]
        signs.append((bx - ax) * (point[1] - ay) - (by - ay) * (point[0] - ax))
    return all(s >= -1e-9 for s in signs) or all(s <= 1e-9 for s in signs)


def rotated_intersection(a, b) -> float:
    """Intersection area by another method than the kernel's: collect the edge crossings and
    the corners inside the other box, sort them by angle around their mean, shoelace."""
    pa, pb = rotated_corners(a), rotated_corners(b)
    points = [p for p in pa if _inside(p, pb)] + [p for p in pb if _inside(p, pa)]
    for i in range(4):
        p1, p2 = pa[i], pa[(i + 1) % 4]
        for j in range(4):
            q1, q2 = pb[j], pb[(j + 1) % 4]
            d = (p2[0] - p1[0]) * (q2[1] - q1[1]) - (p2[1] - p1[1]) * (q2[0] - q1[0])
            if abs(d) < 1e-15:
                continue
            t = ((q1[0] - p1[0]) * (q2[1] - q1[1]) - (q1[1] - p1[1]) * (q2[0] - q1[0])) / d
            u = ((q1[0] - p1[0]) * (p2[1] - p1[1]) - (q1[1] - p1[1]) * (p2[0] - p1[0])) / d
            if 0 <= t <= 1 and 0 <= u <= 1:
                points.append((p1[0] + t * (p2[0] - p1[0]), p1[1] + t * (p2[1] - p1[1])))
    if len(points) < 3:
        return 0.0
    mx, my = sum(p[0] for p in points) / len(points), sum(p[1] for p in points) / len(points)
    points.sort(key=lambda p: math.atan2(p[1] - my, p[0] - mx))
    return abs(sum(points[i][0] * points[i - 1][1] - points[i - 1][0] * points[i][1] for i in range(len(points)))) / 2


def rotated_iou(a, b) -> float:
    inter = rotated_intersection(a, b)
    union = float(a[2]) * float(a[3]) + float(b[2]) * float(b[3]) - inter
    return inter / union if union != 0 else float("nan")


@cached
def nms_rotated(
    boxes: np.ndarray,
    scores: np.ndarray,
    iou_threshold: float,
    score_threshold: float,
    iou: Callable[[np.ndarray, np.ndarray], float] | None = None,
) -> np.ndarray:
    """mmdeploy's NMSRotated as the spec says: rows (batch, class, box). `iou` (default
    rotated_iou) lets a test bring a rotated IoU computed another way."""
    iou = iou or rotated_iou
    iou_threshold, score_threshold = float(np.float32(iou_threshold)), float(np.float32(score_threshold))
    rows = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = sorted(range(boxes.shape[1]), key=lambda i: (-s[i], i))
            kept: list[int] = []
            for i in order:
                if all(not (iou(boxes[b, k], boxes[b, i]) > iou_threshold) for k in kept):
                    kept.append(i)
            rows += [[b, c, i] for i in kept if float(s[i]) > score_threshold]
    return np.array(rows, np.int64).reshape(-1, 3)


@cached
def deform_conv2d(x, offset, weight, bias, mask, stride, padding, dilation, groups, deform_groups) -> np.ndarray:
    """Deformable convolution as a direct loop over outputs, in float64 (torchvision's definition)."""
    n, c, h, w = x.shape
    c_out, cg, kh, kw = weight.shape
    out_h, out_w = offset.shape[2], offset.shape[3]
    x64, w64 = x.astype(np.float64), weight.astype(np.float64)

    def sample(plane, y, xx):
        if not (-1 < y < h and -1 < xx < w):
            return 0.0
        y0, x0 = math.floor(y), math.floor(xx)
        total = 0.0
        for yi, xi, wt in (
            (y0, x0, (1 - (y - y0)) * (1 - (xx - x0))),
            (y0, x0 + 1, (1 - (y - y0)) * (xx - x0)),
            (y0 + 1, x0, (y - y0) * (1 - (xx - x0))),
            (y0 + 1, x0 + 1, (y - y0) * (xx - x0)),
        ):
            if 0 <= yi < h and 0 <= xi < w:
                total += wt * plane[yi, xi]
        return total

    out = np.zeros((n, c_out, out_h, out_w))
    for b in range(n):
        for ch in range(c):
            d = ch // (c // deform_groups)
            g = ch // cg
            for i in range(kh):
                for j in range(kw):
                    k = i * kw + j
                    for oy in range(out_h):
                        for ox in range(out_w):
                            y = (
                                oy * stride[0]
                                - padding[0]
                                + i * dilation[0]
                                + float(offset[b, d * 2 * kh * kw + 2 * k, oy, ox])
                            )
                            xx = (
                                ox * stride[1]
                                - padding[1]
                                + j * dilation[1]
                                + float(offset[b, d * 2 * kh * kw + 2 * k + 1, oy, ox])
                            )
                            value = sample(x64[b, ch], y, xx)
                            if mask is not None:
                                value *= float(mask[b, d * kh * kw + k, oy, ox])
                            for o in range(g * (c_out // groups), (g + 1) * (c_out // groups)):
                                out[b, o, oy, ox] += w64[o, ch - g * cg, i, j] * value
    if bias is not None:
        out += bias.astype(np.float64)[None, :, None, None]
    return out.astype(x.dtype)
