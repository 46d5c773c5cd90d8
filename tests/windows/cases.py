"""One-node models of every op, run on Linux and again under Windows, with the results compared.

``make CASES`` saves the cases and what ONNX Runtime on Linux (this environment's runtime
and ortops library) returns for them at the instruction-set level that ORTOPS_ISA names (or
the widest); scripts/test_windows.sh makes them at each level this CPU has, runs them with
the Windows library in each Windows runtime at each level (tests/cpp/case_runner.cc, under
Wine), and ``compare CASES OUT --level L`` checks each such run against Linux's results at
the same level (the levels themselves may differ in the last bits, where the deformable
convolutions use ortops' own GEMM: test_isa.py compares them).

The cases are those of the Python tests' generator (tests/python/ort/test_fuzz.py): the
valid random cases of every op, in every domain, that test_isa.py compares across levels
(sizes around the vector widths), and hostile cases (wrong types, ranks and attributes,
omitted and extra inputs and outputs, empty inputs, NaN and infinities) whose mutations keep
the sizes small (no huge dimensions or attribute values: Wine has no address-space limit to
refuse an absurd allocation with, as the fuzz test's workers have).

What must match, case by case:
  - an error on Linux is an error under Windows, with ortops' own message (the part ortops
    wrote, which names the op and the input) unchanged; a message that ONNX Runtime wrote
    itself may differ between its versions, so only the error is required there;
  - otherwise the same outputs, in number, element type and shape; integer and boolean
    outputs (the indices that NMS keeps, among them) exactly; floating-point outputs bit for
    bit, NaN matching any NaN, except within FLOAT_TOLERANCE for the kernels that call the
    C library's transcendental functions (LIBM_KERNELS below: sin, cos, exp, log), whose last
    bits differ between glibc and MinGW-w64's C runtime (seen: 13 float32 values in 2 of
    the 593 cases, at most 2 ulps apart, in rotated RoIAlign and rotated feature alignment).

Layout: CASES/cases.txt lists "NAME THREADS" per case; CASES/NAME has model.onnx,
input_<k>.pb and, from Linux, expected-<level>/output_<k>.pb or expected-<level>/error.txt
(TensorProto files with raw_data; the runner reads and writes the same).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()
TESTS_PYTHON = HERE.parents[1] / "python"
sys.path[:0] = [str(TESTS_PYTHON), str(TESTS_PYTHON / "ort")]

import test_fuzz  # noqa: E402
import test_isa  # noqa: E402

HOSTILE_SEED = 20261125
HOSTILE_PER_OP = 6  # generated; about two in five keep the sizes small and are kept
# Mutations that can make sizes or attribute values huge, and with them huge allocations.
UNBOUNDED_MUTATIONS = {"huge_dim", "attr_value"}
# Relative to the output's largest finite magnitude, as test_isa.py's products (see the
# module docstring for where it applies).
FLOAT_TOLERANCE = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def cases() -> list[dict[str, Any]]:
    """The cases, valid ones first, each a test_fuzz case dict."""
    table = test_fuzz._op_table()
    valid = [
        test_fuzz.make_case(test_isa.SEED, index, table, mutate=False, size_pool=test_isa.SIZE_POOL)
        for index in range(test_isa.CASES_PER_OP * len(table))
    ]
    hostile = [test_fuzz.make_case(HOSTILE_SEED, index, table) for index in range(HOSTILE_PER_OP * len(table))]
    hostile = [case for case in hostile if case["mutations"] and not UNBOUNDED_MUTATIONS & set(case["mutations"])]
    return valid + hostile


def case_name(case: dict[str, Any]) -> str:
    kind = "hostile" if case["mutations"] else "valid"
    return f"{kind}_{case['index']:04d}_{case['domain']}_{case['op']}"


def make(folder: Path) -> None:
    import onnxruntime as ort
    from onnx import numpy_helper

    import ortops

    import ortest  # noqa: F401  (sessions wait without spinning, as in the tests)

    level = os.environ.get("ORTOPS_ISA") or test_isa.TOP
    folder.mkdir(parents=True, exist_ok=True)
    lines, errors = [], 0
    for case in cases():
        name = case_name(case)
        model, feeds = test_fuzz.case_model(case)
        path = folder / name
        expected = path / f"expected-{level}"
        expected.mkdir(parents=True, exist_ok=True)
        (path / "model.onnx").write_bytes(model.SerializeToString())
        for k, (input_name, value) in enumerate(feeds.items()):
            (path / f"input_{k}.pb").write_bytes(numpy_helper.from_array(value, input_name).SerializeToString())
        options = ortops.session_options()
        options.intra_op_num_threads = case["threads"]
        options.log_severity_level = 4
        try:
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            outputs = session.run(None, feeds)
        except Exception as error:  # noqa: BLE001 - the error is the result to compare
            (expected / "error.txt").write_text(str(error))
            errors += 1
        else:
            for k, (output, value) in enumerate(zip(session.get_outputs(), outputs)):
                tensor = numpy_helper.from_array(np.asarray(value), output.name)
                (expected / f"output_{k}.pb").write_bytes(tensor.SerializeToString())
        lines.append(f"{name} {case['threads']}")
    (folder / "cases.txt").write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} cases ({errors} of them errors) at {level} with ONNX Runtime {ort.__version__} in {folder}")


# ------------------------------------------------------------------------------ comparing


# Kernels (the op manifest's names) whose floating-point outputs pass through the C library's
# transcendental functions, whose last bits differ between glibc and MinGW-w64's C runtime:
# sin and cos (rotated RoIAlign, alone and multi-level; rotated feature alignment; rotated
# boxes' corners in rotated NMS), exp (soft NMS's gaussian decay, the batched NMS family's
# sigmoid scores, EfficientNMS_TRT's box decoding) and log / log2 (EfficientNMS_TRT's score
# threshold, multi-level RoIAlign's choice of level). Square roots are exact everywhere; the
# attention's softmax has its own exp (math/exp.h).
LIBM_KERNELS = {
    "RoIAlignRotated",
    "MMCVMultiLevelRotatedRoiAlign",
    "MMCVMultiLevelRoiAlign",
    "MultiLevelRoIAlign",
    "RotatedFeatureAlign",
    "NMSRotated",
    "TRTBatchedRotatedNMS",
    "SoftNMS",
    "BatchedNMS",
    "TRTBatchedNMS",
    "EfficientNMS_TRT",
}


def libm_ops() -> set[str]:
    """The nodes (``<domain>_<name>``, as in case names) of the LIBM_KERNELS."""
    import ortops

    kernels = {op.kernel for op in ortops.ops()}
    assert LIBM_KERNELS <= kernels, f"not kernels of the op table: {LIBM_KERNELS - kernels}"
    return {f"{op.domain}_{op.name}" for op in ortops.ops() if op.kernel in LIBM_KERNELS}


def _tensors(folder: Path) -> list[np.ndarray]:
    from onnx import TensorProto, numpy_helper

    arrays = []
    for k in range(len(list(folder.glob("output_*.pb")))):
        tensor = TensorProto()
        tensor.ParseFromString((folder / f"output_{k}.pb").read_bytes())
        arrays.append(numpy_helper.to_array(tensor))
    return arrays


# What ortops writes into an error: "<domain>.<op>: ..." for an op's error (the op's name as
# the node has it), "ortops: ..." for the library's own; ONNX Runtime puts it after
# "Exception during initialization: " or "Status Message: ", words that vary between versions.
OWN_MESSAGE = re.compile(r"\b(?:(?:ortops|mmcv|mmdeploy|TRT)\.\w+|ortops): .*", re.DOTALL)


def ortops_message(message: str) -> str:
    """The part of an error message that ortops wrote, or "" when ONNX Runtime wrote it all."""
    found = OWN_MESSAGE.search(message)
    return found.group(0).strip() if found else ""


def compare_case(expected: Path, got: Path, inexact: bool) -> str:
    """ "" when ``got`` (a Windows run's folder) matches ``expected`` (Linux's), else why not."""
    if (expected / "error.txt").exists():
        if not (got / "error.txt").exists():
            return "Linux reported an error, Windows returned outputs: " + (expected / "error.txt").read_text()[:300]
        own = ortops_message((expected / "error.txt").read_text())
        message = (got / "error.txt").read_text()
        return "" if own in message else f"ortops' message differs:\n  Linux:   {own}\n  Windows: {message}"
    if (got / "error.txt").exists():
        return "Windows reported an error: " + (got / "error.txt").read_text()[:500]
    want, have = _tensors(expected), _tensors(got)
    if len(want) != len(have):
        return f"{len(have)} outputs, Linux returned {len(want)}"
    for k, (a, b) in enumerate(zip(want, have)):
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"output {k}: {b.dtype}{list(b.shape)}, Linux returned {a.dtype}{list(a.shape)}"
        if a.dtype.kind != "f":
            if not np.array_equal(a, b):
                return f"output {k}: {int((a != b).sum())} of {a.size} values differ (exactly compared)"
            continue
        same = (a.view(f"u{a.itemsize}") == b.view(f"u{a.itemsize}")) | (np.isnan(a) & np.isnan(b))
        if same.all():
            continue
        if not inexact:
            return f"output {k}: {int((~same).sum())} of {a.size} values differ in their bits"
        finite = np.isfinite(a)
        if not np.array_equal(finite, np.isfinite(b)) or not np.array_equal(a[~finite], b[~finite], equal_nan=True):
            return f"output {k}: NaN or infinities in other places"
        tolerance = FLOAT_TOLERANCE[a.dtype]
        scale = max(1.0, float(np.abs(a[finite].astype(np.float64)).max(initial=0.0)))
        error = float(np.abs(a[finite].astype(np.float64) - b[finite].astype(np.float64)).max(initial=0.0))
        if error > tolerance * scale:
            return f"output {k}: off by {error:.3g}, beyond {tolerance} x {scale:.3g}"
    return ""


def compare(folder: Path, out: Path, level: str, label: str, junit: Path | None) -> bool:
    names = [line.split()[0] for line in (folder / "cases.txt").read_text().splitlines() if line.strip()]
    inexact_ops = libm_ops()
    suite = ElementTree.Element("testsuite", name=f"windows-cases-{label}")
    failures, errors_alike, started = [], 0, time.monotonic()
    for name in names:
        case = ElementTree.SubElement(suite, "testcase", classname=f"windows.{label}", name=name)
        if not (out / name).is_dir():
            why = "not run: the runner stopped before this case"
        else:
            inexact = name.split("_", 2)[2] in inexact_ops
            why = compare_case(folder / name / f"expected-{level}", out / name, inexact)
        if why and (out / name).is_dir() and not any((out / name).iterdir()):
            why = "the runner ended during this case (no outputs, no error)"
        if why:
            failures.append(f"{name}: {why}")
            ElementTree.SubElement(case, "failure", message=why.splitlines()[0]).text = why
        elif (folder / name / f"expected-{level}" / "error.txt").exists():
            errors_alike += 1
    suite.set("tests", str(len(names)))
    suite.set("failures", str(len(failures)))
    suite.set("time", f"{time.monotonic() - started:.1f}")
    if junit:
        ElementTree.ElementTree(suite).write(junit, encoding="utf-8", xml_declaration=True)
    for failure in failures[:20]:
        print(f"FAILED {label} {failure}")
    print(
        f"{label}: {len(names) - len(failures)} of {len(names)} cases as on Linux"
        f" ({errors_alike} of them the same error)" + (f", {len(failures)} FAILED" if failures else "")
    )
    return not failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make_parser = commands.add_parser("make", help="save the cases and Linux's results")
    make_parser.add_argument("cases", type=Path)
    compare_parser = commands.add_parser("compare", help="compare a Windows run with Linux's results")
    compare_parser.add_argument("cases", type=Path)
    compare_parser.add_argument("out", type=Path, help="the runner's OUT folder")
    compare_parser.add_argument("--level", required=True, help="the instruction-set level of the run")
    compare_parser.add_argument("--label", required=True, help="runtime and level, for the report")
    compare_parser.add_argument("--junit", type=Path)
    arguments = parser.parse_args()
    if arguments.command == "make":
        make(arguments.cases)
    elif not compare(arguments.cases, arguments.out, arguments.level, arguments.label, arguments.junit):
        sys.exit(1)


if __name__ == "__main__":
    main()
