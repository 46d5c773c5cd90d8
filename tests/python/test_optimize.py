"""``ortops optimize``: files the real exporters write, and hand-built graphs, rewritten into
ortops nodes with the same outputs in ONNX Runtime; near-misses left alone and reported."""

from __future__ import annotations

import io
import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from optimizing import emulated_device_library, first_output_with_library, op_counts

import ortops
from ortops import _cli
from ortops._optimize import optimize_with_report

from ortest import python_without

pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

IR_VERSION = 8
TOLERANCE = {np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-9}


def export(module: torch.nn.Module, args: tuple, opset: int, **options: object) -> onnx.ModelProto:
    buffer = io.BytesIO()
    torch.onnx.export(module, args, buffer, dynamo=False, opset_version=opset, **options)
    return onnx.load_from_string(buffer.getvalue())


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(
        model.SerializeToString(), ortops.session_options(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def assert_same_outputs(original: onnx.ModelProto, rewritten: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    for before, after in zip(run(original, feeds), run(rewritten, feeds)):
        assert before.shape == after.shape and before.dtype == after.dtype
        tolerance = TOLERANCE.get(before.dtype)
        if tolerance is None:
            np.testing.assert_array_equal(after, before)
        else:
            np.testing.assert_allclose(after, before, rtol=tolerance, atol=tolerance)


# --- residual layer normalization -------------------------------------------------------------


class ResidualNorm(torch.nn.Module):
    """Post-norm residual blocks as DETR's layers write them: LayerNorm(x + f(x)), once with the
    residual broadcast from a batch of one (``shared``), and a pre-norm block whose sum is also
    read elsewhere (``pre_norm``), which must stay."""

    def __init__(self, channels: int, shared: bool = False, pre_norm: bool = False) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(channels, channels)
        self.norm = torch.nn.LayerNorm(channels, eps=1e-6)
        torch.nn.init.normal_(self.norm.weight)
        torch.nn.init.normal_(self.norm.bias)
        self.shared, self.pre_norm = shared, pre_norm
        self.query = torch.nn.Parameter(torch.randn(1, 5, channels))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        residual = self.query if self.shared else x
        total = self.linear(x) + residual
        if self.pre_norm:
            return self.norm(total), total * 2
        return (self.norm(total),)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shared", [False, True])
def test_post_norm_add_and_layer_norm_become_one_ortops_node(dtype: torch.dtype, shared: bool) -> None:
    torch.manual_seed(0)
    module = ResidualNorm(16, shared=shared).to(dtype).eval()
    x = torch.randn(3, 5, 16, dtype=dtype)
    model = export(module, (x,), 17, input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    rewritten, report = optimize_with_report(model)
    counts, before = op_counts(rewritten), op_counts(model)
    assert counts["ortops::AddLayerNorm"] == 1 and "ai.onnx::LayerNormalization" not in counts
    assert counts["ai.onnx::Add"] == before["ai.onnx::Add"] - 1  # the Linear's bias stays
    assert [r.rule for r in report.rewrites] == ["add-layer-norm"] and not report.near_misses
    for batch in (1, 4):
        feeds = {"x": np.random.default_rng(batch).normal(1, 3, (batch, 5, 16)).astype(x.numpy().dtype)}
        assert_same_outputs(model, rewritten, feeds)


def test_pre_norm_sum_read_elsewhere_stays() -> None:
    module = ResidualNorm(16, pre_norm=True).eval()
    model = export(module, (torch.randn(2, 5, 16),), 17, input_names=["x"])
    rewritten, report = optimize_with_report(model)
    assert not report.rewrites and op_counts(rewritten) == op_counts(model)


def layer_norm_after_add(
    a_shape: list, b_shape: list, axis: int = -1, opset: int = 17, outputs: int = 1
) -> onnx.ModelProto:
    """Add(a, b) -> LayerNormalization over a [.., 8] input; dims as ONNX shapes (str: symbolic)."""
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("a", f, a_shape), helper.make_tensor_value_info("b", f, b_shape)]
    scale = numpy_helper.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32), "scale")
    bias = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "bias")
    names = ["y", "mean", "inv_std"][:outputs]
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"], name="add"),
        helper.make_node("LayerNormalization", ["s", "scale", "bias"], names, name="ln", axis=axis, epsilon=1e-5),
    ]
    graph_outputs = [helper.make_tensor_value_info(n, f, None) for n in names]
    graph = helper.make_graph(nodes, "g", inputs, graph_outputs, [scale, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        (["n", 6, 8], ["n", 6, 8]),  # the same symbol
        (["n", 6, 8], [1, 6, 8]),  # a batch of one broadcast
        ([1, 6, 8], ["n", 6, 8]),  # the same, as Add(query, x): the operands are swapped
        (["n", "l", 8], [8]),
        ([2, 6, 8], [6, 1]),
    ],
)
def test_add_layer_norm_with_proven_broadcasts_is_rewritten(a_shape: list, b_shape: list) -> None:
    model = layer_norm_after_add(a_shape, b_shape)
    rewritten, report = optimize_with_report(model)
    assert op_counts(rewritten) == Counter({"ortops::AddLayerNorm": 1}), report
    rng = np.random.default_rng(0)
    concrete = {"n": 3, "l": 6}
    feeds = {
        name: rng.normal(2, 3, [concrete.get(d, d) if isinstance(d, str) else d for d in shape]).astype(np.float32)
        for name, shape in (("a", a_shape), ("b", b_shape))
    }
    assert_same_outputs(model, rewritten, feeds)


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "options", "reason"),
    [
        (["n", 6, 8], ["m", 6, 8], {}, "not proven to broadcast"),
        ([2, 6, 8], [2, 6, 8], {"axis": 1}, "axis 1 of a rank-3 input"),
        ([2, 6, 8], [2, 6, 8], {"outputs": 2}, None),  # Mean read: the one-output pattern does not match
        ([2, 6, "c"], [2, 6, "c"], {}, "last dim of the Add's input is not known"),
        ([2, 6, 8], [2, 6, 8], {"opset": 16}, None),  # no LayerNormalization before 17: nothing to match
    ],
)
def test_add_layer_norm_near_misses_are_left_alone(a_shape, b_shape, options, reason) -> None:
    model = layer_norm_after_add(a_shape, b_shape, **options)
    rewritten, report = optimize_with_report(model, ["add-layer-norm"])
    assert not report.rewrites and op_counts(rewritten) == op_counts(model)
    if reason is not None:
        assert [(m.node, reason in m.reason) for m in report.near_misses] == [("ln (LayerNormalization)", True)]


