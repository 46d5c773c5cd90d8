"""Export plumbing shared by every torch op: one call registers both exporters' rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import onnxscript
import torch

import ortops

#: The custom domain and opset version that exported nodes use.
DOMAIN = "ortops"
OPSET_VERSION = 1

# onnxscript resolves ops through onnx.defs, so the ortops schemas must be known first.
ortops.register_onnx_schemas()

#: onnxscript opset for the ``torch.export``-based exporter's translation functions.
onnx_opset = onnxscript.values.Opset(DOMAIN, OPSET_VERSION)

# The TorchScript exporter applies a registered symbolic from this ONNX opset on.
_MIN_DEFAULT_OPSET = 11


@dataclass(frozen=True)
class ExportedOp:
    """A torch op of ortops and the ONNX node it exports to."""

    torch_op: torch._ops.OpOverload
    onnx_op: str  # name in the ortops domain
    function: Callable[..., Any]  # the public wrapper users call
    translation: Callable[..., Any]


_exported: dict[str, ExportedOp] = {}


def register_export(
    op: torch._ops.OpOverload,
    *,
    onnx_op: str,
    function: Callable[..., Any],
    symbolic: Callable[..., Any],
    translation: Callable[..., Any],
) -> None:
    """Registers the export rules of a ``torch.library.custom_op`` for both exporters.

    ``symbolic(g, *args)`` serves the TorchScript exporter (``dynamo=False``);
    ``translation(*args)`` is an onnxscript function for ``dynamo=True``. Both emit the node
    ``ortops::<onnx_op>``; ``function`` is the public Python wrapper (for the docs).
    """
    torch.onnx.register_custom_op_symbolic(op._schema.name, symbolic, _MIN_DEFAULT_OPSET)
    _exported[onnx_op] = ExportedOp(op, onnx_op, function, translation)


def typed(value: Any, like: Any, *, sizes: list[int | None] | None = None, dtype: torch.dtype | None = None) -> Any:
    """Gives a custom node's output in a TorchScript export graph the type of ``like``.

    With ``sizes`` and ``dtype`` the shape and element type are replaced. Without a type the
    exporter warns that shape inference is missing and cannot propagate shapes past the node.
    """
    node_type = like.type()
    if dtype is not None:
        node_type = node_type.with_dtype(dtype)
    if sizes is not None:
        node_type = node_type.with_sizes(sizes)
    value.setType(node_type)
    return value


def exported_ops() -> tuple[ExportedOp, ...]:
    """Every registered torch op with its ONNX op, in registration order."""
    return tuple(_exported.values())


def custom_translation_table() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """The ``custom_translation_table`` for ``torch.onnx.export(..., dynamo=True)``."""
    return {e.torch_op: e.translation for e in _exported.values()}


def export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    f: Any = None,
    *,
    dynamo: bool = True,
    torchvision: bool = False,
    **kwargs: Any,
) -> Any:
    """``torch.onnx.export`` with the ortops rules filled in, for either exporter.

    ``torchvision=True`` also exports torchvision's ``nms``, ``roi_align`` and
    ``deform_conv2d`` to ortops nodes (see :mod:`ortops.torch.torchvision`).

    With ``dynamo=True`` (the default) the ortops translation table is merged into
    ``custom_translation_table``; with ``dynamo=False`` the ``ortops`` domain is added to
    ``custom_opsets``. Every other keyword goes to ``torch.onnx.export`` unchanged.
    Returns what ``torch.onnx.export`` returns (an ``ONNXProgram`` when ``dynamo=True``).
    """
    if torchvision:
        from ortops.torch import torchvision as tv  # noqa: PLC0415 (torchvision is optional)

        return tv.export(model, args, f, dynamo=dynamo, **kwargs)
    if dynamo:
        table = custom_translation_table()
        table.update(kwargs.pop("custom_translation_table", None) or {})
        kwargs["custom_translation_table"] = table
    else:
        opsets = {DOMAIN: OPSET_VERSION}
        opsets.update(kwargs.pop("custom_opsets", None) or {})
        kwargs["custom_opsets"] = opsets
    return torch.onnx.export(model, args, f, dynamo=dynamo, **kwargs)
