"""examples/ray/batch_detect.py: its built-in model, its check, and a run on a local Ray instance.

The built-in detection tail is checked against a numpy reference of the whole model (the
convolution, greedy NMS, references.roi_align, the linear layer, the padding) for items run
in one batch and one at a time; the script's check is shown to notice wrong results; and
the script itself runs on a local Ray instance (2 actors, 1 thread each, 32 items) in a
subprocess of Ray's own environment (.venv-ray: the main one has no Ray), which must print
its check line, exit 0 and leave no Ray process behind.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from references import roi_align

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "ray" / "batch_detect.py"
RAY_VENV = ROOT / ".venv-ray"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("batch_detect", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _greedy_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> list[int]:
    order = np.lexsort((np.arange(len(scores)), -scores.astype(np.float64)))
    kept: list[int] = []
    for i in order:
        if all(_iou(boxes[i], boxes[j]) <= iou_threshold for j in kept):
            kept.append(int(i))
    return kept


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = float(w) * float(h)
    union = float((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])) - inter
    return inter / union if union > 0 else 0.0


def _reference(example: ModuleType, model: bytes, item: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The built-in model's outputs for one item, from its weights, in numpy."""
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(model).graph.initializer}
    image = item["image"].astype(np.float64)
    padded = np.pad(image, ((0, 0), (1, 1), (1, 1)))
    size = image.shape[1] // 2
    patches = np.stack(
        [padded[:, dy : dy + 2 * size : 2, dx : dx + 2 * size : 2] for dy in range(3) for dx in range(3)], axis=1
    )  # [3, 9, 32, 32]
    kernel = weights["conv_w"].astype(np.float64).reshape(len(weights["conv_w"]), 3, 9)
    features = np.einsum("ckyx,ock->oyx", patches, kernel) + weights["conv_b"][:, None, None]
    features = np.maximum(features, 0).astype(np.float32)[None]
    kept = _greedy_nms(item["boxes"], item["scores"], example.IOU_THRESHOLD)[: example.MAX_DETECTIONS]
    rois = np.concatenate([np.zeros((len(kept), 1), np.float32), item["boxes"][kept]], axis=1)
    pooled = roi_align(features, rois, 7, 7, 0.5, 2, "avg", aligned=True, compat=False)
    logits = pooled.mean(axis=(2, 3)) @ weights["cls_w"]
    m, n = example.MAX_DETECTIONS, len(kept)
    out = {
        "num_detections": np.array(n),
        "det_boxes": np.zeros((m, 4), np.float32),
        "det_scores": np.zeros(m, np.float32),
        "det_logits": np.zeros((m, example.NUM_CLASSES), np.float32),
        "det_index": np.full(m, -1, np.int64),
    }
    out["det_boxes"][:n] = item["boxes"][kept]
    out["det_scores"][:n] = item["scores"][kept]
    out["det_logits"][:n] = logits
    out["det_index"][:n] = kept
    return out


def test_builtin_model_matches_numpy_in_a_batch_and_alone(example: ModuleType) -> None:
    model = example.build_model()
    session = example.make_session(model, threads=1)
    names = [o.name for o in session.get_outputs()]
    items = [example.make_item(i, None, seed=7) for i in range(6)]
    batch = dict(zip(names, session.run(None, {k: np.stack([it[k] for it in items]) for k in items[0]})))
    counts = []
    for b, item in enumerate(items):
        alone = dict(zip(names, session.run(None, {k: v[None] for k, v in item.items()})))
        want = _reference(example, model, item)
        counts.append(len(_greedy_nms(item["boxes"], item["scores"], example.IOU_THRESHOLD)))
        for name in names:
            np.testing.assert_array_equal(batch[name][b], alone[name][0], err_msg=f"item {b} {name}: batch vs alone")
            if name == "det_logits":
                np.testing.assert_allclose(batch[name][b], want[name], rtol=1e-4, atol=1e-4, err_msg=name)
            else:
                np.testing.assert_array_equal(batch[name][b], want[name], err_msg=f"item {b} {name}")
    # The items exercise both the padding and the cut to MAX_DETECTIONS.
    assert min(counts) < example.MAX_DETECTIONS < max(counts), counts


