// Soft-NMS's device path: the original's loop (the CPU kernel's all-pairs path) with each of
// its steps spread over a team of lanes. The loop is sequential by nature: which box comes
// next depends on every earlier decay, and mmcv breaks ties in score by a working order that
// each selection and drop rearranges. So one problem runs in one thread block for all its
// steps, with no return to the host between them (which would cost a launch and a wait per
// kept box), and each step is parallel over the remaining boxes:
//   pick     the highest score among positions [i, count), the lowest position on ties (a
//            reduction over the lanes); a NaN score at position i is kept, as the original's
//            scan `score[best] < score[pos]` never moves away from it, and NaN elsewhere is
//            never picked;
//   swap     it to position i (the original's std::swap);
//   decay    every later box by the weight of its IoU with the picked one, flagging those
//            that fall below min_score;
//   drop     the flagged boxes as the original does one by one (the last box moves into the
//            gap and is visited next): with D drops the count becomes count - D, and the gaps
//            below it are filled, in increasing position, by the surviving boxes above it in
//            decreasing position; one exclusive sum over the lanes ranks both.
// The emulated device runs the same steps with one lane (SerialTeam); a GPU with a block of
// kLanes threads (BlockTeam, GPU only: shared memory and barriers).
#include <thrust/copy.h>
#include <thrust/sequence.h>

#include "device/device_kernel.h"
#include "math/box_iou.h"
#include "ops/nms/box_inputs.h"
#include "ops/soft_nms/soft_nms.h"

#if defined(__CUDACC__)
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#endif

namespace ortops::soft_nms {
namespace {

// A remaining box as the pick sees it: a higher score first, then a lower position.
template <typename T>
struct Pick {
  T score;
  int64_t position;  // -1: none
};

template <typename T>
ORTOPS_HD inline Pick<T> Better(const Pick<T>& a, const Pick<T>& b) {
  if (a.position < 0) return b;
  if (b.position < 0) return a;
  if (b.score > a.score || (b.score == a.score && b.position < a.position)) return b;
  return a;
}

template <typename T>
struct SoftNmsSelection {
  const T* boxes;
  const T* area;
  T* score;           // by box, decayed in place
  int64_t* work;      // box by position, from the identity
  char* dropped;      // by position
  int64_t* filler;    // by rank: the boxes that fill the gaps of dropped ones
  int64_t* selected;  // box ids in selection order
  int64_t* selected_count;
  int64_t count;
  T offset, min_score;
  Decay<T> decay;

  // Lane `team.lane`'s share of positions [first, last): a contiguous run, so that the ranks
  // of the drop step follow from one sum over the lanes.
  template <typename Team>
  ORTOPS_HD void Share(const Team& team, int64_t first, int64_t last, int64_t& begin, int64_t& end) const {
    const int64_t length = last > first ? last - first : 0, per_lane = (length + team.lanes - 1) / team.lanes;
    begin = first + team.lane * per_lane;
    end = begin + per_lane < last ? begin + per_lane : last;
    if (begin > end) begin = end;
  }

  template <typename Team>
  ORTOPS_HD void Run(Team& team) const {
    int64_t remaining = count, i = 0;
    for (; i < remaining; ++i) {
      int64_t begin, end;
      Share(team, i, remaining, begin, end);
      int64_t best = i;
      const T first = score[work[i]];
      if (first == first) {
        Pick<T> mine{T(0), -1};
        for (int64_t p = begin; p < end; ++p) {
          const T s = score[work[p]];
          if (s == s) mine = Better(mine, Pick<T>{s, p});
        }
        best = team.Best(mine).position;
      }
      const int64_t chosen = work[best], displaced = work[i];
      team.Sync();  // every lane has read work[i] and work[best]
      if (team.lane == 0) {
        work[best] = displaced;
        work[i] = chosen;
        selected[i] = chosen;
      }
      team.Sync();

      Share(team, i + 1, remaining, begin, end);
      const T* kept = boxes + 4 * chosen;
      int64_t drops = 0;
      for (int64_t p = begin; p < end; ++p) {
        const int64_t other = work[p];
        score[other] *= decay.Weight(BoxIoU(kept, area[chosen], boxes + 4 * other, area[other], offset));
        dropped[p] = score[other] < min_score;
        drops += dropped[p];
      }
      int64_t drops_before, total_drops;
      team.ExclusiveSum(drops, drops_before, total_drops);
      const int64_t kept_count = remaining - total_drops;
      // The survivors above kept_count, ranked from the last position down, ...
      int64_t before = drops_before;
      for (int64_t p = begin; p < end; ++p) {
        if (p >= kept_count && !dropped[p]) filler[(remaining - 1 - p) - (total_drops - before)] = work[p];
        before += dropped[p];
      }
      team.Sync();
      // ... fill the gaps below it, ranked from the first position up (as many of each).
      before = drops_before;
      for (int64_t p = begin; p < end; ++p) {
        if (p < kept_count && dropped[p]) work[p] = filler[before];
        before += dropped[p];
      }
      team.Sync();
      remaining = kept_count;
    }
    if (team.lane == 0) *selected_count = i;
  }
};

#if !defined(__CUDACC__)
// One lane: every step's loop runs whole in it, and the team operations are the identity.
struct SerialTeam {
  static constexpr int64_t lane = 0, lanes = 1;
  void Sync() const {}
  template <typename T>
  Pick<T> Best(const Pick<T>& mine) const {
    return mine;
  }
  // The sum of `value` over the lanes before this one, and over all.
  void ExclusiveSum(int64_t value, int64_t& before, int64_t& total) const {
    before = 0;
    total = value;
  }
};

// The whole problem as one functor: the emulated device's form (the GPU runs it in a block).
template <typename T>
struct RunSerially {
  SoftNmsSelection<T> selection;
  void operator()(int64_t) const {
    SerialTeam team;
    selection.Run(team);
  }
};
#else
// GPU only (SerialTeam is its twin, which the emulated device runs and the tests check): the
// lanes are a block's threads, the pick a block reduction and the drop ranks a block scan
// (CUB), each result shared by every thread before any goes on.
inline constexpr int kLanes = 256;

template <typename T>
struct BetterOf {
  __device__ Pick<T> operator()(const Pick<T>& a, const Pick<T>& b) const { return Better(a, b); }
};

template <typename T>
struct BlockTeam {
  using Reduce = cub::BlockReduce<Pick<T>, kLanes>;
  using Scan = cub::BlockScan<int64_t, kLanes>;
  union Storage {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  };
  static constexpr int64_t lanes = kLanes;
  Storage* storage;  // shared memory
  Pick<T>* best;     // shared memory
  int64_t lane;

