"""ortops.check_model on small hand-built models, one per kind of problem, and over the whole op table.

Where a problem has a visible effect in ONNX Runtime (an unknown op fails to load, a
wrong-typed attribute is replaced by its default), the tests show that effect too, so the
checker's verdicts are compared with the runtime's behaviour and not only with themselves.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ortops

from ortest import make_model, model_of, python_without, run

NMS_INPUTS = [("boxes", np.float32, 2), ("scores", np.float32, 1)]


def nms_model(domain: str = "mmcv", op: str = "NonMaxSuppression", **attributes: object) -> onnx.ModelProto:
    return make_model(op, domain, NMS_INPUTS, ["indices"], **attributes)


def kinds(problems: list[ortops.ModelProblem]) -> list[str]:
    return [p.kind for p in problems]


def test_clean_model_has_no_problems() -> None:
    assert ortops.check_model(nms_model(iou_threshold=0.3, offset=1)) == []


def test_clean_model_with_standard_nodes_around_custom_ones() -> None:
    # ONNX, ONNX-ML and com.microsoft nodes are not looked at; ortops ones are.
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Gelu", ["r"], ["g"], domain="com.microsoft"),
        helper.make_node("Normalizer", ["g"], ["n"], domain="ai.onnx.ml", norm="MAX"),
        helper.make_node("CumMax", ["g"], ["values", "indices"], domain="ortops", dim=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, None)],
    )
    model = model_of(graph, "com.microsoft", "ortops")
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    assert ortops.check_model(model) == []


def test_accepts_path_bytes_and_proto(tmp_path) -> None:
    model = nms_model(iou_treshold=0.3)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    expected = ortops.check_model(model)
    assert kinds(expected) == ["unknown-attribute"]
    assert ortops.check_model(str(path)) == expected
    assert ortops.check_model(path) == expected
    assert ortops.check_model(model.SerializeToString()) == expected


def test_missing_file_and_garbage(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        ortops.check_model(tmp_path / "absent.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\xff\xff\xff not a protobuf")
    with pytest.raises(ValueError, match="is not an ONNX model"):
        ortops.check_model(garbage)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="is not an ONNX model: it is empty"):
        ortops.check_model(empty)
    with pytest.raises(ValueError, match="is not an ONNX model"):
        ortops.check_model(b"\x08\x08")  # parses as a ModelProto with only an IR version


def test_unknown_op_in_ortops_domain_suggests_the_right_name() -> None:
    (problem,) = ortops.check_model(make_model("nms", "ortops", NMS_INPUTS, ["indices"]))
    assert (problem.node, problem.domain, problem.op_type, problem.kind) == ("#0", "ortops", "nms", "unknown-op")
    assert "ortops::nms" in problem.message and "ortops::NMS" in problem.message


@pytest.mark.parametrize("domain,op", [("TRT", "PyramidROIAlign_TRT"), ("com.example", "MyOp"), ("mmcv", "Foo")])
def test_unknown_custom_ops(domain: str, op: str) -> None:
    model = make_model(op, domain, NMS_INPUTS, ["indices"])
    (problem,) = ortops.check_model(model)
    assert problem.kind == "unknown-op" and f"{domain}::{op}" in problem.message
    # ... and ONNX Runtime indeed cannot load it.
    with pytest.raises(Exception, match=op):
        ort.InferenceSession(model.SerializeToString(), ortops.session_options())


def test_misspelled_attribute_is_reported_and_is_invisible_to_the_kernel() -> None:
    model = nms_model(iou_treshold=0.0)
    (problem,) = ortops.check_model(model)
    assert (problem.kind, problem.severity) == ("unknown-attribute", "warning")
    assert "'iou_treshold'" in problem.message and "mmcv::NonMaxSuppression" in problem.message
    assert "iou_threshold" in problem.message  # the attributes it does have
    assert "'iou_threshold' keeps its default 0.5" in problem.message
    # The runtime loads it and runs with the default iou_threshold 0.5: box 1 (IoU 0.68 with
    # box 0) is dropped, which a threshold of 0 given under the right name would also do, but
    # box 2 (IoU 0.14 with box 0) is kept, which a threshold of 0 would drop.
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [6, 6, 16, 16]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    session = ort.InferenceSession(model.SerializeToString(), ortops.session_options())
    np.testing.assert_array_equal(session.run(None, {"boxes": boxes, "scores": scores})[0], [0, 2])
    (right,) = run("NonMaxSuppression", "mmcv", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.0)
    np.testing.assert_array_equal(right, [0])


@pytest.mark.parametrize(
    "value,stored_as",
    [(helper.make_attribute("iou_threshold", 0), "int"), (helper.make_attribute("iou_threshold", "0.0"), "string")],
)
def test_wrong_attribute_type_is_reported_and_refused_by_the_kernel(value: onnx.AttributeProto, stored_as: str) -> None:
    model = nms_model()
    model.graph.node[0].name = "nms_7"
    model.graph.node[0].attribute.append(value)
    (problem,) = ortops.check_model(model)
    assert (problem.kind, problem.severity) == ("attribute-type", "error")
    # What the library does, not what it once did (run at the default 0.5): it refuses, and its
    # message names the node.
    refusal = f"mmcv.NonMaxSuppression node 'nms_7': attribute 'iou_threshold' must be of type float, got {stored_as}"
    assert "the session cannot be created" in problem.message and problem.message.endswith(refusal)
    assert "default" not in problem.message
    with pytest.raises(Exception, match=re.escape(refusal)):
        ort.InferenceSession(model.SerializeToString(), ortops.session_options())


def _stored(name: str, kind: str) -> onnx.AttributeProto:
    """Attribute ``name`` stored as ONNX type ``kind``."""
    if kind == "untyped":
        attribute = onnx.AttributeProto(name=name, f=0.5)  # type left UNDEFINED, as old writers did
        return attribute
    values = {
        "int": 0,
        "float": 0.5,
        "string": "0.5",
        "ints of one": [1],
        "ints": [1, 1],
        "floats": [0.5, 0.5],
        "tensor": onnx.numpy_helper.from_array(np.array(0.5, np.float32)),
        "strings": ["a"],
    }
    if kind in ("empty ints", "empty floats"):
        kind_type = onnx.AttributeProto.INTS if kind == "empty ints" else onnx.AttributeProto.FLOATS
        return helper.make_attribute(name, [], attr_type=kind_type)
    return helper.make_attribute(name, values[kind])


@pytest.mark.parametrize(
    "kind",
    ["int", "float", "string", "ints of one", "ints", "floats", "empty ints", "empty floats", "tensor", "strings"]
    + ["untyped"],
)
@pytest.mark.parametrize(
    ("domain", "op_type", "attribute"),
    [
        ("mmcv", "NonMaxSuppression", "iou_threshold"),  # float
        ("ortops", "DeformConv2d", "stride"),  # ints
        ("ortops", "RoIAlign", "mode"),  # string
        ("TRT", "EfficientNMS_TRT", "background_class"),  # int, also ints holding one value
    ],
)
def test_what_check_model_says_of_a_stored_type_is_what_the_session_does(
    domain: str, op_type: str, attribute: str, kind: str
) -> None:
    """check_model's verdict on an attribute's stored type is a session's: an error with the
    session's message where creating one fails, nothing where it succeeds."""
    (op,) = [o for o in ortops.ops() if (o.domain, o.name) == (domain, op_type)]
    model = _op_model(op, **_required(op, skip=attribute))
    model.graph.node[0].name = "node_under_test"
    model.graph.node[0].attribute.append(_stored(attribute, kind))
    problems = ortops.check_model(model)
    error = session_error(model)
    assert [p.severity for p in problems] == (["error"] if error else []), (problems, error)
    if problems:
        assert problems[0].kind in ("attribute-type", "attribute-value", "node-refused"), problems
        assert _verdict(problems[0]) in error, (problems[0].message, error)


