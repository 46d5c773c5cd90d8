"""Eager ops run ortops' own kernels, so that eager and exported results are the same code.

Each call runs a one-node ONNX Runtime session of the op, cached per attributes, element
types, ranks and thread count. Tensors go in and (where the op's output shape is known
beforehand) come out by pointer through an IOBinding: no copies, about 20 us per call.
Input names, accepted element types and attribute types all come from the op manifest.

CUDA tensors run the op's CUDA kernel the same way (:func:`cuda_kernels`: onnxruntime-gpu and
the CUDA build of the library, the ortops-gpu wheel), in a session on the tensors' GPU whose
compute stream is torch's current stream there, so the kernel is ordered with the torch work
around it without waiting for it. Only outputs whose size the kernel decides (NMS's kept
indices) come back through the host.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Optional

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


_ATTRIBUTE_TYPES = {
    "int": onnx.AttributeProto.INT,
    "float": onnx.AttributeProto.FLOAT,
    "string": onnx.AttributeProto.STRING,
    "ints": onnx.AttributeProto.INTS,
    "floats": onnx.AttributeProto.FLOATS,
}


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
    # The manifest's type given explicitly: an empty list has no element to infer it from.
    node.attribute.extend(
        helper.make_attribute(name, _attribute(kinds[name], value), attr_type=_ATTRIBUTE_TYPES[kinds[name]])
        for name, value in attributes
    )
    graph = helper.make_graph([node], f"ortops_{onnx_op}", inputs, outputs)
    opsets = [helper.make_opsetid("", _DEFAULT_OPSET), helper.make_opsetid(_DOMAIN, 1)]
    return helper.make_model(graph, ir_version=_IR_VERSION, opset_imports=opsets).SerializeToString()


# ONNX Runtime races when the first two sessions using a new custom domain are created at
# the same instant; eager ops may be first called from several threads.
_creation_lock = threading.Lock()


@functools.cache
def cuda_kernels() -> bool:
    """Whether CUDA tensors can run ortops' CUDA kernels: ONNX Runtime has its CUDA provider
    (onnxruntime-gpu) and the library has CUDA kernels (its CUDA build)."""
    if "CUDAExecutionProvider" not in ortops.library_providers():
        return False
    if hasattr(ort, "preload_dlls"):  # onnxruntime-gpu finds the CUDA libraries of the nvidia-* packages
        with contextlib.suppress(Exception):
            ort.preload_dlls()
    return "CUDAExecutionProvider" in ort.get_available_providers()


def runs_on_cuda(onnx_op: str) -> bool:
    """Whether ``ortops::<onnx_op>`` has a CUDA kernel that CUDA tensors can run (:func:`cuda_kernels`)."""
    return cuda_kernels() and "CUDAExecutionProvider" in op_info(onnx_op).execution_providers


class NotOnDevice(Exception):
    """The op has no CUDA kernel for these inputs (an element type): run it another way."""


# A session's device: None (the CPU) or (CUDA device index, the torch stream it computes on).
Device = Optional[tuple[int, int]]


@functools.lru_cache(maxsize=128)
def _session(
    onnx_op: str,
    types: tuple[torch.dtype, ...],
    ranks: tuple[int, ...],
    attributes: tuple[tuple[str, Any], ...],
    threads: int,
    device: Device = None,
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
    providers: list[Any] = ["CPUExecutionProvider"]
    if device is not None:
        index, stream = device
        cuda = {"device_id": str(index), "has_user_compute_stream": "1", "user_compute_stream": str(stream)}
        providers = [("CUDAExecutionProvider", cuda)]
        # The node must run on the GPU: a node ONNX Runtime would place on the CPU (an element
        # type without a CUDA kernel) fails here, and the caller takes the CPU kernel instead.
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with _creation_lock:
        return ort.InferenceSession(_model(onnx_op, types, ranks, attributes), options, providers=providers)


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
    """Runs the kernel of ``ortops::<onnx_op>`` on tensors where they live (CPU; CUDA where
    :func:`runs_on_cuda`) and returns its outputs there.

    Args:
        onnx_op: the op's name in the ortops domain.
        inputs: its inputs in order (made contiguous here), on one device; dtypes already checked.
        attributes: node attributes by name, converted to the manifest's attribute types.
        output_shapes: per output, its shape when known before the run (the output is then
            written in place into a new tensor) or None (the kernel decides, e.g. NMS's K);
            None for the whole list: every output is sized by the kernel.

    Raises:
        ValueError: with the kernel's message ("ortops.Op: ...") for inputs or attributes it
            rejects.
        NotOnDevice: for CUDA inputs the CUDA kernels do not take (see runs_on_cuda).
    """
    info = op_info(onnx_op)
    inputs = [t.contiguous() for t in inputs]
    names = _input_names(info, len(inputs))
    specs = info.node_inputs(len(inputs))
    place = inputs[0].device
    device: Device = None
    if place.type == "cuda":
        index = place.index if place.index is not None else torch.cuda.current_device()
        device = (index, torch.cuda.current_stream(index).cuda_stream)
    try:
        session = _session(
            onnx_op,
            tuple(t.dtype for t in inputs),
            tuple(t.dim() for t in inputs),
            tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attributes.items())),
            torch.get_num_threads(),
            device,
        )
    except Exception as error:
        if device is not None and "fallback to CPU EP has been explicitly disabled" in str(error):
            raise NotOnDevice(f"ortops::{onnx_op} has no CUDA kernel for these inputs") from None
        with _kernel_errors():
            raise
    if device is not None:
        return _run_bound(session, info, names, specs, inputs, output_shapes or [None] * len(info.outputs))
    if output_shapes is None:
        # Outputs the kernel sizes (the NMS family's indices) are small: a plain run over
        # zero-copy numpy views of the inputs costs less than binding them.
        feeds = {name: t.detach().numpy() for name, t in zip(names, inputs)}
        with _kernel_errors():
            produced_arrays = session.run(None, feeds)
        return [_from_numpy(array) for array in produced_arrays]
    return _run_bound(session, info, names, specs, inputs, output_shapes)


def _run_bound(
    session: ort.InferenceSession,
    info: ortops.OpInfo,
    names: list[str],
    specs: Sequence[ortops.InputInfo],
    inputs: list[torch.Tensor],
    output_shapes: Sequence[Shape | None],
) -> list[torch.Tensor]:
    """A run with the inputs, and the outputs of known shape, bound where they live (CPU or
    CUDA memory); an output the kernel sizes comes back through the host."""
    place = inputs[0].device
    kind, index = ("cuda", place.index or 0) if place.type == "cuda" else ("cpu", 0)
    binding = session.io_binding()
    for name, tensor in zip(names, inputs):
        binding.bind_input(name, kind, index, _NUMPY_TYPES[tensor.dtype], list(tensor.shape), tensor.data_ptr())
    shared = next((t.dtype for spec, t in zip(specs, inputs) if len(spec.types) > 1), None)
    results: list[torch.Tensor | None] = []
    for spec, shape in zip(info.outputs, output_shapes):
        if shape is None or 0 in tuple(shape):  # an empty tensor has no address to bind
            binding.bind_output(spec.name, kind, index)
            results.append(None)
            continue
        dtype = shared if len(spec.types) > 1 else TORCH_TYPES[spec.types[0]]
        out = torch.empty(tuple(shape), dtype=dtype, device=place)
        binding.bind_output(spec.name, kind, index, _NUMPY_TYPES[dtype], list(out.shape), out.data_ptr())
        results.append(out)
    with _kernel_errors():
        session.run_with_iobinding(binding)
    produced = binding.get_outputs()
    return [r if r is not None else _to_torch(produced[i]).to(place) for i, r in enumerate(results)]


def _to_torch(value: ort.OrtValue) -> torch.Tensor:
    return _from_numpy(value.numpy())


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array) if array.size else torch.empty(array.shape, dtype=TORCH_TYPES[str(array.dtype)])
