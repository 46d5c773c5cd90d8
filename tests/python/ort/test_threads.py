"""``intra_op_num_threads = 1`` means one thread: every parallel kernel then does all its work
on the thread that calls ``run``, and no other thread of the process burns CPU meanwhile.

Each case runs in a fresh interpreter that loads only numpy, onnx, onnxruntime and ortops, so
that thread pools left spinning by other tests (torch's, other sessions') cannot blur it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MEASURE = r"""
import json, sys, time
import numpy as np
import ortops
from ortest import make_model, session

op, threads = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
if op == "RoIAlign":
    xy = rng.uniform(0, 60, (300, 2))
    rois = np.concatenate([np.zeros((300, 1)), xy, xy + rng.uniform(5, 40, (300, 2))], 1)
    feeds = {"input": rng.normal(size=(1, 64, 100, 100)), "rois": rois}
    attributes = {"output_height": 7, "output_width": 7, "sampling_ratio": 2}
elif op == "DeformConv2d":
    feeds = {
        "input": rng.normal(size=(1, 32, 48, 48)),
        "offset": rng.normal(size=(1, 18, 48, 48)),
        "weight": rng.normal(size=(32, 32, 3, 3)),
        "bias": np.zeros(0),
        "mask": rng.uniform(size=(1, 9, 48, 48)),
    }
    attributes = {"padding": [1, 1]}
elif op == "GridSample":
    feeds = {"input": rng.normal(size=(1, 32, 128, 128)), "grid": rng.uniform(-1, 1, (1, 128, 128, 2))}
    attributes = {}
else:
    feeds, attributes = {"input": rng.normal(size=(1, 64, 128, 128))}, {"dim": 2}
feeds = {name: value.astype(np.float32) for name, value in feeds.items()}
spec = [(name, value.dtype, value.ndim) for name, value in feeds.items()]
outputs = [o.name for info in ortops.ops() if (info.domain, info.name) == ("ortops", op) for o in info.outputs]
sess = session(make_model(op, "ortops", spec, outputs, **attributes), threads=threads)
sess.run(None, feeds)
thread_start, process_start = time.thread_time(), time.process_time()
while time.thread_time() - thread_start < 0.3:
    sess.run(None, feeds)
print(json.dumps([time.thread_time() - thread_start, time.process_time() - process_start]))
"""


def cpu_seconds(op: str, threads: int) -> tuple[float, float]:
    """(CPU seconds of the calling thread, of the whole process) over ~0.3 s of runs."""
    paths = [str(Path(__file__).parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]  # ortest, then ours
    command = [sys.executable, "-c", MEASURE, op, str(threads)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    on_caller, in_process = json.loads(done.stdout.splitlines()[-1])
    return on_caller, in_process


@pytest.mark.parametrize("op", ["RoIAlign", "DeformConv2d", "GridSample", "CumMax"])
def test_one_thread_does_all_the_work_on_the_calling_thread(op: str) -> None:
    on_caller, in_process = cpu_seconds(op, threads=1)
    # Up to a small allowance for the interpreter's and the kernel's housekeeping.
    assert in_process <= on_caller * 1.1 + 0.01, (op, on_caller, in_process)
