"""The ``ortops`` command: inspect a model's custom ops, run a model with ortops registered.

``ortops inspect MODEL.onnx`` lists the nodes outside ONNX Runtime's own domains and what
:func:`ortops.check_model` finds (exit 0: runs with ortops, 1: does not, 2: bad usage or not
a model). ``ortops run MODEL.onnx`` runs it on given or random inputs and prints timings,
outputs and, with ``--profile``, ONNX Runtime's time per op type and node. ``ortops ops``
prints the op table. ``ortops optimize IN.onnx OUT.onnx`` rewrites standard ONNX blocks into
ortops nodes (see :mod:`ortops._optimize`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ortops._check import ATTRIBUTES_NOT_CHECKED

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import onnxruntime

    from ortops import OpInfo


# Exit statuses.
OK = 0
CANNOT_RUN = 1
USAGE = 2

_PROVIDER_ALIASES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "dml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
}

# ONNX Runtime's tensor type strings (NodeArg.type) and numpy dtypes.
_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
    "tensor(string)": "object",
}


_ONNX_EXTRA = 'pip install "ortops[onnx]"'


class UsageError(Exception):
    """A problem with the command line or its files: reported on one line, exit status 2."""


class CannotRun(Exception):
    """The model cannot run (unknown ops, load or run failure): exit status 1."""


def _fail(message: str) -> NoReturn:
    raise UsageError(message)


# --- loading ------------------------------------------------------------------------------


def _check_file(path: str) -> None:
    if not os.path.exists(path):
        _fail(f"{path}: no such file")
    if os.path.isdir(path):
        _fail(f"{path}: is a directory, not an ONNX model")


def _load(path: str) -> onnx.ModelProto:
    """The model at ``path`` (without external weights); UsageError if it is not one."""
    from ortops._check import load_model

    _check_file(path)
    try:
        return load_model(path)
    except ModuleNotFoundError as e:
        if e.name != "onnx":
            raise
        _fail(f"this command reads the model with the onnx package, which is not installed: {_ONNX_EXTRA}")
    except (OSError, ValueError) as e:
        _fail(str(e))


# --- inspect ------------------------------------------------------------------------------


def _ops_by_name() -> dict[tuple[str, str], OpInfo]:
    from ortops import ops

    return {(op.domain, op.name): op for op in ops()}


def _providers_text(op: OpInfo) -> str:
    """The providers this install registers the op for, then those only another build has:
    "CPUExecutionProvider (CUDAExecutionProvider: in the ortops-gpu build only)"."""
    import ortops

    text = ", ".join(op.registered_providers)
    elsewhere = [p for p in op.execution_providers if p not in op.registered_providers]
    if elsewhere:
        text += (
            " (" + "; ".join(f"{p}: in {ortops._PROVIDER_BUILDS.get(p, 'another build only')}" for p in elsewhere) + ")"
        )
    return text


def inspect_report(path: str) -> dict[str, Any]:
    """What ``ortops inspect`` prints, as a JSON-ready dict (UsageError if not a model)."""
    from ortops._check import STANDARD_DOMAINS, check_model_fully, iter_nodes

    model = _load(path)
    checked = check_model_fully(model)
    problems = checked.problems
    known = _ops_by_name()
    groups: Counter[tuple[str, str, int | None, bool]] = Counter()
    total = 0
    for _, node, version, is_function in iter_nodes(model):
        total += 1
        if node.domain not in STANDARD_DOMAINS:
            groups[node.domain, node.op_type, version, is_function] += 1
    custom = []
    for (domain, op_type, version, is_function), count in groups.items():
        op = known.get((domain, op_type))
        custom.append(
            {
                "domain": domain,
                "op_type": op_type,
                "opset": version,
                "count": count,
                "model_function": is_function,
                "implemented": op is not None,
                # The providers the op has in some build, and those the installed library
                # registers it for (no CUDA in the CPU build).
                "execution_providers": list(op.execution_providers) if op else [],
                "registered_providers": list(op.registered_providers) if op else [],
                "providers_text": _providers_text(op) if op else "",
            }
        )
    errors = [p for p in problems if p.severity == "error"]
    runnable = not errors and all(c["implemented"] or c["model_function"] for c in custom)
    return {
        "model": path,
        "ir_version": model.ir_version,
        "opset_import": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "nodes": total,
        "custom_ops": custom,
        "problems": [
            {
                "node": p.node,
                "domain": p.domain,
                "op_type": p.op_type,
                "kind": p.kind,
                "severity": p.severity,
                "message": p.message,
            }
            for p in problems
        ],
        "attributes_checked": checked.attributes_checked,
        "runnable": runnable,
    }


def _problem_lines(problems: Sequence[dict[str, Any]]) -> list[str]:
    return [f"  [{p['kind']}]{' (warning)' * (p['severity'] == 'warning')} {p['message']}" for p in problems]


def _print_inspect(report: dict[str, Any]) -> None:
    opsets = ", ".join(f"{d} {v}" for d, v in report["opset_import"].items())
    custom = report["custom_ops"]
    print(f"{report['model']}: IR version {report['ir_version']}, opsets: {opsets}")
    print(f"{report['nodes']} nodes, {sum(c['count'] for c in custom)} outside ONNX Runtime's own domains")
    if custom:
        rows = []
        for c in custom:
            if c["model_function"]:
                status = "model-local function"
            elif c["implemented"]:
                status = "ortops: " + c["providers_text"]
            else:
                status = "NOT IMPLEMENTED by ortops"
            opset = "-" if c["opset"] is None else str(c["opset"])
            rows.append((f"{c['domain']}::{c['op_type']}", f"opset {opset}", f"x{c['count']}", status))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        print("custom ops:")
        for r in rows:
            print("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[3])
    if report["problems"]:
        print(f"problems ({len(report['problems'])}):")
        print("\n".join(_problem_lines(report["problems"])))
    if not report["attributes_checked"]:
        print(f"note: {ATTRIBUTES_NOT_CHECKED}")
    if report["runnable"] and report["problems"]:
        print("result: every custom node runs with ortops, but not every one as the model says (see the warnings)")
    elif report["runnable"]:
        print("result: every custom node runs with ortops")
    else:
        print("result: the model cannot run with ortops as it is")


def _cmd_inspect(args: argparse.Namespace) -> int:
    report = inspect_report(args.model)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_inspect(report)
    return OK if report["runnable"] else CANNOT_RUN


# --- run ----------------------------------------------------------------------------------


def _parse_pairs(values: Sequence[str], option: str, what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            _fail(f"{option} expects NAME={what}, got '{value}'")
        if name in pairs:
            _fail(f"{option} gives '{name}' twice")
        pairs[name] = rest
    return pairs


def _read_array(path: str) -> np.ndarray:
    import numpy as np

    _check_file(path)
    try:
        array = np.load(path, allow_pickle=False)
    except Exception as e:
        _fail(f"{path}: not a .npy file numpy can read: {e}")
    if not isinstance(array, np.ndarray):
        _fail(f"{path}: holds several arrays (an .npz); pass it with --inputs")
    return array


def _read_npz(path: str) -> dict[str, np.ndarray]:
    import numpy as np

    _check_file(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                _fail(f"{path}: is a single array (.npy); pass it with --input NAME={path}")
            return {name: data[name] for name in data.files}
    except UsageError:
        raise
    except Exception as e:
        _fail(f"{path}: not an .npz file numpy can read: {e}")


def _providers(text: str | None) -> list[str]:
    import onnxruntime

    if not text:
        return ["CPUExecutionProvider"]
    available = onnxruntime.get_available_providers()
    chosen = []
    for item in text.split(","):
        item = item.strip()
        name = _PROVIDER_ALIASES.get(item.lower(), item)
        if name not in available:
            _fail(f"execution provider '{item}' is not available in this onnxruntime ({', '.join(available)})")
        chosen.append(name)
    return chosen


def _input_shape(arg: onnxruntime.NodeArg, dims: dict[str, int]) -> list[int]:
    shape = []
    for d in arg.shape or []:
        if isinstance(d, int) and d >= 0:
            shape.append(d)
        elif isinstance(d, str) and d in dims:
            shape.append(dims[d])
        else:
            shape.append(1)
    return shape


def _symbolic_dims(inputs: Sequence[onnxruntime.NodeArg]) -> str:
    """The model's named input dims, for a --dim that names none of them."""
    named: dict[str, list[str]] = {}
    for arg in inputs:
        for d in arg.shape or []:
            if isinstance(d, str) and arg.name not in named.setdefault(d, []):
                named[d].append(arg.name)
    if not named:
        return "the model's inputs have no symbolic dimensions"
    listed = ", ".join(f"{name} (of {', '.join(args)})" for name, args in named.items())
    return f"the model's symbolic dimensions: {listed}"


