"""Whole models on ONNX Runtime's CUDA execution provider, as issue 30 asks: each model
exported here from PyTorch (its custom parts through ortops.torch), then timed three ways on
the same GPU and inputs:

- ortops-gpu: the file in a CUDA session with the CUDA build of ortops (every node on the GPU);
- the status quo: the same file with the CPU-only library, so that ONNX Runtime runs the
  custom nodes on the CPU and copies their inputs and outputs (what the original libraries'
  users get);
- PyTorch eager on the GPU, with the kernels a PyTorch user has: torchvision's deform_conv2d,
  nms and roi_align, and the grid_sample composition of multi-scale deformable attention.

The models (random weights):

- torchvision's Faster R-CNN ResNet-50 FPN with DCNv2 in place of the 3x3 convolutions of
  ResNet's stages c3 to c5 (mmdet's ``dconv-c3-c5`` backbones): 13 modulated deformable
  convolutions, the RPN's NMS and the box head's, the four-level RoIAlign;
- Deformable DETR up to its encoder's output: ResNet-50's c3 to c5 and a fourth level, each
  projected to 256 channels with GroupNorm, then six encoder layers of multi-scale deformable
  attention over the four levels (the decoder, 300 queries, is a small share of its time);
- two pieces of those alone: a two-stage detector's stride-8 level with a DCNv2 layer (Conv
  backbone, DCNv2, proposals decoded per position, the best 2000, NMS, the first 300 pooled by
  RoIAlign, a box head), and one Deformable-DETR encoder layer.

Outputs are compared with PyTorch's before anything is timed; times as bench_cuda.py takes them
(sessions on torch's stream, ten queued runs between CUDA events).

    python benchmarks/bench_cuda_models.py [--json out.json] [--small]
    python benchmarks/bench_cuda_models.py --device cpu --small   # the plumbing, on the CPU

Environment: as bench_cuda.py (ORTOPS_CUDA_LIBRARY, ORTOPS_CPU_LIBRARY).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import torch
import torchvision
from bench import RECORDS
from bench_cuda import Bench, Node, close, fetched
from compositions import ms_deform_attn_composition

# torchvision's detectors on one image tensor: the wrapper the optimize tests export them with.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from exportable import Detections  # noqa: E402

import ortops.torch


class DcnDetector(torch.nn.Module):
    """image [1, 3, H, W] -> box head output [300, 5] and the pooled proposals' boxes [300, 4]."""

    def __init__(self, channels: int = 256, proposals: int = 2000, pooled: int = 300) -> None:
        super().__init__()
        self.proposals, self.pooled = proposals, pooled
        self.backbone = torch.nn.Sequential(
            torch.nn.Conv2d(3, 64, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(64, 128, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(128, channels, 3, stride=2, padding=1),
        )
        self.offset_and_mask = torch.nn.Conv2d(channels, 27, 3, padding=1)
        self.dcn_weight = torch.nn.Parameter(torch.randn(channels, channels, 3, 3) * 0.02)
        self.dcn_bias = torch.nn.Parameter(torch.zeros(channels))
        self.box_deltas = torch.nn.Conv2d(channels, 4, 1)
        self.objectness = torch.nn.Conv2d(channels, 1, 1)
        self.head = torch.nn.Linear(channels * 49, 5)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.backbone(image)
        offset, mask = self.offset_and_mask(features).split([18, 9], dim=1)
        features = torchvision.ops.deform_conv2d(
            features, offset, self.dcn_weight, self.dcn_bias, padding=1, mask=mask.sigmoid()
        ).relu()
        height, width = features.shape[-2:]
        ys = torch.arange(height, dtype=image.dtype, device=image.device) * 8 + 4
        xs = torch.arange(width, dtype=image.dtype, device=image.device) * 8 + 4
        centres = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), -1).reshape(-1, 2)
        deltas = self.box_deltas(features)[0].flatten(1).T
        half = 16 * deltas[:, 2:].clamp(max=4).exp()
        middle = centres + 8 * deltas[:, :2]
        boxes = torch.cat([middle - half, middle + half], 1)
        scores, best = self.objectness(features).flatten().sigmoid().topk(self.proposals)
        boxes = boxes[best]
        keep = torchvision.ops.nms(boxes, scores, 0.7)[: self.pooled]
        kept = boxes[keep]
        rois = torch.cat([torch.zeros_like(kept[:, :1]), kept], 1)
        pooled = torchvision.ops.roi_align(features, rois, 7, 1 / 8, 2, aligned=True)
        return self.head(pooled.flatten(1)), kept


