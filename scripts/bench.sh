#!/usr/bin/env bash
# The benchmark: set-up (if needed), then every op against its anchors at 1 thread and at
# all cores; prints a Markdown table and writes benchmark-results.json.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
exec "$ROOT/.venv/bin/python" "$ROOT/benchmarks/bench.py" "$@"