def _random_input(arg: onnxruntime.NodeArg, shape: list[int], rng: np.random.Generator) -> np.ndarray:
    import numpy as np

    dtype = _ORT_TYPES.get(arg.type)
    if dtype is None:
        _fail(f"input '{arg.name}' has type {arg.type}, for which no random value is made: pass it with --input")
    if dtype.startswith("float"):
        return rng.random(shape).astype(dtype)
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)  # a 0-d comparison gives a scalar, not an array
    if dtype == "object":
        return np.full(shape, "a", dtype=object)
    return rng.integers(0, 4, shape).astype(dtype)


def _check_given(arg: onnxruntime.NodeArg, value: np.ndarray, source: str) -> str | None:
    """Refuses a given input of another element type than the model's; returns a note where its
    shape differs from the one the model declares. That input is still fed: ONNX Runtime judges
    shapes (it runs a model whose input declares no shape, which it reports as rank 0, on any)."""
    expected = _ORT_TYPES.get(arg.type)
    if expected is not None and expected != "object" and value.dtype.name != expected:
        _fail(f"input '{arg.name}' ({source}) is {value.dtype.name}, but the model wants {expected}")
    if arg.shape is None:
        return None
    declared = f"shape {arg.shape}" if arg.shape else "rank 0 (or no shape)"
    mismatch = len(arg.shape) != value.ndim or any(
        isinstance(want, int) and want >= 0 and want != got for want, got in zip(arg.shape, value.shape)
    )
    if not mismatch:
        return None
    return (
        f"ortops: note: input '{arg.name}' ({source}) has shape {list(value.shape)}, but the model declares "
        f"{declared}; passing it to ONNX Runtime as it is"
    )


