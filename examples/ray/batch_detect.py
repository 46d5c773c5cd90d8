"""Batch inference of an ONNX detection model with ortops ops on a Ray cluster (Ray Data).

The item ids go through two Ray Data ``map_batches`` stages: ``make_inputs`` makes each
item's input arrays from its id, and ``Detector`` (a fixed pool of ``--actors`` actors,
``ActorPoolStrategy``) runs them through the model, ``--batch-size`` items per call (Ray Data
fuses the two, so both run in the actors' processes).
Each actor holds one ``onnxruntime.InferenceSession`` with ``--threads`` intra-op threads,
created with ``ortops.session_options()``: the ``ortops`` package installed on the worker's
node gives the library path, nothing is copied from the driver except the model's bytes.
The driver then runs a few items again in its own session and compares (and, for the
built-in model, compares the kept boxes with a plain numpy NMS), prints the throughput and
a line ``check: ... OK`` (exit status 0) or ``check FAILED: ...`` (exit status 1).

    python examples/ray/batch_detect.py                      # a local Ray instance
    python examples/ray/batch_detect.py --address auto       # on a node of a running cluster
    python examples/ray/batch_detect.py --address ray://head:10001 --actors 8 --threads 4
    python examples/ray/batch_detect.py --model det.onnx --dim H=512 --dim W=512

Every node needs Python with ``ray[data]``, ``onnxruntime``, ``onnx`` and ``ortops`` installed
(the versions in deps/python-ray.txt, which ``scripts/setup.sh --with-ray`` installs into
.venv-ray); ``ray://`` addresses also need ``ray[client]``.

The model: without ``--model`` the script builds a small detection tail with onnx.helper:
a strided convolution gives a feature map, ``ortops::NMS`` keeps the proposals of every
image (one NMS over the whole batch, each image's boxes shifted so that images never
overlap), ``ortops::RoIAlign`` pools the kept boxes' features and a linear layer scores
them; the outputs are padded per image to ``MAX_DETECTIONS``, like ONNX Runtime's and
TensorRT's batched NMS outputs. ``--model`` takes any ONNX file whose inputs and outputs
all have the batch on their first axis (an exported detector's ``dets [B, N, 5]``, ...);
its items are random floats in [0, 1) (integers in [0, 10) for integer inputs), so its
inputs must accept those; name the symbolic dimensions other than the batch with ``--dim``.

``ORTOPS_LIBRARY``: ``ortops.get_library_path()`` prefers the library this variable names
to the package's own copy. When it is set in the driver's environment (a development
build, as in the project's tests) it is passed to every worker through the job's
``runtime_env`` ``env_vars``; when it is not set, nothing is passed and each worker uses
the library of its installed ``ortops`` package.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

#: Shape of the built-in model's items: an RGB image, proposals and their scores.
IMAGE_SIZE = 64
NUM_PROPOSALS = 48
FEATURE_CHANNELS = 16
NUM_CLASSES = 4
MAX_DETECTIONS = 12
IOU_THRESHOLD = 0.5


# --------------------------------------------------------------------------- the model


def build_model() -> bytes:
    """The built-in detection tail, serialized (ONNX opset 17, IR 8: loads in ORT >= 1.17).

    Inputs: ``image [B, 3, 64, 64]``, ``boxes [B, K, 4]`` (x1, y1, x2, y2 in image pixels),
    ``scores [B, K]``, all float32. Outputs, padded per image to M = ``MAX_DETECTIONS`` in
    descending score order: ``num_detections [B]`` int64, ``det_boxes [B, M, 4]``,
    ``det_scores [B, M]``, ``det_logits [B, M, NUM_CLASSES]`` float32 (0 where padded),
    ``det_index [B, M]`` int64 (the kept proposal's index in ``boxes``, -1 where padded).

    The batch goes through one ``ortops::NMS``: image b's boxes are shifted by
    ``b * (ceil(max) - floor(min) + 1)`` on both axes, so boxes of different images never
    overlap. With box coordinates on a 1/16-pixel grid (as ``make_item`` makes them) the
    shift and every difference the IoU uses are exact in float32, so each image's result is
    the same bit for bit in any batch.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1234)
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64

    def const(name: str, value: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value), name)

    initializers = [
        const("conv_w", (rng.standard_normal((FEATURE_CHANNELS, 3, 3, 3)) * 0.3).astype(np.float32)),
        const("conv_b", (rng.standard_normal(FEATURE_CHANNELS) * 0.1).astype(np.float32)),
        const("cls_w", rng.standard_normal((FEATURE_CHANNELS, NUM_CLASSES)).astype(np.float32)),
        const("i0", np.array(0, np.int64)),
        const("i1", np.array(1, np.int64)),
        const("i1_1d", np.array([1], np.int64)),
        const("axis0", np.array([0], np.int64)),
        const("f1", np.array(1.0, np.float32)),
        const("shape_boxes", np.array([-1, 4], np.int64)),
        const("shape_flat", np.array([-1], np.int64)),
        const("max_det", np.array(MAX_DETECTIONS, np.int64)),
        const("max_det_1d", np.array([MAX_DETECTIONS], np.int64)),
        const("dims_4", np.array([4], np.int64)),
        const("dims_classes", np.array([NUM_CLASSES], np.int64)),
        const("zero_f", np.array(0.0, np.float32)),
        const("minus_one", np.array(-1, np.int64)),
    ]
    n = helper.make_node
    nodes = [
        # Features: [B, 16, 32, 32], stride 2.
        n("Conv", ["image", "conv_w", "conv_b"], ["conv"], strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Relu", ["conv"], ["features"]),
        # Sizes.
        n("Shape", ["boxes"], ["boxes_shape"]),
        n("Gather", ["boxes_shape", "i0"], ["B"], axis=0),
        n("Gather", ["boxes_shape", "i1"], ["K"], axis=0),
        n("Mul", ["B", "K"], ["BK"]),
        n("Unsqueeze", ["B", "axis0"], ["B_1d"]),
        # One NMS over the batch: shift image b's boxes by b * step.
        n("Reshape", ["boxes", "shape_boxes"], ["flat_boxes"]),
        n("Reshape", ["scores", "shape_flat"], ["flat_scores"]),
        n("ReduceMax", ["boxes"], ["coord_max"], keepdims=0),
        n("ReduceMin", ["boxes"], ["coord_min"], keepdims=0),
        n("Ceil", ["coord_max"], ["coord_hi"]),
        n("Floor", ["coord_min"], ["coord_lo"]),
        n("Sub", ["coord_hi", "coord_lo"], ["extent"]),
        n("Add", ["extent", "f1"], ["step"]),
        n("Range", ["i0", "BK", "i1"], ["flat_pos"]),
        n("Div", ["flat_pos", "K"], ["flat_image"]),
        n("Cast", ["flat_image"], ["flat_image_f"], to=f32),
        n("Mul", ["flat_image_f", "step"], ["shift"]),
        n("Unsqueeze", ["shift", "i1_1d"], ["shift_col"]),
        n("Add", ["flat_boxes", "shift_col"], ["shifted_boxes"]),
        n("NMS", ["shifted_boxes", "flat_scores"], ["keep"], domain="ortops", iou_threshold=IOU_THRESHOLD),
        n("Div", ["keep", "K"], ["keep_image"]),
        n("Mod", ["keep", "K"], ["keep_index"]),
        n("Gather", ["flat_boxes", "keep"], ["keep_boxes"], axis=0),
        n("Gather", ["flat_scores", "keep"], ["keep_scores"], axis=0),
        # RoIAlign of the kept boxes on their own image, then a linear classifier.
        n("Cast", ["keep_image"], ["keep_image_f"], to=f32),
        n("Unsqueeze", ["keep_image_f", "i1_1d"], ["keep_image_col"]),
        n("Concat", ["keep_image_col", "keep_boxes"], ["rois"], axis=1),
        n(
            "RoIAlign",
            ["features", "rois"],
            ["pooled"],
            domain="ortops",
            output_height=7,
            output_width=7,
            spatial_scale=0.5,
            sampling_ratio=2,
            aligned=1,
        ),
        n("ReduceMean", ["pooled"], ["embedding"], axes=[2, 3], keepdims=0),
        n("MatMul", ["embedding", "cls_w"], ["keep_logits"]),
        # Rank of each kept box within its image (NMS output is in descending score order).
        n("Range", ["i0", "B", "i1"], ["images"]),
        n("Unsqueeze", ["keep_image", "i1_1d"], ["keep_image_2d"]),
        n("Unsqueeze", ["images", "axis0"], ["images_2d"]),
        n("Equal", ["keep_image_2d", "images_2d"], ["onehot_b"]),
        n("Cast", ["onehot_b"], ["onehot"], to=i64),
        n("CumSum", ["onehot", "i0"], ["onehot_cum"]),
        n("Mul", ["onehot_cum", "onehot"], ["rank_mask"]),
        n("ReduceSum", ["rank_mask", "i1_1d"], ["rank_1"], keepdims=0),
        n("Sub", ["rank_1", "i1"], ["rank"]),
        n("ReduceSum", ["onehot", "axis0"], ["count"], keepdims=0),
        n("Min", ["count", "max_det"], ["num_detections"]),
        # Scatter the first MAX_DETECTIONS of each image into padded outputs.
        n("Less", ["rank", "max_det"], ["valid"]),
        n("Compress", ["keep_image", "valid"], ["v_image"], axis=0),
        n("Compress", ["rank", "valid"], ["v_rank"], axis=0),
        n("Compress", ["keep_boxes", "valid"], ["v_boxes"], axis=0),
        n("Compress", ["keep_scores", "valid"], ["v_scores"], axis=0),
        n("Compress", ["keep_logits", "valid"], ["v_logits"], axis=0),
        n("Compress", ["keep_index", "valid"], ["v_index"], axis=0),
        n("Unsqueeze", ["v_image", "i1_1d"], ["v_image_col"]),
        n("Unsqueeze", ["v_rank", "i1_1d"], ["v_rank_col"]),
        n("Concat", ["v_image_col", "v_rank_col"], ["scatter_at"], axis=1),
        n("Concat", ["B_1d", "max_det_1d"], ["shape_bm"], axis=0),
        n("Concat", ["B_1d", "max_det_1d", "dims_4"], ["shape_bm4"], axis=0),
        n("Concat", ["B_1d", "max_det_1d", "dims_classes"], ["shape_bmc"], axis=0),
        n("Expand", ["zero_f", "shape_bm4"], ["pad_boxes"]),
        n("Expand", ["zero_f", "shape_bm"], ["pad_scores"]),
        n("Expand", ["zero_f", "shape_bmc"], ["pad_logits"]),
        n("Expand", ["minus_one", "shape_bm"], ["pad_index"]),
        n("ScatterND", ["pad_boxes", "scatter_at", "v_boxes"], ["det_boxes"]),
        n("ScatterND", ["pad_scores", "scatter_at", "v_scores"], ["det_scores"]),
        n("ScatterND", ["pad_logits", "scatter_at", "v_logits"], ["det_logits"]),
        n("ScatterND", ["pad_index", "scatter_at", "v_index"], ["det_index"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ray_batch_detect",
        [
            helper.make_tensor_value_info("image", f32, ["B", 3, IMAGE_SIZE, IMAGE_SIZE]),
            helper.make_tensor_value_info("boxes", f32, ["B", "K", 4]),
            helper.make_tensor_value_info("scores", f32, ["B", "K"]),
        ],
        [
            helper.make_tensor_value_info("num_detections", i64, ["B"]),
            helper.make_tensor_value_info("det_boxes", f32, ["B", MAX_DETECTIONS, 4]),
            helper.make_tensor_value_info("det_scores", f32, ["B", MAX_DETECTIONS]),
            helper.make_tensor_value_info("det_logits", f32, ["B", MAX_DETECTIONS, NUM_CLASSES]),
            helper.make_tensor_value_info("det_index", i64, ["B", MAX_DETECTIONS]),
        ],
        initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ortops", 1)],
        ir_version=8,
        producer_name="ortops examples/ray/batch_detect.py",
    )
    return model.SerializeToString()


# --------------------------------------------------------------------------- the items

#: An input of the model as the item generator needs it: name, shape without the batch
#: axis, numpy dtype name.
InputSpec = tuple[str, tuple[int, ...], str]


def make_item(item_id: int, specs: list[InputSpec] | None, seed: int) -> dict[str, np.ndarray]:
    """The input arrays of item ``item_id`` (no batch axis), the same on every process.

    ``specs=None``: the built-in model's ``image [3, 64, 64]``, ``boxes [48, 4]`` (clusters
    of overlapping boxes, coordinates on a 1/16-pixel grid) and ``scores [48]``.
    Otherwise one random array per spec: floats in [0, 1), integers in [0, 10), booleans.
    """
    rng = np.random.default_rng([seed, item_id])
    if specs is None:
        image = rng.random((3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
        centres = rng.uniform(12, IMAGE_SIZE - 12, size=(5, 2))
        centre = centres[rng.integers(0, len(centres), NUM_PROPOSALS)] + rng.normal(0, 2, (NUM_PROPOSALS, 2))
        size = rng.uniform(12, 20, size=(NUM_PROPOSALS, 2))
        boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1).clip(0, IMAGE_SIZE)
        boxes = (np.round(boxes * 16) / 16).astype(np.float32)
        scores = rng.random(NUM_PROPOSALS, dtype=np.float32)
        return {"image": image, "boxes": boxes, "scores": scores}
    item = {}
    for name, shape, dtype in specs:
        kind = np.dtype(dtype).kind
        if kind == "f":
            item[name] = rng.random(shape).astype(dtype)
        elif kind in "iu":
            item[name] = rng.integers(0, 10, shape).astype(dtype)
        elif kind == "b":
            item[name] = rng.random(shape) < 0.5
        else:
            raise ValueError(f"input '{name}' has dtype {dtype}: no random value is made for it")
    return item


def make_inputs(batch: dict[str, np.ndarray], specs: list[InputSpec] | None, seed: int) -> dict[str, np.ndarray]:
    """Ray Data stage: ``{"id": [B]}`` -> the id and every model input, stacked ``[B, ...]``."""
    items = [make_item(int(i), specs, seed) for i in batch["id"]]
    return {"id": batch["id"], **{name: np.stack([item[name] for item in items]) for name in items[0]}}


def input_specs(session: Any, dims: dict[str, int]) -> list[InputSpec]:
    """The inputs of a session as ``make_item`` specs; the first axis of each is the batch."""
    types = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(int64)": "int64"}
    types |= {"tensor(int32)": "int32", "tensor(bool)": "bool", "tensor(uint8)": "uint8"}
    specs = []
    for arg in session.get_inputs():
        if arg.name in ("id", "actor"):
            raise SystemExit(f"input '{arg.name}': the example uses this name for its own column")
        if arg.type not in types:
            raise SystemExit(f"input '{arg.name}' has type {arg.type}, which this example makes no items for")
        if not arg.shape:
            raise SystemExit(f"input '{arg.name}' is a scalar: every input needs the batch on its first axis")
        shape = []
        for dim in arg.shape[1:]:
            if isinstance(dim, int):
                shape.append(dim)
            elif dim in dims:
                shape.append(dims[dim])
            else:
                raise SystemExit(f"input '{arg.name}' has the symbolic dimension {dim!r}: give it with --dim {dim}=N")
        specs.append((arg.name, tuple(shape), types[arg.type]))
    return specs


# --------------------------------------------------------------------------- inference


def make_session(model: bytes, threads: int) -> Any:
    """An InferenceSession with ortops registered and ``threads`` intra-op threads."""
    import onnxruntime as ort

    import ortops

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model, ortops.session_options(options), providers=["CPUExecutionProvider"])


class Detector:
    """Ray Data actor: one InferenceSession, created once, run on every batch it gets."""

    def __init__(self, model: bytes, threads: int) -> None:
        import ortops

        self.session = make_session(model, threads)
        self.inputs = [arg.name for arg in self.session.get_inputs()]
        self.outputs = [arg.name for arg in self.session.get_outputs()]
        self.library = ortops.get_library_path()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``{"id": [B], inputs...}`` -> ``{"id": [B], outputs... [B, ...], "actor": [B]}``."""
        size = len(batch["id"])
        values = self.session.run(self.outputs, {name: batch[name] for name in self.inputs})
        result = {"id": batch["id"]}
        for name, value in zip(self.outputs, values):
            if value.ndim == 0 or value.shape[0] != size:
                raise ValueError(f"output '{name}' has shape {value.shape}: its first axis must be the batch ({size})")
            result[name] = value
        result["actor"] = np.full(size, f"{os.uname().nodename}:{os.getpid()}:{self.library}")
        return result


def numpy_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> list[int]:
    """Greedy NMS in numpy (a reference for the built-in model): kept indices, best first."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    kept: list[int] = []
    for i in order:
        ok = True
        for j in kept:
            w = min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0])
            h = min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1])
            inter = max(w, 0.0) * max(h, 0.0)
            union = area[i] + area[j] - inter
            if union > 0 and inter / union > iou_threshold:
                ok = False
                break
        if ok:
            kept.append(i)
    return kept


