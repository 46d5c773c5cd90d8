// PLACEHOLDER: to be written.
#include "ops/group_norm/group_norm.h"

namespace ortops::group_norm {
constexpr OpSchema kSchema{.doc = "TODO", .inputs = {}, .outputs = {}, .attributes = {}};
std::vector<OpPtr> Make(const OpDef&) { return {}; }
}  // namespace ortops::group_norm