def session_error(model: onnx.ModelProto) -> str:
    """The error of creating a session of ``model`` with ortops on the CPU ("" if none)."""
    try:
        ort.InferenceSession(model.SerializeToString(), ortops.session_options(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - whatever ONNX Runtime raises
        return str(e)
    return ""


def _verdict(problem: ortops.ModelProblem) -> str:
    """What a problem quotes of the session's error: the library's message, or ONNX Runtime's."""
    for lead in (": the session cannot be created: ", ": ONNX Runtime refuses the node: "):
        if lead in problem.message:
            return problem.message.split(lead, 1)[1]
    raise AssertionError(f"no session verdict in {problem.message!r}")


def test_required_attribute_missing() -> None:
    inputs = [("X", np.float32, 4), ("scale", np.float32, 1), ("bias", np.float32, 1)]
    (problem,) = ortops.check_model(make_model("GroupNorm", "ortops", inputs, ["Y"]))
    assert problem.kind == "missing-attribute" and "'num_groups'" in problem.message
    assert ortops.check_model(make_model("GroupNorm", "ortops", inputs, ["Y"], num_groups=2)) == []


def test_input_type_from_graph_input() -> None:
    model = make_model("NMS", "ortops", [("boxes", np.float16, 2), ("scores", np.float16, 1)], ["indices"])
    problems = ortops.check_model(model)
    assert kinds(problems) == ["input-type", "input-type"]
    assert "'boxes'" in problems[0].message and "float16" in problems[0].message
    assert "float32 or float64" in problems[0].message


def test_input_type_from_initializer() -> None:
    model = make_model("NMS", "ortops", [("scores", np.float32, 1)], ["indices"])
    node = model.graph.node[0]
    node.input[:] = ["boxes", "scores"]
    model.graph.initializer.append(helper.make_tensor("boxes", TensorProto.INT64, [1, 4], [0, 0, 1, 1]))
    (problem,) = ortops.check_model(model)
    assert problem.kind == "input-type" and "int64" in problem.message and "input 0 'boxes'" in problem.message


def test_input_type_from_shape_inference() -> None:
    # boxes is the output of a Cast to int32 with no value_info: shape inference finds its type.
    model = make_model("MMCVRoiAlign", "mmcv", [("input", np.float32, 4), ("rois", np.float32, 2)], ["Y"])
    model.graph.node[0].input[1] = "rois_i"
    model.graph.node.insert(0, helper.make_node("Cast", ["rois"], ["rois_i"], to=TensorProto.INT32))
    (problem,) = ortops.check_model(model)
    assert problem.kind == "input-type" and "'rois'" in problem.message and "int32" in problem.message


def test_inputs_sharing_a_type_must_agree() -> None:
    model = make_model("NMS", "ortops", [("boxes", np.float32, 2), ("scores", np.float64, 1)], ["indices"])
    (problem,) = ortops.check_model(model)
    assert problem.kind == "input-type"
    assert "float64" in problem.message and "float32" in problem.message and "'boxes'" in problem.message
    with pytest.raises(Exception):  # noqa: B017 - ONNX Runtime's message names no type
        ort.InferenceSession(model.SerializeToString(), ortops.session_options())


def test_every_value_of_a_variadic_input_is_checked() -> None:
    inputs = [("rois", np.float32, 2), ("p2", np.float32, 4), ("p3", np.float32, 4), ("p4", np.float64, 4)]
    model = make_model("MultiLevelRoIAlign", "ortops", inputs, ["Y"], featmap_strides=[4.0, 8.0, 16.0])
    (problem,) = ortops.check_model(model)
    assert problem.kind == "input-type" and "input 3 'features' (tensor 'p4') is float64" in problem.message


@pytest.mark.parametrize(
    ("levels", "p3", "named"),
    [(np.int64, np.float64, "input 3 'features' (tensor 'p3') is float64"), (np.int32, np.float32, "input 1 'levels'")],
)
def test_a_variadic_input_after_an_input_of_another_type_is_checked_at_its_position(levels, p3, named) -> None:
    """RoIAlignByLevel: rois (float32), levels (int64), then the variadic features (float32)."""
    inputs = [("rois", np.float32, 2), ("levels", levels, 1), ("p2", np.float32, 4), ("p3", p3, 4)]
    model = make_model("RoIAlignByLevel", "ortops", inputs, ["Y"], spatial_scales=[0.25, 0.125])
    (problem,) = ortops.check_model(model)
    assert problem.kind == "input-type" and named in problem.message


def test_unknown_types_are_not_guessed() -> None:
    model = make_model("NMS", "ortops", NMS_INPUTS, ["indices"])
    model.graph.input[0].type.tensor_type.elem_type = 0  # undefined
    assert ortops.check_model(model) == []


def test_opset_below_since_version() -> None:
    model = nms_model()
    model.opset_import[1].version = 0
    (problem,) = ortops.check_model(model)
    assert problem.kind == "opset" and "opset 0" in problem.message and "from opset 1" in problem.message


def test_subgraphs_are_checked() -> None:
    def branch(name: str, **attributes: object) -> onnx.GraphProto:
        node = helper.make_node("NonMaxSuppression", ["boxes", "scores"], [f"{name}_out"], domain="mmcv", **attributes)
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.INT64, None)
        return helper.make_graph([node], name, [], [out])

    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    boxes = helper.make_tensor_value_info("boxes", TensorProto.DOUBLE, [None, 4])
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None])
    if_node = helper.make_node(
        "If",
        ["cond"],
        ["out"],
        name="choose",
        then_branch=branch("then", iou_threshold=0.5),
        else_branch=branch("else", iou_treshold=0.5),
    )
    graph = helper.make_graph(
        [if_node], "g", [cond, boxes, scores], [helper.make_tensor_value_info("out", TensorProto.INT64, None)]
    )
    model = model_of(graph, "mmcv")
    problems = ortops.check_model(model)
    # Both branches see the outer boxes (float64) and scores (float32); else also misspells.
    assert sorted((p.node, p.kind) for p in problems) == [
        ("choose/else_branch/#0", "input-type"),
        ("choose/else_branch/#0", "unknown-attribute"),
        ("choose/then_branch/#0", "input-type"),
    ]