def _summary(values: np.ndarray) -> str:
    import numpy as np

    if values.dtype == object or values.size == 0 or values.size > 20:
        return ""
    return " = " + np.array2string(values, max_line_width=10**6).replace("\n", "")


def _profile_summary(path: str, warmup: int) -> list[str]:
    """Time per op type and node from ORT's JSON profile, over the timed runs only."""
    with open(path) as f:
        events = json.load(f)
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"]
    )
    timed = runs[warmup:]
    if not timed:
        return ["profile: ONNX Runtime recorded no runs"]
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in timed]
    by_type: dict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    by_node: dict[tuple[str, str, str], float] = defaultdict(float)
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        if not any(start <= e["ts"] <= end for start, end in windows):
            continue
        args = e.get("args", {})
        op_type = args.get("op_name", "?")
        node = e["name"][: -len("_kernel_time")]
        by_type[op_type] += e["dur"]
        calls[op_type] += 1
        by_node[node, op_type, args.get("provider", "?")] += e["dur"]
    n = len(timed)
    total = sum(by_type.values())
    run_ms = statistics.median(e["dur"] for e in timed) / 1000
    lines = [
        f"profile ({n} runs; ms per run; run median {run_ms:.3f} ms, of which kernels {total / n / 1000:.3f} ms):",
        f"  {'op type':<28} {'nodes':>5} {'ms':>10} {'share':>7}",
    ]
    for op_type, us in sorted(by_type.items(), key=lambda kv: -kv[1]):
        share = 100 * us / total if total else 0.0
        lines.append(f"  {op_type:<28} {calls[op_type] // n:>5} {us / n / 1000:>10.3f} {share:>6.1f}%")
    lines.append("  slowest nodes:")
    for (node, op_type, provider), us in sorted(by_node.items(), key=lambda kv: -kv[1])[:10]:
        lines.append(f"  {node or '(unnamed)':<28} {op_type:<20} {us / n / 1000:>10.3f} ms  {provider}")
    return lines


def _given_inputs(args: argparse.Namespace) -> dict[str, tuple[np.ndarray, str]]:
    """The inputs --input and --inputs give: name -> (value, where it came from)."""
    given = {name: (_read_array(file), file) for name, file in _parse_pairs(args.input, "--input", "FILE.npy").items()}
    if args.inputs:
        for name, value in _read_npz(args.inputs).items():
            if name in given:
                _fail(f"input '{name}' is given both by --input and in {args.inputs}")
            given[name] = (value, f"{args.inputs}[{name}]")
    return given


