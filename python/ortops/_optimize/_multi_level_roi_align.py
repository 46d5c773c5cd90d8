"""torchvision's ``MultiScaleRoIAlign`` (per-level RoiAlign merged by ScatterElements) into
``ortops::RoIAlignByLevel``.

torchvision's export (TorchScript exporter) maps each roi to a level with its ``LevelMapper``
(``floor(4 + log2(sqrt(area) / 224) + 1e-6)`` clamped, minus the first level), then per level
gathers that level's rois (Equal, NonZero, Transpose, Split, Squeeze, Gather), pools them with
RoiAlign and scatters the result back into a zeros tensor (ScatterElements on axis 0, one per
level, chained). ``ortops::RoIAlignByLevel`` takes the levels as an input, so the rewrite keeps
the file's own level computation (ONNX Runtime computes it, to the bit as before) and replaces
the gathers, the RoiAligns and the merge: roi r is pooled from the level ``levels[r]`` names,
and a roi whose level names none is left zero, as the merge leaves it.

Proven, from constants, attributes and shapes: the chain starts from ``ConstantOfShape`` of
float zeros whose shape is ``[rows of levels, C, output_height, output_width]``; each
ScatterElements (axis 0, no reduction) scatters one RoiAlign's output (through Casts to float)
at ``Expand(Reshape(idx, [-1, 1, 1, 1]))``; ``idx`` is the positions where ``levels`` (int64,
rank 1) equals that level's constant, and the RoiAlign's rois and batch indices are columns 1-4
and column 0 (cast to int64) of the rows ``idx`` gathers from one rois tensor ``[R, 5]``; that
tensor and ``levels`` have the same rows (both computed row by row from the same boxes); the
levels' constants are 0 to L - 1; every RoiAlign is one that ``roi-align`` could rewrite (avg
mode; see ``roi_align_facts``) with the same attributes but its spatial scale, on float32 maps
of one N and C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ortops._optimize import (
    ORTOPS_DOMAIN,
    Rule,
    attribute,
    constant,
    dead_nodes,
    insert_node,
    record_near_miss,
    record_replacement,
    replace_value,
)
from ortops._optimize._roi_align import MAX_OF_CORNERS, roi_align_facts

if TYPE_CHECKING:
    import onnx_ir as ir

_ONNX_DOMAINS = ("", "ai.onnx")
# Element-wise ops whose output has the rows of their first input (the Clip bounds must be
# constants, which the walk checks).
_ROW_WISE = ("Cast", "Sqrt", "Log", "Exp", "Floor", "Ceil", "Round", "Neg", "Abs", "Relu", "Identity", "Clip")
_BROADCASTING = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow")
_POOLED_SHAPE = ("C", "output_height", "output_width")


class _Refused(Exception):
    """A condition of the rewrite that the file does not prove; the message says which."""


def _is(node: ir.Node | None, op_type: str) -> bool:
    return node is not None and node.domain in _ONNX_DOMAINS and node.op_type == op_type


def _producer(value: ir.Value | None) -> ir.Node | None:
    return value.producer() if value is not None else None


def _rank(value: ir.Value) -> int | None:
    return len(value.shape) if value.shape is not None else None


def _ints(value: ir.Value | None) -> list[int] | None:
    """A constant's values as a flat list of ints; None when the value is not a constant."""
    array = constant(value)
    return None if array is None else [int(x) for x in array.reshape(-1)]


def _axes(node: ir.Node) -> list[int] | None:
    """The axes of a Squeeze, Unsqueeze or Slice-like node: its attribute (old opsets) or its
    constant input (Squeeze/Unsqueeze from opset 13: input 1; Slice: input 3)."""
    attr = node.attributes.get("axes")
    if attr is not None:
        return [int(a) for a in attr.value]
    index = 3 if node.op_type == "Slice" else 1
    return _ints(node.inputs[index]) if len(node.inputs) > index else None


def _strip_casts(value: ir.Value, to: int) -> ir.Value:
    """``value`` with the Casts to element type ``to`` that end its computation taken off."""
    node = value.producer()
    while _is(node, "Cast") and int(attribute(node, "to", 0)) == to:
        value = node.inputs[0]
        node = value.producer()
    return value


# --- which rows a value has -----------------------------------------------------------------------


def _rows(value: ir.Value, known: dict[int, Any] | None = None) -> Any:
    """A key that two values share only if they have the same number of rows (first
    dimension) for every input of the model: computed row by row from the same tensor (through
    element-wise ops, column gathers and slices, axis-1 joins and ConstantOfShape(Shape(x))),
    or the same concatenation of such. Else the value's own identity. ``known``: the keys found
    so far in this walk (a value read twice is walked once)."""
    known = {} if known is None else known
    if id(value) not in known:
        known[id(value)] = _rows_of_producer(value, known)
    return known[id(value)]


