"""A whole two-stage detection tail written the way mmdeploy exports it for TensorRT, run
unchanged: RPN proposals through ``mmdeploy::TRTBatchedNMS``, the kept proposals pooled from a
four-level feature pyramid by ``mmdeploy::MMCVMultiLevelRoiAlign``, a small box head in
standard ONNX, and the final per-class ``mmdeploy::TRTBatchedNMS`` with ``return_index``.

The reference chains the per-node references of the node tests (slow loops written there,
independent of the kernels) with the head in numpy. Runs in both tested runtimes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from test_batched_nms import reference_trt
from test_multi_level_roi_align import MMDEPLOY, STRIDES, boxes_over_levels, pyramid
from test_multi_level_roi_align import reference as multi_level_reference

import ortops

from ortest import session

CHANNELS, CLASSES, PROPOSALS, KEPT_PROPOSALS, DETECTIONS = 8, 3, 64, 24, 10
IMAGE_H, IMAGE_W = 72, 100
POOL = 4


def _tail_model(head_weight: np.ndarray) -> onnx.ModelProto:
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    rpn_nms = dict(
        num_classes=1,
        background_label_id=-1,
        iou_threshold=0.7,
        score_threshold=0.0,
        topk=PROPOSALS,
        keep_topk=KEPT_PROPOSALS,
        is_normalized=0,
        clip_boxes=0,
        return_index=0,
    )
    roi_align = dict(
        output_height=POOL,
        output_width=POOL,
        sampling_ratio=0,
        pool_mode=1,
        aligned=1,
        roi_scale_factor=1.0,
        finest_scale=8,
        featmap_strides=[float(s) for s in STRIDES],
    )
    det_nms = dict(
        num_classes=CLASSES,
        background_label_id=-1,
        iou_threshold=0.5,
        score_threshold=0.05,
        topk=KEPT_PROPOSALS,
        keep_topk=DETECTIONS,
        is_normalized=0,
        clip_boxes=0,
        return_index=1,
    )
    levels = [f"feat_{i}" for i in range(len(STRIDES))]
    nodes = [
        # Stage 1: class-agnostic proposals (one class), boxes shared across classes.
        helper.make_node("Unsqueeze", ["proposals"], ["proposals_4d"], "Unsqueeze_0", axes=[2]),
        helper.make_node(
            "TRTBatchedNMS",
            ["proposals_4d", "objectness"],
            ["rpn_dets", "rpn_labels"],
            "TRTBatchedNMS_1",
            domain="mmdeploy",
            **rpn_nms,
        ),
        # rois [K, 5] = (batch 0, x1, y1, x2, y2) from the kept proposals of the one image.
        helper.make_node("Slice", ["rpn_dets", "zero", "four", "two"], ["rpn_boxes"], "Slice_2"),
        helper.make_node("Reshape", ["rpn_boxes", "flat_boxes"], ["roi_boxes"], "Reshape_3"),
        helper.make_node(
            "ConstantOfShape",
            ["batch_column_shape"],
            ["batch_column"],
            "ConstantOfShape_4",
            value=helper.make_tensor("v", f, [1], [0.0]),
        ),
        helper.make_node("Concat", ["batch_column", "roi_boxes"], ["rois"], "Concat_5", axis=1),
        helper.make_node(
            "MMCVMultiLevelRoiAlign",
            ["rois", *levels],
            ["pooled"],
            "MMCVMultiLevelRoiAlign_6",
            domain="mmdeploy",
            **roi_align,
        ),
        # Box head: average the pooled bins, a linear layer to class logits, softmax.
        helper.make_node("ReduceMean", ["pooled"], ["pooled_mean"], "ReduceMean_7", axes=[2, 3], keepdims=0),
        helper.make_node("MatMul", ["pooled_mean", "head_weight"], ["logits"], "MatMul_8"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], "Softmax_9", axis=1),
        helper.make_node("Unsqueeze", ["probabilities"], ["det_scores"], "Unsqueeze_10", axes=[0]),
        helper.make_node("Unsqueeze", ["rpn_boxes"], ["det_boxes"], "Unsqueeze_11", axes=[2]),
        helper.make_node(
            "TRTBatchedNMS",
            ["det_boxes", "det_scores"],
            ["dets", "labels", "index"],
            "TRTBatchedNMS_12",
            domain="mmdeploy",
            **det_nms,
        ),
    ]
    initializers = [
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([4], np.int64), "four"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([-1, 4], np.int64), "flat_boxes"),
        numpy_helper.from_array(np.array([KEPT_PROPOSALS, 1], np.int64), "batch_column_shape"),
        numpy_helper.from_array(head_weight, "head_weight"),
    ]
    inputs = [
        helper.make_tensor_value_info("proposals", f, [1, PROPOSALS, 4]),
        helper.make_tensor_value_info("objectness", f, [1, PROPOSALS, 1]),
    ] + [helper.make_tensor_value_info(name, f, [1, CHANNELS, None, None]) for name in levels]
    outputs = [
        helper.make_tensor_value_info("dets", f, [1, DETECTIONS, 5]),
        helper.make_tensor_value_info("labels", i64, [1, DETECTIONS]),
        helper.make_tensor_value_info("index", i64, [1, DETECTIONS]),
    ]
    graph = helper.make_graph(nodes, "mmdeploy_trt_tail", inputs, outputs, initializer=initializers)
    opsets = [helper.make_opsetid("", 11), helper.make_opsetid("mmdeploy", 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="pytorch")
    model.ir_version = 6
    return model


def _reference(feeds: dict[str, np.ndarray], head_weight: np.ndarray) -> list[np.ndarray]:
    levels = [feeds[f"feat_{i}"] for i in range(len(STRIDES))]
    rpn_dets, _, _ = reference_trt(
        feeds["proposals"][:, :, None],
        feeds["objectness"],
        keep_topk=KEPT_PROPOSALS,
        iou_threshold=0.7,
        score_threshold=0.0,
        topk=PROPOSALS,
    )
    boxes = rpn_dets[0, :, :4]
    rois = np.concatenate([np.zeros((KEPT_PROPOSALS, 1), np.float32), boxes], 1)
    pooled = multi_level_reference(MMDEPLOY, levels, rois, POOL, POOL, 0, STRIDES, 8, 1.0, False, True)
    logits = pooled.mean(axis=(2, 3), dtype=np.float32) @ head_weight
    exp = np.exp(logits - logits.max(1, keepdims=True))
    probabilities = (exp / exp.sum(1, keepdims=True)).astype(np.float32)
    return reference_trt(
        boxes[None, :, None],
        probabilities[None],
        keep_topk=DETECTIONS,
        iou_threshold=0.5,
        score_threshold=0.05,
        topk=KEPT_PROPOSALS,
    )


def test_two_stage_tail_as_mmdeploy_exports_it_for_tensorrt() -> None:
    rng = np.random.default_rng(7)
    head_weight = (rng.normal(size=(CHANNELS, CLASSES)) * 2).astype(np.float32)
    model = _tail_model(head_weight)
    ortops.register_onnx_schemas()
    onnx.checker.check_model(model)
    assert ortops.check_model(model) == []

    # Proposals in clusters of jittered boxes around objects of every pyramid level's scale,
    # so that both NMS stages suppress.
    objects = boxes_over_levels(rng, PROPOSALS // 8, 1, IMAGE_H, IMAGE_W)[:, 1:]
    sizes = np.repeat(objects[:, 2:] - objects[:, :2], 8, axis=0)
    jitter = rng.normal(0, 0.08, (PROPOSALS, 4)) * np.concatenate([sizes, sizes], 1)
    proposals = (np.repeat(objects, 8, axis=0) + jitter).astype(np.float32)
    feeds = {
        "proposals": proposals[None],
        "objectness": rng.random((1, PROPOSALS, 1)).astype(np.float32),
        **{f"feat_{i}": level for i, level in enumerate(pyramid(rng, 1, CHANNELS, IMAGE_H, IMAGE_W))},
    }
    dets, labels, index = session(model).run(None, feeds)
    expected_dets, expected_labels, expected_index = _reference(feeds, head_weight)
    assert (labels >= 0).sum() > 0, "the case must detect something"
    np.testing.assert_array_equal(labels, expected_labels)
    np.testing.assert_array_equal(index, expected_index)
    # Boxes are copied from the proposals; scores went through RoIAlign, the mean and softmax.
    np.testing.assert_array_equal(dets[..., :4], expected_dets[..., :4])
    np.testing.assert_allclose(dets[..., 4], expected_dets[..., 4], rtol=1e-5, atol=1e-6)