def _dims(args: argparse.Namespace) -> dict[str, int]:
    """The symbolic dimensions --dim sets."""
    dims: dict[str, int] = {}
    for name, text in _parse_pairs(args.dim, "--dim", "VALUE").items():
        try:
            dims[name] = int(text)
        except ValueError:
            _fail(f"--dim {name}={text}: the value must be an integer")
        if dims[name] < 0:
            _fail(f"--dim {name}={text}: the value must not be negative")
    return dims


def _feeds(
    path: str,
    model_inputs: Sequence[onnxruntime.NodeArg],
    given: dict[str, tuple[np.ndarray, str]],
    dims: dict[str, int],
    seed: int,
) -> list[tuple[onnxruntime.NodeArg, np.ndarray, str]]:
    """Each model input with its value (given, else random) and where the value came from."""
    import numpy as np

    names = [a.name for a in model_inputs]
    for name in given:
        if name not in names:
            _fail(f"{path} has no input named '{name}' (its inputs: {', '.join(names) or 'none'})")
    random_dims = {d for arg in model_inputs if arg.name not in given for d in arg.shape or [] if isinstance(d, str)}
    unknown = sorted(set(dims) - random_dims)
    if unknown:
        _fail(
            f"--dim {unknown[0]}: no random input has a dimension named '{unknown[0]}' ({_symbolic_dims(model_inputs)})"
        )
    rng = np.random.default_rng(seed)
    feeds = []
    for arg in model_inputs:
        if arg.name in given:
            value, source = given[arg.name]
            note = _check_given(arg, value, source)
            if note:
                print(note, file=sys.stderr)
        else:
            value = _random_input(arg, _input_shape(arg, dims), rng)
            source = "random"
        feeds.append((arg, value, source))
    return feeds


def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    import ortops

    path = args.model
    _check_file(path)
    try:
        import onnxruntime
    except ModuleNotFoundError as e:
        if e.name != "onnxruntime":
            raise
        # One line says it: the package's own notice, where importing ortops printed it.
        if not ortops._ONNXRUNTIME_NOTICE_PRINTED:
            print(ortops._NO_ONNXRUNTIME, file=sys.stderr)
        return CANNOT_RUN
    try:
        import onnx  # noqa: F401  (the check reads the model with it)
    except ModuleNotFoundError as e:
        if e.name != "onnx":
            raise
        if args.strict:
            _fail(f"--strict checks the model first, with the onnx package, which is not installed: {_ONNX_EXTRA}")
        print(
            "ortops: note: onnx is not installed, so the model's custom nodes are not checked first "
            f"({_ONNX_EXTRA} adds it)",
            file=sys.stderr,
        )
    else:
        # What check_model finds is reported; ONNX Runtime decides whether the model runs (it
        # runs a misspelled attribute's default, say), unless --strict refuses first.
        report = inspect_report(path)
        if report["problems"] or not report["runnable"]:
            count = len(report["problems"])
            lines = [f"ortops: {path}: ortops.check_model finds {count} problem{'s' * (count != 1)}:"]
            lines += _problem_lines(report["problems"])
            if args.strict:
                print("\n".join([*lines, "ortops: not running it (--strict)"]), file=sys.stderr)
                return CANNOT_RUN
            print("\n".join([*lines, "ortops: running it anyway (--strict refuses such a model)"]), file=sys.stderr)
    if args.runs < 1 or args.warmup < 0:
        _fail("--runs must be at least 1 and --warmup at least 0")
    given = _given_inputs(args)
    dims = _dims(args)
    providers = _providers(args.providers)

    options = ortops.session_options()
    if args.threads is not None:
        options.intra_op_num_threads = args.threads
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="ortops-profile-") as tmp:
        if args.profile:
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(tmp, "profile")
        try:
            session = onnxruntime.InferenceSession(path, options, providers=providers)
        except Exception as e:
            raise CannotRun(f"{path}: ONNX Runtime could not load it: {_first_line(e)}") from e

        inputs = _feeds(path, session.get_inputs(), given, dims, args.seed)
        feeds: dict[str, np.ndarray] = {}
        print("inputs:")
        for arg, value, source in inputs:
            feeds[arg.name] = value
            print(f"  {arg.name}: {value.dtype.name} {list(value.shape)} ({source})")

        times = []
        try:
            for _ in range(args.warmup):
                session.run(None, feeds)
            for _ in range(args.runs):
                start = time.perf_counter()
                outputs = session.run(None, feeds)
                times.append((time.perf_counter() - start) * 1000)
        except Exception as e:
            raise CannotRun(f"{path}: the run failed: {_first_line(e)}") from e

        print("outputs:")
        for arg, value in zip(session.get_outputs(), outputs):
            value = np.asarray(value)
            print(f"  {arg.name}: {value.dtype.name} {list(value.shape)}{_summary(value)}")
        if args.save:
            np.savez(args.save, **{arg.name: np.asarray(v) for arg, v in zip(session.get_outputs(), outputs)})
            print(f"outputs saved to {args.save}")
        threads = "default" if args.threads is None else str(args.threads)
        print(
            f"time: {args.runs} runs after {args.warmup} warm-up, {', '.join(session.get_providers())}, "
            f"intra-op threads {threads}: min {min(times):.3f} ms, median {statistics.median(times):.3f} ms, "
            f"max {max(times):.3f} ms"
        )
        if args.profile:
            profile = session.end_profiling()
            print("\n".join(_profile_summary(profile, args.warmup)))
    return OK


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# --- optimize -----------------------------------------------------------------------------

