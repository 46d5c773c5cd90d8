"""Checking an ONNX model's custom nodes against the ops the library registers."""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import onnx

    from ortops import OpInfo

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
    "attribute-value",
    "node-refused",
    "input-type",
    "opset",
)

#: The values of ``ModelProblem.severity``: "error" where ONNX Runtime cannot create a session
#: of the model, "warning" where it can but the node does not run as the model says.
SEVERITIES: tuple[str, ...] = ("error", "warning")

ModelLike = Union[str, "os.PathLike[str]", bytes, "onnx.ModelProto"]


@dataclass(frozen=True)
class ModelProblem:
    """One thing about one custom node that keeps the model from running as intended.

    ``node`` is the node's name, or ``#index`` (its position in its graph) when it has none;
    nodes in subgraphs and model-local functions are prefixed with the path to them
    (``outer_node/then_branch/#0``). ``kind`` is one of the kinds that ``check_model`` lists; ``severity``
    is "error" when ONNX Runtime cannot create a session of the model because of it, and
    "warning" when the session runs but the node does not do what the model says (an
    attribute the op does not have, which it ignores).
    """

    node: str
    domain: str
    op_type: str
    kind: str
    message: str
    severity: str = "error"


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
_ELEMENT_TYPES = {name: value for value, name in _ELEMENT_TYPE_NAMES.items()}


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


@dataclass
class _Probe:
    """One node model that ONNX Runtime is asked to create a session of, and the nodes of the
    model whose attributes (and input element types) it stands for."""

    model: bytes
    element_types: list[int]
    nodes: list[tuple[onnx.NodeProto, str]] = field(default_factory=list)  # (node, label)


# The name of a probe's node: its error names it, and each node the probe stands for has its
# own name put in its place.
_PROBE_NODE = "ortops-check-model-probe"