def check_item(row: dict[str, np.ndarray], item: dict[str, np.ndarray], session: Any, builtin: bool) -> list[str]:
    """Differences between a row computed on the cluster and the driver's run of its item."""
    problems = []
    expected = dict(
        zip([o.name for o in session.get_outputs()], session.run(None, {k: v[None] for k, v in item.items()}))
    )
    for name, want in expected.items():
        got = np.asarray(row[name])
        want = want[0]
        if got.shape != want.shape or got.dtype != want.dtype:
            problems.append(f"{name}: {got.dtype}{list(got.shape)} on the cluster, {want.dtype}{list(want.shape)} here")
        elif want.dtype.kind == "f":
            if not np.allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True):
                problems.append(f"{name}: differs by up to {np.nanmax(np.abs(got - want)):.3g}")
        elif not np.array_equal(got, want):
            problems.append(f"{name}: {got.tolist()} on the cluster, {want.tolist()} here")
    if builtin:
        reference = numpy_nms(item["boxes"], item["scores"], IOU_THRESHOLD)[:MAX_DETECTIONS]
        count = int(row["num_detections"])
        got = np.asarray(row["det_index"])
        if count != len(reference) or got[:count].tolist() != reference or (got[count:] != -1).any():
            problems.append(f"det_index {got.tolist()} (num_detections {count}), numpy NMS keeps {reference}")
    return problems


