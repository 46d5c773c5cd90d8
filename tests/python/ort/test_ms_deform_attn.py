"""MultiScaleDeformableAttention (ortops) and MMCVMultiScaleDeformableAttention (mmdeploy)
against a slow float64 loop written here (mmcv's CUDA kernel, point by point)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from references import cached

import ortops

from ortest import exported_model, make_model, run, session

DOMAINS = [("ortops", "MultiScaleDeformableAttention"), ("mmdeploy", "MMCVMultiScaleDeformableAttention")]
NAMES = ["value", "value_spatial_shapes", "value_level_start_index", "sampling_locations", "attention_weights"]
# The reference is float64; float32 results carry float32 rounding of the pixel coordinates,
# the bilinear weights and a sum of L * P * 4 products.
TOLERANCE = {np.float32: {"rtol": 1e-5, "atol": 1e-5}, np.float64: {"rtol": 1e-12, "atol": 1e-12}}


@cached
def reference_per_level(
    value: np.ndarray, shapes: np.ndarray, locations: np.ndarray, weights: np.ndarray, points_per_level: list[int]
) -> np.ndarray:
    """Point by point, in float64: bilinear samples with zero padding, weighted and summed.
    ``locations`` [B, Q, H, sum(P_l), 2] and ``weights`` [B, Q, H, sum(P_l)] hold level l's points
    as the l-th run of P_l. A non-finite location contributes nothing."""
    value, locations, weights = (a.astype(np.float64) for a in (value, locations, weights))
    batch, _, heads, dim = value.shape
    queries = locations.shape[1]
    starts = np.concatenate([[0], np.cumsum([h * w for h, w in shapes])]).astype(int)
    level_of_point = [level for level, count in enumerate(points_per_level) for _ in range(count)]
    out = np.zeros((batch, queries, heads, dim))
    for b, q, h, point in np.ndindex(batch, queries, heads, len(level_of_point)):
        level = level_of_point[point]
        height, width = (int(v) for v in shapes[level])
        x = locations[b, q, h, point, 0] * width - 0.5
        y = locations[b, q, h, point, 1] * height - 0.5
        if not (-1 < y < height and -1 < x < width):  # NaN fails too
            continue
        y0, x0 = math.floor(y), math.floor(x)
        sample = np.zeros(dim)
        for yy, xx in ((y0, x0), (y0, x0 + 1), (y0 + 1, x0), (y0 + 1, x0 + 1)):
            if 0 <= yy < height and 0 <= xx < width:
                weight = (1 - abs(y - yy)) * (1 - abs(x - xx))
                sample += weight * value[b, starts[level] + yy * width + xx, h]
        out[b, q, h] += weights[b, q, h, point] * sample
    return out.reshape(batch, queries, heads * dim)


def reference(value: np.ndarray, shapes: np.ndarray, locations: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The reference for one P per level: [B, Q, H, L, P, ...] is L runs of P points."""
    batch, queries, heads, levels, points, _ = locations.shape
    flat = (batch, queries, heads, levels * points)
    return reference_per_level(value, shapes, locations.reshape(*flat, 2), weights.reshape(flat), [points] * levels)


def make_case(
    rng: np.random.Generator,
    dtype: type,
    levels: tuple[tuple[int, int], ...] = ((6, 7), (3, 4), (2, 2)),
    batch: int = 2,
    queries: int = 5,
    heads: int = 3,
    dim: int = 4,
    points: int = 4,
) -> dict[str, np.ndarray]:
    shapes = np.array(levels, np.int64).reshape(-1, 2)
    areas = shapes.prod(1)
    starts = (np.cumsum(areas) - areas).astype(np.int64)
    keys = int(areas.sum())
    value = rng.normal(size=(batch, keys, heads, dim))
    # Around the map and a little outside it, where padding matters.
    locations = rng.uniform(-0.15, 1.15, (batch, queries, heads, len(shapes), points, 2))
    if locations.size:
        # Exact edges and pixel centres of the first level.
        h0, w0 = levels[0]
        locations[0, 0, 0, 0, :3] = [[0, 0], [1, 1], [0.5 / max(w0, 1), 0.5 / max(h0, 1)]][: min(3, points)]
    weights = rng.uniform(0, 1, (batch, queries, heads, len(shapes), points))
    return dict(zip(NAMES, (value.astype(dtype), shapes, starts, locations.astype(dtype), weights.astype(dtype))))


def expected(case: dict[str, np.ndarray]) -> np.ndarray:
    return reference(case["value"], case["value_spatial_shapes"], case["sampling_locations"], case["attention_weights"])


