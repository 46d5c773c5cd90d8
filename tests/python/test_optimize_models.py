"""``ortops optimize`` on whole files written by the real exporters: small random-weight models of
transformers (Deformable DETR, Mask2Former, OneFormer, Grounding DINO, RT-DETR v1 and v2,
D-FINE), Ultralytics (RT-DETR), torchvision (Faster R-CNN, Mask R-CNN, FCOS) and mmcv-style
layers, exported in the test run. Every block a rule can fuse is fused; the blocks it cannot prove are left alone and
reported; the optimized file gives ONNX Runtime's outputs for the original (PyTorch's where the
original cannot run in ONNX Runtime).

The models are exported once per module (under pytest's temporary directory) and shared by
the tests that look at them."""

from __future__ import annotations

import io
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from optimizing import op_counts, stack_form

import ortops
from ortops import _cli
from ortops._optimize import OptimizeReport, optimize_with_report

pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")
from exportable import Detections, FlatOutputs, GroundingDinoOfTokens, OneFormerOfTask, flat_tensors  # noqa: E402

F = torch.nn.functional


# --- exporting, running, counting ---------------------------------------------------------------


@dataclass
class Exported:
    """A model as an exporter wrote it, the inputs it was exported with and PyTorch's outputs
    on them (the flattened outputs, in the file's output order)."""

    path: Path
    model: onnx.ModelProto
    module: torch.nn.Module
    feeds: dict[str, np.ndarray]
    torch_outputs: list[np.ndarray]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.model.graph.output]


def export(
    directory: Path,
    name: str,
    module: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    input_names: Sequence[str],
    opset: int,
    dynamo: bool = False,
    **options: Any,
) -> Exported:
    """Exports ``module`` on ``args`` to ``directory/name.onnx`` and runs it in PyTorch."""
    module = module.eval()
    with torch.no_grad():
        expected = [t.numpy() for t in flat_tensors(module(*args))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings about Python values
        if dynamo:
            program = torch.onnx.export(
                module, args, dynamo=True, opset_version=opset, input_names=list(input_names), verbose=False
            )
            model = program.model_proto
        else:
            buffer = io.BytesIO()
            torch.onnx.export(
                module, args, buffer, dynamo=False, opset_version=opset, input_names=list(input_names), **options
            )
            model = onnx.load_from_string(buffer.getvalue())
    path = directory / f"{name}.onnx"
    onnx.save(model, str(path))
    feeds = {n: a.numpy() for n, a in zip(input_names, args)}
    assert len(model.graph.output) == len(expected)
    return Exported(path, model, module, feeds, expected)


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ortops.session_options()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return session(model).run(None, feeds)


def assert_same(names: Sequence[str], expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> None:
    """Equal as ``ortops optimize --verify`` compares: integers exactly, floats within float
    rounding (its own comparison function)."""
    assert len(actual) == len(expected)
    assert _cli._compare_outputs(names, expected, actual) == []


# The rule that rewrites the residual sums and layer norms these files are full of: the tests
# of the other rules count their own blocks, test_every_post_norm_block_is_fused counts its.
LAYER_NORM_RULE = "add-layer-norm"


def rewrites_by_rule(report: OptimizeReport) -> Counter[str]:
    """Rewrites by rule, add-layer-norm's aside."""
    return Counter(r.rule for r in report.rewrites if r.rule != LAYER_NORM_RULE)


def near_misses(report: OptimizeReport) -> list[Any]:
    """The near-misses, add-layer-norm's aside."""
    return [m for m in report.near_misses if m.rule != LAYER_NORM_RULE]


# --- the models ---------------------------------------------------------------------------------

transformers = pytest.importorskip("transformers")


def tiny_resnet(out_features: list[str], widths: list[int]) -> Any:
    """A one-block-per-stage ResNet backbone (transformers' own, no timm, random weights)."""
    return transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=widths, depths=[1, 1, 1, 1], layer_type="basic", out_features=out_features
    )


def tiny_rt_detr_backbone() -> Any:
    return transformers.RTDetrResNetConfig(
        embedding_size=16,
        hidden_sizes=[16, 32, 32, 64],
        depths=[1, 1, 1, 1],
        layer_type="basic",
        out_features=["stage2", "stage3", "stage4"],
    )


# RT-DETR v1 and v2 and D-FINE share these: a 3-level hybrid encoder and a 2-layer decoder whose
# cross-attention is deformable (3 levels, 4 points, or D-FINE's [3, 6, 3]).
RT_DETR_SIZES: dict[str, Any] = dict(
    use_timm_backbone=False,
    use_pretrained_backbone=False,
    encoder_hidden_dim=32,
    encoder_in_channels=[32, 32, 64],
    encoder_ffn_dim=64,
    encoder_attention_heads=2,
    d_model=32,
    num_queries=20,
    decoder_in_channels=[32, 32, 32],
    decoder_ffn_dim=64,
    decoder_layers=2,
    decoder_attention_heads=2,
    num_denoising=0,
)
IMAGE = (1, 3, 128, 128)


def image(seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).uniform(0, 1, IMAGE).astype(np.float32))


