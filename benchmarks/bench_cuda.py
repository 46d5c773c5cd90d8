"""The CUDA benchmark: every ortops node on ONNX Runtime's CUDA execution provider, next to
anchors on the same GPU and inputs. scripts/test_gpu.sh runs it on a GPU; CI does not.

Anchors: torchvision's CUDA ops, torch's, ONNX Runtime's own CUDA kernels of the same
semantics (RoiAlign, NonMaxSuppression, GridSample, DeformConv), and the status quo: the same
node with the CPU-only library in the same GPU session, so that ONNX Runtime places it on the
CPU and copies its inputs and outputs (what users of the original libraries get). Inputs and
outputs stay in device memory (I/O binding), device time is taken with CUDA events around
each run, and every ortops output is first checked against each anchor that computes the same
thing. Ratio = anchor time / ortops time (bigger is better), the median of at least 20 runs
after warm-up; bandwidth-bound nodes also report GB/s and the deformable convolution TFLOP/s.

    python benchmarks/bench_cuda.py [--json out.json] [--repeats N] [--only NAME]
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
from compositions import ms_deform_attn_composition
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}


@dataclass
class Node:
    """A one-node model and its inputs (as torch tensors on the benchmark's device)."""

    op_type: str
    domain: str
    inputs: dict[str, torch.Tensor]
    outputs: list[str]
    attributes: dict[str, Any] = field(default_factory=dict)
    opset: int = 20

    def model(self) -> bytes:
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
    def __init__(self, device: str, repeats: int) -> None:
        self.device = device
        self.repeats = repeats
        self.cuda = device == "cuda"
        default = ROOT / "build" / ("cuda/libortops.so" if self.cuda else "libortops_device_on_cpu.so")
        self.library = os.environ.get("ORTOPS_CUDA_LIBRARY", str(default))
        self.cpu_library = os.environ.get("ORTOPS_CPU_LIBRARY", str(ROOT / "build" / "libortops.so"))
        self.providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if self.cuda else ["CPUExecutionProvider"]

    def session(self, node: Node, library: str | None, only_device: bool) -> Callable[[], list[torch.Tensor]]:
        """A run function of `node` in a session with `library` registered; inputs and outputs
        in the benchmark's device memory. only_device: a node placed on the CPU is an error."""
        options = ort.SessionOptions()
        if library:
            options.register_custom_ops_library(library)
        providers = self.providers
        if only_device and self.cuda:
            # ONNX Runtime refuses the CPU's provider named beside a disabled fallback to it.
            providers = ["CUDAExecutionProvider"]
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        session = ort.InferenceSession(node.model(), options, providers=providers)
        binding = session.io_binding()
        # The binding holds raw pointers: the run function keeps the tensors alive.
        inputs = {name: tensor.contiguous() for name, tensor in node.inputs.items()}
        for name, tensor in inputs.items():
            binding.bind_input(
                name,
                self.device,
                0,
                np.dtype(str(tensor.dtype).replace("torch.", "")),
                list(tensor.shape),
                tensor.data_ptr(),
            )
        for name in node.outputs:
            binding.bind_output(name, self.device)

        # The outputs stay where the binding put them: a timed run copies nothing (fetched()
        # brings them to torch for the checks).
        def run() -> list[ort.OrtValue]:
            assert inputs
            session.run_with_iobinding(binding)
            return binding.get_outputs()

        return run

    def time_ms(self, run: Callable[[], Any]) -> float:
        for _ in range(3):
            run()
        times = []
        for _ in range(self.repeats):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                run()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def fetched(outputs: Any) -> Any:
    """A session run's OrtValues as torch tensors on the benchmark's device (copies, for the
    checks only); an anchor's torch outputs as they are."""
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
    node = Node(
        "RoIAlign",
        "ortops",
        {"input": features, "rois": rois},
        ["Y"],
        dict(output_height=7, output_width=7, spatial_scale=0.25, sampling_ratio=2, aligned=1),
    )
    ort_node = Node(
        "RoiAlign",
        "",
        {"X": features, "rois": rois[:, 1:].contiguous(), "batch_indices": rois[:, 0].long().contiguous()},
        ["Y"],
        dict(
            output_height=7,
            output_width=7,
            spatial_scale=0.25,
            sampling_ratio=2,
            coordinate_transformation_mode="half_pixel",
        ),
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
            {"torchvision": 2.0, "ORT RoiAlign": 2.0, "status quo": 1.0},
            bytes_moved=1000 * 256 * 49 * 4 * 5,
        )
    )

    # NMS over 10k boxes.
    xy = rand(10000, 2, high=1000)
    boxes = torch.cat([xy, xy + rand(10000, 2, low=10, high=100)], 1)
    scores = rand(10000)
    node = Node("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["kept"], dict(iou_threshold=0.5))
    threshold = torch.tensor([0.5], device=dev)
    ort_nms = Node(
        "NonMaxSuppression",
        "",
        {
            "boxes": boxes[None, :, [1, 0, 3, 2]].contiguous(),
            "scores": scores[None, None],
            "max": torch.tensor([10000], device=dev),
            "iou": threshold,
        },
        ["selected"],
    )
    out.append(
        Case(
            "NMS 10k boxes",
            node,
            {
                "torchvision": lambda: torchvision.ops.nms(boxes, scores, 0.5),
                "ORT NonMaxSuppression": bench.session(ort_nms, None, only_device=True),
                "status quo": status_quo(node),
            },
            {"torchvision": same_indices},
            {"torchvision": 2.0, "ORT NonMaxSuppression": 5.0, "status quo": 1.0},
        )
    )

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

    # CumMax along H and CornerPool (top) of a 256-channel map.
    pool_in = rand(4, 256, 128, 128, low=-1, high=1)
    node = Node("CumMax", "ortops", {"input": pool_in}, ["values", "indices"], dict(dim=2))
    out.append(
        Case(
            "CumMax 4x256x128x128 along H",
            node,
            {"torch cummax": lambda: torch.cummax(pool_in, 2), "status quo": status_quo(node)},
            {"torch cummax": close(0)},
            {"torch cummax": 2.0, "status quo": 1.0},
            bytes_moved=pool_in.numel() * (4 + 4 + 8),
        )
    )
    node = Node("CornerPool", "ortops", {"input": pool_in}, ["Y"], dict(mode=1))
    out.append(
        Case(
            "CornerPool 4x256x128x128 (bottom)",
            node,
            {"torch cummax": lambda: torch.cummax(pool_in, 2)[0], "status quo": status_quo(node)},
            {"torch cummax": close(0)},
            {"torch cummax": 2.0, "status quo": 1.0},
            bytes_moved=pool_in.numel() * 8,
        )
    )

    # DCNv2 of a ResNet stage: 2x256x64x64, 3x3, 256 -> 256.
    x = rand(2, 256, 64, 64, low=-1, high=1)
    offset = rand(2, 18, 64, 64, low=-2, high=2)
    mask = rand(2, 9, 64, 64)
    weight = rand(256, 256, 3, 3, low=-0.05, high=0.05)
    bias = rand(256, low=-0.1, high=0.1)
    node = Node(
        "DeformConv2d",
        "ortops",
        {"input": x, "offset": offset, "weight": weight, "bias": bias, "mask": mask},
        ["Y"],
        dict(padding=[1, 1]),
    )
    ort_dcn = Node(
        "DeformConv",
        "",
        {"X": x, "W": weight, "offset": offset, "B": bias, "mask": mask},
        ["Y"],
        dict(pads=[1, 1, 1, 1]),
        opset=19,
    )
    out.append(
        Case(
            "DeformConv2d 2x256x64x64, 3x3, 256 -> 256",
            node,
            {
                "torchvision": lambda: torchvision.ops.deform_conv2d(x, offset, weight, bias, padding=1, mask=mask),
                "ORT DeformConv": bench.session(ort_dcn, None, only_device=True),
                "status quo": status_quo(node),
            },
            {"torchvision": close(1e-3), "ORT DeformConv": close(1e-3)},
            {"torchvision": 1.5, "ORT DeformConv": 1.0, "status quo": 1.0},
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
    node = Node(
        "MultiScaleDeformableAttention",
        "ortops",
        {
            "value": value,
            "spatial_shapes": spatial,
            "level_start_index": starts,
            "sampling_locations": locations,
            "attention_weights": weights,
        },
        ["Y"],
    )
    out.append(
        Case(
            "MultiScaleDeformableAttention, 4 levels, 2000 queries",
            node,
            {
                "torch grid_sample composition": lambda: ms_deform_attn_composition(value, shapes, locations, weights),
                "status quo": status_quo(node),
            },
            {"torch grid_sample composition": close(1e-3)},
            {"torch grid_sample composition": 1.5, "status quo": 1.0},
        )
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    if args.device == "cuda":
        if hasattr(ort, "preload_dlls"):
            ort.preload_dlls()
        assert torch.cuda.is_available() and "CUDAExecutionProvider" in ort.get_available_providers(), (
            "needs a GPU, torch with CUDA and onnxruntime-gpu (--device cpu checks the plumbing without one)"
        )
    bench = Bench(args.device, max(args.repeats, 20))
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "CPU (plumbing check only)"
    print(f"# ortops on {gpu}, onnxruntime {ort.__version__}, torch {torch.__version__}\n")
    print("| case | ortops ms | anchor | anchor ms | ratio | target | |")
    print("|---|---|---|---|---|---|---|")
    results = []
    failed = False
    for case in cases(bench):
        if args.only not in case.name:
            continue
        run = bench.session(case.node, bench.library, only_device=True)
        ours = fetched(run())
        for anchor, check in case.same.items():
            check(ours, fetched(case.anchors[anchor]()))
        ours_ms = bench.time_ms(run)
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
            failed |= not ok
            print(
                f"| {case.name} | {ours_ms:.3f} | {anchor} | {anchor_ms:.3f} | {ratio:.2f} | "
                f"{target if target else '-'} | {extra}{'' if ok else ' MISSED'} |"
            )
            results.append(
                dict(
                    case=case.name,
                    ortops_ms=ours_ms,
                    anchor=anchor,
                    anchor_ms=anchor_ms,
                    ratio=ratio,
                    target=target,
                    met=ok,
                    throughput=extra,
                )
            )
    if args.json:
        args.json.write_text(json.dumps({"device": gpu, "onnxruntime": ort.__version__, "results": results}, indent=2))
    print("\nevery target met" if not failed else "\nsome targets missed (see MISSED)")


if __name__ == "__main__":
    main()