def attention(domain: str, op: str, case: dict[str, np.ndarray], threads: int = 0, **attributes) -> np.ndarray:
    (out,) = run(op, domain, case, ["output"], threads=threads, **attributes)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("domain", "op"), DOMAINS)
def test_matches_reference(dtype: type, domain: str, op: str) -> None:
    case = make_case(np.random.default_rng(0), dtype)
    got = attention(domain, op, case)
    assert got.dtype == dtype and got.shape == (2, 5, 12)
    np.testing.assert_allclose(got, expected(case), **TOLERANCE[dtype])


@pytest.mark.parametrize("dim", [1, 5, 16, 32, 64, 33])
def test_every_channel_count(dim: int) -> None:
    """D of 16, 32 and 64 sum in registers, the others in scratch memory."""
    case = make_case(np.random.default_rng(dim), np.float32, dim=dim, heads=2, queries=7)
    np.testing.assert_allclose(attention(*DOMAINS[0], case), expected(case), **TOLERANCE[np.float32])


@pytest.mark.parametrize("count", [7, 8, 9, 12])
def test_level_counts(count: int) -> None:
    """The device path takes up to 8 levels in its kernel's arguments, more from device memory."""
    levels = tuple((2 + level % 3, 3 + level % 2) for level in range(count))
    case = make_case(np.random.default_rng(count), np.float32, levels=levels, dim=8, heads=2, points=2)
    np.testing.assert_allclose(attention(*DOMAINS[0], case), expected(case), **TOLERANCE[np.float32])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_counts_agree(threads: int) -> None:
    case = make_case(np.random.default_rng(1), np.float32, batch=3, queries=300, heads=2, dim=8, points=2)
    np.testing.assert_allclose(attention(*DOMAINS[0], case, threads=threads), expected(case), **TOLERANCE[np.float32])


def test_float16_is_float32_of_the_same_values_rounded_once() -> None:
    case = make_case(np.random.default_rng(2), np.float16, dim=32)
    got = attention(*DOMAINS[0], case)
    assert got.dtype == np.float16
    as_float = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in case.items()}
    np.testing.assert_array_equal(got, attention(*DOMAINS[0], as_float).astype(np.float16))
    np.testing.assert_allclose(got, expected(case), rtol=2e-3, atol=2e-3)


def test_sampling_rule_at_edges_and_pixel_centres() -> None:
    """A 2 x 2 map of 1, 2 / 3, 4: centres read their pixel, the outer edge reads half of the
    edge pixels (zero padding), a point a whole pixel outside reads 0."""
    value = np.array([1, 2, 3, 4], np.float64).reshape(1, 4, 1, 1)
    points = [(0.25, 0.25), (0.75, 0.75), (0.5, 0.5), (0.0, 0.25), (1.0, 0.75), (-0.25, 0.5), (0.5, 1.25)]
    locations = np.array(points, np.float64).reshape(1, 1, 1, 1, len(points), 2)
    weights = np.zeros((1, 1, 1, 1, len(points)))
    case = dict(zip(NAMES, (value, np.array([[2, 2]], np.int64), np.array([0], np.int64), locations, weights)))
    got = []
    for i in range(len(points)):
        case["attention_weights"] = np.eye(len(points))[i].reshape(weights.shape)
        got.append(attention(*DOMAINS[0], case).item())
    np.testing.assert_allclose(got, [1, 4, 2.5, 0.5, 2, 0, 0], atol=1e-15)


@pytest.mark.parametrize(("domain", "op"), DOMAINS)
def test_non_finite_locations_contribute_nothing(domain: str, op: str) -> None:
    case = make_case(np.random.default_rng(3), np.float32)
    locations = case["sampling_locations"]
    locations[0, 0, 0, 0, 0] = [np.nan, 0.5]
    locations[0, 1, 1, 1, 1] = [0.5, np.inf]
    locations[1, 2, 2, 2, 2] = [-np.inf, -np.inf]
    locations[1, 3, 0, 0, :] = [np.nan, np.nan]
    locations[1, 4, 0, 1, 0] = [3e38, -3e38]
    got = attention(domain, op, case)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected(case), **TOLERANCE[np.float32])


@pytest.mark.parametrize(
    ("batch", "queries", "heads", "dim", "points"),
    [(0, 5, 2, 4, 3), (2, 0, 2, 4, 3), (2, 5, 0, 4, 3), (2, 5, 2, 0, 3), (2, 5, 2, 4, 0)],
)
def test_empty_dimensions(batch: int, queries: int, heads: int, dim: int, points: int) -> None:
    case = make_case(
        np.random.default_rng(4), np.float32, batch=batch, queries=queries, heads=heads, dim=dim, points=points
    )
    got = attention(*DOMAINS[0], case)
    assert got.shape == (batch, queries, heads * dim)
    assert (got == 0).all()


