"""Attributes are what they say: a value stored with the wrong ONNX type is an error.

ONNX Runtime fails a typed attribute read both for a missing attribute and for one of
another type; before this was told apart, ``iou_threshold=1`` stored as INT ran at the
default 0.5. Every attribute of every op in every domain is tried with each wrong type.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import ortops

from ortest import IR_VERSION, VALID_REQUIRED_ATTRIBUTES, make_model

# A value of each ONNX attribute type, to store where another type is expected.
_VALUES = {"int": 1, "float": 0.5, "string": "avg", "ints": [1, 1], "floats": [0.5, 0.5]}
_NUMPY = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32}


def _cases() -> list[tuple[ortops.OpInfo, ortops.AttributeInfo, str]]:
    cases = []
    for op in ortops.ops():
        for attribute in op.attributes:
            for stored in _VALUES:
                if stored != attribute.type:
                    cases.append((op, attribute, stored))
    return cases


def _create_session(op: ortops.OpInfo, attributes: dict[str, object]) -> None:
    inputs = [(i.name, _NUMPY[i.types[0]], 1) for i in op.inputs]
    model = make_model(op.name, op.domain, inputs, [o.name for o in op.outputs], **attributes)
    assert model.ir_version == IR_VERSION
    options = ortops.session_options()
    options.log_severity_level = 4
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    ("op", "attribute", "stored"),
    _cases(),
    ids=lambda v: v.qualified_name if isinstance(v, ortops.OpInfo) else getattr(v, "name", v),
)
def test_attribute_of_the_wrong_type_is_an_error(op: ortops.OpInfo, attribute: ortops.AttributeInfo, stored: str):
    attributes = {
        name: value for name, value in VALID_REQUIRED_ATTRIBUTES.items() if any(a.name == name for a in op.attributes)
    }
    attributes[attribute.name] = _VALUES[stored]
    with pytest.raises(Exception) as error:
        _create_session(op, attributes)
    message = str(error.value)
    assert f"{op.domain}.{op.name}: attribute '{attribute.name}' must be of type {attribute.type}, got {stored}" in (
        message
    )


@pytest.mark.parametrize("op", ortops.ops(), ids=lambda op: op.qualified_name)
def test_attributes_of_the_right_type_create_the_kernel(op: ortops.OpInfo):
    attributes = {
        name: value for name, value in VALID_REQUIRED_ATTRIBUTES.items() if any(a.name == name for a in op.attributes)
    }
    _create_session(op, attributes)


def test_a_float_threshold_written_as_int_no_longer_runs_at_the_default():
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 8]], np.float32)  # IoU 0.8
    scores = np.array([0.9, 0.8], np.float32)
    node = helper.make_node("NMS", ["boxes", "scores"], ["indices"], domain="ortops", iou_threshold=1)
    assert node.attribute[0].type == helper.AttributeProto.INT
    model = make_model("NMS", "ortops", [("boxes", np.float32, 2), ("scores", np.float32, 1)], ["indices"])
    model.graph.node[0].CopyFrom(node)
    options = ortops.session_options()
    options.log_severity_level = 4
    with pytest.raises(Exception, match="attribute 'iou_threshold' must be of type float, got int"):
        ort.InferenceSession(model.SerializeToString(), options).run(None, {"boxes": boxes, "scores": scores})


def test_an_attribute_error_names_the_node() -> None:
    """ONNX Runtime does not say for which node a kernel could not be created: the library's
    message does, after the op, where the node has a name."""
    model = make_model("NMS", "ortops", [("boxes", np.float32, 2), ("scores", np.float32, 1)], ["indices"])
    model.graph.node[0].attribute.append(helper.make_attribute("iou_threshold", float("nan")))
    options = ortops.session_options()
    options.log_severity_level = 4
    with pytest.raises(Exception, match=r"ortops\.NMS: attribute 'iou_threshold' is NaN"):
        ort.InferenceSession(model.SerializeToString(), options)
    model.graph.node[0].name = "nms_1"
    with pytest.raises(Exception, match=r"ortops\.NMS node 'nms_1': attribute 'iou_threshold' is NaN"):
        ort.InferenceSession(model.SerializeToString(), options)
