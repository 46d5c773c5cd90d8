"""``ortops optimize``'s grid-sample and multi-level-roi-align rules: rewritten files give the
original's outputs in ONNX Runtime (the original runs ONNX Runtime's own kernels); near-misses
are left alone and reported with their reasons."""

from __future__ import annotations

import io
import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from optimizing import emulated_device_library, first_output_with_library, stack_form

import ortops
from ortops._optimize import optimize_with_report

pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

IR_VERSION = 8
ELEMENT_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}
TOLERANCE = {np.float32: 1e-5, np.float64: 1e-12, np.float16: 2e-3}


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(
        model.SerializeToString(), ortops.session_options(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    return Counter(f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in model.graph.node)


def export(
    module: torch.nn.Module, args: tuple, names: list[str], opset: int, dynamic: dict | None = None
) -> onnx.ModelProto:
    buffer = io.BytesIO()
    torch.onnx.export(module, args, buffer, dynamo=False, opset_version=opset, input_names=names, dynamic_axes=dynamic)
    return onnx.load_from_string(buffer.getvalue())


# --- grid-sample ----------------------------------------------------------------------------------


def grid_sample_model(opset: int, dtype: type = np.float32, rank: int = 4, **attributes: object) -> onnx.ModelProto:
    element = ELEMENT_TYPES[dtype]
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="sample", **attributes)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", element, ["n", "c", "h", "w"][:2] + ["h", "w", "d"][: rank - 2]),
            helper.make_tensor_value_info("grid", element, ["n"] + ["gh", "gw", "gd"][: rank - 2] + [rank - 2]),
        ],
        [helper.make_tensor_value_info("y", element, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def sample_grids(rng: np.random.Generator, height: int, width: int, align_corners: int) -> list[np.ndarray]:
    """Random points in and around the map, points far outside, and exact pixel centres and
    half-pixel points (the ties of nearest), in the convention of ``align_corners``."""
    shape = (2, 6, 5)
    pixels_x = rng.integers(-4, 2 * width + 4, shape) / 2.0
    pixels_y = rng.integers(-4, 2 * height + 4, shape) / 2.0
    if align_corners:
        ties = np.stack([pixels_x * 2 / (width - 1) - 1, pixels_y * 2 / (height - 1) - 1], -1)
    else:
        ties = np.stack([(2 * pixels_x + 1) / width - 1, (2 * pixels_y + 1) / height - 1], -1)
    edges = rng.choice([-1.0, 0.0, 1.0, -1.5, 1.5], (*shape, 2))
    return [rng.uniform(-1.3, 1.3, (*shape, 2)), rng.uniform(-20, 20, (*shape, 2)), ties, edges]


GRID_SAMPLE_CASES = [
    (opset, dtype, mode, padding, align_corners)
    for opset in (16, 20)
    for dtype in ((np.float32,) if opset == 16 else (np.float32, np.float64, np.float16))
    for mode, padding in itertools.product(("bilinear", "nearest", "bicubic"), ("zeros", "border", "reflection"))
    if (mode, padding) != ("nearest", "reflection")
    for align_corners in (0, 1)
    if dtype == np.float32 or align_corners == 0
]


@pytest.mark.parametrize(("opset", "dtype", "mode", "padding", "align_corners"), GRID_SAMPLE_CASES)
def test_onnx_grid_sample_becomes_ortops_grid_sample_with_the_same_values(
    opset: int, dtype: type, mode: str, padding: str, align_corners: int
) -> None:
    onnx_mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode) if opset >= 20 else mode
    model = grid_sample_model(opset, dtype, mode=onnx_mode, padding_mode=padding, align_corners=align_corners)
    rewritten, report = optimize_with_report(model, ["grid-sample"])
    assert op_counts(rewritten) == Counter({"ortops::GridSample": 1}), report.lines()
    assert [r.rule for r in report.rewrites] == ["grid-sample"] and not report.near_misses
    rng = np.random.default_rng(opset)
    for height, width in ((5, 7), (2, 3)):
        x = rng.normal(0, 1, (2, 3, height, width)).astype(dtype)
        for grid in sample_grids(rng, height, width, align_corners):
            feeds = {"x": x, "grid": grid.astype(dtype)}
            (expected,), (actual,) = run(model, feeds), run(rewritten, feeds)
            assert actual.dtype == expected.dtype and actual.shape == expected.shape
            np.testing.assert_allclose(actual, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (grid_sample_model(16, mode="nearest", padding_mode="reflection"), "rounds a reflected half-pixel"),
        (grid_sample_model(20, mode="nearest", padding_mode="reflection", align_corners=1), "rounds a reflected"),
        (grid_sample_model(20, rank=5), "input of rank 5"),
        (grid_sample_model(16, np.float64), "before 20 is float only"),
    ],
    ids=["nearest-reflection-16", "nearest-reflection-20", "5-d", "double-at-16"],
)
def test_grid_sample_near_misses_are_left_alone_and_reported(model: onnx.ModelProto, reason: str) -> None:
    rewritten, report = optimize_with_report(model)
    assert op_counts(rewritten) == Counter({"ai.onnx::GridSample": 1}) and not report.rewrites
    assert [(m.rule, m.node) for m in report.near_misses] == [("grid-sample", "sample (GridSample)")]
    assert reason in report.near_misses[0].reason


