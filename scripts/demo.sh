#!/usr/bin/env bash
# The ortops demo: set-up (if needed), then export a model with all ops from PyTorch, run
# it in ONNX Runtime with ortops, compare with PyTorch and print timings.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
exec "$ROOT/.venv/bin/python" "$ROOT/examples/demo.py"
