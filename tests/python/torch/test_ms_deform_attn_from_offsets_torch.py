"""ortops.torch.multi_scale_deformable_attention_from_offsets (eager, gradients, both exporters,
Deformable DETR's encoder layer with the op) against multi_scale_deformable_attention fed the
locations torch computes from the same reference points and offsets."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch
from test_ms_deform_attn_torch import (
    LEVELS,
    TOLERANCE,
    DeformableEncoderLayer,
    encoder_inputs,
    grid_sample_composition,
    level_inputs,
)

import ortops.torch
from ortops.torch.ms_deform_attn import _reference_from_offsets

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

NODE = "ortops::MultiScaleDeformableAttentionFromOffsets"


def case(
    dtype: torch.dtype, seed: int = 0, batch: int = 2, queries: int = 11, heads: int = 4, dim: int = 8, points: int = 3
) -> tuple[torch.Tensor, ...]:
    """(value, spatial_shapes, level_start_index, reference_points, sampling_offsets,
    attention_weights): offsets of up to 4 pixels around reference points in [0, 1], so that
    some points fall outside their level and some of their neighbours off its edges."""
    g = torch.Generator().manual_seed(seed)
    shapes, starts = level_inputs()
    keys = int(shapes.prod(1).sum())
    value = torch.randn(batch, keys, heads, dim, generator=g, dtype=dtype)
    reference = torch.rand(batch, queries, len(LEVELS), 2, generator=g, dtype=dtype)
    offsets = (torch.rand(batch, queries, heads, len(LEVELS), points, 2, generator=g, dtype=dtype) * 2 - 1) * 4
    weights = torch.rand(batch, queries, heads, len(LEVELS), points, generator=g, dtype=dtype)
    return value, shapes, starts, reference, offsets, weights


def locations(
    shapes: torch.Tensor, reference: torch.Tensor, offsets: torch.Tensor, points_per_level: Sequence[int] = ()
) -> torch.Tensor:
    """The locations as Deformable DETR's encoder computes them (and the node, by its docs):
    the reference point of each point's level plus its offset divided by (W_l, H_l)."""
    normaliser = torch.stack([shapes[:, 1], shapes[:, 0]], -1).to(offsets.dtype)  # [L, 2]
    if not points_per_level:
        return reference[:, :, None, :, None, :] + offsets / normaliser[None, None, None, :, None, :]
    level = torch.repeat_interleave(torch.arange(len(points_per_level)), torch.tensor(points_per_level))
    return reference[:, :, None, level, :] + offsets / normaliser[level]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [8, 7])
def test_eager_is_the_locations_op_at_torchs_locations(dtype: torch.dtype, dim: int) -> None:
    """The kernel divides, then adds, in the data's type, as torch does here: the same
    locations, so the same bits as the locations op on them."""
    value, shapes, starts, reference, offsets, weights = case(dtype, seed=dim, dim=dim)
    got = ortops.torch.multi_scale_deformable_attention_from_offsets(value, shapes, starts, reference, offsets, weights)
    assert got.dtype == dtype and got.shape == (2, 11, 4 * dim)
    at = locations(shapes, reference, offsets)
    expected = ortops.torch.multi_scale_deformable_attention(value, shapes, starts, at, weights)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    # And mmcv's composition of grid_sample per level.
    torch.testing.assert_close(got, grid_sample_composition(value, shapes, at, weights), **TOLERANCE[dtype])


def test_torch_implementation_matches_the_kernel() -> None:
    """The torch implementation (other devices, gradients) on its own."""
    value, shapes, starts, reference, offsets, weights = case(torch.float64, seed=3)
    got = _reference_from_offsets(value, shapes, starts, reference, offsets, weights, [])
    expected = ortops.torch.multi_scale_deformable_attention_from_offsets(
        value, shapes, starts, reference, offsets, weights
    )
    torch.testing.assert_close(got, expected, **TOLERANCE[torch.float64])


