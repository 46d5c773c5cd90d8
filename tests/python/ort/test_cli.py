"""The ``ortops`` command (``python -m ortops``), run as a subprocess on small models."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ortops

from ortest import mmcv_nms_model, model_of, python_without, yolov7_efficient_nms_node

# Hand-made NMS case: box 1 overlaps box 0 with IoU 81/119 = 0.68 (dropped at 0.5), box 2
# overlaps box 0 with IoU 16/184 = 0.09 (kept), box 3 is box 2 shifted by 1 (IoU 0.68 with
# box 2, which scores higher: dropped).
BOXES = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [6, 6, 16, 16], [7, 7, 17, 17]], np.float32)
SCORES = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
KEPT = [0, 2]


def ortops_cli(*args: str, cwd: Path | None = None, without: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # The subprocess imports this same ortops (also when it is not installed) and library.
    package_root = str(Path(ortops.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env["ORTOPS_LIBRARY"] = ortops.get_library_path()
    if without:
        run_module = "import runpy, sys; sys.argv[0] = 'ortops'; runpy.run_module('ortops', run_name='__main__')"
        return python_without(without, run_module, *args, env=env, cwd=cwd)
    return subprocess.run(
        [sys.executable, "-m", "ortops", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


def saved(tmp_path: Path, name: str, model: onnx.ModelProto) -> Path:
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def nms_model_file(tmp_path: Path, **attributes: object) -> Path:
    model = mmcv_nms_model(**attributes)
    boxes, scores = model.graph.input
    boxes.type.tensor_type.shape.dim[0].dim_param = "N"
    boxes.type.tensor_type.shape.dim[1].dim_value = 4
    scores.type.tensor_type.shape.dim[0].dim_param = "N"
    return saved(tmp_path, "nms.onnx", model)


# Relu then mmcv::cummax along axis 1 on x [N, 5] (N symbolic): how the files below start.
RELU_CUMMAX = [
    helper.make_node("Relu", ["x"], ["r"], name="relu"),
    helper.make_node("cummax", ["r"], ["values", "indices"], domain="mmcv", name="cm", dim=1),
]
X = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])


def mixed_model_file(tmp_path: Path) -> Path:
    """RELU_CUMMAX, and TRT::PyramidROIAlign_TRT on other inputs."""
    nodes = [
        *RELU_CUMMAX,
        helper.make_node("PyramidROIAlign_TRT", ["boxes", "scores"], ["num", "det"], domain="TRT", name="trt"),
        helper.make_node("PyramidROIAlign_TRT", ["boxes", "scores"], ["num2", "det2"], domain="TRT", name="trt2"),
    ]
    inputs = [
        X,
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, None, 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, None, 1]),
    ]
    outputs = [
        helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("values", "indices", "num", "det")
    ]
    return saved(tmp_path, "mixed.onnx", model_of(helper.make_graph(nodes, "g", inputs, outputs), "mmcv", "TRT"))


def cummax_model_file(tmp_path: Path) -> Path:
    """RELU_CUMMAX alone."""
    outputs = [
        helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("indices", TensorProto.INT64, None),
    ]
    return saved(tmp_path, "cummax.onnx", model_of(helper.make_graph(RELU_CUMMAX, "g", [X], outputs), "mmcv"))


# --- inspect ------------------------------------------------------------------------------


def test_inspect_clean_mmcv_model(tmp_path) -> None:
    result = ortops_cli("inspect", str(nms_model_file(tmp_path)))
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "mmcv::NonMaxSuppression" in line)
    assert re.search(r"opset 1\s+x1\s+ortops: CPUExecutionProvider", line), line
    assert "problems" not in result.stdout


def test_inspect_model_with_tensorrt_plugin(tmp_path) -> None:
    path = mixed_model_file(tmp_path)
    result = ortops_cli("inspect", str(path))
    assert result.returncode == 1, result.stdout + result.stderr
    trt = next(line for line in result.stdout.splitlines() if "TRT::PyramidROIAlign_TRT" in line)
    assert "x2" in trt and "NOT IMPLEMENTED" in trt
    assert "[unknown-op] Node trt uses TRT::PyramidROIAlign_TRT" in result.stdout

    report = json.loads(ortops_cli("inspect", str(path), "--json").stdout)
    assert report["runnable"] is False
    ops = {(c["domain"], c["op_type"]): c for c in report["custom_ops"]}
    assert set(ops) == {("mmcv", "cummax"), ("TRT", "PyramidROIAlign_TRT")}
    assert ops["mmcv", "cummax"]["implemented"] and ops["mmcv", "cummax"]["count"] == 1
    assert ops["mmcv", "cummax"]["execution_providers"] == ["CPUExecutionProvider", "CUDAExecutionProvider"]
    assert not ops["TRT", "PyramidROIAlign_TRT"]["implemented"] and ops["TRT", "PyramidROIAlign_TRT"]["count"] == 2
    assert [(p["node"], p["kind"]) for p in report["problems"]] == [("trt", "unknown-op"), ("trt2", "unknown-op")]


def test_inspect_and_run_a_tensorrt_nms_file(tmp_path) -> None:
    """TRT::EfficientNMS_TRT as yolov7's End2End export writes it (background_class and
    box_coding as one-value INTS) is known and runs."""
    graph = helper.make_graph(
        [yolov7_efficient_nms_node()],
        "main_graph",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 50, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 50, 3]),
        ],
        [helper.make_value_info(n, onnx.TypeProto()) for n in ("num_dets", "det_boxes", "det_scores", "det_classes")],
    )
    opsets = [helper.make_opsetid("", 12), helper.make_opsetid("TRT", 1)]
    path = tmp_path / "yolov7.onnx"
    onnx.save(helper.make_model(graph, ir_version=7, opset_imports=opsets), str(path))
    result = ortops_cli("inspect", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if "TRT::EfficientNMS_TRT" in line)
    assert re.search(r"opset 1\s+x1\s+ortops: CPUExecutionProvider", line), line
    result = ortops_cli("run", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "det_classes" in result.stdout and "int32" in result.stdout


def test_inspect_reports_attribute_problems(tmp_path) -> None:
    result = ortops_cli("inspect", str(nms_model_file(tmp_path, iou_treshold=0.3)))
    assert result.returncode == 1
    assert "[unknown-attribute]" in result.stdout and "'iou_treshold'" in result.stdout


def test_inspect_says_what_the_library_does_with_a_wrongly_typed_attribute(tmp_path) -> None:
    """An int iou_threshold: ortops' kernel refuses it when the session is created (it does
    not fall back to the default), and inspect says so, quoting the kernel's error."""
    path = nms_model_file(tmp_path, iou_threshold=0)
    result = ortops_cli("inspect", str(path))
    assert result.returncode == 1
    (line,) = [line for line in result.stdout.splitlines() if "[attribute-type]" in line]
    refusal = "attribute 'iou_threshold' must be of type float, got int"
    assert "the session cannot be created" in line and f'"{refusal}"' in line, line
    assert "default" not in line
    run = ortops_cli("run", str(path))
    assert run.returncode == 1 and refusal in run.stderr.splitlines()[-1], run.stderr


