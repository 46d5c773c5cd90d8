"""What ``ortops optimize`` gains on whole models: each model family exported here from PyTorch
with random weights (the TorchScript exporter, as their users export them), optimized, and the
original and the optimized file timed in ONNX Runtime with ortops registered, at 1 thread and
at all cores (``intra_op_num_threads``), in turn (bench.py's interleaved rounds, the median of
each round's runs after a warm-up, the fastest round counting). Ratios are original time /
optimized time (bigger is better).

The families:

- torchvision Faster R-CNN MobileNetV3-Large-320 FPN, every box scored (``box_score_thresh=0``),
  opset 16: NonMaxSuppression in If bodies, one RoiAlign per FPN level merged by ScatterElements;
- torchvision Mask R-CNN ResNet-50 FPN, likewise: two such merges (the box head's 7x7 and the
  mask head's 14x14), and masks among the outputs;
- HuggingFace Deformable DETR, the default configuration (6 encoder and 6 decoder layers,
  d_model 256, 300 queries, 4 levels, 4 points) on transformers' own ResNet-50, opset 17;
- HuggingFace Deformable DETR two-stage with box refinement, configured as DINO-4scale (900
  queries picked from the encoder's proposals by a TopK, 2048-wide feed-forwards), with its
  detection heads, opset 17: DINO's inference architecture (mmdet's DINO needs mmcv's compiled
  operators to build);
- HuggingFace Grounding DINO, the default configuration (Swin-T, a BERT-base text encoder, 6+6
  layers, 900 queries, 4 levels, 4 points) on an image and 8 text tokens, opset 17;
- HuggingFace RT-DETR v2, the default configuration (ResNet-50-vd, 6 decoder layers), opset 17;
- Ultralytics RT-DETR-l, its packaged model description (HGNetv2, its own decoder: 6 layers, the
  split/concat form of the attention), opset 17;
- torchvision FCOS ResNet-50 FPN (GroupNorm in both heads, NonMaxSuppression in an If), opset 16.

HuggingFace's Deformable DETR (both) and Grounding DINO files do not run as exported (their GridSample
grids are float64, their values float32: ONNX Runtime has no kernel for that). Their baseline is
the file with a Cast of each grid to float32 put in front of each GridSample by hand (the
benchmark says so when it does it); for them ONNX Runtime's profiler also gives the share of
the time in GridSample and Concat before and after.

Before anything is timed, the optimized file's outputs are compared with the baseline's as
``ortops optimize --verify`` compares them (and where they differ, each rewritten block alone on
the baseline's values, as --verify then does: Grounding DINO's TopK over its proposals reorders
queries whose scores tie within rounding). Prints a Markdown table and writes JSON.

    python benchmarks/bench_optimize.py [--json results.json] [--only NAME] [--small] [--image-size N] [--cuda]

``--small`` exports the models at a fraction of their size (a check of the plumbing, not figures
to report). ``--cuda`` also times both files on ONNX Runtime's CUDA execution provider
(onnxruntime-gpu, and ORTOPS_LIBRARY naming ortops' CUDA build: the optimized file's ortops
nodes then run on the GPU, the original's standard nodes on ONNX Runtime's own CUDA kernels).
``--grid-sampler`` writes every GridSample as mmdeploy writes mmcv's grid_sample
(``mmdeploy::grid_sampler``, run by ortops' own kernel in the baseline: the attention of an
mmdeploy export of Deformable DETR or DINO). Environment: ORTOPS_LIBRARY, as for any ortops session.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchvision
from bench import cpu_model, interleaved_seconds, onnx_session, provenance

# The wrappers that make the models exportable, and mmdeploy's spelling of GridSample, are the
# optimize tests' own.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from exportable import Detections, FlatOutputs, GroundingDinoOfTokens  # noqa: E402
from optimizing import as_mmdeploy_grid_sampler  # noqa: E402

import ortops
from ortops._cli import _compare_outputs, _verify_blocks
from ortops._optimize import OptimizeReport, optimize_with_report, with_float32_grids


@dataclass
class Family:
    """One model family's exported file, the inputs to time it on and how it was configured."""

    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    configuration: str


# ---- exporting -----------------------------------------------------------------------------


