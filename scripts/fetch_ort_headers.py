"""Fetches the pinned ONNX Runtime C/C++ headers into a folder (default .deps/onnxruntime/include).

The headers are the ``headers/`` folder of the official Android AAR, which the npm package
``ORT_HEADERS_NPM_PACKAGE`` (deps/versions.env) carries unchanged. The package is downloaded
with npm's own client (``npm pack``, so npm's configured registry and proxy apply), its
SHA-512 is checked against the ``ORT_HEADERS_NPM_INTEGRITY`` pin, and the headers are
extracted with Python's tarfile and zipfile. A stamp file names the package version, so a
second call with the same pins does nothing.

Usage: ``python3 scripts/fetch_ort_headers.py [DEST]``. scripts/setup.sh runs it, and
setup.py imports it when ``pip install .`` finds no headers.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ROOT / "deps" / "versions.env"
DEFAULT_DEST = ROOT / ".deps" / "onnxruntime" / "include"
_STAMP_PREFIX = ".from-"


class FetchError(RuntimeError):
    """The headers could not be fetched; the message says why and what to do instead."""


def read_pins(path: Path = VERSIONS) -> dict[str, str]:
    """Returns the ``KEY=VALUE`` lines of deps/versions.env (comments and blanks skipped)."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            pins[key.strip()] = value.strip()
    return pins


def _spec(pins: dict[str, str]) -> str:
    return f"{pins['ORT_HEADERS_NPM_PACKAGE']}@{pins['ORT_HEADERS_NPM_VERSION']}"


def _stamp(dest: Path, pins: dict[str, str]) -> Path:
    # The same name scripts/setup.sh has always written, so existing .deps/ folders are reused.
    return dest / f"{_STAMP_PREFIX}{pins['ORT_HEADERS_NPM_PACKAGE']}-{pins['ORT_HEADERS_NPM_VERSION']}"


def verify_integrity(data: bytes, integrity: str) -> None:
    """Raises FetchError unless ``data`` has the npm-style ``sha512-<base64>`` digest ``integrity``."""
    algorithm, _, expected = integrity.partition("-")
    if algorithm != "sha512" or not expected:
        raise FetchError(f"ORT_HEADERS_NPM_INTEGRITY must be 'sha512-<base64>', not {integrity!r}")
    actual = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if actual != expected:
        raise FetchError(f"the downloaded package has SHA-512 sha512-{actual}, not the pinned {integrity}")


def extract_headers(tarball: bytes, aar_path: str, dest: Path) -> None:
    """Writes every file of the ``headers/`` folder of the AAR at ``aar_path`` in ``tarball`` to ``dest``."""
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        try:
            member = archive.extractfile(aar_path)
        except KeyError:
            member = None
        if member is None:
            raise FetchError(f"the npm package has no file {aar_path}")
        aar = member.read()
    staging = Path(tempfile.mkdtemp(prefix=".headers-", dir=dest.parent))
    try:
        with zipfile.ZipFile(io.BytesIO(aar)) as zipped:
            names = [name for name in zipped.namelist() if name.startswith("headers/") and not name.endswith("/")]
            for name in names:
                # Flat folder, base names only: nothing can land outside dest.
                (staging / Path(name).name).write_bytes(zipped.read(name))
        if not (staging / "onnxruntime_c_api.h").is_file():
            raise FetchError(f"{aar_path} has no headers/onnxruntime_c_api.h")
        staging.chmod(0o755)
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def npm_pack(spec: str) -> bytes:
    """Downloads the npm package ``spec`` (name@version) with ``npm pack``; returns the tarball."""
    npm = shutil.which("npm")
    if npm is None:
        raise FetchError(
            f"npm, which fetches the pinned ONNX Runtime headers (npm package {spec}), is not installed: "
            "install npm, or set ORTOPS_ORT_INCLUDE_DIR to the include folder of an ONNX Runtime release"
        )
    with tempfile.TemporaryDirectory(prefix="ortops-npm-") as tmp:
        done = subprocess.run([npm, "pack", "--silent", spec], cwd=tmp, capture_output=True, text=True)
        tarballs = sorted(Path(tmp).glob("*.tgz"))
        if done.returncode != 0 or len(tarballs) != 1:
            reason = (done.stderr.strip().splitlines() or ["no tarball written"])[-1]
            raise FetchError(
                f"'npm pack {spec}' failed ({reason}): check npm's network access, or set ORTOPS_ORT_INCLUDE_DIR"
            )
        return tarballs[0].read_bytes()


def ensure_headers(dest: Path = DEFAULT_DEST, pins: dict[str, str] | None = None) -> Path:
    """Returns ``dest`` holding the pinned headers, fetching them unless already there.

    Headers in ``dest`` without any stamp (placed there by hand) are used as they are.
    Raises FetchError with one sentence that says what went wrong and what to do.
    """
    pins = pins if pins is not None else read_pins()
    stamp = _stamp(dest, pins)
    if stamp.is_file():
        return dest
    if (dest / "onnxruntime_c_api.h").is_file() and not any(dest.glob(f"{_STAMP_PREFIX}*")):
        return dest
    print(f"[fetch_ort_headers] ONNX Runtime headers from npm {_spec(pins)} into {dest}", file=sys.stderr)
    tarball = npm_pack(_spec(pins))
    verify_integrity(tarball, pins["ORT_HEADERS_NPM_INTEGRITY"])
    dest.parent.mkdir(parents=True, exist_ok=True)
    extract_headers(tarball, pins["ORT_HEADERS_AAR_PATH"], dest)
    stamp.touch()
    return dest


def main(argv: list[str]) -> int:
    """Command line: ``fetch_ort_headers.py [DEST]``."""
    dest = Path(argv[1]).resolve() if len(argv) > 1 else DEFAULT_DEST
    try:
        ensure_headers(dest)
    except FetchError as error:
        print(f"fetch_ort_headers: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
