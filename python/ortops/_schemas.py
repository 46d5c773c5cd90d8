"""ONNX schemas for the ops in the manifest, so that onnx and onnxscript know them."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ortops._check import import_onnx

if TYPE_CHECKING:
    import onnx

    from ortops import OpInfo

_ATTRIBUTE_TYPES = {"int": "INT", "float": "FLOAT", "string": "STRING", "ints": "INTS", "floats": "FLOATS"}


def _formal_parameters(params, type_param: tuple[str, ...] | None):  # noqa: ANN001, ANN202
    import onnx

    result = []
    for p in params:
        # Every input that accepts the kernel's several element types shares one type
        # parameter "T"; fixed-type ones (int64 indices) name their type directly.
        type_str = "T" if len(p.types) > 1 and tuple(p.types) == type_param else _onnx_type(p.types[0])
        options = onnx.defs.OpSchema.FormalParameterOption
        # A variadic input takes one or more values of one element type, as the kernel
        # registers it (homogeneous, min arity 1).
        option = options.Variadic if p.variadic else options.Optional if p.optional else options.Single
        result.append(onnx.defs.OpSchema.FormalParameter(p.name, type_str, p.doc, param_option=option))
    return result


def _onnx_type(name: str) -> str:
    return {
        "float32": "tensor(float)",
        "float64": "tensor(double)",
        "float16": "tensor(float16)",
        "int64": "tensor(int64)",
        "int32": "tensor(int32)",
    }[name]


# An input or output doc starts with its shape in backticks: `[R, C, output_height, output_width]`.
_SHAPE = re.compile(r"^`\[([^\]]*)\]`")
_SAME_SHAPE = "same shape"


def _dims(doc: str) -> list[str] | None:
    """The documented shape's dimensions (``["R", "C", "output_height", ...]``), or None."""
    match = _SHAPE.match(doc)
    return [d.strip() for d in match.group(1).split(",")] if match else None


def _is_variadic(token: str) -> bool:
    """A token that stands for any number of dims: "..." or a named run such as "A..."."""
    return token.endswith("...")


def shape_rule(op: OpInfo, output: int) -> list[str] | None:
    """How output ``output``'s shape follows from the inputs: its documented dims, or None for
    "same shape as the first input". Every output of every op has one (tests check this).

    A dim is a number, an attribute name, a run of dims ("..." or a named one such as "A...":
    the dims it stands for in the input documented with it that binds it first), a symbol bound
    by an input's documented shape, or a product of those ("H * D"); any other symbol (NMS's
    K) is data-dependent.
    """
    doc = op.outputs[output].doc
    if doc.startswith(_SAME_SHAPE):
        return None
    dims = _dims(doc)
    if dims is None:
        raise ValueError(f"{op.qualified_name}: output {op.outputs[output].name} documents no shape")
    return dims


def bind_symbols(
    documented_shapes: Sequence[list[str] | None], shapes: Sequence[Sequence[Any] | None], known: Callable[[Any], bool]
) -> dict[str, Any]:
    """Each symbol of the inputs' documented shapes (their ``_dims``) bound to the dim it has
    in this node (a run, "..." or a named one such as "A...", to the list of dims it stands
    for); dims that are not ``known`` stay unbound. ``shapes`` are the node's inputs' dims
    (None: rank unknown): ONNX dims in a schema's inference, torch sizes for ``ortops.torch``.

    A symbol that several inputs document is bound by the first input that can bind it: an
    input whose documented shape holds two runs ("[A..., N, ...]") binds them once another
    input has bound all but one ("[A..., K]"), so inputs are visited until nothing changes.
    """
    symbols: dict[str, Any] = {}
    pending = [
        (list(documented), list(dims))
        for documented, dims in zip(documented_shapes, shapes)
        if documented is not None and dims is not None
    ]
    while pending:
        ready = [item for item in pending if sum(1 for t in item[0] if _is_variadic(t) and t not in symbols) <= 1]
        if not ready:
            break
        for item in ready:
            pending.remove(item)
            _bind_input(*item, symbols, known)
    return symbols


def _bind_input(documented: list[str], dims: list[Any], symbols: dict[str, Any], known: Callable[[Any], bool]) -> None:
    """Binds the symbols of one input's documented shape (at most one of its runs unbound)."""
    unbound = [t for t in documented if _is_variadic(t) and t not in symbols]
    fixed = sum(len(symbols[t]) if _is_variadic(t) else 1 for t in documented if t not in unbound)
    count = len(dims) - fixed  # the dims the unbound run stands for
    if count < 0 or (not unbound and count != 0):
        return  # the rank differs from the documented one: the kernel reports it
    at = 0
    for token in documented:
        if _is_variadic(token):
            length = count if token in unbound else len(symbols[token])
            symbols.setdefault(token, dims[at : at + length])
            at += length
            continue
        dim = dims[at]
        at += 1
        if token.isidentifier() and known(dim):
            symbols.setdefault(token, dim)


