"""``ortops optimize``'s deformable-attention rule: multi-scale deformable attention written as
real projects write it in PyTorch, exported by both exporters, fused into one
``ortops::MultiScaleDeformableAttention`` with ONNX Runtime's (or PyTorch's) outputs; the
blocks it cannot prove are left alone and reported."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from optimizing import (
    as_mmdeploy_grid_sampler,
    concat_form,
    emulated_device_library,
    first_output_with_library,
    stack_form,
)

import ortops
from ortops._optimize import optimize_with_report

pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")

RULE = ["deformable-attention"]


# --- the two forms, as the projects write them ------------------------------------------------


class StackAttention(torch.nn.Module):
    def __init__(self, shapes: list[tuple[int, int]], **options: object) -> None:
        super().__init__()
        self.shapes, self.options = shapes, options

    def forward(self, value, locations, weights):
        return stack_form(value, self.shapes, locations, weights, **self.options)


class ConcatAttention(torch.nn.Module):
    def __init__(self, shapes: list[tuple[int, int]], points: list[int], **options: object) -> None:
        super().__init__()
        self.shapes, self.points, self.options = shapes, points, options

    def forward(self, value, locations, weights):
        return concat_form(value, self.shapes, locations, weights, self.points, **self.options)


class FromFeatureMaps(torch.nn.Module):
    """HuggingFace's way: value flattened from feature maps of any size, the spatial shapes read
    from the maps (computed in the file: Shape, Gather, Mul), two layers sharing the value."""

    def __init__(self, heads: int, layers: int = 1) -> None:
        super().__init__()
        self.heads, self.layers = heads, layers

    def forward(self, f0, f1, f2, locations, weights):
        maps = [f0, f1, f2]
        shapes = [(m.shape[2], m.shape[3]) for m in maps]
        batch, channels = f0.shape[:2]
        value = torch.cat([m.flatten(2).transpose(1, 2) for m in maps], 1)
        value = value.view(batch, -1, self.heads, channels // self.heads)
        out = stack_form(value, shapes, locations, weights)
        for layer in range(1, self.layers):
            out = out + stack_form(value, shapes, locations * (1 - 0.1 * layer), weights)
        return out


class OffsetsAttention(torch.nn.Module):
    """Deformable DETR's encoder and mmcv's MultiScaleDeformableAttention: the locations are the
    reference points plus the offsets over each level's (W_l, H_l), which come from a tensor of
    the level shapes. ``reference_dtype`` float64: HuggingFace's reference points, whose sum is
    float64 (the file's grid too). ``swap``: a wrong normalizer, (H_l, W_l)."""

    def __init__(self, shapes: list[tuple[int, int]], reference_dtype=None, swap: bool = False) -> None:
        super().__init__()
        self.shapes, self.reference_dtype, self.swap = shapes, reference_dtype, swap

    def forward(self, value, reference_points, offsets, weights):
        spatial_shapes = torch.tensor(self.shapes)
        columns = (0, 1) if self.swap else (1, 0)
        normalizer = torch.stack([spatial_shapes[..., columns[0]], spatial_shapes[..., columns[1]]], -1)
        if self.reference_dtype is not None:
            reference_points = reference_points.to(self.reference_dtype)
        locations = reference_points[:, :, None, :, None, :] + offsets / normalizer[None, None, None, :, None, :]
        return stack_form(value, self.shapes, locations.to(value.dtype), weights)


class FromFeatureMapsWithOffsets(torch.nn.Module):
    """FromFeatureMaps with the locations from reference points and offsets, the normalizer read
    from the maps' sizes (computed from shapes in a dynamic file)."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads

    def forward(self, f0, f1, f2, reference_points, offsets, weights):
        maps = [f0, f1, f2]
        shapes = [(m.shape[2], m.shape[3]) for m in maps]
        batch, channels = f0.shape[:2]
        value = torch.cat([m.flatten(2).transpose(1, 2) for m in maps], 1)
        value = value.view(batch, -1, self.heads, channels // self.heads)
        normalizer = torch.stack([torch.stack([torch.tensor(w), torch.tensor(h)]) for h, w in shapes]).to(offsets)
        locations = reference_points[:, :, None, :, None, :] + offsets / normalizer[None, None, None, :, None, :]
        return stack_form(value, shapes, locations, weights)


# --- exporting and running ----------------------------------------------------------------------


def export(module, args, names, opset, dynamo=False, dynamic=None) -> onnx.ModelProto:
    if dynamo:
        shapes = None
        if dynamic:
            # One Dim per name: the same symbol in every input, as in a whole model's export.
            dims = {dim: torch.export.Dim(dim) for axes in dynamic.values() for dim in axes.values()}
            shapes = tuple({axis: dims[dim] for axis, dim in dynamic[name].items()} for name in names)
        program = torch.onnx.export(
            module, args, dynamo=True, opset_version=opset, input_names=names, dynamic_shapes=shapes, verbose=False
        )
        return program.model_proto
    buffer = io.BytesIO()
    torch.onnx.export(
        module, args, buffer, dynamo=False, opset_version=opset, input_names=names, dynamic_axes=dynamic or None
    )
    return onnx.load_from_string(buffer.getvalue())


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(
        model.SerializeToString(), ortops.session_options(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)[0]


def assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    """Within float32 rounding: the node sums levels and points in another order."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    scale = float(np.abs(expected).max()) or 1.0
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=2e-6 * scale)


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    return Counter(f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in model.graph.node)


