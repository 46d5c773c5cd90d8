"""Totals JUnit XML reports into one line: 'ortops: N passed, N failed, N skipped'."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def main(paths: list[str]) -> None:
    """Prints each report's counts and then the total."""
    total = {"passed": 0, "failed": 0, "skipped": 0}
    for path in paths:
        root = ET.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        for suite in suites:
            tests = int(suite.get("tests", 0))
            failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skipped = int(suite.get("skipped", 0)) + int(suite.get("disabled", 0))
            counts["failed"] += failed
            counts["skipped"] += skipped
            counts["passed"] += tests - failed - skipped
        name = path.rsplit("/", 1)[-1]
        print(f"  {name}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
        for key in total:
            total[key] += counts[key]
    print(f"ortops: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")


if __name__ == "__main__":
    main(sys.argv[1:])