def _known_dim(dim: Any) -> bool:
    return dim.HasField("dim_value") or dim.HasField("dim_param")


def _known_value(name: str, symbols: dict[str, Any], attribute: Callable[[str], int | None]) -> int | None:
    """A number, an int attribute's value, or a bound symbol's known size; None when unknown."""
    if name.isdigit():
        return int(name)
    value = attribute(name)
    if value is not None:
        return value
    dim = symbols.get(name)
    return dim.dim_value if dim is not None and dim.HasField("dim_value") else None


def _output_dims(rule: list[str], symbols: dict[str, Any], attribute: Callable[[str], int | None]) -> list | None:
    """The dims of an output whose shape rule is ``rule``, or None when its rank is unknown
    (a "..." whose input has no shape). An unbound symbol (NMS's K) is an unknown dim."""
    import onnx

    dims = []
    for name in rule:
        if _is_variadic(name):
            if name not in symbols:
                return None
            dims.extend(symbols[name])
            continue
        dim = onnx.TensorShapeProto.Dimension()
        if "*" in name:  # a product: known when every factor is
            factors = [_known_value(f.strip(), symbols, attribute) for f in name.split("*")]
            if all(f is not None for f in factors):
                dim.dim_value = math.prod(factors)
            dims.append(dim)
            continue
        value = int(name) if name.isdigit() else attribute(name)
        if value is not None:
            dim.dim_value = value
        elif name in symbols:
            dim.CopyFrom(symbols[name])
        dims.append(dim)
    return dims


def _infer(op: OpInfo) -> Callable[[Any], None]:
    import numpy as np
    import onnx

    rules = [shape_rule(op, i) for i in range(len(op.outputs))]
    attribute_defaults = {a.name: a.default for a in op.attributes if a.type == "int"}
    type_param = next((i for i, p in enumerate(op.inputs) if len(p.types) > 1), None)

    def infer(ctx: Any) -> None:
        shapes = []  # per input: its TensorShapeProto dims, or None if unknown
        for i in range(len(op.node_inputs(ctx.get_num_inputs()))):
            t = ctx.get_input_type(i) if ctx.has_input(i) else None
            known = t is not None and t.HasField("tensor_type") and t.tensor_type.HasField("shape")
            shapes.append(list(t.tensor_type.shape.dim) if known else None)
        symbols = bind_symbols([_dims(spec.doc) for spec in op.node_inputs(len(shapes))], shapes, _known_dim)

        def attribute(name: str) -> int | None:
            """An int attribute's value (the schema's default when absent); None: not an attribute."""
            if name not in attribute_defaults:
                return None
            try:
                return ctx.get_attribute(name).i
            except Exception:  # absent: the schema's default
                default = attribute_defaults[name]
                return int(default) if default else None

        # A node may leave out optional trailing outputs (TRTBatchedNMS's index).
        for index, (spec, rule) in enumerate(zip(op.outputs[: ctx.get_num_outputs()], rules)):
            out = onnx.TypeProto()
            if len(spec.types) > 1 and type_param is not None:
                source = ctx.get_input_type(type_param)
                out.tensor_type.elem_type = source.tensor_type.elem_type if source is not None else 0
            else:
                out.tensor_type.elem_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(spec.types[0]))
            dims = (shapes[0] if shapes else None) if rule is None else _output_dims(rule, symbols, attribute)
            if dims is not None:
                out.tensor_type.shape.SetInParent()  # rank 0 has a shape too: an empty one
                out.tensor_type.shape.dim.extend(dims)
            ctx.set_output_type(index, out)

    return infer


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
    schema = onnx.defs.OpSchema(
        op.name,
        op.domain,
        op.since_version,
        op.doc,
        inputs=_formal_parameters(op.inputs, type_param),
        outputs=_formal_parameters(op.outputs, type_param),
        type_constraints=constraints,
        attributes=attributes,
    )
    if hasattr(schema, "set_type_and_shape_inference_function"):  # onnx 1.17 on
        schema.set_type_and_shape_inference_function(_infer(op))
    return schema


def register_onnx_schemas() -> None:
    """Registers every op of the library with ``onnx.defs`` (once; later calls do nothing).

    After this, ``onnx.checker``, ``onnx.shape_inference`` (strict mode included: every op
    infers its output types, and its output shapes where they follow from the input shapes
    and attributes) and onnxscript (the ``dynamo=True`` exporter) know the ops.
    ``ortops.torch`` calls it on import. Needs onnx 1.16 or newer; inference needs 1.17.
    """
    from ortops import ops

    onnx = import_onnx("ortops.register_onnx_schemas")

    for op in ops():
        if not onnx.defs.has(op.name, op.since_version, op.domain):
            onnx.defs.register_schema(make_schema(op))
