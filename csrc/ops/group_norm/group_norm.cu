// GroupNorm's (and TRTInstanceNormalization's and AddLayerNorm's) device path: each group's statistics from
// partial sums, `lanes` threads a group, then one thread per output element with the CPU
// kernel's arithmetic (normalize.h, namespace stats).
//
// Summation order: lane j of a group sums its elements j, j + lanes, j + 2 lanes, ... in
// float64 (neighbouring threads read neighbouring elements), and the lanes are added as a
// tree. With 32 lanes that is the CPU kernel's order exactly, so the same bits; fewer lanes
// (groups under 32 elements) drop only partial sums that are exactly +0, so the same bits
// too. Only where the groups are too few to fill a GPU are there more lanes (up to
// kMaxLanes, LanesPerGroup): the same float64 sum in another order, a few float64 ulps
// apart, far inside the tests' tolerances.
#include "device/device_kernel.h"
#include "ops/group_norm/group_norm.h"
#include "ops/group_norm/normalize.h"

namespace ortops::group_norm {
namespace {

// More lanes only while the groups' lanes number fewer than kTargetThreads and every lane
// still sums at least kMinPerLane elements.
constexpr int64_t kTargetThreads = int64_t{1} << 16;
constexpr int64_t kMinPerLane = 32;
constexpr int64_t kMaxLanes = 4096;

int64_t LanesPerGroup(int64_t groups, int64_t group_size) {
  int64_t lanes = 1;
  while (lanes < stats::kLanes && lanes < group_size) lanes *= 2;
  while (lanes < kMaxLanes && groups * lanes < kTargetThreads && group_size >= 2 * lanes * kMinPerLane) lanes *= 2;
  return lanes;
}

// Partial sum i: lane i % lanes of group i / lanes, of the elements themselves (first pass,
// `mean` null) or of their squared deviations from the group's mean (second pass).
template <typename T>
struct LaneSums {
  const T* x;
  const double* mean;
  double* partial;
  int64_t group_size, lanes;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t group = i / lanes;
    const T* in = x + group * group_size;
    double sum = 0.0;
    if (mean == nullptr) {
      for (int64_t k = i % lanes; k < group_size; k += lanes) sum += static_cast<double>(in[k]);
    } else {
      const double m = mean[group];
      for (int64_t k = i % lanes; k < group_size; k += lanes)
        sum += stats::SquaredDeviation(static_cast<double>(in[k]), m);
    }
    partial[i] = sum;
  }
};

// Group g's mean (first pass) or 1 / standard deviation (second pass) from its lanes.
struct GroupStatistic {
  double* partial;
  double* out;
  int64_t lanes;
  double count, epsilon;
  bool inverse_std;

  ORTOPS_HD void operator()(int64_t g) const {
    const double sum = stats::AddLanes(partial + g * lanes, lanes);
    out[g] = inverse_std ? stats::InverseStd(sum, count, epsilon) : sum / count;
  }
};

// Output element i.
template <typename T>
struct NormalizeElement {
  const T* x;
  const T* scale;
  const T* bias;
  const double* mean;
  const double* inv_std;
  T* y;
  int64_t group_size, spatial, channels;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t g = i / group_size, c = i / spatial % channels;
    y[i] = stats::Normalized(x[i], mean[g], inv_std[g] * static_cast<double>(scale[c]), static_cast<double>(bias[c]));
  }
};

