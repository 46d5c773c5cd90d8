"""ONNX RoiAlign into ``ortops::RoIAlign`` (avg mode) or ``TRT::ROIAlign_TRT`` (max mode).

ONNX's RoiAlign takes ``rois`` [R, 4] as (x1, y1, x2, y2) and ``batch_indices`` [R] apart;
ortops' node takes [R, 5] rows (batch_index, x1, y1, x2, y2), so the rewrite puts a Cast and a
Concat in front (cheap beside the pooling). The sampling is the same (Detectron's): ONNX
``coordinate_transformation_mode`` half_pixel is ortops' ``aligned`` 1 and output_half_pixel is
``aligned`` 0, and ``avg`` mode gives ONNX Runtime's values to the bit (measured).

ONNX Runtime's ``max`` mode takes, per sample, the largest of the four bilinear-weighted corner
values rather than the largest interpolated sample, which ortops' ``max`` takes. TensorRT's
ROIAlign_TRT (mode 0) computes ONNX's max, ONNX Runtime's values to the bit on finite maps
(measured on random rois, both transformation modes, adaptive and fixed sampling), 6x faster
on the CPU from a channels-last copy: max mode becomes that node, float32 only (its types). Its
batch indices are int32: an index outside int32 becomes -1 first, so that it stays an error.
A NaN in the map is where the two differ: ROIAlign_TRT skips a NaN corner or sample as CUDA's
fmaxf does (ONNX Runtime's CUDA kernel too), ONNX Runtime's CPU kernel keeps or drops it by its
position in std::max. Newer ONNX Runtime releases switch their max to the largest interpolated
sample when ORT_ROIALIGN_MAX_USE_BILINEAR_INTERPOLATION is set; the rewrite keeps the default.
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

# ONNX Runtime's RoiAlign kernels take float and double; ortops::RoIAlign takes both.
_FLOAT_TYPES = ("FLOAT", "DOUBLE")

# A batch index passes through the element type on its way into ortops' rois: float32 holds
# every integer below 2^24 exactly.
_EXACT_INDEX_LIMIT = {"FLOAT": 2**24, "DOUBLE": 2**53}


def _pattern(op: Any, x: ir.Value, rois: ir.Value, batch_indices: ir.Value) -> Any:
    return op.RoiAlign(x, rois, batch_indices, _outputs=["y"])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


TRT_DOMAIN = "TRT"

# Why ortops::RoIAlign's own max cannot stand in for ONNX's.
MAX_OF_CORNERS = (
    "mode 'max': ONNX Runtime's max mode takes the largest bilinear-weighted corner value of each sample, "
    "ortops::RoIAlign the largest interpolated sample"
)


def roi_align_facts(node: ir.Node, version: int | None) -> dict[str, Any] | str:
    """The attributes of ONNX RoiAlign ``node`` (of ONNX opset ``version``) as ortops' nodes
    take them (mode, aligned, sampling_ratio, output_height, output_width, spatial_scale); or,
    where they are not ONNX Runtime's, the reason."""
    x, rois, batch_indices = (node.inputs[i] if i < len(node.inputs) else None for i in range(3))
    if x is None or rois is None or batch_indices is None:
        return "an input is missing"
    if version is None or version < 10:
        return f"the model imports ONNX opset {version}, without RoiAlign"
    mode = _text(attribute(node, "mode", "avg")).lower()
    if mode not in ("avg", "max"):
        return f"mode '{mode}' is not an ONNX value"
    # Opset 10 has no attribute and samples as output_half_pixel; from 16 on the default is half_pixel.
    default_transform = "half_pixel" if version >= 16 else "output_half_pixel"
    transform = _text(attribute(node, "coordinate_transformation_mode", default_transform))
    if transform not in ("half_pixel", "output_half_pixel"):
        return f"coordinate_transformation_mode '{transform}' is not an ONNX value"
    sampling_ratio = int(attribute(node, "sampling_ratio", 0))
    output_height = int(attribute(node, "output_height", 1))
    output_width = int(attribute(node, "output_width", 1))
    if sampling_ratio < 0 or output_height < 1 or output_width < 1:
        return "sampling_ratio is negative or an output size below 1 (ONNX Runtime refuses it)"
    if x.dtype is None or x.dtype.name not in _FLOAT_TYPES or rois.dtype != x.dtype:
        return f"element type {x.dtype} (ONNX Runtime's RoiAlign takes float and double)"
    if batch_indices.dtype is None or batch_indices.dtype.name != "INT64":
        return "batch_indices are not int64"
    return {
        "mode": mode,
        "aligned": int(transform == "half_pixel"),
        "sampling_ratio": sampling_ratio,
        "output_height": output_height,
        "output_width": output_width,
        "spatial_scale": float(attribute(node, "spatial_scale", 1.0)),
    }


