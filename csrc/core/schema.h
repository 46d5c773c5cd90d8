// What an op looks like from outside: its inputs, outputs and attributes, with the text the
// generated documentation shows. Each op folder declares its OpSchemas as data, in its
// schema.json, which the build turns into C++ (cmake/op_schemas.cmake); the op's header
// declares them. The kernel adapter, the attribute parser and the op manifest (docs, Python
// op list) all read them.
#pragma once

#include <onnxruntime_c_api.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "core/half.h"

namespace ortops {

// Element type of an input or output. kTypeParam stands for the kernel's element type T,
// so one schema serves the float, double (and float16) kernels of an op.
enum class ElemType { kTypeParam, kFloat, kDouble, kInt64, kInt32 };

template <typename T>
constexpr ONNXTensorElementDataType OnnxType() {
  if constexpr (std::is_same_v<T, float>) {
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  } else if constexpr (std::is_same_v<T, double>) {
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE;
  } else if constexpr (std::is_same_v<T, Half>) {
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  } else {
    static_assert(std::is_same_v<T, int32_t>, "not an element type of any kernel");
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
  }
}

template <typename T>
constexpr ONNXTensorElementDataType Resolve(ElemType type) {
  switch (type) {
    case ElemType::kTypeParam: return OnnxType<T>();
    case ElemType::kFloat: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    case ElemType::kDouble: return ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE;
    case ElemType::kInt64: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    case ElemType::kInt32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
  }
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

// The name of an element type in error messages, the manifest and the docs.
constexpr const char* ElementTypeName(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    default: return "another type";
  }
}

struct IoSpec {
  std::string_view name;
  ElemType type;
  std::string_view doc;  // shape and meaning, e.g. "[N, 4] boxes as (x1, y1, x2, y2)"
  // Only for ops with a single element type: ONNX Runtime 1.17 cannot type a node that
  // leaves out an optional input of an op registered for several (tests/cpp checks this).
  bool optional = false;
  // Only for the last input: it stands for one or more inputs of its element type (one
  // feature map per pyramid level), which the kernel counts with KernelIO::InputCount.
  bool variadic = false;
};

enum class AttrType { kInt, kFloat, kString, kInts, kFloats };

// The name of an attribute type, as the manifest, the docs and error messages write it.
constexpr const char* AttrTypeName(AttrType type) {
  switch (type) {
    case AttrType::kInt: return "int";
    case AttrType::kFloat: return "float";
    case AttrType::kString: return "string";
    case AttrType::kInts: return "ints";
    case AttrType::kFloats: return "floats";
  }
  return "?";
}

struct AttrSpec {
  std::string_view name;
  AttrType type;
  // Default as written in an ONNX file ("0.5", "avg", "1,1", "2.0,2.0"); empty means required.
  std::string_view default_value;
  std::string_view doc;
  // kInt only: also accepted stored as INTS holding exactly one value, which some exporters
  // write for an int (yolov7 passes Python tuples such as `(-1,)` to TorchScript's g.op).
  bool also_ints_of_one = false;
};

// Where the node of one compatibility domain differs from the runtime that defined it, for a
// schema that ortops' own op shares with compatibility names (the schema is shared, the
// originals are not: mmcv's and mmdeploy's kernels of one node can differ).
struct CompatDifferences {
  std::string_view domain;
  std::string_view text;  // Markdown
};

struct OpSchema {
  std::string_view doc;  // semantics, in Markdown
  std::span<const IoSpec> inputs = {};
  std::span<const IoSpec> outputs = {};
  std::span<const AttrSpec> attributes = {};
  // For a schema only compatibility names use (TensorRT plugins, mmdeploy's nodes): where
  // ortops deliberately differs from the original, in Markdown.
  std::string_view differences = {};
  // For a schema that ortops' own name shares with compatibility names: the same, per domain.
  // Every compatibility name has its differences in one of the two (tests check it).
  std::span<const CompatDifferences> compat_differences = {};
};

// The differences from the original of the node `domain` registers with `schema`.
constexpr std::string_view DifferencesFor(const OpSchema& schema, std::string_view domain) {
  if (!schema.differences.empty()) return schema.differences;
  for (const CompatDifferences& entry : schema.compat_differences) {
    if (entry.domain == domain) return entry.text;
  }
  return {};
}

}  // namespace ortops
