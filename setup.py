"""Builds libortops.so with CMake and puts it, with its op manifest, into the wheel.

``pip install .`` compiles the library (CMake and a C++20 compiler needed; the ONNX Runtime
headers come from ``ORTOPS_ORT_INCLUDE_DIR`` or ``.deps/``, which scripts/setup.sh fills).
``ORTOPS_PREBUILT_DIR=<build folder>`` packages an existing build instead of compiling.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
ARTIFACTS = ("libortops.so", "ortops_ops.json")


def _build_library() -> Path:
    prebuilt = os.environ.get("ORTOPS_PREBUILT_DIR")
    if prebuilt:
        return Path(prebuilt)
    build_dir = Path(tempfile.mkdtemp(prefix="ortops-build-"))
    configure = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DORTOPS_BUILD_TESTS=OFF",
    ]
    if "ORTOPS_ORT_INCLUDE_DIR" in os.environ:
        configure.append(f"-DORTOPS_ORT_INCLUDE_DIR={os.environ['ORTOPS_ORT_INCLUDE_DIR']}")
    subprocess.check_call(configure)
    subprocess.check_call(["cmake", "--build", str(build_dir), "--parallel"])
    return build_dir


class BuildWithLibrary(build_py):
    def run(self) -> None:
        super().run()
        source = _build_library()
        target = Path(self.build_lib) / "ortops"
        target.mkdir(parents=True, exist_ok=True)
        for name in ARTIFACTS:
            shutil.copy2(source / name, target / name)


class BinaryDistribution(Distribution):
    """The wheel carries a native library, so it is tagged for this platform."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    cmdclass={"build_py": BuildWithLibrary},
    distclass=BinaryDistribution,
    # Keep setuptools' scratch out of the CMake build folder.
    options={"build": {"build_base": "build/setuptools"}},
)