def test_add_layer_norm_runs_on_the_emulated_device(tmp_path: Path) -> None:
    device_library = emulated_device_library()
    if device_library is None:
        pytest.skip("no emulated device library beside the library")
    model = layer_norm_after_add(["n", 6, 8], [1, 6, 8])
    rng = np.random.default_rng(1)
    feeds = {"a": rng.normal(size=(2, 6, 8)).astype(np.float32), "b": rng.normal(size=(1, 6, 8)).astype(np.float32)}
    got = first_output_with_library(ortops.optimize(model), feeds, device_library, tmp_path)
    np.testing.assert_allclose(got, run(model, feeds)[0], rtol=1e-5, atol=1e-5)


# --- group normalization --------------------------------------------------------------------


class GroupNormModule(torch.nn.Module):
    def __init__(self, groups: int, channels: int, affine: bool) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(groups, channels, eps=1e-3, affine=affine)
        if affine:
            torch.nn.init.normal_(self.norm.weight)
            torch.nn.init.normal_(self.norm.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(x))


@pytest.mark.parametrize(
    ("opset", "shape", "groups", "affine"),
    [
        (11, (2, 8, 5, 5), 4, True),
        (17, (3, 6, 7), 3, True),
        (17, (2, 8, 4, 4), 2, False),
        (21, (1, 4, 3, 3, 3), 1, True),
    ],
)
def test_torch_group_norm_becomes_one_ortops_node(
    opset: int, shape: tuple[int, ...], groups: int, affine: bool
) -> None:
    torch.manual_seed(0)
    module = GroupNormModule(groups, shape[1], affine).eval()
    x = torch.randn(shape) * 3 + 1
    model = export(module, (x,), opset, input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    rewritten, report = optimize_with_report(model)
    counts = op_counts(rewritten)
    assert counts["ortops::GroupNorm"] == 1
    assert not {"ai.onnx::InstanceNormalization", "ai.onnx::Reshape", "ai.onnx::Mul", "ai.onnx::Add"} & set(counts)
    assert [r.rule for r in report.rewrites] == ["group-norm"] and not report.near_misses
    for batch in (1, 3):
        feeds = {"x": np.random.default_rng(batch).normal(2, 3, (batch, *shape[1:])).astype(np.float32)}
        assert_same_outputs(model, rewritten, feeds)


def decomposed_group_norm(
    shape1: list[int] = (0, 2, -1),
    in_scale: float = 1.0,
    gamma_shape: tuple[int, ...] = (4, 1, 1),
    weight_size: int = 0,
    groups: int = 2,
    identity_affine: bool = False,
) -> onnx.ModelProto:
    """Reshape/InstanceNormalization/Reshape/Mul/Add on x [N, 4, 3, 3], as torch writes it, in
    ``groups`` groups (``shape1`` their reshape); gamma and beta random, or 1 and 0 with
    ``identity_affine``. With ``weight_size``, x is first multiplied by a weight of that many
    floats (a file with a tensor large enough to keep outside)."""
    rng = np.random.default_rng(0)
    gamma = rng.normal(size=gamma_shape).astype(np.float32)
    beta = rng.normal(size=(4, 1, 1)).astype(np.float32)
    if identity_affine:
        gamma, beta = np.ones_like(gamma), np.zeros_like(beta)
    initializers = [
        numpy_helper.from_array(np.array(shape1, np.int64), "shape1"),
        numpy_helper.from_array(np.full(groups, in_scale, np.float32), "in_scale"),
        numpy_helper.from_array(np.zeros(groups, np.float32), "in_bias"),
        numpy_helper.from_array(gamma, "gamma"),
        numpy_helper.from_array(beta, "beta"),
    ]
    nodes = [
        helper.make_node("Mul", ["input", "weight"], ["x"], name="weigh"),
        helper.make_node("Reshape", ["x", "shape1"], ["grouped"], name="reshape_in"),
        helper.make_node("InstanceNormalization", ["grouped", "in_scale", "in_bias"], ["normed"], name="norm"),
        helper.make_node("Shape", ["x"], ["x_shape"], name="shape"),
        helper.make_node("Reshape", ["normed", "x_shape"], ["restored"], name="reshape_out"),
        helper.make_node("Mul", ["restored", "gamma"], ["scaled"], name="mul"),
        helper.make_node("Add", ["scaled", "beta"], ["y"], name="add"),
    ]
    initializers.append(numpy_helper.from_array(rng.normal(size=(weight_size, 1, 1, 1)).astype(np.float32), "weight"))
    if not weight_size:
        nodes = nodes[1:]
        initializers = initializers[:-1]
    graph = helper.make_graph(
        nodes,
        "group_norm",
        [helper.make_tensor_value_info("input" if weight_size else "x", TensorProto.FLOAT, ["N", 4, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializers,
    )
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (decomposed_group_norm(in_scale=2.0), "scale is not all ones"),
        (decomposed_group_norm(shape1=[0, 3, -1]), "do not divide C = 4"),
        (decomposed_group_norm(shape1=[-1, 2, 18]), "is not [N, G, -1]"),
        (decomposed_group_norm(gamma_shape=(4, 3, 1)), "not by a per-channel constant"),
    ],
    ids=["instance-norm-scale-not-ones", "groups-do-not-divide", "wrong-reshape", "gamma-not-per-channel"],
)
def test_group_norm_near_misses_are_left_alone_and_reported(model: onnx.ModelProto, reason: str) -> None:
    rewritten, report = optimize_with_report(model)
    if "per-channel" in reason:
        # The normalization alone is still proven: it is fused, the Mul and Add stay.
        assert op_counts(rewritten)["ortops::GroupNorm"] == 1 and op_counts(rewritten)["ai.onnx::Mul"] == 1
        assert_same_outputs(
            model, rewritten, {"x": np.random.default_rng(0).normal(size=(2, 4, 3, 3)).astype(np.float32)}
        )
        return
    assert op_counts(rewritten) == op_counts(model)
    assert not report.rewrites
    assert len(report.near_misses) == 1
    miss = report.near_misses[0]
    assert miss.rule == "group-norm" and miss.node == "norm (InstanceNormalization)" and reason in miss.reason


def group_normalization(opset: int, constant_scale: bool = True) -> onnx.ModelProto:
    """ONNX GroupNormalization, 2 groups, on x [N, 4, 5]; scale/bias [2] (opset 18) or [4] (21)."""
    rng = np.random.default_rng(1)
    size = 2 if opset < 21 else 4
    initializers = [numpy_helper.from_array(rng.normal(size=size).astype(np.float32), "bias")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 5])]
    if constant_scale:
        initializers.append(numpy_helper.from_array(rng.normal(size=size).astype(np.float32), "scale"))
    else:
        inputs.append(helper.make_tensor_value_info("scale", TensorProto.FLOAT, [size]))
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], name="gn", num_groups=2, epsilon=1e-4)
    graph = helper.make_graph(
        [node], "gn", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers
    )
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("opset", "constant_scale"), [(18, True), (21, True), (21, False)])
def test_onnx_group_normalization_becomes_ortops_group_norm(opset: int, constant_scale: bool) -> None:
    model = group_normalization(opset, constant_scale)
    rewritten, report = optimize_with_report(model)
    assert op_counts(rewritten) == Counter({"ortops::GroupNorm": 1, "ai.onnx::Constant": 2 * (opset < 21)})
    feeds = {"x": np.random.default_rng(2).normal(1, 2, (3, 4, 5)).astype(np.float32)}
    if not constant_scale:
        feeds["scale"] = np.array([0.5, -1, 2, 3], np.float32)
    assert_same_outputs(model, rewritten, feeds)


