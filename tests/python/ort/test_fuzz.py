"""Seeded fuzzing of every op: random valid and hostile inputs must give a result or an error.

For every op of every domain in ``ortops.ops()`` the cases are built from the manifest: each
input's shape comes from the first ``[...]`` in its doc (symbols such as ``N`` or ``C_out``
bound to random sizes, shared between inputs; an attribute name such as ``groups`` takes the
attribute's value; ``...`` is zero or more extra dimensions (a named run such as ``A...`` the same
ones wherever it appears in a case); an input documented as "any
rank" gets a random rank), its element type from the accepted types, each attribute from
its type and default; a variadic input gets one to four values (mostly as many as a list
attribute of the case has entries). A case then gets zero or more mutations: wrong ranks,
0-sized, huge (in shape metadata only: paired with a 0-sized dimension) and random
dimensions, element types the op does not accept, omitted and extra inputs and outputs, NaN,
infinities and huge values, negative, huge and garbage attribute values, attributes of the
wrong type, missing and unknown attributes, one or two threads.

The cases run in subprocesses, a batch per subprocess, with the address space limited to
4 GiB (``RLIMIT_AS``; under AddressSanitizer, whose shadow memory needs more address space,
``max_allocation_size_mb`` instead), so that an absurd allocation fails instead of swapping
the machine. A case passes when ONNX Runtime returns a result or raises an error; it fails
when the subprocess dies (a signal, an AddressSanitizer report, any nonzero exit) or makes
no progress for ``ORTOPS_FUZZ_TIMEOUT`` seconds (a hang). The rest of a batch goes on in a
new subprocess after a failure. One exception: AddressSanitizer ends the process where
``operator new`` cannot allocate (it never throws ``std::bad_alloc``), so its out-of-memory
and allocation-size-too-big reports count as the error that a normal build raises.

Environment: ``ORTOPS_FUZZ_SEED`` (default 20250601), ``ORTOPS_FUZZ_CASES`` (default 2000;
the cases cycle through the ops), ``ORTOPS_FUZZ_TIMEOUT`` (seconds without progress that
count as a hang, default 60), ``ORTOPS_FUZZ_JOBS`` (subprocesses at once, default 2).
A failure prints the seed, the case (JSON) and the commands that reproduce it::

    python tests/python/ort/test_fuzz.py --seed SEED --index INDEX   # regenerate and run one case
    python tests/python/ort/test_fuzz.py --case 'JSON'               # run the printed case

(with ``PYTHONPATH=python ORTOPS_LIBRARY=...`` as for the other tests). Both run the case in
the calling process, so that a debugger or the sanitizers see it directly.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEED = int(os.environ.get("ORTOPS_FUZZ_SEED", "20250601"))
CASES = int(os.environ.get("ORTOPS_FUZZ_CASES", "2000"))
TIMEOUT_S = float(os.environ.get("ORTOPS_FUZZ_TIMEOUT", "60"))
JOBS = int(os.environ.get("ORTOPS_FUZZ_JOBS", "2"))
BATCH = 100
REPORTED = 5  # failures reported in full (the rest: one line each)
MEMORY_LIMIT = 4 << 30  # bytes of address space for a worker
MAX_ELEMENTS = 1 << 15  # per input, before mutations (0-sized huge shapes hold nothing)

HERE = Path(__file__).resolve()
TESTS_PYTHON = HERE.parents[1]  # ortest.py

# ONNX element types the cases use (TensorProto values, so that workers need no onnx import
# to build the list), accepted or not by the op.
ELEMENT_TYPES = {"float32": 1, "uint8": 2, "int32": 6, "int64": 7, "bool": 9, "float16": 10, "float64": 11}
ATTRIBUTE_TYPES = {"float": 1, "int": 2, "string": 3, "floats": 6, "ints": 7, "strings": 8}
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
HOSTILE_INTS = [-1, -2, -(1 << 31), (1 << 31) - 1, 1 << 31, 1 << 32, 1 << 40, 1 << 62, INT64_MIN, INT64_MAX, 10**6]
HOSTILE_FLOATS = [math.nan, math.inf, -math.inf, -1.0, -1e30, 1e30, 3.4e38, 0.0, -0.0, 1e-45, 1e-300]
HOSTILE_STRINGS = ["", "garbage", "AVG", "avg\x00max", "x" * 1000, "\u00e9"]
ASAN_OUT_OF_MEMORY = r"SUMMARY: AddressSanitizer: (out-of-memory|allocation-size-too-big)"
OUT_OF_MEMORY = "error: out of memory (an AddressSanitizer abort; std::bad_alloc without it)"
HUGE_DIMS = [1 << 31, (1 << 31) + 1, 1 << 32, 1 << 40, 1 << 50, 1 << 58]


# --------------------------------------------------------------------------- case generation


def _op_table() -> list[dict[str, Any]]:
    """The ops as plain dicts, in op-table order (the order fixes which op a case index gets)."""
    import ortops

    return [
        {
            "domain": op.domain,
            "name": op.name,
            "kernel": op.kernel,
            "inputs": [
                {"name": i.name, "types": list(i.types), "optional": i.optional, "variadic": i.variadic, "doc": i.doc}
                for i in op.inputs
            ],
            "outputs": [o.name for o in op.outputs],
            "attributes": [{"name": a.name, "type": a.type, "default": a.default, "doc": a.doc} for a in op.attributes],
        }
        for op in ortops.ops()
    ]


def _shape_patterns(doc: str) -> list[list[str]]:
    """Every backticked ``[...]`` of an input's doc as dimension expressions; [] for any rank."""
    return [[t.strip() for t in body.split(",") if t.strip()] for body in re.findall(r"`\[([^\]`]*)\]", doc)]