class _Checker:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.known = _known_ops()
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.problems: list[ModelProblem] = []
        # Identical (op, attributes, input types) combinations share one session: a detector
        # holds dozens of like nodes.
        self.probes: dict[bytes, _Probe] = {}
        self.order: dict[str, int] = {}  # each node's label: its place in graph order

    def graph(self, graph: onnx.GraphProto, opsets: Mapping[str, int], outer: Mapping[str, int], prefix: str) -> None:
        types = {**outer, **_value_types(graph)}
        self.nodes(graph.node, opsets, types, prefix)

    def nodes(
        self, nodes: Iterable[onnx.NodeProto], opsets: Mapping[str, int], types: Mapping[str, int], prefix: str
    ) -> None:
        for index, node in enumerate(nodes):
            label = _node_label(node, index, prefix)
            self.order.setdefault(label, len(self.order))
            if node.domain not in STANDARD_DOMAINS and (node.domain, node.op_type) not in self.functions:
                self.custom_node(node, label, opsets, types)
            for attribute in node.attribute:
                for n, sub in enumerate(_subgraphs(attribute)):
                    name = attribute.name if len(attribute.graphs) <= 1 else f"{attribute.name}[{n}]"
                    self.graph(sub, opsets, types, f"{label}/{name}/")

    def add(self, node: onnx.NodeProto, label: str, kind: str, message: str, severity: str = "error") -> None:
        self.problems.append(ModelProblem(label, node.domain, node.op_type, kind, message, severity))

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
        self.unknown_attributes(node, label, op)
        element_types = self.input_types(node, label, op, types)
        # An attribute bound by a function's caller has its value only there.
        if not any(attribute.ref_attr_name for attribute in node.attribute):
            probe = _probe_model(node, element_types)
            self.probes.setdefault(probe, _Probe(probe, element_types)).nodes.append((node, label))

    def unknown_attributes(self, node: onnx.NodeProto, label: str, op: OpInfo) -> None:
        """Attributes the op does not have. ONNX Runtime gives a custom op no way to list a
        node's attribute names, so the library cannot see them: it runs the op as if they were
        absent, and only this check can tell (a misspelled ``iou_treshold``)."""
        qualified = f"{node.domain}::{node.op_type}"
        specs = {a.name: a for a in op.attributes}
        given = {attribute.name for attribute in node.attribute}
        for attribute in node.attribute:
            if attribute.name in specs:
                continue
            known = ", ".join(specs) if specs else "none"
            unset = [name for name in specs if name not in given]
            close = difflib.get_close_matches(attribute.name, unset, n=1)
            if close:
                spec = specs[close[0]]
                if spec.default is None:
                    default = "is required, so the session fails"
                else:
                    # A string's default is quoted ("" is how the schema writes an empty one).
                    quoted = spec.type == "string" and not spec.default.startswith('"')
                    shown = f'"{spec.default}"' if quoted else spec.default
                    default = f"keeps its default {shown}"
                effect = f"; did you mean '{spec.name}'? As the node is written, '{spec.name}' {default}"
            else:
                effect = "; the op runs as if it were absent"
            self.add(
                node,
                label,
                "unknown-attribute",
                f"Node {label} ({qualified}) has attribute '{attribute.name}', which {qualified} does not have "
                f"(its attributes: {known}): ortops ignores it{effect}.",
                severity="warning",
            )

    def input_types(self, node: onnx.NodeProto, label: str, op: OpInfo, types: Mapping[str, int]) -> list[int]:
        """Checks the element types of the node's inputs that the model makes known, and returns
        the element type of each input for the node's probe: the known one where the op
        accepts it, else one that the op accepts (the input-type problem is reported here, so
        that the probe judges the attributes alone)."""
        qualified = f"{node.domain}::{node.op_type}"
        specs = op.node_inputs(len(node.input))
        # Inputs that accept several element types share one type parameter (as in the ONNX
        # schemas of ortops._schemas): they must all have the same type.
        multi = [tuple(p.types) for p in (*op.inputs, *op.outputs) if len(p.types) > 1]
        shared: tuple[str, int, str] | None = None  # (input name, position, type) of the first
        for position, (name, spec_input) in enumerate(zip(node.input, specs)):
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
        chosen = []
        for name, spec_input in zip(node.input, specs):
            if multi and tuple(spec_input.types) == multi[0]:
                chosen.append(shared[2] if shared is not None else spec_input.types[0])
            elif name in types and _element_type_name(types[name]) in spec_input.types:
                chosen.append(_element_type_name(types[name]))
            else:
                chosen.append(spec_input.types[0])
        return [_ELEMENT_TYPES[t] for t in chosen]

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

    def ask_the_library(self) -> bool:
        """Creates a session of each probe with the library registered: creating the kernel
        runs the library's own attribute checks, so the session's error is the verdict on the
        nodes the probe stands for. False, with nothing checked, where no ONNX Runtime is
        installed."""
        try:
            import onnxruntime
        except ModuleNotFoundError as e:
            if e.name != "onnxruntime":
                raise
            return False
        from ortops import session_options

        options = session_options()
        options.log_severity_level = 4  # the verdict is reported here, not logged again
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL

        def session_error(model: bytes) -> str | None:
            try:
                onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
            except Exception as e:  # noqa: BLE001 - whatever ONNX Runtime raises is the verdict
                return str(e)
            return None

        for probe in self.probes.values():
            error = session_error(probe.model)
            if error is None:
                continue
            for node, label in probe.nodes:
                message = _library_message(node, error)
                if message is not None:
                    self.library_refusal(node, label, message)
                    continue
                # ONNX Runtime's own messages show the node as the model has it (its name, its
                # tensors): such a node, rare, gets a session of its own, under its own names.
                own = session_error(_probe_model(node, probe.element_types, renamed=False))
                self.add(
                    node,
                    label,
                    "node-refused",
                    f"Node {label} ({node.domain}::{node.op_type}): ONNX Runtime refuses the node: "
                    f"{_runtime_message(own or error)}",
                )
        return True

    def library_refusal(self, node: onnx.NodeProto, label: str, message: str) -> None:
        if "must be of type" in message:
            kind = "attribute-type"
        elif "is required" in message:
            kind = "missing-attribute"
        else:
            kind = "attribute-value"
        qualified = f"{node.domain}::{node.op_type}"
        self.add(node, label, kind, f"Node {label} ({qualified}): the session cannot be created: {message}")


def _probe_model(node: onnx.NodeProto, element_types: list[int], renamed: bool = True) -> bytes:
    """A model of ``node`` alone (its attributes, its inputs as graph inputs of the given
    element types), serialized: with the node and its tensors ``renamed``, the key under which
    like nodes share one session."""
    import onnx
    from onnx import helper

    probe = onnx.NodeProto()
    probe.CopyFrom(node)
    probe.ClearField("doc_string")
    if renamed:
        probe.name = _PROBE_NODE
        names: dict[str, str] = {}  # one tensor may feed two inputs
        for i, name in enumerate(probe.input):
            probe.input[i] = names.setdefault(name, f"input{i}") if name else ""
        for i, name in enumerate(probe.output):
            probe.output[i] = f"output{i}" if name else ""
    inputs = []
    for name, elem_type in zip(probe.input, element_types):
        if name and name not in {i.name for i in inputs}:  # one tensor may feed two inputs
            inputs.append(helper.make_tensor_value_info(name, elem_type, None))
    outputs = [helper.make_value_info(name, onnx.TypeProto()) for name in probe.output if name]
    graph = helper.make_graph([probe], "probe", inputs, outputs)
    # Every ortops domain is at version 1; a model importing a lower one is reported as such.
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(node.domain, 1)]
    return helper.make_model(graph, ir_version=8, opset_imports=opsets).SerializeToString(deterministic=True)


