"""``--verify``'s second look: each rewritten block run alone, on the original's own values.

A model can amplify float rounding without bound: a TopK among scores that tie within rounding
(Grounding DINO and DINO pick 900 queries out of thousands) orders them one way in the original
and another once a block sums in another order, and the outputs then differ although every
block computes the same function. Where the outputs differ, each rewrite in the main graph is
therefore checked on its own: the nodes it made (the ortops node and the helpers the rule put
around it) form a small model, which is fed the values the original computes at the block's
inputs, and its outputs are compared with the original's values in their place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import onnx


@dataclass(frozen=True)
class Block:
    """One rewrite's nodes in the result and where they meet the rest of the model.

    ``inputs`` are values of the original that the block reads (computed, not weights);
    ``outputs`` are the block's values that the rest of the result reads, and ``counterparts``
    the original's values in their place, in the same order."""

    made: str
    nodes: tuple[onnx.NodeProto, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    counterparts: tuple[str, ...]


def _graph_values(graph: onnx.GraphProto) -> set[str]:
    values = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    return values | {out for node in graph.node for out in node.output if out}


def _read_in_bodies(node: onnx.NodeProto) -> set[str]:
    """The names the node's subgraphs (an If's branches, a Loop's body) read, at any depth."""
    names: set[str] = set()
    for attribute in node.attribute:
        for body in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            for inner in body.node:
                names.update(name for name in inner.input if name)
                names |= _read_in_bodies(inner)
    return names


def find_blocks(original: onnx.ModelProto, result: onnx.ModelProto, made: Iterable[str]) -> list[Block | str]:
    """The block of each node named in ``made`` (a rewrite's node in the result's main graph),
    or the name itself where it has none there (a node made inside an If or Loop body)."""
    known = _graph_values(original.graph)
    initializers = {i.name for i in result.graph.initializer}
    producer = {out: node for node in result.graph.node for out in node.output if out}
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in result.graph.node:
        for slot, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, slot))
        for name in _read_in_bodies(node):  # an If's or Loop's body reads outer values by name
            consumers.setdefault(name, []).append((node, -1))
    original_producer = {out: node for node in original.graph.node for out in node.output if out}
    result_outputs = [o.name for o in result.graph.output]
    by_name = {node.name: node for node in result.graph.node if node.name}

    def is_new(node: onnx.NodeProto) -> bool:
        return all(out not in known for out in node.output if out)

    def counterpart(value: str, members: dict[int, onnx.NodeProto]) -> str | None:
        """The original's value in the place of the block's ``value``: "" where nothing outside
        the block reads it, None where it cannot be told."""
        if value in result_outputs:
            return original.graph.output[result_outputs.index(value)].name
        outside = [(user, slot) for user, slot in consumers.get(value, []) if id(user) not in members]
        if not outside:
            return ""
        if any(slot < 0 for _, slot in outside):
            # A body reads it by name: the same name in the original, or nothing to compare with.
            return value if value in known else None
        user, slot = outside[0]
        twin = original_producer.get(next((o for o in user.output if o), ""))
        return twin.input[slot] if twin is not None and slot < len(twin.input) else None

    found: list[Block | str] = []
    for name in made:
        start = by_name.get(name)
        if start is None:
            found.append(name)
            continue
        # The block: the made node and the new nodes joined to it, before it (the helpers
        # computing its inputs) and after it (those turning its outputs back into the file's).
        members: dict[int, onnx.NodeProto] = {}
        pending = [start]
        while pending:
            node = pending.pop()
            if id(node) in members:
                continue
            members[id(node)] = node
            for value in node.input:
                source = producer.get(value)
                if value and value not in known and value not in initializers and source is not None:
                    pending.append(source)
            for value in node.output:
                for user, _ in consumers.get(value, []):
                    if value not in known and is_new(user):
                        pending.append(user)
        order = {id(node): k for k, node in enumerate(result.graph.node)}
        nodes = tuple(sorted(members.values(), key=lambda n: order[id(n)]))
        made_here = {out for node in nodes for out in node.output if out}
        inputs = sorted(
            {
                v
                for node in nodes
                for v in node.input
                if v and v not in made_here and v not in initializers and v in known
            }
        )
        places = {value: counterpart(value, members) for node in nodes for value in node.output if value}
        places = {value: twin for value, twin in places.items() if twin != ""}
        if None in places.values():
            found.append(name)
        else:
            found.append(Block(name, nodes, tuple(inputs), tuple(places), tuple(places.values())))  # type: ignore[arg-type]
    return found


