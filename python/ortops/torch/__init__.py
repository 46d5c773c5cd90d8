"""PyTorch side of ortops: torch ops with eager implementations and ONNX export rules.

Importing this module registers every op under ``torch.ops.ortops`` together with its
export rules for both exporters. Export a model that uses them with :func:`export`, or
pass :func:`custom_translation_table` (``dynamo=True``) or ``custom_opsets={"ortops": 1}``
(``dynamo=False``) to ``torch.onnx.export`` yourself.
"""

import ortops._torch_extra  # noqa: F401  (first: names the missing requirements and the extra to install)
from ortops.torch._export import DOMAIN, OPSET_VERSION, ExportedOp, custom_translation_table, export, exported_ops
from ortops.torch.add_layer_norm import add_layer_norm
from ortops.torch.batched_nms import multiclass_nms
from ortops.torch.corner_pool import corner_pool
from ortops.torch.cummax import cummax, cummin
from ortops.torch.deform_conv import deform_conv2d
from ortops.torch.grid_sample import grid_sample
from ortops.torch.group_norm import group_norm
from ortops.torch.matrix_inverse import matrix_inverse
from ortops.torch.ms_deform_attn import (
    multi_scale_deformable_attention,
    multi_scale_deformable_attention_from_offsets,
)
from ortops.torch.multi_level_roi_align import multi_level_roi_align
from ortops.torch.nms import nms
from ortops.torch.nms_match import nms_match
from ortops.torch.nms_rotated import nms_rotated
from ortops.torch.non_max_suppression import non_max_suppression
from ortops.torch.roi_align import roi_align
from ortops.torch.roi_align_by_level import roi_align_by_level
from ortops.torch.roi_align_rotated import roi_align_rotated
from ortops.torch.rotated_feature_align import rotated_feature_align
from ortops.torch.soft_nms import soft_nms
from ortops.torch.torchvision import torchvision_ops

__all__ = [
    "DOMAIN",
    "OPSET_VERSION",
    "ExportedOp",
    "add_layer_norm",
    "corner_pool",
    "cummax",
    "cummin",
    "custom_translation_table",
    "deform_conv2d",
    "export",
    "exported_ops",
    "grid_sample",
    "group_norm",
    "matrix_inverse",
    "multi_level_roi_align",
    "multi_scale_deformable_attention",
    "multi_scale_deformable_attention_from_offsets",
    "multiclass_nms",
    "nms",
    "nms_match",
    "nms_rotated",
    "non_max_suppression",
    "roi_align",
    "roi_align_by_level",
    "roi_align_rotated",
    "rotated_feature_align",
    "soft_nms",
    "torchvision_ops",
]
