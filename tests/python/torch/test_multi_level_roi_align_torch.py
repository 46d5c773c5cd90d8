"""ortops.torch.multi_level_roi_align against per-level torchvision.ops.roi_align with the FPN
level mapping written here; its gradient; export with both exporters."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import references
import torch
import torchvision

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, pyramid_rois, run_onnx

# torchvision scales rois in float64 (spatial_scale is a double there) and rounds once;
# ortops, like mmcv, scales in float32. Differences stay at float rounding.
TOLERANCE = {"rtol": 1e-5, "atol": 2e-5}
STRIDES = [4.0, 8.0, 16.0, 32.0]
# The module (ortops.torch.multi_level_roi_align is the function).
module = importlib.import_module("ortops.torch.multi_level_roi_align")


def levels_of(rois: torch.Tensor, finest_scale: int, levels: int) -> torch.Tensor:
    """mmdet's SingleRoIExtractor.map_roi_levels, as mmdet writes it (negative areas aside)."""
    scale = torch.sqrt((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]))
    return torch.floor(torch.log2(scale / finest_scale + 1e-6)).clamp(min=0, max=levels - 1).long()


def rescaled(rois: torch.Tensor, factor: float) -> torch.Tensor:
    """mmdet's BaseRoIExtractor.roi_rescale."""
    cx, cy = (rois[:, 1] + rois[:, 3]) * 0.5, (rois[:, 2] + rois[:, 4]) * 0.5
    w, h = (rois[:, 3] - rois[:, 1]) * factor, (rois[:, 4] - rois[:, 2]) * factor
    return torch.stack([rois[:, 0], cx - w * 0.5, cy - h * 0.5, cx + w * 0.5, cy + h * 0.5], 1)


def torchvision_extractor(features, rois, output_size, strides, sampling, finest, factor, aligned) -> torch.Tensor:
    """mmdet's SingleRoIExtractor.forward over torchvision's roi_align (avg)."""
    level = levels_of(rois, finest, len(features))
    boxes = rescaled(rois, factor) if factor != 1.0 else rois
    out = features[0].new_zeros((len(rois), features[0].shape[1], *output_size))
    for index, (feature, stride) in enumerate(zip(features, strides)):
        chosen = (level == index).nonzero()[:, 0]
        if len(chosen):
            pooled = torchvision.ops.roi_align(feature, boxes[chosen], output_size, 1 / stride, sampling, aligned)
            out = out.index_put((chosen,), pooled)
    return out


