"""The shipped library and package: exports, dependencies, op list, registration."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import ortops

from ortest import make_model, mmcv_nms_model, python_without, run


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_only_register_custom_ops_is_exported() -> None:
    out = subprocess.run(["nm", "-D", "--defined-only", ortops.get_library_path()], capture_output=True, text=True)
    symbols = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    assert symbols == {"RegisterCustomOps"}


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf")
def test_library_links_nothing_from_onnxruntime_or_libstdcxx() -> None:
    out = subprocess.run(["readelf", "-d", ortops.get_library_path()], capture_output=True, text=True).stdout
    needed = [line for line in out.splitlines() if "(NEEDED)" in line]
    assert needed, out
    if any("libasan" in line for line in needed):
        pytest.skip("the sanitizer build (scripts/test_sanitizers.sh) links libstdc++ shared")
    assert not any("onnxruntime" in line or "libstdc++" in line for line in needed), needed


def test_op_list_comes_from_the_table() -> None:
    ops = ortops.ops()
    assert {op.domain for op in ops} <= set(ortops.domains())
    names = [op.qualified_name for op in ops]
    assert len(names) == len(set(names))
    assert "mmcv::NonMaxSuppression" in names and "ortops::NMS" in names


def test_library_path_is_absolute_even_when_the_override_is_relative(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Windows' LoadLibraryEx, as ONNX Runtime calls it, needs a full path; so does a dlopen
    # from another working directory.
    library = Path(ortops.get_library_path())
    monkeypatch.chdir(library.parent)
    monkeypatch.setenv("ORTOPS_LIBRARY", library.name)
    assert ortops.get_library_path() == str(library)
    monkeypatch.setenv("ORTOPS_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(FileNotFoundError, match="missing.so"):
        ortops.get_library_path()


def test_version_is_a_string() -> None:
    assert isinstance(ortops.__version__, str) and ortops.__version__.count(".") == 2


def test_dir_shows_the_public_api_only() -> None:
    assert dir(ortops) == sorted(ortops.__all__)
    for name in ortops.__all__:
        value = getattr(ortops, name)
        assert isinstance(value, str) or value.__doc__, f"ortops.{name} has no docstring"


def test_session_options_refuses_options_that_already_hold_ortops() -> None:
    model = mmcv_nms_model(iou_threshold=0.5, offset=0).SerializeToString()
    options = ortops.session_options()
    with pytest.raises(ValueError, match=r"already hold ortops.*Domain already set in registry"):
        ortops.session_options(options)
    ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])  # still usable as they are
    # The reason given is what ONNX Runtime does with the library registered twice.
    twice = ort.SessionOptions()
    twice.register_custom_ops_library(ortops.get_library_path())
    twice.register_custom_ops_library(ortops.get_library_path())
    with pytest.raises(Exception, match="Domain already set in registry"):
        ort.InferenceSession(model, twice, providers=["CPUExecutionProvider"])
    # Other options, given or new, take it.
    given = ort.SessionOptions()
    assert ortops.session_options(given) is given
    ort.InferenceSession(model, given, providers=["CPUExecutionProvider"])


def _installed(distribution: str) -> bool:
    # Not importlib.util.find_spec: the tests' own folder tests/python/torch is on sys.path.
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _torch_extra_missing(hidden: list[str]) -> str:
    """What ortops.torch says with ``hidden`` hidden, in this environment (the oldest-runtime
    one has no torch or onnxscript at all)."""
    missing = [m for m in ("torch", "onnx", "onnxscript") if m in hidden or not _installed(m)]
    verb = "is" if len(missing) == 1 else "are"
    return (
        f"ortops.torch needs torch, onnx and onnxscript; {', '.join(missing)} {verb} not installed: "
        'pip install "ortops[torch]"'
    )


@pytest.mark.parametrize(
    ("hidden", "code", "message"),
    [
        (["onnxscript"], "import ortops.torch", _torch_extra_missing(["onnxscript"])),
        (["torch", "onnxscript"], "import ortops.torch", _torch_extra_missing(["torch", "onnxscript"])),
        (
            ["onnx"],
            "import sys, ortops; ortops.check_model(sys.argv[1])",
            'ortops.check_model needs the onnx package, which is not installed: pip install "ortops[onnx]"',
        ),
        (
            ["onnx"],
            "import ortops; ortops.register_onnx_schemas()",
            'ortops.register_onnx_schemas needs the onnx package, which is not installed: pip install "ortops[onnx]"',
        ),
    ],
)
def test_a_missing_optional_dependency_names_the_extra(tmp_path, hidden, code, message) -> None:
    path = tmp_path / "nms.onnx"
    path.write_bytes(mmcv_nms_model(iou_threshold=0.5, offset=0).SerializeToString())
    result = python_without(hidden, code, str(path))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == f"ModuleNotFoundError: {message}", result.stderr


def test_registering_into_many_session_options_from_threads() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    model = make_model(
        "NMS", "ortops", [("boxes", np.float32, 2), ("scores", np.float32, 1)], ["indices"]
    ).SerializeToString()
    ort.InferenceSession(model, ortops.session_options())  # see tests/cpp: ORT races on a new domain's first sessions

    def one_session(_: int) -> list[int]:
        session = ort.InferenceSession(model, ortops.session_options())
        return session.run(None, {"boxes": boxes, "scores": scores})[0].tolist()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one_session, range(32)))
    assert all(r == [0, 2] for r in results)


def test_onnx_schemas_make_the_checker_accept_the_ops() -> None:
    ortops.register_onnx_schemas()
    ortops.register_onnx_schemas()  # a second call is harmless
    for op in ortops.ops():
        assert onnx.defs.has(op.name, op.since_version, op.domain), op.qualified_name
    model = mmcv_nms_model()
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("indices", onnx.TensorProto.INT64, [None]))
    onnx.checker.check_model(model, full_check=True)


def test_an_unknown_op_name_fails_clearly() -> None:
    with pytest.raises(Exception, match="NoSuchOp"):
        run("NoSuchOp", "ortops", {"X": np.zeros(1, np.float32)})
