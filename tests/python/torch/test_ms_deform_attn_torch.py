"""ortops.torch.multi_scale_deformable_attention (eager, gradients, both exporters, a whole
deformable-attention encoder layer in ONNX Runtime) against mmcv's composition of one
torch.nn.functional.grid_sample per level, written out here."""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import ortops
import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

# The composition samples each level with grid_sample (its own unnormalisation of 2 loc - 1)
# and sums L * P weighted samples in another order; float32 differs by rounding only.
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}
LEVELS = ((12, 10), (6, 5), (3, 3))


def grid_sample_composition(
    value: torch.Tensor, spatial_shapes: torch.Tensor, locations: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """mmcv's multi_scale_deformable_attn_pytorch: one bilinear, zeros-padded grid_sample
    (align_corners=False) per level on [B * heads, D, H_l, W_l], then the weighted sum."""
    batch, _, heads, dim = value.shape
    _, queries, _, levels, points, _ = locations.shape
    sizes = [(int(h), int(w)) for h, w in spatial_shapes]
    per_level = value.split([h * w for h, w in sizes], dim=1)
    samples = []
    for level, (h, w) in enumerate(sizes):
        maps = per_level[level].flatten(2).transpose(1, 2).reshape(batch * heads, dim, h, w)
        grid = (2 * locations[:, :, :, level] - 1).transpose(1, 2).flatten(0, 1)
        samples.append(torch.nn.functional.grid_sample(maps, grid, "bilinear", "zeros", align_corners=False))
    weights = weights.transpose(1, 2).reshape(batch * heads, 1, queries, levels * points)
    out = (torch.stack(samples, dim=-2).flatten(-2) * weights).sum(-1).view(batch, heads * dim, queries)
    return out.transpose(1, 2).contiguous()


def level_inputs(levels: tuple[tuple[int, int], ...] = LEVELS) -> tuple[torch.Tensor, torch.Tensor]:
    shapes = torch.tensor(levels, dtype=torch.int64)
    areas = shapes.prod(1)
    return shapes, areas.cumsum(0) - areas


def case(
    dtype: torch.dtype, seed: int = 0, batch: int = 2, queries: int = 11, heads: int = 4, dim: int = 8, points: int = 3
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    shapes, starts = level_inputs()
    keys = int(shapes.prod(1).sum())
    value = torch.randn(batch, keys, heads, dim, generator=g, dtype=dtype)
    locations = torch.rand(batch, queries, heads, len(LEVELS), points, 2, generator=g, dtype=dtype) * 1.3 - 0.15
    weights = torch.rand(batch, queries, heads, len(LEVELS), points, generator=g, dtype=dtype)
    return value, shapes, starts, locations, weights


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [8, 32, 7])
def test_eager_matches_the_grid_sample_composition(dtype: torch.dtype, dim: int) -> None:
    value, shapes, starts, locations, weights = case(dtype, seed=dim, dim=dim)
    got = ortops.torch.multi_scale_deformable_attention(value, shapes, starts, locations, weights)
    expected = grid_sample_composition(value, shapes, locations, weights)
    assert got.dtype == dtype and got.shape == (2, 11, 4 * dim)
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])


def test_torch_implementation_matches_the_composition() -> None:
    """The gather-based torch implementation (other devices, gradients) on its own."""
    from ortops.torch.ms_deform_attn import _reference

    value, shapes, starts, locations, weights = case(torch.float64, seed=3)
    torch.testing.assert_close(
        _reference(value, shapes, starts, locations, weights, []),
        grid_sample_composition(value, shapes, locations, weights),
        **TOLERANCE[torch.float64],
    )


def test_locations_and_weights_take_the_value_dtype() -> None:
    """As mmcv's function: float32 locations and weights with float64 values (mixed precision)."""
    value, shapes, starts, locations, weights = case(torch.float64, seed=4)
    got = ortops.torch.multi_scale_deformable_attention(value, shapes, starts, locations.float(), weights.float())
    assert got.dtype == torch.float64
    expected = grid_sample_composition(value, shapes, locations.float().double(), weights.float().double())
    torch.testing.assert_close(got, expected, **TOLERANCE[torch.float64])


