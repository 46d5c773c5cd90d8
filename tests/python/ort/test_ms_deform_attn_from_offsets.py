"""MultiScaleDeformableAttentionFromOffsets (ortops): the locations are the reference points
plus the offsets over the level's size, as Deformable DETR's encoder computes them. Against
test_ms_deform_attn's float64 loop, and against MultiScaleDeformableAttention given the
locations that the model's own Div and Add compute (numpy, in the node's element type)."""

from __future__ import annotations

import numpy as np
import pytest
from test_ms_deform_attn import TOLERANCE, make_case, reference_per_level

from ortest import run

OP = ("ortops", "MultiScaleDeformableAttentionFromOffsets")
LOCATIONS_OP = ("ortops", "MultiScaleDeformableAttention")


def offsets_case(
    rng: np.random.Generator, dtype: type, points_per_level: list[int] | None = None, **sizes: object
) -> dict[str, np.ndarray]:
    """make_case's value and levels with reference points [B, Q, L, 2] around the map and offsets
    of a few pixels ([B, Q, H, L, P, 2], or [B, Q, H, sum(P_l), 2] with points_per_level)."""
    case = make_case(rng, dtype, **sizes)
    locations = case.pop("sampling_locations")
    weights = case.pop("attention_weights")
    batch, queries, heads, levels, points = weights.shape
    if points_per_level is not None:
        points = sum(points_per_level)
        offsets = rng.normal(0, 2, (batch, queries, heads, points, 2))
        weights = rng.uniform(0, 1, (batch, queries, heads, points))
    else:
        offsets = rng.normal(0, 2, locations.shape)
    case["reference_points"] = rng.uniform(-0.1, 1.1, (batch, queries, levels, 2)).astype(dtype)
    case["sampling_offsets"] = offsets.astype(dtype)
    case["attention_weights"] = weights.astype(dtype)
    return case


def point_levels(case: dict[str, np.ndarray], points_per_level: list[int] | None) -> list[int]:
    levels = case["value_spatial_shapes"].shape[0]
    if points_per_level is None:
        points_per_level = [case["attention_weights"].shape[4]] * levels
    return [level for level, count in enumerate(points_per_level) for _ in range(count)]


def model_locations(case: dict[str, np.ndarray], points_per_level: list[int] | None = None) -> np.ndarray:
    """reference_points[:, :, None, :, None, :] + sampling_offsets / (W_l, H_l), as the model's Div
    and Add compute it, in the offsets' element type, with the points flattened per level."""
    offsets = case["sampling_offsets"]
    dtype = offsets.dtype.type
    batch, queries, heads = offsets.shape[:3]
    flat = offsets.reshape(batch, queries, heads, -1, 2)
    level_of = point_levels(case, points_per_level)
    normalizer = case["value_spatial_shapes"][level_of][:, ::-1].astype(dtype)  # (W_l, H_l) per point
    reference = case["reference_points"][:, :, level_of][:, :, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # levels of size 0, huge offsets
        return (reference + flat / normalizer).astype(dtype)


def expected(case: dict[str, np.ndarray], points_per_level: list[int] | None = None) -> np.ndarray:
    """The float64 loop at the locations computed in float64."""
    as64 = {k: v.astype(np.float64) for k, v in case.items()}
    locations = model_locations(as64, points_per_level)
    weights = case["attention_weights"].reshape(locations.shape[:4])
    counts = points_per_level or [case["attention_weights"].shape[4]] * case["value_spatial_shapes"].shape[0]
    return reference_per_level(case["value"], case["value_spatial_shapes"], locations, weights, counts)


def attention(case: dict[str, np.ndarray], **attributes: object) -> np.ndarray:
    (out,) = run(OP[1], OP[0], case, ["output"], **attributes)
    return out


def with_locations(case: dict[str, np.ndarray], points_per_level: list[int] | None = None) -> np.ndarray:
    """MultiScaleDeformableAttention at model_locations."""
    locations = model_locations(case, points_per_level)
    inputs = {k: case[k] for k in ("value", "value_spatial_shapes", "value_level_start_index")}
    inputs["sampling_locations"] = locations.reshape(case["sampling_offsets"].shape)
    inputs["attention_weights"] = case["attention_weights"]
    attributes = {"points_per_level": points_per_level} if points_per_level else {}
    (out,) = run(LOCATIONS_OP[1], LOCATIONS_OP[0], inputs, ["output"], **attributes)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [4, 5, 32])
