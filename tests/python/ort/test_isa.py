"""The instruction-set levels of the CPU kernels (the library's core/isa.h).

The library runs its hot loops at the widest level the CPU has; the environment variable
ORTOPS_ISA forces a lower one (sse2, avx2, avx512 on x86-64; neon on ARM64). The level is
picked once, when the library is loaded, so each level runs in a subprocess of its own. The
other ONNX-Runtime-level tests run at every level too (scripts/test.sh runs them again with
ORTOPS_ISA set to each lower level the CPU has); this file checks the switch itself and
that every level returns the same bits as the lowest for valid random cases of every op
(test_fuzz.py's generator without its hostile mutations, with sizes around the vector widths).

Run as a script, ``--dump FILE`` writes the outputs of those cases at the level ORTOPS_ISA
names (what the bit-equality test compares); ``--cases grid_sample`` writes those of the
edge cases of grid sampling's blocked path instead.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import test_fuzz
from isa_levels import cpu_isa_levels

import ortops

HERE = Path(__file__).resolve()
TESTS_PYTHON = HERE.parents[1]
LEVELS = cpu_isa_levels()
TOP = LEVELS[-1]
SEED = 20261123
CASES_PER_OP = int(os.environ.get("ORTOPS_ISA_CASES_PER_OP", "10"))
# Sizes around the vector widths (4, 8 and 16 floats; 2, 4 and 8 doubles), so that loops
# run their vector bodies and their remainders.
SIZE_POOL = (1, 2, 3, 7, 8, 9, 16, 17, 33)

SESSION = """
import onnxruntime as ort, ortops, ortest
options = ortops.session_options()
options.log_severity_level = 1  # INFO: the library names its level there
ort.InferenceSession(ortest.mmcv_nms_model(iou_threshold=0.5).SerializeToString(), options,
                     providers=["CPUExecutionProvider"])
