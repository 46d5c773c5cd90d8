"""ortops.torch.roi_align_by_level against torchvision.ops.roi_align run per level on that level's
rois (zeros for a roi on no level) and against torchvision's MultiScaleRoIAlign with its own
levels; its torch implementation; its gradient; export with both exporters."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import references
import torch
import torchvision

import ortops
import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, pyramid_rois, run_onnx

# torchvision scales rois in float64 (spatial_scale is a double there) and rounds once;
# ortops scales in float32. Differences stay at float rounding.
TOLERANCE = {"rtol": 1e-5, "atol": 2e-5}
SCALES = [1 / 4, 1 / 8, 1 / 16, 1 / 32]
# The module (ortops.torch.roi_align_by_level is the function).
module = importlib.import_module("ortops.torch.roi_align_by_level")


def torchvision_by_level(features, rois, levels, output_size, scales, sampling, aligned) -> torch.Tensor:
    """Each level's rois pooled by torchvision's roi_align (avg) from that level; zeros for a roi
    on no level."""
    out = features[0].new_zeros((len(rois), features[0].shape[1], *output_size))
    for index, (feature, scale) in enumerate(zip(features, scales)):
        chosen = (levels == index).nonzero()[:, 0]
        if len(chosen):
            pooled = torchvision.ops.roi_align(feature, rois[chosen], output_size, scale, sampling, aligned)
            out = out.index_put((chosen,), pooled)
    return out


def kernel_and_reference(features, rois, levels, size, *rest) -> list[torch.Tensor]:
    """The op through its public function (on the CPU, the kernel) and its torch implementation;
    ``rest`` is (spatial_scales, sampling_ratio, mode, aligned)."""
    return [
        ortops.torch.roi_align_by_level(features, rois, levels, size, *rest),
        module._reference(features, rois, levels, *size, *rest),
    ]


def case(seed: int, rois: int = 40, channels: int = 4, batch: int = 2, image=(96, 128)):
    """An FPN pyramid of an image_h x image_w image, rois of scales 2 to 200, some crossing the
    image edges, and levels drawn from -1 to L (one past the last level): about a third of the
    rois on no level."""
    g = torch.Generator().manual_seed(seed)
    features = [
        torch.randn(batch, channels, math.ceil(image[0] * s), math.ceil(image[1] * s), generator=g) for s in SCALES
    ]
    boxes = pyramid_rois(g, rois, batch, image)
    levels = torch.randint(-1, len(SCALES) + 1, (rois,), generator=g)
    return features, boxes, levels


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [0, 2])
def test_avg_eager_matches_torchvision_per_level(aligned: bool, sampling: int) -> None:
    features, rois, levels = case(sampling + 2 * aligned)
    assert set(levels.tolist()) == {-1, 0, 1, 2, 3, 4}
    ours = ortops.torch.roi_align_by_level(features, rois, levels, (5, 4), SCALES, sampling, "avg", aligned)
    theirs = torchvision_by_level(features, rois, levels, (5, 4), SCALES, sampling, aligned)
    torch.testing.assert_close(ours, theirs, **TOLERANCE)


@pytest.mark.parametrize("sampling", [0, 2])
def test_max_eager_matches_reference_per_level(sampling: int) -> None:
    features, rois, levels = case(10, rois=16, channels=2)
    ours = ortops.torch.roi_align_by_level(features, rois, levels, 3, SCALES, sampling, "max")
    for index, scale in enumerate(SCALES):
        chosen = levels == index
        expected = references.roi_align(
            features[index].numpy(), rois[chosen].numpy(), 3, 3, scale, sampling, "max", True, compat=False
        )
        np.testing.assert_allclose(ours[chosen].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert not ours[(levels < 0) | (levels >= len(SCALES))].any()


def test_matches_torchvision_multiscale_roi_align_with_its_levels() -> None:
    """What ortops optimize replaces: torchvision's MultiScaleRoIAlign, its LevelMapper's levels given."""
    features, rois, _ = case(17, rois=60, channels=3)
    image = (96, 128)
    rois[:, 1:] = rois[:, 1:].clamp(min=0)  # torchvision wants 0 <= x1 < x2
    rois[:, 3:] = torch.maximum(rois[:, 3:], rois[:, 1:3] + 1)
    names = ["p2", "p3", "p4", "p5"]
    pooler = torchvision.ops.MultiScaleRoIAlign(names, (7, 7), 2)
    boxes = [rois[rois[:, 0] == i, 1:] for i in range(2)]  # torchvision's rois, per image
    rois = torch.cat([torch.cat([torch.full((len(b), 1), float(i)), b], 1) for i, b in enumerate(boxes)])
    expected = pooler(dict(zip(names, features)), boxes, [image, image])
    levels = pooler.map_levels(boxes)
    assert pooler.scales == SCALES and len(levels.unique()) > 1
    ours = ortops.torch.roi_align_by_level(features, rois, levels, 7, pooler.scales, 2, aligned=False)
    torch.testing.assert_close(ours, expected, **TOLERANCE)


def test_torch_implementation_matches_the_kernel() -> None:
    """The torch implementation (non-CPU devices, and the gradient) computes what the kernel does,
    rois on no level (NaN, far away, of no image: not read) included."""
    features, rois, levels = case(11)
    off = ((levels < 0) | (levels >= len(SCALES))).nonzero()[:, 0]
    rois[off[0], 2], rois[off[1], 3], rois[off[2], 0] = float("nan"), 1e30, 9
    for mode in ("avg", "max"):
        for sampling, aligned in ((0, 1), (2, 0), (0, 0)):
            args = (5, 5, SCALES, sampling, mode, aligned)
            kernel = torch.ops.ortops.roi_align_by_level(features, rois, levels, *args)
            reference = module._reference(features, rois, levels, *args)
            torch.testing.assert_close(reference, kernel, rtol=1e-5, atol=1e-5)
            assert not kernel[off].any()


def test_single_level_and_empty_rois() -> None:
    features, rois, _ = case(12)
    levels = torch.zeros(len(rois), dtype=torch.int64)
    one = ortops.torch.roi_align_by_level(features[:1], rois, levels, 2, SCALES[:1], 2)
    torch.testing.assert_close(one, torchvision.ops.roi_align(features[0], rois, 2, 0.25, 2, True), **TOLERANCE)
    for empty in kernel_and_reference(features, rois[:0], levels[:0], (3, 2), SCALES, 0, "avg", 1):
        assert empty.shape == (0, 4, 3, 2)


EAGER_BAD = [
    ("levels shape", {"levels": "short"}, r"input 'levels' must hold one level per roi, shape \[5\], got \[4\]"),
    ("levels dtype", {"levels": "int32"}, r"levels is int32, but ortops::RoIAlignByLevel takes int64"),
    ("scales", {"spatial_scales": SCALES[:3]}, r"spatial_scales lists 3 scales, but there are 4 feature maps"),
    ("NaN scale", {"spatial_scales": [*SCALES[:3], math.nan]}, r"spatial_scales must hold finite scales"),
    ("mode", {"mode": "sum"}, r"mode must be 'avg' or 'max', got 'sum'"),
    ("dtype", {"rois": "float64"}, r"rois is float64, but ortops::RoIAlignByLevel takes float32"),
    ("NaN roi", {"rois": "nan"}, r"roi 3 in input 'rois' is not finite"),
    ("batch index", {"rois": "image"}, r"roi 3 has batch index 2.0, but the features have 2 images"),
    ("channels", {"features": "channels"}, r"every level needs the same N and C"),
]


@pytest.mark.parametrize("name,overrides,message", EAGER_BAD, ids=[b[0] for b in EAGER_BAD])
def test_eager_bad_input_is_an_error(name: str, overrides: dict, message: str) -> None:
    features, rois, _ = case(13, rois=5)
    levels = torch.tensor([0, 1, 2, 3, 0])
    kwargs = {"spatial_scales": SCALES, **overrides}
    special = {kwargs.pop(key, None) for key in ("rois", "features", "levels")}
    if "float64" in special:
        rois = rois.double()
    if "nan" in special:
        rois[3, 2] = float("nan")
    if "image" in special:
        rois[3, 0] = 2
    if "channels" in special:
        features[2] = features[2][:, :2]
    if "short" in special:
        levels = levels[:4]
    if "int32" in special:
        levels = levels.int()
    with pytest.raises(ValueError, match=rf"^ortops\.roi_align_by_level: {message}"):
        ortops.torch.roi_align_by_level(features, rois, levels, 2, **kwargs)


@pytest.mark.parametrize("sampling", [0, 2])
@pytest.mark.parametrize("level", [-1, 4, 1 << 40])
def test_a_roi_on_no_level_is_zeros_and_not_checked(level: int, sampling: int) -> None:
    """Not read, so neither its values nor its batch index can be wrong: torchvision's merge
    leaves its row as the zeros it starts from."""
    features, rois, _ = case(18, rois=4)
    levels = torch.tensor([0, level, 2, level])
    rois[1, 1], rois[3, 0] = float("nan"), 5
    for out in kernel_and_reference(features, rois, levels, (3, 3), SCALES, sampling, "max", 1):
        assert not out[[1, 3]].any() and out[[0, 2]].abs().sum() > 0


def test_backward_matches_torchvision_per_level() -> None:
    features, rois, levels = case(14, rois=30)
    grad = torch.rand(30, 4, 7, 7, generator=torch.Generator().manual_seed(1))
    ours = [f.clone().requires_grad_() for f in features]
    got = torch.autograd.grad(ortops.torch.roi_align_by_level(ours, rois, levels, 7, SCALES, 2), ours, grad)
    theirs = [f.clone().requires_grad_() for f in features]
    want = torch.autograd.grad(torchvision_by_level(theirs, rois, levels, (7, 7), SCALES, 2, True), theirs, grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


class Pooler(torch.nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(self, p2, p3, p4, p5, rois, levels) -> torch.Tensor:  # noqa: ANN001
        pooled = ortops.torch.roi_align_by_level([p2, p3, p4, p5], rois, levels, (7, 6), SCALES, 2, self.mode, True)
        return pooled + 1


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_export_roundtrip(exporter: str, mode: str) -> None:
    features, rois, levels = case(15, rois=12)
    dynamic = [{}, {}, {}, {}, {0: "rois"}, {0: "rois"}]
    model = export(Pooler(mode), (*features, rois, levels), exporter, dynamic_dims=dynamic)
    assert custom_nodes(model) == ["ortops::RoIAlignByLevel"]
    (node,) = [n for n in model.graph.node if n.op_type == "RoIAlignByLevel"]
    graph_inputs = [i.name for i in model.graph.input]
    assert list(node.input) == [graph_inputs[4], graph_inputs[5], *graph_inputs[:4]]  # rois, levels, the levels' maps
    assert ortops.check_model(model) == []  # attribute types (spatial_scales: floats) included
    features2, rois2, levels2 = case(16, rois=33)
    (got,) = run_onnx(model, (*features2, rois2, levels2))
    np.testing.assert_allclose(got, Pooler(mode)(*features2, rois2, levels2).numpy(), **TOLERANCE)
    if mode == "avg":
        vision = torchvision_by_level(features2, rois2, levels2, (7, 6), SCALES, 2, True) + 1
        np.testing.assert_allclose(got, vision.numpy(), **TOLERANCE)
