"""Running single ortops nodes in ONNX Runtime from numpy, for tests (no torch needed).

Models are built with onnx.helper at IR version 8 and default opset 17, which every
supported runtime (1.17 on) reads, so the same tests run in the oldest-runtime environment.

Every session the tests make through ``ortops.session_options()``, in this process and in
the subprocesses that import this module, has its intra-op threads wait without spinning:
scripts/test.sh runs test suites side by side, and a spinning pool would take a core from the
other suite for nothing. ``ORTOPS_TEST_CPU_ARENA=0`` (set by scripts/test_sanitizers.sh) also
turns ONNX Runtime's CPU memory arena off in those sessions, so that each tensor and each
scratch buffer is its own ``malloc`` and AddressSanitizer sees a read past its end. Only the
tests change: the library and ``ortops.session_options()`` for users are left alone.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ortops

# Under AddressSanitizer (scripts/test_sanitizers.sh preloads it) an allocation too large to
# make ends the process, where ONNX Runtime's allocator otherwise fails it with an error
# that ortops reports: tests of that error cannot run there.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
skip_under_asan = pytest.mark.skipif(
    UNDER_ASAN, reason="AddressSanitizer ends the process on an allocation it cannot make instead of failing it"
)


def _for_tests(make: Any) -> Any:
    without_arena = os.environ.get("ORTOPS_TEST_CPU_ARENA") == "0"

    @functools.wraps(make)
    def session_options(options: ort.SessionOptions | None = None) -> ort.SessionOptions:
        options = make(options)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if without_arena:
            options.enable_cpu_mem_arena = False
        return options

    session_options.ortest_wrapped = True  # type: ignore[attr-defined]
    return session_options


if not hasattr(ortops.session_options, "ortest_wrapped"):
    ortops.session_options = _for_tests(ortops.session_options)

# Python code that makes some installed top-level packages (a comma-separated list in
# sys.argv[1], which it removes) look not installed, then runs the rest of the program: a
# finder placed first on the import path fails their import as a missing module does.
_HIDE = """
import importlib.abc, importlib.machinery, sys
hidden = set(sys.argv.pop(1).split(","))
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            return importlib.machinery.ModuleSpec(name, self)
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, Hide())
"""


def python_without(hidden: Sequence[str], code: str, *args: str, **run: Any) -> subprocess.CompletedProcess:
    """Runs ``code`` (with ``args`` in sys.argv[1:]) in a new Python that sees this ortops and
    library but not the packages ``hidden``, as if they were not installed."""
    env = dict(run.pop("env", os.environ))
    package_root = str(Path(ortops.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env["ORTOPS_LIBRARY"] = str(Path(ortops.get_library_path()).resolve())
    command = [sys.executable, "-c", _HIDE + code, ",".join(hidden), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, **run)


IR_VERSION = 8

# Valid values for required attributes, so that only the attribute under test is wrong.
VALID_REQUIRED_ATTRIBUTES = {
    "num_groups": 1,
    "scale_factor": [2.0, 2.0],
    "num_classes": 1,
    "keep_topk": 1,
    "featmap_strides": [4.0],
    "spatial_scales": [0.25],
    # TRT::BatchedNMS_TRT's
    "shareLocation": 1,
    "backgroundLabelId": -1,
    "numClasses": 1,
    "topK": 1,
    "keepTopK": 1,
    "scoreThreshold": 0.5,
    "iouThreshold": 0.5,
}
DEFAULT_OPSET = 17

_ELEM = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.float16): TensorProto.FLOAT16,
}


# The shared libraries every manylinux policy lets a wheel use from the system (PEP 600): all
# that the wheel's library and the CUDA build may need.
MANYLINUX_SYSTEM_LIBRARIES = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
}


def make_model(
    op_type: str,
    domain: str,
    inputs: Sequence[tuple[str, np.dtype, int]],
    outputs: Sequence[str],
    **attributes: Any,
) -> onnx.ModelProto:
    """A model of one node ``domain::op_type``; inputs are (name, dtype, rank), shapes dynamic.

    An input named "" is left out (an omitted optional input).
    """
    graph_inputs = [
        helper.make_tensor_value_info(name, _ELEM[np.dtype(dtype)], [None] * rank)
        for name, dtype, rank in inputs
        if name
    ]
    graph_outputs = [helper.make_value_info(name, onnx.TypeProto()) for name in outputs]
    node = helper.make_node(op_type, [name for name, _, _ in inputs], list(outputs), domain=domain, **attributes)
    graph = helper.make_graph([node], f"{domain}_{op_type}", graph_inputs, graph_outputs)
    return helper.make_model(
        graph,
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", DEFAULT_OPSET), helper.make_opsetid(domain, 1)],
    )


def model_of(graph: onnx.GraphProto, *domains: str, **fields: Any) -> onnx.ModelProto:
    """``graph`` as a model at IR_VERSION and DEFAULT_OPSET that imports each domain of
    ``domains`` at version 1 (``fields``: other ModelProto fields, such as functions)."""
    opsets = [helper.make_opsetid("", DEFAULT_OPSET), *(helper.make_opsetid(domain, 1) for domain in domains)]
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=opsets, **fields)


def exported_model(graph: onnx.GraphProto, domain: str) -> onnx.ModelProto:
    """``graph`` as PyTorch's TorchScript exporter wrote mmcv's and mmdeploy's files: IR
    version 6, opset 11 and ``domain`` at version 1, producer "pytorch"."""
    opsets = [helper.make_opsetid("", 11), helper.make_opsetid(domain, 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="pytorch")
    model.ir_version = 6
    return model


def mmcv_nms_model(**attributes: Any) -> onnx.ModelProto:
    """One ``mmcv::NonMaxSuppression`` node as mmcv 1.x files hold it: boxes [N, 4] and scores
    [N] float32 in, int64 ``indices`` out (the model the binding and packaging tests load)."""
    inputs = [("boxes", np.float32, 2), ("scores", np.float32, 1)]
    return make_model("NonMaxSuppression", "mmcv", inputs, ["indices"], **attributes)


def yolov7_efficient_nms_node() -> onnx.NodeProto:
    """``TRT::EfficientNMS_TRT`` as yolov7's End2End export writes it: boxes (cx, cy, w, h)
    and scores in, ``num_dets``, ``det_boxes``, ``det_scores`` and ``det_classes`` out;
    background_class and box_coding as one-value INTS, plugin_version a string."""
    return helper.make_node(
        "EfficientNMS_TRT",
        ["boxes", "scores"],
        ["num_dets", "det_boxes", "det_scores", "det_classes"],
        name="/end2end/EfficientNMS_TRT",
        domain="TRT",
        background_class=[-1],
        box_coding=[1],
        iou_threshold=0.45,
        max_output_boxes=100,
        plugin_version="1",
        score_activation=0,
        score_threshold=0.25,
    )


# The execution providers of the sessions below: the CPU's, or, on a GPU (scripts/test_gpu.sh
# sets ORTOPS_TEST_PROVIDERS=CUDAExecutionProvider), CUDA's alone: a node that ONNX Runtime
# would place on the CPU then fails the session's creation, so every test proves that its
# nodes ran on the device.
PROVIDERS = os.environ.get("ORTOPS_TEST_PROVIDERS", "CPUExecutionProvider").split(",")


# Sessions are kept for reuse, but on a GPU few: each holds its own cuBLAS and cuDNN handles and
# memory arena, and 256 of them in each of a dozen test processes ran an H200 out of memory.
_SESSIONS_KEPT = 256 if PROVIDERS == ["CPUExecutionProvider"] else 4


@functools.lru_cache(maxsize=_SESSIONS_KEPT)
def _session(model_bytes: bytes, threads: int, cpu_fallback: bool) -> ort.InferenceSession:
    options = ortops.session_options()
    options.intra_op_num_threads = threads
    options.log_severity_level = 4  # errors are asserted on; do not also print them
    # The standard nodes of a whole graph compute in float32 as the references do: CUDA's
    # provider would otherwise use TF32 for MatMul and Conv (10-bit mantissas; a detector
    # tail's scores were 2e-4 off on an H200).
    providers: list[Any] = [(p, {"use_tf32": "0"}) if p == "CUDAExecutionProvider" else p for p in PROVIDERS]
    if "CPUExecutionProvider" not in PROVIDERS:
        if cpu_fallback:
            providers = [*providers, "CPUExecutionProvider"]
        else:
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return ort.InferenceSession(model_bytes, options, providers=providers)


def session(model: onnx.ModelProto, threads: int = 0, cpu_fallback: bool = False) -> ort.InferenceSession:
    """A cached session with ortops registered (threads=0: ORT's default), on PROVIDERS.

    ``cpu_fallback``: a whole graph whose standard nodes a device's provider may leave on the
    CPU (ONNX Runtime's CUDA provider keeps shape computations there) may still use it.
    """
    return _session(model.SerializeToString(), threads, cpu_fallback)


def run(
    op_type: str,
    domain: str,
    inputs: dict[str, np.ndarray | None],
    outputs: Sequence[str] = ("Y",),
    threads: int = 0,
    **attributes: Any,
) -> list[np.ndarray]:
    """Runs ``domain::op_type`` on ``inputs`` (in input order; None omits an optional input)."""
    spec = [
        (name, value.dtype, value.ndim) if value is not None else ("", np.float32, 0) for name, value in inputs.items()
    ]
    model = make_model(op_type, domain, spec, outputs, **attributes)
    feeds = {name: value for name, value in inputs.items() if value is not None}
    return session(model, threads).run(None, feeds)


def pool(op: str, domain: str, features: np.ndarray, rois: np.ndarray, **attributes: Any) -> list[np.ndarray]:
    """Runs a RoIAlign node of ``domain`` (inputs ``input`` and ``rois``, output ``output``);
    ``attributes``: the node's, and run's ``threads``."""
    return run(op, domain, {"input": features, "rois": rois}, ["output"], **attributes)