def test_group_normalization_18_with_a_scale_the_model_does_not_fix_is_a_near_miss() -> None:
    model = group_normalization(18, constant_scale=False)
    rewritten, report = optimize_with_report(model)
    assert op_counts(rewritten) == {"ai.onnx::GroupNormalization": 1}
    assert [(m.node, "one per group" in m.reason) for m in report.near_misses] == [("gn (GroupNormalization)", True)]


# --- RoiAlign -------------------------------------------------------------------------------


class RoiAlignModule(torch.nn.Module):
    def __init__(self, aligned: bool, sampling_ratio: int) -> None:
        super().__init__()
        self.aligned, self.sampling_ratio = aligned, sampling_ratio

    def forward(self, x: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return torchvision.ops.roi_align(x, rois, (3, 4), 0.5, self.sampling_ratio, self.aligned)


def random_rois(rng: np.random.Generator, count: int, batch: int, size: float) -> np.ndarray:
    corners = rng.uniform(-2, size + 2, (count, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners.min(1), corners.max(1)], axis=1)
    return np.concatenate([rng.integers(0, batch, (count, 1)).astype(np.float32), boxes], axis=1)


@pytest.mark.parametrize(("opset", "aligned", "sampling_ratio"), [(11, False, 2), (16, True, 0), (16, False, -1)])
def test_torchvision_roi_align_becomes_ortops_roi_align(opset: int, aligned: bool, sampling_ratio: int) -> None:
    rng = np.random.default_rng(opset)
    x = rng.normal(size=(2, 3, 12, 10)).astype(np.float32)
    rois = random_rois(rng, 6, 2, 20)
    model = export(
        RoiAlignModule(aligned, sampling_ratio),
        (torch.from_numpy(x), torch.from_numpy(rois)),
        opset,
        input_names=["x", "rois"],
        dynamic_axes={"x": {0: "n"}, "rois": {0: "r"}},
    )
    rewritten, report = optimize_with_report(model)
    counts = op_counts(rewritten)
    assert counts["ortops::RoIAlign"] == 1 and "ai.onnx::RoiAlign" not in counts
    assert [r.made for r in report.rewrites] == ["/RoiAlign/ortops_RoIAlign (ortops::RoIAlign)"]
    for count in (6, 0, 1):  # zero rois too
        assert_same_outputs(model, rewritten, {"x": x, "rois": rois[:count]})


def test_multi_scale_roi_align_fuses_every_level() -> None:
    pooler = torchvision.ops.MultiScaleRoIAlign(["p2", "p3"], output_size=2, sampling_ratio=2).eval()

    class Pool(torch.nn.Module):
        def forward(self, p2: torch.Tensor, p3: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
            return pooler({"p2": p2, "p3": p3}, [boxes], [(64, 64)])

    rng = np.random.default_rng(3)
    p2, p3 = rng.normal(size=(1, 4, 16, 16)).astype(np.float32), rng.normal(size=(1, 4, 8, 8)).astype(np.float32)
    corners = rng.uniform(0, 64, (7, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners.min(1), corners.max(1)], axis=1)
    boxes[:3, 2:] = boxes[:3, :2] + 40  # large boxes, for the coarser level
    args = tuple(torch.from_numpy(a) for a in (p2, p3, boxes))
    model = export(Pool(), args, 16, input_names=["p2", "p3", "boxes"])
    rewritten, report = optimize_with_report(model)
    assert op_counts(model)["ai.onnx::RoiAlign"] == 2
    assert [r.rule for r in report.rewrites] == ["multi-level-roi-align"]
    counts = op_counts(rewritten)
    assert counts["ortops::RoIAlignByLevel"] == 1 and not {"ai.onnx::RoiAlign", "ai.onnx::ScatterElements"} & set(
        counts
    )
    assert_same_outputs(model, rewritten, {"p2": p2, "p3": p3, "boxes": boxes})


def roi_align_model(opset: int = 16, in_if: bool = False, **attributes: object) -> onnx.ModelProto:
    """RoiAlign on x [N, 2, 8, 8], rois [R, 4], batch_indices [R]; inside an If when in_if."""
    node = helper.make_node("RoiAlign", ["x", "rois", "batch_indices"], ["y"], name="roi_align", **attributes)
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 8, 8]),
        helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", 4]),
        helper.make_tensor_value_info("batch_indices", TensorProto.INT64, ["R"]),
    ]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    if in_if:
        then_branch = helper.make_graph([node], "then", [], [output])
        other = helper.make_node("Identity", ["x"], ["y"], name="identity")
        else_branch = helper.make_graph([other], "else", [], [output])
        inputs.append(helper.make_tensor_value_info("pool", TensorProto.BOOL, []))
        node = helper.make_node("If", ["pool"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch)
    graph = helper.make_graph([node], "roi_align", inputs, [output])
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", opset)])


def roi_align_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    rois = random_rois(rng, 5, 2, 8)
    return {
        "x": rng.normal(size=(2, 2, 8, 8)).astype(np.float32),
        "rois": rois[:, 1:] * 2,
        "batch_indices": rois[:, 0].astype(np.int64),
    }


@pytest.mark.parametrize(
    ("opset", "attributes"),
    [
        (10, {}),
        (16, {}),
        (16, {"coordinate_transformation_mode": "output_half_pixel", "spatial_scale": 0.5, "sampling_ratio": 3}),
        (16, {"coordinate_transformation_mode": "half_pixel", "output_height": 2, "output_width": 5}),
    ],
)
def test_onnx_roi_align_in_avg_mode_is_rewritten_with_the_same_values(opset: int, attributes: dict) -> None:
    model = roi_align_model(opset, **{"spatial_scale": 0.5, **attributes})
    rewritten, report = optimize_with_report(model)
    assert op_counts(rewritten)["ortops::RoIAlign"] == 1 and len(report.rewrites) == 1
    assert_same_outputs(model, rewritten, roi_align_feeds())


def test_roi_align_inside_an_if_body_is_rewritten() -> None:
    model = roi_align_model(in_if=True)
    rewritten, report = optimize_with_report(model)
    assert op_counts(rewritten)["ortops::RoIAlign"] == 1 and "ai.onnx::RoiAlign" not in op_counts(rewritten)
    assert [r.graph for r in report.rewrites] == ["if/then_branch"]
    for pool in (True, False):
        assert_same_outputs(model, rewritten, {**roi_align_feeds(), "pool": np.array(pool)})


@pytest.mark.parametrize(
    ("opset", "attributes"),
    [
        (10, {}),
        (16, {"coordinate_transformation_mode": "output_half_pixel", "spatial_scale": 0.5, "sampling_ratio": 3}),
        (16, {"coordinate_transformation_mode": "half_pixel", "output_height": 2, "output_width": 5}),
    ],
)
def test_roi_align_max_mode_becomes_tensorrts_node_with_the_same_values(opset: int, attributes: dict) -> None:
    """ONNX's max (each sample's largest weighted corner) is TRT::ROIAlign_TRT's mode 0."""
    model = roi_align_model(opset, mode="max", **{"spatial_scale": 0.5, **attributes})
    rewritten, report = optimize_with_report(model)
    assert [r.made for r in report.rewrites] == ["roi_align/ortops_ROIAlign_TRT (TRT::ROIAlign_TRT)"]
    assert op_counts(rewritten)["TRT::ROIAlign_TRT"] == 1 and "ai.onnx::RoiAlign" not in op_counts(rewritten)
    assert {o.domain: o.version for o in rewritten.opset_import}["TRT"] == 1
    for seed in range(3):
        feeds = roi_align_feeds(seed)
        np.testing.assert_array_equal(run(rewritten, feeds)[0], run(model, feeds)[0])  # to the bit


def test_roi_align_max_mode_keeps_a_batch_index_past_int32_an_error() -> None:
    """The plugin's indices are int32: 2^32 would wrap onto image 0 if it were only cast."""
    model = roi_align_model(mode="max")
    rewritten, _ = optimize_with_report(model)
    feeds = roi_align_feeds()
    feeds["batch_indices"] = feeds["batch_indices"].copy()
    feeds["batch_indices"][0] = 2**32
    for m in (model, rewritten):
        with pytest.raises(Exception, match="batch_indices|batch index"):
            run(m, feeds)


def test_roi_align_max_mode_in_double_is_a_near_miss() -> None:
    model = roi_align_model(mode="max")
    for value in (*model.graph.input, *model.graph.output):
        if value.name in ("x", "rois", "y"):
            value.type.tensor_type.elem_type = TensorProto.DOUBLE
    rewritten, report = optimize_with_report(model)
    assert op_counts(rewritten) == op_counts(model)
    assert [(m.rule, m.node) for m in report.near_misses] == [("roi-align", "roi_align (RoiAlign)")]
    assert report.near_misses[0].reason.startswith("mode 'max'") and "float32" in report.near_misses[0].reason


# --- non-maximum suppression ----------------------------------------------------------------

NMS_OPTIONAL = ("max_output_boxes_per_class", "iou_threshold", "score_threshold")
NMS_VALUES = {"max_output_boxes_per_class": np.array([6], np.int64), "iou_threshold": np.array([0.45], np.float32)}
NMS_VALUES["score_threshold"] = np.array([0.2], np.float32)


def nms_model(
    present: tuple[bool, bool, bool] = (True, True, True),
    constants: bool = False,
    where: str = "main",
    center_point_box: int = 0,
) -> onnx.ModelProto:
    """ONNX NonMaxSuppression on boxes [B, N, 4] and scores [B, C, N], with the optional inputs
    ``present`` (Constants in the graph, or graph inputs), in the main graph, an If's then
    branch or a Loop body (run twice, keeping the last result)."""
    names = [name if there else "" for name, there in zip(NMS_OPTIONAL, present)]
    while names and not names[-1]:
        names.pop()
    nodes, inputs = (
        [],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["B", "N", 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["B", "C", "N"]),
        ],
    )
    for name in filter(None, names):
        if constants:
            nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(NMS_VALUES[name])))
        else:
            elem = TensorProto.INT64 if name == NMS_OPTIONAL[0] else TensorProto.FLOAT
            inputs.append(helper.make_tensor_value_info(name, elem, [1]))
    nms = helper.make_node(
        "NonMaxSuppression", ["boxes", "scores", *names], ["selected"], name="nms", center_point_box=center_point_box
    )
    output = helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3])
    if where == "if":
        none = numpy_helper.from_array(np.zeros((0, 3), np.int64))
        then_branch = helper.make_graph([nms], "then", [], [output])
        else_branch = helper.make_graph(
            [helper.make_node("Constant", [], ["selected"], value=none)], "else", [], [output]
        )
        inputs.append(helper.make_tensor_value_info("suppress", TensorProto.BOOL, []))
        nms = helper.make_node(
            "If", ["suppress"], ["selected"], name="if", then_branch=then_branch, else_branch=else_branch
        )
    elif where == "loop":
        body_inputs = [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("go", TensorProto.BOOL, []),
            helper.make_tensor_value_info("last", TensorProto.INT64, [None, 3]),
        ]
        body_outputs = [helper.make_tensor_value_info("go_on", TensorProto.BOOL, []), output]
        body = helper.make_graph(
            [helper.make_node("Identity", ["go"], ["go_on"]), nms], "body", body_inputs, body_outputs
        )
        nodes.append(helper.make_node("Constant", [], ["trips"], value=numpy_helper.from_array(np.array(2, np.int64))))
        none = numpy_helper.from_array(np.zeros((0, 3), np.int64))
        nodes.append(helper.make_node("Constant", [], ["none"], value=none))
        nms = helper.make_node("Loop", ["trips", "", "none"], ["selected"], name="loop", body=body)
    graph = helper.make_graph([*nodes, nms], "nms", inputs, [output])
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 11)])


