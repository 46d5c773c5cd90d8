// Soft non-maximum suppression (Bodla et al.; mmcv's SoftNonMaxSuppression).
#include "ops/soft_nms/soft_nms.h"

#include <cmath>
#include <utility>
#include <vector>

#include "math/box_iou.h"

namespace ortops::soft_nms {
namespace {

constexpr IoSpec kInputs[] = {
    {"boxes", ElemType::kTypeParam, "`[N, 4]` boxes as (x1, y1, x2, y2)"},
    {"scores", ElemType::kTypeParam, "`[N]` one score per box"},
};
constexpr IoSpec kOutputs[] = {
    {"dets", ElemType::kTypeParam, "`[K, 5]` the kept boxes in selection order, with their decayed scores"},
    {"indices", ElemType::kInt64, "`[K]` the kept boxes' indices into `boxes`"},
};
constexpr AttrSpec kAttributes[] = {
    {"iou_threshold", AttrType::kFloat, "0.3", "naive and linear methods decay boxes whose IoU is at least this"},
    {"sigma", AttrType::kFloat, "0.5", "gaussian method: weight exp(-IoU^2 / sigma); must be > 0"},
    {"min_score", AttrType::kFloat, "0.001", "a box whose decayed score falls below this is dropped"},
    {"method", AttrType::kInt, "1", "0 naive (weight 0), 1 linear (weight 1 - IoU), 2 gaussian"},
    {"offset", AttrType::kInt, "0", "0 or 1; 1 is the legacy convention where a box's width is x2 - x1 + 1"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Soft-NMS exactly as mmcv's kernel: repeatedly select the highest remaining score (the first "
        "in the working order on ties; the working order starts as the input order and changes as "
        "selected boxes are swapped to the front and dropped ones replaced by the last), then decay "
        "every other remaining box by w: naive w = 0 if IoU >= iou_threshold, linear w = 1 - IoU if "
        "IoU >= iou_threshold, gaussian w = exp(-IoU^2 / sigma); others keep w = 1. A box whose "
        "decayed score is below `min_score` is dropped. As in the original, the first selected box is "
        "kept even if its score is below `min_score`. IoU uses areas `(x2 - x1 + offset) * (y2 - y1 + "
        "offset)`. NaN in the inputs is an error.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

namespace {

template <typename T>
class SoftNmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = soft_nms::kSchema;

  SoftNmsKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        iou_threshold_(attrs.Float("iou_threshold")),
        sigma_(attrs.Float("sigma")),
        min_score_(attrs.Float("min_score")),
        method_(attrs.Int("method")),
        offset_(attrs.Int("offset")) {
    Check(method_ >= 0 && method_ <= 2, "attribute 'method' must be 0 (naive), 1 (linear) or 2 (gaussian), got ",
          method_);
    Check(offset_ == 0 || offset_ == 1, "attribute 'offset' must be 0 or 1, got ", offset_);
    Check(method_ != 2 || sigma_ > 0, "attribute 'sigma' must be > 0 for the gaussian method, got ", sigma_);
    Check(!std::isnan(iou_threshold_) && !std::isnan(min_score_),
          "attributes 'iou_threshold' and 'min_score' must not be NaN");
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> boxes = io.Input<T>(0, 2);
    const ConstTensor<T> scores = io.Input<T>(1, 1);
    Check(boxes.dim(1) == 4, "input 'boxes' must have shape [N, 4], got ", ShapeText{boxes.shape});
    Check(scores.dim(0) == boxes.dim(0), "input 'scores' must have shape [N] with N = ", boxes.dim(0),
          " (the number of boxes), got ", ShapeText{scores.shape});
    int64_t count = boxes.dim(0);
    for (int64_t i = 0; i < count * 4; ++i) Check(!std::isnan(boxes.data[i]), "input 'boxes' contains NaN");
    for (int64_t i = 0; i < count; ++i) Check(!std::isnan(scores.data[i]), "input 'scores' contains NaN");

    // The working set, one entry per box, permuted in place as the original does.
    struct Entry {
      T box[4];
      T score, area;
      int64_t index;
    };
    const T offset = static_cast<T>(offset_);
    std::vector<Entry> work(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      Entry& e = work[i];
      for (int k = 0; k < 4; ++k) e.box[k] = boxes.data[4 * i + k];
      e.score = scores.data[i];
      e.area = BoxArea(e.box, offset);
      e.index = i;
    }
    const T threshold = static_cast<T>(iou_threshold_), sigma = static_cast<T>(sigma_);
    const T min_score = static_cast<T>(min_score_);
    for (int64_t i = 0; i < count; ++i) {
      int64_t best = i;
      for (int64_t pos = i + 1; pos < count; ++pos) {
        if (work[best].score < work[pos].score) best = pos;
      }
      std::swap(work[i], work[best]);
      const Entry& selected = work[i];
      for (int64_t pos = i + 1; pos < count; ++pos) {
        Entry& other = work[pos];
        const T iou = BoxIoU(selected.box, selected.area, other.box, other.area, offset);
        other.score *= Weight(iou, threshold, sigma);
        if (other.score < min_score) {
          other = work[count - 1];  // drop it: the last box takes its place and is visited next
          --count;
          --pos;
        }
      }
    }
    T* dets = io.Output<T>(0, {count, 5});
    int64_t* indices = io.Output<int64_t>(1, {count});
    for (int64_t i = 0; i < count; ++i) {
      for (int k = 0; k < 4; ++k) dets[5 * i + k] = work[i].box[k];
      dets[5 * i + 4] = work[i].score;
      indices[i] = work[i].index;
    }
  }

 private:
  T Weight(T iou, T threshold, T sigma) const {
    switch (method_) {
      case 0: return iou >= threshold ? T(0) : T(1);
      case 1: return iou >= threshold ? T(1) - iou : T(1);
      default: return std::exp(-(iou * iou) / sigma);
    }
  }

  float iou_threshold_, sigma_, min_score_;
  int64_t method_, offset_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<SoftNmsKernel, float, double>(def); }

}  // namespace ortops::soft_nms
