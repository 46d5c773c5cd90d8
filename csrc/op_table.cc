#include "op_table.h"

#include "ops/batched_nms/batched_nms.h"
#include "ops/bicubic_interpolate/bicubic_interpolate.h"
#include "ops/corner_pool/corner_pool.h"
#include "ops/cummax/cummax.h"
#include "ops/deform_conv/deform_conv.h"
#include "ops/gather_topk/gather_topk.h"
#include "ops/grid_priors/grid_priors.h"
#include "ops/grid_sample/grid_sample.h"
#include "ops/group_norm/group_norm.h"
#include "ops/matrix_inverse/matrix_inverse.h"
#include "ops/ms_deform_attn/ms_deform_attn.h"
#include "ops/multi_level_roi_align/multi_level_roi_align.h"
#include "ops/nms/nms.h"
#include "ops/nms_match/nms_match.h"
#include "ops/nms_rotated/nms_rotated.h"
#include "ops/non_max_suppression/non_max_suppression.h"
#include "ops/roi_align/roi_align.h"
#include "ops/roi_align_rotated/roi_align_rotated.h"
#include "ops/rotated_feature_align/rotated_feature_align.h"
#include "ops/scaled_dot_product_attention/scaled_dot_product_attention.h"
#include "ops/soft_nms/soft_nms.h"
#include "ops/trt_batched_nms/trt_batched_nms.h"
#include "ops/trt_efficient_nms/trt_efficient_nms.h"
#include "ops/trt_roi_align/trt_roi_align.h"