def test_no_levels_gives_zeros() -> None:
    case = make_case(np.random.default_rng(5), np.float32, levels=())
    assert case["value"].shape == (2, 0, 3, 4)
    got = attention(*DOMAINS[1], case)
    assert got.shape == (2, 5, 12) and (got == 0).all()


def test_empty_levels_contribute_nothing() -> None:
    case = make_case(np.random.default_rng(6), np.float64, levels=((0, 5), (4, 3), (2, 0), (0, 0)))
    got = attention(*DOMAINS[0], case)
    assert np.abs(got).sum() > 0
    np.testing.assert_allclose(got, expected(case), **TOLERANCE[np.float64])
    only = {k: v.copy() for k, v in case.items()}
    only["attention_weights"][:, :, :, [0, 2, 3]] = 1e30  # the empty levels' weights are never used
    np.testing.assert_allclose(attention(*DOMAINS[0], only), got, **TOLERANCE[np.float64])


def _error(domain: str, op: str, case: dict[str, np.ndarray], pattern: str) -> None:
    with pytest.raises(Exception, match=rf"{domain}\.{op}: {pattern}"):
        attention(domain, op, case)


@pytest.mark.parametrize(("domain", "op"), DOMAINS)
def test_inconsistent_levels_are_errors(domain: str, op: str) -> None:
    base = make_case(np.random.default_rng(7), np.float32)  # levels (6, 7), (3, 4), (2, 2): S = 58

    def changed(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        return {**base, **inputs}

    _error(
        domain,
        op,
        changed(
            value_spatial_shapes=np.array([[6, 7], [3, 4], [2, 3]], np.int64),
            value_level_start_index=np.array([0, 42, 54], np.int64),
        ),
        r"input 'value' \[2, 58, 3, 4\] has S = 58, but the levels of 'value_spatial_shapes' hold 60",
    )
    _error(
        domain,
        op,
        changed(value_level_start_index=np.array([0, 42, 53], np.int64)),
        r"input 'value_level_start_index' must hold the running sums .*level 2 starts at 54, got 53",
    )
    _error(
        domain,
        op,
        changed(value_spatial_shapes=np.array([[6, 7], [-3, 4], [2, 2]], np.int64)),
        r"input 'value_spatial_shapes' must hold non-negative \(H_l, W_l\), got \(-3, 4\) at level 1",
    )
    huge = 1 << 61
    _error(
        domain,
        op,
        changed(value_spatial_shapes=np.array([[6, 7], [huge, 4], [2, 2]], np.int64)),
        r"input 'value_spatial_shapes': the levels' sizes overflow int64 at level 1",
    )
    _error(
        domain,
        op,
        changed(value_spatial_shapes=np.array([[6, 7], [huge, 2], [huge, 2]], np.int64)),
        r"input 'value_spatial_shapes': the levels' sizes overflow int64 at level 2",
    )


@pytest.mark.parametrize(("domain", "op"), DOMAINS)
def test_bad_shapes_are_errors(domain: str, op: str) -> None:
    base = make_case(np.random.default_rng(8), np.float32)
    _error(
        domain,
        op,
        {**base, "value_spatial_shapes": np.array([[6, 7, 1]], np.int64)},
        r"input 'value_spatial_shapes' must have shape \[L, 2\], got \[1, 3\]",
    )
    _error(
        domain,
        op,
        {**base, "value_level_start_index": np.array([0, 42], np.int64)},
        r"input 'value_level_start_index' must have shape \[L\] with L = 3 .*got \[2\]",
    )
    _error(
        domain,
        op,
        {**base, "sampling_locations": base["sampling_locations"][:, :, :2]},
        r"input 'sampling_locations' must have shape \[B, Q, H, L, P, 2\] with B = 2, H = 3 .* and L = 3, "
        r"got \[2, 5, 2, 3, 4, 2\]",
    )
    _error(
        domain,
        op,
        {**base, "attention_weights": base["attention_weights"][..., :3]},
        r"input 'attention_weights' must have shape \[2, 5, 3, 3, 4\] .*got \[2, 5, 3, 3, 3\]",
    )
    _error(domain, op, {**base, "value": base["value"][0]}, r".*value.*rank")


def test_int32_index_inputs_are_refused_when_the_model_loads() -> None:
    """mmdeploy's files hold int64 shapes (int32 is TensorRT's cast, inside the engine)."""
    case = make_case(np.random.default_rng(9), np.float32)
    case["value_spatial_shapes"] = case["value_spatial_shapes"].astype(np.int32)
    with pytest.raises(Exception, match=r"tensor\(int32\).*value_spatial_shapes"):
        attention(*DOMAINS[1], case)


def _mmdeploy_file(case: dict[str, np.ndarray], im2col_step: onnx.AttributeProto | None) -> onnx.ModelProto:
    """A file as mmdeploy's exporter writes it (TorchScript, opset 11): the node with its
    im2col_step int attribute; here the level shapes and start index are constants of the
    graph, as in an exported detector."""
    names = ["value", "spatial_shapes", "level_start_index", "sampling_locations", "attention_weights"]
    node = helper.make_node("MMCVMultiScaleDeformableAttention", names, ["output"], domain="mmdeploy")
    if im2col_step is not None:
        node.attribute.append(im2col_step)
    constants = [
        helper.make_node(
            "Constant",
            [],
            ["spatial_shapes"],
            value=helper.make_tensor(
                "s", TensorProto.INT64, case["value_spatial_shapes"].shape, case["value_spatial_shapes"].ravel()
            ),
        ),
        helper.make_node(
            "Constant",
            [],
            ["level_start_index"],
            value=helper.make_tensor(
                "i", TensorProto.INT64, case["value_level_start_index"].shape, case["value_level_start_index"]
            ),
        ),
    ]
    float_input = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch"] + [None] * (case[key].ndim - 1))
        for name, key in (
            ("value", "value"),
            ("sampling_locations", "sampling_locations"),
            ("attention_weights", "attention_weights"),
        )
    ]
    graph = helper.make_graph(
        [*constants, node],
        "msda",
        float_input,
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", None, None])],
    )
    return exported_model(graph, "mmdeploy")


