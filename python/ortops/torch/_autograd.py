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
            (indices, rois, attributes) gets None.
    """
    wanted = tuple(differentiable)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        tensors = [i for i, value in enumerate(inputs) if isinstance(value, torch.Tensor)]
        ctx.save_for_backward(*(inputs[i] for i in tensors))
        ctx.tensor_positions = tensors
        ctx.constants = {i: value for i, value in enumerate(inputs) if i not in tensors}
        ctx.input_count = len(inputs)

    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        inputs: list[Any] = [None] * ctx.input_count
        for i, value in zip(ctx.tensor_positions, ctx.saved_tensors):
            inputs[i] = value
        for i, value in ctx.constants.items():
            inputs[i] = value
        sources = [i for i in wanted if ctx.needs_input_grad[i]]
        result: list[torch.Tensor | None] = [None] * ctx.input_count
        if not sources:
            return tuple(result)
        higher_order = torch.is_grad_enabled()
        with torch.enable_grad():
            for i in sources:
                inputs[i] = inputs[i].detach().requires_grad_()
            outputs = reference(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.is_floating_point() and o.requires_grad]
        if not pairs:
            return tuple(result)
        computed = torch.autograd.grad(
            [o for o, _ in pairs],
            [inputs[i] for i in sources],
            [g for _, g in pairs],
            allow_unused=True,
            create_graph=higher_order,
        )
        for i, grad in zip(sources, computed):
            result[i] = grad if grad is not None else torch.zeros_like(inputs[i])
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
            f"ortops.{function} has no gradient: it selects boxes, a step function of its inputs. "
            "Detach its inputs (or its outputs) before calling backward."
        )

    op.register_autograd(backward, setup_context=setup_context)
