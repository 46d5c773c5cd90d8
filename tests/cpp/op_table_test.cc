// The op table itself: every row yields ops that any runtime from the minimum version
// accepts, with names, counts and versions that agree with the schema.
#include "op_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace ortops {
namespace {

TEST(OpTable, EveryOpReportsTheMinimumApiVersionAndTheStatusCallbacks) {
  for (const OpDef& def : OpTable()) {
    SCOPED_TRACE(std::string(def.domain) + "." + std::string(def.name));
    const std::vector<OpPtr> ops = def.make(def);
    ASSERT_FALSE(ops.empty());
    for (const OpPtr& op : ops) {
      EXPECT_EQ(op->version, kMinOrtApiVersion);
      EXPECT_EQ(std::string(op->GetName(op.get())), def.name);
      EXPECT_EQ(op->GetExecutionProviderType(op.get()), nullptr);
      EXPECT_EQ(op->CreateKernel, nullptr);
      EXPECT_EQ(op->KernelCompute, nullptr);
      EXPECT_NE(op->CreateKernelV2, nullptr);
      EXPECT_NE(op->KernelComputeV2, nullptr);
      EXPECT_NE(op->KernelDestroy, nullptr);
      EXPECT_NE(op->GetVariadicInputMinArity, nullptr);
      EXPECT_EQ(op->GetStartVersion(op.get()), def.since_version);
      EXPECT_EQ(op->GetInputTypeCount(op.get()), def.schema->inputs.size());
      EXPECT_EQ(op->GetOutputTypeCount(op.get()), def.schema->outputs.size());
      for (size_t i = 0; i < def.schema->inputs.size(); ++i) {
        EXPECT_NE(op->GetInputType(op.get(), i), ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED);
      }
    }
  }
}

// ONNX Runtime 1.17 fails type inference on a node that leaves out (names "") an optional
// input of a custom op registered for several element types; newer runtimes accept it.
TEST(OpTable, OpsWithSeveralElementTypesHaveNoOptionalInputs) {
  for (const OpDef& def : OpTable()) {
    if (def.make(def).size() < 2) continue;
    for (const IoSpec& input : def.schema->inputs) {
      EXPECT_FALSE(input.optional) << def.domain << "." << def.name << " input " << input.name;
    }
  }
}

// ONNX Runtime 1.17 fails type inference on a node with several values in a variadic input of
// a custom op registered for several element types (it looks for a kernel type constraint per
// node input, and kernels declare one per formal input); one element type types the output.
TEST(OpTable, OpsWithAVariadicInputHaveOneElementType) {
  for (const OpDef& def : OpTable()) {
    const auto inputs = def.schema->inputs;
    if (inputs.empty() || !inputs.back().variadic) continue;
    EXPECT_EQ(def.make(def).size(), 1u) << def.domain << "." << def.name;
  }
}

// A variadic input takes every node input from its position on, so only the last may be one;
// it takes at least one value, so it is not optional either. Outputs are never variadic.
TEST(OpTable, OnlyTheLastInputIsVariadic) {
  for (const OpDef& def : OpTable()) {
    SCOPED_TRACE(std::string(def.domain) + "." + std::string(def.name));
    const auto inputs = def.schema->inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].variadic) continue;
      EXPECT_EQ(i + 1, inputs.size()) << inputs[i].name;
      EXPECT_FALSE(inputs[i].optional) << inputs[i].name;
      for (const OpPtr& op : def.make(def)) {
        EXPECT_EQ(op->GetInputCharacteristic(op.get(), i), INPUT_OUTPUT_VARIADIC);
        EXPECT_EQ(op->GetVariadicInputMinArity(op.get()), 1);
        EXPECT_EQ(op->GetVariadicInputHomogeneity(op.get()), 1);
      }
    }
    for (const IoSpec& output : def.schema->outputs) EXPECT_FALSE(output.variadic) << output.name;
  }
}

TEST(OpTable, NamesAreUniquePerDomainAndDomainsAreKnown) {
  std::set<std::string> seen;
  for (const OpDef& def : OpTable()) {
    const std::string key = std::string(def.domain) + "." + std::string(def.name);
    EXPECT_TRUE(seen.insert(key).second) << key << " is listed twice";
    bool known = false;
    for (std::string_view domain : kDomains) known |= domain == def.domain;
    EXPECT_TRUE(known) << key;
    // Compat quirks belong to the compat domains, never to ortops' own names.
    EXPECT_EQ(def.compat, def.domain != kOrtopsDomain) << key;
  }
}

TEST(OpTable, SchemasAreDocumented) {
  for (const OpDef& def : OpTable()) {
    SCOPED_TRACE(std::string(def.domain) + "." + std::string(def.name));
    EXPECT_FALSE(def.schema->doc.empty());
    std::set<std::string_view> names;
    for (const IoSpec& io : def.schema->inputs) {
      EXPECT_FALSE(io.doc.empty()) << io.name;
      EXPECT_TRUE(names.insert(io.name).second) << io.name;
    }
    for (const AttrSpec& attr : def.schema->attributes) {
      EXPECT_FALSE(attr.doc.empty()) << attr.name;
      EXPECT_TRUE(names.insert(attr.name).second) << attr.name;
    }
  }
}

}  // namespace
}  // namespace ortops
