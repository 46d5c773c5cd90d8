"""One declaration per torch op, from which everything else about the op follows.

An op file declares its op once, as an :class:`Op`: the torch op's arguments in order (each
tensor a node input, each other argument a node attribute, with its Python type and its
documentation), the ``ortops`` node it exports to, its argument checks and its torch
reference (the math for other devices and for gradients). Together with the op's entry in
the manifest (the C++ op table: the node's inputs, element types and documented shapes),
that gives:

- the ``torch.library.custom_op`` ``torch.ops.ortops.<name>`` (its schema from the arguments),
- the element-type checks (the manifest's types), on eager calls and at export,
- how the op runs eagerly (:meth:`Op._run`: the one place that decides),
- its fake implementation for ``torch.export``: output shapes and dtypes from the manifest,
- its autograd (the reference's) or a clear "no gradient" error,
- both exporters' rules: the TorchScript symbolic and the onnxscript translation,
- with :meth:`Op.public` on the public function: the check of its arguments' Python types
  (its annotations) and the "Args:" section of its docstring.

Every error an op raises starts with ``ortops.<name>:``. Checks raise :class:`BadArgument`
with the bare reason; the op adds the prefix, and rewrites the kernel's own prefix
(``ortops.<OnnxOp>:``) to it.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import textwrap
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
import onnxscript
import torch
from torch.onnx import symbolic_helper

import ortops
from ortops._schemas import _dims, _is_variadic, bind_symbols, shape_rule
from ortops.torch import _kernel as kernel
from ortops.torch._autograd import register_no_gradient, register_reference_autograd

#: The custom domain and opset version that exported nodes use.
DOMAIN = "ortops"
OPSET_VERSION = 1

# onnxscript resolves ops through onnx.defs, so the ortops schemas must be known first.
ortops.register_onnx_schemas()

#: onnxscript opset for the ``torch.export``-based exporter's translation functions.
onnx_opset = onnxscript.values.Opset(DOMAIN, OPSET_VERSION)

# The TorchScript exporter applies a registered symbolic from this ONNX opset on.
_MIN_DEFAULT_OPSET = 11

Tensors = list[torch.Tensor]  # a variadic input: one tensor per node input

# Per argument type: the torch schema's type, TorchScript's parse_args descriptor, and (for
# attributes) the manifest's attribute type and the suffix of g.op's keyword.
_SCHEMA_TYPES: dict[Any, str] = {
    torch.Tensor: "Tensor",
    Tensors: "Tensor[]",
    int: "SymInt",
    float: "float",
    str: "str",
    bool: "bool",
    list[int]: "SymInt[]",
    list[float]: "float[]",
}
_PARSE_ARGS = {torch.Tensor: "v", Tensors: "v", int: "i", float: "f", str: "s", bool: "b", list[int]: "is"}
_PARSE_ARGS[list[float]] = "fs"
_MANIFEST_TYPES = {int: "int", bool: "int", float: "float", str: "string", list[int]: "ints", list[float]: "floats"}
_G_OP_SUFFIXES = {"int": "i", "float": "f", "string": "s", "ints": "i", "floats": "f"}


class BadArgument(ValueError):
    """An argument an op refuses; the op names itself before the message (``ortops.<name>: ...``)."""


@dataclass(frozen=True)
class Arg:
    """One argument of a torch op.

    ``type`` is ``torch.Tensor`` (a node input), :data:`Tensors` (a variadic node input) or an
    attribute's Python type (``int``, ``float``, ``str``, ``bool``, ``list[int]``,
    ``list[float]``). ``doc`` describes it in the public function's docstring (empty for an
    argument the public function does not take); ``onnx`` is the node's name for it when that
    differs.
    """

    name: str
    type: Any
    doc: str = ""
    onnx: str = ""

    @property
    def node_name(self) -> str:
        return self.onnx or self.name

    @property
    def is_input(self) -> bool:
        return self.type is torch.Tensor or self.type == Tensors


@dataclass(frozen=True)
class ExportedOp:
    """A torch op of ortops and the ONNX node it exports to."""

    torch_op: torch._ops.OpOverload
    onnx_op: str  # name in the ortops domain
    function: Callable[..., Any]  # the public wrapper users call
    translation: Callable[..., Any]


_exported: dict[str, ExportedOp] = {}
_declared: dict[str, Op] = {}


def exported_ops() -> tuple[ExportedOp, ...]:
    """Every registered torch op with its ONNX op, in registration order."""
    return tuple(_exported.values())


def declared_ops() -> tuple[Op, ...]:
    """Every op declaration, in declaration order."""
    return tuple(_declared.values())


def custom_translation_table() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """The ``custom_translation_table`` for ``torch.onnx.export(..., dynamo=True)``."""
    return {e.torch_op: e.translation for e in _exported.values()}


def typed(value: Any, like: Any, *, sizes: list[int | None] | None = None, dtype: torch.dtype | None = None) -> Any:
    """Gives a custom node's output in a TorchScript export graph the type of ``like``.

    With ``sizes`` and ``dtype`` the shape and element type are replaced. Without a type the
    exporter warns that shape inference is missing and cannot propagate shapes past the node.
    """
    node_type = like.type()
    if dtype is not None:
        node_type = node_type.with_dtype(dtype)
    if sizes is not None:
        node_type = node_type.with_sizes(sizes)
    value.setType(node_type)
    return value


class Op:
    """The declaration of ``torch.ops.ortops.<name>``, exported to ``ortops::<onnx_op>``.

    Args:
        name: the torch op's name, also the public function's.
        onnx_op: the node's name in the ``ortops`` domain (its manifest entry).
        args: the torch op's arguments in order; every input and attribute of the node
            is one of them.
        check: checks of the arguments (``BadArgument`` with the reason), run on every
            eager call, before the kernel or the reference; it takes the arguments it looks
            at, by name.
        check_at_export: also run ``check`` at export, on fake tensors (it must then read no
            tensor values).
        reference: the op in differentiable torch ops, with the op's arguments: it runs
            tensors on devices other than the CPU, and its autograd is the op's gradient.
            Without one (the NMS family: sequential selections) the CPU kernel runs every
            device's tensors, through copies, and the op has no gradient.
        differentiable: positions of the arguments that get a gradient.
        public_args: docs of the public function's arguments that the torch op does not take
            (``output_size``, which becomes ``output_height`` and ``output_width``).
        documented_layout: where an attribute selects another input layout than the manifest
            documents, maps the node inputs' shapes (and the node's attributes) to the
            documented layout, so that export binds the output's dims from them.
    """

    def __init__(
        self,
        name: str,
        onnx_op: str,
        args: Sequence[Arg],
        *,
        check: Callable[..., None] | None = None,
        check_at_export: bool = False,
        reference: Callable[..., Any] | None = None,
        differentiable: Sequence[int] = (),
        public_args: dict[str, str] | None = None,
        documented_layout: Callable[[list[Any], dict[str, Any]], list[Any]] | None = None,
    ) -> None:
        self.name = name
        self.onnx_op = onnx_op
        self.args = tuple(args)
        self.info = kernel.op_info(onnx_op)
        self.check = check
        self._check_args = list(inspect.signature(check).parameters) if check is not None else []
        self.check_at_export = check_at_export
        self.reference = reference
        self.public_args = dict(public_args or {})
        self.documented_layout = documented_layout
        self.function: Callable[..., Any] | None = None
        self._by_node_name = {a.node_name: a for a in self.args}
        self._positions = {a.name: i for i, a in enumerate(self.args)}
        unknown = [name for name in self._check_args if name not in self._positions]
        if unknown:
            raise TypeError(f"ortops.torch.{name}: its check takes {unknown}, which the op does not")
        # The node input whose element type the outputs of several types take (there is one
        # type parameter per op; inputs that accept several types must share one).
        self._type_input = next((i for i, spec in enumerate(self.info.inputs) if len(spec.types) > 1), 0)
        # Worked out once, for the eager calls: per node input, (its argument's position and
        # name, variadic?); per attribute, (position, node name, a bool?); the manifest's shapes.
        self._inputs = [
            (self._positions[arg.name], arg.name, arg.type == Tensors)
            for arg in (self._by_node_name[spec.name] for spec in self.info.inputs)
        ]
        self._attribute_args = [(i, a.node_name, a.type is bool) for i, a in enumerate(self.args) if not a.is_input]
        self._int_attributes = tuple(a.node_name for a in self.args if a.type in (int, bool))
        self._documented = {spec.name: _dims(spec.doc) for spec in self.info.inputs}
        self._rules = [_compiled(shape_rule(self.info, i)) for i in range(len(self.info.outputs))]
        # Eager calls repeat their shapes: their output shapes are remembered.
        self._eager_shapes = functools.lru_cache(maxsize=64)(self._known_output_shapes)

        returns = ", ".join("Tensor" for _ in self.info.outputs)
        parameters = ", ".join(f"{_SCHEMA_TYPES[a.type]} {a.name}" for a in self.args)
        schema = f"({parameters}) -> {returns if len(self.info.outputs) == 1 else f'({returns})'}"
        self.custom_op = torch.library.custom_op(f"{DOMAIN}::{name}", self._eager, mutates_args=(), schema=schema)
        self.custom_op.register_fake(self._fake)
        if reference is None:
            register_no_gradient(self.custom_op, name)
        else:
            register_reference_autograd(self.custom_op, reference, differentiable)
        self._packet = getattr(torch.ops.ortops, name)  # calling it is faster than calling .default
        self.torch_op: torch._ops.OpOverload = self._packet.default
        self.symbolic = self._make_symbolic()
        self.translation = self._make_translation()
        torch.onnx.register_custom_op_symbolic(f"{DOMAIN}::{name}", self.symbolic, _MIN_DEFAULT_OPSET)
        _declared[name] = self

    def __call__(self, *args: Any) -> Any:
        """Calls ``torch.ops.ortops.<name>`` with the torch op's arguments."""
        return self._packet(*args)

    # ---- errors ------------------------------------------------------------------------------

    def _refusal(self, error: BadArgument) -> ValueError:
        """A :class:`BadArgument` raised inside the op, under the op's prefix ``ortops.<name>:``."""
        return ValueError(f"ortops.{self.name}: {error}")

    def _kernel_message(self, text: str) -> str:
        """The kernel's message ("ortops.<OnnxOp>: ...") under the op's prefix."""
        return f"ortops.{self.name}: {text.removeprefix(f'ortops.{self.onnx_op}: ')}"

    # ---- the node's view of the arguments --------------------------------------------------------

    def _node_inputs(self, args: Sequence[Any]) -> list[tuple[str, Any]]:
        """(argument name, value) per node input, in the node's order (a variadic one expanded)."""
        pairs = []
        for position, name, variadic in self._inputs:
            if variadic:
                pairs += [(f"{name}[{i}]", v) for i, v in enumerate(args[position])]
            else:
                pairs.append((name, args[position]))
        return pairs

    def _attributes(self, args: Sequence[Any]) -> dict[str, Any]:
        """The node's attributes by name, bools as ints."""
        return {name: int(args[i]) if is_bool else args[i] for i, name, is_bool in self._attribute_args}

    def check_dtypes(self, args: Sequence[Any]) -> None:
        """Raises unless the kernels of the node take these element types (the manifest's).

        Inputs that accept several element types must share one. Run on eager calls and at
        export, so that a model with a dtype the op's kernels lack (float16 for the NMS family)
        fails at export with the op and the dtype named, instead of exporting a file that ONNX
        Runtime will not load.
        """
        inputs = self._node_inputs(args)
        shared: torch.dtype | None = None
        for spec, (name, tensor) in zip(self.info.node_inputs(len(inputs)), inputs):
            dtype = kernel.dtype_name(tensor.dtype)
            if dtype not in spec.types:
                raise BadArgument(
                    f"{name} is {dtype}, but {self.info.qualified_name} takes {' or '.join(spec.types)}; "
                    "cast it before the op"
                )
            if len(spec.types) > 1:
                if shared is not None and tensor.dtype != shared:
                    raise BadArgument(
                        f"{name} is {dtype}, but the inputs before it are {kernel.dtype_name(shared)}; "
                        "they must share one dtype"
                    )
                shared = tensor.dtype

    def output_shapes(
        self, input_shapes: Sequence[Sequence[Any] | None], attributes: dict[str, Any], unknown: Callable[[str], Any]
    ) -> list[list[Any] | None]:
        """Each output's shape by the manifest's documented shapes (``_schemas.shape_rule``).

        ``input_shapes`` are the node inputs' sizes (None: rank unknown; a None dim: unknown),
        ``attributes`` the node's (:meth:`_attributes`). A symbol that no input binds (NMS's K)
        is ``unknown(symbol)``; an output whose rank does not follow (an input of another rank
        than documented) is None.
        """
        documented = [self._documented[spec.name] for spec in self.info.node_inputs(len(input_shapes))]
        symbols = bind_symbols(documented, input_shapes, _is_known)
        int_attributes = {k: v for k, v in attributes.items() if k in self._int_attributes}
        shapes: list[list[Any] | None] = []
        for rule in self._rules:
            if rule is None:  # same shape as the first input
                shapes.append(list(input_shapes[0]) if input_shapes[0] is not None else None)
                continue
            dims: list[Any] | None = []
            for name, factors in rule:
                if _is_variadic(name):  # a run of dims: "..." or a named one, "A..."
                    if name not in symbols:
                        dims = None
                        break
                    dims += symbols[name]
                    continue
                value: Any = 1
                for factor in factors:
                    known = factor if isinstance(factor, int) else int_attributes.get(factor, symbols.get(factor))
                    value = None if known is None or value is None else value * known
                dims.append(value if value is not None else unknown(name))
            shapes.append(dims)
        return shapes

    def _known_output_shapes(
        self, input_shapes: tuple[torch.Size, ...], int_attributes: tuple[int, ...]
    ) -> list[list[int] | None]:
        """The output shapes known before an eager run; None for one the kernel sizes (NMS's K)."""
        shapes = self.output_shapes(input_shapes, dict(zip(self._int_attributes, int_attributes)), _no_size)
        return [s if s is not None and None not in s else None for s in shapes]

    def _output_dtype(self, index: int, shared: torch.dtype | None) -> torch.dtype | None:
        types = self.info.outputs[index].types
        return shared if len(types) > 1 else kernel.TORCH_TYPES[types[0]]

    # ---- eager and fake ----------------------------------------------------------------------

    def _check(self, args: Sequence[Any]) -> None:
        if self.check is not None:
            self.check(*(args[self._positions[name]] for name in self._check_args))

    def _eager(self, *args: Any) -> Any:
        try:
            self.check_dtypes(args)
            self._check(args)
            return self._run(args)
        except BadArgument as error:
            raise self._refusal(error) from None

    def _run(self, args: Sequence[Any]) -> Any:
        """How the op runs eagerly, the one place that decides for every op: ortops' kernel
        for CPU tensors; for CUDA tensors its CUDA kernel in their memory, where
        onnxruntime-gpu and the CUDA build of the library are installed (kernel.runs_on_cuda);
        else the torch reference, or (ops without one) the CPU kernel through copies.
        """
        inputs = [t for _, t in self._node_inputs(args)]
        device = inputs[0].device
        attributes = self._attributes(args)
        if device.type == "cuda" and kernel.runs_on_cuda(self.onnx_op):
            try:
                return self._kernel(inputs, attributes)
            except kernel.NotOnDevice:
                pass  # an element type without a CUDA kernel: as without one, below
        if device.type != "cpu" and self.reference is not None:
            return self.reference(*args)
        if device.type != "cpu":
            outputs = self._kernel([t.cpu() for t in inputs], attributes)
            return outputs.to(device) if isinstance(outputs, torch.Tensor) else tuple(o.to(device) for o in outputs)
        return self._kernel(inputs, attributes)

    def _kernel(self, inputs: list[torch.Tensor], attributes: dict[str, Any]) -> Any:
        """ortops' kernel on `inputs`, where they live."""
        sizes = tuple(attributes[name] for name in self._int_attributes)
        known = self._eager_shapes(tuple(t.shape for t in inputs), sizes)
        try:
            # Outputs of unknown shape (NMS's K) are sized by the kernel.
            outputs = kernel.run(self.onnx_op, inputs, attributes, known if any(s is not None for s in known) else None)
        except ValueError as error:
            raise ValueError(self._kernel_message(str(error))) from None
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _fake(self, *args: Any) -> Any:
        try:
            return self._fake_outputs(args)
        except BadArgument as error:
            raise self._refusal(error) from None

    def _fake_outputs(self, args: Sequence[Any]) -> Any:
        """Empty outputs of the shapes and dtypes the op gives (fake tensors, at export)."""
        self.check_dtypes(args)
        if self.check_at_export:
            self._check(args)
        inputs = [t for _, t in self._node_inputs(args)]
        ctx = torch.library.get_ctx()
        sizes: dict[str, Any] = {}

        def unknown(symbol: str) -> Any:
            """A dim no input gives: data-dependent (K), unless an input documents it."""
            factors = {f.strip() for f in symbol.split("*")}
            documented = [name for name, dims in self._documented.items() if factors & set(dims or ())]
            if documented:
                shapes = ", ".join(f"{name} {list(t.shape)}" for name, t in self._node_inputs(args))
                raise BadArgument(
                    f"{symbol} follows from the shape of {' or '.join(documented)}, but the inputs are {shapes}"
                )
            if symbol not in sizes:
                sizes[symbol] = ctx.new_dynamic_size()
            return sizes[symbol]

        attributes = self._attributes(args)
        input_shapes: list[Any] = [t.shape for t in inputs]
        if self.documented_layout is not None:
            input_shapes = self.documented_layout(input_shapes, attributes)
        shapes = self.output_shapes(input_shapes, attributes, unknown)
        if any(s is None for s in shapes):
            raise BadArgument(f"the inputs' shapes {[list(t.shape) for t in inputs]} have the wrong ranks")
        like = inputs[self._type_input]
        outputs = [like.new_empty(shape, dtype=self._output_dtype(i, like.dtype)) for i, shape in enumerate(shapes)]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    # ---- exporters ---------------------------------------------------------------------------

    def _make_symbolic(self) -> Callable[..., Any]:
        """The TorchScript exporter's rule (``dynamo=False``); its parse_args passes Python
        values through as they are, so torchvision's rules call it with their own."""
        kinds = {a.name: a.type for a in self.info.attributes}

        def symbolic(g: Any, *args: Any) -> Any:
            values = []
            for spec in self.info.inputs:
                arg = self._by_node_name[spec.name]
                value = args[self._positions[arg.name]]
                values += symbolic_helper._unpack_list(value) if arg.type == Tensors else [value]
            attributes = {f"{k}_{_G_OP_SUFFIXES[kinds[k]]}": v for k, v in self._attributes(args).items()}
            count = len(self.info.outputs)
            outputs = g.op(f"{DOMAIN}::{self.onnx_op}", *values, **attributes, outputs=count)
            outputs = outputs if count > 1 else (outputs,)
            sizes = [symbolic_helper._get_tensor_sizes(v) for v in values]
            node_attributes = self._attributes(args)
            if self.documented_layout is not None:
                sizes = self.documented_layout(sizes, node_attributes)
            shapes = self.output_shapes(sizes, node_attributes, _no_size)
            like = values[self._type_input]
            shared = like.type().dtype() if like.type().scalarType() is not None else None
            results = [
                typed(out, like, sizes=shape, dtype=self._output_dtype(i, shared))
                for i, (out, shape) in enumerate(zip(outputs, shapes))
            ]
            return results[0] if count == 1 else tuple(results)

        parameters = [inspect.Parameter("g", inspect.Parameter.POSITIONAL_ONLY)]
        parameters += [inspect.Parameter(a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in self.args]
        symbolic.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        symbolic.__name__ = symbolic.__qualname__ = f"{self.name}_symbolic"
        return symbolic_helper.parse_args(*(_PARSE_ARGS[a.type] for a in self.args))(symbolic)

    def _make_translation(self) -> Callable[..., Any]:
        """The onnxscript translation (``dynamo=True``). torch's exporter reads its signature:
        annotated parameters are attributes, the others inputs."""
        node = getattr(onnx_opset, self.onnx_op)

        def translation(*args: Any) -> Any:
            # Inputs by name: torch's exporter (2.15) binds every positional argument to a
            # variadic input, the ones before it included.
            inputs = {a.node_name: list(v) if a.type == Tensors else v for a, v in zip(self.args, args) if a.is_input}
            attributes = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in self._attributes(args).items()}
            return node(**inputs, **attributes)

        parameters = [inspect.Parameter(a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in self.args]
        translation.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        translation.__annotations__ = {a.name: a.type for a in self.args if not a.is_input}
        translation.__name__ = translation.__qualname__ = f"{self.name}_translation"
        return translation

    # ---- the public function -------------------------------------------------------------------

    def public(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorates the op's public function: refuses arguments of other Python types than its
        annotations say, writes the "Args:" section of its docstring from the declaration, and
        registers the op for export with it."""
        signature = inspect.signature(function)
        accepts = {name: _accepts(_annotation(p.annotation, function)) for name, p in signature.parameters.items()}
        names = list(signature.parameters)
        tests = [(name, *accepts[name]) for name in names]  # by position

        def refuse(name: str, value: Any) -> BadArgument:
            return BadArgument(f"{name} must be {accepts[name][1]}, got {_describe(value)}")

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                for (name, test, _), value in zip(tests, args):
                    if not test(value):
                        raise refuse(name, value)
                for name, value in kwargs.items():
                    if name in accepts and not accepts[name][0](value):
                        raise refuse(name, value)
                return function(*args, **kwargs)
            except BadArgument as error:
                raise self._refusal(error) from None

        docs = {a.name: a.doc for a in self.args if a.doc}
        docs.update(self.public_args)
        missing = [name for name in names if name not in docs]
        if missing:
            raise TypeError(f"ortops.torch.{self.name}: the declaration documents no {missing}")
        checked.__doc__ = _with_args_section(function.__doc__ or "", [(name, docs[name]) for name in names])
        self.function = checked
        _exported[self.onnx_op] = ExportedOp(self.torch_op, self.onnx_op, checked, self.translation)
        return checked


def _compiled(rule: list[str] | None) -> list[tuple[str, list[int | str]]] | None:
    """A shape rule's dims, each with its factors ("H * D": H and D; "4": 4) parsed once."""
    if rule is None:
        return None
    return [(name, [int(f) if f.isdigit() else f for f in (f.strip() for f in name.split("*"))]) for name in rule]


def _is_known(dim: Any) -> bool:
    return dim is not None


def _no_size(symbol: str) -> None:
    """Eager calls and TorchScript: a dim no input gives is unknown (the kernel sizes it)."""
    return None


def _with_args_section(doc: str, args: list[tuple[str, str]]) -> str:
    """``doc`` with an "Args:" section (Google style) before its "Returns:" (or at its end)."""
    lines = ["    Args:"]
    for name, text in args:
        lines += textwrap.wrap(f"{name}: {text}", 100, initial_indent=" " * 8, subsequent_indent=" " * 12)
    section = "\n".join(lines) + "\n\n"
    at = doc.find("    Returns:")
    if at < 0:
        return f"{doc.rstrip()}\n\n{section}    "
    return doc[:at] + section + doc[at:]


# ---- Python types of the public functions' arguments -----------------------------------------


def _annotation(annotation: Any, function: Callable[..., Any]) -> Any:
    """An annotation as a type; a string (``from __future__ import annotations``) is evaluated
    in the function's module, each side of a ``|`` alone (Python 3.9 has no ``int | str``)."""
    if not isinstance(annotation, str):
        return annotation
    parts, depth, start = [], 0, 0
    for i, char in enumerate(annotation):
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(annotation[start:i])
            start = i + 1
    parts.append(annotation[start:])
    members = tuple(eval(part.strip(), function.__globals__) for part in parts)
    return members[0] if len(members) == 1 else Union[members]


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Integral) and value in (0, 1))


