"""cummax / cummin (mmcv) and CumMax / CumMin (ortops) against the loop in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references

from ortest import run

OPS = [("mmcv", "cummax", True), ("mmcv", "cummin", False), ("ortops", "CumMax", True), ("ortops", "CumMin", False)]


def data(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    x = rng.integers(-3, 4, shape).astype(dtype)  # few distinct values: many ties
    if np.issubdtype(dtype, np.floating) and x.size > 4:
        flat = x.reshape(-1)
        flat[rng.integers(0, x.size, 3)] = [np.nan, np.inf, -np.inf]
    return x


@pytest.mark.parametrize("domain,op,largest", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 3, 4), (2, 1, 3, 5)])
def test_matches_reference_on_every_dim(domain, op, largest, dtype, shape) -> None:
    x = data(np.random.default_rng(len(shape)), shape, dtype)
    for dim in range(-max(len(shape), 1), max(len(shape), 1)):
        values, indices = run(op, domain, {"input": x}, ["values", "indices"], dim=dim)
        expected_values, expected_indices = references.cumulative_extreme(x, dim, largest)
        assert values.dtype == dtype and indices.dtype == np.int64
        np.testing.assert_array_equal(values, expected_values)
        np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize("domain,op,largest", OPS)
def test_nan_and_ties(domain, op, largest) -> None:
    x = np.array([1.0, 1.0, np.nan, 2.0, np.nan, 0.0], np.float32)
    values, indices = run(op, domain, {"input": x}, ["values", "indices"], dim=0)
    np.testing.assert_array_equal(values, [1.0, 1.0, np.nan, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(indices, [0, 1, 2, 2, 4, 4])


@pytest.mark.parametrize("shape,dim", [((0,), 0), ((3, 0), 0), ((0, 4), 1)])
def test_empty(shape, dim) -> None:
    values, indices = run("cummax", "mmcv", {"input": np.zeros(shape, np.float32)}, ["values", "indices"], dim=dim)
    assert values.shape == shape and indices.shape == shape


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    x = data(np.random.default_rng(3), (4, 300, 50), np.float32)
    for dim in (0, 1, 2):
        values, indices = run("CumMax", "ortops", {"input": x}, ["values", "indices"], threads=threads, dim=dim)
        expected_values, expected_indices = references.cumulative_extreme(x, dim, True)
        np.testing.assert_array_equal(values, expected_values)
        np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize("domain,op,largest", OPS)
def test_dim_out_of_range_is_an_error(domain, op, largest) -> None:
    with pytest.raises(
        Exception, match=r"attribute 'dim' = 2 is out of range for input 'input' of rank 2 \(shape \[3, 4\]\)"
    ):
        run(op, domain, {"input": np.zeros((3, 4), np.float32)}, ["values", "indices"], dim=2)
    with pytest.raises(Exception, match=r"attribute 'dim' = -2 is out of range .* rank 0"):
        run(op, domain, {"input": np.zeros((), np.float32)}, ["values", "indices"], dim=-2)
