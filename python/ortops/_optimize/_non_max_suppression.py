"""ONNX NonMaxSuppression into ``ortops::NonMaxSuppression``.

ortops' node takes ONNX's inputs and attribute as they are and gives ONNX Runtime's rows bit
for bit (csrc/ops/non_max_suppression), so the rewrite proves only what the node accepts: float32
boxes and scores, an int64 max_output_boxes_per_class and float32 thresholds (constants or
graph inputs alike), and a valid center_point_box. The same node in an If or Loop body (where
torchvision's detectors put it) is rewritten there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ortops._optimize import ORTOPS_DOMAIN, Rule, accept, attribute, made, one_pattern, opset_version, proven, refuse

if TYPE_CHECKING:
    import onnx_ir as ir

# The element type each input must have: ONNX Runtime's NonMaxSuppression takes float32 boxes,
# scores and thresholds only, and so does ortops'.
_INPUT_TYPES = (
    ("boxes", "FLOAT"),
    ("scores", "FLOAT"),
    ("max_output_boxes_per_class", "INT64"),
    ("iou_threshold", "FLOAT"),
    ("score_threshold", "FLOAT"),
)


def _pattern(op: Any, boxes: ir.Value, scores: ir.Value) -> Any:
    # The optional inputs, present or not, come along with the node (the check reads them).
    return op.NonMaxSuppression(boxes, scores, _allow_other_inputs=True, _outputs=["selected_indices"])


def _check(context: Any, boxes: ir.Value, scores: ir.Value, selected_indices: ir.Value) -> Any:
    node = selected_indices.producer()
    version = opset_version(context)
    if version is None or version < 10:
        return refuse(context, node, f"the model imports ONNX opset {version}, without NonMaxSuppression")
    inputs = list(node.inputs)
    if len(inputs) > len(_INPUT_TYPES):
        return refuse(context, node, f"{len(inputs)} inputs, more than ONNX's five")
    for (name, expected), value in zip(_INPUT_TYPES, inputs):
        if value is None:
            continue  # an optional input left out: the node takes it so too
        if value.dtype is None:
            return refuse(context, node, f"the element type of {name} is not known")
        if value.dtype.name != expected:
            return refuse(context, node, f"{name} is {value.dtype.name}, not {expected} (ONNX Runtime's types)")
    center_point_box = int(attribute(node, "center_point_box", 0))
    if center_point_box not in (0, 1):
        return refuse(context, node, f"center_point_box {center_point_box} (ONNX Runtime refuses it)")
    return accept(context, inputs=inputs, center_point_box=center_point_box)


def _rewrite(op: Any, boxes: ir.Value, scores: ir.Value, **_: Any) -> ir.Value:
    facts = proven()
    return made(
        op.NonMaxSuppression(*facts["inputs"], center_point_box=facts["center_point_box"], _domain=ORTOPS_DOMAIN)
    )


RULE = Rule(
    name="non-max-suppression",
    summary="ONNX NonMaxSuppression (opset 10 on) into ortops::NonMaxSuppression, in If and Loop bodies too",
    handles=(
        "NonMaxSuppression of opset 10 on, in the main graph or a subgraph (torchvision's detectors put it in If "
        "bodies), with any of its optional inputs, constant or computed, and either center_point_box",
        "left alone: element types other than ONNX Runtime's (float32 boxes, scores and thresholds, int64 "
        "max_output_boxes_per_class) or not known",
    ),
    passes=one_pattern(_pattern, _rewrite, _check, "non-max-suppression"),
)
