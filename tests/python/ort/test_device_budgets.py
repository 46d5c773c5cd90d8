"""What one run of each node's device path asks of the device, against the node's budget.

The device path counts, per run, the kernels it launches (ForEach, and the launches the GPU
build writes by hand, whose host twins count alike), Thrust's algorithms (a sort, scan,
selection, reduction or search: a few kernels each on a GPU), memsets, the times the host
waits for the stream (a copy to the host, an algorithm's result) and scratch allocations,
all from the session's allocator (device/device_io.h). With ORTOPS_DEVICE_TRACE set, every
successful run appends them to that file (device/trace.cu); the CUDA build counts the same
way, so the GPU run (benchmarks/bench_cuda.py --profile) can be set beside them.

Only the emulated device (build/libortops_device_on_cpu.so) is checked here: its counts are
the GPU build's. The cases are the fuzz test's valid ones (test_fuzz.make_case with no
mutation), several per node, run in a subprocess that has the variable from its start.

The budgets are what the device paths do now, so that a change that adds a wait or a pass
fails here. Issue 30's aim is no wait at all except the NMS family's one copy of its output
size; the nodes that still wait for a data check are marked so below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import ortops

HERE = Path(__file__).resolve()
# Each node's cases are drawn on their own (the fuzz test's case index i of a table of that
# node alone), so that adding a node moves no other node's cases, and a node's draws go on
# until it has run several times (many random attribute sets are refused, rightly).
SUCCESSFUL_RUNS_PER_NODE = 8
CASES_TRIED_PER_NODE = 64
SEED = 30


@dataclass(frozen=True)
class Budget:
    waits: int  # for the stream, on the host
    launches: int  # kernels + algorithms + memsets
    allocations: int  # from the session's allocator (nothing else allocates device memory)
    copies_to_device: int  # from host memory


# Per node, the most its fuzz cases ask for (in the fixed cases of SEED; the deformable
# convolutions' launches grow with the number of column blocks their sizes need). Waits: NMS waits
# once, for its output's size and its NaN checks together, and NonMaxSuppression once, for its
# output's size (its thresholds are host inputs); NMSRotated, SoftNMS and NMSMatch once, for
# their output's size and the first value their data check refuses together; the batched NMS
# nodes never wait (their outputs have a fixed size, and their selection keeps every size on
# the device); the RoIAlign family, RotatedFeatureAlign, GatherTopk and MatrixInverse wait once
# for a data check whose error the host raises (a roi's image index or value, an index out of
# range, a singular matrix). Launches of the RoIAlign family: its check, its pooling and, where
# it pools from channels-last copies of its maps (device/channel_tiles.h), a transposition per
# map, with one allocation for the copies (the fuzz cases have at most two levels); GridSample's
# likewise, with one map. Copies to the device: the multi-level RoIAlign's level table and the
# attention's, where they have more than eight levels.
BUDGETS: dict[str, Budget] = {
    "TRT.BatchedNMSDynamic_TRT": Budget(0, 12, 15, 0),
    "TRT.BatchedNMS_TRT": Budget(0, 12, 15, 0),
    "TRT.EfficientNMS_TRT": Budget(0, 15, 15, 0),
    "TRT.ROIAlign_TRT": Budget(1, 3, 1, 0),
    "mmcv.MMCVCornerPool": Budget(0, 1, 0, 0),
    "mmcv.MMCVDeformConv2d": Budget(0, 6, 1, 0),
    "mmcv.MMCVModulatedDeformConv2d": Budget(0, 4, 1, 0),
    "mmcv.MMCVRoIAlignRotated": Budget(1, 3, 1, 0),
    "mmcv.MMCVRoiAlign": Budget(1, 3, 1, 0),
    "mmcv.MMCVRotatedFeatureAlign": Budget(1, 2, 0, 0),
    "mmcv.NonMaxSuppression": Budget(1, 9, 10, 0),
    "mmcv.SoftNonMaxSuppression": Budget(1, 8, 7, 0),
    "mmcv.cummax": Budget(0, 1, 0, 0),
    "mmcv.cummin": Budget(0, 1, 0, 0),
    "mmcv.grid_sampler": Budget(0, 2, 1, 0),
    "mmdeploy.GatherTopk": Budget(1, 2, 0, 0),
    "mmdeploy.GridPriorsTRT": Budget(0, 1, 0, 0),
    "mmdeploy.MMCVDeformConv2d": Budget(0, 5, 3, 0),
    "mmdeploy.MMCVModulatedDeformConv2d": Budget(0, 4, 1, 0),
    "mmdeploy.MMCVMultiLevelRoiAlign": Budget(1, 4, 1, 0),
    "mmdeploy.MMCVMultiLevelRotatedRoiAlign": Budget(1, 4, 1, 0),
    "mmdeploy.MMCVMultiScaleDeformableAttention": Budget(0, 1, 1, 1),
    "mmdeploy.MMCVRoIAlignRotated": Budget(1, 3, 1, 0),
    "mmdeploy.NMSMatch": Budget(1, 19, 20, 0),
    "mmdeploy.NMSRotated": Budget(1, 15, 17, 0),
    "mmdeploy.ScaledDotProductAttentionTRT": Budget(0, 3, 0, 0),
    "mmdeploy.TRTBatchedNMS": Budget(0, 10, 14, 0),
    "mmdeploy.TRTBatchedRotatedNMS": Budget(0, 11, 16, 0),
    "mmdeploy.TRTBicubicInterpolate": Budget(0, 1, 0, 0),
    "mmdeploy.TRTInstanceNormalization": Budget(0, 5, 2, 0),
    "mmdeploy.grid_sampler": Budget(0, 2, 1, 0),
    "ortops.AddLayerNorm": Budget(0, 6, 3, 0),
    "ortops.BatchedNMS": Budget(0, 11, 14, 0),
    "ortops.CornerPool": Budget(0, 1, 0, 0),
    "ortops.CumMax": Budget(0, 1, 0, 0),
    "ortops.CumMin": Budget(0, 1, 0, 0),
    "ortops.DeformConv2d": Budget(0, 4, 3, 0),
    "ortops.GridSample": Budget(0, 2, 1, 0),
    "ortops.GroupNorm": Budget(0, 5, 2, 0),
    "ortops.MatrixInverse": Budget(1, 2, 3, 0),
    "ortops.MultiLevelRoIAlign": Budget(1, 4, 1, 0),
    "ortops.RoIAlignByLevel": Budget(1, 4, 1, 0),
    "ortops.MultiScaleDeformableAttention": Budget(0, 1, 1, 1),
    "ortops.MultiScaleDeformableAttentionFromOffsets": Budget(0, 1, 1, 1),
    "ortops.NMS": Budget(1, 9, 10, 0),
    "ortops.NMSMatch": Budget(1, 19, 20, 0),
    "ortops.NMSRotated": Budget(1, 15, 16, 0),
    "ortops.NonMaxSuppression": Budget(1, 14, 14, 0),
    "ortops.RoIAlign": Budget(1, 3, 1, 0),
    "ortops.RoIAlignRotated": Budget(1, 3, 1, 0),
    "ortops.RotatedFeatureAlign": Budget(1, 2, 0, 0),
    "ortops.SoftNMS": Budget(1, 8, 7, 0),
}


def _emulated_device() -> bool:
    return Path(ortops.get_library_path()).name.startswith("libortops_device_on_cpu")


def _device_nodes() -> set[tuple[str, str]]:
    return {(op.domain, op.name) for op in ortops.ops() if "CUDAExecutionProvider" in op.execution_providers}


# Nodes whose random cases all stop before the main path (mmdeploy's TRTBatchedNMS: its
# required keep_topk is drawn as 0 in every case that is not refused), run once more on a case
# that goes all the way: (domain, op, attributes, inputs as (name, shape, fill)).
FULL_PATH_CASES: list[tuple[str, str, dict[str, tuple[str, object]], list[tuple[str, list[int], str]]]] = [
    (
        "mmdeploy",
        "TRTBatchedNMS",
        {
            "num_classes": ("int", 3),
            "background_label_id": ("int", -1),
            "iou_threshold": ("float", 0.5),
            "score_threshold": ("float", 0.1),
            "topk": ("int", 40),
            "keep_topk": ("int", 20),
            "return_index": ("int", 1),
        },
        [("boxes", [2, 50, 1, 4], "boxes"), ("scores", [2, 50, 3], "uniform")],
    ),
]


def _full_path_case(domain: str, name: str, attributes: dict, inputs: list) -> dict[str, object]:
    import test_fuzz

    (op,) = (op for op in test_fuzz._op_table() if (op["domain"], op["name"]) == (domain, name))
    return {
        "seed": SEED,
        "index": 0,
        "domain": domain,
        "op": name,
        "inputs": [{"name": n, "dtype": "float32", "shape": shape, "fill": fill} for n, shape, fill in inputs],
        "outputs": list(op["outputs"]),
        "attributes": {key: [kind, value] for key, (kind, value) in attributes.items()},
        "threads": 1,
        "data_seed": SEED,
        "mutations": [],
    }


def _run_cases(trace: Path) -> None:
    """In the subprocess: each node's valid fuzz cases until it has run successfully
    ``SUCCESSFUL_RUNS_PER_NODE`` times (errors are fine: a run that fails reports nothing),
    then FULL_PATH_CASES (which must run)."""
    import test_fuzz

    for op in test_fuzz._op_table():
        successful = 0
        for index in range(CASES_TRIED_PER_NODE):
            status, _ = test_fuzz.case_outputs(test_fuzz.make_case(SEED, index, [op], mutate=False))
            successful += status == "ok"
            if successful == SUCCESSFUL_RUNS_PER_NODE:
                break
    for case in FULL_PATH_CASES:
        status, outputs = test_fuzz.case_outputs(_full_path_case(*case))
        assert status == "ok", f"{case[:2]}: {status}"


def traced_runs(tmp_path: Path, **environment: str) -> list[dict[str, object]]:
    trace = tmp_path / "trace.jsonl"
    env = dict(os.environ, ORTOPS_DEVICE_TRACE=str(trace), **environment)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), str(HERE.parents[1]), env.get("PYTHONPATH")]))
    subprocess.run([sys.executable, str(HERE), str(trace)], env=env, check=True, timeout=600)
    return [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []


@pytest.mark.skipif(not _emulated_device(), reason="counts the emulated device's runs")
def test_every_device_node_keeps_its_budget(tmp_path: Path) -> None:
    runs = traced_runs(tmp_path)
    worst: dict[str, dict[str, int]] = {}
    for run in runs:
        key = f"{run['domain']}.{run['op']}"
        launches = int(run["kernels"]) + int(run["algorithms"]) + int(run["fills"])
        counts = {
            "waits": int(run["waits"]),
            "launches": launches,
            "allocations": int(run["allocations"]),
            "copies_to_device": int(run["copies_to_device"]),
        }
        worst[key] = {name: max(value, worst.get(key, {}).get(name, 0)) for name, value in counts.items()}
    print(json.dumps(worst, indent=1, sort_keys=True))
    missing = {f"{d}.{n}" for d, n in _device_nodes()} - set(worst)
    assert not missing, f"no successful run of {sorted(missing)}: the budget test reaches no case of theirs"
    over = {
        key: (counts, BUDGETS.get(key))
        for key, counts in worst.items()
        if key not in BUDGETS or any(counts[name] > getattr(BUDGETS[key], name) for name in counts)
    }
    assert not over, "\n".join(f"{key}: {counts} over {budget}" for key, (counts, budget) in sorted(over.items()))


# The nodes whose output's size the data decide: the host must read it, so a CUDA graph cannot
# hold them.
SIZED_BY_DATA = {
    "mmcv.NonMaxSuppression",
    "mmcv.SoftNonMaxSuppression",
    "mmdeploy.NMSMatch",
    "mmdeploy.NMSRotated",
    "ortops.NMS",
    "ortops.NMSMatch",
    "ortops.NMSRotated",
    "ortops.NonMaxSuppression",
    "ortops.SoftNMS",
}


@pytest.mark.skipif(not _emulated_device(), reason="counts the emulated device's runs")
def test_every_node_of_fixed_size_outputs_runs_in_a_graph_capture_without_waiting(tmp_path: Path) -> None:
    """Issue 30's CUDA graphs, on any machine: with a capture played (test_graph_capture.py),
    every node but those sized by their data runs its cases without waiting for the stream or
    copying from host memory, which a captured graph could not do."""
    assert SIZED_BY_DATA <= set(BUDGETS)
    runs = traced_runs(tmp_path, ORTOPS_EMULATED_GRAPH_CAPTURE="1")
    ran = {f"{run['domain']}.{run['op']}" for run in runs}
    missing = {f"{d}.{n}" for d, n in _device_nodes()} - SIZED_BY_DATA - ran
    assert not missing, f"no run of {sorted(missing)} in a capture"
    waiting = sorted(
        f"{run['domain']}.{run['op']}"
        for run in runs
        if f"{run['domain']}.{run['op']}" not in SIZED_BY_DATA and (run["waits"] or run["copies_to_device"])
    )
    assert not waiting, f"waited or copied from the host in a capture: {waiting}"


if __name__ == "__main__":
    _run_cases(Path(sys.argv[1]))
