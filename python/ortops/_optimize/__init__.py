"""``ortops optimize``: rewrite standard ONNX blocks into ortops' faster nodes, with the same results.

Built on onnxscript's pattern rewriter (``onnxscript.rewriter.pattern``) and onnx_ir, which the
``ortops[optimize]`` extra installs; nothing here is imported by ``import ortops``. A rule is a
named list of passes, each an onnxscript :class:`RewriteRule` whose ``check`` proves every
condition the rewrite needs (constant attribute values, shapes, opset semantics). A check that
finds the pattern but cannot prove a condition records a *near-miss* with its reason, so the
report says why a block was left alone. Rules live in one module each (``_group_norm``,
``_roi_align``, ``_grid_sample``, ...) and are listed in :data:`RULE_MODULES`; a new rule is a new module there.
"""

from __future__ import annotations

import contextvars
import importlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import onnx_ir as ir
    from onnxscript.rewriter import pattern

OPTIMIZE_EXTRA = 'pip install "ortops[optimize]"'

#: The modules that define rules, each with ``RULE`` (a :class:`Rule`), in the order the rules run.
RULE_MODULES: tuple[str, ...] = (
    "ortops._optimize._group_norm",
    # Before roi-align, which then rewrites the RoiAligns of the merges it could not prove.
    "ortops._optimize._multi_level_roi_align",
    "ortops._optimize._roi_align",
    "ortops._optimize._deformable_attention",
    "ortops._optimize._non_max_suppression",
    # After deformable-attention, which takes whole blocks of GridSamples first.
    "ortops._optimize._grid_sample",
    "ortops._optimize._add_layer_norm",
)

#: The custom domain and opset version of the nodes the rules make.
ORTOPS_DOMAIN = "ortops"