def test_model_local_functions() -> None:
    # A call of a model-local function in a custom domain is not an unknown op; the
    # function's own body is checked.
    body = helper.make_node("NMS", ["b", "s"], ["i"], domain="ortops", iou_treshold=0.5)
    function = helper.make_function("my.funcs", "MyNMS", ["b", "s"], ["i"], [body], [helper.make_opsetid("ortops", 1)])
    call = helper.make_node("MyNMS", ["boxes", "scores"], ["indices"], domain="my.funcs")
    graph = helper.make_graph(
        [call],
        "g",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [None, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None]),
        ],
        [helper.make_tensor_value_info("indices", TensorProto.INT64, None)],
    )
    model = model_of(graph, "my.funcs", functions=[function])
    (problem,) = ortops.check_model(model)
    assert (problem.node, problem.kind) == ("my.funcs::MyNMS/#0", "unknown-attribute")


def test_problem_kinds_are_the_documented_ones() -> None:
    from ortops._check import PROBLEM_KINDS

    assert set(PROBLEM_KINDS) == {
        "unknown-op",
        "unknown-attribute",
        "attribute-type",
        "missing-attribute",
        "attribute-value",
        "node-refused",
        "input-type",
        "opset",
    }


# --- every op of the table --------------------------------------------------------------

