"""The ONNX schemas that ortops.register_onnx_schemas() adds: types and shapes under strict
shape inference, for every op of every domain, against shapes written out in the test."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper, shape_inference

import ortops
from ortops._schemas import shape_rule

F, D, I64, I32 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32
HAS_INFERENCE = hasattr(onnx.defs.OpSchema, "set_type_and_shape_inference_function")

# (domain, op, inputs (name, type, shape), attributes, expected outputs (type, shape));
# "?" is a data-dependent dim.
CASES = [
    ("ortops", "NMS", [("b", F, ["N", 4]), ("s", F, ["N"])], {}, [(I64, ["?"])]),
    ("mmcv", "NonMaxSuppression", [("b", D, [9, 4]), ("s", D, [9])], {}, [(I64, ["?"])]),
    ("ortops", "SoftNMS", [("b", F, ["N", 4]), ("s", F, ["N"])], {}, [(F, ["?", 5]), (I64, ["?"])]),
    (
        "mmdeploy",
        "NMSMatch",
        [("b", F, [1, 9, 4]), ("s", F, [1, 3, 9]), ("t", F, [1]), ("u", F, [1])],
        {},
        [(I64, ["?", 4])],
    ),
    ("ortops", "NMSRotated", [("b", D, [2, 9, 5]), ("s", D, [2, 3, 9])], {}, [(I64, ["?", 3])]),
    (
        "ortops",
        "NonMaxSuppression",
        [("b", F, [2, 9, 4]), ("s", F, [2, 3, 9]), ("m", I64, [1]), ("t", F, [1]), ("u", F, [])],
        {"center_point_box": 1},
        [(I64, ["?", 3])],
    ),
    (
        "ortops",
        "RoIAlign",
        [("x", F, ["N", 256, 50, 60]), ("r", F, ["R", 5])],
        {"output_height": 7, "output_width": 5},
        [(F, ["R", 256, 7, 5])],
    ),
    ("mmcv", "MMCVRoiAlign", [("x", D, [2, 8, 5, 6]), ("r", D, [3, 5])], {}, [(D, [3, 8, 1, 1])]),
    (
        "mmdeploy",
        "MMCVRoIAlignRotated",
        [("x", F, [2, 8, 5, 6]), ("r", F, ["R", 6])],
        {"output_height": 3, "output_width": 4},
        [(F, ["R", 8, 3, 4])],
    ),
    ("mmcv", "MMCVRotatedFeatureAlign", [("x", F, [2, 8, 5, 6]), ("b", F, [2, 5, 6, 5])], {}, [(F, [2, 8, 5, 6])]),
    ("mmcv", "grid_sampler", [("x", F, ["N", 8, 30, 30]), ("g", F, ["N", 5, 6, 2])], {}, [(F, ["N", 8, 5, 6])]),
    ("ortops", "CornerPool", [("x", D, [2, 8, 5, 6])], {}, [(D, [2, 8, 5, 6])]),
    ("mmcv", "cummin", [("x", I64, [3, "W"])], {"dim": 1}, [(I64, [3, "W"]), (I64, [3, "W"])]),
    (
        "ortops",
        "DeformConv2d",
        [("x", F, [1, 16, 20, 20]), ("o", F, [1, 18, 10, 10]), ("w", F, [32, 16, 3, 3]), ("b", F, [0]), ("m", F, [0])],
        {},
        [(F, [1, 32, 10, 10])],
    ),
    (
        "mmcv",
        "MMCVModulatedDeformConv2d",
        [
            ("x", F, ["N", 16, 20, 20]),
            ("o", F, ["N", 18, "H", "W"]),
            ("m", F, ["N", 9, "H", "W"]),
            ("w", F, [32, 16, 3, 3]),
        ],
        {},
        [(F, ["N", 32, "H", "W"])],
    ),
    (
        "mmcv",
        "MMCVDeformConv2d",
        [("x", F, [1, 16, 20, 20]), ("o", F, [1, 18, 20, 20]), ("w", F, [8, 16, 3, 3])],
        {},
        [(F, [1, 8, 20, 20])],
    ),
    (
        "ortops",
        "GroupNorm",
        [("x", F, [2, 8, 3, 3, 3]), ("s", F, [8]), ("b", F, [8])],
        {"num_groups": 2},
        [(F, [2, 8, 3, 3, 3])],
    ),
    (
        "ortops",
        "AddLayerNorm",
        [("a", F, ["N", "L", 256]), ("r", F, ["N", "L", 256]), ("s", F, [256]), ("b", F, [256])],
        {},
        [(F, ["N", "L", 256])],
    ),
    ("ortops", "MatrixInverse", [("x", D, [2, 3, "M", "M"])], {}, [(D, [2, 3, "M", "M"])]),
    (
        "mmdeploy",
        "MMCVDeformConv2d",
        [("x", F, [1, 16, 20, 20]), ("o", F, [1, 18, 20, 18]), ("w", F, [8, 16, 3, 3])],
        {"stride": [1, 1], "padding": [1, 1, 0, 0], "dilation": [1, 1], "groups": 1, "deform_groups": 1},
        [(F, [1, 8, 20, 18])],
    ),
    ("mmdeploy", "GatherTopk", [("x", F, ["B", 1000, 4]), ("i", I64, ["B", 100])], {}, [(F, ["B", 100, 4])]),
    ("mmdeploy", "GatherTopk", [("x", I32, [2, 1000]), ("i", I64, [2, "K"])], {}, [(I32, [2, "K"])]),
    ("mmdeploy", "GatherTopk", [("x", D, [2, 9, 3, 5]), ("i", I64, [2, 4])], {}, [(D, [2, 4, 3, 5])]),
    # Any number of leading batch dims, shared by the input and the indices; none at all.
    ("mmdeploy", "GatherTopk", [("x", F, ["B", 3, 50, 4]), ("i", I64, ["B", 3, 7])], {}, [(F, ["B", 3, 7, 4])]),
    ("mmdeploy", "GatherTopk", [("x", I64, [2, 3, 50]), ("i", I64, [2, 3, "K"])], {}, [(I64, [2, 3, "K"])]),
    ("mmdeploy", "GatherTopk", [("x", F, [50, 4, 2]), ("i", I64, [9])], {}, [(F, [9, 4, 2])]),
    (
        "mmdeploy",
        "GridPriorsTRT",
        [("a", F, [3, 4]), ("h", I64, ["H"]), ("w", I64, ["W"])],
        {"stride_h": 8, "stride_w": 16},
        [(F, ["?", 4])],
    ),
    (
        "mmdeploy",
        "TRTBicubicInterpolate",
        [("x", D, ["N", 3, 10, 12])],
        {"scale_factor": [2.0, 2.0], "align_corners": 0},
        [(D, ["N", 3, "?", "?"])],
    ),
    (
        "mmdeploy",
        "TRTInstanceNormalization",
        [("x", F, ["N", 32, "L"]), ("s", F, [32]), ("b", F, [32])],
        {"epsilon": 1e-5},
        [(F, ["N", 32, "L"])],
    ),
    (
        "mmdeploy",
        "ScaledDotProductAttentionTRT",
        [("q", F, ["B", 5, 8]), ("k", F, ["B", 7, 8]), ("v", F, ["B", 7, 6])],
        {},
        [(F, ["B", 5, 6]), (F, ["B", 5, 7])],
    ),
    (
        "mmdeploy",
        "ScaledDotProductAttentionTRT",
        [("q", F, [8, "T", 64]), ("k", F, [8, "S", 64]), ("v", F, [8, "S", 64]), ("m", F, ["T", "S"])],
        {},
        [(F, [8, "T", 64]), (F, [8, "T", "S"])],
    ),
    (
        "ortops",
        "MultiScaleDeformableAttention",
        [
            ("v", F, ["B", 58, 8, 32]),
            ("s", I64, [3, 2]),
            ("i", I64, [3]),
            ("l", F, ["B", "Q", 8, 3, 4, 2]),
            ("w", F, ["B", "Q", 8, 3, 4]),
        ],
        {},
        [(F, ["B", "Q", 256])],
    ),
    (
        "ortops",
        "MultiScaleDeformableAttentionFromOffsets",
        [
            ("v", F, ["B", 58, 8, 32]),
            ("s", I64, [3, 2]),
            ("i", I64, [3]),
            ("r", F, ["B", "Q", 3, 2]),
            ("o", F, ["B", "Q", 8, 3, 4, 2]),
            ("w", F, ["B", "Q", 8, 3, 4]),
        ],
        {},
        [(F, ["B", "Q", 256])],
    ),
    (
        "mmdeploy",
        "MMCVMultiScaleDeformableAttention",
        [
            ("v", D, [2, "S", "H", 16]),
            ("s", I64, ["L", 2]),
            ("i", I64, ["L"]),
            ("l", D, [2, 100, "H", "L", 4, 2]),
            ("w", D, [2, 100, "H", "L", 4]),
        ],
        {"im2col_step": 64},
        [(D, [2, 100, "?"])],
    ),
    (
        "ortops",
        "BatchedNMS",
        [("b", F, ["B", 9, 3, 4]), ("s", F, ["B", 9, 3])],
        {"max_output_boxes": 7},
        [(I64, ["B"]), (F, ["B", 7, 4]), (F, ["B", 7]), (I64, ["B", 7]), (I64, ["B", 7])],
    ),
    (
        "mmdeploy",
        "TRTBatchedNMS",
        [("b", F, [2, 9, 1, 4]), ("s", F, [2, 9, 3])],
        {"num_classes": 3, "keep_topk": 5, "return_index": 1},
        [(F, [2, 5, 5]), (I64, [2, 5]), (I64, [2, 5])],
    ),
    (
        "mmdeploy",
        "TRTBatchedNMS",
        [("b", D, ["B", 9, 3, 4]), ("s", D, ["B", 9, 3])],
        {"num_classes": 3, "keep_topk": 5},
        [(D, ["B", 5, 5]), (I64, ["B", 5])],
    ),
    (
        "mmdeploy",
        "TRTBatchedRotatedNMS",
        [("b", D, ["B", 9, 1, 5]), ("s", D, ["B", 9, 3])],
        {"num_classes": 3, "keep_topk": 4},
        [(D, ["B", 4, 6]), (I64, ["B", 4])],
    ),
    (
        "ortops",
        "MultiLevelRoIAlign",
        [("r", F, ["R", 5]), ("p2", F, [2, 256, 200, 334]), ("p3", F, [2, 256, 100, 167]), ("p4", F, [2, 256, 50, 84])],
        {"featmap_strides": [4.0, 8.0, 16.0], "output_height": 5},
        [(F, ["R", 256, 5, 7])],
    ),
    (
        "ortops",
        "RoIAlignByLevel",
        [("r", F, ["R", 5]), ("l", I64, ["R"]), ("p2", F, [2, 256, 200, 334]), ("p3", F, [2, 256, 100, 167])],
        {"spatial_scales": [0.25, 0.125], "output_height": 7, "output_width": 7},
        [(F, ["R", 256, 7, 7])],
    ),
    (
        "mmdeploy",
        "MMCVMultiLevelRoiAlign",
        [("r", F, [9, 5]), ("p2", F, ["N", "C", "H", "W"])],
        {"featmap_strides": [4.0], "output_width": 3},
        [(F, [9, "C", 7, 3])],
    ),
    (
        "mmdeploy",
        "MMCVMultiLevelRotatedRoiAlign",
        [("r", F, ["R", 6]), ("p2", F, [1, 64, 32, 32]), ("p3", F, [1, 64, 16, 16])],
        {"featmap_strides": [8.0, 16.0]},
        [(F, ["R", 64, 7, 7])],
    ),
    (
        "TRT",
        "EfficientNMS_TRT",
        [("b", F, ["B", 8400, 4]), ("s", F, ["B", 8400, 80])],
        {"max_output_boxes": 50, "background_class": [-1], "plugin_version": "1"},
        [(I32, ["B", 1]), (F, ["B", 50, 4]), (F, ["B", 50]), (I32, ["B", 50])],
    ),
    (
        "TRT",
        "BatchedNMSDynamic_TRT",
        [("b", F, ["B", 8400, 1, 4]), ("s", F, ["B", 8400, 80])],
        {"shareLocation": 1, "backgroundLabelId": -1, "numClasses": 80, "topK": 1000, "keepTopK": 100}
        | {"scoreThreshold": 0.25, "iouThreshold": 0.45},
        [(I32, ["B", 1]), (F, ["B", 100, 4]), (F, ["B", 100]), (F, ["B", 100])],
    ),
    (
        "TRT",
        "BatchedNMS_TRT",
        [("b", TensorProto.FLOAT16, [2, 300, 3, 4]), ("s", TensorProto.FLOAT16, [2, 300, 3])],
        {"shareLocation": 0, "backgroundLabelId": 0, "numClasses": 3, "topK": 20, "keepTopK": 10}
        | {"scoreThreshold": 0.25, "iouThreshold": 0.45},
        [(I32, [2]), (TensorProto.FLOAT16, [2, 10, 4]), (TensorProto.FLOAT16, [2, 10]), (TensorProto.FLOAT16, [2, 10])],
    ),
    (
        "TRT",
        "ROIAlign_TRT",
        [("x", F, ["N", 256, 50, 60]), ("r", F, ["R", 4]), ("i", I32, ["R"])],
        {"output_height": 7, "output_width": 5, "mode": 0},
        [(F, ["R", 256, 7, 5])],
    ),
]


def _model(domain: str, op: str, inputs: list, attributes: dict, outputs: int) -> onnx.ModelProto:
    graph_inputs = [helper.make_tensor_value_info(n, t, shape) for n, t, shape in inputs]
    names = [f"out{i}" for i in range(outputs)]
    node = helper.make_node(op, [n for n, _, _ in inputs], names, domain=domain, **attributes)
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_value_info(n, onnx.TypeProto()) for n in names])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    return helper.make_model(graph, ir_version=8, opset_imports=opsets)


def _dims(value: onnx.ValueInfoProto) -> list:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


@pytest.mark.skipif(not HAS_INFERENCE, reason="onnx < 1.17 cannot register Python inference functions")
@pytest.mark.parametrize(("domain", "op", "inputs", "attributes", "expected"), CASES, ids=lambda v: str(v))
def test_strict_shape_inference(domain: str, op: str, inputs: list, attributes: dict, expected: list) -> None:
    ortops.register_onnx_schemas()
    model = _model(domain, op, inputs, attributes, len(expected))
    inferred = shape_inference.infer_shapes(model, strict_mode=True, check_type=True)
    values = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output)}
    for i, (elem_type, shape) in enumerate(expected):
        value = values[f"out{i}"]
        assert value.type.tensor_type.elem_type == elem_type
        got = _dims(value)
        assert len(got) == len(shape)
        for g, want in zip(got, shape):
            if want != "?":
                assert g == want, (got, shape)


def test_every_op_of_every_domain_is_covered_and_has_shape_rules() -> None:
    covered = {(domain, op) for domain, op, *_ in CASES}
    kernels = {op.kernel for op in ortops.ops() if (op.domain, op.name) in covered}
    assert kernels == {op.kernel for op in ortops.ops()}
    for op in ortops.ops():
        for i in range(len(op.outputs)):
            shape_rule(op, i)  # raises if an output documents no shape


@pytest.mark.skipif(not HAS_INFERENCE, reason="onnx < 1.17 cannot register Python inference functions")
def test_inputs_of_unknown_shape_still_give_types_and_ranks() -> None:
    ortops.register_onnx_schemas()
    model = _model("ortops", "RoIAlign", [("x", D, None), ("r", D, None)], {"output_height": 3}, 1)
    inferred = shape_inference.infer_shapes(model, strict_mode=True)
    (value,) = inferred.graph.output
    assert value.type.tensor_type.elem_type == D
    assert _dims(value)[2:] == [3, 1]  # output_width's default


# ---------------------------------------------------------------- ONNX Runtime's own inference

ORT_INFERENCE_CASES = [
    # (op, input (name, type, shape), other inputs, attributes, outputs (name, type)); ONNX
    # Runtime infers the outputs documented "same shape" from input 0 through the library.
    ("AddLayerNorm", ("a", F, ["n", 5, 8]), [("b", F, [1, 5, 8]), ("s", F, [8]), ("c", F, [8])], {}, [("y", F)]),
    ("GroupNorm", ("x", D, [2, 4, "h", 3]), [("s", D, [4]), ("c", D, [4])], {"num_groups": 2}, [("y", D)]),
    ("CumMax", ("x", F, ["n", 7]), [], {"dim": 1}, [("v", F), ("i", I64)]),
]


@pytest.mark.parametrize(("op", "first", "others", "attributes", "outputs"), ORT_INFERENCE_CASES)
def test_onnx_runtime_infers_same_shape_outputs(op, first, others, attributes, outputs) -> None:
    """Through the library's shape-inference function (ONNX Runtime 1.17 on), not ortops'
    ONNX schemas: ONNX Runtime's fusions after the node (MatMul and Add into Gemm) need it."""
    from ortest import session

    inputs = [helper.make_tensor_value_info(name, elem, shape) for name, elem, shape in [first, *others]]
    node = helper.make_node(op, [i.name for i in inputs], [name for name, _ in outputs], domain="ortops", **attributes)
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_value_info(name, onnx.TypeProto()) for name, _ in outputs]
    )
    model = helper.make_model(
        graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ortops", 1)]
    )
    got = [(o.name, o.type, o.shape) for o in session(model).get_outputs()]
    element = {F: "tensor(float)", D: "tensor(double)", I64: "tensor(int64)"}
    assert got == [(name, element[elem], first[2]) for name, elem in outputs]


def test_onnx_runtime_names_each_unknown_dim_apart_and_leaves_an_unknown_rank_unknown() -> None:
    from ortest import session

    def output_shape(a_shape: list | None) -> list | None:
        inputs = [
            helper.make_tensor_value_info("a", F, a_shape),
            helper.make_tensor_value_info("b", F, [8]),
            helper.make_tensor_value_info("s", F, [8]),
            helper.make_tensor_value_info("c", F, [8]),
        ]
        node = helper.make_node("AddLayerNorm", ["a", "b", "s", "c"], ["y"], domain="ortops")
        graph = helper.make_graph([node], "g", inputs, [helper.make_value_info("y", onnx.TypeProto())])
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ortops", 1)]
        return session(helper.make_model(graph, ir_version=8, opset_imports=opsets)).get_outputs()[0].shape

    first, second, known = output_shape([None, None, 8])
    assert isinstance(first, str) and isinstance(second, str) and first != second and known == 8
    assert output_shape(None) in (None, [])  # no rank: nothing inferred (ONNX Runtime reports none)
