#include "core/kernel_io.h"

#include <charconv>
#include <limits>

#include "core/platform.h"

namespace ortops {

std::ostream& operator<<(std::ostream& out, ShapeText shape) {
  out << '[';
  for (size_t i = 0; i < shape.shape.size(); ++i) out << (i ? ", " : "") << shape.shape[i];
  return out << ']';
}

int64_t NumElements(const Shape& shape) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

namespace {

// True if the call succeeded; a failure status is released.
bool TryStatus(OrtStatus* status) {
  if (status == nullptr) return true;
  Api().ReleaseStatus(status);
  return false;
}

// The number of values the node's array attribute `name` holds as `read` reads it, or -1 if it
// cannot be read as an array. ONNX Runtime's array reads check neither the attribute's type
// nor that it is an array: an INT or FLOATS attribute reads as zero int64 values.
template <typename ReadArray>
int64_t ArraySize(const OrtKernelInfo* info, const char* name, ReadArray read) {
  size_t size = 0;
  if (!TryStatus(read(info, name, nullptr, &size))) return -1;
  return static_cast<int64_t>(size);
}

constexpr const char* kEmptyList = "an empty list";

// The ONNX type of the node's attribute `name`, or nullptr if the node has none of that
// name. ONNX Runtime fails a typed scalar read both when the attribute is absent and when it
// has another type, so each type is tried in turn: without this, a float threshold stored
// as INT (or as a string) would silently become the default.
const char* StoredAttrType(const OrtKernelInfo* info, const char* name) {
  int64_t int_value = 0;
  if (TryStatus(Api().KernelInfoGetAttribute_int64(info, name, &int_value))) return "int";
  float float_value = 0;
  if (TryStatus(Api().KernelInfoGetAttribute_float(info, name, &float_value))) return "float";
  size_t size = 0;
  if (TryStatus(Api().KernelInfoGetAttribute_string(info, name, nullptr, &size))) return "string";
  const int64_t ints = ArraySize(info, name, Api().KernelInfoGetAttributeArray_int64);
  const int64_t floats = ArraySize(info, name, Api().KernelInfoGetAttributeArray_float);
  if (ints > 0) return "ints";
  if (floats > 0) return "floats";
  if (ints == 0 || floats == 0) return kEmptyList;
  return nullptr;  // absent (or a type the C API cannot read, such as a tensor)
}

// A default list as the schema writes it ("1,1", "2.0,2.0", or "[]" for an empty list, as the
// empty text means "required"). from_chars, unlike strtof, ignores the process locale (a host
// app may use "0,5").
template <typename T>
std::vector<T> ParseList(std::string_view text) {
  std::vector<T> values;
  if (text == "[]") return values;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    T value = 0;
    std::from_chars(item.data(), item.data() + item.size(), value);
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return values;
}

}  // namespace

void Attributes::CheckTypes() const {
  for (const AttrSpec& spec : specs_) {
    const std::string name(spec.name);
    const char* stored = StoredAttrType(info_, name.c_str());
    if (stored == nullptr || stored == std::string_view(AttrTypeName(spec.type))) continue;
    if (stored == kEmptyList && (spec.type == AttrType::kInts || spec.type == AttrType::kFloats)) continue;
    if (spec.also_ints_of_one && (stored == std::string_view("ints") || stored == kEmptyList)) {
      const int64_t size = ArraySize(info_, name.c_str(), Api().KernelInfoGetAttributeArray_int64);
      Check(size == 1, "attribute '", name, "' must be of type int, got ints holding ", size,
            " values (ints holding one value are read as that int)");
      continue;
    }
    Fail("attribute '", name, "' must be of type ", AttrTypeName(spec.type), ", got ", stored);
  }
}

// Called when the typed read failed, which CheckTypes has made mean "absent".
void Attributes::RequireDefault(const AttrSpec& spec) const {
  Check(!spec.default_value.empty(), "attribute '", spec.name, "' (", AttrTypeName(spec.type), ") is required");
}

const AttrSpec& Attributes::Spec(std::string_view name, AttrType type) const {
  for (const AttrSpec& spec : specs_) {
    if (spec.name == name) {
      if (spec.type != type) Fail("internal: attribute '", name, "' read with the wrong type");
      return spec;
    }
  }
  Fail("internal: attribute '", name, "' is not in the op's schema");
}

namespace {

// A tensor's element type, and its shape into `shape`.
ONNXTensorElementDataType ReadTypeAndShape(const OrtValue* value, Shape& shape) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  ThrowOnError(Api().GetTensorTypeAndShape(value, &info));
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t dims = 0;
  OrtStatus* status = Api().GetTensorElementType(info, &type);
  if (status == nullptr) status = Api().GetDimensionsCount(info, &dims);
  if (status == nullptr) {
    shape.resize(dims);
    status = Api().GetDimensions(info, shape.data(), dims);
  }
  Api().ReleaseTensorTypeAndShapeInfo(info);
  ThrowOnError(status);
  return type;
}

}  // namespace