def export(
    module: torch.nn.Module, args: tuple[torch.Tensor, ...], input_names: list[str], opset: int
) -> onnx.ModelProto:
    """The TorchScript exporter's file of ``module`` on ``args``."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, buffer, dynamo=False, opset_version=opset, input_names=input_names)
    return onnx.load_from_string(buffer.getvalue())


def random_image(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(0))


def two_stage(name: str, build: Callable[..., torch.nn.Module], small: bool, image_size: int | None) -> Family:
    """A torchvision two-stage detector of ``build`` (random weights), every box scored."""
    size = image_size or (160 if small else 320)
    torch.manual_seed(0)
    detector = build(weights=None, weights_backbone=None, box_score_thresh=0.0, min_size=size, max_size=size)
    image = random_image((3, size, size))
    return Family(
        name,
        export(Detections(detector), (image,), ["image"], 16),
        {"image": image.numpy()},
        f"91 classes, box_score_thresh 0, {size}x{size} image, opset 16",
    )


def faster_rcnn(small: bool, image_size: int | None) -> Family:
    detection = torchvision.models.detection
    return two_stage(
        "torchvision Faster R-CNN MobileNetV3-320 FPN",
        detection.fasterrcnn_mobilenet_v3_large_320_fpn,
        small,
        image_size,
    )


def mask_rcnn(small: bool, image_size: int | None) -> Family:
    detection = torchvision.models.detection
    return two_stage("torchvision Mask R-CNN ResNet-50 FPN", detection.maskrcnn_resnet50_fpn, small, image_size)


def fcos(small: bool, image_size: int | None) -> Family:
    size = image_size or (256 if small else 512)
    torch.manual_seed(0)
    detector = torchvision.models.detection.fcos_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=size, max_size=size
    )
    image = random_image((3, size, size))
    return Family(
        "torchvision FCOS ResNet-50 FPN (GroupNorm heads)",
        export(Detections(detector), (image,), ["image"], 16),
        {"image": image.numpy()},
        f"91 classes, {size}x{size} image, opset 16",
    )


def hf_deformable_detr(
    name: str,
    small: bool,
    image_size: int | None,
    describe: Callable[[int, int], str],
    detector: bool = False,
    **options: Any,
) -> Family:
    """transformers' Deformable DETR with its default configuration but for ``options``, on its
    own ResNet-50; the model alone or, with ``detector``, with its heads (which two-stage needs).
    ``describe(layers, size)`` says how it was configured."""
    import transformers  # noqa: PLC0415 (only the HuggingFace families need it)

    size = image_size or (256 if small else 512)
    layers = 1 if small else 6
    config = transformers.DeformableDetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=transformers.ResNetConfig(out_features=["stage2", "stage3", "stage4"]),
        encoder_layers=layers,
        decoder_layers=layers,
        **options,
    )
    torch.manual_seed(0)
    image = random_image((1, 3, size, size))
    model_class = transformers.DeformableDetrForObjectDetection if detector else transformers.DeformableDetrModel
    model = export(FlatOutputs(model_class(config)), (image,), ["pixel_values"], 17)
    return Family(name, model, {"pixel_values": image.numpy()}, describe(layers, size))


def deformable_detr(small: bool, image_size: int | None) -> Family:
    return hf_deformable_detr(
        "HuggingFace Deformable DETR",
        small,
        image_size,
        lambda layers, size: (
            f"default config ({layers}+{layers} layers, d_model 256, 300 queries, 4 levels x 4 "
            f"points), ResNet-50, {size}x{size} image, opset 17"
        ),
    )


def dino_style_detr(small: bool, image_size: int | None) -> Family:
    """DINO-4scale's inference architecture as transformers has it: Deformable DETR two-stage
    with box refinement, 900 queries from the encoder's top proposals, 2048-wide feed-forwards."""
    queries = 100 if small else 900
    return hf_deformable_detr(
        "HuggingFace Deformable DETR two-stage, as DINO-4scale",
        small,
        image_size,
        lambda layers, size: (
            f"two-stage with box refinement, {layers}+{layers} layers, d_model 256, {queries} "
            f"queries, FFN 2048, 4 levels x 4 points, ResNet-50, 91 classes, {size}x{size} image, opset 17"
        ),
        detector=True,
        two_stage=True,
        with_box_refine=True,
        num_queries=queries,
        two_stage_num_proposals=queries,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
    )


