"""torchvision's ``MultiScaleRoIAlign`` (per-level RoiAlign merged by ScatterElements): found
and reported, not merged into ``ortops::MultiLevelRoIAlign``.

torchvision's export (TorchScript exporter) maps each roi to a level with its ``LevelMapper``,
``k = floor(4 + log2(sqrt(area) / 224) + 1e-6)`` clamped to ``[k_min, k_max]``, then per level
gathers that level's rois (Equal, NonZero, Gather), pools them with RoiAlign and scatters the
result back into a zeros tensor (ScatterElements on axis 0, one per level, chained).

``ortops::MultiLevelRoIAlign`` follows mmdet's ``map_roi_levels``: ``floor(log2(s / finest_scale
+ 1e-6))``. With ``finest_scale = 224 * 2^(k_min - 4)`` the two agree except where the eps
enters: for a roi whose scale s lies a relative 5e-7 to 7e-7 under a level boundary
(``finest_scale * 2^l``), mmdet's formula moves it up a level and torchvision's does not (and
float rounding of the exported Log and Div moves that band). No check on the file can prove that
no roi at run time falls there, so the merge is a near-miss; each level's RoiAlign is still
rewritten by the ``roi-align`` rule, which is exact on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ortops._optimize import Rule, record_near_miss

if TYPE_CHECKING:
    import onnx_ir as ir

_ONNX_DOMAINS = ("", "ai.onnx")
# What may stand between a level's RoiAlign and its ScatterElements (torchvision casts the
# pooled values to the result's type).
_PASS_THROUGH = ("Cast",)

LEVEL_FORMULA_DIFFERS = (
    "torchvision's MultiScaleRoIAlign over {levels} levels: its LevelMapper takes floor(4 + log2(s / 224) + 1e-6), "
    "ortops::MultiLevelRoIAlign mmdet's floor(log2(s / finest_scale + 1e-6)); the eps enters differently, so a roi "
    "whose scale s is a relative 5e-7 to 7e-7 under a level boundary goes to another level. Not provable for every "
    "roi: the per-level RoiAligns are left to the roi-align rule"
)


def _is(node: ir.Node | None, op_type: str) -> bool:
    return node is not None and node.domain in _ONNX_DOMAINS and node.op_type == op_type


def _pooled_by_roi_align(value: ir.Value | None) -> bool:
    """Whether ``value`` is a RoiAlign's output, through Casts (ONNX's, or the ortops node the
    roi-align rule made of it)."""
    node = value.producer() if value is not None else None
    while node is not None and node.domain in _ONNX_DOMAINS and node.op_type in _PASS_THROUGH:
        node = node.inputs[0].producer() if node.inputs[0] is not None else None
    if node is None:
        return False
    return (node.domain in _ONNX_DOMAINS and node.op_type == "RoiAlign") or (
        node.domain == "ortops" and node.op_type == "RoIAlign"
    )


def _is_level_scatter(node: ir.Node) -> bool:
    if not _is(node, "ScatterElements") or len(node.inputs) != 3:
        return False
    axis = node.attributes.get("axis")
    return (axis is None or axis.value == 0) and _pooled_by_roi_align(node.inputs[2])


def _walk(graph: Any, model: ir.Model) -> None:
    del model  # the block's conditions are read from the graph alone
    for node in graph:
        if not _is_level_scatter(node):
            continue
        # The last of a chain: its output does not feed another level's ScatterElements.
        if any(_is_level_scatter(user) and user.inputs[0] is node.outputs[0] for user, _ in node.outputs[0].uses()):
            continue
        levels, first = 1, node
        while True:
            data = first.inputs[0]
            previous = data.producer() if data is not None else None
            if previous is None or not _is_level_scatter(previous):
                break
            levels, first = levels + 1, previous
        if not _is(first.inputs[0].producer() if first.inputs[0] is not None else None, "ConstantOfShape"):
            continue  # not torchvision's zeros-initialised merge
        if levels < 2:
            continue  # one level: torchvision pools it with one RoiAlign and no merge
        record_near_miss(graph, node, LEVEL_FORMULA_DIFFERS.format(levels=levels))


RULE = Rule(
    name="multi-level-roi-align",
    summary="torchvision's MultiScaleRoIAlign (per-level RoiAlign merged by ScatterElements): reported, left to "
    "roi-align per level (its level formula differs from ortops::MultiLevelRoIAlign's)",
    handles=(
        "left alone and reported: torchvision's per-level RoiAlign + ScatterElements merge (TorchScript exporter), "
        "whose LevelMapper puts its eps outside the log where ortops::MultiLevelRoIAlign (mmdet's) puts it inside",
    ),
    walk=_walk,
)
