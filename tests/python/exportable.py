"""Wrappers that make whole PyTorch models exportable as their users export them: one flat
tuple of tensors out, and the few functions the TorchScript exporter cannot write replaced as
users replace them. Shared by the ``ortops optimize`` tests (test_optimize_models.py) and the
whole-model benchmark (benchmarks/bench_optimize.py)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import torch


def flat_tensors(outputs: Any) -> list[torch.Tensor]:
    """The tensors of a (nested) model output in the order the exporters flatten them."""
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if hasattr(outputs, "to_tuple"):
        outputs = outputs.to_tuple()
    if isinstance(outputs, (list, tuple)):
        return [t for item in outputs for t in flat_tensors(item)]
    return []


class FlatOutputs(torch.nn.Module):
    """A transformers model on pixel_values [N, 3, H, W] -> its output's tensors, flattened."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(flat_tensors(self.model(pixel_values=pixel_values)))


class Detections(torch.nn.Module):
    """A torchvision detector on one image [3, H, W] -> boxes [K, 4], labels [K], scores [K]
    (and masks [K, 1, H, W] for a detector that finds them)."""

    def __init__(self, detector: torch.nn.Module) -> None:
        super().__init__()
        self.detector = detector

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        found = self.detector([image])[0]
        return tuple(found[k] for k in ("boxes", "labels", "scores", "masks") if k in found)


class GroundingDinoOfTokens(torch.nn.Module):
    """transformers' Grounding DINO on pixel_values [N, 3, H, W] and text token ids [N, T] ->
    its output's tensors, flattened. Its text masks and positions are computed with
    ``torch.isin`` and ``cummax``, which the TorchScript exporter cannot write: as users do to
    export it, every token here attends to every other, in order."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from transformers.models.grounding_dino import modeling_grounding_dino  # noqa: PLC0415

        def all_tokens(input_ids: torch.Tensor, special_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            batch, length = input_ids.shape
            positions = torch.arange(length, device=input_ids.device)[None].expand(batch, length)
            return torch.ones(batch, length, length, dtype=torch.bool, device=input_ids.device), positions

        with mock.patch.object(
            modeling_grounding_dino, "generate_masks_with_special_tokens_and_transfer_map", all_tokens
        ):
            return tuple(flat_tensors(self.model(pixel_values=pixel_values, input_ids=input_ids)))


class OneFormerOfTask(torch.nn.Module):
    """transformers' OneFormer on pixel_values [N, 3, H, W] and its task's token ids [N, T] ->
    its output's tensors, flattened."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor, task_inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(flat_tensors(self.model(pixel_values=pixel_values, task_inputs=task_inputs)))
