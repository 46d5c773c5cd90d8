"""The CUDA build on a GPU (scripts/test_gpu.sh): a whole model stays on the device, and
several sessions and threads share one GPU. Skipped where ONNX Runtime has no CUDA provider.

Every node's own tests run on the GPU too: scripts/test_gpu.sh runs tests/python/ort with
ORTOPS_TEST_PROVIDERS=CUDAExecutionProvider, which fails any test whose node ONNX Runtime
would place on the CPU.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[3]
LIBRARY = Path(os.environ.get("ORTOPS_CUDA_LIBRARY", ROOT / "build" / "cuda" / "libortops.so"))
CUSTOM_OPS = {"DeformConv2d", "RoIAlign", "GridSample", "NMS"}

pytestmark = [
    pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(), reason="needs onnxruntime-gpu"),
    pytest.mark.skipif(not LIBRARY.is_file(), reason=f"no CUDA build at {LIBRARY}"),
]


def _detector_tail() -> onnx.ModelProto:
    """Conv, a deformable convolution on the features with offsets from another Conv, RoIAlign
    and GridSample of its output, and NMS of given boxes: a detector's custom nodes in a row."""
    rng = np.random.default_rng(0)
    channels = 16
    weights = {
        "w_features": rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.2,
        "w_offsets": rng.standard_normal((18, channels, 3, 3)).astype(np.float32) * 0.05,
        "w_deform": rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.1,
        "b_deform": rng.standard_normal(channels).astype(np.float32),
        "no_mask": np.zeros(0, np.float32),  # DCNv1
    }
    nodes = [
        helper.make_node("Conv", ["image", "w_features"], ["features"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["features", "w_offsets"], ["offsets"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "DeformConv2d",
            ["features", "offsets", "w_deform", "b_deform", "no_mask"],
            ["deformed"],
            domain="ortops",
            padding=[1, 1],
        ),
        helper.make_node(
            "RoIAlign",
            ["deformed", "rois"],
            ["pooled"],
            domain="ortops",
            output_height=7,
            output_width=7,
            spatial_scale=0.25,
            sampling_ratio=2,
        ),
        helper.make_node("GridSample", ["deformed", "grid"], ["sampled"], domain="ortops", align_corners=1),
        helper.make_node("NMS", ["boxes", "scores"], ["kept"], domain="ortops", iou_threshold=0.6),
    ]
    inputs = [
        helper.make_tensor_value_info("image", TensorProto.FLOAT, [None, 3, None, None]),
        helper.make_tensor_value_info("rois", TensorProto.FLOAT, [None, 5]),
        helper.make_tensor_value_info("grid", TensorProto.FLOAT, [None, None, None, 2]),
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [None, 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None]),
    ]
    outputs = [helper.make_value_info(name, onnx.TypeProto()) for name in ("pooled", "sampled", "kept")]
    graph = helper.make_graph(
        nodes, "detector_tail", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in weights.items()]
    )
    return helper.make_model(
        graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ortops", 1)]
    )


def _feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 200, (3000, 2)).astype(np.float32)
    return {
        "image": rng.standard_normal((2, 3, 64, 64)).astype(np.float32),
        "rois": np.concatenate(
            [rng.integers(0, 2, (64, 1)), rng.uniform(0, 100, (64, 2)), rng.uniform(130, 250, (64, 2))], axis=1
        ).astype(np.float32),
        "grid": rng.uniform(-1, 1, (2, 32, 32, 2)).astype(np.float32),
        "boxes": np.concatenate([xy, xy + rng.uniform(4, 40, (3000, 2)).astype(np.float32)], axis=1),
        "scores": rng.random(3000).astype(np.float32),
    }


def _session(providers: list[str], **config: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(LIBRARY))
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(_detector_tail().SerializeToString(), options, providers=providers)