def test_missing_file(tmp_path) -> None:
    path = tmp_path / "absent.onnx"
    for command in ("inspect", "run"):
        result = ortops_cli(command, str(path))
        assert result.returncode == 2
        assert result.stderr == f"ortops: {path}: no such file\n"


def test_garbage_file(tmp_path) -> None:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\xff\xfe this is not a protobuf message")
    for command in ("inspect", "run"):
        result = ortops_cli(command, str(path))
        assert result.returncode == 2
        assert result.stderr.startswith(f"ortops: {path} is not an ONNX model: "), result.stderr
        assert result.stderr.count("\n") == 1


# --- run ----------------------------------------------------------------------------------


def test_run_random_inputs_with_symbolic_dim(tmp_path) -> None:
    result = ortops_cli("run", str(cummax_model_file(tmp_path)), "--dim", "N=3", "--runs", "3", "--threads", "1")
    assert result.returncode == 0, result.stderr
    assert "x: float32 [3, 5] (random)" in result.stdout
    assert "values: float32 [3, 5]" in result.stdout
    assert "indices: int64 [3, 5]" in result.stdout
    timing = re.search(r"min ([\d.]+) ms, median ([\d.]+) ms, max ([\d.]+) ms", result.stdout)
    assert timing, result.stdout
    low, mid, high = map(float, timing.groups())
    assert 0 < low <= mid <= high


