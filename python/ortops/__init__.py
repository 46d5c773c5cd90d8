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
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ortops._check import ModelProblem, check_model
from ortops._schemas import register_onnx_schemas

if TYPE_CHECKING:
    import onnxruntime

__version__ = "0.1.0"

__all__ = [
    "AttributeInfo",
    "InputInfo",
    "ModelProblem",
    "OpInfo",
    "__version__",
    "check_model",
    "domains",
    "get_library_path",
    "ops",
    "register_onnx_schemas",
    "session_options",
]

# The wheel for Windows (scripts/build_wheel.sh windows) carries ortops.dll, the others libortops.so.
_LIBRARY_NAME = "ortops.dll" if sys.platform == "win32" else "libortops.so"
_MANIFEST_NAME = "ortops_ops.json"

#: The custom domains the library registers, each at opset version 1.
DOMAINS: tuple[str, ...] = ("ortops", "mmcv", "mmdeploy", "TRT")


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


def session_options(options: onnxruntime.SessionOptions | None = None) -> onnxruntime.SessionOptions:
    """Returns ``options`` (or new ``SessionOptions``) with the ortops library registered.

    ``ort.InferenceSession(path, ortops.session_options())`` is all a model needs.
    """
    import onnxruntime

    options = options if options is not None else onnxruntime.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return options


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
    execution_provider: str
    compat: bool
    kernel: str  # rows with the same kernel are one op under several names
    doc: str
    # Where the kernel deliberately differs from the runtime that defined the node (empty if not).
    differences: str
    inputs: tuple[InputInfo, ...]
    outputs: tuple[InputInfo, ...]
    attributes: tuple[AttributeInfo, ...]

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
def ops() -> tuple[OpInfo, ...]:
    """Every op the library registers, in op-table order (read from the shipped manifest)."""
    manifest = Path(get_library_path()).with_name(_MANIFEST_NAME)
    data = json.loads(manifest.read_text())
    return tuple(
        OpInfo(
            domain=op["domain"],
            name=op["name"],
            since_version=op["since_version"],
            execution_provider=op["execution_provider"],
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
        )
        for op in data["ops"]
    )


def domains() -> tuple[str, ...]:
    """The custom domains the library registers."""
    return DOMAINS