def import_rewriter() -> None:
    """Imports onnxscript (and onnx_ir); ModuleNotFoundError that says which extra installs them."""
    for name in ("onnx", "onnx_ir", "onnxscript"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            raise ModuleNotFoundError(
                f"ortops optimize needs the {name} package, which is not installed: {OPTIMIZE_EXTRA}", name=name
            ) from None


@dataclass(frozen=True)
class Rule:
    """One optimization: ``passes()`` returns the onnxscript rewrite rules to apply, one after
    the other (a fuller pattern before a partial one), each over the whole model, subgraphs
    included. ``handles`` lists, for the report and docs, which cases the rule rewrites.

    ``walk``, when given, runs after the passes on every graph (main graph, subgraphs,
    functions): a custom graph walk for a block whose size varies (one branch per level, say)
    beyond what a fixed pattern matches. It records what it does with :func:`record_rewrite`
    and :func:`record_near_miss`."""

    name: str
    summary: str
    handles: tuple[str, ...]
    passes: Callable[[], Sequence[pattern.RewriteRule]] = tuple  # none: a rule that only walks
    walk: Callable[[Any, ir.Model], None] | None = None


def one_pattern(
    target: Callable[..., Any], replacement: Callable[..., Any], condition: Callable[..., Any], name: str
) -> Callable[[], list[pattern.RewriteRule]]:
    """The ``passes`` of a rule that is one onnxscript pattern (imported when the rule runs:
    onnxscript comes with the ``ortops[optimize]`` extra)."""

    def passes() -> list[pattern.RewriteRule]:
        from onnxscript.rewriter import pattern

        return [pattern.RewriteRule(target, replacement, condition, name=name)]

    return passes


@dataclass(frozen=True)
class Rewrite:
    """One rewrite: which rule, in which graph, the nodes it replaced and the node it made (as
    the report names nodes: name and op type), and the made node's name alone."""

    rule: str
    graph: str
    replaced: tuple[str, ...]
    made: str
    made_name: str


@dataclass(frozen=True)
class NearMiss:
    """A block that a rule recognised but left as it was, and why."""

    rule: str
    graph: str
    node: str
    reason: str


@dataclass
class OptimizeReport:
    """What :func:`optimize_with_report` did: its rewrites and near-misses, in graph order."""

    rules: tuple[str, ...]
    rewrites: list[Rewrite] = field(default_factory=list)
    near_misses: list[NearMiss] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {
            "rules": list(self.rules),
            "rewrites": [
                {"rule": r.rule, "graph": r.graph, "replaced": list(r.replaced), "made": r.made} for r in self.rewrites
            ],
            "near_misses": [
                {"rule": m.rule, "graph": m.graph, "node": m.node, "reason": m.reason} for m in self.near_misses
            ],
        }

    def lines(self) -> list[str]:
        """The report as the lines ``ortops optimize`` prints."""
        out = [f"rules: {', '.join(self.rules)}", f"rewrites ({len(self.rewrites)}):"]
        for r in self.rewrites:
            where = "" if r.graph == MAIN_GRAPH else f" in {r.graph}"
            out.append(f"  [{r.rule}]{where} {', '.join(r.replaced)} -> {r.made}")
        out.append(f"near-misses, left as they were ({len(self.near_misses)}):")
        for m in self.near_misses:
            where = "" if m.graph == MAIN_GRAPH else f" in {m.graph}"
            out.append(f"  [{m.rule}]{where} {m.node}: {m.reason}")
        return out


MAIN_GRAPH = "main graph"


def _node_label(node: ir.Node) -> str:
    domain = f"{node.domain}::" if node.domain not in ("", "ai.onnx") else ""
    return f"{node.name or '(unnamed)'} ({domain}{node.op_type})"


# --- what the checks and replacements of a running rule record ------------------------------


@dataclass
class _Recorder:
    rule: str = ""
    graph_names: dict[int, str] = field(default_factory=dict)
    # (rule, graph, replaced nodes, made node), kept as objects until the names are final.
    rewrites: list[tuple[str, Any, list[ir.Node], ir.Node]] = field(default_factory=list)
    # id(subject node) -> (rule, graph, subject node, reason); the first reason is kept.
    near_misses: dict[tuple[str, int], tuple[str, Any, ir.Node, str]] = field(default_factory=dict)
    # The match whose check passed last: its replacement runs next (onnxscript calls the
    # replacement function right after a successful check, with the bindings only).
    pending: tuple[Any, list[ir.Node], dict[str, Any]] | None = None


_RECORDER: contextvars.ContextVar[_Recorder] = contextvars.ContextVar("ortops_optimize_recorder")


def refuse(context: Any, subject: ir.Node, reason: str) -> Any:
    """Records a near-miss of the running rule at ``subject`` (the block's main node) and
    returns the failed match result a ``check`` function returns."""
    from onnxscript.rewriter import pattern

    recorder = _RECORDER.get()
    key = (recorder.rule, id(subject))
    if key not in recorder.near_misses:
        recorder.near_misses[key] = (recorder.rule, context.graph_or_function, subject, reason)
    return pattern.MatchResult().fail(reason)


def accept(context: Any, **proven: Any) -> bool:
    """Called by a ``check`` function that has proven every condition, with what it found
    (attribute values, constants) for the replacement that follows: that replacement is
    recorded as a rewrite of the matched nodes."""
    _RECORDER.get().pending = (context.graph_or_function, list(context.nodes), proven)
    return True


def proven() -> dict[str, Any]:
    """What the check that passed last gave :func:`accept`, for its replacement function."""
    pending = _RECORDER.get().pending
    assert pending is not None, "a replacement ran without a check calling accept()"
    return pending[2]


def made(value: ir.Value) -> ir.Value:
    """Called by a replacement function on the output of the ortops node it made: names the
    node after the block it replaces, records the rewrite and returns ``value``."""
    recorder = _RECORDER.get()
    assert recorder.pending is not None, "a replacement ran without a check calling accept()"
    graph, replaced, _ = recorder.pending
    recorder.pending = None
    node = value.producer()
    assert node is not None
    order = {id(n): i for i, n in enumerate(graph)}
    replaced = sorted(replaced, key=lambda n: order.get(id(n), -1))
    anchor = replaced[-1].name or replaced[-1].op_type
    node.name = f"{anchor}/ortops_{node.op_type}"
    recorder.rewrites.append((recorder.rule, graph, replaced, node))
    return value


def record_rewrite(graph: Any, replaced: Sequence[ir.Node], node: ir.Node) -> None:
    """Records, for a rule's ``walk``, that ``node`` (already in ``graph``) replaced the nodes
    ``replaced``; names ``node`` after the last of them, as :func:`made` does."""
    recorder = _RECORDER.get()
    order = {id(n): i for i, n in enumerate(graph)}
    ordered = sorted(replaced, key=lambda n: order.get(id(n), -1))
    anchor = ordered[-1].name or ordered[-1].op_type
    node.name = f"{anchor}/ortops_{node.op_type}"
    recorder.rewrites.append((recorder.rule, graph, ordered, node))


def record_near_miss(graph: Any, subject: ir.Node, reason: str) -> None:
    """Records, for a rule's ``walk``, a block at ``subject`` left alone for ``reason``."""
    recorder = _RECORDER.get()
    key = (recorder.rule, id(subject))
    if key not in recorder.near_misses:
        recorder.near_misses[key] = (recorder.rule, graph, subject, reason)


# --- facts the checks prove -------------------------------------------------------------------


def constant(value: ir.Value | None) -> np.ndarray | None:
    """The value's contents when the model fixes them (a Constant node's output, or an
    initializer that is not also a graph input, which a caller could override); else None."""
    if value is None or value.is_graph_input():
        return None
    producer = value.producer()
    if producer is not None and not (producer.op_type == "Constant" and producer.domain in ("", "ai.onnx")):
        return None
    tensor = value.const_value
    if tensor is None:
        return None
    return tensor.numpy()


def static_shape(value: ir.Value) -> list[int | None] | None:
    """The value's shape with None for each dimension not known as a number; None if its rank
    is not known."""
    if value.shape is None:
        return None
    return [d if isinstance(d, int) else None for d in value.shape]


def opset_version(context: Any, domain: str = "") -> int | None:
    """The version of ``domain`` that the model imports (nodes of ``domain`` follow it)."""
    imports = context.model.opset_imports
    version = imports.get(domain)
    if version is None and domain == "":
        version = imports.get("ai.onnx")
    return version


def attribute(node: ir.Node, name: str, default: Any) -> Any:
    """The value of the node's attribute ``name``, ``default`` when it is absent."""
    attr = node.attributes.get(name)
    if attr is None:
        return default
    return attr.value


# --- editing a graph, for the rules' walks -------------------------------------------------------


def insert_node(
    graph: Any, before: ir.Node, op: str, inputs: Sequence[ir.Value], domain: str = "", **attrs: Any
) -> ir.Value:
    """A new node ``domain::op`` of ``inputs`` put in ``graph`` before ``before``; its output.
    Attributes: numpy arrays become tensors, strings strings, floats and lists of floats
    float32s, ints and lists of ints int64s."""
    import numpy as np
    import onnx_ir as ir

    attributes = []
    for name, v in attrs.items():
        if isinstance(v, np.ndarray):
            attributes.append(ir.AttrTensor(name, ir.tensor(v)))
        elif isinstance(v, str):
            attributes.append(ir.AttrString(name, v))
        elif isinstance(v, float):
            attributes.append(ir.AttrFloat32(name, v))
        elif isinstance(v, list) and any(isinstance(x, float) for x in v):
            attributes.append(ir.AttrFloat32s(name, [float(x) for x in v]))
        elif isinstance(v, list):
            attributes.append(ir.AttrInt64s(name, [int(x) for x in v]))
        else:
            attributes.append(ir.AttrInt64(name, int(v)))
    node = ir.Node(domain, op, list(inputs), attributes, num_outputs=1)
    graph.insert_before(before, node)
    return node.outputs[0]


def insert_constant(graph: Any, before: ir.Node, array: np.ndarray) -> ir.Value:
    """A Constant node holding ``array``, put before ``before``; its output, whose value the
    later checks can read (:func:`constant`)."""
    import onnx_ir as ir

    value = insert_node(graph, before, "Constant", [], value=array)
    value.const_value = ir.tensor(array)
    return value


def replace_value(graph: Any, old: ir.Value, new: ir.Value) -> None:
    """Every reader of ``old`` reads ``new`` instead, which takes ``old``'s type and shape (and
    its name and place, when ``old`` is a graph output)."""
    new.shape, new.dtype = old.shape, old.dtype
    for user, index in list(old.uses()):
        user.replace_input_with(index, new)
    if old.is_graph_output():
        outputs = graph.outputs
        for i, v in enumerate(outputs):
            if v is old:
                outputs[i] = new
        name = old.name
        old.name = f"{name}_replaced"
        new.name = name


def dead_nodes(graph: Any) -> set[int]:
    """The ids of the nodes of ``graph`` whose outputs nothing reads (directly or through other
    such nodes)."""
    gone: set[int] = set()
    nodes = list(graph)
    changed = True
    while changed:
        changed = False
        for node in reversed(nodes):
            if id(node) in gone:
                continue
            if all(not o.is_graph_output() and all(id(u) in gone for u, _ in o.uses()) for o in node.outputs):
                gone.add(id(node))
                changed = True
    return gone


def record_replacement(graph: Any, dead_before: set[int], node: ir.Node) -> None:
    """Records, for a walk, that ``node`` replaced the nodes that have died since
    ``dead_before`` (:func:`dead_nodes` before the rewrite): the block's own, less those still
    read elsewhere, plus the shape computations only the block read. Constants are not listed."""
    dead_after = dead_nodes(graph)
    replaced = [n for n in graph if id(n) in dead_after - dead_before and n.op_type != "Constant"]
    record_rewrite(graph, replaced, node)


# --- running ------------------------------------------------------------------------------------

ModelInput = Union[str, "os.PathLike[str]", "onnx.ModelProto"]


def rules() -> dict[str, Rule]:
    """Every rule, by name, in the order they run."""
    found: dict[str, Rule] = {}
    for module_name in RULE_MODULES:
        rule = importlib.import_module(module_name).RULE
        found[rule.name] = rule
    return found


def _graph_names(model: ir.Model) -> dict[int, str]:
    """id(graph) -> where it is: "main graph" or "node/attribute" paths to subgraphs."""
    names: dict[int, str] = {id(model.graph): MAIN_GRAPH}

    def visit(graph: ir.Graph, prefix: str) -> None:
        for node in graph:
            for attr in node.attributes.values():
                subgraphs = []
                if attr.type.name == "GRAPH":
                    subgraphs = [attr.value]
                elif attr.type.name == "GRAPHS":
                    subgraphs = list(attr.value)
                for sub in subgraphs:
                    path = f"{prefix}{node.name or node.op_type}/{attr.name}"
                    names[id(sub)] = path
                    visit(sub, path + "/")

    visit(model.graph, "")
    for function in model.functions.values():
        names[id(function)] = f"function {function.domain}::{function.name}"
    return names


def _all_graphs(model: ir.Model) -> Iterator[Any]:
    yield model.graph
    yield from model.graph.subgraphs()
    yield from model.functions.values()


def _values(graph: Any) -> Iterator[ir.Value]:
    """Every value of ``graph`` (a graph or function): its inputs, initializers and node outputs."""
    yield from graph.inputs
    yield from getattr(graph, "initializers", {}).values()
    for node in graph:
        yield from node.outputs


def _annotations(model: ir.Model) -> dict[int, tuple[ir.Value, Any, Any]]:
    """id(value) -> (value, type, shape) for every value of every graph, as the file gives them."""
    return {id(v): (v, v.type, v.shape) for graph in _all_graphs(model) for v in _values(graph)}


def _restore_annotations(model: ir.Model, annotations: dict[int, tuple[ir.Value, Any, Any]]) -> None:
    """Gives every value the type and shape the file gave it, and none to the other
    intermediate values, except the outputs of the ortops nodes the rules made. ONNX Runtime
    trusts a file's value_info, and its graph optimizers act on the symbols that data
    propagation shares between values: torchvision's FCOS, given those, fails (ReshapeFusion
    turns a ``reshape(K, 4)`` into ``[0, -1]``, which an empty tensor cannot take) where the
    original runs. An ortops node's output keeps its element type and static dimensions (the
    symbols inference made up become unknown ones): ONNX Runtime cannot infer them for a custom
    node, and without them it leaves the MatMul, Add and LayerNormalization after it unfused
    (Deformable DETR's output projections: 7% slower)."""
    import onnx_ir as ir

    file_symbols = {
        str(d)
        for _, _, shape in annotations.values()
        if shape is not None
        for d in shape
        if not isinstance(d, int) and d.value is not None
    }
    for graph in _all_graphs(model):
        outputs = {id(v) for v in graph.outputs}
        for value in _values(graph):
            if id(value) in annotations:
                _, value.type, value.shape = annotations[id(value)]
            elif id(value) in outputs:
                continue
            elif (producer := value.producer()) is not None and producer.domain == ORTOPS_DOMAIN:
                if value.shape is not None:
                    value.shape = ir.Shape(
                        [d if isinstance(d, int) or str(d) in file_symbols else None for d in value.shape]
                    )
            else:
                value.type, value.shape = None, None


def _to_ir(model: ModelInput) -> ir.Model:
    import onnx
    import onnx_ir as ir

    proto = onnx.load(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else model
    return ir.from_proto(proto)


def optimize_with_report(
    model: ModelInput, rule_names: Sequence[str] | None = None
) -> tuple[onnx.ModelProto, OptimizeReport]:
    """Rewrites ``model`` (a path, loaded with its external data, or a ModelProto, left
    unchanged) with the rules ``rule_names`` (default: all). Returns the new model and what was
    rewritten and left alone. KeyError names an unknown rule."""
    import_rewriter()
    import onnx_ir as ir
    import onnx_ir.passes.common as ir_passes
    import onnxscript.optimizer
    from onnxscript.rewriter import pattern

    from ortops._schemas import register_onnx_schemas

    known = rules()
    chosen = list(known) if rule_names is None else list(rule_names)
    for name in chosen:
        if name not in known:
            raise KeyError(f"no rule named '{name}' (rules: {', '.join(known)})")
    # Shapes prove some conditions; ONNX's inference knows ortops' nodes (an already optimized
    # model) once their schemas are registered.
    register_onnx_schemas()
    ir_model = _to_ir(model)
    annotations = _annotations(ir_model)
    try:
        ir_passes.ShapeInferencePass(strict_mode=False, data_prop=True)(ir_model)
    except Exception:  # noqa: BLE001  (without shapes, the checks that need them refuse)
        pass
    # onnxscript marks Constant outputs with their values in the main graph only; the checks
    # need them inside If/Loop bodies too.
    for graph in _all_graphs(ir_model):
        onnxscript.optimizer.basic_constant_propagation(graph)

    recorder = _Recorder(graph_names=_graph_names(ir_model))
    token = _RECORDER.set(recorder)
    try:
        for name in chosen:
            recorder.rule = name
            for rewrite_rule in known[name].passes():
                pattern.RewriteRuleSet([rewrite_rule], commute=True).apply_to_model(ir_model)
            walk = known[name].walk
            if walk is not None:
                for graph in list(_all_graphs(ir_model)):
                    walk(graph, ir_model)
            # The blocks this rule replaced are dead now: gone before the next rule, which
            # would otherwise match their nodes (grid-sample the GridSamples of a fused
            # deformable-attention block).
            onnxscript.optimizer.remove_unused_nodes(ir_model)
    finally:
        _RECORDER.reset(token)
    onnxscript.optimizer.remove_unused_nodes(ir_model)
    _restore_annotations(ir_model, annotations)
    for domain in {r[3].domain for r in recorder.rewrites} - {"", "ai.onnx"}:
        ir_model.opset_imports.setdefault(domain, 1)  # ortops', or TRT's for ROIAlign_TRT

    report = OptimizeReport(rules=tuple(chosen))
    replaced_ids = {(rule, id(n)) for rule, _, nodes, _ in recorder.rewrites for n in nodes}
    for rule, graph, nodes, node in recorder.rewrites:
        where = recorder.graph_names.get(id(graph), "subgraph")
        report.rewrites.append(Rewrite(rule, where, tuple(_node_label(n) for n in nodes), _node_label(node), node.name))
    for (rule, subject_id), (_, graph, subject, reason) in recorder.near_misses.items():
        if (rule, subject_id) in replaced_ids:
            continue  # a later pass of the rule rewrote it after all
        where = recorder.graph_names.get(id(graph), "subgraph")
        report.near_misses.append(NearMiss(rule, where, _node_label(subject), reason))
    return ir.to_proto(ir_model), report


def optimize(model: ModelInput, rule_names: Sequence[str] | None = None) -> onnx.ModelProto:
    """The model with every block that a rule proves equivalent rewritten into ortops nodes
    (see :func:`optimize_with_report` for the report of what was done)."""
    return optimize_with_report(model, rule_names)[0]


# --- running the original -------------------------------------------------------------------------


def with_float32_grids(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` with a Cast to float32 in front of every GridSample whose grid is
    float64 and whose input is float32, and how many it cast: what a user does by hand to run
    HuggingFace's TorchScript exports of Deformable DETR and Mask2Former, which ONNX Runtime
    cannot load (it has no GridSample for that pair of types). Element types come from ONNX's
    shape inference; GridSamples inside subgraphs are left as they are."""
    import onnx
    from onnx import TensorProto, helper

    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.input)}
    types.update({t.name: t.data_type for t in inferred.graph.initializer})
    edited = onnx.ModelProto()
    edited.CopyFrom(model)
    nodes: list[onnx.NodeProto] = []
    cast = 0
    for node in edited.graph.node:
        if (
            node.op_type == "GridSample"
            and node.domain in ("", "ai.onnx")
            and types.get(node.input[1]) == TensorProto.DOUBLE
            and types.get(node.input[0]) == TensorProto.FLOAT
        ):
            grid32 = f"{node.input[1]}/float32_by_hand"
            nodes.append(helper.make_node("Cast", [node.input[1]], [grid32], to=TensorProto.FLOAT, name=grid32))
            node.input[1] = grid32
            cast += 1
        nodes.append(node)
    del edited.graph.node[:]
    edited.graph.node.extend(nodes)
    return edited, cast


# --- saving -------------------------------------------------------------------------------------

# Protobuf cannot serialize a message of 2 GiB or more: such a model keeps its weights outside.
_PROTOBUF_LIMIT = 2**31 - 2**20


def uses_external_data(path: str) -> bool:
    """Whether the model file at ``path`` keeps tensors in external files."""
    import onnx
    from onnx.external_data_helper import uses_external_data as tensor_is_external

    def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    yield from graphs(attr.g)
                for sub in attr.graphs:
                    yield from graphs(sub)

    proto = onnx.load(path, load_external_data=False)
    return any(tensor_is_external(t) for g in graphs(proto.graph) for t in g.initializer)


def save(model: onnx.ModelProto, path: str, *, external: bool) -> None:
    """Writes ``model`` to ``path``; its tensors go to ``<path>.data`` beside it when
    ``external`` or when the model is too large for one protobuf file. ``model`` is left as it
    was (onnx moves the tensors' bytes out of the model it writes externally: a copy goes)."""
    import onnx

    large = sum(len(t.raw_data) for t in model.graph.initializer) > _PROTOBUF_LIMIT
    if external or large:
        location = os.path.basename(path) + ".data"
        data_path = os.path.join(os.path.dirname(os.path.abspath(path)), location)
        if os.path.exists(data_path):
            os.remove(data_path)  # onnx appends to an existing file
        written = onnx.ModelProto()
        written.CopyFrom(model)
        onnx.save_model(written, path, save_as_external_data=True, all_tensors_to_one_file=True, location=location)
    else:
        onnx.save_model(model, path)
