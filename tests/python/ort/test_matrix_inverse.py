"""MatrixInverse against a float64 Gauss-Jordan loop written here, and A @ inv(A) = I."""

from __future__ import annotations

import numpy as np
import pytest
from references import cached

from ortest import run

# The kernel eliminates in float64 and rounds once. Its error against the exact inverse is
# (a) that final rounding, at most half an ulp of each element (float32: 2^-24 relative), plus
# (b) the float64 elimination error, bounded by a small multiple of M * cond(A) * eps64 times
# the largest entry; the float64 reference below makes an error of the same kind.
ROUNDING_RTOL = {np.float32: 2.0**-23, np.float64: 0.0}  # one ulp of the element, for safety
ELIMINATION_ERROR = 8 * 2.0**-52  # per unit of M * cond(A), relative to the largest entry
# A @ inv(A) - I: the rounding of inv(A) to T multiplied back by A, per unit of M * |A| * |inv(A)|.
IDENTITY_RESIDUAL = {np.float32: 2.0**-23, np.float64: 8 * 2.0**-52}

SIZES = [1, 2, 3, 8, 33, 64]
BATCHES = [(), (5,), (2, 3), (0,)]


@cached
def reference_inverse(matrix: np.ndarray) -> np.ndarray:
    """Gauss-Jordan with partial pivoting on one matrix, in float64, one row at a time."""
    m = matrix.shape[0]
    a = [[float(matrix[r, c]) for c in range(m)] + [1.0 if c == r else 0.0 for c in range(m)] for r in range(m)]
    for col in range(m):
        pivot = max(range(col, m), key=lambda r: abs(a[r][col]))
        assert a[pivot][col] != 0.0, "the test built a singular matrix"
        a[col], a[pivot] = a[pivot], a[col]
        p = a[col][col]
        a[col] = [v / p for v in a[col]]
        for r in range(m):
            if r != col and a[r][col] != 0.0:
                f = a[r][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col])]
    return np.array([row[m:] for row in a]).reshape(m, m)


def diagonally_dominant(rng: np.random.Generator, batch: tuple[int, ...], m: int, dtype: type) -> np.ndarray:
    """random + M * I with the rows shuffled, so every pivot is off the diagonal."""
    x = rng.uniform(-1, 1, (*batch, m, m)) + m * np.eye(m)
    return x[..., rng.permutation(m), :].astype(dtype)


def zero_diagonal(rng: np.random.Generator, batch: tuple[int, ...], m: int, dtype: type) -> np.ndarray:
    """random with exact zeros on the diagonal (elimination without row swaps fails at once)."""
    x = rng.uniform(-1, 1, (*batch, m, m)) + m * np.eye(m)[np.roll(np.arange(m), 1)]
    x[..., np.arange(m), np.arange(m)] = 0.0
    return x.astype(dtype) if m > 1 else (x + 1.0).astype(dtype)  # [[0]] would be singular


def check_inverses(x: np.ndarray, got: np.ndarray) -> None:
    dtype = x.dtype.type
    m = x.shape[-1]
    assert got.dtype == x.dtype and got.shape == x.shape
    for matrix, inverse in zip(x.reshape(-1, m, m), got.reshape(-1, m, m)):
        matrix64 = matrix.astype(np.float64)
        expected = reference_inverse(matrix64)
        scale = np.abs(expected).max()
        cond = np.linalg.norm(matrix64, np.inf) * np.linalg.norm(expected, np.inf)
        np.testing.assert_allclose(
            inverse, expected, rtol=ROUNDING_RTOL[dtype], atol=ELIMINATION_ERROR * m * cond * scale
        )
        residual = IDENTITY_RESIDUAL[dtype] * m * np.abs(matrix64).max() * scale
        np.testing.assert_allclose(matrix64 @ inverse.astype(np.float64), np.eye(m), rtol=0, atol=residual)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m", SIZES)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("family", [diagonally_dominant, zero_diagonal])
def test_matches_reference(family, dtype: type, m: int, batch: tuple[int, ...]) -> None:  # noqa: ANN001
    x = family(np.random.default_rng(m), batch, m, dtype)
    (got,) = run("MatrixInverse", "ortops", {"X": x})
    check_inverses(x, got)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threads(threads: int, dtype: type) -> None:
    x = np.concatenate(
        [
            diagonally_dominant(np.random.default_rng(1), (20,), 8, dtype),
            zero_diagonal(np.random.default_rng(2), (20,), 8, dtype),
        ]
    )
    (got,) = run("MatrixInverse", "ortops", {"X": x}, threads=threads)
    check_inverses(x, got)


@pytest.mark.parametrize("threads", [1, 2])
def test_many_small_matrices(threads: int) -> None:
    x = diagonally_dominant(np.random.default_rng(1), (1000,), 3, np.float64)
    (got,) = run("MatrixInverse", "ortops", {"X": x}, threads=threads)
    np.testing.assert_allclose(np.einsum("bij,bjk->bik", x, got), np.broadcast_to(np.eye(3), x.shape), atol=1e-14)
    np.testing.assert_allclose(got, np.linalg.inv(x), rtol=1e-13, atol=1e-15)