def attention_inputs(rng, batch, queries, heads, channels, shapes, points, flat=False):
    """value, locations (inside and around the maps: some points fall outside) and weights."""
    keys = sum(h * w for h, w in shapes)
    levels = len(shapes)
    value = rng.normal(size=(batch, keys, heads, channels)).astype(np.float32)
    locations = rng.uniform(-0.1, 1.1, (batch, queries, heads, levels, points, 2)).astype(np.float32)
    weights = rng.uniform(0, 1, (batch, queries, heads, levels, points)).astype(np.float32)
    weights /= weights.sum((-1, -2), keepdims=True)
    if flat:
        locations = locations.reshape(batch, queries, heads, levels * points, 2)
        weights = weights.reshape(batch, queries, heads, levels * points)
    return value, locations, weights


NAMES = ["value", "locations", "weights"]
DYNAMIC = {"value": {0: "batch"}, "locations": {0: "batch", 1: "queries"}, "weights": {0: "batch", 1: "queries"}}

CASES = [
    # form, exporter, opset, dynamic batch and queries, shapes, heads, channels, points, queries
    ("stack", "torchscript", 16, False, [(16, 16), (8, 8), (4, 4)], 2, 8, 4, 50),
    ("stack", "torchscript", 17, True, [(16, 16), (8, 8), (4, 4), (2, 2)], 8, 32, 4, 300),
    ("stack", "dynamo", 18, False, [(16, 16), (8, 8), (4, 4)], 4, 16, 4, 60),
    ("stack", "dynamo", 20, True, [(8, 8), (4, 4), (2, 2)], 2, 8, 4, 50),
    ("concat", "torchscript", 16, False, [(16, 16), (8, 8), (4, 4)], 8, 32, 4, 300),
    ("concat", "torchscript", 17, True, [(8, 8), (4, 4), (2, 2)], 4, 8, 4, 50),
    ("concat", "dynamo", 20, False, [(16, 16), (8, 8), (4, 4)], 2, 16, 4, 50),
]


@pytest.mark.parametrize(
    ("form", "exporter", "opset", "dynamic", "shapes", "heads", "channels", "points", "queries"),
    CASES,
    ids=[f"{c[0]}-{c[1]}-{c[2]}{'-dynamic' if c[3] else ''}" for c in CASES],
)
def test_exported_attention_becomes_one_ortops_node(
    form, exporter, opset, dynamic, shapes, heads, channels, points, queries
) -> None:
    rng = np.random.default_rng(opset)
    flat = form == "concat"
    inputs = attention_inputs(rng, 2, queries, heads, channels, shapes, points, flat)
    module = StackAttention(shapes) if form == "stack" else ConcatAttention(shapes, [points] * len(shapes))
    args = tuple(torch.from_numpy(a) for a in inputs)
    model = export(module, args, NAMES, opset, exporter == "dynamo", DYNAMIC if dynamic else None)
    assert op_counts(model)["ai.onnx::GridSample"] == len(shapes)
    rewritten, report = optimize_with_report(model, RULE)
    counts = op_counts(rewritten)
    assert counts["ortops::MultiScaleDeformableAttention"] == 1, report.lines()
    assert not {"ai.onnx::GridSample", "ai.onnx::ReduceSum", "ai.onnx::Split"} & set(counts)
    assert len(report.rewrites) == 1 and not report.near_misses
    feeds = dict(zip(NAMES, inputs))
    expected = run(model, feeds)
    assert_close(run(rewritten, feeds), expected)
    with torch.no_grad():
        assert_close(run(rewritten, feeds), module(*args).numpy())
    if dynamic:  # another batch and query count
        other = dict(zip(NAMES, attention_inputs(rng, 1, 7, heads, channels, shapes, points, flat)))
        assert_close(run(rewritten, other), run(model, other))


