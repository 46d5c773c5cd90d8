"""ortops.torch.soft_nms: eager against the working-list loop in references.py, and export round trips."""

from __future__ import annotations

import numpy as np
import pytest
import references
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

# The same float operations in the same order as the loop; only exp may differ by an ulp.
TOLERANCE = {torch.float32: {"rtol": 1e-6, "atol": 1e-7}, torch.float64: {"rtol": 1e-14, "atol": 1e-15}}
METHODS = ["naive", "linear", "gaussian"]


def boxes_and_scores(n: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(max(1, n // 5), 2, generator=g, dtype=dtype) * 80
    xy = centers[torch.randint(0, len(centers), (n,), generator=g)] + torch.randn(n, 2, generator=g, dtype=dtype) * 3
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g, dtype=dtype) * 20 + 2], 1)
    scores = (torch.rand(n, generator=g, dtype=dtype) * 8).round() / 8  # many ties
    return boxes, scores


def expected(boxes: torch.Tensor, scores: torch.Tensor, *args: float | int) -> tuple[np.ndarray, np.ndarray]:
    return references.soft_nms(boxes.contiguous().numpy(), scores.contiguous().numpy(), *args)


@pytest.mark.parametrize("method", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("n", [0, 1, 45])
def test_eager_matches_reference(method: int, dtype: torch.dtype, offset: int, n: int) -> None:
    boxes, scores = boxes_and_scores(n, seed=n + method, dtype=dtype)
    dets, indices = ortops.torch.soft_nms(boxes, scores, 0.3, 0.5, 0.05, METHODS[method], offset)
    expected_dets, expected_indices = expected(boxes, scores, 0.3, 0.5, 0.05, method, offset)
    assert dets.dtype == dtype and indices.dtype == torch.int64 and dets.shape == (len(expected_indices), 5)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    np.testing.assert_allclose(dets.numpy(), expected_dets, **TOLERANCE[dtype])


def test_method_by_number_and_non_contiguous_inputs() -> None:
    boxes, scores = boxes_and_scores(60, seed=3)
    strided_boxes = boxes.t().contiguous().t()  # column-major
    strided_scores = torch.stack([scores, scores], 1)[:, 1]
    assert not strided_boxes.is_contiguous() and not strided_scores.is_contiguous()
    dets, indices = ortops.torch.soft_nms(strided_boxes, strided_scores, 0.4, 0.5, 0.01, 1)
    expected_dets, expected_indices = expected(boxes, scores, 0.4, 0.5, 0.01, 1, 0)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    np.testing.assert_allclose(dets.numpy(), expected_dets, **TOLERANCE[torch.float32])


def test_ties_follow_mmcv_working_order() -> None:
    boxes = torch.tensor([[0, 0, 1, 1], [5, 5, 6, 6], [10, 10, 11, 11]], dtype=torch.float32)
    scores = torch.tensor([0.5, 0.5, 0.9])
    assert ortops.torch.soft_nms(boxes, scores)[1].tolist() == [2, 1, 0]


def test_bad_arguments_are_errors() -> None:
    boxes, scores = boxes_and_scores(4)
    with pytest.raises(ValueError, match=r"boxes must have shape \[N, 4\], got \[4, 3\]"):
        ortops.torch.soft_nms(boxes[:, :3], scores)
    with pytest.raises(ValueError, match=r"scores must have shape \[4\], got \[3\]"):
        ortops.torch.soft_nms(boxes, scores[:3])
    with pytest.raises(ValueError, match="method must be one of"):
        ortops.torch.soft_nms(boxes, scores, method="hard")
    with pytest.raises(ValueError, match=r"method must be 0 \(naive\), 1 \(linear\) or 2 \(gaussian\), got 3"):
        ortops.torch.soft_nms(boxes, scores, method=3)
    with pytest.raises(ValueError, match="offset must be 0 or 1, got 2"):
        ortops.torch.soft_nms(boxes, scores, offset=2)
    with pytest.raises(ValueError, match="sigma must be > 0 for the gaussian method, got 0.0"):
        ortops.torch.soft_nms(boxes, scores, sigma=0, method="gaussian")
    with pytest.raises(ValueError, match="must not contain NaN"):
        ortops.torch.soft_nms(boxes, torch.tensor([0.1, float("nan"), 0.2, 0.3]))


class SoftModel(torch.nn.Module):
    def __init__(self, method: str, offset: int) -> None:
        super().__init__()
        self.method, self.offset = method, offset

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ortops.torch.soft_nms(boxes * 2, scores, 0.25, 0.7, 0.02, self.method, self.offset)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("method,offset", [("linear", 1), ("naive", 0)])
def test_export_roundtrip_with_dynamic_n(exporter: str, method: str, offset: int) -> None:
    module = SoftModel(method, offset)
    model = export(module, boxes_and_scores(40), exporter, dynamic_dims=[{0: "n"}, {0: "n"}])
    assert custom_nodes(model) == ["ortops::SoftNMS"]
    (node,) = [n for n in model.graph.node if n.op_type == "SoftNMS"]
    attributes = {a.name: a for a in node.attribute}
    assert attributes["method"].i == METHODS.index(method) and attributes["offset"].i == offset
    assert attributes["iou_threshold"].f == pytest.approx(0.25) and attributes["sigma"].f == pytest.approx(0.7)
    for n in (0, 93):
        boxes, scores = boxes_and_scores(n, seed=7)
        dets, indices = run_onnx(model, (boxes, scores))
        expected_dets, expected_indices = module(boxes, scores)
        np.testing.assert_array_equal(indices, expected_indices.numpy())
        np.testing.assert_allclose(dets, expected_dets.numpy(), **TOLERANCE[torch.float32])
