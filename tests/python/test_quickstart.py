"""The quick starts of the README and of docs/getting-started.md run as written (quickstart.py
says which blocks, and how they are marked), against this package and library: each block sees
only the extras it names, the packages of the others hidden."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

import ortops

import quickstart


@pytest.mark.parametrize("document", quickstart.DOCUMENTS, ids=lambda path: str(path.relative_to(quickstart.ROOT)))
def test_quickstart_blocks_run(document: Path, tmp_path: Path) -> None:
    blocks = quickstart.blocks(document)
    if not blocks:
        pytest.skip(f"{document.relative_to(quickstart.ROOT)} has no quick-start blocks")
    # `python` and `ortops` in a shell block: this interpreter, with this package and library.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = shlex.quote(sys.executable)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {python} "$@"\n')
    (bin_dir / "ortops").write_text(f'#!/bin/sh\nexec {python} -m ortops "$@"\n')
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    hide_dir = tmp_path / "hide"
    hide_dir.mkdir()
    (hide_dir / "sitecustomize.py").write_text(quickstart.SITECUSTOMIZE)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(Path(ortops.__file__).resolve().parents[1])
    env["ORTOPS_LIBRARY"] = str(Path(ortops.get_library_path()).resolve())
    work = tmp_path / "work"
    work.mkdir()
    for block in blocks:
        quickstart.run(block, work, str(bin_dir / "python"), quickstart.hiding_env(block, env, hide_dir))


def test_getting_started_has_a_quickstart() -> None:
    """The getting-started page's examples are the ones a new user copies first: they must run."""
    page = quickstart.DOCUMENTS[1]
    if page.is_file():
        assert quickstart.blocks(page), f"{page.relative_to(quickstart.ROOT)} marks no block <!-- quickstart -->"


def test_markers_are_found_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The marker syntax, on a document of its own."""
    monkeypatch.setattr(quickstart, "ROOT", tmp_path)
    document = tmp_path / "page.md"
    document.write_text(
        "text\n\n<!-- quickstart -->\n```python\nimport ortops\n```\n\n"
        "<!-- quickstart: torch -->\n```console\n$ pip install ortops\n$ python -c 'print(1)'\nortops --version\n```\n"
        "\n```python\nnot marked\n```\n"
    )
    first, second = quickstart.blocks(document)
    assert (first.line, first.language, first.code, first.extras) == (4, "python", "import ortops\n", frozenset())
    assert quickstart.hidden_packages(first) == {"torch", "torchvision", "onnx", "onnxscript"}
    assert second.extras == {"torch"} and not quickstart.hidden_packages(second)
    assert second.commands() == [(11, "python -c 'print(1)'"), (12, "ortops --version")]
    document.write_text("<!-- quickstart: tensorflow -->\n```python\n```\n")
    with pytest.raises(ValueError, match="page.md:1: unknown extras"):
        quickstart.blocks(document)