def nms_feeds(model: onnx.ModelProto, seed: int = 0, center_point_box: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 40, (2, 8, 1, 2)) + rng.normal(0, 2, (2, 8, 6, 2))  # clusters of 6
    size = rng.uniform(4, 12, (2, 8, 6, 2))
    boxes = np.concatenate([xy, size] if center_point_box else [xy, xy + size], -1).reshape(2, 48, 4)
    feeds = {"boxes": boxes.astype(np.float32), "scores": rng.random((2, 3, 48)).astype(np.float32)}
    given = {i.name for i in model.graph.input}
    feeds.update({name: value for name, value in NMS_VALUES.items() if name in given})
    if "suppress" in given:
        feeds["suppress"] = np.array(True)
    return feeds


@pytest.mark.parametrize("constants", [False, True], ids=["inputs", "constants"])
@pytest.mark.parametrize("present", list(itertools.product([False, True], repeat=3)), ids=str)
def test_onnx_nms_with_every_optional_input_combination_is_rewritten(present, constants) -> None:
    model = nms_model(present, constants)
    rewritten, report = optimize_with_report(model, ["non-max-suppression"])
    assert op_counts(rewritten)["ortops::NonMaxSuppression"] == 1 and "ai.onnx::NonMaxSuppression" not in op_counts(
        rewritten
    )
    assert [r.graph for r in report.rewrites] == ["main graph"]
    assert_same_outputs(model, rewritten, nms_feeds(model))


