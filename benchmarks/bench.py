"""ortops benchmark: each op through an ONNX Runtime session with ortops, next to anchors
measured in the same run, on the same inputs and thread count.

For every case the outputs of ortops and of each anchor are first checked to agree; then
each is timed at 1 thread and at all cores: in rounds that take ortops and its anchors in
turn, each round the median of repeated runs, the fastest round counting. Ratios are anchor
time / ortops time (bigger is better). Two anchors are the machine's limits rather than
competitors: a STREAM-style copy of the bytes an op must move (memory bandwidth) and ORT's
MatMul (MLAS) of the GEMM inside the deformable convolution; their ratio is the fraction of
that limit ortops reaches. The nodes that mmdeploy's ONNX Runtime library also implements are
timed against that original too ("original" anchors): mmdeploy's library in the ONNX Runtime
it was built for, run on the same saved model and inputs by a worker process in a small
environment of its own (.venv-original, pinned in deps/python-original.txt, made on first
use). Prints a Markdown table and writes JSON.

Run: .venv/bin/python benchmarks/bench.py [--json results.json] [--repeats N] [--only NAME]
     .venv/bin/python benchmarks/bench.py --record    # a full run, as docs/data/bench-cpu.json

--record replaces the committed record that docs/performance.md, its charts and the README's
speed headline are generated from (then run scripts/gen_perf_docs.py and commit both); describe
the machine in its "machine" block where the script cannot (the CPU's generation, a shared VM).
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchvision
from compositions import ms_deform_attn_composition
from onnx import TensorProto, helper
from timing import median_seconds

import ortops


@dataclass
class Case:
    """One benchmark: how to run ortops and each anchor, and how to compare outputs."""

    name: str
    ortops: Callable[[int], Callable[[], Any]]  # threads -> run function
    anchors: dict[str, Callable[[int], Callable[[], Any]]]
    agree: Callable[[Any, Any], None]  # raises if the two outputs disagree
    targets: dict[str, float] = field(default_factory=dict)  # anchor -> minimum ratio at 1 thread
    targets_all: dict[str, float] | None = None  # at all cores; None: the 1-thread targets
    min_scaling: float | None = None  # all-cores speed over 1 thread, when there is more than one core
    # Anchors that compute something else (a limit of the machine, a plain Conv of the same
    # shape): timed, not compared. Limits are always unchecked.
    unchecked: tuple[str, ...] = ()


def onnx_session(model: onnx.ModelProto, threads: int, with_ortops: bool) -> ort.InferenceSession:
    options = ortops.session_options() if with_ortops else ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Runs of several sessions are timed in turn: a pool that spins after its run would take a
    # core from the next session's run on a 2-core machine.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # Errors only: torchvision's Mask R-CNN warns on every run of its paste loop that a loop
    # output's declared shape differs from the one it has.
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def one_node_model(
    op_type: str,
    domain: str,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    constants: tuple[str, ...] = (),
    **attributes: Any,
) -> onnx.ModelProto:
    """One node; the inputs named in ``constants`` are stored in the model (initializers, as
    an exported model holds weights), the rest are fed at run time (session_runner drops the
    constants from its feeds)."""
    elem = {
        np.dtype(np.float32): TensorProto.FLOAT,
        np.dtype(np.float16): TensorProto.FLOAT16,
        np.dtype(np.int64): TensorProto.INT64,
        np.dtype(np.int32): TensorProto.INT32,
    }
    graph_inputs = [
        helper.make_tensor_value_info(n, elem[a.dtype], list(a.shape)) for n, a in inputs.items() if n not in constants
    ]
    initializers = [onnx.numpy_helper.from_array(inputs[n], n) for n in constants]
    graph_outputs = [helper.make_value_info(n, onnx.TypeProto()) for n in outputs]
    node = helper.make_node(op_type, list(inputs), outputs, domain=domain, **attributes)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    graph = helper.make_graph([node], op_type, graph_inputs, graph_outputs, initializer=initializers)
    return helper.make_model(graph, ir_version=8, opset_imports=opsets)


def session_runner(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], with_ortops: bool
) -> Callable[[int], Callable[[], Any]]:
    constants = {i.name for i in model.graph.initializer}
    feeds = {name: value for name, value in feeds.items() if name not in constants}

    def make(threads: int) -> Callable[[], Any]:
        session = onnx_session(model, threads, with_ortops)
        return lambda: session.run(None, feeds)

    return make


def torch_runner(fn: Callable[[], Any]) -> Callable[[int], Callable[[], Any]]:
    def make(threads: int) -> Callable[[], Any]:
        def run() -> Any:
            torch.set_num_threads(threads)
            with torch.no_grad():
                return fn()

        return run

    return make


# ---- the originals ----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
# The committed benchmark records that scripts/gen_perf_docs.py makes the performance page from.
RECORDS = ROOT / "docs" / "data"
ORIGINALS_ENVIRONMENT = ROOT / ".venv-original"
ORIGINALS_REQUIREMENTS = ROOT / "deps" / "python-original.txt"


def pinned(requirements: Path, package: str) -> str:
    """The version `requirements` pins `package` to (``package==version``)."""
    for line in requirements.read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().lower() == package:
            return version.strip()
    raise ValueError(f"{requirements} pins no {package}")


ORIGINAL = (
    f"original: mmdeploy {pinned(ORIGINALS_REQUIREMENTS, 'mmdeploy')} in "
    f"ORT {pinned(ORIGINALS_REQUIREMENTS, 'onnxruntime')}"
)


def originals_python() -> Path:
    """The Python of .venv-original, made first if needed as scripts/setup.sh makes its
    environments: skipped when it was made from the same requirements file. --no-deps: the
    file lists every package (mmdeploy only for the library its wheel carries)."""
    python = ORIGINALS_ENVIRONMENT / "bin" / "python"
    stamp = ORIGINALS_ENVIRONMENT / ".ortops-requirements"
    requirements = ORIGINALS_REQUIREMENTS.read_bytes()
    if stamp.is_file() and stamp.read_bytes() == requirements and python.is_file():
        return python
    print(f"[bench] making {ORIGINALS_ENVIRONMENT} from {ORIGINALS_REQUIREMENTS}", file=sys.stderr)
    try:
        if not python.is_file():
            subprocess.run([sys.executable, "-m", "venv", str(ORIGINALS_ENVIRONMENT)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
        subprocess.run([*pip, "-r", str(ORIGINALS_REQUIREMENTS)], check=True)
    except subprocess.CalledProcessError as error:
        raise RuntimeError(
            f"could not make {ORIGINALS_ENVIRONMENT} (its packages come from PyPI); "
            "--no-originals runs the benchmark without the original's anchors"
        ) from error
    stamp.write_bytes(requirements)
    return python


class Originals:
    """The worker (originals_worker.py) in .venv-original, started on first use, and a folder
    for the models and inputs it reads; both go away when the benchmark exits."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None
        self._folder = ""
        self._files = 0

    def file(self, suffix: str) -> str:
        if not self._folder:
            self._folder = tempfile.mkdtemp(prefix="ortops-bench-")
            atexit.register(shutil.rmtree, self._folder, True)
        self._files += 1
        return os.path.join(self._folder, f"{self._files}{suffix}")

    def request(self, **fields: Any) -> dict[str, Any]:
        if self._process is None:
            worker = Path(__file__).with_name("originals_worker.py")
            self._process = subprocess.Popen(
                [str(originals_python()), str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            atexit.register(self._process.terminate)
            self.reply()  # its greeting: the library loaded
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(fields) + "\n")
        self._process.stdin.flush()
        return self.reply()

    def reply(self) -> dict[str, Any]:
        assert self._process is not None and self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the originals' worker exited (code {self._process.wait()}); see its messages above")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the originals' worker failed:\n{reply['error']}")
        return reply


ORIGINALS = Originals()


@dataclass
class OriginalRun:
    """One model on one thread count in the originals' worker: calling it runs the model once
    and returns its outputs; `seconds` times it there (timing.median_seconds, as every other
    run), so the pipe between the processes is not in the time."""

    model: str
    inputs: str
    threads: int

    def __call__(self) -> list[np.ndarray]:
        outputs = ORIGINALS.file(".npz")
        ORIGINALS.request(model=self.model, inputs=self.inputs, threads=self.threads, outputs=outputs)
        with np.load(outputs) as stored:
            return [stored[f"arr_{i}"] for i in range(len(stored.files))]

    def seconds(self, repeats: int, min_time: float, warm_up: bool) -> float:
        reply = ORIGINALS.request(
            model=self.model,
            inputs=self.inputs,
            threads=self.threads,
            repeats=repeats,
            min_time=min_time,
            warm_up=warm_up,
        )
        return float(reply["seconds"])


def original_runner(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> Callable[[int], Callable[[], Any]]:
    """As session_runner, in the originals' worker: the model and its fed inputs are saved once,
    on first use (so a run that skips the case makes no environment)."""
    constants = {i.name for i in model.graph.initializer}
    saved: list[str] = []

    def make(threads: int) -> Callable[[], Any]:
        if not saved:
            saved.extend([ORIGINALS.file(".onnx"), ORIGINALS.file(".npz")])
            onnx.save(model, saved[0])
            np.savez(saved[1], **{name: value for name, value in feeds.items() if name not in constants})
        return OriginalRun(saved[0], saved[1], threads)

    return make


def measure(run: Callable[[], Any], repeats: int, min_time: float, warm_up: bool) -> float:
    """Median seconds of a run function, timed where it runs."""
    if isinstance(run, OriginalRun):
        return run.seconds(repeats, min_time, warm_up)
    return median_seconds(run, repeats, min_time, warm_up)


def interleaved_seconds(runs: dict[str, Callable[[], Any]], repeats: int, rounds: int) -> dict[str, float]:
    """Each run's time: all of them timed in turn, `rounds` times over (each time the median of
    a share of `repeats` runs, at least 3), and the fastest round of each kept. On a shared
    machine whose load comes and goes, a burst then slows one round of every run rather than
    all of one run's measurement, and load only ever adds time."""
    per_round, min_time = max(3, -(-repeats // rounds)), 0.2 / rounds
    best = dict.fromkeys(runs, float("inf"))
    for round_ in range(max(1, rounds)):
        for name, run in runs.items():
            best[name] = min(best[name], measure(run, per_round, min_time, warm_up=round_ == 0))
    return best


# ---- cases ---------------------------------------------------------------------------


def clustered_boxes(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Boxes in realistic clusters (detector output before NMS): many overlaps per object."""
    rng = np.random.default_rng(seed)
    objects = max(1, n // 50)
    centers = rng.uniform(0, 1000, (objects, 2))[rng.integers(0, objects, n)]
    sizes = rng.uniform(20, 200, (objects, 2))[rng.integers(0, objects, n)]
    xy = centers + rng.normal(0, 8, (n, 2))
    wh = sizes * rng.uniform(0.8, 1.2, (n, 2))
    boxes = np.concatenate([xy - wh / 2, xy + wh / 2], axis=1).astype(np.float32)
    return boxes, rng.random(n).astype(np.float32)


def nms_case() -> Case:
    boxes, scores = clustered_boxes(10_000)
    threshold = 0.5
    model = one_node_model("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=threshold)
    builtin = one_node_model(
        "NonMaxSuppression",
        "",
        {"boxes": boxes[None], "scores": scores[None, None]},
        ["selected"],
    )
    builtin.graph.node[0].input.extend(["max_boxes", "iou"])
    builtin.graph.initializer.extend(
        [
            helper.make_tensor("max_boxes", TensorProto.INT64, [1], [len(boxes)]),
            helper.make_tensor("iou", TensorProto.FLOAT, [1], [threshold]),
        ]
    )
    tb, ts = torch.from_numpy(boxes), torch.from_numpy(scores)

    def agree(ours: Any, anchor: Any) -> None:
        ours_idx = np.asarray(ours[0])
        anchor_idx = anchor.numpy() if isinstance(anchor, torch.Tensor) else np.asarray(anchor[0])[:, 2]
        np.testing.assert_array_equal(np.sort(ours_idx), np.sort(anchor_idx))

    return Case(
        name="NMS 10k clustered boxes, IoU 0.5",
        ortops=session_runner(model, {"boxes": boxes, "scores": scores}, True),
        anchors={
            "torchvision.ops.nms": torch_runner(lambda: torchvision.ops.nms(tb, ts, threshold)),
            "ORT NonMaxSuppression": session_runner(
                builtin, {"boxes": boxes[None], "scores": scores[None, None]}, False
            ),
        },
        agree=agree,
        targets={"torchvision.ops.nms": 3.0, "ORT NonMaxSuppression": 6.0},
    )


def first_output(value: Any) -> np.ndarray:
    """A run's (first) output as an array: session runs return lists, torch ops tensors."""
    if isinstance(value, (list, tuple)):
        return first_output(value[0])
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def close(rtol: float, atol: float) -> Callable[[Any, Any], None]:
    """Agreement check for float outputs: ortops' first output against the anchor's."""

    def check(ours: Any, anchor: Any) -> None:
        np.testing.assert_allclose(first_output(ours), first_output(anchor), rtol=rtol, atol=atol)

    return check


def equal(ours: Any, anchor: Any) -> None:
    np.testing.assert_array_equal(first_output(ours), first_output(anchor))


def roi_align_case() -> Case:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(1, 256, 200, 272)).astype(np.float32)
    xy = rng.uniform(0, 1000, (1000, 2))
    wh = rng.uniform(16, 400, (1000, 2))
    boxes = np.concatenate([xy, np.minimum(xy + wh, [1088, 800])], 1).astype(np.float32)
    rois = np.concatenate([np.zeros((1000, 1), np.float32), boxes], 1)
    attrs = dict(output_height=7, output_width=7, spatial_scale=0.25, sampling_ratio=2, mode="avg", aligned=1)
    model = one_node_model("RoIAlign", "ortops", {"input": features, "rois": rois}, ["output"], **attrs)
    builtin = one_node_model(
        "RoiAlign",
        "",
        {"X": features, "rois": boxes, "batch_indices": np.zeros(1000, np.int64)},
        ["Y"],
        output_height=7,
        output_width=7,
        spatial_scale=0.25,
        sampling_ratio=2,
        mode="avg",
        coordinate_transformation_mode="half_pixel",
    )
    builtin.opset_import[0].version = 16
    tf, tr = torch.from_numpy(features), torch.from_numpy(rois)
    return Case(
        name="RoIAlign avg 1x256x200x272, 1000 rois, 7x7, sampling 2, aligned",
        ortops=session_runner(model, {"input": features, "rois": rois}, True),
        anchors={
            "torchvision.ops.roi_align": torch_runner(lambda: torchvision.ops.roi_align(tf, tr, 7, 0.25, 2, True)),
            "ORT RoiAlign (opset 16)": session_runner(
                builtin, {"X": features, "rois": boxes, "batch_indices": np.zeros(1000, np.int64)}, False
            ),
        },
        agree=close(1e-4, 1e-4),
        targets={"torchvision.ops.roi_align": 5.0, "ORT RoiAlign (opset 16)": 4.0},
        targets_all={"torchvision.ops.roi_align": 3.5},
        min_scaling=1.8,
    )


def deform_conv_case() -> Case:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 256, 64, 64)).astype(np.float32)
    offset = rng.normal(size=(1, 18, 64, 64)).astype(np.float32)
    mask = rng.random((1, 9, 64, 64)).astype(np.float32)
    weight = (rng.normal(size=(256, 256, 3, 3)) * 0.02).astype(np.float32)
    bias = rng.normal(size=256).astype(np.float32)
    feeds = {"input": x, "offset": offset, "mask": mask, "weight": weight, "bias": bias}
    attrs = dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, deform_groups=1)
    # Weights and bias stored in the models, as in an exported model (each runtime may prepare
    # them once).
    model = one_node_model("MMCVModulatedDeformConv2d", "mmcv", feeds, ["output"], ("weight", "bias"), **attrs)
    conv = one_node_model("Conv", "", {"X": x, "W": weight, "B": bias}, ["Y"], ("W", "B"), pads=[1, 1, 1, 1])
    # ONNX's own DeformConv (opset 19+; ORT runs it with MLAS), same inputs and semantics.
    builtin_feeds = {"X": x, "W": weight, "offset": offset, "B": bias, "mask": mask}
    builtin = one_node_model("DeformConv", "", builtin_feeds, ["Y"], ("W", "B"), pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    builtin.opset_import[0].version = 22
    # The GEMM limit: the matrix product inside the convolution ([C_out, C_in*9] x [C_in*9, H*W])
    # by MLAS alone, as ORT's MatMul runs it; ratio = the fraction of that limit ortops reaches.
    columns = rng.normal(size=(256 * 9, 64 * 64)).astype(np.float32)
    gemm = one_node_model("MatMul", "", {"A": weight.reshape(256, -1), "B": columns}, ["Y"], ("A",))
    t = {k: torch.from_numpy(v) for k, v in feeds.items()}
    return Case(
        name="Modulated deform conv 1x256x64x64 -> 256, 3x3, pad 1",
        ortops=session_runner(model, feeds, True),
        anchors={
            "torchvision deform_conv2d": torch_runner(
                lambda: torchvision.ops.deform_conv2d(
                    t["input"], t["offset"], t["weight"], t["bias"], 1, 1, 1, t["mask"]
                )
            ),
            "ORT Conv (same shape)": session_runner(conv, {"X": x, "W": weight, "B": bias}, False),
            "ORT DeformConv (opset 22)": session_runner(builtin, builtin_feeds, False),
            GEMM_LIMIT: session_runner(gemm, {"A": weight.reshape(256, -1), "B": columns}, False),
        },
        agree=close(1e-3, 1e-3),
        unchecked=("ORT Conv (same shape)",),
        # ORT Conv: at most 1.1x its time (the same GEMM, without the sampling).
        targets={"torchvision deform_conv2d": 3.0, "ORT Conv (same shape)": 1 / 1.1, "ORT DeformConv (opset 22)": 2.0},
        targets_all={
            "torchvision deform_conv2d": 3.0,
            "ORT Conv (same shape)": 1 / 1.1,
            "ORT DeformConv (opset 22)": 2.0,
        },
        min_scaling=1.8,
    )


def grid_sample_case() -> Case:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 64, 256, 256)).astype(np.float32)
    grid = rng.uniform(-1, 1, (1, 256, 256, 2)).astype(np.float32)
    model = one_node_model(
        "grid_sampler",
        "mmcv",
        {"input": x, "grid": grid},
        ["output"],
        interpolation_mode=0,
        padding_mode=0,
        align_corners=0,
    )
    builtin = one_node_model(
        "GridSample", "", {"X": x, "grid": grid}, ["Y"], mode="bilinear", padding_mode="zeros", align_corners=0
    )
    builtin.opset_import[0].version = 16
    tx, tg = torch.from_numpy(x), torch.from_numpy(grid)
    return Case(
        name="grid_sampler bilinear zeros 1x64x256x256, grid 256x256",
        ortops=session_runner(model, {"input": x, "grid": grid}, True),
        anchors={
            "torch grid_sample": torch_runner(
                lambda: torch.nn.functional.grid_sample(tx, tg, "bilinear", "zeros", False)
            ),
            "ORT GridSample": session_runner(builtin, {"X": x, "grid": grid}, False),
        },
        agree=close(1e-4, 1e-4),
        targets={"torch grid_sample": 1.5, "ORT GridSample": 2.0},
        targets_all={"torch grid_sample": 2.5, "ORT GridSample": 2.0},
        min_scaling=1.8,
    )


