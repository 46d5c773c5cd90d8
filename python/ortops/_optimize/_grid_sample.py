"""ONNX GridSample (4-D) into ``ortops::GridSample``, where ortops' kernel is faster.

ortops' node computes ``torch.nn.functional.grid_sample``; ONNX Runtime's GridSample (opset 16
on) gives the same values within float rounding for every (mode, padding, align_corners) but
one, measured on random grids, grids far outside [-1, 1] and grids of exact pixel centres and
half-pixel points: ``nearest`` with ``reflection`` padding rounds a reflected half-pixel
coordinate to another pixel than PyTorch (and ortops) do, so it stays. Which cases are rewritten
is data (:data:`FASTER_CASES`): the (element type, mode, padding) triples where ortops' kernel
measured faster than ONNX Runtime's at one thread (docs/optimize.md has the table).

Only 4-D inputs map (ortops' node is 2-D; opset 20's N-D GridSample on 5-D inputs stays). The
GridSamples of a deformable-attention block are taken by that rule, which runs first; any it
leaves (a near-miss of the block) are rewritten here one by one, each node being equal alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ortops._optimize import (
    ORTOPS_DOMAIN,
    Rule,
    accept,
    attribute,
    made,
    one_pattern,
    opset_version,
    proven,
    refuse,
    static_shape,
)

if TYPE_CHECKING:
    import onnx_ir as ir

# ortops' attribute values, by the mode and padding names of ONNX opsets 16 to 19 ('bilinear',
# 'bicubic') and 20 on ('linear', 'cubic').
_MODES = {"bilinear": 0, "linear": 0, "nearest": 1, "bicubic": 2, "cubic": 2}
_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}
# The name each mode has in the table below (opset 16's).
_CANONICAL_MODE = {
    "bilinear": "bilinear",
    "linear": "bilinear",
    "nearest": "nearest",
    "bicubic": "bicubic",
    "cubic": "bicubic",
}

#: (element type, mode, padding) where ortops::GridSample measured faster than ONNX Runtime's
#: GridSample on every shape tried (1 thread, docs/optimize.md); a case not listed is left to
#: ONNX Runtime. Every measured case was faster.
FASTER_CASES: frozenset[tuple[str, str, str]] = frozenset(
    (dtype, mode, padding)
    for dtype in ("FLOAT", "DOUBLE", "FLOAT16")
    for mode in ("bilinear", "nearest", "bicubic")
    for padding in ("zeros", "border", "reflection")
)

#: (mode, padding) whose values differ from ONNX Runtime's beyond rounding, with why.
UNEQUAL_CASES: dict[tuple[str, str], str] = {
    ("nearest", "reflection"): (
        "nearest with reflection padding: ONNX Runtime rounds a reflected half-pixel coordinate to another "
        "pixel than ortops::GridSample (PyTorch's rule) does (measured)"
    ),
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pattern(op: Any, x: ir.Value, grid: ir.Value) -> Any:
    return op.GridSample(x, grid, _outputs=["y"])


def _check(context: Any, x: ir.Value, grid: ir.Value, y: ir.Value) -> Any:
    node = y.producer()
    version = opset_version(context)
    if version is None or version < 16:
        return refuse(context, node, f"the model imports ONNX opset {version}, without GridSample")
    default_mode = "linear" if version >= 20 else "bilinear"
    mode_name = _text(attribute(node, "mode", default_mode))
    padding = _text(attribute(node, "padding_mode", "zeros"))
    align_corners = int(attribute(node, "align_corners", 0))
    known_modes = ("linear", "nearest", "cubic") if version >= 20 else ("bilinear", "nearest", "bicubic")
    if mode_name not in known_modes or padding not in _PADDINGS or align_corners not in (0, 1):
        return refuse(
            context,
            node,
            f"mode '{mode_name}', padding_mode '{padding}', align_corners {align_corners}: "
            f"not values of opset {version}",
        )
    x_shape, grid_shape = static_shape(x), static_shape(grid)
    if x_shape is None or grid_shape is None:
        return refuse(context, node, "the rank of the input or grid is not known (ortops::GridSample is 2-D)")
    if len(x_shape) != 4 or len(grid_shape) != 4 or grid_shape[3] not in (2, None):
        return refuse(
            context, node, f"input of rank {len(x_shape)}, grid of rank {len(grid_shape)}: ortops::GridSample is 2-D"
        )
    if x.dtype is None or grid.dtype != x.dtype:
        return refuse(context, node, f"input {x.dtype} and grid {grid.dtype}: ortops::GridSample takes one type")
    if version < 20 and x.dtype.name != "FLOAT":
        # Nothing to be equal to: the file does not run there.
        return refuse(
            context, node, f"{x.dtype.name} at opset {version}: ONNX Runtime's GridSample before 20 is float only"
        )
    mode = _CANONICAL_MODE[mode_name]
    unequal = UNEQUAL_CASES.get((mode, padding))
    if unequal is not None:
        return refuse(context, node, unequal)
    if (x.dtype.name, mode, padding) not in FASTER_CASES:
        return refuse(
            context, node, f"ONNX Runtime's own GridSample is faster for {x.dtype.name} {mode} with {padding} padding"
        )
    return accept(
        context, interpolation_mode=_MODES[mode_name], padding_mode=_PADDINGS[padding], align_corners=align_corners
    )


def _rewrite(op: Any, x: ir.Value, grid: ir.Value, **_: Any) -> ir.Value:
    facts = proven()
    return made(
        op.GridSample(
            x,
            grid,
            interpolation_mode=facts["interpolation_mode"],
            padding_mode=facts["padding_mode"],
            align_corners=facts["align_corners"],
            _domain=ORTOPS_DOMAIN,
        )
    )


RULE = Rule(
    name="grid-sample",
    summary="ONNX GridSample (opset 16 on, 4-D) into ortops::GridSample where ortops' kernel is faster",
    handles=(
        "GridSample of opset 16 on with a 4-D input and grid of one element type (float, double, float16), modes "
        "bilinear/linear, nearest, bicubic/cubic, paddings zeros, border, reflection, either align_corners, where "
        "ortops measured faster (FASTER_CASES)",
        "left alone: nearest with reflection padding (ONNX Runtime rounds reflected half-pixel points otherwise), "
        "inputs of another rank or unknown rank, a case not in FASTER_CASES",
    ),
    passes=one_pattern(_pattern, _rewrite, _check, "grid-sample"),
)