# How far a rewritten model's float outputs may be from the original's: float rounding, as
# ortops' kernels round differently (GroupNorm computes in float64, say), never a changed result.
_FLOAT_TOLERANCE = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-9}


def _compare_outputs(names: Sequence[str], before: Sequence[Any], after: Sequence[Any]) -> list[str]:
    """One line per output of the rewritten model that differs from the original's."""
    import numpy as np

    problems = []
    for name, a, b in zip(names, before, after):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(
                f"{name}: {b.dtype.name} {list(b.shape)}, the original gives {a.dtype.name} {list(a.shape)}"
            )
            continue
        tolerance = _FLOAT_TOLERANCE.get(a.dtype.name)
        if tolerance is None:
            if not np.array_equal(a, b):
                problems.append(f"{name}: {int(np.sum(a != b))} of {a.size} values differ")
        elif not np.allclose(a, b, rtol=tolerance, atol=tolerance, equal_nan=True):
            worst = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            problems.append(f"{name}: values differ by up to {worst:.3g} (tolerance {tolerance:g})")
    return problems


def _verify(path: str, result: onnx.ModelProto, made: Sequence[str], args: argparse.Namespace) -> None:
    """Runs the original and the rewritten model on the same inputs; CannotRun if they differ,
    unless every rewritten block (``made``: the nodes the rewrites made), run alone on the
    original's own values, gives the original's (then the difference grew downstream from
    float rounding, and it says so)."""
    import onnx
    import onnxruntime

    import ortops
    from ortops._optimize import save, with_float32_grids

    given = _given_inputs(args)
    dims = _dims(args)

    def session(source: str, what: str) -> onnxruntime.InferenceSession:
        options = ortops.session_options()
        options.log_severity_level = 3
        try:
            return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise CannotRun(f"--verify: ONNX Runtime could not load the {what}: {_first_line(e)}") from e

    with tempfile.TemporaryDirectory(prefix="ortops-optimize-") as tmp:
        rewritten = os.path.join(tmp, "optimized.onnx")
        save(result, rewritten, external=False)
        original = "the original's"
        original_path = path
        try:
            original_session = session(path, "original")
        except CannotRun as cannot:
            # HuggingFace's Deformable DETR and Mask2Former files: float64 grids for float32
            # maps, which ONNX Runtime has no GridSample for. Compare with the file as a user
            # runs it, its grids cast by hand, and say so.
            runnable, cast = with_float32_grids(onnx.load(path))
            if not cast:
                raise
            print(f"{cannot}", file=sys.stderr)
            print(
                f"--verify: comparing with the original with its {cast} float64 GridSample grid{'s' * (cast != 1)} "
                "cast to float32, as it runs in ONNX Runtime by hand",
                file=sys.stderr,
            )
            original_path = os.path.join(tmp, "original-float32-grids.onnx")
            save(runnable, original_path, external=False)
            original_session = session(original_path, "original with its grids cast to float32")
            original = "those of the original with its grids cast to float32"
        rewritten_session = session(rewritten, "rewritten model")
        inputs = _feeds(path, original_session.get_inputs(), given, dims, args.seed)
        feeds = {arg.name: value for arg, value, _ in inputs}
        try:
            before = original_session.run(None, feeds)
        except Exception as e:
            raise CannotRun(f"--verify: the original failed to run: {_first_line(e)}") from e
        try:
            after = rewritten_session.run(None, feeds)
        except Exception as e:
            raise CannotRun(f"--verify: the rewritten model failed to run: {_first_line(e)}") from e
        names = [o.name for o in original_session.get_outputs()]
        problems = _compare_outputs(names, before, after)
        sources = ", ".join(sorted({source for _, _, source in inputs})) or "no inputs"
        count = f"{len(names)} output{'s' * (len(names) != 1)}"
        if not problems:
            print(f"verified: {count} equal to {original} within float rounding (inputs: {sources})", file=sys.stderr)
            return
        differ = [f"--verify: the rewritten model's outputs differ from {original}:"] + [f"  {p}" for p in problems]
        checked, block_problems = _verify_blocks(onnx.load(original_path), result, made, feeds, tmp, session)
        if block_problems:
            refusal = (
                "--verify: and so do rewritten blocks, each run alone on the original's values "
                f"(not written to {args.output}):"
            )
            raise CannotRun("\n".join(differ + [refusal] + [f"  {p}" for p in block_problems]))
    print("\n".join(differ), file=sys.stderr)
    print(
        f"verified: each of the {checked} rewritten blocks, run alone on the values the original computes at its "
        f"inputs, gives the original's values within float rounding (inputs: {sources}); the outputs' difference "
        "grows downstream from float rounding, as in a TopK among scores that tie within rounding",
        file=sys.stderr,
    )


