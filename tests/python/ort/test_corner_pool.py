"""MMCVCornerPool (mmcv) and CornerPool (ortops) against flipped running maxima in references.py."""

from __future__ import annotations

import numpy as np
import pytest
import references

from ortest import run

DOMAINS = [("mmcv", "MMCVCornerPool"), ("ortops", "CornerPool")]


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 1, 1, 9), (1, 2, 6, 1)])
def test_matches_reference(domain, op, mode, dtype, shape) -> None:
    rng = np.random.default_rng(mode)
    x = rng.normal(size=shape).astype(dtype)
    x.reshape(-1)[rng.integers(0, x.size)] = np.nan
    (got,) = run(op, domain, {"input": x}, ["output"], mode=mode)
    np.testing.assert_array_equal(got, references.corner_pool(x, mode))


def test_directions_on_a_single_peak() -> None:
    x = np.zeros((1, 1, 3, 3), np.float32)
    x[0, 0, 1, 1] = 5.0
    expected = {
        0: [[0, 5, 0], [0, 5, 0], [0, 0, 0]],  # top: the peak spreads upward
        1: [[0, 0, 0], [0, 5, 0], [0, 5, 0]],  # bottom: downward
        2: [[0, 0, 0], [5, 5, 0], [0, 0, 0]],  # left: leftward
        3: [[0, 0, 0], [0, 5, 5], [0, 0, 0]],  # right: rightward
    }
    for mode, grid in expected.items():
        (got,) = run("MMCVCornerPool", "mmcv", {"input": x}, ["output"], mode=mode)
        np.testing.assert_array_equal(got[0, 0], np.array(grid, np.float32))


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    x = np.random.default_rng(1).normal(size=(2, 8, 40, 30)).astype(np.float32)
    for mode in range(4):
        (got,) = run("CornerPool", "ortops", {"input": x}, ["output"], threads=threads, mode=mode)
        np.testing.assert_array_equal(got, references.corner_pool(x, mode))


def test_empty() -> None:
    (got,) = run("CornerPool", "ortops", {"input": np.zeros((0, 2, 3, 3), np.float32)}, ["output"], mode=1)
    assert got.shape == (0, 2, 3, 3)


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_input_is_an_error(domain, op) -> None:
    with pytest.raises(
        Exception, match=r"attribute 'mode' must be 0 \(top\), 1 \(bottom\), 2 \(left\) or 3 \(right\), got 4"
    ):
        run(op, domain, {"input": np.zeros((1, 1, 2, 2), np.float32)}, ["output"], mode=4)
    with pytest.raises(Exception, match=r"input 'input' must have rank 4, got shape \[2, 2\]"):
        run(op, domain, {"input": np.zeros((2, 2), np.float32)}, ["output"], mode=0)