def grounding_dino(small: bool, image_size: int | None) -> Family:
    import transformers  # noqa: PLC0415

    size = image_size or (256 if small else 512)
    layers = 1 if small else 6
    config = transformers.GroundingDinoConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, encoder_layers=layers, decoder_layers=layers
    )
    torch.manual_seed(0)
    image = random_image((1, 3, size, size))
    # "[CLS] a cat. a dog. [SEP]" in BERT's vocabulary.
    tokens = torch.tensor([[101, 1037, 4937, 1012, 1037, 3899, 1012, 102]])
    model = export(
        GroundingDinoOfTokens(transformers.GroundingDinoModel(config)),
        (image, tokens),
        ["pixel_values", "input_ids"],
        17,
    )
    return Family(
        "HuggingFace Grounding DINO",
        model,
        {"pixel_values": image.numpy(), "input_ids": tokens.numpy()},
        f"default config (Swin-T, BERT-base text encoder, {layers}+{layers} layers, d_model 256, 900 queries, "
        f"4 levels x 4 points), 8 text tokens, {size}x{size} image, opset 17",
    )


def rt_detr_v2(small: bool, image_size: int | None) -> Family:
    import transformers  # noqa: PLC0415

    size = image_size or (320 if small else 640)
    config = transformers.RTDetrV2Config(use_timm_backbone=False, use_pretrained_backbone=False)
    torch.manual_seed(0)
    image = random_image((1, 3, size, size))
    model = export(FlatOutputs(transformers.RTDetrV2Model(config)), (image,), ["pixel_values"], 17)
    return Family(
        "HuggingFace RT-DETR v2",
        model,
        {"pixel_values": image.numpy()},
        f"default config (ResNet-50-vd, 6 decoder layers, 300 queries, 3 levels x 4 points), {size}x{size} image, "
        "opset 17",
    )


def ultralytics_rt_detr(small: bool, image_size: int | None) -> Family:
    # Its settings file (written on import) in the temporary folder, and no network.
    os.environ.setdefault("YOLO_CONFIG_DIR", str(Path(tempfile.gettempdir()) / "ortops-ultralytics"))
    os.environ.setdefault("YOLO_OFFLINE", "1")
    from ultralytics.nn.tasks import RTDETRDetectionModel  # noqa: PLC0415

    size = image_size or (320 if small else 640)
    torch.manual_seed(0)
    model = RTDETRDetectionModel("rtdetr-l.yaml", nc=80, verbose=False)
    image = random_image((1, 3, size, size))
    return Family(
        "Ultralytics RT-DETR-l",
        export(model, (image,), ["images"], 17),
        {"images": image.numpy()},
        f"rtdetr-l.yaml (HGNetv2, 6 decoder layers, 300 queries, 3 levels x 4 points), 80 classes, {size}x{size} "
        "image, opset 17",
    )


FAMILIES: list[Callable[[bool, int | None], Family]] = [
    faster_rcnn,
    mask_rcnn,
    deformable_detr,
    dino_style_detr,
    grounding_dino,
    rt_detr_v2,
    ultralytics_rt_detr,
    fcos,
]


# ---- baselines, checks, profiles -------------------------------------------------------------


def runs_in_onnx_runtime(model: onnx.ModelProto) -> bool:
    try:
        onnx_session(model, 1, True)
    except Exception:  # noqa: BLE001  (any load failure: the original does not run)
        return False
    return True


def kernel_shares(model: onnx.ModelProto, feeds: dict[str, np.ndarray], runs: int = 2) -> dict[str, float]:
    """Each op type's share of the node time at 1 thread, from ONNX Runtime's profiler (the
    runs after the first), and that time per run in ms (``node_ms_per_run``)."""
    options = ortops.session_options()
    options.intra_op_num_threads = 1
    options.enable_profiling = True
    with tempfile.TemporaryDirectory(prefix="ortops-bench-profile-") as folder:
        options.profile_file_prefix = os.path.join(folder, "profile")
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        for _ in range(runs + 1):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    # A run's model_run event is written when it ends, after its nodes' events: nodes belong to
    # the run whose span holds their start.
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
    by_run: list[Counter[str]] = [Counter() for _ in spans]
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            for index, (start, end) in enumerate(spans):
                if start <= event["ts"] <= end:
                    by_run[index][event["args"]["op_name"]] += event["dur"]
                    break
    total: Counter[str] = Counter()
    for counts in by_run[1:] or by_run:
        total.update(counts)
    all_time = sum(total.values()) or 1
    return {"node_ms_per_run": all_time / 1e3 / max(1, len(by_run[1:] or by_run))} | {
        op: dur / all_time for op, dur in total.most_common()
    }