def _default_value(attribute: dict[str, Any]) -> Any:
    text, kind = attribute["default"], attribute["type"]
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind in ("ints", "floats") and text == "[]":  # how a schema writes an empty list
        return []
    if kind == "ints":
        return [int(v) for v in text.split(",") if v]
    if kind == "floats":
        return [float(v) for v in text.split(",") if v]
    return text


def _sane_value(rng: random.Random, attribute: dict[str, Any]) -> Any:
    """A value of the attribute's own type that an op plausibly accepts."""
    kind, doc = attribute["type"], attribute["doc"]
    if attribute["default"] is not None and rng.random() < 0.5:
        return _default_value(attribute)
    if kind == "int":
        # Enumerations list their values in the doc ("0 bilinear, 1 nearest, 2 bicubic").
        listed = [int(v) for v in re.findall(r"(?<![\w.^])-?\d+(?![\w.])", doc)]
        if listed and rng.random() < 0.8:
            return rng.choice(listed)
        return rng.choice([-1, 0, 1, 1, 2, 3, 4, 5, 7])
    if kind == "float":
        return rng.choice([0.0, 0.1, 0.5, 0.7, 1.0, 2.0, rng.random()])
    if kind == "ints":
        k = rng.choice([0, 1, 1, 2])
        return [k, rng.choice([k, 0, 1, 2])]
    if kind == "floats":
        return [rng.random(), rng.random()]
    if kind == "strings":
        return ["a"]
    words = re.findall(r"`([A-Za-z_]+)`", doc)
    return rng.choice(words) if words else "a"


def _hostile_value(rng: random.Random, kind: str) -> Any:
    if kind == "int":
        return rng.choice(HOSTILE_INTS)
    if kind == "float":
        return rng.choice(HOSTILE_FLOATS)
    if kind == "string":
        return rng.choice(HOSTILE_STRINGS)
    if kind == "ints":
        return rng.choice([[], [1], [1, 1, 1], [-1, -1], [0, 0], [1 << 31, 1], [1 << 62, 1 << 62], [INT64_MIN, 1]])
    if kind == "floats":
        return rng.choice([[], [math.nan], [math.inf, -math.inf]])
    return rng.choice([[], [""], ["a", "b"]])


def _wrong_type(rng: random.Random, kind: str) -> tuple[str, Any]:
    other = rng.choice([k for k in ATTRIBUTE_TYPES if k != kind])
    return other, _hostile_value(rng, other) if rng.random() < 0.5 else {
        "int": 1,
        "float": 0.5,
        "string": "avg",
        "ints": [1, 1],
        "floats": [0.5, 0.5],
        "strings": ["avg"],
    }[other]


