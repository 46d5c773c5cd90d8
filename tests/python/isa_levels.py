"""The instruction-set levels of ortops' CPU kernels that this CPU can run, lowest first, as
the environment variable ORTOPS_ISA names them; read from /proc/cpuinfo, independently of
the library's own detection. Run as a script it prints them, or with ``--tests`` the test
files that scripts/test.sh and scripts/test_sanitizers.sh run again at each lower level."""

from __future__ import annotations

import platform
import sys

# The ONNX-Runtime-level tests of the ops whose loops are compiled per level (the
# csrc/*/*_simd.cc files, and the ops built on them). Every other op runs the same code at
# every level; test_isa.py checks all ops' bits across levels.
PER_LEVEL_TESTS = [
    f"tests/python/ort/test_{name}.py"
    for name in (
        "deform_conv",
        "roi_align",
        "roi_align_rotated",
        "multi_level_roi_align",
        "roi_align_by_level",
        "trt_nodes",
        "grid_sample",
        "nms",
        "nms_match",
        "nms_family_large",
        "corner_pool",
        "cummax",
        "float16",
        "compat_files",
        "group_norm",
        "mmdeploy_trt_nodes",
    )
]


def cpu_isa_levels() -> list[str]:
    """``["sse2", "avx2", "avx512"]`` or a prefix of it on x86-64, ``["neon"]`` on ARM64."""
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return ["neon"]
    if machine not in ("x86_64", "amd64"):
        return ["baseline"]
    flags: set[str] = set()
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    levels = ["sse2"]
    if {"avx2", "fma"} <= flags:
        levels.append("avx2")
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
            levels.append("avx512")
    return levels


if __name__ == "__main__":
    print(" ".join(PER_LEVEL_TESTS if sys.argv[1:] == ["--tests"] else cpu_isa_levels()))