def offsets_inputs(rng, batch, queries, heads, channels, shapes, points):
    """value, reference points [N, Lq, L, 2] around the maps, offsets of a few pixels, weights."""
    value, _, weights = attention_inputs(rng, batch, queries, heads, channels, shapes, points)
    reference = rng.uniform(-0.1, 1.1, (batch, queries, len(shapes), 2)).astype(np.float32)
    offsets = rng.normal(0, 2, (batch, queries, heads, len(shapes), points, 2)).astype(np.float32)
    return value, reference, offsets, weights


OFFSETS_NAMES = ["value", "reference_points", "offsets", "weights"]
OFFSETS_DYNAMIC = {
    "value": {0: "batch"},
    "reference_points": {0: "batch", 1: "queries"},
    "offsets": {0: "batch", 1: "queries"},
    "weights": {0: "batch", 1: "queries"},
}
FROM_OFFSETS = "ortops::MultiScaleDeformableAttentionFromOffsets"


@pytest.mark.parametrize(
    ("exporter", "opset", "dynamic"),
    [("torchscript", 16, False), ("torchscript", 17, True), ("dynamo", 18, False), ("dynamo", 20, True)],
)
def test_locations_from_reference_points_and_offsets_become_the_offsets_node(
    exporter: str, opset: int, dynamic: bool
) -> None:
    """The Div and the Add that make the locations go into the node too (they broadcast over every
    sample and took longer than the attention)."""
    shapes = [(16, 12), (8, 6), (4, 3)]  # H != W: a swapped normalizer would show
    rng = np.random.default_rng(30 + opset)
    inputs = offsets_inputs(rng, 2, 40, 4, 8, shapes, 4)
    module = OffsetsAttention(shapes)
    args = tuple(torch.from_numpy(a) for a in inputs)
    model = export(module, args, OFFSETS_NAMES, opset, exporter == "dynamo", OFFSETS_DYNAMIC if dynamic else None)
    rewritten, report = optimize_with_report(model, RULE)
    counts = op_counts(rewritten)
    assert counts[FROM_OFFSETS] == 1 and "ortops::MultiScaleDeformableAttention" not in counts, report.lines()
    assert not {"ai.onnx::GridSample", "ai.onnx::Div", "ai.onnx::Add"} & set(counts), counts
    assert len(report.rewrites) == 1 and not report.near_misses
    replaced = {name.rsplit(" (", 1)[1].rstrip(")") for name in report.rewrites[0].replaced}  # "name (op)"
    assert {"Div", "Add", "GridSample"} <= replaced, report.lines()
    feeds = dict(zip(OFFSETS_NAMES, inputs))
    assert_close(run(rewritten, feeds), run(model, feeds))
    with torch.no_grad():
        assert_close(run(rewritten, feeds), module(*args).numpy())
    if dynamic:
        other = dict(zip(OFFSETS_NAMES, offsets_inputs(rng, 1, 7, 4, 8, shapes, 4)))
        assert_close(run(rewritten, other), run(model, other))


def test_float64_reference_points_are_rounded_to_float32_once() -> None:
    """As HuggingFace's file: float64 reference points, the scaled offsets cast to float64 and
    the sum in float64. The node takes the reference points cast to float32: each location within
    one float32 rounding of the file's."""
    shapes = [(16, 16), (8, 8), (4, 4)]
    rng = np.random.default_rng(33)
    inputs = offsets_inputs(rng, 1, 50, 4, 8, shapes, 4)
    module = OffsetsAttention(shapes, reference_dtype=torch.float64)
    args = tuple(torch.from_numpy(a) for a in inputs)
    model = export(module, args, OFFSETS_NAMES, 17)
    rewritten, report = optimize_with_report(model, RULE)
    assert op_counts(rewritten)[FROM_OFFSETS] == 1, report.lines()
    (node,) = [n for n in rewritten.graph.node if n.op_type == "MultiScaleDeformableAttentionFromOffsets"]
    cast = next(n for n in rewritten.graph.node if n.output[0] == node.input[3])
    assert cast.op_type == "Cast" and helper.get_attribute_value(cast.attribute[0]) == TensorProto.FLOAT
    with torch.no_grad():
        expected = module(*args).numpy()
    assert_close(run(rewritten, dict(zip(OFFSETS_NAMES, inputs))), expected)


