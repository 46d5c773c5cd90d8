"""The CUDA build (build/cuda/libortops.so, cmake/cuda.cmake) on a machine without a GPU.

CI compiles it on every run (scripts/test.sh's cuda-build suite) and cannot run its device
kernels: those run in the emulated device (build/libortops_device_on_cpu.so) under the whole
suite, and on a GPU in scripts/test_gpu.sh. What can be checked here is checked: the library
needs no CUDA library and no newer glibc than the wheel's tag, exports only
RegisterCustomOps, and loads into ONNX Runtime (the newest and, in .venv-ort-min, the oldest
supported) where there is no driver, running its CPU kernels with the CPU library's results.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ortest import MANYLINUX_SYSTEM_LIBRARIES, make_model

ROOT = Path(__file__).resolve().parents[3]
LIBRARY = Path(os.environ.get("ORTOPS_CUDA_LIBRARY", ROOT / "build" / "cuda" / "libortops.so"))
CPU_LIBRARY = Path(os.environ.get("ORTOPS_CPU_LIBRARY", ROOT / "build" / "libortops.so"))

pytestmark = pytest.mark.skipif(
    not LIBRARY.is_file(), reason=f"no CUDA build at {LIBRARY}: scripts/test.sh's cuda-build suite compiles it"
)


def _readelf(*args: str) -> str:
    return subprocess.run(["readelf", *args, str(LIBRARY)], check=True, capture_output=True, text=True).stdout


def _wheel_glibc() -> tuple[int, int]:
    text = (ROOT / "deps" / "versions.env").read_text()
    match = re.search(r"^ORTOPS_WHEEL_PLATFORM=manylinux_(\d+)_(\d+)_x86_64$", text, re.MULTILINE)
    assert match, "no ORTOPS_WHEEL_PLATFORM in deps/versions.env"
    return int(match[1]), int(match[2])


def test_needs_no_cuda_library_only_manylinux_system_ones() -> None:
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", _readelf("-d")))
    assert needed <= MANYLINUX_SYSTEM_LIBRARIES, sorted(needed - MANYLINUX_SYSTEM_LIBRARIES)


def test_exports_only_register_custom_ops() -> None:
    nm = subprocess.run(["nm", "-D", "--defined-only", str(LIBRARY)], check=True, capture_output=True, text=True)
    assert [line.split()[-1] for line in nm.stdout.splitlines()] == ["RegisterCustomOps"]


def test_needs_no_glibc_newer_than_the_wheel_tag() -> None:
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"@GLIBC_([0-9.]+)", _readelf("--dyn-syms", "-W"))}
    too_new = sorted(v for v in versions if v > _wheel_glibc())
    assert not too_new, f"symbols at GLIBC {too_new} (tag allows {_wheel_glibc()})"


def _run(library: Path, model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _cases() -> list[tuple[str, bytes, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 50, (200, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(1, 20, (200, 2)).astype(np.float32)], axis=1)
    scores = rng.random(200).astype(np.float32)
    features = rng.standard_normal((2, 3, 12, 16)).astype(np.float32)
    rois = np.array([[0, 1, 1, 9, 7], [1, 2.5, 0, 15, 11]], np.float32)
    grid = rng.uniform(-1.1, 1.1, (2, 5, 6, 2)).astype(np.float32)
    nms = make_model("NMS", "ortops", [("boxes", np.float32, 2), ("scores", np.float32, 1)], ["kept"])
    roi_align = make_model(
        "RoIAlign",
        "ortops",
        [("input", np.float32, 4), ("rois", np.float32, 2)],
        ["Y"],
        output_height=3,
        output_width=2,
    )
    grid_sample = make_model("GridSample", "ortops", [("input", np.float32, 4), ("grid", np.float32, 4)], ["Y"])
    return [
        ("NMS", nms.SerializeToString(), {"boxes": boxes, "scores": scores}),
        ("RoIAlign", roi_align.SerializeToString(), {"input": features, "rois": rois}),
        ("GridSample", grid_sample.SerializeToString(), {"input": features, "grid": grid}),
    ]


@pytest.mark.skipif(not CPU_LIBRARY.is_file(), reason=f"no CPU library at {CPU_LIBRARY} to compare with")
@pytest.mark.parametrize("case", _cases(), ids=lambda case: case[0])
def test_runs_its_cpu_kernels_without_a_driver_as_the_cpu_library(
    case: tuple[str, bytes, dict[str, np.ndarray]],
) -> None:
    _, model, feeds = case
    for got, expected in zip(_run(LIBRARY, model, feeds), _run(CPU_LIBRARY, model, feeds)):
        np.testing.assert_array_equal(got, expected)


def test_manifest_names_the_cuda_provider_beside_the_cpu_one() -> None:
    manifest = json.loads((LIBRARY.parent / "ortops_ops.json").read_text())
    assert manifest["library_providers"] == ["CPUExecutionProvider", "CUDAExecutionProvider"]
    on_cuda = [op["name"] for op in manifest["ops"] if "CUDAExecutionProvider" in op["execution_providers"]]
    assert "NMS" in on_cuda and "RoIAlign" in on_cuda


@pytest.mark.skipif(not (ROOT / ".venv-wheel" / "bin" / "auditwheel").is_file(), reason="no .venv-wheel")
def test_gpu_wheel_is_ortops_gpu_with_the_cuda_build_requiring_onnxruntime_gpu(tmp_path: Path) -> None:
    env = {**os.environ, "ORTOPS_PREBUILT_DIR": str(LIBRARY.parent), "ORTOPS_WHEEL_DIR": str(tmp_path)}
    built = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_wheel.sh"), "gpu"], env=env, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = Path(built.stdout.strip().splitlines()[-1])
    version = re.search(r'__version__ = "(.+?)"', (ROOT / "python" / "ortops" / "_version.py").read_text())[1]
    platform = re.search(r"^ORTOPS_WHEEL_PLATFORM=(\S+)$", (ROOT / "deps" / "versions.env").read_text(), re.M)[1]
    assert wheel.name == f"ortops_gpu-{version}-py3-none-{platform}.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"ortops_gpu-{version}.dist-info/METADATA").decode()
        manifest = json.loads(archive.read("ortops/ortops_ops.json"))
    assert "ortops/libortops.so" in names and "ortops/__init__.py" in names
    assert re.search(r"^Name: ortops-gpu$", metadata, re.M)
    # pip shows which build it is, and no claim about GPU verification that would go stale.
    assert re.search(r"^Summary: .*; CUDA build \(CUDAExecutionProvider kernels\)$", metadata, re.M)
    assert "verified" not in metadata.split("\n\n")[0]
    requirements = re.findall(r"^Requires-Dist: (.+)$", metadata, re.M)
    assert "onnxruntime-gpu>=1.17" in requirements
    # No requirement or extra that would install the CPU onnxruntime over onnxruntime-gpu.
    assert not [r for r in requirements if re.match(r"onnxruntime(?!-gpu)\b", r)], requirements
    assert manifest["library_providers"] == ["CPUExecutionProvider", "CUDAExecutionProvider"]