def test_matches_reference(dtype: type, dim: int) -> None:
    case = offsets_case(np.random.default_rng(dim), dtype, dim=dim)
    got = attention(case)
    assert got.dtype == dtype and got.shape == (2, 5, 3 * dim)
    np.testing.assert_allclose(got, expected(case), **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_is_the_model_computation_to_the_bit(dtype: type) -> None:
    """Div, Add and the attention on the result: the same roundings."""
    case = offsets_case(np.random.default_rng(1), dtype, queries=40, dim=8)
    np.testing.assert_array_equal(attention(case), with_locations(case))


@pytest.mark.parametrize("points_per_level", [[3, 6, 3], [1, 2, 1]])
def test_points_per_level(points_per_level: list[int]) -> None:
    case = offsets_case(np.random.default_rng(2), np.float32, points_per_level, dim=4)
    got = attention(case, points_per_level=points_per_level)
    np.testing.assert_array_equal(got, with_locations(case, points_per_level))
    np.testing.assert_allclose(got, expected(case, points_per_level), **TOLERANCE[np.float32])


@pytest.mark.parametrize("count", [8, 9])
def test_level_counts(count: int) -> None:
    """Up to 8 levels travel in the device kernel's arguments, more in device memory."""
    levels = tuple((2 + level % 3, 3 + level % 2) for level in range(count))
    case = offsets_case(np.random.default_rng(count), np.float32, levels=levels, dim=8, heads=2, points=2)
    np.testing.assert_array_equal(attention(case), with_locations(case))


def test_float16_is_float32_of_the_same_values_rounded_once() -> None:
    case = offsets_case(np.random.default_rng(3), np.float16, dim=32)
    got = attention(case)
    assert got.dtype == np.float16
    as_float = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in case.items()}
    np.testing.assert_array_equal(got, attention(as_float).astype(np.float16))


def test_non_finite_inputs_contribute_nothing() -> None:
    case = offsets_case(np.random.default_rng(4), np.float32)
    case["reference_points"][0, 0, 0] = [np.nan, 0.5]
    case["reference_points"][1, 2, 1] = [np.inf, 0.5]
    case["sampling_offsets"][0, 1, 1, 1, 1] = [0.5, np.inf]
    case["sampling_offsets"][1, 3, 0, 2, :] = [np.nan, np.nan]
    case["sampling_offsets"][1, 4, 0, 0, 0] = [3e38, -3e38]
    got = attention(case)
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got, with_locations(case))


def test_empty_levels_contribute_nothing() -> None:
    """A level of width or height 0 divides by 0: its points are outside, as the locations node has them."""
    case = offsets_case(np.random.default_rng(5), np.float64, levels=((0, 5), (4, 3), (2, 0)))
    got = attention(case)
    assert np.abs(got).sum() > 0
    np.testing.assert_allclose(got, expected(case), **TOLERANCE[np.float64])


@pytest.mark.parametrize(
    ("batch", "queries", "heads", "dim", "points"),
    [(0, 5, 2, 4, 3), (2, 0, 2, 4, 3), (2, 5, 0, 4, 3), (2, 5, 2, 0, 3), (2, 5, 2, 4, 0)],
)
def test_empty_dimensions(batch: int, queries: int, heads: int, dim: int, points: int) -> None:
    case = offsets_case(
        np.random.default_rng(6), np.float32, batch=batch, queries=queries, heads=heads, dim=dim, points=points
    )
    got = attention(case)
    assert got.shape == (batch, queries, heads * dim) and (got == 0).all()


def test_bad_shapes_are_errors() -> None:
    base = offsets_case(np.random.default_rng(7), np.float32)

    def error(pattern: str, **inputs: np.ndarray) -> None:
        with pytest.raises(Exception, match=rf"{OP[0]}\.{OP[1]}: {pattern}"):
            attention({**base, **inputs})

    error(
        r"input 'reference_points' must have shape \[B, Q, L, 2\] = \[2, 5, 3, 2\] .*got \[2, 5, 2, 2\]",
        reference_points=base["reference_points"][:, :, :2],
    )
    error(
        r"input 'reference_points' must have shape \[B, Q, L, 2\] = \[2, 5, 3, 2\] .*got \[1, 5, 3, 2\]",
        reference_points=base["reference_points"][:1],
    )
    error(r".*reference_points.*rank", reference_points=base["reference_points"][0])
    error(
        r"input 'sampling_offsets' must have shape \[B, Q, H, L, P, 2\] with B = 2, H = 3 .* and L = 3, "
        r"got \[2, 5, 2, 3, 4, 2\]",
        sampling_offsets=base["sampling_offsets"][:, :, :2],
    )
    error(
        r"input 'attention_weights' must have shape \[2, 5, 3, 3, 4\] \(\[B, Q, H, L, P\] of 'sampling_offsets'\)",
        attention_weights=base["attention_weights"][..., :3],
    )