def _verify_blocks(
    original: onnx.ModelProto,
    result: onnx.ModelProto,
    made: Sequence[str],
    feeds: dict[str, Any],
    tmp: str,
    session: Callable[[str, str], Any],
) -> tuple[int, list[str]]:
    """How many rewritten blocks were checked alone, and what differs (everything, where one
    cannot be checked alone: a block inside an If or Loop body)."""
    import onnx

    from ortops._optimize import _blocks, save

    blocks = _blocks.find_blocks(original, result, made)
    if not blocks:
        return 0, ["nothing was rewritten: there is no block to check alone"]
    loose = [b for b in blocks if isinstance(b, str)]
    if loose:
        return 0, [f"{name}: cannot be run alone (made inside an If or Loop body)" for name in loose]
    outside = _blocks.differences_outside(original, result, blocks)
    if outside:
        return 0, outside
    wanted = sorted({name for b in blocks for name in (*b.inputs, *b.counterparts)})
    extended = os.path.join(tmp, "original-with-block-values.onnx")
    save(_blocks.with_outputs(original, wanted), extended, external=False)
    values = dict(zip(wanted, session(extended, "original with its blocks' values").run(wanted, feeds)))
    problems: list[str] = []
    for block in blocks:
        types = {name: onnx.helper.np_dtype_to_tensor_dtype(values[name].dtype) for name in block.inputs}
        path = os.path.join(tmp, "block.onnx")
        save(_blocks.block_model(block, result, types), path, external=False)
        got = session(path, f"block {block.made}").run(list(block.outputs), {n: values[n] for n in block.inputs})
        expected = [values[name] for name in block.counterparts]
        problems += [f"{block.made}: {p}" for p in _compare_outputs(list(block.outputs), expected, got)]
    return len(blocks), problems


def _undefined_input(graph: Any, outer: frozenset[str] = frozenset()) -> str | None:
    """The first node input that nothing before it makes (no graph input, initializer, earlier
    node's output or, in a body, value of the graphs around it), said as ONNX Runtime would
    refuse it; None where there is none. onnx's whole checker is stricter than ONNX Runtime
    (a graph output without a shape, say), so only this is asked."""
    known = set(outer) | {v.name for v in graph.input} | {t.name for t in graph.initializer}
    known |= {t.name for t in graph.sparse_initializer}
    for node in graph.node:
        for name in node.input:
            if name and name not in known:
                return (
                    f"node '{node.name or node.op_type}' ({node.op_type}) reads '{name}', which nothing before it makes"
                )
        for attribute in node.attribute:
            for body in [attribute.g, *attribute.graphs] if attribute.HasField("g") else attribute.graphs:
                problem = _undefined_input(body, frozenset(known))
                if problem is not None:
                    return problem
        known.update(node.output)
    return None