def _rows_of_producer(value: ir.Value, known: dict[int, Any]) -> Any:
    node = value.producer()
    own = ("value", id(value))
    if node is None or node.domain not in _ONNX_DOMAINS:
        return own
    op, inputs = node.op_type, node.inputs
    if op in _ROW_WISE and inputs and inputs[0] is not None:
        if op == "Clip" and any(v is not None and constant(v) is None for v in inputs[1:]):
            return own
        return _rows(inputs[0], known)
    if op in _BROADCASTING and len(inputs) == 2 and all(v is not None for v in inputs):
        a, b = inputs
        for kept, other in ((a, b), (b, a)):
            fixed, rank = constant(other), _rank(kept)
            # A one-element constant of no higher rank broadcasts without adding a dimension.
            if fixed is not None and fixed.size == 1 and rank is not None and fixed.ndim <= rank:
                return _rows(kept, known)
        rows = _rows(a, known)
        if _rank(a) is not None and _rank(a) == _rank(b) and _rows(b, known) == rows:
            return rows
        return own
    rank = _rank(inputs[0]) if inputs and inputs[0] is not None else None
    if op == "Gather" and rank is not None and constant(inputs[1]) is not None:
        if int(attribute(node, "axis", 0)) % rank != 0:
            return _rows(inputs[0], known)
        return own
    if op in ("Squeeze", "Unsqueeze", "Slice") and rank is not None:
        axes = _axes(node)
        out_rank = rank + len(axes) if op == "Unsqueeze" and axes is not None else rank
        if axes is not None and all(a % out_rank != 0 for a in axes):
            return _rows(inputs[0], known)
        return own
    if op == "Concat" and rank is not None:
        parts = [_rows(v, known) for v in inputs]
        if int(attribute(node, "axis", 0)) % rank != 0:
            return parts[0] if all(p == parts[0] for p in parts) else own
        return parts[0] if len(parts) == 1 else ("concat", tuple(parts))
    if op == "ConstantOfShape":
        shape_node = _producer(inputs[0])
        if _is(shape_node, "Shape") and not shape_node.attributes:
            return _rows(shape_node.inputs[0], known)
    return own


def _static_rows(value: ir.Value) -> int | None:
    """The value's first dimension where shape inference knows it as a number (ONNX Runtime
    holds a model's inputs to their static dimensions, and inference carries them)."""
    if value.shape is None or len(value.shape) == 0:
        return None
    first = value.shape[0]
    return first if isinstance(first, int) else None


def _same_rows(a: ir.Value, b: ir.Value) -> bool:
    """Whether ``a`` and ``b`` are proven to have the same number of rows: computed row by row
    from the same tensors (:func:`_rows`), or of the same static size."""
    static = _static_rows(a)
    return _rows(a) == _rows(b) or (static is not None and static == _static_rows(b))


# --- the block ----------------------------------------------------------------------------------


@dataclass
class _Level:
    index: int  # the level the Equal compares with
    roi_align: ir.Node


@dataclass
class _Block:
    rois: ir.Value
    levels: ir.Value
    per_level: list[_Level]  # in order of index: 0 to L - 1
    facts: dict[str, Any]


# Ops that keep a tensor's values in their flat order (a Split with one output is its input).
_FLAT_ORDER = ("Squeeze", "Unsqueeze", "Reshape", "Flatten", "Identity", "Split")


def _nonzero_of(value: ir.Value) -> ir.Node:
    """The NonZero whose positions ``value`` holds in its flat order: torchvision's
    ``torch.where(levels == l)[0]`` as the TorchScript exporter writes it (NonZero, Transpose,
    Split, Squeeze) and as simplifiers leave it (the Split or the Squeeze gone), or a NonZero
    reshaped, squeezed or gathered at row 0. The NonZero's input must be rank 1 (checked by
    :func:`_level_of`): its output [1, K] then has one dimension that is not 1, which the
    Transpose [1, 0] right after it keeps in order."""
    node = value.producer()
    while node is not None and node.domain in _ONNX_DOMAINS and node.op_type in _FLAT_ORDER:
        if node.op_type == "Split" and len(node.outputs) != 1:
            break
        node = _producer(node.inputs[0])
    if _is(node, "Transpose") and list(attribute(node, "perm", [])) == [1, 0]:
        node = _producer(node.inputs[0])
    elif _is(node, "Gather") and int(attribute(node, "axis", 0)) == 0 and _ints(node.inputs[1]) == [0]:
        if constant(node.inputs[1]).ndim == 0:  # row 0 of the [1, K] positions
            node = _producer(node.inputs[0])
    if not _is(node, "NonZero"):
        raise _Refused("a level's rois are not chosen as the positions where the levels equal a constant")
    return node


