"""ortops.torch.multiclass_nms (ortops::BatchedNMS) against torchvision.ops.batched_nms with the
filtering, top-k and padding written here; mmdeploy's TRTBatchedRotatedNMS against ortops'
NMSRotated run per image and class; the export round trip with both exporters."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

import ortops.torch

from ortest import run
from roundtrip import EXPORTERS, custom_nodes, export, run_onnx


def detector_outputs(
    batch: int, count: int, classes: int, dtype: torch.dtype, seed: int = 0, per_class: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Boxes clustered around a few objects and continuous scores (no ties: torchvision's
    final sort is not stable)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(batch, max(1, count // 8), 2, generator=g, dtype=dtype) * 200
    pick = torch.randint(0, centres.shape[1], (batch, count), generator=g)
    xy = torch.gather(centres, 1, pick[..., None].expand(-1, -1, 2)) + torch.randn(batch, count, 2, generator=g) * 4
    wh = torch.rand(batch, count, 2, generator=g, dtype=dtype) * 30 + 1
    if per_class:
        xy = xy[:, :, None] + torch.randn(batch, count, classes, 2, generator=g, dtype=dtype)
        wh = wh[:, :, None].expand(-1, -1, classes, -1)
    return torch.cat([xy, xy + wh], -1), torch.rand(batch, count, classes, generator=g, dtype=dtype)


def torchvision_multiclass_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    iou_threshold: float,
    score_threshold: float,
    max_output_boxes: int,
    pre_topk: int = -1,
    class_agnostic: bool = False,
    score_activation: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Per image: activate, filter, per-class pre-top-k, torchvision.ops.batched_nms, top-k, pad."""
    if score_activation:
        scores = scores.sigmoid()
    batch, count, classes = scores.shape
    num = torch.zeros(batch, dtype=torch.int64)
    out_boxes = boxes.new_zeros(batch, max_output_boxes, 4)
    out_scores = scores.new_zeros(batch, max_output_boxes)
    out_classes = torch.full((batch, max_output_boxes), -1, dtype=torch.int64)
    out_indices = torch.full((batch, max_output_boxes), -1, dtype=torch.int64)
    threshold = float(np.float32(score_threshold))
    for b in range(batch):
        n, c = torch.nonzero(scores[b] > threshold, as_tuple=True)
        s = scores[b, n, c]
        if pre_topk >= 0:
            group = torch.zeros_like(c) if class_agnostic else c
            best = [
                torch.nonzero(group == g)[:, 0][s[group == g].argsort(descending=True)[:pre_topk]]
                for g in group.unique()
            ]
            keep = torch.cat(best) if best else torch.zeros(0, dtype=torch.int64)
            n, c, s = n[keep], c[keep], s[keep]
        candidate_boxes = boxes[b, n] if boxes.dim() == 3 else boxes[b, n, c]
        groups = torch.zeros_like(c) if class_agnostic else c
        kept = torchvision.ops.batched_nms(candidate_boxes, s, groups, float(np.float32(iou_threshold)))
        kept = kept[:max_output_boxes]  # batched_nms returns them by descending score
        k = len(kept)
        num[b] = k
        out_boxes[b, :k], out_scores[b, :k] = candidate_boxes[kept], s[kept]
        out_classes[b, :k], out_indices[b, :k] = c[kept], n[kept]
    return num, out_boxes, out_scores, out_classes, out_indices


def assert_same(got: tuple, expected: tuple) -> None:
    assert len(got) == len(expected) == 5
    for g, e in zip(got, expected):
        g = torch.as_tensor(g)
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch,count,classes", [(1, 300, 5), (3, 120, 4), (2, 0, 3), (2, 40, 1)])
@pytest.mark.parametrize("class_agnostic", [False, True])
@pytest.mark.parametrize("per_class", [False, True])
def test_eager_matches_torchvision(
    dtype: torch.dtype, batch: int, count: int, classes: int, class_agnostic: bool, per_class: bool
) -> None:
    boxes, scores = detector_outputs(batch, count, classes, dtype, seed=count + classes, per_class=per_class)
    got = ortops.torch.multiclass_nms(boxes, scores, 0.5, 0.3, 50, class_agnostic=class_agnostic)
    assert_same(got, torchvision_multiclass_nms(boxes, scores, 0.5, 0.3, 50, class_agnostic=class_agnostic))