"""


def _run(args: list[str], level: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("ORTOPS_ISA", None)
    if level is not None:
        env["ORTOPS_ISA"] = level
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_PYTHON), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=600)


def test_an_unknown_level_fails_registration() -> None:
    result = _run(["-c", SESSION], "sse3")
    assert result.returncode != 0
    assert f"ortops: ORTOPS_ISA=sse3 is not a level; this CPU has {', '.join(LEVELS)}" in result.stderr


@pytest.mark.skipif(LEVELS[0] != "sse2" or TOP == "avx512", reason="this CPU has every x86-64 level")
def test_a_level_the_cpu_lacks_fails_registration() -> None:
    missing = "avx512" if TOP == "avx2" else "avx2"
    result = _run(["-c", SESSION], missing)
    assert result.returncode != 0
    assert f"ortops: ORTOPS_ISA={missing} asks for a level this CPU lacks; it has up to {TOP}" in result.stderr


@pytest.mark.parametrize("level", [None, "", *LEVELS])
def test_the_session_log_names_the_level(level: str | None) -> None:
    # Unset or empty: the widest the CPU has (the library's detection agrees with /proc/cpuinfo's).
    result = _run(["-c", SESSION], level)
    assert result.returncode == 0, result.stderr
    assert f"ortops: CPU kernels use {level or TOP} (this CPU has {TOP};" in result.stderr


def _bits(array: np.ndarray) -> bytes:
    """The array's bytes, with every NaN made the same: which NaN an operation on two NaNs
    returns, and the sign of the NaN of 0 x inf, depend on the order of its operands, which
    the compiler may swap in a commutative operation at one level and not at another."""
    if array.dtype.kind == "f":
        array = np.where(np.isnan(array), np.array(np.nan, array.dtype), array)
    return array.tobytes()


def _dump(level: str, path: Path, cases: str = "fuzz") -> tuple[list[str], dict[str, np.ndarray]]:
    result = _run([str(HERE), "--dump", str(path), "--cases", cases], level)
    assert result.returncode == 0, f"level {level}:\n{result.stderr[-4000:]}"
    statuses = json.loads(path.with_suffix(".json").read_text())
    with np.load(path) as arrays:
        return statuses, {key: arrays[key] for key in arrays.files}


@pytest.mark.skipif(len(LEVELS) < 2, reason="this CPU has one level")
def test_every_level_gives_the_lowest_levels_bits(tmp_path: Path) -> None:
    base_statuses, base = _dump(LEVELS[0], tmp_path / f"{LEVELS[0]}.npz")
    ran = sum(status.endswith(" ok") for status in base_statuses)
    assert ran >= len(base_statuses) // 2, f"only {ran} of {len(base_statuses)} cases ran to the end"
    for level in LEVELS[1:]:
        statuses, outputs = _dump(level, tmp_path / f"{level}.npz")
        assert statuses == base_statuses, f"{level}: another case failed than at {LEVELS[0]}"
        assert outputs.keys() == base.keys()
        differing = [
            key
            for key in base
            if outputs[key].dtype != base[key].dtype
            or outputs[key].shape != base[key].shape
            or _bits(outputs[key]) != _bits(base[key])
        ]
        own_gemm = [key for key in differing if _has_own_gemm(level, key, base[key])]
        for key in own_gemm:
            _assert_close_products(outputs[key], base[key], f"{level} against {LEVELS[0]} in {key}")
        differing = [key for key in differing if key not in own_gemm]
        assert not differing, f"{level} differs from {LEVELS[0]} in outputs {differing[:10]} (case index, op, output)"


# The levels whose float deformable convolutions multiply with ortops' own GEMM
# (core/packed_gemm.h: chains of fused multiply-adds) rather than ONNX Runtime's: their
# products may differ from the lowest level's in the last bits, and are compared within the
# tolerance stated here instead.
OWN_GEMM_LEVELS = ("avx2", "avx512")
OWN_GEMM_TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3}


def test_docs_name_the_levels_with_the_own_gemm() -> None:
    """The deformable convolutions' docs (docs/ops/deform-conv.md) say at which levels ortops' own GEMM
    runs: the levels this file compares within its tolerance, not a list written elsewhere."""
    names = {"sse2": "SSE2", "avx2": "AVX2", "avx512": "AVX-512"}
    claim = f"ortops' own in float32 and float16 on CPUs with {' or '.join(names[level] for level in OWN_GEMM_LEVELS)},"
    for op in ortops.ops():
        if "DeformConv2d" in op.name:
            assert claim in op.doc, f"{op.qualified_name}'s doc does not say: {claim}"


def _has_own_gemm(level: str, key: str, output: np.ndarray) -> bool:
    return level in OWN_GEMM_LEVELS and "DeformConv2d_" in key and output.dtype in OWN_GEMM_TOLERANCE


def _assert_close_products(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Within the dtype's tolerance, relative to the output's largest finite magnitude (a
    product's rounding error scales with its terms, not with its value); NaN and infinities
    in the same places, but for one known difference: where a sum overflows, ONNX Runtime's
    Gemm has returned NaN (a fuzz case with masks of 1e38 and infinities) where the own GEMM
    returns the infinity that torchvision returns, in float32 and in float64."""
    tolerance = OWN_GEMM_TOLERANCE[expected.dtype]
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    overflowed = np.isnan(expected) & np.isinf(actual)
    expected = np.where(overflowed, actual, expected)
    finite = np.isfinite(expected)
    scale = max(1.0, float(np.abs(expected[finite].astype(np.float64)).max(initial=0.0)))
    np.testing.assert_allclose(
        actual.astype(np.float64), expected.astype(np.float64), rtol=tolerance, atol=tolerance * scale, err_msg=what
    )


