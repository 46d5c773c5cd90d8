"""ortops' nodes of fixed-size outputs in a CUDA graph (ONNX Runtime's enable_cuda_graph): a
session captures its run once and replays it, which works only where no kernel waits for the
device, copies to the host or allocates outside the stream. Replays with new input values
must give what a session without the graph gives. Skipped where ONNX Runtime has no CUDA
provider (scripts/test_gpu.sh runs it on a GPU)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[3]
LIBRARY = Path(os.environ.get("ORTOPS_CUDA_LIBRARY", ROOT / "build" / "cuda" / "libortops.so"))

pytestmark = [
    pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(), reason="needs onnxruntime-gpu"),
    pytest.mark.skipif(not LIBRARY.is_file(), reason=f"no CUDA build at {LIBRARY}"),
]


def _model(
    nodes: list[onnx.NodeProto], inputs: dict[str, list[int]], outputs: list[str], domain: str = "ortops", **weights
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "graph",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_value_info(name, onnx.TypeProto()) for name in outputs],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    return helper.make_model(graph, ir_version=8, opset_imports=opsets).SerializeToString()


def _dcn_block() -> tuple[bytes, dict[str, list[int]]]:
    """A DCNv2 layer, GridSample of its output, CornerPool and CumMax of that."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node(
            "DeformConv2d", ["x", "offset", "w", "b", "mask"], ["deformed"], domain="ortops", padding=[1, 1]
        ),
        helper.make_node("GridSample", ["deformed", "grid"], ["sampled"], domain="ortops"),
        helper.make_node("CornerPool", ["sampled"], ["pooled"], domain="ortops", mode=2),
        helper.make_node("CumMax", ["pooled"], ["values", "indices"], domain="ortops", dim=3),
    ]
    inputs = {"x": [2, 16, 20, 24], "offset": [2, 18, 20, 24], "mask": [2, 9, 20, 24], "grid": [2, 12, 14, 2]}
    weights = {
        "w": (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32),
        "b": rng.standard_normal(16).astype(np.float32),
    }
    return _model(nodes, inputs, ["deformed", "values", "indices"], **weights), inputs


def _attention() -> tuple[bytes, dict[str, list[int]]]:
    """Multi-scale deformable attention over three levels (their shapes as initializers)."""
    levels = np.array([[8, 10], [4, 5], [2, 3]], np.int64)
    areas = levels.prod(1)
    node = helper.make_node(
        "MultiScaleDeformableAttention",
        ["value", "shapes", "starts", "locations", "weights"],
        ["out"],
        domain="ortops",
    )
    inputs = {"value": [2, int(areas.sum()), 4, 8], "locations": [2, 30, 4, 3, 4, 2], "weights": [2, 30, 4, 3, 4]}
    return _model([node], inputs, ["out"], shapes=levels, starts=np.cumsum(areas) - areas), inputs


def _roi_heads() -> tuple[bytes, dict[str, list[int]]]:
    """RoIAlign and the multi-level RoIAlign over three FPN levels, with constant rois: nodes
    whose data checks a capture leaves out (the level table in the kernel's arguments)."""
    rois = np.array([[0, 4, 4, 60, 50], [1, 10, 2, 90, 70], [0, 30, 30, 34, 36]], np.float32)
    nodes = [
        helper.make_node(
            "RoIAlign",
            ["p2", "rois"],
            ["pooled"],
            domain="ortops",
            output_height=7,
            output_width=7,
            sampling_ratio=2,
            spatial_scale=0.25,
        ),
        helper.make_node(
            "MultiLevelRoIAlign",
            ["rois", "p2", "p3", "p4"],
            ["levels"],
            domain="ortops",
            featmap_strides=[4.0, 8.0, 16.0],
            output_height=7,
            output_width=7,
        ),
    ]
    inputs = {"p2": [2, 8, 24, 32], "p3": [2, 8, 12, 16], "p4": [2, 8, 6, 8]}
    return _model(nodes, inputs, ["pooled", "levels"], rois=rois), inputs


def _yolo_head() -> tuple[bytes, dict[str, list[int]]]:
    """A detector's last step: sigmoid class scores and corner boxes (scaled so that many
    overlap) into EfficientNMS_TRT, whose selection sizes nothing by the data."""
    nodes = [
        helper.make_node("Mul", ["raw_boxes", "scale"], ["boxes"]),
        helper.make_node("Sigmoid", ["logits"], ["scores"]),
        helper.make_node(
            "EfficientNMS_TRT",
            ["boxes", "scores"],
            ["num_detections", "detection_boxes", "detection_scores", "detection_classes"],
            domain="TRT",
            score_threshold=0.65,
            iou_threshold=0.3,
            max_output_boxes=500,
            background_class=-1,
            score_activation=0,
            box_coding=0,
        ),
    ]
    inputs = {"raw_boxes": [2, 300, 4], "logits": [2, 300, 8]}
    outputs = ["num_detections", "detection_boxes", "detection_scores", "detection_classes"]
    return _model(nodes, inputs, outputs, domain="TRT", scale=np.full(4, 20, np.float32)), inputs


def _feeds(shapes: dict[str, list[int]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1, 1, shape).astype(np.float32) for name, shape in shapes.items()}


@pytest.mark.parametrize(
    "build", [_dcn_block, _attention, _roi_heads, _yolo_head], ids=["dcn_block", "attention", "roi_heads", "yolo_head"]
)
def test_replays_give_the_results_of_plain_runs(build) -> None:
    model, shapes = build()
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(LIBRARY))
    plain = ort.InferenceSession(model, options, providers=["CUDAExecutionProvider"])
    graphed = ort.InferenceSession(model, options, providers=[("CUDAExecutionProvider", {"enable_cuda_graph": "1"})])
    expected = [plain.run(None, _feeds(shapes, seed)) for seed in range(4)]
    # A graph replays fixed addresses: inputs and outputs bound once, new values copied in.
    first = _feeds(shapes, 0)
    inputs = {name: ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0) for name, array in first.items()}
    outputs = [ort.OrtValue.ortvalue_from_shape_and_type(list(e.shape), e.dtype, "cuda", 0) for e in expected[0]]
    binding = graphed.io_binding()
    for name, value in inputs.items():
        binding.bind_ortvalue_input(name, value)
    for output, value in zip(graphed.get_outputs(), outputs):
        binding.bind_ortvalue_output(output.name, value)
    for seed in [0, 0, 1, 2, 3, 1]:  # the first runs capture, the rest replay
        for name, array in _feeds(shapes, seed).items():
            inputs[name].update_inplace(array)
        graphed.run_with_iobinding(binding)
        for value, want in zip(outputs, expected[seed]):
            np.testing.assert_array_equal(value.numpy(), want, err_msg=f"seed {seed}")
