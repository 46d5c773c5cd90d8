// Runs an ONNX model that uses ortops ops in ONNX Runtime's C++ API and prints its outputs.
//
//   run_model [--library PATH] MODEL.onnx [NAME=SHAPE:VALUES ...]
//
// Each model input is given as NAME=SHAPE:VALUES, SHAPE being the dimensions joined by 'x'
// ("3x4"; nothing for a scalar) and VALUES the elements, comma-separated, in row-major order;
// they are read as the input's element type (float, double, int8/16/32/64, uint8, bool).
// Every output is printed on one line: "NAME TYPE [DIMS]: VALUES", floating-point values with
// enough digits to read back the exact number.
//
// Built two ways from this one file (see CMakeLists.txt):
//   run_model         loads libortops.so (ortops.dll on Windows) by path: the path that
//                     find_package(ortops) gave the build, or --library PATH.
//   run_model_static  has ortops linked in (ortops::ortops_static) and lets ONNX Runtime find
//                     RegisterCustomOps in the executable by name.
#include <onnxruntime_cxx_api.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace {

struct InputArg {
  std::vector<int64_t> shape;
  std::vector<std::string> values;
};

std::vector<std::string> Split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  if (text.empty()) return parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    parts.emplace_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// "boxes=3x4:0,0,10,10,..." -> ("boxes", {shape {3, 4}, 12 values}).
std::pair<std::string, InputArg> ParseInput(const std::string& arg) {
  const size_t eq = arg.find('=');
  const size_t colon = arg.find(':', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || eq == 0 || colon == std::string::npos) {
    throw std::invalid_argument("input '" + arg + "' is not NAME=SHAPE:VALUES");
  }
  InputArg input;
  for (const std::string& dim : Split(std::string_view(arg).substr(eq + 1, colon - eq - 1), 'x')) {
    int64_t value = -1;
    const auto [end, error] = std::from_chars(dim.data(), dim.data() + dim.size(), value);
    if (error != std::errc() || end != dim.data() + dim.size() || value < 0) {
      throw std::invalid_argument("input '" + arg.substr(0, eq) + "': bad dimension '" + dim + "'");
    }
    input.shape.push_back(value);
  }
  input.values = Split(std::string_view(arg).substr(colon + 1), ',');
  return {arg.substr(0, eq), std::move(input)};
}

template <typename T>
void AppendParsed(const std::string& name, const std::string& text, std::vector<std::byte>& bytes) {
  T value{};
  std::istringstream stream(text);
  if constexpr (sizeof(T) == 1) {  // read int8/uint8/bool as numbers, not characters
    int wide = 0;
    stream >> wide;
    value = static_cast<T>(wide);
  } else {
    stream >> value;
  }
  if (!stream || !stream.eof()) throw std::invalid_argument("input '" + name + "': bad value '" + text + "'");
  const auto* raw = reinterpret_cast<const std::byte*>(&value);
  bytes.insert(bytes.end(), raw, raw + sizeof(T));
}

// Calls visit(T{}, "name") with the C++ type of an ONNX element type; false if unsupported.
template <typename Visit>
bool VisitElementType(ONNXTensorElementDataType type, Visit&& visit) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: visit(float{}, "float"); return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: visit(double{}, "double"); return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: visit(int8_t{}, "int8"); return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: visit(uint8_t{}, "uint8"); return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: visit(int16_t{}, "int16"); return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: visit(int32_t{}, "int32"); return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: visit(int64_t{}, "int64"); return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: visit(bool{}, "bool"); return true;
    default: return false;
  }
}

// The elements, parsed as `type`, as the bytes of a tensor.
std::vector<std::byte> ParseValues(const std::string& name, ONNXTensorElementDataType type,
                                   const std::vector<std::string>& values) {
  std::vector<std::byte> bytes;
  const bool supported = VisitElementType(type, [&](auto zero, const char*) {
    for (const std::string& text : values) AppendParsed<decltype(zero)>(name, text, bytes);
  });
  if (!supported) {
    throw std::invalid_argument("input '" + name + "': element type " + std::to_string(type) + " is not supported");
  }
  return bytes;
}

