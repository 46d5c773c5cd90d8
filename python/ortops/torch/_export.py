"""``ortops.torch.export``: one call exports a model that uses ortops' ops, with either exporter."""

from __future__ import annotations

from typing import Any

import torch

from ortops.torch import _runtime
from ortops.torch import torchvision as tv
from ortops.torch._op import DOMAIN, OPSET_VERSION, ExportedOp, custom_translation_table, exported_ops
from ortops.torch._runtime import OLDEST_RUNTIME

__all__ = ["DOMAIN", "OPSET_VERSION", "ExportedOp", "custom_translation_table", "export", "exported_ops"]


def export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    f: Any = None,
    *,
    dynamo: bool = True,
    target_runtime: str | None = OLDEST_RUNTIME,
    torchvision: bool = False,
    **kwargs: Any,
) -> Any:
    """``torch.onnx.export`` with the ortops rules filled in, for either exporter.

    ``torchvision=True`` also exports torchvision's ``nms``, ``roi_align`` and
    ``deform_conv2d`` to ortops nodes (see ``ortops.torch.torchvision_ops``).

    With ``dynamo=True`` (the default) the ortops translation table is merged into
    ``custom_translation_table``; with ``dynamo=False`` the ``ortops`` domain is added to
    ``custom_opsets``. The file is written for ``target_runtime``: by default the oldest ONNX
    Runtime ortops supports (1.17), so it loads in every supported runtime: the IR version
    is lowered to what that runtime reads (the dynamo exporter writes IR 10, which 1.17
    refuses) and an opset newer than it implements is an error. ``target_runtime=None``
    keeps what the exporter writes. Every other keyword goes to ``torch.onnx.export``
    unchanged. Returns what ``torch.onnx.export`` returns (an ``ONNXProgram`` when
    ``dynamo=True``).

    Raises:
        ValueError: for an opset newer than ``target_runtime`` implements, or an input an op
            refuses (a float16 input of an op whose kernels lack float16, ...): the op's own
            one-line message, as its eager call gives it, with torch.onnx.export's report on
            the failure kept as the error's ``__context__`` instead of printed before it.
    """
    export_function = tv.export if torchvision else _runtime.export
    return export_function(model, args, f, dynamo=dynamo, target_runtime=target_runtime, **kwargs)
