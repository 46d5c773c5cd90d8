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