def _level_of(nonzero: ir.Node) -> tuple[ir.Value, int]:
    """(levels, l) for a NonZero of ``levels == l``: ``levels`` a rank-1 int64 tensor, l a
    one-element constant."""
    equal = _producer(nonzero.inputs[0])
    if not _is(equal, "Equal"):
        raise _Refused("a level's rois are not chosen by an Equal of the levels and a constant")
    for levels, other in (equal.inputs, reversed(equal.inputs)):
        value = _ints(other)
        if value is not None and len(value) == 1 and constant(other).ndim <= 1 and constant(levels) is None:
            if levels.dtype is None or levels.dtype.name != "INT64" or _rank(levels) != 1:
                raise _Refused("the levels are not a known rank-1 int64 tensor")
            return levels, value[0]
    raise _Refused("a level's rois are not chosen by an Equal of the levels and a constant")


def _gathered_rows(value: ir.Value, nonzero: ir.Node) -> ir.Value:
    """The tensor whose rows ``value`` gathers at the positions of ``nonzero`` (a Gather on
    axis 0 by a rank-1 index holding them)."""
    node = value.producer()
    if _is(node, "Gather") and int(attribute(node, "axis", 0)) == 0 and _rank(node.inputs[1]) == 1:
        if _nonzero_of(node.inputs[1]) is nonzero:
            return node.inputs[0]
    raise _Refused("a level's RoiAlign does not read the rows its level's positions gather")


def _columns(value: ir.Value) -> tuple[ir.Value, list[int], int]:
    """(source, columns, rank of the index) of a Gather on axis 1 of constant columns."""
    node = value.producer()
    if not (_is(node, "Gather") and int(attribute(node, "axis", 0)) in (1, -1)):
        raise _Refused("a level's RoiAlign does not read columns of the gathered rois")
    columns = _ints(node.inputs[1])
    if columns is None:
        raise _Refused("a level's RoiAlign reads columns that are not constant")
    return node.inputs[0], columns, constant(node.inputs[1]).ndim


def _rois_of(roi_align: ir.Node, nonzero: ir.Node) -> ir.Value:
    """The [R, 5] (batch_index, x1, y1, x2, y2) tensor whose rows at the positions of
    ``nonzero`` give ``roi_align`` its boxes (columns 1 to 4) and batch indices (column 0, cast
    to int64)."""
    boxes_rows, columns, _ = _columns(roi_align.inputs[1])
    if columns != [1, 2, 3, 4]:
        raise _Refused(f"a level's RoiAlign takes columns {columns} of the rois as its boxes, not 1 to 4")
    index = roi_align.inputs[2]
    cast = index.producer()
    if not (_is(cast, "Cast") and int(attribute(cast, "to", 0)) == 7):  # INT64
        raise _Refused("a level's batch indices are not a column of the rois cast to int64")
    column = cast.inputs[0]
    squeeze = column.producer()
    if _is(squeeze, "Squeeze"):
        if _axes(squeeze) not in ([1], [-1]):
            raise _Refused("a level's batch indices are squeezed on another axis than 1")
        column = squeeze.inputs[0]
    index_rows, columns, index_rank = _columns(column)
    if columns != [0] or index_rank != (1 if _is(squeeze, "Squeeze") else 0):
        raise _Refused("a level's batch indices are not column 0 of the rois")
    rois = _gathered_rows(boxes_rows, nonzero)
    if _gathered_rows(index_rows, nonzero) is not rois:
        raise _Refused("a level's boxes and batch indices come from different rois")
    if rois.dtype is None or rois.dtype.name != "FLOAT" or rois.shape is None or list(rois.shape)[1:] != [5]:
        raise _Refused("the rois are not a known float32 [R, 5] tensor")
    return rois