class _Sizes:
    """Random sizes for the symbols of a case's shapes, the same symbol the same size."""

    def __init__(
        self,
        rng: random.Random,
        kernel: str,
        attributes: dict[str, tuple[str, Any]],
        pool: Sequence[int] = (1, 1, 2, 2, 3, 3, 4, 5, 7, 8, 16),
    ) -> None:
        self.rng, self.kernel, self.pool = rng, kernel, pool
        self.attributes = attributes  # the values the node has, defaults included
        self.bound: dict[str, int] = {}
        self.runs: dict[str, list[int]] = {}  # named runs of dims ("A...")

    def _attribute_int(self, name: str) -> int | None:
        kind, value = self.attributes.get(name, ("", None))
        return value if kind == "int" and isinstance(value, int) and 1 <= value <= 64 else None

    def _attribute_pair(self, name: str, index: int) -> int | None:
        kind, value = self.attributes.get(name, ("", None))
        if kind != "ints" or not all(0 <= v <= 8 for v in value):
            return None
        if len(value) == 2:
            return value[index]
        if len(value) == 4 and value[0] == value[1] and value[2] == value[3]:  # mmdeploy's (h, h, w, w) padding
            return value[2 * index]
        return None

    def size(self, symbol: str) -> int:
        if symbol.isdigit():
            return int(symbol)
        value = self._attribute_int(symbol)
        if value is not None:
            return value
        if symbol not in self.bound:
            self.bound[symbol] = self._derived(symbol)
        return self.bound[symbol]

    def _derived(self, symbol: str) -> int:
        # A convolution's output size follows from the other sizes and the attributes (the
        # manifest only names it), so that some deformable-convolution cases are valid.
        if "DeformConv" in self.kernel and symbol in ("H_out", "W_out"):
            axis = 0 if symbol == "H_out" else 1
            extent, kernel = self.size("H" if axis == 0 else "W"), self.size("kh" if axis == 0 else "kw")
            stride = self._attribute_pair("stride", axis)
            padding = self._attribute_pair("padding", axis)
            dilation = self._attribute_pair("dilation", axis)
            if stride and padding is not None and dilation and self.rng.random() < 0.9:
                return max(0, (extent + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1)
        if self.rng.random() < 0.04:
            return 0
        if symbol in ("kh", "kw"):  # kernel sizes: mostly smaller than the image
            return self.rng.choice([1, 1, 2, 3, 3, 5])
        size = self.rng.choice(self.pool)
        if symbol == "C":  # channels: often divisible by the group attributes that split them
            groups = [self._attribute_int(name) or 1 for name in ("groups", "deform_groups", "num_groups")]
            if self.rng.random() < 0.8:
                size = math.lcm(*groups) * self.rng.choice([1, 1, 2, 3])
        return size

    def evaluate(self, expression: str) -> int:
        """``N``, ``4``, ``2 * deform_groups * kh * kw``, ``C / groups``, left to right."""
        tokens = expression.split()
        value = self.size(tokens[0])
        for operator, operand in zip(tokens[1::2], tokens[2::2]):
            right = self.size(operand)
            value = value * right if operator == "*" else (value // right if right else 0)
        return value


def _shape(rng: random.Random, sizes: _Sizes, pattern: list[str] | None) -> list[int]:
    if not pattern:  # any rank
        return [sizes.rng.choice([0, 1, 2, 3, 5, 8]) for _ in range(rng.choice([0, 1, 1, 2, 3, 4]))]
    shape: list[int] = []
    for token in pattern:
        if token == "...":
            shape += [sizes.size(f"_batch{k}") for k in range(rng.choice([0, 0, 1, 2]))]
        elif token.endswith("..."):  # a named run of dims ("A..."): the same in every input of the case
            if token not in sizes.runs:
                sizes.runs[token] = [sizes.size(f"_{token}{k}") for k in range(rng.choice([0, 1, 1, 2, 3]))]
            shape += sizes.runs[token]
        else:
            shape.append(sizes.evaluate(token))
    while math.prod(shape) > MAX_ELEMENTS:
        largest = max(range(len(shape)), key=lambda k: shape[k])
        shape[largest] //= 2
    return shape


def _fits_numpy(shape: list[int]) -> bool:
    """Whether numpy can make an array of this shape (it refuses when the product of the
    nonzero dimensions, in bytes, overflows)."""
    return math.prod(d for d in shape if d) * 8 < (1 << 62)


def _mutate(rng: random.Random, case: dict[str, Any], op: dict[str, Any]) -> str:
    """Applies one random hostile change to ``case``; returns what it did."""
    inputs, attributes = case["inputs"], case["attributes"]
    present = [i for i in inputs if i["name"]]
    choice = rng.choice(
        ["attr_value", "attr_value", "attr_type", "attr_omit", "attr_unknown", "dtype", "dtype", "rank", "dim", "dim"]
        + ["huge_dim", "huge_dim", "omit_input", "values", "values", "values", "outputs", "extra_input"]
    )
    if choice.startswith("attr") and not op["attributes"] and choice != "attr_unknown":
        choice = "values"
    if choice in ("dtype", "rank", "dim", "huge_dim", "values") and not present:
        choice = "outputs"
    if choice == "attr_value":
        a = rng.choice(op["attributes"])
        attributes[a["name"]] = [a["type"], _hostile_value(rng, a["type"])]
    elif choice == "attr_type":
        a = rng.choice(op["attributes"])
        attributes[a["name"]] = list(_wrong_type(rng, a["type"]))
    elif choice == "attr_omit":
        attributes.pop(rng.choice(op["attributes"])["name"], None)
    elif choice == "attr_unknown":
        attributes[rng.choice(["bogus", "iou_treshold", "dim "])] = ["int", rng.choice(HOSTILE_INTS)]
    elif choice == "dtype":
        rng.choice(present)["dtype"] = rng.choice(list(ELEMENT_TYPES))
    elif choice == "rank":
        shape = rng.choice(present)["shape"]
        if shape and rng.random() < 0.5:
            del shape[rng.randrange(len(shape))]
        else:
            shape.insert(rng.randrange(len(shape) + 1), rng.choice([1, 2, 3]))
    elif choice == "dim":
        shape = rng.choice(present)["shape"]
        if shape:
            shape[rng.randrange(len(shape))] = rng.choice([0, 0, 1, 2, 3, 6, 9])
    elif choice == "huge_dim":
        shape = rng.choice(present)["shape"]
        if len(shape) >= 2:
            big, zero = rng.sample(range(len(shape)), 2)
            shape[zero] = 0
            shape[big] = rng.choice(HUGE_DIMS)
            while not _fits_numpy(shape):
                shape[big] //= 2
        elif shape:
            shape[0] = 0
    elif choice == "omit_input":
        rng.choice(inputs)["name"] = ""
    elif choice == "values":
        rng.choice(present)["fill"] = "special"
    elif choice == "outputs":
        outputs = case["outputs"]
        if len(outputs) > 1 and rng.random() < 0.5:
            outputs.pop()
        else:
            outputs.append("extra_output")
    elif choice == "extra_input":
        inputs.append({"name": "extra", "dtype": "float32", "shape": [2], "fill": "normal"})
    return choice


def _consistent_levels(rng: random.Random, op: dict[str, Any], inputs: list[dict[str, Any]]) -> None:
    """Deformable attention's level sizes and start indices must add up to value's S (the
    kernel checks them), which random integers almost never do: most cases get explicit data
    that does, some empty levels included, so that they reach the kernel."""
    names = [spec["name"] for spec in op["inputs"]]
    wanted = ("value", "value_spatial_shapes", "value_level_start_index")
    if not all(name in names for name in wanted) or rng.random() < 0.1:
        return
    value, shapes, starts = (inputs[names.index(name)] for name in wanted)
    if not all(len(i.get("shape", [])) >= 1 for i in (value, shapes, starts)) or len(value["shape"]) < 2:
        return
    count, total = shapes["shape"][0], value["shape"][1]
    if count == 0:
        return
    cuts = sorted(rng.randint(0, total) for _ in range(count - 1))
    levels, running = [], []
    for low, high in zip([0, *cuts], [*cuts, total]):
        area = high - low
        if area == 0:
            size = [0, rng.choice([0, 1, 3])]
            rng.shuffle(size)
        else:
            height = rng.choice([d for d in range(1, area + 1) if area % d == 0])
            size = [height, area // height]
        running.append(low)
        levels += size
    shapes["data"], starts["data"] = levels, running


def _valid_batch_indices(rng: random.Random, op: dict[str, Any], inputs: list[dict[str, Any]]) -> None:
    """TRT::ROIAlign_TRT's int32 batch indices must name images of its first input, which
    random integers in [-2, 6] seldom all do: most cases get indices that do."""
    names = [spec["name"] for spec in op["inputs"]]
    if "batch_indices" not in names or rng.random() < 0.1:
        return
    images, indices = inputs[0], inputs[names.index("batch_indices")]
    if not images.get("shape") or len(indices.get("shape", [])) != 1 or images["shape"][0] == 0:
        return
    indices["data"] = [rng.randrange(images["shape"][0]) for _ in range(indices["shape"][0])]


def make_case(
    seed: int,
    index: int,
    table: list[dict[str, Any]] | None = None,
    mutate: bool = True,
    size_pool: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Case ``index`` of the run with ``seed`` (ops in turn, each case its own random stream).

    ``mutate=False`` leaves out the hostile mutations (a valid case, unless its random sizes
    or values are refused); ``size_pool`` replaces the sizes a shape symbol is drawn from.
    An op's cases are drawn from its name and its own case count, so that adding an op to the
    library changes no other op's cases.
    """
    table = table if table is not None else _op_table()
    op = table[index % len(table)]
    rng = random.Random(f"{seed}:{op['domain']}::{op['name']}:{index // len(table)}")
    attributes: dict[str, list[Any]] = {}
    for a in op["attributes"]:
        if a["default"] is None or rng.random() < 0.6:  # required ones always, the rest often
            attributes[a["name"]] = [a["type"], _sane_value(rng, a)]
    effective = {a["name"]: (a["type"], _default_value(a)) for a in op["attributes"] if a["default"] is not None}
    effective.update((k, (v[0], v[1])) for k, v in attributes.items())
    sizes = _Sizes(rng, op["kernel"], effective, *([size_pool] if size_pool else []))
    # One element type for the inputs that take it (the ops' type parameter), else each its own.
    main_type = rng.choice(op["inputs"][0]["types"]) if op["inputs"] else "float32"
    inputs = []
    for spec in op["inputs"]:
        if spec["optional"] and rng.random() < 0.3:
            inputs.append({"name": ""})
            continue
        patterns = _shape_patterns(spec["doc"])
        # A variadic input (one feature map per pyramid level) gets one to four values, of
        # the same shape (its symbols are bound once); mostly as many as a list attribute of
        # the case has entries (featmap_strides: one per level), so that cases reach the kernel.
        count = 1
        if spec["variadic"]:  # (random draws only here: other ops' cases stay as they were)
            lists = [len(v) for kind, v in attributes.values() if kind in ("ints", "floats") and 1 <= len(v) <= 4]
            count = lists[0] if lists and rng.random() < 0.8 else rng.choice([1, 2, 2, 3, 4])
        for k in range(count):
            inputs.append(
                {
                    "name": spec["name"] if k == 0 else f"{spec['name']}_{k}",
                    "dtype": main_type if main_type in spec["types"] else spec["types"][0],
                    "shape": _shape(rng, sizes, rng.choice(patterns) if patterns else None),
                    "fill": rng.choice(["normal", "uniform", "small_ints", "positive", "boxes", "rois", "special"]),
                }
            )
    _consistent_levels(rng, op, inputs)
    _valid_batch_indices(rng, op, inputs)
    case = {
        "seed": seed,
        "index": index,
        "domain": op["domain"],
        "op": op["name"],
        "inputs": inputs,
        "outputs": list(op["outputs"]),
        "attributes": attributes,
        "threads": rng.choice([1, 2]),
        "data_seed": rng.randrange(1 << 31),
        "mutations": [],
    }
    count = rng.choices([0, 1, 2, 3], weights=[4, 3, 2, 1])[0] if mutate else 0
    case["mutations"] = [_mutate(rng, case, op) for _ in range(count)]
    return case


# --------------------------------------------------------------------------- running one case


def _values(rng: Any, dtype: str, shape: list[int], fill: str, data: list[Any] | None = None) -> Any:
    import numpy as np

    size = math.prod(shape)
    if data is not None and len(data) == size:  # explicit values, unless a mutation resized the input
        return np.array(data).astype(dtype).reshape(shape)
    if dtype in ("int32", "int64", "uint8", "bool"):
        info = np.iinfo(np.int64 if dtype == "bool" else dtype)
        if fill == "special":
            pool = np.array([info.min, info.max, -1, 0, 1, 2, info.max // 2], np.int64)
            data = rng.choice(pool, size).astype(dtype) if size else np.zeros(0, dtype)
        else:
            data = rng.integers(max(info.min, -2), min(info.max, 6), size, endpoint=True)
        return (data.astype(bool) if dtype == "bool" else data.astype(dtype)).reshape(shape)
    if fill == "normal":
        data = rng.normal(0, 3, size)
    elif fill == "uniform":
        data = rng.uniform(-1, 1, size)
    elif fill == "small_ints":
        data = rng.integers(-1, 4, size, endpoint=True).astype(np.float64)
    elif fill == "positive":
        data = rng.uniform(0, 20, size)
    elif fill == "boxes":  # in fours, (x1, y1, x2, y2) with x1 <= x2 and y1 <= y2
        data = rng.uniform(0, 16, size)
        if size % 4 == 0:
            quads = data.reshape(-1, 4)
            quads[:, 2:] = quads[:, :2] + rng.uniform(0, 8, (len(quads), 2))
    elif fill == "rois" and shape and shape[-1] > 0:  # (batch index 0 or 1, then coordinates)
        rows = rng.uniform(0, 16, size).reshape(-1, shape[-1])
        rows[:, 0] = rng.integers(0, 1, len(rows), endpoint=True)
        if shape[-1] == 5:  # (batch, x1, y1, x2, y2)
            rows[:, 3:] = rows[:, 1:3] + rng.uniform(0, 8, (len(rows), 2))
        data = rows.reshape(-1)
    else:
        pool = np.array([np.nan, np.inf, -np.inf, 1e38, -1e38, 1e308, 5e-324, -0.0, 0.0, 1.0, 0.5, -7.0])
        data = np.where(rng.random(size) < 0.5, rng.choice(pool, size), rng.normal(0, 3, size))
    with np.errstate(over="ignore", invalid="ignore"):
        return data.astype(dtype).reshape(shape)


def _attribute(name: str, kind: str, value: Any) -> Any:
    from onnx import AttributeProto

    attribute = AttributeProto(name=name, type=ATTRIBUTE_TYPES[kind])
    if kind == "int":
        attribute.i = value
    elif kind == "float":
        attribute.f = value
    elif kind == "string":
        attribute.s = value.encode("utf-8", "surrogatepass")
    elif kind == "ints":
        attribute.ints.extend(value)
    elif kind == "floats":
        attribute.floats.extend(value)
    else:
        attribute.strings.extend(v.encode() for v in value)
    return attribute


def run_case(case: dict[str, Any]) -> str:
    """Runs one case in this process: "ok", or "error: <first line>" when ONNX Runtime (or
    building the model) raised. A crash or a hang is not caught here: the parent sees it."""
    return case_outputs(case)[0]


def case_model(case: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The case's one-node model (an onnx.ModelProto) and its feeds (numpy arrays by input name)."""
    import numpy as np
    from onnx import TypeProto, helper

    rng = np.random.default_rng(case["data_seed"])
    feeds, graph_inputs = {}, []
    for spec in case["inputs"]:
        if not spec["name"]:
            continue
        feeds[spec["name"]] = _values(rng, spec["dtype"], spec["shape"], spec["fill"], spec.get("data"))
        graph_inputs.append(
            helper.make_tensor_value_info(spec["name"], ELEMENT_TYPES[spec["dtype"]], [None] * len(spec["shape"]))
        )
    node = helper.make_node(case["op"], [i["name"] for i in case["inputs"]], case["outputs"], domain=case["domain"])
    node.attribute.extend(_attribute(name, kind, value) for name, (kind, value) in case["attributes"].items())
    outputs = [helper.make_value_info(name, TypeProto()) for name in case["outputs"]]
    graph = helper.make_graph([node], "fuzz", graph_inputs, outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(case["domain"], 1)]
    return helper.make_model(graph, ir_version=8, opset_imports=opsets), feeds


def case_outputs(case: dict[str, Any]) -> tuple[str, list[Any]]:
    """Runs one case in this process: ("ok", its outputs as numpy arrays), or ("error: <first
    line>", []) when ONNX Runtime (or building the model) raised."""
    import onnxruntime as ort

    import ortops

    import ortest  # noqa: F401  (sets sessions up for the tests: no spinning; no arena under the sanitizers)

    if case.get("selftest") == "crash":  # test_harness_reports_crashes_and_hangs
        os.kill(os.getpid(), signal.SIGSEGV)
    if case.get("selftest") == "hang":
        time.sleep(3600)
    try:
        model, feeds = case_model(case)
        options = ortops.session_options()
        options.intra_op_num_threads = case["threads"]
        options.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        outputs = session.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - any error is a pass; only crashes and hangs fail
        return "error: " + (str(e).strip().splitlines() or [type(e).__name__])[0][:200], []
    return "ok", outputs


def _under_asan() -> bool:
    with open("/proc/self/maps") as maps:
        return "libasan" in maps.read()


def _worker() -> None:
    """Runs the cases (a JSON list on stdin), printing START i / DONE i status for each."""
    cases = json.load(sys.stdin)
    import numpy  # noqa: F401  (imports first: the limit is for the kernels)
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401

    if not _under_asan():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    for case in cases:
        print("START", case["index"], flush=True)
        status = run_case(case)
        print("DONE", case["index"], json.dumps(status), flush=True)


# --------------------------------------------------------------------------- the test


@dataclass
class Failure:
    case: dict[str, Any]
    what: str
    log: str


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_PYTHON), env.get("PYTHONPATH")]))
    # Under AddressSanitizer an allocation over the cap fails (as RLIMIT_AS would) instead of
    # aborting the process; ASan's shadow memory rules RLIMIT_AS out.
    asan = env.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = ":".join(
        filter(None, [asan, f"allocator_may_return_null=1:max_allocation_size_mb={MEMORY_LIMIT >> 20}"])
    )
    return env


