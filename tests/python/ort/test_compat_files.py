"""Whole files as mmcv 1.x and mmdeploy exported them: opset 11, IR version 6, custom nodes in
the mmcv / mmdeploy domains at version 1 with their node names and attribute types, mixed
with standard nodes. ortops must run them unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import references
from onnx import TensorProto, helper, numpy_helper

import ortops

from ortest import exported_model


def model(nodes, inputs, outputs, initializers, domain: str) -> onnx.ModelProto:
    return exported_model(helper.make_graph(nodes, "exported", inputs, outputs, initializer=initializers), domain)


def session(m: onnx.ModelProto) -> ort.InferenceSession:
    ortops.register_onnx_schemas()
    onnx.checker.check_model(m)
    return ort.InferenceSession(m.SerializeToString(), ortops.session_options(), providers=["CPUExecutionProvider"])


def tensor(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def test_mmcv_two_stage_head() -> None:
    """NMS on proposals, RoIAlign of the kept ones, corner pooling and cummax on the features."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node(
            "NonMaxSuppression",
            ["boxes", "scores"],
            ["keep"],
            "NonMaxSuppression_0",
            domain="mmcv",
            iou_threshold=0.6,
            offset=0,
        ),
        helper.make_node("Gather", ["boxes", "keep"], ["kept_boxes"], "Gather_1", axis=0),
        helper.make_node("Mul", ["kept_boxes", "zero"], ["zeros4"], "Mul_2"),
        helper.make_node("Slice", ["zeros4", "s0", "s1", "axis1"], ["batch_col"], "Slice_3"),
        helper.make_node("Concat", ["batch_col", "kept_boxes"], ["rois"], "Concat_4", axis=1),
        helper.make_node(
            "MMCVRoiAlign",
            ["features", "rois"],
            ["pooled"],
            "MMCVRoiAlign_5",
            domain="mmcv",
            output_height=3,
            output_width=3,
            spatial_scale=0.25,
            sampling_ratio=0,
            mode="avg",
            aligned=1,
        ),
        helper.make_node("MMCVCornerPool", ["features"], ["top"], "MMCVCornerPool_6", domain="mmcv", mode=0),
        helper.make_node("cummax", ["features"], ["cmax", "cmax_idx"], "cummax_7", domain="mmcv", dim=3),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.float32), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "s0"),
        numpy_helper.from_array(np.array([1], np.int64), "s1"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    ]
    m = model(
        nodes,
        [tensor("features", f, [1, 4, 16, 16]), tensor("boxes", f, ["n", 4]), tensor("scores", f, ["n"])],
        [
            tensor("pooled", f, ["k", 4, 3, 3]),
            tensor("top", f, [1, 4, 16, 16]),
            tensor("cmax", f, [1, 4, 16, 16]),
            tensor("cmax_idx", TensorProto.INT64, [1, 4, 16, 16]),
        ],
        inits,
        "mmcv",
    )
    rng = np.random.default_rng(0)
    features = rng.normal(size=(1, 4, 16, 16)).astype(np.float32)
    xy = rng.uniform(0, 50, (40, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(4, 20, (40, 2))], 1).astype(np.float32)
    scores = rng.random(40).astype(np.float32)
    pooled, top, cmax, cmax_idx = session(m).run(None, {"features": features, "boxes": boxes, "scores": scores})

    keep = [i for i in sorted(range(40), key=lambda i: (-scores[i], i))]
    kept = []
    for i in keep:
        if all(not (references._iou(boxes[k], boxes[i], 0) > np.float32(0.6)) for k in kept):
            kept.append(i)
    rois = np.concatenate([np.zeros((len(kept), 1), np.float32), boxes[kept]], 1)
    np.testing.assert_allclose(
        pooled, references.roi_align(features, rois, 3, 3, 0.25, 0, "avg", True, True), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(top, references.corner_pool(features, 0))
    values, indices = references.cumulative_extreme(features, 3, True)
    np.testing.assert_array_equal(cmax, values)
    np.testing.assert_array_equal(cmax_idx, indices)


def test_mmdeploy_rotated_detector_pieces() -> None:
    """mmdeploy's domain: grid sampling, modulated deformable conv, rotated RoIAlign, NMSRotated, NMSMatch."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node(
            "grid_sampler",
            ["features", "grid"],
            ["warped"],
            "grid_sampler_0",
            domain="mmdeploy",
            interpolation_mode=0,
            padding_mode=0,
            align_corners=0,
        ),
        helper.make_node(
            "MMCVModulatedDeformConv2d",
            ["warped", "offset", "mask", "weight", "bias"],
            ["conv"],
            "MMCVModulatedDeformConv2d_1",
            domain="mmdeploy",
            stride=[1, 1],
            padding=[1, 1],
            dilation=[1, 1],
            groups=1,
            deform_groups=1,
        ),
        helper.make_node(
            "MMCVRoIAlignRotated",
            ["conv", "rrois"],
            ["rpooled"],
            "MMCVRoIAlignRotated_2",
            domain="mmdeploy",
            output_height=2,
            output_width=2,
            spatial_scale=0.5,
            sampling_ratio=2,
            aligned=1,
            clockwise=0,
        ),
        helper.make_node(
            "NMSRotated",
            ["rboxes", "rscores"],
            ["selected"],
            "NMSRotated_3",
            domain="mmdeploy",
            iou_threshold=0.1,
            score_threshold=0.05,
        ),
        helper.make_node(
            "NMSMatch", ["hboxes", "hscores", "iou_thr", "score_thr"], ["matches"], "NMSMatch_4", domain="mmdeploy"
        ),
    ]
    inits = [
        numpy_helper.from_array(np.array([0.5], np.float32), "iou_thr"),
        numpy_helper.from_array(np.array([0.1], np.float32), "score_thr"),
    ]
    m = model(
        nodes,
        [
            tensor("features", f, [1, 2, 8, 8]),
            tensor("grid", f, [1, 8, 8, 2]),
            tensor("offset", f, [1, 18, 8, 8]),
            tensor("mask", f, [1, 9, 8, 8]),
            tensor("weight", f, [3, 2, 3, 3]),
            tensor("bias", f, [3]),
            tensor("rrois", f, ["r", 6]),
            tensor("rboxes", f, [1, "n", 5]),
            tensor("rscores", f, [1, 2, "n"]),
            tensor("hboxes", f, [1, "m", 4]),
            tensor("hscores", f, [1, 1, "m"]),
        ],
        [
            tensor("rpooled", f, ["r", 3, 2, 2]),
            tensor("selected", TensorProto.INT64, ["s", 3]),
            tensor("matches", TensorProto.INT64, ["t", 4]),
        ],
        inits,
        "mmdeploy",
    )
    rng = np.random.default_rng(1)
    feeds = {
        "features": rng.normal(size=(1, 2, 8, 8)).astype(np.float32),
        "grid": rng.uniform(-1.1, 1.1, (1, 8, 8, 2)).astype(np.float32),
        "offset": rng.normal(size=(1, 18, 8, 8)).astype(np.float32),
        "mask": rng.random((1, 9, 8, 8)).astype(np.float32),
        "weight": rng.normal(size=(3, 2, 3, 3)).astype(np.float32),
        "bias": rng.normal(size=3).astype(np.float32),
        "rrois": np.array([[0, 6, 6, 8, 4, 0.5], [0, 10, 4, 4, 6, -1.0]], np.float32),
        "rboxes": np.concatenate(
            [rng.uniform(0, 30, (1, 12, 2)), rng.uniform(4, 10, (1, 12, 2)), rng.uniform(-3, 3, (1, 12, 1))], -1
        ).astype(np.float32),
        "rscores": rng.random((1, 2, 12)).astype(np.float32),
    }
    hxy = rng.uniform(0, 30, (1, 15, 2))
    feeds["hboxes"] = np.concatenate([hxy, hxy + rng.uniform(5, 12, (1, 15, 2))], -1).astype(np.float32)
    feeds["hscores"] = rng.random((1, 1, 15)).astype(np.float32)
    rpooled, selected, matches = session(m).run(None, feeds)

    warped = references.grid_sample(feeds["features"], feeds["grid"], "bilinear", "zeros", False)
    conv = references.deform_conv2d(
        warped, feeds["offset"], feeds["weight"], feeds["bias"], feeds["mask"], [1, 1], [1, 1], [1, 1], 1, 1
    )
    np.testing.assert_allclose(
        rpooled, references.roi_align_rotated(conv, feeds["rrois"], 2, 2, 0.5, 2, True, False), rtol=1e-4, atol=1e-4
    )
    np.testing.assert_array_equal(selected, references.nms_rotated(feeds["rboxes"], feeds["rscores"], 0.1, 0.05))
    np.testing.assert_array_equal(matches, references.nms_match(feeds["hboxes"], feeds["hscores"], 0.5, 0.1))


def test_soft_nms_and_rotated_feature_align_as_mmcv_exported() -> None:
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node(
            "SoftNonMaxSuppression",
            ["boxes", "scores"],
            ["dets", "inds"],
            "SoftNonMaxSuppression_0",
            domain="mmcv",
            iou_threshold=0.3,
            sigma=0.5,
            min_score=0.001,
            method=1,
            offset=0,
        ),
        helper.make_node(
            "MMCVRotatedFeatureAlign",
            ["feat", "rb"],
            ["aligned"],
            "MMCVRotatedFeatureAlign_1",
            domain="mmcv",
            spatial_scale=0.125,
            points=5,
        ),
    ]
    m = model(
        nodes,
        [
            tensor("boxes", f, ["n", 4]),
            tensor("scores", f, ["n"]),
            tensor("feat", f, [1, 2, 6, 6]),
            tensor("rb", f, [1, 6, 6, 5]),
        ],
        [tensor("dets", f, ["k", 5]), tensor("inds", TensorProto.INT64, ["k"]), tensor("aligned", f, [1, 2, 6, 6])],
        [],
        "mmcv",
    )
    rng = np.random.default_rng(2)
    xy = rng.uniform(0, 40, (30, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 15, (30, 2))], 1).astype(np.float32)
    scores = rng.random(30).astype(np.float32)
    feat = rng.normal(size=(1, 2, 6, 6)).astype(np.float32)
    rb = np.concatenate(
        [rng.uniform(0, 48, (1, 6, 6, 2)), rng.uniform(0, 20, (1, 6, 6, 2)), rng.uniform(-3, 3, (1, 6, 6, 1))], -1
    ).astype(np.float32)
    dets, inds, aligned = session(m).run(None, {"boxes": boxes, "scores": scores, "feat": feat, "rb": rb})
    expected_dets, expected_inds = references.soft_nms(boxes, scores, 0.3, 0.5, 0.001, 1, 0)
    np.testing.assert_array_equal(inds, expected_inds)
    np.testing.assert_allclose(dets, expected_dets, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        aligned, references.rotated_feature_align(feat, rb, 0.125, 5, y_first=True), rtol=1e-5, atol=1e-5
    )