@pytest.mark.parametrize("pre_topk", [0, 2, 20])
@pytest.mark.parametrize("max_output_boxes", [0, 5, 1000])
def test_eager_limits_match_torchvision(pre_topk: int, max_output_boxes: int) -> None:
    boxes, scores = detector_outputs(2, 200, 3, torch.float64, seed=pre_topk)
    got = ortops.torch.multiclass_nms(boxes, scores, 0.4, 0.2, max_output_boxes, pre_topk=pre_topk)
    assert_same(got, torchvision_multiclass_nms(boxes, scores, 0.4, 0.2, max_output_boxes, pre_topk=pre_topk))


def test_score_activation_and_box_coding_match_torchvision() -> None:
    boxes, logits = detector_outputs(2, 150, 4, torch.float64, seed=3)
    logits = logits * 12 - 6
    centre_size = torch.cat([(boxes[..., :2] + boxes[..., 2:]) / 2, boxes[..., 2:] - boxes[..., :2]], -1)
    got = ortops.torch.multiclass_nms(centre_size, logits, 0.5, 0.6, 40, box_coding=1, score_activation=True)
    expected = torchvision_multiclass_nms(boxes, logits, 0.5, 0.6, 40, score_activation=True)
    for i in (0, 3, 4):
        torch.testing.assert_close(got[i], expected[i], rtol=0, atol=0)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-12, atol=1e-12)  # decoding rounds
    torch.testing.assert_close(got[2], expected[2], rtol=1e-15, atol=0)


def test_float16() -> None:
    boxes, scores = detector_outputs(2, 80, 3, torch.float32, seed=9)
    half = ortops.torch.multiclass_nms(boxes.half(), scores.half(), 0.5, 0.3, 20)
    single = ortops.torch.multiclass_nms(boxes.half().float(), scores.half().float(), 0.5, 0.3, 20)
    assert half[1].dtype == torch.float16
    for h, s in zip(half, single):
        torch.testing.assert_close(h, s.to(h.dtype), rtol=0, atol=0)


def test_bad_inputs_are_errors() -> None:
    boxes, scores = detector_outputs(1, 10, 3, torch.float32)
    with pytest.raises(ValueError, match="boxes must have shape"):
        ortops.torch.multiclass_nms(boxes[:, :5], scores, 0.5, 0.1, 5)
    with pytest.raises(ValueError, match="max_output_boxes must be >= 0"):
        ortops.torch.multiclass_nms(boxes, scores, 0.5, 0.1, -1)
    with pytest.raises(ValueError, match="ortops::BatchedNMS takes"):
        ortops.torch.multiclass_nms(boxes.int(), scores.int(), 0.5, 0.1, 5)


def test_says_it_has_no_gradient() -> None:
    boxes, scores = detector_outputs(1, 10, 2, torch.float32)
    scores.requires_grad_()
    _, _, out_scores, _, _ = ortops.torch.multiclass_nms(boxes, scores, 0.5, 0.1, 5)
    with pytest.raises(RuntimeError, match=r"^ortops\.multiclass_nms: no gradient"):
        out_scores.sum().backward()


