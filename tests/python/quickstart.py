"""The quick-start blocks of the README and of docs/getting-started.md, for the tests that run them.

A fenced code block is a quick-start block when the line just before its opening fence is

    <!-- quickstart -->                  the wheel and its onnxruntime extra are all it needs
    <!-- quickstart: onnx -->            it also needs the onnx extra (onnx.helper, check_model)
    <!-- quickstart: torch -->           it also needs the torch extra (ortops.torch)

(an HTML comment: GitHub and MkDocs show nothing). A ```python block runs as a script; in a
```bash or ```console block only the commands that start with ``python `` or ``ortops `` run
(after a ``$ `` prompt, if any): installing is the wheel tests' part. A document's blocks run
in order in one folder, as a reader would type them, so a block may use a file an earlier one
wrote; each makes the models it needs itself (there is no model file to download).

tests/python/test_quickstart.py runs every block against the package and library under test,
with the packages of the extras a block does not name hidden; tests/python/test_wheel.py runs
the blocks that need no torch in a new environment holding only the wheel and its extras.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "getting-started.md")

# The extras a block may name, and the top-level packages each one installs beyond the wheel's.
EXTRA_PACKAGES = {"onnx": frozenset({"onnx"}), "torch": frozenset({"torch", "torchvision", "onnx", "onnxscript"})}

_MARKER = re.compile(r"^<!--\s*quickstart(?::\s*(?P<extras>[\w, -]*?))?\s*-->\s*$")
_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})\s*(?P<language>[\w+-]*)")
_RUNNABLE_COMMAND = re.compile(r"^(?:\$\s+)?(?P<command>(?:python|ortops)\s.*)$")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    extras: frozenset[str]

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[tuple[int, str]]:
        """(line, command) of each command of a shell block that runs: ``python ...`` and ``ortops ...``."""
        found = []
        for offset, text in enumerate(self.code.splitlines(), start=1):
            match = _RUNNABLE_COMMAND.match(text.strip())
            if match:
                found.append((self.line + offset, match["command"]))
        return found


def blocks(document: Path) -> list[Block]:
    """The quick-start blocks of ``document``, in order (none when it does not exist)."""
    if not document.is_file():
        return []
    lines = document.read_text().splitlines()
    found = []
    for index, line in enumerate(lines):
        marker = _MARKER.match(line.strip())
        if not marker or index + 1 >= len(lines):
            continue
        fence = _FENCE.match(lines[index + 1].strip())
        if not fence:
            raise ValueError(f"{document.relative_to(ROOT)}:{index + 1}: a quickstart marker not followed by a fence")
        extras = frozenset(e.strip() for e in (marker["extras"] or "").split(",") if e.strip())
        unknown = extras - set(EXTRA_PACKAGES)
        if unknown:
            raise ValueError(f"{document.relative_to(ROOT)}:{index + 1}: unknown extras {sorted(unknown)}")
        end = next(
            (i for i in range(index + 2, len(lines)) if lines[i].strip().startswith(fence["fence"])),
            None,
        )
        if end is None:
            raise ValueError(f"{document.relative_to(ROOT)}:{index + 2}: the block is never closed")
        language = fence["language"].lower()
        if language not in ("python", "bash", "console", "sh", "shell"):
            raise ValueError(
                f"{document.relative_to(ROOT)}:{index + 2}: a quickstart block in {language or 'no language'}"
            )
        found.append(Block(document, index + 2, language, "\n".join(lines[index + 2 : end]) + "\n", extras))
    return found


def hidden_packages(block: Block) -> frozenset[str]:
    """The packages of the extras the block does not name (those it names may need some of them)."""
    allowed = frozenset().union(*(EXTRA_PACKAGES[extra] for extra in block.extras))
    return frozenset().union(*EXTRA_PACKAGES.values()) - allowed


def run(block: Block, cwd: Path, python: str, env: dict[str, str], timeout: int = 300) -> None:
    """Runs the block in ``cwd`` (python blocks with ``python``; shell commands through bash,
    with ``env``'s PATH finding ``python`` and ``ortops``); fails with the block's place."""
    if block.language == "python":
        script = cwd / f"quickstart_{block.line}.py"
        script.write_text(block.code)
        steps = [(block.line, [python, script.name])]
    else:
        steps = [(line, ["bash", "-c", command]) for line, command in block.commands()]
    for line, command in steps:
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        place = f"{block.document.relative_to(ROOT)}:{line}"
        assert result.returncode == 0, (
            f"the quick-start block at {place} failed (exit status {result.returncode}):\n"
            f"{block.code if block.language == 'python' else command[-1]}\n"
            f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
        )


# Put first on the import path (PYTHONPATH) of a block's processes: makes the top-level
# packages that ORTOPS_QUICKSTART_HIDDEN names (comma-separated) look not installed.
SITECUSTOMIZE = """
import importlib.abc, importlib.machinery, os, sys
_hidden = set(filter(None, os.environ.get("ORTOPS_QUICKSTART_HIDDEN", "").split(",")))
class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _hidden:
            return importlib.machinery.ModuleSpec(name, self)
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)
    def exec_module(self, module):
        pass
if _hidden:
    sys.meta_path.insert(0, _Hide())
"""


def hiding_env(block: Block, base: dict[str, str], hide_dir: Path) -> dict[str, str]:
    """``base`` with the packages the block may not use hidden from its Python processes."""
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hide_dir), base.get("PYTHONPATH")]))
    env["ORTOPS_QUICKSTART_HIDDEN"] = ",".join(sorted(hidden_packages(block)))
    return env