def test_a_file_as_mmdeploy_writes_it() -> None:
    case = make_case(np.random.default_rng(10), np.float32, batch=2, queries=9, heads=8, dim=32)
    model = _mmdeploy_file(case, helper.make_attribute("im2col_step", 64))
    onnx.checker.check_model(model)
    feeds = {k: case[k] for k in ("value", "sampling_locations", "attention_weights")}
    (got,) = session(model).run(None, feeds)
    np.testing.assert_allclose(got, expected(case), **TOLERANCE[np.float32])
    # im2col_step is ignored: any value, or none.
    for step in (helper.make_attribute("im2col_step", 7), None):
        (again,) = session(_mmdeploy_file(case, step)).run(None, feeds)
        np.testing.assert_array_equal(again, got)


def test_im2col_step_of_another_type_is_an_error() -> None:
    case = make_case(np.random.default_rng(11), np.float32)
    model = _mmdeploy_file(case, helper.make_attribute("im2col_step", 64.0))
    with pytest.raises(Exception, match=r"mmdeploy\.MMCVMultiScaleDeformableAttention: .*im2col_step"):
        session(model).run(None, {k: case[k] for k in ("value", "sampling_locations", "attention_weights")})


def test_both_nodes_are_registered() -> None:
    names = {(op.domain, op.name) for op in ortops.ops()}
    assert set(DOMAINS) <= names


# A different number of points per level (ortops' node, attribute points_per_level): the
# points in [B, Q, H, sum(P_l), ...], level after level.


def make_per_level_case(
    rng: np.random.Generator,
    dtype: type,
    points_per_level: list[int],
    levels: tuple[tuple[int, int], ...] = ((6, 7), (3, 4), (2, 2)),
    dim: int = 4,
) -> dict[str, np.ndarray]:
    """A case of make_case's value and levels with sum(P_l) points per query and head."""
    case = make_case(rng, dtype, levels=levels, dim=dim, points=1)
    batch, queries, heads = case["attention_weights"].shape[:3]
    total = sum(points_per_level)
    case["sampling_locations"] = rng.uniform(-0.15, 1.15, (batch, queries, heads, total, 2)).astype(dtype)
    case["attention_weights"] = rng.uniform(0, 1, (batch, queries, heads, total)).astype(dtype)
    return case