def _scattered_level(scatter: ir.Node, version: int | None) -> tuple[ir.Value, ir.Value, int, ir.Node]:
    """(rois, levels, level, RoiAlign) of one ScatterElements of the merge."""
    if str(attribute(scatter, "reduction", "none")) != "none":
        raise _Refused("a ScatterElements of the merge reduces")
    roi_align = _strip_casts(scatter.inputs[2], 1).producer()
    if not _is(roi_align, "RoiAlign"):
        raise _Refused("a level's values are not an ONNX RoiAlign's (cast to float)")
    facts = roi_align_facts(roi_align, version)
    if isinstance(facts, str):
        raise _Refused(f"a level's RoiAlign: {facts}")
    if facts["mode"] != "avg":
        raise _Refused(f"a level's RoiAlign: {MAX_OF_CORNERS} (RoIAlignByLevel pools as ortops::RoIAlign)")
    features = roi_align.inputs[0]
    if features.dtype.name != "FLOAT" or _rank(features) != 4:
        raise _Refused("a level's feature maps are not known float32 [N, C, H, W] (the node takes float32)")
    expand = _producer(scatter.inputs[1])
    reshape = _producer(expand.inputs[0]) if _is(expand, "Expand") else None
    if not (_is(reshape, "Reshape") and _ints(reshape.inputs[1]) == [-1, 1, 1, 1]):
        raise _Refused("a level's rows are not scattered at its positions (Expand of a Reshape to [-1, 1, 1, 1])")
    nonzero = _nonzero_of(reshape.inputs[0])
    levels, level = _level_of(nonzero)
    return _rois_of(roi_align, nonzero), levels, level, roi_align


def _dimension(value: ir.Value) -> tuple[ir.Value, int] | int | None:
    """A one-element int64 value as (tensor, axis) when it is that tensor's dimension
    (Gather of Shape, through Unsqueeze, Squeeze, Reshape and Cast), as an int when it is a
    constant; else None."""
    fixed = _ints(value)
    if fixed is not None:
        return fixed[0] if len(fixed) == 1 else None
    node = value.producer()
    while node is not None and node.domain in _ONNX_DOMAINS and node.op_type in ("Unsqueeze", "Squeeze", "Reshape"):
        node = _producer(node.inputs[0])
    if _is(node, "Gather") and int(attribute(node, "axis", 0)) == 0:
        shape, axis = _producer(node.inputs[0]), _ints(node.inputs[1])
        if _is(shape, "Shape") and not shape.attributes and axis is not None and len(axis) == 1:
            return shape.inputs[0], axis[0]
    return None


def _check_zeros(data: ir.Value, block: _Block) -> None:
    """The merge starts from float32 zeros of shape [rows of levels, C, output_height,
    output_width]."""
    zeros = data.producer()
    if not _is(zeros, "ConstantOfShape"):
        raise _Refused("the merge does not start from ConstantOfShape")
    fill = zeros.attributes.get("value")
    if fill is not None:
        array = fill.value.numpy()
        if array.dtype.name != "float32" or array.size != 1 or float(array.reshape(-1)[0]) != 0.0:
            raise _Refused("the merge does not start from float32 zeros")
    fixed = _ints(zeros.inputs[0])
    concat = _producer(zeros.inputs[0])
    if fixed is not None:  # a file of static shapes: the exporter folded the shape
        dims: list[Any] = fixed
    else:
        dims = [_dimension(part) for part in concat.inputs] if _is(concat, "Concat") else []
    if len(dims) != 4:
        raise _Refused("the merge's shape is not four dimensions")
    facts = block.facts
    features = block.per_level[0].roi_align.inputs[0]
    static = {"C": features.shape[1], "output_height": facts["output_height"], "output_width": facts["output_width"]}
    pooled = {id(level.roi_align) for level in block.per_level}
    first = dims[0]
    if isinstance(first, tuple):
        if not (first[1] == 0 and _same_rows(first[0], block.levels)):
            raise _Refused("the merge's first dimension is not the number of rois")
    elif first is None or first != _static_rows(block.levels):
        raise _Refused("the merge's first dimension is not the number of rois")
    for axis, (found, name) in enumerate(zip(dims[1:], _POOLED_SHAPE), start=1):
        if isinstance(found, tuple):
            source = _strip_casts(found[0], 1).producer()
            if found[1] == axis and source is not None and id(source) in pooled:
                continue
        elif isinstance(found, int) and found == static[name]:
            continue
        raise _Refused(f"the merge's dimension {axis} is not the pooled values' {name}")


def _same(a: Any, b: Any) -> bool:
    """Two dimensions proven equal: the same number, or the same named symbol."""
    if a is None or b is None:
        return False
    if isinstance(a, int) or isinstance(b, int):
        return a == b
    return a.value is not None and a.value == b.value