def test_inputs_take_the_value_dtype() -> None:
    """As the locations op: float32 points, offsets and weights with float64 values."""
    value, shapes, starts, reference, offsets, weights = case(torch.float64, seed=4)
    reference, offsets, weights = reference.float(), offsets.float(), weights.float()
    got = ortops.torch.multi_scale_deformable_attention_from_offsets(value, shapes, starts, reference, offsets, weights)
    assert got.dtype == torch.float64
    expected = ortops.torch.multi_scale_deformable_attention_from_offsets(
        value, shapes, starts, reference.double(), offsets.double(), weights.double()
    )
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_gradcheck() -> None:
    """Every differentiable input, in float64, inside the maps and a few pixels outside."""
    g = torch.Generator().manual_seed(13)
    f64 = {"dtype": torch.float64, "generator": g}
    shapes = torch.tensor([[4, 5], [2, 3], [1, 1]])
    starts = torch.tensor([0, 20, 26])
    value = torch.rand(2, 27, 2, 3, **f64).requires_grad_()
    reference = torch.rand(2, 4, 3, 2, **f64).requires_grad_()
    offsets = ((torch.rand(2, 4, 2, 3, 2, 2, **f64) * 2 - 1) * 1.5).requires_grad_()
    weights = torch.rand(2, 4, 2, 3, 2, **f64).requires_grad_()

    def attend(*inputs: torch.Tensor) -> torch.Tensor:
        v, ref, off, w = inputs
        return ortops.torch.multi_scale_deformable_attention_from_offsets(v, shapes, starts, ref, off, w)

    torch.autograd.gradcheck(attend, (value, reference, offsets, weights))