# A value of another ONNX type than the attribute's, written here independently of the checker.
WRONG_VALUE = {"int": 1.5, "float": 1, "string": 7, "ints": 3, "floats": 3}
WRONG_TYPE_NAME = {"int": "float", "float": "int", "string": "int", "ints": "int", "floats": "int"}
RIGHT_VALUE = {"int": 1, "float": 0.5, "string": "avg", "ints": [1, 1], "floats": [0.5, 0.5]}


def _op_model(op: ortops.OpInfo, **attributes: object) -> onnx.ModelProto:
    inputs = [(i.name, np.dtype(i.types[0]), 2) for i in op.inputs]
    return make_model(op.name, op.domain, inputs, [o.name for o in op.outputs], **attributes)


def _required(op: ortops.OpInfo, skip: str = "") -> dict[str, object]:
    return {a.name: RIGHT_VALUE[a.type] for a in op.attributes if a.default is None and a.name != skip}


@pytest.mark.parametrize("op", ortops.ops(), ids=lambda op: op.qualified_name)
def test_every_op_is_clean_when_written_correctly(op: ortops.OpInfo) -> None:
    assert ortops.check_model(_op_model(op, **_required(op))) == []


@pytest.mark.parametrize("op", ortops.ops(), ids=lambda op: op.qualified_name)
def test_every_op_reports_a_misspelled_attribute(op: ortops.OpInfo) -> None:
    if op.attributes:
        first = op.attributes[0]
        wrong = first.name[:-2] + first.name[-1] if len(first.name) > 2 else first.name + "s"  # drop a letter
        value = RIGHT_VALUE[first.type]
        required = _required(op, skip=first.name)
    else:
        wrong, value, required = "alpha", 1.0, {}
    problems = ortops.check_model(_op_model(op, **required, **{wrong: value}))
    expected = ["unknown-attribute"] + (["missing-attribute"] if op.attributes and first.default is None else [])
    assert kinds(problems) == expected
    assert f"'{wrong}'" in problems[0].message and op.qualified_name in problems[0].message


