"""Helpers shared by the ``ortops optimize`` tests (test_optimize*.py): node counts, runs on the
emulated device, and deformable attention decomposed as the projects write it in PyTorch (torch
is imported where those are called: the tests that use them import it first)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

import ortops


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    """Node counts by domain::op_type over the model's graph and every subgraph in it."""
    counts: Counter[str] = Counter()

    def visit(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            counts[f"{node.domain or 'ai.onnx'}::{node.op_type}"] += 1
            for attr in node.attribute:
                if attr.HasField("g"):
                    visit(attr.g)
                for sub in attr.graphs:
                    visit(sub)

    visit(model.graph)
    return counts


def as_mmdeploy_grid_sampler(model: onnx.ModelProto) -> onnx.ModelProto:
    """The export with each GridSample written as mmdeploy writes mmcv's grid_sample."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in model.graph.node:
        if node.op_type == "GridSample":
            node.op_type, node.domain = "grid_sampler", "mmdeploy"
            del node.attribute[:]
            node.attribute.extend(
                [
                    onnx.helper.make_attribute("interpolation_mode", 0),
                    onnx.helper.make_attribute("padding_mode", 0),
                    onnx.helper.make_attribute("align_corners", 0),
                ]
            )
    model.opset_import.append(onnx.helper.make_opsetid("mmdeploy", 1))
    return model


def emulated_device_library() -> Path | None:
    """The emulated device's library beside the library under test, or None when not built."""
    library = Path(ortops.get_library_path()).with_name("libortops_device_on_cpu.so")
    return library if library.exists() else None


def first_output_with_library(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], library: Path, folder: Path
) -> np.ndarray:
    """``model``'s first output on ``feeds`` with ``library`` registered instead of the one under
    test: in a subprocess, since a process registers one ortops library."""
    path, inputs, output = folder / "model.onnx", folder / "feeds.npz", folder / "output.npy"
    onnx.save(model, str(path))
    np.savez(inputs, **feeds)
    code = (
        "import sys, numpy as np, onnxruntime as ort, ortops;"
        "s = ort.InferenceSession(sys.argv[1], ortops.session_options(), providers=['CPUExecutionProvider']);"
        "np.save(sys.argv[3], s.run(None, dict(np.load(sys.argv[2])))[0])"
    )
    env = {**os.environ, "ORTOPS_LIBRARY": str(library)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(ortops.__file__).parents[1]), env.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-c", code, str(path), str(inputs), str(output)], check=True, env=env, timeout=60)
    return np.load(output)


# --- deformable attention as the projects write it ------------------------------------------


def stack_form(value, spatial_shapes, sampling_locations, attention_weights, align_corners=False, padding="zeros"):
    """mmcv's / Deformable DETR's ``multi_scale_deformable_attn_pytorch`` (also HuggingFace's
    Deformable DETR, Grounding DINO, Mask2Former, RT-DETR v1): value [N, S, M, D], locations
    [N, Lq, M, L, P, 2], weights [N, Lq, M, L, P] -> [N, Lq, M * D]."""
    import torch

    F = torch.nn.functional
    batch, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    value_list = value.split([h * w for h, w in spatial_shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    samples = []
    for level, (h, w) in enumerate(spatial_shapes):
        value_l = value_list[level].flatten(2).transpose(1, 2).reshape(batch * heads, channels, h, w)
        grid_l = sampling_grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        samples.append(
            F.grid_sample(value_l, grid_l, mode="bilinear", padding_mode=padding, align_corners=align_corners)
        )
    weights = attention_weights.transpose(1, 2).reshape(batch * heads, 1, queries, levels * points)
    output = (torch.stack(samples, dim=-2).flatten(-2) * weights).sum(-1).view(batch, heads * channels, queries)
    return output.transpose(1, 2).contiguous()


def concat_form(value, spatial_shapes, sampling_locations, attention_weights, points_per_level, mode="bilinear"):
    """RT-DETRv2's ``deformable_attention_core_func_v2`` (D-FINE, DEIM, Ultralytics): locations
    [N, Lq, M, sum(P_l), 2], weights [N, Lq, M, sum(P_l)], one split per level."""
    import torch

    F = torch.nn.functional
    batch, _, heads, channels = value.shape
    queries = sampling_locations.shape[1]
    value_list = value.permute(0, 2, 3, 1).flatten(0, 1).split([h * w for h, w in spatial_shapes], dim=-1)
    sampling_grids = (2 * sampling_locations - 1).permute(0, 2, 1, 3, 4).flatten(0, 1)
    grid_list = sampling_grids.split(points_per_level, dim=-2)
    samples = []
    for level, (h, w) in enumerate(spatial_shapes):
        value_l = value_list[level].reshape(batch * heads, channels, h, w)
        samples.append(F.grid_sample(value_l, grid_list[level], mode=mode, padding_mode="zeros", align_corners=False))
    weights = attention_weights.permute(0, 2, 1, 3).reshape(batch * heads, 1, queries, sum(points_per_level))
    output = (torch.concat(samples, dim=-1) * weights).sum(-1).reshape(batch, heads * channels, queries)
    return output.permute(0, 2, 1)
