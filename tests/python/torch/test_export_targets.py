"""Exports that load where the README says they load.

Files from both exporters, written by ortops.torch.export for its default target (the
oldest supported ONNX Runtime), pass strict ONNX shape inference and run in ONNX Runtime
1.17 (the .venv-ort-min environment, in a subprocess: it has no torch), giving eager
PyTorch's outputs. float16 fails at export time, naming the op and the dtype.
"""

from __future__ import annotations

import io
import subprocess
import traceback
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import shape_inference

import ortops
import ortops.torch

from roundtrip import EXPORTERS

ROOT = Path(__file__).resolve().parents[3]
OLD_RUNTIME_PYTHON = ROOT / ".venv-ort-min" / "bin" / "python"


class Head(torch.nn.Module):
    """Several ops with static and data-dependent output shapes."""

    def forward(self, x: torch.Tensor, rois: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pooled = ortops.torch.roi_align(x, rois, 3, 0.5, 2)
        sampled = ortops.torch.grid_sample(x, grid)
        normed = ortops.torch.group_norm(sampled, 2)
        high, _ = ortops.torch.cummax(normed, -1)
        boxes = rois[:, 1:]
        keep = ortops.torch.nms(boxes, pooled.mean((1, 2, 3)), 0.5)
        return pooled.relu(), high, keep


def _inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2, 4, 12, 10, generator=gen)
    xy = torch.rand(6, 2, generator=gen) * 8
    rois = torch.cat([torch.tensor([[0.0], [1], [0], [1], [0], [0]]), xy, xy + 6], 1)
    grid = torch.rand(2, 5, 7, 2, generator=gen) * 2 - 1
    return x, rois, grid


def _export(exporter: str, **kwargs: object) -> onnx.ModelProto:
    buffer = io.BytesIO()
    names = ["x", "rois", "grid"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            ortops.torch.export(Head(), _inputs(), buffer, input_names=names, verbose=False, **kwargs)
        else:
            ortops.torch.export(Head(), _inputs(), buffer, dynamo=False, input_names=names, **kwargs)
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_default_export_targets_the_oldest_runtime_and_passes_strict_inference(exporter: str) -> None:
    model = _export(exporter)
    assert model.ir_version <= 9
    assert {o.domain: o.version for o in model.opset_import}[""] <= 20
    ortops.register_onnx_schemas()
    onnx.checker.check_model(model, full_check=True)  # strict shape inference included
    inferred = shape_inference.infer_shapes(model, strict_mode=True, check_type=True)
    outputs = {o.name: o for o in inferred.graph.output}
    pooled = outputs[model.graph.output[0].name].type.tensor_type
    assert [d.dim_value for d in pooled.shape.dim][1:] == [4, 3, 3]  # static dims kept


@pytest.mark.skipif(not OLD_RUNTIME_PYTHON.exists(), reason="needs .venv-ort-min (scripts/setup.sh)")
@pytest.mark.parametrize("exporter", EXPORTERS)
def test_exported_file_runs_in_onnx_runtime_1_17(exporter: str, tmp_path: Path) -> None:
    model = _export(exporter)
    onnx.save(model, tmp_path / "head.onnx")
    inputs = _inputs()
    np.savez(tmp_path / "inputs.npz", **{name: t.numpy() for name, t in zip(("x", "rois", "grid"), inputs)})
    script = (
        "import sys, numpy as np, onnxruntime as ort, ortops\n"
        "assert ort.__version__.startswith('1.17'), ort.__version__\n"
        "d = sys.argv[1]\n"
        "s = ort.InferenceSession(d + '/head.onnx', ortops.session_options(), providers=['CPUExecutionProvider'])\n"
        "feeds = dict(np.load(d + '/inputs.npz'))\n"
        "np.savez(d + '/outputs.npz', *s.run(None, feeds))\n"
    )
    env = {"ORTOPS_LIBRARY": ortops.get_library_path(), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [str(OLD_RUNTIME_PYTHON), "-c", script, str(tmp_path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert run.returncode == 0, run.stderr
    got = np.load(tmp_path / "outputs.npz")
    want = Head()(*inputs)
    for i, expected in enumerate(want):
        np.testing.assert_allclose(got[f"arr_{i}"], expected.numpy(), rtol=1e-5, atol=1e-6)


def test_target_runtime_none_keeps_the_exporters_ir_version() -> None:
    assert _export("dynamo", target_runtime=None).ir_version >= 10


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_an_opset_the_target_lacks_is_an_error(exporter: str) -> None:
    with pytest.raises(ValueError, match="ONNX Runtime 1.17 implements ONNX opsets up to 20"):
        _export(exporter, opset_version=21)


class HalfNms(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return ortops.torch.nms(boxes, scores, 0.5)


FLOAT16_REASON = "ortops.nms: boxes is float16, but ortops::NMS takes float32 or float64; cast it before the op"


def _float16_export_error(exporter: str) -> BaseException:
    boxes = torch.tensor([[0.0, 0, 2, 2], [1, 1, 3, 3]]).half()
    with pytest.raises(Exception) as error, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = (boxes, torch.tensor([0.9, 0.8]).half())
        ortops.torch.export(HalfNms(), args, io.BytesIO(), dynamo=exporter == "dynamo")
    return error.value


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_float16_fails_at_export_naming_the_op_and_dtype(exporter: str) -> None:
    chain, e = [], _float16_export_error(exporter)
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("ortops.nms: boxes is float16, but ortops::NMS takes float32 or float64" in m for m in chain), chain


def test_a_dynamo_export_error_shows_the_ops_reason_first() -> None:
    """torch.onnx.export's report (torch.export's failure and its chained errors, ~250 lines
    with their tracebacks) came first and the op's one line at its end."""
    error = _float16_export_error("dynamo")
    assert isinstance(error, ValueError) and str(error) == FLOAT16_REASON
    printed = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    assert printed.rstrip().endswith(f"ValueError: {FLOAT16_REASON}")
    assert len(printed.splitlines()) < 40, printed  # the reason, not the exporter's report before it
    assert "torch.export" in str(error.__context__)  # which is still there for who wants it


def test_the_eager_op_rejects_float16_with_the_same_message() -> None:
    with pytest.raises(ValueError, match="ortops.nms: boxes is float16"):
        ortops.torch.nms(torch.zeros(1, 4).half(), torch.zeros(1).half(), 0.5)