namespace ortops {
namespace {

constexpr bool kCompat = true;

// The provider column: kCpuOnly, or OnCuda(factory of the node's device kernels). The
// factory is named only where this file is compiled into a build with device code
// (ORTOPS_DEVICE_PATHS: the CUDA build and the emulated device); the CPU-only build knows
// which nodes have one (the manifest lists their providers) without linking any.
constexpr DevicePath kCpuOnly{};
#if ORTOPS_DEVICE_PATHS
#define OnCuda(factory) (DevicePath{true, &factory})
#else
#define OnCuda(factory) (DevicePath{true, nullptr})
#endif

// clang-format off
constexpr OpDef kOpTable[] = {
  // domain         name                         since  provider  schema                           factory                       quirks
  {kOrtopsDomain,   "NMS",                       1,     OnCuda(nms::MakeDevice),   &nms::kSchema,                   &nms::Make},
  {kMmcvDomain,     "NonMaxSuppression",         1,     OnCuda(nms::MakeDevice),   &nms::kSchema,                   &nms::Make,                   kCompat},
  // ONNX's NonMaxSuppression with ONNX Runtime's results (ortops optimize writes it).
  {kOrtopsDomain,   "NonMaxSuppression",         1,     OnCuda(non_max_suppression::MakeDevice),   &non_max_suppression::kSchema,   &non_max_suppression::Make},
  {kOrtopsDomain,   "SoftNMS",                   1,     OnCuda(soft_nms::MakeDevice),   &soft_nms::kSchema,              &soft_nms::Make},
  {kMmcvDomain,     "SoftNonMaxSuppression",     1,     OnCuda(soft_nms::MakeDevice),   &soft_nms::kSchema,              &soft_nms::Make,              kCompat},
  {kOrtopsDomain,   "NMSMatch",                  1,     OnCuda(nms_match::MakeDevice),   &nms_match::kSchema,             &nms_match::Make},
  {kMmdeployDomain, "NMSMatch",                  1,     OnCuda(nms_match::MakeDevice),   &nms_match::kSchema,             &nms_match::Make,             kCompat},
  {kOrtopsDomain,   "NMSRotated",                1,     OnCuda(nms_rotated::MakeDevice),   &nms_rotated::kSchema,           &nms_rotated::Make},
  {kMmdeployDomain, "NMSRotated",                1,     OnCuda(nms_rotated::MakeDevice),   &nms_rotated::kSchema,           &nms_rotated::Make,           kCompat},
  {kOrtopsDomain,   "RoIAlign",                  1,     OnCuda(roi_align::MakeDevice),   &roi_align::kSchema,             &roi_align::Make},
  {kMmcvDomain,     "MMCVRoiAlign",              1,     OnCuda(roi_align::MakeDevice),   &roi_align::kSchema,             &roi_align::Make,             kCompat},
  {kOrtopsDomain,   "RoIAlignRotated",           1,     OnCuda(roi_align_rotated::MakeDevice),  &roi_align_rotated::kSchema,     &roi_align_rotated::Make},
  {kMmcvDomain,     "MMCVRoIAlignRotated",       1,     OnCuda(roi_align_rotated::MakeDevice),  &roi_align_rotated::kSchema,     &roi_align_rotated::Make,     kCompat},
  {kMmdeployDomain, "MMCVRoIAlignRotated",       1,     OnCuda(roi_align_rotated::MakeDevice),  &roi_align_rotated::kSchema,     &roi_align_rotated::Make,     kCompat},
  {kOrtopsDomain,   "RotatedFeatureAlign",       1,     OnCuda(rotated_feature_align::MakeDevice),   &rotated_feature_align::kSchema, &rotated_feature_align::Make},
  {kMmcvDomain,     "MMCVRotatedFeatureAlign",   1,     OnCuda(rotated_feature_align::MakeDevice),   &rotated_feature_align::kSchema, &rotated_feature_align::Make, kCompat},
  {kOrtopsDomain,   "GridSample",                1,     OnCuda(grid_sample::MakeDevice),   &grid_sample::kSchema,           &grid_sample::Make},
  {kMmcvDomain,     "grid_sampler",              1,     OnCuda(grid_sample::MakeDevice),   &grid_sample::kSchema,           &grid_sample::Make,           kCompat},
  {kMmdeployDomain, "grid_sampler",              1,     OnCuda(grid_sample::MakeDevice),   &grid_sample::kSchema,           &grid_sample::Make,           kCompat},
  {kOrtopsDomain,   "CornerPool",                1,     OnCuda(corner_pool::MakeDevice),  &corner_pool::kSchema,           &corner_pool::Make},
  {kMmcvDomain,     "MMCVCornerPool",            1,     OnCuda(corner_pool::MakeDevice),  &corner_pool::kSchema,           &corner_pool::Make,           kCompat},
  {kOrtopsDomain,   "CumMax",                    1,     OnCuda(cummax::MakeMaxDevice),  &cummax::kSchema,                &cummax::MakeMax},
  {kMmcvDomain,     "cummax",                    1,     OnCuda(cummax::MakeMaxDevice),  &cummax::kSchema,                &cummax::MakeMax,             kCompat},
  {kOrtopsDomain,   "CumMin",                    1,     OnCuda(cummax::MakeMinDevice),  &cummax::kSchema,                &cummax::MakeMin},
  {kMmcvDomain,     "cummin",                    1,     OnCuda(cummax::MakeMinDevice),  &cummax::kSchema,                &cummax::MakeMin,             kCompat},
  {kOrtopsDomain,   "DeformConv2d",              1,     OnCuda(deform_conv::MakeDevice),   &deform_conv::kSchema,           &deform_conv::Make},
  {kMmcvDomain,     "MMCVModulatedDeformConv2d", 1,     OnCuda(deform_conv::MakeModulatedDevice),   &deform_conv::kModulatedSchema,  &deform_conv::MakeModulated,  kCompat},
  {kMmdeployDomain, "MMCVModulatedDeformConv2d", 1,     OnCuda(deform_conv::MakeModulatedDevice),   &deform_conv::kModulatedSchema,  &deform_conv::MakeModulated,  kCompat},
  {kMmcvDomain,     "MMCVDeformConv2d",          1,     OnCuda(deform_conv::MakeV1Device),   &deform_conv::kV1Schema,         &deform_conv::MakeV1,         kCompat},
  {kOrtopsDomain,   "GroupNorm",                 1,     OnCuda(group_norm::MakeDevice),  &group_norm::kSchema,            &group_norm::Make},
  {kOrtopsDomain,   "AddLayerNorm",              1,     OnCuda(group_norm::MakeAddLayerNormDevice),  &group_norm::kAddLayerNormSchema,  &group_norm::MakeAddLayerNorm},
  {kOrtopsDomain,   "MatrixInverse",             1,     OnCuda(matrix_inverse::MakeDevice),  &matrix_inverse::kSchema,        &matrix_inverse::Make},
  // mmdeploy's nodes that only its TensorRT plugins ran.
  {kMmdeployDomain, "MMCVDeformConv2d",              1,   OnCuda(deform_conv::MakeMmdeployV1Device),   &deform_conv::kMmdeploySchema,             &deform_conv::MakeMmdeployV1,            kCompat},
  {kMmdeployDomain, "GatherTopk",                    1,   OnCuda(gather_topk::MakeDevice),   &gather_topk::kSchema,                     &gather_topk::Make,                      kCompat},
  {kMmdeployDomain, "GridPriorsTRT",                 1,   OnCuda(grid_priors::MakeDevice),   &grid_priors::kSchema,                     &grid_priors::Make,                      kCompat},
  {kMmdeployDomain, "TRTBicubicInterpolate",         1,   OnCuda(bicubic_interpolate::MakeDevice),   &bicubic_interpolate::kSchema,             &bicubic_interpolate::Make,              kCompat},
  {kMmdeployDomain, "TRTInstanceNormalization",      1,   OnCuda(group_norm::MakeInstanceNormDevice),  &group_norm::kInstanceNormSchema,          &group_norm::MakeInstanceNorm,           kCompat},
  {kMmdeployDomain, "ScaledDotProductAttentionTRT",  1,   OnCuda(scaled_dot_product_attention::MakeDevice),   &scaled_dot_product_attention::kSchema,    &scaled_dot_product_attention::Make,     kCompat},
  // Multi-scale deformable attention: one kernel, a schema per row (mmdeploy's has im2col_step).
  {kOrtopsDomain,   "MultiScaleDeformableAttention",     1, OnCuda(ms_deform_attn::MakeDevice), &ms_deform_attn::kSchema,         &ms_deform_attn::Make},
  {kOrtopsDomain,   "MultiScaleDeformableAttentionFromOffsets", 1, OnCuda(ms_deform_attn::MakeFromOffsetsDevice), &ms_deform_attn::kOffsetsSchema, &ms_deform_attn::MakeFromOffsets},
  {kMmdeployDomain, "MMCVMultiScaleDeformableAttention", 1, OnCuda(ms_deform_attn::MakeMmdeployDevice), &ms_deform_attn::kMmdeploySchema, &ms_deform_attn::MakeMmdeploy, kCompat},
  // Multi-class batched NMS with fixed-size outputs (math/multiclass_nms.h).
  {kOrtopsDomain,   "BatchedNMS",                1,     OnCuda(batched_nms::MakeDevice),   &batched_nms::kSchema,           &batched_nms::Make},
  {kMmdeployDomain, "TRTBatchedNMS",             1,     OnCuda(batched_nms::MakeTrtDevice),   &batched_nms::kTrtSchema,        &batched_nms::MakeTrt,        kCompat},
  {kMmdeployDomain, "TRTBatchedRotatedNMS",      1,     OnCuda(batched_nms::MakeTrtRotatedDevice),   &batched_nms::kTrtRotatedSchema, &batched_nms::MakeTrtRotated, kCompat},
  // FPN RoI extractors: mmdet's SingleRoIExtractor, torchvision's MultiScaleRoIAlign (levels
  // given) and mmdeploy's TensorRT plugins.
  {kOrtopsDomain,   "MultiLevelRoIAlign",            1, OnCuda(multi_level_roi_align::MakeDevice), &multi_level_roi_align::kSchema,                &multi_level_roi_align::Make},
  {kOrtopsDomain,   "RoIAlignByLevel",               1, OnCuda(multi_level_roi_align::MakeByLevelDevice), &multi_level_roi_align::kByLevelSchema,  &multi_level_roi_align::MakeByLevel},
  {kMmdeployDomain, "MMCVMultiLevelRoiAlign",        1, OnCuda(multi_level_roi_align::MakeMmdeployDevice), &multi_level_roi_align::kMmdeploySchema,        &multi_level_roi_align::MakeMmdeploy,        kCompat},
  {kMmdeployDomain, "MMCVMultiLevelRotatedRoiAlign", 1, OnCuda(multi_level_roi_align::MakeMmdeployRotatedDevice), &multi_level_roi_align::kMmdeployRotatedSchema, &multi_level_roi_align::MakeMmdeployRotated, kCompat},
  // TensorRT's plugin nodes, as TensorRT's exporters write them.
  {kTrtDomain,      "EfficientNMS_TRT",              1,   OnCuda(trt_efficient_nms::MakeDevice),   &trt_efficient_nms::kSchema,               &trt_efficient_nms::Make,                kCompat},
  {kTrtDomain,      "BatchedNMSDynamic_TRT",         1,   OnCuda(trt_batched_nms::MakeDevice),   &trt_batched_nms::kSchema,                 &trt_batched_nms::Make,                  kCompat},
  {kTrtDomain,      "BatchedNMS_TRT",                1,   OnCuda(trt_batched_nms::MakeStaticDevice),   &trt_batched_nms::kStaticSchema,           &trt_batched_nms::MakeStatic,            kCompat},
  {kTrtDomain,      "ROIAlign_TRT",                  1,   OnCuda(trt_roi_align::MakeDevice), &trt_roi_align::kSchema,                   &trt_roi_align::Make,                    kCompat},
};
// clang-format on

}  // namespace

std::span<const OpDef> OpTable() { return kOpTable; }

}  // namespace ortops