def test_non_finite_locations_contribute_nothing() -> None:
    value, shapes, starts, locations, weights = case(torch.float64, seed=5)
    bad = locations.clone()
    bad[0, 0, 0, 0, 0, 0] = math.nan
    bad[1, 2, 1, 2, 1, 1] = math.inf
    got = ortops.torch.multi_scale_deformable_attention(value, shapes, starts, bad, weights)
    dropped = weights.clone()
    dropped[0, 0, 0, 0, 0] = 0
    dropped[1, 2, 1, 2, 1] = 0
    torch.testing.assert_close(got, grid_sample_composition(value, shapes, locations, dropped))
    # The gradient (the torch implementation) is finite too, and zero for those points.
    bad.requires_grad_()
    ortops.torch.multi_scale_deformable_attention(value, shapes, starts, bad, weights).sum().backward()
    assert torch.isfinite(bad.grad).all() and (bad.grad[0, 0, 0, 0, 0] == 0).all()


def test_gradients_match_the_composition() -> None:
    value, shapes, starts, locations, weights = case(torch.float64, seed=6)
    inputs = [t.clone().requires_grad_() for t in (value, locations, weights)]
    grad = torch.rand(2, 11, 32, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    out = ortops.torch.multi_scale_deformable_attention(inputs[0], shapes, starts, inputs[1], inputs[2])
    ours = torch.autograd.grad(out, inputs, grad)
    theirs_inputs = [t.clone().requires_grad_() for t in (value, locations, weights)]
    theirs_out = grid_sample_composition(theirs_inputs[0], shapes, theirs_inputs[1], theirs_inputs[2])
    theirs = torch.autograd.grad(theirs_out, theirs_inputs, grad)
    for name, a, b in zip(("value", "sampling_locations", "attention_weights"), ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=lambda m, name=name: f"{name}: {m}")


def test_inconsistent_levels_are_an_error() -> None:
    value, shapes, starts, locations, weights = case(torch.float32)
    with pytest.raises(ValueError, match=r"^ortops\.multi_scale_deformable_attention: input 'value_level_start_index'"):
        ortops.torch.multi_scale_deformable_attention(value, shapes, starts + 1, locations, weights)
    with pytest.raises(ValueError, match=r"spatial_shapes is int32, but .* takes int64"):
        ortops.torch.multi_scale_deformable_attention(value, shapes.int(), starts, locations, weights)


class Attention(torch.nn.Module):
    def __init__(self, points_per_level: Sequence[int] = ()) -> None:
        super().__init__()
        self.points_per_level = list(points_per_level)

    def forward(
        self,
        value: torch.Tensor,
        shapes: torch.Tensor,
        starts: torch.Tensor,
        locations: torch.Tensor,
        weights: torch.Tensor,
    ) -> torch.Tensor:
        out = ortops.torch.multi_scale_deformable_attention(
            value, shapes, starts, locations, weights, self.points_per_level
        )
        return out * 2


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip(exporter: str) -> None:
    args = case(torch.float32)
    model = export(Attention(), args, exporter, dynamic_dims=[{0: "b"}, None, None, {0: "b", 1: "q"}, {0: "b", 1: "q"}])
    assert custom_nodes(model) == ["ortops::MultiScaleDeformableAttention"]
    other = case(torch.float32, seed=8, batch=3, queries=5)
    (got,) = run_onnx(model, other)
    np.testing.assert_allclose(got, Attention()(*other).numpy(), **TOLERANCE[torch.float32])


class DeformableEncoderLayer(torch.nn.Module):
    """Deformable DETR's multi-scale deformable self-attention (mmcv's MultiScaleDeformableAttention,
    batch first): projections for the values, the sampling offsets and the attention weights,
    a softmax over the levels' points, locations = reference points + offsets / (W_l, H_l),
    the op, and the output projection with a residual."""

    def __init__(self, embed: int = 32, heads: int = 4, levels: int = 3, points: int = 2) -> None:
        super().__init__()
        self.heads, self.levels, self.points = heads, levels, points
        self.value_proj = torch.nn.Linear(embed, embed)
        self.sampling_offsets = torch.nn.Linear(embed, heads * levels * points * 2)
        self.attention_weights = torch.nn.Linear(embed, heads * levels * points)
        self.output_proj = torch.nn.Linear(embed, embed)
        with torch.no_grad():  # offsets of a few pixels, as after training
            self.sampling_offsets.weight.mul_(4)
            self.sampling_offsets.bias.uniform_(-2, 2)
        # (value, spatial_shapes, level_start_index, locations, weights) -> [B, Q, embed]
        self.attend = ortops.torch.multi_scale_deformable_attention

    def forward(
        self,
        query: torch.Tensor,
        reference_points: torch.Tensor,
        spatial_shapes: torch.Tensor,
        level_start_index: torch.Tensor,
    ) -> torch.Tensor:
        batch, queries, embed = query.shape
        keys = query.shape[1]
        value = self.value_proj(query).view(batch, keys, self.heads, embed // self.heads)
        offsets = self.sampling_offsets(query).view(batch, queries, self.heads, self.levels, self.points, 2)
        weights = self.attention_weights(query).view(batch, queries, self.heads, self.levels * self.points)
        weights = weights.softmax(-1).view(batch, queries, self.heads, self.levels, self.points)
        normaliser = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1).to(query.dtype)
        locations = reference_points[:, :, None, :, None, :] + offsets / normaliser[None, None, None, :, None, :]
        out = self.attend(value, spatial_shapes, level_start_index, locations, weights)
        return self.output_proj(out) + query


def encoder_inputs(batch: int = 2, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Queries = keys = every pixel of every level; each query's reference point is its pixel
    centre, the same normalised point on every level (as Deformable DETR's encoder)."""
    shapes, starts = level_inputs()
    centres = []
    for h, w in LEVELS:
        y, x = torch.meshgrid((torch.arange(h) + 0.5) / h, (torch.arange(w) + 0.5) / w, indexing="ij")
        centres.append(torch.stack([x.flatten(), y.flatten()], -1))
    reference = torch.cat(centres)[None, :, None].expand(batch, -1, len(LEVELS), 2).contiguous()
    query = torch.randn(batch, reference.shape[1], 32, generator=torch.Generator().manual_seed(seed))
    return query, reference, shapes, starts


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_encoder_layer_exports_and_runs_in_onnx_runtime(exporter: str) -> None:
    torch.manual_seed(0)
    layer = DeformableEncoderLayer().eval()
    args = encoder_inputs()
    model = export(layer, args, exporter, dynamic_dims=[{0: "b"}, {0: "b"}, None, None])
    assert custom_nodes(model) == ["ortops::MultiScaleDeformableAttention"]
    other = encoder_inputs(batch=3, seed=1)
    (got,) = run_onnx(model, other)
    with torch.no_grad():
        expected = layer(*other)
    # Sampling locations go through a projection and a division first: float32 rounding of
    # those moves the bilinear weights slightly.
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)
    # And the layer as mmcv runs it on the CPU: the grid_sample composition.
    layer.attend = lambda v, s, i, loc, w: grid_sample_composition(v, s, loc, w)
    with torch.no_grad():
        composed = layer(*other)
    np.testing.assert_allclose(got, composed.numpy(), rtol=1e-4, atol=1e-4)


class _MmdeployFunction(torch.autograd.Function):
    """What mmdeploy's symbolic rewrite of mmcv's MultiScaleDeformableAttnFunction emits
    (mmdeploy/mmcv/ops/multi_scale_deform_attn.py), for a TorchScript export."""

    @staticmethod
    def forward(ctx, value, shapes, starts, locations, weights, im2col_step):  # noqa: ANN001, ANN205
        return grid_sample_composition(value, shapes, locations, weights)

    @staticmethod
    def symbolic(g, value, shapes, starts, locations, weights, im2col_step):  # noqa: ANN001, ANN205
        return g.op(
            "mmdeploy::MMCVMultiScaleDeformableAttention",
            value,
            shapes,
            starts,
            locations,
            weights,
            im2col_step_i=im2col_step,
        )


def test_a_file_exported_as_mmdeploy_exports_it_runs() -> None:
    class Model(torch.nn.Module):
        def forward(self, value, shapes, starts, locations, weights):  # noqa: ANN001, ANN202
            return _MmdeployFunction.apply(value, shapes, starts, locations, weights, 64)

    args = case(torch.float32, seed=9)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = ["value", "value_spatial_shapes", "level_start_index", "sampling_locations", "attention_weights"]
        torch.onnx.export(
            Model(), args, buffer, dynamo=False, opset_version=11, input_names=names, output_names=["output"]
        )
    model = onnx.load_from_string(buffer.getvalue())
    (node,) = [n for n in model.graph.node if n.domain == "mmdeploy"]
    assert node.op_type == "MMCVMultiScaleDeformableAttention"
    assert [(a.name, a.type) for a in node.attribute] == [("im2col_step", onnx.AttributeProto.INT)]
    session = ort.InferenceSession(buffer.getvalue(), ortops.session_options(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    (got,) = session.run(None, feeds)
    np.testing.assert_allclose(got, Model()(*args).numpy(), **TOLERANCE[torch.float32])


def test_points_per_level_matches_the_composition_per_level() -> None:
    """D-FINE's [3, 6, 3]: the kernel and the torch implementation against grid_sample run on
    each level's run of points alone, summed."""
    from ortops.torch.ms_deform_attn import _reference

    value, shapes, starts, _, _ = case(torch.float64, seed=4)
    points_per_level = [3, 6, 3][: len(shapes)] + [2] * max(0, len(shapes) - 3)
    generator = torch.Generator().manual_seed(4)
    batch, queries, heads = 2, 11, value.shape[2]
    total = sum(points_per_level)
    locations = torch.rand(batch, queries, heads, total, 2, generator=generator, dtype=torch.float64) * 1.2 - 0.1
    weights = torch.rand(batch, queries, heads, total, generator=generator, dtype=torch.float64)
    expected = torch.zeros(batch, queries, value.shape[2] * value.shape[3], dtype=torch.float64)
    first = 0
    for level, count in enumerate(points_per_level):
        rows = slice(int(starts[level]), int(starts[level]) + int(shapes[level].prod()))
        run = slice(first, first + count)
        expected += grid_sample_composition(
            value[:, rows], shapes[level : level + 1], locations[:, :, :, None, run], weights[:, :, :, None, run]
        )
        first += count
    got = ortops.torch.multi_scale_deformable_attention(value, shapes, starts, locations, weights, points_per_level)
    torch.testing.assert_close(got, expected, **TOLERANCE[torch.float64])
    torch.testing.assert_close(
        _reference(value, shapes, starts, locations, weights, points_per_level), expected, **TOLERANCE[torch.float64]
    )


def ragged_case(seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    shapes = torch.tensor([[8, 8], [4, 4], [2, 2]])
    starts = torch.tensor([0, 64, 80])
    value = torch.rand(2, 84, 2, 8, generator=generator)
    locations = torch.rand(2, 10, 2, 12, 2, generator=generator)
    weights = torch.rand(2, 10, 2, 12, generator=generator)
    return value, shapes, starts, locations, weights


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_points_per_level_export_roundtrip(exporter: str) -> None:
    args = ragged_case()
    model = export(Attention([3, 6, 3]), args, exporter)
    assert custom_nodes(model) == ["ortops::MultiScaleDeformableAttention"]
    (got,) = run_onnx(model, args)
    np.testing.assert_allclose(got, Attention([3, 6, 3])(*args).numpy(), **TOLERANCE[torch.float32])