def test_swap_only() -> None:
    x = np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)
    (got,) = run("MatrixInverse", "ortops", {"X": x})
    np.testing.assert_array_equal(got, x)


def test_tiny_pivot_is_swapped_away() -> None:
    # Without the row swap, 1 / 1e-20 swamps the other entries and the result is all wrong.
    x = np.array([[1e-20, 1.0], [1.0, 1.0]], np.float64)
    (got,) = run("MatrixInverse", "ortops", {"X": x})
    np.testing.assert_allclose(got, [[-1.0, 1.0], [1.0, -1e-20]], rtol=1e-15, atol=1e-30)


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 4, 4), (4, 0, 0), (0, 0)])
def test_empty(shape: tuple[int, ...]) -> None:
    (got,) = run("MatrixInverse", "ortops", {"X": np.zeros(shape, np.float32)})
    assert got.shape == shape


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_singular_matrix_is_an_error_naming_it(threads: int, dtype: type) -> None:
    x = diagonally_dominant(np.random.default_rng(2), (3, 4), 5, dtype)
    duplicated = x[1, 2, 3].copy()
    x[1, 2, 3] = x[1, 2, 0]  # two equal rows: flat index 6
    x[2, 0, 4] = 0.0  # a zero row: flat index 8; the lowest failing index is named
    with pytest.raises(Exception, match=r"ortops\.MatrixInverse: matrix 6 of 12 in input 'X' is singular"):
        run("MatrixInverse", "ortops", {"X": x}, threads=threads)
    x[1, 2, 3] = duplicated
    with pytest.raises(Exception, match=r"matrix 8 of 12 in input 'X' is singular"):
        run("MatrixInverse", "ortops", {"X": x}, threads=threads)


@pytest.mark.parametrize("m", [1, 3])
def test_zero_matrix_is_singular(m: int) -> None:
    with pytest.raises(Exception, match="matrix 0 of 1 in input 'X' is singular"):
        run("MatrixInverse", "ortops", {"X": np.zeros((m, m), np.float64)})


def test_rank_deficient_is_singular_when_elimination_is_exact() -> None:
    # Pivot 4, multipliers 1/2 and 1/4 (exact): the second column cancels to exact zeros.
    x = np.array([[[1.0, 2.0, 5.0], [4.0, 8.0, 4.0], [2.0, 4.0, 3.0]]], np.float64)
    with pytest.raises(Exception, match="matrix 0 of 1 in input 'X' is singular"):
        run("MatrixInverse", "ortops", {"X": x})


def test_rank_deficient_with_rounding_is_not_detected() -> None:
    # Row 2 = row 0 + row 1, but multipliers 1/5 and 4/5 round: the last pivot is ~1e-16, not 0,
    # and the result is huge, as in LAPACK (torch.linalg.inv returns ~2e15 here too).
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [5.0, 7.0, 9.0]], np.float64)
    (got,) = run("MatrixInverse", "ortops", {"X": x})
    assert np.all(np.isfinite(got)) and np.abs(got).max() > 1e14


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_is_an_error(bad: float) -> None:
    x = np.broadcast_to(np.eye(3, dtype=np.float32), (4, 3, 3)).copy()
    x[3, 1, 2] = bad
    x[2, 0, 0] = 0.0  # singular but no NaN: the lower index wins
    with pytest.raises(Exception, match=r"matrix 2 of 4 in input 'X' is singular"):
        run("MatrixInverse", "ortops", {"X": x})
    x[2, 0, 0] = 1.0
    with pytest.raises(Exception, match=r"input 'X' contains NaN or infinity \(matrix 3 of 4, shape \[4, 3, 3\]\)"):
        run("MatrixInverse", "ortops", {"X": x})


def test_non_square_is_an_error() -> None:
    with pytest.raises(Exception, match=r"square matrices \(\[\.\.\., M, M\]\), got shape \[2, 3, 4\]"):
        run("MatrixInverse", "ortops", {"X": np.zeros((2, 3, 4), np.float32)})


def test_rank_one_is_an_error() -> None:
    with pytest.raises(Exception, match=r"rank 2 or more .*got shape \[4\]"):
        run("MatrixInverse", "ortops", {"X": np.zeros(4, np.float32)})


@pytest.mark.parametrize("dtype", [np.int64, np.float16])
def test_wrong_dtype_is_an_error(dtype: type) -> None:
    with pytest.raises(Exception, match=r"Type 'tensor\(\w+\)' of input parameter \(X\) of operator \(MatrixInverse\)"):
        run("MatrixInverse", "ortops", {"X": np.eye(2, dtype=dtype)})
