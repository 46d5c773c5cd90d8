"""Multi-scale deformable attention into ``ortops::MultiScaleDeformableAttention``.

The block that Deformable DETR's ``multi_scale_deformable_attn_pytorch`` (mmcv, HuggingFace's
Deformable DETR / Grounding DINO / Mask2Former / OneFormer, RT-DETR) and RT-DETRv2's
``deformable_attention_core_func_v2`` (D-FINE, DEIM, Ultralytics) export to: ``value``
``[N, S, M, D]`` split into one ``[N * M, D, H_l, W_l]`` map per level, each sampled by a
GridSample (bilinear, zeros padding, align_corners 0) at the grid ``2 * loc - 1`` taken from
``sampling_locations`` (``[N, Lq, M, L, P, 2]``, or ``[N, Lq, M, L * P, 2]`` split per level),
the samples stacked (``Unsqueeze`` + ``Concat``, then a Reshape that merges levels and points)
or concatenated along the points, multiplied by ``attention_weights`` laid out as
``[N * M, 1, Lq, L * P]``, summed over the ``L * P`` axis and reshaped to ``[N, Lq, M * D]``.

Why a graph walk and not onnxscript's pattern DSL: the block has one branch per level (a
variadic Concat) and each exporter spells its reshapes differently (constant shapes,
``Shape``/``Slice``/``Concat`` computations, ``Flatten``, dynamic ``Slice`` instead of
``Split``); a fixed pattern would need one variant per level count and spelling. Instead the
walk starts at every Concat of GridSample outputs and proves the data movement with a small
symbolic layout algebra: each tensor on a path is a list of axes, each axis a row-major list of
*atoms* (an axis of a root tensor, a chunk of one, or the two parts a Reshape splits one into),
whose sizes are sympy expressions of the file's constants and symbolic dimensions. Reshape
targets computed from ``Shape`` are evaluated symbolically, so the proof holds for every value
of a dynamic dimension, not just the one exported. Whatever cannot be proven is a near-miss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ortops._optimize import (
    ORTOPS_DOMAIN,
    Rule,
    attribute,
    constant,
    dead_nodes,
    insert_constant,
    insert_node,
    record_near_miss,
    record_replacement,
    replace_value,
)

if TYPE_CHECKING:
    import onnx_ir as ir
    import sympy

_ONNX_DOMAINS = ("", "ai.onnx")
# mmdeploy's exporter writes mmcv's grid_sample as this custom node (interpolation_mode 0:
# bilinear, padding_mode 0: zeros), with GridSample's semantics.
_MMDEPLOY_GRID_SAMPLER = (("mmdeploy", "grid_sampler"), ("mmcv", "grid_sampler"))
# The element types of ortops::MultiScaleDeformableAttention.
_FLOAT_TYPES = ("FLOAT", "DOUBLE", "FLOAT16")
# Ops that only move (or re-type) data: the paths from value, locations and weights to the
# GridSample and Mul nodes are made of them.
_MOVEMENT = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Gather", "Split", "Slice", "Identity", "Cast")


class _Refused(Exception):
    """A condition the rewrite needs that the walk could not prove; the message is the reason."""


# --- symbolic sizes -----------------------------------------------------------------------------


def _sympy() -> Any:
    import sympy

    return sympy


def _equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    return _sympy().expand(a - b) == 0


def _quotient(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
    """``a / b`` when it is an exact polynomial with integer coefficients (a whole number for
    numbers); else None."""
    sp = _sympy()
    if b == 0:
        return None
    q = sp.cancel(a / b)
    numerator, denominator = sp.fraction(q)
    if denominator != 1 or (q.is_number and not q.is_integer):
        return None
    if not q.is_number and not all(c.is_integer for c in sp.Poly(numerator).coeffs()):
        return None
    return q


def _product(sizes: list[sympy.Expr]) -> sympy.Expr:
    sp = _sympy()
    return sp.expand(sp.Mul(*sizes)) if sizes else sp.Integer(1)


@dataclass(frozen=True)
class _Atom:
    """A run of elements along one axis of a root tensor: the whole axis (``parent`` None), a
    chunk ``[offset, offset + size)`` of ``parent`` (Split, Slice), or the outer / inner part
    of ``parent`` that a Reshape split (``part`` "outer" or "inner")."""

    name: str
    size: Any
    parent: _Atom | None = None
    offset: Any = 0
    part: str = ""


_Layout = list[tuple[_Atom, ...]]


def _is_unit(atom: _Atom) -> bool:
    return atom.size == 1


def _names(atoms: tuple[_Atom, ...] | list[_Atom]) -> list[str]:
    return [a.name for a in atoms if not _is_unit(a)]


@dataclass
class _Tracer:
    """Symbolic shapes and layouts of the values a block's proof visits."""

    opset: int
    layouts: dict[int, _Layout] = field(default_factory=dict)
    shapes: dict[int, list[Any]] = field(default_factory=dict)
    # Root-axis atom name -> the index a scalar Gather picked from it.
    picked: dict[str, int] = field(default_factory=dict)

    def symbol(self, name: str) -> Any:
        return _sympy().Symbol(name, integer=True, positive=True)

    # Shapes ---------------------------------------------------------------------------------

    def shape(self, value: ir.Value, depth: int = 0) -> list[Any]:
        """The value's shape as sympy expressions: from its layout on a proven path, computed
        through the producer for shape-only ops (so a Reshape's -1 or a Concat's sum stays an
        expression of the inputs' sizes), else from shape inference (a named dimension is a
        symbol of that name, an unnamed one a symbol of its own)."""
        key = id(value)
        if key in self.layouts:
            return [_product([a.size for a in axis]) for axis in self.layouts[key]]
        if key in self.shapes:
            return self.shapes[key]
        shape = self._shape_from_producer(value, depth) if depth < 24 else None
        if shape is None:
            if value.shape is None:
                raise _Refused(f"the rank of {value.name} is not known")
            shape = []
            for axis, dim in enumerate(value.shape):
                if isinstance(dim, int):
                    shape.append(_sympy().Integer(dim))
                elif getattr(dim, "value", None):
                    shape.append(self.symbol(f"{dim.value}"))
                else:
                    shape.append(self.symbol(f"{value.name}:{axis}"))
        self.shapes[key] = shape
        return shape

    def _shape_from_producer(self, value: ir.Value, depth: int) -> list[Any] | None:
        node = value.producer()
        if node is None or node.domain not in _ONNX_DOMAINS:
            return None
        op = node.op_type
        try:
            if op in ("Identity", "Cast", "Relu", "Sigmoid", "Softmax", "Neg"):
                return self.shape(node.inputs[0], depth + 1)
            if op == "Transpose":
                shape = self.shape(node.inputs[0], depth + 1)
                perm = attribute(node, "perm", None) or list(reversed(range(len(shape))))
                return [shape[p] for p in perm]
            if op == "Reshape":
                return self._reshape_target(node, self.shape(node.inputs[0], depth + 1))
            if op == "Concat":
                shapes = [self.shape(v, depth + 1) for v in node.inputs]
                axis = int(attribute(node, "axis", 0)) % len(shapes[0])
                out = list(shapes[0])
                out[axis] = _sympy().expand(sum(s[axis] for s in shapes))
                return out
        except _Refused:
            return None
        return None

    # Values of 1-D int64 shape tensors --------------------------------------------------------

    def values(self, value: ir.Value, depth: int = 0) -> list[Any]:
        """The entries of an integer shape tensor as sympy expressions (constants, or computed
        from ``Shape`` through Gather, Slice, Concat, Unsqueeze, Squeeze, Cast, Mul, Add, Sub, Div)."""
        sp = _sympy()
        array = constant(value)
        if array is not None:
            if array.dtype.kind not in "iu":
                raise _Refused(f"{value.name} is not an integer tensor")
            return [sp.Integer(int(v)) for v in array.reshape(-1)]
        node = value.producer()
        if node is None or node.domain not in _ONNX_DOMAINS or depth > 24:
            raise _Refused(f"{value.name} is neither a constant nor computed from shapes")
        op, inputs = node.op_type, node.inputs
        if op == "Shape":
            shape = self.shape(inputs[0])
            start, end = attribute(node, "start", 0), attribute(node, "end", None)
            return shape[start:end]
        if op in ("Unsqueeze", "Squeeze", "Identity", "Reshape", "Flatten"):
            return self.values(inputs[0], depth + 1)
        if op == "Cast":
            if attribute(node, "to", 0) not in (6, 7):  # int32, int64
                raise _Refused(f"{value.name} is cast to a non-integer type")
            return self.values(inputs[0], depth + 1)
        if op == "Concat":
            return [v for part in inputs for v in self.values(part, depth + 1)]
        if op == "Gather":
            data, index = self.values(inputs[0], depth + 1), constant(inputs[1])
            if index is None or int(attribute(node, "axis", 0)) != 0:
                raise _Refused(f"{value.name} gathers at indices the file does not fix")
            return [data[int(i)] for i in index.reshape(-1)]
        if op == "Slice":
            data = self.values(inputs[0], depth + 1)
            starts, ends = (self.ints(v) for v in inputs[1:3])
            steps = self.ints(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1]
            if len(starts) != 1 or steps != [1]:
                raise _Refused(f"{value.name} is a strided or multi-axis slice")
            return data[starts[0] : ends[0]]
        if op in ("Mul", "Add", "Sub", "Div"):
            a, b = self.values(inputs[0], depth + 1), self.values(inputs[1], depth + 1)
            if len(a) != len(b):
                a, b = (a * len(b), b) if len(a) == 1 else (a, b * len(a)) if len(b) == 1 else (a, b)
            if len(a) != len(b):
                raise _Refused(f"{value.name} combines shape tensors of different lengths")
            if op == "Div":
                quotients = [_quotient(x, y) for x, y in zip(a, b)]
                if any(q is None for q in quotients):
                    raise _Refused(f"{value.name} divides sizes that are not proven to divide")
                return quotients
            combine = {"Mul": lambda x, y: x * y, "Add": lambda x, y: x + y, "Sub": lambda x, y: x - y}[op]
            return [sp.expand(combine(x, y)) for x, y in zip(a, b)]
        raise _Refused(f"{value.name} is computed by {op}, which the rule does not evaluate")

    def ints(self, value: ir.Value) -> list[int]:
        array = constant(value)
        if array is None or array.dtype.kind not in "iu":
            raise _Refused(f"{value.name} is not an integer constant")
        return [int(v) for v in array.reshape(-1)]

    def axes(self, node: ir.Node, position: int, name: str = "axes") -> list[int] | None:
        """An axes list given as an attribute (older opsets) or as input ``position``."""
        if len(node.inputs) > position and node.inputs[position] is not None:
            return self.ints(node.inputs[position])
        found = attribute(node, name, None)
        return None if found is None else [int(a) for a in found]

    def _reshape_target(self, node: ir.Node, input_shape: list[Any]) -> list[Any]:
        target = self.values(node.inputs[1])
        allow_zero = int(attribute(node, "allowzero", 0))
        target = [input_shape[i] if (t == 0 and not allow_zero) else t for i, t in enumerate(target)]
        if sum(1 for t in target if t == -1) > 1 or any((t.is_number and t < -1) for t in target):
            raise _Refused(f"the Reshape {node.name} has an invalid target shape")
        if -1 in target:
            known = _product([t for t in target if t != -1])
            inferred = _quotient(_product(input_shape), known)
            if inferred is None:
                raise _Refused(f"the -1 of the Reshape {node.name} is not a proven whole size")
            target = [inferred if t == -1 else t for t in target]
        return target

    # Layouts --------------------------------------------------------------------------------

    def root(self, value: ir.Value, prefix: str) -> _Layout:
        """The layout of a root tensor: one atom per axis, named ``prefix0``, ``prefix1``..."""
        layout = [(_Atom(f"{prefix}{i}", size),) for i, size in enumerate(self.shape(value))]
        self.layouts[id(value)] = layout
        return layout

    def forward(self, node: ir.Node, source: ir.Value, output_index: int = 0) -> _Layout:
        """The layout of ``node.outputs[output_index]`` from the (known) layout of its data
        input ``source``; _Refused when the op's effect cannot be expressed on the atoms."""
        layout = list(self.layouts[id(source)])
        op = node.op_type
        rank = len(layout)
        if op in ("Identity", "Cast"):
            out = layout
        elif op == "Transpose":
            perm = attribute(node, "perm", None) or list(reversed(range(rank)))
            out = [layout[p] for p in perm]
        elif op == "Flatten":
            axis = int(attribute(node, "axis", 1)) % (rank + 1)
            out = [tuple(a for ax in layout[:axis] for a in ax), tuple(a for ax in layout[axis:] for a in ax)]
        elif op == "Reshape":
            target = self._reshape_target(node, self.shape(source))
            out = self._regroup(node, layout, target)
        elif op == "Unsqueeze":
            axes = self.axes(node, 1)
            if axes is None:
                raise _Refused(f"the Unsqueeze {node.name} has no axes")
            out_rank = rank + len(axes)
            out, rest = [], iter(layout)
            positions = {a % out_rank for a in axes}
            for i in range(out_rank):
                out.append(() if i in positions else next(rest))
        elif op == "Squeeze":
            axes = self.axes(node, 1)
            positions = (
                {a % rank for a in axes}
                if axes is not None
                else {i for i, ax in enumerate(layout) if all(_is_unit(a) for a in ax)}
            )
            if any(not all(_is_unit(a) for a in layout[i]) for i in positions):
                raise _Refused(f"the Squeeze {node.name} removes an axis not proven of size 1")
            out = [ax for i, ax in enumerate(layout) if i not in positions]
        elif op == "Gather":
            axis = int(attribute(node, "axis", 0)) % rank
            index = constant(node.inputs[1])
            atoms = [a for a in layout[axis] if not _is_unit(a)]
            if index is None or index.ndim != 0 or len(atoms) != 1 or atoms[0].parent is not None:
                raise _Refused(f"the Gather {node.name} does not pick one constant index of a whole axis")
            size = atoms[0].size
            picked = int(index)
            if picked < 0:
                if not size.is_number:
                    raise _Refused(f"the Gather {node.name} picks a negative index of a dynamic axis")
                picked += int(size)
            self.picked[atoms[0].name] = picked
            out = layout[:axis] + layout[axis + 1 :]
        elif op in ("Split", "Slice"):
            out = self._chunk(node, layout, output_index)
        else:
            raise _Refused(f"{op} {node.name} is not a data movement the rule follows")
        self.layouts[id(node.outputs[output_index])] = out
        return out

    def _chunk(self, node: ir.Node, layout: _Layout, output_index: int) -> _Layout:
        sp = _sympy()
        rank = len(layout)
        shape = [_product([a.size for a in ax]) for ax in layout]
        if node.op_type == "Split":
            axis = int(attribute(node, "axis", 0)) % rank
            sizes = (
                self.values(node.inputs[1])
                if len(node.inputs) > 1 and node.inputs[1] is not None
                else [sp.Integer(s) for s in (attribute(node, "split", None) or [])]
            )
            if not sizes:
                count = len(node.outputs)
                each = _quotient(shape[axis], sp.Integer(count))
                if each is None:
                    raise _Refused(f"the Split {node.name} splits evenly a size not proven divisible")
                sizes = [each] * count
            offset, size = _sympy().expand(sum(sizes[:output_index])), sizes[output_index]
        else:
            axes = self.axes(node, 3) if len(node.inputs) > 3 else [0]
            steps = self.ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else [1]
            start, end = self.values(node.inputs[1]), self.values(node.inputs[2])
            if axes is None or len(axes) != 1 or steps != [1] or len(start) != 1:
                raise _Refused(f"the Slice {node.name} is not one contiguous range of one axis")
            axis = axes[0] % rank
            offset, end = start[0], end[0]
            if end.is_number and end >= 2**62:  # "to the end"
                end = shape[axis]
            # A slice that runs past the axis is cut short; only one proven inside it is a chunk.
            inside = [offset, sp.expand(end - offset), sp.expand(shape[axis] - end)]
            if not all(x == 0 or x.is_nonnegative for x in inside):
                raise _Refused(f"the Slice {node.name} is not proven to lie inside the axis")
            size = inside[1]
        atoms = [a for a in layout[axis] if not _is_unit(a)]
        if len(atoms) != 1:
            raise _Refused(f"the {node.op_type} {node.name} cuts an axis that merges several")
        whole = atoms[0]
        chunk = _Atom(f"{whole.name}[{offset}:+{size}]", size, parent=whole, offset=offset)
        return layout[:axis] + [(chunk,)] + layout[axis + 1 :]

    def _regroup(self, node: ir.Node, layout: _Layout, target: list[Any]) -> _Layout:
        """Row-major regrouping of the atoms into ``target`` dims: whole atoms merge, and an
        atom a target dim boundary falls inside splits into an outer and an inner part."""
        flat = [a for ax in layout for a in ax if not _is_unit(a)]
        out: _Layout = []
        i = 0
        for size in target:
            axis: list[_Atom] = []
            need = size
            while need != 1:
                if i >= len(flat):
                    raise _Refused(f"the Reshape {node.name} does not regroup the axes it is given")
                atom = flat[i]
                if _equal(atom.size, need):
                    axis.append(atom)
                    i += 1
                    need = 1
                    continue
                rest = _quotient(need, atom.size)
                if rest is not None:
                    axis.append(atom)
                    i += 1
                    need = rest
                    continue
                inner = _quotient(atom.size, need)
                if inner is None:
                    raise _Refused(f"the Reshape {node.name} regroups sizes that are not proven to divide")
                axis.append(_Atom(f"{atom.name}/o", need, parent=atom, part="outer"))
                flat[i] = _Atom(f"{atom.name}/i", inner, parent=atom, part="inner")
                need = 1
            out.append(tuple(axis))
        if i != len(flat):
            raise _Refused(f"the Reshape {node.name} does not regroup the axes it is given")
        return out