def block_counts(report: OptimizeReport) -> dict[str, Any]:
    return {
        "rewritten": dict(Counter(r.rule for r in report.rewrites)),
        "near_misses": dict(Counter(m.rule for m in report.near_misses)),
    }


def compare(baseline: list[Any], optimized: list[Any], names: list[str]) -> dict[str, Any]:
    """--verify's comparison, plus the largest difference of the float outputs."""
    problems = _compare_outputs(names, baseline, optimized)
    worst = 0.0
    for a, b in zip(baseline, optimized):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape == b.shape and a.dtype.kind == "f" and a.size:
            with np.errstate(invalid="ignore"):  # inf - inf: masked logits, equal in both
                worst = max(worst, float(np.nanmax(np.abs(a.astype(np.float64) - b))))
    return {"equal_within_verify_tolerance": not problems, "problems": problems, "max_abs_difference": worst}


def blocks_alone(
    baseline: onnx.ModelProto, optimized: onnx.ModelProto, report: OptimizeReport, feeds: dict[str, np.ndarray]
) -> dict[str, Any]:
    """--verify's second look where the outputs differ: each rewritten block run alone on the
    baseline's values (a model that amplifies rounding, as Grounding DINO's TopK does)."""

    def session(path: str, what: str) -> ort.InferenceSession:
        return ort.InferenceSession(path, ortops.session_options(), providers=["CPUExecutionProvider"])

    with tempfile.TemporaryDirectory(prefix="ortops-bench-blocks-") as folder:
        made = [r.made_name for r in report.rewrites]
        checked, problems = _verify_blocks(baseline, optimized, made, feeds, folder, session)
    return {"blocks_checked_alone": checked, "block_problems": problems}


