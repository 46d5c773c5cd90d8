"""What each ONNX Runtime reads, and ``torch.onnx.export`` with the ortops rules for one of them.

The layer under :func:`ortops.torch.export` and :func:`ortops.torch.torchvision.export`; it
knows nothing of torchvision, so that neither of those imports the other's module.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from ortops.torch._op import DOMAIN, OPSET_VERSION, custom_translation_table

#: The newest ONNX IR version and default-domain opset each ONNX Runtime release reads.
#: Runtimes after the last row read what the exporters of the pinned torch write.
RUNTIME_LIMITS: dict[tuple[int, int], tuple[int, int]] = {
    (1, 17): (9, 20),
    (1, 18): (10, 21),
    (1, 19): (10, 21),
    (1, 20): (10, 21),
}
#: The oldest runtime ortops supports, and the default target of :func:`export`.
OLDEST_RUNTIME = "1.17"

# How an op's own error starts (see ortops.torch._op): "ortops.nms: boxes is float16, ...".
_OP_ERROR = re.compile(r"^ortops\.\w+: ")


def _limits(target_runtime: str | None) -> tuple[int, int] | None:
    """(IR version, opset) that ``target_runtime`` ("1.17", "1.20.1", ...) reads; None: no limit."""
    if target_runtime is None:
        return None
    try:
        major, minor = (int(part) for part in target_runtime.split(".")[:2])
    except ValueError:
        raise ValueError(f"ortops.torch.export: target_runtime must look like '1.17', got {target_runtime!r}") from None
    if (major, minor) < min(RUNTIME_LIMITS):
        raise ValueError(
            f"ortops.torch.export: ortops needs ONNX Runtime {OLDEST_RUNTIME} or newer, not {target_runtime}"
        )
    return RUNTIME_LIMITS.get((major, minor))


def _check_opset(opset: int | None, limits: tuple[int, int] | None, target_runtime: str | None) -> None:
    if opset is not None and limits is not None and opset > limits[1]:
        raise ValueError(
            f"ortops.torch.export: ONNX Runtime {target_runtime} implements ONNX opsets up to {limits[1]}, "
            f"but the model is exported at opset {opset}; pass opset_version={limits[1]} or a newer target_runtime"
        )


def _lower_ir_version(model: Any, ir_version: int) -> None:
    """Stamps an ``onnx_ir`` model with an older IR version, dropping the newer IR's extras.

    The exporter writes the newest IR version it knows, not the oldest its graph needs;
    ONNX Runtime refuses a model stamped newer than itself ("Unsupported model IR version").
    What IR 10 added that this exporter uses is node and graph metadata (source locations),
    which older runtimes have no field for.
    """
    if model.ir_version <= ir_version:
        return
    if ir_version < 10:
        for graph in (model.graph, *(f for f in model.functions.values())):
            graph.metadata_props.clear()
            for value in (*graph.inputs, *graph.outputs):
                value.metadata_props.clear()
            for node in graph.all_nodes():  # subgraphs included
                node.metadata_props.clear()
                for value in node.outputs:
                    value.metadata_props.clear()
        if any(getattr(f, "overload", "") for f in model.functions.values()):
            raise ValueError(
                f"ortops.torch.export: the model uses function overloads (ONNX IR 10), which IR {ir_version} lacks"
            )
    model.ir_version = ir_version


def _op_error(error: BaseException) -> str | None:
    """The message of the ortops op error behind an exporter's error, if one is."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ValueError) and _OP_ERROR.match(str(cause)):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    return None


def _torch_onnx_export(*args: Any, **kwargs: Any) -> Any:
    """``torch.onnx.export``; an ortops op's refusal (float16 for the NMS family, ...) comes
    out as that op's one-line ValueError, as its eager call gives it. The dynamo exporter
    wraps it in its own report, which a traceback prints first with every chained error's
    frames (about 250 lines); that report stays reachable as the error's ``__context__``."""
    try:
        return torch.onnx.export(*args, **kwargs)
    except Exception as error:
        message = _op_error(error)
        if message is None:
            raise
        raise ValueError(message) from None


def export(
    model: torch.nn.Module,
    args: tuple,
    f: Any,
    *,
    dynamo: bool,
    target_runtime: str | None = OLDEST_RUNTIME,
    **kwargs: Any,
) -> Any:
    """:func:`ortops.torch.export` (whose arguments these are) without its ``torchvision``
    switch, which the caller has set up."""
    limits = _limits(target_runtime)
    _check_opset(kwargs.get("opset_version"), limits, target_runtime)
    if not dynamo:
        opsets = {DOMAIN: OPSET_VERSION}
        opsets.update(kwargs.pop("custom_opsets", None) or {})
        kwargs["custom_opsets"] = opsets
        return _torch_onnx_export(model, args, f, dynamo=False, **kwargs)
    table = custom_translation_table()
    table.update(kwargs.pop("custom_translation_table", None) or {})
    kwargs["custom_translation_table"] = table
    # Saved here, after the IR version is settled, as torch.onnx.export would save it.
    save_options = {
        "include_initializers": kwargs.pop("export_params", True),
        "keep_initializers_as_inputs": kwargs.pop("keep_initializers_as_inputs", False),
        "external_data": kwargs.pop("external_data", True),
    }
    program = _torch_onnx_export(model, args, None, dynamo=True, **kwargs)
    if limits is not None:
        _check_opset(program.model.opset_imports.get("", None), limits, target_runtime)
        _lower_ir_version(program.model, limits[0])
    if hasattr(f, "write"):  # a file object, as the TorchScript exporter accepts
        f.write(program.model_proto.SerializeToString())
    elif f is not None:
        program.save(f, **save_options)
    return program
