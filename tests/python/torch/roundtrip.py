"""Export a module with each PyTorch exporter, run it in ONNX Runtime with ortops."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

import ortops
import ortops.torch

EXPORTERS = ["torchscript", "dynamo"]


def pyramid_rois(g: torch.Generator, rois: int, batch: int, image: tuple[int, int]) -> torch.Tensor:
    """``Tensor[rois, 5]`` (batch_index, x1, y1, x2, y2) over ``batch`` images of ``image``
    (height, width): scales 2 to 200, aspect ratios e^-0.7 to e^0.7, some crossing the image
    edges, for the multi-level RoIAlign tests."""
    scale = torch.exp(torch.rand(rois, generator=g) * (np.log(200) - np.log(2)) + np.log(2))
    aspect = torch.exp(torch.rand(rois, generator=g) * 1.4 - 0.7)
    w, h = scale * aspect, scale / aspect
    cx = (torch.rand(rois, generator=g) * 1.2 - 0.1) * image[1]
    cy = (torch.rand(rois, generator=g) * 1.2 - 0.1) * image[0]
    index = torch.randint(0, batch, (rois,), generator=g).float()
    return torch.stack([index, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)


def export(
    module: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    exporter: str,
    dynamic_dims: Sequence[dict[int, str] | None] | None = None,
    **export_options: Any,
) -> onnx.ModelProto:
    """Exports ``module`` with ``exporter`` ("torchscript" or "dynamo") to an in-memory model.

    ``dynamic_dims[i]`` maps dimensions of input i to names; those stay symbolic.
    ``export_options`` go to ``ortops.torch.export`` (e.g. ``torchvision=True``).
    """
    names = [f"input{i}" for i in range(len(args))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            buffer = io.BytesIO()
            axes = {names[i]: dims for i, dims in enumerate(dynamic_dims or []) if dims}
            ortops.torch.export(
                module,
                args,
                buffer,
                dynamo=False,
                input_names=names,
                dynamic_axes=axes or None,
                opset_version=17,
                **export_options,
            )
            return onnx.load_from_string(buffer.getvalue())
        shapes = None
        if dynamic_dims:
            shapes = tuple({d: torch.export.Dim.DYNAMIC for d in dims} if dims else None for dims in dynamic_dims)
        program = ortops.torch.export(
            module, args, dynamo=True, input_names=names, dynamic_shapes=shapes, verbose=False, **export_options
        )
        return program.model_proto


def run_onnx(model: onnx.ModelProto, args: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """Runs ``model`` in ONNX Runtime with ortops on ``args`` (positional graph inputs)."""
    session = ort.InferenceSession(
        model.SerializeToString(), ortops.session_options(), providers=["CPUExecutionProvider"]
    )
    feeds = {i.name: a.detach().cpu().numpy() for i, a in zip(session.get_inputs(), args)}
    return session.run(None, feeds)


def custom_nodes(model: onnx.ModelProto) -> list[str]:
    """The ``domain::op_type`` of every node outside the default domain."""
    return [f"{n.domain}::{n.op_type}" for n in model.graph.node if n.domain not in ("", "ai.onnx")]
