"""The CUDA benchmark: every ortops node on ONNX Runtime's CUDA execution provider, next to
anchors on the same GPU and inputs. scripts/test_gpu.sh runs it on a GPU; CI does not.

Anchors: torchvision's CUDA ops, torch's, ONNX Runtime's own CUDA kernels of the same
semantics (RoiAlign, NonMaxSuppression, GridSample, DeformConv), and the status quo: the same
node with the CPU-only library in the same GPU session, so that ONNX Runtime places it on the
CPU and copies its inputs and outputs (what users of the original libraries get). Inputs and
outputs stay in device memory (I/O binding); every session runs on torch's stream without
waiting for it, and device time per run is taken with CUDA events around ten back-to-back
runs, for ortops and every anchor alike (Bench). Every ortops output is first checked against
each anchor that computes the same thing. Ratio = anchor time / ortops time (bigger is
better), the median of at least 20 samples after warm-up; ortops' latency (one run, call to
results, ONNX Runtime's cost per run included) is printed beside it, and ONNX Runtime's cost
of a run that does nothing above the table. Bandwidth-bound nodes also report GB/s and the
deformable convolution TFLOP/s. --profile lists each ortops node's kernels and waits.

    python benchmarks/bench_cuda.py [--json out.json] [--repeats N] [--only NAME] [--profile]
    python benchmarks/bench_cuda.py --record    # a full run, as docs/data/bench-cuda.json, the
        record that docs/performance.md and the README's speed headline are generated from
        (then run scripts/gen_perf_docs.py and commit both)
    python benchmarks/bench_cuda.py --device cpu    # the same plumbing on the CPU (the
        emulated device, CPU anchors): checks the script, not the GPU's speed

Environment: ORTOPS_CUDA_LIBRARY (default build/cuda/libortops.so; with --device cpu,
build/libortops_device_on_cpu.so) and ORTOPS_CPU_LIBRARY (build/libortops.so, the status quo).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchvision
from bench import (
    RECORDS,
    fpn_rois,
    padded_nms_topk_graph,
    provenance,
    torchvision_efficient_nms,
    yolo_detections,
    yolov8_efficient_nms,
)
from compositions import ms_deform_attn_composition
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
ELEM = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
}


@dataclass
class Node:
    """A one-node model and its inputs (as torch tensors on the benchmark's device)."""

    op_type: str
    domain: str
    inputs: dict[str, torch.Tensor]
    outputs: list[str]
    attributes: dict[str, Any] = field(default_factory=dict)
    opset: int = 20
    graph: onnx.ModelProto | None = None  # a whole graph instead of the one node

    def model(self) -> bytes:
        if self.graph is not None:
            return self.graph.SerializeToString()
        value_infos = [
            helper.make_tensor_value_info(name, ELEM[np.dtype(str(t.dtype).replace("torch.", ""))], list(t.shape))
            for name, t in self.inputs.items()
        ]
        node = helper.make_node(self.op_type, list(self.inputs), self.outputs, domain=self.domain, **self.attributes)
        outputs = [helper.make_value_info(name, onnx.TypeProto()) for name in self.outputs]
        graph = helper.make_graph([node], self.op_type, value_infos, outputs)
        opsets = [helper.make_opsetid("", self.opset)]
        if self.domain:
            opsets.append(helper.make_opsetid(self.domain, 1))
        return helper.make_model(graph, ir_version=9, opset_imports=opsets).SerializeToString()


class Bench:
    """Sessions and timing. On a GPU, every session runs on torch's current stream (the CUDA
    provider's user_compute_stream), and a session with every node on the device returns as
    soon as its work is queued, as torch's ops do, so ortops and every anchor are timed alike:
    CUDA events around `inner` back-to-back runs on that one stream, the device time per run (a
    run that must wait for the device, as NMS does for its output's size, waits inside the
    timed span). `latency_ms` times one run from the call to its results on the host, ONNX
    Runtime's own cost per run included."""

    def __init__(self, device: str, repeats: int, inner: int = 10) -> None:
        self.device = device
        self.repeats = repeats
        self.inner = inner
        self.cuda = device == "cuda"
        default = ROOT / "build" / ("cuda/libortops.so" if self.cuda else "libortops_device_on_cpu.so")
        self.library = os.environ.get("ORTOPS_CUDA_LIBRARY", str(default))
        self.cpu_library = os.environ.get("ORTOPS_CPU_LIBRARY", str(ROOT / "build" / "libortops.so"))
        # Runs of device-only sessions end without waiting for the stream, so that queued runs
        # are timed as the device does them. Sessions with a node on the CPU wait as usual:
        # without the wait ONNX Runtime frees their pinned staging buffers from a stream
        # callback, where cudaFreeHost is not permitted (1.31.1 aborts the process, error 800).
        self.queued_run_options = ort.RunOptions()
        self.synced_run_options = ort.RunOptions()
        self.providers: list[Any] = ["CPUExecutionProvider"]
        if self.cuda:
            # ONNX Runtime's own CUDA kernels in float32, as the anchors and ortops compute (no
            # TF32), on torch's stream.
            stream = str(torch.cuda.current_stream().cuda_stream)
            cuda = ("CUDAExecutionProvider", {"use_tf32": "0", "user_compute_stream": stream})
            self.providers = [cuda, "CPUExecutionProvider"]
            self.queued_run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")

    def session(self, node: Node, library: str | None, only_device: bool) -> Callable[[], list[torch.Tensor]]:
        """A run function of `node` in a session with `library` registered; inputs and outputs
        in the benchmark's device memory. only_device: a node placed on the CPU is an error."""
        options = ort.SessionOptions()
        if library:
            options.register_custom_ops_library(library)
        providers = self.providers
        if only_device and self.cuda:
            # ONNX Runtime refuses the CPU's provider named beside a disabled fallback to it.
            providers = providers[:1]
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        session = ort.InferenceSession(node.model(), options, providers=providers)
        binding = session.io_binding()
        # The binding holds raw pointers: the run function keeps the tensors alive. A tensor
        # is bound where it lives: a node's scalar parameters may stay in host memory, as a
        # graph's constants do (ONNX Runtime then copies nothing before the run).
        inputs = {name: tensor.contiguous() for name, tensor in node.inputs.items()}
        for name, tensor in inputs.items():
            binding.bind_input(
                name,
                tensor.device.type,
                0,
                np.dtype(str(tensor.dtype).replace("torch.", "")),
                list(tensor.shape),
                tensor.data_ptr(),
            )
        for name in node.outputs:
            binding.bind_output(name, self.device)

        run_options = self.queued_run_options if only_device else self.synced_run_options

        # The outputs stay where the binding put them: a timed run copies nothing (fetched()
        # brings them to torch for the checks).
        def run() -> list[ort.OrtValue]:
            assert inputs
            session.run_with_iobinding(binding, run_options)
            return binding.get_outputs()

        return run

    def time_ms(self, run: Callable[[], Any]) -> float:
        """The median device time per run (see the class)."""
        for _ in range(3):
            run()
        times = []
        for _ in range(self.repeats):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(self.inner):
                    run()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / self.inner)
            else:
                t0 = time.perf_counter()
                run()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def latency_ms(self, run: Callable[[], Any]) -> float:
        """The median time from calling one run to having its results (host clock)."""
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            run()
            if self.cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def fetched(outputs: Any) -> Any:
    """A session run's OrtValues as torch tensors on the benchmark's device (copies, for the
    checks only, once the stream has finished the run); an anchor's torch outputs as they are."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], ort.OrtValue):
        return [torch.from_numpy(v.numpy()).to("cuda" if v.device_name() == "cuda" else "cpu") for v in outputs]
    return outputs


@dataclass
class Case:
    name: str
    node: Node
    anchors: dict[str, Callable[[], Any]]  # name -> run function
    same: dict[str, Callable[[Any, Any], None]]  # anchor -> checks ortops' output against it
    targets: dict[str, float]
    bytes_moved: int = 0
    flops: int = 0


def close(rtol: float = 1e-4) -> Callable[[Any, Any], None]:
    def check(ours: Any, theirs: Any) -> None:
        a = ours[0] if isinstance(ours, list) else ours
        b = theirs[0] if isinstance(theirs, (list, tuple)) else theirs
        a, b = a.float().cpu(), b.float().cpu()
        scale = float(b.abs().max()) if b.numel() else 1.0
        torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * max(scale, 1.0))

    return check


def same_indices(ours: Any, theirs: Any) -> None:
    a = (ours[0] if isinstance(ours, list) else ours).cpu().long().flatten()
    b = (theirs[0] if isinstance(theirs, (list, tuple)) else theirs).cpu().long().flatten()
    assert torch.equal(a, b), f"{a.numel()} against {b.numel()} kept"


def region_proposals(count: int, objects: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A two-stage detector's proposals [count, 4] (corners) and scores [count]: boxes around
    `objects` objects of 20-300 pixels on a 1000-pixel image, each jittered by a tenth of its
    object's size, so that IoU 0.7 keeps about one in seven (1,650 of 12,000)."""
    rng = np.random.default_rng(seed)
    centres, sizes = rng.uniform(0, 1000, (objects, 2)), rng.uniform(20, 300, (objects, 2))
    which = rng.integers(0, objects, count)
    size = sizes[which] * np.exp(rng.normal(0, 0.1, (count, 2)))
    xy = centres[which] + rng.normal(0, 0.1, (count, 2)) * sizes[which]
    boxes = np.concatenate([xy - size / 2, xy + size / 2], 1).astype(np.float32)
    return torch.from_numpy(boxes), torch.from_numpy(rng.random(count).astype(np.float32))


