"""ortops.torch.roi_align: avg mode against torchvision, max mode against references.py, export."""

from __future__ import annotations

import numpy as np
import pytest
import references
import torch
import torchvision

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

# torchvision scales rois in float64 (spatial_scale is a double there) and rounds once;
# ortops, like mmcv and ONNX, scales in the element type. Differences stay at float rounding.
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 2e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


def case(n: int, c: int, h: int, w: int, r: int, dtype: torch.dtype, scale: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(n, c, h, w, generator=g, dtype=dtype)
    size = torch.tensor([w / scale, h / scale], dtype=dtype)
    xy = (torch.rand(r, 2, generator=g, dtype=dtype) * 1.2 - 0.2) * size
    wh = torch.rand(r, 2, generator=g, dtype=dtype) * 0.6 * size
    batch = torch.randint(0, n, (r, 1), generator=g).to(dtype)
    rois = torch.cat([batch, xy, xy + wh], 1)
    if r >= 3:  # a zero-size roi, one of negative size, one touching the far edges
        rois[0, 3:] = rois[0, 1:3]
        rois[1, 3:] = rois[1, 1:3] - 0.3 * size
        rois[2, 1:] = torch.cat([size * 0.5, size])
    return features, rois


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [0, 1, 3])
def test_avg_eager_matches_torchvision(dtype, aligned, sampling) -> None:
    features, rois = case(2, 4, 13, 17, 25, dtype, 0.25, seed=sampling)
    ours = ortops.torch.roi_align(features, rois, (5, 4), 0.25, sampling, "avg", aligned)
    theirs = torchvision.ops.roi_align(features, rois, (5, 4), 0.25, sampling, aligned)
    torch.testing.assert_close(ours, theirs, **TOLERANCE[dtype])


@pytest.mark.parametrize("sampling", [0, 2])
def test_max_eager_matches_reference(sampling) -> None:
    features, rois = case(2, 3, 9, 11, 8, torch.float64, 0.5, seed=7)
    ours = ortops.torch.roi_align(features, rois, 3, 0.5, sampling, "max", True)
    expected = references.roi_align(features.numpy(), rois.numpy(), 3, 3, 0.5, sampling, "max", True, compat=False)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("aligned", [False, True])
def test_max_eager_matches_reference_on_edges_and_empty_grids(dtype, aligned) -> None:
    features, rois = case(2, 2, 7, 9, 6, dtype, 1.0, seed=3)
    ours = ortops.torch.roi_align(features, rois, (2, 3), 1.0, 0, "max", aligned)
    expected = references.roi_align(features.numpy(), rois.numpy(), 2, 3, 1.0, 0, "max", aligned, compat=False)
    np.testing.assert_allclose(ours.numpy(), expected, **TOLERANCE[dtype])


def test_eager_empty_inputs() -> None:
    features, rois = case(2, 3, 5, 5, 4, torch.float32, 1.0)
    assert ortops.torch.roi_align(features, rois[:0], (2, 3)).shape == (0, 3, 2, 3)
    flat = ortops.torch.roi_align(features[:, :, :0], rois, 2, mode="max")
    torch.testing.assert_close(flat, torch.zeros(4, 3, 2, 2))  # an empty map reads 0


EAGER_BAD = [
    ("batch index", torch.tensor([[2.0, 0, 0, 1, 1]]), {}, r"roi 0 has batch index 2.0, but input has 2 images"),
    (
        "NaN roi",
        torch.tensor([[0, 0, 0, 1, 1], [0, float("nan"), 0, 1, 1]]),
        {},
        r"roi 1 in input 'rois' is not finite",
    ),
    ("rois [R, 4]", torch.zeros(2, 4), {}, r"need input \[N, C, H, W\] and rois \[R, 5\]"),
    ("dtype", torch.zeros(1, 5, dtype=torch.float64), {}, r"rois is float64, but the inputs before it are float32"),
    ("mode", torch.zeros(1, 5), {"mode": "sum"}, r"mode must be 'avg' or 'max', got 'sum'"),
    ("huge roi", torch.tensor([[0, 0, 0, 1e9, 1e9]]), {}, r"samples per bin along one axis"),
    ("huge sampling", torch.zeros(1, 5), {"sampling_ratio": 8192}, r"samples per bin, more than this op allows"),
]


