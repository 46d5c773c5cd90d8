"""``ortops inspect``'s verdict on every attribute check of the library is a real session's.

For every op of the table and every attribute of its schema, the values the library may
refuse (NaN and infinite floats, ints out of range, strings that name no mode, lists of the
wrong length or with bad values, values of every other ONNX type) and an attribute name the
op does not have are each put in a node of their own. Each node alone is given to ONNX
Runtime with the library registered, which is the truth: inspect (on one model holding every
node of the op) must call exactly the nodes whose session fails errors, with the session's
message, and the others not.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import ortops
from ortops._cli import inspect_report

from ortest import DEFAULT_OPSET, IR_VERSION, VALID_REQUIRED_ATTRIBUTES

# Values the library may refuse, by the attribute's type in the schema.
SUSPECT_VALUES: dict[str, list[object]] = {
    "float": [math.nan, math.inf, -math.inf, -1.0, 0.0, 2.0, 1e30],
    "int": [-1, 0, 2, 3, 1000, -(2**40), 2**40],
    "string": ["bogus", "", "AVG"],
    "ints": [[-1], [0], [0, 0], [-1, -1], [1, 1, 1], [2**40, 2**40]],
    "floats": [[math.nan], [-1.0], [math.inf, math.inf], [0.0, 0.0], [0.5, 0.5, 0.5]],
}
# A value of each ONNX attribute type, stored where the schema wants another.
OF_EACH_TYPE: dict[str, object] = {"int": 1, "float": 0.5, "string": "avg", "ints": [1, 1], "floats": [0.5, 0.5]}
UNKNOWN_NAME = "not_an_attribute_of_any_op"


def _cases(op: ortops.OpInfo) -> list[dict[str, object]]:
    """The attributes of each node: valid required ones, and one suspect attribute."""
    required = {a.name: VALID_REQUIRED_ATTRIBUTES[a.name] for a in op.attributes if a.default is None}
    cases = [{**required, UNKNOWN_NAME: 1}]
    if op.attributes:  # a misspelling of the first attribute, which the op ignores
        first = op.attributes[0]
        cases.append({**required, first.name[:-1]: OF_EACH_TYPE[first.type]})
    for attribute in op.attributes:
        values = SUSPECT_VALUES[attribute.type] + [v for t, v in OF_EACH_TYPE.items() if t != attribute.type]
        cases += [{**required, attribute.name: value} for value in values]
    return cases


def _node(op: ortops.OpInfo, name: str, attributes: dict[str, object]) -> onnx.NodeProto:
    return helper.make_node(
        op.name,
        [i.name for i in op.inputs],
        [f"{name}_{o.name}" for o in op.outputs],
        domain=op.domain,
        name=name,
        **attributes,
    )


def _model(op: ortops.OpInfo, nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    inputs = [
        helper.make_tensor_value_info(i.name, helper.np_dtype_to_tensor_dtype(np.dtype(i.types[0])), None)
        for i in op.inputs
    ]
    outputs = [helper.make_value_info(name, onnx.TypeProto()) for node in nodes for name in node.output]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    opsets = [helper.make_opsetid("", DEFAULT_OPSET), helper.make_opsetid(op.domain, op.since_version)]
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=opsets)


def _session_error(model: onnx.ModelProto) -> str:
    options = ortops.session_options()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - whatever ONNX Runtime raises
        return str(e)
    return ""


VERDICT = ": the session cannot be created: "


@pytest.mark.parametrize("op", ortops.ops(), ids=lambda op: op.qualified_name)
def test_inspect_agrees_with_a_session_on_every_attribute_check(op: ortops.OpInfo, tmp_path: Path) -> None:
    nodes = [_node(op, f"case_{i}", attributes) for i, attributes in enumerate(_cases(op))]
    truth = {node.name: _session_error(_model(op, [node])) for node in nodes}
    assert any(truth.values()) or not op.attributes, f"{op.qualified_name}: no suspect value is refused"

    path = tmp_path / "every_case.onnx"
    onnx.save(_model(op, nodes), str(path))
    report = inspect_report(str(path))
    assert report["attributes_checked"] is True
    errors: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    for problem in report["problems"]:
        (errors if problem["severity"] == "error" else warnings).setdefault(problem["node"], []).append(problem)
    for node in nodes:
        error = truth[node.name]
        given = [a.name for a in node.attribute]
        if not error:
            assert node.name not in errors, (node.attribute, errors.get(node.name))
        else:
            (problem,) = errors[node.name]
            assert problem["kind"] in ("attribute-type", "attribute-value", "missing-attribute"), problem
            verdict = problem["message"].split(VERDICT, 1)[1]
            assert verdict.startswith(f"{op.domain}.{op.name} node '{node.name}': ")
            assert error.endswith(verdict), (verdict, error)
        unknown = [name for name in given if name not in {a.name for a in op.attributes}]
        assert [p["kind"] for p in warnings.get(node.name, [])] == ["unknown-attribute"] * len(unknown)
    # The model of every case fails at its first refused node, as inspect's first error says.
    first_error = next((p for p in report["problems"] if p["severity"] == "error"), None)
    whole = _session_error(_model(op, nodes))
    assert report["runnable"] == (first_error is None) == (whole == "")
    if first_error is not None:
        assert whole.endswith(first_error["message"].split(VERDICT, 1)[1]), (first_error, whole)