def _check(context: Any, x: ir.Value, rois: ir.Value, batch_indices: ir.Value, y: ir.Value) -> Any:
    node = y.producer()
    facts = roi_align_facts(node, opset_version(context))
    if isinstance(facts, str):
        return refuse(context, node, facts)
    if facts["mode"] == "max":
        if x.dtype.name != "FLOAT":
            return refuse(context, node, f"{MAX_OF_CORNERS}; TRT::ROIAlign_TRT, which computes it, takes float32")
        if not (0 < facts["spatial_scale"] < float("inf")):
            return refuse(context, node, f"{MAX_OF_CORNERS}; TRT::ROIAlign_TRT takes a positive spatial_scale")
        return accept(context, **facts)
    shape = static_shape(x)
    if shape is not None and shape[0] is not None and shape[0] > _EXACT_INDEX_LIMIT[x.dtype.name]:
        return refuse(context, node, f"a batch of {shape[0]} images: its indices are not exact in {x.dtype}")
    return accept(context, **facts)


def _rewrite(op: Any, x: ir.Value, rois: ir.Value, batch_indices: ir.Value, **_: Any) -> ir.Value:
    import numpy as np
    import onnx_ir as ir

    facts = proven()

    def const(value: int) -> Any:
        return op.Constant(value=ir.tensor(np.array(value, dtype=np.int64)))

    if facts["mode"] == "max":
        # int64 indices to the plugin's int32: one outside int32 becomes -1 (an error there, as in
        # ONNX Runtime) rather than wrapping onto an image. Ops of opset 9 on, as RoiAlign's files.
        in_int32 = op.And(op.Greater(batch_indices, const(-(2**31) - 1)), op.Less(batch_indices, const(2**31)))
        indices = op.Cast(op.Where(in_int32, batch_indices, const(-1)), to=ir.DataType.INT32.value)
        return made(
            op.ROIAlign_TRT(
                x,
                rois,
                indices,
                coordinate_transformation_mode=facts["aligned"],
                mode=0,
                output_height=facts["output_height"],
                output_width=facts["output_width"],
                sampling_ratio=facts["sampling_ratio"],
                spatial_scale=facts["spatial_scale"],
                _domain=TRT_DOMAIN,
            )
        )
    # Reshape, not Unsqueeze, and a tensor-valued Constant: both read the same in every opset from 10 on.
    column_shape = op.Constant(value=ir.tensor(np.array([-1, 1], dtype=np.int64)))
    index_column = op.Reshape(op.Cast(batch_indices, to=x.dtype.value), column_shape)
    rows = op.Concat(index_column, rois, axis=1)
    return made(
        op.RoIAlign(
            x,
            rows,
            output_height=facts["output_height"],
            output_width=facts["output_width"],
            spatial_scale=facts["spatial_scale"],
            sampling_ratio=facts["sampling_ratio"],
            mode="avg",
            aligned=facts["aligned"],
            _domain=ORTOPS_DOMAIN,
        )
    )


RULE = Rule(
    name="roi-align",
    summary="ONNX RoiAlign (opset 10 and 16): avg mode into ortops::RoIAlign, max mode into TRT::ROIAlign_TRT",
    handles=(
        "RoiAlign of opset 10 (output_half_pixel sampling) and 16 on (half_pixel by default, or output_half_pixel), "
        "mode avg (float or double) and max (float; TensorRT's ROIAlign_TRT computes ONNX's max), any "
        "sampling_ratio (0: adaptive), output size and spatial_scale (positive for max)",
        "left alone: mode max in double",
    ),
    passes=one_pattern(_pattern, _rewrite, _check, "roi-align"),
)