const void* Attributes::RawConstantInput(size_t index, ONNXTensorElementDataType type, Shape& shape) const {
  int is_constant = 0;
  const OrtValue* value = nullptr;
  if (OrtStatus* status = Api().KernelInfoGetConstantInput_tensor(info_, index, &is_constant, &value)) {
    Api().ReleaseStatus(status);  // an optional input left out, say: not a constant
    return nullptr;
  }
  if (!is_constant || value == nullptr) return nullptr;
  const ONNXTensorElementDataType actual = ReadTypeAndShape(value, shape);
  if (actual != type) return nullptr;  // Compute reports the type error
  void* data = nullptr;
  ThrowOnError(Api().GetTensorMutableData(const_cast<OrtValue*>(value), &data));
  return data;
}

int64_t Attributes::Int(std::string_view name) const {
  const AttrSpec& spec = Spec(name, AttrType::kInt);
  int64_t value = 0;
  if (TryStatus(Api().KernelInfoGetAttribute_int64(info_, spec.name.data(), &value))) return value;
  if (spec.also_ints_of_one) {
    size_t size = 1;  // CheckTypes has made sure that an INTS attribute holds one value
    if (TryStatus(Api().KernelInfoGetAttributeArray_int64(info_, spec.name.data(), &value, &size)) && size == 1) {
      return value;
    }
  }
  RequireDefault(spec);
  return ParseList<int64_t>(spec.default_value).at(0);
}

