// Runs saved models in this process's ONNX Runtime with the ortops library registered and
// writes what each returns, so that one platform's results can be compared with another's:
// scripts/test_windows.sh runs it under Wine with each Windows runtime, on the cases that
// tests/windows/cases.py saved with Linux's results.
//
//   ortops_case_runner LIBRARY CASES OUT
//
// CASES/cases.txt lists the cases, one "NAME THREADS" a line; CASES/NAME holds model.onnx and
// its inputs as input_<k>.pb (TensorProto files with raw_data, as onnx.numpy_helper writes
// them). The runner makes OUT/NAME before running a case (so that a case that ends the
// process is the last folder made) and writes into it each output as output_<k>.pb, or
// error.txt with the message of the error ONNX Runtime reported. Sessions run with THREADS
// intra-op threads that wait without spinning. Exit status 0 once every case has run.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ort_api.h"
#include "onnx_model.h"

namespace {

namespace fs = std::filesystem;
using ortops::testing::TensorData;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// Bytes per element of the element types the cases use; 0 for the others (strings).
size_t ElementSize(int type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return 1;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return 4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return 8;
    default: return 0;
  }
}

class Runner {
 public:
  explicit Runner(const fs::path& library) : library_(fs::absolute(library)) {}

  // Runs one case; its outputs, or error.txt, go to `out`.
  void Run(const fs::path& folder, int threads, const fs::path& out) {
    std::map<std::string, TensorData> feeds;
    for (int k = 0;; ++k) {
      const fs::path file = folder / ("input_" + std::to_string(k) + ".pb");
      if (!fs::exists(file)) break;
      TensorData tensor = ortops::testing::ReadTensor(ReadFile(file));
      std::string name = tensor.name;
      feeds.emplace(std::move(name), std::move(tensor));
    }
    const std::string model = ReadFile(folder / "model.onnx");
    std::vector<TensorData> results;
    try {
      results = Session(model, threads, feeds);
    } catch (const Ort::Exception& error) {
      WriteFile(out / "error.txt", error.what());
      return;
    }
    for (size_t k = 0; k < results.size(); ++k) {
      WriteFile(out / ("output_" + std::to_string(k) + ".pb"), ortops::testing::WriteTensor(results[k]));
    }
  }

 private:
  std::vector<TensorData> Session(const std::string& model, int threads, std::map<std::string, TensorData>& feeds) {
    Ort::SessionOptions options;
    options.SetIntraOpNumThreads(threads);
    options.AddConfigEntry("session.intra_op.allow_spinning", "0");  // suites run side by side
    options.RegisterCustomOpsLibrary(library_.c_str());
    Ort::Session session(env_, model.data(), model.size(), options);

    Ort::AllocatorWithDefaultOptions allocator;
    const auto memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    std::vector<std::string> input_names, output_names;
    std::vector<Ort::Value> inputs;
    for (size_t i = 0; i < session.GetInputCount(); ++i) {
      input_names.push_back(session.GetInputNameAllocated(i, allocator).get());
      const auto found = feeds.find(input_names.back());
      if (found == feeds.end()) throw std::runtime_error("no input_<k>.pb for the input " + input_names.back());
      TensorData& tensor = found->second;
      if (ElementSize(tensor.elem_type) == 0) throw std::runtime_error("element type of " + tensor.name);
      // Created over the file's bytes (std::string's data is never null, even when empty).
      inputs.push_back(Ort::Value::CreateTensor(memory, tensor.raw.data(), tensor.raw.size(), tensor.dims.data(),
                                                tensor.dims.size(),
                                                static_cast<ONNXTensorElementDataType>(tensor.elem_type)));
    }
    for (size_t i = 0; i < session.GetOutputCount(); ++i) {
      output_names.push_back(session.GetOutputNameAllocated(i, allocator).get());
    }
    std::vector<const char*> input_pointers, output_pointers;
    for (const std::string& name : input_names) input_pointers.push_back(name.c_str());
    for (const std::string& name : output_names) output_pointers.push_back(name.c_str());
    std::vector<Ort::Value> outputs = session.Run(Ort::RunOptions{}, input_pointers.data(), inputs.data(),
                                                  inputs.size(), output_pointers.data(), output_pointers.size());

    std::vector<TensorData> results;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].IsTensor()) throw std::runtime_error("output " + output_names[i] + " is not a tensor");
      const auto info = outputs[i].GetTensorTypeAndShapeInfo();
      TensorData& result = results.emplace_back();
      result.name = output_names[i];
      result.elem_type = static_cast<int>(info.GetElementType());
      result.dims = info.GetShape();
      const size_t bytes = info.GetElementCount() * ElementSize(result.elem_type);
      if (bytes > 0) result.raw.assign(outputs[i].GetTensorMutableData<char>(), bytes);
    }
    return results;
  }

  Ort::Env env_{ORT_LOGGING_LEVEL_FATAL, "ortops_case_runner"};
  fs::path library_;
};

int Main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: ortops_case_runner LIBRARY CASES OUT\n";
    return 2;
  }
  // The C API version the library asks for, which every supported runtime has (see
  // session_test.cc): no wrapper used here calls a newer function.
  const OrtApi* api = OrtGetApiBase()->GetApi(ortops::kMinOrtApiVersion);
  if (api == nullptr) {
    std::cerr << "ONNX Runtime " << OrtGetApiBase()->GetVersionString() << " has no C API version "
              << ortops::kMinOrtApiVersion << "\n";
    return 1;
  }
  Ort::InitApi(api);
  const fs::path cases = argv[2], out = argv[3];
  Runner runner(argv[1]);
  std::istringstream list(ReadFile(cases / "cases.txt"));
  std::string name;
  int threads = 1, count = 0;
  while (list >> name >> threads) {
    fs::create_directories(out / name);
    runner.Run(cases / name, threads, out / name);
    ++count;
  }
  std::cout << count << " cases run in ONNX Runtime " << OrtGetApiBase()->GetVersionString() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "ortops_case_runner: " << error.what() << "\n";
    return 1;
  }
}
