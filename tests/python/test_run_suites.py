"""scripts/run_suites.py, which runs the test command's suites: a failing suite must fail the
command, a suite after a failed one must not run, and outputs must come whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run_suites.py"


def run_suites(spec: str, tmp_path: Path, jobs: int = 2) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), "--logs", str(tmp_path / "logs"), "--jobs", str(jobs)]
    return subprocess.run(command, input=spec, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_all_pass_and_each_output_comes_whole(tmp_path: Path) -> None:
    spec = """
    # a comment
    slow: echo slow-1; sleep 0.3; echo slow-2
    fast: echo fast-1; echo fast-2
    last after slow fast: echo last-ran
    """
    result = run_suites(spec, tmp_path)
    assert result.returncode == 0, result.stdout
    out = result.stdout
    assert "slow-1\nslow-2" in out and "fast-1\nfast-2" in out and "last-ran" in out
    assert out.index("==== fast: passed") < out.index("==== slow: passed") < out.index("==== last: passed")
    assert "==== suites: 3 passed" in out


def test_a_failure_fails_the_run_and_what_comes_after_it_is_not_run(tmp_path: Path) -> None:
    spec = "broken: echo about to fail; exit 3\nother: true\nlater after broken: touch ran\n"
    result = run_suites(spec, tmp_path, jobs=1)
    assert result.returncode == 1
    assert "==== broken: FAILED" in result.stdout and "about to fail" in result.stdout
    assert "==== later: NOT RUN" in result.stdout and not (tmp_path / "ran").exists()
    assert "==== other: passed" in result.stdout
    assert "failed: broken later" in result.stdout


@pytest.mark.parametrize(
    "spec",
    ["no colon here", "a before b: true", "a after nothing: true", "a: true\na: true", "b after c: true\nc: true"],
)
def test_malformed_specs_are_refused(tmp_path: Path, spec: str) -> None:
    result = run_suites(spec, tmp_path)
    assert result.returncode != 0 and "run_suites:" in result.stderr
