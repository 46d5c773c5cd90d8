"""ONNX schemas for the ops in the manifest, so that onnx and onnxscript know them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from ortops import OpInfo

_ATTRIBUTE_TYPES = {"int": "INT", "float": "FLOAT", "string": "STRING", "ints": "INTS"}


def _formal_parameters(params, type_param: tuple[str, ...] | None):  # noqa: ANN001, ANN202
    import onnx

    result = []
    for p in params:
        # Every input that accepts the kernel's several element types shares one type
        # parameter "T"; fixed-type ones (int64 indices) name their type directly.
        type_str = "T" if len(p.types) > 1 and tuple(p.types) == type_param else _onnx_type(p.types[0])
        option = (
            onnx.defs.OpSchema.FormalParameterOption.Optional
            if p.optional
            else onnx.defs.OpSchema.FormalParameterOption.Single
        )
        result.append(onnx.defs.OpSchema.FormalParameter(p.name, type_str, p.doc, param_option=option))
    return result


def _onnx_type(name: str) -> str:
    return {"float32": "tensor(float)", "float64": "tensor(double)", "int64": "tensor(int64)"}[name]


def make_schema(op: OpInfo) -> onnx.defs.OpSchema:
    """The ``onnx.defs.OpSchema`` of one op from the manifest."""
    import onnx

    multi = [tuple(p.types) for p in (*op.inputs, *op.outputs) if len(p.types) > 1]
    type_param = multi[0] if multi else None
    constraints = [("T", [_onnx_type(t) for t in type_param], "element type")] if type_param else []
    attributes = [
        onnx.defs.OpSchema.Attribute(
            a.name, getattr(onnx.defs.OpSchema.AttrType, _ATTRIBUTE_TYPES[a.type]), a.doc, required=a.default is None
        )
        for a in op.attributes
    ]
    return onnx.defs.OpSchema(
        op.name,
        op.domain,
        op.since_version,
        op.doc,
        inputs=_formal_parameters(op.inputs, type_param),
        outputs=_formal_parameters(op.outputs, type_param),
        type_constraints=constraints,
        attributes=attributes,
    )


def register_onnx_schemas() -> None:
    """Registers every op of the library with ``onnx.defs`` (once; later calls do nothing).

    After this, ``onnx.checker`` and onnxscript (the ``dynamo=True`` exporter) know the ops.
    """
    import onnx

    from ortops import ops

    for op in ops():
        if not onnx.defs.has(op.name, op.since_version, op.domain):
            onnx.defs.register_schema(make_schema(op))
