"""Imported first by ``ortops.torch``: says which of its requirements are missing.

torch, onnx and onnxscript are the ``torch`` extra of the ortops package. Without them
``ortops.torch`` cannot import, and the first ``ModuleNotFoundError`` deep in its imports
(``No module named 'onnxscript'``) would not say what to install.
"""

from __future__ import annotations

import importlib


def _missing(names: tuple[str, ...]) -> list[str]:
    """The modules of ``names`` that are not installed (one that fails to import for another
    reason raises that error)."""
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            missing.append(name)
    return missing


_absent = _missing(("torch", "onnx", "onnxscript"))
if _absent:
    raise ModuleNotFoundError(
        f"ortops.torch needs torch, onnx and onnxscript; {', '.join(_absent)} "
        f'{"is" if len(_absent) == 1 else "are"} not installed: pip install "ortops[torch]"',
        name=_absent[0],
    )