@pytest.mark.skipif(len(LEVELS) < 2, reason="this CPU has one level")
def test_grid_sampling_in_blocks_gives_the_same_bits_at_every_level(tmp_path: Path) -> None:
    """Float bilinear sampling with zeros padding reads blocks of 4 channels at the lowest
    level and of 8 at the others, each point's four pixels as vectors (lanes past the
    block's channels belonging to the next pixel): the same bits, for points on, beyond and
    just inside every edge, maps one pixel wide or high, infinite values beside the edges,
    NaN and infinite points, channel counts that are not multiples of either block, and more
    points than one task; in float32 and in float16 (converted to float32 on the way)."""
    base_statuses, base = _dump(LEVELS[0], tmp_path / f"{LEVELS[0]}.npz", "grid_sample")
    assert all(status.endswith(" ok") for status in base_statuses), base_statuses
    for level in LEVELS[1:]:
        statuses, outputs = _dump(level, tmp_path / f"{level}.npz", "grid_sample")
        assert statuses == base_statuses
        differing = [key for key in base if _bits(outputs[key]) != _bits(base[key])]
        assert not differing, f"{level} differs from {LEVELS[0]} in {differing}"


def _grid_sample_cases() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(SEED)
    cases = []
    for n, c, h, w, out in [
        (2, 3, 5, 7, (9, 11)),
        (1, 17, 6, 5, (4, 37)),
        (1, 2, 1, 1, (3, 5)),
        (1, 2, 1, 9, (4, 7)),
        (1, 2, 9, 1, (7, 4)),
        (1, 1, 130, 131, (131, 129)),  # 16899 points: many tasks of 1024
        (2, 13, 9, 10, (7, 8)),  # a whole block and a part of one at every level
    ]:
        features = rng.normal(size=(n, c, h, w)).astype(np.float32)
        features[:, :, 0, -1] = np.inf  # read only by taps inside the map
        features[:, :, -1, 0] = -np.inf
        grid = rng.uniform(-1.3, 1.3, (n, *out, 2)).astype(np.float32)
        steps = np.float32([-1.3, -1, -1 + 0.3 / max(h, w), -0.999, 0, 0.999, 1 - 0.3 / max(h, w), 1, 1.3])
        edges = np.stack(np.meshgrid(steps, steps), -1).reshape(-1, 2)
        specials = np.float32([[np.nan, 0], [0, np.nan], [np.inf, 0], [0, -np.inf], [1e30, -1e30], [-1e-30, 1e-30]])
        flat = grid.reshape(n, -1, 2)
        flat[0, : len(edges)] = edges[: flat.shape[1]]
        flat[-1, -len(specials) :] = specials[-flat.shape[1] :]
        cases.append((features, flat.reshape(grid.shape)))
    return cases


def _dump_grid_sample_cases(path: Path) -> None:
    from ortest import run

    statuses: list[str] = []
    arrays: dict[str, np.ndarray] = {}
    for index, (features, grid) in enumerate(_grid_sample_cases()):
        for dtype, align in itertools.product((np.float32, np.float16), (0, 1)):
            (got,) = run(
                "grid_sampler",
                "mmcv",
                {"input": features.astype(dtype), "grid": grid.astype(dtype)},
                ["output"],
                interpolation_mode=0,
                padding_mode=0,
                align_corners=align,
            )
            statuses.append(f"{index} {np.dtype(dtype).name} align {align} ok")
            arrays[f"{index}_{np.dtype(dtype).name}_{align}"] = got
    path.with_suffix(".json").write_text(json.dumps(statuses))
    np.savez(path, **arrays)


def _dump_cases(path: Path) -> None:
    table = test_fuzz._op_table()
    statuses: list[str] = []
    arrays: dict[str, np.ndarray] = {}
    for index in range(CASES_PER_OP * len(table)):
        case = test_fuzz.make_case(SEED, index, table, mutate=False, size_pool=SIZE_POOL)
        status, outputs = test_fuzz.case_outputs(case)
        statuses.append(f"{case['domain']}::{case['op']} {status}")
        for k, output in enumerate(outputs):
            arrays[f"{index}_{case['domain']}::{case['op']}_{k}"] = np.asarray(output)
    path.with_suffix(".json").write_text(json.dumps(statuses))
    np.savez(path, **arrays)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, required=True)
    parser.add_argument("--cases", choices=["fuzz", "grid_sample"], default="fuzz")
    sys.path.insert(0, str(TESTS_PYTHON))
    arguments = parser.parse_args()
    (_dump_grid_sample_cases if arguments.cases == "grid_sample" else _dump_cases)(arguments.dump)
