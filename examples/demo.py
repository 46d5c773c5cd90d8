"""ortops demo: a small detection head with four ortops ops, from PyTorch to ONNX Runtime.

The model normalises backbone features with GroupNorm, pools proposals with RoIAlign,
maps the refined boxes through the inverse of each image's 3x3 camera matrix
(MatrixInverse) and keeps the best boxes with NMS. It is exported with both PyTorch
exporters, run in ONNX Runtime with ortops, checked against eager PyTorch, and timed.

Run: scripts/demo.sh (does all set-up), or .venv/bin/python examples/demo.py.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

import ortops
import ortops.torch

FEATURES = 64
GROUPS = 8
POOLED = 7
STRIDE = 4


class DetectionHead(torch.nn.Module):
    """image [1, 3, H, W], proposals [R, 5], camera [1, 3, 3] -> boxes [K, 4], scores [K]."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, FEATURES, 3, stride=2, padding=1),
        )
        self.norm_weight = torch.nn.Parameter(torch.rand(FEATURES) + 0.5)
        self.norm_bias = torch.nn.Parameter(torch.randn(FEATURES) * 0.1)
        self.head = torch.nn.Linear(FEATURES * POOLED * POOLED, 5)

    def forward(
        self, image: torch.Tensor, proposals: torch.Tensor, camera: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        features = ortops.torch.group_norm(self.backbone(image), GROUPS, self.norm_weight, self.norm_bias)
        pooled = ortops.torch.roi_align(
            features, proposals, (POOLED, POOLED), spatial_scale=1.0 / STRIDE, sampling_ratio=2, aligned=True
        )
        out = self.head(pooled.flatten(1))
        boxes = proposals[:, 1:] + out[:, :4]
        scores = torch.sigmoid(out[:, 4])
        # Image coordinates to the camera's frame: homogeneous corners through camera^-1.
        to_camera = ortops.torch.matrix_inverse(camera)[0]
        corners = torch.stack([boxes[:, 0:2], boxes[:, 2:4]], dim=1)  # [R, 2, 2]
        homogeneous = torch.cat([corners, torch.ones_like(corners[..., :1])], dim=-1)  # [R, 2, 3]
        mapped = homogeneous @ to_camera.T
        boxes = (mapped[..., :2] / mapped[..., 2:]).flatten(1)  # [R, 4]
        keep = ortops.torch.nms(boxes, scores, 0.5)
        return boxes[keep], scores[keep]


def make_inputs(proposal_count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    image = torch.rand(1, 3, 256, 320, generator=g)
    xy = torch.rand(proposal_count, 2, generator=g) * torch.tensor([280.0, 220.0])
    wh = torch.rand(proposal_count, 2, generator=g) * 60 + 8
    proposals = torch.cat([torch.zeros(proposal_count, 1), xy, xy + wh], dim=1)
    camera = torch.tensor([[[1.2, 0.05, 3.0], [0.0, 1.1, -2.0], [0.0, 0.0, 1.0]]])
    return image, proposals, camera


def median_ms(fn: Callable[[], object], repeats: int = 20) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    torch.manual_seed(0)
    model = DetectionHead().eval()
    export_inputs = make_inputs(300, seed=1)
    test_inputs = make_inputs(500, seed=2)  # another proposal count: the graph must be general
    names = ["image", "proposals", "camera"]
    print(f"ortops {ortops.__version__}, onnxruntime {ort.__version__}, torch {torch.__version__}")
    print(f"library: {ortops.get_library_path()}")

    with torch.no_grad():
        expected_boxes, expected_scores = model(*test_inputs)
        eager_ms = median_ms(lambda: model(*test_inputs))

    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for exporter, dynamo in (("torch.export (dynamo=True)", True), ("TorchScript (dynamo=False)", False)):
            path = Path(tmp) / f"demo_{'dynamo' if dynamo else 'torchscript'}.onnx"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if dynamo:
                    dims = ({}, {0: torch.export.Dim("proposals")}, {})
                    ortops.torch.export(
                        model, export_inputs, path, input_names=names, dynamic_shapes=dims, verbose=False
                    )
                else:
                    axes = {"proposals": {0: "proposals"}}
                    ortops.torch.export(
                        model, export_inputs, path, dynamo=False, input_names=names, dynamic_axes=axes, opset_version=17
                    )
            session = ort.InferenceSession(str(path), ortops.session_options(), providers=["CPUExecutionProvider"])
            feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), test_inputs)}
            boxes, scores = session.run(None, feeds)
            same_kept = boxes.shape == tuple(expected_boxes.shape)
            box_error = float(np.abs(boxes - expected_boxes.numpy()).max()) if same_kept and boxes.size else 0.0
            score_error = float(np.abs(scores - expected_scores.numpy()).max()) if same_kept and scores.size else 0.0
            passed = same_kept and box_error < 1e-3 and score_error < 1e-5
            ok &= passed
            ort_ms = median_ms(lambda session=session, feeds=feeds: session.run(None, feeds))
            exported = onnx.load(path)
            custom = sorted({f"{n.domain}::{n.op_type}" for n in exported.graph.node if n.domain})
            # Strict: every node, the ortops ones included (ortops.torch registered their schemas).
            onnx.checker.check_model(exported, full_check=True)
            print(
                f"\n{exporter}: {path.stat().st_size / 1024:.0f} KiB, IR {exported.ir_version}, custom nodes "
                f"{', '.join(custom)}; onnx.checker with strict shape inference: OK"
            )
            print(f"  kept {len(boxes)} of {len(test_inputs[1])} proposals (PyTorch kept {len(expected_boxes)})")
            verdict = "OK" if passed else "MISMATCH"
            print(f"  max |ONNX Runtime - PyTorch|: boxes {box_error:.2e}, scores {score_error:.2e} -> {verdict}")
            # Both run ortops' kernels (eager ortops.torch ops call them on CPU tensors); the
            # difference is the rest of the model, in torch ops or in ONNX Runtime's.
            print(
                f"  median time per run: ONNX Runtime {ort_ms:.2f} ms, PyTorch eager {eager_ms:.2f} ms (same kernels)"
            )

    print("\nall checks passed" if ok else "\nMISMATCH between ONNX Runtime and PyTorch")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