# Per type: a test of a value, and the type's name in messages (singular and plural).
_SCALARS: dict[Any, tuple[Callable[[Any], bool], str, str]] = {
    torch.Tensor: (lambda v: isinstance(v, torch.Tensor), "a tensor", "tensors"),
    float: (
        lambda v: (
            type(v) in (float, int)
            or (isinstance(v, (numbers.Real, torch.SymFloat, torch.SymInt)) and not isinstance(v, bool))
        ),
        "a float",
        "floats",
    ),
    int: (
        lambda v: type(v) is int or (isinstance(v, (numbers.Integral, torch.SymInt)) and not isinstance(v, bool)),
        "an int",
        "ints",
    ),
    bool: (_is_bool, "a bool", "bools"),
    str: (lambda v: isinstance(v, str), "a string", "strings"),
    type(None): (lambda v: v is None, "None", "None"),
}


def _accepts(annotation: Any) -> tuple[Callable[[Any], bool], str]:
    """(test, description) of the values an annotation allows."""
    if annotation in _SCALARS:
        test, name, _ = _SCALARS[annotation]
        return test, name
    origin, members = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, getattr(types, "UnionType", Union)):
        parts = [_accepts(m) for m in members]
        return (lambda v: any(test(v) for test, _ in parts)), " or ".join(name for _, name in parts)
    if origin is tuple and members and members[0] in _SCALARS and all(m is members[0] for m in members):
        test, _, plural = _SCALARS[members[0]]
        count = len(members)
        return (
            lambda v: isinstance(v, (tuple, list)) and len(v) == count and all(test(x) for x in v)
        ), f"{'a pair' if count == 2 else f'a tuple of {count}'} of {plural}"
    if origin in (list, tuple, Sequence) and members and members[0] in _SCALARS:
        test, _, plural = _SCALARS[members[0]]
        return (lambda v: isinstance(v, (tuple, list)) and all(test(x) for x in v)), f"a sequence of {plural}"
    raise TypeError(f"ortops.torch: no argument check for the annotation {annotation!r}")


def _describe(value: Any) -> str:
    """A value in an error message: its type, and the value itself when short."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"
