"""ortops: custom operators for ONNX Runtime.

The package ships ``libortops.so`` (``ortops.dll`` on Windows), a custom-op library that any
ONNX Runtime from 1.17 on can load, and the manifest of the ops it registers. PyTorch integration (torch ops, eager
implementations and export rules for both exporters) lives in :mod:`ortops.torch`, which is
the only part that imports torch.

Example::

    import onnxruntime as ort
    import ortops

    session = ort.InferenceSession("model.onnx", ortops.session_options())
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ortops._check import ModelProblem, check_model
from ortops._schemas import register_onnx_schemas
from ortops._version import __version__

if TYPE_CHECKING:
    import onnx
    import onnxruntime

__all__ = [
    "AttributeInfo",
    "InputInfo",
    "ModelProblem",
    "OpInfo",
    "__version__",
    "check_model",
    "domains",
    "get_library_path",
    "library_providers",
    "library_version",
    "ops",
    "optimize",
    "register_onnx_schemas",
    "session_options",
]

# The wheel for Windows (scripts/build_wheel.sh windows) carries ortops.dll, the others libortops.so.
_LIBRARY_NAME = "ortops.dll" if sys.platform == "win32" else "libortops.so"
_MANIFEST_NAME = "ortops_ops.json"

# The wheel leaves ONNX Runtime to an extra (pyproject.toml says why), so it may be missing.
_NO_ONNXRUNTIME = (
    "ortops: no ONNX Runtime is installed; install one: "
    'pip install "ortops[onnxruntime]" (CPU) or "ortops[onnxruntime-gpu]" (CUDA)'
)
_ONNXRUNTIME_NOTICE_PRINTED = importlib.util.find_spec("onnxruntime") is None
if _ONNXRUNTIME_NOTICE_PRINTED:
    print(_NO_ONNXRUNTIME, file=sys.stderr)


def get_library_path() -> str:
    """Returns the full path of ``libortops.so`` (``ortops.dll`` on Windows) for
    ``register_custom_ops_library``.

    The environment variable ``ORTOPS_LIBRARY`` overrides the copy shipped in the package
    (useful while developing: point it at ``build/libortops.so``).
    """
    override = os.environ.get("ORTOPS_LIBRARY")
    path = Path(override) if override else Path(__file__).with_name(_LIBRARY_NAME)
    if not path.is_file():
        raise FileNotFoundError(f"ortops library not found at {path}")
    # Absolute: Windows' LoadLibraryEx, as ONNX Runtime calls it, needs a full path.
    return os.path.abspath(path)


# The SessionOptions objects this module registered the library into. ONNX Runtime accepts
# a second registration but then fails every session made from the options ("Domain already
# set in registry"), and it offers no way to ask options which libraries they hold.
_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()


def session_options(options: onnxruntime.SessionOptions | None = None) -> onnxruntime.SessionOptions:
    """Returns ``options`` (or new ``SessionOptions``) with the ortops library registered.

    ``ort.InferenceSession(path, ortops.session_options())`` is all a model needs. Options
    that an earlier call registered ortops into are refused with ``ValueError``: ONNX Runtime
    would fail every session made from them. (Options into which the library, or mmdeploy's
    library, was registered another way fail the same way at session creation, with
    "Domain already set in registry"; ortops cannot see those.)
    """
    if options is not None and options in _REGISTERED:
        raise ValueError(
            "ortops.session_options: these SessionOptions already hold ortops, from an earlier call; registering it "
            'again would make ONNX Runtime fail every session created from them with "Domain already set in '
            'registry" (a domain can be added to one options object once): pass the options on as they are.'
        )
    try:
        import onnxruntime
    except ModuleNotFoundError as e:
        if e.name != "onnxruntime":
            raise
        raise ModuleNotFoundError(_NO_ONNXRUNTIME, name="onnxruntime") from None

    options = options if options is not None else onnxruntime.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    _REGISTERED.add(options)
    return options


def optimize(model: str | os.PathLike[str] | onnx.ModelProto, rules: list[str] | None = None) -> onnx.ModelProto:
    """Returns ``model`` (a path, read with its external data, or a ModelProto, left as it is)
    with the blocks of standard ONNX ops that a rule proves equivalent rewritten into ortops'
    faster nodes: group normalization (``[N, C, ...]`` in, same shape out) into
    ``ortops::GroupNorm``, RoiAlign (``[N, C, H, W]`` maps, ``[R, 4]`` rois, ``[R]`` batch
    indices) into ``ortops::RoIAlign``. ``rules`` names the rules to apply (default: all;
    ``ortops optimize --list-rules`` lists them). Blocks a rule cannot prove equal are left as
    they were: ``ortops optimize`` reports them with the reason. Needs onnxscript
    (``pip install "ortops[optimize]"``).
    """
    from ortops._optimize import import_rewriter, optimize_with_report

    import_rewriter()
    return optimize_with_report(model, rules)[0]


def __dir__() -> list[str]:
    """``dir(ortops)``: the public API only (not the modules this one imports)."""
    return sorted(__all__)


@dataclass(frozen=True)
class InputInfo:
    """An input or output of an op: its name, accepted element types and meaning.

    A variadic input (only ever the last) stands for one or more node inputs of one
    element type, such as one feature map per pyramid level.
    """

    name: str
    types: tuple[str, ...]
    optional: bool
    doc: str
    variadic: bool = False


@dataclass(frozen=True)
class AttributeInfo:
    """An attribute: name, ONNX type (int, float, string, ints, floats), default (None: required).

    ``also_ints_of_one``: an int attribute that the op also accepts stored as ints holding
    one value (as yolov7 writes some TensorRT plugin attributes).
    """

    name: str
    type: str
    default: str | None
    doc: str
    also_ints_of_one: bool = False


@dataclass(frozen=True)
class OpInfo:
    """One registered op, as listed in the library's op table."""

    domain: str
    name: str
    since_version: int
    # The providers the op has a kernel for in some build: CPUExecutionProvider in every build,
    # CUDAExecutionProvider (where the op has a device path) in the ortops-gpu build only.
    # registered_providers says which of them the installed library has.
    execution_providers: tuple[str, ...]
    compat: bool
    kernel: str  # rows with the same kernel are one op under several names
    doc: str
    # Where the kernel deliberately differs from the runtime that defined the node (empty if not).
    differences: str
    inputs: tuple[InputInfo, ...]
    outputs: tuple[InputInfo, ...]
    attributes: tuple[AttributeInfo, ...]
    # The execution_providers that the library get_library_path() names registers kernels of
    # this op for: CPUExecutionProvider alone in the CPU build (the ortops wheel), which has no
    # CUDA kernels.
    registered_providers: tuple[str, ...] = ("CPUExecutionProvider",)

    @property
    def qualified_name(self) -> str:
        """``domain::Name``, as in error messages and docs."""
        return f"{self.domain}::{self.name}"

    def node_inputs(self, count: int) -> tuple[InputInfo, ...]:
        """The spec of each of a node's first ``count`` inputs: a variadic last input's spec
        repeats for every input from its position on (``inputs`` when it has none)."""
        if not self.inputs or not self.inputs[-1].variadic:
            return self.inputs[:count]
        last = len(self.inputs) - 1
        return self.inputs[: min(count, last)] + (self.inputs[last],) * max(0, count - last)