def test_run_npy_inputs_gives_hand_computed_nms(tmp_path) -> None:
    np.save(tmp_path / "boxes.npy", BOXES)
    np.save(tmp_path / "scores.npy", SCORES)
    out = tmp_path / "out.npz"
    result = ortops_cli(
        "run",
        str(nms_model_file(tmp_path)),
        "--input",
        f"boxes={tmp_path / 'boxes.npy'}",
        "--input",
        f"scores={tmp_path / 'scores.npy'}",
        "--save",
        str(out),
        "--runs",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert f"indices: int64 [{len(KEPT)}] = [{' '.join(map(str, KEPT))}]" in result.stdout
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["indices"], KEPT)


def test_run_npz_inputs(tmp_path) -> None:
    np.savez(tmp_path / "inputs.npz", boxes=BOXES, scores=SCORES)
    result = ortops_cli(
        "run", str(nms_model_file(tmp_path, iou_threshold=0.05)), "--inputs", str(tmp_path / "inputs.npz")
    )
    assert result.returncode == 0, result.stderr
    # At 0.05 box 2 (IoU 16/184 = 0.087 with box 0) goes too, and box 3 (IoU 9/191 = 0.047
    # with box 0, the only box kept before it) stays.
    assert "indices: int64 [2] = [0 3]" in result.stdout


def test_run_profile_prints_a_summary_and_leaves_no_file(tmp_path) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    result = ortops_cli("run", str(cummax_model_file(tmp_path)), "--profile", "--runs", "3", "--dim", "N=4", cwd=work)
    assert result.returncode == 0, result.stderr
    summary = result.stdout[result.stdout.index("profile (3 runs") :]
    assert re.search(r"^\s+cummax\s+1\s+[\d.]+\s+[\d.]+%$", summary, re.MULTILINE), summary
    assert re.search(r"^\s+Relu\s+1\s+[\d.]+\s+[\d.]+%$", summary, re.MULTILINE), summary
    shares = [float(s) for s in re.findall(r"([\d.]+)%$", summary, re.MULTILINE)]
    assert abs(sum(shares) - 100) < 0.5
    assert list(work.iterdir()) == [] and not list(tmp_path.glob("*.json"))


def test_run_reports_unknown_ops_and_fails_where_onnx_runtime_does(tmp_path) -> None:
    result = ortops_cli("run", str(mixed_model_file(tmp_path)))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0].endswith("ortops.check_model finds 2 problems:") and "TRT::PyramidROIAlign_TRT" in lines[1]
    assert "ONNX Runtime could not load it" in lines[-1]
    assert result.stdout == ""
    strict = ortops_cli("run", "--strict", str(mixed_model_file(tmp_path)))
    assert strict.returncode == 1 and strict.stderr.splitlines()[-1] == "ortops: not running it (--strict)"


def test_run_reports_a_misspelled_attribute_and_runs_anyway(tmp_path) -> None:
    """ONNX Runtime runs a node whose iou_threshold is misspelled (at the default 0.5): run says
    so and runs it; --strict refuses."""
    path = nms_model_file(tmp_path, iou_treshold=0.05)
    np.savez(tmp_path / "inputs.npz", boxes=BOXES, scores=SCORES)
    result = ortops_cli("run", str(path), "--inputs", str(tmp_path / "inputs.npz"), "--runs", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"ortops: {path}: ortops.check_model finds 1 problem:"
    assert lines[1].startswith("  [unknown-attribute]") and "'iou_treshold'" in lines[1]
    assert lines[-1] == "ortops: running it anyway (--strict refuses such a model)"
    # The default threshold 0.5 keeps box 2 (IoU 0.087 with box 0); 0.05 would have dropped it.
    assert f"indices: int64 [{len(KEPT)}] = [{' '.join(map(str, KEPT))}]" in result.stdout
    strict = ortops_cli("run", "--strict", str(path), "--inputs", str(tmp_path / "inputs.npz"))
    assert strict.returncode == 1 and strict.stdout == ""
    assert strict.stderr.splitlines()[-1] == "ortops: not running it (--strict)"


def test_run_without_onnx_runs_unchecked(tmp_path) -> None:
    """Where onnx is not installed (simulated: it cannot be imported), run runs the model
    unchecked and says so; --strict, which needs the check, refuses with the extra to install."""
    path = nms_model_file(tmp_path)
    np.savez(tmp_path / "inputs.npz", boxes=BOXES, scores=SCORES)
    args = ["run", str(path), "--inputs", str(tmp_path / "inputs.npz"), "--runs", "1"]
    result = ortops_cli(*args, without=("onnx",))
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "ortops: note: onnx is not installed, so the model's custom nodes are not checked first "
        '(pip install "ortops[onnx]" adds it)\n'
    )
    assert f"indices: int64 [{len(KEPT)}]" in result.stdout
    strict = ortops_cli(*args, "--strict", without=("onnx",))
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr == (
        "ortops: --strict checks the model first, with the onnx package, which is not installed: "
        'pip install "ortops[onnx]"\n'
    )
    inspect = ortops_cli("inspect", str(path), without=("onnx",))
    assert inspect.returncode == 2
    assert inspect.stderr == (
        "ortops: this command reads the model with the onnx package, which is not installed: "
        'pip install "ortops[onnx]"\n'
    )