def test_normalizer_computed_from_dynamic_map_sizes() -> None:
    rng = np.random.default_rng(34)
    heads, channels, points, queries = 4, 16, 4, 30
    sizes = [(8, 6), (4, 3), (2, 2)]
    maps = feature_maps(rng, 2, heads * channels, sizes)
    _, reference, offsets, weights = offsets_inputs(rng, 2, queries, heads, channels, sizes, points)
    names = ["f0", "f1", "f2", "reference_points", "offsets", "weights"]
    dynamic = {f"f{i}": {0: "n", 2: f"h{i}", 3: f"w{i}"} for i in range(3)}
    dynamic.update({name: {0: "n", 1: "q"} for name in names[3:]})
    module = FromFeatureMapsWithOffsets(heads)
    args = tuple(torch.from_numpy(a) for a in (*maps, reference, offsets, weights))
    model = export(module, args, names, 17, dynamic=dynamic)
    rewritten, report = optimize_with_report(model, RULE)
    assert op_counts(rewritten)[FROM_OFFSETS] == 1, report.lines()
    for sizes_now in (sizes, [(6, 10), (3, 5), (2, 3)]):  # other map sizes: the node reads them
        feeds = dict(zip(names, (*feature_maps(rng, 2, heads * channels, sizes_now), reference, offsets, weights)))
        assert_close(run(rewritten, feeds), run(model, feeds))


def feature_maps(rng, batch, channels, sizes):
    return [rng.normal(size=(batch, channels, h, w)).astype(np.float32) for h, w in sizes]


@pytest.mark.parametrize("simplified", [False, True], ids=["as-exported", "constant-folded"])
def test_dynamic_spatial_shapes_and_a_value_shared_by_two_layers(simplified: bool) -> None:
    """Sizes read from the feature maps (dynamic in the file), the value split reused by two
    attention blocks; also after onnxscript's optimizer folded what it could (as onnxslim and
    onnx-simplifier do: those are not installed here)."""
    rng = np.random.default_rng(5)
    heads, channels, points, queries = 4, 16, 4, 30
    sizes = [(8, 8), (4, 4), (2, 2)]
    maps = feature_maps(rng, 2, heads * channels, sizes)
    _, locations, weights = attention_inputs(rng, 2, queries, heads, channels, sizes, points)
    names = ["f0", "f1", "f2", "locations", "weights"]
    dynamic = {f"f{i}": {0: "n", 2: f"h{i}", 3: f"w{i}"} for i in range(3)}
    dynamic.update({"locations": {0: "n", 1: "q"}, "weights": {0: "n", 1: "q"}})
    module = FromFeatureMaps(heads, layers=2)
    args = tuple(torch.from_numpy(a) for a in (*maps, locations, weights))
    model = export(module, args, names, 17, dynamic=dynamic)
    if simplified:
        import onnxscript.optimizer

        model = onnxscript.optimizer.optimize(model)
    rewritten, report = optimize_with_report(model, RULE)
    assert op_counts(rewritten)["ortops::MultiScaleDeformableAttention"] == 2, report.lines()
    assert "ai.onnx::GridSample" not in op_counts(rewritten) and not report.near_misses
    for sizes_now in (sizes, [(6, 10), (3, 5), (2, 3)]):  # other map sizes: the rewrite reads them
        feeds = dict(zip(names, (*feature_maps(rng, 2, heads * channels, sizes_now), locations, weights)))
        assert_close(run(rewritten, feeds), run(model, feeds))


