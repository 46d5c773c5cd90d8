// Writes the op manifest: the library's version, its domains, and every row of the op table
// with its schema and the element types of the kernels it registers, as JSON. The build runs it; the Python package
// ships its output (ortops.ops()), and docs/ops/ is generated from it.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "op_table.h"

namespace {

using ortops::AttrSpec;
using ortops::IoSpec;

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

// The element types each input (or output) accepts over all kernels of the op, in kernel order.
std::string Types(const std::vector<ortops::OpPtr>& ops, size_t index, bool input) {
  std::vector<std::string> names;
  for (const auto& op : ops) {
    std::string name =
        ortops::ElementTypeName(input ? op->GetInputType(op.get(), index) : op->GetOutputType(op.get(), index));
    bool seen = false;
    for (const auto& n : names) seen |= n == name;
    if (!seen) names.push_back(name);
  }
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + Quote(names[i]);
  return out + "]";
}

void WriteIo(std::string_view key, std::span<const IoSpec> specs, const std::vector<ortops::OpPtr>& ops, bool input) {
  std::cout << "      " << Quote(key) << ": [";
  for (size_t i = 0; i < specs.size(); ++i) {
    std::cout << (i ? "," : "") << "\n        {\"name\": " << Quote(specs[i].name)
              << ", \"types\": " << Types(ops, i, input) << ", \"optional\": " << (specs[i].optional ? "true" : "false")
              << ", \"variadic\": " << (specs[i].variadic ? "true" : "false") << ", \"doc\": " << Quote(specs[i].doc)
              << "}";
  }
  std::cout << "\n      ]";
}

// Rows that share a schema share a kernel, named after its first row; qualified with that
// row's domain ("mmdeploy::MMCVDeformConv2d") when an earlier row of another schema has
// the same name, so that different kernels never share a name.
std::string KernelName(const ortops::OpDef& def) {
  const ortops::OpDef* first = &def;
  for (const ortops::OpDef& other : ortops::OpTable()) {
    if (other.schema == def.schema) {
      first = &other;
      break;
    }
  }
  for (const ortops::OpDef& other : ortops::OpTable()) {
    if (&other == first) break;
    if (other.name == first->name) return std::string(first->domain) + "::" + std::string(first->name);
  }
  return std::string(first->name);
}

}  // namespace

// ortops_manifest [--cuda-build]: --cuda-build writes the manifest of the CUDA build
// (cuda/libortops.so), whose "library_providers" then name CUDA's too: which providers the
// library beside the manifest has kernels for, where each op's "execution_providers" say
// which it runs on in a build that has them.
int main(int argc, char** argv) {
  const bool cuda_build = argc > 1 && std::string_view(argv[1]) == "--cuda-build";
  std::cout << "{\n  \"version\": " << Quote(ORTOPS_VERSION) << ",\n  \"library_providers\": [\"CPUExecutionProvider\""
            << (cuda_build ? ", \"CUDAExecutionProvider\"" : "") << "],\n  \"domains\": [";
  for (size_t i = 0; i < std::size(ortops::kDomains); ++i) std::cout << (i ? ", " : "") << Quote(ortops::kDomains[i]);
  std::cout << "],\n  \"ops\": [";
  bool first = true;
  for (const ortops::OpDef& def : ortops::OpTable()) {
    const std::vector<ortops::OpPtr> ops = def.make(def);
    std::cout << (first ? "" : ",") << "\n    {\n";
    first = false;
    std::cout << "      \"domain\": " << Quote(def.domain) << ",\n";
    std::cout << "      \"name\": " << Quote(def.name) << ",\n";
    std::cout << "      \"since_version\": " << def.since_version << ",\n";
    std::cout << "      \"execution_providers\": [\"CPUExecutionProvider\""
              << (def.device.exists ? ", \"CUDAExecutionProvider\"" : "") << "],\n";
    std::cout << "      \"compat\": " << (def.compat ? "true" : "false") << ",\n";
    std::cout << "      \"kernel\": " << Quote(KernelName(def)) << ",\n";
    std::cout << "      \"doc\": " << Quote(def.schema->doc) << ",\n";
    const std::string_view differences = def.compat ? ortops::DifferencesFor(*def.schema, def.domain) : "";
    std::cout << "      \"differences\": " << Quote(differences) << ",\n";
    WriteIo("inputs", def.schema->inputs, ops, true);
    std::cout << ",\n";
    WriteIo("outputs", def.schema->outputs, ops, false);
    std::cout << ",\n      \"attributes\": [";
    for (size_t i = 0; i < def.schema->attributes.size(); ++i) {
      const AttrSpec& a = def.schema->attributes[i];
      std::cout << (i ? "," : "") << "\n        {\"name\": " << Quote(a.name) << ", \"type\": \""
                << ortops::AttrTypeName(a.type)
                << "\", \"default\": " << (a.default_value.empty() ? std::string("null") : Quote(a.default_value))
                << ", \"also_ints_of_one\": " << (a.also_ints_of_one ? "true" : "false")
                << ", \"doc\": " << Quote(a.doc) << "}";
    }
    std::cout << "\n      ]\n    }";
  }
  std::cout << "\n  ]\n}\n";
  return 0;
}
