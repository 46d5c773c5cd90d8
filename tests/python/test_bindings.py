"""The same libortops.so in another binding: ONNX Runtime's Java API (jar from .deps)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import ortops

from ortest import mmcv_nms_model

ROOT = Path(__file__).resolve().parents[2]
JAR = ROOT / ".deps" / "onnxruntime" / "lib" / "onnxruntime.jar"


@pytest.mark.skipif(shutil.which("javac") is None or not JAR.exists(), reason="needs a JDK and scripts/setup.sh's jar")
def test_java_binding_registers_the_library(tmp_path: Path) -> None:
    model = mmcv_nms_model(iou_threshold=0.5, offset=0)
    (tmp_path / "nms.onnx").write_bytes(model.SerializeToString())
    subprocess.run(
        ["javac", "-cp", str(JAR), "-d", str(tmp_path), str(ROOT / "tests" / "java" / "NmsCheck.java")], check=True
    )
    run = subprocess.run(
        ["java", "-cp", f"{JAR}:{tmp_path}", "NmsCheck", ortops.get_library_path(), str(tmp_path / "nms.onnx")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("kept [0, 2]")
