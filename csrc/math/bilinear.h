// Bilinear sampling of one H x W plane, by two rules: the RoIAlign rule (Caffe2/Detectron,
// as in mmcv and torchvision) and the zero-padding rule of deformable convolution and
// multi-scale deformable attention. The arithmetic is kept operation for operation, so
// float results agree with the originals' to the last bit. The device path samples with the
// same functions (ORTOPS_HD).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/isa.h"

namespace ortops {
inline namespace ORTOPS_ISA_NS {  // compiled per instruction-set level (core/isa.h)

// Where one sample reads: four offsets into the plane and their weights. A sample outside
// the plane has all weights 0 (and offsets 0, so reading through it is always in bounds).
template <typename T>
struct BilinearTap {
  int64_t offset[4] = {0, 0, 0, 0};
  T weight[4] = {0, 0, 0, 0};

  // `plane` holds T, or float16 when T is its compute type (float): read as T.
  template <typename Element>
  ORTOPS_HD T Read(const Element* plane) const {
    return weight[0] * plane[offset[0]] + weight[1] * plane[offset[1]] + weight[2] * plane[offset[2]] +
           weight[3] * plane[offset[3]];
  }

  // The largest of the four weighted corners instead of their sum: what ONNX's RoiAlign "max"
  // mode computes per sample in ONNX Runtime and TensorRT's ROIAlign_TRT. A NaN product is
  // skipped unless all are NaN (CUDA's fmaxf, as the plugin's max).
  template <typename Element>
  ORTOPS_HD T ReadMaxOfCorners(const Element* plane) const {
    const T first = MaxSkippingNaN(weight[0] * plane[offset[0]], weight[1] * plane[offset[1]]);
    return MaxSkippingNaN(MaxSkippingNaN(first, weight[2] * plane[offset[2]]), weight[3] * plane[offset[3]]);
  }
};

// The RoIAlign rule: a point with y < -1, y > H, x < -1 or x > W reads 0; otherwise
// coordinates below 0 are clamped to 0 and the last row/column is repeated past the edge.
// A NaN coordinate also reads 0 (written as a negated test, so NaN never reaches the
// integer conversion below).
template <typename T>
ORTOPS_HD BilinearTap<T> RoiAlignTap(T y, T x, int64_t height, int64_t width) {
  BilinearTap<T> tap;
  if (height <= 0 || width <= 0) return tap;
  if (!(y >= T(-1) && y <= static_cast<T>(height) && x >= T(-1) && x <= static_cast<T>(width))) return tap;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  auto y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x);
  int64_t y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<T>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<T>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const T ly = y - static_cast<T>(y_low), lx = x - static_cast<T>(x_low);
  const T hy = T(1) - ly, hx = T(1) - lx;
  tap.offset[0] = y_low * width + x_low;
  tap.offset[1] = y_low * width + x_high;
  tap.offset[2] = y_high * width + x_low;
  tap.offset[3] = y_high * width + x_high;
  tap.weight[0] = hy * hx;
  tap.weight[1] = hy * lx;
  tap.weight[2] = ly * hx;
  tap.weight[3] = ly * lx;
  return tap;
}

// The zero-padding rule (torchvision's deform_conv2d, mmcv's deformable attention; equal to
// grid_sample with zeros padding once the point is in pixel units): a point outside
// (-1, H) x (-1, W) reads 0, and each of its four neighbours outside the map reads 0. A NaN
// or infinite coordinate is outside (the negated test keeps NaN away from the integer
// conversion). Neighbour k is (y0 + k / 2, x0 + k % 2), weighted wy * wx in that order.
template <typename T>
struct ZeroPaddedSample {
  bool inside = false;  // false: the point reads 0, and nothing else is set
  int64_t y0 = 0, x0 = 0;
  T weight[4] = {0, 0, 0, 0};
  bool valid[4] = {false, false, false, false};  // the neighbour lies in the map
};

// The sample of a point inside the map whose floor (y0, x0) and fractions ly = y - y0,
// lx = x - x0 are known (ZeroPaddedBilinear finds them; a vectorised caller finds them for
// several points at once, with the same arithmetic).
template <typename T>
ORTOPS_HD ZeroPaddedSample<T> ZeroPaddedAtFloor(int64_t y0, int64_t x0, T ly, T lx, int64_t height, int64_t width) {
  ZeroPaddedSample<T> s;
  s.inside = true;
  s.y0 = y0;
  s.x0 = x0;
  const T hy = 1 - ly, hx = 1 - lx;
  // Written out rather than looped over k, so that the struct stays in registers.
  s.weight[0] = hy * hx;
  s.weight[1] = hy * lx;
  s.weight[2] = ly * hx;
  s.weight[3] = ly * lx;
  const bool top = s.y0 >= 0, bottom = s.y0 + 1 < height, left = s.x0 >= 0, right = s.x0 + 1 < width;
  s.valid[0] = top && left;
  s.valid[1] = top && right;
  s.valid[2] = bottom && left;
  s.valid[3] = bottom && right;
  return s;
}

template <typename T>
ORTOPS_HD ZeroPaddedSample<T> ZeroPaddedBilinear(T y, T x, int64_t height, int64_t width) {
  // One branch rather than four (& not &&): most points are inside.
  if (!((y > T(-1)) & (y < static_cast<T>(height)) & (x > T(-1)) & (x < static_cast<T>(width)))) return {};
  // floor of a coordinate in (-1, size): truncate, then step down below 0. Exact, and
  // cheaper than std::floor, which must also handle values beyond any integer type.
  auto y0 = static_cast<int64_t>(y);
  auto x0 = static_cast<int64_t>(x);
  y0 -= static_cast<T>(y0) > y ? 1 : 0;
  x0 -= static_cast<T>(x0) > x ? 1 : 0;
  return ZeroPaddedAtFloor(y0, x0, y - static_cast<T>(y0), x - static_cast<T>(x0), height, width);
}

}  // namespace ORTOPS_ISA_NS
}  // namespace ortops
