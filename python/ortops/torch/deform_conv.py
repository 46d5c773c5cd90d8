"""Deformable convolution: ``torch.ops.ortops.deform_conv2d``, exported to ``ortops::DeformConv2d``."""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

from ortops.torch import _kernel
from ortops.torch._autograd import register_reference_autograd
from ortops.torch._export import onnx_opset, register_export, typed
from ortops.torch._kernel import check_dtypes


def _pair(v: int | tuple[int, int]) -> list[int]:
    return [v, v] if isinstance(v, int) else [int(v[0]), int(v[1])]


def _sample(input: torch.Tensor, y: torch.Tensor, x: torch.Tensor, deform_groups: int) -> torch.Tensor:
    """torchvision's deform-conv bilinear sampling.

    input: Tensor[N, C, H, W]; y, x: Tensor[N, dg, K, P] -> Tensor[N, C, K, P].
    """
    n, c, h, w = input.shape
    _, dg, k, p = y.shape
    planes = input.reshape(n, dg, c // dg, h * w)
    inside = (y > -1) & (y < h) & (x > -1) & (x < w)
    y0, x0 = y.floor(), x.floor()
    ly, lx = y - y0, x - x0
    result = input.new_zeros((n, dg, c // dg, k * p))
    for yi, xi, weight in (
        (y0, x0, (1 - ly) * (1 - lx)),
        (y0, x0 + 1, (1 - ly) * lx),
        (y0 + 1, x0, ly * (1 - lx)),
        (y0 + 1, x0 + 1, ly * lx),
    ):
        valid = inside & (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
        index = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long().reshape(n, dg, 1, k * p)
        values = planes.gather(3, index.expand(n, dg, c // dg, k * p))
        result = result + values * (weight * valid).reshape(n, dg, 1, k * p)
    return result.reshape(n, c, k, p)


def _absent(t: torch.Tensor) -> bool:
    """An empty 1-D tensor stands for a left-out bias or mask (the ONNX node's inputs are all required)."""
    return t.dim() == 1 and t.shape[0] == 0


def _reference(
    input: torch.Tensor,
    offset: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    deform_groups: int,
) -> torch.Tensor:
    """The kernel's semantics in differentiable torch ops (non-CPU tensors and gradients)."""
    n, c, h, w = input.shape
    c_out, _, kh, kw = weight.shape
    out_h = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    k, p = kh * kw, out_h * out_w
    taps = torch.arange(k, device=input.device)
    base_y = (torch.arange(out_h, device=input.device) * stride[0] - padding[0])[None, :, None] + (
        taps // kw * dilation[0]
    )[:, None, None]
    base_x = (torch.arange(out_w, device=input.device) * stride[1] - padding[1])[None, None, :] + (
        taps % kw * dilation[1]
    )[:, None, None]
    offsets = offset.reshape(n, deform_groups, k, 2, out_h, out_w)
    y = (base_y.to(input.dtype) + offsets[:, :, :, 0]).reshape(n, deform_groups, k, p)
    x = (base_x.to(input.dtype) + offsets[:, :, :, 1]).reshape(n, deform_groups, k, p)
    columns = _sample(input, y, x, deform_groups)  # [N, C, K, P]
    if not _absent(mask):
        columns = columns * mask.reshape(n, deform_groups, 1, k, p).expand(
            n, deform_groups, c // deform_groups, k, p
        ).reshape(n, c, k, p)
    columns = columns.reshape(n, groups, (c // groups) * k, p)
    out = torch.einsum("gok,ngkp->ngop", weight.reshape(groups, c_out // groups, -1), columns)
    out = out.reshape(n, c_out, out_h, out_w)
    return out if _absent(bias) else out + bias[None, :, None, None]


@torch.library.custom_op("ortops::deform_conv2d", mutates_args=())
def _deform_conv2d(
    input: torch.Tensor,
    offset: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    deform_groups: int,
) -> torch.Tensor:
    tensors = (input, offset, weight, bias, mask)
    check_dtypes("DeformConv2d", "deform_conv2d", *tensors)
    attributes = (stride, padding, dilation, groups, deform_groups)
    if input.device.type != "cpu":
        return _reference(*tensors, *attributes)
    names = ("stride", "padding", "dilation", "groups", "deform_groups")
    shape = (input.shape[0], weight.shape[0], offset.shape[2], offset.shape[3])
    return _kernel.run("DeformConv2d", tensors, dict(zip(names, attributes)), [shape])[0]


register_reference_autograd(_deform_conv2d, _reference, differentiable=(0, 1, 2, 3, 4))


@_deform_conv2d.register_fake
def _(input, offset, weight, bias, mask, stride, padding, dilation, groups, deform_groups):  # noqa: ANN001, ANN202
    check_dtypes("DeformConv2d", "deform_conv2d", input, offset, weight, bias, mask)
    return input.new_empty((input.shape[0], weight.shape[0], offset.shape[2], offset.shape[3]))


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(f"ortops.torch.deform_conv2d: {message}")


def deform_conv2d(
    input: torch.Tensor,
    offset: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Deformable convolution with ``torchvision.ops.deform_conv2d``'s signature and result
    (exports to ``ortops::DeformConv2d``).

    Args:
        input: ``Tensor[N, C, H, W]``, float32, float64 or float16.
        offset: ``Tensor[N, 2 * dg * kh * kw, H_out, W_out]``: channel ``2k`` is dy and ``2k+1`` is dx of
            kernel tap ``k = i * kw + j``, per deform group; dg (deform groups) is inferred from its channels.
        weight: ``Tensor[C_out, C / groups, kh, kw]``; groups = C / weight.shape[1].
        bias: ``Tensor[C_out]`` or None.
        stride, padding, dilation: ints or pairs (height, width).
        mask: ``Tensor[N, dg * kh * kw, H_out, W_out]`` modulation (DCNv2), or None (DCNv1).

    Returns:
        ``Tensor[N, C_out, H_out, W_out]`` with
        ``H_out = (H + 2 * pad_h - dilation_h * (kh - 1) - 1) // stride_h + 1`` (likewise W_out).

    CPU tensors run ortops' kernel; others a torch implementation of the same semantics.
    Differentiable with respect to input, offset, weight, bias and mask.
    """
    _check(input.dim() == 4 and offset.dim() == 4 and weight.dim() == 4, "input, offset and weight must be 4-D")
    stride_, padding_, dilation_ = _pair(stride), _pair(padding), _pair(dilation)
    kernel = weight.shape[2] * weight.shape[3]
    _check(
        kernel > 0 and offset.shape[1] % (2 * kernel) == 0,
        f"offset has {offset.shape[1]} channels, not a multiple of 2 * kh * kw = {2 * kernel}",
    )
    _check(weight.shape[1] > 0 and input.shape[1] % weight.shape[1] == 0, "C must be a multiple of weight.shape[1]")
    deform_groups = offset.shape[1] // (2 * kernel)
    groups = input.shape[1] // weight.shape[1]
    _check(deform_groups > 0 and input.shape[1] % deform_groups == 0, f"C is not divisible by {deform_groups=}")
    # The node's bias and mask inputs are required (ONNX Runtime 1.17 cannot type a node that
    # leaves out an optional input of an op with several element types); [0] means none.
    empty = input.new_empty((0,))
    return torch.ops.ortops.deform_conv2d(
        input,
        offset,
        weight,
        empty if bias is None else bias,
        empty if mask is None else mask,
        stride_,
        padding_,
        dilation_,
        groups,
        deform_groups,
    )


@symbolic_helper.parse_args("v", "v", "v", "v", "v", "is", "is", "is", "i", "i")
def _symbolic(g, input, offset, weight, bias, mask, stride, padding, dilation, groups, deform_groups):  # noqa: ANN001, ANN202
    node = g.op(
        "ortops::DeformConv2d",
        input,
        offset,
        weight,
        bias,
        mask,
        stride_i=stride,
        padding_i=padding,
        dilation_i=dilation,
        groups_i=groups,
        deform_groups_i=deform_groups,
    )
    batch = symbolic_helper._get_tensor_dim_size(input, 0)
    out_channels = symbolic_helper._get_tensor_dim_size(weight, 0)
    return typed(node, input, sizes=[batch, out_channels, None, None])


def _translation(  # noqa: ANN202 (onnxscript values)
    input,  # noqa: ANN001
    offset,  # noqa: ANN001
    weight,  # noqa: ANN001
    bias,  # noqa: ANN001
    mask,  # noqa: ANN001
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    deform_groups: int,
):
    return onnx_opset.DeformConv2d(
        input,
        offset,
        weight,
        bias,
        mask,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        deform_groups=deform_groups,
    )


register_export(
    torch.ops.ortops.deform_conv2d.default,
    onnx_op="DeformConv2d",
    function=deform_conv2d,
    symbolic=_symbolic,
    translation=_translation,
)
