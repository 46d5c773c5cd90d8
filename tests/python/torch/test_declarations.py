"""Each ortops.torch op's one declaration (ortops.torch._op.Op) against the op manifest (the C++
op table), and what follows from it: the public function's arguments (their Python types are
checked, their docs are the declaration's) and its defaults."""

from __future__ import annotations

import inspect
import re
import types
import typing

import numpy as np
import pytest
import torch

import ortops
import ortops.torch
from ortops.torch import _op

DECLARED = {op.name: op for op in _op.declared_ops()}


def _manifest_type(arg: _op.Arg) -> str:
    return {int: "int", bool: "int", float: "float", str: "string", list[int]: "ints", list[float]: "floats"}[arg.type]


@pytest.mark.parametrize("name", list(DECLARED))
def test_declaration_matches_the_manifest(name: str) -> None:
    op = DECLARED[name]
    info = ortops.torch._kernel.op_info(op.onnx_op)
    inputs = {a.node_name: a for a in op.args if a.is_input}
    attributes = {a.node_name: a for a in op.args if not a.is_input}
    assert set(inputs) == {i.name for i in info.inputs}, "every node input is one tensor argument"
    assert set(attributes) == {a.name for a in info.attributes}, "every node attribute is one argument"
    for spec in info.inputs:
        assert (inputs[spec.name].type == _op.Tensors) == spec.variadic, spec.name
    for spec in info.attributes:
        assert _manifest_type(attributes[spec.name]) == spec.type, spec.name
    schema = op.torch_op._schema
    assert [a.name for a in schema.arguments] == [a.name for a in op.args]
    assert len(schema.returns) == len(info.outputs)


@pytest.mark.parametrize("name", list(DECLARED))
def test_public_defaults_are_the_nodes(name: str) -> None:
    """A default of the public function is the node attribute's default (so a node written
    without the attribute computes what the Python call computes)."""
    op = DECLARED[name]
    info = ortops.torch._kernel.op_info(op.onnx_op)
    defaults = {a.name: a.default for a in info.attributes}
    by_name = {a.name: a for a in op.args}
    for param in inspect.signature(op.function).parameters.values():
        arg = by_name.get(param.name)
        if param.default is inspect.Parameter.empty or arg is None or arg.is_input:
            continue
        if isinstance(param.default, str) and arg.type is not str:
            continue  # a name the public function maps to the attribute's number (method="linear")
        expected, got = defaults[arg.node_name], param.default
        if arg.type in (list[int], list[float]):  # "1,1"; the public function may take one int for both
            values = [] if expected == "[]" else [arg.type.__args__[0](v) for v in expected.split(",")]
            got = list(got) if isinstance(got, (list, tuple)) else [got] * len(values)
            assert got == values, param.name
            continue
        got = int(got) if isinstance(got, bool) else got
        assert type(got)(expected) == got, f"{param.name}: {param.default!r} against the node's {expected!r}"


@pytest.mark.parametrize("name", list(DECLARED))
def test_public_docstring_lists_every_argument(name: str) -> None:
    function = DECLARED[name].function
    doc = inspect.cleandoc(function.__doc__ or "") + "\n\n"
    start = doc.index("Args:")
    section = doc[start : doc.index("\n\n", start)]
    listed = re.findall(r"^    (\w+): ", section, flags=re.MULTILINE)
    assert listed == list(inspect.signature(function).parameters)


def _valid(annotation: object) -> object:
    """A value of the annotated type (for the arguments other than the one under test)."""
    origin, members = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, getattr(types, "UnionType", typing.Union)):
        return _valid(members[0])
    if origin is tuple:
        return tuple(_valid(m) for m in members)
    if origin is not None:  # list, Sequence
        return [_valid(members[0])]
    return {torch.Tensor: torch.zeros(1), float: 0.5, int: 1, bool: True, str: "avg"}[annotation]


def _wrong(annotation: object) -> object:
    """A value of another type: a number in a string, or a float where a string is allowed."""
    return 0.5 if str in (typing.get_args(annotation) or (annotation,)) else "0.5"


def _cases() -> list[tuple[str, str]]:
    return [(name, param) for name, op in DECLARED.items() for param in inspect.signature(op.function).parameters]


@pytest.mark.parametrize(("name", "param"), _cases())
def test_public_function_refuses_wrong_python_types(name: str, param: str) -> None:
    function = DECLARED[name].function
    hints = {
        p: _op._annotation(v.annotation, inspect.unwrap(function))
        for p, v in inspect.signature(function).parameters.items()
    }
    args = {p: _valid(hint) for p, hint in hints.items()}
    args[param] = _wrong(hints[param])
    with pytest.raises(ValueError, match=rf"^ortops\.{name}: {param} must be .*, got "):
        function(**args)


def test_a_threshold_in_a_string_is_refused() -> None:
    """The issue's example: before, float("0.5") made it a threshold."""
    boxes, scores = torch.tensor([[0.0, 0, 2, 2], [1, 1, 3, 3]]), torch.tensor([0.9, 0.8])
    with pytest.raises(ValueError, match=r"^ortops\.nms: iou_threshold must be a float, got str '0\.5'$"):
        ortops.torch.nms(boxes, scores, "0.5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^ortops\.nms: offset must be an int, got bool True$"):
        ortops.torch.nms(boxes, scores, 0.5, True)
    # Numbers of other Python and numpy types are numbers.
    expected = ortops.torch.nms(boxes, scores, 0.5)
    torch.testing.assert_close(ortops.torch.nms(boxes, scores, np.float32(0.5), np.int64(0)), expected)
    torch.testing.assert_close(ortops.torch.nms(boxes, scores, 1, 0), torch.tensor([0, 1]))
