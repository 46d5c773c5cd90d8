"""Gradients for the feature ops from their differentiable torch implementations.

Each feature op has two implementations of one semantics: ortops' kernel (CPU tensors) and
a vectorised torch function (other devices). The torch function is written with
differentiable torch ops, so the backward pass recomputes it under autograd and
differentiates that: one definition of the math serves CUDA tensors and every gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def _is_tensor_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, torch.Tensor) for v in value)


def register_reference_autograd(
    op: torch._library.custom_ops.CustomOpDef,
    reference: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
    differentiable: Sequence[int],
) -> None:
    """Registers ``op``'s backward as the autograd of ``reference`` (same arguments as ``op``).

    Args:
        op: a ``torch.library.custom_op``.
        reference: computes the op's outputs with differentiable torch ops.
        differentiable: positions of the inputs that get a gradient; every other input
            (indices, rois, attributes) gets None. An input that is a list of tensors (one
            feature map per level) gets a list of gradients.
    """
    wanted = tuple(differentiable)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        # Tensors, single or in lists, are saved flat; (position, list length or None) says where.
        layout = [
            (i, len(value) if _is_tensor_list(value) else None)
            for i, value in enumerate(inputs)
            if isinstance(value, torch.Tensor) or _is_tensor_list(value)
        ]
        flat = [t for i, length in layout for t in (inputs[i] if length is not None else [inputs[i]])]
        ctx.save_for_backward(*flat)
        ctx.layout = layout
        ctx.constants = {i: value for i, value in enumerate(inputs) if i not in dict(layout)}
        ctx.input_count = len(inputs)

    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        inputs: list[Any] = [None] * ctx.input_count
        saved = iter(ctx.saved_tensors)
        for i, length in ctx.layout:
            inputs[i] = [next(saved) for _ in range(length)] if length is not None else next(saved)
        for i, value in ctx.constants.items():
            inputs[i] = value
        result: list[Any] = [None] * ctx.input_count
        # (position, index in its list or None) of every tensor that gets a gradient.
        sources: list[tuple[int, int | None]] = []
        for i in wanted:
            needs = ctx.needs_input_grad[i]
            if isinstance(inputs[i], list):
                result[i] = [None] * len(inputs[i])
                sources += [(i, k) for k, need in enumerate(needs) if need]
            elif needs:
                sources.append((i, None))
        if not sources:
            return tuple(result)
        higher_order = torch.is_grad_enabled()
        with torch.enable_grad():
            leaves = []
            for i, k in sources:
                if k is None:
                    inputs[i] = inputs[i].detach().requires_grad_()
                    leaves.append(inputs[i])
                else:
                    inputs[i] = list(inputs[i])
                    inputs[i][k] = inputs[i][k].detach().requires_grad_()
                    leaves.append(inputs[i][k])
            outputs = reference(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.is_floating_point() and o.requires_grad]
        if not pairs:
            return tuple(result)
        computed = torch.autograd.grad(
            [o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True, create_graph=higher_order
        )
        for (i, k), leaf, grad in zip(sources, leaves, computed):
            grad = grad if grad is not None else torch.zeros_like(leaf)
            if k is None:
                result[i] = grad
            else:
                result[i][k] = grad
        return tuple(result)

    op.register_autograd(backward, setup_context=setup_context)


def register_no_gradient(op: torch._library.custom_ops.CustomOpDef, function: str) -> None:
    """Makes a backward through ``op`` (a selection: the NMS family) fail with a clear message.

    Without this, torch would only warn that no autograd formula was registered.
    """

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        pass

    def backward(ctx: Any, *grads: Any) -> Any:
        raise RuntimeError(
            f"ortops.{function}: no gradient, as it selects boxes (a step function of its inputs); "
            "detach its inputs (or its outputs) before calling backward"
        )

    op.register_autograd(backward, setup_context=setup_context)