# --- the walk -----------------------------------------------------------------------------------


def _is_grid_sample(node: ir.Node | None) -> bool:
    if node is None:
        return False
    return (node.domain in _ONNX_DOMAINS and node.op_type == "GridSample") or (
        (node.domain, node.op_type) in _MMDEPLOY_GRID_SAMPLER
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_sampling(node: ir.Node, opset: int) -> None:
    """GridSample's attributes are those of the node: bilinear, zeros padding, align_corners 0."""
    if node.domain in _ONNX_DOMAINS:
        # Opset 16 to 19 spell bilinear 'bilinear', 20 on 'linear'.
        bilinear = "linear" if opset >= 20 else "bilinear"
        mode = _text(attribute(node, "mode", bilinear))
        padding = _text(attribute(node, "padding_mode", "zeros"))
    else:
        mode = {0: "bilinear", 1: "nearest", 2: "bicubic"}.get(int(attribute(node, "interpolation_mode", 0)), "?")
        padding = {0: "zeros", 1: "border", 2: "reflection"}.get(int(attribute(node, "padding_mode", 0)), "?")
        bilinear = "bilinear"
    if mode != bilinear:
        raise _Refused(f"{node.op_type} mode '{mode}' (the node samples bilinearly, '{bilinear}' at opset {opset})")
    if padding != "zeros":
        raise _Refused(f"{node.op_type} padding_mode '{padding}' (the node reads zeros outside the map)")
    if int(attribute(node, "align_corners", 0)) != 0:
        raise _Refused(f"{node.op_type} align_corners=1 (the node samples as align_corners=0)")


_Path = list[tuple["ir.Node", "ir.Value", int]]


def _path_back(value: ir.Value) -> _Path:
    """The movement ops that lead to ``value``, nearest first, as (node, its data input, the
    index of its output on the path)."""
    path = []
    while True:
        node = value.producer()
        if node is None or node.domain not in _ONNX_DOMAINS or node.op_type not in _MOVEMENT:
            return path
        path.append((node, node.inputs[0], next(i for i, o in enumerate(node.outputs) if o is value)))
        value = node.inputs[0]


def _up_to(path: _Path, root: ir.Value) -> _Path:
    """The part of ``path`` between ``root`` and its end; _Refused if ``root`` is not on it."""
    for i, (_, source, _) in enumerate(path):
        if source is root:
            return path[: i + 1]
    raise _Refused("the value tensor is not on every level's path")


def _follow(tracer: _Tracer, path: _Path, end: ir.Value) -> _Layout:
    """The layout of ``end`` from the root at the far end of ``path`` (nearest first)."""
    for node, source, output_index in reversed(path):
        tracer.forward(node, source, output_index)
    return tracer.layouts[id(end)]


def _grid_root(grid: ir.Value) -> tuple[_Path, ir.Value, bool]:
    """The path from ``2 * loc - 1`` to the GridSample's grid, and ``loc``; or, where the
    exporter or a simplifier folded ``2 * loc - 1`` into a constant, the path from that constant
    and the constant itself (True: the value is the grid, not ``loc``)."""
    path = _path_back(grid)
    affine = path[-1][1] if path else grid
    if constant(affine) is not None:
        return path, affine, True
    node = affine.producer()
    scalars = {}
    if node is not None and node.op_type in ("Sub", "Add") and node.domain in _ONNX_DOMAINS:
        for twice, shift in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            shift_value = constant(shift)
            doubler = twice.producer()
            if shift_value is None or shift_value.size != 1 or doubler is None or doubler.op_type != "Mul":
                continue
            if node.op_type == "Sub" and twice is not node.inputs[0]:
                continue
            expected_shift = 1.0 if node.op_type == "Sub" else -1.0
            if float(shift_value.reshape(-1)[0]) != expected_shift:
                continue
            for loc, two in ((doubler.inputs[0], doubler.inputs[1]), (doubler.inputs[1], doubler.inputs[0])):
                two_value = constant(two)
                if two_value is not None and two_value.size == 1 and float(two_value.reshape(-1)[0]) == 2.0:
                    scalars["loc"] = loc
                    scalars["ranks"] = (two_value.ndim, shift_value.ndim)
    if "loc" not in scalars:
        raise _Refused("the grid is not 2 * sampling_locations - 1 (a Mul by the constant 2 and a Sub of 1)")
    loc = scalars["loc"]
    if loc.shape is not None and max(scalars["ranks"]) > len(loc.shape):
        raise _Refused("the constants of 2 * loc - 1 have a higher rank than the locations")
    return path, loc, False


def _data_users(value: ir.Value) -> list[ir.Node]:
    """The nodes that read ``value``'s elements (a Shape node reads only its shape: exporters
    compute the next Reshape's target from it, and it goes away with that Reshape)."""
    return [u for u, _ in value.uses() if not (u.op_type == "Shape" and u.domain in _ONNX_DOMAINS)]


def _is_output_layout(layout: _Layout, heads_by_batch: _Atom, batch: Any, heads: Any) -> bool:
    """Whether ``layout`` is the node's [N, Lq, M * D] output, from the sum's [N * M, D, Lq]."""
    if len(layout) != 3 or _names(layout[1]) != ["s:q"]:
        return False
    outer = [x for x in layout[0] if not _is_unit(x)]
    if not outer and _equal(batch, 1):  # a batch of 1: the heads need no split from it
        return _names(layout[2]) == [heads_by_batch.name, "s:d"]
    if outer == [heads_by_batch] and _equal(heads, 1):
        return _names(layout[2]) == ["s:d"]
    if len(outer) != 1 or outer[0].parent is not heads_by_batch or outer[0].part != "outer":
        return False
    return _equal(outer[0].size, batch) and _names(layout[2]) == [f"{heads_by_batch.name}/i", "s:d"]


def _size_source(tracer: _Tracer, sampler: ir.Node, level: int) -> ir.Node:
    """The Reshape that made a level's [N * M, D, H_l, W_l] map, when its target's entries 2 and 3
    are proven to be H_l and W_l (the rewrite reads dynamic level sizes from there)."""
    reshape = sampler.inputs[0].producer()
    if reshape is None or reshape.op_type != "Reshape":
        raise _Refused(f"level {level}'s dynamic size is not the target of a Reshape")
    entries = tracer.values(reshape.inputs[1])
    shape = tracer.shape(sampler.inputs[0])
    if len(entries) != 4 or not all(_equal(entries[i], shape[i]) for i in (2, 3)):
        raise _Refused(f"level {level}'s dynamic H_l and W_l are not written in its Reshape's target")
    return reshape


@dataclass
class _Block:
    value: ir.Value
    locations: ir.Value | np.ndarray  # an array: made of constant grids, in value's element type
    locations_rank: int
    weights: ir.Value | np.ndarray  # an array: a constant re-laid out, in value's element type
    weights_rank: int
    sizes: list[tuple[Any, Any]]
    size_sources: list[ir.Value | None]
    levels: int
    points: int  # P, where every level has P points; else 0
    points_per_level: list[int]  # P_l where they differ (the node's attribute); else empty
    final: ir.Node
    nodes: list[ir.Node]
    # Where the locations are reference_points + sampling_offsets / (W_l, H_l), proven: the
    # node then takes those two (FromOffsets) in place of the locations.
    offsets: _Offsets | None = None


@dataclass
class _Offsets:
    # The term of the sum that holds the reference points: [N, Lq, L, 2] (``squeeze`` False) or
    # [N', Lq', 1, L', 1, 2'] (True); a constant as an array. Its sizes are N or 1, Lq or 1, ...:
    # ``expand`` when they are not proven to be the locations' (the Add broadcast it).
    reference_points: ir.Value | np.ndarray
    squeeze: bool
    expand: bool
    sampling_offsets: ir.Value  # [N, Lq, M, L, P, 2], in value's element type


def _same_atoms(actual: tuple[_Atom, ...], expected: list[_Atom]) -> bool:
    return _names(actual) == _names(expected)


def _folded_grid(sampler: ir.Node, opset: int) -> np.ndarray | None:
    """The GridSample's grid where the file fixes it: a constant, or a constant (2 * loc - 1,
    folded by the exporter or a simplifier) moved to the level by movement ops whose
    parameters are constants, evaluated here as ONNX defines them; None where it is computed."""
    grid = sampler.inputs[1]
    folded = constant(grid)
    if folded is not None:
        return folded
    path, root, is_constant = _grid_root(grid) if _path_back(grid) else ([], grid, False)
    if not is_constant:
        return None
    folded = constant(root)
    for node, source, output_index in reversed(path):
        folded = _evaluated(node, source, folded, output_index, opset)
    return folded


def _evaluated(node: ir.Node, source: ir.Value, data: np.ndarray, output_index: int, opset: int) -> np.ndarray:
    """Output ``output_index`` of ``node`` given ``data`` as its input ``source`` (its other
    inputs must be constants), by ONNX's reference implementation at the file's opset."""
    import onnx
    import onnx_ir as ir
    from onnx.reference import ReferenceEvaluator

    proto = ir.serde.serialize_node(node)
    feeds, names = {}, []
    for k, value in enumerate(node.inputs):
        if value is None:
            names.append("")
            continue
        array = data if value is source else constant(value)
        if array is None:
            raise _Refused(f"the constant grid is moved by a {node.op_type} whose parameters are not constants")
        names.append(f"x{k}")
        feeds[f"x{k}"] = array
    del proto.input[:], proto.output[:]
    proto.input.extend(names)
    proto.output.extend(f"y{i}" for i in range(len(node.outputs)))
    graph = onnx.helper.make_graph(
        [proto],
        "fold",
        [
            onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [onnx.helper.make_value_info(f"y{i}", onnx.TypeProto()) for i in range(len(node.outputs))],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    return np.asarray(ReferenceEvaluator(model).run(None, feeds)[output_index])


def _locations_of_constant_grids(
    grids: list[np.ndarray], n: _Atom, m: _Atom, value: ir.Value
) -> tuple[np.ndarray, list[_Atom], list[Any]]:
    """The node's sampling locations made of each level's constant grid [N * M, Lq, P_l, 2]:
    [N, Lq, M, L, P, 2] where every level has P points, else [N, Lq, M, sum(P_l), 2]; with
    their axes (as atoms) and the points per level.

    GridSample (align_corners=0) reads pixel ((g + 1) W - 1) / 2, the node loc W - 0.5: with loc
    = (g + 1) / 2, rounded as GridSample rounds g + 1, both are the same number to the bit
    (halving and doubling are exact)."""
    sp = _sympy()
    if not (n.size.is_number and m.size.is_number) or value.dtype is None:
        raise _Refused("the grids are constants, but value's batch, heads or element type is not known")
    batch, heads = int(n.size), int(m.size)
    queries = grids[0].shape[1] if grids[0].ndim == 4 else -1
    for level, grid in enumerate(grids):
        shape_ok = grid.ndim == 4 and grid.shape[0] == batch * heads and grid.shape[1] == queries
        if not shape_ok or grid.shape[3] != 2 or grid.dtype.kind != "f":
            raise _Refused(f"level {level}'s grid is a constant of shape {list(grid.shape)}, not [N * M, Lq, P, 2]")
    one, two = (grids[0].dtype.type(v) for v in (1, 2))
    per_level = [
        ((grid + one) / two).reshape(batch, heads, queries, grid.shape[2], 2).transpose(0, 2, 1, 3, 4) for grid in grids
    ]
    points = [sp.Integer(grid.shape[2]) for grid in grids]
    uniform = len({grid.shape[2] for grid in grids}) == 1
    locations = np.stack(per_level, axis=3) if uniform else np.concatenate(per_level, axis=3)
    locations = np.ascontiguousarray(locations.astype(value.dtype.numpy()))
    axes = [_Atom(f"g{i}", sp.Integer(size)) for i, size in enumerate(locations.shape)]
    return locations, axes, points


def _weights_of_constant(
    weights: np.ndarray, n: _Atom, m: _Atom, queries: _Atom, total_points: Any, per_level: Any, value: ir.Value
) -> tuple[np.ndarray, list[_Atom]]:
    """The node's attention weights made of the constant that multiplies the samples, [N * M, 1,
    Lq, sum(P_l)]: [N, Lq, M, L, P] where every level has P points, else [N, Lq, M, sum(P_l)];
    with their axes (as atoms)."""
    sp = _sympy()
    sizes = (n.size, m.size, queries.size, total_points)
    if not all(size.is_number for size in sizes) or value.dtype is None:
        raise _Refused("the attention weights are a constant, but the samples' sizes are not all known")
    batch, heads, count, points = (int(size) for size in sizes)
    if weights.shape != (batch * heads, 1, count, points) or weights.dtype.kind != "f":
        raise _Refused(
            f"the attention weights are a constant of shape {list(weights.shape)}, not [N * M, 1, Lq, L * P] "
            f"= {[batch * heads, 1, count, points]}"
        )
    laid_out = weights.reshape(batch, heads, count, points).transpose(0, 2, 1, 3)
    if per_level is not None:
        laid_out = laid_out.reshape(batch, count, heads, points // int(per_level), int(per_level))
    laid_out = np.ascontiguousarray(laid_out.astype(value.dtype.numpy()))
    return laid_out, [_Atom(f"w{i}", sp.Integer(size)) for i, size in enumerate(laid_out.shape)]


def _normalizer(tracer: _Tracer, value: ir.Value) -> list[Any]:
    """The entries, row-major, of a float tensor that a file fixes or computes from shapes
    (an integer shape tensor cast to float and unsqueezed), as sympy expressions."""
    array = constant(value)
    if array is not None:
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise _Refused("the offsets are divided by other numbers than the levels' sizes")
        return [_sympy().Integer(int(v)) for v in array.reshape(-1)]
    node = value.producer()
    while node is not None and node.op_type in ("Unsqueeze", "Reshape") and node.domain in _ONNX_DOMAINS:
        node = node.inputs[0].producer()
    if node is None or node.op_type != "Cast" or node.domain not in _ONNX_DOMAINS:
        raise _Refused("the offsets' divisor is neither a constant nor the levels' sizes cast to float")
    return tracer.values(node.inputs[0])


def _reference_term(tracer: _Tracer, term: ir.Value, full: list[Any]) -> tuple[ir.Value | np.ndarray, bool, bool]:
    """The reference points in ``term`` of the sum: ``reference_points[:, :, None, :, None, :]``
    (Unsqueezes at axes 2 and 4 of a rank-4 tensor) or any [N', Lq', 1, L', 1, 2'] tensor;
    whether it must be squeezed, and broadcast to the locations' sizes."""
    base, chain = term, []
    while (node := base.producer()) is not None and node.op_type == "Unsqueeze" and node.domain in _ONNX_DOMAINS:
        chain.append(node)
        base = node.inputs[0]
    # The axes the chain inserted into a rank-4 base, where every Unsqueeze's axes are known.
    inserted: list[int] | None = None
    if chain and base.shape is not None and len(base.shape) == 4:
        axes = ["base"] * 4
        for node in reversed(chain):
            axes_of_node = tracer.axes(node, 1)
            if axes_of_node is None:
                axes = []
                break
            rank = len(axes) + len(axes_of_node)
            for axis in sorted(a % rank for a in axes_of_node):
                axes.insert(axis, "new")
        inserted = [i for i, a in enumerate(axes) if a == "new"] if axes else None
    shape = tracer.shape(term)
    if len(shape) != 6 or not (_equal(shape[2], 1) and _equal(shape[4], 1)):
        raise _Refused("the reference points' term is not [N, Lq, 1, L, 1, 2]")
    squeeze = inserted != [2, 4]
    reference: ir.Value | np.ndarray = term if squeeze else base
    folded = constant(reference)
    if folded is not None:
        reference = folded
    proven = all(_equal(shape[i], full[i]) for i in (0, 1, 3, 5))
    return reference, squeeze, not proven


def _from_offsets(
    tracer: _Tracer, loc: ir.Value, g: list[_Atom], sizes: list[tuple[Any, Any]], value: ir.Value
) -> _Offsets:
    """Proves that the [N, Lq, M, L, P, 2] locations are Deformable DETR's
    ``reference_points[:, :, None, :, None, :] + sampling_offsets / normalizer[None, None, None, :, None, :]``
    with normalizer[l] = (W_l, H_l): an Add of a [N, Lq, 1, L, 1, 2] term (sizes of 1
    broadcast) and a Div (in value's element type, perhaps cast to the reference points' wider
    one) of a tensor of the locations' shape by the levels' sizes."""
    add = loc.producer()
    if add is not None and add.op_type == "Cast" and add.domain in _ONNX_DOMAINS and loc.dtype == value.dtype:
        add = add.inputs[0].producer()  # the sum rounded to value's type, as the node rounds it
    if add is None or add.op_type != "Add" or add.domain not in _ONNX_DOMAINS:
        raise _Refused("the locations are not a sum")
    full = [a.size for a in g]
    last_error = "neither term of the sum is the reference points"
    for side in (0, 1):
        try:
            reference, squeeze, expand = _reference_term(tracer, add.inputs[side], full)
            offsets = _scaled_offsets(tracer, add.inputs[1 - side], full, sizes, value)
            return _Offsets(reference, squeeze, expand, offsets)
        except _Refused as refusal:
            last_error = str(refusal)
    raise _Refused(last_error)


def _scaled_offsets(
    tracer: _Tracer, scaled: ir.Value, full: list[Any], sizes: list[tuple[Any, Any]], value: ir.Value
) -> ir.Value:
    """The offsets of ``scaled`` = offsets / (W_l, H_l), proven."""
    sp = _sympy()
    div = scaled.producer()
    if div is not None and div.op_type == "Cast" and div.domain in _ONNX_DOMAINS:
        # Only a widening cast (float to double): the node rounds the sum to value's type once,
        # where the file rounds it to the wider type first.
        if scaled.dtype is None or scaled.dtype.name != "DOUBLE" or value.dtype.name != "FLOAT":
            raise _Refused("the scaled offsets are cast to another type than float64")
        div = div.inputs[0].producer()
    if div is None or div.op_type != "Div" or div.domain not in _ONNX_DOMAINS:
        raise _Refused("the offsets are not divided by the levels' sizes")
    offsets, divisor = div.inputs
    if offsets.dtype != value.dtype or value.dtype.name not in ("FLOAT", "DOUBLE"):
        raise _Refused("the offsets are not divided in value's element type (float32 or float64)")
    offsets_shape = tracer.shape(offsets)
    if len(offsets_shape) != 6 or not all(_equal(a, b) for a, b in zip(offsets_shape, full)):
        raise _Refused("the offsets are not proven to have the locations' shape")
    divisor_shape = tracer.shape(divisor)
    padded = [sp.Integer(1)] * (6 - len(divisor_shape)) + list(divisor_shape)
    expected = [1, 1, 1, len(sizes), 1, 2]
    if len(padded) != 6 or not all(_equal(a, b) for a, b in zip(padded, expected)):
        raise _Refused("the offsets' divisor is not [L, 2] broadcast over queries, heads and points")
    entries = _normalizer(tracer, divisor)
    widths_heights = [size for h, w in sizes for size in (w, h)]
    if len(entries) != len(widths_heights) or not all(_equal(a, b) for a, b in zip(entries, widths_heights)):
        raise _Refused("the offsets are not divided by the levels' (W_l, H_l)")
    return offsets


def _prove(join: ir.Node, samplers: list[ir.Node], stacked: bool, opset: int) -> _Block:
    sp = _sympy()
    tracer = _Tracer(opset)
    levels = len(samplers)
    for sampler in samplers:
        _check_sampling(sampler, opset)

    # Value: one chunk of the S axis of one [N, S, M, D] tensor per level, in order.
    value_paths = [_path_back(s.inputs[0]) for s in samplers]
    if any(not p for p in value_paths):
        raise _Refused("a GridSample's input is not a reshaped level of a value tensor")
    # The deepest rank-4 tensor on the paths that proves to be [N, S, M, D] is the node's value.
    candidates = [src for _, src, _ in reversed(value_paths[0]) if src.shape is not None and len(src.shape) == 4]
    last_error = "no [N, S, M, D] value tensor feeds the levels"
    for candidate in candidates:
        tracer.layouts.clear()
        tracer.picked.clear()
        try:
            value_layout = tracer.root(candidate, "v")
            if len(value_layout) != 4:
                raise _Refused("the value is not [N, S, M, D]")
            n, s, m, d = (ax[0] for ax in value_layout)
            sizes, sources = [], []
            for level, (sampler, path) in enumerate(zip(samplers, value_paths)):
                layout = _follow(tracer, _up_to(path, candidate), sampler.inputs[0])
                if len(layout) != 4 or not _same_atoms(layout[0], [n, m]) or not _same_atoms(layout[1], [d]):
                    raise _Refused(f"level {level}'s map is not value's [N * M, D, H, W] (heads and channels)")
                pixels = [a for a in layout[2] + layout[3] if not _is_unit(a)]
                chunk = pixels[0].parent if len(pixels) == 2 and pixels[0].part else (pixels[0] if pixels else None)
                split_in_two = len(pixels) == 2 and (pixels[0].part, pixels[1].part) == ("outer", "inner")
                parts_ok = len(pixels) == 1 or (split_in_two and pixels[1].parent is chunk)
                if chunk is None or chunk.parent is not s or not parts_ok:
                    raise _Refused(f"level {level}'s map is not a chunk of value's S axis reshaped to [H, W]")
                height, width = (_product([a.size for a in ax]) for ax in layout[2:4])
                previous = sp.expand(sum(h * w for h, w in sizes))
                if not _equal(chunk.offset, previous):
                    raise _Refused(
                        f"level {level} starts at row {chunk.offset} of value, not after the levels before it "
                        f"({previous}): the split sizes do not match H_l * W_l"
                    )
                sizes.append((height, width))
                sources.append(None if (height.is_number and width.is_number) else _size_source(tracer, sampler, level))
            total = sp.expand(sum(h * w for h, w in sizes))
            splits = [next(node for node, src, _ in _up_to(p, candidate) if src is candidate) for p in value_paths]
            covers = _equal(total, s.size) or (
                splits[0].op_type == "Split"
                and len(splits[0].outputs) == levels
                and all(x is splits[0] for x in splits)
            )
            if not covers:
                raise _Refused(f"the levels' H_l * W_l ({total}) are not proven to cover value's S ({s.size})")
            break
        except _Refused as refusal:
            last_error = str(refusal)
    else:
        raise _Refused(last_error)
    value = candidate
    if value.dtype is None or value.dtype.name not in _FLOAT_TYPES:
        raise _Refused(f"value's element type {value.dtype} (the node takes float, double, float16)")
    # The node computes in value's type: a Cast on the way to the GridSamples would change it.
    if any(sampler.inputs[0].dtype != value.dtype for sampler in samplers):
        raise _Refused("the levels are sampled in another element type than value's (a Cast on the way)")

    # Locations: [N, Lq, M, L, P, 2] picked per level, or [N, Lq, M, L * P, 2] split per level;
    # or, where a simplifier folded them (a decoder layer whose queries are learned embeddings),
    # each level's grid a constant.
    grids = [_folded_grid(sampler, opset) for sampler in samplers]
    loc: ir.Value | np.ndarray
    if all(grid is not None for grid in grids):
        loc, g, points = _locations_of_constant_grids(grids, n, m, value)
        grid_paths = tuple([] for _ in samplers)
        loc_rank = loc.ndim
    else:
        grid_paths, locs, folded = zip(*(_grid_root(sp_node.inputs[1]) for sp_node in samplers))
        if any(loc is not locs[0] for loc in locs) or any(folded):
            raise _Refused("the levels' grids do not come from one sampling_locations tensor")
        loc = locs[0]
        loc_layout = tracer.root(loc, "g")
        if len(loc_layout) not in (5, 6):
            raise _Refused("sampling_locations is neither [N, Lq, M, L, P, 2] nor [N, Lq, M, L * P, 2]")
        g = [ax[0] for ax in loc_layout]
        points = []
        for level, (sampler, path) in enumerate(zip(samplers, grid_paths)):
            tracer.picked.pop(g[3].name, None)
            if path:
                # 2 * loc - 1 (with scalars) keeps loc's layout.
                tracer.layouts[id(path[-1][1])] = loc_layout
            layout = _follow(tracer, list(path), sampler.inputs[1]) if path else loc_layout
            if len(layout) != 4 or not _same_atoms(layout[0], [g[0], g[2]]) or not _same_atoms(layout[1], [g[1]]):
                raise _Refused(f"level {level}'s grid is not sampling_locations' [N * M, Lq, P, 2]")
            if not _same_atoms(layout[3], [g[-1]]) or not _equal(g[-1].size, 2):
                raise _Refused(f"level {level}'s grid does not end in the (x, y) axis of sampling_locations")
            point_atoms = [a for a in layout[2] if not _is_unit(a)]
            if len(loc_layout) == 6:
                if tracer.picked.get(g[3].name) != level or _names(point_atoms) != _names([g[4]]):
                    raise _Refused(f"level {level}'s grid is not level {level} of sampling_locations")
                points.append(g[4].size)
            else:
                chunk = point_atoms[0] if len(point_atoms) == 1 else None
                if chunk is None or chunk.parent is not g[3]:
                    raise _Refused(f"level {level}'s grid is not a chunk of sampling_locations' points")
                points.append(chunk.size)
                if not _equal(chunk.offset, sum(points[:-1])):
                    raise _Refused(f"level {level}'s grid does not take the points after those of the levels before it")
        loc_rank = len(loc_layout)
    if not all(p.is_number for p in points):
        raise _Refused("the number of points per level is not a constant")
    # Different numbers of points per level (D-FINE, DEIM: only the concat form can hold them)
    # become the node's points_per_level; one P keeps the node's [N, Lq, M, L, P] layout.
    uniform = all(_equal(p, points[0]) for p in points)
    per_level = points[0] if uniform else None
    total_points = sp.expand(sum(points))
    if loc_rank == 6 and not (uniform and _equal(g[3].size, levels) and _equal(g[4].size, per_level)):
        raise _Refused(f"sampling_locations has {g[3].size} levels where {levels} are sampled")
    if loc_rank == 5 and not _equal(g[3].size, total_points):
        raise _Refused(f"sampling_locations has {g[3].size} points where {levels} levels of {points} are sampled")
    if not _equal(g[2].size, m.size):
        raise _Refused(f"the heads of sampling_locations ({g[2].size}) are not proven equal to value's ({m.size})")
    # A batch that shape inference lost (Grounding DINO's decoder: reference points picked by a
    # TopK) is still value's on every run the file completes: each level's GridSample requires
    # its grid's N' * M to equal its map's N * M, and M is a known positive number. Where the
    # two differ the node refuses the run, as the GridSample does.
    heads_known = m.size.is_number and m.size > 0
    if not _equal(g[0].size, n.size) and not heads_known:
        raise _Refused(f"the batch of sampling_locations ({g[0].size}) is not proven equal to value's ({n.size})")
    if not isinstance(loc, np.ndarray) and (loc.dtype is None or loc.dtype.name not in _FLOAT_TYPES):
        raise _Refused(f"sampling_locations' element type {loc.dtype}")

    # The join: stacked (Unsqueeze + Concat, then levels and points merged) or concatenated.
    joined = join.outputs[0]
    sample_atoms = {
        "nm": _Atom("s:nm", sp.expand(n.size * m.size)),
        "d": _Atom("s:d", d.size),
        "q": _Atom("s:q", g[1].size),
        "l": _Atom("s:l", sp.Integer(levels)),
        "p": _Atom("s:p", per_level if uniform else sp.Integer(0)),
        "lp": _Atom("s:lp", total_points),
    }
    a = sample_atoms
    axis = int(attribute(join, "axis", 0))
    if stacked:
        if not uniform:
            raise _Refused("the levels' samples are stacked, but their numbers of points differ")
        if axis % 5 != 3 or any(tracer.axes(u.producer(), 1) not in ([3], [-2]) for u in join.inputs):
            raise _Refused("the levels are not stacked on axis -2 of [N * M, D, Lq, L, P]")
        tracer.layouts[id(joined)] = [(a["nm"],), (a["d"],), (a["q"],), (a["l"],), (a["p"],)]
    else:
        if axis % 4 != 3:
            raise _Refused("the levels are not concatenated on the points axis")
        tracer.layouts[id(joined)] = [(a["nm"],), (a["d"],), (a["q"],), (a["lp"],)]
    # Forward from the join along single uses to the Mul by the weights.
    block_nodes: list[ir.Node] = [join]
    current = joined
    while True:
        users = _data_users(current)
        if len(users) != 1 or current.is_graph_output():
            raise _Refused("the stacked samples are used elsewhere than by the weighting")
        user = users[0]
        if user.domain in _ONNX_DOMAINS and user.op_type == "Mul":
            break
        if user.domain not in _ONNX_DOMAINS or user.op_type not in _MOVEMENT or user.inputs[0] is not current:
            raise _Refused(f"the samples go through {user.op_type} before the weights")
        tracer.forward(user, current)
        block_nodes.append(user)
        current = user.outputs[0]
    mul = user
    samples_layout = tracer.layouts[id(current)]
    expected_samples = [[a["nm"]], [a["d"]], [a["q"]], [a["l"], a["p"]] if stacked else [a["lp"]]]
    merged = [x for x in samples_layout[3] if not _is_unit(x)]
    if len(samples_layout) != 4 or any(not _same_atoms(samples_layout[i], expected_samples[i]) for i in range(3)):
        raise _Refused("the samples multiplied by the weights are not [N * M, D, Lq, L * P]")
    if _names(merged) != _names(expected_samples[3]):
        raise _Refused("the samples' last axis is not the levels' points, level after level")

    # Weights: [N, Lq, M, L, P] or [N, Lq, M, L * P], laid out as [N * M, 1, Lq, L * P].
    weights_operand = mul.inputs[1] if mul.inputs[0] is current else mul.inputs[0]
    weight_path = _path_back(weights_operand)
    weight_candidates = [src for _, src, _ in reversed(weight_path)] + [weights_operand]
    folded_weights = constant(weights_operand)
    if folded_weights is not None:
        # Folded by a simplifier (with the grids, where the queries are constants): re-laid out
        # for the node, the same numbers.
        weight_path, weight_candidates = [], []
        weights, w = _weights_of_constant(folded_weights, n, m, g[1], total_points, per_level, value)
    last_error = "the attention weights are not [N, Lq, M, L, P] laid out as [N * M, 1, Lq, L * P]"
    for candidate in weight_candidates:
        try:
            w_layout = tracer.root(candidate, "w")
            if len(w_layout) not in (4, 5):
                raise _Refused("the attention weights are neither [N, Lq, M, L, P] nor [N, Lq, M, L * P]")
            w = [ax[0] for ax in w_layout]
            if candidate is weights_operand:
                layout = w_layout
            else:
                layout = _follow(tracer, _up_to(weight_path, candidate), weights_operand)
            tail = [w[3], w[4]] if len(w) == 5 else [w[3]]
            ok = (
                len(layout) == 4
                and _same_atoms(layout[0], [w[0], w[2]])
                and not _names(layout[1])
                and _same_atoms(layout[2], [w[1]])
                and _same_atoms(layout[3], tail)
            )
            if not ok:
                raise _Refused("the attention weights are not laid out as [N * M, 1, Lq, L * P]")
            sizes_ok = (
                _equal(w[0].size, n.size)
                and _equal(w[1].size, g[1].size)
                and _equal(w[2].size, m.size)
                and (
                    (len(w) == 5 and uniform and _equal(w[3].size, levels) and _equal(w[4].size, per_level))
                    or (len(w) == 4 and _equal(w[3].size, total_points))
                )
            )
            if not sizes_ok:
                raise _Refused("the attention weights' sizes are not proven equal to the samples'")
            weights = candidate
            break
        except _Refused as refusal:
            last_error = str(refusal)
    else:
        if folded_weights is None:
            raise _Refused(last_error)
    if not isinstance(weights, np.ndarray) and (weights.dtype is None or weights.dtype.name not in _FLOAT_TYPES):
        raise _Refused(f"the attention weights' element type {weights.dtype}")

    # The sum over levels and points, and the reshape to [N, Lq, M * D].
    users = [u for u, _ in mul.outputs[0].uses()]
    reduce = users[0] if len(users) == 1 else None
    if reduce is None or reduce.op_type != "ReduceSum" or reduce.domain not in _ONNX_DOMAINS:
        raise _Refused("the weighted samples are not summed by one ReduceSum")
    reduce_axes = tracer.axes(reduce, 1) if opset >= 13 else tracer.axes(reduce, 99)
    if reduce_axes is None or [x % 4 for x in reduce_axes] != [3]:
        raise _Refused(f"the ReduceSum sums axes {reduce_axes}, not the levels' points (axis -1)")
    keep = int(attribute(reduce, "keepdims", 1))
    product = mul.outputs[0]
    tracer.layouts[id(product)] = tracer.layouts[id(current)]
    out_layout: _Layout = [(a["nm"],), (a["d"],), (a["q"],)] + ([()] if keep else [])
    current = reduce.outputs[0]
    tracer.layouts[id(current)] = out_layout
    block_nodes += [mul, reduce]
    final = reduce
    while True:
        layout = tracer.layouts[id(current)]
        if _is_output_layout(layout, a["nm"], n.size, m.size):
            break
        users = _data_users(current)
        if len(users) != 1 or current.is_graph_output():
            raise _Refused("the sum is not reshaped to [N, Lq, M * D] (used elsewhere before)")
        user = users[0]
        if user.domain not in _ONNX_DOMAINS or user.op_type not in _MOVEMENT or user.inputs[0] is not current:
            raise _Refused("the sum is not reshaped to [N, Lq, M * D]")
        tracer.forward(user, current)
        block_nodes.append(user)
        final = user
        current = user.outputs[0]

    nodes = list(block_nodes)
    for sampler, vpath, gpath in zip(samplers, value_paths, grid_paths):
        nodes.append(sampler)
        nodes += [node for node, _, _ in vpath] + [node for node, _, _ in gpath]
    nodes += [node for node, _, _ in weight_path]
    if stacked:
        nodes += [u.producer() for u in join.inputs]
    offsets = None
    if not isinstance(loc, np.ndarray) and loc_rank == 6 and uniform:
        try:
            offsets = _from_offsets(tracer, loc, g, sizes, value)
        except _Refused:
            offsets = None  # the locations as they are
    return _Block(
        value=value,
        locations=loc,
        locations_rank=loc_rank,
        weights=weights,
        weights_rank=len(w),
        sizes=sizes,
        size_sources=sources,
        levels=levels,
        points=int(per_level) if uniform else 0,
        points_per_level=[] if uniform else [int(p) for p in points],
        final=final,
        nodes=list(dict.fromkeys(nodes)),
        offsets=offsets,
    )


# --- the rewrite ---------------------------------------------------------------------------------


def _reference_input(graph: Any, before: ir.Node, offsets: _Offsets, dtype: Any) -> ir.Value:
    """The node's [N, Lq, L, 2] reference points, in value's element type, from the term of the
    sum: squeezed at axes 2 and 4, broadcast to the offsets' sizes where the Add broadcast them."""
    reference = offsets.reference_points
    # Sizes N, Lq, L and 2 of a [N, Lq, ...] tensor: axes 0, 1, 3 and 5 of a rank-6 one.
    axes = np.array([0, 1, 3, 5], np.int64)

    def sizes_of(value: ir.Value) -> ir.Value:
        shape = insert_node(graph, before, "Shape", [value])
        return insert_node(graph, before, "Gather", [shape, insert_constant(graph, before, axes)], axis=0)

    if isinstance(reference, np.ndarray):
        if offsets.squeeze:
            reference = reference.reshape([reference.shape[i] for i in axes])
        reference = insert_constant(graph, before, np.ascontiguousarray(reference.astype(dtype.numpy())))
    else:
        if offsets.squeeze:
            reference = insert_node(graph, before, "Reshape", [reference, sizes_of(reference)])
        if reference.dtype != dtype:
            reference = insert_node(graph, before, "Cast", [reference], to=dtype.value)
    if offsets.expand:
        reference = insert_node(graph, before, "Expand", [reference, sizes_of(offsets.sampling_offsets)])
    return reference


def _rewrite(graph: Any, block: _Block) -> ir.Node:
    before = block.final
    dtype = block.value.dtype
    if all(src is None for src in block.size_sources):
        shapes = np.array([[int(h), int(w)] for h, w in block.sizes], np.int64)
        spatial = insert_constant(graph, before, shapes)
        areas = shapes[:, 0] * shapes[:, 1]
        starts = insert_constant(graph, before, np.concatenate([[0], np.cumsum(areas)[:-1]]).astype(np.int64))
    else:
        # Dynamic sizes: each level's (H_l, W_l) is read from the target of the Reshape that
        # made its [N * M, D, H_l, W_l] map (entries 2 and 3, proven equal to H_l and W_l).
        rows = []
        for (h, w), reshape in zip(block.sizes, block.size_sources):
            if reshape is None:
                rows.append(insert_constant(graph, before, np.array([int(h), int(w)], np.int64)))
            else:
                two, four, zero = (insert_constant(graph, before, np.array([v], np.int64)) for v in (2, 4, 0))
                rows.append(insert_node(graph, before, "Slice", [reshape.inputs[1], two, four, zero]))
        pairs = insert_node(graph, before, "Concat", rows, axis=0)
        spatial = insert_node(
            graph, before, "Reshape", [pairs, insert_constant(graph, before, np.array([-1, 2], np.int64))]
        )
        column = [insert_constant(graph, before, np.array(v, np.int64)) for v in (0, 1)]
        heights, widths = (insert_node(graph, before, "Gather", [spatial, c], axis=1) for c in column)
        areas = insert_node(graph, before, "Mul", [heights, widths])
        starts = insert_node(graph, before, "CumSum", [areas, column[0]], exclusive=1)
    op = "MultiScaleDeformableAttention"
    if block.offsets is not None:
        op = "MultiScaleDeformableAttentionFromOffsets"
        reference = _reference_input(graph, before, block.offsets, dtype)
        locations = block.offsets.sampling_offsets
    elif isinstance(block.locations, np.ndarray):
        locations = insert_constant(graph, before, block.locations)
    else:
        locations = block.locations
    if locations.dtype != dtype:
        # A float64 grid (HuggingFace's TorchScript exports) feeding a float value: the node
        # takes one element type, so the locations are cast to the value's.
        locations = insert_node(graph, before, "Cast", [locations], to=dtype.value)
    if block.locations_rank == 5 and not block.points_per_level:
        target = np.array([0, 0, 0, block.levels, block.points, 2], np.int64)
        locations = insert_node(graph, before, "Reshape", [locations, insert_constant(graph, before, target)])
    weights = insert_constant(graph, before, block.weights) if isinstance(block.weights, np.ndarray) else block.weights
    if weights.dtype != dtype:
        weights = insert_node(graph, before, "Cast", [weights], to=dtype.value)
    if block.weights_rank == 4 and not block.points_per_level:
        target = np.array([0, 0, 0, block.levels, block.points], np.int64)
        weights = insert_node(graph, before, "Reshape", [weights, insert_constant(graph, before, target)])
    inputs = [block.value, spatial, starts, locations, weights]
    if block.offsets is not None:
        inputs[3:3] = [reference]
    # With points_per_level the node takes the concat form's [N, Lq, M, sum(P_l), ...] as they are.
    points_per_level = {"points_per_level": block.points_per_level} if block.points_per_level else {}
    output = insert_node(graph, before, op, inputs, ORTOPS_DOMAIN, **points_per_level)
    replace_value(graph, block.final.outputs[0], output)
    return output.producer()


def _joins(graph: Any) -> list[tuple[ir.Node, list[ir.Node], bool]]:
    """Every Concat whose inputs all are GridSample outputs (concatenated) or Unsqueezes of
    them (stacked), with the samplers in order."""
    found = []
    for node in graph:
        if node.op_type != "Concat" or node.domain not in _ONNX_DOMAINS or not node.inputs:
            continue
        direct = [v.producer() for v in node.inputs]
        if all(_is_grid_sample(p) for p in direct):
            found.append((node, direct, False))
            continue
        samplers = []
        for p in direct:
            if p is None or p.op_type != "Unsqueeze" or not _is_grid_sample(p.inputs[0].producer()):
                break
            samplers.append(p.inputs[0].producer())
        else:
            found.append((node, samplers, True))
    return found


def _walk(graph: Any, model: ir.Model) -> None:
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
    for join, samplers, stacked in _joins(graph):
        if opset < 16 and all(s.domain in _ONNX_DOMAINS for s in samplers):
            record_near_miss(graph, join, f"ONNX opset {opset} has no GridSample")
            continue
        try:
            block = _prove(join, samplers, stacked, opset)
        except _Refused as refusal:
            record_near_miss(graph, join, str(refusal))
            continue
        # The nodes that go away: the block's, less those still read elsewhere (a value split
        # that other layers share), plus the shape computations only the block read.
        dead_before = dead_nodes(graph)
        record_replacement(graph, dead_before, _rewrite(graph, block))


RULE = Rule(
    name="deformable-attention",
    summary="multi-scale deformable attention (per-level GridSample, weighted sum) into "
    "ortops::MultiScaleDeformableAttention, or MultiScaleDeformableAttentionFromOffsets with the Div and Add "
    "that make its locations",
    handles=(
        "the stack form (mmcv's and Deformable DETR's multi_scale_deformable_attn_pytorch, HuggingFace's "
        "Deformable DETR, Grounding DINO, Mask2Former, OneFormer, RT-DETR) and the concat form (RT-DETRv2, "
        "D-FINE, DEIM, Ultralytics), any number of levels, static or dynamic sizes, GridSample 'bilinear' "
        "(opset 16-19) or 'linear' (20 on) or mmdeploy's grid_sampler, a float64 grid (cast to the value's type), "
        "different numbers of points per level (the concat form; the node's points_per_level), locations "
        "computed as reference_points + offsets / (W_l, H_l) (into MultiScaleDeformableAttentionFromOffsets, "
        "with that Div and Add)",
        "left alone: align_corners 1, padding other than zeros, modes other than bilinear, split sizes not "
        "H_l * W_l, sums over other axes",
    ),
    walk=_walk,
)
