"""Export of torchvision's detection ops to ortops nodes.

torchvision's ``nms``, ``roi_align`` and ``deform_conv2d`` (and everything built on them:
``batched_nms``, ``RoIAlign``, ``MultiScaleRoIAlign``, ``DeformConv2d``, the Faster / Mask /
Keypoint R-CNN, RetinaNet, FCOS and SSD models) run as the custom ops
``torch.ops.torchvision.*``. Both PyTorch exporters translate them to standard ONNX
(``NonMaxSuppression``, ``RoiAlign``; the TorchScript exporter has no rule for
``deform_conv2d``). Here they are translated to ``ortops::NMS``, ``ortops::RoIAlign`` and
``ortops::DeformConv2d`` instead, with torchvision's exact semantics:

======================================  ===================================================
torchvision                             ortops node
======================================  ===================================================
``nms(boxes, scores, iou_threshold)``   ``NMS(boxes, scores)``, ``iou_threshold``,
                                        ``offset=0``; kept indices sorted by score
``roi_align(input, rois, output_size,   ``RoIAlign(input, rois)``, ``mode="avg"``, same
spatial_scale, sampling_ratio,          ``aligned``; ``sampling_ratio <= 0`` (adaptive) is
aligned)``                              exported as 0, which means adaptive in ortops
``deform_conv2d(input, offset, weight,  ``DeformConv2d(input, offset, weight, bias, mask)``;
bias, stride, padding, dilation,        without a mask the node gets an empty ``[0]`` mask
mask)``                                 (torchvision fills a left-out bias with zeros)
======================================  ===================================================

The switch is ``ortops.torch.export(..., torchvision=True)`` (both exporters). Underneath:
:func:`translation_table` for ``torch.onnx.export(..., dynamo=True)`` and the context manager
:func:`torchvision_ops` for ``torch.onnx.export(..., dynamo=False)``. torchvision itself is
imported only when one of these is used: it stays an optional dependency of ortops.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from onnxscript import ir
from onnxscript.onnx_opset import opset18 as onnx18
from torch.onnx import symbolic_helper

from ortops.torch import _runtime
from ortops.torch.deform_conv import DEFORM_CONV2D
from ortops.torch.nms import NMS
from ortops.torch.roi_align import ROI_ALIGN

# The first opset of the TorchScript rules here. torchvision registers its own for nms at 11
# and for roi_align at 11 and 16; ours replace every one of them while they are active.
_TORCHSCRIPT_MIN_OPSET = 11


def _import_torchvision() -> None:
    """Loads torchvision, which registers ``torch.ops.torchvision``; a clear error without it."""
    try:
        import torchvision  # noqa: F401, PLC0415 (optional dependency, loaded on first use)
    except ImportError as error:
        raise ImportError(
            "ortops.torch.torchvision: torchvision is not installed; it is needed to export torchvision's ops"
        ) from error


def _adaptive(sampling_ratio: int) -> int:
    """torchvision's sampling_ratio (<= 0: adaptive) as ortops' attribute (0: adaptive)."""
    return max(int(sampling_ratio), 0)


# ---- torch.export-based exporter (dynamo=True): onnxscript translations ------------------


# Each translation maps torchvision's arguments onto the ortops op's and emits the node
# through that op's own rule, so a node is written in one place for both.


def _nms_translation(dets, scores, iou_threshold: float):  # noqa: ANN001, ANN202 (onnxscript values)
    return NMS.translation(dets, scores, iou_threshold, 0)


def _roi_align_translation(  # noqa: ANN202 (onnxscript values)
    input,  # noqa: ANN001
    rois,  # noqa: ANN001
    spatial_scale: float,
    pooled_height: int,
    pooled_width: int,
    sampling_ratio: int,
    aligned: bool,
):
    attributes = (spatial_scale, _adaptive(sampling_ratio), "avg", int(bool(aligned)))
    return ROI_ALIGN.translation(input, rois, pooled_height, pooled_width, *attributes)


def _deform_conv2d_translation(  # noqa: ANN202 (onnxscript values)
    input,  # noqa: ANN001
    weight,  # noqa: ANN001
    offset,  # noqa: ANN001
    mask,  # noqa: ANN001
    bias,  # noqa: ANN001
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dilation_h: int,
    dilation_w: int,
    groups: int,
    offset_groups: int,
    use_mask: bool,
):
    if not use_mask:  # torchvision passes a placeholder [N, 1] of zeros; the node's "none" is [0]
        mask = onnx18.Constant(value=ir.tensor([], dtype=input.dtype))
    geometry = ([stride_h, stride_w], [pad_h, pad_w], [dilation_h, dilation_w])
    return DEFORM_CONV2D.translation(input, offset, weight, bias, mask, *geometry, groups, offset_groups)


def translation_table() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """``custom_translation_table`` entries that export torchvision's ops to ortops nodes.

    For ``torch.onnx.export(..., dynamo=True)``; merge with
    :func:`ortops.torch.custom_translation_table` when the model also calls ortops' own ops
    (``ortops.torch.export(..., torchvision=True)`` does both).
    """
    _import_torchvision()
    ops = torch.ops.torchvision
    return {
        ops.nms.default: _nms_translation,
        ops.roi_align.default: _roi_align_translation,
        ops.deform_conv2d.default: _deform_conv2d_translation,
    }


# ---- TorchScript exporter (dynamo=False): symbolic functions -----------------------------


# As the translations: torchvision's arguments mapped, then the ortops op's own rule (whose
# parse_args passes Python values through as they are).


@symbolic_helper.parse_args("v", "v", "f")
def _nms_symbolic(g, boxes, scores, iou_threshold):  # noqa: ANN001, ANN202 (TorchScript graph values)
    return NMS.symbolic(g, boxes, scores, iou_threshold, 0)


@symbolic_helper.parse_args("v", "v", "f", "i", "i", "i", "b")
def _roi_align_symbolic(g, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):  # noqa: ANN001, ANN202
    attributes = (spatial_scale, _adaptive(sampling_ratio), "avg", int(aligned))
    return ROI_ALIGN.symbolic(g, input, rois, pooled_height, pooled_width, *attributes)


@symbolic_helper.parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "b")
def _deform_conv2d_symbolic(  # noqa: ANN202 (TorchScript graph values)
    g,  # noqa: ANN001
    input,  # noqa: ANN001
    weight,  # noqa: ANN001
    offset,  # noqa: ANN001
    mask,  # noqa: ANN001
    bias,  # noqa: ANN001
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dilation_h: int,
    dilation_w: int,
    groups: int,
    offset_groups: int,
    use_mask: bool,
):
    if not use_mask:
        dtype = input.type().dtype() if input.type().scalarType() is not None else torch.float32
        mask = g.op("Constant", value_t=torch.empty((0,), dtype=dtype))
    geometry = ([stride_h, stride_w], [pad_h, pad_w], [dilation_h, dilation_w])
    return DEFORM_CONV2D.symbolic(g, input, offset, weight, bias, mask, *geometry, groups, offset_groups)


_SYMBOLICS: dict[str, Callable[..., Any]] = {
    "torchvision::nms": _nms_symbolic,
    "torchvision::roi_align": _roi_align_symbolic,
    "torchvision::deform_conv2d": _deform_conv2d_symbolic,
}

_lock = threading.RLock()


def _custom_symbolics(name: str) -> dict[int, Callable[..., Any]]:
    """The custom symbolics registered for ``name`` now, by opset (torchvision's own, a user's)."""
    from torch.onnx._internal.torchscript_exporter import registration  # noqa: PLC0415 (TorchScript only)

    group = registration.registry.get_function_group(name)
    if group is None:
        return {}
    # Only the overrides layer holds custom symbolics; torch has no public way to list them.
    return dict(group._functions._overrides)


@contextlib.contextmanager
def torchvision_ops() -> Iterator[None]:
    """While active, the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``)
    exports torchvision's ``nms``, ``roi_align`` and ``deform_conv2d`` to ortops nodes.

    Export inside it with ``custom_opsets={"ortops": 1}`` (or use
    ``ortops.torch.export(..., dynamo=False, torchvision=True)``). On exit the symbolics
    registered before (torchvision's own, to ``NonMaxSuppression`` / ``RoiAlign``) are put back.
    For ``dynamo=True`` pass ``ortops.torch.torchvision.translation_table()`` instead; this context does not affect it.
    """
    _import_torchvision()
    with _lock:
        saved = {name: _custom_symbolics(name) for name in _SYMBOLICS}
        try:
            for name, symbolic in _SYMBOLICS.items():
                # Every opset that has a rule now (torchvision's roi_align has one from 16 on)
                # must get ours, or the exporter would pick the newer one.
                for opset in {_TORCHSCRIPT_MIN_OPSET, *saved[name]}:
                    torch.onnx.register_custom_op_symbolic(name, symbolic, opset)
            yield
        finally:
            for name in _SYMBOLICS:
                for opset in {_TORCHSCRIPT_MIN_OPSET, *saved[name]}:
                    torch.onnx.unregister_custom_op_symbolic(name, opset)
                for opset, symbolic in saved[name].items():
                    torch.onnx.register_custom_op_symbolic(name, symbolic, opset)


# ---- torchvision functions that torch.export cannot trace -----------------------------------


def _batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """``torchvision.ops.batched_nms`` as one NMS over boxes moved apart per class.

    The same strategy as torchvision's own path for at most 1000 boxes and for traced models
    (a class's boxes are shifted by class * (largest coordinate + 1)), without its branches on
    the number of boxes, which torch.export cannot decide for a data-dependent count. The 0
    joined to the coordinates keeps the maximum defined when there are no boxes.
    """
    largest = torch.cat([boxes.reshape(-1), boxes.new_zeros(1)]).max()
    shifted = boxes + (idxs.to(boxes) * (largest + 1))[:, None]
    return torch.ops.torchvision.nms(shifted, scores, iou_threshold)


def _multiscale_roi_align(
    features: list[torch.Tensor],
    boxes: list[torch.Tensor],
    output_size: tuple[int, int],
    sampling_ratio: int,
    scales: list[float] | None,
    mapper: Callable[[list[torch.Tensor]], torch.Tensor] | None,
) -> torch.Tensor:
    """``MultiScaleRoIAlign``'s pooling: each roi pooled from the level ``mapper`` gives it.

    Equal to torchvision's function, but one op (``ortops.torch.roi_align_by_level``, exported
    as ``ortops::RoIAlignByLevel``) where torchvision pools level by level and merges the results
    with an index per level (which torch.export cannot size: ``len(rois)`` would need a concrete
    count). Maps other than float32 (the node's only type) are pooled level by level. Returns
    ``Tensor[R, C, *output_size]``.
    """
    import torchvision  # noqa: PLC0415 (optional dependency)

    from ortops.torch.roi_align_by_level import roi_align_by_level  # noqa: PLC0415 (import cycle)

    if scales is None or mapper is None:
        raise ValueError("MultiScaleRoIAlign: scales and mapper must be set up before pooling")
    rois = torchvision.ops.poolers._convert_to_roi_format(boxes)
    if len(features) == 1:
        return torchvision.ops.roi_align(features[0], rois, output_size, scales[0], sampling_ratio)
    levels = mapper(boxes)
    if all(f.dtype == torch.float32 for f in features) and rois.dtype == torch.float32:
        return roi_align_by_level(features, rois, levels, output_size, scales, sampling_ratio, aligned=False)
    pooled = features[0].new_zeros((rois.shape[0], features[0].shape[1], *output_size))
    for level, (feature, scale) in enumerate(zip(features, scales, strict=True)):
        chosen = torch.where(levels == level)[0]
        level_pooled = torchvision.ops.roi_align(feature, rois[chosen], output_size, scale, sampling_ratio)
        pooled = pooled.index_put((chosen,), level_pooled.to(pooled.dtype))
    return pooled


@contextlib.contextmanager
def _replaced(replacements: tuple[tuple[Any, str, Any], ...]) -> Iterator[None]:
    """While active, each (module, name, function) of ``replacements`` is module.name."""
    with _lock:
        saved = [getattr(module, name) for module, name, _ in replacements]
        try:
            for module, name, function in replacements:
                setattr(module, name, function)
            yield
        finally:
            for (module, name, _), original in zip(replacements, saved, strict=True):
                setattr(module, name, original)


@contextlib.contextmanager
def _one_node_pooling() -> Iterator[None]:
    """While active, ``MultiScaleRoIAlign`` pools with :func:`_multiscale_roi_align` (for the
    TorchScript exporter, which would otherwise write torchvision's per-level merge)."""
    import torchvision  # noqa: PLC0415 (optional dependency)

    with _replaced(((torchvision.ops.poolers, "_multiscale_roi_align", _multiscale_roi_align),)):
        yield


@contextlib.contextmanager
def _traceable_torchvision() -> Iterator[None]:
    """While active, the two torchvision functions that stop torch.export on detection models
    (Faster / Mask R-CNN, RetinaNet, ...) are replaced by the equivalents above."""
    import torchvision  # noqa: PLC0415 (optional dependency)

    with _replaced(((torchvision.ops.boxes, "batched_nms", _batched_nms),)), _one_node_pooling():
        yield


def export(model: torch.nn.Module, args: tuple[Any, ...], f: Any = None, *, dynamo: bool = True, **kwargs: Any) -> Any:
    """``ortops.torch.export`` with torchvision's ops exported to ortops nodes (either exporter).

    With ``dynamo=True`` :func:`translation_table` is added to ``custom_translation_table``
    (entries the caller passes win), and while torch.export traces the model,
    ``torchvision.ops.batched_nms`` and ``MultiScaleRoIAlign``'s pooling are replaced by
    equivalents it can trace (``_batched_nms``, ``_multiscale_roi_align``): with them Faster
    R-CNN and RetinaNet export at a fixed image size (torch 2.15 cannot export them with a
    dynamic one; Mask R-CNN's mask pasting does not export). With ``dynamo=False`` the export
    runs inside :func:`torchvision_ops`. Returns what ``torch.onnx.export`` returns.
    """
    if dynamo:
        table = translation_table()
        table.update(kwargs.pop("custom_translation_table", None) or {})
        with _traceable_torchvision():
            return _runtime.export(model, args, f, dynamo=True, custom_translation_table=table, **kwargs)
    with torchvision_ops(), _one_node_pooling():
        return _runtime.export(model, args, f, dynamo=False, **kwargs)


__all__ = ["export", "torchvision_ops", "translation_table"]
