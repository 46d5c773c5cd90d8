#pragma once

#include "core/op_kernel.h"

namespace ortops::ms_deform_attn {
extern const OpSchema kSchema;          // ortops::MultiScaleDeformableAttention
extern const OpSchema kOffsetsSchema;   // ortops::MultiScaleDeformableAttentionFromOffsets
extern const OpSchema kMmdeploySchema;  // mmdeploy::MMCVMultiScaleDeformableAttention
KernelFactory Make, MakeFromOffsets, MakeMmdeploy;
// The device kernels of the same nodes (ms_deform_attn.cu).
KernelFactory MakeDevice, MakeFromOffsetsDevice, MakeMmdeployDevice;

// The nodes: sampling locations given (ortops' and mmdeploy's), or reference points and
// offsets from them (ortops' FromOffsets).
enum class Node { kLocations, kFromOffsets, kMmdeploy };

template <Node kNode>
constexpr const OpSchema& kSchemaOf = kNode == Node::kMmdeploy      ? kMmdeploySchema
                                      : kNode == Node::kFromOffsets ? kOffsetsSchema
                                                                    : kSchema;
}  // namespace ortops::ms_deform_attn
