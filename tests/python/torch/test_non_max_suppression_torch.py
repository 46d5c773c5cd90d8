"""ortops.torch.non_max_suppression: eager against ONNX Runtime's own NonMaxSuppression, and
export round trips with both exporters."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx


def onnx_runtime_nms(boxes, scores, max_output: int, iou: float, score: float, center_point_box: int = 0):
    """ONNX's NonMaxSuppression in ONNX Runtime's CPU provider: the independent reference."""
    names = ["boxes", "scores", "max_output", "iou", "score"]
    types = [TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT, TensorProto.FLOAT]
    inputs = [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, types, strict=True)]
    node = helper.make_node("NonMaxSuppression", names, ["out"], center_point_box=center_point_box)
    output = helper.make_tensor_value_info("out", TensorProto.INT64, None)
    graph = helper.make_graph([node], "onnx_nms", inputs, [output])
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 11)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = [boxes.numpy(), scores.numpy(), np.array([max_output]), np.array([iou], np.float32)]
    feeds.append(np.array([score], np.float32))
    return session.run(None, dict(zip(names, feeds, strict=True)))[0]


def case(b: int, c: int, n: int, seed: int = 0, center_point_box: int = 0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(b, max(1, n // 4), 2, generator=g) * 50
    picks = torch.randint(0, centers.shape[1], (b, n), generator=g)
    xy = torch.gather(centers, 1, picks[..., None].expand(b, n, 2)) + torch.randn(b, n, 2, generator=g)
    size = torch.rand(b, n, 2, generator=g) * 10 + 4
    boxes = torch.cat([xy, size] if center_point_box else [xy + size, xy], -1)  # corners flipped: allowed
    scores = (torch.rand(b, c, n, generator=g) * 10).round() / 10  # ties
    return boxes, scores


@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize(("max_output", "iou", "score"), [(5, 0.5, 0.2), (100, 0.3, 0.0), (0, 0.5, 0.0)])
def test_eager_matches_onnx_runtime(center_point_box, max_output, iou, score) -> None:
    boxes, scores = case(2, 3, 40, seed=max_output, center_point_box=center_point_box)
    got = ortops.torch.non_max_suppression(boxes, scores, max_output, iou, score, center_point_box)
    assert got.dtype == torch.int64
    expected = onnx_runtime_nms(boxes, scores, max_output, iou, score, center_point_box)
    np.testing.assert_array_equal(got.numpy(), expected)


def test_no_score_threshold_considers_every_box() -> None:
    boxes, scores = case(1, 2, 20, seed=4)
    got = ortops.torch.non_max_suppression(boxes, scores, 50, 0.5)
    np.testing.assert_array_equal(got.numpy(), onnx_runtime_nms(boxes, scores, 50, 0.5, -np.inf))


def test_errors() -> None:
    boxes, scores = case(1, 2, 5)
    with pytest.raises(ValueError, match=r"^ortops\.non_max_suppression: iou_threshold must be in \[0, 1\], got nan"):
        ortops.torch.non_max_suppression(boxes, scores, 5, float("nan"))
    with pytest.raises(ValueError, match=r"scores must have shape \[B, C, N\] = \[1, C, 5\], got \[1, 2, 4\]"):
        ortops.torch.non_max_suppression(boxes, scores[..., :4], 5)
    with pytest.raises(ValueError, match=r"center_point_box must be 0 or 1, got 2"):
        ortops.torch.non_max_suppression(boxes, scores, 5, center_point_box=2)


class Detector(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return ortops.torch.non_max_suppression(boxes * 2, scores, 10, 0.45, 0.15)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip_with_dynamic_batch_and_n(exporter: str) -> None:
    model = export(Detector(), case(2, 3, 16), exporter, dynamic_dims=[{0: "b", 1: "n"}, {0: "b", 2: "n"}])
    assert custom_nodes(model) == ["ortops::NonMaxSuppression"]
    for shape in [(3, 3, 31), (1, 3, 0)]:
        boxes, scores = case(*shape, seed=9)
        (got,) = run_onnx(model, (boxes, scores))
        np.testing.assert_array_equal(got, Detector()(boxes, scores).numpy())
        np.testing.assert_array_equal(got, onnx_runtime_nms(boxes * 2, scores, 10, 0.45, 0.15))
