// PLACEHOLDER: to be written.
#include "ops/matrix_inverse/matrix_inverse.h"

namespace ortops::matrix_inverse {
constexpr OpSchema kSchema{.doc = "TODO", .inputs = {}, .outputs = {}, .attributes = {}};
std::vector<OpPtr> Make(const OpDef&) { return {}; }
}  // namespace ortops::matrix_inverse
