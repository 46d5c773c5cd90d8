// TensorRT's BatchedNMS_TRT and BatchedNMSDynamic_TRT plugin nodes (plugin/batchedNMSPlugin
// with plugin/common/kernels' sortScoresPerClass, allClassNMS, sortScoresPerImage and
// gatherNMSOutputs in NVIDIA/TensorRT up to 10.16): per-class top-k, per-class greedy NMS and
// a fixed number of padded detections per image.
#include "ops/trt_batched_nms/trt_batched_nms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "core/half.h"
#include "core/op_kernel.h"
#include "math/box_iou.h"
#include "math/multiclass_nms.h"
#include "ops/nms/group_index.h"

namespace ortops::trt_batched_nms {
namespace {

constexpr std::string_view kDoc =
    "TensorRT's BatchedNMS_TRT plugin (TensorRT's implicit-batch one) and BatchedNMSDynamic_TRT (the same with "
    "dynamic shapes, which mmyolo's easydeploy writes for TensorRT 7): per-class NMS with a fixed number of "
    "detections per image. Every (box, class) whose score is strictly greater than `scoreThreshold` (never "
    "`backgroundLabelId`; NaN scores never) is a candidate. Per class, the best `topK` candidates (ties: lower "
    "box first) are visited in descending score order, and one is dropped when its IoU with a kept one is "
    "strictly greater than `iouThreshold`. IoU is the plugin's, in float: each box's corners sorted per axis "
    "(min and max ignore NaN, as CUDA's do); with `isNormalized` 0 box sizes are (w + 1) (h + 1), and with "
    "`caffeSemantics` 1 as well the intersection's width and height get + 1, even for disjoint boxes (whose "
    "intersection is the empty box, so that their IoU is 1 / (size_a + size_b - 1), not 0); with `isNormalized` "
    "1 nothing gets + 1. The best `keepTopK` kept detections over all classes are the output, highest score "
    "first (ties: lower class, then lower box): boxes as the input gives them (clamped to [0, 1] with "
    "`clipBoxes` 1, whatever `isNormalized`), classes as floats; the rows after `num_detections` have box 0, "
    "score 0 and class -1.";

constexpr std::string_view kDifferences =
    "No limit of 4096 on `topK` (the plugin refuses more when the engine is built). The plugin ranks with a "
    "descending radix sort in which rejected candidates score 0, so with a negative `scoreThreshold` the "
    "candidates scoring 0 or less sort after the rejected ones (a class whose best one does skips NMS, and "
    "padding rows can come before detections); ortops ranks every candidate by its score. `scoreBits` (a "
    "float16 sort on fewer bits, in approximate order) is ignored: the order is always exact. The "
    "plugin outputs no detection and leaves the other outputs uninitialised when `keepTopK` exceeds `topK`, and "
    "runs into undefined behaviour for a `topK` below 1, a `numClasses` other than the scores' or a boolean "
    "attribute other than 0 or 1: ortops reports these as errors. A missing `isNormalized` is undefined in the "
    "plugin (an uninitialised field; its README gives true as the default, its header false): ortops takes 1. "
    "Float16 scores and boxes are read as float32, as the plugin reads them for its score test and IoU.";

}  // namespace

namespace {

template <typename T, bool kDynamic>
class BatchedNmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = kDynamic ? trt_batched_nms::kSchema : kStaticSchema;

  BatchedNmsKernel(const Attributes& attrs, const OpDef& def) : KernelBase(def), attributes_(attrs) {}

  void Compute(const KernelIO& io) const {
    const TrtBatchedNmsInputs<T> in(io, attributes_);
    const int64_t batch = in.batch, count = in.count, keep_top_k = attributes_.keep_top_k;
    const BoxIndex box_index{count, in.columns};
    const auto [num_detections, out] = AllocateOutputs(io, in, attributes_, kDynamic);
    std::fill(num_detections, num_detections + batch, 0);
    std::fill(out.out_boxes, out.out_boxes + batch * keep_top_k * 4, T(0));
    std::fill(out.out_scores, out.out_scores + batch * keep_top_k, T(0));
    std::fill(out.out_classes, out.out_classes + batch * keep_top_k, T(-1));
    if (batch == 0 || count == 0 || keep_top_k == 0) return;

    // Every box sorted and sized once for the IoU.
    const auto total_boxes = static_cast<size_t>(batch * count * in.columns);
    const bool pixel_sizes = !attributes_.normalized;
    Scratch<TrtBatchedBox> sorted = io.Allocate<TrtBatchedBox>(total_boxes);
    io.ParallelForRanges(total_boxes, 64, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) sorted[i] = SortedBox(in.boxes.data + 4 * i, pixel_sizes);
    });

    const float score_threshold = attributes_.score_threshold, iou_threshold = attributes_.iou_threshold;
    const bool plus_one = attributes_.PlusOne();
    const TrtBatchedTest test{sorted.data(), box_index, plus_one, iou_threshold};
    const T* score_data = in.scores.data;
    const int64_t classes = attributes_.num_classes;
    const auto make_index = [&](int64_t b, std::span<const NmsCandidate<float>> set) {
      const auto box_of = [&, b](const NmsCandidate<float>& c, float box[5]) {
        const TrtBatchedBox& s = sorted[static_cast<size_t>(box_index(b, c))];
        box[0] = s.corner[0], box[1] = s.corner[1], box[2] = s.corner[2], box[3] = s.corner[3], box[4] = s.size;
      };
      return nms::MakeGridGroupIndex(io, set, box_of, nms::IouRule::kTrtBatched, plus_one ? 1.0f : 0.0f, iou_threshold);
    };
    MulticlassNmsIndexed<float>(
        io, attributes_.Config(), batch, count, classes,
        [score_threshold](float score) { return score > score_threshold; },
        [score_data, count, classes](int64_t b, int64_t n, int64_t c) {
          return static_cast<float>(score_data[(b * count + n) * classes + c]);
        },
        [](float score) { return score; },
        [&](int64_t b, const NmsCandidate<float>& kept, const NmsCandidate<float>& candidate) {
          return test.Suppresses(b, kept, candidate);
        },
        [&](int64_t b, std::span<const NmsCandidate<float>> kept) {
          num_detections[b] = static_cast<int32_t>(kept.size());
          for (size_t k = 0; k < kept.size(); ++k) out.Write(b, b * keep_top_k + static_cast<int64_t>(k), kept[k]);
        },
        make_index);
  }

 private:
  TrtBatchedNmsAttributes attributes_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<BatchedNmsKernel, true, float, Half>(def); }
std::vector<OpPtr> MakeStatic(const OpDef& def) { return MakeOps<BatchedNmsKernel, false, float, Half>(def); }

}  // namespace ortops::trt_batched_nms