def _library_message(node: onnx.NodeProto, error: str) -> str | None:
    """The library's own message in ONNX Runtime's error about a probe, as a session of the
    model would give it for ``node`` (its name in place of the probe's), or None if the error
    is ONNX Runtime's own."""
    prefix = f"{node.domain}.{node.op_type}"
    at = error.find(f"{prefix} node '{_PROBE_NODE}': ")
    if at < 0:  # a library older than the node's name in its messages
        at = error.find(f"{prefix}: ")
    if at < 0:
        return None
    message = error[at:].splitlines()[0]
    named = f" node '{node.name}'" if node.name else ""
    return message.replace(f" node '{_PROBE_NODE}'", named, 1)


def _runtime_message(error: str) -> str:
    """ONNX Runtime's error without its "[ONNXRuntimeError] : 10 : INVALID_GRAPH : " prefix."""
    first = error.strip().splitlines()[0] if error.strip() else "no message"
    if first.startswith("[ONNXRuntimeError]"):
        first = first.split(" : ", 3)[-1]
    return first


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


@dataclass(frozen=True)
class ModelCheck:
    """What ``check_model`` finds, and whether the library judged the attributes (it
    cannot where no ONNX Runtime is installed)."""

    problems: list[ModelProblem]
    attributes_checked: bool


#: What check_model says (as a warning) and ``ortops inspect`` prints where it could not ask
#: the library about the attributes.
ATTRIBUTES_NOT_CHECKED = (
    "attribute values were not checked: that needs ONNX Runtime, which is not installed "
    '(pip install "ortops[onnxruntime]")'
)


def check_model(model: ModelLike) -> list[ModelProblem]:
    """Checks every node of ``model`` outside ONNX Runtime's own domains against ``ortops.ops()``.

    ``model`` is a path, serialized bytes or an ``onnx.ModelProto`` (this function needs the
    ``onnx`` package). Subgraphs (If, Loop, Scan bodies) and model-local functions are
    checked too; calls of model-local functions are not custom ops. Returns the problems
    found, in graph order (an empty list: every custom node is one ortops runs as written):

    - ``unknown-op``: an op in a custom domain that ortops does not register (e.g. a
      TensorRT plugin such as ``TRT::PyramidROIAlign_TRT``, or a misspelled op name);
    - ``unknown-attribute`` (a warning): an attribute the op does not have. ONNX Runtime gives
      a custom op no way to list a node's attribute names, so the kernel cannot notice one and
      runs as if it were absent; this is the only place where a misspelled ``iou_treshold``
      (whose value the op silently replaces by the default) is caught;
    - ``attribute-type``, ``missing-attribute``, ``attribute-value``: the library refuses the
      node's attributes (one of the wrong ONNX type, a required one absent, a value out of
      range such as a NaN threshold), so creating a session fails; the message is the
      library's own. The library is asked, not imitated: each custom node (like nodes once)
      is put alone in a model, of which a session is created with the library registered;
    - ``node-refused``: ONNX Runtime itself refuses such a node (an attribute without a type);
    - ``input-type``: an input whose element type the op does not accept, where the type
      is known from graph inputs, initializers or value_info (after a non-strict
      ``onnx.shape_inference.infer_shapes``, whose failures are ignored);
    - ``opset``: the model imports the op's domain at a version below the op's
      ``since_version``.

    Every kind but ``unknown-attribute`` is an error (``ModelProblem.severity``): ONNX Runtime
    cannot create a session of the model. Where no ONNX Runtime is installed, the library
    cannot be asked: the attributes' values and types are not checked, and a
    ``RuntimeWarning`` says so.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for bytes or a file
    that are not an ONNX model.
    """
    result = check_model_fully(model)
    if not result.attributes_checked:
        warnings.warn(f"ortops.check_model: {ATTRIBUTES_NOT_CHECKED}", RuntimeWarning, stacklevel=2)
    return result.problems


def check_model_fully(model: ModelLike) -> ModelCheck:
    """``check_model``'s problems, and whether the library judged the attributes."""
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
    checked = checker.ask_the_library()
    # The library's verdicts come last; each node's problems go back to its place in the graph.
    problems = sorted(checker.problems, key=lambda p: checker.order[p.node])
    return ModelCheck(problems, checked)