def test_custom_nodes_run_on_the_gpu_with_no_copy_between_them(tmp_path: Path) -> None:
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(LIBRARY))
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = ort.InferenceSession(
        _detector_tail().SerializeToString(), options, providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    feeds = _feeds(1)
    for _ in range(3):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    providers = {e["args"]["op_name"]: e["args"].get("provider") for e in events if e.get("cat") == "Node"}
    assert {op: providers.get(op) for op in CUSTOM_OPS} == dict.fromkeys(CUSTOM_OPS, "CUDAExecutionProvider")
    # Copies only where the graph's inputs come from the host: none between device nodes.
    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    graph_inputs = {i.name for i in optimized.graph.input}
    copies = [n for n in optimized.graph.node if n.op_type.startswith("Memcpy")]
    assert all(n.op_type == "MemcpyFromHost" and n.input[0] in graph_inputs for n in copies), [
        (n.op_type, list(n.input)) for n in copies
    ]


def test_gpu_results_agree_with_the_cpu_kernels() -> None:
    feeds = _feeds(2)
    gpu = _session(["CUDAExecutionProvider"], **{"session.disable_cpu_ep_fallback": "1"}).run(None, feeds)
    cpu = _session(["CPUExecutionProvider"]).run(None, feeds)
    names = ("pooled", "sampled", "kept")
    for name, got, expected in zip(names, gpu, cpu):
        if name == "kept":
            # The CPU's Conv (MLAS) and cuDNN's round differently: compare the NMS on the same boxes
            # (its inputs are graph inputs), exactly.
            np.testing.assert_array_equal(got, expected)
        else:
            np.testing.assert_allclose(
                got, expected, rtol=1e-3, atol=1e-3 * float(np.abs(expected).max()), err_msg=name
            )


def test_sessions_and_threads_share_one_gpu() -> None:
    sessions = [_session(["CUDAExecutionProvider"]) for _ in range(3)]
    inputs = [_feeds(10 + i) for i in range(8)]
    expected = [sessions[0].run(None, feeds) for feeds in inputs]
    failures: list[str] = []

    def work(session: ort.InferenceSession, worker: int) -> None:
        for round_ in range(10):
            k = (worker + round_) % len(inputs)
            for got, want in zip(session.run(None, inputs[k]), expected[k]):
                if not np.array_equal(got, want):
                    failures.append(f"worker {worker} round {round_} input {k}")

    threads = [threading.Thread(target=work, args=(sessions[i % 3], i)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:5]


def test_eager_ops_on_cuda_tensors_run_the_cuda_kernels_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no GPU")
    monkeypatch.setenv("ORTOPS_LIBRARY", str(LIBRARY))
    import ortops.torch
    from ortops.torch import _kernel

    assert _kernel.runs_on_cuda("RoIAlign") and _kernel.runs_on_cuda("NMS")
    places: list[str] = []
    bound = _kernel._run_bound
    monkeypatch.setattr(
        _kernel, "_run_bound", lambda session, info, *rest: places.append(info.name) or bound(session, info, *rest)
    )
    rng = np.random.default_rng(3)
    features = torch.from_numpy(rng.standard_normal((2, 8, 32, 32)).astype(np.float32))
    rois = torch.tensor([[0, 1.0, 2.0, 20.0, 30.0], [1, 4.0, 4.5, 12.0, 9.0]])
    xy = rng.uniform(0, 100, (500, 2)).astype(np.float32)
    boxes = torch.from_numpy(np.concatenate([xy, xy + rng.uniform(2, 30, (500, 2)).astype(np.float32)], 1))
    scores = torch.from_numpy(rng.random(500).astype(np.float32))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # ordered with torch's work on that stream, without a wait
        doubled = features.cuda() * 2
        pooled = ortops.torch.roi_align(doubled, rois.cuda(), (7, 7), 0.5, 2, aligned=True)
        kept = ortops.torch.nms(boxes.cuda(), scores.cuda(), 0.5)
    stream.synchronize()
    assert places == ["RoIAlign", "NMS"], places  # the CUDA kernels, bound to the tensors' memory
    assert pooled.device.type == "cuda" and kept.device.type == "cuda"
    torch.testing.assert_close(pooled.cpu(), ortops.torch.roi_align(features * 2, rois, (7, 7), 0.5, 2, aligned=True))
    assert torch.equal(kept.cpu(), ortops.torch.nms(boxes, scores, 0.5))
