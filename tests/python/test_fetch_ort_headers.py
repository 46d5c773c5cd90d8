"""scripts/fetch_ort_headers.py without the network: digest check, extraction, stamps, errors."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
AAR_PATH = "package/Plugins/Android/onnxruntime.aar"


@pytest.fixture(scope="module")
def fetcher() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_ort_headers", ROOT / "scripts" / "fetch_ort_headers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fetch_ort_headers"] = module
    spec.loader.exec_module(module)
    return module


def _tarball(aar_files: dict[str, bytes]) -> bytes:
    """An npm-style .tgz with an AAR (a zip) holding ``aar_files``."""
    aar = io.BytesIO()
    with zipfile.ZipFile(aar, "w") as zipped:
        for name, data in aar_files.items():
            zipped.writestr(name, data)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        info = tarfile.TarInfo(AAR_PATH)
        info.size = len(aar.getvalue())
        archive.addfile(info, io.BytesIO(aar.getvalue()))
    return out.getvalue()


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def _pins(tarball: bytes) -> dict[str, str]:
    return {
        "ORT_HEADERS_NPM_PACKAGE": "some.package",
        "ORT_HEADERS_NPM_VERSION": "1.2.3",
        "ORT_HEADERS_AAR_PATH": AAR_PATH,
        "ORT_HEADERS_NPM_INTEGRITY": _integrity(tarball),
    }


def test_pins_name_a_sha512_integrity(fetcher: ModuleType) -> None:
    pins = fetcher.read_pins()
    algorithm, _, digest = pins["ORT_HEADERS_NPM_INTEGRITY"].partition("-")
    assert algorithm == "sha512"
    assert len(base64.b64decode(digest, validate=True)) == 64


def test_integrity_accepts_only_the_pinned_digest(fetcher: ModuleType) -> None:
    data = b"the package"
    fetcher.verify_integrity(data, _integrity(data))
    with pytest.raises(fetcher.FetchError, match="not the pinned"):
        fetcher.verify_integrity(data + b".", _integrity(data))
    with pytest.raises(fetcher.FetchError, match="sha512-<base64>"):
        fetcher.verify_integrity(data, "sha1-" + base64.b64encode(hashlib.sha1(data).digest()).decode())


def test_fetch_extracts_headers_flat_and_stamps(fetcher: ModuleType, tmp_path: Path, monkeypatch) -> None:
    tarball = _tarball(
        {
            "headers/onnxruntime_c_api.h": b"// c api\n",
            "headers/onnxruntime_cxx_api.h": b"// cxx api\n",
            "headers/../../escape.h": b"// must stay inside\n",
            "jni/arm64-v8a/libonnxruntime.so": b"not a header",
        }
    )
    calls = []
    monkeypatch.setattr(fetcher, "npm_pack", lambda spec: calls.append(spec) or tarball)
    dest = tmp_path / "deps" / "include"
    assert fetcher.ensure_headers(dest, _pins(tarball)) == dest
    assert calls == ["some.package@1.2.3"]
    assert sorted(p.name for p in dest.iterdir()) == [
        ".from-some.package-1.2.3",
        "escape.h",
        "onnxruntime_c_api.h",
        "onnxruntime_cxx_api.h",
    ]
    assert (dest / "onnxruntime_c_api.h").read_bytes() == b"// c api\n"
    assert not (tmp_path / "escape.h").exists()
    # Same pins again: nothing fetched.
    fetcher.ensure_headers(dest, _pins(tarball))
    assert len(calls) == 1
    # A new version replaces the folder.
    newer = {**_pins(tarball), "ORT_HEADERS_NPM_VERSION": "1.2.4"}
    fetcher.ensure_headers(dest, newer)
    assert calls[-1] == "some.package@1.2.4"
    assert not (dest / ".from-some.package-1.2.3").exists()
    assert (dest / ".from-some.package-1.2.4").exists()


def test_fetch_refuses_a_tarball_with_another_digest(fetcher: ModuleType, tmp_path: Path, monkeypatch) -> None:
    tarball = _tarball({"headers/onnxruntime_c_api.h": b"// c api\n"})
    pins = {**_pins(tarball), "ORT_HEADERS_NPM_INTEGRITY": _integrity(b"something else")}
    monkeypatch.setattr(fetcher, "npm_pack", lambda spec: tarball)
    with pytest.raises(fetcher.FetchError, match="not the pinned"):
        fetcher.ensure_headers(tmp_path / "include", pins)
    assert not (tmp_path / "include").exists()


def test_fetch_refuses_an_aar_without_the_c_api_header(fetcher: ModuleType, tmp_path: Path, monkeypatch) -> None:
    tarball = _tarball({"headers/other.h": b"//\n"})
    monkeypatch.setattr(fetcher, "npm_pack", lambda spec: tarball)
    with pytest.raises(fetcher.FetchError, match="no headers/onnxruntime_c_api.h"):
        fetcher.ensure_headers(tmp_path / "include", _pins(tarball))
    assert not (tmp_path / "include").exists()


def test_headers_placed_by_hand_are_kept(fetcher: ModuleType, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "onnxruntime_c_api.h").write_text("// mine\n")
    monkeypatch.setattr(fetcher, "npm_pack", lambda spec: pytest.fail("must not fetch"))
    fetcher.ensure_headers(tmp_path, _pins(b""))
    assert (tmp_path / "onnxruntime_c_api.h").read_text() == "// mine\n"


def test_without_npm_the_error_says_what_to_do(fetcher: ModuleType, monkeypatch) -> None:
    monkeypatch.setattr(fetcher.shutil, "which", lambda name: None)
    with pytest.raises(fetcher.FetchError, match="install npm, or set ORTOPS_ORT_INCLUDE_DIR"):
        fetcher.npm_pack("some.package@1.2.3")
