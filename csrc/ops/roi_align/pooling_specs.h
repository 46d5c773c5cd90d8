// The schema entries of what the RoIAlign family's nodes share (RoIAlign, RoIAlignRotated,
// ROIAlign_TRT and the multi-level nodes): the attributes that PoolingAttributes
// (roi_geometry.h) reads in each of them, and their feature-map and pooled tensors, written
// once so that every node's docs say the same. Names and defaults differ between nodes.
#pragma once

#include <string_view>

#include "core/schema.h"

namespace ortops::roi_pooling {

constexpr std::string_view kFeatureMapsDoc = "`[N, C, H, W]` feature maps";
constexpr std::string_view kPooledDoc = "`[R, C, output_height, output_width]` pooled features";

constexpr AttrSpec OutputHeightSpec(std::string_view default_value) {
  return {"output_height", AttrType::kInt, default_value, "height of each pooled output"};
}
constexpr AttrSpec OutputWidthSpec(std::string_view default_value) {
  return {"output_width", AttrType::kInt, default_value, "width of each pooled output"};
}
constexpr AttrSpec SamplingRatioSpec(std::string_view default_value) {
  return {"sampling_ratio", AttrType::kInt, default_value,
          "samples per bin along each axis; 0 or less: adaptive, ceil(roi size / output size)"};
}

}  // namespace ortops::roi_pooling