def grid_in_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """The stack form with its grid computed in float64 from float32 locations, as HuggingFace's
    Deformable DETR exports at opset 17 (TorchScript) have it: GridSample(float value, double
    grid), which ONNX Runtime has no kernel for. Made from the float32 export by casting the
    locations to double where the grid computation starts."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    doubled = []
    for node in graph.node:
        if node.op_type == "Mul" and "locations" in node.input:
            node.input[list(node.input).index("locations")] = "locations_f64"
            doubled.append(node)
    (mul,) = doubled
    sub = next(n for n in graph.node if n.op_type == "Sub" and mul.output[0] in n.input)
    for node in graph.node:  # the constants 2 and 1 become double
        if node.op_type == "Constant" and node.output[0] in (*mul.input, *sub.input):
            array = numpy_helper.to_array(node.attribute[0].t).astype(np.float64)
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(array))
    graph.node.insert(0, helper.make_node("Cast", ["locations"], ["locations_f64"], to=TensorProto.DOUBLE))
    del graph.value_info[:]
    return onnx.shape_inference.infer_shapes(model)


def test_float64_grid_gets_a_cast_and_runs() -> None:
    rng = np.random.default_rng(7)
    shapes = [(16, 16), (8, 8), (4, 4)]
    inputs = attention_inputs(rng, 2, 50, 4, 8, shapes, 4)
    module = StackAttention(shapes)
    args = tuple(torch.from_numpy(a) for a in inputs)
    model = grid_in_float64(export(module, args, NAMES, 17))
    feeds = dict(zip(NAMES, inputs))
    with pytest.raises(Exception, match="GridSample"):
        run(model, feeds)  # the original does not run in ONNX Runtime
    rewritten, report = optimize_with_report(model, RULE)
    assert op_counts(rewritten)["ortops::MultiScaleDeformableAttention"] == 1, report.lines()
    cast = [n for n in rewritten.graph.node if n.op_type == "Cast" and n.output[0] != "locations_f64"]
    assert [helper.get_attribute_value(c.attribute[0]) for c in cast] == [TensorProto.FLOAT]
    with torch.no_grad():
        expected = module(*args).numpy()
    assert_close(run(rewritten, feeds), expected)


def test_mmdeploy_grid_sampler_is_fused() -> None:
    rng = np.random.default_rng(8)
    shapes = [(8, 8), (4, 4)]
    inputs = attention_inputs(rng, 1, 20, 2, 8, shapes, 4)
    module = StackAttention(shapes)
    args = tuple(torch.from_numpy(a) for a in inputs)
    model = as_mmdeploy_grid_sampler(export(module, args, NAMES, 16))
    rewritten, report = optimize_with_report(model, RULE)
    assert op_counts(rewritten)["ortops::MultiScaleDeformableAttention"] == 1, report.lines()
    assert "mmdeploy::grid_sampler" not in op_counts(rewritten)
    with torch.no_grad():
        assert_close(run(rewritten, dict(zip(NAMES, inputs))), module(*args).numpy())


# --- near-misses ---------------------------------------------------------------------------------


def edited(model: onnx.ModelProto, op_type: str, edit) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in model.graph.node:
        if node.op_type == op_type:
            edit(model, node)
    return model


def set_constant_input(index: int, array: np.ndarray):
    def edit(model: onnx.ModelProto, node: onnx.NodeProto) -> None:
        name = f"{node.name}_edited_{index}"
        model.graph.initializer.append(numpy_helper.from_array(array, name))
        node.input[index] = name

    return edit


def near_miss_models() -> list[tuple[str, onnx.ModelProto, str]]:
    shapes = [(8, 8), (4, 4)]
    rng = np.random.default_rng(9)
    args = tuple(torch.from_numpy(a) for a in attention_inputs(rng, 1, 10, 2, 4, shapes, 3))
    flat = tuple(torch.from_numpy(a) for a in attention_inputs(rng, 1, 10, 2, 4, shapes, 3, flat=True))
    plain = export(StackAttention(shapes), args, NAMES, 16)
    return [
        ("align-corners", export(StackAttention(shapes, align_corners=True), args, NAMES, 16), "align_corners=1"),
        ("padding-border", export(StackAttention(shapes, padding="border"), args, NAMES, 16), "padding_mode 'border'"),
        ("nearest", export(ConcatAttention(shapes, [3, 3], mode="nearest"), flat, NAMES, 16), "mode 'nearest'"),
        (
            "split-not-h-times-w",
            edited(plain, "Split", set_constant_input(1, np.array([60, 20], np.int64))),
            "regroup",
        ),
        (
            "sum-over-queries",
            edited(plain, "ReduceSum", set_constant_input(1, np.array([2], np.int64))),
            "not the levels' points",
        ),
        (
            "grid-not-2x-1",
            edited(plain, "Sub", set_constant_input(1, np.array(0.5, np.float32))),
            "2 * sampling_locations - 1",
        ),
    ]


NEAR_MISSES = near_miss_models()


@pytest.mark.parametrize(("model", "reason"), [m[1:] for m in NEAR_MISSES], ids=[m[0] for m in NEAR_MISSES])
def test_near_misses_are_left_alone_with_the_reason(model: onnx.ModelProto, reason: str) -> None:
    rewritten, report = optimize_with_report(model, RULE)
    assert "ortops::MultiScaleDeformableAttention" not in op_counts(rewritten)
    assert op_counts(rewritten)["ai.onnx::GridSample"] == op_counts(model)["ai.onnx::GridSample"]
    assert not report.rewrites
    assert len(report.near_misses) == 1 and reason in report.near_misses[0].reason, report.lines()


@pytest.mark.parametrize(("exporter", "opset"), [("torchscript", 16), ("dynamo", 20)])
def test_points_that_differ_per_level_become_points_per_level(exporter: str, opset: int) -> None:
    """D-FINE's and DEIM's [3, 6, 3] points: the concat form's [N, Lq, M, sum(P_l), ...] go to
    the node as they are, with the attribute."""
    shapes, points_per_level = [(16, 16), (8, 8), (4, 4)], [3, 6, 3]
    rng = np.random.default_rng(12)
    value = attention_inputs(rng, 2, 30, 4, 8, shapes, 1)[0]
    total = sum(points_per_level)
    locations = rng.uniform(-0.1, 1.1, (2, 30, 4, total, 2)).astype(np.float32)
    weights = rng.uniform(0, 1, (2, 30, 4, total)).astype(np.float32)
    inputs = (value, locations, weights)
    module = ConcatAttention(shapes, points_per_level)
    args = tuple(torch.from_numpy(a) for a in inputs)
    model = export(module, args, NAMES, opset, exporter == "dynamo")
    rewritten, report = optimize_with_report(model, RULE)
    assert len(report.rewrites) == 1 and not report.near_misses, report.lines()
    (node,) = [n for n in rewritten.graph.node if n.op_type == "MultiScaleDeformableAttention"]
    assert [(a.name, list(a.ints)) for a in node.attribute] == [("points_per_level", points_per_level)]
    assert "ai.onnx::GridSample" not in op_counts(rewritten)
    feeds = dict(zip(NAMES, inputs))
    assert_close(run(rewritten, feeds), run(model, feeds))


def offsets_near_misses() -> list[tuple[str, onnx.ModelProto]]:
    shapes = [(8, 6), (4, 3)]
    rng = np.random.default_rng(35)
    inputs = offsets_inputs(rng, 2, 10, 2, 4, shapes, 3)
    args = tuple(torch.from_numpy(a) for a in inputs)
    plain = export(OffsetsAttention(shapes), args, OFFSETS_NAMES, 16)
    return [
        ("normalizer-h-w", export(OffsetsAttention(shapes, swap=True), args, OFFSETS_NAMES, 16), inputs),
        ("multiplied", edited(plain, "Div", lambda model, node: setattr(node, "op_type", "Mul")), inputs),
    ]


OFFSETS_NEAR_MISSES = offsets_near_misses()


@pytest.mark.parametrize(
    ("model", "inputs"), [m[1:] for m in OFFSETS_NEAR_MISSES], ids=[m[0] for m in OFFSETS_NEAR_MISSES]
)
def test_locations_not_proven_from_offsets_stay_in_the_file(model: onnx.ModelProto, inputs) -> None:
    """The attention is still fused, from the locations the file computes."""
    rewritten, report = optimize_with_report(model, RULE)
    counts = op_counts(rewritten)
    assert counts["ortops::MultiScaleDeformableAttention"] == 1 and FROM_OFFSETS not in counts, report.lines()
    feeds = dict(zip(OFFSETS_NAMES, inputs))
    assert_close(run(rewritten, feeds), run(model, feeds))


def test_reference_points_the_sum_broadcasts_are_expanded() -> None:
    """One batch item's reference points for every item: the node gets them expanded to
    [N, Lq, L, 2], as the Add broadcast them."""
    shapes = [(8, 6), (4, 3)]
    rng = np.random.default_rng(36)
    value, reference, offsets, weights = offsets_inputs(rng, 2, 10, 2, 4, shapes, 3)
    inputs = (value, reference[:1], offsets, weights)
    model = export(OffsetsAttention(shapes), tuple(torch.from_numpy(a) for a in inputs), OFFSETS_NAMES, 16)
    rewritten, report = optimize_with_report(model, RULE)
    assert op_counts(rewritten)[FROM_OFFSETS] == 1 and op_counts(rewritten)["ai.onnx::Expand"] == 1, report.lines()
    feeds = dict(zip(OFFSETS_NAMES, inputs))
    assert_close(run(rewritten, feeds), run(model, feeds))


class ConstantQueries(torch.nn.Module):
    """A decoder layer whose queries are learned embeddings: its sampling locations and
    attention weights are constants, which the exporter's constant folding (or onnxslim /
    onnxsim) turns into a constant grid per level and a constant weight tensor."""

    def __init__(self, shapes: list[tuple[int, int]], locations: np.ndarray, weights: np.ndarray, points=None) -> None:
        super().__init__()
        self.shapes, self.points = shapes, points
        self.register_buffer("locations", torch.from_numpy(locations))
        self.register_buffer("weights", torch.from_numpy(weights))

    def forward(self, value):
        if self.points is None:
            return stack_form(value, self.shapes, self.locations, self.weights)
        return concat_form(value, self.shapes, self.locations, self.weights, self.points)


@pytest.mark.parametrize("points_per_level", [None, [3, 6, 3]], ids=["stack", "concat-3-6-3"])
def test_constant_grids_and_weights_become_the_nodes_inputs(points_per_level: list[int] | None) -> None:
    shapes = [(16, 16), (8, 8), (4, 4)]
    rng = np.random.default_rng(21)
    value, locations, weights = attention_inputs(rng, 2, 20, 4, 8, shapes, 4, flat=points_per_level is not None)
    if points_per_level is not None:
        total = sum(points_per_level)
        locations = rng.uniform(-0.1, 1.1, (2, 20, 4, total, 2)).astype(np.float32)
        weights = rng.uniform(0, 1, (2, 20, 4, total)).astype(np.float32)
    module = ConstantQueries(shapes, locations, weights, points_per_level)
    model = export(module, (torch.from_numpy(value),), ["value"], 17)
    # The exporter folded 2 * loc - 1: each level's grid (stack form), or the grid before its
    # Split (concat form).
    assert "ai.onnx::Sub" not in op_counts(model)
    rewritten, report = optimize_with_report(model, RULE)
    assert len(report.rewrites) == 1 and not report.near_misses, report.lines()
    assert "ai.onnx::GridSample" not in op_counts(rewritten)
    feeds = {"value": value}
    # To the bit where ONNX Runtime's GridSample reads the same pixel positions; the sum's
    # order differs.
    assert_close(run(rewritten, feeds), run(model, feeds))
    with torch.no_grad():
        assert_close(run(rewritten, feeds), module(torch.from_numpy(value)).numpy())


def test_constant_grids_with_a_dynamic_batch_are_left_alone() -> None:
    shapes = [(8, 8), (4, 4)]
    rng = np.random.default_rng(22)
    value, locations, weights = attention_inputs(rng, 1, 10, 2, 8, shapes, 2)
    model = export(
        ConstantQueries(shapes, locations, weights),
        (torch.from_numpy(value),),
        ["value"],
        17,
        dynamic={"value": {0: "n"}},
    )
    rewritten, report = optimize_with_report(model, RULE)
    assert not report.rewrites and "ortops::MultiScaleDeformableAttention" not in op_counts(rewritten)
    (miss,) = report.near_misses
    assert "constants" in miss.reason, report.lines()


def test_locations_whose_batch_shape_inference_lost_are_fused_and_refuse_another_batch() -> None:
    """Grounding DINO's decoder picks its reference points with a TopK: the file's locations
    have a batch of their own symbol. Each level's GridSample requires it to be value's, so the
    rule may take it; a run where it is not fails in the node as in the GridSample."""
    shapes = [(8, 8), (4, 4)]
    rng = np.random.default_rng(23)
    inputs = attention_inputs(rng, 2, 10, 2, 8, shapes, 3)
    dynamic = {"value": {0: "n"}, "locations": {0: "b", 1: "q"}, "weights": {0: "n", 1: "q"}}
    model = export(StackAttention(shapes), tuple(torch.from_numpy(a) for a in inputs), NAMES, 17, dynamic=dynamic)
    rewritten, report = optimize_with_report(model, RULE)
    assert op_counts(rewritten)["ortops::MultiScaleDeformableAttention"] == 1, report.lines()
    assert not report.near_misses
    feeds = dict(zip(NAMES, inputs))
    assert_close(run(rewritten, feeds), run(model, feeds))
    value, locations, weights = attention_inputs(rng, 3, 10, 2, 8, shapes, 3)
    other = {"value": value[:2], "locations": locations, "weights": weights[:2]}
    with pytest.raises(Exception, match="GridSample"):
        run(model, other)
    with pytest.raises(Exception, match="sampling_locations"):
        run(rewritten, other)


def test_weights_whose_batch_is_another_symbol_stay_a_near_miss() -> None:
    """Unlike the locations' (which every GridSample checks), the weights' batch can broadcast
    in the file's Mul: a batch of their own is not proven to be value's."""
    shapes = [(8, 8), (4, 4)]
    inputs = attention_inputs(np.random.default_rng(24), 2, 10, 2, 8, shapes, 3)
    dynamic = {"value": {0: "n"}, "locations": {0: "n", 1: "q"}, "weights": {0: "b", 1: "q"}}
    model = export(StackAttention(shapes), tuple(torch.from_numpy(a) for a in inputs), NAMES, 17, dynamic=dynamic)
    rewritten, report = optimize_with_report(model, RULE)
    assert not report.rewrites and "ortops::MultiScaleDeformableAttention" not in op_counts(rewritten)
    (miss,) = report.near_misses
    assert "weights" in miss.reason, report.lines()


# --- the emulated device -------------------------------------------------------------------------


def test_rewritten_attention_runs_on_the_emulated_device(tmp_path: Path) -> None:
    device_library = emulated_device_library()
    if device_library is None:
        pytest.skip("no emulated device library beside the library")
    shapes = [(8, 8), (4, 4), (2, 2)]
    inputs = attention_inputs(np.random.default_rng(11), 2, 40, 4, 8, shapes, 4, flat=True)
    module = ConcatAttention(shapes, [4, 4, 4])
    model = export(module, tuple(torch.from_numpy(a) for a in inputs), NAMES, 16)
    feeds = dict(zip(NAMES, inputs))
    expected = run(model, feeds)
    rewritten = optimize_with_report(model, RULE)[0]
    assert_close(first_output_with_library(rewritten, feeds, device_library, tmp_path), expected)


def test_offsets_node_runs_on_the_emulated_device(tmp_path: Path) -> None:
    device_library = emulated_device_library()
    if device_library is None:
        pytest.skip("no emulated device library beside the library")
    shapes = [(8, 6), (4, 3), (2, 2)]
    inputs = offsets_inputs(np.random.default_rng(13), 2, 40, 4, 8, shapes, 4)
    model = export(OffsetsAttention(shapes), tuple(torch.from_numpy(a) for a in inputs), OFFSETS_NAMES, 16)
    feeds = dict(zip(OFFSETS_NAMES, inputs))
    rewritten = optimize_with_report(model, RULE)[0]
    assert op_counts(rewritten)[FROM_OFFSETS] == 1
    assert_close(first_output_with_library(rewritten, feeds, device_library, tmp_path), run(model, feeds))


class AttentionThenProjection(torch.nn.Module):
    """The attention, then an output projection, a residual and a LayerNorm, as every
    Deformable-DETR layer has: ONNX Runtime fuses the latter into its own kernels when it knows
    the attention output's shape."""

    def __init__(self, shapes: list[tuple[int, int]], dims: int) -> None:
        super().__init__()
        self.shapes = shapes
        self.projection = torch.nn.Linear(dims, dims)
        self.norm = torch.nn.LayerNorm(dims)

    def forward(self, value, locations, weights, query):
        return self.norm(query + self.projection(stack_form(value, self.shapes, locations, weights)))