class DeformableEncoderLayer(torch.nn.Module):
    """Deformable DETR's encoder layer: src [1, S, 256] and reference points [1, S, L, 2] of
    levels `shapes` -> [1, S, 256]. `attention` computes the sampling (ortops' op when
    exported, the grid_sample composition for PyTorch eager)."""

    def __init__(self, shapes: list[tuple[int, int]], attention: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.shapes, self.attention = shapes, attention
        self.heads, self.points, dim = 8, 4, 256
        levels = len(shapes)
        self.value = torch.nn.Linear(dim, dim)
        self.offsets = torch.nn.Linear(dim, self.heads * levels * self.points * 2)
        self.weights = torch.nn.Linear(dim, self.heads * levels * self.points)
        self.output = torch.nn.Linear(dim, dim)
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.ffn = torch.nn.Sequential(torch.nn.Linear(dim, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, dim))
        areas = torch.tensor([h * w for h, w in shapes])
        self.register_buffer("spatial_shapes", torch.tensor(shapes, dtype=torch.int64))
        self.register_buffer("level_start", torch.cat([areas.new_zeros(1), areas.cumsum(0)[:-1]]))
        # Offsets in pixels of each level, normalised as Deformable DETR does.
        self.register_buffer("normaliser", torch.tensor([[w, h] for h, w in shapes], dtype=torch.float32))

    def forward(self, src: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        batch, keys, dim = src.shape
        levels = len(self.shapes)
        value = self.value(src).view(batch, keys, self.heads, dim // self.heads)
        offsets = self.offsets(src).view(batch, keys, self.heads, levels, self.points, 2)
        weights = self.weights(src).view(batch, keys, self.heads, levels * self.points).softmax(-1)
        weights = weights.view(batch, keys, self.heads, levels, self.points)
        locations = reference[:, :, None, :, None, :] + offsets / self.normaliser[None, None, None, :, None, :]
        sampled = self.attention(value, self, locations, weights)
        src = self.norm1(src + self.output(sampled))
        return self.norm2(src + self.ffn(src))


def ortops_attention(value: torch.Tensor, layer: DeformableEncoderLayer, *rest: torch.Tensor) -> torch.Tensor:
    return ortops.torch.multi_scale_deformable_attention(value, layer.spatial_shapes, layer.level_start, *rest)


def composed_attention(value: torch.Tensor, layer: DeformableEncoderLayer, *rest: torch.Tensor) -> torch.Tensor:
    return ms_deform_attn_composition(value, layer.shapes, *rest)


class ModulatedDeformConv(torch.nn.Module):
    """DCNv2 in place of a 3x3 convolution, as mmdet's ``dconv-c3-c5`` backbones put it: the
    convolution's weight, sampled at offsets and with a mask that a 3x3 convolution of the input
    gives (initialised small and random: DCNv2's zeros would sample the plain grid)."""

    def __init__(self, conv: torch.nn.Conv2d) -> None:
        super().__init__()
        self.stride, self.padding, self.dilation = conv.stride, conv.padding, conv.dilation
        self.weight = conv.weight
        self.taps = conv.kernel_size[0] * conv.kernel_size[1]
        self.offset_and_mask = torch.nn.Conv2d(
            conv.in_channels, 3 * self.taps, conv.kernel_size, conv.stride, conv.padding, conv.dilation
        )
        torch.nn.init.normal_(self.offset_and_mask.weight, std=0.01)
        torch.nn.init.zeros_(self.offset_and_mask.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offset, mask = self.offset_and_mask(x).split([2 * self.taps, self.taps], 1)
        return torchvision.ops.deform_conv2d(
            x, offset, self.weight, None, self.stride, self.padding, self.dilation, mask.sigmoid()
        )


def faster_rcnn_dcn(side: int) -> torch.nn.Module:
    """torchvision's Faster R-CNN ResNet-50 FPN on one image [3, side, side] -> boxes [K, 4],
    labels [K], scores [K], with DCNv2 in every bottleneck of c3 to c5. Random weights score
    every class about 1/91, under torchvision's threshold of 0.05: five classes get a bias that
    puts each of the 1000 proposals above it, so that the last NMS has about 5,000 candidates, as
    a trained model's few thousand."""
    detector = torchvision.models.detection.fasterrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=side, max_size=side
    )
    with torch.no_grad():
        detector.roi_heads.box_predictor.cls_score.bias[1:6] = 3.0
    body = detector.backbone.body
    for stage in (body.layer2, body.layer3, body.layer4):
        for block in stage:
            block.conv2 = ModulatedDeformConv(block.conv2)
    return Detections(detector)


class DeformableDetrEncoder(torch.nn.Module):
    """Deformable DETR up to its encoder's output: image [1, 3, H, W] -> memory [1, S, 256].
    ResNet-50's c3 to c5 and a fourth level (a stride-2 convolution of c5), each projected to
    256 channels and group-normed, a level embedding and a learned position added once, then
    ``layers`` DeformableEncoderLayer over the four levels, every query's reference point its
    own position on each level. ``side`` is a multiple of 64, so that every level's size is
    ``side`` over its stride."""

    def __init__(self, side: int, layers: int, attention: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        if side % 64:
            raise ValueError(f"DeformableDetrEncoder: side {side} is not a multiple of 64")
        resnet = torchvision.models.resnet50(weights=None)
        self.stem = torch.nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool, resnet.layer1)
        self.stages = torch.nn.ModuleList([resnet.layer2, resnet.layer3, resnet.layer4])
        dim = 256

        def projection(channels: int, kernel: int = 1, stride: int = 1) -> torch.nn.Module:
            conv = torch.nn.Conv2d(channels, dim, kernel, stride, kernel // 2)
            return torch.nn.Sequential(conv, torch.nn.GroupNorm(32, dim))

        self.projections = torch.nn.ModuleList([projection(512), projection(1024), projection(2048)])
        self.extra = projection(2048, 3, 2)
        shapes = [(side // stride, side // stride) for stride in (8, 16, 32, 64)]
        keys = sum(h * w for h, w in shapes)
        self.level_embed = torch.nn.Parameter(torch.randn(len(shapes), dim) * 0.1)
        self.position = torch.nn.Parameter(torch.randn(1, keys, dim) * 0.1)
        self.layers = torch.nn.ModuleList([DeformableEncoderLayer(shapes, attention) for _ in range(layers)])
        centres = [
            torch.stack(
                torch.meshgrid((torch.arange(h) + 0.5) / h, (torch.arange(w) + 0.5) / w, indexing="ij")[::-1], -1
            ).reshape(-1, 2)
            for h, w in shapes
        ]
        self.register_buffer("reference", torch.cat(centres)[None, :, None, :].expand(1, keys, len(shapes), 2).clone())

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        features = self.stem(image)
        levels = []
        for stage, projection in zip(self.stages, self.projections):
            features = stage(features)
            levels.append(projection(features))
        levels.append(self.extra(features))
        src = torch.cat([f.flatten(2).transpose(1, 2) + e for f, e in zip(levels, self.level_embed)], 1)
        src = src + self.position
        for layer in self.layers:
            src = layer(src, self.reference)
        return src


def exported(
    model: torch.nn.Module, args: tuple[torch.Tensor, ...], names: list[str], outputs: list[str]
) -> onnx.ModelProto:
    """The model as ortops.torch.export writes it (TorchScript exporter, torchvision's ops as
    ortops nodes), exported on the CPU."""
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(folder) / "model.onnx"
        cpu = tuple(a.cpu() for a in args)
        ortops.torch.export(
            model.cpu(),
            cpu,
            path,
            dynamo=False,
            torchvision=True,
            input_names=names,
            output_names=outputs,
            opset_version=17,
        )
        return onnx.load(str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--small", action="store_true", help="smaller inputs (a quick check of the plumbing)")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--record",
        action="store_true",
        help="write the results into docs/data/bench-cuda.json (its 'models'), beside bench_cuda.py's record",
    )
    args = parser.parse_args()
    if args.record and (args.small or args.device != "cuda"):
        parser.error("--record takes a full run on the GPU: leave out --small and --device cpu")
    if args.device == "cuda":
        import onnxruntime as ort

        if hasattr(ort, "preload_dlls"):
            ort.preload_dlls()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        # One stream of its own for torch and every session (not the legacy default stream,
        # whose handle 0 would reach ONNX Runtime as "no stream").
        torch.cuda.set_stream(torch.cuda.Stream())
    bench = Bench(args.device, max(args.repeats, 20))
    dev = args.device
    torch.manual_seed(0)
    side = 256 if args.small else 640
    shapes = [(16, 16), (8, 8), (4, 4), (2, 2)] if args.small else [(80, 80), (40, 40), (20, 20), (10, 10)]
    keys = sum(h * w for h, w in shapes)
    models: list[tuple[str, torch.nn.Module, torch.nn.Module, tuple[torch.Tensor, ...], list[str], list[str]]] = []
    detector_side = 320 if args.small else 800
    faster_rcnn = faster_rcnn_dcn(detector_side).eval()
    models.append(
        (
            f"Faster R-CNN ResNet-50 FPN, DCNv2 in c3-c5, 3x{detector_side}x{detector_side}",
            faster_rcnn,
            faster_rcnn,
            (torch.rand(3, detector_side, detector_side),),
            ["image"],
            ["boxes", "labels", "scores"],
        )
    )
    layers = 1 if args.small else 6
    encoder_stack = DeformableDetrEncoder(side, layers, ortops_attention).eval()
    eager_stack = DeformableDetrEncoder(side, layers, composed_attention).eval()
    eager_stack.load_state_dict(encoder_stack.state_dict())
    models.append(
        (
            f"Deformable DETR to its encoder's output (ResNet-50, {layers}-layer encoder), 1x3x{side}x{side}",
            encoder_stack,
            eager_stack,
            (torch.rand(1, 3, side, side),),
            ["image"],
            ["memory"],
        )
    )
    detector = DcnDetector(proposals=500 if args.small else 2000, pooled=100 if args.small else 300).eval()
    models.append(
        (
            f"two-stage level with DCNv2, 1x3x{side}x{side}",
            detector,
            detector,
            (torch.rand(1, 3, side, side),),
            ["image"],
            ["head", "boxes"],
        )
    )
    encoder = DeformableEncoderLayer(shapes, ortops_attention).eval()
    eager_encoder = DeformableEncoderLayer(shapes, composed_attention).eval()
    eager_encoder.load_state_dict(encoder.state_dict())
    models.append(
        (
            f"Deformable DETR encoder layer, {len(shapes)} levels, {keys} queries",
            encoder,
            eager_encoder,
            (torch.rand(1, keys, 256), torch.rand(1, keys, len(shapes), 2)),
            ["src", "reference"],
            ["out"],
        )
    )

    gpu = torch.cuda.get_device_name() if dev == "cuda" else "CPU (plumbing check only)"
    print(f"# whole models on {gpu}\n")
    print("| model | ortops-gpu ms | status quo ms | ratio | PyTorch eager ms | ratio | |")
    print("|---|---|---|---|---|---|---|")
    results = []
    for name, model, eager, inputs, input_names, output_names in models:
        graph = exported(model, inputs, input_names, output_names)
        on_device = tuple(t.to(dev) for t in inputs)
        eager = eager.to(dev)
        node = Node("", "", dict(zip(input_names, on_device)), output_names, graph=graph)
        ours = bench.session(node, bench.library, only_device=False)
        status_quo = bench.session(node, bench.cpu_library, only_device=False)

        def run_eager(eager: torch.nn.Module = eager, on_device: tuple[torch.Tensor, ...] = on_device) -> Any:
            with torch.no_grad():
                return eager(*on_device)

        eager_outputs = run_eager()
        references = {
            "the CPU library": fetched(status_quo()),
            "eager": list(eager_outputs) if isinstance(eager_outputs, tuple) else [eager_outputs],
        }
        notes = []
        got_outputs = fetched(ours())
        for reference, expected in references.items():
            for output, got, want in zip(output_names, got_outputs, expected):
                try:
                    close(2e-3)(got, want)
                except AssertionError as error:
                    # assert_close's lines after the first say how many elements differ, by how much
                    detail = "; ".join(line.strip() for line in str(error).splitlines()[1:4] if line.strip())
                    notes.append(f"DIFFERS from {reference} in {output}: {detail}")
        if "boxes" in output_names:  # random weights: say how much work the NMS and pooling had
            notes.insert(0, f"{len(got_outputs[output_names.index('boxes')])} boxes;")
        note = " ".join(notes)
        ours_ms, quo_ms, eager_ms = (bench.time_ms(f) for f in (ours, status_quo, run_eager))
        print(
            f"| {name} | {ours_ms:.3f} | {quo_ms:.3f} | {quo_ms / ours_ms:.2f} | {eager_ms:.3f} | "
            f"{eager_ms / ours_ms:.2f} | {note} |",
            flush=True,
        )
        results.append(dict(model=name, ortops_ms=ours_ms, status_quo_ms=quo_ms, eager_ms=eager_ms, note=note))
        if args.json:  # after each model: a process that dies later keeps what it measured
            args.json.write_text(json.dumps({"device": gpu, "results": results}, indent=2))
    if args.record:
        record_path = RECORDS / "bench-cuda.json"
        record = json.loads(record_path.read_text())
        record["models"] = {"device": gpu, "results": results}
        record_path.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