def randomize_weights(module: torch.nn.Module, seed: int = 0) -> None:
    """Weights drawn at fan-in scale, norm scales around 1, biases small: transformers'
    initializations leave some of these models nearly constant (RT-DETR's class scores all
    equal, so its top-k query selection is a tie that ONNX Runtime and PyTorch break apart),
    and a comparison of constants would prove little."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if parameter.dim() >= 2:
                fan_in = parameter[0].numel()
                parameter.copy_(torch.randn(parameter.shape, generator=generator) / fan_in**0.5)
            elif name.endswith("weight"):
                parameter.copy_(torch.rand(parameter.shape, generator=generator) + 0.5)
            else:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)


def hf_export(
    directory: Path, name: str, model_class: Any, config: Any, opset: int = 17, dynamo: bool = False
) -> Exported:
    torch.manual_seed(0)
    model = FlatOutputs(model_class(config))
    randomize_weights(model)
    return export(directory, name, model, (image(0),), ["pixel_values"], opset, dynamo)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exported-models")


def deformable_sizes() -> dict[str, Any]:
    """Deformable DETR's and Grounding DINO's configurations: 4 levels, 4 points, 2 encoder and
    2 decoder layers (4 deformable attention blocks), on a tiny ResNet."""
    return dict(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=tiny_resnet(["stage2", "stage3", "stage4"], [8, 16, 16, 16]),
        d_model=64,  # its GroupNorm has 32 groups: two channels each
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        num_queries=10,
        num_feature_levels=4,
        encoder_n_points=4,
        decoder_n_points=4,
    )


def deformable_detr_config(**options: Any) -> Any:
    return transformers.DeformableDetrConfig(**deformable_sizes(), **options)


@pytest.fixture(scope="module")
def deformable_detr(models_dir: Path) -> Exported:
    return hf_export(models_dir, "deformable_detr", transformers.DeformableDetrModel, deformable_detr_config())


@pytest.fixture(scope="module")
def deformable_detr_dynamo(models_dir: Path) -> Exported:
    """As torch exports it by default now: the dynamo exporter writes float32 grids, so the
    file runs as exported."""
    model_class = transformers.DeformableDetrModel
    return hf_export(models_dir, "deformable_detr_dynamo", model_class, deformable_detr_config(), 18, dynamo=True)


@pytest.fixture(scope="module")
def deformable_detr_two_stage(models_dir: Path) -> Exported:
    """DINO's architecture (as transformers has it): Deformable DETR two-stage, with box
    refinement, its queries the encoder's top proposals (a TopK), the decoder sampling around
    their boxes."""
    config = deformable_detr_config(two_stage=True, with_box_refine=True, two_stage_num_proposals=10)
    model_class = transformers.DeformableDetrForObjectDetection
    return hf_export(models_dir, "deformable_detr_two_stage", model_class, config)


def pixel_decoder_sizes() -> dict[str, Any]:
    """What Mask2Former's and OneFormer's configurations share: a pixel decoder of 2 deformable
    encoder layers over 3 levels, on a tiny ResNet."""
    return dict(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=tiny_resnet(["stage1", "stage2", "stage3", "stage4"], [8, 16, 16, 32]),
        encoder_feedforward_dim=64,
        encoder_layers=2,
        decoder_layers=2,
        num_attention_heads=2,
        dim_feedforward=64,
        num_queries=10,
    )


@pytest.fixture(scope="module")
def mask2former(models_dir: Path) -> Exported:
    config = transformers.Mask2FormerConfig(
        feature_size=32, mask_feature_size=32, hidden_dim=32, **pixel_decoder_sizes()
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hf_export(models_dir, "mask2former", transformers.Mask2FormerModel, config)


@pytest.fixture(scope="module")
def grounding_dino(models_dir: Path) -> Exported:
    """Deformable DETR's layout with a text encoder: 2 encoder layers (deformable attention over
    4 levels, from reference points and offsets) and 2 decoder layers (deformable attention from
    boxes picked by a TopK, whose batch the file's shapes lose)."""
    text = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    config = transformers.GroundingDinoConfig(text_config=text, max_text_len=16, **deformable_sizes())
    torch.manual_seed(0)
    model = GroundingDinoOfTokens(transformers.GroundingDinoModel(config))
    randomize_weights(model)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(1, 100, (1, 8)))
    return export(models_dir, "grounding_dino", model, (image(0), tokens), ["pixel_values", "input_ids"], 17)