  __device__ void Sync() const { __syncthreads(); }
  __device__ Pick<T> Best(const Pick<T>& mine) const {
    const Pick<T> reduced = Reduce(storage->reduce).Reduce(mine, BetterOf<T>{});  // valid in lane 0
    if (lane == 0) *best = reduced;
    __syncthreads();
    const Pick<T> all = *best;
    __syncthreads();  // every lane has read it before the storage is used again
    return all;
  }
  __device__ void ExclusiveSum(int64_t value, int64_t& before, int64_t& total) const {
    Scan(storage->scan).ExclusiveSum(value, before, total);
    __syncthreads();
  }
};

template <typename T>
__global__ void __launch_bounds__(kLanes) RunInBlock(SoftNmsSelection<T> selection) {
  __shared__ typename BlockTeam<T>::Storage storage;
  __shared__ Pick<T> best;
  BlockTeam<T> team{&storage, &best, static_cast<int64_t>(threadIdx.x)};
  selection.Run(team);
}
#endif

template <typename T>
struct Areas {
  const T* boxes;
  T* area;
  T offset;
  ORTOPS_HD void operator()(int64_t i) const { area[i] = BoxArea(boxes + 4 * i, offset); }
};

// Row k of the outputs: selected box k with its decayed score (final once it is selected).
template <typename T>
struct WriteSelected {
  const T* boxes;
  const T* score;
  const int64_t* selected;
  T* dets;
  int64_t* indices;
  ORTOPS_HD void operator()(int64_t k) const {
    const int64_t id = selected[k];
    for (int c = 0; c < 4; ++c) dets[5 * k + c] = boxes[4 * id + c];
    dets[5 * k + 4] = score[id];
    indices[k] = id;
  }
};

template <typename T>
class SoftNmsDeviceKernel : public device::DeviceKernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = soft_nms::kSchema;

  SoftNmsDeviceKernel(const Attributes& attrs, const OpDef& def)
      : DeviceKernelBase(def), attributes_(attrs), decay_(attributes_) {}

  void Compute(const device::DeviceIO& io) const {
    const auto [boxes, scores] = nms::BoxesAndScoresInputs<T>(io);
    const int64_t count = boxes.dim(0);
    Check(count < (int64_t{1} << 31), "input 'boxes' has ", count, " boxes; at most 2^31 - 1 are supported");
    // What the host reads at the end, in one wait: the boxes kept, and the first NaN of the
    // boxes then the scores (-1: none), which the selection meanwhile steps around.
    Scratch<int64_t> summary = io.Allocate<int64_t>(2);
    io.FirstWhereInto(5 * count, nms::IsNaNInBoxesOrScores<T>{boxes.data, scores.data, 4 * count}, summary.data() + 1);

    const auto size = static_cast<size_t>(count);
    const T offset = static_cast<T>(attributes_.offset);
    Scratch<T> area = io.Allocate<T>(size), score = io.Allocate<T>(size);
    Scratch<int64_t> work = io.Allocate<int64_t>(size), filler = io.Allocate<int64_t>(size);
    Scratch<int64_t> selected = io.Allocate<int64_t>(size);
    Scratch<char> dropped = io.Allocate<char>(size);
    io.ForEach(count, Areas<T>{boxes.data, area.data(), offset});
    thrust::copy(io.policy(), scores.data, scores.data + count, score.data());
    thrust::sequence(io.policy(), work.data(), work.data() + count);
    io.Fill(summary.data(), 0, sizeof(int64_t));
    const SoftNmsSelection<T> selection{boxes.data,
                                        area.data(),
                                        score.data(),
                                        work.data(),
                                        dropped.data(),
                                        filler.data(),
                                        selected.data(),
                                        summary.data(),
                                        count,
                                        offset,
                                        static_cast<T>(attributes_.min_score),
                                        decay_};
    if (count > 0) {
#if defined(__CUDACC__)
      io.NoteLaunch();
      RunInBlock<T><<<1, kLanes, 0, io.stream()>>>(selection);
      io.CheckLaunch("soft-NMS");
#else
      io.ForEach(1, RunSerially<T>{selection});
#endif
    }
    int64_t host[2];
    io.CopyToHost(host, summary.data(), 2);
    const int64_t kept = host[0], bad = host[1];
    Check(bad < 0, bad < 4 * count ? nms::kBoxesNaN : nms::kScoresNaN);
    T* dets = io.Output<T>(0, {kept, 5});
    int64_t* indices = io.Output<int64_t>(1, {kept});
    io.ForEach(kept, WriteSelected<T>{boxes.data, score.data(), selected.data(), dets, indices});
  }

 private:
  SoftNmsAttributes attributes_;
  Decay<T> decay_;
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<SoftNmsDeviceKernel, float, double>(def); }

}  // namespace ortops::soft_nms
