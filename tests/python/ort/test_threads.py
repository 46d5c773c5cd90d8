"""``intra_op_num_threads = 1`` means one thread: every parallel kernel then does all its work
on the thread that calls ``run``, and no other thread of the process burns CPU meanwhile."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ortops

from ortest import make_model, session


def roi_align_case(rng: np.random.Generator):
    boxes = rng.uniform(0, 60, (300, 2))
    rois = np.concatenate([np.zeros((300, 1)), boxes, boxes + rng.uniform(5, 40, (300, 2))], 1)
    feeds = {"input": rng.normal(size=(1, 64, 100, 100)), "rois": rois}
    return "RoIAlign", feeds, {"output_height": 7, "output_width": 7, "sampling_ratio": 2}


def deform_conv_case(rng: np.random.Generator):
    feeds = {
        "input": rng.normal(size=(1, 32, 48, 48)),
        "offset": rng.normal(size=(1, 18, 48, 48)),
        "weight": rng.normal(size=(32, 32, 3, 3)),
        "bias": np.zeros(0),
        "mask": rng.uniform(size=(1, 9, 48, 48)),
    }
    return "DeformConv2d", feeds, {"padding": [1, 1]}


def grid_sample_case(rng: np.random.Generator):
    feeds = {"input": rng.normal(size=(1, 32, 128, 128)), "grid": rng.uniform(-1, 1, (1, 128, 128, 2))}
    return "GridSample", feeds, {}


def cummax_case(rng: np.random.Generator):
    return "CumMax", {"input": rng.normal(size=(1, 64, 128, 128))}, {"dim": 2}


@pytest.mark.parametrize("case", [roi_align_case, deform_conv_case, grid_sample_case, cummax_case])
def test_one_thread_does_all_the_work_on_the_calling_thread(case) -> None:
    op, feeds, attributes = case(np.random.default_rng(0))
    feeds = {name: value.astype(np.float32) for name, value in feeds.items()}
    spec = [(name, value.dtype, value.ndim) for name, value in feeds.items()]
    outputs = [
        output.name for info in ortops.ops() if (info.domain, info.name) == ("ortops", op) for output in info.outputs
    ]
    model = make_model(op, "ortops", spec, outputs, **attributes)
    sess = session(model, threads=1)
    sess.run(None, feeds)
    time.sleep(0.05)  # lets pool threads of earlier tests' sessions stop spinning
    thread_start, process_start = time.thread_time(), time.process_time()
    runs = 0
    while time.thread_time() - thread_start < 0.2:
        sess.run(None, feeds)
        runs += 1
    on_caller = time.thread_time() - thread_start
    in_process = time.process_time() - process_start
    # CPU time of the whole process is that of the calling thread, up to a small allowance
    # for the interpreter's and the kernel's housekeeping.
    assert in_process <= on_caller * 1.1 + 0.01, (op, runs, on_caller, in_process)
