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
import onnxruntime as ort
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


def session_error(path: Path) -> str:
    """The error of creating a session of the model at ``path`` with ortops ("" if none):
    the truth that inspect's verdicts are held to."""
    try:
        ort.InferenceSession(str(path), ortops.session_options(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - whatever ONNX Runtime raises
        return str(e)
    return ""


def test_inspect_calls_a_misspelled_attribute_a_warning_as_the_session_runs_it(tmp_path) -> None:
    path = nms_model_file(tmp_path, iou_treshold=0.3)
    assert session_error(path) == ""
    result = ortops_cli("inspect", str(path))
    assert result.returncode == 0, result.stdout
    (line,) = [line for line in result.stdout.splitlines() if "[unknown-attribute]" in line]
    assert "(warning)" in line and "'iou_treshold'" in line and "'iou_threshold' keeps its default 0.5" in line
    assert "not every one as the model says" in result.stdout.splitlines()[-1]
    report = json.loads(ortops_cli("inspect", str(path), "--json").stdout)
    assert report["runnable"] is True and report["attributes_checked"] is True
    assert [(p["kind"], p["severity"]) for p in report["problems"]] == [("unknown-attribute", "warning")]


@pytest.mark.parametrize(
    "op_type,domain,inputs,attributes",
    [
        ("NMS", "ortops", ("boxes", "scores"), {"iou_threshold": float("nan")}),
        ("NMS", "ortops", ("boxes", "scores"), {"offset": 2}),
        ("NMS", "ortops", ("boxes", "scores"), {"iou_threshold": 0}),  # an int, not a float
        ("RoIAlign", "ortops", ("input", "rois"), {"mode": "bogus"}),
        ("GroupNorm", "ortops", ("X", "scale", "bias"), {}),  # num_groups is required
    ],
)
def test_inspect_refuses_what_the_session_refuses_with_its_message(
    tmp_path, op_type: str, domain: str, inputs: tuple[str, ...], attributes: dict[str, object]
) -> None:
    """Two nodes, one named and one not: inspect's verdict on each is the session's, word for
    word (the library names the node where it has a name)."""
    nodes = [
        helper.make_node(op_type, list(inputs), [f"out{i}"], domain=domain, name=name, **attributes)
        for i, name in enumerate(("bad_node", ""))
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in inputs],
        [helper.make_value_info(f"out{i}", onnx.TypeProto()) for i in range(2)],
    )
    path = saved(tmp_path, "bad.onnx", model_of(graph, domain))
    error = session_error(path)
    assert error
    report = json.loads(ortops_cli("inspect", str(path), "--json").stdout)
    assert report["runnable"] is False
    assert [(p["node"], p["severity"]) for p in report["problems"]] == [("bad_node", "error"), ("#1", "error")]
    named, unnamed = (p["message"].split(": the session cannot be created: ", 1)[1] for p in report["problems"])
    # The session fails at its first node; its message is the library's about that node.
    assert error.endswith(named), (named, error)
    assert named.startswith(f"{domain}.{op_type} node 'bad_node': ")
    assert unnamed == named.replace(" node 'bad_node'", "")
    result = ortops_cli("inspect", str(path))
    assert (
        result.returncode == 1 and result.stdout.splitlines()[-1] == "result: the model cannot run with ortops as it is"
    )
    run = ortops_cli("run", str(path))
    assert run.returncode == 1 and run.stderr.splitlines()[-1].endswith(named), run.stderr


def test_inspect_without_onnx_runtime_says_attributes_were_not_checked(tmp_path) -> None:
    path = nms_model_file(tmp_path, iou_threshold=float("nan"))
    result = ortops_cli("inspect", str(path), without=("onnxruntime",))
    assert result.returncode == 0, result.stdout + result.stderr
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: attribute values were not checked: that needs ONNX Runtime, which is not installed "
        '(pip install "ortops[onnxruntime]")'
    ]
    assert "Traceback" not in result.stderr


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


