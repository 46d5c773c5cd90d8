"""Deformable convolutions (mmcv, mmdeploy, ortops) in ONNX Runtime against references written here from the
definition (torchvision.ops.deform_conv2d's): a slow direct loop for small shapes, and a vectorised numpy version,
itself checked against the loop, for shapes too large for it. numpy only: this file also runs with onnxruntime 1.17.
"""

from __future__ import annotations

import numpy as np
import pytest
import references
from onnx import numpy_helper

from ortest import make_model, run, session

# The result of one output element sums L = C/groups * kh * kw products (plus a bias); each kernel
# rounds the bilinear weights, the samples and the GEMM's partial sums in its dtype, so the error
# bound grows with L (x |values| ~ 1 here): atol = ULPS * L * eps(dtype).
ULPS = 16
RTOL = {np.float32: 1e-5, np.float64: 1e-12}


def assert_close(got: np.ndarray, expected: np.ndarray, dtype: type, length: int) -> None:
    atol = ULPS * max(length, 1) * float(np.finfo(dtype).eps)
    np.testing.assert_allclose(got, expected, rtol=RTOL[dtype], atol=atol)


def out_size(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def reference_loop(x, offset, weight, bias, mask, stride, padding, dilation, groups, deform_groups) -> np.ndarray:
    """The definition, one output element at a time, in float64: references.deform_conv2d."""
    f64 = lambda a: None if a is None else np.asarray(a, np.float64)  # noqa: E731
    return references.deform_conv2d(
        f64(x), f64(offset), f64(weight), f64(bias), f64(mask), stride, padding, dilation, groups, deform_groups
    )


def reference_numpy(x, offset, weight, bias, mask, stride, padding, dilation, groups, deform_groups) -> np.ndarray:
    """The same definition vectorised with numpy gathers, in float64 (for shapes too large for the loop)."""
    n, c, h, w = x.shape
    c_out, c_per_group, kh, kw = weight.shape
    out_h, out_w = offset.shape[2:]
    taps = kh * kw
    i, j = np.divmod(np.arange(taps), kw)
    base_y = (np.arange(out_h) * stride[0] - padding[0])[None, :, None] + (i * dilation[0])[:, None, None]
    base_x = (np.arange(out_w) * stride[1] - padding[1])[None, None, :] + (j * dilation[1])[:, None, None]
    off = offset.astype(np.float64).reshape(n, deform_groups, taps, 2, out_h, out_w)
    y, xx = base_y + off[:, :, :, 0], base_x + off[:, :, :, 1]  # [n, dg, taps, oh, ow]
    inside = (y > -1) & (y < h) & (xx > -1) & (xx < w)
    y0, x0 = np.floor(y), np.floor(xx)
    planes = x.astype(np.float64).reshape(n, deform_groups, c // deform_groups, h * w)
    samples = np.zeros((n, deform_groups, c // deform_groups, taps, out_h, out_w))
    for cy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for cx, wx in ((x0, 1 - (xx - x0)), (x0 + 1, xx - x0)):
            valid = inside & (cy >= 0) & (cy < h) & (cx >= 0) & (cx < w)
            index = (np.clip(cy, 0, h - 1) * w + np.clip(cx, 0, w - 1)).astype(np.int64)
            values = np.take_along_axis(planes, index.reshape(n, deform_groups, 1, -1), axis=3)
            samples += values.reshape(samples.shape) * (wy * wx * valid)[:, :, None]
    if mask is not None:
        samples *= mask.astype(np.float64).reshape(n, deform_groups, 1, taps, out_h, out_w)
    columns = samples.reshape(n, groups, c_per_group * taps, out_h * out_w)
    out = np.einsum("gok,ngkp->ngop", weight.astype(np.float64).reshape(groups, c_out // groups, -1), columns)
    out = out.reshape(n, c_out, out_h, out_w)
    return out if bias is None else out + bias.astype(np.float64)[None, :, None, None]


def make_case(rng, n, c, h, w, c_out, kernel, stride, padding, dilation, groups, dg, dtype=np.float32, spread=2.0):
    """Random inputs; stride, padding, dilation are pairs."""
    kh, kw = kernel
    out_h, out_w = (
        out_size(h, kh, stride[0], padding[0], dilation[0]),
        out_size(w, kw, stride[1], padding[1], dilation[1]),
    )
    x = rng.normal(size=(n, c, h, w)).astype(dtype)
    offset = (rng.normal(size=(n, 2 * dg * kh * kw, out_h, out_w)) * spread).astype(dtype)
    mask = rng.random((n, dg * kh * kw, out_h, out_w)).astype(dtype)
    weight = rng.normal(size=(c_out, c // groups, kh, kw)).astype(dtype)
    bias = rng.normal(size=c_out).astype(dtype)
    attrs = dict(stride=list(stride), padding=list(padding), dilation=list(dilation), groups=groups, deform_groups=dg)
    return x, offset, mask, weight, bias, attrs


def border_offsets(rng, offset: np.ndarray, h: int, w: int, kernel, attrs) -> np.ndarray:
    """Offsets that put every sample on a chosen coordinate: exactly on -1, 0, H-1 and H (the open
    interval's ends and the map's border rows), just inside and outside them, and far outside."""
    kh, kw = kernel
    n, channels, out_h, out_w = offset.shape
    special_y = np.array([-1.0, -0.999, -1.001, -0.5, 0.0, 0.25, h - 1, h - 0.5, h - 0.001, h, h + 0.001, -3.0, h + 7])
    special_x = np.array([-1.0, -0.999, -1.001, -0.5, 0.0, 0.75, w - 1, w - 0.5, w - 0.001, w, w + 0.001, -5.0, w + 2])
    i, j = np.divmod(np.arange(kh * kw), kw)
    base_y = (np.arange(out_h) * attrs["stride"][0] - attrs["padding"][0])[None, :, None] + (i * attrs["dilation"][0])[
        :, None, None
    ]
    base_x = (np.arange(out_w) * attrs["stride"][1] - attrs["padding"][1])[None, None, :] + (j * attrs["dilation"][1])[
        :, None, None
    ]
    dg = channels // (2 * kh * kw)
    target_y = rng.choice(special_y, size=(n, dg, kh * kw, out_h, out_w))
    target_x = rng.choice(special_x, size=(n, dg, kh * kw, out_h, out_w))
    result = np.stack([target_y - base_y, target_x - base_x], axis=3)  # exact in float32: small integers and halves
    return result.reshape(offset.shape).astype(offset.dtype)


def modulated_feeds(x, offset, mask, weight, bias=None) -> dict[str, np.ndarray]:
    """mmcv/mmdeploy order: input, offset, mask, weight[, bias] (bias only when the module has one)."""
    feeds = {"input": x, "offset": offset, "mask": mask, "weight": weight}
    if bias is not None:
        feeds["bias"] = bias
    return feeds


def ortops_feeds(x, offset, weight, bias=None, mask=None) -> dict[str, np.ndarray]:
    """torchvision order: input, offset, weight, bias, mask; an empty tensor stands for a missing bias or mask."""
    empty = np.zeros(0, x.dtype)
    return {
        "input": x,
        "offset": offset,
        "weight": weight,
        "bias": empty if bias is None else bias,
        "mask": empty if mask is None else mask,
    }


def accumulation_length(weight: np.ndarray) -> int:
    return int(np.prod(weight.shape[1:]))


CONFIGS = [
    # n, c, h, w, c_out, kernel, stride, padding, dilation, groups, deform_groups
    (1, 2, 5, 6, 3, (3, 3), (1, 1), (1, 1), (1, 1), 1, 1),
    (2, 4, 6, 5, 4, (3, 3), (2, 2), (1, 1), (1, 1), 2, 2),  # groups and deform groups together
    (1, 4, 6, 7, 2, (1, 3), (1, 1), (0, 1), (2, 2), 1, 2),
    (2, 2, 4, 4, 2, (1, 1), (1, 1), (0, 0), (1, 1), 1, 1),
    (1, 6, 7, 6, 4, (2, 3), (2, 1), (2, 0), (1, 2), 2, 3),  # non-square everything; dg 3 across 2 groups
    (1, 4, 5, 5, 4, (3, 2), (1, 1), (1, 1), (1, 1), 4, 1),  # depthwise
    (1, 8, 4, 5, 2, (2, 2), (1, 2), (1, 0), (1, 1), 2, 4),
]
CONFIG_IDS = [f"cfg{i}" for i in range(len(CONFIGS))]
MODULATED = [("mmcv", "MMCVModulatedDeformConv2d"), ("mmdeploy", "MMCVModulatedDeformConv2d")]


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_numpy_reference_matches_loop(config) -> None:
    """The vectorised reference used for large shapes is the loop's definition."""
    x, offset, mask, weight, bias, attrs = make_case(np.random.default_rng(11), *config, dtype=np.float64, spread=3.0)
    args = (attrs["stride"], attrs["padding"], attrs["dilation"], attrs["groups"], attrs["deform_groups"])
    np.testing.assert_allclose(
        reference_numpy(x, offset, weight, bias, mask, *args),
        reference_loop(x, offset, weight, bias, mask, *args),
        rtol=1e-12,
        atol=1e-12,
    )


def reference(x, offset, weight, bias, mask, attrs, loop: bool = True) -> np.ndarray:
    fn = reference_loop if loop else reference_numpy
    return fn(
        x,
        offset,
        weight,
        bias,
        mask,
        attrs["stride"],
        attrs["padding"],
        attrs["dilation"],
        attrs["groups"],
        attrs["deform_groups"],
    )


@pytest.mark.parametrize("domain,op", MODULATED)
@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("with_bias", [True, False])
def test_modulated_as_exported(domain, op, config, with_bias) -> None:
    """Nodes built as mmcv's and mmdeploy's symbolics wrote them: 4 or 5 inputs, int/ints attributes."""
    x, offset, mask, weight, bias, attrs = make_case(np.random.default_rng(config[1] + 10 * with_bias), *config)
    bias = bias if with_bias else None
    (got,) = run(op, domain, modulated_feeds(x, offset, mask, weight, bias), ["output"], **attrs)
    assert got.dtype == np.float32 and got.shape == (x.shape[0], weight.shape[0], *offset.shape[2:])
    assert_close(got, reference(x, offset, weight, bias, mask, attrs), np.float32, accumulation_length(weight))


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("file_attrs", [True, False])
def test_v1_as_exported(config, file_attrs) -> None:
    """mmcv's MMCVDeformConv2d carries bias (int) and im2col_step (int) attributes, which are ignored."""
    x, offset, _, weight, _, attrs = make_case(np.random.default_rng(config[2]), *config)
    extra = dict(bias=0, im2col_step=32) if file_attrs else {}
    feeds = {"input": x, "offset": offset, "weight": weight}
    (got,) = run("MMCVDeformConv2d", "mmcv", feeds, ["output"], **attrs, **extra)
    assert_close(got, reference(x, offset, weight, None, None, attrs), np.float32, accumulation_length(weight))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("with_bias,with_mask", [(True, True), (False, False), (True, False), (False, True)])
def test_ortops(dtype, config, with_bias, with_mask) -> None:
    x, offset, mask, weight, bias, attrs = make_case(np.random.default_rng(7), *config, dtype=dtype)
    bias, mask = (bias if with_bias else None), (mask if with_mask else None)
    (got,) = run("DeformConv2d", "ortops", ortops_feeds(x, offset, weight, bias, mask), ["output"], **attrs)
    assert got.dtype == dtype
    assert_close(got, reference(x, offset, weight, bias, mask, attrs), dtype, accumulation_length(weight))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", [CONFIGS[0], CONFIGS[1], CONFIGS[4]], ids=["cfg0", "cfg1", "cfg4"])
def test_samples_on_and_beyond_the_border(dtype, config) -> None:
    rng = np.random.default_rng(5)
    x, offset, mask, weight, bias, attrs = make_case(rng, *config, dtype=dtype)
    offset = border_offsets(rng, offset, x.shape[2], x.shape[3], config[5], attrs)
    expected = reference(x, offset, weight, bias, mask, attrs)
    (got,) = run("DeformConv2d", "ortops", ortops_feeds(x, offset, weight, bias, mask), ["output"], **attrs)
    assert_close(got, expected, dtype, accumulation_length(weight))
    if dtype == np.float32:
        (compat,) = run(
            "MMCVModulatedDeformConv2d", "mmcv", modulated_feeds(x, offset, mask, weight, bias), ["output"], **attrs
        )
        assert_close(compat, expected, dtype, accumulation_length(weight))


@pytest.mark.parametrize("domain,op", [("mmcv", "MMCVModulatedDeformConv2d"), ("ortops", "DeformConv2d")])
def test_weights_stored_in_the_model(domain: str, op: str) -> None:
    """Weights and bias as initializers (constants the kernel prepares once, when created)."""
    x, offset, mask, weight, bias, attrs = make_case(
        np.random.default_rng(11), 2, 12, 9, 8, 6, (3, 2), (1, 2), (1, 0), (2, 1), 3, 2, spread=3.0
    )
    feeds = (
        modulated_feeds(x, offset, mask, weight, bias)
        if domain == "mmcv"
        else ortops_feeds(x, offset, weight, bias, mask)
    )
    model = make_model(op, domain, [(k, v.dtype, v.ndim) for k, v in feeds.items()], ["output"], **attrs)
    for name in ("weight", "bias"):
        model.graph.initializer.append(numpy_helper.from_array(feeds[name], name))
        model.graph.input.remove(next(i for i in model.graph.input if i.name == name))
    runtime_feeds = {k: v for k, v in feeds.items() if k not in ("weight", "bias")}
    expected = reference(x, offset, weight, bias, mask, attrs)
    for _ in range(2):  # the second run reuses what the first prepared
        (got,) = session(model).run(None, runtime_feeds)
        assert_close(got, expected, np.float32, accumulation_length(weight))


@pytest.mark.parametrize("stored", [False, True], ids=["weights fed", "weights stored"])
@pytest.mark.parametrize("c_out,groups", [(70, 2), (33, 1), (64, 1)])
def test_output_channels_across_panels_and_positions_across_tiles(stored: bool, c_out: int, groups: int) -> None:
    """The float GEMM runs 32 output channels (a panel) by 14 positions (a tile) at a time,
    in blocks of whole tiles (core/packed_gemm.h, at AVX-512): a group's channels that end
    inside a panel (35 = 32 + 3, 33) or fill it exactly, positions that end inside a tile
    (13 x 11 = 143) and a batch of 2, with the weights fed or stored in the model (packed
    once, when the kernel is created). float32 against the reference; float16, computed in
    float32 and rounded once, must be the float32 kernel's result on the same values rounded."""
    x, offset, mask, weight, bias, attrs = make_case(
        np.random.default_rng(17), 2, 2 * 12, 13, 11, c_out, (3, 3), (1, 1), (1, 1), (1, 1), groups, 2
    )
    halves = [v.astype(np.float16) for v in (x, offset, mask, weight, bias)]
    x, offset, mask, weight, bias = (v.astype(np.float32) for v in halves)  # values both dtypes hold
    results = {}
    for dtype in (np.float32, np.float16):
        feeds = {k: v.astype(dtype) for k, v in ortops_feeds(x, offset, weight, bias, mask).items()}
        model = make_model(
            "DeformConv2d", "ortops", [(k, v.dtype, v.ndim) for k, v in feeds.items()], ["output"], **attrs
        )
        if stored:
            model.graph.initializer.append(numpy_helper.from_array(feeds["weight"], "weight"))
            model.graph.input.remove(next(i for i in model.graph.input if i.name == "weight"))
            del feeds["weight"]
        (results[dtype],) = session(model).run(None, feeds)
    expected = reference(x, offset, weight, bias, mask, attrs, loop=False)
    assert_close(results[np.float32], expected, np.float32, accumulation_length(weight))
    np.testing.assert_array_equal(results[np.float16], results[np.float32].astype(np.float16))


def test_zero_offsets_and_no_mask_are_a_plain_convolution() -> None:
    x, offset, _, weight, bias, attrs = make_case(
        np.random.default_rng(3), 2, 3, 6, 6, 2, (3, 3), (1, 1), (1, 1), (1, 1), 1, 1, dtype=np.float64
    )
    (got,) = run("DeformConv2d", "ortops", ortops_feeds(x, np.zeros_like(offset), weight, bias), ["output"], **attrs)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    conv = np.einsum("ocij,nchwij->nohw", weight, windows)
    assert_close(got, conv + bias[None, :, None, None], np.float64, 27)


# The kernel fills the sampled columns in chunks of positions of at most 32 MiB of scratch
# (the columns, plus the product where ONNX Runtime's Gemm computes it: rows + C_out / groups
# values per position, or rows alone).
CHUNK_BYTES = 32 << 20


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "dtype,channels,size,groups", [(np.float32, 64, 128, 1), (np.float64, 128, 96, 2)], ids=["float32", "float64"]
)
def test_large_image_in_several_chunks(threads, dtype, channels, size, groups) -> None:
    """More positions than one column chunk holds: chunks, groups and threads together."""
    x, offset, mask, weight, bias, attrs = make_case(
        np.random.default_rng(1),
        1,
        channels,
        size,
        size,
        6,
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
        groups,
        4,
        dtype=dtype,
        spread=4.0,
    )
    per_position = channels // groups * 9 * np.dtype(dtype).itemsize  # the fewer bytes: the wider chunks
    assert size * size > CHUNK_BYTES // per_position  # (the chunks are then of equal width)
    (got,) = run(
        "DeformConv2d", "ortops", ortops_feeds(x, offset, weight, bias, mask), ["output"], threads=threads, **attrs
    )
    expected = reference(x, offset, weight, bias, mask, attrs, loop=False)
    assert_close(got, expected, dtype, accumulation_length(weight))


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts(threads: int) -> None:
    x, offset, mask, weight, bias, attrs = make_case(
        np.random.default_rng(1), 2, 4, 7, 7, 4, (3, 3), (1, 1), (1, 1), (1, 1), 2, 2, spread=3.0
    )
    expected = reference(x, offset, weight, bias, mask, attrs)
    (got,) = run(
        "DeformConv2d", "ortops", ortops_feeds(x, offset, weight, bias, mask), ["output"], threads=threads, **attrs
    )
    assert_close(got, expected, np.float32, accumulation_length(weight))
    (compat,) = run(
        "MMCVModulatedDeformConv2d",
        "mmdeploy",
        modulated_feeds(x, offset, mask, weight, bias),
        ["output"],
        threads=threads,
        **attrs,
    )
    assert_close(compat, expected, np.float32, accumulation_length(weight))


def test_empty_batch_and_empty_dims() -> None:
    x, offset, mask, weight, bias, attrs = make_case(
        np.random.default_rng(0), 0, 2, 5, 5, 3, (3, 3), (1, 1), (1, 1), (1, 1), 1, 1
    )
    for domain, op in MODULATED:
        (got,) = run(op, domain, modulated_feeds(x, offset, mask, weight, bias), ["output"], **attrs)
        assert got.shape == (0, 3, 5, 5)
    (got,) = run("MMCVDeformConv2d", "mmcv", {"input": x, "offset": offset, "weight": weight}, ["output"], **attrs)
    assert got.shape == (0, 3, 5, 5)
    (got,) = run("DeformConv2d", "ortops", ortops_feeds(x, offset, weight, bias, mask), ["output"], **attrs)
    assert got.shape == (0, 3, 5, 5)
    # No output channels.
    x, offset, mask, weight, bias, attrs = make_case(
        np.random.default_rng(0), 1, 2, 5, 5, 0, (3, 3), (1, 1), (1, 1), (1, 1), 1, 1
    )
    (got,) = run("DeformConv2d", "ortops", ortops_feeds(x, offset, weight, bias, mask), ["output"], **attrs)
    assert got.shape == (1, 0, 5, 5)


def test_nan_offsets_read_zero_and_nan_input_stays_local() -> None:
    """A NaN offset reads 0 (torchvision's kernel leaves it undefined); a NaN pixel poisons only what samples it."""
    x, offset, mask, weight, bias, attrs = make_case(
        np.random.default_rng(2), 1, 2, 6, 6, 2, (3, 3), (1, 1), (1, 1), (1, 1), 1, 1, dtype=np.float64
    )
    offset[:, :, 0, 0] = np.nan
    (got,) = run("DeformConv2d", "ortops", ortops_feeds(x, offset, weight, bias, mask), ["output"], **attrs)
    expected = reference(x, np.nan_to_num(offset, nan=-1e6), weight, bias, mask, attrs)
    assert_close(got, expected, np.float64, 18)


def bad_cases():
    rng = np.random.default_rng(0)
    x, offset, mask, weight, bias, attrs = make_case(rng, 1, 4, 5, 5, 2, (3, 3), (1, 1), (1, 1), (1, 1), 1, 1)
    base = dict(x=x, offset=offset, mask=mask, weight=weight, bias=bias)
    return (
        base,
        attrs,
        [
            (
                "offset spatial",
                dict(offset=offset[:, :, :4].copy()),
                {},
                r"input 'offset' must have shape \[1, 18, 5, 5\] .*, got \[1, 18, 4, 5\]",
            ),
            (
                "offset channels",
                dict(offset=offset[:, :16].copy()),
                {},
                r"input 'offset' must have shape \[1, 18, 5, 5\]",
            ),
            ("mask channels", dict(mask=mask[:, :8].copy()), {}, r"input 'mask' must have shape \[1, 9, 5, 5\]"),
            (
                "deform groups",
                {},
                {"deform_groups": 3},
                r"input 'input' \[1, 4, 5, 5\] has C = 4, not divisible by "
                r"deform_groups = 3",
            ),
            ("groups", {}, {"groups": 3}, r"has C = 4, not divisible by groups = 3"),
            (
                "weight channels",
                {},
                {"groups": 2},
                r"input 'weight' must have shape \[C_out, C / groups = 2, kh, kw\], "
                r"got \[2, 4, 3, 3\]",
            ),
            ("stride", {}, {"stride": [0, 1]}, r"attribute 'stride' must be positive"),
            ("dilation", {}, {"dilation": [1, -2]}, r"attribute 'dilation' must be positive"),
            ("padding", {}, {"padding": [-1, 0]}, r"attribute 'padding' must be non-negative"),
            (
                "huge padding",
                {},
                {"padding": [2**40, 0]},
                r"attribute 'padding' must be non-negative \(and below 2\^31\)",
            ),
            ("pair", {}, {"stride": [1, 1, 1]}, r"attribute 'stride' must have 2 values, got 3"),
            (
                "bias",
                dict(bias=np.zeros(3, np.float32)),
                {},
                r"input 'bias' must have shape \[2\] \(C_out\).*, got \[3\]",
            ),
            (
                "kernel too large",
                dict(weight=np.zeros((2, 4, 9, 3), np.float32)),
                {},
                r"the dilated kernel \(9 x 3\) is larger than the padded input \(7 x 7\)",
            ),
            ("rank", dict(x=x[0]), {}, r"input 'input'"),
        ],
    )


def _case_ids():
    return [name for name, *_ in bad_cases()[2]]


@pytest.mark.parametrize("index", range(len(_case_ids())), ids=_case_ids())
def test_bad_inputs_are_errors(index) -> None:
    base, attrs, cases = bad_cases()
    _, changes, attr_changes, message = cases[index]
    v = {**base, **changes}
    a = {**attrs, **attr_changes}
    with pytest.raises(Exception, match=message):
        run(
            "DeformConv2d",
            "ortops",
            ortops_feeds(v["x"], v["offset"], v["weight"], v["bias"], v["mask"]),
            ["output"],
            **a,
        )
    for domain, op in MODULATED:
        with pytest.raises(Exception, match=message):
            run(op, domain, modulated_feeds(v["x"], v["offset"], v["mask"], v["weight"], v["bias"]), ["output"], **a)
    if "mask" not in changes and "bias" not in changes:
        with pytest.raises(Exception, match=message):
            run(
                "MMCVDeformConv2d",
                "mmcv",
                {"input": v["x"], "offset": v["offset"], "weight": v["weight"]},
                ["output"],
                **a,
            )


def test_ortops_mask_shape_error_mentions_empty_form() -> None:
    x, offset, mask, weight, bias, attrs = make_case(
        np.random.default_rng(0), 1, 2, 5, 5, 2, (3, 3), (1, 1), (1, 1), (1, 1), 1, 1
    )
    with pytest.raises(
        Exception, match=r"ortops.DeformConv2d: input 'mask' must have shape \[1, 9, 5, 5\] .* or \[0\]"
    ):
        run(
            "DeformConv2d",
            "ortops",
            ortops_feeds(x, offset, weight, bias, np.zeros((1, 2), np.float32)),
            ["output"],
            **attrs,
        )