def test_unknown_dim_names_the_models_symbolic_dims(tmp_path) -> None:
    result = ortops_cli("run", str(nms_model_file(tmp_path)), "--dim", "n=3")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "ortops: --dim n: no random input has a dimension named 'n' "
        "(the model's symbolic dimensions: N (of boxes, scores))\n"
    )
    result = ortops_cli("run", str(cummax_model_file(tmp_path)), "--dim", "N=3", "--dim", "M=2")
    assert result.returncode == 2 and "the model's symbolic dimensions: N (of x)" in result.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--input", "boxes"], "--input expects NAME=FILE.npy, got 'boxes'"),
        (["--input", "bxes=BOXES"], "has no input named 'bxes' (its inputs: boxes, scores)"),
        (["--input", "boxes=SCORES"], "input 'boxes' (SCORES) has shape [4], but the model wants rank 2"),
        (["--input", "boxes=BOXES64"], "input 'boxes' (BOXES64) is float64, but the model wants float32"),
        (["--dim", "M=3"], "no random input has a dimension named 'M' (the model's symbolic dimensions: N (of"),
        (["--providers", "nosuch"], "execution provider 'nosuch' is not available"),
    ],
)
def test_run_usage_errors(tmp_path, args: list[str], message: str) -> None:
    files = {"BOXES": BOXES, "SCORES": SCORES, "BOXES64": BOXES.astype(np.float64)}
    for name, value in files.items():
        np.save(tmp_path / f"{name}.npy", value)
    for name in sorted(files, key=len, reverse=True):  # the placeholders stand for the .npy files
        args = [a.replace(f"={name}", f"={tmp_path / name}.npy") for a in args]
        message = message.replace(f"({name})", f"({tmp_path / name}.npy)")
    result = ortops_cli("run", str(nms_model_file(tmp_path)), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and result.stderr.startswith("ortops: ")
    assert result.stderr.count("\n") == 1


# --- other commands -----------------------------------------------------------------------


def test_version_and_ops() -> None:
    result = ortops_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"ortops {ortops.__version__}"
    result = ortops_cli("ops", "--json")
    assert result.returncode == 0
    listed = {(op["domain"], op["name"]) for op in json.loads(result.stdout)}
    assert listed == {(op.domain, op.name) for op in ortops.ops()}


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """`ortops ops --json | head -1`: the reader leaves early; no BrokenPipeError traceback."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(ortops.__file__).resolve().parents[1]), env.get("PYTHONPATH")])
    )
    env["ORTOPS_LIBRARY"] = ortops.get_library_path()
    for args in (["ops", "--json"], ["ops"]):
        process = subprocess.Popen(
            [sys.executable, "-m", "ortops", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # as head does after its lines
        stderr = process.stderr.read().decode()
        assert process.wait(timeout=60) == 0, stderr
        assert first and stderr == "", stderr


def test_no_command_is_a_usage_error() -> None:
    result = ortops_cli()
    assert result.returncode == 2 and "usage: ortops" in result.stderr
