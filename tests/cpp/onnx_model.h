// Writes small ONNX models (one custom node) and reads and writes tensors (TensorProto) as
// protobuf bytes, so the C++ tests need neither onnx nor protobuf. Only the fields ONNX
// Runtime needs are written.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace ortops::testing {

using AttributeValue = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>>;

struct NodeSpec {
  std::string domain;
  std::string op_type;
  // (name, ONNX element type); an empty name is an omitted optional input.
  std::vector<std::pair<std::string, int>> inputs;
  std::vector<std::string> outputs;
  std::vector<std::pair<std::string, AttributeValue>> attributes;
};

// A model with one node, IR version 8, default opset 17 and node.domain at version 1.
// Inputs have unknown shape; outputs have no declared type.
std::string MakeModel(const NodeSpec& node);

// A tensor as ONNX's test data holds one (a TensorProto file, as onnx.numpy_helper writes).
struct TensorData {
  std::string name;
  int elem_type = 0;  // ONNX element type
  std::vector<int64_t> dims;
  std::string raw;  // the elements, little-endian (raw_data)
};

// The TensorProto of `tensor`, its elements as raw_data.
std::string WriteTensor(const TensorData& tensor);

// A TensorProto's name, type, dims and raw_data; throws std::invalid_argument for bytes that
// are not one, or that hold their elements in another field than raw_data.
TensorData ReadTensor(const std::string& bytes);

}  // namespace ortops::testing