def runner(session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
    return lambda: session.run(None, feeds)


def cuda_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """`model` on ONNX Runtime's CUDA execution provider in float32 (no TF32), with ortops
    registered (its CUDA build, from ORTOPS_LIBRARY), and the CPU's for nodes CUDA has no
    kernel for. Feeds and outputs go through host memory, the same for both files."""
    options = ortops.session_options()
    options.log_severity_level = 3
    providers = [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]
    return ort.InferenceSession(model.SerializeToString(), options, providers=providers)


# ---- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="bench-optimize.json", help="where to write the JSON results")
    parser.add_argument("--repeats", type=int, default=6, help="timed runs per measurement, over all rounds")
    parser.add_argument("--rounds", type=int, default=2, help="original and optimized are timed in turn this often")
    parser.add_argument("--only", default="", help="only the families whose function name contains this")
    parser.add_argument("--small", action="store_true", help="small models: the plumbing, not figures to report")
    parser.add_argument("--image-size", type=int, help="a square image of this size in place of each family's own")
    parser.add_argument("--no-profile", action="store_true", help="leave out the profiler's op shares")
    parser.add_argument(
        "--grid-sampler",
        action="store_true",
        help="each GridSample written as mmdeploy writes it (mmdeploy::grid_sampler, ortops' kernel in the baseline)",
    )
    parser.add_argument(
        "--cuda",
        action="store_true",
        help="also time both files on ONNX Runtime's CUDA execution provider (onnxruntime-gpu, and ORTOPS_LIBRARY "
        "naming ortops' CUDA build)",
    )
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    # Where each file is timed: ONNX Runtime's CPU provider at 1 thread and at all cores, and
    # with --cuda its CUDA provider.
    settings: list[tuple[str, Callable[[onnx.ModelProto], ort.InferenceSession]]] = [
        (str(threads), lambda model, threads=threads: onnx_session(model, threads, True))
        for threads in sorted({1, cores})
    ]
    if args.cuda:
        if "CUDAExecutionProvider" not in ortops.library_providers():
            parser.error(f"--cuda: {ortops.get_library_path()} is not ortops' CUDA build (set ORTOPS_LIBRARY)")
        settings.append(("CUDA", cuda_session))
    print(
        f"machine: {cpu_model()}, {cores} cores; onnxruntime {ort.__version__}, torch {torch.__version__}, "
        f"torchvision {torchvision.__version__}, ortops {ortops.__version__}\n"
    )
    families: list[dict[str, Any]] = []
    rows: list[str] = []
    for make in FAMILIES:
        if args.only and args.only not in make.__name__:
            continue
        family = make(args.small, args.image_size)
        if args.grid_sampler:
            family.model = as_mmdeploy_grid_sampler(with_float32_grids(family.model)[0])
            family.name += ", grid_sampler"
        print(f"## {family.name}: {family.configuration}")
        optimized, report = optimize_with_report(family.model)
        counts = block_counts(report)
        print(f"rewritten: {counts['rewritten']}; near-misses: {counts['near_misses']}")
        baseline, baseline_name = family.model, "original"
        if not runs_in_onnx_runtime(family.model):
            baseline, cast = with_float32_grids(family.model)
            baseline_name = "original, grids cast to float32 by hand"
            print(
                f"the original does not run in ONNX Runtime: baseline = the original with {cast} grids cast to float32"
            )
        names = [o.name for o in family.model.graph.output]
        check = compare(
            onnx_session(baseline, 1, True).run(None, family.feeds),
            onnx_session(optimized, 1, True).run(None, family.feeds),
            names,
        )
        print(
            f"outputs: {'equal' if check['equal_within_verify_tolerance'] else 'DIFFER'} within --verify's "
            f"tolerance (largest float difference {check['max_abs_difference']:.3g})"
        )
        if not check["equal_within_verify_tolerance"]:
            check.update(blocks_alone(baseline, optimized, report, family.feeds))
            print(
                f"  {check['problems']}\n  each rewritten block alone on the baseline's values, as --verify checks "
                f"then: {check['blocks_checked_alone']} checked, differences: {check['block_problems'] or 'none'}"
            )
        timings: dict[str, dict[str, float]] = {}
        for where, session in settings:
            sessions = {"baseline": session(baseline), "optimized": session(optimized)}
            if where == "CUDA":
                on_gpu = compare(*(s.run(None, family.feeds) for s in sessions.values()), names)
                print(f"outputs on CUDA: {'equal' if on_gpu['equal_within_verify_tolerance'] else 'DIFFER'}")
            runs = {which: runner(s, family.feeds) for which, s in sessions.items()}
            seconds = interleaved_seconds(runs, args.repeats, args.rounds)
            ratio = seconds["baseline"] / seconds["optimized"]
            timings[where] = {
                "baseline_ms": seconds["baseline"] * 1e3,
                "optimized_ms": seconds["optimized"] * 1e3,
                "ratio": ratio,
            }
            rewritten = ", ".join(f"{rule} {n}" for rule, n in counts["rewritten"].items()) or "none"
            missed = sum(counts["near_misses"].values())
            rows.append(
                f"| {family.name} | {baseline_name} | {where} | {seconds['baseline'] * 1e3:.1f} | "
                f"{seconds['optimized'] * 1e3:.1f} | {ratio:.2f} | {rewritten} | {missed} |"
            )
            print(rows[-1])
        shares: dict[str, dict[str, float]] = {}
        if baseline is not family.model and not args.no_profile:
            shares = {
                "baseline": kernel_shares(baseline, family.feeds),
                "optimized": kernel_shares(optimized, family.feeds),
            }
            for which, share in shares.items():
                top = ", ".join(f"{op} {100 * s:.1f}%" for op, s in list(share.items())[1:7])
                print(f"1-thread node time, {which}: {share['node_ms_per_run']:.0f} ms a run; {top}")
        families.append(
            {
                "family": family.name,
                "configuration": family.configuration,
                "baseline": baseline_name,
                "blocks": counts,
                "outputs": check,
                "timings": timings,
                "op_shares_1_thread": shares,
            }
        )
        print()
    print(
        "| model | baseline | threads (or CUDA) | baseline ms | optimized ms | ratio | rewritten blocks | near-misses |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    machine = {
        "cpu": cpu_model(),
        "cores": cores,
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "small": args.small,
        **provenance(),
    }
    with open(args.json, "w") as f:
        json.dump({"machine": machine, "families": families}, f, indent=2)
        f.write("\n")
    print(f"\nJSON written to {args.json}")


if __name__ == "__main__":
    main()
