// PLACEHOLDER: to be written.
#include "ops/roi_align/roi_align.h"

namespace ortops::roi_align {
constexpr OpSchema kSchema{.doc = "TODO", .inputs = {}, .outputs = {}, .attributes = {}};
std::vector<OpPtr> Make(const OpDef&) { return {}; }
}  // namespace ortops::roi_align