# Anchors that are not competitors but the machine's limits, measured in the same run: their
# ratio (limit time / ortops time) is the fraction of the limit that ortops reaches.
BANDWIDTH_LIMIT = "memory bandwidth (STREAM copy of the same bytes)"
GEMM_LIMIT = "GEMM limit (ORT MatMul of the inner product's size)"


def stream_copy(bytes_moved: int) -> Callable[[int], Callable[[], Any]]:
    """A STREAM-style copy that reads and writes ``bytes_moved`` bytes in all (half each), on
    the thread count of the measurement: the time the memory system needs to move what an op
    that streams its input and output must move at least."""
    source = torch.ones(bytes_moved // 8, dtype=torch.float32)
    target = torch.empty_like(source)
    return torch_runner(lambda: target.copy_(source))


def agree_with_cummax(ours: Any, anchor: Any) -> None:
    np.testing.assert_array_equal(ours[0], anchor.values.numpy())


def scan_cases() -> list[Case]:
    x = np.random.default_rng(0).normal(size=(1, 256, 200, 200)).astype(np.float32)
    tx = torch.from_numpy(x)
    cases = []
    targets = {"torch.cummax": 3.0, BANDWIDTH_LIMIT: 0.6}
    for axis, mode in ((2, 1), (3, 3)):  # along H (bottom pool), along W (right pool)
        name = "H" if axis == 2 else "W"
        anchor = {"torch.cummax": torch_runner(lambda axis=axis: torch.cummax(tx, axis))}
        # Both read x once and write float32 values (cummax also int64 indices).
        for label, model, bytes_moved in (
            ("cummax", one_node_model("cummax", "mmcv", {"input": x}, ["values", "indices"], dim=axis), x.nbytes * 4),
            (
                "corner pool",
                one_node_model("MMCVCornerPool", "mmcv", {"input": x}, ["output"], mode=mode),
                x.nbytes * 2,
            ),
        ):
            cases.append(
                Case(
                    f"{label} 1x256x200x200 along {name}",
                    session_runner(model, {"input": x}, True),
                    {**anchor, BANDWIDTH_LIMIT: stream_copy(bytes_moved)},
                    agree=agree_with_cummax,
                    targets=targets,
                    targets_all=targets,
                )
            )
    return cases


def soft_nms_case() -> Case:
    boxes, scores = clustered_boxes(5000, seed=1)
    soft = one_node_model(
        "SoftNMS",
        "ortops",
        {"boxes": boxes, "scores": scores},
        ["dets", "indices"],
        method=2,
        sigma=0.5,
        min_score=0.001,
    )
    hard = one_node_model("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.5)
    return Case(
        name="Soft-NMS gaussian, 5000 boxes (anchor: ortops hard NMS)",
        ortops=session_runner(soft, {"boxes": boxes, "scores": scores}, True),
        anchors={"ortops NMS": session_runner(hard, {"boxes": boxes, "scores": scores}, True)},
        agree=lambda ours, anchor: None,  # different ops: nothing to compare
        # No target any more: "at most 3x ortops' hard NMS" was set when hard NMS took 6 ms
        # here; its per-cell coordinate arrays and vector test made it 5x faster, while
        # soft-NMS's cost is one exp per overlapping pair (300,000 here).
    )


def eager_cases() -> list[Case]:
    """The eager ortops.torch ops on CPU tensors against torchvision's and against the same
    kernel in an ONNX Runtime session (eager may cost at most 1.5x the session: ratio >= 2/3)."""
    import ortops.torch

    cases = []
    eager_targets = {"torchvision": 1.0, "ortops in ORT": 2 / 3}
    for n in (1000, 5000):
        boxes, scores = clustered_boxes(n, seed=2)
        b, s = torch.from_numpy(boxes), torch.from_numpy(scores)
        model = one_node_model("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.5)
        cases.append(
            Case(
                name=f"eager nms, {n} boxes",
                ortops=torch_runner(lambda b=b, s=s: ortops.torch.nms(b, s, 0.5)),
                anchors={
                    "torchvision": torch_runner(lambda b=b, s=s: torchvision.ops.nms(b, s, 0.5)),
                    "ortops in ORT": session_runner(model, {"boxes": boxes, "scores": scores}, True),
                },
                agree=equal,
                targets=eager_targets,
            )
        )
    rng = np.random.default_rng(3)
    features = rng.random((1, 256, 100, 136), dtype=np.float32)
    xy = rng.uniform(0, 700, (300, 2))
    rois = np.concatenate([np.zeros((300, 1)), xy, xy + rng.uniform(8, 300, (300, 2))], 1).astype(np.float32)
    x, r = torch.from_numpy(features), torch.from_numpy(rois)
    for aligned in (True, False):
        attrs = {"output_height": 7, "output_width": 7, "spatial_scale": 0.125, "sampling_ratio": 2}
        model = one_node_model(
            "RoIAlign", "ortops", {"input": features, "rois": rois}, ["output"], **attrs, aligned=int(aligned)
        )
        cases.append(
            Case(
                name=f"eager roi_align 1x256x100x136, 300 rois, aligned={aligned}",
                ortops=torch_runner(lambda a=aligned: ortops.torch.roi_align(x, r, 7, 0.125, 2, aligned=a)),
                anchors={
                    "torchvision": torch_runner(
                        lambda a=aligned: torchvision.ops.roi_align(x, r, 7, 0.125, 2, aligned=a)
                    ),
                    "ortops in ORT": session_runner(model, {"input": features, "rois": rois}, True),
                },
                agree=close(1e-5, 1e-5),
                targets=eager_targets,
            )
        )
    inp = rng.random((1, 64, 64, 64), dtype=np.float32)
    weight = rng.random((64, 64, 3, 3), dtype=np.float32) - 0.5
    offset = rng.normal(0, 2, (1, 18, 64, 64)).astype(np.float32)
    mask = rng.random((1, 9, 64, 64), dtype=np.float32)
    bias = np.zeros(64, np.float32)
    t = [torch.from_numpy(a) for a in (inp, offset, weight, mask)]
    feeds = {"input": inp, "offset": offset, "weight": weight, "bias": bias, "mask": mask}
    model = one_node_model("DeformConv2d", "ortops", feeds, ["output"], padding=[1, 1])
    cases.append(
        Case(
            name="eager deform_conv2d 1x64x64x64 -> 64, 3x3, modulated",
            ortops=torch_runner(lambda: ortops.torch.deform_conv2d(t[0], t[1], t[2], padding=1, mask=t[3])),
            anchors={
                "torchvision": torch_runner(
                    lambda: torchvision.ops.deform_conv2d(t[0], t[1], t[2], padding=1, mask=t[3])
                ),
                "ortops in ORT": session_runner(model, feeds, True),
            },
            agree=close(1e-4, 1e-3),
            targets=eager_targets,
        )
    )
    return cases


def float16_case(
    name: str,
    op: tuple[str, str],
    single: dict[str, np.ndarray],
    attrs: dict[str, Any],
    torch_name: str,
    torch_run: Callable[[dict[str, torch.Tensor]], Any],
    tolerance: float,
) -> Case:
    """One op (domain, op type) on the float16 values of `single`: against the same node on
    those values in float32 and against torch on the float16 tensors (timed, not checked)."""
    half = {k: v.astype(np.float16) for k, v in single.items()}
    single = {k: v.astype(np.float32) for k, v in half.items()}
    tensors = {k: torch.from_numpy(v) for k, v in half.items()}
    op_type, domain = op
    return Case(
        name=name,
        ortops=session_runner(one_node_model(op_type, domain, half, ["output"], **attrs), half, True),
        anchors={
            f"ortops {op_type} float32": session_runner(
                one_node_model(op_type, domain, single, ["output"], **attrs), single, True
            ),
            torch_name: torch_runner(lambda: torch_run(tensors)),
        },
        agree=close(tolerance, tolerance),
        unchecked=(torch_name,),
    )


def float16_cases() -> list[Case]:
    """The feature ops on float16 inputs (computing in float32): against the same ortops op on
    float32 (the cost of half precision) and torch's CPU kernels on float16. Only the float32
    run is compared: torch's CPU float16 kernels compute in float16 (torchvision's roi_align
    is 1.5 off here), so they are timed, not checked."""
    rng = np.random.default_rng(0)
    cases = []

    features = rng.normal(size=(1, 256, 200, 272)).astype(np.float32)
    xy = rng.uniform(0, 1000, (1000, 2))
    rois = np.concatenate([np.zeros((1000, 1)), xy, np.minimum(xy + rng.uniform(16, 400, (1000, 2)), [1088, 800])], 1)
    cases.append(
        float16_case(
            "float16 RoIAlign avg 1x256x200x272, 1000 rois, 7x7, sampling 2, aligned",
            ("RoIAlign", "ortops"),
            {"input": features, "rois": rois.astype(np.float32)},
            dict(output_height=7, output_width=7, spatial_scale=0.25, sampling_ratio=2, mode="avg", aligned=1),
            "torchvision roi_align float16",
            lambda t: torchvision.ops.roi_align(t["input"], t["rois"], 7, 0.25, 2, True),
            1e-2,
        )
    )

    x = rng.normal(size=(1, 64, 256, 256)).astype(np.float32)
    grid = rng.uniform(-1, 1, (1, 256, 256, 2)).astype(np.float32)
    cases.append(
        float16_case(
            "float16 grid_sampler bilinear zeros 1x64x256x256, grid 256x256",
            ("grid_sampler", "mmcv"),
            {"input": x, "grid": grid},
            dict(interpolation_mode=0, padding_mode=0, align_corners=0),
            "torch grid_sample float16",
            lambda t: torch.nn.functional.grid_sample(t["input"], t["grid"], "bilinear", "zeros", False),
            1e-2,
        )
    )

    x = rng.normal(size=(1, 256, 64, 64)).astype(np.float32)
    weight = (rng.normal(size=(256, 256, 3, 3)) * 0.02).astype(np.float32)
    single = {  # in ortops::DeformConv2d's input order (the mmcv names are float32 only)
        "input": x,
        "offset": rng.normal(size=(1, 18, 64, 64)).astype(np.float32),
        "weight": weight,
        "bias": rng.normal(size=256).astype(np.float32),
        "mask": rng.random((1, 9, 64, 64)).astype(np.float32),
    }
    cases.append(
        float16_case(
            "float16 DeformConv2d (modulated) 1x256x64x64 -> 256, 3x3, pad 1",
            ("DeformConv2d", "ortops"),
            single,
            dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, deform_groups=1),
            "torchvision deform_conv2d float16",
            lambda t: torchvision.ops.deform_conv2d(
                t["input"], t["offset"], t["weight"], t["bias"], 1, 1, 1, t["mask"]
            ),
            5e-2,
        )
    )
    return cases


def yolo_scene(batch: int, seed: int, objects: int, largest: float, jitter: bool) -> tuple[np.ndarray, np.ndarray]:
    """A YOLO head's decoded output on 640x640 images: 8400 anchors (strides 8, 16, 32), each
    with a box (cx, cy, w, h) [B, 8400, 4], float64, and 80 class logits [B, 8400, 80].
    `objects` per image, of sizes up to `largest`: the anchors inside one predict its box
    (with noise) and its class with a logit falling off from its centre, plus a look-alike
    class 3 logits lower; the rest predict a box of their own (at the anchor, or with `jitter`
    near it) and logits N(-7, 1.5) for every class."""
    rng = np.random.default_rng(seed)
    centres = np.concatenate(
        [np.stack(np.meshgrid(*(np.arange(640 // s) * s + s / 2,) * 2), -1).reshape(-1, 2) for s in (8, 16, 32)]
    )
    count, classes = len(centres), 80
    boxes = np.empty((batch, count, 4))
    logits = rng.normal(-7, 1.5, (batch, count, classes))
    for b in range(batch):
        boxes[b, :, :2] = centres + rng.normal(0, 2, (count, 2)) if jitter else centres
        boxes[b, :, 2:] = rng.uniform(8, 40, (count, 2))
        for _ in range(objects):
            centre, size = rng.uniform(40, 600, 2), rng.uniform(24, largest, 2)
            cls, look_alike = rng.integers(0, classes, 2)
            distance = np.abs(centres - centre) / (size / 2)
            near = np.nonzero(distance.max(1) < 1)[0]
            boxes[b, near, :2] = centre + rng.normal(0, 0.05, (len(near), 2)) * size
            boxes[b, near, 2:] = size * rng.uniform(0.85, 1.15, (len(near), 2))
            logits[b, near, cls] = 10 * (1 - distance[near].max(1)) - 6.5 + rng.normal(0, 0.5, len(near))
            logits[b, near, look_alike] = np.maximum(logits[b, near, look_alike], logits[b, near, cls] - 3)
    return boxes, logits


def sigmoid32(logits: np.ndarray) -> np.ndarray:
    return (1 / (1 + np.exp(-logits))).astype(np.float32)


def yolo_detections(batch: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """As YOLOv8-TensorRT feeds TRT::EfficientNMS_TRT: a :func:`yolo_scene` of about 12 objects
    per image, boxes as corners [B, 8400, 4] and sigmoid class scores [B, 8400, 80]."""
    boxes, logits = yolo_scene(batch, seed, objects=12, largest=240, jitter=False)
    xy, half = boxes[..., :2], boxes[..., 2:] / 2
    return np.concatenate([xy - half, xy + half], -1).astype(np.float32), sigmoid32(logits)


def padded_nms_topk_graph(max_output: int, iou: float, score: float) -> onnx.ModelProto:
    """EfficientNMS_TRT's outputs from ONNX's own ops: NonMaxSuppression per image and class;
    the kept scores scattered into a dense [B, C * N] (-1 elsewhere); TopK of each image's
    `max_output`; classes and boxes gathered from the flat indices; rows that are not a
    detection (score -1) zeroed; num_detections [B, 1] int32, as the plugin outputs them."""
    f, i32, i64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
    n = helper.make_node
    nodes = [
        n("Transpose", ["scores"], ["scores_t"], perm=[0, 2, 1]),
        n("NonMaxSuppression", ["boxes", "scores_t", "per_class", "iou", "score"], ["sel"]),
        n("GatherND", ["scores_t", "sel"], ["s"]),
        n("Shape", ["scores_t"], ["shape"]),
        n("Gather", ["shape", "zero"], ["batch"], axis=0),
        n("Gather", ["shape", "two_i"], ["anchors"], axis=0),
        n("ReduceProd", ["shape"], ["all"], keepdims=0),
        n("Div", ["all", "batch"], ["per_image"]),
        n("Concat", ["batch", "per_image"], ["dense_shape"], axis=0),
        n("ConstantOfShape", ["dense_shape"], ["empty"], value=helper.make_tensor("v", f, [1], [-1.0])),
        n("Gather", ["sel", "zero_s"], ["b"], axis=1),
        n("Gather", ["sel", "one_s"], ["c"], axis=1),
        n("Gather", ["sel", "two_s"], ["a"], axis=1),
        n("Mul", ["c", "anchors"], ["c_offset"]),
        n("Add", ["c_offset", "a"], ["position"]),
        n("Unsqueeze", ["b", "one"], ["b_col"]),
        n("Unsqueeze", ["position", "one"], ["position_col"]),
        n("Concat", ["b_col", "position_col"], ["at"], axis=1),
        n("ScatterND", ["empty", "at", "s"], ["dense"]),
        n("TopK", ["dense", "k"], ["top", "flat"], axis=1),
        n("Greater", ["top", "minus_half"], ["valid"]),
        n("Cast", ["valid"], ["valid_i"], to=i32),
        n("ReduceSum", ["valid_i", "one"], ["num_detections"], keepdims=1),
        n("Where", ["valid", "top", "zero_f"], ["detection_scores"]),
        n("Div", ["flat", "anchors"], ["cls"]),
        n("Cast", ["cls"], ["cls_i"], to=i32),
        n("Where", ["valid", "cls_i", "zero_i"], ["detection_classes"]),
        n("Mod", ["flat", "anchors"], ["box"]),
        n("Unsqueeze", ["box", "two"], ["box_col"]),
        n("Concat", ["batch", "k", "four"], ["gather_shape"], axis=0),
        n("Expand", ["box_col", "gather_shape"], ["box_index"]),
        n("GatherElements", ["boxes", "box_index"], ["picked"], axis=1),
        n("Unsqueeze", ["valid", "two"], ["valid_col"]),
        n("Where", ["valid_col", "picked", "zero_f"], ["detection_boxes"]),
    ]
    constants = [
        helper.make_tensor("per_class", i64, [1], [max_output]),
        helper.make_tensor("iou", f, [1], [iou]),
        helper.make_tensor("score", f, [1], [score]),
        helper.make_tensor("k", i64, [1], [max_output]),
        helper.make_tensor("zero", i64, [1], [0]),
        helper.make_tensor("one", i64, [1], [1]),
        helper.make_tensor("two", i64, [1], [2]),
        helper.make_tensor("two_i", i64, [1], [2]),
        helper.make_tensor("four", i64, [1], [4]),
        helper.make_tensor("zero_s", i64, [], [0]),
        helper.make_tensor("one_s", i64, [], [1]),
        helper.make_tensor("two_s", i64, [], [2]),
        helper.make_tensor("minus_half", f, [], [-0.5]),
        helper.make_tensor("zero_f", f, [], [0.0]),
        helper.make_tensor("zero_i", i32, [], [0]),
    ]
    outputs = ["num_detections", "detection_boxes", "detection_scores", "detection_classes"]
    graph = helper.make_graph(
        nodes,
        "padded_nms_topk",
        [helper.make_tensor_value_info("boxes", f, None), helper.make_tensor_value_info("scores", f, None)],
        [helper.make_value_info(name, onnx.TypeProto()) for name in outputs],
        initializer=constants,
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def yolov8_efficient_nms(score: float, iou: float, max_output: int) -> dict[str, Any]:
    """TRT::EfficientNMS_TRT's attributes as YOLOv8-TensorRT writes them (corner boxes, scores
    already activated, no background class)."""
    return dict(
        score_threshold=score,
        iou_threshold=iou,
        max_output_boxes=max_output,
        background_class=-1,
        box_coding=0,
        score_activation=0,
        plugin_version="1",
    )


def torchvision_efficient_nms(
    boxes: torch.Tensor, scores: torch.Tensor, score: float, iou: float, max_output: int
) -> list[torch.Tensor]:
    """EfficientNMS_TRT's outputs from torchvision, per image of boxes [B, N, 4] and scores
    [B, N, C]: the (box, class) pairs scoring at least `score`, batched_nms by class, the best
    `max_output`, padded with zeros: num_detections [B, 1] int32, boxes, scores, classes."""
    images, device = boxes.shape[0], boxes.device
    num = torch.zeros(images, 1, dtype=torch.int32, device=device)
    out_boxes = torch.zeros(images, max_output, 4, device=device)
    out_scores = torch.zeros(images, max_output, device=device)
    out_classes = torch.zeros(images, max_output, dtype=torch.int32, device=device)
    for b in range(images):
        n, c = torch.nonzero(scores[b] >= score, as_tuple=True)
        s = scores[b, n, c]
        keep = torchvision.ops.batched_nms(boxes[b, n], s, c, iou)[:max_output]
        k = len(keep)
        num[b, 0] = k
        out_boxes[b, :k], out_scores[b, :k], out_classes[b, :k] = boxes[b, n[keep]], s[keep], c[keep].int()
    return [num, out_boxes, out_scores, out_classes]


def efficient_nms_cases() -> list[Case]:
    """TRT::EfficientNMS_TRT as YOLOv8-TensorRT writes it (corner boxes, score >= 0.25, IoU 0.45,
    100 detections per image, per class) on a YOLO head, against torchvision (per image: filter,
    batched_nms, top-k, padding) and ONNX's NonMaxSuppression + TopK graph with the same outputs."""
    iou, score, max_output = 0.45, 0.25, 100
    outputs = ["num_detections", "detection_boxes", "detection_scores", "detection_classes"]
    cases = []
    for batch in (1, 8):
        boxes, scores = yolo_detections(batch)
        feeds = {"boxes": boxes, "scores": scores}
        model = one_node_model(
            "EfficientNMS_TRT", "TRT", feeds, outputs, **yolov8_efficient_nms(score, iou, max_output)
        )
        tb, ts = torch.from_numpy(boxes), torch.from_numpy(scores)

        def torchvision_nms(tb: torch.Tensor = tb, ts: torch.Tensor = ts) -> list[torch.Tensor]:
            return torchvision_efficient_nms(tb, ts, score, iou, max_output)

        def agree(ours: Any, anchor: Any) -> None:
            """The same detections in the same order (ties in score are too rare to matter)."""
            for mine, theirs in zip(ours, anchor, strict=True):
                theirs = theirs.numpy() if isinstance(theirs, torch.Tensor) else theirs
                np.testing.assert_array_equal(mine, theirs)

        candidates = int((scores >= score).sum()) // batch
        cases.append(
            Case(
                name=f"efficient_nms YOLO head, batch {batch}, 8400 x 80, score >= {score}, IoU {iou}, "
                f"~{candidates} candidates/image",
                ortops=session_runner(model, feeds, True),
                anchors={
                    "torchvision batched_nms + top-k": torch_runner(torchvision_nms),
                    "ORT NonMaxSuppression + TopK": session_runner(
                        padded_nms_topk_graph(max_output, iou, score), feeds, False
                    ),
                },
                agree=agree,
                targets={"torchvision batched_nms + top-k": 3.0, "ORT NonMaxSuppression + TopK": 3.0},
            )
        )
    return cases


def ms_deform_attn_case() -> Case:
    """Deformable DETR's encoder at 800x1333: strides 8 to 64, queries = keys = every pixel of
    every level, each query sampling near its own pixel centre (offsets of about 2 pixels)."""
    import io  # noqa: PLC0415 (only this case and faster_rcnn export)
    import warnings  # noqa: PLC0415

    levels = [(100, 167), (50, 84), (25, 42), (13, 21)]
    batch, heads, dim, points = 1, 8, 32, 4
    rng = np.random.default_rng(0)
    shapes = np.array(levels, np.int64)
    areas = shapes.prod(1)
    starts = (np.cumsum(areas) - areas).astype(np.int64)
    keys = int(areas.sum())
    value = rng.normal(size=(batch, keys, heads, dim)).astype(np.float32)
    centres = []
    for h, w in levels:
        y, x = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")
        centres.append(np.stack([x.ravel(), y.ravel()], -1))
    reference = np.concatenate(centres)[None, :, None, None, None, :]
    per_pixel = np.array([[w, h] for h, w in levels], np.float64)[None, None, None, :, None, :]
    offsets = rng.normal(0, 2, (batch, keys, heads, len(levels), points, 2)) / per_pixel
    locations = (reference + offsets).astype(np.float32)
    logits = rng.normal(size=(batch, keys, heads, len(levels) * points))
    weights = (np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)).reshape(locations.shape[:-1])
    weights = weights.astype(np.float32)
    names = ["value", "value_spatial_shapes", "value_level_start_index", "sampling_locations", "attention_weights"]
    feeds = dict(zip(names, (value, shapes, starts, locations, weights)))
    model = one_node_model("MultiScaleDeformableAttention", "ortops", feeds, ["output"])
    tv, tl, tw = (torch.from_numpy(a) for a in (value, locations, weights))

    class Composition(torch.nn.Module):
        def forward(self, v: torch.Tensor, loc: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return ms_deform_attn_composition(v, levels, loc, w)

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Composition(), (tv, tl, tw), buffer, dynamo=False, opset_version=17, input_names=["v", "loc", "w"]
        )
    standard = onnx.load_from_string(buffer.getvalue())
    assert {n.op_type for n in standard.graph.node} >= {"GridSample"}
    assert all(n.domain in ("", "ai.onnx") for n in standard.graph.node)
    return Case(
        name="ms_deform_attn Deformable-DETR encoder 800x1333: 4 levels, 8 heads x 32, 4 points, 22223 queries",
        ortops=session_runner(model, feeds, True),
        anchors={
            "torch grid_sample composition": torch_runner(lambda: ms_deform_attn_composition(tv, levels, tl, tw)),
            "ORT standard-ONNX composition": session_runner(
                standard, {"v": value, "loc": locations, "w": weights}, False
            ),
        },
        agree=close(1e-4, 1e-4),
        targets={"torch grid_sample composition": 5.0, "ORT standard-ONNX composition": 5.0},
        min_scaling=1.8,
    )


def yolo_head(batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A YOLO head's raw output: a :func:`yolo_scene` of about 15 objects per image, boxes
    (cx, cy, w, h) and sigmoid class scores. About a thousand (anchor, class) pairs pass 0.25
    per image, as in real detections."""
    boxes, logits = yolo_scene(batch, seed, objects=15, largest=200, jitter=True)
    return boxes.astype(np.float32), sigmoid32(logits)


def nms_topk_graph(max_output: int, iou: float, score: float) -> onnx.ModelProto:
    """ONNX's own ops with BatchedNMS's semantics: NonMaxSuppression per image and class, then
    each image's best `max_output` by score (TopK over score - 2 * image, which sorts by image,
    then score; a rank within the image from a CumSum of per-image counts), and the selected
    boxes as corners. Outputs: rows (image, class, box), their scores and boxes."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    n = helper.make_node
    nodes = [
        n("Transpose", ["scores"], ["scores_t"], perm=[0, 2, 1]),
        n("NonMaxSuppression", ["boxes", "scores_t", "per_class", "iou", "score"], ["sel"], center_point_box=1),
        n("GatherND", ["scores_t", "sel"], ["s"]),
        n("Gather", ["sel", "zero"], ["b"], axis=1),
        n("Cast", ["b"], ["bf"], to=f),
        n("Mul", ["bf", "two"], ["b2"]),
        n("Sub", ["s", "b2"], ["key"]),
        n("Shape", ["key"], ["k"]),
        n("TopK", ["key", "k"], ["_", "order"]),
        n("Gather", ["sel", "order"], ["sel_sorted"], axis=0),
        n("Gather", ["s", "order"], ["s_sorted"], axis=0),
        n("Gather", ["b", "order"], ["b_sorted"], axis=0),
        n("Shape", ["boxes"], ["boxes_shape"]),
        n("Gather", ["boxes_shape", "zero"], ["batch"], axis=0),
        n("Range", ["zero", "batch", "one"], ["images"]),
        n("Unsqueeze", ["images", "axis1"], ["images_col"]),
        n("Unsqueeze", ["b_sorted", "axis0"], ["b_row"]),
        n("Equal", ["b_row", "images_col"], ["in_image"]),
        n("Cast", ["in_image"], ["in_image_i"], to=i64),
        n("ReduceSum", ["in_image_i", "axis1"], ["counts"], keepdims=0),
        n("CumSum", ["counts", "zero"], ["starts"], exclusive=1),
        n("Gather", ["starts", "b_sorted"], ["row_start"], axis=0),
        n("Squeeze", ["k", "axis0"], ["k_scalar"]),
        n("Range", ["zero", "k_scalar", "one"], ["position"]),
        n("Sub", ["position", "row_start"], ["rank"]),
        n("Less", ["rank", "max_output"], ["keep"]),
        n("Compress", ["sel_sorted", "keep"], ["selected"], axis=0),
        n("Compress", ["s_sorted", "keep"], ["selected_scores"], axis=0),
        n("Gather", ["selected", "image_and_box"], ["gather_at"], axis=1),
        n("GatherND", ["boxes", "gather_at"], ["centre_size"]),
        n("Split", ["centre_size", "two_two"], ["xy", "wh"], axis=1),
        n("Div", ["wh", "two"], ["half"]),
        n("Sub", ["xy", "half"], ["top_left"]),
        n("Add", ["xy", "half"], ["bottom_right"]),
        n("Concat", ["top_left", "bottom_right"], ["selected_boxes"], axis=1),
    ]
    constants = [
        helper.make_tensor("per_class", i64, [1], [max_output]),
        helper.make_tensor("iou", f, [1], [iou]),
        helper.make_tensor("score", f, [1], [score]),
        helper.make_tensor("zero", i64, [], [0]),
        helper.make_tensor("one", i64, [], [1]),
        helper.make_tensor("two", f, [], [2.0]),
        helper.make_tensor("axis0", i64, [1], [0]),
        helper.make_tensor("axis1", i64, [1], [1]),
        helper.make_tensor("max_output", i64, [], [max_output]),
        helper.make_tensor("image_and_box", i64, [2], [0, 2]),
        helper.make_tensor("two_two", i64, [2], [2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "nms_topk",
        [helper.make_tensor_value_info("boxes", f, None), helper.make_tensor_value_info("scores", f, None)],
        [helper.make_value_info(name, onnx.TypeProto()) for name in ("selected", "selected_scores", "selected_boxes")],
        initializer=constants,
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def detections_per_image(result: Any, batch: int) -> list[tuple[np.ndarray, ...]]:
    """(box indices, classes, scores, corner boxes) of each image, in output order, from
    BatchedNMS's padded outputs, torchvision's per-image tuples or the ONNX graph's rows."""
    if isinstance(result, list) and isinstance(result[0], tuple):  # torchvision
        return [tuple(t.numpy() for t in image) for image in result]
    if len(result) == 5:  # ortops
        num, out_boxes, out_scores, classes, indices = result
        return [(indices[b, :k], classes[b, :k], out_scores[b, :k], out_boxes[b, :k]) for b, k in enumerate(num)]
    selected, selected_scores, selected_boxes = result  # the ONNX graph
    return [
        (selected[m, 2], selected[m, 1], selected_scores[m], selected_boxes[m])
        for m in (selected[:, 0] == b for b in range(batch))
    ]


def agree_detections(ours: Any, anchor: Any, batch: int) -> None:
    """Same detections in the same order, same scores; boxes to rounding (decoded apart)."""
    for mine, theirs in zip(detections_per_image(ours, batch), detections_per_image(anchor, batch), strict=True):
        np.testing.assert_array_equal(mine[0], theirs[0])
        np.testing.assert_array_equal(mine[1], theirs[1])
        np.testing.assert_array_equal(mine[2], theirs[2])
        np.testing.assert_allclose(mine[3], theirs[3], rtol=1e-6, atol=1e-4)


def batched_nms_cases() -> list[Case]:
    """ortops::BatchedNMS on a YOLO head (8400 anchors x 80 classes, boxes as centre and size,
    score > 0.25, IoU 0.45, 300 detections per image), against torchvision (per image: filter,
    box_convert, batched_nms, top-k) and ONNX's NonMaxSuppression + TopK graph."""
    iou, score, max_output = 0.45, 0.25, 300
    cases = []
    for batch in (1, 8):
        boxes, scores = yolo_head(batch)
        feeds = {"boxes": boxes, "scores": scores}
        model = one_node_model(
            "BatchedNMS",
            "ortops",
            feeds,
            ["num_detections", "detection_boxes", "detection_scores", "detection_classes", "detection_indices"],
            iou_threshold=iou,
            score_threshold=score,
            max_output_boxes=max_output,
            box_coding=1,
        )
        tb, ts = torch.from_numpy(boxes), torch.from_numpy(scores)

        def torchvision_nms(tb: torch.Tensor = tb, ts: torch.Tensor = ts) -> list[tuple[torch.Tensor, ...]]:
            detections = []
            for b in range(tb.shape[0]):
                n, c = torch.nonzero(ts[b] > score, as_tuple=True)
                s, corners = ts[b, n, c], torchvision.ops.box_convert(tb[b, n], "cxcywh", "xyxy")
                keep = torchvision.ops.batched_nms(corners, s, c, iou)[:max_output]
                detections.append((n[keep], c[keep], s[keep], corners[keep]))
            return detections

        candidates = int((scores > score).sum()) // batch
        cases.append(
            Case(
                name=f"batched_nms YOLO head, batch {batch}, 8400 x 80, ~{candidates} candidates/image",
                ortops=session_runner(model, feeds, True),
                anchors={
                    "torchvision batched_nms + top-k": torch_runner(torchvision_nms),
                    "ORT NonMaxSuppression + TopK": session_runner(
                        nms_topk_graph(max_output, iou, score), feeds, False
                    ),
                },
                agree=lambda ours, anchor, batch=batch: agree_detections(ours, anchor, batch),
                targets={"torchvision batched_nms + top-k": 3.0, "ORT NonMaxSuppression + TopK": 3.0},
            )
        )
    return cases


def fpn_rois(count: int, image_hw: tuple[int, int], finest_scale: int, levels: int, seed: int = 0) -> np.ndarray:
    """[count, 5] rois on one image whose scales (sqrt of the area) spread evenly over the
    FPN levels: scale = finest_scale * 2^u, u uniform in [0, levels), aspect ratios 1:2 to 2:1."""
    rng = np.random.default_rng(seed)
    scale = finest_scale * 2.0 ** rng.uniform(0, levels, count)
    aspect = 2.0 ** rng.uniform(-1, 1, count)
    w, h = scale * np.sqrt(aspect), scale / np.sqrt(aspect)
    cx, cy = rng.uniform(0, image_hw[1], count), rng.uniform(0, image_hw[0], count)
    return np.stack([np.zeros(count), cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1).astype(np.float32)


def mmdeploy_extractor_graph(
    level_shapes: list[tuple[int, ...]],
    strides: list[float],
    finest_scale: int,
    roi_attrs: dict[str, Any],
    roi_align: tuple[str, str] = ("ortops", "RoIAlign"),
) -> onnx.ModelProto:
    """What mmdeploy's default (ONNX Runtime) rewrite of mmdet's SingleRoIExtractor.forward
    exports, with ortops::RoIAlign as the per-level RoIAlign: the levels computed with standard
    ONNX ops (map_roi_levels), 2L zero rois and rows padded in front (the rewrite's guard for
    empty levels), then per level Equal, NonZero, Gather of its rois, RoIAlign and ScatterND of
    its rows into the output, which is finally sliced past the padding. With `roi_align` =
    ("mmdeploy", "MMCVRoIAlignRotated"), mmrotate's RotatedSingleRoIExtractor: rois [R, 6], each
    level chosen by sqrt(w h)."""
    domain, op_type = roi_align
    rotated = op_type == "MMCVRoIAlignRotated"
    columns = 6 if rotated else 5
    levels, c = len(level_shapes), level_shapes[0][1]
    out_h, out_w = roi_attrs["output_height"], roi_attrs["output_width"]
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    consts = [
        helper.make_tensor("col", i64, [2], [3, 4]) if rotated else helper.make_tensor("col", i64, [4], [1, 2, 3, 4]),
        helper.make_tensor("finest", f32, [], [float(finest_scale)]),
        helper.make_tensor("eps", f32, [], [1e-6]),
        helper.make_tensor("ln2", f32, [], [float(np.log(2.0))]),
        helper.make_tensor("lv_min", f32, [], [0.0]),
        helper.make_tensor("lv_max", f32, [], [float(levels - 1)]),
        helper.make_tensor("pad_rois", f32, [2 * levels, columns], [0.0] * (2 * levels * columns)),
        helper.make_tensor("pad_levels", i64, [2 * levels], list(range(levels)) * 2),
        helper.make_tensor("pad_feats", f32, [2 * levels, c, out_h, out_w], [0.0] * (2 * levels * c * out_h * out_w)),
        helper.make_tensor("feat_dims", i64, [3], [c, out_h, out_w]),
        helper.make_tensor("zero_i", i64, [1], [0]),
        helper.make_tensor("one_i", i64, [1], [1]),
        helper.make_tensor("skip", i64, [1], [2 * levels]),
        helper.make_tensor("end", i64, [1], [np.iinfo(np.int64).max]),
        *(helper.make_tensor(f"level{i}", i64, [], [i]) for i in range(levels)),
    ]
    node = helper.make_node
    if rotated:  # (cx, cy, w, h, theta): the sides are columns 3 and 4
        sides = [
            node("Gather", ["rois", "col"], ["wh"], axis=1),
            node("Split", ["wh"], ["w", "h"], axis=1, num_outputs=2),
        ]
    else:
        sides = [
            node("Gather", ["rois", "col"], ["corners"], axis=1),
            node("Split", ["corners"], ["x1", "y1", "x2", "y2"], axis=1, num_outputs=4),
            node("Sub", ["x2", "x1"], ["w"]),
            node("Sub", ["y2", "y1"], ["h"]),
        ]
    nodes = [
        # map_roi_levels: floor(log2(sqrt(w h) / finest + 1e-6)), clamped, int64.
        *sides,
        node("Mul", ["w", "h"], ["area"]),
        node("Sqrt", ["area"], ["scale"]),
        node("Div", ["scale", "finest"], ["q"]),
        node("Add", ["q", "eps"], ["q_eps"]),
        node("Log", ["q_eps"], ["ln_q"]),
        node("Div", ["ln_q", "ln2"], ["log2_q"]),  # torch.log2's export: log(x) / log(2)
        node("Floor", ["log2_q"], ["floor_q"]),
        node("Clip", ["floor_q", "lv_min", "lv_max"], ["clipped"]),
        node("Cast", ["clipped"], ["levels_2d"], to=i64),
        node("Squeeze", ["levels_2d", "one_i"], ["roi_levels"]),
        # The rewrite's padding, and the zero output it scatters into.
        node("Concat", ["pad_rois", "rois"], ["rois_p"], axis=0),
        node("Concat", ["pad_levels", "roi_levels"], ["levels_p"], axis=0),
        node("Shape", ["rois"], ["rois_shape"]),
        node("Slice", ["rois_shape", "zero_i", "one_i"], ["roi_count"]),
        node("Concat", ["roi_count", "feat_dims"], ["feat_shape"], axis=0),
        node("ConstantOfShape", ["feat_shape"], ["zeros"], value=helper.make_tensor("v", f32, [1], [0.0])),
        node("Concat", ["pad_feats", "zeros"], ["feats_0"], axis=0),
    ]
    for i, stride in enumerate(strides):
        nodes += [
            node("Equal", ["levels_p", f"level{i}"], [f"mask{i}"]),
            node("NonZero", [f"mask{i}"], [f"nz{i}"]),
            node("Transpose", [f"nz{i}"], [f"inds2d{i}"], perm=[1, 0]),  # [K, 1]: ScatterND's indices
            node("Squeeze", [f"inds2d{i}", "one_i"], [f"inds{i}"]),
            node("Gather", ["rois_p", f"inds{i}"], [f"rois{i}"], axis=0),
            node(
                op_type,
                [f"p{i}", f"rois{i}"],
                [f"pooled{i}"],
                domain=domain,
                spatial_scale=1.0 / stride,
                **roi_attrs,
            ),  # fmt: skip
            node("ScatterND", [f"feats_{i}", f"inds2d{i}", f"pooled{i}"], [f"feats_{i + 1}"]),
        ]
    nodes.append(node("Slice", [f"feats_{levels}", "skip", "end", "zero_i"], ["output"]))
    inputs = [helper.make_tensor_value_info("rois", f32, ["R", columns])]
    inputs += [helper.make_tensor_value_info(f"p{i}", f32, list(shape)) for i, shape in enumerate(level_shapes)]
    outputs = [helper.make_tensor_value_info("output", f32, ["R", c, out_h, out_w])]
    graph = helper.make_graph(nodes, "mmdeploy_single_roi_extractor", inputs, outputs, initializer=consts)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid(domain, 1)]
    return helper.make_model(graph, ir_version=8, opset_imports=opsets)


def multi_level_roi_align_cases() -> list[Case]:
    """mmdet's FPN RoI extractor on an 800 x 1333 image (strides 4, 8, 16, 32: levels of
    200x334, 100x167, 50x84 and 25x42, 256 channels), 1000 rois spread evenly over the levels,
    7x7, aligned: one ortops::MultiLevelRoIAlign node against the graph mmdeploy's ONNX Runtime
    export makes of the extractor (four ortops::RoIAlign nodes and the gather/scatter between).
    Sampling ratio 2 (torchvision's MultiScaleRoIAlign) has the target; 0 (adaptive, mmdet's
    configs) pools about three times as many samples, so the graph's fixed copying weighs less."""
    rng = np.random.default_rng(0)
    strides, finest_scale = [4.0, 8.0, 16.0, 32.0], 56
    shapes = [(1, 256, -(-800 // int(s)), -(-1333 // int(s))) for s in strides]
    levels = {f"p{i}": rng.normal(size=shape).astype(np.float32) for i, shape in enumerate(shapes)}
    feeds = {"rois": fpn_rois(1000, (800, 1333), finest_scale, len(strides)), **levels}
    anchor_name = "mmdeploy's ORT graph (4 ortops RoIAlign + gather/scatter)"
    cases = []
    for sampling_ratio, target in ((2, 1.5), (0, None)):
        roi_attrs = dict(output_height=7, output_width=7, sampling_ratio=sampling_ratio, aligned=1)
        model = one_node_model(
            "MultiLevelRoIAlign",
            "ortops",
            feeds,
            ["output"],
            featmap_strides=strides,
            finest_scale=finest_scale,
            pool_mode="avg",
            **roi_attrs,
        )
        anchor = mmdeploy_extractor_graph(shapes, strides, finest_scale, {**roi_attrs, "mode": "avg"})
        cases.append(
            Case(
                name=f"multi_level_roi_align: 4 FPN levels of 800x1333 (256 ch), 1000 rois, 7x7, "
                f"sampling {sampling_ratio}, aligned",
                ortops=session_runner(model, feeds, True),
                anchors={anchor_name: session_runner(anchor, feeds, True)},
                agree=close(1e-5, 1e-5),
                targets={anchor_name: target} if target else {},
                min_scaling=1.8,
            )
        )
    return cases


# ---- the nodes mmdeploy's ONNX Runtime library also implements, against it ----------------
# Shapes from real mmdeploy exports at 320 x 320 (64 FPN channels): oriented R-CNN,
# rotated RetinaNet, RetinaNet with nms_match, Deformable DETR, Faster R-CNN with DCNv2 in c3-c5.
# The original runs its kernels on the calling thread, except the deformable convolution,
# which starts std::thread::hardware_concurrency() threads of its own whatever the session's
# thread count.


def against_original(
    name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray], agree: Callable[[Any, Any], None]
) -> Case:
    """The same model through ortops and through the original, target 3 at every thread count."""
    return Case(
        name=name,
        ortops=session_runner(model, feeds, True),
        anchors={ORIGINAL: original_runner(model, feeds)},
        agree=agree,
        targets={ORIGINAL: 3.0},
    )


def rotated_rois(count: int, image_hw: tuple[int, int], scales: tuple[float, float], seed: int = 0) -> np.ndarray:
    """[count, 6] rotated rois (batch_index, cx, cy, w, h, theta) on one image: scale sqrt(w h)
    log-uniform in `scales`, aspect ratios 1:4 to 4:1, angles over half a turn (mmrotate's le90)."""
    rng = np.random.default_rng(seed)
    scale = scales[0] * (scales[1] / scales[0]) ** rng.uniform(0, 1, count)
    aspect = 2.0 ** rng.uniform(-2, 2, count)
    w, h = scale * np.sqrt(aspect), scale / np.sqrt(aspect)
    cx, cy = rng.uniform(0, image_hw[1], count), rng.uniform(0, image_hw[0], count)
    theta = rng.uniform(-np.pi / 2, np.pi / 2, count)
    return np.stack([np.zeros(count), cx, cy, w, h, theta], 1).astype(np.float32)


def roi_align_rotated_original_case() -> Case:
    """Oriented R-CNN's RoI extractor on its finest level (stride 4): 1780 rotated rois."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(1, 64, 80, 80)).astype(np.float32)
    rois = rotated_rois(1780, (320, 320), (16, 112))
    feeds = {"input": features, "rois": rois}
    attrs = dict(output_height=7, output_width=7, spatial_scale=0.25, sampling_ratio=2, aligned=1)
    model = one_node_model("MMCVRoIAlignRotated", "mmdeploy", feeds, ["output"], clockwise=1, **attrs)
    # The same rois unrotated, through the axis-aligned kernel: as many samples, read alike.
    cx, cy, w, h = rois[:, 1], rois[:, 2], rois[:, 3], rois[:, 4]
    boxes = np.stack([rois[:, 0], cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    aligned_feeds = {"input": features, "rois": boxes}
    aligned = one_node_model("MMCVRoiAlign", "mmcv", aligned_feeds, ["output"], mode="avg", **attrs)
    same_samples = "ortops MMCVRoiAlign, the rois unrotated"
    return Case(
        name="mmdeploy MMCVRoIAlignRotated 1x64x80x80, 1780 rois, 7x7, sampling 2, aligned, clockwise",
        ortops=session_runner(model, feeds, True),
        anchors={ORIGINAL: original_runner(model, feeds), same_samples: session_runner(aligned, aligned_feeds, True)},
        agree=close(1e-4, 1e-4),
        unchecked=(same_samples,),
        # The axis-aligned anchor: no slower per sample than the axis-aligned kernel.
        targets={ORIGINAL: 3.0, same_samples: 0.8},
        min_scaling=1.8,
    )


def multi_level_rotated_original_case() -> Case:
    """mmdeploy::MMCVMultiLevelRotatedRoiAlign (oriented R-CNN's TensorRT export) at 2000 rois
    over 4 levels, against the graph of the same extractor in its ONNX Runtime export (per-level
    MMCVRoIAlignRotated with the gather/scatter between) run by the original library."""
    rng = np.random.default_rng(1)
    strides, finest_scale = [4.0, 8.0, 16.0, 32.0], 56
    shapes = [(1, 64, 320 // int(s), 320 // int(s)) for s in strides]
    levels = {f"p{i}": rng.normal(size=shape).astype(np.float32) for i, shape in enumerate(shapes)}
    # Scales spread evenly over the 4 levels (finest_scale * 2^u, u in [0, 4)).
    feeds = {"rois": rotated_rois(2000, (320, 320), (finest_scale, finest_scale * 16), seed=1), **levels}
    roi_attrs = dict(output_height=7, output_width=7, sampling_ratio=2, aligned=1, clockwise=1)
    model = one_node_model(
        "MMCVMultiLevelRotatedRoiAlign",
        "mmdeploy",
        feeds,
        ["output"],
        featmap_strides=strides,
        finest_scale=finest_scale,
        roi_scale_factor=-1.0,
        **roi_attrs,
    )
    graph = mmdeploy_extractor_graph(shapes, strides, finest_scale, roi_attrs, ("mmdeploy", "MMCVRoIAlignRotated"))
    return Case(
        name="mmdeploy MMCVMultiLevelRotatedRoiAlign: 4 levels of 320x320 (64 ch), 2000 rois, 7x7, sampling 2",
        ortops=session_runner(model, feeds, True),
        anchors={
            f"{ORIGINAL}, ORT-export graph": original_runner(graph, feeds),
            "ortops, same graph": session_runner(graph, feeds, True),
        },
        agree=close(1e-4, 1e-4),
        targets={f"{ORIGINAL}, ORT-export graph": 3.0},
        min_scaling=1.8,
    )


def nms_match_original_case() -> Case:
    """RetinaNet with nms_match: 3206 boxes x 3 classes, IoU 0.5, score threshold 0.05."""
    rng = np.random.default_rng(2)
    boxes, _ = clustered_boxes(3206, seed=2)
    scores = rng.beta(0.5, 4.0, (1, 3, 3206)).astype(np.float32)  # most low, as after a sigmoid
    feeds = {
        "boxes": boxes[None],
        "scores": scores,
        "iou_threshold": np.array([0.5], np.float32),
        "score_threshold": np.array([0.05], np.float32),
    }
    model = one_node_model("NMSMatch", "mmdeploy", feeds, ["matches"], ("iou_threshold", "score_threshold"))
    return against_original("mmdeploy NMSMatch 3206 clustered boxes x 3 classes, IoU 0.5", model, feeds, equal)


def nms_rotated_original_case() -> Case:
    """Rotated RetinaNet's NMSRotated: 2000 candidates x 15 classes (DOTA), IoU 0.1, score 0.05."""
    rng = np.random.default_rng(3)
    corners, _ = clustered_boxes(2000, seed=3)
    centre, size = (corners[:, :2] + corners[:, 2:]) / 2, corners[:, 2:] - corners[:, :2]
    theta = rng.uniform(-np.pi / 2, np.pi / 2, (2000, 1))
    boxes = np.concatenate([centre, size * [1.5, 0.5], theta], 1).astype(np.float32)[None]
    scores = rng.beta(0.3, 6.0, (1, 15, 2000)).astype(np.float32)
    feeds = {"boxes": boxes, "scores": scores}
    model = one_node_model("NMSRotated", "mmdeploy", feeds, ["selected"], iou_threshold=0.1, score_threshold=0.05)
    name = "mmdeploy NMSRotated 2000 rotated boxes x 15 classes, IoU 0.1, score 0.05"
    return against_original(name, model, feeds, equal)


def grid_sampler_original_case() -> Case:
    """Deformable DETR's encoder sampling as mmdeploy exports it for ONNX Runtime (mmcv's
    multi_scale_deformable_attn_pytorch): per level one grid_sampler over [8 heads, 32, H, W]
    for 2125 queries x 4 points near each query's own position (offsets of about 2 pixels), at
    320 x 320 (strides 8 to 64)."""
    levels = [(40, 40), (20, 20), (10, 10), (5, 5)]
    heads, dim, points = 8, 32, 4
    rng = np.random.default_rng(4)
    centres = []
    for h, w in levels:
        y, x = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")
        centres.append(np.stack([x.ravel(), y.ravel()], -1))
    reference = np.concatenate(centres)[None, :, None, :]  # [1, queries, 1, 2] in [0, 1]
    feeds: dict[str, np.ndarray] = {}
    nodes = []
    for level, (h, w) in enumerate(levels):
        feeds[f"value{level}"] = rng.normal(size=(heads, dim, h, w)).astype(np.float32)
        offsets = rng.normal(0, 2, (heads, reference.shape[1], points, 2)) / [w, h]
        feeds[f"grid{level}"] = (2 * (reference + offsets) - 1).astype(np.float32)
        attrs = dict(interpolation_mode=0, padding_mode=0, align_corners=0)
        nodes.append(
            helper.make_node(
                "grid_sampler", [f"value{level}", f"grid{level}"], [f"out{level}"], domain="mmdeploy", **attrs
            )
        )
    graph = helper.make_graph(
        nodes,
        "deformable_detr_sampling",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in feeds.items()],
        [helper.make_value_info(f"out{level}", onnx.TypeProto()) for level in range(len(levels))],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("mmdeploy", 1)]
    model = helper.make_model(graph, ir_version=8, opset_imports=opsets)
    t = {n: torch.from_numpy(a) for n, a in feeds.items()}

    def torch_levels() -> list[torch.Tensor]:
        return [
            torch.nn.functional.grid_sample(t[f"value{i}"], t[f"grid{i}"], "bilinear", "zeros", False)
            for i in range(len(levels))
        ]

    def agree(ours: Any, anchor: Any) -> None:
        for mine, theirs in zip(ours, anchor, strict=True):
            np.testing.assert_allclose(mine, first_output(theirs), rtol=1e-4, atol=1e-4)

    return Case(
        name="mmdeploy grid_sampler, Deformable DETR encoder at 320x320: 4 levels, 8 heads x 32, 2125 queries x 4",
        ortops=session_runner(model, feeds, True),
        anchors={ORIGINAL: original_runner(model, feeds), "torch grid_sample": torch_runner(torch_levels)},
        agree=agree,
        targets={ORIGINAL: 3.0},
        min_scaling=1.8,
    )


def modulated_deform_conv_original_case() -> Case:
    """A DCNv2 3x3 convolution of ResNet-50's c4 stage (mmdet's dcn in c3-c5) at 320 x 320."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(1, 256, 20, 20)).astype(np.float32)
    feeds = {
        "input": x,
        "offset": rng.normal(0, 1, (1, 18, 20, 20)).astype(np.float32),
        "mask": rng.random((1, 9, 20, 20), dtype=np.float32),
        "weight": (rng.normal(size=(256, 256, 3, 3)) * 0.02).astype(np.float32),
        "bias": rng.normal(size=256).astype(np.float32),
    }
    attrs = dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, deform_groups=1)
    model = one_node_model("MMCVModulatedDeformConv2d", "mmdeploy", feeds, ["output"], ("weight", "bias"), **attrs)
    name = "mmdeploy MMCVModulatedDeformConv2d, DCNv2 c4 1x256x20x20 -> 256, 3x3, pad 1"
    return against_original(name, model, feeds, close(1e-3, 1e-3))


def region_proposals(count: int = 10_000, size: int = 1024, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A region-proposal network's boxes before its NMS: anchors (scale 8, aspect ratios 0.5, 1
    and 2) on five levels (strides 4-64) of a size x size image, moved by small deltas; scores
    a smooth field of 24 bumps (objects) plus noise, and each level's best anchors by score
    (3232, 2000, 2000, 2000 and all 768 at 1024), so that they come in dense clusters where
    neighbouring anchors overlap by 0.5-0.8."""
    rng = np.random.default_rng(seed)
    peaks, widths = rng.uniform(0, size, (24, 2)), rng.uniform(20, 120, 24)
    per_level = (count - 6768, 2000, 2000, 2000, 768)
    boxes, scores = [], []
    for stride, k in zip((4, 8, 16, 32, 64), per_level):
        n = -(-size // stride)
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        centre = np.repeat((np.stack([xs, ys], -1).reshape(-1, 2) + 0.5) * stride, 3, axis=0)
        wh = np.tile([(8 * stride / np.sqrt(r), 8 * stride * np.sqrt(r)) for r in (0.5, 1.0, 2.0)], (n * n, 1))
        delta = rng.normal(0, 0.05, (len(centre), 4))
        xy, side = centre + delta[:, :2] * wh, wh * np.exp(delta[:, 2:])
        level = np.clip(np.concatenate([xy - side / 2, xy + side / 2], 1), 0, size)
        near = np.exp(-((centre[:, None] - peaks[None]) ** 2).sum(-1) / (2 * (widths * stride / 8) ** 2)).max(1)
        score = 1 / (1 + np.exp(-(4 * near - 2 + rng.normal(0, 0.3, len(centre)))))
        best = np.argsort(-score, kind="stable")[:k]
        boxes.append(level[best])
        scores.append(score[best])
    return np.concatenate(boxes).astype(np.float32), np.concatenate(scores).astype(np.float32)


def region_proposal_nms_cases() -> list[Case]:
    """The batched NMS family as a two-stage detector's first stage uses it (10k proposals, 1
    class, top-k 3000, keep 1000 at IoU 0.7 and 2000 at 0.8, where thousands survive), against
    ortops' single-set NMS on the same 3000 candidates (NMSRotated for the rotated node, on the
    proposals turned by small angles): within 1.5x of it (ratio >= 0.67)."""
    boxes, scores = region_proposals()
    top = np.lexsort((np.arange(len(scores)), -scores))[:3000]
    rng = np.random.default_rng(1)
    rotated = np.concatenate(
        [(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2], rng.normal(0, 0.05, (len(boxes), 1))], 1
    ).astype(np.float32)
    cases = []
    for iou, keep in ((0.7, 1000), (0.8, 2000)):
        single = {"boxes": boxes[top], "scores": scores[top]}
        nms = session_runner(one_node_model("NMS", "ortops", single, ["indices"], iou_threshold=iou), single, True)
        rotated_single = {"boxes": rotated[top][None], "scores": scores[top][None, None]}
        nms_rotated = session_runner(
            one_node_model(
                "NMSRotated", "ortops", rotated_single, ["selected"], iou_threshold=iou, score_threshold=0.0
            ),
            rotated_single,
            True,
        )
        shared4 = {"boxes": boxes[None, :, None], "scores": scores[None, :, None]}
        trt = dict(num_classes=1, background_label_id=-1, iou_threshold=iou, score_threshold=0.0, topk=3000)
        trt.update(keep_topk=keep, is_normalized=0, clip_boxes=0)
        feeds3 = {"boxes": boxes[None], "scores": scores[None, :, None]}
        top_feeds = {"boxes": boxes[top][None], "scores": scores[top][None, :, None]}
        rotated_feeds = {"boxes": rotated[None, :, None], "scores": scores[None, :, None]}
        plugin = dict(shareLocation=1, backgroundLabelId=-1, numClasses=1, topK=3000, keepTopK=keep)
        # isNormalized 1: no extra pixel in the sizes, so the IoU is NMS's (and so are the results).
        plugin.update(scoreThreshold=0.0, iouThreshold=iou, isNormalized=1, clipBoxes=0)
        efficient = dict(background_class=-1, box_coding=0, iou_threshold=iou, max_output_boxes=keep)
        efficient.update(score_activation=0, score_threshold=0.0)
        nodes = [
            # name, model, feeds, kept boxes from its outputs (in output order), the anchor
            (
                "ortops::BatchedNMS",
                one_node_model(
                    "BatchedNMS",
                    "ortops",
                    feeds3,
                    ["n", "b", "s", "c", "i"],
                    iou_threshold=iou,
                    score_threshold=0.0,
                    max_output_boxes=keep,
                    pre_topk=3000,
                ),
                feeds3,
                lambda out: out[1][0, : out[0][0]],
                "NMS",
            ),
            (
                "mmdeploy::TRTBatchedNMS",
                one_node_model(
                    "TRTBatchedNMS", "mmdeploy", shared4, ["dets", "labels", "index"], return_index=1, **trt
                ),
                shared4,
                lambda out: out[0][0, out[1][0] >= 0, :4],
                "NMS",
            ),
            (
                "TRT::BatchedNMSDynamic_TRT",
                one_node_model(
                    "BatchedNMSDynamic_TRT", "TRT", shared4, ["n", "b", "s", "c"], caffeSemantics=1, **plugin
                ),
                shared4,
                lambda out: out[1][0, : out[0][0, 0]],
                "NMS",
            ),
            (
                "TRT::EfficientNMS_TRT (the 3000 candidates)",
                one_node_model("EfficientNMS_TRT", "TRT", top_feeds, ["n", "b", "s", "c"], **efficient),
                top_feeds,
                lambda out: out[1][0, : out[0][0, 0]],
                "NMS",
            ),
            (
                "mmdeploy::TRTBatchedRotatedNMS",
                one_node_model("TRTBatchedRotatedNMS", "mmdeploy", rotated_feeds, ["dets", "labels"], **trt),
                rotated_feeds,
                lambda out: out[0][0, out[1][0] >= 0, :5],
                "NMSRotated",
            ),
        ]
        for name, model, feeds, kept_boxes, anchor in nodes:

            def agree(
                ours: Any,
                theirs: Any,
                kept_boxes: Callable[[Any], np.ndarray] = kept_boxes,
                anchor: str = anchor,
                keep: int = keep,
            ) -> None:
                if anchor == "NMS":
                    expected = boxes[top][np.asarray(theirs[0])[:keep]]
                else:
                    expected = rotated[top][np.asarray(theirs[0])[:keep, 2]]
                np.testing.assert_array_equal(kept_boxes(ours), expected)

            cases.append(
                Case(
                    name=f"{name} region proposals 10k, 1 class, top-k 3000, keep {keep}, IoU {iou}",
                    ortops=session_runner(model, feeds, True),
                    anchors={f"ortops {anchor} on the 3000": nms if anchor == "NMS" else nms_rotated},
                    agree=agree,
                    targets={f"ortops {anchor} on the 3000": 0.67},
                )
            )
    return cases


def faster_rcnn_case() -> Case:
    """The whole Faster R-CNN (ResNet-50 FPN, random weights) exported with the TorchScript
    exporter twice: torchvision's ops as ortops nodes (``torchvision=True``) and as the
    standard ONNX RoiAlign / NonMaxSuppression. Both run in ONNX Runtime on one image."""
    import io  # noqa: PLC0415 (only this case exports)
    import warnings  # noqa: PLC0415

    import ortops.torch  # noqa: PLC0415

    torch.manual_seed(0)
    detector = torchvision.models.detection.fasterrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=320, max_size=480
    ).eval()

    class Flat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.detector = detector

        def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
            found = self.detector([image])[0]
            return found["boxes"], found["labels"], found["scores"]

    image = torch.rand(3, 320, 480, generator=torch.Generator().manual_seed(0))
    models = {}
    for with_ortops in (True, False):
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ortops.torch.export(
                Flat().eval(), (image,), buffer, dynamo=False, torchvision=with_ortops, input_names=["image"]
            )
        models[with_ortops] = onnx.load_from_string(buffer.getvalue())
    feeds = {"image": image.numpy()}

    def agree(ours: Any, anchor: Any) -> None:  # same detections, in score order up to near ties
        assert len(ours[2]) == len(anchor[2]) > 0, (len(ours[2]), len(anchor[2]))
        np.testing.assert_allclose(ours[2], anchor[2], atol=1e-4)

    return Case(
        name="Faster R-CNN R50-FPN, whole model, 3x320x480 image (random weights)",
        ortops=session_runner(models[True], feeds, True),
        anchors={"standard ONNX export (RoiAlign, NonMaxSuppression)": session_runner(models[False], feeds, False)},
        agree=agree,
    )


def attention_case() -> Case:
    """mmdeploy's ScaledDotProductAttentionTRT at ViT-B/16 size (8 images x 12 heads, 197 tokens),
    against torch and against the plain ONNX graph mmdeploy writes for other backends."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(96, 197, 64)).astype(np.float32) for _ in range(3))
    feeds = {"query": q, "key": k, "value": v}
    model = one_node_model("ScaledDotProductAttentionTRT", "mmdeploy", feeds, ["output", "attn"])
    nodes = [
        helper.make_node("Transpose", ["key"], ["key_t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["query", "key_t"], ["products"]),
        helper.make_node("Mul", ["products", "scale"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "value"], ["output"]),
    ]
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [1 / 8])
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in feeds.items()],
        [helper.make_value_info(n, onnx.TypeProto()) for n in ("output", "attn")],
        initializer=[scale],
    )
    plain = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    t = {n: torch.from_numpy(a) for n, a in feeds.items()}
    return Case(
        name="mmdeploy ScaledDotProductAttentionTRT 96x197x64",
        ortops=session_runner(model, feeds, True),
        anchors={
            "torch scaled_dot_product_attention": torch_runner(
                lambda: torch.nn.functional.scaled_dot_product_attention(t["query"], t["key"], t["value"])
            ),
            "ORT MatMul/Softmax graph": session_runner(plain, feeds, False),
        },
        agree=close(1e-4, 1e-5),
    )


def bicubic_case() -> Case:
    x = np.random.default_rng(0).normal(size=(1, 64, 128, 128)).astype(np.float32)
    model = one_node_model(
        "TRTBicubicInterpolate", "mmdeploy", {"input": x}, ["output"], scale_factor=[2.0, 2.0], align_corners=0
    )
    tx = torch.from_numpy(x)
    return Case(
        name="mmdeploy TRTBicubicInterpolate 1x64x128x128 x2",
        ortops=session_runner(model, {"input": x}, True),
        anchors={
            "torch interpolate bicubic": torch_runner(
                lambda: torch.nn.functional.interpolate(tx, scale_factor=2.0, mode="bicubic", align_corners=False)
            )
        },
        agree=close(1e-4, 1e-4),
        min_scaling=1.8,
    )


def instance_norm_case() -> Case:
    """As mmdeploy writes group norm for TensorRT: [N, G, -1] with 32 groups."""
    x = np.random.default_rng(0).normal(size=(8, 32, 8 * 64 * 64)).astype(np.float32)
    scale, bias = np.ones(32, np.float32), np.zeros(32, np.float32)
    feeds = {"X": x, "scale": scale, "bias": bias}
    model = one_node_model("TRTInstanceNormalization", "mmdeploy", feeds, ["Y"], epsilon=1e-5)
    builtin = one_node_model("InstanceNormalization", "", {"input": x, "scale": scale, "B": bias}, ["Y"], epsilon=1e-5)
    tx = torch.from_numpy(x)
    return Case(
        name="mmdeploy TRTInstanceNormalization 8x32x32768 (group norm of 8x256x64x64)",
        ortops=session_runner(model, feeds, True),
        anchors={
            "torch instance_norm": torch_runner(lambda: torch.nn.functional.instance_norm(tx, eps=1e-5)),
            "ORT InstanceNormalization": session_runner(builtin, {"input": x, "scale": scale, "B": bias}, False),
        },
        agree=close(1e-4, 1e-4),
        min_scaling=1.8,
    )


CASES: list[Callable[[], Case | list[Case]]] = [
    roi_align_case,
    multi_level_roi_align_cases,
    nms_case,
    deform_conv_case,
    grid_sample_case,
    scan_cases,
    soft_nms_case,
    float16_cases,
    ms_deform_attn_case,
    batched_nms_cases,
    faster_rcnn_case,
    eager_cases,
    attention_case,
    bicubic_case,
    instance_norm_case,
    efficient_nms_cases,
    roi_align_rotated_original_case,
    multi_level_rotated_original_case,
    nms_match_original_case,
    nms_rotated_original_case,
    grid_sampler_original_case,
    modulated_deform_conv_original_case,
    region_proposal_nms_cases,
]


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what the platform module says."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance() -> dict[str, Any]:
    """What a record needs besides the machine to be traced back: the day (UTC), the ortops
    version and commit measured (None outside a git checkout) and Python's version."""
    try:
        commit: str | None = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {
        "ortops": ortops.__version__,
        "ortops_commit": commit,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmark-results.json", help="where to write the JSON results")
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"write the JSON to {RECORDS.relative_to(ROOT)}/bench-cpu.json, the record the docs are generated from",
    )
    parser.add_argument("--repeats", type=int, default=10, help="timed runs per measurement, over all rounds")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="ortops and its anchors are timed in turn this many times (the fastest round's median counts)",
    )
    parser.add_argument(
        "--only", default="", help="run only the case functions (e.g. nms_case) or cases whose name contains this"
    )
    parser.add_argument(
        "--no-originals",
        action="store_true",
        help=f"leave out the original's anchors (and so never make {ORIGINALS_ENVIRONMENT.name}, which needs PyPI)",
    )
    args = parser.parse_args()
    if args.record:
        # A partial run would drop the other cases' rows from the docs.
        if args.only:
            parser.error("--record takes a full run: leave out --only")
        args.json = str(RECORDS / "bench-cpu.json")
    cores = os.cpu_count() or 1
    thread_counts = sorted({1, cores})
    results: list[dict[str, Any]] = []
    # The library's hot loops run at the widest instruction-set level the CPU has, or the one
    # ORTOPS_ISA forces (run the benchmark once per level to compare them).
    isa = os.environ.get("ORTOPS_ISA") or "the CPU's widest"
    print(
        f"machine: {cpu_model()}, {cores} cores; onnxruntime {ort.__version__}, "
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, ortops {ortops.__version__} "
        f"(instruction-set level: {isa})\n"
    )
    print("| case | threads | ortops ms | anchor | anchor ms | ratio | target |")
    print("|---|---|---|---|---|---|---|")
    all_met = True
    # Building a case prepares its inputs (and may export a model), so --only builds just the
    # functions whose name it matches, if any does; otherwise every case, filtered by name below.
    makers = [make for make in CASES if args.only and args.only in make.__name__] or CASES
    cases = [c for make in makers for c in (lambda made: made if isinstance(made, list) else [made])(make())]
    if makers is not CASES:
        args.only = ""
    if args.no_originals:
        for case in cases:
            case.anchors = {name: anchor for name, anchor in case.anchors.items() if not name.startswith(ORIGINAL)}
    scaling: dict[str, float] = {}
    scaling_targets: dict[str, float | None] = {}
    for case in cases:
        if args.only and args.only not in case.name:
            continue
        ours_out = case.ortops(1)()
        for anchor_name, anchor in case.anchors.items():
            if anchor_name not in (*case.unchecked, BANDWIDTH_LIMIT, GEMM_LIMIT):
                case.agree(ours_out, anchor(1)())
        ours_by_threads: dict[int, float] = {}
        for threads in thread_counts:
            runs = {"": case.ortops(threads), **{name: anchor(threads) for name, anchor in case.anchors.items()}}
            seconds = interleaved_seconds(runs, args.repeats, args.rounds)
            ours_s = seconds[""]
            ours_by_threads[threads] = ours_s
            for anchor_name in case.anchors:
                anchor_s = seconds[anchor_name]
                ratio = anchor_s / ours_s
                targets = case.targets if threads == 1 or case.targets_all is None else case.targets_all
                target = targets.get(anchor_name)
                met = target is None or ratio >= target
                all_met &= met
                results.append(
                    {
                        "case": case.name,
                        "threads": threads,
                        "ortops_ms": ours_s * 1e3,
                        "anchor": anchor_name,
                        "anchor_ms": anchor_s * 1e3,
                        "ratio": ratio,
                        "target": target,
                        "met": met,
                    }
                )
                target_text = "" if target is None else f">= {target:g} {'ok' if met else 'MISSED'}"
                print(
                    f"| {case.name} | {threads} | {ours_s * 1e3:.2f} | {anchor_name} | {anchor_s * 1e3:.2f} | "
                    f"{ratio:.2f} | {target_text} |"
                )
        if cores > 1:
            scaling[case.name] = ours_by_threads[1] / ours_by_threads[cores]
            scaling_targets[case.name] = case.min_scaling
    if scaling:
        print(f"\n| case | ortops speed-up, {cores} threads over 1 | target |\n|---|---|---|")
        for name, factor in scaling.items():
            target = scaling_targets[name]
            met = target is None or factor >= target
            all_met &= met
            target_text = "" if target is None else f">= {target:g} {'ok' if met else 'MISSED'}"
            print(f"| {name} | {factor:.2f} | {target_text} |")
    with open(args.json, "w") as f:
        machine = {
            "cpu": cpu_model(),
            "cores": cores,
            "isa": isa,
            "onnxruntime": ort.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            **provenance(),
        }
        record = {"machine": machine, "results": results, "scaling": scaling, "scaling_targets": scaling_targets}
        json.dump(record, f, indent=2)
        f.write("\n")
    print(f"\nJSON written to {args.json}; targets {'all met' if all_met else 'NOT all met'}")


if __name__ == "__main__":
    main()
