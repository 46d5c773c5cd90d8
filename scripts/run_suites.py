"""Runs the test command's suites side by side, as many at a time as the machine has cores.

Most suites keep one core busy (a pytest process runs one test at a time), so on a 2-core
machine two of them together take about the time of one. Each suite's output goes to
``LOGS/<name>.log`` and is printed whole when the suite ends, under a line with its result and
time, so that the outputs of suites running together never interleave.

The suites come on standard input, one per line, in the order to start them (longest first
pays: the last to start should be short)::

    NAME: COMMAND
    NAME after OTHER [OTHER ...]: COMMAND

COMMAND runs in bash, in the current folder. A suite waits for the suites it names after
``after``; when one of those failed it is not run and counts as failed. Blank lines and lines
starting with ``#`` are skipped. Exit status: 0 when every suite passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Suite:
    name: str
    command: str
    after: list[str]
    process: subprocess.Popen | None = None
    started: float = 0.0
    result: str = ""  # "passed", "FAILED" or "NOT RUN"
    log: Path = field(default_factory=Path)


def parse(lines: list[str]) -> list[Suite]:
    """The suites of the spec lines (see the module docstring); a malformed spec is an error."""
    suites: list[Suite] = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, sep, command = line.partition(":")
        words = head.split()
        if not sep or not command.strip() or not words or (len(words) > 1 and words[1] != "after"):
            raise SystemExit(f"run_suites: cannot read the suite line {line!r}")
        known = {s.name for s in suites}
        unknown = [w for w in words[2:] if w not in known]
        if unknown or words[0] in known:
            raise SystemExit(f"run_suites: {line!r} names {unknown or words[0]} (after: only earlier suites)")
        suites.append(Suite(words[0], command.strip(), words[2:]))
    return suites


def report(suite: Suite, seconds: float) -> None:
    print(f"\n==== {suite.name}: {suite.result} ({seconds:.0f} s)", flush=True)
    if suite.log.is_file():
        sys.stdout.write(suite.log.read_text(errors="replace"))
    sys.stdout.flush()


def run(suites: list[Suite], jobs: int, logs: Path) -> bool:
    """Runs ``suites`` (up to ``jobs`` at a time); True when all passed."""
    logs.mkdir(parents=True, exist_ok=True)
    by_name = {s.name: s for s in suites}
    waiting, running = list(suites), []
    while waiting or running:
        for suite in list(waiting):
            needs = [by_name[n] for n in suite.after]
            if any(n.result and n.result != "passed" for n in needs):
                suite.result = "NOT RUN"  # a suite it needs failed
                waiting.remove(suite)
                report(suite, 0)
            elif len(running) < jobs and all(n.result == "passed" for n in needs):
                suite.log = logs / f"{suite.name}.log"
                print(f"---- {suite.name} started", flush=True)
                with suite.log.open("wb") as log:
                    suite.process = subprocess.Popen(
                        ["bash", "-c", suite.command], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                    )
                suite.started = time.monotonic()
                waiting.remove(suite)
                running.append(suite)
        if not running:
            continue
        pid, status = os.wait()
        for suite in running:
            if suite.process is not None and suite.process.pid == pid:
                suite.process.returncode = os.waitstatus_to_exitcode(status)
                suite.result = "passed" if suite.process.returncode == 0 else "FAILED"
                running.remove(suite)
                report(suite, time.monotonic() - suite.started)
                break
    failed = [s.name for s in suites if s.result != "passed"]
    print(f"\n==== suites: {len(suites) - len(failed)} passed" + (f", failed: {' '.join(failed)}" if failed else ""))
    return not failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logs", type=Path, required=True, help="folder for the suites' logs")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="suites at a time (default: cores)")
    args = parser.parse_args()
    sys.exit(0 if run(parse(sys.stdin.readlines()), max(1, args.jobs), args.logs) else 1)


if __name__ == "__main__":
    main()
