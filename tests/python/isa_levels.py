"""The instruction-set levels of ortops' CPU kernels that this CPU can run, lowest first, as
the environment variable ORTOPS_ISA names them; read from /proc/cpuinfo, independently of
the library's own detection. Run as a script it prints them (scripts/test.sh runs the tests
at each)."""

from __future__ import annotations

import platform


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
    print(" ".join(cpu_isa_levels()))
