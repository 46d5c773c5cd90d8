#include "onnx_model.h"

#include <cstring>

namespace ortops::testing {
namespace {

// Protobuf wire format: a field is a varint key (number << 3 | wire type) and a payload.
class Message {
 public:
  Message& Varint(int field, uint64_t value) {
    Key(field, 0);
    Raw(value);
    return *this;
  }
  Message& Bytes(int field, const std::string& value) {
    Key(field, 2);
    Raw(value.size());
    out_ += value;
    return *this;
  }
  Message& Child(int field, const Message& child) { return Bytes(field, child.out_); }
  Message& Fixed32(int field, float value) {
    Key(field, 5);
    char bytes[4];
    std::memcpy(bytes, &value, 4);  // little-endian hosts only, as ONNX Runtime's
    out_.append(bytes, 4);
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  void Key(int field, int wire_type) { Raw(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type)); }
  void Raw(uint64_t value) {
    do {
      auto byte = static_cast<char>(value & 0x7F);
      value >>= 7;
      if (value) byte = static_cast<char>(byte | 0x80);
      out_ += byte;
    } while (value);
  }
  std::string out_;
};

Message Attribute(const std::string& name, const AttributeValue& value) {
  // AttributeProto: name 1, f 2, i 3, s 4, floats 7, ints 8, type 20 (FLOAT 1, INT 2, STRING 3,
  // FLOATS 6, INTS 7).
  Message attr;
  attr.Bytes(1, name);
  if (auto* i = std::get_if<int64_t>(&value)) attr.Varint(3, static_cast<uint64_t>(*i)).Varint(20, 2);
  if (auto* f = std::get_if<float>(&value)) attr.Fixed32(2, *f).Varint(20, 1);
  if (auto* s = std::get_if<std::string>(&value)) attr.Bytes(4, *s).Varint(20, 3);
  if (auto* ints = std::get_if<std::vector<int64_t>>(&value)) {
    for (int64_t v : *ints) attr.Varint(8, static_cast<uint64_t>(v));
    attr.Varint(20, 7);
  }
  if (auto* floats = std::get_if<std::vector<float>>(&value)) {
    for (float v : *floats) attr.Fixed32(7, v);
    attr.Varint(20, 6);
  }
  return attr;
}

Message TensorValueInfo(const std::string& name, int elem_type) {
  // ValueInfoProto{name 1, type 2: TypeProto{tensor_type 1: Tensor{elem_type 1}}}
  Message tensor;
  tensor.Varint(1, static_cast<uint64_t>(elem_type));
  Message type;
  type.Child(1, tensor);
  Message info;
  info.Bytes(1, name).Child(2, type);
  return info;
}

}  // namespace

std::string MakeModel(const NodeSpec& spec) {
  // NodeProto: input 1, output 2, op_type 4, attribute 5, domain 7.
  Message node;
  for (const auto& [name, type] : spec.inputs) node.Bytes(1, name);
  for (const auto& name : spec.outputs) node.Bytes(2, name);
  node.Bytes(4, spec.op_type).Bytes(7, spec.domain);
  for (const auto& [name, value] : spec.attributes) node.Child(5, Attribute(name, value));

  // GraphProto: node 1, name 2, input 11, output 12.
  Message graph;
  graph.Child(1, node).Bytes(2, "test");
  for (const auto& [name, type] : spec.inputs) {
    if (!name.empty()) graph.Child(11, TensorValueInfo(name, type));
  }
  for (const auto& name : spec.outputs) graph.Child(12, Message().Bytes(1, name));

  // ModelProto: ir_version 1, graph 7, opset_import 8 (OperatorSetIdProto: domain 1, version 2).
  Message model;
  model.Varint(1, 8).Child(7, graph);
  model.Child(8, Message().Bytes(1, "").Varint(2, 17));
  model.Child(8, Message().Bytes(1, spec.domain).Varint(2, 1));
  return model.str();
}

}  // namespace ortops::testing
