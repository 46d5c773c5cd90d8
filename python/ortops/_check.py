"""Checking an ONNX model's custom nodes against the ops the library registers."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import onnx

    from ortops import AttributeInfo, OpInfo

#: Domains that ONNX Runtime implements itself: nodes there are not ortops' business. They
#: are ONNX ("" and its alias "ai.onnx"), ONNX-ML, the two ONNX training domains, and ONNX
#: Runtime's contrib / internal domains.
STANDARD_DOMAINS: frozenset[str] = frozenset(
    {
        "",
        "ai.onnx",
        "ai.onnx.ml",
        "ai.onnx.training",
        "ai.onnx.preview.training",
        "com.microsoft",
        "com.microsoft.experimental",
        "com.microsoft.nchwc",
        "com.microsoft.dml",
        "com.ms.internal.nhwc",
        "org.pytorch.aten",
    }
)

#: The values of ``ModelProblem.kind``.
PROBLEM_KINDS: tuple[str, ...] = (
    "unknown-op",
    "unknown-attribute",
    "attribute-type",
    "missing-attribute",
    "input-type",
    "opset",
)

ModelLike = Union[str, "os.PathLike[str]", bytes, "onnx.ModelProto"]


@dataclass(frozen=True)
class ModelProblem:
    """One thing about one custom node that keeps the model from running as intended.

    ``node`` is the node's name, or ``#index`` (its position in its graph) when it has none;
    nodes in subgraphs and model-local functions are prefixed with the path to them
    (``outer_node/then_branch/#0``). ``kind`` is one of the kinds that ``check_model`` lists.
    """

    node: str
    domain: str
    op_type: str
    kind: str
    message: str


# ONNX AttributeProto.AttributeType values, by the manifest's names.
_ATTRIBUTE_TYPES = {"float": 1, "int": 2, "string": 3, "floats": 6, "ints": 7}
_ATTRIBUTE_TYPE_NAMES = {
    1: "float",
    2: "int",
    3: "string",
    4: "tensor",
    5: "graph",
    6: "floats",
    7: "ints",
    8: "strings",
    9: "tensors",
    10: "graphs",
    11: "sparse_tensor",
    12: "sparse_tensors",
    13: "type_proto",
    14: "type_protos",
}

# ONNX TensorProto.DataType values, by the names the manifest (and numpy) use.
_ELEMENT_TYPE_NAMES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
}


def import_onnx(needed_by: str) -> ModuleType:
    """The onnx module; ``needed_by`` names the function that needs it in the error that says
    how to install it (onnx is an optional dependency of ortops)."""
    try:
        import onnx
    except ModuleNotFoundError as e:
        if e.name != "onnx":
            raise
        raise ModuleNotFoundError(
            f'{needed_by} needs the onnx package, which is not installed: pip install "ortops[onnx]"', name="onnx"
        ) from None
    return onnx


def _element_type_name(elem_type: int) -> str:
    return _ELEMENT_TYPE_NAMES.get(elem_type, f"ONNX element type {elem_type}")


def load_model(model: ModelLike) -> onnx.ModelProto:
    """``model`` as an ``onnx.ModelProto``: a path or serialized bytes are parsed (external
    weights are not read), a ``ModelProto`` is returned as it is.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for anything that is
    not an ONNX model.
    """
    onnx = import_onnx("ortops.check_model")

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        where = "the bytes"
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file")
        if os.path.isdir(path):
            raise ValueError(f"{path} is a directory, not an ONNX model")
        with open(path, "rb") as f:
            data = f.read()
        where = path
    else:
        raise TypeError(f"check_model takes a path, bytes or onnx.ModelProto, not {type(model).__name__}")
    if not data:
        raise ValueError(f"{where} is not an ONNX model: it is empty")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError, whose module differs between versions
        raise ValueError(f"{where} is not an ONNX model: {e}") from e
    # Protobuf parses many byte strings that are not models; a model has an IR version.
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise ValueError(f"{where} is not an ONNX model: it has no IR version or no graph")
    return proto


def _known_ops() -> dict[tuple[str, str], list[OpInfo]]:
    from ortops import ops

    table: dict[tuple[str, str], list[OpInfo]] = {}
    for op in ops():
        table.setdefault((op.domain, op.name), []).append(op)
    return table


def _value_types(graph: onnx.GraphProto) -> dict[str, int]:
    """Element types of the tensors of ``graph`` whose type is known."""
    types: dict[str, int] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types[value.name] = value.type.tensor_type.elem_type
    for tensor in graph.initializer:
        types[tensor.name] = tensor.data_type
    for sparse in graph.sparse_initializer:
        types[sparse.values.name] = sparse.values.data_type
    return types


def _node_label(node: onnx.NodeProto, index: int, prefix: str) -> str:
    return prefix + (node.name if node.name else f"#{index}")


class _Checker:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.known = _known_ops()
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.problems: list[ModelProblem] = []

    def graph(self, graph: onnx.GraphProto, opsets: Mapping[str, int], outer: Mapping[str, int], prefix: str) -> None:
        types = {**outer, **_value_types(graph)}
        self.nodes(graph.node, opsets, types, prefix)

    def nodes(
        self, nodes: Iterable[onnx.NodeProto], opsets: Mapping[str, int], types: Mapping[str, int], prefix: str
    ) -> None:
        for index, node in enumerate(nodes):
            label = _node_label(node, index, prefix)
            if node.domain not in STANDARD_DOMAINS and (node.domain, node.op_type) not in self.functions:
                self.custom_node(node, label, opsets, types)
            for attribute in node.attribute:
                for n, sub in enumerate(_subgraphs(attribute)):
                    name = attribute.name if len(attribute.graphs) <= 1 else f"{attribute.name}[{n}]"
                    self.graph(sub, opsets, types, f"{label}/{name}/")

    def add(self, node: onnx.NodeProto, label: str, kind: str, message: str) -> None:
        self.problems.append(ModelProblem(label, node.domain, node.op_type, kind, message))

    def custom_node(
        self, node: onnx.NodeProto, label: str, opsets: Mapping[str, int], types: Mapping[str, int]
    ) -> None:
        qualified = f"{node.domain}::{node.op_type}"
        rows = self.known.get((node.domain, node.op_type))
        if not rows:
            self.add(node, label, "unknown-op", self.unknown_op_message(node, label))
            return
        op = rows[0]
        version = opsets.get(node.domain)
        if version is not None and version < op.since_version:
            self.add(
                node,
                label,
                "opset",
                f"Node {label} ({qualified}): the model imports opset {version} of domain '{node.domain}', "
                f"but {qualified} exists from opset {op.since_version} on.",
            )
        specs = {a.name: a for a in op.attributes}
        given = set()
        for attribute in node.attribute:
            given.add(attribute.name)
            spec = specs.get(attribute.name)
            if spec is None:
                known = ", ".join(specs) if specs else "none"
                self.add(
                    node,
                    label,
                    "unknown-attribute",
                    f"Node {label} ({qualified}) has attribute '{attribute.name}', which {qualified} does not have "
                    f"(its attributes: {known}); the op never reads it.",
                )
                continue
            if attribute.ref_attr_name:
                continue  # inside a function, bound by the caller: type known only there
            outcome = _wrong_type_outcome(spec, attribute)
            if outcome is not None:
                actual = attribute.type
                actual_name = _ATTRIBUTE_TYPE_NAMES.get(actual, f"type {actual}")
                if actual == 0:  # UNDEFINED: old writers left the type out
                    actual_name = "an untyped attribute"
                self.add(
                    node,
                    label,
                    "attribute-type",
                    f"Node {label} ({qualified}): attribute '{attribute.name}' must be {spec.type}, "
                    f"but the model stores it as {actual_name}; {outcome}",
                )
        for spec in op.attributes:
            if spec.default is None and spec.name not in given:
                self.add(
                    node,
                    label,
                    "missing-attribute",
                    f"Node {label} ({qualified}) lacks attribute '{spec.name}' ({spec.type}), which {qualified} "
                    "requires.",
                )
        # Inputs that accept several element types share one type parameter (as in the ONNX
        # schemas of ortops._schemas): they must all have the same type.
        multi = [tuple(p.types) for p in (*op.inputs, *op.outputs) if len(p.types) > 1]
        shared: tuple[str, int, str] | None = None  # (input name, position, type) of the first
        for position, (name, spec_input) in enumerate(zip(node.input, op.node_inputs(len(node.input)))):
            if not name or name not in types:
                continue
            actual = _element_type_name(types[name])
            if actual not in spec_input.types:
                accepted = " or ".join(spec_input.types)
                self.add(
                    node,
                    label,
                    "input-type",
                    f"Node {label} ({qualified}): input {position} '{spec_input.name}' (tensor '{name}') is {actual}, "
                    f"but {qualified} accepts {accepted}.",
                )
            elif multi and tuple(spec_input.types) == multi[0]:
                if shared is None:
                    shared = (spec_input.name, position, actual)
                elif shared[2] != actual:
                    self.add(
                        node,
                        label,
                        "input-type",
                        f"Node {label} ({qualified}): input {position} '{spec_input.name}' (tensor '{name}') is "
                        f"{actual}, but input {shared[1]} '{shared[0]}' is {shared[2]}; {qualified} needs both of the "
                        "same type.",
                    )

    def unknown_op_message(self, node: onnx.NodeProto, label: str) -> str:
        qualified = f"{node.domain}::{node.op_type}"
        from ortops import domains

        if node.domain in domains():
            same_name = sorted(f"{d}::{n}" for d, n in self.known if n.lower() == node.op_type.lower())
            hint = f" (did you mean {', '.join(same_name)}?)" if same_name else ""
            return f"Node {label} uses {qualified}, which ortops does not implement{hint}."
        return (
            f"Node {label} uses {qualified}: domain '{node.domain}' is neither ONNX Runtime's nor one that ortops "
            f"registers ({', '.join(domains())}), so no kernel for it will be found."
        )


def _library_view(attribute: onnx.AttributeProto) -> str:
    """The type ortops' kernels see for an attribute, as ``StoredAttrType`` in
    csrc/core/kernel_io.cc finds it through ONNX Runtime's C API: the scalars and non-empty
    lists by their names; an empty list, and any type the C API has no reader for (tensor,
    graph, strings, ...), reads as an empty list."""
    kind = attribute.type
    if kind in (_ATTRIBUTE_TYPES["float"], _ATTRIBUTE_TYPES["int"], _ATTRIBUTE_TYPES["string"]):
        return _ATTRIBUTE_TYPE_NAMES[kind]
    if kind == _ATTRIBUTE_TYPES["ints"] and attribute.ints:
        return "ints"
    if kind == _ATTRIBUTE_TYPES["floats"] and attribute.floats:
        return "floats"
    return "an empty list"


def _wrong_type_outcome(spec: AttributeInfo, attribute: onnx.AttributeProto) -> str | None:
    """What happens to ``attribute`` when a session is created, where it is not simply of the
    type ``spec`` wants (None: the kernels accept it as that type). These are the rules of
    ``Attributes::CheckTypes`` (csrc/core/kernel_io.cc); test_check_model.py creates a session
    for each case and compares."""
    if attribute.type == 0:  # UNDEFINED: old writers left the type out
        return "ONNX Runtime refuses such a model when it loads it (an attribute must have a type)."
    seen = _library_view(attribute)
    if seen == spec.type:
        return None
    if seen == "an empty list" and spec.type in ("ints", "floats"):
        if attribute.type == _ATTRIBUTE_TYPES[spec.type]:
            return None  # an empty list of the right type
        return f"ortops reads it as an empty list of {spec.type}, not as the stored value."
    if spec.also_ints_of_one and seen in ("ints", "an empty list"):
        count = len(attribute.ints) if attribute.type == _ATTRIBUTE_TYPES["ints"] else 0
        if count == 1:
            return None  # an int written as a one-value list (yolov7's TensorRT NMS attributes)
        refusal = f"must be of type int, got ints holding {count} values"
    else:
        refusal = f"must be of type {spec.type}, got {seen}"
    return (
        "the session cannot be created: ortops checks attribute types when ONNX Runtime creates the session, "
        f"and fails with \"attribute '{attribute.name}' {refusal}\"."
    )


def _subgraphs(attribute: onnx.AttributeProto) -> Iterator[onnx.GraphProto]:
    if attribute.HasField("g"):
        yield attribute.g
    yield from attribute.graphs


def iter_nodes(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.NodeProto, int | None, bool]]:
    """Every node of ``model``, subgraphs and model-local functions included, as
    (label, node, opset version the model imports for the node's domain or None,
    whether the node calls a model-local function), in graph order."""
    functions = {(f.domain, f.name) for f in model.functions}
    opsets = {o.domain: o.version for o in model.opset_import}

    def walk(
        nodes: Iterable[onnx.NodeProto], versions: Mapping[str, int], prefix: str
    ) -> Iterator[tuple[str, onnx.NodeProto, int | None, bool]]:
        for index, node in enumerate(nodes):
            label = _node_label(node, index, prefix)
            yield label, node, versions.get(node.domain), (node.domain, node.op_type) in functions
            for attribute in node.attribute:
                for n, sub in enumerate(_subgraphs(attribute)):
                    name = attribute.name if len(attribute.graphs) <= 1 else f"{attribute.name}[{n}]"
                    yield from walk(sub.node, versions, f"{label}/{name}/")

    yield from walk(model.graph.node, opsets, "")
    for function in model.functions:
        versions = {**opsets, **{o.domain: o.version for o in function.opset_import}}
        yield from walk(function.node, versions, f"{function.domain}::{function.name}/")


def check_model(model: ModelLike) -> list[ModelProblem]:
    """Checks every node of ``model`` outside ONNX Runtime's own domains against ``ortops.ops()``.

    ``model`` is a path, serialized bytes or an ``onnx.ModelProto`` (this function needs the
    ``onnx`` package). Subgraphs (If, Loop, Scan bodies) and model-local functions are
    checked too; calls of model-local functions are not custom ops. Returns the problems
    found, in graph order (an empty list: every custom node is one ortops runs):

    - ``unknown-op``: an op in a custom domain that ortops does not register (e.g. a
      TensorRT plugin such as ``TRT::PyramidROIAlign_TRT``, or a misspelled op name);
    - ``unknown-attribute``: an attribute the op does not have. ONNX Runtime gives a custom
      op no way to list a node's attribute names, so the kernel cannot notice one; this is
      the only place where a misspelled ``iou_treshold`` (whose value the op would silently
      replace by the default) is caught;
    - ``attribute-type``: an attribute of the wrong ONNX type (``iou_threshold`` stored as an
      int or a string); ortops' kernels check attribute types, so creating a session fails
      (the message quotes the kernel's error);
    - ``missing-attribute``: a required attribute (one without default) is absent;
    - ``input-type``: an input whose element type the op does not accept, where the type
      is known from graph inputs, initializers or value_info (after a non-strict
      ``onnx.shape_inference.infer_shapes``, whose failures are ignored);
    - ``opset``: the model imports the op's domain at a version below the op's
      ``since_version``.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for bytes or a file
    that are not an ONNX model.
    """
    onnx = import_onnx("ortops.check_model")

    proto = load_model(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False)
    except Exception:  # models over 2 GB, schemas that throw: check with the types stored
        inferred = proto
    checker = _Checker(inferred)
    opsets = {o.domain: o.version for o in inferred.opset_import}
    checker.graph(inferred.graph, opsets, {}, "")
    for function in inferred.functions:
        function_opsets = {**opsets, **{o.domain: o.version for o in function.opset_import}}
        checker.nodes(function.node, function_opsets, {}, f"{function.domain}::{function.name}/")
    return checker.problems
