"""cummax / cummin (mmcv) and CumMax / CumMin (ortops) against the slow per-line loop in references.py.

The hand-written expectations for ties, NaN and infinities below were read off torch.cummax /
torch.cummin (torch 2.x, CPU), which the spec names as the reference.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import references
from onnx import TensorProto, helper

import ortops

from ortest import exported_model, run

OPS = [("mmcv", "cummax", True), ("mmcv", "cummin", False), ("ortops", "CumMax", True), ("ortops", "CumMin", False)]
DTYPES = [np.float32, np.float64, np.int64]
NAN, INF = np.nan, np.inf


def data(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    x = rng.integers(-3, 4, shape).astype(dtype)  # few distinct values: many ties
    if np.issubdtype(dtype, np.floating) and x.size > 4:
        flat = x.reshape(-1)
        flat[rng.integers(0, x.size, 3)] = [np.nan, np.inf, -np.inf]
    return x


def check(x: np.ndarray, dim: int, op: str, domain: str, largest: bool, threads: int = 0) -> None:
    values, indices = run(op, domain, {"input": x}, ["values", "indices"], threads=threads, dim=dim)
    expected_values, expected_indices = references.cumulative_extreme(x, dim, largest)
    assert values.dtype == x.dtype and indices.dtype == np.int64
    assert values.shape == x.shape and indices.shape == x.shape
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize("domain,op,largest", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 3, 4), (2, 1, 3, 5), (3, 4, 1, 2)])
def test_matches_reference_on_every_dim(domain, op, largest, dtype, shape) -> None:
    x = data(np.random.default_rng(len(shape)), shape, dtype)
    for dim in range(-max(len(shape), 1), max(len(shape), 1)):
        check(x, dim, op, domain, largest)


# (input, cummax values, cummax indices, cummin values, cummin indices), as torch gives them.
TORCH_CASES = [
    ([1.0, 1.0, 1.0], [1, 1, 1], [0, 1, 2], [1, 1, 1], [0, 1, 2]),
    ([1.0, NAN, 2.0, NAN, 0.0], [1, NAN, NAN, NAN, NAN], [0, 1, 1, 3, 3], [1, NAN, NAN, NAN, NAN], [0, 1, 1, 3, 3]),
    ([NAN, NAN, 1.0], [NAN, NAN, NAN], [0, 1, 1], [NAN, NAN, NAN], [0, 1, 1]),
    (
        [-INF, -INF, INF, INF, NAN, INF],
        [-INF, -INF, INF, INF, NAN, NAN],
        [0, 1, 2, 3, 4, 4],
        [-INF, -INF, -INF, -INF, NAN, NAN],
        [0, 1, 1, 1, 4, 4],
    ),
    ([3.0, NAN, NAN, -INF], [3, NAN, NAN, NAN], [0, 1, 2, 2], [3, NAN, NAN, NAN], [0, 1, 2, 2]),
    ([INF, INF], [INF, INF], [0, 1], [INF, INF], [0, 1]),
    ([2.0, 5.0, 5.0, 1.0, 5.0], [2, 5, 5, 5, 5], [0, 1, 2, 2, 4], [2, 2, 2, 1, 1], [0, 0, 0, 3, 3]),
]


@pytest.mark.parametrize("domain,op,largest", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(TORCH_CASES)))
def test_ties_nan_and_infinities_as_torch(domain, op, largest, dtype, case) -> None:
    line, max_values, max_indices, min_values, min_indices = TORCH_CASES[case]
    expected_values = np.array(max_values if largest else min_values, dtype)
    expected_indices = np.array(max_indices if largest else min_indices, np.int64)
    x = np.array(line, dtype)
    values, indices = run(op, domain, {"input": x}, ["values", "indices"], dim=0)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)
    # The same line along a non-innermost axis (the kernel's row-at-a-time path), in every column.
    wide = np.repeat(x[:, None, None], 1100, axis=2).repeat(2, axis=1)
    values, indices = run(op, domain, {"input": wide}, ["values", "indices"], dim=0)
    np.testing.assert_array_equal(values, np.broadcast_to(expected_values[:, None, None], wide.shape))
    np.testing.assert_array_equal(indices, np.broadcast_to(expected_indices[:, None, None], wide.shape))


def test_signed_zeros_tie() -> None:
    values, indices = run("cummax", "mmcv", {"input": np.array([0.0, -0.0], np.float32)}, ["values", "indices"], dim=0)
    np.testing.assert_array_equal(indices, [0, 1])  # -0 == 0: a tie, the later position (torch too)
    assert np.signbit(values[1])


@pytest.mark.parametrize("domain,op,largest", OPS)
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (2, 0, 3), (0, 0), (1, 2, 0, 3)])
def test_empty(domain, op, largest, shape) -> None:
    for dim in range(-len(shape), len(shape)):
        values, indices = run(op, domain, {"input": np.zeros(shape, np.float32)}, ["values", "indices"], dim=dim)
        assert values.shape == shape and indices.shape == shape and indices.dtype == np.int64


@pytest.mark.parametrize("domain,op,largest", OPS)
@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(domain, op, largest, threads: int) -> None:
    # dim 0 has an inner row of 2560 (three chunks of the row-at-a-time path), dim 2 is innermost.
    x = data(np.random.default_rng(3), (3, 64, 40), np.float32)
    for dim in (0, 1, 2):
        check(x, dim, op, domain, largest, threads)
    check(data(np.random.default_rng(4), (3, 40, 2), np.float64), 1, op, domain, largest, threads)


def mmcv_file(op: str) -> onnx.ModelProto:
    """One node as mmcv 1.x's symbolic wrote it: g.op('mmcv::cummax', input, dim_i=dim, outputs=2), opset 11."""
    node = helper.make_node(op, ["input"], [f"{op}_values", f"{op}_indices"], f"{op}_0", domain="mmcv", dim=1)
    graph = helper.make_graph(
        [node],
        "torch-jit-export",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, 4])],
        [
            helper.make_tensor_value_info(f"{op}_values", TensorProto.FLOAT, [2, 3, 4]),
            helper.make_tensor_value_info(f"{op}_indices", TensorProto.INT64, [2, 3, 4]),
        ],
    )
    return exported_model(graph, "mmcv")