@pytest.mark.parametrize(("where", "graph"), [("if", "if/then_branch"), ("loop", "loop/body")])
@pytest.mark.parametrize("center_point_box", [0, 1])
def test_onnx_nms_in_if_and_loop_bodies_is_rewritten(where: str, graph: str, center_point_box: int) -> None:
    model = nms_model(where=where, center_point_box=center_point_box)
    rewritten, report = optimize_with_report(model, ["non-max-suppression"])
    assert op_counts(rewritten)["ortops::NonMaxSuppression"] == 1 and "ai.onnx::NonMaxSuppression" not in op_counts(
        rewritten
    )
    assert [r.graph for r in report.rewrites] == [graph]
    for seed in range(3):
        assert_same_outputs(model, rewritten, nms_feeds(model, seed, center_point_box))


def test_onnx_nms_of_unknown_element_type_is_a_near_miss() -> None:
    """Boxes from a node that shape inference does not know: their type cannot be proven."""
    model = nms_model()
    model.graph.node.insert(0, helper.make_node("Decode", ["raw"], ["boxes"], name="decode", domain="example"))
    model.graph.input[0].name = "raw"
    model.opset_import.append(helper.make_opsetid("example", 1))
    rewritten, report = optimize_with_report(model, ["non-max-suppression"])
    assert op_counts(rewritten) == op_counts(model)
    assert [(m.rule, m.node) for m in report.near_misses] == [("non-max-suppression", "nms (NonMaxSuppression)")]
    assert report.near_misses[0].reason == "the element type of boxes is not known"