def mmdet_roi_extractor(
    maps: list[torch.Tensor], rois: torch.Tensor, strides: list[float], finest_scale: float, sampling_ratio: int
) -> torch.Tensor:
    """mmdet's SingleRoIExtractor on the GPU (torchvision's roi_align in place of mmcv's, which
    computes the same): each roi [R, 5] to the level of its scale, then one roi_align per level
    into the output rows of its rois. Tensor[R, C, 7, 7]."""
    scale = torch.sqrt((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]))
    levels = torch.floor(torch.log2(scale / finest_scale + 1e-6)).clamp(0, len(maps) - 1).long()
    out = rois.new_zeros(len(rois), maps[0].shape[1], 7, 7)
    for level, (features, stride) in enumerate(zip(maps, strides, strict=True)):
        index = torch.nonzero(levels == level).squeeze(1)
        out[index] = torchvision.ops.roi_align(features, rois[index], 7, 1 / stride, sampling_ratio, aligned=True)
    return out


def multi_level_roi_align_case(bench: Bench, status_quo: Callable[[Node], Callable[[], Any]]) -> Case:
    """ortops::MultiLevelRoIAlign (mmdeploy's MMCVMultiLevelRoiAlign) on the RoIAlign case's
    sizes (1000 rois, 2 images, 256 channels, 7x7, sampling 2) over an FPN of an 800x1216 image
    (strides 4 to 32), rois spread evenly over the levels, against mmdet's extractor in torch."""
    strides, finest_scale = [4.0, 8.0, 16.0, 32.0], 56
    gen = torch.Generator().manual_seed(5)
    maps = [torch.randn(2, 256, 800 // int(s), 1216 // int(s), generator=gen).to(bench.device) for s in strides]
    rois = torch.from_numpy(fpn_rois(1000, (800, 1216), finest_scale, len(strides), seed=5))
    rois[:, 0] = torch.randint(0, 2, (1000,), generator=gen).float()
    rois = rois.to(bench.device)
    node = Node(
        "MultiLevelRoIAlign",
        "ortops",
        {"rois": rois, **{f"features{level}": m for level, m in enumerate(maps)}},
        ["Y"],
        dict(output_height=7, output_width=7, sampling_ratio=2, featmap_strides=strides, finest_scale=finest_scale),
    )
    anchor = "mmdet extractor (torchvision roi_align per level)"
    return Case(
        "MultiLevelRoIAlign 1000 rois, 2x256, 4 levels (200x304 to 25x38) -> 7x7",
        node,
        {
            anchor: lambda: mmdet_roi_extractor(maps, rois, strides, finest_scale, 2),
            "status quo": status_quo(node),
        },
        {anchor: close()},
        {anchor: 1.3, "status quo": 1.0},
    )


def proposal_nms_case(bench: Bench, status_quo: Callable[[Node], Callable[[], Any]]) -> Case:
    """ortops::BatchedNMS as a two-stage detector's proposal stage, the way torchvision's RPN
    filters proposals: 2 images of 5,000 clustered proposals, each on the FPN level (of 5) its
    size falls in, NMS per level at IoU 0.7, the best 1,000 per image kept. Levels are the
    classes: a proposal scores its objectness on its level and 0 (no candidate) on the others.
    Against torchvision's batched_nms with the top 1,000 (the RPN's code) and ONNX Runtime's
    NonMaxSuppression on the same boxes and scores (its NMS alone, without the top 1,000)."""
    images, count, levels, iou, keep = 2, 5000, 5, 0.7, 1000
    boxes, objectness, level = [], [], []
    for image in range(images):
        proposals, scores = region_proposals(count, objects=100, seed=10 + image)
        side = ((proposals[:, 2:] - proposals[:, :2]).prod(1)).sqrt()
        boxes.append(proposals)
        objectness.append(scores * 0.999 + 1e-3)  # never 0: the threshold would drop it
        level.append(torch.floor(torch.log2(side / 16)).clamp(0, levels - 1).long())
    boxes_t, objectness_t, level_t = (torch.stack(t).to(bench.device) for t in (boxes, objectness, level))
    class_scores = torch.zeros(images, count, levels, device=bench.device)
    class_scores.scatter_(2, level_t[..., None], objectness_t[..., None])
    node = Node(
        "BatchedNMS",
        "ortops",
        {"boxes": boxes_t, "scores": class_scores},
        ["num_detections", "detection_boxes", "detection_scores", "detection_classes", "detection_indices"],
        dict(iou_threshold=iou, score_threshold=0.0, max_output_boxes=keep),
    )
    ort_nms = Node(
        "NonMaxSuppression",
        "",
        {
            "boxes": boxes_t,
            "scores": class_scores.transpose(1, 2).contiguous(),
            # In host memory, as a graph's constants are (see the NMS cases).
            "max": torch.tensor([count]),
            "iou": torch.tensor([iou]),
            "score": torch.tensor([0.0]),
        },
        ["selected"],
    )

    def torchvision_rpn() -> list[torch.Tensor]:
        return [torchvision.ops.batched_nms(boxes_t[i], objectness_t[i], level_t[i], iou)[:keep] for i in range(images)]

    def same_proposals(ours: Any, theirs: Any) -> None:
        for image, kept in enumerate(theirs):
            mine = ours[4][image, : int(ours[0][image])].cpu().long()
            assert torch.equal(mine, kept.cpu().long()), f"image {image}: {len(mine)} against {len(kept)} kept"

    kept = sum(len(k) for k in torchvision_rpn()) // images
    return Case(
        f"BatchedNMS proposal stage, 2 x 5000 proposals on 5 levels, IoU {iou}, {kept} kept/image",
        node,
        {
            "torchvision batched_nms": torchvision_rpn,
            "ORT NonMaxSuppression (no top-k)": bench.session(ort_nms, None, only_device=True),
            "status quo": status_quo(node),
        },
        {"torchvision batched_nms": same_proposals},
        {"torchvision batched_nms": 3.0, "ORT NonMaxSuppression (no top-k)": 3.0, "status quo": 1.0},
    )


def cases(bench: Bench) -> list[Case]:
    dev = bench.device
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return (torch.rand(*shape, generator=gen) * (high - low) + low).to(dev)

    out: list[Case] = []

    def status_quo(node: Node) -> Callable[[], Any]:
        return bench.session(node, bench.cpu_library, only_device=False)

    # RoIAlign: 1000 rois of an FPN level, 256 channels, 7x7, sampling 2.
    features = rand(2, 256, 100, 152, low=-1, high=1)
    xy = rand(1000, 2, high=560)
    rois = torch.cat(
        [torch.randint(0, 2, (1000, 1), generator=gen).float().to(dev), xy, xy + rand(1000, 2, low=8, high=200)], 1
    )
    pooling = dict(output_height=7, output_width=7, spatial_scale=0.25, sampling_ratio=2)
    boxes_only, images = rois[:, 1:].contiguous(), rois[:, 0].contiguous()
    node = Node("RoIAlign", "ortops", {"input": features, "rois": rois}, ["Y"], dict(pooling, aligned=1))
    ort_node = Node(
        "RoiAlign",
        "",
        {"X": features, "rois": boxes_only, "batch_indices": images.long()},
        ["Y"],
        dict(pooling, coordinate_transformation_mode="half_pixel"),
        opset=16,
    )
    out.append(
        Case(
            "RoIAlign 1000 rois, 2x256x100x152 -> 7x7",
            node,
            {
                "torchvision": lambda: torchvision.ops.roi_align(features, rois, 7, 0.25, 2, aligned=True),
                "ORT RoiAlign": bench.session(ort_node, None, only_device=True),
                "status quo": status_quo(node),
            },
            {"torchvision": close(), "ORT RoiAlign": close(1e-3)},
            {"torchvision": 1.3, "ORT RoiAlign": 1.3, "status quo": 1.0},
            bytes_moved=1000 * 256 * 49 * 4 * 5,
        )
    )

    def like_torchvision(name: str, variant: Node) -> Case:
        """A RoIAlign variant that samples the rois above as torchvision's aligned roi_align does,
        against it (anchor and check) and the status quo."""
        return Case(
            name,
            variant,
            {
                "torchvision": lambda: torchvision.ops.roi_align(features, rois, 7, 0.25, 2, aligned=True),
                "status quo": status_quo(variant),
            },
            {"torchvision": close()},
            {"torchvision": 1.3, "status quo": 1.0},
        )

    # TensorRT's ROIAlign_TRT on the same rois (half_pixel, average: torchvision's aligned).
    trt_node = Node(
        "ROIAlign_TRT",
        "TRT",
        {"X": features, "rois": boxes_only, "batch_indices": images.int()},
        ["Y"],
        dict(pooling, mode=1, coordinate_transformation_mode=1),
    )
    out.append(like_torchvision("ROIAlign_TRT 1000 rois, 2x256x100x152 -> 7x7", trt_node))
    # RoIAlignRotated on the same rois at angle 0 (centre and size): the same samples.
    centres, sizes = (boxes_only[:, :2] + boxes_only[:, 2:]) / 2, boxes_only[:, 2:] - boxes_only[:, :2]
    rotated_rois = torch.cat([images[:, None], centres, sizes, torch.zeros_like(images)[:, None]], 1)
    rotated_node = Node(
        "RoIAlignRotated", "ortops", {"input": features, "rois": rotated_rois}, ["Y"], dict(pooling, aligned=1)
    )
    out.append(like_torchvision("RoIAlignRotated 1000 rois at angle 0, 2x256x100x152 -> 7x7", rotated_node))
    out.append(multi_level_roi_align_case(bench, status_quo))
    # float16: the same rois on a float16 map, against torchvision in float16.
    features16, rois16 = features.half(), rois.half()
    node16 = Node("RoIAlign", "ortops", {"input": features16, "rois": rois16}, ["Y"], dict(pooling, aligned=1))
    out.append(
        Case(
            "RoIAlign float16, 1000 rois, 2x256x100x152 -> 7x7",
            node16,
            {
                "torchvision float16": lambda: torchvision.ops.roi_align(features16, rois16, 7, 0.25, 2, aligned=True),
                "status quo": status_quo(node16),
            },
            # ortops sums float16 in float32 and rounds once: checked against float32 on the
            # same float16 values, within float16's rounding.
            {
                "torchvision float16": lambda ours, _: close(2e-3)(
                    ours, torchvision.ops.roi_align(features16.float(), rois16.float(), 7, 0.25, 2, aligned=True)
                )
            },
            {"torchvision float16": 1.3, "status quo": 1.0},
        )
    )

    # NMS: random boxes (few overlaps: most are kept) at three sizes, and region proposals
    # (clusters of many overlapping boxes: most are removed), against torchvision and ONNX
    # Runtime's NonMaxSuppression on the same boxes.
    def nms_case(name: str, boxes: torch.Tensor, scores: torch.Tensor, iou: float) -> Case:
        node = Node("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["kept"], dict(iou_threshold=iou))
        ort_nms = Node(
            "NonMaxSuppression",
            "",
            {
                "boxes": boxes[None, :, [1, 0, 3, 2]].contiguous(),
                "scores": scores[None, None].contiguous(),
                # In host memory, where ONNX Runtime's kernel reads them (a graph's constants):
                # bound on the GPU, each run would copy them to the host through pinned
                # staging, which ONNX Runtime 1.31.1 frees from a stream callback when a run
                # does not wait for the stream, aborting the process.
                "max": torch.tensor([len(boxes)]),
                "iou": torch.tensor([iou]),
            },
            ["selected"],
        )
        kept = len(torchvision.ops.nms(boxes, scores, iou))
        return Case(
            f"NMS {name}, IoU {iou}, {kept} kept",
            node,
            {
                "torchvision": lambda: torchvision.ops.nms(boxes, scores, iou),
                "ORT NonMaxSuppression": bench.session(ort_nms, None, only_device=True),
                "status quo": status_quo(node),
            },
            {"torchvision": same_indices},
            {"torchvision": 10.0, "ORT NonMaxSuppression": 10.0, "status quo": 1.0},
        )

    for count in (1000, 10000, 30000):
        xy = rand(count, 2, high=1000 * (count / 10000) ** 0.5)
        boxes = torch.cat([xy, xy + rand(count, 2, low=10, high=100)], 1)
        out.append(nms_case(f"{count // 1000}k random boxes", boxes, rand(count), 0.5))
    proposals, proposal_scores = region_proposals(12000, objects=150, seed=3)
    out.append(nms_case("12k region proposals", proposals.to(dev), proposal_scores.to(dev), 0.7))

    # ortops::NonMaxSuppression: ONNX's NonMaxSuppression (what `ortops optimize` puts in its
    # place) on 10k random boxes in 4 classes, against ONNX Runtime's own NonMaxSuppression on
    # the same inputs and the status quo (the CPU kernel: the same rows, to the bit). Its
    # parameters stay in host memory, where both kernels read them (a graph's constants).
    count, classes, iou, score = 10000, 4, 0.5, 0.05
    xy = rand(1, count, 2, high=1000)
    onnx_boxes = torch.cat([xy, xy + rand(1, count, 2, low=10, high=100)], 2)
    parameters = {
        "max_output_boxes_per_class": torch.tensor([count]),
        "iou_threshold": torch.tensor([iou]),
        "score_threshold": torch.tensor([score]),
    }
    inputs = {"boxes": onnx_boxes, "scores": rand(1, classes, count), **parameters}
    node = Node("NonMaxSuppression", "ortops", inputs, ["selected_indices"])
    ort_run = bench.session(Node("NonMaxSuppression", "", inputs, ["selected_indices"]), None, only_device=True)
    kept = len(fetched(ort_run())[0])
    out.append(
        Case(
            f"ortops::NonMaxSuppression {count // 1000}k random boxes x {classes} classes, IoU {iou}, {kept} kept",
            node,
            {"ORT NonMaxSuppression": ort_run, "status quo": status_quo(node)},
            {"ORT NonMaxSuppression": same_indices, "status quo": same_indices},
            {"ORT NonMaxSuppression": 3.0, "status quo": 1.0},
        )
    )

    # TRT::EfficientNMS_TRT on a YOLO head (8 images x 8400 anchors x 80 classes), as
    # YOLOv8-TensorRT writes it, against torchvision (per image: the score filter, batched_nms,
    # the best 100) and ONNX's NonMaxSuppression + TopK graph with the same outputs.
    yolo_boxes, yolo_scores = (torch.from_numpy(a).to(dev) for a in yolo_detections(8))
    iou, score, max_output = 0.45, 0.25, 100
    node = Node(
        "EfficientNMS_TRT",
        "TRT",
        {"boxes": yolo_boxes, "scores": yolo_scores},
        ["num_detections", "detection_boxes", "detection_scores", "detection_classes"],
        yolov8_efficient_nms(score, iou, max_output),
    )

    def torchvision_batched() -> list[torch.Tensor]:
        return torchvision_efficient_nms(yolo_boxes, yolo_scores, score, iou, max_output)

    def same_detections(ours: Any, theirs: Any) -> None:
        for mine, other in zip(ours, theirs, strict=True):
            assert torch.equal(mine.cpu().float(), other.cpu().float()), "different detections"

    ort_graph = Node("", "", node.inputs, node.outputs, graph=padded_nms_topk_graph(max_output, iou, score))
    candidates = int((yolo_scores >= score).sum()) // 8
    out.append(
        Case(
            f"EfficientNMS_TRT YOLO head 8 x 8400 x 80, ~{candidates} candidates/image",
            node,
            {
                "torchvision batched_nms": torchvision_batched,
                "ORT NonMaxSuppression + TopK": bench.session(ort_graph, None, only_device=False),
                "status quo": status_quo(node),
            },
            {"torchvision batched_nms": same_detections},
            {"torchvision batched_nms": 3.0, "ORT NonMaxSuppression + TopK": 3.0, "status quo": 1.0},
        )
    )
    out.append(proposal_nms_case(bench, status_quo))

    # GridSample, bilinear zeros: Deformable-DETR-sized sampling of a 256-channel map.
    image = rand(8, 256, 64, 64, low=-1, high=1)
    grid = rand(8, 128, 128, 2, low=-1.05, high=1.05)
    node = Node("GridSample", "ortops", {"input": image, "grid": grid}, ["Y"])
    ort_grid = Node("GridSample", "", {"X": image, "grid": grid}, ["Y"], dict(mode="linear"), opset=20)
    out.append(
        Case(
            "GridSample 8x256x64x64, 128x128 points",
            node,
            {
                "torch": lambda: torch.nn.functional.grid_sample(image, grid, align_corners=False),
                "ORT GridSample": bench.session(ort_grid, None, only_device=True),
                "status quo": status_quo(node),
            },
            {"torch": close(), "ORT GridSample": close(1e-3)},
            {"torch": 1.2, "ORT GridSample": 1.0, "status quo": 1.0},
            bytes_moved=8 * 256 * 128 * 128 * 4 * 2 + grid.numel() * 4,
        )
    )
    # mmcv's grid_sampler (mmdeploy's exports of grid_sample) on the same inputs.
    mmcv_node = Node(
        "grid_sampler",
        "mmcv",
        {"input": image, "grid": grid},
        ["Y"],
        dict(interpolation_mode=0, padding_mode=0, align_corners=0),
    )
    out.append(
        Case(
            "grid_sampler (mmcv) 8x256x64x64, 128x128 points",
            mmcv_node,
            {
                "torch": lambda: torch.nn.functional.grid_sample(image, grid, align_corners=False),
                "status quo": status_quo(mmcv_node),
            },
            {"torch": close()},
            {"torch": 1.2, "status quo": 1.0},
        )
    )
    image16, grid16 = image.half(), grid.half()
    node16 = Node("GridSample", "ortops", {"input": image16, "grid": grid16}, ["Y"])
    out.append(
        Case(
            "GridSample float16, 8x256x64x64, 128x128 points",
            node16,
            {
                "torch float16": lambda: torch.nn.functional.grid_sample(image16, grid16, align_corners=False),
                "status quo": status_quo(node16),
            },
            {
                "torch float16": lambda ours, _: close(2e-3)(
                    ours, torch.nn.functional.grid_sample(image16.float(), grid16.float(), align_corners=False)
                )
            },
            {"torch float16": 1.2, "status quo": 1.0},
        )
    )

    # CumMax along H and CornerPool (top) of a 256-channel map.
    pool_in = rand(4, 256, 128, 128, low=-1, high=1)
    node = Node("CumMax", "ortops", {"input": pool_in}, ["values", "indices"], dict(dim=2))
    out.append(
        Case(
            "CumMax 4x256x128x128 along H",
            node,
            {"torch cummax": lambda: torch.cummax(pool_in, 2), "status quo": status_quo(node)},
            {"torch cummax": close(0)},
            {"torch cummax": 1.5, "status quo": 1.0},
            bytes_moved=pool_in.numel() * (4 + 4 + 8),
        )
    )
    node = Node("CumMin", "ortops", {"input": pool_in}, ["values", "indices"], dict(dim=2))
    out.append(
        Case(
            "CumMin 4x256x128x128 along H",
            node,
            {"torch cummin": lambda: torch.cummin(pool_in, 2), "status quo": status_quo(node)},
            {"torch cummin": close(0)},
            {"torch cummin": 1.5, "status quo": 1.0},
        )
    )
    # CornerPool (bottom) in float32 and float16, against torch's cummax in the same type.
    for pool, kind in ((pool_in, ""), (pool_in.half(), " float16")):
        node = Node("CornerPool", "ortops", {"input": pool}, ["Y"], dict(mode=1))
        out.append(
            Case(
                f"CornerPool{kind} 4x256x128x128 (bottom)",
                node,
                {
                    f"torch cummax{kind}": lambda pool=pool: torch.cummax(pool, 2)[0],
                    "status quo": status_quo(node),
                },
                {f"torch cummax{kind}": close(0)},
                {f"torch cummax{kind}": 1.5, "status quo": 1.0},
                bytes_moved=pool.numel() * pool.element_size() * 2,
            )
        )

    # DCNv2 of a ResNet stage: 2x256x64x64, 3x3, 256 -> 256, in float32 (against torchvision and
    # ONNX Runtime's DeformConv, which has no float16) and float16 (torchvision in float16).
    x32 = rand(2, 256, 64, 64, low=-1, high=1)
    offset32 = rand(2, 18, 64, 64, low=-2, high=2)
    mask32 = rand(2, 9, 64, 64)
    weight32 = rand(256, 256, 3, 3, low=-0.05, high=0.05)
    bias32 = rand(256, low=-0.1, high=0.1)
    for kind, half in (("", False), (" float16", True)):
        x, offset, mask, weight, bias = (t.half() if half else t for t in (x32, offset32, mask32, weight32, bias32))
        node = Node(
            "DeformConv2d",
            "ortops",
            {"input": x, "offset": offset, "weight": weight, "bias": bias, "mask": mask},
            ["Y"],
            dict(padding=[1, 1]),
        )
        anchors: dict[str, Callable[[], Any]] = {
            f"torchvision{kind}": lambda x=x, offset=offset, weight=weight, bias=bias, mask=mask: (
                torchvision.ops.deform_conv2d(x, offset, weight, bias, padding=1, mask=mask)
            )
        }
        same: dict[str, Callable[[Any, Any], None]] = {f"torchvision{kind}": close(1e-3)}
        if half:
            # torchvision's float16 kernel accumulates in float16 (off by 4e-2 here, where ortops,
            # which sums in float, is within float16 rounding): checked against float32's result.
            exact = torchvision.ops.deform_conv2d(x32, offset32, weight32, bias32, padding=1, mask=mask32)
            same = {f"torchvision{kind}": lambda ours, _, exact=exact: close(1e-3)(ours, exact)}
        targets = {f"torchvision{kind}": 1.5, "status quo": 1.0}
        if not half:
            ort_dcn = Node(
                "DeformConv",
                "",
                {"X": x, "W": weight, "offset": offset, "B": bias, "mask": mask},
                ["Y"],
                dict(pads=[1, 1, 1, 1]),
                opset=19,
            )
            anchors["ORT DeformConv"] = bench.session(ort_dcn, None, only_device=True)
            same["ORT DeformConv"] = close(1e-3)
            targets["ORT DeformConv"] = 1.0
        anchors["status quo"] = status_quo(node)
        out.append(
            Case(
                f"DeformConv2d{kind} 2x256x64x64, 3x3, 256 -> 256",
                node,
                anchors,
                same,
                targets,
                flops=2 * 2 * 256 * 64 * 64 * 256 * 9,
            )
        )
    # mmcv's MMCVModulatedDeformConv2d (mmdeploy's DCNv2 exports) on the float32 inputs.
    mmcv_dcn = Node(
        "MMCVModulatedDeformConv2d",
        "mmcv",
        {"input": x32, "offset": offset32, "mask": mask32, "weight": weight32, "bias": bias32},
        ["Y"],
        dict(padding=[1, 1]),
    )
    out.append(
        Case(
            "MMCVModulatedDeformConv2d 2x256x64x64, 3x3, 256 -> 256",
            mmcv_dcn,
            {
                "torchvision": lambda: torchvision.ops.deform_conv2d(
                    x32, offset32, weight32, bias32, padding=1, mask=mask32
                ),
                "status quo": status_quo(mmcv_dcn),
            },
            {"torchvision": close(1e-3)},
            {"torchvision": 1.5, "status quo": 1.0},
            flops=2 * 2 * 256 * 64 * 64 * 256 * 9,
        )
    )

    # Multi-scale deformable attention (Deformable DETR's encoder) against its grid_sample
    # composition in torch.
    shapes = [(64, 64), (32, 32), (16, 16), (8, 8)]
    heads, dim, points, queries = 8, 32, 4, 2000
    value = rand(2, sum(h * w for h, w in shapes), heads, dim, low=-1, high=1)
    spatial = torch.tensor(shapes, dtype=torch.int64, device=dev)
    starts = torch.cat([spatial.new_zeros(1), (spatial[:, 0] * spatial[:, 1]).cumsum(0)[:-1]])
    locations = rand(2, queries, heads, len(shapes), points, 2)
    weights = torch.softmax(rand(2, queries, heads, len(shapes) * points), -1).view(
        2, queries, heads, len(shapes), points
    )
    for kind, half in (("", False), (" float16", True)):
        value_k, locations_k, weights_k = (t.half() if half else t for t in (value, locations, weights))
        node = Node(
            "MultiScaleDeformableAttention",
            "ortops",
            {
                "value": value_k,
                # In host memory, where a graph's constants are and where the kernel reads them
                # (see ORT NonMaxSuppression's parameters).
                "spatial_shapes": spatial.cpu(),
                "level_start_index": starts.cpu(),
                "sampling_locations": locations_k,
                "attention_weights": weights_k,
            },
            ["Y"],
        )
        composition = f"torch grid_sample composition{kind}"
        anchors = {
            composition: lambda v=value_k, loc=locations_k, w=weights_k: ms_deform_attn_composition(v, shapes, loc, w)
        }
        same = {composition: close(1e-2 if half else 1e-3)}
        targets = {composition: 5.0, "status quo": 1.0}
        direct = None if half or not bench.cuda else direct_attention_kernel(value, spatial, starts, locations, weights)
        if direct is not None:
            anchors["direct kernel (original design)"] = direct
            same["direct kernel (original design)"] = close(1e-4)
            targets["direct kernel (original design)"] = 1.5
        anchors["status quo"] = status_quo(node)
        out.append(Case(f"MultiScaleDeformableAttention{kind}, 4 levels, 2000 queries", node, anchors, same, targets))
    return out


# The original Deformable-DETR design of multi-scale deformable attention on a GPU (its
# ms_deformable_im2col kernel's scheme, written here): one thread per output value (batch,
# query, head, channel), summing levels and points, each sample bilinear with zero padding.
DIRECT_ATTENTION = r"""
extern "C" __global__ void direct_attention(const float* value, const long long* shapes, const long long* starts,
                                            const float* locations, const float* weights, float* out,
                                            int batch, int keys, int heads, int dim, int levels, int queries,
                                            int points) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= batch * queries * heads * dim) return;
  const int d = n % dim, h = n / dim % heads, q = n / (dim * heads) % queries, b = n / (dim * heads * queries);
  const int channels = heads * dim;
  float sum = 0.f;
  for (int l = 0; l < levels; ++l) {
    const int height = (int)shapes[2 * l], width = (int)shapes[2 * l + 1];
    const float* level = value + ((long long)b * keys + starts[l]) * channels + h * dim + d;
    for (int p = 0; p < points; ++p) {
      const int at = (((b * queries + q) * heads + h) * levels + l) * points + p;
      const float x = locations[2 * at] * width - 0.5f, y = locations[2 * at + 1] * height - 0.5f;
      if (!(y > -1.f && x > -1.f && y < height && x < width)) continue;
      const int y0 = (int)floorf(y), x0 = (int)floorf(x);
      const float ly = y - y0, lx = x - x0, hy = 1.f - ly, hx = 1.f - lx;
      float v = 0.f;
      if (y0 >= 0 && x0 >= 0) v += hy * hx * level[(y0 * width + x0) * channels];
      if (y0 >= 0 && x0 + 1 < width) v += hy * lx * level[(y0 * width + x0 + 1) * channels];
      if (y0 + 1 < height && x0 >= 0) v += ly * hx * level[((y0 + 1) * width + x0) * channels];
      if (y0 + 1 < height && x0 + 1 < width) v += ly * lx * level[((y0 + 1) * width + x0 + 1) * channels];
      sum += weights[at] * v;
    }
  }
  out[n] = sum;
}
"""


def direct_attention_kernel(
    value: torch.Tensor, shapes: torch.Tensor, starts: torch.Tensor, locations: torch.Tensor, weights: torch.Tensor
) -> Callable[[], torch.Tensor] | None:
    """A run function of DIRECT_ATTENTION (compiled with CuPy, launched on torch's stream), or
    None without CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    kernel = cupy.RawKernel(DIRECT_ATTENTION, "direct_attention")
    batch, keys, heads, dim = value.shape
    _, queries, _, levels, points, _ = locations.shape
    out = torch.empty(batch, queries, heads * dim, device=value.device)
    total = out.numel()
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    args = [cupy.asarray(t) for t in (value, shapes, starts, locations.contiguous(), weights.contiguous(), out)]
    sizes = [np.int32(v) for v in (batch, keys, heads, dim, levels, queries, points)]

    def run() -> torch.Tensor:
        with stream:
            kernel(((total + 255) // 256,), (256,), (*args, *sizes))
        return out

    try:
        run()  # compiles it
    except Exception as error:  # noqa: BLE001 - an anchor that cannot run is left out, said why
        print(f"# the direct attention kernel is left out: {error}")
        return None
    return run


def counted(run: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    """One run's outputs (fetched) and what it asked of the device: the library appends its
    counts to the file ORTOPS_DEVICE_TRACE names while the variable is set (device/trace.cu)."""
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.jsonl"
        os.environ["ORTOPS_DEVICE_TRACE"] = str(trace)
        try:
            outputs = fetched(run())
        finally:
            del os.environ["ORTOPS_DEVICE_TRACE"]
        lines = trace.read_text().splitlines() if trace.exists() else []
    return outputs, json.loads(lines[-1]) if lines else {}


def run_overhead_ms(bench: Bench) -> float:
    """The time of a session run that does almost nothing (an Identity of 4 floats through the
    same I/O binding): ONNX Runtime's own cost per run, in every ortops figure and in none of
    torch's."""
    node = Node("Identity", "", {"x": torch.zeros(4, device=bench.device)}, ["y"], opset=17)
    return bench.time_ms(bench.session(node, None, only_device=True))


def profile(run: Callable[[], Any], runs: int = 5) -> tuple[list[str], float]:
    """What one run does on the device, from torch's profiler (CUPTI sees every kernel in the
    process, ONNX Runtime's too): each kernel's launches and device time per run, and the CUDA
    runtime calls that wait or copy (synchronisations, copies, allocations); and the device
    time of all of it per run, in ms (the node's kernels without ONNX Runtime's cost of a run,
    which bounds a one-node session's time where the kernels take less)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            run()
        torch.cuda.synchronize()
    lines = []
    total_us = 0.0
    for event in sorted(prof.key_averages(), key=lambda e: -getattr(e, "self_device_time_total", 0)):
        device_us = getattr(event, "self_device_time_total", 0) / runs
        total_us += device_us
        name = event.key
        calls = event.count / runs
        is_runtime = name.startswith(("cuda", "cu")) and device_us == 0
        if device_us > 0 or (is_runtime and "Launch" not in name and "GetLastError" not in name):
            lines.append(f"    {calls:6.1f} x {device_us:9.1f} us  {name[:110]}")
        elif is_runtime:
            lines.append(f"    {calls:6.1f} x {'launch':>9}     {name}")
    return lines, total_us / 1e3


def driver_version() -> str | None:
    """The NVIDIA driver's version as nvidia-smi reports it; None without one."""
    try:
        reply = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return reply.stdout.splitlines()[0].strip() if reply.stdout.strip() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"write the JSON to {RECORDS.relative_to(ROOT)}/bench-cuda.json, the record the docs are generated from",
    )
    parser.add_argument("--only", default="", help="the cases whose name contains one of these (comma-separated)")
    parser.add_argument("--profile", action="store_true", help="print each ortops node's kernels and waits")
    args = parser.parse_args()
    if args.record:
        # A partial run would drop the other cases' rows from the docs, and the emulated device's
        # times are no GPU's.
        if args.only or args.device != "cuda":
            parser.error("--record takes a full run on the GPU: leave out --only and --device cpu")
        args.json = RECORDS / "bench-cuda.json"
    if args.device == "cuda":
        if hasattr(ort, "preload_dlls"):
            ort.preload_dlls()
        assert torch.cuda.is_available() and "CUDAExecutionProvider" in ort.get_available_providers(), (
            "needs a GPU, torch with CUDA and onnxruntime-gpu (--device cpu checks the plumbing without one)"
        )
        # torch's anchors in float32, as ortops computes (no TF32 in convolutions or products).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        # One stream of its own for torch and every session (not the legacy default stream,
        # whose handle 0 would reach ONNX Runtime as "no stream").
        torch.cuda.set_stream(torch.cuda.Stream())
    bench = Bench(args.device, max(args.repeats, 20))
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "CPU (plumbing check only)"
    overhead = run_overhead_ms(bench)
    print(f"# ortops on {gpu}, onnxruntime {ort.__version__}, torch {torch.__version__}")
    print(f"# a session run of an Identity node (ONNX Runtime's cost per run): {overhead:.3f} ms\n")
    print("| case | ortops ms | ortops latency ms | anchor | anchor ms | ratio | target | |")
    print("|---|---|---|---|---|---|---|---|")
    results = []
    profiles: dict[str, list[str]] = {}
    all_counts: dict[str, dict[str, int]] = {}
    failed = False

    def write_record() -> None:
        """The JSON as far as the run got, rewritten after each case: a process that dies later
        (a runtime's abort, the device time running out) keeps what it measured."""
        if not args.json:
            return
        args.json.write_text(
            json.dumps(
                {
                    "machine": {
                        "gpu": gpu,
                        "driver": driver_version() if bench.cuda else None,
                        "onnxruntime": ort.__version__,
                        "torch": torch.__version__,
                        "cuda_architecture": (
                            "sm_{}{}".format(*torch.cuda.get_device_capability()) if bench.cuda else None
                        ),
                        **provenance(),
                    },
                    "run_overhead_ms": overhead,
                    "results": results,
                    "profiles": profiles,
                },
                indent=2,
            )
            + "\n"
        )

    for case in cases(bench):
        if not any(part in case.name for part in args.only.split(",")):
            continue
        run = bench.session(case.node, bench.library, only_device=True)
        ours, counts = counted(run)
        differs: dict[str, str] = {}
        for anchor, check in case.same.items():
            try:
                check(ours, fetched(case.anchors[anchor]()))
            except AssertionError as error:  # reported in the row, and the run goes on
                differs[anchor] = str(error).splitlines()[0][:80]
        ours_ms = bench.time_ms(run)
        latency = bench.latency_ms(run)
        device_ms = None
        if args.profile and bench.cuda:
            profiles[case.name], device_ms = profile(run)
        extra = ""
        if case.bytes_moved:
            extra = f"{case.bytes_moved / ours_ms / 1e6:.0f} GB/s"
        if case.flops:
            extra = f"{case.flops / ours_ms / 1e9:.1f} TFLOP/s"
        for anchor, anchor_run in case.anchors.items():
            anchor_ms = bench.time_ms(anchor_run)
            ratio = anchor_ms / ours_ms
            target = case.targets.get(anchor)
            ok = target is None or ratio >= target
            failed |= not ok or anchor in differs
            note = extra + ("" if ok else " MISSED") + (f" DIFFERS: {differs[anchor]}" if anchor in differs else "")
            print(
                f"| {case.name} | {ours_ms:.3f} | {latency:.3f} | {anchor} | {anchor_ms:.3f} | {ratio:.2f} | "
                f"{target if target else '-'} | {note.strip()} |",
                flush=True,
            )
            results.append(
                dict(
                    case=case.name,
                    ortops_ms=ours_ms,
                    ortops_latency_ms=latency,
                    ortops_device_ms=device_ms,
                    anchor=anchor,
                    anchor_ms=anchor_ms,
                    ratio=ratio,
                    target=target,
                    met=ok,
                    differs=differs.get(anchor),
                    throughput=extra,
                    device_counts=counts,
                )
            )
        all_counts[case.name] = counts
        write_record()
    print("\nWhat one run of each ortops node asked of the device (device/device_io.h's counts):")
    for name, counts in all_counts.items():
        print(
            f"  {name}: " + ", ".join(f"{key} {value}" for key, value in counts.items() if key not in ("domain", "op"))
        )
    for name, lines in profiles.items():
        print(f"\n{name}: per run (calls x device time, kernel or CUDA call)")
        print("\n".join(lines))
    print("\nevery target met" if not failed else "\nsome targets missed (see MISSED, DIFFERS)")


if __name__ == "__main__":
    main()
