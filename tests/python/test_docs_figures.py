"""The performance and supported-versions pages are generated from data (scripts/gen_perf_docs.py):
they, their charts and the README's speed headline must match the committed benchmark records,
and every version that the README and the docs state must match the pins in deps/."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_perf_docs.py"


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_perf_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def test_generated_files_are_up_to_date(tmp_path):
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], check=True)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert generated, "the generator wrote nothing"
    stale = [str(name) for name in generated if (ROOT / "docs" / name).read_bytes() != (tmp_path / name).read_bytes()]
    assert not stale, f"run scripts/gen_perf_docs.py: out of date: {stale}"
    # A chart the records no longer make must not linger in docs/.
    committed_charts = {p.name for p in (ROOT / "docs" / gen.CHARTS).glob("*.svg")}
    assert committed_charts == {p.name for p in (tmp_path / gen.CHARTS).glob("*.svg")}


def test_generation_is_deterministic():
    assert gen.generated_files() == gen.generated_files()


def test_readme_speed_headline_matches_the_records():
    block = gen.readme_headline_block((ROOT / "README.md").read_text())
    if block is None:
        pytest.skip(
            f"README.md has no {gen.HEADLINE_START} ... {gen.HEADLINE_END} block yet; "
            "add it and fill it with scripts/gen_perf_docs.py --readme"
        )
    assert block == gen.speed_headline(), "run scripts/gen_perf_docs.py --readme"


def test_the_headline_block_is_replaced_in_place():
    readme = f"intro\n{gen.HEADLINE_START}\n- old\n{gen.HEADLINE_END}\nrest\n"
    updated = gen.with_headline(readme, ["- new 1", "- new 2"])
    assert updated == f"intro\n{gen.HEADLINE_START}\n- new 1\n- new 2\n{gen.HEADLINE_END}\nrest\n"
    assert gen.readme_headline_block(updated) == ["- new 1", "- new 2"]


# The records ------------------------------------------------------------------------------------

# The keys of a result row as benchmarks/bench.py and bench_cuda.py write them.
CPU_ROW_KEYS = {"case", "threads", "ortops_ms", "anchor", "anchor_ms", "ratio", "target", "met"}
CUDA_ROW_KEYS = {
    "case",
    "ortops_ms",
    "ortops_latency_ms",
    "ortops_device_ms",
    "anchor",
    "anchor_ms",
    "ratio",
    "target",
    "met",
    "differs",
    "throughput",
    "device_counts",
}


@pytest.mark.parametrize(("record", "keys"), [(gen.CPU_RECORD, CPU_ROW_KEYS), (gen.CUDA_RECORD, CUDA_ROW_KEYS)])
def test_records_follow_the_benchmarks_schema(record, keys):
    data = json.loads(record.read_text())
    assert data["machine"].get("date"), "a record says when it was measured"
    assert data["results"]
    for row in data["results"]:
        assert set(row) == keys, row
        if row["target"] is not None and row["met"] is not None:
            assert row["met"] == (row["ratio"] >= row["target"]), row
        # Times and ratio agree (to the rounding of the printed tables) where both times are known.
        if row["anchor_ms"] is not None and row["ortops_ms"] is not None:
            assert row["anchor_ms"] / row["ortops_ms"] == pytest.approx(row["ratio"], rel=0.02), row


def test_a_tampered_record_changes_the_pages_and_the_headline():
    cpu, cuda = gen.load_record(gen.CPU_RECORD), gen.load_record(gen.CUDA_RECORD)
    page, charts = gen.performance_page(cpu, cuda)
    headline = gen.speed_headline(cpu, cuda)
    tampered = copy.deepcopy(cpu)
    row = gen.find_row(tampered, "NMS 10k", "torchvision.ops.nms", 1)
    row["ratio"] = 0.5
    tampered_page, tampered_charts = gen.performance_page(tampered, cuda)
    assert tampered_page != page
    assert tampered_charts[gen.cpu_chart_name(1)] != charts[gen.cpu_chart_name(1)]
    assert tampered_charts[gen.cpu_chart_name(2)] == charts[gen.cpu_chart_name(2)]
    tampered_headline = gen.speed_headline(tampered, cuda)
    assert tampered_headline != headline
    assert "**0.50x** torchvision's `nms`" in tampered_headline[0]


def test_a_record_without_a_headline_case_is_an_error():
    cpu = gen.load_record(gen.CPU_RECORD)
    cpu["results"] = [row for row in cpu["results"] if not row["case"].startswith("grid_sampler")]
    with pytest.raises(KeyError, match="grid_sampler"):
        gen.speed_headline(cpu, gen.load_record(gen.CUDA_RECORD))


def test_a_changed_pin_changes_the_versions_page(tmp_path):
    for name in ("deps", "pyproject.toml"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    env = tmp_path / "deps" / "versions.env"
    env.write_text(re.sub(r"(?m)^ORTOPS_MIN_ORT_API=\d+", "ORTOPS_MIN_ORT_API=18", env.read_text()))
    versions = gen.read_versions(tmp_path)
    assert versions.ort_min == "1.18"
    assert gen.versions_page(versions) != gen.versions_page(gen.read_versions())


# Versions stated in prose -----------------------------------------------------------------------


def _prose() -> dict[str, str]:
    """README.md and every page of docs/, each on one line (prose wraps), emphasis and code
    marks removed, so that a claim reads the same wherever its line breaks."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return {
        str(page.relative_to(ROOT)): re.sub(r"\s+", " ", page.read_text().replace("**", "").replace("`", ""))
        for page in pages
    }


