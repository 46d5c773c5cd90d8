"""Group normalization into ``ortops::GroupNorm``.

Three forms: the decomposition that PyTorch's TorchScript exporter writes for
``torch.nn.GroupNorm`` (Reshape to ``[N, G, -1]``, InstanceNormalization with a scale of ones
and a bias of zeros, Reshape back to the input's shape, then Mul by a per-channel gamma and Add
of a per-channel beta), the same without the affine Mul/Add, and ONNX's GroupNormalization
(opset 18: scale and bias per group; opset 21: per channel). ``ortops::GroupNorm`` normalizes
each group of ``C / G`` channels by the biased variance, as all three do, computing in float64
where ONNX Runtime computes in the element type: the results agree within float rounding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ortops._optimize import ORTOPS_DOMAIN, Rule, accept, attribute, constant, made, proven, refuse, static_shape

if TYPE_CHECKING:
    import onnx_ir as ir
    from onnxscript.rewriter import pattern

# The element types of ortops::GroupNorm (and of ONNX Runtime's InstanceNormalization).
_FLOAT_TYPES = ("FLOAT", "DOUBLE", "FLOAT16")


def _channels_and_rank(context: Any, subject: ir.Node, x: ir.Value) -> tuple[int, int] | Any:
    """``(C, rank)`` of the normalized input, or the refusal when they are not known."""
    shape = static_shape(x)
    if shape is None or len(shape) < 2:
        return refuse(context, subject, "the rank of the input is not known (or is below 2)")
    if shape[1] is None:
        return refuse(context, subject, "the channel count (dim 1 of the input) is not known")
    if x.dtype is None or x.dtype.name not in _FLOAT_TYPES:
        return refuse(context, subject, f"element type {x.dtype} (ortops::GroupNorm takes float, double, float16)")
    return shape[1], len(shape)


def _grouping_reshape(context: Any, subject: ir.Node, x: ir.Value, reshape: ir.Node, channels: int) -> int | Any:
    """The group count when ``reshape`` turns ``x`` [N, C, ...] into [N, G, C / G * spatial]."""
    target = constant(reshape.inputs[1])
    if target is None or target.ndim != 1 or len(target) != 3:
        return refuse(context, subject, "the first Reshape's shape is not a constant of 3 values [N, G, -1]")
    batch, groups, rest = (int(v) for v in target)
    shape = static_shape(x) or []
    allow_zero = attribute(reshape, "allowzero", 0)
    batch_kept = (batch == 0 and allow_zero == 0) or (shape[0] is not None and batch == shape[0])
    spatial = [d for d in shape[2:]]
    known_rest = None if None in spatial else channels // max(groups, 1) * int(np.prod(spatial, dtype=np.int64))
    rest_kept = rest == -1 or (known_rest is not None and rest == known_rest)
    if groups <= 0 or channels % groups != 0:
        return refuse(context, subject, f"the first Reshape makes {groups} groups, which do not divide C = {channels}")
    if not (batch_kept and rest_kept) or (batch == -1 and rest == -1):
        return refuse(context, subject, f"the first Reshape's shape {target.tolist()} is not [N, G, -1]")
    return groups


def _restoring_reshape(context: Any, subject: ir.Node, x: ir.Value, shape_value: ir.Value) -> bool | Any:
    """Whether the second Reshape's shape is ``Shape(x)`` or the constant static shape of x."""
    producer = shape_value.producer()
    if (
        producer is not None
        and producer.op_type == "Shape"
        and producer.domain in ("", "ai.onnx")
        and producer.inputs[0] is x
        and attribute(producer, "start", 0) == 0
        and attribute(producer, "end", None) is None
    ):
        return True
    target = constant(shape_value)
    shape = static_shape(x)
    if target is not None and shape is not None and None not in shape and target.tolist() == shape:
        return True
    return refuse(context, subject, "the second Reshape does not restore the input's shape (Shape of the input)")


def _instance_norm_is_plain(context: Any, norm: ir.Node, groups: int) -> bool | Any:
    scale, bias = constant(norm.inputs[1]), constant(norm.inputs[2])
    if scale is None or bias is None:
        return refuse(context, norm, "InstanceNormalization's scale or bias is not a constant")
    if scale.shape != (groups,) or bias.shape != (groups,):
        return refuse(context, norm, f"InstanceNormalization's scale or bias is not of shape [{groups}]")
    if not (np.all(scale == 1) and np.all(bias == 0)):
        return refuse(context, norm, "InstanceNormalization's scale is not all ones or its bias not all zeros")
    return True


def _per_channel(value: ir.Value, channels: int, rank: int, dtype: Any) -> np.ndarray | None:
    """The [C] vector that ``value`` broadcasts to along the channels of a rank-``rank``
    [N, C, ...] tensor, when it is a constant of the element type that changes nothing else."""
    array = constant(value)
    if array is None or array.ndim > rank or value.dtype != dtype:
        return None
    shape = (1,) * (rank - array.ndim) + array.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.ascontiguousarray(np.broadcast_to(array.reshape(-1), (channels,)))


def _decomposed_pattern(
    op: Any, x: ir.Value, shape1: ir.Value, scale: ir.Value, bias: ir.Value, shape2: ir.Value
) -> Any:
    grouped = op.Reshape(x, shape1, _outputs=["grouped"])
    normed = op.InstanceNormalization(grouped, scale, bias, _outputs=["normed"])
    return op.Reshape(normed, shape2, _outputs=["restored"])


