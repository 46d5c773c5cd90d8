"""The operator pages (docs/ops/) are generated from the op table: they must be up to date and
cover every op. The site as a whole is built in strict mode by scripts/test.sh (its docs-site suite)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import ortops
import ortops.torch

ROOT = Path(__file__).resolve().parents[2]


def test_ops_pages_are_up_to_date() -> None:
    """docs/ops/, the Operators part of mkdocs.yml's nav and docs/migrating.md's list."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_every_op_is_documented() -> None:
    index = (ROOT / "docs" / "ops" / "index.md").read_text()
    families = "".join(page.read_text() for page in (ROOT / "docs" / "ops").glob("*.md") if page.name != "index.md")
    for op in ortops.ops():
        assert f"| `{op.domain}` | `{op.name}` |" in index, f"docs/ops/index.md has no row for {op.qualified_name}"
        assert f"`{op.domain}::{op.name}`" in families, f"no family page of docs/ops/ documents {op.qualified_name}"


def test_op_pages_say_which_build_has_cuda_kernels() -> None:
    """The CPU wheel has no CUDA kernels: wherever the pages name CUDAExecutionProvider they say
    that only the ortops-gpu build has it."""
    for page in (ROOT / "docs" / "ops").glob("*.md"):
        text = page.read_text()
        bare = text.count("`CUDAExecutionProvider`") - text.count("`CUDAExecutionProvider` (the ortops-gpu build only)")
        # The index's introduction names it once, in the sentence that says so.
        allowed = 1 if page.name == "index.md" else 0
        assert bare == allowed, f"{page} names CUDAExecutionProvider without saying it is the ortops-gpu build's"


def test_every_ortops_op_has_a_torch_op_and_back() -> None:
    onnx_names = {op.name for op in ortops.ops() if op.domain == ortops.torch.DOMAIN}
    torch_names = {e.onnx_op for e in ortops.torch.exported_ops()}
    assert torch_names == onnx_names


def test_home_page_names_every_op() -> None:
    """The home page's operator list is written by hand: it must name every op of the op table."""
    home = (ROOT / "docs" / "index.md").read_text()
    section = home[home.index("## The operators") : home.index("\n## ", home.index("## The operators") + 1)]
    for op in ortops.ops():
        name = f"`{op.name}`" if op.domain == "ortops" else f"`{op.domain}::{op.name}`"
        assert name in section, f"docs/index.md's operator list does not name {op.qualified_name}"


@pytest.mark.parametrize("page", ["README.md", "CHANGELOG.md"])
def test_the_node_count_is_the_libraries(page: str) -> None:
    """The README and the changelog's release entry say how many nodes ortops has."""
    stated = re.search(r"(\d+) nodes in (\w+) domains", (ROOT / page).read_text())
    assert stated, f"{page} no longer says how many nodes ortops has as this test reads it"
    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
    assert (int(stated[1]), words[stated[2]]) == (len(ortops.ops()), len(ortops.domains())), page


def test_every_compatibility_node_states_its_differences() -> None:
    """Every node registered under another runtime's name says where ortops deliberately gives
    other results than that runtime (mmcv's and mmdeploy's ONNX Runtime kernels, TensorRT's and
    mmdeploy's plugins); ortops' own names have no original to differ from."""
    for op in ortops.ops():
        if op.compat:
            assert len(op.differences) > 40, f"{op.qualified_name} has no 'differences from the original'"
        else:
            assert op.differences == "", f"{op.qualified_name} is ortops' own name: no original to differ from"


def _section(page: str, title: str) -> str:
    start = page.index(f"\n## {title}")
    end = page.find("\n## ", start + 1)
    return page[start : end if end >= 0 else len(page)]


def test_migration_page_lists_every_difference() -> None:
    page = (ROOT / "docs" / "migrating.md").read_text()
    differences = _section(page, "What gives other results than the original")
    for op in ortops.ops():
        if op.compat:
            line = next((line for line in differences.splitlines() if f"`{op.qualified_name}`" in line), "")
            assert op.differences in line, f"docs/migrating.md does not give {op.qualified_name}'s differences"