def _cmd_optimize(args: argparse.Namespace) -> int:
    try:
        from ortops import _optimize

        _optimize.import_rewriter()
    except ModuleNotFoundError as e:
        _fail(str(e))
    known = _optimize.rules()
    if args.list_rules:
        for rule in known.values():
            print(f"{rule.name}: {rule.summary}")
        return OK
    if args.model is None or args.output is None:
        _fail("optimize needs IN.onnx and OUT.onnx (or --list-rules)")
    chosen = None
    if args.rules is not None:
        chosen = [name.strip() for name in args.rules.split(",") if name.strip()]
        for name in chosen:
            if name not in known:
                _fail(f"--rules: no rule named '{name}' (rules: {', '.join(known)})")
    _check_file(args.model)
    if os.path.abspath(args.model) == os.path.abspath(args.output):
        _fail("OUT.onnx must not be IN.onnx: the original is needed to compare with (and to keep)")
    import onnx

    try:
        external = _optimize.uses_external_data(args.model)
        model = onnx.load(args.model)
    except Exception as e:
        _fail(f"{args.model}: not an ONNX model onnx can read: {_first_line(e)}")
    invalid = _undefined_input(model.graph)
    if invalid is not None:
        # The dynamo exporter writes such files at times: the rewrite goes ahead, but the
        # result is no more valid than the original.
        print(
            f"warning: {args.model} is not a valid model: {invalid}; ONNX Runtime refuses it, and the result too",
            file=sys.stderr,
        )
    result, report = _optimize.optimize_with_report(model, chosen)
    if args.json:
        print(json.dumps({"model": args.model, "output": args.output, **report.to_dict()}, indent=2))
    else:
        print(f"{args.model} -> {args.output}")
        print("\n".join(report.lines()))
    if args.verify:
        _verify(args.model, result, [r.made_name for r in report.rewrites], args)
    _optimize.save(result, args.output, external=external)
    return OK


# --- ops ----------------------------------------------------------------------------------


def _cmd_ops(args: argparse.Namespace) -> int:
    from ortops import ops

    table = ops()
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "domain": op.domain,
                        "name": op.name,
                        "since_version": op.since_version,
                        "execution_providers": list(op.execution_providers),
                        "registered_providers": list(op.registered_providers),
                        "compat": op.compat,
                    }
                    for op in table
                ],
                indent=2,
            )
        )
        return OK
    width = max(len(op.qualified_name) for op in table)
    for op in table:
        compat = "  (compatibility name)" if op.compat else ""
        print(f"{op.qualified_name:<{width}}  since {op.since_version}  {_providers_text(op)}{compat}")
    return OK


# --- entry point --------------------------------------------------------------------------


def _version_text() -> str:
    """``ortops X.Y.Z``, and the library's own version where it differs (ORTOPS_LIBRARY)."""
    from ortops import __version__, get_library_path, library_version

    try:
        library = library_version()
    except KeyError:  # a library built before its manifest carried the version
        return f"ortops {__version__} (library {get_library_path()}: no version in its manifest)"
    except (OSError, ValueError) as e:  # no library or manifest: say so, still print ours
        return f"ortops {__version__} (library: {e})"
    if library == __version__:
        return f"ortops {__version__}"
    return f"ortops {__version__} (library {get_library_path()}: {library})"