def case(seed: int, rois: int = 40, channels: int = 4, batch: int = 2, image=(96, 128)):
    """An FPN pyramid of an image_h x image_w image and rois of scales 2 to 200 (every level for
    finest_scale 8), some crossing the image edges."""
    g = torch.Generator().manual_seed(seed)
    features = [
        torch.randn(batch, channels, -(-image[0] // int(s)), -(-image[1] // int(s)), generator=g) for s in STRIDES
    ]
    return features, pyramid_rois(g, rois, batch, image)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [0, 2])
@pytest.mark.parametrize("factor", [1.0, 1.5])
def test_avg_eager_matches_torchvision_per_level(aligned: bool, sampling: int, factor: float) -> None:
    features, rois = case(sampling + 2 * aligned)
    assert set(levels_of(rois, 8, 4).tolist()) == {0, 1, 2, 3}
    ours = ortops.torch.multi_level_roi_align(features, rois, (5, 4), STRIDES, sampling, 8, factor, "avg", aligned)
    theirs = torchvision_extractor(features, rois, (5, 4), STRIDES, sampling, 8, factor, aligned)
    torch.testing.assert_close(ours, theirs, **TOLERANCE)


@pytest.mark.parametrize("sampling", [0, 2])
def test_max_eager_matches_reference_per_level(sampling: int) -> None:
    features, rois = case(10, rois=16, channels=2)
    ours = ortops.torch.multi_level_roi_align(features, rois, 3, STRIDES, sampling, 8, pool_mode="max")
    level = levels_of(rois, 8, 4)
    for index, stride in enumerate(STRIDES):
        chosen = level == index
        expected = references.roi_align(
            features[index].numpy(), rois[chosen].numpy(), 3, 3, 1 / stride, sampling, "max", True, compat=False
        )
        np.testing.assert_allclose(ours[chosen].numpy(), expected, rtol=1e-5, atol=1e-6)


def test_torch_implementation_matches_the_kernel() -> None:
    """The torch implementation (non-CPU devices, and the gradient) computes what the kernel does."""
    features, rois = case(11)
    for mode in ("avg", "max"):
        for sampling, factor, aligned in ((0, 1.0, 1), (2, 1.25, 0)):
            args = (5, 5, STRIDES, sampling, 8, factor, mode, aligned)
            kernel = torch.ops.ortops.multi_level_roi_align(features, rois, *args)
            torch.testing.assert_close(module._reference(features, rois, *args), kernel, rtol=1e-5, atol=1e-5)


def test_single_level_and_empty_rois() -> None:
    features, rois = case(12)
    one = ortops.torch.multi_level_roi_align(features[:1], rois, 2, STRIDES[:1], 2)
    torch.testing.assert_close(one, torchvision.ops.roi_align(features[0], rois, 2, 0.25, 2, True), **TOLERANCE)
    assert ortops.torch.multi_level_roi_align(features, rois[:0], (3, 2), STRIDES).shape == (0, 4, 3, 2)


EAGER_BAD = [
    ("strides", {"featmap_strides": STRIDES[:3]}, r"featmap_strides lists 3 strides, but there are 4 feature maps"),
    ("pool mode", {"pool_mode": "sum"}, r"pool_mode must be 'avg' or 'max', got 'sum'"),
    ("factor", {"roi_scale_factor": 0.0}, r"roi_scale_factor must be positive and finite, got 0.0"),
    ("dtype", {"rois": "float64"}, r"rois is float64, but ortops::MultiLevelRoIAlign takes float32"),
    ("NaN roi", {"rois": "nan"}, r"roi 3 in input 'rois' is not finite"),
    ("channels", {"features": "channels"}, r"every level needs the same N and C"),
]


@pytest.mark.parametrize("name,overrides,message", EAGER_BAD, ids=[b[0] for b in EAGER_BAD])
def test_eager_bad_input_is_an_error(name: str, overrides: dict, message: str) -> None:
    features, rois = case(13, rois=5)
    kwargs = {"featmap_strides": STRIDES, **overrides}
    if kwargs.get("rois") == "float64":
        rois = rois.double()
    elif kwargs.get("rois") == "nan":
        rois[3, 2] = float("nan")
    if kwargs.get("features") == "channels":
        features[2] = features[2][:, :2]
    kwargs.pop("rois", None)
    kwargs.pop("features", None)
    with pytest.raises(ValueError, match=message):
        ortops.torch.multi_level_roi_align(features, rois, 2, **kwargs)


def test_backward_matches_torchvision_per_level() -> None:
    features, rois = case(14, rois=30)
    grad = torch.rand(30, 4, 7, 7, generator=torch.Generator().manual_seed(1))
    ours = [f.clone().requires_grad_() for f in features]
    got = torch.autograd.grad(ortops.torch.multi_level_roi_align(ours, rois, 7, STRIDES, 2, 8, 1.5), ours, grad)
    theirs = [f.clone().requires_grad_() for f in features]
    want = torch.autograd.grad(torchvision_extractor(theirs, rois, (7, 7), STRIDES, 2, 8, 1.5, True), theirs, grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


class Extractor(torch.nn.Module):
    def __init__(self, mode: str, factor: float) -> None:
        super().__init__()
        self.mode, self.factor = mode, factor

    def forward(self, p2, p3, p4, p5, rois) -> torch.Tensor:  # noqa: ANN001
        pooled = ortops.torch.multi_level_roi_align(
            [p2, p3, p4, p5], rois, (7, 6), STRIDES, 2, 8, self.factor, self.mode, True
        )
        return pooled + 1


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("mode,factor", [("avg", 1.0), ("max", 1.25)])
def test_export_roundtrip(exporter: str, mode: str, factor: float) -> None:
    features, rois = case(15, rois=12)
    model = export(Extractor(mode, factor), (*features, rois), exporter, dynamic_dims=[{}, {}, {}, {}, {0: "rois"}])
    assert custom_nodes(model) == ["ortops::MultiLevelRoIAlign"]
    (node,) = [n for n in model.graph.node if n.op_type == "MultiLevelRoIAlign"]
    assert len(node.input) == 5  # rois, then the four levels
    assert ortops.check_model(model) == []  # attribute types (featmap_strides: floats) included
    features2, rois2 = case(16, rois=33)
    (got,) = run_onnx(model, (*features2, rois2))
    expected = Extractor(mode, factor)(*features2, rois2)
    np.testing.assert_allclose(got, expected.numpy(), **TOLERANCE)
    if mode == "avg":
        vision = torchvision_extractor(features2, rois2, (7, 6), STRIDES, 2, 8, factor, True) + 1
        np.testing.assert_allclose(got, vision.numpy(), **TOLERANCE)