@pytest.mark.parametrize("op,largest", [("cummax", True), ("cummin", False)])
def test_mmcv_exported_node(op: str, largest: bool) -> None:
    m = mmcv_file(op)
    ortops.register_onnx_schemas()
    onnx.checker.check_model(m)
    session = ort.InferenceSession(m.SerializeToString(), ortops.session_options(), providers=["CPUExecutionProvider"])
    x = data(np.random.default_rng(5), (2, 3, 4), np.float32)
    values, indices = session.run(None, {"input": x})
    expected_values, expected_indices = references.cumulative_extreme(x, 1, largest)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize("domain,op,largest", OPS)
def test_dim_out_of_range_is_an_error(domain, op, largest) -> None:
    with pytest.raises(
        Exception, match=r"attribute 'dim' = 2 is out of range for input 'input' of rank 2 \(shape \[3, 4\]\)"
    ):
        run(op, domain, {"input": np.zeros((3, 4), np.float32)}, ["values", "indices"], dim=2)
    with pytest.raises(Exception, match=r"attribute 'dim' = -3 is out of range for input 'input' of rank 2"):
        run(op, domain, {"input": np.zeros((3, 4), np.float32)}, ["values", "indices"], dim=-3)
    with pytest.raises(Exception, match=r"attribute 'dim' = -2 is out of range .* rank 0"):
        run(op, domain, {"input": np.zeros((), np.float32)}, ["values", "indices"], dim=-2)
    with pytest.raises(Exception, match=r"attribute 'dim' = 1 is out of range .* rank 0"):
        run(op, domain, {"input": np.zeros((), np.float32)}, ["values", "indices"], dim=1)
    huge = 2**62
    with pytest.raises(Exception, match=rf"attribute 'dim' = -{huge} is out of range .* rank 1"):
        run(op, domain, {"input": np.zeros((0,), np.float64)}, ["values", "indices"], dim=-huge)


# Line lengths around the vector widths of every instruction-set level (4, 8 and 16 floats):
# lines shorter than one vector, whole vectors, and a partial vector left over.
LINE_LENGTHS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 200]


def tricky(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Few distinct values (many ties), both zeros, infinities, and in some lines NaNs with
    different payloads and signs (the output must carry the input's bits)."""
    if dtype == np.int64:
        return rng.integers(-2, 3, shape).astype(dtype)
    x = rng.choice(np.array([-2.0, -1.0, -0.0, 0.0, 1.0, 2.0, np.inf, -np.inf], dtype), shape)
    lines = x.reshape(-1, shape[-1])
    for line in lines[::3]:
        line[rng.integers(0, line.size)] = np.nan
    bits = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64}[dtype]
    for line in lines[1::3]:
        if line.size > 2:
            where = rng.integers(0, line.size, 2)
            line[where] = np.array([np.nan, -np.nan], dtype)
            line.view(bits)[where[0]] |= bits(1)  # a payload bit
    return x


def same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    if got.dtype.kind == "f":
        unsigned = np.dtype(f"u{got.dtype.itemsize}")
        np.testing.assert_array_equal(got.view(unsigned), expected.view(unsigned))
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("domain,op,largest", OPS[2:])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.float16])
@pytest.mark.parametrize("length", LINE_LENGTHS)
def test_lengths_around_vector_widths(domain, op, largest, dtype, length) -> None:
    x = tricky(np.random.default_rng(length), (6, length), dtype)
    # dim 1: contiguous lines of `length`; dim 0: rows of `length` updated a step at a time.
    for dim in (1, 0):
        values, indices = run(op, domain, {"input": x}, ["values", "indices"], dim=dim)
        expected_values, expected_indices = references.cumulative_extreme(x, dim, largest)
        same_bits(values, expected_values)
        np.testing.assert_array_equal(indices, expected_indices)
