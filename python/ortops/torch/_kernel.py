"""Eager CPU ops run ortops' own kernels, so that eager and exported results are the same code.

Each call runs a one-node ONNX Runtime session of the op, cached per attributes, element
types, ranks and thread count. Tensors go in and (where the op's output shape is known
beforehand) come out by pointer through an IOBinding: no copies, about 20 us per call.
Input names, accepted element types and attribute types all come from the op manifest.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper

import ortops

_DOMAIN = "ortops"
_IR_VERSION = 8  # read by every supported runtime
_DEFAULT_OPSET = 17

# Every element type an ortops kernel takes; which op takes which comes from the manifest.
TORCH_TYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "int64": torch.int64}
_TYPE_NAMES = {dtype: name for name, dtype in TORCH_TYPES.items()}
_NUMPY_TYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.int64: np.int64}
_ONNX_TYPES = {
    torch.float32: TensorProto.FLOAT,
    torch.float64: TensorProto.DOUBLE,
    torch.float16: TensorProto.FLOAT16,
    torch.int64: TensorProto.INT64,
}

Shape = Sequence[int]


@functools.cache
def op_info(onnx_op: str) -> ortops.OpInfo:
    """The manifest entry of ``ortops::<onnx_op>``."""
    for op in ortops.ops():
        if op.domain == _DOMAIN and op.name == onnx_op:
            return op
    raise KeyError(f"ortops::{onnx_op} is not in the op manifest")


def dtype_name(dtype: torch.dtype) -> str:
    """The manifest's name of a torch dtype ("float32"), or torch's for the others."""
    return _TYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def _attribute(kind: str, value: Any) -> Any:
    """A Python value as the attribute type the manifest names (so helper stores that type)."""
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "ints":
        return [int(v) for v in value]
    if kind == "floats":
        return [float(v) for v in value]
    return str(value)


def _input_names(info: ortops.OpInfo, count: int) -> list[str]:
    """The session's input names: the specs' names, numbered for the values of a variadic one."""
    specs = info.node_inputs(count)
    variadic = len(info.inputs) - 1 if info.inputs and info.inputs[-1].variadic else len(specs)
    return [spec.name if i < variadic else f"{spec.name}_{i - variadic}" for i, spec in enumerate(specs)]


def _model(
    onnx_op: str, types: tuple[torch.dtype, ...], ranks: tuple[int, ...], attributes: tuple[tuple[str, Any], ...]
) -> bytes:
    info = op_info(onnx_op)
    names = _input_names(info, len(types))
    inputs = [
        helper.make_tensor_value_info(name, _ONNX_TYPES[dtype], [None] * rank)
        for name, dtype, rank in zip(names, types, ranks)
    ]
    outputs = [helper.make_value_info(spec.name, onnx.TypeProto()) for spec in info.outputs]
    node = helper.make_node(onnx_op, names, [spec.name for spec in info.outputs], domain=_DOMAIN)
    kinds = {a.name: a.type for a in info.attributes}
    node.attribute.extend(helper.make_attribute(name, _attribute(kinds[name], value)) for name, value in attributes)
    graph = helper.make_graph([node], f"ortops_{onnx_op}", inputs, outputs)
    opsets = [helper.make_opsetid("", _DEFAULT_OPSET), helper.make_opsetid(_DOMAIN, 1)]
    return helper.make_model(graph, ir_version=_IR_VERSION, opset_imports=opsets).SerializeToString()


# ONNX Runtime races when the first two sessions using a new custom domain are created at
# the same instant; eager ops may be first called from several threads.
_creation_lock = threading.Lock()


@functools.lru_cache(maxsize=128)
def _session(
    onnx_op: str,
    types: tuple[torch.dtype, ...],
    ranks: tuple[int, ...],
    attributes: tuple[tuple[str, Any], ...],
    threads: int,
) -> ort.InferenceSession:
    options = ortops.session_options()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Eager calls come one at a time between torch ops: idle pool threads must not spin.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # Many cached sessions each with an arena would keep their peak scratch forever.
    options.enable_cpu_mem_arena = False
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4  # errors come back as exceptions; do not also print them
    with _creation_lock:
        return ort.InferenceSession(
            _model(onnx_op, types, ranks, attributes), options, providers=["CPUExecutionProvider"]
        )


@contextlib.contextmanager
def _kernel_errors() -> Iterator[None]:
    """Turns an ONNX Runtime error into ValueError with the kernel's own "ortops.Op: ..." text:
    a run's ("... Status Message: ortops.Op: ...") or, for an attribute the kernel refuses,
    the session creation's ("... Exception during initialization: ortops.Op: ...")."""
    try:
        yield
    except Exception as error:  # onnxruntime raises RuntimeError or its own Fail/InvalidArgument
        text = str(error)
        for marker in ("Status Message: ", "Exception during initialization: "):
            if marker in text:
                text = text[text.index(marker) + len(marker) :].strip()
                break
        raise ValueError(text) from None


