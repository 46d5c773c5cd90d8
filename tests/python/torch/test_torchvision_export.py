"""torchvision's ops and detection models exported under ``ortops.torch.export(..., torchvision=True)``.

Every exported graph must hold the ortops nodes and none of the standard ONNX ops they replace,
and ONNX Runtime's results must equal eager torchvision's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from unittest import mock

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torchvision
from torchvision.models import detection

import ortops
import ortops.torch
import ortops.torch.torchvision as ortops_tv

import roundtrip
from roundtrip import EXPORTERS, run_onnx

# The standard ONNX ops that the switch replaces.
STANDARD = {"RoiAlign", "NonMaxSuppression", "DeformConv"}


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph``, those inside If / Loop bodies included."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attribute.g)
            for sub in attribute.graphs:
                yield from all_nodes(sub)


def op_types(model: onnx.ModelProto) -> list[str]:
    """``domain::op_type`` of every node, subgraphs included; the default domain is left empty."""
    return [f"{n.domain if n.domain != 'ai.onnx' else ''}::{n.op_type}" for n in all_nodes(model.graph)]


def assert_only_ortops(model: onnx.ModelProto, expected: dict[str, int]) -> None:
    """The graph holds at least ``expected[op]`` ``ortops::op`` nodes and no standard op replaced by them."""
    types = op_types(model)
    for op, count in expected.items():
        assert types.count(f"ortops::{op}") >= count, (op, types)
    assert not STANDARD & {t.split("::")[1] for t in types if t.startswith("::")}, types


def export(
    module: torch.nn.Module,
    args: tuple,
    exporter: str,
    dynamic_dims: Sequence[dict[int, str] | None] | None = None,
    *,
    torchvision_ops: bool = True,
) -> onnx.ModelProto:
    """Exports ``module`` through ``ortops.torch.export`` with the torchvision switch."""
    return roundtrip.export(module, args, exporter, dynamic_dims, torchvision=torchvision_ops)


def run_by_name(model: onnx.ModelProto, args: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """Runs ``model`` in ONNX Runtime with ortops, feeding ``args[i]`` to the graph input ``input{i}``."""
    session = ort.InferenceSession(
        model.SerializeToString(), ortops.session_options(), providers=["CPUExecutionProvider"]
    )
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {f"input{i}": a.numpy() for i, a in enumerate(args) if f"input{i}" in names})


# ---- one op at a time ---------------------------------------------------------------------


def random_boxes(n: int, g: torch.Generator, dtype: torch.dtype = torch.float32, size: float = 60.0) -> torch.Tensor:
    """``Tensor[n, 4]`` boxes in clusters, so that NMS suppresses many of them."""
    centers = (torch.rand(max(1, n // 6), 2, generator=g, dtype=dtype) * size)[
        torch.randint(0, max(1, n // 6), (n,), generator=g)
    ]
    xy = centers + torch.randn(n, 2, generator=g, dtype=dtype) * 2
    wh = torch.rand(n, 2, generator=g, dtype=dtype) * 12 + 4
    return torch.cat([xy - wh / 2, xy + wh / 2], 1)


class Nms(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return torchvision.ops.nms(boxes, scores, 0.4)


class BatchedNms(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        return torchvision.ops.batched_nms(boxes, scores, classes, 0.4)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nms(exporter, dtype) -> None:
    g = torch.Generator().manual_seed(1)
    boxes, scores = random_boxes(40, g, dtype), torch.rand(40, generator=g, dtype=dtype)
    scores[5:9] = scores[4]  # ties: torchvision keeps the lower index first
    model = export(Nms(), (boxes, scores), exporter, [{0: "n"}, {0: "n"}])
    assert_only_ortops(model, {"NMS": 1})
    for n in (40, 123, 1, 0):  # the number of boxes is dynamic
        boxes, scores = random_boxes(n, g, dtype), torch.rand(n, generator=g, dtype=dtype)
        expected = torchvision.ops.nms(boxes, scores, 0.4)
        (ours,) = run_onnx(model, (boxes, scores))
        assert ours.dtype == np.int64
        np.testing.assert_array_equal(ours, expected.numpy())


def test_batched_nms_torchscript_dynamic_box_count() -> None:
    # Traced, batched_nms always takes torchvision's coordinate-offset path (one NMS over boxes
    # shifted apart per class); eager torchvision takes it for at most 1000 boxes, else a
    # per-class loop. Both keep the same boxes, in decreasing score order.
    g = torch.Generator().manual_seed(2)
    boxes, scores, classes = random_boxes(50, g), torch.rand(50, generator=g), torch.randint(0, 3, (50,), generator=g)
    model = export(BatchedNms(), (boxes, scores, classes), "torchscript", [{0: "n"}, {0: "n"}, {0: "n"}])
    assert_only_ortops(model, {"NMS": 1})
    for n in (50, 1500, 0):
        boxes, scores = random_boxes(n, g, size=200.0), torch.rand(n, generator=g)
        classes = torch.randint(0, 4, (n,), generator=g)
        expected = torchvision.ops.batched_nms(boxes, scores, classes, 0.4)
        (ours,) = run_onnx(model, (boxes, scores, classes))
        np.testing.assert_array_equal(ours, expected.numpy())


class RoiAlign(torch.nn.Module):
    def __init__(self, sampling_ratio: int, aligned: bool) -> None:
        super().__init__()
        self.sampling_ratio, self.aligned = sampling_ratio, aligned

    def forward(self, features: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return torchvision.ops.roi_align(features, rois, (5, 4), 0.25, self.sampling_ratio, self.aligned)


def random_rois(r: int, n: int, g: torch.Generator, dtype: torch.dtype, size: float) -> torch.Tensor:
    """``Tensor[r, 5]`` rois (batch, x1, y1, x2, y2), some reaching past the image, one tiny."""
    xy = (torch.rand(r, 2, generator=g, dtype=dtype) * 1.2 - 0.1) * size
    wh = torch.rand(r, 2, generator=g, dtype=dtype) * 0.6 * size
    if r:
        wh[0] = 0.3  # smaller than a feature pixel: legacy (aligned=False) rounds its size up to 1
    return torch.cat([torch.randint(0, n, (r, 1), generator=g).to(dtype), xy, xy + wh], 1)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [-1, 2])
def test_roi_align(exporter, aligned, sampling_ratio) -> None:
    g = torch.Generator().manual_seed(3)
    features = torch.randn(2, 3, 13, 17, generator=g)
    module = RoiAlign(sampling_ratio, aligned)
    model = export(module, (features, random_rois(9, 2, g, torch.float32, 60)), exporter, [{}, {0: "r"}])
    assert_only_ortops(model, {"RoIAlign": 1})
    (node,) = [n for n in all_nodes(model.graph) if n.op_type == "RoIAlign"]
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attributes["aligned"] == int(aligned) and attributes["sampling_ratio"] == max(sampling_ratio, 0)
    assert attributes["mode"] == b"avg" and attributes["spatial_scale"] == 0.25
    for r in (9, 30):
        rois = random_rois(r, 2, g, torch.float32, 60)
        (ours,) = run_onnx(model, (features, rois))
        np.testing.assert_allclose(ours, module(features, rois).numpy(), rtol=1e-5, atol=2e-5)


def test_roi_align_float64() -> None:
    g = torch.Generator().manual_seed(4)
    features, rois = torch.randn(1, 2, 9, 11, generator=g, dtype=torch.float64), None
    rois = random_rois(12, 1, g, torch.float64, 40)
    module = RoiAlign(-1, True)
    model = export(module, (features, rois), "torchscript", [{}, {0: "r"}])
    (ours,) = run_onnx(model, (features, rois))
    np.testing.assert_allclose(ours, module(features, rois).numpy(), rtol=1e-12, atol=1e-12)


class MultiScale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = torchvision.ops.MultiScaleRoIAlign(["p2", "p3"], 3, 2)

    def forward(self, p2: torch.Tensor, p3: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        return self.pool({"p2": p2, "p3": p3}, [boxes], [(64, 64)])


def test_multiscale_roi_align_torchscript() -> None:
    g = torch.Generator().manual_seed(5)
    p2, p3 = torch.randn(1, 4, 16, 16, generator=g), torch.randn(1, 4, 8, 8, generator=g)
    module = MultiScale()
    model = export(module, (p2, p3, random_boxes(20, g)), "torchscript", [{}, {}, {0: "n"}])
    assert_only_ortops(model, {"RoIAlignByLevel": 1})  # the two levels' pooling and their merge
    for n in (20, 7, 0):
        boxes = random_boxes(n, g, size=64)
        boxes[: n // 2, 2:] += 40  # large boxes go to the coarser level
        (ours,) = run_onnx(model, (p2, p3, boxes))
        np.testing.assert_allclose(ours, module(p2, p3, boxes).numpy(), rtol=1e-5, atol=2e-5)


class DeformConv(torch.nn.Module):
    def __init__(self, use_bias: bool, use_mask: bool) -> None:
        super().__init__()
        self.use_bias, self.use_mask = use_bias, use_mask

    def forward(
        self, x: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        return torchvision.ops.deform_conv2d(
            x,
            offset,
            weight,
            bias if self.use_bias else None,
            stride=(1, 2),
            padding=(1, 2),
            dilation=(2, 1),
            mask=mask if self.use_mask else None,
        )


def deform_inputs(g: torch.Generator, n: int, h: int, w: int) -> tuple[torch.Tensor, ...]:
    """Inputs for DeformConv: 2 deform groups, 2 convolution groups, 3x3 kernel."""
    out_h, out_w = (h + 2 - 2 * 2 - 1) // 1 + 1, (w + 4 - 2 - 1) // 2 + 1
    return (
        torch.randn(n, 4, h, w, generator=g),
        torch.randn(n, 2 * 2 * 9, out_h, out_w, generator=g) * 2,
        torch.randn(6, 2, 3, 3, generator=g),
        torch.randn(6, generator=g),
        torch.rand(n, 2 * 9, out_h, out_w, generator=g),
    )


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize(("use_bias", "use_mask"), [(True, True), (False, False), (True, False), (False, True)])
def test_deform_conv2d(exporter, use_bias, use_mask) -> None:
    g = torch.Generator().manual_seed(6)
    module = DeformConv(use_bias, use_mask)
    dims = [{0: "n", 2: "h", 3: "w"}, {0: "n", 2: "oh", 3: "ow"}, {}, {}, {0: "n", 2: "oh", 3: "ow"}]
    model = export(module, deform_inputs(g, 1, 9, 10), exporter, dims)
    assert_only_ortops(model, {"DeformConv2d": 1})
    for shape in [(1, 9, 10), (2, 7, 12)]:  # batch and image size are dynamic
        args = deform_inputs(g, *shape)
        (ours,) = run_by_name(model, args)  # the TorchScript exporter drops an unused bias or mask input
        np.testing.assert_allclose(ours, module(*args).numpy(), rtol=1e-4, atol=1e-4)


def test_deform_conv2d_module() -> None:
    torch.manual_seed(7)
    layer = torchvision.ops.DeformConv2d(4, 6, 3, padding=1, groups=2).eval()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
            return self.layer(x, offset)

    x, offset = torch.randn(1, 4, 8, 8), torch.randn(1, 18, 8, 8)
    model = export(Net(), (x, offset), "dynamo")
    assert_only_ortops(model, {"DeformConv2d": 1})
    (ours,) = run_onnx(model, (x, offset))
    np.testing.assert_allclose(ours, layer(x, offset).detach().numpy(), rtol=1e-4, atol=1e-4)


# ---- the switch itself --------------------------------------------------------------------


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_without_the_switch_the_standard_ops_are_exported(exporter) -> None:
    g = torch.Generator().manual_seed(8)
    features, rois = torch.randn(1, 2, 8, 8, generator=g), random_rois(4, 1, g, torch.float32, 30)
    model = export(RoiAlign(2, True), (features, rois), exporter, torchvision_ops=False)
    assert "::RoiAlign" in op_types(model) and "ortops::RoIAlign" not in op_types(model)


def test_torchscript_rules_are_restored_after_the_context() -> None:
    from torch.onnx._internal.torchscript_exporter import registration

    def rules() -> dict[int, Callable]:
        group = registration.registry.get_function_group("torchvision::roi_align")
        return {opset: group.get(opset) for opset in (11, 16, 17)}

    before = rules()
    with ortops.torch.torchvision_ops():
        inside = rules()
        with ortops.torch.torchvision_ops():  # nested: the outer context's rules come back
            pass
        assert rules() == inside
    assert rules() == before
    assert set(inside.values()).isdisjoint(before.values())
    with pytest.raises(RuntimeError), ortops.torch.torchvision_ops():  # restored on errors too
        raise RuntimeError
    assert rules() == before


def test_translation_table_maps_torchvision_ops() -> None:
    table = ortops_tv.translation_table()
    assert set(table) == {
        torch.ops.torchvision.nms.default,
        torch.ops.torchvision.roi_align.default,
        torch.ops.torchvision.deform_conv2d.default,
    }


# ---- whole detection models ---------------------------------------------------------------

# Images of 320 x 320 (export) and 320 x 480 (run) with min_size 160: the resize scale is 0.5,
# exact in float32. (The traced resize computes its scale in float32, eager torchvision in
# float64; for scales that float32 cannot hold, e.g. 0.8, the traced model's image is one pixel
# smaller than eager's. That is torchvision's tracing path, with or without ortops.)
EXPORT_SIZE, RUN_SIZE = (320, 320), (320, 480)
SCORE_TOL = 1e-4
BOX_TOL = 1e-3  # times the image's larger side (0.3 - 0.5 pixel here)
DETECTIONS = 100


def coordinate_trick_nms() -> contextlib.AbstractContextManager:
    """Pins eager ``batched_nms`` to the path that traced models always take.

    Eager torchvision runs NMS per class for more than 1000 boxes (RPN proposals of several
    levels, RetinaNet's candidates) and otherwise one NMS over boxes shifted apart per class;
    a traced model always takes the second (torchvision's ``_is_tracing`` branch), with or
    without ortops. Both keep the same boxes up to float rounding of the shifted coordinates,
    which can flip a pair whose IoU is within rounding of the threshold (it does for one box
    of the Mask R-CNN case here), so the reference takes the same path.
    """
    boxes = torchvision.ops.boxes
    return mock.patch.object(boxes, "batched_nms", boxes._batched_nms_coordinate_trick)


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    constructor: Callable[..., torch.nn.Module] = getattr(detection, name)
    options = {"weights": None, "weights_backbone": None, "min_size": 160, "max_size": 320}
    if name == "retinanet_resnet50_fpn":  # untrained, its scores are about 0.01 (the prior)
        options.update(detections_per_img=DETECTIONS, score_thresh=0.005)
    else:
        options["box_detections_per_img"] = DETECTIONS
    return constructor(**options).eval()


class Flat(torch.nn.Module):
    """One image in, the first image's detections out as a tuple in ``keys`` order."""

    def __init__(self, model: torch.nn.Module, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        detections = self.model([image])[0]
        return tuple(detections[k] for k in self.keys)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of box ``a`` (``[4]``, x1 y1 x2 y2) with each of ``b`` (``[K, 4]``), in float64."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    wh = np.clip(np.minimum(a[2:], b[:, 2:]) - np.maximum(a[:2], b[:, :2]), 0, None)
    inter = wh[:, 0] * wh[:, 1]
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter
    return inter / np.maximum(union, np.finfo(np.float64).tiny)


def unexplained(
    side: dict[str, np.ndarray],
    other: dict[str, np.ndarray],
    lost: list[int],
    other_lost: list[int],
    nms_threshold: float,
) -> list[int]:
    """The detections ``lost`` of ``side`` (left without a partner in ``other``) that no float
    rounding between the two runs explains.

    ONNX Runtime's convolutions (MLAS) and eager torch's round differently, so boxes and scores
    differ in their last bits, and NMS is discontinuous at its threshold: a pair of boxes whose
    IoU lies within rounding of it is kept in one run and suppressed in the other (it is, for one
    detection of the Mask R-CNN case on an AMD Zen 4 CPU). A lost detection is explained when
    - it sits at the cut-off of a full list (its score within SCORE_TOL of the lowest kept), or
    - a higher-scoring detection of its label in the other run has an IoU with it within 1e-3 of
      the threshold (the flip itself), or
    - a higher-scoring lost detection of its label in the other run overlaps it beyond the
      threshold (what that one's flip suppressed in one run only).
    """
    cut = side["scores"].min() + SCORE_TOL if len(side["scores"]) == DETECTIONS else -np.inf
    left = []
    for j in lost:
        same = (other["labels"] == side["labels"][j]) & (other["scores"] > side["scores"][j] - SCORE_TOL)
        iou = box_iou(side["boxes"][j], other["boxes"])
        flip = same & (np.abs(iou - nms_threshold) <= 1e-3)
        cascade = same & (iou > nms_threshold) & np.isin(np.arange(len(iou)), other_lost)
        if not (side["scores"][j] <= cut or flip.any() or cascade.any()):
            left.append(j)
    return left


def match(
    ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], box_tol: float, nms_threshold: float
) -> list[tuple[int, int]]:
    """Pairs (ours, theirs) of detections with the same label, scores within SCORE_TOL and boxes
    within ``box_tol``; near ties in score may come in either order. Every detection left
    unpaired must be explained by rounding (``unexplained``), and at least 90% pair up.
    """
    assert len(ours["scores"]) == len(theirs["scores"]), "different numbers of detections"
    assert np.all(np.diff(ours["scores"]) <= 0), "not sorted by decreasing score"
    free = np.ones(len(ours["scores"]), bool)
    pairs, unmatched = [], []
    for j in np.argsort(-theirs["scores"], kind="stable"):
        close = (
            free
            & (ours["labels"] == theirs["labels"][j])
            & (np.abs(ours["scores"] - theirs["scores"][j]) <= SCORE_TOL)
            & (np.abs(ours["boxes"] - theirs["boxes"][j]).max(1, initial=0) <= box_tol)
        )
        if close.any():
            i = int(np.flatnonzero(close)[np.argmin(np.abs(ours["scores"][close] - theirs["scores"][j]))])
            free[i] = False
            pairs.append((i, int(j)))
        else:
            unmatched.append(int(j))
    ours_unmatched = [int(i) for i in np.flatnonzero(free)]
    assert not unexplained(theirs, ours, unmatched, ours_unmatched, nms_threshold), ("theirs", unmatched)
    assert not unexplained(ours, theirs, ours_unmatched, unmatched, nms_threshold), ("ours", ours_unmatched)
    assert len(pairs) >= 0.9 * len(theirs["scores"]) > 0
    return pairs


def nms_threshold(module: Flat) -> float:
    """The IoU threshold of the model's last NMS, the one that picks its detections."""
    model = module.model
    return float(model.roi_heads.nms_thresh if hasattr(model, "roi_heads") else model.nms_thresh)


MODELS = {
    # One RoIAlignByLevel per MultiScaleRoIAlign: its 4 levels' pooling and their merge.
    "fasterrcnn_resnet50_fpn": (("boxes", "labels", "scores"), {"RoIAlignByLevel": 1, "NMS": 2}),
    "maskrcnn_resnet50_fpn": (("boxes", "labels", "scores", "masks"), {"RoIAlignByLevel": 2, "NMS": 2}),
    "retinanet_resnet50_fpn": (("boxes", "scores", "labels"), {"NMS": 1}),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_detection_model_torchscript(name) -> None:
    keys, expected_nodes = MODELS[name]
    module = Flat(build(name), keys).eval()
    g = torch.Generator().manual_seed(10)
    model = export(module, (torch.rand(3, *EXPORT_SIZE, generator=g),), "torchscript", [{1: "h", 2: "w"}])
    assert_only_ortops(model, expected_nodes)
    for size in (EXPORT_SIZE, RUN_SIZE):
        image = torch.rand(3, *size, generator=g)
        ours = dict(zip(keys, run_onnx(model, (image,)), strict=True))
        with torch.no_grad(), coordinate_trick_nms():
            theirs = {k: v.numpy() for k, v in zip(keys, module(image), strict=True)}
        pairs = match(ours, theirs, BOX_TOL * max(size), nms_threshold(module))
        if "masks" in keys:  # pasted mask probabilities of each matched detection
            i, j = np.array(pairs).T
            assert ours["masks"].shape[1:] == (1, *size)
            difference = np.abs(ours["masks"][i] - theirs["masks"][j])
            assert difference.mean() < 1e-4 and np.mean(difference > 1e-2) < 1e-3, difference.max()


@pytest.mark.parametrize("name", ["fasterrcnn_resnet50_fpn", "retinanet_resnet50_fpn"])
def test_detection_model_dynamo_fixed_size(name) -> None:
    # torch.export (torch 2.15) cannot export these models with a dynamic image size, and
    # needs the export-time replacements of batched_nms and MultiScaleRoIAlign's pooling.
    keys, expected_nodes = MODELS[name]
    module = Flat(build(name), keys).eval()
    g = torch.Generator().manual_seed(11)
    model = export(module, (torch.rand(3, *EXPORT_SIZE, generator=g),), "dynamo")
    assert_only_ortops(model, expected_nodes)
    assert torchvision.ops.boxes.batched_nms is not ortops_tv._batched_nms  # put back after the export
    image = torch.rand(3, *EXPORT_SIZE, generator=g)
    ours = dict(zip(keys, run_onnx(model, (image,)), strict=True))
    with torch.no_grad(), coordinate_trick_nms():
        theirs = {k: v.numpy() for k, v in zip(keys, module(image), strict=True)}
    match(ours, theirs, BOX_TOL * max(EXPORT_SIZE), nms_threshold(module))


@pytest.mark.parametrize("n", [0, 1, 60])
def test_traceable_batched_nms_equals_torchvision(n) -> None:
    g = torch.Generator().manual_seed(12)
    boxes, scores, classes = random_boxes(n, g), torch.rand(n, generator=g), torch.randint(0, 3, (n,), generator=g)
    expected = torchvision.ops.batched_nms(boxes, scores, classes, 0.4)
    torch.testing.assert_close(ortops_tv._batched_nms(boxes, scores, classes, 0.4), expected)


def test_traceable_multiscale_roi_align_equals_torchvision() -> None:
    g = torch.Generator().manual_seed(13)
    p2, p3 = torch.randn(1, 4, 16, 16, generator=g), torch.randn(1, 4, 8, 8, generator=g)
    boxes = random_boxes(30, g, size=64)
    boxes[:15, 2:] += 40
    module = MultiScale()
    expected = module(p2, p3, boxes)
    with ortops_tv._traceable_torchvision():
        ours = module(p2, p3, boxes)
    assert torchvision.ops.poolers._multiscale_roi_align is not ortops_tv._multiscale_roi_align
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)
