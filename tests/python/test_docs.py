"""docs/ops.md is generated from the op table; it must be up to date and cover every op."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ortops
import ortops.torch

ROOT = Path(__file__).resolve().parents[2]


def test_ops_page_is_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_every_op_is_documented() -> None:
    page = (ROOT / "docs" / "ops.md").read_text()
    for op in ortops.ops():
        assert f"`{op.domain}::{op.name}`" in page


def test_every_ortops_op_has_a_torch_op_and_back() -> None:
    onnx_names = {op.name for op in ortops.ops() if op.domain == ortops.torch.DOMAIN}
    torch_names = {e.onnx_op for e in ortops.torch.exported_ops()}
    assert torch_names == onnx_names


def test_readme_names_every_op() -> None:
    """The README's operator list is written by hand: it must name every op of the op table."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Operators") : readme.index("\n## ", readme.index("## Operators") + 1)]
    for op in ortops.ops():
        name = f"`{op.name}`" if op.domain == "ortops" else f"`{op.domain}::{op.name}`"
        assert name in section, f"README's Operators section does not name {op.qualified_name}"


def test_reproduced_nodes_state_their_differences() -> None:
    """Every node that reproduces a runtime other than mmcv's with a schema of its own (the
    TensorRT plugins' nodes and mmdeploy's own) says where ortops differs from the original.
    Nodes that share the ortops or mmcv schema keep that op's documented semantics."""
    shared = {op.kernel for op in ortops.ops() if op.domain in (ortops.torch.DOMAIN, "mmcv")}
    for op in ortops.ops():
        if op.domain in ("TRT", "mmdeploy") and op.kernel not in shared:
            assert len(op.differences) > 40, f"{op.qualified_name} has no 'differences from the original'"