@pytest.fixture(scope="module")
def faster_rcnn() -> tuple[onnx.ModelProto, np.ndarray]:
    """torchvision's Faster R-CNN (random weights, every box scored) as the TorchScript exporter
    writes it: its NonMaxSuppression nodes sit in If bodies."""
    torch.manual_seed(0)
    detector = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=3, box_score_thresh=0.0, min_size=160, max_size=160
    ).eval()
    image = torch.rand(3, 160, 160)
    model = export(detector, ([image],), 16, input_names=["image"], output_names=["boxes", "labels", "scores"])
    return model, image.numpy()


def test_torchvision_faster_rcnn_nms_is_rewritten_with_the_same_detections(faster_rcnn) -> None:
    model, image = faster_rcnn
    nms_nodes = op_counts(model)["ai.onnx::NonMaxSuppression"]
    assert nms_nodes >= 2
    rewritten, report = optimize_with_report(model)
    counts = op_counts(rewritten)
    assert counts["ortops::NonMaxSuppression"] == nms_nodes and "ai.onnx::NonMaxSuppression" not in counts
    assert all("/" in r.graph for r in report.rewrites if r.rule == "non-max-suppression")  # in If bodies
    before, after = run(model, {"image": image}), run(rewritten, {"image": image})
    assert before[0].shape[0] > 0, "the detector found nothing: the test would prove little"
    np.testing.assert_allclose(after[0], before[0], rtol=1e-5, atol=1e-4)  # boxes
    np.testing.assert_array_equal(after[1], before[1])  # labels
    np.testing.assert_allclose(after[2], before[2], rtol=1e-5, atol=1e-6)  # scores


class ClipKeptBoxes(torch.nn.Module):
    """The boxes scored above 0.5 (a count known only at run time), clipped as torchvision's
    ``clip_boxes_to_image`` does: stacked as [K, 2, 2] and reshaped back to the boxes' shape."""

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        boxes = boxes[scores > 0.5]
        x = boxes[..., 0::2].clamp(min=0, max=4)
        y = boxes[..., 1::2].clamp(min=0, max=4)
        return torch.stack((x, y), dim=boxes.dim()).reshape(boxes.shape)


def test_result_carries_no_shapes_the_file_did_not_have() -> None:
    """The shapes inference proves for the checks stay out of the result: given them, ONNX
    Runtime's ReshapeFusion made torchvision's FCOS fail on an image with no detection (the
    reshape to [K, 4] became [0, -1]), where the original runs."""
    model = export(ClipKeptBoxes(), (torch.rand(5, 4), torch.rand(5)), 16, input_names=["boxes", "scores"])
    rewritten, report = optimize_with_report(model)
    assert not report.rewrites
    assert rewritten.graph.value_info == model.graph.value_info
    assert list(rewritten.graph.output) == list(model.graph.output)
    boxes = np.random.default_rng(0).uniform(-2, 6, (5, 4)).astype(np.float32)
    for scores in ([0.0] * 5, [0.9, 0.1, 0.7, 0.0, 1.0]):  # no box kept; three kept
        assert_same_outputs(model, rewritten, {"boxes": boxes, "scores": np.array(scores, np.float32)})


# --- the command ----------------------------------------------------------------------------


def save_group_norm(tmp_path: Path, external: bool = False) -> Path:
    path = tmp_path / "gn.onnx"
    model = decomposed_group_norm(weight_size=1024 if external else 0)
    onnx.save_model(model, str(path), save_as_external_data=external, location="gn.data")
    return path


def test_cli_optimizes_verifies_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target = save_group_norm(tmp_path), tmp_path / "out.onnx"
    assert _cli.main(["optimize", str(source), str(target), "--verify", "--dim", "N=2"]) == _cli.OK
    out, err = capsys.readouterr()
    assert "[group-norm] reshape_in (Reshape), norm (InstanceNormalization)" in out
    assert "-> add/ortops_GroupNorm (ortops::GroupNorm)" in out and "verified: 1 output equal" in err
    assert op_counts(onnx.load(str(target))) == {"ortops::GroupNorm": 1, "ai.onnx::Constant": 2}


