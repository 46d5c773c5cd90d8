// The op table: every op ortops registers, in every domain. Registration, the op manifest
// (Python op list, generated docs) and the tests all read this one table.
#pragma once

#include <span>
#include <string_view>

#include "core/custom_op.h"

namespace ortops {

inline constexpr std::string_view kOrtopsDomain = "ortops";
inline constexpr std::string_view kMmcvDomain = "mmcv";
inline constexpr std::string_view kMmdeployDomain = "mmdeploy";
// TensorRT's plugin nodes (EfficientNMS_TRT, ...) as TensorRT's exporters write them.
inline constexpr std::string_view kTrtDomain = "TRT";

// Domains in registration order; each has opset version 1.
inline constexpr std::string_view kDomains[] = {kOrtopsDomain, kMmcvDomain, kMmdeployDomain, kTrtDomain};

std::span<const OpDef> OpTable();

}  // namespace ortops
