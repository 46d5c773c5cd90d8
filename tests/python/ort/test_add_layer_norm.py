"""AddLayerNorm against a float64 loop per row written here from the definition, and against
ONNX Runtime's Add and LayerNormalization, whose pair ortops optimize replaces with it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from ortest import run, session

TOLERANCE = {
    np.float32: {"rtol": 1e-5, "atol": 1e-5},
    np.float64: {"rtol": 1e-12, "atol": 1e-12},
    np.float16: {"rtol": 2e-3, "atol": 2e-3},
}


def reference(a: np.ndarray, b: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """The sum rounded to the element type (as ONNX's Add: b broadcast to a), then each row
    normalized in float64."""
    total = (a + np.broadcast_to(b, a.shape)).astype(a.dtype).astype(np.float64)
    rows = total.reshape(-1, a.shape[-1]) if a.size else total.reshape(0, a.shape[-1])
    out = np.empty(rows.shape, np.float64)
    for r, row in enumerate(rows):
        mean = row.sum() / row.size
        var = ((row - mean) ** 2).sum() / row.size
        for k in range(row.size):
            out[r, k] = (row[k] - mean) / np.sqrt(var + eps) * float(scale[k]) + float(bias[k])
    return out.reshape(a.shape).astype(a.dtype)


def case(shape: tuple[int, ...], dtype: type, seed: int = 0, offset: float = 0.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = shape[-1]
    return {
        "A": (rng.normal(size=shape) * 2 + offset).astype(dtype),
        "B": rng.normal(size=shape).astype(dtype),
        "scale": (rng.random(c) + 0.5).astype(dtype),
        "bias": rng.normal(size=c).astype(dtype),
    }


def expected(feeds: dict[str, np.ndarray], eps: float = 1e-5) -> np.ndarray:
    return reference(feeds["A"], feeds["B"], feeds["scale"], feeds["bias"], eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(7,), (3, 6), (2, 5, 33), (2, 3, 4, 64), (1, 9, 256)])
def test_matches_reference(dtype: type, shape: tuple[int, ...]) -> None:
    feeds = case(shape, dtype)
    (got,) = run("AddLayerNorm", "ortops", feeds, epsilon=1e-5)
    assert got.dtype == dtype and got.shape == shape
    np.testing.assert_allclose(got, expected(feeds), **TOLERANCE[dtype])


# Rows below, at and around multiples of the kernel's 32 partial sums.
@pytest.mark.parametrize("channels", [1, 31, 32, 33, 95, 1024, 4099])
def test_row_lengths_around_the_partial_sums(channels: int) -> None:
    feeds = case((5, channels), np.float32, seed=channels, offset=3.0)
    (got,) = run("AddLayerNorm", "ortops", feeds, epsilon=1e-6)
    np.testing.assert_allclose(got, expected(feeds, 1e-6), **TOLERANCE[np.float32])


def test_large_offset_keeps_precision() -> None:
    feeds = case((4, 256), np.float32, offset=1e4)
    (got,) = run("AddLayerNorm", "ortops", feeds)
    np.testing.assert_allclose(got, expected(feeds), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_many_rows_and_thread_counts_agree(threads: int) -> None:
    # More rows than one task takes (the kernel splits rows into tasks of about 16k elements).
    feeds = case((3, 700, 96), np.float32, seed=5)
    (got,) = run("AddLayerNorm", "ortops", feeds, threads=threads)
    np.testing.assert_allclose(got, expected(feeds), **TOLERANCE[np.float32])


def onnx_add_layer_norm(feeds: dict[str, np.ndarray], eps: float) -> np.ndarray:
    """ONNX Runtime's own Add then LayerNormalization (opset 17, axis -1) on the same feeds."""
    elem = helper.np_dtype_to_tensor_dtype(feeds["A"].dtype)
    shape = list(feeds["A"].shape)
    inputs = [helper.make_tensor_value_info(n, elem, shape) for n in ("A", "B")] + [
        helper.make_tensor_value_info(n, elem, [shape[-1]]) for n in ("scale", "bias")
    ]
    nodes = [
        helper.make_node("Add", ["A", "B"], ["S"]),
        helper.make_node("LayerNormalization", ["S", "scale", "bias"], ["Y"], axis=-1, epsilon=eps),
    ]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("Y", elem, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return session(model, 0).run(None, feeds)[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_agrees_with_onnx_runtimes_add_and_layer_normalization(dtype: type) -> None:
    feeds = case((2, 50, 256), dtype, seed=3)
    (got,) = run("AddLayerNorm", "ortops", feeds, epsilon=1e-5)
    np.testing.assert_allclose(got, onnx_add_layer_norm(feeds, 1e-5), **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    "b_shape",
    # A is [2, 7, 40]: B with A's batch of 1 (a decoder's shared query), one row, one value per
    # row, a lower rank, one element.
    [(1, 7, 40), (40,), (2, 7, 1), (7, 40), (1, 1, 40), (1,), (2, 1, 40)],
)
def test_b_broadcasts_to_a(dtype: type, b_shape: tuple[int, ...]) -> None:
    feeds = case((2, 7, 40), dtype, seed=len(b_shape))
    feeds["B"] = np.random.default_rng(1).normal(size=b_shape).astype(dtype)
    (got,) = run("AddLayerNorm", "ortops", feeds)
    assert got.shape == (2, 7, 40)
    np.testing.assert_allclose(got, expected(feeds), **TOLERANCE[dtype])


@pytest.mark.parametrize("shape", [(0, 4), (2, 0, 8), (3, 0)])
def test_empty(shape: tuple[int, ...]) -> None:
    feeds = case(shape, np.float32)
    (got,) = run("AddLayerNorm", "ortops", feeds)
    assert got.shape == shape


def test_nan_and_inf_propagate_to_their_row_only() -> None:
    feeds = case((3, 8), np.float32)
    feeds["A"][0, 3] = np.nan
    feeds["B"][1, 5] = np.inf
    (got,) = run("AddLayerNorm", "ortops", feeds)
    assert np.isnan(got[0]).all() and np.isnan(got[1]).all() and np.isfinite(got[2]).all()
    np.testing.assert_allclose(got[2], expected(feeds)[2], **TOLERANCE[np.float32])


@pytest.mark.parametrize(
    "a_shape,b_shape,c,message",
    [
        ((2, 6), (2, 5), 6, r"input 'B' must have the shape of 'A', \[2, 6\], or broadcast to it, got \[2, 5\]"),
        ((1, 6), (2, 6), 6, r"input 'B' must have the shape of 'A', \[1, 6\], or broadcast to it, got \[2, 6\]"),
        ((2, 6), (1, 2, 6), 6, r"or broadcast to it, got \[1, 2, 6\]"),
        ((1,) * 9 + (6,), (6,), 6, r"supported up to rank 8"),
        ((2, 6), (2, 6), 5, r"input 'scale' must have shape \[C\] = \[6\], got \[5\]"),
        ((), (), 1, r"input 'A' must have rank 1 or more \(\[\.\.\., C\]\), got a scalar"),
    ],
)
def test_bad_input_is_an_error(a_shape, b_shape, c, message) -> None:
    feeds = {
        "A": np.zeros(a_shape, np.float32),
        "B": np.zeros(b_shape, np.float32),
        "scale": np.ones(c, np.float32),
        "bias": np.zeros(c, np.float32),
    }
    with pytest.raises(Exception, match=r"ortops\.AddLayerNorm: .*" + message):
        run("AddLayerNorm", "ortops", feeds)


def test_negative_epsilon_is_an_error() -> None:
    with pytest.raises(Exception, match="attribute 'epsilon' must be finite and >= 0"):
        run("AddLayerNorm", "ortops", case((2, 4), np.float32), epsilon=-1.0)


def test_wrong_dtype_is_an_error() -> None:
    feeds = {k: v.astype(np.int64) for k, v in case((2, 4), np.float32).items()}
    with pytest.raises(Exception, match="AddLayerNorm"):
        run("AddLayerNorm", "ortops", feeds)


def test_mixed_dtypes_are_an_error() -> None:
    feeds = case((2, 4), np.float32)
    feeds["B"] = feeds["B"].astype(np.float64)
    with pytest.raises(Exception, match="AddLayerNorm"):
        run("AddLayerNorm", "ortops", feeds)


def test_epsilon_defaults_to_1e_5() -> None:
    feeds = case((2, 16), np.float32, seed=9)
    feeds["A"] *= 1e-3  # a variance near epsilon, so that its value shows
    feeds["B"] *= 1e-3
    (got,) = run("AddLayerNorm", "ortops", feeds)
    np.testing.assert_allclose(got, expected(feeds, 1e-5), **TOLERANCE[np.float32])