def test_nearest_reflection_really_differs_from_onnx_runtime() -> None:
    """Why the case is a near-miss: at half-pixel points the two kernels read other pixels."""
    model = grid_sample_model(16, mode="nearest", padding_mode="reflection")
    node = helper.make_node(
        "GridSample", ["x", "grid"], ["y"], domain="ortops", interpolation_mode=1, padding_mode=2, align_corners=0
    )
    ortops_model = onnx.ModelProto()
    ortops_model.CopyFrom(model)
    del ortops_model.graph.node[:]
    ortops_model.graph.node.append(node)
    ortops_model.opset_import.append(helper.make_opsetid("ortops", 1))
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(0, 1, (2, 3, 5, 7)).astype(np.float32)}
    feeds["grid"] = sample_grids(rng, 5, 7, 0)[2].astype(np.float32)
    assert not np.allclose(run(model, feeds)[0], run(ortops_model, feeds)[0])


class TwoLevelAttention(torch.nn.Module):
    """Deformable attention in mmcv's stack form, two levels; with align_corners=True a block
    the deformable-attention rule leaves, whose GridSamples are still equal one by one."""

    def __init__(self, align_corners: bool) -> None:
        super().__init__()
        self.align_corners = align_corners

    def forward(self, value: torch.Tensor, locations: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return stack_form(value, [(6, 6), (3, 3)], locations, weights, align_corners=self.align_corners)


def test_grid_samples_of_a_deformable_attention_near_miss_are_rewritten_one_by_one() -> None:
    rng = np.random.default_rng(1)
    value = rng.normal(size=(1, 45, 2, 4)).astype(np.float32)
    locations = rng.uniform(-0.1, 1.1, (1, 10, 2, 2, 3, 2)).astype(np.float32)
    weights = rng.uniform(0, 1, (1, 10, 2, 2, 3)).astype(np.float32)
    args = tuple(torch.from_numpy(a) for a in (value, locations, weights))
    names = ["value", "locations", "weights"]
    model = export(TwoLevelAttention(align_corners=True), args, names, 16)
    rewritten, report = optimize_with_report(model)
    assert [m.rule for m in report.near_misses] == ["deformable-attention"]
    assert "align_corners" in report.near_misses[0].reason
    assert [r.rule for r in report.rewrites] == ["grid-sample", "grid-sample"]
    counts = op_counts(rewritten)
    assert counts["ortops::GridSample"] == 2 and "ai.onnx::GridSample" not in counts
    feeds = dict(zip(names, (value, locations, weights)))
    np.testing.assert_allclose(run(rewritten, feeds)[0], run(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_a_fusable_deformable_attention_block_is_taken_by_its_own_rule_first() -> None:
    """The deformable-attention rule runs before grid-sample, so a whole block becomes one
    attention node, not a chain of ortops GridSamples."""

    rng = np.random.default_rng(2)
    args = (
        torch.randn(1, 45, 2, 4),
        torch.from_numpy(rng.uniform(0, 1, (1, 10, 2, 2, 3, 2)).astype(np.float32)),
        torch.rand(1, 10, 2, 2, 3),
    )
    model = export(TwoLevelAttention(align_corners=False), args, ["value", "locations", "weights"], 16)
    rewritten, report = optimize_with_report(model)
    assert [r.rule for r in report.rewrites] == ["deformable-attention"] and not report.near_misses
    assert "ortops::GridSample" not in op_counts(rewritten)


# --- multi-level roi-align ------------------------------------------------------------------------


class FourLevelPooler(torch.nn.Module):
    """torchvision's MultiScaleRoIAlign over maps of strides 4 to 32 (levels 2 to 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = torchvision.ops.MultiScaleRoIAlign(["0", "1", "2", "3"], 7, 2)

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        *maps, boxes = args
        return self.pool(dict(zip(["0", "1", "2", "3"], maps)), [boxes], [(256, 256)])


POOLER_NAMES = ["f0", "f1", "f2", "f3", "boxes"]


def pooler_inputs(boxes: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    maps = [rng.normal(size=(1, 4, 64 >> level, 64 >> level)).astype(np.float32) for level in range(4)]
    return dict(zip(POOLER_NAMES, [*maps, boxes.astype(np.float32)]))


def random_boxes(count: int) -> np.ndarray:
    rng = np.random.default_rng(4)
    corners = rng.uniform(0, 200, (count, 2))
    return np.concatenate([corners, corners + rng.uniform(1, 250, (count, 2))], axis=1)


@pytest.fixture(scope="module")
def pooler_model() -> onnx.ModelProto:
    feeds = pooler_inputs(random_boxes(20))
    args = tuple(torch.from_numpy(feeds[name]) for name in POOLER_NAMES)
    return export(FourLevelPooler(), args, POOLER_NAMES, 16, {"boxes": {0: "rois"}})


def test_multi_scale_roi_align_merge_is_one_node_with_the_same_values(pooler_model) -> None:
    rewritten, report = optimize_with_report(pooler_model)
    assert [r.rule for r in report.rewrites] == ["multi-level-roi-align"] and not report.near_misses
    assert report.rewrites[0].made == "/pool/ScatterElements_3/ortops_RoIAlignByLevel (ortops::RoIAlignByLevel)"
    counts = op_counts(rewritten)
    assert counts["ortops::RoIAlignByLevel"] == 1
    assert not {"ai.onnx::RoiAlign", "ai.onnx::ScatterElements", "ai.onnx::NonZero", "ortops::RoIAlign"} & set(counts)
    # The LevelMapper stays: ONNX Runtime computes each roi's level as before.
    assert counts["ai.onnx::Log"] == 1 and counts["ai.onnx::Floor"] == 1
    # Every level, rois at a level boundary (where mmdet's formula would choose another map),
    # a roi past the image, one roi and none.
    boxes = np.concatenate([random_boxes(60), boundary_boxes(), [[-50, -50, 400, 400]]])
    for count in (len(boxes), 1, 0):
        feeds = pooler_inputs(boxes[:count])
        np.testing.assert_array_equal(run(rewritten, feeds)[0], run(pooler_model, feeds)[0])


class TwoImagePooler(FourLevelPooler):
    """FourLevelPooler on a batch of two images, each with its own boxes."""

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        *maps, first, second = args
        return self.pool(dict(zip(["0", "1", "2", "3"], maps)), [first, second], [(256, 256), (256, 200)])


def test_a_merge_over_two_images_is_one_node_with_the_same_values() -> None:
    """The rois of two images' boxes, and their levels, are joined image after image; the rule
    proves both joins the same."""
    rng = np.random.default_rng(5)
    maps = [rng.normal(size=(2, 3, 64 >> level, 64 >> level)).astype(np.float32) for level in range(4)]
    names = ["f0", "f1", "f2", "f3", "first", "second"]
    boxes = random_boxes(30).astype(np.float32)
    feeds = dict(zip(names, [*maps, boxes[:18], boxes[18:]]))
    args = tuple(torch.from_numpy(feeds[name]) for name in names)
    model = export(TwoImagePooler(), args, names, 16, {"first": {0: "r1"}, "second": {0: "r2"}})
    rewritten, report = optimize_with_report(model)
    assert [r.rule for r in report.rewrites] == ["multi-level-roi-align"] and not report.near_misses
    for first, second in ((18, 30), (0, 30), (18, 18)):
        feeds = dict(zip(names, [*maps, boxes[:first], boxes[first:second]]))
        np.testing.assert_array_equal(run(rewritten, feeds)[0], run(model, feeds)[0])


def test_the_merged_node_runs_on_the_emulated_device(pooler_model, tmp_path: Path) -> None:
    """RoIAlignByLevel's device path (the device-on-CPU build, as on CUDA) gives the file's
    values too."""
    device_library = emulated_device_library()
    if device_library is None:
        pytest.skip("no emulated device library beside the library")
    feeds = pooler_inputs(np.concatenate([random_boxes(40), boundary_boxes()]))
    got = first_output_with_library(ortops.optimize(pooler_model), feeds, device_library, tmp_path)
    np.testing.assert_array_equal(got, run(pooler_model, feeds)[0])


def with_nodes_changed(model: onnx.ModelProto, op_type: str, change: object) -> onnx.ModelProto:
    """A copy of ``model`` with ``change(node)`` applied to each of its ``op_type`` nodes."""
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    for node in changed.graph.node:
        if node.op_type == op_type:
            change(node)  # type: ignore[operator]
    return changed


def max_mode(node: onnx.NodeProto) -> None:
    node.attribute.append(helper.make_attribute("mode", "max"))


def level_seven(node: onnx.NodeProto) -> None:
    """The Equal that picks level 1's rois compares with 7 instead (no roi's level)."""
    if node.name == "/pool/Equal_1":
        node.input[1] = "seven"


@pytest.mark.parametrize(
    ("op_type", "change", "reason", "per_level"),
    [
        ("RoiAlign", max_mode, "a level's RoiAlign: mode 'max'", "TRT::ROIAlign_TRT"),
        ("Equal", level_seven, "the levels compared with are [0, 2, 3, 7], not 0 to 3", "ortops::RoIAlign"),
    ],
)
def test_a_merge_that_is_not_proven_is_left_alone_and_reported(
    pooler_model, op_type: str, change: object, reason: str, per_level: str
) -> None:
    model = with_nodes_changed(pooler_model, op_type, change)
    model.graph.initializer.append(helper.make_tensor("seven", TensorProto.INT64, [], [7]))
    rewritten, report = optimize_with_report(model)
    misses = [(m.rule, m.node, m.reason) for m in report.near_misses if m.rule == "multi-level-roi-align"]
    assert len(misses) == 1 and misses[0][1] == "/pool/ScatterElements_3 (ScatterElements)"
    assert misses[0][2].startswith(f"torchvision's MultiScaleRoIAlign over 4 levels: {reason}")
    counts = op_counts(rewritten)
    assert counts["ai.onnx::ScatterElements"] == 4 and "ortops::RoIAlignByLevel" not in counts
    assert counts[per_level] == 4  # roi-align still takes each level
    feeds = pooler_inputs(random_boxes(20))
    np.testing.assert_array_equal(run(rewritten, feeds)[0], run(model, feeds)[0])


def test_levels_that_are_not_the_rois_rows_are_a_near_miss(pooler_model) -> None:
    """The node needs one level per roi; a merge whose levels come from elsewhere (here a model
    input of the same rank) is not proven to have them."""
    model = onnx.ModelProto()
    model.CopyFrom(pooler_model)
    levels = next(n.input[0] for n in model.graph.node if n.name == "/pool/Equal")
    for node in model.graph.node:
        if node.op_type == "Equal" and node.input[0] == levels:
            node.input[0] = "given_levels"
    model.graph.input.append(helper.make_tensor_value_info("given_levels", TensorProto.INT64, ["rois"]))
    rewritten, report = optimize_with_report(model)
    assert [m.reason.split(": ", 1)[1] for m in report.near_misses if m.rule == "multi-level-roi-align"] == [
        "the levels and the rois are not proven to have the same rows"
    ]
    assert "ortops::RoIAlignByLevel" not in op_counts(rewritten)


def boundary_boxes() -> np.ndarray:
    """Square boxes whose side s is a relative 2e-7 to 1e-6 under 112 (the boundary of levels
    2 and 3): the band where the two level formulas disagree."""
    sides = np.unique(np.float32(112) * (1 - np.linspace(2e-7, 1e-6, 41, dtype=np.float32)))
    return np.stack([np.full_like(sides, 10), np.full_like(sides, 10), 10 + sides, 10 + sides], axis=1)


def test_ortops_multi_level_roi_align_really_maps_boundary_rois_to_other_levels(pooler_model) -> None:
    """Why the merge becomes RoIAlignByLevel with the file's levels, not MultiLevelRoIAlign:
    that node with torchvision's scales (finest_scale 56 for level 2, strides 4 to 32, legacy
    sampling) pools some rois just under a level boundary from another map than torchvision's
    export does."""
    merged = helper.make_node(
        "MultiLevelRoIAlign",
        ["rows", "f0", "f1", "f2", "f3"],
        ["pooled"],
        domain="ortops",
        output_height=7,
        output_width=7,
        sampling_ratio=2,
        featmap_strides=[4.0, 8.0, 16.0, 32.0],
        finest_scale=56,
        aligned=0,
    )
    zeros = helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["boxes"], ["shape"], start=0, end=1),
            helper.make_node("ConstantOfShape", ["shape"], ["batch_indices"], value=zeros),
            helper.make_node("Unsqueeze", ["batch_indices", "axis"], ["index_column"]),
            helper.make_node("Concat", ["index_column", "boxes"], ["rows"], axis=1),
            merged,
        ],
        "merged",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in POOLER_NAMES],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor("axis", TensorProto.INT64, [1], [1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 16), helper.make_opsetid("ortops", 1)], ir_version=IR_VERSION
    )
    ordinary = pooler_inputs(random_boxes(20))
    np.testing.assert_allclose(run(model, ordinary)[0], run(pooler_model, ordinary)[0], rtol=1e-5, atol=1e-5)
    at_boundary = pooler_inputs(boundary_boxes())
    differing = ~np.isclose(run(model, at_boundary)[0], run(pooler_model, at_boundary)[0], atol=1e-4).all((1, 2, 3))
    assert differing.any() and not differing.all()
