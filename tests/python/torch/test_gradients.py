"""Gradients of the ortops torch ops.

``torch.autograd.gradcheck`` in float64 compares each backward with finite differences of
the forward (on CPU the forward is ortops' kernel, the backward the autograd of the torch
implementation, so the check also ties the two together); then each gradient is compared
with torchvision's or torch's own backward where one exists.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torchvision

import ortops.torch

# float32 backward against torchvision/torch: both sum the same products in other orders.
GRAD_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def _rng(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rois(count: int, size: float, gen: torch.Generator, dtype: torch.dtype, batch: int = 2) -> torch.Tensor:
    xy = torch.rand(count, 2, generator=gen, dtype=dtype) * size * 0.6
    wh = torch.rand(count, 2, generator=gen, dtype=dtype) * size * 0.5 + 1
    index = torch.randint(0, batch, (count, 1), generator=gen).to(dtype)
    return torch.cat([index, xy, xy + wh], 1)


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_gradcheck(aligned: bool, mode: str) -> None:
    gen = _rng()
    x = torch.rand(2, 3, 8, 9, generator=gen, dtype=torch.float64, requires_grad=True)
    rois = _rois(4, 8, gen, torch.float64)
    torch.autograd.gradcheck(
        lambda t: ortops.torch.roi_align(t, rois, (3, 2), 1.0, 2, mode=mode, aligned=aligned), (x,)
    )


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align_backward_matches_torchvision(aligned: bool, sampling_ratio: int) -> None:
    gen = _rng(1)
    x = torch.rand(2, 16, 40, 48, generator=gen, requires_grad=True)
    rois = _rois(30, 160, gen, torch.float32)
    grad = torch.rand(30, 16, 7, 7, generator=gen)
    (ours,) = torch.autograd.grad(ortops.torch.roi_align(x, rois, 7, 0.25, sampling_ratio, aligned=aligned), x, grad)
    theirs_out = torchvision.ops.roi_align(x, rois, 7, 0.25, sampling_ratio, aligned=aligned)
    (theirs,) = torch.autograd.grad(theirs_out, x, grad)
    torch.testing.assert_close(ours, theirs, **GRAD_TOLERANCE)


@pytest.mark.filterwarnings("ignore:Input #.* is not a double precision:UserWarning")
def test_multi_level_roi_align_gradcheck() -> None:
    # float32, the op's one element type (gradcheck warns about it): the avg output is linear
    # in the features, so finite differences stay exact but for float32 rounding.
    gen = _rng(13)
    levels = [torch.rand(2, 3, 16 >> k, 18 >> k, generator=gen, requires_grad=True) for k in range(3)]
    rois = _rois(6, 60, gen, torch.float32)
    rois[:3, 3:] = rois[:3, 1:3] + 40  # some rois on each level (finest_scale 8)
    torch.autograd.gradcheck(
        lambda *t: ortops.torch.multi_level_roi_align(list(t), rois, (2, 3), [4, 8, 16], 2, 8, 1.25),
        tuple(levels),
        eps=1e-2,
        atol=2e-3,
        rtol=1e-3,
    )


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_multi_level_roi_align_backward_is_its_torch_implementations(mode: str) -> None:
    """The backward differentiates the torch implementation, which is gradchecked in float64
    here (max mode's gradient is not smooth enough for float32 finite differences)."""
    module = importlib.import_module("ortops.torch.multi_level_roi_align")
    gen = _rng(15)
    levels = [torch.rand(2, 3, 16 >> k, 18 >> k, generator=gen, dtype=torch.float64) for k in range(3)]
    rois = _rois(6, 60, gen, torch.float64)
    rois[:3, 3:] = rois[:3, 1:3] + 40
    args = (2, 3, [4.0, 8.0, 16.0], 2, 8, 1.25, mode, 1)
    inputs = tuple(t.requires_grad_() for t in levels)
    torch.autograd.gradcheck(lambda *t: module._reference(list(t), rois, *args), inputs)
    # ... and its backward is what the op's backward gives (float32 kernel forward).
    single = [t.detach().float().requires_grad_() for t in levels]
    grad = torch.rand(6, 3, 2, 3, generator=gen)
    ours = torch.autograd.grad(torch.ops.ortops.multi_level_roi_align(single, rois.float(), *args), single, grad)
    reference = [t.detach().float().requires_grad_() for t in levels]
    theirs = torch.autograd.grad(module._reference(reference, rois.float(), *args), reference, grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_by_level_backward_is_its_torch_implementations(mode: str) -> None:
    """As multi_level_roi_align's: the torch implementation gradchecked in float64, and the op's
    backward (float32 kernel forward) is its backward; a roi on no level gets no gradient."""
    module = importlib.import_module("ortops.torch.roi_align_by_level")
    gen = _rng(16)
    levels = [torch.rand(2, 3, 16 >> k, 18 >> k, generator=gen, dtype=torch.float64) for k in range(3)]
    rois = _rois(6, 60, gen, torch.float64)
    level = torch.tensor([0, 2, 1, -1, 3, 1])
    args = (2, 3, [0.25, 0.125, 0.0625], 0, mode, 1)
    inputs = tuple(t.requires_grad_() for t in levels)
    torch.autograd.gradcheck(lambda *t: module._reference(list(t), rois, level, *args), inputs)
    single = [t.detach().float().requires_grad_() for t in levels]
    grad = torch.rand(6, 3, 2, 3, generator=gen)
    ours = torch.autograd.grad(torch.ops.ortops.roi_align_by_level(single, rois.float(), level, *args), single, grad)
    reference = [t.detach().float().requires_grad_() for t in levels]
    theirs = torch.autograd.grad(module._reference(reference, rois.float(), level, *args), reference, grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    grad[[0, 1, 2, 5]] = 0  # only the rois on no level
    nothing = torch.autograd.grad(torch.ops.ortops.roi_align_by_level(single, rois.float(), level, *args), single, grad)
    assert not any(g.any() for g in nothing)


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_multi_level_roi_align_backward_matches_torchvision(sampling_ratio: int) -> None:
    gen = _rng(14)
    strides = [4.0, 8.0, 16.0, 32.0]
    levels = [torch.rand(2, 8, 64 >> k, 80 >> k, generator=gen, requires_grad=True) for k in range(4)]
    rois = _rois(40, 300, gen, torch.float32)
    grad = torch.rand(40, 8, 7, 7, generator=gen)
    ours = torch.autograd.grad(
        ortops.torch.multi_level_roi_align(levels, rois, 7, strides, sampling_ratio, 16), levels, grad
    )
    # mmdet's SingleRoIExtractor over torchvision's roi_align, the level mapping written here.
    scale = torch.sqrt((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]))
    level = torch.floor(torch.log2(scale / 16 + 1e-6)).clamp(0, 3).long()
    assert len(level.unique()) > 1
    out = torch.zeros(40, 8, 7, 7)
    for k, stride in enumerate(strides):
        chosen = (level == k).nonzero()[:, 0]
        pooled = torchvision.ops.roi_align(levels[k], rois[chosen], 7, 1 / stride, sampling_ratio, True)
        out = out.index_put((chosen,), pooled)
    theirs = torch.autograd.grad(out, levels, grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **GRAD_TOLERANCE)


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("clockwise", [True, False])
def test_roi_align_rotated_gradcheck(aligned: bool, clockwise: bool) -> None:
    gen = _rng(2)
    x = torch.rand(2, 2, 9, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    centre = torch.rand(3, 2, generator=gen, dtype=torch.float64) * 6 + 1
    size = torch.rand(3, 2, generator=gen, dtype=torch.float64) * 4 + 1
    theta = torch.rand(3, 1, generator=gen, dtype=torch.float64) * 3
    rois = torch.cat([torch.tensor([[0.0], [1.0], [1.0]], dtype=torch.float64), centre, size, theta], 1)
    torch.autograd.gradcheck(
        lambda t: ortops.torch.roi_align_rotated(t, rois, (2, 3), 1.0, 2, aligned=aligned, clockwise=clockwise), (x,)
    )


@pytest.mark.parametrize("points", [1, 5])
def test_rotated_feature_align_gradcheck(points: int) -> None:
    gen = _rng(3)
    x = torch.rand(2, 3, 5, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    boxes = torch.rand(2, 5, 6, 5, generator=gen, dtype=torch.float64) * torch.tensor(
        [6.0, 5.0, 3.0, 3.0, 3.0], dtype=torch.float64
    )
    torch.autograd.gradcheck(lambda t: ortops.torch.rotated_feature_align(t, boxes, 1.0, points), (x,))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [True, False])
def test_grid_sample_gradients_are_torchs(mode: str, padding_mode: str, align_corners: bool) -> None:
    gen = _rng(4)
    x = torch.rand(2, 3, 6, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    grid = (torch.rand(2, 4, 5, 2, generator=gen, dtype=torch.float64) * 2.4 - 1.2).requires_grad_(mode != "nearest")
    args = (mode, padding_mode, align_corners)
    inputs = (x, grid) if mode != "nearest" else (x,)
    if mode == "nearest":
        torch.autograd.gradcheck(lambda t: ortops.torch.grid_sample(t, grid, *args), inputs)
    else:
        torch.autograd.gradcheck(lambda t, g: ortops.torch.grid_sample(t, g, *args), inputs)
    grad = torch.rand(2, 3, 4, 5, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad(ortops.torch.grid_sample(*inputs[:1], grid, *args), inputs, grad)
    theirs = torch.autograd.grad(torch.nn.functional.grid_sample(x, grid, *args), inputs, grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("modulated", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_deform_conv2d_gradcheck(modulated: bool, with_bias: bool) -> None:
    gen = _rng(5)
    f64 = {"dtype": torch.float64, "generator": gen}
    # Small, with groups and deform groups: every backward recomputes the torch implementation.
    x = torch.rand(2, 4, 3, 3, **f64).requires_grad_()
    weight = torch.rand(4, 2, 2, 2, **f64).requires_grad_()  # groups = 2
    offset = (torch.rand(2, 2 * 2 * 4, 4, 4, **f64) * 3 - 1.5).requires_grad_()  # 2 deform groups
    mask = torch.rand(2, 2 * 4, 4, 4, **f64).requires_grad_() if modulated else None
    bias = torch.rand(4, **f64).requires_grad_() if with_bias else None
    inputs = [t for t in (x, offset, weight, bias, mask) if t is not None]

    def run(*args: torch.Tensor) -> torch.Tensor:
        values = iter(args)
        x_, offset_, weight_ = next(values), next(values), next(values)
        bias_ = next(values) if with_bias else None
        mask_ = next(values) if modulated else None
        return ortops.torch.deform_conv2d(x_, offset_, weight_, bias_, padding=1, mask=mask_)

    torch.autograd.gradcheck(run, tuple(inputs))


def test_deform_conv2d_backward_matches_torchvision() -> None:
    gen = _rng(6)
    x = torch.rand(2, 8, 12, 11, generator=gen, requires_grad=True)
    weight = torch.rand(16, 4, 3, 3, generator=gen, requires_grad=True)
    offset = (torch.rand(2, 2 * 2 * 9, 6, 6, generator=gen) * 4 - 2).requires_grad_()
    mask = torch.rand(2, 2 * 9, 6, 6, generator=gen, requires_grad=True)
    bias = torch.rand(16, generator=gen, requires_grad=True)
    inputs = (x, offset, weight, bias, mask)
    grad = torch.rand(2, 16, 6, 6, generator=gen)
    kwargs = {"stride": 2, "padding": 1, "dilation": 1}
    ours = torch.autograd.grad(ortops.torch.deform_conv2d(x, offset, weight, bias, mask=mask, **kwargs), inputs, grad)
    theirs_out = torchvision.ops.deform_conv2d(x, offset, weight, bias, mask=mask, **kwargs)
    theirs = torch.autograd.grad(theirs_out, inputs, grad)
    for name, a, b in zip(("input", "offset", "weight", "bias", "mask"), ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("mode", ["top", "bottom", "left", "right"])
def test_corner_pool_gradient_goes_to_the_running_maximum(mode: str) -> None:
    x = torch.randperm(2 * 3 * 5 * 4, generator=_rng(7)).reshape(2, 3, 5, 4).double().requires_grad_()  # no ties
    torch.autograd.gradcheck(lambda t: ortops.torch.corner_pool(t, mode), (x,))
    dim = 2 if mode in ("top", "bottom") else 3
    flip = mode in ("top", "left")
    grad = torch.rand(2, 3, 5, 4, generator=_rng(8), dtype=torch.float64)
    (ours,) = torch.autograd.grad(ortops.torch.corner_pool(x, mode), x, grad)
    source = x.flip(dim) if flip else x
    reference = torch.cummax(source, dim).values
    (theirs,) = torch.autograd.grad(reference.flip(dim) if flip else reference, x, grad)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [0, -1])
def test_cumulative_gradients_are_torchs(op: str, dim: int) -> None:
    x = torch.randperm(4 * 6, generator=_rng(9)).reshape(4, 6).double().requires_grad_()
    ours = getattr(ortops.torch, op)
    torch.autograd.gradcheck(lambda t: ours(t, dim)[0], (x,))
    grad = torch.rand(4, 6, generator=_rng(10), dtype=torch.float64)
    (got,) = torch.autograd.grad(ours(x, dim)[0], x, grad)
    (want,) = torch.autograd.grad(getattr(torch, op)(x, dim)[0], x, grad)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_group_norm_gradients_are_torchs() -> None:
    gen = _rng(11)
    x = torch.rand(2, 6, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(6, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.rand(6, generator=gen, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda *t: ortops.torch.group_norm(t[0], 3, t[1], t[2]), (x, weight, bias))
    grad = torch.rand(2, 6, 4, 3, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(ortops.torch.group_norm(x, 3, weight, bias), (x, weight, bias), grad)
    want = torch.autograd.grad(torch.nn.functional.group_norm(x, 3, weight, bias), (x, weight, bias), grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_matrix_inverse_gradients_are_torchs() -> None:
    gen = _rng(12)
    x = torch.rand(3, 4, 4, generator=gen, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64)
    x.requires_grad_()
    torch.autograd.gradcheck(ortops.torch.matrix_inverse, (x,))
    grad = torch.rand(3, 4, 4, generator=gen, dtype=torch.float64)
    (got,) = torch.autograd.grad(ortops.torch.matrix_inverse(x), x, grad)
    (want,) = torch.autograd.grad(torch.linalg.inv(x), x, grad)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_multi_scale_deformable_attention_gradcheck() -> None:
    gen = _rng(13)
    f64 = {"dtype": torch.float64, "generator": gen}
    shapes = torch.tensor([[4, 5], [2, 3], [1, 1]])
    starts = torch.tensor([0, 20, 26])
    value = torch.rand(2, 27, 2, 3, **f64).requires_grad_()
    # Inside the maps and up to a pixel outside, where padding takes part.
    locations = (torch.rand(2, 4, 2, 3, 2, 2, **f64) * 1.4 - 0.2).requires_grad_()
    weights = torch.rand(2, 4, 2, 3, 2, **f64).requires_grad_()
    torch.autograd.gradcheck(
        lambda v, loc, w: ortops.torch.multi_scale_deformable_attention(v, shapes, starts, loc, w),
        (value, locations, weights),
    )
    # The spatial shapes and start index are integers: no gradient.
    out = ortops.torch.multi_scale_deformable_attention(value, shapes, starts, locations, weights)
    out.sum().backward()
    assert all(t.grad is not None for t in (value, locations, weights))


def test_only_differentiable_inputs_get_gradients() -> None:
    x = torch.rand(1, 2, 6, 6, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 1, 1, 4, 4]], dtype=torch.float64, requires_grad=True)
    ortops.torch.roi_align(x, rois, 2).sum().backward()
    assert x.grad is not None and rois.grad is None  # as torchvision: rois get no gradient


def test_soft_nms_says_it_has_no_gradient() -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11]], requires_grad=True)
    scores = torch.tensor([0.9, 0.8], requires_grad=True)
    dets, _ = ortops.torch.soft_nms(boxes, scores)
    with pytest.raises(RuntimeError, match=r"^ortops\.soft_nms: no gradient"):
        dets.sum().backward()
