"""ortops.torch.nms: eager against torchvision, and the export round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx


def clustered_boxes(n: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(max(1, n // 8), 2, generator=g, dtype=dtype) * 200
    xy = centers[torch.randint(0, len(centers), (n,), generator=g)] + torch.randn(n, 2, generator=g, dtype=dtype) * 4
    wh = torch.rand(n, 2, generator=g, dtype=dtype) * 30 + 1
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=g, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [0, 1, 50, 1000])
@pytest.mark.parametrize("iou_threshold", [0.3, 0.5, 0.9])
def test_eager_matches_torchvision(dtype: torch.dtype, n: int, iou_threshold: float) -> None:
    boxes, scores = clustered_boxes(n, dtype, seed=n)
    torch.testing.assert_close(
        ortops.torch.nms(boxes, scores, iou_threshold), torchvision.ops.nms(boxes, scores, iou_threshold)
    )


class NmsModel(torch.nn.Module):
    def __init__(self, iou_threshold: float, offset: int) -> None:
        super().__init__()
        self.iou_threshold = iou_threshold
        self.offset = offset

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return ortops.torch.nms(boxes, scores, self.iou_threshold, self.offset)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("offset", [0, 1])
def test_export_roundtrip(exporter: str, offset: int) -> None:
    boxes, scores = clustered_boxes(200, torch.float32)
    model = export(NmsModel(0.5, offset), (boxes, scores), exporter, dynamic_dims=[{0: "n"}, {0: "n"}])
    assert custom_nodes(model) == ["ortops::NMS"]
    # Run on other inputs than the export ones, of another length: the graph must be general.
    boxes2, scores2 = clustered_boxes(333, torch.float32, seed=5)
    (got,) = run_onnx(model, (boxes2, scores2))
    expected = NmsModel(0.5, offset)(boxes2, scores2)
    np.testing.assert_array_equal(got, expected.numpy())
    if offset == 0:
        np.testing.assert_array_equal(got, torchvision.ops.nms(boxes2, scores2, 0.5).numpy())