def test_cli_warns_of_an_original_that_is_not_valid_and_still_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node reading a value that nothing makes (as the dynamo exporter writes at times): the
    rewrite goes ahead, with a warning that ONNX Runtime may refuse the file; a valid file gets
    none."""
    source = save_group_norm(tmp_path)
    assert _cli.main(["optimize", str(source), str(tmp_path / "valid.onnx")]) == _cli.OK
    assert "warning" not in capsys.readouterr().err
    model = onnx.load(str(source))
    model.graph.node.append(helper.make_node("Relu", ["made_by_nothing"], ["dangling"]))
    model.graph.output.append(helper.make_tensor_value_info("dangling", TensorProto.FLOAT, None))
    invalid = tmp_path / "invalid.onnx"
    onnx.save(model, str(invalid))
    assert _cli.main(["optimize", str(invalid), str(tmp_path / "out.onnx")]) == _cli.OK
    err = capsys.readouterr().err
    assert f"warning: {invalid} is not a valid model: node" in err and "reads 'made_by_nothing'" in err
    assert op_counts(onnx.load(str(tmp_path / "out.onnx")))["ortops::GroupNorm"] == 1


def test_cli_json_report_and_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = save_group_norm(tmp_path)
    path = tmp_path / "max.onnx"
    onnx.save(roi_align_model(mode="max"), str(path))
    assert _cli.main(["optimize", str(path), str(tmp_path / "o.onnx"), "--json", "--rules", "roi-align"]) == _cli.OK
    report = json.loads(capsys.readouterr().out)
    assert report["rules"] == ["roi-align"] and report["near_misses"] == []
    assert report["rewrites"][0]["replaced"] == ["roi_align (RoiAlign)"]
    assert _cli.main(["optimize", str(source), str(tmp_path / "o.onnx"), "--rules", "roi-align"]) == _cli.OK
    assert "rewrites (0)" in capsys.readouterr().out
    assert _cli.main(["optimize", "--list-rules"]) == _cli.OK
    assert capsys.readouterr().out.splitlines()[0].startswith("group-norm: ")
    assert _cli.main(["optimize", str(source), str(tmp_path / "o.onnx"), "--rules", "nms"]) == _cli.USAGE
    assert "no rule named 'nms'" in capsys.readouterr().err
    assert _cli.main(["optimize", str(source)]) == _cli.USAGE
    assert _cli.main(["optimize", str(tmp_path / "missing.onnx"), str(tmp_path / "o.onnx")]) == _cli.USAGE


def test_cli_verify_refuses_to_write_a_result_that_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ortops import _optimize

    real = _optimize.optimize_with_report

    def wrong_epsilon(model: object, rules: object = None) -> tuple[onnx.ModelProto, object]:
        result, report = real(model, rules)
        for node in result.graph.node:
            if node.op_type == "GroupNorm":
                epsilon = next(a for a in node.attribute if a.name == "epsilon")
                epsilon.f = 10.0
        return result, report

    monkeypatch.setattr(_optimize, "optimize_with_report", wrong_epsilon)
    target = tmp_path / "out.onnx"
    assert _cli.main(["optimize", str(save_group_norm(tmp_path)), str(target), "--verify"]) == _cli.CANNOT_RUN
    err = capsys.readouterr().err
    assert "outputs differ from the original's:" in err
    assert "and so do rewritten blocks, each run alone on the original's values (not written" in err
    assert "add/ortops_GroupNorm: y: values differ" in err
    assert not target.exists()


def group_norm_then_ranking() -> onnx.ModelProto:
    """A GroupNorm (4 groups, torch's decomposition) whose channels are then ranked by their
    largest value (TopK): channels that tie are ranked by index, so a change far below float
    rounding in one of them can reorder the ranking, as 900 queries are picked in DINO."""
    model = decomposed_group_norm(shape1=[0, 4, -1], groups=4, identity_affine=True)
    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(np.array([4], np.int64), "k"))
    graph.node.extend(
        [
            helper.make_node("ReduceMax", ["y"], ["largest"], name="largest", axes=[2, 3], keepdims=0),
            helper.make_node("TopK", ["largest", "k"], ["ranked", "ranking"], name="rank"),
        ]
    )
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("ranking", TensorProto.INT64, None))
    return model


def scale_one_channel(factor: float):
    """An optimizer whose GroupNorm scales channel 1 by ``factor`` (a stand-in for rounding)."""
    from ortops import _optimize

    real = _optimize.optimize_with_report

    def optimize(model: object, rules: object = None) -> tuple[onnx.ModelProto, object]:
        result, report = real(model, rules)
        (node,) = (n for n in result.graph.node if n.op_type == "GroupNorm")
        (constant,) = (n for n in result.graph.node if n.output[0] == node.input[1])
        scale = constant.attribute[0].t  # the rule's scale, a Constant
        values = numpy_helper.to_array(scale).copy()
        values[1] *= factor
        scale.CopyFrom(numpy_helper.from_array(values, scale.name))
        return result, report

    return optimize


@pytest.mark.parametrize("factor", [1 + 1e-6, 1.01])
def test_cli_verify_checks_each_block_alone_where_rounding_reorders_a_ranking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, factor: float
) -> None:
    """Channels 0 and 1 are equal: the original ranks 0 before 1, the result (channel 1 larger
    by ``factor``) 1 before 0. Within float rounding (1 + 1e-6) every block, run alone on the
    original's values, gives the original's, and the result is written with the reason; a real
    difference (1.01) is refused."""
    from ortops import _optimize

    source, target = tmp_path / "ranked.onnx", tmp_path / "out.onnx"
    onnx.save(group_norm_then_ranking(), str(source))
    x = np.random.default_rng(0).normal(size=(1, 4, 3, 3)).astype(np.float32)
    x[0, 1] = x[0, 0]
    np.save(tmp_path / "x.npy", x)
    monkeypatch.setattr(_optimize, "optimize_with_report", scale_one_channel(factor))
    code = _cli.main(["optimize", str(source), str(target), "--verify", "--input", f"x={tmp_path / 'x.npy'}"])
    err = capsys.readouterr().err
    assert "ranking: 2 of 4 values differ" in err, err
    if factor < 1.001:
        assert code == _cli.OK and target.exists()
        assert "verified: each of the 1 rewritten blocks, run alone on the values the original computes" in err
    else:
        assert code == _cli.CANNOT_RUN and not target.exists()
        assert "add/ortops_GroupNorm: y: values differ" in err


def test_cli_keeps_external_data_external(tmp_path: Path) -> None:
    source, target = save_group_norm(tmp_path, external=True), tmp_path / "out.onnx"
    assert _cli.main(["optimize", str(source), str(target), "--verify"]) == _cli.OK
    assert (tmp_path / "out.onnx.data").stat().st_size == 4 * 1024
    rewritten = onnx.load(str(target))
    assert op_counts(rewritten)["ortops::GroupNorm"] == 1
    feeds = {"input": np.random.default_rng(0).normal(size=(1024, 4, 3, 3)).astype(np.float32)}
    assert_same_outputs(onnx.load(str(source)), rewritten, feeds)


def test_without_onnxscript_the_command_says_what_to_install(tmp_path: Path) -> None:
    code = "import sys; from ortops._cli import main; sys.exit(main(sys.argv[1:]))"
    result = python_without(["onnxscript"], code, "optimize", str(save_group_norm(tmp_path)), str(tmp_path / "o.onnx"))
    assert result.returncode == _cli.USAGE
    assert result.stderr.strip().splitlines() == [
        'ortops: ortops optimize needs the onnxscript package, which is not installed: pip install "ortops[optimize]"'
    ]


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_rewritten_file_runs_on_the_emulated_device(tmp_path: Path, mode: str) -> None:
    """The device-on-CPU build runs ortops' device kernels (as on CUDA) for the nodes made:
    ortops::RoIAlign for avg, TRT::ROIAlign_TRT for max."""
    device_library = emulated_device_library()
    if device_library is None:
        pytest.skip("no emulated device library beside the library")
    feeds = {**roi_align_feeds(), "pool": np.array(True)}
    model = roi_align_model(in_if=True, mode=mode)
    expected = run(model, feeds)[0]
    got = first_output_with_library(ortops.optimize(model), feeds, device_library, tmp_path)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_cli_verify_refuses_a_result_changed_outside_its_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blocks alone prove the result only where the rest is the original's: a result whose
    ranking was changed (the smallest first) is refused, though its one block is exact."""
    from ortops import _optimize

    real = _optimize.optimize_with_report

    def smallest_first(model: object, rules: object = None) -> tuple[onnx.ModelProto, object]:
        result, report = real(model, rules)
        (rank,) = (n for n in result.graph.node if n.op_type == "TopK")
        rank.attribute.append(helper.make_attribute("largest", 0))
        return result, report

    source, target = tmp_path / "ranked.onnx", tmp_path / "out.onnx"
    onnx.save(group_norm_then_ranking(), str(source))
    monkeypatch.setattr(_optimize, "optimize_with_report", smallest_first)
    assert _cli.main(["optimize", str(source), str(target), "--verify"]) == _cli.CANNOT_RUN
    err = capsys.readouterr().err
    assert "  ranking: " in err and " of 4 values differ" in err, err
    assert "rank: not the original's node" in err and not target.exists()


def test_saving_with_external_data_leaves_the_model_as_it_was(tmp_path: Path) -> None:
    """onnx moves a tensor's bytes out of a model it writes with external data; --verify writes
    the result to a temporary file (externally when it is 2 GB or more) before writing it to
    OUT, which then held references to the deleted temporary data."""
    from ortops._optimize import save

    model = decomposed_group_norm(weight_size=1024)
    before = model.SerializeToString()
    save(model, str(tmp_path / "first.onnx"), external=True)
    assert model.SerializeToString() == before
    save(model, str(tmp_path / "second.onnx"), external=True)
    assert (tmp_path / "second.onnx.data").stat().st_size == 4 * 1024
    feeds = {"input": np.random.default_rng(0).normal(size=(1024, 4, 3, 3)).astype(np.float32)}
    assert_same_outputs(model, onnx.load(str(tmp_path / "second.onnx")), feeds)


def group_norm_read_by_a_branch() -> onnx.ModelProto:
    """The GroupNorm of group_norm_then_ranking whose output only an If's branches read (by
    name, from the outer graph)."""
    model = group_norm_then_ranking()
    graph = model.graph
    del graph.node[6:]  # the ranking
    then_branch = helper.make_graph(
        [helper.make_node("Identity", ["y"], ["picked"])],
        "then",
        [],
        [helper.make_tensor_value_info("picked", 1, None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["y"], ["negated"])], "else", [], [helper.make_tensor_value_info("negated", 1, None)]
    )
    graph.node.append(
        helper.make_node("If", ["flag"], ["out"], name="pick", then_branch=then_branch, else_branch=else_branch)
    )
    graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("out", TensorProto.FLOAT, None))
    return model


def test_cli_verify_compares_a_block_output_that_only_a_branch_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ortops import _optimize

    source, target = tmp_path / "branch.onnx", tmp_path / "out.onnx"
    onnx.save(group_norm_read_by_a_branch(), str(source))
    monkeypatch.setattr(_optimize, "optimize_with_report", scale_one_channel(1.01))
    assert _cli.main(["optimize", str(source), str(target), "--verify"]) == _cli.CANNOT_RUN
    err = capsys.readouterr().err
    assert "and so do rewritten blocks" in err and "ortops_GroupNorm" in err and not target.exists(), err
