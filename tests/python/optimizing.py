"""Helpers shared by the ``ortops optimize`` tests (test_optimize*.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

import ortops


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    """Node counts by domain::op_type over the model's graph and every subgraph in it."""
    counts: Counter[str] = Counter()

    def visit(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            counts[f"{node.domain or 'ai.onnx'}::{node.op_type}"] += 1
            for attr in node.attribute:
                if attr.HasField("g"):
                    visit(attr.g)
                for sub in attr.graphs:
                    visit(sub)

    visit(model.graph)
    return counts


def emulated_device_library() -> Path | None:
    """The emulated device's library beside the library under test, or None when not built."""
    library = Path(ortops.get_library_path()).with_name("libortops_device_on_cpu.so")
    return library if library.exists() else None


def first_output_with_library(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], library: Path, folder: Path
) -> np.ndarray:
    """``model``'s first output on ``feeds`` with ``library`` registered instead of the one under
    test: in a subprocess, since a process registers one ortops library."""
    path, inputs, output = folder / "model.onnx", folder / "feeds.npz", folder / "output.npy"
    onnx.save(model, str(path))
    np.savez(inputs, **feeds)
    code = (
        "import sys, numpy as np, onnxruntime as ort, ortops;"
        "s = ort.InferenceSession(sys.argv[1], ortops.session_options(), providers=['CPUExecutionProvider']);"
        "np.save(sys.argv[3], s.run(None, dict(np.load(sys.argv[2])))[0])"
    )
    env = {**os.environ, "ORTOPS_LIBRARY": str(library)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(ortops.__file__).parents[1]), env.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-c", code, str(path), str(inputs), str(output)], check=True, env=env, timeout=60)
    return np.load(output)