class _PrintVersion(argparse.Action):
    """--version: prints the version line unwrapped (argparse's own action wraps it)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The ``ortops`` argument parser."""
    parser = argparse.ArgumentParser(prog="ortops", description="ortops: custom operators for ONNX Runtime.")
    parser.add_argument("--version", action=_PrintVersion, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    inspect = sub.add_parser(
        "inspect",
        help="list a model's custom ops and whether ortops runs them",
        description="Lists the nodes outside ONNX Runtime's own domains, whether ortops implements each "
        "(and on which execution providers), and the problems ortops.check_model finds. "
        "Exit status: 0 the model runs with ortops, 1 it does not, 2 usage error or not an ONNX model.",
    )
    inspect.add_argument("model", metavar="MODEL.onnx")
    inspect.add_argument("--json", action="store_true", help="print a JSON report")
    inspect.set_defaults(func=_cmd_inspect)

    run = sub.add_parser(
        "run",
        help="run a model in ONNX Runtime with ortops registered and time it",
        description="Runs the model on the given inputs (random ones for the others: floats in [0, 1), "
        "integers in [0, 4); symbolic dimensions 1 unless set with --dim) and prints the outputs and timings.",
    )
    run.add_argument("model", metavar="MODEL.onnx")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input from a .npy file")
    run.add_argument("--inputs", metavar="FILE.npz", help="inputs from an .npz file, by input name")
    run.add_argument("--providers", metavar="LIST", help="execution providers, e.g. cpu or cuda,cpu (default cpu)")
    run.add_argument("--threads", type=int, metavar="N", help="intra-op threads (default: ONNX Runtime's)")
    run.add_argument("--runs", type=int, default=10, metavar="N", help="timed runs (default 10)")
    run.add_argument("--warmup", type=int, default=1, metavar="N", help="untimed runs first (default 1)")
    run.add_argument("--profile", action="store_true", help="print ONNX Runtime's time per op type and node")
    run.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the random inputs (default 0)")
    run.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE", help="a symbolic dimension's size")
    run.add_argument("--save", metavar="FILE.npz", help="save the outputs of the last run")
    run.add_argument(
        "--strict",
        action="store_true",
        help="refuse to run a model in which ortops.check_model finds a problem (needs onnx; default: report "
        "the problems and run it anyway)",
    )
    run.set_defaults(func=_cmd_run)

    optimize = sub.add_parser(
        "optimize",
        help="rewrite standard ONNX blocks into ortops' faster nodes, with the same results",
        description="Rewrites the blocks of IN.onnx that a rule proves equivalent (group normalization, "
        "RoiAlign) into ortops nodes, writes OUT.onnx and prints each rewrite and each block left alone "
        'with the reason (needs onnxscript: pip install "ortops[optimize]"). Exit status: 0 written, '
        "1 --verify found a difference or could not run a model (nothing written), 2 usage error.",
    )
    optimize.add_argument("model", metavar="IN.onnx", nargs="?")
    optimize.add_argument("output", metavar="OUT.onnx", nargs="?")
    optimize.add_argument("--rules", metavar="LIST", help="the rules to apply, comma-separated (default: all)")
    optimize.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    optimize.add_argument("--json", action="store_true", help="print the report as JSON")
    optimize.add_argument(
        "--verify",
        action="store_true",
        help="run the original and the result in ONNX Runtime and write nothing if their outputs differ "
        "beyond float rounding (unless each rewritten block, run alone on the original's values, gives the "
        "original's: then the difference grew downstream from rounding, as through a TopK, and it says so)",
    )
    optimize.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="a --verify input")
    optimize.add_argument("--inputs", metavar="FILE.npz", help="--verify inputs from an .npz file, by input name")
    optimize.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the random --verify inputs")
    optimize.add_argument(
        "--dim", action="append", default=[], metavar="NAME=VALUE", help="a symbolic dimension's size"
    )
    optimize.set_defaults(func=_cmd_optimize)

    ops = sub.add_parser("ops", help="list the ops ortops registers")
    ops.add_argument("--json", action="store_true", help="print JSON")
    ops.set_defaults(func=_cmd_ops)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``ortops`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status = args.func(args)
        sys.stdout.flush()  # here, so that a closed pipe is caught below and not at exit
        return status
    except BrokenPipeError:
        # The reader went away (`ortops ops --json | head`): what it read is all it wanted.
        # Python would report the failed flush at exit; point stdout at nothing instead.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except UsageError as e:
        print(f"ortops: {e}", file=sys.stderr)
        return USAGE
    except CannotRun as e:
        print(f"ortops: {e}", file=sys.stderr)
        return CANNOT_RUN
    except FileNotFoundError as e:  # the library or its manifest
        print(f"ortops: {e}", file=sys.stderr)
        return USAGE