def _io(entry: dict[str, Any]) -> InputInfo:
    return InputInfo(entry["name"], tuple(entry["types"]), entry["optional"], entry["doc"], entry["variadic"])


@functools.cache
def _manifest() -> dict[str, Any]:
    """The library's manifest (``ortops_ops.json`` beside it): version, domains, op table."""
    return json.loads(Path(get_library_path()).with_name(_MANIFEST_NAME).read_text())


@functools.cache
def ops() -> tuple[OpInfo, ...]:
    """Every op the library registers, in op-table order (read from the shipped manifest)."""
    installed = library_providers()
    return tuple(
        OpInfo(
            domain=op["domain"],
            name=op["name"],
            since_version=op["since_version"],
            execution_providers=tuple(op["execution_providers"]),
            compat=op["compat"],
            kernel=op["kernel"],
            doc=op["doc"],
            differences=op["differences"],
            inputs=tuple(_io(i) for i in op["inputs"]),
            outputs=tuple(_io(o) for o in op["outputs"]),
            attributes=tuple(
                AttributeInfo(a["name"], a["type"], a["default"], a["doc"], a.get("also_ints_of_one", False))
                for a in op["attributes"]
            ),
            registered_providers=tuple(p for p in op["execution_providers"] if p in installed),
        )
        for op in _manifest()["ops"]
    )


def domains() -> tuple[str, ...]:
    """The custom domains the library registers, each at opset version 1."""
    return tuple(_manifest()["domains"])


# Which builds have each provider's kernels (the manifest lists every provider a node has a
# kernel for in some build; the CPU wheel has none of CUDA's): what `ortops ops`/`inspect` and
# the op pages say beside a provider.
_PROVIDER_BUILDS = {
    "CPUExecutionProvider": "every build",
    "CUDAExecutionProvider": "the ortops-gpu build only",
}


def library_providers() -> tuple[str, ...]:
    """The execution providers the library that ``get_library_path()`` names has kernels
    for: ``("CPUExecutionProvider",)``, and ``"CUDAExecutionProvider"`` in the CUDA build (the
    ortops-gpu wheel), whose CUDA kernels run the ops whose ``OpInfo.execution_providers``
    name CUDA (``OpInfo.registered_providers``: an op's providers in this library)."""
    return tuple(_manifest().get("library_providers", ("CPUExecutionProvider",)))


def library_version() -> str:
    """The version of the library that ``get_library_path()`` names (its manifest says it):
    ``__version__`` for the library shipped in the package, possibly another one for a library
    that ``ORTOPS_LIBRARY`` points at."""
    return str(_manifest()["version"])
