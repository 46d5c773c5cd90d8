"""Every eager ortops.torch error starts with one prefix, ``ortops.<op>:``, whether the Python
side or the kernel found the problem, and a shape message says the shapes it got.

Before, four prefixes occurred (``ortops.nms:``, the kernel's ``ortops.NMS:``,
``ortops.DeformConv2d:``, ``ortops.torch.deform_conv2d:``) and some shape messages had no shapes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

import ortops.torch as ot


def z(*shape: int) -> torch.Tensor:
    return torch.zeros(shape)


def _rois(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows)


# (op, call, what the message must contain after the prefix: the reason with the actual values)
CASES: list[tuple[str, Callable[[], object], str]] = [
    ("nms", lambda: ot.nms(z(3, 5), z(3), 0.5), r"boxes must have shape \[N, 4\], got \[3, 5\]"),
    # An attribute the kernel refuses fails at its session's creation: a ValueError too.
    ("nms", lambda: ot.nms(z(3, 4), z(3), 0.5, 2), r"attribute 'offset' must be 0 or 1, got 2"),
    ("soft_nms", lambda: ot.soft_nms(z(3, 4), z(2)), r"scores must have shape \[3\], got \[2\]"),
    ("nms_match", lambda: ot.nms_match(z(1, 3, 4), z(1, 2, 2), 0.5, 0.1), r"= \[1, C, 3\], got \[1, 2, 2\]"),
    (
        "non_max_suppression",
        lambda: ot.non_max_suppression(z(1, 3, 4), z(1, 2, 2), 5),
        r"= \[1, C, 3\], got \[1, 2, 2\]",
    ),
    ("nms_rotated", lambda: ot.nms_rotated(z(1, 3, 4), z(1, 2, 3), 0.5), r"\[B, N, 5\], got \[1, 3, 4\]"),
    (
        "multiclass_nms",
        lambda: ot.multiclass_nms(z(1, 5, 4), z(1, 4, 3), 0.5, 0.1, 3),
        r"\[B, N, C\] = \[1, 4, 3\] \(the shape of scores\), got \[1, 5, 4\]",
    ),
    ("roi_align", lambda: ot.roi_align(z(1, 2, 3), z(2, 5), 2), r"got \[1, 2, 3\] and \[2, 5\]"),
    (
        "roi_align",
        lambda: ot.roi_align(z(1, 1, 4, 4), _rois([0, 0, 0, 1e6, 4]), 64, sampling_ratio=0),
        r"a roi needs 1 x 15625 samples per bin, more than this op allows",  # the kernel's
    ),
    ("roi_align_rotated", lambda: ot.roi_align_rotated(z(1, 2, 3, 3), z(2, 5), 2), r"got \[1, 2, 3, 3\] and \[2, 5\]"),
    (
        "multi_level_roi_align",
        lambda: ot.multi_level_roi_align([z(1, 2, 4, 4)], z(3, 4), 2, [4.0]),
        r"rois must have shape \[R, 5\], got \[3, 4\]",
    ),
    (
        "roi_align_by_level",
        lambda: ot.roi_align_by_level([z(1, 2, 4, 4)], z(3, 5), torch.zeros(2, dtype=torch.int64), 2, [0.25]),
        r"input 'levels' must hold one level per roi, shape \[3\], got \[2\]",
    ),
    (
        "rotated_feature_align",
        lambda: ot.rotated_feature_align(z(1, 2, 3, 3), z(1, 3, 3, 4)),
        r"best_rbboxes must be \[1, 3, 3, 5\], got \[1, 3, 3, 4\]",
    ),
    ("grid_sample", lambda: ot.grid_sample(z(1, 2, 3), z(1, 2, 2, 2)), r"shape \[1, 2, 3\]"),  # the kernel's
    ("grid_sample", lambda: ot.grid_sample(z(1, 2, 3, 3), z(1, 2, 2, 2), "cubic"), r"mode must be one of .*'cubic'"),
    ("corner_pool", lambda: ot.corner_pool(z(1, 2, 3), "top"), r"got \[1, 2, 3\], 0"),
    ("cummax", lambda: ot.cummax(z(2, 3), 5), r"'dim' = 5 is out of range .* \[2, 3\]"),  # the kernel's
    ("cummin", lambda: ot.cummin(z(2, 3), -3), r"'dim' = -3 is out of range .* \[2, 3\]"),
    (
        "deform_conv2d",
        lambda: ot.deform_conv2d(z(1, 2, 5), z(1, 18, 3, 3), z(3, 2, 3, 3)),
        r"input, offset and weight must be 4-D, got \[1, 2, 5\], \[1, 18, 3, 3\] and \[3, 2, 3, 3\]",
    ),
    (
        "deform_conv2d",
        lambda: ot.deform_conv2d(z(1, 3, 5, 5), z(1, 18, 3, 3), z(3, 2, 3, 3)),
        r"input's 3 channels are not a multiple of weight.shape\[1\] = 2",
    ),
    (
        "deform_conv2d",
        lambda: ot.deform_conv2d(z(1, 3, 5, 5), z(1, 36, 3, 3), z(3, 1, 3, 3)),
        r"input's 3 channels are not a multiple of the 2 deform groups that offset's 36 channels make",
    ),
    (
        "deform_conv2d",
        lambda: ot.deform_conv2d(z(1, 2, 5, 5), z(1, 18, 4, 4), z(3, 2, 3, 3)),
        r"'offset' must have shape \[1, 18, 3, 3\] .*, got \[1, 18, 4, 4\]",  # the kernel's
    ),
    ("group_norm", lambda: ot.group_norm(z(2, 6, 3), 4), r"C = 6 channels, not divisible by num_groups = 4"),
    (
        "add_layer_norm",
        lambda: ot.add_layer_norm(z(2, 6), z(2, 6), z(5)),
        r"input 'scale' must have shape \[C\] = \[6\], got \[5\]",  # the kernel's
    ),
    ("matrix_inverse", lambda: ot.matrix_inverse(z(2, 3, 4)), r"\[..., M, M\], got \[2, 3, 4\]"),
    (
        "multi_scale_deformable_attention",
        lambda: ot.multi_scale_deformable_attention(
            z(1, 6, 2, 4), torch.tensor([[2, 3]]), torch.tensor([0]), z(1, 3, 2, 1, 1, 2), z(1, 3, 2, 1, 2)
        ),
        r"must have shape \[1, 3, 2, 1, 1\] .*, got \[1, 3, 2, 1, 2\]",  # the kernel's
    ),
    (
        "multi_scale_deformable_attention_from_offsets",
        lambda: ot.multi_scale_deformable_attention_from_offsets(
            z(1, 6, 2, 4),
            torch.tensor([[2, 3]]),
            torch.tensor([0]),
            z(1, 3, 2, 2),
            z(1, 3, 2, 1, 1, 2),
            z(1, 3, 2, 1, 1),
        ),
        r"'reference_points' must have shape \[B, Q, L, 2\] = \[1, 3, 1, 2\] .*, got \[1, 3, 2, 2\]",  # the kernel's
    ),
]


@pytest.mark.parametrize(("op", "call", "reason"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_an_eager_error_names_the_op_and_says_what_it_got(op: str, call: Callable[[], object], reason: str) -> None:
    with pytest.raises(ValueError) as error:
        call()
    message = str(error.value)
    assert message.startswith(f"ortops.{op}: "), message
    assert re.search(reason, message), message


def test_every_op_has_a_case() -> None:
    assert {c[0] for c in CASES} == {e.function.__name__ for e in ot.exported_ops()}


@pytest.mark.parametrize("op", ["soft_nms", "multiclass_nms"])
def test_the_no_gradient_error_has_the_prefix_too(op: str) -> None:
    boxes = torch.rand(3, 4).requires_grad_()
    if op == "soft_nms":
        output = ot.soft_nms(boxes, torch.rand(3))[0]
    else:
        output = ot.multiclass_nms(boxes[None], torch.rand(1, 3, 2), 0.5, 0.1, 3)[1]
    with pytest.raises(RuntimeError, match=rf"^ortops\.{op}: no gradient"):
        output.sum().backward()