def expected_per_level(case: dict[str, np.ndarray], points_per_level: list[int]) -> np.ndarray:
    return reference_per_level(
        case["value"],
        case["value_spatial_shapes"],
        case["sampling_locations"],
        case["attention_weights"],
        points_per_level,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("points_per_level", [[3, 6, 3], [1, 1, 1], [7, 2, 1]])
@pytest.mark.parametrize("dim", [4, 5])  # the device path: four channels per thread, or one
def test_points_per_level_matches_reference(dtype: type, points_per_level: list[int], dim: int) -> None:
    case = make_per_level_case(np.random.default_rng(sum(points_per_level) + dim), dtype, points_per_level, dim=dim)
    got = attention(*DOMAINS[0], case, points_per_level=points_per_level)
    assert got.dtype == dtype and got.shape == (2, 5, 3 * dim)
    np.testing.assert_allclose(got, expected_per_level(case, points_per_level), **TOLERANCE[dtype])


@pytest.mark.parametrize("count", [8, 9])
def test_points_per_level_with_many_levels(count: int) -> None:
    """Up to 8 levels travel in the device kernel's arguments, more in device memory."""
    levels = tuple((2 + level % 3, 3 + level % 2) for level in range(count))
    points_per_level = [1 + level % 4 for level in range(count)]
    case = make_per_level_case(np.random.default_rng(count), np.float32, points_per_level, levels=levels, dim=8)
    got = attention(*DOMAINS[0], case, points_per_level=points_per_level)
    np.testing.assert_allclose(got, expected_per_level(case, points_per_level), **TOLERANCE[np.float32])


def test_equal_points_per_level_is_the_uniform_node() -> None:
    """P_l all equal to P: the flattened layout gives the bits of [B, Q, H, L, P] without it."""
    case = make_case(np.random.default_rng(12), np.float32)
    uniform = attention(*DOMAINS[0], case)
    batch, queries, heads, levels, points = case["attention_weights"].shape
    flat = (batch, queries, heads, levels * points)
    flattened = {
        **case,
        "sampling_locations": case["sampling_locations"].reshape(*flat, 2),
        "attention_weights": case["attention_weights"].reshape(flat),
    }
    np.testing.assert_array_equal(attention(*DOMAINS[0], flattened, points_per_level=[points] * levels), uniform)
    # An empty list is the default: one P per level, from the shapes.
    model = make_model(DOMAINS[0][1], DOMAINS[0][0], [(k, v.dtype, v.ndim) for k, v in case.items()], ["output"])
    (node,) = model.graph.node
    node.attribute.append(helper.make_attribute("points_per_level", [], attr_type=onnx.AttributeProto.INTS))
    np.testing.assert_array_equal(session(model).run(None, case)[0], uniform)


def test_points_per_level_in_float16_is_float32_rounded_once() -> None:
    case = make_per_level_case(np.random.default_rng(13), np.float16, [3, 6, 3], dim=32)
    got = attention(*DOMAINS[0], case, points_per_level=[3, 6, 3])
    as_float = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in case.items()}
    np.testing.assert_array_equal(got, attention(*DOMAINS[0], as_float, points_per_level=[3, 6, 3]).astype(np.float16))
    np.testing.assert_allclose(got, expected_per_level(case, [3, 6, 3]), rtol=2e-3, atol=2e-3)


def test_points_per_level_errors() -> None:
    base = make_per_level_case(np.random.default_rng(14), np.float32, [3, 6, 3])
    domain, op = DOMAINS[0]

    def error(pattern: str, points_per_level: list[int], **inputs: np.ndarray) -> None:
        with pytest.raises(Exception, match=rf"{domain}\.{op}: {pattern}"):
            attention(domain, op, {**base, **inputs}, points_per_level=points_per_level)

    error(r"attribute 'points_per_level' must hold at least 1 point per level, got 0 at level 1", [3, 0, 3])
    error(r"attribute 'points_per_level' must hold at least 1 point per level, got -2 at level 0", [-2, 6, 8])
    error(r"attribute 'points_per_level': the sum overflows int64", [1 << 62, 1 << 62, 1])
    error(
        r"attribute 'points_per_level' has 2 entries, but 'value_spatial_shapes' \[3, 2\] has L = 3 levels",
        [6, 6],
    )
    error(
        r"input 'sampling_locations' must have shape \[B, Q, H, sum\(P_l\), 2\] with B = 2, H = 3 .* "
        r"and sum\(P_l\) = 13 \(of 'points_per_level'\), got \[2, 5, 3, 12, 2\]",
        [3, 6, 4],
    )
    error(
        r"input 'attention_weights' must have shape \[2, 5, 3, 12\] \(\[B, Q, H, sum\(P_l\)\] .*got \[2, 5, 3, 11\]",
        [3, 6, 3],
        attention_weights=base["attention_weights"][..., :11],
    )
    uniform = make_case(np.random.default_rng(15), np.float32)  # [B, Q, H, L, P, 2] with the attribute
    with pytest.raises(Exception, match=rf"{domain}\.{op}: .*sampling_locations.*rank"):
        attention(domain, op, uniform, points_per_level=[4, 4, 4])