// Normalizes `groups` contiguous groups of group_size elements of x into y: element i is
// of channel i / spatial % channels, whose scale and bias it takes.
template <typename T>
void NormalizeGroups(const device::DeviceIO& io, const T* x, const T* scale, const T* bias, T* y, int64_t groups,
                     int64_t group_size, int64_t spatial, int64_t channels, double epsilon) {
  const int64_t lanes = LanesPerGroup(groups, group_size);
  const auto count = static_cast<double>(group_size);
  Scratch<double> partial = io.Allocate<double>(static_cast<size_t>(groups * lanes));
  Scratch<double> statistics = io.Allocate<double>(static_cast<size_t>(2 * groups));
  double* mean = statistics.data();
  double* inv_std = statistics.data() + groups;
  io.ForEach(groups * lanes, LaneSums<T>{x, nullptr, partial.data(), group_size, lanes});
  io.ForEach(groups, GroupStatistic{partial.data(), mean, lanes, count, epsilon, false});
  io.ForEach(groups * lanes, LaneSums<T>{x, mean, partial.data(), group_size, lanes});
  io.ForEach(groups, GroupStatistic{partial.data(), inv_std, lanes, count, epsilon, true});
  io.ForEach(groups * group_size, NormalizeElement<T>{x, scale, bias, mean, inv_std, y, group_size, spatial, channels});
}

template <typename T, Grouping kGrouping>
class NormDeviceKernel
    : public OpKernel<T, kNormSchema<kGrouping>, ParsedWith<NormAttributes, kGrouping>, device::DeviceKernelBase> {
 public:
  using OpKernel<T, kNormSchema<kGrouping>, ParsedWith<NormAttributes, kGrouping>, device::DeviceKernelBase>::OpKernel;

  void Compute(const device::DeviceIO& io, const NormAttributes& attributes) const {
    const NormInputs<T> in = ReadNormInputs<T>(io, kGrouping, attributes);
    T* y = io.Output<T>(0, in.x.shape);
    if (in.x.size() == 0) return;  // also C = 0, where instance norm has no groups
    // Groups are contiguous: group g (sample g / groups) starts at element g * group_size.
    NormalizeGroups(io, in.x.data, in.scale, in.bias, y, in.batch * in.groups, in.group_channels * in.spatial,
                    in.spatial, in.channels, static_cast<double>(attributes.epsilon));
  }
};

// AddLayerNorm's sum, rounded as the CPU kernel rounds it.
template <typename T>
struct RoundedSums {
  const T* a;
  const T* b;
  BroadcastToA broadcast;
  T* sum;
  ORTOPS_HD void operator()(int64_t i) const { sum[i] = stats::RoundedSum(a[i], b[broadcast.Offset(i)]); }
};

// AddLayerNorm: the sums, then each row a group of one-element channels.
template <typename T>
class AddNormDeviceKernel : public OpKernel<T, kAddLayerNormSchema, ParsedWith<NormAttributes, Grouping::kLastAxis>,
                                            device::DeviceKernelBase> {
 public:
  using OpKernel<T, kAddLayerNormSchema, ParsedWith<NormAttributes, Grouping::kLastAxis>,
                 device::DeviceKernelBase>::OpKernel;

  void Compute(const device::DeviceIO& io, const NormAttributes& attributes) const {
    const AddNormInputs<T> in = ReadAddNormInputs<T>(io);
    T* y = io.Output<T>(0, in.a.shape);
    if (in.rows == 0) return;
    const int64_t size = in.rows * in.channels;
    Scratch<T> sum = io.Allocate<T>(static_cast<size_t>(size));
    io.ForEach(size, RoundedSums<T>{in.a.data, in.b, in.broadcast, sum.data()});
    NormalizeGroups(io, sum.data(), in.scale, in.bias, y, in.rows, in.channels, 1, in.channels,
                    static_cast<double>(attributes.epsilon));
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) {
  return MakeOps<NormDeviceKernel, Grouping::kAttribute, float, double, Half>(def);
}
std::vector<OpPtr> MakeAddLayerNormDevice(const OpDef& def) {
  return MakeOps<AddNormDeviceKernel, float, double, Half>(def);
}
std::vector<OpPtr> MakeInstanceNormDevice(const OpDef& def) {
  return MakeOps<NormDeviceKernel, Grouping::kInstance, float, double, Half>(def);
}

}  // namespace ortops::group_norm
