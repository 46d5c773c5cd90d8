"""grid_sampler (mmcv, mmdeploy) and GridSample (ortops) against the float64 loop in references.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
import references

from ortest import run

DOMAINS = [("mmcv", "grid_sampler"), ("mmdeploy", "grid_sampler"), ("ortops", "GridSample")]
MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}
# The reference is float64; float32 results carry float32 rounding of coordinates and sums.
TOLERANCE = {np.float32: {"rtol": 1e-4, "atol": 1e-4}, np.float64: {"rtol": 1e-10, "atol": 1e-10}}


def sample(op: str, domain: str, features: np.ndarray, grid: np.ndarray, **attributes: object) -> list[np.ndarray]:
    """Runs the node on `features` and `grid` (attributes: the node's, and run's threads)."""
    return run(op, domain, {"input": features, "grid": grid}, ["output"], **attributes)


def make_case(
    rng: np.random.Generator, dtype: type, n: int = 2, c: int = 3, h: int = 5, w: int = 7, out: tuple = (4, 6)
):
    features = rng.normal(size=(n, c, h, w)).astype(dtype)
    grid = rng.uniform(-1.6, 1.6, (n, *out, 2))
    # Exact edges, pixel centres and half-way points, where rounding and padding rules matter.
    grid[0, 0, :3] = [[-1, -1], [1, 1], [0, 0]]
    grid[0, 1, :2] = [[1 / w, -1 / h], [-1 + 1 / w, 1 - 1 / h]]
    return features, grid.astype(dtype)


def attrs(mode: str, padding: str, align: int) -> dict:
    return dict(interpolation_mode=MODES[mode], padding_mode=PADDINGS[padding], align_corners=align)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("padding", list(PADDINGS))
@pytest.mark.parametrize("align", [0, 1])
def test_matches_reference(dtype, mode, padding, align) -> None:
    features, grid = make_case(np.random.default_rng(MODES[mode] * 6 + PADDINGS[padding] * 2 + align), dtype)
    (got,) = sample("GridSample", "ortops", features, grid, **attrs(mode, padding, align))
    expected = references.grid_sample(features, grid, mode, padding, bool(align))
    assert got.dtype == dtype
    np.testing.assert_allclose(got, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_compat_nodes_as_exported(domain, op) -> None:
    """mmcv's and mmdeploy's symbolic wrote the three attributes as ints."""
    features, grid = make_case(np.random.default_rng(9), np.float32)
    (got,) = sample(op, domain, features, grid, interpolation_mode=0, padding_mode=0, align_corners=0)
    np.testing.assert_allclose(
        got, references.grid_sample(features, grid, "bilinear", "zeros", False), **TOLERANCE[np.float32]
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    features, grid = make_case(np.random.default_rng(2), np.float32, n=2, c=4, h=9, w=8, out=(11, 10))
    (got,) = sample("GridSample", "ortops", features, grid, threads=threads)
    np.testing.assert_allclose(
        got, references.grid_sample(features, grid, "bilinear", "zeros", False), **TOLERANCE[np.float32]
    )


@pytest.mark.parametrize("mode", list(MODES))
def test_non_finite_grid_points(mode: str) -> None:
    features = np.ones((1, 1, 3, 3), np.float32)
    grid = np.array([[[[np.nan, 0], [np.inf, 0], [0, -np.inf], [1e30, 1e30]]]], np.float32)
    (zeros,) = sample("GridSample", "ortops", features, grid, **attrs(mode, "zeros", 0))
    assert np.isnan(zeros[0, 0, 0, 0]) and (zeros[0, 0, 0, 1:] == 0).all()
    (border,) = sample("GridSample", "ortops", features, grid, **attrs(mode, "border", 0))
    assert np.isnan(border[0, 0, 0, 0]) and np.isfinite(border[0, 0, 0, 1:]).all()


@pytest.mark.parametrize("shape", [(0, 2, 3, 3), (1, 0, 3, 3)])
def test_empty_batch_or_channels(shape) -> None:
    grid = np.zeros((shape[0], 2, 2, 2), np.float32)
    (got,) = sample("GridSample", "ortops", np.zeros(shape, np.float32), grid)
    assert got.shape == (shape[0], shape[1], 2, 2)


def test_empty_output_grid() -> None:
    (got,) = sample("GridSample", "ortops", np.ones((1, 2, 3, 3), np.float32), np.zeros((1, 0, 4, 2), np.float32))
    assert got.shape == (1, 2, 0, 4)


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_input_is_an_error(domain, op) -> None:
    features = np.zeros((2, 1, 3, 3), np.float32)
    with pytest.raises(
        Exception,
        match=rf"{domain}\.{op}: input 'grid' must have shape \[N, H_out, W_out, 2\] with N = 2, got \[1, 2, 2, 2\]",
    ):
        sample(op, domain, features, np.zeros((1, 2, 2, 2), np.float32))
    with pytest.raises(
        Exception, match=r"attribute 'padding_mode' must be 0 \(zeros\), 1 \(border\) or 2 \(reflection\), got 5"
    ):
        sample(op, domain, features, np.zeros((2, 2, 2, 2), np.float32), padding_mode=5)
    with pytest.raises(Exception, match=r"empty map"):
        sample(op, domain, np.zeros((2, 1, 0, 3), np.float32), np.zeros((2, 2, 2, 2), np.float32))


def sample_in_small_grids(features: np.ndarray, grid: np.ndarray, points: int, **a) -> np.ndarray:
    """The grid's points `points` at a time (as [N, 1, points, 2] grids): fewer points than a
    quarter of the map's pixels, so the planar loop (no channels-last copy: the CPU kernel
    copies from half the pixels on, the device path from a quarter)."""
    n, c = features.shape[:2]
    flat = grid.reshape(n, 1, -1, 2)
    parts = [
        sample("GridSample", "ortops", features, flat[:, :, s : s + points], **a)[0]
        for s in range(0, flat.shape[2], points)
    ]
    return np.concatenate(parts, axis=3).reshape(n, c, *grid.shape[1:3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", list(PADDINGS))
@pytest.mark.parametrize("channels", [1, 3, 4, 5, 17, 33, 70])
def test_copied_paths_give_the_planar_loops_bits(dtype, mode, padding, channels) -> None:
    """The dispatched loops that read a channels-last copy (of blocks of channels for float
    bilinear sampling with zeros padding, of all channels otherwise) sum PyTorch's products
    in PyTorch's order, skipping taps outside the map and giving NaN for a NaN point:
    bit-equal to the planar loop at channel counts that are not multiples of any vector or
    block width, with points on and beyond the edges, non-finite points and batch 2."""
    rng = np.random.default_rng(channels)
    features, grid = make_case(rng, dtype, n=2, c=channels, h=6, w=7, out=(8, 9))
    grid[1, 2, :5] = [[np.nan, 0], [0, np.inf], [-np.inf, 1], [1e30, -1e30], [1.01, -1.01]]
    features[1, 0, 2, 3] = np.inf  # an infinite value under some weights of 0
    for align in (0, 1):
        a = attrs(mode, padding, align)
        (together,) = sample("GridSample", "ortops", features, grid, **a)
        np.testing.assert_array_equal(together, sample_in_small_grids(features, grid, 8, **a))
        finite = np.isfinite(features).all()
        if finite:
            expected = references.grid_sample(features, grid, mode, padding, bool(align))
            np.testing.assert_allclose(together, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("batch", [1, 4 * (os.cpu_count() or 1)])
def test_blocks_shared_or_owned_give_the_planar_loops_bits(batch: int) -> None:
    """Float bilinear sampling with zeros padding copies blocks of channels: every thread on
    each block in turn when there are few (image, block) pairs, one pair per task from four
    pairs per core on. Both against the planar loop, bit for bit, and the reference."""
    features, grid = make_case(np.random.default_rng(batch), np.float32, n=batch, c=9, h=6, w=7, out=(8, 9))
    a = attrs("bilinear", "zeros", 0)
    for threads in (1, 2):
        (together,) = sample("GridSample", "ortops", features, grid, threads=threads, **a)
        np.testing.assert_array_equal(together, sample_in_small_grids(features, grid, 8, **a))
    np.testing.assert_allclose(
        together, references.grid_sample(features, grid, "bilinear", "zeros", False), **TOLERANCE[np.float32]
    )


@pytest.mark.parametrize("channels", [1, 3, 17, 33])
@pytest.mark.parametrize("mode", list(MODES))
def test_channel_counts_match_reference(channels: int, mode: str) -> None:
    features, grid = make_case(np.random.default_rng(channels), np.float32, n=2, c=channels, h=6, w=5, out=(7, 8))
    for padding in PADDINGS:
        a = attrs(mode, padding, 0)
        (got,) = sample("GridSample", "ortops", features, grid, **a)
        expected = references.grid_sample(features, grid, mode, padding, False)
        np.testing.assert_allclose(got, expected, **TOLERANCE[np.float32])


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_float16_channels_last_rounds_the_float32_result(mode: str) -> None:
    """Float16 samples in float32 from the channels-last copy, then rounds once on store."""
    features, grid = make_case(np.random.default_rng(4), np.float32, n=2, c=19, h=6, w=7, out=(8, 9))
    features, grid = features.astype(np.float16), grid.astype(np.float16)
    a = attrs(mode, "zeros", 0)
    (half,) = sample("GridSample", "ortops", features, grid, **a)
    (single,) = sample("GridSample", "ortops", features.astype(np.float32), grid.astype(np.float32), **a)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, single.astype(np.float16))
