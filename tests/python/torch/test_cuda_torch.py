"""The eager torch ops on CUDA tensors: same results as on the CPU, outputs on the inputs' device.

Models are often exported from the GPU, so the eager references must run there too. Skipped
without a CUDA device (CI has none).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import ortops.torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def boxes_and_scores(gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    xy = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 100
    wh = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 40 + 5
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=gen, dtype=torch.float64)


def rois(gen: torch.Generator, n: int, batch: int, width: int) -> torch.Tensor:
    xy = torch.rand(n, 2, generator=gen, dtype=torch.float64) * (width - 8)
    wh = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 8 + 1
    index = torch.randint(0, batch, (n, 1), generator=gen).double()
    return torch.cat([index, xy, xy + wh], 1)


def cases(gen: torch.Generator) -> dict[str, tuple[Callable[..., object], tuple[object, ...]]]:
    image = torch.randn(2, 8, 16, 16, generator=gen, dtype=torch.float64)
    boxes, scores = boxes_and_scores(gen, 60)
    centres = torch.rand(6, 2, generator=gen, dtype=torch.float64) * 12 + 2
    rotated = torch.cat(
        [
            torch.tensor([[0.0], [1], [0], [1], [0], [1]]),
            centres,
            torch.rand(6, 2, generator=gen) * 6 + 1,
            torch.rand(6, 1),
        ],
        1,
    ).double()
    pixel_boxes = torch.cat(
        [
            torch.rand(2, 16, 16, 2, generator=gen) * 15,
            torch.rand(2, 16, 16, 2, generator=gen) * 4 + 1,
            torch.rand(2, 16, 16, 1),
        ],
        -1,
    ).double()
    return {
        "corner_pool": (ortops.torch.corner_pool, (image, "left")),
        "cummax": (ortops.torch.cummax, (image, 2)),
        "cummin": (ortops.torch.cummin, (image, 3)),
        "deform_conv2d": (
            lambda x, o, w, b, m: ortops.torch.deform_conv2d(x, o, w, b, padding=1, mask=m),
            (
                image,
                torch.randn(2, 18, 16, 16, generator=gen, dtype=torch.float64),
                torch.randn(4, 8, 3, 3, generator=gen, dtype=torch.float64),
                torch.randn(4, generator=gen, dtype=torch.float64),
                torch.rand(2, 9, 16, 16, generator=gen, dtype=torch.float64),
            ),
        ),
        "grid_sample": (
            ortops.torch.grid_sample,
            (image, torch.rand(2, 5, 7, 2, generator=gen, dtype=torch.float64) * 2.4 - 1.2),
        ),
        "group_norm": (
            ortops.torch.group_norm,
            (
                image,
                4,
                torch.randn(8, generator=gen, dtype=torch.float64),
                torch.randn(8, generator=gen, dtype=torch.float64),
            ),
        ),
        "matrix_inverse": (
            ortops.torch.matrix_inverse,
            (torch.randn(3, 5, 5, generator=gen, dtype=torch.float64) + 5 * torch.eye(5, dtype=torch.float64),),
        ),
        "multi_scale_deformable_attention": (
            ortops.torch.multi_scale_deformable_attention,
            (
                torch.randn(2, 16 * 16 + 8 * 8, 4, 8, generator=gen, dtype=torch.float64),
                torch.tensor([[16, 16], [8, 8]]),
                torch.tensor([0, 256]),
                torch.rand(2, 30, 4, 2, 3, 2, generator=gen, dtype=torch.float64) * 1.2 - 0.1,
                torch.rand(2, 30, 4, 2, 3, generator=gen, dtype=torch.float64),
            ),
        ),
        "nms": (ortops.torch.nms, (boxes, scores, 0.4)),
        "nms_match": (ortops.torch.nms_match, (boxes[None], scores[None, None], 0.4, 0.1)),
        "roi_align": (ortops.torch.roi_align, (image, rois(gen, 7, 2, 16), 3, 1.0, 2)),
        "roi_align_rotated": (ortops.torch.roi_align_rotated, (image, rotated, 3, 1.0, 2)),
        "rotated_feature_align": (ortops.torch.rotated_feature_align, (image, pixel_boxes, 1.0, 5)),
        "soft_nms": (ortops.torch.soft_nms, (boxes, scores, 0.3, 0.5, 1e-3, "gaussian")),
        "multiclass_nms": (
            ortops.torch.multiclass_nms,
            (boxes.expand(2, -1, -1), torch.rand(2, 60, 3, generator=gen, dtype=torch.float64), 0.4, 0.2, 20),
        ),
        "multi_scale_deformable_attention_from_offsets": (
            ortops.torch.multi_scale_deformable_attention_from_offsets,
            (
                torch.randn(2, 16 * 16 + 8 * 8, 4, 8, generator=gen, dtype=torch.float64),
                torch.tensor([[16, 16], [8, 8]]),
                torch.tensor([0, 256]),
                torch.rand(2, 30, 2, 2, generator=gen, dtype=torch.float64),
                torch.rand(2, 30, 4, 2, 3, 2, generator=gen, dtype=torch.float64) * 8 - 4,
                torch.rand(2, 30, 4, 2, 3, generator=gen, dtype=torch.float64),
            ),
        ),
    }


def flatten(result: object) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (tuple, list)) else [result]  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(cases(torch.Generator().manual_seed(0))))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_matches_cpu(name: str, dtype: torch.dtype) -> None:
    fn, args = cases(torch.Generator().manual_seed(0))[name]
    cpu_args = [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    cuda_args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in cpu_args]
    expected = flatten(fn(*cpu_args))
    got = flatten(fn(*cuda_args))
    assert len(got) == len(expected)
    # Float results may differ by the GPU's own rounding (fused multiply-adds, reductions).
    tolerance = {torch.float32: 2e-5, torch.float64: 1e-12}[dtype]
    for g, e in zip(got, expected):
        assert g.device.type == "cuda", name
        assert g.dtype == e.dtype and g.shape == e.shape, name
        if e.is_floating_point():
            torch.testing.assert_close(g.cpu(), e, rtol=tolerance, atol=tolerance)
        else:
            torch.testing.assert_close(g.cpu(), e)
