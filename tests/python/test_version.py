"""One version, written once (python/ortops/_version.py), everywhere it is shown: the
package, the library's manifest (from CMake's project version), the `ortops` command, the
C++ package's version file, and the newest section of CHANGELOG.md. The wheel's name and
metadata are checked by test_wheel.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ortops

ROOT = Path(__file__).resolve().parents[2]


def _written_version() -> str:
    match = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "python" / "ortops" / "_version.py").read_text(), re.M)
    assert match, "python/ortops/_version.py has no __version__ line"
    return match[1]


def test_package_and_library_report_the_written_version() -> None:
    version = _written_version()
    assert ortops.__version__ == version
    assert ortops.library_version() == version  # the manifest, written by the CMake build


def test_the_command_reports_it() -> None:
    run = subprocess.run([sys.executable, "-m", "ortops", "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"ortops {_written_version()}"


def test_a_library_of_another_version_is_named(tmp_path: Path) -> None:
    """ORTOPS_LIBRARY may point at another build: --version then shows both."""
    library = Path(ortops.get_library_path()).resolve()
    (tmp_path / library.name).symlink_to(library)
    manifest = (library.with_name("ortops_ops.json")).read_text()
    (tmp_path / "ortops_ops.json").write_text(
        manifest.replace(f'"version": "{_written_version()}"', '"version": "9.9.9"')
    )
    run = subprocess.run(
        [sys.executable, "-m", "ortops", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORTOPS_LIBRARY": str(tmp_path / library.name)},
    )
    assert run.stdout.strip() == f"ortops {_written_version()} (library {tmp_path / library.name}: 9.9.9)"


def test_cmake_package_version() -> None:
    config = ROOT / "build" / "ortopsConfigVersion.cmake"
    if not config.is_file():
        pytest.skip("no CMake build in build/ (scripts/setup.sh makes it)")
    assert f'set(PACKAGE_VERSION "{_written_version()}")' in config.read_text()


def test_changelog_leads_with_this_version() -> None:
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings, "CHANGELOG.md has no version sections"
    assert headings[0] == _written_version(), f"CHANGELOG.md's newest section is {headings[0]}"


def test_licence_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