@pytest.mark.parametrize("case_name,rois,overrides,message", EAGER_BAD, ids=[b[0] for b in EAGER_BAD])
def test_eager_bad_input_is_an_error(case_name, rois, overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        ortops.torch.roi_align(torch.zeros(2, 1, 4, 4), rois, 2, **overrides)


def test_eager_accepts_non_contiguous_rois_and_max_mode() -> None:
    features, rois = case(2, 3, 8, 8, 6, torch.float64, 1.0, seed=2)
    wide = torch.cat([rois, torch.zeros(6, 1, dtype=rois.dtype)], 1)[:, :5]
    features_t = features.transpose(2, 3)
    assert not wide.is_contiguous() and not features_t.is_contiguous()
    expected = references.roi_align(
        features_t.contiguous().numpy(), rois.numpy(), 2, 2, 1.0, 2, "max", True, compat=False
    )
    got = ortops.torch.roi_align(features_t, wide, 2, 1.0, 2, "max")
    np.testing.assert_allclose(got.numpy(), expected, **TOLERANCE[torch.float64])


def test_eager_accepts_non_contiguous_features() -> None:
    features, rois = case(1, 4, 10, 10, 5, torch.float32, 1.0)
    features = features.transpose(2, 3)
    assert not features.is_contiguous()
    torch.testing.assert_close(
        ortops.torch.roi_align(features, rois, 2, 1.0, 2), torchvision.ops.roi_align(features, rois, 2, 1.0, 2, True)
    )


class PoolModel(torch.nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(self, features: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return ortops.torch.roi_align(features, rois, (7, 6), 0.125, 2, self.mode, True) + 1


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_export_roundtrip(exporter: str, mode: str) -> None:
    features, rois = case(2, 8, 20, 24, 10, torch.float32, 0.125)
    model = export(PoolModel(mode), (features, rois), exporter, dynamic_dims=[{}, {0: "rois"}])
    assert custom_nodes(model) == ["ortops::RoIAlign"]
    features2, rois2 = case(2, 8, 20, 24, 31, torch.float32, 0.125, seed=4)
    (got,) = run_onnx(model, (features2, rois2))
    expected = PoolModel(mode)(features2, rois2)
    np.testing.assert_allclose(got, expected.numpy(), **TOLERANCE[torch.float32])
    if mode == "avg":
        vision = torchvision.ops.roi_align(features2, rois2, (7, 6), 0.125, 2, True) + 1
        np.testing.assert_allclose(got, vision.numpy(), **TOLERANCE[torch.float32])


class AttributeModel(torch.nn.Module):
    def __init__(self, scale: float, sampling: int, aligned: bool) -> None:
        super().__init__()
        self.scale, self.sampling, self.aligned = scale, sampling, aligned

    def forward(self, features: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return ortops.torch.roi_align(features, rois, (3, 4), self.scale, self.sampling, "avg", self.aligned)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [0, 2])
def test_onnx_avg_matches_torchvision(dtype, aligned, sampling) -> None:
    """The kernel, through an exported model, against torchvision for each attribute combination."""
    model = AttributeModel(0.5, sampling, aligned)
    features, rois = case(2, 3, 11, 13, 5, dtype, 0.5, seed=1)
    onnx_model = export(model, (features, rois), "torchscript", dynamic_dims=[{}, {0: "rois"}])
    features2, rois2 = case(2, 3, 11, 13, 17, dtype, 0.5, seed=2 + sampling)
    (got,) = run_onnx(onnx_model, (features2, rois2))
    assert got.dtype == features2.numpy().dtype
    vision = torchvision.ops.roi_align(features2, rois2, (3, 4), 0.5, sampling, aligned)
    np.testing.assert_allclose(got, vision.numpy(), **TOLERANCE[dtype])