def _run_batch(cases: list[dict[str, Any]], timeout_s: float = TIMEOUT_S) -> tuple[dict[int, str], list[Failure]]:
    """Runs ``cases`` in subprocesses: a new one after each crash or hang, for the rest."""
    results: dict[int, str] = {}
    failures: list[Failure] = []
    remaining = list(cases)
    while remaining:
        by_index = {c["index"]: c for c in remaining}
        with tempfile.TemporaryFile("w+") as log:
            process = subprocess.Popen(
                [sys.executable, str(HERE), "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=_worker_env(),
            )
            lines: queue.Queue[str | None] = queue.Queue()

            def read(stream: Any = process.stdout, sink: queue.Queue[str | None] = lines) -> None:
                for line in stream:
                    sink.put(line)
                sink.put(None)

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            assert process.stdin is not None
            process.stdin.write(json.dumps(remaining))
            process.stdin.close()
            current: int | None = None
            started = False
            what = ""
            while True:
                try:
                    line = lines.get(timeout=timeout_s)
                except queue.Empty:
                    process.kill()
                    what = f"hang: no progress for {timeout_s:g} s"
                    break
                if line is None:
                    code = process.wait()
                    if code != 0 or current is not None:
                        what = f"crash: killed by signal {-code}" if code < 0 else f"crash: exit status {code}"
                    break
                word, index, *rest = line.split(" ", 2)
                if word == "START":
                    current, started = int(index), True
                elif word == "DONE":
                    results[int(index)] = json.loads(rest[0])
                    current = None
            process.wait()
            reader.join(timeout=10)
            log.seek(0)
            text = log.read()
        if not what:
            break
        if not started:  # the worker itself does not start: no case would run
            failures.append(Failure(remaining[0], f"{what} before the first case", text))
            results.update((c["index"], what) for c in remaining)
            break
        if current is None:  # after the last case
            current = remaining[-1]["index"]
        if current is not None and re.search(ASAN_OUT_OF_MEMORY, text):
            # AddressSanitizer aborts where operator new would throw std::bad_alloc (as it
            # does under RLIMIT_AS without ASan, and ONNX Runtime reports an error).
            results[current] = OUT_OF_MEMORY
        else:
            failures.append(Failure(by_index[current], what, text))
            results[current] = what
        remaining = [c for c in remaining if c["index"] not in results]
    return results, failures


def _report(failure: Failure) -> str:
    case = failure.case
    log = "\n".join(failure.log.splitlines()[-60:])
    names = ("ORTOPS_LIBRARY", "ORTOPS_TEST_CPU_ARENA", "LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "PYTHONPATH")
    environment = " ".join(f"{k}={shlex.quote(os.environ[k])}" for k in names if k in os.environ)
    command = f"{environment} {shlex.quote(os.path.relpath(sys.executable))} {shlex.quote(os.path.relpath(HERE))}"
    return (
        f"{failure.what} in case {case['index']} ({case['domain']}::{case['op']}, seed {case['seed']})\n"
        f"case: {json.dumps(case)}\n"
        f"reproduce: {command} --seed {case['seed']} --index {case['index']}\n"
        f"       or: {command} --case {shlex.quote(json.dumps(case))}\n"
        f"worker stderr (last lines):\n{log}\n"
    )


def test_fuzz_every_op() -> None:
    table = _op_table()
    cases = [make_case(SEED, i, table) for i in range(CASES)]
    batches = [cases[i : i + BATCH] for i in range(0, len(cases), BATCH)]
    with ThreadPoolExecutor(max(1, JOBS)) as pool:
        outcomes = list(pool.map(_run_batch, batches))
    results = {i: r for batch_results, _ in outcomes for i, r in batch_results.items()}
    failures = [f for _, batch_failures in outcomes for f in batch_failures]
    ran = sum(r == "ok" for r in results.values())
    summary = (
        f"fuzz seed {SEED}: {len(cases)} cases over {len(table)} ops, {ran} ran, "
        f"{sum(r.startswith('error') for r in results.values())} errors "
        f"({sum(r == OUT_OF_MEMORY for r in results.values())} of them out of memory under AddressSanitizer), "
        f"{len(failures)} crashes or hangs"
    )
    print(summary)
    for i, result in sorted(results.items()):
        if result == OUT_OF_MEMORY:  # worth a look: which allocation did the case ask for?
            print(f"  out of memory under AddressSanitizer: case {i} ({cases[i]['domain']}::{cases[i]['op']})")
    if failures:  # the first few in full, then one line each
        shown = "\n".join(_report(f) for f in failures[:REPORTED])
        rest = "".join(
            f"\n{f.what} in case {f.case['index']} ({f.case['domain']}::{f.case['op']})" for f in failures[REPORTED:]
        )
        raise AssertionError(f"{summary}\n\n{shown}{rest}")
    assert len(results) == len(cases), summary
    # The generator must reach the kernels, not only the input checks: every op runs some
    # case to the end (this holds for the default seed and case count).
    if CASES >= 10 * len(table):
        reached = {(cases[i]["domain"], cases[i]["op"]) for i, r in results.items() if r == "ok"}
        missing = [f"{op['domain']}::{op['name']}" for op in table if (op["domain"], op["name"]) not in reached]
        assert not missing, f"{summary}; no case ran to the end for {missing}"


def test_harness_reports_crashes_and_hangs() -> None:
    table = _op_table()
    cases = [make_case(SEED, i, table) for i in range(5)]
    cases[1]["selftest"], cases[3]["selftest"] = "crash", "hang"
    results, failures = _run_batch(cases, timeout_s=5)
    # (AddressSanitizer turns the SIGSEGV into a report and exit status 1.)
    crash = "crash: exit status 1" if "libasan" in os.environ.get("LD_PRELOAD", "") else "crash: killed by signal 11"
    assert [(f.case["index"], f.what) for f in failures] == [(1, crash), (3, "hang: no progress for 5 s")]
    assert sorted(results) == [0, 1, 2, 3, 4]  # the cases after each failure ran too
    assert all(results[i] == "ok" or results[i].startswith("error") for i in (0, 2, 4))


def main() -> None:
    parser = argparse.ArgumentParser(description="Run fuzz cases of tests/python/ort/test_fuzz.py in this process.")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--index", type=int, action="append", help="case index to regenerate and run (repeatable)")
    parser.add_argument("--case", help="a case as printed by a failure (JSON)")
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS_PYTHON))
    if args.worker:
        _worker()
        return
    cases = [json.loads(args.case)] if args.case else [make_case(args.seed, i) for i in args.index or []]
    if not cases:
        parser.error("give --index or --case")
    for case in cases:
        print(json.dumps(case), flush=True)
        print(run_case(case), flush=True)


if __name__ == "__main__":
    main()
