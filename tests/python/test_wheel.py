"""The installable wheels (scripts/build_wheel.sh): tags, glibc needs, a torch-free install, Windows.

The wheel is built from the library these tests already use (ORTOPS_PREBUILT_DIR, no
compiling), then checked independently of auditwheel: the glibc symbol versions the library
needs are read with readelf and compared with the tag, and the wheel is installed into an
empty virtual environment that sees only onnxruntime and numpy (and what they require), where
it runs an mmcv::NonMaxSuppression file whose kept indices are worked out by hand below;
then the same file runs with the wheel's library in an older userland (Debian 11: glibc 2.31,
Python 3.9, onnxruntime 1.17.3), assembled once from Debian and PyPI packages into
.deps/old-userland and started through its own dynamic loader (no chroot, no root needed).
The win_amd64 wheel is built from the Windows cross build that scripts/test_windows.sh makes
(and runs those tests with): its tag and contents, its DLL's imports and exports as objdump
reads them, the package finding the DLL as on Windows, and the DLL running the same file
under Wine in ONNX Runtime's Windows build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement

import ortops

import quickstart
from ortest import MANYLINUX_SYSTEM_LIBRARIES, mmcv_nms_model

ROOT = Path(__file__).resolve().parents[2]
WHEEL_VENV = ROOT / ".venv-wheel"
BUILD_WHEEL = ROOT / "scripts" / "build_wheel.sh"


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "deps" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            pins[key.strip()] = value.strip()
    return pins


def _glibc_of_tag(tag: str) -> tuple[int, int]:
    match = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", tag)
    assert match, f"not a PEP 600 x86-64 manylinux tag: {tag}"
    return int(match[1]), int(match[2])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel scripts/build_wheel.sh makes from the library the other tests load."""
    if not (WHEEL_VENV / "bin" / "auditwheel").is_file():
        pytest.skip("the wheel tools are not installed: scripts/setup.sh creates .venv-wheel (deps/python-wheel.txt)")
    if sys.platform != "linux" or sysconfig.get_platform() != "linux-x86_64":
        pytest.skip("the wheel is built for x86-64 Linux only")
    library_dir = Path(ortops.get_library_path()).parent
    if not (library_dir / "ortops_ops.json").is_file():
        pytest.skip(f"no op manifest next to {ortops.get_library_path()} to package")
    out = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "ORTOPS_PREBUILT_DIR": str(library_dir), "ORTOPS_WHEEL_DIR": str(out)}
    run = subprocess.run(["bash", str(BUILD_WHEEL)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_is_tagged_py3_none_manylinux(wheel: Path) -> None:
    platform = _pins()["ORTOPS_WHEEL_PLATFORM"]
    assert wheel.name == f"ortops-{ortops.__version__}-py3-none-{platform}.whl"
    with zipfile.ZipFile(wheel) as archive:
        info = archive.read(f"ortops-{ortops.__version__}.dist-info/WHEEL").decode()
        names = set(archive.namelist())
        metadata_text = archive.read(f"ortops-{ortops.__version__}.dist-info/METADATA").decode()
        licences = [
            name for name in names if name.startswith(f"ortops-{ortops.__version__}.dist-info/") and "LICENSE" in name
        ]
        licence_text = archive.read(licences[0]).decode() if licences else ""
    assert f"Tag: py3-none-{platform}" in info.splitlines()
    assert "Root-Is-Purelib: false" in info.splitlines()
    assert {"ortops/libortops.so", "ortops/ortops_ops.json", "ortops/__init__.py"} <= names
    # The one version (python/ortops/_version.py) and the licence text, not only its name.
    assert f"Version: {ortops.__version__}" in metadata_text.splitlines()
    assert "License: Apache-2.0" in metadata_text.splitlines()
    assert "Apache License" in licence_text and "Version 2.0, January 2004" in licence_text, licences


def test_readme_states_the_wheels_sizes(wheel: Path) -> None:
    """The install page's sizes of the wheel and of the library in it are this build's, within
    10% (they went stale once: 0.6 and 1.5 MB for a 1.07 MB wheel with a 2.6 MB library)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "getting-started.md").read_text()
    stated = re.search(r"About ([\d.]+) MB; the\s+stripped `libortops.so` in it is ([\d.]+) MB", page)
    assert stated, "docs/getting-started.md no longer states the wheel's sizes as this test reads them"
    with zipfile.ZipFile(wheel) as archive:
        library = archive.getinfo("ortops/libortops.so").file_size
    for name, said, actual in (("wheel", stated[1], wheel.stat().st_size), ("library", stated[2], library)):
        assert abs(float(said) * 1e6 - actual) <= 0.1 * actual, (
            f"docs/getting-started.md says the {name} is {said} MB; it is {actual / 1e6:.2f} MB"
        )


def test_wheel_tag_is_no_newer_than_the_installed_onnxruntime_wheel() -> None:
    # A machine that can install the onnxruntime wheel in use can install ortops too.
    ours = _glibc_of_tag(_pins()["ORTOPS_WHEEL_PLATFORM"])
    tags = [
        line.split(": ", 1)[1].rsplit("-", 1)[1]
        for line in (metadata.distribution("onnxruntime").read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag: ")
    ]
    theirs = [_glibc_of_tag(tag) for tag in tags if tag.startswith("manylinux_")]
    if not theirs:
        pytest.skip(f"onnxruntime here is not a PEP 600 manylinux wheel (tags {tags})")
    assert ours <= min(theirs)


def test_library_needs_no_glibc_newer_than_the_tag(wheel: Path, tmp_path: Path) -> None:
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    with zipfile.ZipFile(wheel) as archive:
        library = Path(archive.extract("ortops/libortops.so", tmp_path))
    dynamic = subprocess.run(["readelf", "-d", "-V", "-W", str(library)], capture_output=True, text=True, check=True)
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic.stdout))
    requirements = dynamic.stdout.split("Version needs section", 1)
    assert len(requirements) == 2, "the library has no symbol version requirements at all"
    versions = re.findall(r"Name: ([A-Z]+)_([0-9.]+)", requirements[1])
    glibc = [tuple(int(part) for part in number.split(".")) for name, number in versions if name == "GLIBC"]
    assert glibc, "no GLIBC_ version found: the parsing is broken"
    assert max(glibc) <= _glibc_of_tag(_pins()["ORTOPS_WHEEL_PLATFORM"]), sorted(glibc)
    # libstdc++ is linked in, so no GLIBCXX_/CXXABI_ version may be asked of the system.
    assert {name for name, _ in versions} <= {"GLIBC", "GCC"}, versions
    assert needed <= MANYLINUX_SYSTEM_LIBRARIES, needed


def _requirement_closure(names: list[str]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` and everything they require (no extras)."""
    seen: dict[str, metadata.Distribution] = {}
    pending = list(names)
    while pending:
        name = pending.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen[name] = metadata.distribution(name)
        for text in seen[name].requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return list(seen.values())


def _expose_only(venv: Path, names: list[str], folder: Path) -> None:
    """Makes ``venv`` see this environment's copies of ``names`` and their requirements, nothing else.

    Each one's top-level files are linked into ``folder``, which a .pth file puts on the
    venv's path: no download, and torch (installed here) stays invisible.
    """
    folder.mkdir()
    for distribution in _requirement_closure(names):
        base = Path(str(distribution.locate_file("")))
        for top in {Path(str(file)).parts[0] for file in distribution.files or []}:
            source = base / top
            if top != ".." and source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (venv / "lib" / version / "site-packages" / "only-ort-numpy.pth").write_text(f"{folder}\n")


# Run inside the new environment: the mmcv file through ortops.session_options(), no torch.
_RUN_IN_VENV = """
import json, os, sys
import numpy as np
import onnxruntime as ort
import ortops
try:
    import torch  # noqa: F401
    torch_found = True
except ImportError:
    torch_found = False
boxes = np.array(json.loads(sys.argv[2]), dtype=np.float32)
scores = np.array(json.loads(sys.argv[3]), dtype=np.float32)
session = ort.InferenceSession(sys.argv[1], ortops.session_options(), providers=["CPUExecutionProvider"])
(indices,) = session.run(None, {"boxes": boxes, "scores": scores})
print(json.dumps({"indices": indices.tolist(), "dtype": str(indices.dtype), "library": ortops.get_library_path(),
                  "torch_found": torch_found, "glibc": os.confstr("CS_GNU_LIBC_VERSION"), "ort": ort.__version__,
                  "providers": ort.get_available_providers()}))
"""


BOXES = [[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 5], [21, 21, 29, 31]]
SCORES = [0.9, 0.8, 0.7, 0.95, 0.6]
# By hand, in score order 3, 0, 1, 2, 4: keep 3; 0 overlaps 3 by IoU 50/100 = 0.5, not above
# the threshold: keep; 1 overlaps 0 by 81/119 = 0.68: drop; 2 overlaps nothing: keep; 4
# overlaps 2 by 72/108 = 0.67: drop.
EXPECTED = [3, 0, 2]


def _mmcv_nms_file(folder: Path) -> Path:
    model = mmcv_nms_model(iou_threshold=0.5, offset=0)
    path = folder / "nms.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _run_nms(command: list[str], model: Path, env: dict[str, str]) -> dict:
    run = subprocess.run(
        [*command, "-c", _RUN_IN_VENV, str(model), json.dumps(BOXES), json.dumps(SCORES)],
        env=env,
        cwd=model.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert not result["torch_found"], "torch is visible in the environment: the test proves nothing"
    assert result["dtype"] == "int64"
    return result


def _venv_seeing_only(names: list[str], folder: Path) -> tuple[str, dict[str, str]]:
    """(python, environment) of a new virtual environment in ``folder`` that sees only this
    environment's ``names`` and their requirements."""
    venv = folder / "venv"
    # Without pip of its own (seeding one takes seconds): this pip installs into it (--python).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    _expose_only(venv, names, folder / "exposed")
    env = {key: value for key, value in os.environ.items() if key not in ("ORTOPS_LIBRARY", "PYTHONPATH")}
    return str(venv / "bin" / "python"), env


def _pip_install(python: str, env: dict[str, str], *what: str) -> None:
    """pip install without an index: every requirement must already be there (or be given)."""
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-index",
            "--disable-pip-version-check",
            *what,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]


def _installed(python: str, env: dict[str, str]) -> set[str]:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "list", "--format=json", "--disable-pip-version-check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return {entry["name"].lower() for entry in json.loads(listed.stdout)}


def test_wheel_runs_an_mmcv_file_in_an_empty_venv(wheel: Path, tmp_path: Path) -> None:
    python, env = _venv_seeing_only(["onnxruntime", "numpy"], tmp_path)
    # The CPU runtime through the extra; pip must find it (and numpy) already there.
    _pip_install(python, env, f"{wheel}[onnxruntime]")
    model = _mmcv_nms_file(tmp_path)
    result = _run_nms([python], model, env)
    assert Path(result["library"]).is_relative_to(tmp_path / "venv"), result["library"]
    assert result["indices"] == EXPECTED
    # Without the optional dependencies (no onnx, no torch here): the command runs the model
    # unchecked, and what needs them names the extra that installs them.
    ortops_command = str(tmp_path / "venv" / "bin" / "ortops")
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, boxes=np.array(BOXES, np.float32), scores=np.array(SCORES, np.float32))
    run = subprocess.run(
        [ortops_command, "run", str(model), "--inputs", str(inputs), "--runs", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "indices: int64 [3] = [3 0 2]" in run.stdout, run.stdout + run.stderr
    assert 'pip install "ortops[onnx]"' in run.stderr
    for code, extra in (
        ("import ortops.torch", "torch"),
        (f"import ortops; ortops.check_model({str(model)!r})", "onnx"),
    ):
        missing = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert missing.returncode != 0
        last = missing.stderr.strip().splitlines()[-1]
        assert last.startswith("ModuleNotFoundError: ") and f'pip install "ortops[{extra}]"' in last, last


def test_quickstart_runs_with_only_the_wheel_and_its_extras(wheel: Path, tmp_path: Path) -> None:
    """The quick-start blocks of the README and docs/getting-started.md (tests/python/quickstart.py)
    that need no torch, in an environment where pip installed the wheel with the onnxruntime
    extra (and the onnx extra where a block names it) and nothing else is visible: the
    package's own command and Python, not this checkout's."""
    documents = [
        (document, [block for block in quickstart.blocks(document) if "torch" not in block.extras])
        for document in quickstart.DOCUMENTS
    ]
    if not any(blocks for _, blocks in documents):
        pytest.skip("no quick-start blocks without torch")
    needs_onnx = any("onnx" in block.extras for _, blocks in documents for block in blocks)
    python, env = _venv_seeing_only(["onnxruntime", "numpy", *(["onnx"] if needs_onnx else [])], tmp_path)
    _pip_install(python, env, f"{wheel}[onnxruntime{',onnx' if needs_onnx else ''}]")
    env["PATH"] = f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}"
    for document, blocks in documents:
        work = tmp_path / f"work-{document.stem}"
        work.mkdir()
        for block in blocks:
            quickstart.run(block, work, python, env)


def test_import_without_onnxruntime_says_so_in_one_line(wheel: Path, tmp_path: Path) -> None:
    python, env = _venv_seeing_only(["numpy"], tmp_path)
    _pip_install(python, env, str(wheel))  # no extra: installs with numpy alone
    imported = subprocess.run(
        [python, "-c", "import ortops; print(ortops.get_library_path())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr  # C++ users may want only the library's path
    assert imported.stderr.splitlines() == [
        'ortops: no ONNX Runtime is installed; install one: pip install "ortops[onnxruntime]" (CPU) or '
        '"ortops[onnxruntime-gpu]" (CUDA)'
    ]
    used = subprocess.run(
        [python, "-c", "import ortops; ortops.session_options()"], env=env, capture_output=True, text=True, timeout=120
    )
    assert used.returncode != 0
    assert used.stderr.strip().splitlines()[-1].startswith("ModuleNotFoundError: ortops: no ONNX Runtime is installed")


@pytest.fixture(scope="module")
def onnxruntime_gpu_wheel() -> Path:
    """The onnxruntime-gpu wheel pinned in deps/python-ort-gpu.txt, downloaded once into .deps."""
    (pin,) = [
        line.strip()
        for line in (ROOT / "deps" / "python-ort-gpu.txt").read_text().splitlines()
        if line.startswith("onnxruntime-gpu==")
    ]
    version = pin.split("==")[1]
    cache = ROOT / ".deps" / "onnxruntime-gpu"
    found = sorted(cache.glob(f"onnxruntime_gpu-{version}-*.whl"))
    if not found:
        _prepare(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
            + ["--only-binary=:all:", "--dest", str(cache), pin],
            f"download {pin}",
        )
        found = sorted(cache.glob(f"onnxruntime_gpu-{version}-*.whl"))
    assert len(found) == 1, found
    return found[0]


def test_wheel_keeps_an_installed_onnxruntime_gpu(wheel: Path, onnxruntime_gpu_wheel: Path, tmp_path: Path) -> None:
    """pip install onnxruntime-gpu, then pip install the ortops wheel: the GPU build stays, and
    ortops runs with it (a wheel that required `onnxruntime` had pip install the CPU build over
    it; here, without an index, that install fails)."""
    with zipfile.ZipFile(onnxruntime_gpu_wheel) as archive:
        (metadata_name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            Requirement(line.split(": ", 1)[1])
            for line in archive.read(metadata_name).decode().splitlines()
            if line.startswith("Requires-Dist: ")
        ]
    # The GPU build's own requirements (flatbuffers, numpy, packaging, protobuf) from here.
    needed = [r.name for r in requires if r.marker is None or r.marker.evaluate({"extra": ""})]
    python, env = _venv_seeing_only(needed, tmp_path)
    _pip_install(python, env, str(onnxruntime_gpu_wheel))
    _pip_install(python, env, str(wheel))
    installed = _installed(python, env)
    assert "onnxruntime-gpu" in installed and "onnxruntime" not in installed, sorted(installed)
    result = _run_nms([python], _mmcv_nms_file(tmp_path), env)
    assert "CUDAExecutionProvider" in result["providers"], result["providers"]
    assert result["indices"] == EXPECTED


def _debian_mirror() -> tuple[str, str | None]:
    """The URI (and signing keyring) of the host's Debian apt source for its own release."""
    os_release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    codename = os_release.get("VERSION_CODENAME", "").strip('"')
    sources = Path("/etc/apt/sources.list.d")
    for path in sorted(sources.glob("*.sources")) if sources.is_dir() else []:
        for paragraph in path.read_text().split("\n\n"):
            fields = {}
            for line in paragraph.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.split()
            if "deb" in fields.get("types", []) and codename in fields.get("suites", []):
                if "main" in fields.get("components", []) and fields.get("uris"):
                    return fields["uris"][0], (fields.get("signed-by") or [None])[0]
    lists = [Path("/etc/apt/sources.list"), *(sorted(sources.glob("*.list")) if sources.is_dir() else [])]
    for path in lists:
        for line in path.read_text().splitlines() if path.is_file() else []:
            match = re.match(r"deb\s+(?:\[(?P<options>[^]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)\s+.*\bmain\b", line)
            if match and match["suite"] == codename:
                signed = re.search(r"signed-by=(\S+)", match["options"] or "")
                return match["uri"], signed[1] if signed else None
    pytest.skip(f"no Debian apt source for {codename or 'this system'} to take the older userland from")


def _prepare(command: list[str], what: str) -> None:
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        pytest.skip(f"could not {what}: {(run.stderr.strip().splitlines() or ['?'])[-1]}")


@pytest.fixture(scope="module")
def old_userland() -> tuple[Path, Path, str]:
    """(Debian root, site-packages folder, python name) of the older userland, made once."""
    pins = _pins()
    suite, python = pins["ORTOPS_OLD_USERLAND_DEBIAN_SUITE"], pins["ORTOPS_OLD_USERLAND_PYTHON"]
    ort_min = [
        line.strip()
        for line in (ROOT / "deps" / "python-ort-min.txt").read_text().splitlines()
        if line.startswith(("onnxruntime==", "numpy=="))
    ]
    cache = ROOT / ".deps" / "old-userland"
    root, site, stamp = cache / "root", cache / "site-packages", cache / ".ready"
    wanted = f"{suite} {python} {' '.join(sorted(ort_min))}\n"
    if stamp.is_file() and stamp.read_text() == wanted:
        return root, site, python
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("apt-get and dpkg-deb are needed to assemble the older userland")
    uri, keyring = _debian_mirror()
    shutil.rmtree(cache, ignore_errors=True)
    for folder in (cache / "lists" / "partial", cache / "apt" / "archives" / "partial"):
        folder.mkdir(parents=True)
    signed = f"[signed-by={keyring}] " if keyring else ""
    (cache / "sources.list").write_text(f"deb {signed}{uri} {suite} main\n")
    (cache / "status").write_text("")
    # apt, with every path of its own: the host's apt configuration and state stay untouched.
    apt = ["apt-get", "-q", "-y"] + [
        f"-o{option}"
        for option in (
            f"Dir::Etc::SourceList={cache / 'sources.list'}",
            "Dir::Etc::SourceParts=/dev/null",
            f"Dir::State::Lists={cache / 'lists'}",
            f"Dir::Cache={cache / 'apt'}",
            f"Dir::State::status={cache / 'status'}",
            "APT::Architecture=amd64",
            "Debug::NoLocking=1",
        )
    ]
    _prepare([*apt, "update"], f"read Debian {suite}'s package lists")
    packages = [f"{python}-minimal", f"lib{python}-stdlib", "libstdc++6", "libgcc-s1"]
    _prepare([*apt, "install", "--download-only", "--no-install-recommends", *packages], "download them")
    for deb in sorted((cache / "apt" / "archives").glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=120)
    version = python.removeprefix("python")
    abi = "cp" + version.replace(".", "")
    _prepare(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", str(site)]
        + ["--no-deps", "--only-binary=:all:", "--python-version", version, "--implementation", "cp", "--abi", abi]
        + ["--platform", "manylinux_2_27_x86_64", "--platform", "manylinux_2_17_x86_64", *ort_min],
        f"download {' '.join(ort_min)} for {python}",
    )
    shutil.rmtree(cache / "apt")
    stamp.write_text(wanted)
    return root, site, python


def test_wheel_runs_in_an_older_userland(wheel: Path, old_userland: tuple[Path, Path, str], tmp_path: Path) -> None:
    root, site, python = old_userland
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "wheel")
    libraries = [root / "lib" / "x86_64-linux-gnu", root / "usr" / "lib" / "x86_64-linux-gnu"]
    # The older userland's own loader and libraries (its glibc, libgcc_s, libstdc++), not the host's.
    command = [
        str(root / "lib" / "x86_64-linux-gnu" / "ld-linux-x86-64.so.2"),
        "--inhibit-cache",
        "--library-path",
        ":".join(map(str, libraries)),
        str(root / "usr" / "bin" / python),
    ]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONHOME": str(root / "usr"),
        "PYTHONPATH": f"{tmp_path / 'wheel'}:{site}",
        "PYTHONNOUSERSITE": "1",
    }
    result = _run_nms(command, _mmcv_nms_file(tmp_path), env)
    old = tuple(int(part) for part in result["glibc"].split()[-1].split("."))
    assert old < (2, 34), f"{result['glibc']} is not older than the libpthread merge: the test proves little"
    assert old >= _glibc_of_tag(_pins()["ORTOPS_WHEEL_PLATFORM"])
    assert Path(result["library"]).is_relative_to(tmp_path / "wheel"), result["library"]
    assert result["indices"] == EXPECTED


# ------------------------------------------------------------------------------------ Windows
# The win_amd64 wheel (scripts/build_wheel.sh windows) of the Windows cross build that
# scripts/test_windows.sh makes, names in ORTOPS_WINDOWS_BUILD_DIR, and runs these tests with.
WINDOWS_BUILD = os.environ.get("ORTOPS_WINDOWS_BUILD_DIR")
# DLLs of every 64-bit Windows (api-ms-win-* are its API sets).
WINDOWS_SYSTEM_DLLS = {"kernel32.dll", "msvcrt.dll", "ucrtbase.dll", "advapi32.dll", "ntdll.dll"}


@pytest.fixture(scope="module")
def windows_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not WINDOWS_BUILD:
        pytest.skip("scripts/test_windows.sh runs this (ORTOPS_WINDOWS_BUILD_DIR names its cross build)")
    if not (WHEEL_VENV / "bin" / "pip").is_file():
        pytest.skip("the wheel tools are not installed: scripts/setup.sh creates .venv-wheel")
    out = tmp_path_factory.mktemp("windows-wheel")
    env = {**os.environ, "ORTOPS_PREBUILT_DIR": WINDOWS_BUILD, "ORTOPS_WHEEL_DIR": str(out)}
    run = subprocess.run(["bash", str(BUILD_WHEEL), "windows"], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_windows_wheel_is_tagged_py3_none_win_amd64_and_carries_the_dll(windows_wheel: Path) -> None:
    assert windows_wheel.name == f"ortops-{ortops.__version__}-py3-none-win_amd64.whl"
    with zipfile.ZipFile(windows_wheel) as archive:
        info = archive.read(f"ortops-{ortops.__version__}.dist-info/WHEEL").decode()
        names = set(archive.namelist())
        manifest = json.loads(archive.read("ortops/ortops_ops.json"))
    assert "Tag: py3-none-win_amd64" in info.splitlines()
    assert "Root-Is-Purelib: false" in info.splitlines()
    assert {"ortops/ortops_ops.json", "ortops/__init__.py"} <= names
    binaries = {name for name in names if name.endswith((".so", ".dll", ".pyd", ".dylib"))}
    assert binaries == {"ortops/ortops.dll"}, binaries
    assert [(op["domain"], op["name"]) for op in manifest["ops"]] == [(op.domain, op.name) for op in ortops.ops()]


def test_windows_dll_imports_system_dlls_only_and_exports_register_custom_ops(
    windows_wheel: Path, tmp_path: Path
) -> None:
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    with zipfile.ZipFile(windows_wheel) as archive:
        dll = Path(archive.extract("ortops/ortops.dll", tmp_path))
    headers = subprocess.run(["objdump", "-p", str(dll)], capture_output=True, text=True, check=True).stdout
    assert "file format pei-x86-64" in headers
    imports = re.findall(r"DLL Name: (\S+)", headers)
    assert imports, "no import table found: the parsing is broken"
    assert {name.lower() for name in imports if not name.lower().startswith("api-ms-win-")} <= WINDOWS_SYSTEM_DLLS, (
        imports
    )
    # The export directory's name table: lines "\t[   0] RegisterCustomOps" up to a blank line.
    names = headers.split("[Ordinal/Name Pointer] Table", 1)[-1].split("\n\n", 1)[0]
    assert re.findall(r"^\t\[\s*\d+\] (\S+)$", names, re.MULTILINE) == ["RegisterCustomOps"]


def test_windows_wheel_package_finds_its_dll(windows_wheel: Path, tmp_path: Path) -> None:
    # The package as Python on Windows imports it (sys.platform "win32"; the rest of the
    # package does not depend on the platform): get_library_path() is the DLL's full path.
    with zipfile.ZipFile(windows_wheel) as archive:
        archive.extractall(tmp_path / "wheel")
    script = "import sys; sys.platform = 'win32'; import ortops; print(ortops.get_library_path(), len(ortops.ops()))"
    env = {key: value for key, value in os.environ.items() if key != "ORTOPS_LIBRARY"}
    env["PYTHONPATH"] = str(tmp_path / "wheel")
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    path, count = run.stdout.split()
    assert path == str(tmp_path / "wheel" / "ortops" / "ortops.dll")
    assert int(count) == len(ortops.ops())


def test_windows_wheel_dll_runs_an_mmcv_file_under_wine(windows_wheel: Path, tmp_path: Path) -> None:
    # The wheel's (stripped) DLL in the Windows ONNX Runtime that WINEPATH names, through the
    # cross-built case runner (tests/cpp/case_runner.cc).
    from onnx import TensorProto, numpy_helper

    runner = Path(WINDOWS_BUILD or "") / "tests" / "cpp" / "ortops_case_runner.exe"
    if "WINEPATH" not in os.environ or not runner.is_file():
        pytest.skip("needs the cross build's case runner and a Windows runtime on WINEPATH (scripts/test_windows.sh)")
    with zipfile.ZipFile(windows_wheel) as archive:
        dll = Path(archive.extract("ortops/ortops.dll", tmp_path))
    case = tmp_path / "cases" / "nms"
    case.mkdir(parents=True)
    _mmcv_nms_file(case).rename(case / "model.onnx")
    for k, (name, values) in enumerate((("boxes", BOXES), ("scores", SCORES))):
        tensor = numpy_helper.from_array(np.array(values, np.float32), name)
        (case / f"input_{k}.pb").write_bytes(tensor.SerializeToString())
    (tmp_path / "cases" / "cases.txt").write_text("nms 1\n")
    wine = ROOT / "scripts" / "wine.sh"
    run = subprocess.run(
        [str(wine), str(runner), str(dll), str(tmp_path / "cases"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert not (tmp_path / "out" / "nms" / "error.txt").exists(), (tmp_path / "out" / "nms" / "error.txt").read_text()
    output = TensorProto()
    output.ParseFromString((tmp_path / "out" / "nms" / "output_0.pb").read_bytes())
    assert numpy_helper.to_array(output).tolist() == EXPECTED
