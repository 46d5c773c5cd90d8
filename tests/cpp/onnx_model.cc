#include "onnx_model.h"

#include <cstring>
#include <stdexcept>

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

// Reads the protobuf wire format: a varint key, then a varint or a length and its bytes.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  bool Done() const { return at_ == bytes_.size(); }
  uint64_t Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (Done()) break;
      const auto byte = static_cast<uint8_t>(bytes_[at_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    throw std::invalid_argument("not a TensorProto: a varint runs past the end or 10 bytes");
  }
  std::string Bytes() {
    const uint64_t size = Varint();
    if (size > bytes_.size() - at_) throw std::invalid_argument("not a TensorProto: a field runs past the end");
    std::string value = bytes_.substr(at_, size);
    at_ += size;
    return value;
  }
  void Skip(uint64_t wire_type) {
    const size_t fixed = wire_type == 1 ? 8 : wire_type == 5 ? 4 : 0;
    if (wire_type == 0) {
      Varint();
    } else if (wire_type == 2) {
      Bytes();
    } else if (fixed != 0 && bytes_.size() - at_ >= fixed) {
      at_ += fixed;
    } else {
      throw std::invalid_argument("not a TensorProto: wire type " + std::to_string(wire_type));
    }
  }

 private:
  const std::string& bytes_;
  size_t at_ = 0;
};

}  // namespace

std::string WriteTensor(const TensorData& tensor) {
  // TensorProto: dims 1, data_type 2, name 8, raw_data 9.
  Message message;
  for (int64_t dim : tensor.dims) message.Varint(1, static_cast<uint64_t>(dim));
  message.Varint(2, static_cast<uint64_t>(tensor.elem_type)).Bytes(8, tensor.name).Bytes(9, tensor.raw);
  return message.str();
}

TensorData ReadTensor(const std::string& bytes) {
  TensorData tensor;
  Reader reader(bytes);
  while (!reader.Done()) {
    const uint64_t key = reader.Varint();
    const uint64_t field = key >> 3, wire_type = key & 7;
    if (field == 1 && wire_type == 0) {
      tensor.dims.push_back(static_cast<int64_t>(reader.Varint()));
    } else if (field == 1 && wire_type == 2) {  // packed
      const std::string packed = reader.Bytes();
      Reader dims(packed);
      while (!dims.Done()) tensor.dims.push_back(static_cast<int64_t>(dims.Varint()));
    } else if (field == 2 && wire_type == 0) {
      tensor.elem_type = static_cast<int>(reader.Varint());
    } else if (field == 8 && wire_type == 2) {
      tensor.name = reader.Bytes();
    } else if (field == 9 && wire_type == 2) {
      tensor.raw = reader.Bytes();
    } else if ((field >= 4 && field <= 7) || field == 10 || field == 11 || field == 13) {
      throw std::invalid_argument("TensorProto '" + tensor.name + "' holds its elements outside raw_data");
    } else {
      reader.Skip(wire_type);
    }
  }
  return tensor;
}

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
