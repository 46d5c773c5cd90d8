"""The C++ consumer's view: ``cmake --install``, ``find_package(ortops)``, examples/cpp.

Installs the CMake build that the tests run against (``build/``, or the folder of
``ORTOPS_LIBRARY``, or ``ORTOPS_BUILD_DIR``) into a temporary prefix, builds examples/cpp
against that prefix with the ONNX Runtime the build was configured with, and runs both
programs, the one that loads libortops.so by path and the one with ortops linked in
statically, on an ``mmcv::NonMaxSuppression`` model. The same again for the aarch64 cross
build of scripts/test_arm64.sh (``build/arm64/build`` or ``ORTOPS_ARM64_BUILD_DIR``), with
the programs run under qemu-aarch64, when that build exists; and for the Windows cross build
that scripts/test_windows.sh makes and names in ``ORTOPS_WINDOWS_BUILD_DIR`` (a MinGW-w64
consumer of ortops.dll), with the programs run under Wine in the Windows runtime that
``WINEPATH`` names (that script runs these tests).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ortest import make_model, mmcv_nms_model, run

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("cmake", "ninja", "c++", "nm", "readelf")
MISSING = [tool for tool in TOOLS if shutil.which(tool) is None]

pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)} to build the C++ example")

# Five boxes (x1, y1, x2, y2) and scores, with the answer worked out by hand (offset 0, IoU
# threshold 0.5; a box goes when its IoU with a kept box is > 0.5). Score order: 4, 1, 2, 3, 0.
#   4 kept first.
#   1 vs 4: overlap x [1, 10] y [5, 10] = 45, union 100 + 100 - 45 = 155, IoU 0.29: kept.
#   2 is far from 4 and 1: kept.
#   3 vs 2: overlap x [20, 30] y [25, 30] = 50, union 150, IoU 0.33: kept.
#   0 vs 4: overlap 10 x 5 = 50, IoU 50 / 150 = 0.33; vs 1: overlap 9 x 10 = 90,
#     IoU 90 / 110 = 0.82 > 0.5: dropped.
BOXES = [[0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30], [20, 25, 30, 35], [0, 5, 10, 15]]
SCORES = [0.6, 0.9, 0.8, 0.7, 0.95]
EXPECTED_LINE = "indices int64 [4]: 4 1 2 3"


def _build_dir(platform: str) -> Path:
    if platform == "windows":
        return Path(os.environ.get("ORTOPS_WINDOWS_BUILD_DIR", ROOT / "build" / "windows" / "build"))
    if platform == "aarch64":
        return Path(os.environ.get("ORTOPS_ARM64_BUILD_DIR", ROOT / "build" / "arm64" / "build"))
    if "ORTOPS_BUILD_DIR" in os.environ:
        return Path(os.environ["ORTOPS_BUILD_DIR"])
    if "ORTOPS_LIBRARY" in os.environ:
        return Path(os.environ["ORTOPS_LIBRARY"]).resolve().parent
    return ROOT / "build"


def _cache(build: Path) -> dict[str, str]:
    entries = {}
    for line in (build / "CMakeCache.txt").read_text().splitlines():
        if line and not line.startswith(("#", "//")) and "=" in line:
            key, value = line.split("=", 1)
            entries[key.split(":", 1)[0]] = value
    return entries


def _compiler(build: Path) -> Path | None:
    """The C++ compiler a CMake build folder was configured with."""
    for info in build.glob("CMakeFiles/*/CMakeCXXCompiler.cmake"):
        found = re.search(r'set\(CMAKE_CXX_COMPILER "([^"]+)"\)', info.read_text())
        if found:
            return Path(found.group(1))
    return None


def _run(args: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]


def _check(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@dataclass
class Example:
    """An install prefix, examples/cpp built against it, and an NMS model to run."""

    prefix: Path
    programs: Path
    model: Path
    emulator: list[str]  # qemu-aarch64 or Wine and its arguments for a cross build, else empty
    windows: bool = False

    @property
    def library(self) -> Path:
        return self.prefix / "lib" / ("ortops.dll" if self.windows else "libortops.so")

    def program(self, name: str) -> Path:
        return self.programs / (f"{name}.exe" if self.windows else name)

    def run(
        self, program: str, *args: str | Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return _run([*self.emulator, self.program(program), *args], env=env)


@pytest.fixture(scope="module", params=["native", "aarch64", "windows"])
def example(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Example:
    """Installs the build into a prefix and builds examples/cpp against it.

    "native" uses the build the other tests use; "aarch64" the cross build of
    scripts/test_arm64.sh, whose programs run under qemu-aarch64; "windows" the MinGW-w64
    cross build of scripts/test_windows.sh, whose programs run under Wine.
    """
    platform: str = request.param
    windows = platform == "windows"
    if windows and not ("ORTOPS_WINDOWS_BUILD_DIR" in os.environ and "WINEPATH" in os.environ):
        pytest.skip("scripts/test_windows.sh runs this (ORTOPS_WINDOWS_BUILD_DIR, WINEPATH: the build, the runtime)")
    build = _build_dir(platform)
    if not (build / "CMakeCache.txt").exists():
        made_by = {"aarch64": "scripts/test_arm64.sh", "windows": "scripts/test_windows.sh"}.get(platform)
        pytest.skip(f"no {platform} CMake build in {build} ({made_by or 'scripts/setup.sh'} makes one)")
    cache = _cache(build)
    source = Path(cache["CMAKE_HOME_DIRECTORY"])
    ort_include = Path(cache["ORTOPS_ORT_INCLUDE_DIR"])
    ort_lib = Path(cache.get("ORTOPS_ORT_LIBRARY_DIR") or source / ".deps" / "onnxruntime" / "lib")
    # What a program links: libonnxruntime.so, or for Windows an import library of onnxruntime.dll.
    runtime_library = "libonnxruntime.dll.a" if windows else "libonnxruntime.so"
    if not (ort_include / "onnxruntime_cxx_api.h").exists() or not (ort_lib / runtime_library).exists():
        pytest.skip(f"needs ONNX Runtime headers in {ort_include} and {runtime_library} in {ort_lib}")
    compiler = _compiler(build)
    if compiler is None or not compiler.exists():
        pytest.skip(f"the C++ compiler of {build} is not installed: {compiler}")
    toolchain = cache.get("CMAKE_TOOLCHAIN_FILE", "")
    emulator: list[str] = []
    if windows:
        if not Path(cache.get("ORTOPS_WINE64", "-")).exists():
            pytest.skip("the cross build has no Wine to run its programs")
        emulator = [str(ROOT / "scripts" / "wine.sh")]
    elif toolchain:
        if not Path(cache.get("ORTOPS_QEMU_AARCH64", "-")).exists():
            pytest.skip("the cross build has no qemu-aarch64 to run its programs")
        emulator = [cache["ORTOPS_QEMU_AARCH64"], "-L", cache["ORTOPS_QEMU_LD_PREFIX"]]
    tmp = tmp_path_factory.mktemp(f"cpp-{platform}")
    prefix = tmp / "prefix"
    # Brings the build up to date (a no-op after scripts/setup.sh), then installs it.
    _check(_run(["cmake", "--build", build, "--target", "ortops", "ortops_static", "ortops_manifest_json"]))
    _check(_run(["cmake", "--install", build, "--prefix", prefix]))

    configure = [
        "cmake",
        "-S",
        ROOT / "examples" / "cpp",
        "-B",
        tmp / "example",
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Wpedantic -Wshadow -Werror",
        f"-Dortops_DIR={prefix / 'lib' / 'cmake' / 'ortops'}",
        f"-DONNXRUNTIME_INCLUDE_DIR={ort_include}",
        f"-DONNXRUNTIME_LIB_DIR={ort_lib}",
    ]
    if toolchain:
        configure.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    out = _check(_run(configure))
    example = Example(prefix, tmp / "example", tmp / "nms.onnx", emulator, windows)
    assert f"ortops library: {example.library}" in out, out
    _check(_run(["cmake", "--build", tmp / "example", "-j2"]))

    model = mmcv_nms_model(iou_threshold=0.5, offset=0)
    (tmp / "nms.onnx").write_bytes(model.SerializeToString())
    return example


def _inputs(boxes: list[list[float]], scores: list[float]) -> list[str]:
    flat = ",".join(str(v) for box in boxes for v in box)
    return [f"boxes={len(boxes)}x4:{flat}", f"scores={len(scores)}:{','.join(map(str, scores))}"]


def test_install_tree_has_the_library_manifest_header_and_package(example: Example) -> None:
    assert example.library.is_file(), example.library
    for path in (
        "lib/libortops_static.a",
        "lib/ortops_ops.json",
        "include/ortops/ortops.h",
        "lib/cmake/ortops/ortopsConfig.cmake",
        "lib/cmake/ortops/ortopsConfigVersion.cmake",
    ):
        assert (example.prefix / path).is_file(), path
    assert "RegisterCustomOps" in (example.prefix / "include/ortops/ortops.h").read_text()


@pytest.mark.parametrize("program", ["run_model", "run_model_static"])
def test_example_runs_mmcv_nms(example: Example, program: str) -> None:
    out = _check(example.run(program, example.model, *_inputs(BOXES, SCORES)))
    assert out.strip() == EXPECTED_LINE


@pytest.mark.parametrize("program", ["run_model", "run_model_static"])
def test_example_reports_the_ops_error(example: Example, program: str) -> None:
    result = example.run(program, example.model, *_inputs(BOXES, SCORES[:4]))
    assert result.returncode == 1
    assert "mmcv.NonMaxSuppression: input 'scores'" in result.stderr, result.stderr


def _pe_headers(path: Path) -> str:
    """objdump -p of a Windows program or DLL (binutils' objdump reads PE files)."""
    return _check(_run(["objdump", "-p", path]))


def test_neither_program_links_libortops_so(example: Example) -> None:
    for program in ("run_model", "run_model_static"):
        if example.windows:
            needed = "\n".join(re.findall(r"DLL Name: (\S+)", _pe_headers(example.program(program))))
        else:
            needed = _check(_run(["readelf", "-d", example.program(program)]))
        assert "onnxruntime" in needed and "ortops" not in needed, needed


def test_static_program_exports_only_the_entry_point_of_ortops(example: Example) -> None:
    if example.windows:  # the export directory's name table: "\t[   0] RegisterCustomOps"
        table = _pe_headers(example.program("run_model_static")).split("[Ordinal/Name Pointer] Table", 1)[-1]
        symbols = re.findall(r"^\t\[\s*\d+\] (\S+)$", table.split("\n\n", 1)[0], re.MULTILINE)
        assert symbols == ["RegisterCustomOps"], symbols
        return
    dynamic = _check(_run(["nm", "-D", "--defined-only", "-C", example.program("run_model_static")]))
    symbols = [line.split(maxsplit=2)[-1] for line in dynamic.splitlines() if line.strip()]
    assert "RegisterCustomOps" in symbols
    assert not [s for s in symbols if "ortops" in s], symbols


def test_bare_library_name_fails_unless_on_the_loader_path(example: Example) -> None:
    # What the README warns about: RegisterCustomOpsLibrary("libortops.so") is a dlopen of
    # that name, which searches only the loader's paths. On Windows, LoadLibraryEx of
    # "ortops.dll" searches the program's folder, the system's and PATH, to which WINEPATH
    # adds (it names the runtime's folder already: the program needs onnxruntime.dll).
    args = ["--library", example.library.name, example.model, *_inputs(BOXES, SCORES)]
    env = dict(os.environ)
    if example.windows:
        runtime = env["WINEPATH"]
        assert example.run("run_model", *args, env=env).returncode == 1
        env["WINEPATH"] = f"{runtime};{example.prefix / 'lib'}"
    else:
        env.pop("LD_LIBRARY_PATH", None)
        assert example.run("run_model", *args, env=env).returncode == 1
        env["LD_LIBRARY_PATH"] = str(example.prefix / "lib")
    assert _check(example.run("run_model", *args, env=env)).strip() == EXPECTED_LINE


# ---------------------------------------------------------------- every op through run_model
# On aarch64 this is the check that the kernels compute on ARM what they compute on x86-64:
# each op runs in the cross-built program under qemu and is compared with the same op in
# this process's ONNX Runtime (x86-64), whose results the op tests compare with independent
# references. Natively it checks run_model's reading and printing of tensors.


@dataclass
class OpCase:
    """One ortops node: its type, inputs (in order), output names and attributes."""

    op_type: str
    inputs: dict[str, np.ndarray]
    outputs: list[str]
    attributes: dict[str, object]


def _op_cases() -> dict[str, OpCase]:
    """Small random inputs for every op of the ortops domain (the compat names share kernels)."""
    rng = np.random.default_rng(7)
    f32 = np.float32

    def boxes(n: int) -> np.ndarray:
        xy = rng.uniform(0, 40, (n, 2))
        return np.concatenate([xy, xy + rng.uniform(4, 16, (n, 2))], 1).astype(f32)

    def rotated(*shape: int) -> np.ndarray:  # (cx, cy, w, h, angle)
        parts = [rng.uniform(0, 40, (*shape, 2)), rng.uniform(3, 15, (*shape, 2)), rng.uniform(-3, 3, (*shape, 1))]
        return np.concatenate(parts, -1).astype(f32)

    def distinct_scores(*shape: int) -> np.ndarray:
        count = int(np.prod(shape))
        return (rng.permutation(count).astype(f32) / count + 0.01).reshape(shape)

    features = rng.normal(size=(2, 3, 7, 8)).astype(f32)
    corners = np.concatenate([rng.integers(0, 2, (5, 1)), rng.uniform(0, 8, (5, 2))], 1)
    rois = np.concatenate([corners, corners[:, 1:] + rng.uniform(1, 8, (5, 2))], 1).astype(f32)
    rotated_rois = np.concatenate([corners, rng.uniform(1, 8, (5, 2)), rng.uniform(-3, 3, (5, 1))], 1).astype(f32)
    pooling = {"spatial_scale": 0.5, "sampling_ratio": 2, "aligned": 1}
    deform = {
        "input": rng.normal(size=(1, 4, 6, 6)).astype(f32),
        "offset": (rng.normal(size=(1, 18, 6, 6)) * 2).astype(f32),
        "weight": rng.normal(size=(5, 4, 3, 3)).astype(f32),
        "bias": rng.normal(size=5).astype(f32),
        "mask": rng.random((1, 9, 6, 6)).astype(f32),
    }
    return {
        "SoftNMS": OpCase(
            "SoftNMS",
            {"boxes": boxes(16), "scores": distinct_scores(16)},
            ["dets", "indices"],
            {"iou_threshold": 0.3, "sigma": 0.5, "min_score": 0.05, "method": 2},
        ),
        "NMSMatch": OpCase(
            "NMSMatch",
            {
                "boxes": boxes(12)[None],
                "scores": distinct_scores(1, 2, 12),
                "iou_threshold": np.array([0.3], f32),
                "score_threshold": np.array([0.1], f32),
            },
            ["matches"],
            {},
        ),
        "NMSRotated": OpCase(
            "NMSRotated",
            {"boxes": rotated(1, 14), "scores": distinct_scores(1, 2, 14)},
            ["selected"],
            {"iou_threshold": 0.2, "score_threshold": 0.05},
        ),
        "RoIAlignAvg": OpCase(
            "RoIAlign",
            {"input": features, "rois": rois},
            ["output"],
            {"output_height": 2, "output_width": 3, "mode": "avg", **pooling},
        ),
        "RoIAlignMax": OpCase(
            "RoIAlign",
            {"input": features, "rois": rois},
            ["output"],
            {"output_height": 3, "output_width": 2, "mode": "max", **pooling, "sampling_ratio": 0},
        ),
        "RoIAlignRotated": OpCase(
            "RoIAlignRotated",
            {"input": features, "rois": rotated_rois},
            ["output"],
            {"output_height": 3, "output_width": 2, "clockwise": 0, **pooling},
        ),
        "RotatedFeatureAlign": OpCase(
            "RotatedFeatureAlign",
            {"features": features, "best_rbboxes": rotated(2, 7, 8)},
            ["output"],
            {"spatial_scale": 0.5, "points": 5},
        ),
        "GridSampleBilinearZeros": OpCase(
            "GridSample",
            {"input": features, "grid": rng.uniform(-1.2, 1.2, (2, 4, 5, 2)).astype(f32)},
            ["output"],
            {"interpolation_mode": 0, "padding_mode": 0, "align_corners": 0},
        ),
        "GridSampleBicubicReflection": OpCase(
            "GridSample",
            {"input": features, "grid": rng.uniform(-1.2, 1.2, (2, 3, 4, 2)).astype(f32)},
            ["output"],
            {"interpolation_mode": 2, "padding_mode": 2, "align_corners": 1},
        ),
        "CornerPool": OpCase("CornerPool", {"input": features}, ["output"], {"mode": 2}),
        "CumMax": OpCase("CumMax", {"input": features}, ["values", "indices"], {"dim": 3}),
        "CumMinInt64": OpCase(
            "CumMin", {"input": rng.integers(-9, 9, (4, 6)).astype(np.int64)}, ["values", "indices"], {"dim": 0}
        ),
        "DeformConv2d": OpCase(
            "DeformConv2d",
            deform,
            ["output"],
            {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1, "deform_groups": 1},
        ),
        "GroupNorm": OpCase(
            "GroupNorm",
            {
                "X": rng.normal(size=(2, 6, 3, 4)).astype(f32),
                "scale": rng.normal(size=6).astype(f32),
                "bias": rng.normal(size=6).astype(f32),
            },
            ["Y"],
            {"num_groups": 3, "epsilon": 1e-5},
        ),
        "MatrixInverse": OpCase(
            "MatrixInverse", {"X": (rng.normal(size=(2, 4, 4)) + 4 * np.eye(4)).astype(f32)}, ["Y"], {}
        ),
    }


OP_CASES = _op_cases()


def _as_argument(name: str, value: np.ndarray) -> str:
    shape = "x".join(str(d) for d in value.shape)
    # repr of the exact value (a float32 widened to float64) reads back as the same float32.
    text = ",".join(repr(v) for v in value.ravel().tolist())
    return f"{name}={shape}:{text}"


def _parse_outputs(text: str) -> dict[str, np.ndarray]:
    dtypes = {"float": np.float32, "double": np.float64, "int64": np.int64, "int32": np.int32}
    outputs = {}
    for line in text.splitlines():
        head, _, values = line.partition(":")
        name, type_name, dims = head.split(" ", 2)
        shape = tuple(int(d) for d in dims.strip("[]").split(",") if d)
        outputs[name] = np.array(values.split(), dtype=dtypes[type_name]).reshape(shape)
    return outputs


@pytest.mark.parametrize("name", list(OP_CASES))
def test_every_op_in_run_model_matches_this_processs_runtime(example: Example, name: str, tmp_path: Path) -> None:
    case = OP_CASES[name]
    spec = [(input_name, value.dtype, value.ndim) for input_name, value in case.inputs.items()]
    model = make_model(case.op_type, "ortops", spec, case.outputs, **case.attributes)
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    args = [_as_argument(input_name, value) for input_name, value in case.inputs.items()]
    got = _parse_outputs(_check(example.run("run_model", tmp_path / "model.onnx", *args)))
    expected = run(case.op_type, "ortops", dict(case.inputs), case.outputs, **case.attributes)
    assert list(got) == case.outputs
    for output, want in zip(case.outputs, expected):
        assert got[output].dtype == want.dtype and got[output].shape == want.shape, output
        assert want.size > 0, f"{name}: {output} is empty; the case tests nothing"
        # Same code, another CPU (and FMA contraction, libm, MLAS): float32 rounding apart.
        np.testing.assert_allclose(got[output], want, rtol=1e-5, atol=1e-5, err_msg=f"{name}: {output}")