def _prove(chain: list[ir.Node], version: int | None) -> _Block:
    found = [_scattered_level(scatter, version) for scatter in chain]
    rois, levels = found[0][0], found[0][1]
    if any(r is not rois for r, _, _, _ in found) or any(lv is not levels for _, lv, _, _ in found):
        raise _Refused("the levels do not gather from one rois tensor by one levels tensor")
    indices = sorted(level for _, _, level, _ in found)
    if indices != list(range(len(chain))):
        raise _Refused(f"the levels compared with are {indices}, not 0 to {len(chain) - 1}")
    per_level = sorted((_Level(level, roi_align) for _, _, level, roi_align in found), key=lambda lv: lv.index)
    facts = [roi_align_facts(level.roi_align, version) for level in per_level]
    common = {k: v for k, v in facts[0].items() if k != "spatial_scale"}
    if any({k: v for k, v in f.items() if k != "spatial_scale"} != common for f in facts):
        raise _Refused("the levels' RoiAligns differ in more than their spatial scale")
    first = per_level[0].roi_align.inputs[0].shape
    for level in per_level:
        shape = level.roi_align.inputs[0].shape
        if not (_same(shape[0], first[0]) and _same(shape[1], first[1])):
            raise _Refused("the levels' feature maps are not proven to have one N and C")
    if not _same_rows(levels, rois):
        raise _Refused("the levels and the rois are not proven to have the same rows")
    block = _Block(rois, levels, per_level, {**common, "spatial_scales": [f["spatial_scale"] for f in facts]})
    _check_zeros(chain[0].inputs[0], block)
    return block


# --- the walk -------------------------------------------------------------------------------------


def _is_level_scatter(node: ir.Node) -> bool:
    """A ScatterElements on axis 0 of a RoiAlign's values (through Casts)."""
    if not _is(node, "ScatterElements") or len(node.inputs) != 3:
        return False
    if int(attribute(node, "axis", 0)) != 0:
        return False
    pooled = _strip_casts(node.inputs[2], 1).producer()
    return _is(pooled, "RoiAlign")


def _chains(graph: Any) -> list[list[ir.Node]]:
    """Every chain of two or more level ScatterElements, each writing into the one before,
    first to last."""
    found = []
    for node in graph:
        if not _is_level_scatter(node):
            continue
        # The last of a chain: its output does not feed another level's ScatterElements.
        if any(_is_level_scatter(user) and user.inputs[0] is node.outputs[0] for user, _ in node.outputs[0].uses()):
            continue
        chain = [node]
        while (previous := _producer(chain[0].inputs[0])) is not None and _is_level_scatter(previous):
            chain.insert(0, previous)
        if len(chain) >= 2:  # one level: torchvision pools it with one RoiAlign and no merge
            found.append(chain)
    return found


def _walk(graph: Any, model: ir.Model) -> None:
    version = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    for chain in _chains(graph):
        final = chain[-1]
        try:
            block = _prove(chain, version)
        except _Refused as refusal:
            record_near_miss(graph, final, f"torchvision's MultiScaleRoIAlign over {len(chain)} levels: {refusal}")
            continue
        except RecursionError:  # rows computed through more ops than Python's stack follows
            record_near_miss(graph, final, "the rows of the levels and rois are computed too deep to follow")
            continue
        dead_before = dead_nodes(graph)
        features = [level.roi_align.inputs[0] for level in block.per_level]
        output = insert_node(
            graph,
            final,
            "RoIAlignByLevel",
            [block.rois, block.levels, *features],
            ORTOPS_DOMAIN,
            output_height=block.facts["output_height"],
            output_width=block.facts["output_width"],
            spatial_scales=[float(s) for s in block.facts["spatial_scales"]],
            sampling_ratio=block.facts["sampling_ratio"],
            mode="avg",
            aligned=block.facts["aligned"],
        )
        replace_value(graph, final.outputs[0], output)
        record_replacement(graph, dead_before, output.producer())


RULE = Rule(
    name="multi-level-roi-align",
    summary="torchvision's MultiScaleRoIAlign (per-level RoiAlign merged by ScatterElements) into "
    "ortops::RoIAlignByLevel, the file's levels kept",
    handles=(
        "torchvision's MultiScaleRoIAlign as the TorchScript exporter writes it (Faster R-CNN, Mask R-CNN, "
        "Keypoint R-CNN): any number of levels, RoiAlign of opset 10 and 16 in avg mode, static or dynamic roi "
        "counts; the LevelMapper stays and gives the node each roi's level",
        "left alone: a level RoiAlign in max mode (roi-align then takes each level), levels not 0 to L - 1, rois "
        "and levels not proven to have the same rows, feature maps not proven of one N and C",
    ),
    walk=_walk,
)