def _affine_pattern(
    op: Any,
    x: ir.Value,
    shape1: ir.Value,
    scale: ir.Value,
    bias: ir.Value,
    shape2: ir.Value,
    gamma: ir.Value,
    beta: ir.Value,
) -> Any:
    restored = _decomposed_pattern(op, x, shape1, scale, bias, shape2)
    return op.Add(op.Mul(restored, gamma), beta)


def _check_decomposed(
    context: Any, x: ir.Value, grouped: ir.Value, normed: ir.Value, restored: ir.Value, **values: Any
) -> Any:
    norm = normed.producer()
    found = _channels_and_rank(context, norm, x)
    if not isinstance(found, tuple):
        return found
    channels, rank = found
    groups = _grouping_reshape(context, norm, x, grouped.producer(), channels)
    if not isinstance(groups, int):
        return groups
    plain = _instance_norm_is_plain(context, norm, groups)
    if plain is not True:
        return plain
    restoring = _restoring_reshape(context, norm, x, restored.producer().inputs[1])
    if restoring is not True:
        return restoring
    gamma = np.ones(channels, x.dtype.numpy())
    beta = np.zeros(channels, x.dtype.numpy())
    if "gamma" in values:
        gamma = _per_channel(values["gamma"], channels, rank, x.dtype)
        beta = _per_channel(values["beta"], channels, rank, x.dtype)
        if gamma is None or beta is None:
            return refuse(context, norm, "the Mul or Add after it is not by a per-channel constant of the input's type")
    epsilon = float(attribute(norm, "epsilon", 1e-5))
    return accept(context, groups=groups, epsilon=epsilon, gamma=gamma, beta=beta)


def _group_norm(op: Any, x: ir.Value, scale: ir.Value, bias: ir.Value) -> ir.Value:
    facts = proven()
    return made(
        op.GroupNorm(x, scale, bias, num_groups=facts["groups"], epsilon=facts["epsilon"], _domain=ORTOPS_DOMAIN)
    )


def _rewrite_decomposed(op: Any, x: ir.Value, **_: Any) -> ir.Value:
    import onnx_ir as ir

    facts = proven()
    gamma = op.Constant(value=ir.tensor(facts["gamma"]))
    beta = op.Constant(value=ir.tensor(facts["beta"]))
    return _group_norm(op, x, gamma, beta)


def _onnx_pattern(op: Any, x: ir.Value, scale: ir.Value, bias: ir.Value) -> Any:
    return op.GroupNormalization(x, scale, bias, _outputs=["y"])


def _check_onnx(context: Any, x: ir.Value, scale: ir.Value, bias: ir.Value, y: ir.Value) -> Any:
    from ortops._optimize import opset_version

    node = y.producer()
    found = _channels_and_rank(context, node, x)
    if not isinstance(found, tuple):
        return found
    channels, _ = found
    groups = int(attribute(node, "num_groups", 0))
    if groups <= 0 or channels % groups != 0:
        return refuse(context, node, f"num_groups {groups} does not divide C = {channels}")
    version = opset_version(context)
    if version is None or version < 18:
        return refuse(context, node, f"the model imports ONNX opset {version}, without GroupNormalization")
    epsilon = float(attribute(node, "epsilon", 1e-5))
    if version >= 21:  # scale and bias [C], as ortops::GroupNorm takes them
        if scale.dtype != x.dtype or bias.dtype != x.dtype:
            return refuse(context, node, "scale or bias is not of the input's element type")
        return accept(context, groups=groups, epsilon=epsilon, per_group=None)
    # Opset 18: scale and bias hold one value per group; repeated C / G times they are per channel.
    per_group = [constant(scale), constant(bias)]
    if any(a is None or a.shape != (groups,) for a in per_group) or scale.dtype != x.dtype:
        return refuse(context, node, f"opset 18: scale or bias is not a constant of shape [{groups}] (one per group)")
    repeated = [np.repeat(a, channels // groups) for a in per_group]
    return accept(context, groups=groups, epsilon=epsilon, per_group=repeated)


def _rewrite_onnx(op: Any, x: ir.Value, scale: ir.Value, bias: ir.Value, **_: Any) -> ir.Value:
    import onnx_ir as ir

    per_group = proven()["per_group"]
    if per_group is not None:
        scale = op.Constant(value=ir.tensor(per_group[0]))
        bias = op.Constant(value=ir.tensor(per_group[1]))
    return _group_norm(op, x, scale, bias)


def _passes() -> list[pattern.RewriteRule]:
    from onnxscript.rewriter import pattern

    return [
        pattern.RewriteRule(_affine_pattern, _rewrite_decomposed, _check_decomposed, name="group-norm (affine)"),
        pattern.RewriteRule(_decomposed_pattern, _rewrite_decomposed, _check_decomposed, name="group-norm"),
        pattern.RewriteRule(_onnx_pattern, _rewrite_onnx, _check_onnx, name="group-norm (GroupNormalization)"),
    ]


RULE = Rule(
    name="group-norm",
    summary="group normalization (PyTorch's decomposition, ONNX GroupNormalization 18 and 21) into ortops::GroupNorm",
    handles=(
        "Reshape [N, G, -1] -> InstanceNormalization (constant scale of ones, bias of zeros) -> Reshape back "
        "(to Shape of the input, or its constant static shape) -> Mul by a per-channel constant -> Add of a "
        "per-channel constant, as torch.onnx.export writes torch.nn.GroupNorm",
        "the same without the Mul and Add (no affine transform, or one by values the model does not fix)",
        "GroupNormalization of opset 21 (per-channel scale and bias, any values)",
        "GroupNormalization of opset 18 to 20 with constant per-group scale and bias",
    ),
    passes=_passes,
)