class Detector(torch.nn.Module):
    """A head's last steps: logits to scores inside the op, boxes shared by the classes."""

    def forward(self, boxes: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ortops.torch.multiclass_nms(boxes, logits, 0.45, 0.25, 30, pre_topk=100, score_activation=True)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip(exporter: str) -> None:
    boxes, logits = detector_outputs(2, 200, 4, torch.float32)
    logits = logits * 8 - 4
    model = export(Detector(), (boxes, logits), exporter, dynamic_dims=[{0: "b", 1: "n"}, {0: "b", 1: "n"}])
    assert custom_nodes(model) == ["ortops::BatchedNMS"]
    # Other inputs than the export ones, of another batch and length: the graph must be general.
    boxes2, logits2 = detector_outputs(3, 333, 4, torch.float32, seed=5)
    logits2 = logits2 * 8 - 4
    got = run_onnx(model, (boxes2, logits2))
    expected = Detector()(boxes2, logits2)
    assert len(got) == 5
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e.numpy())
    if exporter == "dynamo":  # TorchScript declares every dim of a custom node's outputs symbolic under dynamic axes
        shapes = [[d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim] for o in model.graph.output]
        assert [s[1:] for s in shapes] == [[], [30, 4], [30], [30], [30]]


# ---------------------------------------------------------------- mmdeploy::TRTBatchedRotatedNMS


def rotated_case(batch: int, count: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(batch, max(1, count // 6), 2, generator=g, dtype=torch.float64) * 80
    pick = torch.randint(0, centres.shape[1], (batch, count), generator=g)
    cxy = torch.gather(centres, 1, pick[..., None].expand(-1, -1, 2)) + torch.randn(batch, count, 2, generator=g) * 3
    wh = torch.rand(batch, count, 2, generator=g, dtype=torch.float64) * 12 + 2
    theta = (torch.rand(batch, count, 1, generator=g, dtype=torch.float64) - 0.5) * 3
    return torch.cat([cxy, wh, theta], -1), torch.rand(batch, count, classes, generator=g, dtype=torch.float64)


def rotated_reference(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float, topk: int, keep_topk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image and class: the candidates (score above the threshold), their best `topk`,
    ortops.torch.nms_rotated (the existing rotated NMS) on those; then merge by descending
    score, ties by class then box, keep the best `keep_topk`, pad."""
    batch, count, classes = scores.shape
    dets = torch.zeros(batch, keep_topk, 6, dtype=boxes.dtype)
    labels = torch.full((batch, keep_topk), -1, dtype=torch.int64)
    for b in range(batch):
        kept = []
        for c in range(classes):
            index = torch.nonzero(scores[b, :, c] > score_threshold)[:, 0]
            order = sorted(index.tolist(), key=lambda n: (-float(scores[b, n, c]), n))
            index = torch.tensor(order[:topk] if topk > 0 else order, dtype=torch.int64)
            if len(index) == 0:
                continue
            selected = ortops.torch.nms_rotated(
                boxes[b, index][None], scores[b, index, c][None, None], iou_threshold, score_threshold
            )
            kept += [(float(scores[b, index[i], c]), c, int(index[i])) for i in selected[:, 2].tolist()]
        kept.sort(key=lambda t: (-t[0], t[1], t[2]))
        for row, (score, c, n) in enumerate(kept[:keep_topk]):
            dets[b, row, :5], dets[b, row, 5], labels[b, row] = boxes[b, n], score, c
    return dets, labels


@pytest.mark.parametrize("topk", [-1, 6])
@pytest.mark.parametrize("keep_topk", [5, 60])
def test_rotated_matches_nms_rotated(topk: int, keep_topk: int) -> None:
    boxes, scores = rotated_case(2, 50, 3, seed=topk + keep_topk)
    dets, labels = run(
        "TRTBatchedRotatedNMS",
        "mmdeploy",
        {"boxes": boxes[:, :, None].numpy(), "scores": scores.numpy()},
        ["dets", "labels"],
        num_classes=3,
        background_label_id=-1,
        iou_threshold=0.2,
        score_threshold=0.3,
        topk=topk,
        keep_topk=keep_topk,
        is_normalized=0,
        clip_boxes=0,
    )
    expected_dets, expected_labels = rotated_reference(boxes, scores, 0.2, float(np.float32(0.3)), topk, keep_topk)
    np.testing.assert_array_equal(labels, expected_labels.numpy())
    np.testing.assert_array_equal(dets, expected_dets.numpy())
