"""Builds libortops.so with CMake and puts it, with its op manifest, into the wheel.

``pip install .`` compiles the library; it needs CMake (3.22+), a C++20 compiler and ninja or
make. The ONNX Runtime headers come from ``ORTOPS_ORT_INCLUDE_DIR`` if set, else from
``.deps/onnxruntime/include``, which scripts/fetch_ort_headers.py fills with the pinned
headers (deps/versions.env; with npm) when they are not there yet.
``ORTOPS_PREBUILT_DIR=<build folder>`` packages an existing build instead of compiling.

The wheel is tagged ``py3-none-<platform>``: libortops.so is loaded by ONNX Runtime, not
imported by Python, so it works with every Python 3 and needs no CPython ABI tag; the
platform tag is this machine's (``linux_x86_64``) until scripts/build_wheel.sh has auditwheel
check it and retag it manylinux. A prebuilt folder that holds ortops.dll, a Windows cross
build (scripts/build_wheel.sh windows), makes a ``win_amd64`` wheel with ortops.dll instead.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # older setuptools (the ONNX Runtime 1.17 environment): the wheel package's
    from wheel.bdist_wheel import bdist_wheel

ROOT = Path(__file__).resolve().parent
MANIFEST = "ortops_ops.json"


def _windows_build() -> bool:
    """Whether the library to package is a Windows cross build's ortops.dll."""
    prebuilt = os.environ.get("ORTOPS_PREBUILT_DIR")
    return bool(prebuilt) and (Path(prebuilt) / "ortops.dll").is_file()


def _artifacts() -> tuple[str, str]:
    return ("ortops.dll" if _windows_build() else "libortops.so", MANIFEST)


@functools.cache
def _load_script(name: str) -> ModuleType:
    """Imports scripts/<name>.py (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _ort_include_dir() -> str:
    """ORTOPS_ORT_INCLUDE_DIR, or .deps/onnxruntime/include with the pinned headers fetched into it."""
    configured = os.environ.get("ORTOPS_ORT_INCLUDE_DIR")
    if configured:
        return configured
    fetcher = _load_script("fetch_ort_headers")
    try:
        return str(fetcher.ensure_headers())
    except fetcher.FetchError as error:
        raise SystemExit(f"ortops: the ONNX Runtime headers are missing and {error}.") from None


def _build_library() -> Path:
    prebuilt = os.environ.get("ORTOPS_PREBUILT_DIR")
    if prebuilt:
        return Path(prebuilt)
    if shutil.which("cmake") is None:
        raise SystemExit(
            "ortops: CMake (3.22 or newer) is not on PATH: install it (e.g. pip install cmake), then retry."
        )
    pins = _load_script("fetch_ort_headers").read_pins()
    build_dir = Path(tempfile.mkdtemp(prefix="ortops-build-"))
    configure = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DORTOPS_BUILD_TESTS=OFF",
        f"-DORTOPS_ORT_INCLUDE_DIR={_ort_include_dir()}",
        f"-DORTOPS_MIN_ORT_API={pins['ORTOPS_MIN_ORT_API']}",
    ]
    if "CMAKE_GENERATOR" not in os.environ and shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    subprocess.check_call(configure)
    build = ["cmake", "--build", str(build_dir), "--parallel"]
    if "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
        build.append(str(os.cpu_count() or 1))
    subprocess.check_call(build)
    return build_dir


class BuildWithLibrary(build_py):
    def run(self) -> None:
        super().run()
        source = _build_library()
        target = Path(self.build_lib) / "ortops"
        target.mkdir(parents=True, exist_ok=True)
        artifacts = _artifacts()
        for name in artifacts:
            shutil.copy2(source / name, target / name)
        for name in ("libortops.so", "ortops.dll"):  # the other platform's, from an earlier build
            if name not in artifacts:
                (target / name).unlink(missing_ok=True)
        if not os.environ.get("ORTOPS_PREBUILT_DIR"):
            shutil.rmtree(source, ignore_errors=True)


class BinaryDistribution(Distribution):
    """The wheel carries a native library, so it is not pure: it goes to platlib."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """Tags the wheel py3-none-<platform>: any Python 3, no CPython ABI, this platform (or
    64-bit Windows, for a Windows cross build)."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", "win_amd64" if _windows_build() else platform


setup(
    cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel},
    distclass=BinaryDistribution,
    # Keep setuptools' scratch out of the CMake build folder.
    options={"build": {"build_base": "build/setuptools"}},
)