// One line: "NAME TYPE [DIMS]: VALUES".
void PrintOutput(const std::string& name, const Ort::Value& value) {
  std::cout << name;
  if (!value.IsTensor()) {
    std::cout << " (not a tensor)\n";
    return;
  }
  const auto info = value.GetTensorTypeAndShapeInfo();
  std::ostringstream dims;
  for (int64_t dim : info.GetShape()) dims << (dims.tellp() > 0 ? "," : "") << dim;
  const bool supported = VisitElementType(info.GetElementType(), [&](auto zero, const char* type_name) {
    using T = decltype(zero);
    std::cout << " " << type_name << " [" << dims.str() << "]:";
    const T* data = value.GetTensorData<T>();
    for (size_t i = 0; i < info.GetElementCount(); ++i) {
      if constexpr (sizeof(T) == 1) {
        std::cout << " " << static_cast<int>(data[i]);  // numbers, not characters
      } else if constexpr (std::is_floating_point_v<T>) {
        std::cout << " " << std::setprecision(std::numeric_limits<T>::max_digits10) << data[i];  // round-trips
      } else {
        std::cout << " " << data[i];
      }
    }
  });
  if (!supported) std::cout << " type " << info.GetElementType() << " [" << dims.str() << "]: (not printed)";
  std::cout << "\n";
}

int Run(int argc, char** argv) {
  std::string library;
#ifndef ORTOPS_EXAMPLE_STATIC
  library = ORTOPS_LIBRARY_PATH;  // from find_package(ortops), see CMakeLists.txt
#endif
  std::string model_path;
  std::map<std::string, InputArg> given;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
#ifndef ORTOPS_EXAMPLE_STATIC
    if (arg == "--library" && i + 1 < argc) {
      library = argv[++i];
      continue;
    }
#endif
    if (model_path.empty()) {
      model_path = arg;
    } else {
      auto [name, input] = ParseInput(arg);
      if (!given.emplace(name, std::move(input)).second)
        throw std::invalid_argument("input '" + name + "' given twice");
    }
  }
  if (model_path.empty()) {
    std::cerr << "usage: " << argv[0]
#ifndef ORTOPS_EXAMPLE_STATIC
              << " [--library PATH]"
#endif
              << " MODEL.onnx [NAME=SHAPE:VALUES ...]\n";
    return 2;
  }

  Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "run_model");
  Ort::SessionOptions options;
#ifdef ORTOPS_EXAMPLE_STATIC
  // ortops is linked into this executable; ONNX Runtime finds the function in its exports
  // (dlsym; GetProcAddress on Windows).
  options.RegisterCustomOpsUsingFunction("RegisterCustomOps");
#else
  // A path the loader can open: an absolute path, not a bare file name. ONNX Runtime takes
  // paths as ORTCHAR_T strings, wchar_t on Windows: a std::filesystem::path has them.
  options.RegisterCustomOpsLibrary(std::filesystem::path(library).c_str());
#endif
  Ort::Session session(env, std::filesystem::path(model_path).c_str(), options);

  Ort::AllocatorWithDefaultOptions allocator;
  const auto memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  std::vector<std::string> input_names;
  std::vector<std::vector<std::byte>> buffers;  // keep the input data alive during Run
  std::vector<Ort::Value> inputs;
  for (size_t i = 0; i < session.GetInputCount(); ++i) {
    const std::string name = session.GetInputNameAllocated(i, allocator).get();
    const auto found = given.find(name);
    if (found == given.end()) throw std::invalid_argument("the model's input '" + name + "' is not given");
    const InputArg& input = found->second;
    int64_t expected = 1;
    for (int64_t dim : input.shape) expected *= dim;
    if (static_cast<size_t>(expected) != input.values.size()) {
      throw std::invalid_argument("input '" + name + "': shape has " + std::to_string(expected) + " elements, " +
                                  std::to_string(input.values.size()) + " values given");
    }
    const auto type = session.GetInputTypeInfo(i).GetTensorTypeAndShapeInfo().GetElementType();
    std::vector<std::byte>& bytes = buffers.emplace_back(ParseValues(name, type, input.values));
    inputs.push_back(
        Ort::Value::CreateTensor(memory, bytes.data(), bytes.size(), input.shape.data(), input.shape.size(), type));
    input_names.push_back(name);
    given.erase(found);
  }
  if (!given.empty()) throw std::invalid_argument("the model has no input '" + given.begin()->first + "'");

  std::vector<std::string> output_names;
  for (size_t i = 0; i < session.GetOutputCount(); ++i) {
    output_names.push_back(session.GetOutputNameAllocated(i, allocator).get());
  }
  std::vector<const char*> input_ptrs, output_ptrs;
  for (const auto& name : input_names) input_ptrs.push_back(name.c_str());
  for (const auto& name : output_names) output_ptrs.push_back(name.c_str());
  auto outputs = session.Run(Ort::RunOptions{nullptr}, input_ptrs.data(), inputs.data(), inputs.size(),
                             output_ptrs.data(), output_ptrs.size());
  for (size_t i = 0; i < outputs.size(); ++i) PrintOutput(output_names[i], outputs[i]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& error) {  // Ort::Exception too
    std::cerr << "error: " << error.what() << "\n";
    return 1;
  }
}
