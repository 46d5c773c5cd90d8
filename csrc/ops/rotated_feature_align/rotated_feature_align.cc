// Rotated feature alignment (R3Det's feature refinement; mmcv's MMCVRotatedFeatureAlign).
#include "ops/rotated_feature_align/rotated_feature_align.h"

#include <vector>

#include "ops/rotated_feature_align/box_taps.h"

namespace ortops::rotated_feature_align {

namespace {

template <typename T>
struct RotatedFeatureAlignKernel : OpKernel<T, kSchema, RotatedFeatureAlignAttributes> {
  using OpKernel<T, kSchema, RotatedFeatureAlignAttributes>::OpKernel;

  void Compute(const KernelIO& io, const RotatedFeatureAlignAttributes& attributes) const {
    const auto inputs = FeaturesAndBoxes<T>(io);
    const ConstTensor<T>& features = inputs.first;
    const ConstTensor<T>& boxes = inputs.second;
    const int64_t batch = features.dim(0), channels = features.dim(1), height = features.dim(2),
                  width = features.dim(3);
    for (int64_t i = 0; i < boxes.size(); ++i) Check(!std::isnan(boxes.data[i]), kBoxesNaN);
    T* output = io.Output<T>(0, features.shape);
    if (features.size() == 0) return;
    const int64_t plane = height * width, points = attributes.points;
    const auto scale = static_cast<T>(attributes.spatial_scale);
    io.ParallelFor(static_cast<size_t>(batch * height), [&](size_t task) {
      const int64_t n = static_cast<int64_t>(task) / height, h = static_cast<int64_t>(task) % height;
      ScratchVector<BilinearTap<T>> taps = io.Vector<BilinearTap<T>>(static_cast<size_t>(width * points));
      for (int64_t w = 0; w < width; ++w) {
        BoxTaps(boxes.data + ((n * height + h) * width + w) * 5, scale, attributes.y_first, points, height, width,
                &taps[w * points]);
      }
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t row = (n * channels + c) * plane + h * width;
        const T* map = features.data + (n * channels + c) * plane;
        for (int64_t w = 0; w < width; ++w) {
          T value = features.data[row + w];
          for (int64_t p = 0; p < points; ++p) value += taps[w * points + p].Read(map);
          output[row + w] = value;
        }
      }
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<RotatedFeatureAlignKernel, float, double>(def); }

}  // namespace ortops::rotated_feature_align