def fused_op_types(model: onnx.ModelProto, folder: Path) -> Counter[str]:
    """The op types of the graph ONNX Runtime runs after its own optimizations."""
    options = ortops.session_options()
    options.optimized_model_filepath = str(folder / "ort-optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)


def test_onnx_runtime_still_fuses_what_follows_the_node(tmp_path: Path) -> None:
    """The node's output keeps its element type and static dimensions in the file (ONNX Runtime
    cannot infer a custom node's): without them ONNX Runtime left the projection, residual and
    LayerNorm after it unfused, 7% of Deformable DETR's time."""
    shapes, heads, channels, queries = [(8, 8), (4, 4)], 2, 8, 20
    rng = np.random.default_rng(12)
    inputs = attention_inputs(rng, 1, queries, heads, channels, shapes, 4)
    query = rng.normal(size=(1, queries, heads * channels)).astype(np.float32)
    names = [*NAMES, "query"]
    module = AttentionThenProjection(shapes, heads * channels).eval()
    model = export(module, tuple(torch.from_numpy(a) for a in (*inputs, query)), names, 17)
    rewritten, _ = optimize_with_report(model, RULE)
    [node] = [n for n in rewritten.graph.node if n.op_type == "MultiScaleDeformableAttention"]
    [info] = [v for v in rewritten.graph.value_info if v.name == node.output[0]]
    assert [d.dim_value for d in info.type.tensor_type.shape.dim] == [1, queries, heads * channels]
    before, after = fused_op_types(model, tmp_path), fused_op_types(rewritten, tmp_path)
    assert before["SkipLayerNormalization"] == after["SkipLayerNormalization"] == 1
    assert (
        after["MatMul"] + after["Gemm"] + after["FusedMatMul"]
        == before["MatMul"] + before["Gemm"] + before["FusedMatMul"]
    )
    assert_close(run(rewritten, dict(zip(names, (*inputs, query)))), run(model, dict(zip(names, (*inputs, query)))))