def with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """``model`` with the values ``names`` among its outputs too (after its own)."""
    extended = onnx.ModelProto()
    extended.CopyFrom(model)
    present = {o.name for o in extended.graph.output}
    for name in names:
        if name not in present:
            extended.graph.output.append(onnx.ValueInfoProto(name=name))
            present.add(name)
    return extended


def block_model(block: Block, result: onnx.ModelProto, input_types: dict[str, int]) -> onnx.ModelProto:
    """The block as a model of its own: its inputs (of the element types given) in, its
    outputs out, the result's weights it reads as initializers."""
    read = {v for node in block.nodes for v in node.input}
    graph = onnx.helper.make_graph(
        list(block.nodes),
        f"block {block.made}",
        [onnx.helper.make_tensor_value_info(name, input_types[name], None) for name in block.inputs],
        [onnx.ValueInfoProto(name=name) for name in block.outputs],
        [i for i in result.graph.initializer if i.name in read],
    )
    model = onnx.helper.make_model(graph, opset_imports=list(result.opset_import))
    model.ir_version = result.ir_version
    return model


def _trimmed(inputs: list[str]) -> list[str]:
    """Inputs without the trailing empty names of omitted optional inputs (the same node)."""
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    return inputs


def _same_node(node: onnx.NodeProto, twin: onnx.NodeProto, instead: dict[str, str]) -> bool:
    """The same op on the same inputs (a block's outputs read as the original's values in their
    place) with the same attributes; names of nodes, which the rewriter gives unnamed ones in
    bodies, do not count."""
    return (
        (node.domain, node.op_type, list(node.output)) == (twin.domain, twin.op_type, list(twin.output))
        and _trimmed([instead.get(name, name) for name in node.input]) == _trimmed(list(twin.input))
        and len(node.attribute) == len(twin.attribute)
        and all(_same_attribute(a, b) for a, b in zip(node.attribute, twin.attribute))
    )


def _same_attribute(a: onnx.AttributeProto, b: onnx.AttributeProto) -> bool:
    a_graphs = [a.g] if a.HasField("g") else list(a.graphs)
    b_graphs = [b.g] if b.HasField("g") else list(b.graphs)
    if not a_graphs and not b_graphs:
        return a.SerializeToString() == b.SerializeToString()
    return (
        a.name == b.name
        and len(a_graphs) == len(b_graphs)
        and all(_same_graph(x, y) for x, y in zip(a_graphs, b_graphs))
    )


def _same_graph(a: onnx.GraphProto, b: onnx.GraphProto) -> bool:
    def names(values: Sequence[onnx.ValueInfoProto]) -> list[str]:
        return [v.name for v in values]

    return (
        names(a.input) == names(b.input)
        and names(a.output) == names(b.output)
        and [i.SerializeToString() for i in a.initializer] == [i.SerializeToString() for i in b.initializer]
        and len(a.node) == len(b.node)
        and all(_same_node(x, y, {}) for x, y in zip(a.node, b.node))
    )


def differences_outside(original: onnx.ModelProto, result: onnx.ModelProto, blocks: Sequence[Block]) -> list[str]:
    """Where the result, outside its blocks, is not the original node for node (the same op,
    attributes, inputs, with a block's outputs read as the original's values in their place)
    and weight for weight. Checking the blocks alone proves the result only where it is."""
    in_blocks = {id(node) for block in blocks for node in block.nodes}
    instead = {out: twin for block in blocks for out, twin in zip(block.outputs, block.counterparts)}
    twins = {out: node for node in original.graph.node for out in node.output if out}
    weights = {i.name: i for i in original.graph.initializer}
    problems: list[str] = []
    read: set[str] = set()
    for node in result.graph.node:
        if id(node) in in_blocks:
            continue
        twin = twins.get(next((out for out in node.output if out), ""))
        if twin is None or not _same_node(node, twin, instead):
            problems.append(f"{node.name or node.op_type}: not the original's node")
        read.update(node.input)
    for weight in result.graph.initializer:
        if weight.name in read and (
            weight.name not in weights or weights[weight.name].SerializeToString() != weight.SerializeToString()
        ):
            problems.append(f"weight {weight.name}: not the original's")
    outputs = [instead.get(o.name, o.name) for o in result.graph.output]
    if outputs != [o.name for o in original.graph.output]:
        problems.append("the outputs are not the original's")
    return problems
