"""torch.library.opcheck on every ortops torch op: schema, fake (export-time) implementation
against the eager kernel, autograd registration and AOT dispatch with dynamic shapes."""

from __future__ import annotations

import pytest
import torch

import ortops.torch  # noqa: F401 (registers torch.ops.ortops)


def _boxes(n: int, gen: torch.Generator) -> torch.Tensor:
    xy = torch.rand(n, 2, generator=gen) * 20
    return torch.cat([xy, xy + torch.rand(n, 2, generator=gen) * 10 + 1], 1)


def _cases() -> list[tuple[str, tuple, bool]]:
    """(op name, args, differentiable) with float64 inputs that need no gradient unless differentiable."""
    gen = torch.Generator().manual_seed(0)
    f64 = {"dtype": torch.float64}
    x = torch.rand(2, 4, 6, 5, generator=gen, **f64)
    rois = torch.tensor([[0, 1, 1, 4, 4], [1, 0, 0, 5, 3]], **f64)
    rotated = torch.tensor([[0, 2.5, 3, 3, 2, 0.3], [1, 2, 2, 2, 3, -0.5]], **f64)
    boxes = _boxes(8, gen)
    scores = torch.rand(8, generator=gen)
    rboxes = torch.cat([boxes[:, :2], boxes[:, 2:] - boxes[:, :2], torch.rand(8, 1, generator=gen)], 1)
    return [
        ("nms", (boxes, scores, 0.5, 0), False),
        ("soft_nms", (boxes, scores, 0.3, 0.5, 0.001, 1, 0), False),
        ("nms_match", (boxes[None], scores[None, None], torch.tensor([0.5]), torch.tensor([0.1])), False),
        (
            "non_max_suppression",  # float32 only
            (boxes[None].float(), scores[None, None], torch.tensor([3]), torch.tensor([0.5]), torch.tensor([0.1]), 0),
            False,
        ),
        ("nms_rotated", (rboxes[None], scores[None, None], 0.5, 0.0), False),
        (
            "multiclass_nms",
            (boxes.expand(2, 8, 4), torch.rand(2, 8, 3, generator=gen), 0.5, 0.2, 5, -1, False, 0, False, -1, 0),
            False,
        ),
        ("roi_align", (x, rois, 2, 3, 1.0, 2, "avg", 1), True),
        ("roi_align_rotated", (x, rotated, 2, 2, 1.0, 2, 1, 0), True),
        ("rotated_feature_align", (x, torch.rand(2, 6, 5, 5, generator=gen, **f64) * 4, 1.0, 5), True),
        ("grid_sample", (x, torch.rand(2, 3, 4, 2, generator=gen, **f64) * 2 - 1, 0, 0, 0), True),
        ("corner_pool", (x, 1), True),
        ("cummax", (x, 2), True),
        ("cummin", (x, -1), True),
        (
            "deform_conv2d",
            (
                x,
                torch.rand(2, 18, 6, 5, generator=gen, **f64),
                torch.rand(3, 4, 3, 3, generator=gen, **f64),
                torch.rand(3, generator=gen, **f64),
                torch.rand(2, 9, 6, 5, generator=gen, **f64),
                [1, 1],
                [1, 1],
                [1, 1],
                1,
                1,
            ),
            True,
        ),
        ("group_norm", (x, 2, torch.rand(4, generator=gen, **f64), torch.rand(4, generator=gen, **f64), 1e-5), True),
        (
            "add_layer_norm",
            (
                x,
                torch.rand(1, 6, 5, generator=gen, **f64),
                torch.rand(5, generator=gen, **f64),
                torch.rand(5, **f64),
                1e-5,
            ),
            True,
        ),
        ("matrix_inverse", (torch.rand(3, 4, 4, generator=gen, **f64) + 4 * torch.eye(4, **f64),), True),
        (
            "multi_scale_deformable_attention",
            (
                torch.rand(2, 6 * 5 + 3 * 2, 2, 4, generator=gen, **f64),
                torch.tensor([[6, 5], [3, 2]]),
                torch.tensor([0, 30]),
                torch.rand(2, 7, 2, 2, 3, 2, generator=gen, **f64) * 1.2 - 0.1,
                torch.rand(2, 7, 2, 2, 3, generator=gen, **f64),
                [],  # points_per_level: one P for every level, from the shapes
            ),
            True,
        ),
        (
            "multi_scale_deformable_attention_from_offsets",
            (
                torch.rand(2, 6 * 5 + 3 * 2, 2, 4, generator=gen, **f64),
                torch.tensor([[6, 5], [3, 2]]),
                torch.tensor([0, 30]),
                torch.rand(2, 7, 2, 2, generator=gen, **f64),  # reference points
                torch.rand(2, 7, 2, 2, 3, 2, generator=gen, **f64) * 4 - 2,  # offsets of up to 2 pixels
                torch.rand(2, 7, 2, 2, 3, generator=gen, **f64),
                [],
            ),
            True,
        ),
        (
            "multi_scale_deformable_attention_from_offsets",  # points_per_level: [B, Q, H, sum(P_l), ...]
            (
                torch.rand(2, 6 * 5 + 3 * 2, 2, 4, generator=gen, **f64),
                torch.tensor([[6, 5], [3, 2]]),
                torch.tensor([0, 30]),
                torch.rand(2, 7, 2, 2, generator=gen, **f64),
                torch.rand(2, 7, 2, 5, 2, generator=gen, **f64) * 4 - 2,
                torch.rand(2, 7, 2, 5, generator=gen, **f64),
                [2, 3],
            ),
            True,
        ),
        (
            "multi_level_roi_align",  # float32 only
            (
                [x.float(), x[:, :, ::2, ::2].float()],
                torch.tensor([[0, 1, 1, 4, 4], [1, 0, 0, 9, 7], [1, 2, 1, 3, 2]], dtype=torch.float32),
                2,
                3,
                [1.0, 2.0],
                2,
                4,
                1.5,
                "avg",
                1,
            ),
            True,
        ),
        (
            "roi_align_by_level",  # float32 only
            (
                [x.float(), x[:, :, ::2, ::2].float()],
                torch.tensor([[0, 1, 1, 4, 4], [1, 0, 0, 9, 7], [1, 2, 1, 3, 2]], dtype=torch.float32),
                torch.tensor([0, 1, 2]),  # the last on no level: zeros
                2,
                3,
                [1.0, 0.5],
                2,
                "avg",
                1,
            ),
            True,
        ),
    ]


@pytest.mark.parametrize(("name", "args", "differentiable"), _cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_opcheck(name: str, args: tuple, differentiable: bool) -> None:
    if differentiable:  # so that opcheck also exercises the registered backward

        def trainable(a: object) -> object:
            if isinstance(a, list):  # one feature map per level
                return [trainable(t) for t in a]
            return a.clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a

        args = tuple(trainable(a) for a in args)
        if name.startswith("roi_align") or name == "multi_level_roi_align":
            args = (args[0], args[1].detach(), *args[2:])  # rois get no gradient
    torch.library.opcheck(getattr(torch.ops.ortops, name).default, args)
