"""ortops::RoIAlignByLevel (each roi pooled from the level input 'levels' names) against two
references written independently of the kernel: ONNX Runtime's own RoiAlign per level merged
by ScatterElements, as torchvision's MultiScaleRoIAlign exports (equal to the bit in avg mode),
and the slow RoIAlign loops of references.py (both modes)."""

from __future__ import annotations

import numpy as np
import pytest
import references
from onnx import TensorProto, helper

from ortest import DEFAULT_OPSET, IR_VERSION, run, session

F32 = np.float32
NODE = ("RoIAlignByLevel", "ortops")
SCALES = [1 / 4, 1 / 8, 1 / 16, 1 / 32]
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


def pyramid(seed: int, images: int = 2, channels: int = 3, size: int = 64, levels: int = 4) -> list[np.ndarray]:
    """Feature maps [images, channels, size / 2^l, size / 2^l], finest first."""
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((images, channels, size >> level, size >> level)).astype(F32) for level in range(levels)
    ]


def random_rois(seed: int, count: int, images: int = 2, extent: float = 256.0) -> np.ndarray:
    """Rois [count, 5] (batch_index, x1, y1, x2, y2) of every size, some reaching past the image."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-16, extent, (count, 2))
    wh = np.exp(rng.uniform(np.log(0.5), np.log(extent), (count, 2)))
    index = rng.integers(0, images, (count, 1))
    return np.concatenate([index, xy, xy + wh], 1).astype(F32)


def by_level(features: list[np.ndarray], rois: np.ndarray, levels: np.ndarray, **attributes: object) -> np.ndarray:
    inputs: dict[str, np.ndarray | None] = {"rois": rois, "levels": levels}
    inputs.update({f"features_{level}": f for level, f in enumerate(features)})
    attributes.setdefault("spatial_scales", SCALES[: len(features)])
    return run(*NODE, inputs, ["pooled"], **attributes)[0]


def onnx_runtime_merge(
    features: list[np.ndarray], rois: np.ndarray, levels: np.ndarray, size: int, sampling: int, aligned: int
) -> np.ndarray:
    """torchvision's exported merge, run by ONNX Runtime: per level, the rois of that level
    (Equal, NonZero, Gather), ONNX's RoiAlign, and a ScatterElements into zeros."""
    nodes, inits = [], []
    channels = features[0].shape[1]
    shape = np.array([len(rois), channels, size, size], np.int64)
    inits += [
        helper.make_tensor("shape", TensorProto.INT64, [4], shape),
        helper.make_tensor("boxes_columns", TensorProto.INT64, [4], [1, 2, 3, 4]),
        helper.make_tensor("index_column", TensorProto.INT64, [], [0]),
        helper.make_tensor("index_shape", TensorProto.INT64, [4], [-1, 1, 1, 1]),
        helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]),
    ]
    nodes.append(helper.make_node("ConstantOfShape", ["shape"], ["merged_0"]))
    mode = "half_pixel" if aligned else "output_half_pixel"
    for level in range(len(features)):
        inits.append(helper.make_tensor(f"level_{level}", TensorProto.INT64, [], [level]))
        nodes += [
            helper.make_node("Equal", ["levels", f"level_{level}"], [f"here_{level}"]),
            helper.make_node("NonZero", [f"here_{level}"], [f"nonzero_{level}"]),
            helper.make_node("Reshape", [f"nonzero_{level}", "minus_one"], [f"chosen_{level}"]),
            helper.make_node("Gather", ["rois", f"chosen_{level}"], [f"rois_{level}"], axis=0),
            helper.make_node("Gather", [f"rois_{level}", "boxes_columns"], [f"boxes_{level}"], axis=1),
            helper.make_node("Gather", [f"rois_{level}", "index_column"], [f"index_float_{level}"], axis=1),
            helper.make_node("Cast", [f"index_float_{level}"], [f"index_{level}"], to=TensorProto.INT64),
            helper.make_node(
                "RoiAlign",
                [f"features_{level}", f"boxes_{level}", f"index_{level}"],
                [f"pooled_{level}"],
                output_height=size,
                output_width=size,
                sampling_ratio=sampling,
                spatial_scale=SCALES[level],
                coordinate_transformation_mode=mode,
            ),
            helper.make_node("Reshape", [f"chosen_{level}", "index_shape"], [f"column_{level}"]),
            helper.make_node("Shape", [f"pooled_{level}"], [f"pooled_shape_{level}"]),
            helper.make_node("Expand", [f"column_{level}", f"pooled_shape_{level}"], [f"indices_{level}"]),
            helper.make_node(
                "ScatterElements",
                [f"merged_{level}", f"indices_{level}", f"pooled_{level}"],
                [f"merged_{level + 1}"],
                axis=0,
            ),
        ]
    nodes[-1].output[0] = "pooled"
    inputs = [
        helper.make_tensor_value_info("rois", TensorProto.FLOAT, [None, 5]),
        helper.make_tensor_value_info("levels", TensorProto.INT64, [None]),
    ] + [helper.make_tensor_value_info(f"features_{level}", TensorProto.FLOAT, None) for level in range(len(features))]
    graph = helper.make_graph(
        nodes, "merge", inputs, [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None)], inits
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", DEFAULT_OPSET)])
    feeds = {"rois": rois, "levels": levels, **{f"features_{level}": f for level, f in enumerate(features)}}
    return session(model, cpu_fallback=True).run(None, feeds)[0]


