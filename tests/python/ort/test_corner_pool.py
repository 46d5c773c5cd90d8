"""MMCVCornerPool (mmcv) and CornerPool (ortops) against flipped running maxima in references.py."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import references
from onnx import TensorProto, helper

import ortops

from ortest import exported_model, run

DOMAINS = [("mmcv", "MMCVCornerPool"), ("ortops", "CornerPool")]
MODES = [0, 1, 2, 3]  # top, bottom, left, right


def features(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    x = rng.normal(size=shape).astype(dtype)
    if x.size > 4:
        flat = x.reshape(-1)
        flat[rng.integers(0, x.size, 3)] = [np.nan, np.inf, -np.inf]
    return x


@pytest.mark.parametrize("domain,op", DOMAINS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 1, 1, 9), (1, 2, 6, 1), (1, 1, 1, 1), (2, 1, 4, 1100)])
def test_matches_reference(domain, op, mode, dtype, shape) -> None:
    x = features(np.random.default_rng(mode), shape, dtype)
    (got,) = run(op, domain, {"input": x}, ["output"], mode=mode)
    assert got.dtype == dtype and got.shape == shape
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
    for domain, op in DOMAINS:
        for mode, grid in expected.items():
            (got,) = run(op, domain, {"input": x}, ["output"], mode=mode)
            np.testing.assert_array_equal(got[0, 0], np.array(grid, np.float32))


def test_nan_spreads_in_the_scan_direction_only() -> None:
    x = np.zeros((1, 1, 3, 3), np.float32)
    x[0, 0, 1, 1] = np.nan
    (got,) = run("CornerPool", "ortops", {"input": x}, ["output"], mode=1)  # bottom: downward
    np.testing.assert_array_equal(np.isnan(got[0, 0]), [[False] * 3, [False, True, False], [False, True, False]])


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads: int) -> None:
    x = features(np.random.default_rng(1), (2, 4, 20, 30), np.float32)
    for domain, op in DOMAINS:
        for mode in MODES:
            (got,) = run(op, domain, {"input": x}, ["output"], threads=threads, mode=mode)
            np.testing.assert_array_equal(got, references.corner_pool(x, mode))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(0, 2, 3, 3), (1, 0, 3, 3), (1, 2, 0, 3), (1, 2, 3, 0)])
def test_empty(mode, shape) -> None:
    (got,) = run("CornerPool", "ortops", {"input": np.zeros(shape, np.float32)}, ["output"], mode=mode)
    assert got.shape == shape


def mmcv_file(mode: int) -> onnx.ModelProto:
    """One node as mmcv 1.x's TopPool/BottomPool/... symbolic wrote it: mode as an int attribute, opset 11."""
    node = helper.make_node("MMCVCornerPool", ["input"], ["output"], "MMCVCornerPool_0", domain="mmcv", mode=mode)
    graph = helper.make_graph(
        [node],
        "torch-jit-export",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 2, 5, 6])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 2, 5, 6])],
    )
    return exported_model(graph, "mmcv")


@pytest.mark.parametrize("mode", MODES)
def test_mmcv_exported_node(mode: int) -> None:
    m = mmcv_file(mode)
    ortops.register_onnx_schemas()
    onnx.checker.check_model(m)
    session = ort.InferenceSession(m.SerializeToString(), ortops.session_options(), providers=["CPUExecutionProvider"])
    x = features(np.random.default_rng(7), (1, 2, 5, 6), np.float32)
    (got,) = session.run(None, {"input": x})
    np.testing.assert_array_equal(got, references.corner_pool(x, mode))


@pytest.mark.parametrize("domain,op", DOMAINS)
def test_bad_input_is_an_error(domain, op) -> None:
    for mode in (4, -1, 2**40):
        with pytest.raises(
            Exception, match=rf"attribute 'mode' must be 0 \(top\), 1 \(bottom\), 2 \(left\) or 3 \(right\), got {mode}"
        ):
            run(op, domain, {"input": np.zeros((1, 1, 2, 2), np.float32)}, ["output"], mode=mode)
    for shape, text in [((2, 2), r"\[2, 2\]"), ((1, 1, 2, 2, 2), r"\[1, 1, 2, 2, 2\]"), ((), r"\[\]")]:
        with pytest.raises(Exception, match=rf"input 'input' must have rank 4, got shape {text}"):
            run(op, domain, {"input": np.zeros(shape, np.float32)}, ["output"], mode=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 200])
def test_lengths_around_vector_widths(mode, dtype, length) -> None:
    # Lines (and rows) of lengths around every level's vector width (4, 8, 16 floats), with
    # ties of -0 and +0 and NaNs of different payloads: the output must carry the input's bits.
    rng = np.random.default_rng(length)
    for shape in ((1, 3, 4, length), (1, 2, length, 3)):
        x = rng.choice(np.array([-1.0, -0.0, 0.0, 1.0, np.inf, -np.inf], dtype), shape)
        unsigned = np.dtype(f"u{x.itemsize}")
        x[0, 0].reshape(-1)[rng.integers(0, x[0, 0].size)] = np.nan
        payload_nan = np.array([-np.nan], dtype).view(unsigned) | np.array(1, unsigned)
        x[0, 1].reshape(-1).view(unsigned)[rng.integers(0, x[0, 1].size)] = payload_nan[0]
        (got,) = run("CornerPool", "ortops", {"input": x}, ["output"], mode=mode)
        np.testing.assert_array_equal(got.view(unsigned), references.corner_pool(x, mode).view(unsigned))
