"""MatrixInverse against a float64 Gauss-Jordan loop written here, and A @ inv(A) = I."""

from __future__ import annotations

import numpy as np
import pytest

from ortest import run

# Relative error allowed per element, scaled by the matrix size: the kernel works in
# float64 and rounds once, so float32 results are within a few ulp of the exact inverse.
RTOL = {np.float32: 1e-5, np.float64: 1e-12}


def reference_inverse(matrix: np.ndarray) -> np.ndarray:
    """Gauss-Jordan with partial pivoting on one matrix, in float64, one element at a time."""
    m = matrix.shape[0]
    a = [[float(matrix[r, c]) for c in range(m)] + [1.0 if c == r else 0.0 for c in range(m)] for r in range(m)]
    for col in range(m):
        pivot = max(range(col, m), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        p = a[col][col]
        a[col] = [v / p for v in a[col]]
        for r in range(m):
            if r != col and a[r][col] != 0.0:
                f = a[r][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col])]
    return np.array([row[m:] for row in a])


def well_conditioned(rng: np.random.Generator, batch: tuple[int, ...], m: int, dtype: type) -> np.ndarray:
    x = rng.uniform(-1, 1, (*batch, m, m)) + m * np.eye(m)
    # Permute rows so that pivoting is needed (the large entries leave the diagonal).
    return x[..., rng.permutation(m), :].astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m", [1, 2, 3, 8, 33])
@pytest.mark.parametrize("batch", [(), (5,), (2, 3)])
def test_matches_reference(dtype: type, m: int, batch: tuple[int, ...]) -> None:
    x = well_conditioned(np.random.default_rng(m), batch, m, dtype)
    (got,) = run("MatrixInverse", "ortops", {"X": x})
    assert got.dtype == dtype and got.shape == x.shape
    flat_x, flat_got = x.reshape(-1, m, m), got.reshape(-1, m, m)
    for matrix, inverse in zip(flat_x, flat_got):
        expected = reference_inverse(matrix)
        np.testing.assert_allclose(
            inverse, expected, rtol=RTOL[dtype] * m, atol=RTOL[dtype] * m * np.abs(expected).max()
        )
        identity = matrix.astype(np.float64) @ inverse.astype(np.float64)
        np.testing.assert_allclose(identity, np.eye(m), atol=RTOL[dtype] * m * 10)


def test_zero_on_the_diagonal_needs_pivoting() -> None:
    x = np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)
    (got,) = run("MatrixInverse", "ortops", {"X": x})
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("threads", [1, 2])
def test_many_small_matrices(threads: int) -> None:
    x = well_conditioned(np.random.default_rng(1), (1000,), 3, np.float64)
    (got,) = run("MatrixInverse", "ortops", {"X": x}, threads=threads)
    np.testing.assert_allclose(np.einsum("bij,bjk->bik", x, got), np.broadcast_to(np.eye(3), x.shape), atol=1e-12)


@pytest.mark.parametrize("shape", [(0, 3, 3), (4, 0, 0), (0, 0)])
def test_empty(shape: tuple[int, ...]) -> None:
    (got,) = run("MatrixInverse", "ortops", {"X": np.zeros(shape, np.float32)})
    assert got.shape == shape


def test_singular_matrix_is_an_error_naming_it() -> None:
    x = well_conditioned(np.random.default_rng(2), (4,), 3, np.float32)
    x[2, 1] = x[2, 0]  # two equal rows
    with pytest.raises(Exception, match=r"ortops\.MatrixInverse: matrix 2 of 4 in input 'X' is singular"):
        run("MatrixInverse", "ortops", {"X": x})


def test_zero_matrix_is_singular() -> None:
    with pytest.raises(Exception, match="matrix 0 of 1 in input 'X' is singular"):
        run("MatrixInverse", "ortops", {"X": np.zeros((2, 2), np.float64)})


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_is_an_error(bad: float) -> None:
    x = np.eye(3, dtype=np.float32)
    x[1, 2] = bad
    with pytest.raises(Exception, match="input 'X' contains NaN or infinity"):
        run("MatrixInverse", "ortops", {"X": x})


def test_non_square_is_an_error() -> None:
    with pytest.raises(Exception, match=r"square matrices \(\[\.\.\., M, M\]\), got shape \[2, 3, 4\]"):
        run("MatrixInverse", "ortops", {"X": np.zeros((2, 3, 4), np.float32)})


def test_rank_one_is_an_error() -> None:
    with pytest.raises(Exception, match=r"rank 2 or more .*got shape \[4\]"):
        run("MatrixInverse", "ortops", {"X": np.zeros(4, np.float32)})


def test_wrong_dtype_is_an_error() -> None:
    with pytest.raises(Exception, match="MatrixInverse"):
        run("MatrixInverse", "ortops", {"X": np.eye(2, dtype=np.int64)})