def test_migration_page_covers_every_node_and_only_ours_as_running() -> None:
    """The exporters' table names every compatibility node ortops registers, and says "no"
    only of nodes that ortops does not register."""
    page = (ROOT / "docs" / "migrating.md").read_text()
    section = _section(page, "Which files run")
    registered = {op.qualified_name for op in ortops.ops()}
    named: set[str] = set()
    for line in section.splitlines():
        nodes = set(re.findall(r"`((?:mmcv|mmdeploy|TRT)::\w+)`", line))
        named |= nodes
        if line.startswith("|") and line.rstrip().endswith("| no |"):
            assert not nodes & registered, f"docs/migrating.md says ortops does not run {sorted(nodes & registered)}"
        elif line.startswith("|") and nodes:
            assert nodes <= registered, f"docs/migrating.md says ortops runs {sorted(nodes - registered)}"
    assert {op.qualified_name for op in ortops.ops() if op.compat} <= named


def test_migration_page_replaces_the_old_libraries() -> None:
    page = (ROOT / "docs" / "migrating.md").read_text()
    for old in ("get_ops_path()", "get_onnxruntime_op_path()", "libmmdeploy_onnxruntime_ops.so"):
        assert old in page, old
    assert "ortops.get_library_path()" in page and "ORTOPS_LIBRARY_PATH" in page
    assert "Domain already set in registry" in page


def test_public_header_names_every_domain() -> None:
    """include/ortops/ortops.h says which domains RegisterCustomOps adds: all of them."""
    lines = (ROOT / "include" / "ortops" / "ortops.h").read_text().splitlines()
    comment = " ".join(line.removeprefix("//").strip() for line in lines if line.startswith("//"))
    sentence = re.search(r"It adds the domains (.+?) to a session's", comment)
    assert sentence, "ortops.h no longer says which domains it adds"
    named = re.findall(r'"(\w+)"', sentence[1])
    assert named == list(ortops.domains())


def test_api_reference_covers_the_public_api() -> None:
    """docs/api.md lists its entries by hand (mkdocstrings renders each from its docstring):
    every public name of ``ortops`` and ``ortops.torch`` must be on it."""
    page = (ROOT / "docs" / "api.md").read_text()
    rendered = set(re.findall(r"^::: ([\w.]+)$", page, re.M))
    missing = [
        f"ortops.{name}" for name in ortops.__all__ if name != "__version__" and f"ortops.{name}" not in rendered
    ]
    documented_torch = {entry.rsplit(".", 1)[-1] for entry in rendered if entry.startswith("ortops.torch.")}
    missing += [f"ortops.torch.{name}" for name in ortops.torch.__all__ if name not in documented_torch]
    assert not missing, f"docs/api.md does not render {missing}"


def test_readme_links_resolve() -> None:
    """The README is read on GitHub and as the wheel's description, outside the site's strict
    build: each of its relative links must name a file of the repository."""
    readme = (ROOT / "README.md").read_text()
    targets = {t.split("#", 1)[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in t}
    missing = sorted(t for t in targets if t and not (ROOT / t).exists())
    assert not missing, f"README.md links to missing files: {missing}"


def test_readme_optimize_timing_is_the_measured_one() -> None:
    """The README's before/after of ortops optimize is a row of docs/optimize.md's Measured
    table (bench_optimize.py's output), not a figure of its own."""
    readme = (ROOT / "README.md").read_text()
    stated = re.search(r"Faster R-CNN MobileNetV3-320 .*?: ([\d.]+) ms → ([\d.]+) ms", readme, re.S)
    assert stated, "the README no longer states ortops optimize's before/after as this test reads it"
    measured = (ROOT / "docs" / "optimize.md").read_text()
    row = next(line for line in measured.splitlines() if line.startswith("| torchvision Faster R-CNN"))
    assert f"| {stated[1]} → {stated[2]} |" in row, row