def _claims(pattern: str) -> list[tuple[str, tuple[str, ...], str]]:
    """(page, groups, the matched text) for every match of pattern in the prose."""
    return [
        (page, match.groups(), match.group(0))
        for page, text in _prose().items()
        for match in re.finditer(pattern, text)
    ]


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _all_pins(package: str) -> set[str]:
    pins = set()
    for requirements in (ROOT / "deps").glob("python-*.txt"):
        version = gen.read_pins(requirements).get(package)
        if version:
            pins.add(version)
    return pins


VERSIONS = gen.read_versions()


def test_the_oldest_supported_runtime_agrees_across_deps_and_pyproject():
    assert VERSIONS.ort_extra_min == VERSIONS.ort_min
    assert VERSIONS.ort_gpu_extra_min == VERSIONS.ort_min
    assert _major_minor(VERSIONS.ort_min_tested) == VERSIONS.ort_min
    assert _major_minor(VERSIONS.windows_oldest) == VERSIONS.ort_min
    assert VERSIONS.ort_gpu_tested == VERSIONS.ort_newest_tested  # python-ort-gpu.txt says so
    assert VERSIONS.windows_newest == VERSIONS.ort_newest_tested


def test_stated_oldest_runtime_matches_deps():
    patterns = [
        # "ONNX Runtime itself (1.17 or newer)", "requires onnxruntime-gpu (1.17 or newer)",
        # "ONNX Runtime 1.17 and newer", "Windows builds (1.17 or newer, ...)"
        r"(?:ONNX Runtime|onnxruntime(?:-gpu)?)[^.;()]{0,40}\(?(\d+\.\d+)(?:\.\d+)? (?:or|and) newer",
        r"ONNX Runtime from (\d+\.\d+) on",
        r"(\d+\.\d+)(?:\.\d+)?\"?\)?,? (?:\()?the oldest (?:supported|we support|ortops supports)",
        r"onnxruntime(?:-gpu)?\s*>=\s*(\d+\.\d+)",
    ]
    claims = [claim for pattern in patterns for claim in _claims(pattern)]
    assert any(page == "README.md" for page, _, _ in claims), "the README states no oldest runtime any more"
    wrong = [(page, text) for page, (version,), text in claims if version != VERSIONS.ort_min]
    assert not wrong, f"deps say the oldest supported ONNX Runtime is {VERSIONS.ort_min}: {wrong}"


@pytest.mark.parametrize(
    ("what", "pattern", "expected"),
    [
        ("Python", r"Python (\d+\.\d+) or newer", VERSIONS.python_min),
        ("torch", r"\btorch (\d+\.\d+) or newer", VERSIONS.torch_min),
        ("onnx", r"\bonnx (\d+\.\d+) or newer", VERSIONS.onnx_min),
        ("glibc", r"glibc (\d+\.\d+) or newer", VERSIONS.glibc_min),
        ("CUDA", r"driver for CUDA (\d+)", VERSIONS.cuda_runtime.split(".")[0]),
        ("driver", r"driver for CUDA \d+ \((R\d+) or newer", VERSIONS.cuda_driver_branch),
    ],
)
def test_stated_minimums_match_deps(what, pattern, expected):
    wrong = [(page, text) for page, (version,), text in _claims(pattern) if version != expected]
    assert not wrong, f"deps say {what} {expected}: {wrong}"


@pytest.mark.parametrize(
    ("pattern", "packages"),
    [
        (r"(?:ONNX Runtime|onnxruntime(?:-gpu)?) (\d+\.\d+\.\d+)", ("onnxruntime", "onnxruntime-gpu")),
        (r"\btorch (\d+\.\d+\.\d+)", ("torch",)),
        (r"\btorchvision (\d+\.\d+\.\d+)", ("torchvision",)),
    ],
)
def test_stated_exact_versions_are_pinned(pattern, packages):
    """A full version the prose names ("onnxruntime 1.17.3", "torch 2.15.0") is one that deps/
    pins, so that a pin's update cannot leave a page naming the old one."""
    env = gen.read_env(ROOT / "deps" / "versions.env")
    pinned = {version for package in packages for version in _all_pins(package)}
    if "onnxruntime" in packages:
        pinned |= {value for key, value in env.items() if key.startswith("ORT_") and key.endswith("_VERSION")}
    wrong = [(page, text) for page, (version,), text in _claims(pattern) if version not in pinned]
    assert not wrong, f"not pinned in deps/ ({sorted(pinned)}): {wrong}"