def test_run_leaves_undeclared_and_mismatching_shapes_to_onnx_runtime(tmp_path) -> None:
    """An input whose shape differs from the declared one is fed as it is, with a note: where
    the model declares none (ONNX Runtime reports rank 0), ONNX Runtime runs it; where it
    declares another rank, ONNX Runtime refuses it, and run fails with its message."""
    undeclared = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = saved(tmp_path, "relu.onnx", model_of(undeclared))
    value = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "x.npy", value)
    expected = ort.InferenceSession(str(path)).run(None, {"x": value})[0]  # ONNX Runtime runs it
    result = ortops_cli("run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--save", str(tmp_path / "y.npz"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"ortops: note: input 'x' ({tmp_path / 'x.npy'}) has shape [3, 4], but the model declares rank 0 "
        "(or no shape); passing it to ONNX Runtime as it is\n"
    )
    with np.load(tmp_path / "y.npz") as outputs:
        np.testing.assert_array_equal(outputs["y"], expected)

    nms = nms_model_file(tmp_path)
    np.save(tmp_path / "scores.npy", SCORES)
    with pytest.raises(Exception) as refused:  # noqa: PT011 - the truth is ONNX Runtime's message
        session = ort.InferenceSession(str(nms), ortops.session_options())
        session.run(None, {"boxes": SCORES, "scores": SCORES})
    result = ortops_cli("run", str(nms), "--input", f"boxes={tmp_path / 'scores.npy'}")
    assert result.returncode == 1, result.stderr
    note, failure = result.stderr.splitlines()
    assert note.startswith("ortops: note: input 'boxes'") and "declares shape ['N', 4]" in note
    assert failure.endswith(str(refused.value).splitlines()[0]), (failure, refused.value)


# Makes importlib find no onnxruntime at all, as where it is not installed (importing ortops
# then prints its notice), where python_without's finder makes importing it fail.
_NOT_FOUND = """
import importlib.machinery, sys
class NotFound(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if name.partition(".")[0] == "onnxruntime" else super().find_spec(name, path, target)
sys.meta_path[:] = [NotFound if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
sys.argv[0] = "ortops"
import runpy
runpy.run_module("ortops", run_name="__main__")
"""


def test_run_without_onnx_runtime_says_so_in_one_line(tmp_path) -> None:
    path = nms_model_file(tmp_path)
    notice = (
        "ortops: no ONNX Runtime is installed; install one: "
        'pip install "ortops[onnxruntime]" (CPU) or "ortops[onnxruntime-gpu]" (CUDA)\n'
    )
    hidden = ortops_cli("run", str(path), without=("onnxruntime",))
    env = dict(os.environ, PYTHONPATH=str(Path(ortops.__file__).resolve().parents[1]))
    env["ORTOPS_LIBRARY"] = ortops.get_library_path()
    absent = subprocess.run(
        [sys.executable, "-c", _NOT_FOUND, "run", str(path)], capture_output=True, text=True, env=env, timeout=60
    )
    for result in (hidden, absent):
        assert (result.returncode, result.stdout, result.stderr) == (1, "", notice)


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


def test_providers_say_what_the_installed_build_registers(tmp_path) -> None:
    """ops, inspect and OpInfo tell the providers an op has in some build from those that the
    installed library registers, as its manifest (written by the build) says: the CPU build
    lists no CUDA kernel. The same library under a CUDA build's manifest lists CUDA's."""
    manifest = json.loads((Path(ortops.get_library_path()).parent / "ortops_ops.json").read_text())
    builds = {"cpu": ["CPUExecutionProvider"], "cuda": ["CPUExecutionProvider", "CUDAExecutionProvider"]}
    model = str(cummax_model_file(tmp_path))
    for build, installed in builds.items():
        folder = tmp_path / build
        folder.mkdir()
        (folder / "libortops.so").symlink_to(ortops.get_library_path())
        (folder / "ortops_ops.json").write_text(json.dumps({**manifest, "library_providers": installed}))
        env = dict(os.environ, ORTOPS_LIBRARY=str(folder / "libortops.so"))
        env["PYTHONPATH"] = str(Path(ortops.__file__).resolve().parents[1])

        def cli(*args: str, env: dict[str, str] = env) -> str:
            result = subprocess.run([sys.executable, "-m", "ortops", *args], capture_output=True, text=True, env=env)
            assert result.returncode == 0, result.stderr
            return result.stdout

        for op in json.loads(cli("ops", "--json")):
            expected = [p for p in manifest_providers(manifest, op) if p in installed]
            assert op["registered_providers"] == expected, (build, op)
        text = {line.split()[0]: line for line in cli("ops").splitlines()}
        (cummax,) = json.loads(cli("inspect", model, "--json"))["custom_ops"]
        assert cummax["execution_providers"] == ["CPUExecutionProvider", "CUDAExecutionProvider"]
        assert cummax["registered_providers"] == installed
        inspect_line = next(line for line in cli("inspect", model).splitlines() if "mmcv::cummax" in line)
        if build == "cpu":
            gpu_only = "CPUExecutionProvider (CUDAExecutionProvider: in the ortops-gpu build only)"
            assert text["mmcv::cummax"].split("since 1  ")[1] == f"{gpu_only}  (compatibility name)"
            assert inspect_line.endswith(f"ortops: {gpu_only}")
        else:
            both = "CPUExecutionProvider, CUDAExecutionProvider  (compatibility name)"
            assert text["mmcv::cummax"].split("since 1  ")[1] == both
            assert inspect_line.endswith("ortops: CPUExecutionProvider, CUDAExecutionProvider")
    # This test's own library: what OpInfo says is what its manifest says.
    for op in ortops.ops():
        assert set(op.registered_providers) == set(op.execution_providers) & set(manifest["library_providers"])


def manifest_providers(manifest: dict, op: dict) -> list[str]:
    (row,) = [r for r in manifest["ops"] if (r["domain"], r["name"]) == (op["domain"], op["name"])]
    return row["execution_providers"]


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
