"""Deformable convolution: ``torch.ops.ortops.deform_conv2d``, exported to ``ortops::DeformConv2d``."""

from __future__ import annotations

import torch

from ortops.torch._op import Arg, BadArgument, Op


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


DEFORM_CONV2D = Op(
    "deform_conv2d",
    "DeformConv2d",
    [
        Arg("input", torch.Tensor, "``Tensor[N, C, H, W]``, float32, float64 or float16."),
        Arg(
            "offset",
            torch.Tensor,
            "``Tensor[N, 2 * dg * kh * kw, H_out, W_out]``: channel ``2k`` is dy and ``2k+1`` is dx of kernel tap "
            "``k = i * kw + j``, per deform group; dg (deform groups) is inferred from its channels.",
        ),
        Arg("weight", torch.Tensor, "``Tensor[C_out, C / groups, kh, kw]``; groups = C / weight.shape[1]."),
        # The node's bias and mask inputs are required (ONNX Runtime 1.17 cannot type a node that
        # leaves out an optional input of an op with several element types); [0] means none.
        Arg("bias", torch.Tensor, "``Tensor[C_out]`` or None."),
        Arg("mask", torch.Tensor, "``Tensor[N, dg * kh * kw, H_out, W_out]`` modulation (DCNv2), or None (DCNv1)."),
        Arg("stride", list[int], "an int or a pair (height, width)."),
        Arg("padding", list[int], "an int or a pair (height, width)."),
        Arg("dilation", list[int], "an int or a pair (height, width)."),
        Arg("groups", int),
        Arg("deform_groups", int),
    ],
    reference=_reference,
    differentiable=(0, 1, 2, 3, 4),
)


@DEFORM_CONV2D.public
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

    Returns:
        ``Tensor[N, C_out, H_out, W_out]`` with
        ``H_out = (H + 2 * pad_h - dilation_h * (kh - 1) - 1) // stride_h + 1`` (likewise W_out).

    CPU tensors run ortops' kernel; others a torch implementation of the same semantics.
    Differentiable with respect to input, offset, weight, bias and mask.
    """
    if input.dim() != 4 or offset.dim() != 4 or weight.dim() != 4:
        raise BadArgument(
            f"input, offset and weight must be 4-D, got {list(input.shape)}, {list(offset.shape)} and "
            f"{list(weight.shape)}"
        )
    channels, kernel = input.shape[1], weight.shape[2] * weight.shape[3]
    if kernel == 0 or offset.shape[1] % (2 * kernel) != 0:
        raise BadArgument(f"offset has {offset.shape[1]} channels, not a multiple of 2 * kh * kw = {2 * kernel}")
    if weight.shape[1] == 0 or channels % weight.shape[1] != 0:
        raise BadArgument(f"input's {channels} channels are not a multiple of weight.shape[1] = {weight.shape[1]}")
    deform_groups = offset.shape[1] // (2 * kernel)
    if deform_groups == 0 or channels % deform_groups != 0:
        raise BadArgument(
            f"input's {channels} channels are not a multiple of the {deform_groups} deform groups that offset's "
            f"{offset.shape[1]} channels make with a {weight.shape[2]} x {weight.shape[3]} kernel"
        )
    empty = input.new_empty((0,))
    return DEFORM_CONV2D(
        input,
        offset,
        weight,
        empty if bias is None else bias,
        empty if mask is None else mask,
        _pair(stride),
        _pair(padding),
        _pair(dilation),
        channels // weight.shape[1],
        deform_groups,
    )