def loops(
    features: list[np.ndarray],
    rois: np.ndarray,
    levels: np.ndarray,
    out_h: int,
    out_w: int,
    sampling: int,
    mode: str = "avg",
    aligned: int = 1,
) -> np.ndarray:
    """references.roi_align on each level's rois; zeros for a level outside the pyramid."""
    out = np.zeros((len(rois), features[0].shape[1], out_h, out_w), F32)
    for level, feature in enumerate(features):
        chosen = np.nonzero(levels == level)[0]
        if len(chosen):
            out[chosen] = references.roi_align(
                feature, rois[chosen], out_h, out_w, SCALES[level], sampling, mode, bool(aligned), compat=False
            )
    return out


@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("sampling", [0, 2])
def test_avg_equals_onnx_runtimes_per_level_roi_align_merge_to_the_bit(aligned: int, sampling: int) -> None:
    features, rois = pyramid(0), random_rois(1, 200)
    # Every level, and levels outside the pyramid, which the merge leaves zero.
    levels = np.random.default_rng(2).integers(-1, 5, len(rois)).astype(np.int64)
    got = by_level(features, rois, levels, output_height=7, output_width=7, sampling_ratio=sampling, aligned=aligned)
    expected = onnx_runtime_merge(features, rois, levels, 7, sampling, aligned)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_both_modes_match_the_reference_loops(mode: str) -> None:
    features, rois = pyramid(3, size=32), random_rois(4, 40, extent=128.0)
    levels = np.random.default_rng(5).integers(0, 4, len(rois)).astype(np.int64)
    got = by_level(features, rois, levels, output_height=3, output_width=2, sampling_ratio=0, mode=mode, aligned=0)
    np.testing.assert_allclose(got, loops(features, rois, levels, 3, 2, 0, mode, aligned=0), **TOLERANCE)


def test_levels_outside_the_pyramid_give_zeros_and_their_rois_are_not_checked() -> None:
    features = pyramid(6, size=16, levels=2)
    rois = random_rois(7, 6, extent=64.0)
    rois[1, 2] = np.nan  # never read: its level names no map
    rois[3, 0] = 9.0  # a batch index past the batch, likewise
    levels = np.array([0, -1, 1, 2, np.iinfo(np.int64).min, np.iinfo(np.int64).max], np.int64)
    got = by_level(features, rois, levels, output_height=2, output_width=2, sampling_ratio=2)
    assert not got[[1, 3, 4, 5]].any()
    expected = loops(features, rois, levels, 2, 2, 2)
    np.testing.assert_allclose(got, expected, **TOLERANCE)


def test_many_unread_rois_with_nan_coordinates_leave_the_others_pooled_as_the_reference() -> None:
    """Rois on no level are not read, not even to order the rois for the threads: NaN
    coordinates among hundreds of them must not disturb the pooling of the others."""
    features = pyramid(12, size=32)
    rois = random_rois(13, 600, extent=128.0)
    levels = np.random.default_rng(14).integers(0, 4, len(rois)).astype(np.int64)
    unread = np.random.default_rng(15).random(len(rois)) < 0.5
    levels[unread] = -1
    rois[unread, 1:] = np.nan
    rois[unread[::-1] & unread, 0] = np.inf
    got = by_level(features, rois, levels, output_height=2, output_width=2, sampling_ratio=2)
    assert not got[unread].any()
    np.testing.assert_allclose(got, loops(features, rois, levels, 2, 2, 2), **TOLERANCE)


def test_empty_rois_and_channels() -> None:
    features = pyramid(8, size=16, levels=2)
    empty = by_level(features, np.zeros((0, 5), F32), np.zeros(0, np.int64), output_height=7, output_width=7)
    assert empty.shape == (0, 3, 7, 7)
    no_channels = [f[:, :0] for f in features]
    rois, levels = random_rois(9, 4, extent=64.0), np.array([0, 1, 0, 1], np.int64)
    assert by_level(no_channels, rois, levels, output_height=2, output_width=2).shape == (4, 0, 2, 2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("nan_roi", r"roi 2 in input 'rois' is not finite"),
        ("batch_index", r"roi 0 has batch index 5, but input 'features\[0\]' has 2 images"),
        ("levels_length", r"input 'levels' must hold one level per roi, shape \[4\], got \[3\]"),
        ("scales", r"'spatial_scales' lists 1 scales, but the node has 2 inputs 'features'"),
        ("channels", r"every level needs the same N and C"),
        ("mode", r"attribute 'mode' must be \"avg\" or \"max\""),
    ],
)
def test_errors_name_the_input_and_the_value(change: str, message: str) -> None:
    features = pyramid(10, size=16, levels=2)
    rois, levels = random_rois(11, 4, extent=64.0), np.array([0, 1, 1, 0], np.int64)
    attributes: dict[str, object] = {"output_height": 2, "output_width": 2}
    if change == "nan_roi":
        rois[2, 3] = np.nan
    elif change == "batch_index":
        rois[0, 0] = 5
    elif change == "levels_length":
        levels = levels[:3]
    elif change == "scales":
        attributes["spatial_scales"] = SCALES[:1]
    elif change == "channels":
        features[1] = features[1][:, :2]
    elif change == "mode":
        attributes["mode"] = "sum"
    with pytest.raises(Exception, match=message):
        by_level(features, rois, levels, **attributes)
