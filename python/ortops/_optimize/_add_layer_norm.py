"""An Add read only by a LayerNormalization over the last axis into ``ortops::AddLayerNorm``.

ONNX Runtime fuses such a pair into its own SkipLayerNormalization (com.microsoft), whose CPU
kernel in ONNX Runtime 1.31 takes about five times as long as the two nodes apart (float32
``[1, 5440, 256]``, the encoder of a Deformable DETR at 512x512, 1 thread: 7.6 ms against 1.6 ms
for LayerNormalization and Add, 1.6 ms for ortops::AddLayerNorm, which is also faster than the
fused kernel of ONNX Runtime 1.17: 1.9 ms against 2.4 ms). Post-norm transformers (DETR and its
descendants, BERT) have one per sub-layer.

ortops::AddLayerNorm rounds the sum as Add does and normalizes each row in float64 where ONNX
Runtime computes in float32: the results agree within float rounding. It takes ``B`` broadcast to
``A``'s shape in one direction only; as Add is commutative (exactly so in IEEE arithmetic), either
of its inputs may be ``A``, and the rule proves from the shapes that ONNX's inference gives that
the other broadcasts to it: each of its dims, aligned to the last, is 1, or the same number or
named symbol as ``A``'s. A pre-norm block, whose sum is also read elsewhere (the next residual),
does not match, nor does a LayerNormalization with its Mean or InvStdDev output (the pattern has
one output): their nodes stay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ortops._optimize import ORTOPS_DOMAIN, Rule, accept, attribute, made, one_pattern, opset_version, proven, refuse

if TYPE_CHECKING:
    import onnx_ir as ir

# The element types of ortops::AddLayerNorm.
_FLOAT_TYPES = ("FLOAT", "DOUBLE", "FLOAT16")


def _pattern(op: Any, a: ir.Value, b: ir.Value, scale: ir.Value, bias: ir.Value) -> Any:
    return op.LayerNormalization(op.Add(a, b), scale, bias, _outputs=["y"])


def _same_dim(x: Any, y: Any) -> bool:
    """Whether two dims of ONNX's inference are provably equal: the same number, or the same
    named symbol (an unnamed unknown dim equals nothing)."""
    if isinstance(x, int) or isinstance(y, int):
        return isinstance(x, int) and isinstance(y, int) and x == y
    return x is not None and y is not None and x.value is not None and x.value == y.value


def _broadcasts_to(b: ir.Value, a: ir.Value) -> bool:
    if a.shape is None or b.shape is None or len(b.shape) > len(a.shape):
        return False
    return all(
        (isinstance(b_dim, int) and b_dim == 1) or _same_dim(b_dim, a_dim)
        for b_dim, a_dim in zip(reversed(list(b.shape)), reversed(list(a.shape)))
    )


def _check(context: Any, a: ir.Value, b: ir.Value, scale: ir.Value, bias: ir.Value, y: ir.Value) -> Any:
    node = y.producer()
    version = opset_version(context)
    if version is None or version < 17:
        return refuse(context, node, f"the model imports ONNX opset {version}, without LayerNormalization")
    if a.dtype is None or a.dtype.name not in _FLOAT_TYPES:
        return refuse(context, node, f"element type {a.dtype} (ortops::AddLayerNorm takes float, double, float16)")
    if any(v.dtype != a.dtype for v in (b, scale, bias)):
        return refuse(context, node, "the Add's inputs, scale and bias are not all of one element type")
    if a.shape is None:
        return refuse(context, node, "the rank of the Add's inputs is not known")
    rank = len(a.shape)
    axis = int(attribute(node, "axis", -1))
    if axis not in (-1, rank - 1):
        return refuse(
            context, node, f"axis {axis} of a rank-{rank} input: ortops::AddLayerNorm normalizes the last axis"
        )
    channels = a.shape[rank - 1] if rank else None
    if not isinstance(channels, int):
        return refuse(context, node, "the last dim of the Add's input is not known")
    for name, value in (("scale", scale), ("bias", bias)):
        if value.shape is None or list(value.shape) != [channels]:
            return refuse(context, node, f"its {name} does not have shape [{channels}] (the last dim)")
    if not _broadcasts_to(b, a):
        return refuse(
            context,
            node,
            f"the Add's inputs {a.shape} and {b.shape}: the second is not proven to broadcast to the first's "
            "shape (ONNX's inference does not prove their dims equal or 1)",
        )
    return accept(context, epsilon=float(attribute(node, "epsilon", 1e-5)))


def _rewrite(op: Any, a: ir.Value, b: ir.Value, scale: ir.Value, bias: ir.Value, **_: Any) -> ir.Value:
    return made(op.AddLayerNorm(a, b, scale, bias, epsilon=proven()["epsilon"], _domain=ORTOPS_DOMAIN))


RULE = Rule(
    name="add-layer-norm",
    summary="an Add read only by a LayerNormalization over the last axis into ortops::AddLayerNorm",
    handles=(
        "Add -> LayerNormalization (opset 17 on) over the last axis, with scale and bias of shape [C], float, "
        "double or float16, where one of the Add's inputs provably broadcasts to the other's shape (ONNX Runtime "
        "fuses the pair into its SkipLayerNormalization, about five times slower on the CPU in 1.31)",
        "left alone: a sum also read elsewhere (pre-norm blocks), Mean or InvStdDev outputs, another axis, "
        "shapes whose broadcast ONNX's inference does not prove",
    ),
    passes=one_pattern(_pattern, _rewrite, _check, "add-layer-norm"),
)