def run_pipeline(
    model: bytes, specs: list[InputSpec] | None, settings: dict[str, int], check_ids: list[int]
) -> dict[str, Any]:
    """Runs every item through ``Detector`` actors with Ray Data (needs ``ray.init`` first).

    ``settings``: ``items``, ``batch_size``, ``actors``, ``threads``, ``seed``. Returns
    ``seen`` (items that came back), ``rows`` (the output rows of ``check_ids``), ``actors``
    (the actors that ran batches, as ``node:pid:library``), ``total`` (seconds, start-up
    included) and ``after_first`` ((items, seconds) after the first batch, or None).
    """
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    # The ids come from the driver (no read task): a task that needs a CPU would wait forever
    # for one on a cluster whose CPUs the actor pool takes. make_inputs runs in the actors'
    # processes (Ray Data fuses it into the actor stage).
    blocks = -(-settings["items"] // settings["batch_size"])
    dataset = ray.data.from_items([{"id": i} for i in range(settings["items"])], override_num_blocks=blocks)
    dataset = dataset.map_batches(
        make_inputs, batch_size=settings["batch_size"], fn_kwargs={"specs": specs, "seed": settings["seed"]}
    )
    dataset = dataset.map_batches(
        Detector,
        batch_size=settings["batch_size"],
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=settings["actors"]),
        num_cpus=settings["threads"],
        fn_constructor_kwargs={"model": model, "threads": settings["threads"]},
    )
    wanted = set(check_ids)
    rows: dict[int, dict[str, np.ndarray]] = {}
    actors: set[str] = set()
    seen = 0
    first: tuple[float, int] | None = None
    start = time.perf_counter()
    for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
        if first is None:
            first = (time.perf_counter(), len(batch["id"]))
        seen += len(batch["id"])
        actors.update(str(a) for a in batch["actor"])
        for k, item_id in enumerate(batch["id"]):
            if int(item_id) in wanted:
                rows[int(item_id)] = {name: value[k] for name, value in batch.items()}
    end = time.perf_counter()
    after_first = None
    if first is not None and seen > first[1] and end > first[0]:
        after_first = (seen - first[1], end - first[0])
    return {"seen": seen, "rows": rows, "actors": sorted(actors), "total": end - start, "after_first": after_first}


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--address",
        default=None,
        help="Ray cluster: 'auto' (the cluster this node belongs to) or 'ray://HOST:10001'; default: start a local one",
    )
    parser.add_argument("--model", type=Path, help="ONNX file (default: build a small detection tail with ortops ops)")
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N", help="size of a symbolic input dimension (--model)"
    )
    parser.add_argument("--actors", type=int, default=2, help="actors, one InferenceSession each (default 2)")
    parser.add_argument(
        "--threads", type=int, default=1, help="intra-op threads per session = CPUs per actor (default 1)"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="items per session run (default 8)")
    parser.add_argument("--items", type=int, default=256, help="items to run (default 256)")
    parser.add_argument("--check", type=int, default=4, help="items to run again in the driver and compare (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the items (default 0)")
    args = parser.parse_args(argv)
    for name in ("actors", "threads", "batch_size", "items"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.check <= args.items:
        parser.error("--check must be between 0 and --items")
    args.dims = {}
    for text in args.dim:
        name, _, value = text.partition("=")
        if not name or not value.isdigit():
            parser.error(f"--dim {text}: expected NAME=N")
        args.dims[name] = int(value)
    return args


def main(argv: list[str] | None = None) -> int:
    """Runs the items on Ray, prints the throughput and the check; returns the exit status."""
    args = parse_args(argv)
    try:
        import ray
        import ray.data
    except ImportError:
        raise SystemExit("ray is not installed: pip install 'ray[data]' (deps/python-main.txt pins it)") from None

    import ortops

    if args.model is not None:
        if not args.model.is_file():
            raise SystemExit(f"--model {args.model}: no such file")
        model = args.model.read_bytes()
    else:
        model = build_model()
    driver_session = make_session(model, threads=1)
    builtin = args.model is None
    specs = None if builtin else input_specs(driver_session, args.dims)

    init: dict[str, Any] = {"address": args.address, "include_dashboard": False, "log_to_driver": True}
    if os.environ.get("ORTOPS_LIBRARY"):
        init["runtime_env"] = {"env_vars": {"ORTOPS_LIBRARY": os.environ["ORTOPS_LIBRARY"]}}
    needed = args.actors * args.threads
    if args.address is None:
        # One logical CPU per session thread, even where that is more than the machine has.
        init["num_cpus"] = max(os.cpu_count() or 1, needed)
    ray.init(**init)
    cpus = ray.cluster_resources().get("CPU", 0)
    if cpus < needed:
        print(
            f"warning: the actor pool needs {needed} CPUs ({args.actors} actors x {args.threads} threads), "
            f"the cluster has {cpus:g} now; it waits until an autoscaler adds them",
            file=sys.stderr,
        )
    check_ids = sorted({int(i) for i in np.linspace(0, args.items - 1, args.check).round()} if args.check else set())
    settings = {"items": args.items, "batch_size": args.batch_size, "actors": args.actors, "threads": args.threads}
    settings |= {"seed": args.seed}
    try:
        if args.address is not None and args.address.startswith("ray://"):
            # Ray Data's executor needs a full driver, which a Ray Client connection is not:
            # run the pipeline in a task on the cluster and bring its result back.
            result = ray.get(ray.remote(num_cpus=0)(run_pipeline).remote(model, specs, settings, check_ids))
        else:
            result = run_pipeline(model, specs, settings, check_ids)
    finally:
        ray.shutdown()
    seen, rows, actors, total = result["seen"], result["rows"], result["actors"], result["total"]
    print(f"model: {'built-in detection tail (ortops::NMS, ortops::RoIAlign)' if builtin else args.model}")
    print(f"driver's ortops library: {ortops.get_library_path()}")
    print(f"batches ran on {len(actors)} of {args.actors} actors:")
    for actor in sorted(actors):
        node, pid, library = actor.split(":", 2)
        print(f"  node {node} pid {pid} library {library}")
    print(
        f"throughput: {seen} items in {total:.2f} s = {seen / total:.1f} items/s "
        f"({args.actors} actors x {args.threads} threads, batch {args.batch_size}; start-up included)"
    )
    if result["after_first"] is not None:
        count, seconds = result["after_first"]
        print(f"throughput after the first batch: {count} items in {seconds:.2f} s = {count / seconds:.1f} items/s")

    problems = []
    if seen != args.items:
        problems.append(f"{seen} items came back, {args.items} went in")
    if len(rows) != len(check_ids):
        problems.append(f"items {sorted(set(check_ids) - set(rows))} did not come back")
    for item_id in sorted(rows):
        item = make_item(item_id, specs, args.seed)
        problems += [f"item {item_id}: {p}" for p in check_item(rows[item_id], item, driver_session, builtin)]
    against = "the driver's session" + (" and a numpy NMS" if builtin else "")
    if problems:
        print(f"check FAILED: {len(problems)} difference(s) from {against}:")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print(f"check: {len(rows)} of {seen} items match {against}: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
