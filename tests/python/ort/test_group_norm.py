"""GroupNorm against a float64 loop per group written here from the definition."""

from __future__ import annotations

import numpy as np
import pytest

from ortest import run

TOLERANCE = {np.float32: {"rtol": 1e-5, "atol": 1e-5}, np.float64: {"rtol": 1e-12, "atol": 1e-12}}


def reference_group_norm(x: np.ndarray, groups: int, scale: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    n, c = x.shape[:2]
    out = np.empty(x.shape, np.float64)
    per_group = c // groups
    for i in range(n):
        for g in range(groups):
            block = x[i, g * per_group : (g + 1) * per_group].astype(np.float64)
            mean = block.sum() / block.size if block.size else 0.0
            var = ((block - mean) ** 2).sum() / block.size if block.size else 0.0
            for k in range(per_group):
                ch = g * per_group + k
                gamma, beta = float(scale[ch]), float(bias[ch])
                out[i, ch] = (block[k] - mean) / np.sqrt(var + eps) * gamma + beta
    return out.astype(x.dtype)


def case(shape: tuple[int, ...], dtype: type, seed: int = 0, offset: float = 0.0):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=shape) * 2 + offset).astype(dtype)
    c = shape[1]
    return x, (rng.random(c) + 0.5).astype(dtype), rng.normal(size=c).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 6), (1, 6, 7), (3, 6, 4, 5), (2, 6, 2, 3, 2)])
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_matches_reference(dtype: type, shape: tuple[int, ...], groups: int) -> None:
    x, scale, bias = case(shape, dtype)
    (got,) = run("GroupNorm", "ortops", {"X": x, "scale": scale, "bias": bias}, num_groups=groups, epsilon=1e-5)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, reference_group_norm(x, groups, scale, bias, 1e-5), **TOLERANCE[dtype])


# Group sizes below, at and around multiples of the kernel's 32 partial sums, and large ones
# (the statistics are summed in 32 interleaved chains, then the chains' tails).
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spatial", [31, 32, 33, 64, 95, 4097])
def test_group_sizes_around_the_partial_sums(dtype: type, spatial: int) -> None:
    x, scale, bias = case((2, 4, spatial), dtype, seed=spatial, offset=3.0)
    for groups in (1, 4):
        (got,) = run("GroupNorm", "ortops", {"X": x, "scale": scale, "bias": bias}, num_groups=groups, epsilon=1e-5)
        np.testing.assert_allclose(got, reference_group_norm(x, groups, scale, bias, 1e-5), **TOLERANCE[dtype])


def test_large_offset_keeps_precision() -> None:
    x, scale, bias = case((2, 4, 16, 16), np.float32, offset=1e4)
    (got,) = run("GroupNorm", "ortops", {"X": x, "scale": scale, "bias": bias}, num_groups=2, epsilon=1e-5)
    np.testing.assert_allclose(got, reference_group_norm(x, 2, scale, bias, 1e-5), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    x, scale, bias = case((4, 32, 9, 9), np.float32)
    (got,) = run("GroupNorm", "ortops", {"X": x, "scale": scale, "bias": bias}, threads=threads, num_groups=8)
    np.testing.assert_allclose(got, reference_group_norm(x, 8, scale, bias, 1e-5), **TOLERANCE[np.float32])


@pytest.mark.parametrize("shape", [(0, 4, 3, 3), (2, 4, 0, 3), (2, 0, 5)])
def test_empty(shape: tuple[int, ...]) -> None:
    x = np.zeros(shape, np.float32)
    c = np.ones(shape[1], np.float32)
    (got,) = run("GroupNorm", "ortops", {"X": x, "scale": c, "bias": c}, num_groups=2)
    assert got.shape == shape


def test_nan_propagates_to_its_group_only() -> None:
    x, scale, bias = case((1, 4, 3), np.float32)
    x[0, 0, 1] = np.nan
    (got,) = run("GroupNorm", "ortops", {"X": x, "scale": scale, "bias": bias}, num_groups=2)
    assert np.isnan(got[0, :2]).all() and np.isfinite(got[0, 2:]).all()


@pytest.mark.parametrize(
    "shape,groups,scale_shape,message",
    [
        ((2, 6, 3), 4, (6,), r"C = 6 channels, not divisible by num_groups = 4"),
        ((2, 6, 3), 2, (5,), r"input 'scale' must have shape \[C\] = \[6\], got \[5\]"),
        ((6,), 2, (6,), r"rank 2 or more \(\[N, C, \.\.\.\]\), got shape \[6\]"),
        ((2, 6, 3), 0, (6,), r"attribute 'num_groups' must be at least 1, got 0"),
    ],
)
def test_bad_input_is_an_error(shape, groups, scale_shape, message) -> None:
    with pytest.raises(Exception, match=r"ortops\.GroupNorm: .*" + message):
        feeds = {"X": np.zeros(shape, np.float32), "scale": np.ones(scale_shape, np.float32)}
        run("GroupNorm", "ortops", {**feeds, "bias": np.ones(scale_shape, np.float32)}, num_groups=groups)


def small(dtype: type = np.float32) -> dict[str, np.ndarray]:
    return {"X": np.zeros((1, 2, 2), dtype), "scale": np.ones(2, dtype), "bias": np.zeros(2, dtype)}


def test_missing_num_groups_is_an_error() -> None:
    with pytest.raises(Exception, match=r"attribute 'num_groups' \(int\) is required"):
        run("GroupNorm", "ortops", small())


def test_negative_epsilon_is_an_error() -> None:
    with pytest.raises(Exception, match="attribute 'epsilon' must be finite and >= 0"):
        run("GroupNorm", "ortops", small(), num_groups=1, epsilon=-1.0)


def test_wrong_dtype_is_an_error() -> None:
    with pytest.raises(Exception, match="GroupNorm"):
        run("GroupNorm", "ortops", small(np.int64), num_groups=1)