@pytest.fixture(scope="module")
def oneformer(models_dir: Path) -> Exported:
    config = transformers.OneFormerConfig(
        hidden_dim=32,
        conv_dim=32,
        mask_dim=32,
        num_classes=10,
        text_encoder_width=32,
        text_encoder_num_layers=1,
        text_encoder_context_length=8,
        text_encoder_proj_layers=1,
        text_encoder_n_ctx=2,
        text_encoder_vocab_size=100,
        max_seq_len=8,
        task_seq_len=8,
        **pixel_decoder_sizes(),
    )
    torch.manual_seed(0)
    model = OneFormerOfTask(transformers.OneFormerModel(config))
    randomize_weights(model)
    task = torch.from_numpy(np.random.default_rng(0).integers(1, 100, (1, 8)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export(models_dir, "oneformer", model, (image(0), task), ["pixel_values", "task_inputs"], 17)


@pytest.fixture(scope="module")
def rt_detr(models_dir: Path) -> Exported:
    config = transformers.RTDetrConfig(backbone_config=tiny_rt_detr_backbone(), **RT_DETR_SIZES)
    return hf_export(models_dir, "rt_detr", transformers.RTDetrModel, config)


@pytest.fixture(scope="module")
def rt_detr_v2(models_dir: Path) -> Exported:
    config = transformers.RTDetrV2Config(backbone_config=tiny_rt_detr_backbone(), **RT_DETR_SIZES)
    return hf_export(models_dir, "rt_detr_v2", transformers.RTDetrV2Model, config)


@pytest.fixture(scope="module")
def d_fine(models_dir: Path) -> Exported:
    if not hasattr(transformers, "DFineModel"):
        pytest.skip("this transformers has no D-FINE")
    config = transformers.DFineConfig(
        backbone_config=tiny_rt_detr_backbone(),
        decoder_n_points=[3, 6, 3],
        head_dim=16,
        lqe_hidden_dim=16,
        **RT_DETR_SIZES,
    )
    return hf_export(models_dir, "d_fine", transformers.DFineModel, config)


# --- the HuggingFace files that do not run as exported --------------------------------------------


# Where the locations are reference points plus offsets over the levels' sizes (Deformable
# DETR's encoder and 2-d decoder), the node takes those; RT-DETR's decoders scale by boxes.
FROM_OFFSETS = "ortops::MultiScaleDeformableAttentionFromOffsets"


def attention_blocks(exported: Exported, levels: int) -> int:
    """The deformable attention blocks in the file: one GridSample per level each."""
    grid_samples = op_counts(exported.model)["ai.onnx::GridSample"]
    assert grid_samples % levels == 0
    return grid_samples // levels


@pytest.mark.parametrize(
    ("name", "levels", "from_offsets", "from_locations", "group_norms"),
    [
        ("deformable_detr", 4, 4, 0, 4),
        # Its decoder samples around the proposals' boxes, picked by a TopK.
        ("deformable_detr_two_stage", 4, 2, 2, 4),
        ("mask2former", 3, 2, 0, 5),
        ("oneformer", 3, 2, 0, 5),
        # Its decoder samples around boxes (4-d reference points): the locations node.
        ("grounding_dino", 4, 2, 2, 4),
    ],
)
def test_huggingface_file_that_does_not_run_runs_after_optimize_with_pytorchs_outputs(
    request: pytest.FixtureRequest, name: str, levels: int, from_offsets: int, from_locations: int, group_norms: int
) -> None:
    """The TorchScript exporter writes their grids in float64 (value float32): ONNX Runtime has
    no GridSample for that. Every attention block is fused, with the float64 sum of its reference
    points and offsets where it has one (the node takes the reference points cast to float32)."""
    exported: Exported = request.getfixturevalue(name)
    blocks = from_offsets + from_locations
    assert attention_blocks(exported, levels) == blocks
    with pytest.raises(Exception, match="GridSample"):
        session(exported.model)
    rewritten, report = optimize_with_report(exported.model)
    counts = op_counts(rewritten)
    assert counts[FROM_OFFSETS] == from_offsets, report.lines()
    assert counts["ortops::MultiScaleDeformableAttention"] == from_locations, report.lines()
    assert "ai.onnx::GridSample" not in counts and not near_misses(report)
    # The input projections' GroupNorms (torch's decomposition) are fused too.
    assert counts["ortops::GroupNorm"] == group_norms and "ai.onnx::InstanceNormalization" not in counts
    assert rewrites_by_rule(report) == {"deformable-attention": blocks, "group-norm": group_norms}
    assert_same(exported.output_names, exported.torch_outputs, run(rewritten, exported.feeds))
    # An image the file was not traced with (and the same text, where there is one).
    other = {**exported.feeds, "pixel_values": image(1).numpy()}
    with torch.no_grad():
        tensors = [torch.from_numpy(other[name]) for name in exported.feeds]
        expected = [t.numpy() for t in flat_tensors(exported.module(*tensors))]
    assert_same(exported.output_names, expected, run(rewritten, other))


@pytest.mark.parametrize(
    ("name", "grids"),
    [
        ("deformable_detr", 8),
        ("deformable_detr_two_stage", 8),
        ("mask2former", 6),
        ("oneformer", 6),
        ("grounding_dino", 8),
    ],
)
def test_cli_verify_compares_with_the_grids_cast_where_the_original_cannot_run(
    request: pytest.FixtureRequest, name: str, grids: int, tmp_path: Path, capsys
) -> None:
    """``--verify`` compares with ONNX Runtime running the original: here it cannot (float64
    grids), so it says so and compares with the original with its grids cast to float32, as a
    user runs it by hand."""
    exported: Exported = request.getfixturevalue(name)
    target = tmp_path / "out.onnx"
    code = _cli.main(["optimize", str(exported.path), str(target), "--verify"])
    err = capsys.readouterr().err
    assert code == _cli.OK and target.exists(), err
    assert "could not load the original" in err
    assert f"comparing with the original with its {grids} float64 GridSample grids cast to float32" in err
    assert "equal to those of the original with its grids cast to float32" in err


def test_cli_verify_refuses_where_the_grids_cast_do_not_match(
    deformable_detr: Exported, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison with the cast original is a real one: a rewrite that changed the outputs
    is refused there too."""
    from ortops import _optimize

    def wrong(model, rules=None):
        result, report = optimize_with_report(model, rules)
        weights = next(i for i in result.graph.initializer if i.data_type == onnx.TensorProto.FLOAT and i.dims)
        weights.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(weights) + 1, weights.name))
        return result, report

    monkeypatch.setattr(_optimize, "optimize_with_report", wrong)
    target = tmp_path / "out.onnx"
    code = _cli.main(["optimize", str(deformable_detr.path), str(target), "--verify"])
    err = capsys.readouterr().err
    assert code == _cli.CANNOT_RUN and not target.exists(), err
    assert "outputs differ" in err


# --- files that run as exported: the same outputs, fewer nodes ------------------------------------


@pytest.mark.parametrize(("name", "blocks"), [("rt_detr", 2), ("rt_detr_v2", 2)])
def test_rt_detr_decoder_attention_is_fused_with_the_same_outputs(
    request: pytest.FixtureRequest, name: str, blocks: int
) -> None:
    """v1 writes the stack form, v2 the split/concat form; 3 levels in each decoder layer."""
    exported: Exported = request.getfixturevalue(name)
    assert attention_blocks(exported, 3) == blocks
    rewritten, report = optimize_with_report(exported.model)
    counts = op_counts(rewritten)
    assert counts["ortops::MultiScaleDeformableAttention"] == blocks, report.lines()
    assert "ai.onnx::GridSample" not in counts and not near_misses(report)
    assert rewrites_by_rule(report) == {"deformable-attention": blocks}
    before = run(exported.model, exported.feeds)
    assert_same(exported.output_names, before, run(rewritten, exported.feeds))
    assert_same(exported.output_names, exported.torch_outputs, run(rewritten, exported.feeds))


def test_deformable_detr_of_the_dynamo_exporter_is_fused_with_the_same_outputs(
    deformable_detr_dynamo: Exported,
) -> None:
    """Every attention block with its reference points and offsets, and every GroupNorm, as in
    the TorchScript exporter's file; this one runs as exported, so the outputs are compared
    with ONNX Runtime's for it as well as with PyTorch's."""
    exported = deformable_detr_dynamo
    assert attention_blocks(exported, 4) == 4
    rewritten, report = optimize_with_report(exported.model)
    counts = op_counts(rewritten)
    assert counts[FROM_OFFSETS] == 4 and counts["ortops::GroupNorm"] == 4, report.lines()
    assert "ai.onnx::GridSample" not in counts and not near_misses(report)
    assert_same(exported.output_names, run(exported.model, exported.feeds), run(rewritten, exported.feeds))
    assert_same(exported.output_names, exported.torch_outputs, run(rewritten, exported.feeds))


def test_d_fine_attention_with_points_per_level_that_differ_is_fused(d_fine: Exported) -> None:
    """D-FINE samples [3, 6, 3] points per level (the split/concat form): the node takes them as
    its points_per_level attribute."""
    exported = d_fine
    blocks = attention_blocks(exported, 3)
    assert blocks == 2
    rewritten, report = optimize_with_report(exported.model)
    counts = op_counts(rewritten)
    assert counts["ortops::MultiScaleDeformableAttention"] == blocks, report.lines()
    assert "ai.onnx::GridSample" not in counts and not near_misses(report)
    fused = [n for n in rewritten.graph.node if n.op_type == "MultiScaleDeformableAttention"]
    assert all(list(a.ints) == [3, 6, 3] for n in fused for a in n.attribute if a.name == "points_per_level") and all(
        any(a.name == "points_per_level" for a in n.attribute) for n in fused
    )
    before = run(exported.model, exported.feeds)
    assert_same(exported.output_names, before, run(rewritten, exported.feeds))
    assert_same(exported.output_names, exported.torch_outputs, run(rewritten, exported.feeds))


# --- Ultralytics' own RT-DETR ---------------------------------------------------------------------


@pytest.fixture(scope="module", params=[("torchscript", 17), ("dynamo", 18)], ids=["torchscript", "dynamo"])
def ultralytics_rt_detr(models_dir: Path, request: pytest.FixtureRequest) -> Exported:
    """Ultralytics' RT-DETR (its own decoder, not transformers'), built from a model description
    as its YAML files give one: a five-convolution backbone (strides 2 to 32), the decoder on
    the last three levels with 2 layers, 4 heads of 8 channels, 40 queries, 4 points a level;
    exported by either exporter."""
    import os

    # Its settings file (written on import) under the test's directory, and no network.
    os.environ.setdefault("YOLO_CONFIG_DIR", str(models_dir / "ultralytics"))
    os.environ.setdefault("YOLO_OFFLINE", "1")
    tasks = pytest.importorskip("ultralytics.nn.tasks")
    description = {
        "nc": 5,
        "backbone": [[-1, 1, "Conv", [channels, 3, 2]] for channels in (16, 32, 32, 48, 64)],
        "head": [[[2, 3, 4], 1, "RTDETRDecoder", ["nc", 32, 40, 4, 4, 2, 64]]],
    }
    torch.manual_seed(0)
    model = tasks.RTDETRDetectionModel(description, ch=3, nc=5, verbose=False)
    randomize_weights(model)
    exporter, opset = request.param
    name = f"ultralytics_rt_detr_{exporter}"
    return export(models_dir, name, model, (image(0),), ["images"], opset, dynamo=exporter == "dynamo")


def test_ultralytics_rt_detr_decoder_attention_is_fused_with_the_same_outputs(ultralytics_rt_detr: Exported) -> None:
    """Ultralytics writes the split/concat form over 3 levels, its layers sharing the value
    split: every layer's attention is fused, and the file runs as exported, so the outputs are
    compared with ONNX Runtime's for it as well as with PyTorch's."""
    exported = ultralytics_rt_detr
    assert attention_blocks(exported, 3) == 2
    rewritten, report = optimize_with_report(exported.model)
    counts = op_counts(rewritten)
    assert counts["ortops::MultiScaleDeformableAttention"] == 2, report.lines()
    assert "ai.onnx::GridSample" not in counts and not near_misses(report)
    assert rewrites_by_rule(report) == {"deformable-attention": 2}
    assert_same(exported.output_names, run(exported.model, exported.feeds), run(rewritten, exported.feeds))
    assert_same(exported.output_names, exported.torch_outputs, run(rewritten, exported.feeds))


# --- torchvision's two-stage detector -------------------------------------------------------------

torchvision = pytest.importorskip("torchvision")


@pytest.fixture(scope="module")
def faster_rcnn(models_dir: Path) -> Exported:
    """Faster R-CNN MobileNetV3-320 FPN, every box scored (box_score_thresh 0), opset 16: its
    NonMaxSuppression nodes sit in If bodies, one RoiAlign per FPN level merged by ScatterElements."""
    torch.manual_seed(0)
    detector = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=3, box_score_thresh=0.0, min_size=160, max_size=160
    )

    picture = torch.from_numpy(np.random.default_rng(0).uniform(0, 1, (3, 160, 160)).astype(np.float32))
    return export(models_dir, "faster_rcnn", Detections(detector), (picture,), ["image"], 16)


def test_faster_rcnn_every_roi_align_and_nms_is_rewritten_with_the_same_detections(faster_rcnn: Exported) -> None:
    exported = faster_rcnn
    original = op_counts(exported.model)
    roi_aligns, nms_nodes = original["ai.onnx::RoiAlign"], original["ai.onnx::NonMaxSuppression"]
    assert roi_aligns == 2 and nms_nodes >= 2  # two FPN levels; RPN and box head
    rewritten, report = optimize_with_report(exported.model)
    counts = op_counts(rewritten)
    # The levels' RoiAligns and their ScatterElements merge are one node; the LevelMapper stays.
    assert counts["ortops::RoIAlignByLevel"] == 1 and counts["ortops::NonMaxSuppression"] == nms_nodes
    assert not {"ai.onnx::RoiAlign", "ai.onnx::ScatterElements", "ai.onnx::NonMaxSuppression"} & set(counts)
    assert not near_misses(report), report.lines()
    assert rewrites_by_rule(report) == {"multi-level-roi-align": 1, "non-max-suppression": nms_nodes}
    before, after = run(exported.model, exported.feeds), run(rewritten, exported.feeds)
    assert before[0].shape[0] > 0, "the detector found nothing: the test would prove little"
    np.testing.assert_array_equal(after[1], before[1])  # labels
    np.testing.assert_array_equal(after[0], before[0])  # boxes: RoIAlign is ONNX Runtime's to the bit
    np.testing.assert_allclose(after[2], before[2], rtol=1e-6, atol=1e-7)  # scores
    assert_same(exported.output_names, before, after)


def test_mask_rcnn_both_multi_level_merges_are_rewritten_with_the_same_detections_and_masks(models_dir: Path) -> None:
    """Mask R-CNN pools twice from its FPN (the box head 7x7, the mask head 14x14): both merges
    become RoIAlignByLevel, and the masks pasted from the second are ONNX Runtime's too."""
    torch.manual_seed(0)
    detector = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=3, box_score_thresh=0.0, min_size=128, max_size=128
    )
    picture = torch.from_numpy(np.random.default_rng(1).uniform(0, 1, (3, 128, 128)).astype(np.float32))
    exported = export(models_dir, "mask_rcnn", Detections(detector), (picture,), ["image"], 16)
    rewritten, report = optimize_with_report(exported.model)
    assert rewrites_by_rule(report)["multi-level-roi-align"] == 2 and not near_misses(report), report.lines()
    made = [r.made for r in report.rewrites if r.rule == "multi-level-roi-align"]
    assert [m.split("/")[3] for m in made] == ["box_roi_pool", "mask_roi_pool"]
    counts = op_counts(rewritten)
    assert counts["ortops::RoIAlignByLevel"] == 2 and "ai.onnx::RoiAlign" not in counts
    before, after = run(exported.model, exported.feeds), run(rewritten, exported.feeds)
    assert before[3].shape[0] > 0, "the detector found nothing: the test would prove little"
    for expected, got in zip(before, after):
        np.testing.assert_array_equal(got, expected)


def test_cli_optimizes_faster_rcnn_with_verify(faster_rcnn: Exported, tmp_path: Path, capsys) -> None:
    target = tmp_path / "faster_rcnn.ortops.onnx"
    code = _cli.main(["optimize", str(faster_rcnn.path), str(target), "--verify", "--json"])
    assert code == _cli.OK, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "verified: 3 outputs equal" in err
    assert "warning" not in err  # its If bodies read the main graph's values: valid
    counts = op_counts(onnx.load(str(target)))
    assert counts["ortops::RoIAlignByLevel"] == 1 and "ai.onnx::NonMaxSuppression" not in counts


class TinyBackbone(torch.nn.Module):
    """Three feature maps (strides 8, 16, 32) of 32 channels: FCOS's heads then hold
    GroupNorm(32, 32) as in torchvision's FCOS, at a fraction of ResNet-50's export time."""

    out_channels = 32

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, stride=8, padding=1)
        self.down = torch.nn.ModuleList([torch.nn.Conv2d(32, 32, 3, stride=2, padding=1) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        maps = [self.stem(x).relu()]
        for down in self.down:
            maps.append(down(maps[-1]).relu())
        return {str(level): m for level, m in enumerate(maps)}


@pytest.fixture(scope="module", params=[0.05, 1.0], ids=["detections", "no-detection"])
def fcos(models_dir: Path, request: pytest.FixtureRequest) -> Exported:
    """torchvision's FCOS (GroupNorm in both heads, NonMaxSuppression in an If) on three levels;
    with a score threshold of 1 it finds nothing, whatever the image."""
    from torchvision.models.detection import FCOS
    from torchvision.models.detection.anchor_utils import AnchorGenerator

    torch.manual_seed(0)
    anchors = AnchorGenerator(((8,), (16,), (32,)), ((1.0,),) * 3)
    detector = FCOS(TinyBackbone(), 3, min_size=128, max_size=128, score_thresh=request.param, anchor_generator=anchors)
    picture = torch.from_numpy(np.random.default_rng(0).uniform(0, 1, (3, 128, 128)).astype(np.float32))
    return export(models_dir, f"fcos_{request.param}", Detections(detector), (picture,), ["image"], 16)


def test_fcos_every_group_norm_and_nms_is_rewritten_with_the_same_detections(fcos: Exported) -> None:
    exported = fcos
    original = op_counts(exported.model)
    group_norms = original["ai.onnx::InstanceNormalization"]
    assert group_norms == 24  # 4 convolutions in each of 2 heads, on 3 levels
    rewritten, report = optimize_with_report(exported.model)
    counts = op_counts(rewritten)
    assert counts["ortops::GroupNorm"] == group_norms and counts["ortops::NonMaxSuppression"] == 1
    assert not {"ai.onnx::InstanceNormalization", "ai.onnx::NonMaxSuppression"} & set(counts)
    assert rewrites_by_rule(report) == {"group-norm": group_norms, "non-max-suppression": 1}
    assert not near_misses(report)
    before, after = run(exported.model, exported.feeds), run(rewritten, exported.feeds)
    assert_same(exported.output_names, before, after)
    assert_same(exported.output_names, exported.torch_outputs, after)


class MMCVRoIAlign(torch.autograd.Function):
    """mmcv.ops.RoIAlign without mmcv's custom-op library: its symbolic writes ONNX RoiAlign
    (rois [R, 5] split into batch indices and boxes; the pool mode as the node's mode)."""

    @staticmethod
    def forward(ctx, features, rois, output_size, spatial_scale, sampling_ratio, pool_mode):  # type: ignore[override]
        return torchvision.ops.roi_align(features, rois, output_size, spatial_scale, sampling_ratio)

    @staticmethod
    def symbolic(g, features, rois, output_size, spatial_scale, sampling_ratio, pool_mode):  # type: ignore[override]
        from torch.onnx.symbolic_helper import _slice_helper
        from torch.onnx.symbolic_opset9 import squeeze

        batch_indices = squeeze(g, _slice_helper(g, rois, axes=[1], starts=[0], ends=[1]), 1)
        batch_indices = g.op("Cast", batch_indices, to_i=onnx.TensorProto.INT64)
        boxes = _slice_helper(g, rois, axes=[1], starts=[1], ends=[5])
        return g.op(
            "RoiAlign",
            features,
            boxes,
            batch_indices,
            output_height_i=output_size[0],
            output_width_i=output_size[1],
            spatial_scale_f=spatial_scale,
            sampling_ratio_i=max(0, sampling_ratio),
            mode_s=pool_mode,
        )


class MMCVRoIExtractor(torch.nn.Module):
    def __init__(self, pool_mode: str) -> None:
        super().__init__()
        self.pool_mode = pool_mode

    def forward(self, features: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return MMCVRoIAlign.apply(features, rois, (7, 7), 0.25, 2, self.pool_mode).flatten(1).relu()


@pytest.mark.parametrize("pool_mode", ["avg", "max"])
def test_mmcv_style_roi_align_is_rewritten_in_both_modes(models_dir: Path, pool_mode: str) -> None:
    rng = np.random.default_rng(7)
    features = torch.from_numpy(rng.normal(size=(2, 8, 24, 24)).astype(np.float32))
    corners = np.sort(rng.uniform(0, 96, (30, 2, 2)), axis=1).reshape(30, 4)
    rois = torch.from_numpy(np.concatenate([rng.integers(0, 2, (30, 1)), corners], 1).astype(np.float32))
    exported = export(
        models_dir, f"mmcv_roi_{pool_mode}", MMCVRoIExtractor(pool_mode), (features, rois), ["features", "rois"], 16
    )
    rewritten, report = optimize_with_report(exported.model)
    before, after = run(exported.model, exported.feeds), run(rewritten, exported.feeds)
    if pool_mode == "avg":
        assert rewrites_by_rule(report) == {"roi-align": 1} and not near_misses(report)
        assert op_counts(rewritten)["ortops::RoIAlign"] == 1 and "ai.onnx::RoiAlign" not in op_counts(rewritten)
        np.testing.assert_array_equal(after[0], before[0])  # ONNX Runtime's values to the bit
    else:  # ONNX's max mode, which TensorRT's node computes
        assert rewrites_by_rule(report) == {"roi-align": 1} and not near_misses(report)
        assert op_counts(rewritten)["TRT::ROIAlign_TRT"] == 1 and "ai.onnx::RoiAlign" not in op_counts(rewritten)
        np.testing.assert_array_equal(after[0], before[0])


# --- an mmcv-style encoder layer ----------------------------------------------------------------


class MMCVEncoderLayer(torch.nn.Module):
    """mmcv's MultiScaleDeformableAttention (value projection, sampling offsets and weights
    from the query, reference points on each map's grid) with a residual, LayerNorm and FFN,
    over feature maps flattened the DETR way."""

    def __init__(self, dims: int = 32, heads: int = 4, levels: int = 3, points: int = 4) -> None:
        super().__init__()
        self.heads, self.levels, self.points = heads, levels, points
        self.value_proj = torch.nn.Linear(dims, dims)
        self.sampling_offsets = torch.nn.Linear(dims, heads * levels * points * 2)
        self.attention_weights = torch.nn.Linear(dims, heads * levels * points)
        self.output_proj = torch.nn.Linear(dims, dims)
        self.norm = torch.nn.LayerNorm(dims)
        self.ffn = torch.nn.Sequential(
            torch.nn.Linear(dims, 2 * dims), torch.nn.ReLU(), torch.nn.Linear(2 * dims, dims)
        )

    def forward(self, *maps: torch.Tensor) -> torch.Tensor:
        spatial_shapes = torch.tensor([m.shape[-2:] for m in maps], dtype=torch.long)
        query = torch.cat([m.flatten(2).transpose(1, 2) for m in maps], 1)
        bs, num_query, dims = query.shape
        reference_points = torch.cat(
            [
                torch.stack(
                    torch.meshgrid(
                        (torch.arange(h, dtype=torch.float32) + 0.5) / h,
                        (torch.arange(w, dtype=torch.float32) + 0.5) / w,
                        indexing="ij",
                    )[::-1],
                    -1,
                ).reshape(-1, 2)
                for h, w in (m.shape[-2:] for m in maps)
            ]
        )[None, :, None, :].expand(bs, num_query, self.levels, 2)
        value = self.value_proj(query).view(bs, num_query, self.heads, -1)
        offsets = self.sampling_offsets(query).view(bs, num_query, self.heads, self.levels, self.points, 2)
        weights = self.attention_weights(query).view(bs, num_query, self.heads, self.levels * self.points)
        weights = weights.softmax(-1).view(bs, num_query, self.heads, self.levels, self.points)
        offset_normalizer = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
        locations = reference_points[:, :, None, :, None, :] + offsets / offset_normalizer[None, None, None, :, None, :]
        attended = stack_form(value, spatial_shapes, locations, weights)  # mmcv's, shapes a tensor
        query = self.norm(query + self.output_proj(attended))
        return query + self.ffn(query)


@pytest.mark.parametrize(("exporter", "opset"), [("torchscript", 16), ("dynamo", 18)])
def test_mmcv_style_encoder_layer_is_fused_with_the_same_outputs(models_dir: Path, exporter: str, opset: int) -> None:
    torch.manual_seed(0)
    layer = MMCVEncoderLayer()
    with torch.no_grad():
        layer.sampling_offsets.weight.mul_(20)  # points well away from their reference, some outside
    rng = np.random.default_rng(3)
    maps = tuple(torch.from_numpy(rng.normal(size=(2, 32, s, s)).astype(np.float32)) for s in (12, 6, 3))
    exported = export(models_dir, f"mmcv_{exporter}", layer, maps, ["f0", "f1", "f2"], opset, exporter == "dynamo")
    assert attention_blocks(exported, 3) == 1
    rewritten, report = optimize_with_report(exported.model)
    counts = op_counts(rewritten)
    assert counts[FROM_OFFSETS] == 1, report.lines()  # with the reference points and offsets
    assert "ai.onnx::GridSample" not in counts and not near_misses(report)
    before = run(exported.model, exported.feeds)
    assert_same(exported.output_names, before, run(rewritten, exported.feeds))
    assert_same(exported.output_names, exported.torch_outputs, run(rewritten, exported.feeds))


# --- group norm as the TorchScript exporter writes it, and the forms it must leave alone ------------


class AdaptiveGroupNorm(torch.nn.Module):
    """A diffusion model's adaptive group norm: GroupNorm without its own affine (torch writes
    a Mul by ones and an Add of zeros), then a scale and shift per image and channel."""

    def forward(self, x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        return F.group_norm(x, 4) * (1 + scale[:, :, None, None]) + shift[:, :, None, None]


class GroupNormOfInputs(torch.nn.Module):
    """GroupNorm whose weight and bias are the model's inputs, not constants."""

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.group_norm(x, 4, weight, bias)


def group_norm_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.normal(size=(2, 8, 5, 5)).astype(np.float32))
    return x, *(torch.from_numpy(rng.normal(size=shape).astype(np.float32)) for shape in ((2, 8), (2, 8)))


def test_adaptive_group_norm_fuses_the_norm_and_keeps_the_per_image_scale(models_dir: Path) -> None:
    exported = export(models_dir, "ada_gn", AdaptiveGroupNorm(), group_norm_inputs(1), ["x", "scale", "shift"], 17)
    rewritten, report = optimize_with_report(exported.model)
    assert rewrites_by_rule(report) == {"group-norm": 1} and not near_misses(report)
    counts = op_counts(rewritten)
    assert counts["ortops::GroupNorm"] == 1 and "ai.onnx::InstanceNormalization" not in counts
    # The per-image scale and shift (model inputs) stay ONNX ops after the fused node.
    assert counts["ai.onnx::Mul"] >= 1 and counts["ai.onnx::Add"] >= 1
    assert_same(exported.output_names, run(exported.model, exported.feeds), run(rewritten, exported.feeds))


def test_group_norm_of_input_weights_fuses_the_norm_only(models_dir: Path) -> None:
    x, _, _ = group_norm_inputs(2)
    weight, bias = torch.linspace(0.5, 1.5, 8), torch.linspace(-0.2, 0.2, 8)
    exported = export(models_dir, "gn_inputs", GroupNormOfInputs(), (x, weight, bias), ["x", "weight", "bias"], 17)
    rewritten, report = optimize_with_report(exported.model)
    assert rewrites_by_rule(report) == {"group-norm": 1}
    (rewrite,) = report.rewrites
    # Reshape, InstanceNormalization, Reshape: the Mul and Add by the inputs are not constants.
    assert len(rewrite.replaced) == 3
    assert_same(exported.output_names, run(exported.model, exported.feeds), run(rewritten, exported.feeds))


def test_group_norm_with_a_dynamic_channel_count_is_left_alone_and_reported(models_dir: Path) -> None:
    torch.manual_seed(0)
    norm = torch.nn.GroupNorm(4, 8)
    dynamic = {"x": {0: "n", 1: "c", 2: "h", 3: "w"}}
    x = group_norm_inputs(3)[0]
    exported = export(models_dir, "gn_dynamic_c", norm, (x,), ["x"], 17, dynamic_axes=dynamic)
    rewritten, report = optimize_with_report(exported.model)
    assert not report.rewrites
    (miss,) = near_misses(report)
    assert miss.rule == "group-norm" and "channel count" in miss.reason
    assert op_counts(rewritten) == op_counts(exported.model)


# --- files passed through a simplifier -------------------------------------------------------------


def simplified(model: onnx.ModelProto, simplifier: str) -> onnx.ModelProto:
    """``model`` as onnxslim or onnx-simplifier (onnxsim) rewrites it: constants folded, shape
    computations collapsed, nodes renamed or merged."""
    if simplifier == "onnxslim":
        onnxslim = pytest.importorskip("onnxslim")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return onnxslim.slim(onnx.ModelProto.FromString(model.SerializeToString()))
    onnxsim = pytest.importorskip("onnxsim")
    result, ok = onnxsim.simplify(onnx.ModelProto.FromString(model.SerializeToString()))
    assert ok
    return result


@pytest.mark.parametrize("simplifier", ["onnxslim", "onnxsim"])
@pytest.mark.parametrize("name", ["rt_detr", "rt_detr_v2", "faster_rcnn", "deformable_detr"])
def test_a_simplified_file_gets_the_rewrites_of_the_exported_one(
    request: pytest.FixtureRequest, name: str, simplifier: str
) -> None:
    """RT-DETR (stack form), RT-DETRv2 (split/concat), Faster R-CNN (NMS in If bodies, RoiAlign)
    and Deformable DETR (float64 grids: ONNX Runtime cannot run it, so PyTorch's outputs are the
    reference) after onnxslim or onnxsim: the same rewrites and near-misses as the file as
    exported, and the simplified file's outputs. The simplifiers fold the grids of Deformable
    DETR's first decoder layer (its queries are learned embeddings) into constants, which the
    node then takes as its sampling locations."""
    exported: Exported = request.getfixturevalue(name)
    _, as_exported = optimize_with_report(exported.model)
    model = simplified(exported.model, simplifier)
    rewritten, report = optimize_with_report(model)
    assert rewrites_by_rule(report) == rewrites_by_rule(as_exported), report.lines()
    assert Counter(m.rule for m in near_misses(report)) == Counter(m.rule for m in near_misses(as_exported))
    after = run(rewritten, exported.feeds)
    if name == "deformable_detr":
        assert_same(exported.output_names, exported.torch_outputs, after)
    else:
        assert_same(exported.output_names, run(model, exported.feeds), after)


# --- residual sums and layer norms ---------------------------------------------------------------


def post_norm_blocks(model: onnx.ModelProto) -> int:
    """LayerNormalizations whose input is an Add that nothing else reads: the blocks the
    add-layer-norm rule can fuse, counted here from the file's nodes alone."""
    producers = {output: node for node in model.graph.node for output in node.output}
    readers = Counter(name for node in model.graph.node for name in node.input)
    graph_outputs = {o.name for o in model.graph.output}
    count = 0
    for node in model.graph.node:
        add = producers.get(node.input[0]) if node.op_type == "LayerNormalization" else None
        if add is not None and add.op_type == "Add" and readers[add.output[0]] == 1:
            count += add.output[0] not in graph_outputs
    return count


@pytest.mark.parametrize(
    ("name", "all_fused"),
    [
        ("deformable_detr", True),
        ("deformable_detr_two_stage", True),
        ("mask2former", False),
        ("grounding_dino", False),
        ("rt_detr", False),
        ("rt_detr_v2", False),
    ],
)
def test_every_post_norm_block_is_fused_or_reported(request: pytest.FixtureRequest, name: str, all_fused: bool) -> None:
    """Each Add read only by a LayerNormalization becomes one ortops::AddLayerNorm, or is a
    near-miss with its reason (a sum whose broadcast or width shape inference does not prove); in
    Deformable DETR's files, every one is fused. The outputs are compared with PyTorch's by
    the tests above, which run the same rewritten files."""
    exported: Exported = request.getfixturevalue(name)
    rewritten, report = optimize_with_report(exported.model)
    blocks = post_norm_blocks(exported.model)
    fused = Counter(r.rule for r in report.rewrites)[LAYER_NORM_RULE]
    missed = [m for m in report.near_misses if m.rule == LAYER_NORM_RULE]
    assert blocks > 0 and fused > 0 and fused + len(missed) == blocks, report.lines()
    assert op_counts(rewritten)["ortops::AddLayerNorm"] == fused
    # What ONNX's inference loses (a decoder's first layer reads the queries a TopK picks).
    unproven = ("not proven to broadcast", "last dim of the Add's input is not known")
    assert all(any(reason in m.reason for reason in unproven) for m in missed), report.lines()
    if all_fused:
        assert not missed, report.lines()