def test_gradients_match_torch_locations_and_the_composition() -> None:
    """The gradients reach the reference points and offsets through the locations, as through
    the model's own Div and Add followed by mmcv's composition."""
    value, shapes, starts, reference, offsets, weights = case(torch.float64, seed=6)
    grad = torch.rand(2, 11, 32, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    ours_inputs = [t.clone().requires_grad_() for t in (value, reference, offsets, weights)]
    out = ortops.torch.multi_scale_deformable_attention_from_offsets(ours_inputs[0], shapes, starts, *ours_inputs[1:])
    ours = torch.autograd.grad(out, ours_inputs, grad)
    theirs_inputs = [t.clone().requires_grad_() for t in (value, reference, offsets, weights)]
    v, ref, off, w = theirs_inputs
    theirs_out = grid_sample_composition(v, shapes, locations(shapes, ref, off), w)
    theirs = torch.autograd.grad(theirs_out, theirs_inputs, grad)
    names = ("value", "reference_points", "sampling_offsets", "attention_weights")
    for name, a, b in zip(names, ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=lambda m, name=name: f"{name}: {m}")
    # The spatial shapes and start index are integers: no gradient.
    assert all(g is not None for g in ours)


def test_inconsistent_levels_are_an_error() -> None:
    value, shapes, starts, reference, offsets, weights = case(torch.float32)
    prefix = r"^ortops\.multi_scale_deformable_attention_from_offsets: "
    with pytest.raises(ValueError, match=prefix + "input 'value_level_start_index'"):
        ortops.torch.multi_scale_deformable_attention_from_offsets(
            value, shapes, starts + 1, reference, offsets, weights
        )
    with pytest.raises(ValueError, match=prefix + r"spatial_shapes is int32, but .* takes int64"):
        ortops.torch.multi_scale_deformable_attention_from_offsets(
            value, shapes.int(), starts, reference, offsets, weights
        )


def ragged_case(seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    """D-FINE's [3, 6, 3] points per level."""
    g = torch.Generator().manual_seed(seed)
    shapes = torch.tensor([[8, 8], [4, 4], [2, 2]])
    starts = torch.tensor([0, 64, 80])
    value = torch.rand(2, 84, 2, 8, generator=g, dtype=dtype)
    reference = torch.rand(2, 10, 3, 2, generator=g, dtype=dtype)
    offsets = (torch.rand(2, 10, 2, 12, 2, generator=g, dtype=dtype) * 2 - 1) * 3
    weights = torch.rand(2, 10, 2, 12, generator=g, dtype=dtype)
    return value, shapes, starts, reference, offsets, weights


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_points_per_level_is_the_locations_op_at_torchs_locations(dtype: torch.dtype) -> None:
    value, shapes, starts, reference, offsets, weights = ragged_case(seed=1, dtype=dtype)
    per_level = [3, 6, 3]
    got = ortops.torch.multi_scale_deformable_attention_from_offsets(
        value, shapes, starts, reference, offsets, weights, per_level
    )
    at = locations(shapes, reference, offsets, per_level)
    expected = ortops.torch.multi_scale_deformable_attention(value, shapes, starts, at, weights, per_level)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    reference_result = _reference_from_offsets(value, shapes, starts, reference, offsets, weights, per_level)
    torch.testing.assert_close(reference_result, got, **TOLERANCE[dtype])


def test_points_per_level_gradients_match_torch_locations() -> None:
    value, shapes, starts, reference, offsets, weights = ragged_case(seed=2, dtype=torch.float64)
    per_level = [3, 6, 3]
    grad = torch.rand(2, 10, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ours_inputs = [t.clone().requires_grad_() for t in (value, reference, offsets, weights)]
    v, ref, off, w = ours_inputs
    out = ortops.torch.multi_scale_deformable_attention_from_offsets(v, shapes, starts, ref, off, w, per_level)
    ours = torch.autograd.grad(out, ours_inputs, grad)
    theirs_inputs = [t.clone().requires_grad_() for t in (value, reference, offsets, weights)]
    v, ref, off, w = theirs_inputs
    at = locations(shapes, ref, off, per_level)
    theirs_out = ortops.torch.multi_scale_deformable_attention(v, shapes, starts, at, w, per_level)
    theirs = torch.autograd.grad(theirs_out, theirs_inputs, grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


class Attention(torch.nn.Module):
    def __init__(self, points_per_level: Sequence[int] = ()) -> None:
        super().__init__()
        self.points_per_level = list(points_per_level)

    def forward(
        self,
        value: torch.Tensor,
        shapes: torch.Tensor,
        starts: torch.Tensor,
        reference: torch.Tensor,
        offsets: torch.Tensor,
        weights: torch.Tensor,
    ) -> torch.Tensor:
        out = ortops.torch.multi_scale_deformable_attention_from_offsets(
            value, shapes, starts, reference, offsets, weights, self.points_per_level
        )
        return out * 2


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_export_roundtrip(exporter: str) -> None:
    args = case(torch.float32)
    batch_queries = {0: "b", 1: "q"}
    dynamic = [{0: "b"}, None, None, batch_queries, batch_queries, batch_queries]
    model = export(Attention(), args, exporter, dynamic_dims=dynamic)
    assert custom_nodes(model) == [NODE]
    other = case(torch.float32, seed=8, batch=3, queries=5)
    (got,) = run_onnx(model, other)
    # The file runs the kernel the eager call ran: the same bits.
    np.testing.assert_array_equal(got, Attention()(*other).numpy())


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_points_per_level_export_roundtrip(exporter: str) -> None:
    args = ragged_case()
    model = export(Attention([3, 6, 3]), args, exporter)
    assert custom_nodes(model) == [NODE]
    (got,) = run_onnx(model, args)
    np.testing.assert_array_equal(got, Attention([3, 6, 3])(*args).numpy())


class FromOffsetsEncoderLayer(DeformableEncoderLayer):
    """The same layer with the reference points and offsets given to the op, in place of the
    locations computed in the model."""

    def forward(
        self,
        query: torch.Tensor,
        reference_points: torch.Tensor,
        spatial_shapes: torch.Tensor,
        level_start_index: torch.Tensor,
    ) -> torch.Tensor:
        batch, queries, embed = query.shape
        value = self.value_proj(query).view(batch, queries, self.heads, embed // self.heads)
        offsets = self.sampling_offsets(query).view(batch, queries, self.heads, self.levels, self.points, 2)
        weights = self.attention_weights(query).view(batch, queries, self.heads, self.levels * self.points)
        weights = weights.softmax(-1).view(batch, queries, self.heads, self.levels, self.points)
        out = ortops.torch.multi_scale_deformable_attention_from_offsets(
            value, spatial_shapes, level_start_index, reference_points, offsets, weights
        )
        return self.output_proj(out) + query


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_encoder_layer_exports_one_node_and_gives_the_locations_layers_result(exporter: str) -> None:
    torch.manual_seed(0)
    layer = FromOffsetsEncoderLayer().eval()
    locations_layer = DeformableEncoderLayer().eval()
    locations_layer.load_state_dict(layer.state_dict())
    model = export(layer, encoder_inputs(), exporter, dynamic_dims=[{0: "b"}, {0: "b"}, None, None])
    assert custom_nodes(model) == [NODE]
    other = encoder_inputs(batch=3, seed=1)
    (got,) = run_onnx(model, other)
    with torch.no_grad():
        eager = layer(*other)
        expected = locations_layer(*other)
    torch.testing.assert_close(eager, expected, rtol=0, atol=0)  # the same locations, the same bits
    # ONNX Runtime's MatMuls round the projections otherwise than torch's: the locations move
    # slightly, as in the locations op's encoder test.
    np.testing.assert_allclose(got, eager.numpy(), rtol=1e-4, atol=1e-4)