float Attributes::Float(std::string_view name) const {
  const AttrSpec& spec = Spec(name, AttrType::kFloat);
  float value = 0;
  if (TryStatus(Api().KernelInfoGetAttribute_float(info_, spec.name.data(), &value))) return value;
  RequireDefault(spec);
  // from_chars, unlike strtof, ignores the process locale (a host app may use "0,5").
  const std::string_view text = spec.default_value;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

std::string Attributes::String(std::string_view name) const {
  const AttrSpec& spec = Spec(name, AttrType::kString);
  size_t size = 0;
  if (TryStatus(Api().KernelInfoGetAttribute_string(info_, spec.name.data(), nullptr, &size))) {
    std::string value(size, '\0');
    ThrowOnError(Api().KernelInfoGetAttribute_string(info_, spec.name.data(), value.data(), &size));
    value.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
    return value;
  }
  RequireDefault(spec);
  return std::string(spec.default_value);
}

// An INTS or FLOATS attribute through its getter (ONNX Runtime's two-call protocol: size, then
// values), or the spec's default.
template <typename T, typename Getter>
std::vector<T> Attributes::Array(std::string_view name, AttrType type, Getter get) const {
  const AttrSpec& spec = Spec(name, type);
  size_t size = 0;
  if (TryStatus(get(info_, spec.name.data(), nullptr, &size))) {
    std::vector<T> values(size);
    ThrowOnError(get(info_, spec.name.data(), values.data(), &size));
    return values;
  }
  RequireDefault(spec);
  return ParseList<T>(spec.default_value);
}

std::vector<int64_t> Attributes::Ints(std::string_view name) const {
  return Array<int64_t>(name, AttrType::kInts, Api().KernelInfoGetAttributeArray_int64);
}

std::vector<float> Attributes::Floats(std::string_view name) const {
  return Array<float>(name, AttrType::kFloats, Api().KernelInfoGetAttributeArray_float);
}

int64_t KernelIO::HardwareThreads() {
  static const int64_t threads = OnlineProcessors();
  return threads;
}

// "features" for a single input, "features[2]" for the third of a variadic last input.
std::string KernelIO::InputName(size_t index) const {
  if (input_specs_.empty()) return "?";
  const size_t last = input_specs_.size() - 1;
  if (index < last || (index == last && !input_specs_[last].variadic)) return std::string(input_specs_[index].name);
  if (!input_specs_[last].variadic) return "?";
  return std::string(input_specs_[last].name) + "[" + std::to_string(index - last) + "]";
}

size_t KernelIO::InputCount() const {
  size_t count = 0;
  ThrowOnError(Api().KernelContext_GetInputCount(context_, &count));
  return count;
}

bool KernelIO::Has(size_t index) const {
  if (index >= InputCount()) return false;
  const OrtValue* value = nullptr;
  ThrowOnError(Api().KernelContext_GetInput(context_, index, &value));
  return value != nullptr;
}

size_t KernelIO::OutputCount() const {
  size_t count = 0;
  ThrowOnError(Api().KernelContext_GetOutputCount(context_, &count));
  return count;
}

const OrtValue* KernelIO::RawInput(size_t index, ONNXTensorElementDataType type, int rank, Shape& shape) const {
  const OrtValue* value = nullptr;
  ThrowOnError(Api().KernelContext_GetInput(context_, index, &value));
  Check(value != nullptr, "input '", InputName(index), "' is missing");
  const ONNXTensorElementDataType actual = ReadTypeAndShape(value, shape);
  Check(actual == type, "input '", InputName(index), "' must be ", ElementTypeName(type), ", got ",
        ElementTypeName(actual));
  Check(rank < 0 || shape.size() == static_cast<size_t>(rank), "input '", InputName(index), "' must have rank ", rank,
        ", got shape ", ShapeText{shape});
  return value;
}

void* KernelIO::Data(OrtValue* value) {
  void* data = nullptr;
  ThrowOnError(Api().GetTensorMutableData(value, &data));
  return data;
}

void* KernelIO::RawOutput(size_t index, const Shape& shape) const {
  OrtValue* value = nullptr;
  ThrowOnError(Api().KernelContext_GetOutput(context_, index, shape.data(), shape.size(), &value));
  return Data(value);
}

namespace {

// The session's CPU allocator, to be released with ReleaseAllocator.
OrtAllocator* GetCpuAllocator(OrtKernelContext* context) {
  OrtMemoryInfo* cpu = nullptr;
  ThrowOnError(Api().CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu));
  OrtAllocator* allocator = nullptr;
  OrtStatus* status = Api().KernelContext_GetAllocator(context, cpu, &allocator);
  Api().ReleaseMemoryInfo(cpu);
  ThrowOnError(status);
  return allocator;
}

}  // namespace

ScratchBuffer::ScratchBuffer(OrtAllocator* allocator, size_t bytes) {
  if (bytes == 0) return;
  data_ = allocator->Alloc(allocator, bytes);
  if (data_ == nullptr) Fail("could not allocate ", bytes, " bytes of scratch memory");
  allocator_ = allocator;
}

ScratchBuffer::~ScratchBuffer() {
  if (allocator_ != nullptr) allocator_->Free(allocator_, data_);
}

ScratchBuffer& ScratchBuffer::operator=(ScratchBuffer&& other) noexcept {
  std::swap(allocator_, other.allocator_);
  std::swap(data_, other.data_);
  return *this;
}

KernelIO::~KernelIO() {
  if (allocator_) Api().ReleaseAllocator(allocator_);
}

OrtAllocator* KernelIO::SessionCpuAllocator() const {
  std::call_once(allocator_once_, [this] { allocator_ = GetCpuAllocator(context_); });
  return allocator_;
}

void KernelIO::RunParallel(void (*fn)(void*, size_t), size_t total, void* data) const {
  ThrowOnError(Api().KernelContext_ParallelFor(context_, fn, total, 0, data));
}

}  // namespace ortops
