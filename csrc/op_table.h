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

// Domains in registration order; each has opset version 1.
inline constexpr std::string_view kDomains[] = {kOrtopsDomain, kMmcvDomain, kMmdeployDomain};

std::span<const OpDef> OpTable();

}  // namespace ortops