def test_check_notices_wrong_results(example: ModuleType) -> None:
    model = example.build_model()
    session = example.make_session(model, threads=1)
    item = example.make_item(3, None, seed=0)
    names = [o.name for o in session.get_outputs()]
    row = {name: value[0] for name, value in zip(names, session.run(None, {k: v[None] for k, v in item.items()}))}
    assert example.check_item(row, item, session, builtin=True) == []

    logits = dict(row, det_logits=row["det_logits"] + np.float32(1e-3))
    assert any(p.startswith("det_logits") for p in example.check_item(logits, item, session, builtin=True))
    index = dict(row, det_index=row["det_index"][::-1].copy())
    problems = example.check_item(index, item, session, builtin=True)
    assert any("numpy NMS" in p for p in problems), problems
    assert example.check_item(dict(row, det_scores=row["det_scores"][:-1]), item, session, builtin=False)


def _processes_of(ray_tmp: str) -> list[str]:
    """Processes whose environment has RAY_TMPDIR=ray_tmp: the script and all it started.

    (Ray's workers rename themselves to ``ray::...``, so their command lines do not say which
    instance they belong to; their environment, inherited from the raylet, does.)
    """
    marker = f"RAY_TMPDIR={ray_tmp}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if marker in (proc / "environ").read_bytes().split(b"\0"):
                    cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
                    found.append(f"{proc.name}: {cmdline[:200]!r}")
            except OSError:
                continue
    return found


def test_ray_is_pinned_in_its_own_environment_only() -> None:
    """Only this example needs Ray (and the 20 packages it brings), so the main environment,
    which every developer and scripts/demo.sh install, does not pin it."""
    pins = {
        name: {line.split("==")[0].lower() for line in (ROOT / "deps" / name).read_text().splitlines() if "==" in line}
        for name in ("python-main.txt", "python-ray.txt")
    }
    assert "ray" not in pins["python-main.txt"]
    assert {"ray", "onnxruntime", "onnx", "numpy"} <= pins["python-ray.txt"]


def test_batch_detect_on_local_ray() -> None:
    """The script in Ray's own environment (.venv-ray, deps/python-ray.txt), which scripts/test.sh
    makes (scripts/setup.sh --with-ray); the main environment has no Ray."""
    python = RAY_VENV / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"{RAY_VENV} is not there: scripts/setup.sh --with-ray makes it (scripts/test.sh does)")
    # A short private temp dir: Ray's socket paths must fit in 107 bytes, and the processes
    # of this instance can be told apart from any other by it.
    ray_tmp = tempfile.mkdtemp(prefix="ray-t", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    args = ["--actors", "2", "--threads", "1", "--items", "32", "--batch-size", "8", "--check", "4"]
    try:
        start = time.perf_counter()
        # The library each actor should find: ORTOPS_LIBRARY when it is set (passed on through
        # runtime_env), else the copy in the Ray environment's ortops package.
        where = [str(python), "-c", "import ortops; print(ortops.get_library_path())"]
        expected = subprocess.run(where, env=env, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        run = subprocess.run([str(python), str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=180)
        elapsed = time.perf_counter() - start
        assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        assert "check: 4 of 32 items match the driver's session and a numpy NMS: OK" in run.stdout, run.stdout
        assert "throughput: 32 items in" in run.stdout, run.stdout
        libraries = re.findall(r"^  node \S+ pid \d+ library (.+)$", run.stdout, re.MULTILINE)
        assert libraries and set(libraries) == {expected}, run.stdout
        print(f"batch_detect.py on local Ray: {elapsed:.1f} s")
        # ray.shutdown() in the script stops every process of the instance it started; on a
        # loaded 2-core machine a worker took more than 15 s to go, so the grace is 60 s.
        deadline = time.monotonic() + 60
        while (left := _processes_of(ray_tmp)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, "Ray processes left behind:\n" + "\n".join(left)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
