"""The device paths as a CUDA graph's capture sees them, on the emulated device.

A session with ONNX Runtime's ``enable_cuda_graph`` records a run's kernels once and replays
them without any host code: nothing in a captured node may wait for the stream or copy from
host memory, and data checks, which need the host, cannot run. The emulated device plays a
capture where ORTOPS_EMULATED_GRAPH_CAPTURE is set (device/device_io.h, Capturing): the nodes
whose outputs have a fixed size then run with the data checks left out, writing NaN (0 for
integers) where a check would refuse an item, and the nodes that must wait (an output size the
data decide, a table from host memory) fail with a message that says so. That every fixed-size
node's fuzz cases run without a wait there is test_device_budgets.py's; the GPU's own capture
is tests/python/cuda/test_cuda_graph.py's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ortops

from ortest import make_model, pool, run, session

pytestmark = pytest.mark.skipif(
    not Path(ortops.get_library_path()).name.startswith("libortops_device_on_cpu"),
    reason="plays a CUDA graph's capture on the emulated device",
)


@pytest.fixture
def capturing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORTOPS_EMULATED_GRAPH_CAPTURE", "1")


def features(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


ROIS = np.array([[0, 1, 1, 6, 6], [1, 0, 2, 5, 7], [0, 2, 2, 3, 3]], np.float32)
ROI_ALIGN = {"output_height": 2, "output_width": 3, "sampling_ratio": 2}


def test_roi_align_refused_rois_give_nan_rows_and_the_others_their_values(monkeypatch: pytest.MonkeyPatch) -> None:
    x = features((2, 3, 8, 8))
    (expected,) = pool("RoIAlign", "ortops", x, ROIS, **ROI_ALIGN)
    bad = ROIS.copy()
    bad[1, 0] = 5  # no image 5
    bad[2, 1] = np.nan
    with pytest.raises(Exception, match="roi 1"):
        pool("RoIAlign", "ortops", x, bad, **ROI_ALIGN)
    monkeypatch.setenv("ORTOPS_EMULATED_GRAPH_CAPTURE", "1")
    (got,) = pool("RoIAlign", "ortops", x, bad, **ROI_ALIGN)
    np.testing.assert_array_equal(got[0], expected[0])
    assert np.isnan(got[1:]).all()


def test_roi_align_of_a_roi_whose_grid_is_refused_gives_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adaptive sampling (sampling_ratio 0) of a roi of 1e12 pixels: a grid the op refuses,
    rather than a loop that would not end."""
    x = features((1, 2, 8, 8))
    rois = np.array([[0, 0, 0, 1e12, 1e12], [0, 1, 1, 4, 4]], np.float32)
    attributes = {"output_height": 2, "output_width": 2, "sampling_ratio": 0}
    with pytest.raises(Exception, match="samples per bin"):
        pool("RoIAlign", "ortops", x, rois, **attributes)
    (expected,) = pool("RoIAlign", "ortops", x, rois[1:], **attributes)
    monkeypatch.setenv("ORTOPS_EMULATED_GRAPH_CAPTURE", "1")
    (got,) = pool("RoIAlign", "ortops", x, rois, **attributes)
    assert np.isnan(got[0]).all()
    np.testing.assert_array_equal(got[1], expected[0])


def test_multi_level_roi_align_takes_its_levels_by_value_up_to_eight(capturing: None) -> None:
    """Eight levels run in a capture (their table is in the kernel's arguments); nine need a
    table copied from host memory, which a replay cannot read: a clear error."""
    rois = np.array([[0, 2, 2, 30, 30]], np.float32)

    def levels(count: int) -> list[np.ndarray]:
        return [features((1, 2, 4, 4), seed=level) for level in range(count)]

    def run_levels(count: int) -> np.ndarray:
        maps = levels(count)
        spec = [("rois", np.float32, 2)] + [(f"p{k}", np.float32, 4) for k in range(count)]
        model = make_model(
            "MultiLevelRoIAlign", "ortops", spec, ["Y"], featmap_strides=[4.0 * 2**k for k in range(count)]
        )
        return session(model).run(None, {"rois": rois, **{f"p{k}": m for k, m in enumerate(maps)}})[0]

    assert np.isfinite(run_levels(8)).all()
    with pytest.raises(Exception, match="cannot run in a CUDA graph .*copies a table from host memory"):
        run_levels(9)


def test_gather_topk_refused_indices_give_nan_or_zero(capturing: None) -> None:
    x = np.arange(12, dtype=np.float32).reshape(1, 4, 3)
    indices = np.array([[2, 7, 0]], np.int64)  # 7: no such row
    (got,) = run("GatherTopk", "mmdeploy", {"input": x, "indices": indices}, ["output"])
    np.testing.assert_array_equal(got[0, [0, 2]], x[0, [2, 0]])
    assert np.isnan(got[0, 1]).all()
    (got,) = run("GatherTopk", "mmdeploy", {"input": x.astype(np.int64), "indices": indices}, ["output"])
    np.testing.assert_array_equal(got[0, 1], [0, 0, 0])


def test_rotated_feature_align_nan_boxes_give_nan_where_they_sample(capturing: None) -> None:
    x = features((1, 2, 4, 4))
    boxes = np.random.default_rng(1).uniform(0, 4, (1, 4, 4, 5)).astype(np.float32)
    (expected,) = run("RotatedFeatureAlign", "ortops", {"features": x, "best_rbboxes": boxes}, ["output"])
    boxes[0, 1, 2, 3] = np.nan
    (got,) = run("RotatedFeatureAlign", "ortops", {"features": x, "best_rbboxes": boxes}, ["output"])
    assert np.isnan(got[0, :, 1, 2]).all()
    got[0, :, 1, 2] = expected[0, :, 1, 2]
    np.testing.assert_array_equal(got, expected)


def test_matrix_inverse_of_a_singular_matrix_gives_nan_and_the_others_their_inverse(capturing: None) -> None:
    x = np.stack([np.eye(3) * 2, np.ones((3, 3)), np.diag([1.0, 4.0, 5.0])])
    (got,) = run("MatrixInverse", "ortops", {"X": x})
    np.testing.assert_allclose(got[[0, 2]], np.linalg.inv(x[[0, 2]]), rtol=1e-12)
    assert np.isnan(got[1]).all()


def test_nms_whose_output_size_the_data_decide_cannot_be_captured(capturing: None) -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    with pytest.raises(Exception, match="cannot run in a CUDA graph .*an output's size"):
        run("NMS", "ortops", {"boxes": boxes, "scores": scores}, ["indices"], iou_threshold=0.5)


def test_fuzz_cases_never_crash_or_hang_in_a_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fuzz test's random and adversarial cases with every data check left out, as a
    capture leaves them out and a replay never runs them: whatever the data, the kernels stay
    in bounds and end (under the sanitizers in scripts/test.sh's asan-device-on-cpu suite)."""
    import test_fuzz

    monkeypatch.setenv("ORTOPS_EMULATED_GRAPH_CAPTURE", "1")  # the cases' subprocesses inherit it
    table = test_fuzz._op_table()
    cases = [test_fuzz.make_case(test_fuzz.SEED, i, table) for i in range(test_fuzz.CASES)]
    batches = [cases[i : i + test_fuzz.BATCH] for i in range(0, len(cases), test_fuzz.BATCH)]
    failures = [failure for batch in batches for failure in test_fuzz._run_batch(batch)[1]]
    assert not failures, "\n\n".join(test_fuzz._report(f) for f in failures[: test_fuzz.REPORTED])