def run(
    onnx_op: str,
    inputs: Sequence[torch.Tensor],
    attributes: dict[str, Any],
    output_shapes: Sequence[Shape | None] | None = None,
) -> list[torch.Tensor]:
    """Runs the kernel of ``ortops::<onnx_op>`` on CPU tensors and returns its outputs.

    Args:
        onnx_op: the op's name in the ortops domain.
        inputs: its inputs in order (made contiguous here); dtypes already checked.
        attributes: node attributes by name, converted to the manifest's attribute types.
        output_shapes: per output, its shape when known before the run (the output is then
            written in place into a new tensor) or None (the kernel decides, e.g. NMS's K);
            None for the whole list: every output is sized by the kernel.

    Raises:
        ValueError: with the kernel's message ("ortops.Op: ...") for inputs or attributes it
            rejects.
    """
    info = op_info(onnx_op)
    inputs = [t.contiguous() for t in inputs]
    names = _input_names(info, len(inputs))
    specs = info.node_inputs(len(inputs))
    with _kernel_errors():
        session = _session(
            onnx_op,
            tuple(t.dtype for t in inputs),
            tuple(t.dim() for t in inputs),
            tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attributes.items())),
            torch.get_num_threads(),
        )
    if output_shapes is None:
        # Outputs the kernel sizes (the NMS family's indices) are small: a plain run over
        # zero-copy numpy views of the inputs costs less than binding them.
        feeds = {name: t.detach().numpy() for name, t in zip(names, inputs)}
        with _kernel_errors():
            produced_arrays = session.run(None, feeds)
        return [_from_numpy(array) for array in produced_arrays]
    binding = session.io_binding()
    for name, tensor in zip(names, inputs):
        binding.bind_input(name, "cpu", 0, _NUMPY_TYPES[tensor.dtype], list(tensor.shape), tensor.data_ptr())
    shared = next((t.dtype for spec, t in zip(specs, inputs) if len(spec.types) > 1), None)
    results: list[torch.Tensor | None] = []
    for spec, shape in zip(info.outputs, output_shapes):
        if shape is None or 0 in tuple(shape):  # an empty tensor has no address to bind
            binding.bind_output(spec.name, "cpu")
            results.append(None)
            continue
        dtype = shared if len(spec.types) > 1 else TORCH_TYPES[spec.types[0]]
        out = torch.empty(tuple(shape), dtype=dtype)
        binding.bind_output(spec.name, "cpu", 0, _NUMPY_TYPES[dtype], list(out.shape), out.data_ptr())
        results.append(out)
    with _kernel_errors():
        session.run_with_iobinding(binding)
    produced = binding.get_outputs()
    return [r if r is not None else _to_torch(produced[i]) for i, r in enumerate(results)]


def _to_torch(value: ort.OrtValue) -> torch.Tensor:
    return _from_numpy(value.numpy())


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array) if array.size else torch.empty(array.shape, dtype=TORCH_TYPES[str(array.dtype)])