@pytest.mark.parametrize("op", [op for op in ortops.ops() if op.attributes], ids=lambda op: op.qualified_name)
def test_every_op_reports_a_wrong_typed_attribute(op: ortops.OpInfo) -> None:
    first = op.attributes[0]
    problems = ortops.check_model(
        _op_model(op, **_required(op, skip=first.name), **{first.name: WRONG_VALUE[first.type]})
    )
    assert kinds(problems) == ["attribute-type"]
    message = problems[0].message
    assert op.qualified_name in message
    assert f"attribute '{first.name}' must be of type {first.type}, got {WRONG_TYPE_NAME[first.type]}" in message


def test_like_nodes_share_one_session(monkeypatch) -> None:
    """A detector holds dozens of like nodes: each (op, attributes, input types) is given to
    ONNX Runtime once, and the verdict still names every node."""
    created = []
    real = ort.InferenceSession

    def counting(*args: object, **kwargs: object) -> ort.InferenceSession:
        created.append(args[0])
        return real(*args, **kwargs)

    nodes = [
        helper.make_node(
            "NMS", ["boxes", "scores"], [f"i{n}"], domain="ortops", name=f"nms_{n}", iou_threshold=float("nan")
        )
        for n in range(50)
    ] + [helper.make_node("NMS", ["boxes", "scores"], [f"j{n}"], domain="ortops", name=f"ok_{n}") for n in range(50)]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [None, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None]),
        ],
        [helper.make_value_info(name, onnx.TypeProto()) for node in nodes for name in node.output],
    )
    monkeypatch.setattr(ort, "InferenceSession", counting)
    problems = ortops.check_model(model_of(graph, "ortops"))
    assert len(created) == 2
    assert [p.node for p in problems] == [f"nms_{n}" for n in range(50)]
    assert problems[7].message.endswith("ortops.NMS node 'nms_7': attribute 'iou_threshold' is NaN")


def test_without_onnx_runtime_attributes_are_not_checked_and_a_warning_says_so(tmp_path) -> None:
    path = tmp_path / "nan.onnx"
    onnx.save(nms_model(iou_threshold=float("nan"), iou_treshold=0.5), str(path))
    code = (
        "import sys, warnings, ortops\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    problems = ortops.check_model(sys.argv[1])\n"
        "print([p.kind for p in problems]); print([str(w.message) for w in caught])\n"
    )
    result = python_without(("onnxruntime",), code, str(path))
    assert result.returncode == 0, result.stderr
    kinds_line, warnings_line = result.stdout.splitlines()
    assert kinds_line == "['unknown-attribute']"  # what needs no library; the NaN goes unseen
    assert "attribute values were not checked" in warnings_line
