"""Runs models through the originals that ortops replaces: mmdeploy's ONNX Runtime ops library
(libmmdeploy_onnxruntime_ops.so, from its wheel) in the ONNX Runtime it was built for, both
pinned in deps/python-original.txt. bench.py starts it in .venv-original and talks to it over
stdin/stdout, one JSON object per line:

    {"model": PATH, "threads": N, "inputs": NPZ, "outputs": NPZ}  runs once, saves the outputs
    {"model": PATH, "threads": N, "inputs": NPZ, "repeats": R, "min_time": S, "warm_up": W}
                                                    -> {"seconds": median time}

Every reply is one line: {"ok": true, ...} or {"error": message}. Sessions and inputs are made
once per (model, threads) and file. Timing is timing.median_seconds, as in bench.py."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from typing import Any

import numpy as np
import onnxruntime as ort
from timing import median_seconds


def library_path() -> str:
    """The ops library inside the installed mmdeploy package (found without importing it:
    its Python side needs packages this environment leaves out)."""
    spec = importlib.util.find_spec("mmdeploy")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("mmdeploy is not installed in this environment")
    path = os.path.join(list(spec.submodule_search_locations)[0], "lib", "libmmdeploy_onnxruntime_ops.so")
    if not os.path.exists(path):
        raise RuntimeError(f"{path} does not exist")
    return path


class Worker:
    """The sessions and inputs made so far, and the answer to one request."""

    def __init__(self, library: str) -> None:
        self.library = library
        self.sessions: dict[tuple[str, int], ort.InferenceSession] = {}
        self.inputs: dict[str, dict[str, np.ndarray]] = {}

    def session(self, model: str, threads: int) -> ort.InferenceSession:
        if (model, threads) not in self.sessions:
            options = ort.SessionOptions()
            options.register_custom_ops_library(self.library)
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            # As bench.py's sessions: no pool spinning into the next session's timed runs.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self.sessions[model, threads] = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return self.sessions[model, threads]

    def feeds(self, path: str) -> dict[str, np.ndarray]:
        if path not in self.inputs:
            with np.load(path) as stored:
                self.inputs[path] = {name: stored[name] for name in stored.files}
        return self.inputs[path]

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        session = self.session(request["model"], int(request["threads"]))
        feeds = self.feeds(request["inputs"])
        if "outputs" in request:
            np.savez(request["outputs"], *session.run(None, feeds))
            return {"ok": True}
        repeats, min_time, warm_up = int(request["repeats"]), float(request["min_time"]), bool(request["warm_up"])
        seconds = median_seconds(lambda: session.run(None, feeds), repeats, min_time, warm_up)
        return {"ok": True, "seconds": seconds}


def main() -> None:
    worker = Worker(library_path())
    replies = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the protocol's stream
    print(json.dumps({"ok": True, "onnxruntime": ort.__version__, "library": worker.library}), file=replies, flush=True)
    for line in sys.stdin:
        try:
            reply = worker.answer(json.loads(line))
        except Exception:  # noqa: BLE001 (reported to bench.py, which raises it)
            reply = {"error": traceback.format_exc()}
        print(json.dumps(reply), file=replies, flush=True)


if __name__ == "__main__":
    main()
