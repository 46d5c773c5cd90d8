// libortops.so loaded into a real ONNX Runtime session, the way every user loads it.
#include <gtest/gtest.h>

// The tests' own calls into the runtime go through the C API version the library asks for
// (see kApiOfTheOldestRuntime below), not the headers' newer one.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "core/isa.h"
#include "core/ort_api.h"
#include "onnx_model.h"
#include "op_table.h"

namespace ortops {
namespace {

using testing::MakeModel;
using testing::NodeSpec;

constexpr int kFloat = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

// Set before main, so before any test: the C++ API's table at kMinOrtApiVersion, which every
// supported runtime has (1.17's GetApi returns null for the headers' ORT_API_VERSION), so the
// same test program runs in the oldest runtime and the newest (scripts/test_windows.sh).
// Wrappers that call newer functions must not be used: the oldest runtime's table ends before
// them (so Value::GetTensorMutableData, API 1, rather than GetTensorData).
[[maybe_unused]] const bool kApiOfTheOldestRuntime = [] {
  const OrtApi* api = OrtGetApiBase()->GetApi(kMinOrtApiVersion);
  if (api == nullptr) {
    std::cerr << "ONNX Runtime " << OrtGetApiBase()->GetVersionString() << " has no C API version " << kMinOrtApiVersion
              << "\n";
    std::abort();
  }
  Ort::InitApi(api);
  return true;
}();

Ort::Env& Env() {
  static Ort::Env env(ORT_LOGGING_LEVEL_FATAL, "ortops_tests");
  return env;
}

// The library under test by its full path, as users register it: a std::filesystem path's
// characters are ORTCHAR_T (wchar_t on Windows). Under Wine, the build's absolute path
// resolves to drive Z:, Wine's view of the Unix root.
const ORTCHAR_T* LibraryPath() {
  static const std::filesystem::path path = std::filesystem::absolute(ORTOPS_LIBRARY_PATH);
  return path.c_str();
}

Ort::Session MakeSession(const std::string& model, int threads = 1) {
  Ort::SessionOptions options;
  options.SetIntraOpNumThreads(threads);
  options.RegisterCustomOpsLibrary(LibraryPath());
  return Ort::Session(Env(), model.data(), model.size(), options);
}

NodeSpec NmsNode() {
  return {"mmcv",
          "NonMaxSuppression",
          {{"boxes", kFloat}, {"scores", kFloat}},
          {"indices"},
          {{"iou_threshold", 0.5f}, {"offset", int64_t{0}}}};
}

std::vector<int64_t> RunNms(Ort::Session& session, std::vector<float> boxes, std::vector<float> scores) {
  auto memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  const std::array<int64_t, 2> box_shape{static_cast<int64_t>(boxes.size() / 4), 4};
  const std::array<int64_t, 1> score_shape{static_cast<int64_t>(scores.size())};
  std::array<Ort::Value, 2> inputs{
      Ort::Value::CreateTensor<float>(memory, boxes.data(), boxes.size(), box_shape.data(), 2),
      Ort::Value::CreateTensor<float>(memory, scores.data(), scores.size(), score_shape.data(), 1)};
  const char* input_names[] = {"boxes", "scores"};
  const char* output_names[] = {"indices"};
  auto outputs = session.Run(Ort::RunOptions{}, input_names, inputs.data(), 2, output_names, 1);
  const auto count = outputs[0].GetTensorTypeAndShapeInfo().GetElementCount();
  const int64_t* data = outputs[0].GetTensorMutableData<int64_t>();
  return {data, data + count};
}

// Two overlapping boxes (IoU 81/119 > 0.5) and one apart; the second-best overlapping one goes.
const std::vector<float> kBoxes{0, 0, 10, 10, 20, 20, 30, 30, 1, 1, 11, 11};
const std::vector<float> kScores{0.9f, 0.7f, 0.8f};
const std::vector<int64_t> kKept{0, 1};

// The device path's stream-ordered scratch uses API 18 where the runtime has it; a runtime is
// asked for no table it lacks (its GetApi would print an error). Runs against 1.17 and 1.31
// (scripts/test_windows.sh), where the answer for 18 differs.
TEST(OrtApi, NewerTablesOnlyWhereTheRuntimeHasThem) {
  ASSERT_NE(InitApi(OrtGetApiBase()), nullptr);
  unsigned major = 0, minor = 0;
  ASSERT_EQ(std::sscanf(OrtGetApiBase()->GetVersionString(), "%u.%u", &major, &minor), 2);
  ASSERT_EQ(major, 1u);
  EXPECT_NE(ApiIfAvailable(minor), nullptr);
  EXPECT_EQ(ApiIfAvailable(minor + 1), nullptr);
  EXPECT_EQ(ApiIfAvailable(18) != nullptr, minor >= 18);
  if (const OrtApi* api = ApiIfAvailable(18)) {
    EXPECT_NE(api->KernelContext_GetScratchBuffer, nullptr);
  }
}

TEST(Session, RunsMmcvNonMaxSuppression) {
  Ort::Session session = MakeSession(MakeModel(NmsNode()));
  EXPECT_EQ(RunNms(session, kBoxes, kScores), kKept);
}

TEST(Session, BadInputBecomesAStatusNamingTheOp) {
  Ort::Session session = MakeSession(MakeModel(NmsNode()));
  try {
    RunNms(session, kBoxes, {0.9f, 0.7f});
    FAIL() << "expected an error";
  } catch (const Ort::Exception& e) {
    EXPECT_NE(std::string(e.what()).find("mmcv.NonMaxSuppression: input 'scores'"), std::string::npos) << e.what();
  }
}

TEST(Session, BadAttributeFailsSessionCreation) {
  NodeSpec node = NmsNode();
  node.attributes[1].second = int64_t{3};
  try {
    MakeSession(MakeModel(node));
    FAIL() << "expected an error";
  } catch (const Ort::Exception& e) {
    EXPECT_NE(std::string(e.what()).find("attribute 'offset' must be 0 or 1, got 3"), std::string::npos) << e.what();
  }
}

TEST(Session, RegistersFromManyThreadsIntoManySessions) {
  const std::string model = MakeModel(NmsNode());
  constexpr size_t kThreads = 8;
  std::vector<Ort::SessionOptions> options(kThreads);
  std::vector<std::thread> threads;
  // Concurrent first registrations: ctest runs each test in a fresh process, so these
  // race on building the library's domains.
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      options[t].SetIntraOpNumThreads(2);
      options[t].RegisterCustomOpsLibrary(LibraryPath());
    });
  }
  for (auto& thread : threads) thread.join();
  threads.clear();
  // ONNX Runtime itself races when the first two sessions that use a new custom domain are
  // created at once (it checks, then adds, the domain in a global map), so one session
  // goes first; after that, sessions may be created concurrently.
  Ort::Session first(Env(), model.data(), model.size(), options[0]);
  std::array<bool, kThreads> ok{};
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 4; ++repeat) {
        Ort::Session session(Env(), model.data(), model.size(), options[t]);
        ok[t] = RunNms(session, kBoxes, kScores) == kKept;
        if (!ok[t]) return;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (bool result : ok) EXPECT_TRUE(result);
}

// Every op of the table can be placed in a session with float inputs and its default
// attributes (required ones set to 1): the runtime accepts its schema and creates its kernel.
TEST(Session, EveryOpInTheTableLoads) {
  for (const OpDef& def : OpTable()) {
    SCOPED_TRACE(std::string(def.domain) + "." + std::string(def.name));
    NodeSpec node{std::string(def.domain), std::string(def.name), {}, {}, {}};
    const std::vector<OpPtr> ops = def.make(def);
    for (size_t i = 0; i < def.schema->inputs.size(); ++i) {
      node.inputs.emplace_back(def.schema->inputs[i].name, ops.front()->GetInputType(ops.front().get(), i));
    }
    for (const IoSpec& out : def.schema->outputs) node.outputs.emplace_back(out.name);
    for (const AttrSpec& attr : def.schema->attributes) {
      if (!attr.default_value.empty()) continue;
      if (attr.type == AttrType::kInt) node.attributes.emplace_back(attr.name, int64_t{1});
      if (attr.type == AttrType::kFloat) node.attributes.emplace_back(attr.name, 1.0f);
      if (attr.type == AttrType::kFloats) node.attributes.emplace_back(attr.name, std::vector<float>{1.0f, 1.0f});
    }
    EXPECT_NO_THROW(MakeSession(MakeModel(node)));
  }
}

// ---- Kernels at the instruction-set level this CPU runs (core/isa.h), against references
// written here. scripts/test.sh also runs these under qemu-x86_64 with older CPU models (no
// AVX: the SSE2 level; no AVX-512: the AVX2 level), so that an instruction above a level's
// own would stop the run, and ORTOPS_EXPECT_ISA names the level detection must find there.

TEST(Isa, DetectionFindsTheExpectedLevel) {
  const char* expected = std::getenv("ORTOPS_EXPECT_ISA");
  if (expected == nullptr) GTEST_SKIP() << "ORTOPS_EXPECT_ISA not set";
  EXPECT_STREQ(IsaName(CpuIsa()), expected);
}

#if defined(__x86_64__)
// CpuIsa reads CPUID and XCR0 itself; libgcc's checks (which include XCR0 too) must agree,
// on every CPU model the tests run on and under Windows as under Linux.
TEST(Isa, DetectionAgreesWithLibgcc) {
  __builtin_cpu_init();
  Isa expected = Isa::kBaseline;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma")) {
    expected = Isa::kAvx512;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    expected = Isa::kAvx2;
  }
  EXPECT_STREQ(IsaName(CpuIsa()), IsaName(expected));
}
#endif

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

std::vector<Tensor> RunNode(const NodeSpec& node, std::vector<Tensor> inputs, int threads = 1) {
  Ort::Session session = MakeSession(MakeModel(node), threads);
  auto memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  std::vector<Ort::Value> values;
  std::vector<const char*> input_names, output_names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    values.push_back(Ort::Value::CreateTensor<float>(memory, inputs[i].data.data(), inputs[i].data.size(),
                                                     inputs[i].shape.data(), inputs[i].shape.size()));
    input_names.push_back(node.inputs[i].first.c_str());
  }
  for (const std::string& name : node.outputs) output_names.push_back(name.c_str());
  auto outputs = session.Run(Ort::RunOptions{}, input_names.data(), values.data(), values.size(), output_names.data(),
                             output_names.size());
  std::vector<Tensor> result;
  for (Ort::Value& value : outputs) {
    const auto info = value.GetTensorTypeAndShapeInfo();
    const float* data = value.GetTensorMutableData<float>();
    result.push_back({info.GetShape(), {data, data + info.GetElementCount()}});
  }
  return result;
}

// Deterministic values in [-1, 1).
std::vector<float> RandomValues(size_t count, uint32_t seed) {
  std::vector<float> values(count);
  for (float& v : values) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<float>(seed >> 8) / static_cast<float>(1 << 23) - 1.0f;
  }
  return values;
}

// Channel counts off every vector width (19) and several threads, so that vector bodies,
// remainders and task splits all run.
TEST(Isa, DeformConvWithZeroOffsetsIsAConvolution) {
  const int64_t c = 19, h = 9, w = 10, out_c = 3, k = 3;
  const Tensor input{{1, c, h, w}, RandomValues(c * h * w, 1)};
  const Tensor weight{{out_c, c, k, k}, RandomValues(out_c * c * k * k, 2)};
  const Tensor offset{{1, 2 * k * k, h, w}, std::vector<float>(2 * k * k * h * w, 0.0f)};
  const Tensor none{{0}, {}};
  const NodeSpec node{"ortops",
                      "DeformConv2d",
                      {{"input", kFloat}, {"offset", kFloat}, {"weight", kFloat}, {"bias", kFloat}, {"mask", kFloat}},
                      {"output"},
                      {{"padding", std::vector<int64_t>{1, 1}}}};
  const std::vector<Tensor> out = RunNode(node, {input, offset, weight, none, none}, 2);
  ASSERT_EQ(out[0].shape, (std::vector<int64_t>{1, out_c, h, w}));
  for (int64_t o = 0; o < out_c; ++o) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        double sum = 0;
        for (int64_t ch = 0; ch < c; ++ch) {
          for (int64_t i = 0; i < k; ++i) {
            for (int64_t j = 0; j < k; ++j) {
              const int64_t yy = y - 1 + i, xx = x - 1 + j;
              if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
              sum += double{weight.data[((o * c + ch) * k + i) * k + j]} * input.data[(ch * h + yy) * w + xx];
            }
          }
        }
        EXPECT_NEAR(out[0].data[(o * h + y) * w + x], sum, 1e-5) << o << " " << y << " " << x;
      }
    }
  }
}

TEST(Isa, CornerPoolIsARunningMaximum) {
  const int64_t n = 2, c = 3, h = 9, w = 37;
  const Tensor input{{n, c, h, w}, RandomValues(n * c * h * w, 3)};
  for (int64_t mode = 0; mode < 4; ++mode) {
    SCOPED_TRACE(mode);
    const NodeSpec node{"mmcv", "MMCVCornerPool", {{"input", kFloat}}, {"output"}, {{"mode", mode}}};
    const std::vector<Tensor> out = RunNode(node, {input}, 2);
    const bool vertical = mode <= 1, backward = mode == 0 || mode == 2;
    const int64_t length = vertical ? h : w;
    for (int64_t plane = 0; plane < n * c; ++plane) {
      for (int64_t across = 0; across < (vertical ? w : h); ++across) {
        float best = -2.0f;
        for (int64_t step = 0; step < length; ++step) {
          const int64_t along = backward ? length - 1 - step : step;
          const int64_t at = plane * h * w + (vertical ? along * w + across : across * w + along);
          best = std::max(best, input.data[at]);
          ASSERT_EQ(out[0].data[at], best) << plane << " " << across << " " << along;
        }
      }
    }
  }
}

TEST(Isa, GridSampleAtThePixelCentresReadsThePixels) {
  const int64_t c = 19, h = 11, w = 13;
  const Tensor input{{1, c, h, w}, RandomValues(c * h * w, 4)};
  Tensor grid{{1, h, w, 2}, {}};
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {  // centres, with align_corners = 0: (2 i + 1) / size - 1
      grid.data.push_back(static_cast<float>(2 * x + 1) / static_cast<float>(w) - 1.0f);
      grid.data.push_back(static_cast<float>(2 * y + 1) / static_cast<float>(h) - 1.0f);
    }
  }
  const NodeSpec node{"mmcv", "grid_sampler", {{"input", kFloat}, {"grid", kFloat}}, {"output"}, {}};
  const std::vector<Tensor> out = RunNode(node, {input, grid}, 2);
  ASSERT_EQ(out[0].data.size(), input.data.size());
  for (size_t i = 0; i < input.data.size(); ++i) EXPECT_NEAR(out[0].data[i], input.data[i], 1e-5) << i;
}

TEST(Isa, RoiAlignOfAConstantMapIsTheConstant) {
  const int64_t c = 19, h = 20, w = 24;
  Tensor input{{1, c, h, w}, {}};
  for (int64_t ch = 0; ch < c; ++ch) input.data.insert(input.data.end(), h * w, 0.25f * static_cast<float>(ch + 1));
  const Tensor rois{{3, 5}, {0, 1, 1, 9, 7, 0, 2.5f, 3, 20, 18, 0, 0, 0, 23, 19}};
  const NodeSpec node{"mmcv",
                      "MMCVRoiAlign",
                      {{"input", kFloat}, {"rois", kFloat}},
                      {"output"},
                      {{"output_height", int64_t{7}},
                       {"output_width", int64_t{5}},
                       {"sampling_ratio", int64_t{2}},
                       {"mode", std::string("avg")},
                       {"aligned", int64_t{1}},
                       {"spatial_scale", 1.0f}}};
  const std::vector<Tensor> out = RunNode(node, {input, rois}, 2);
  ASSERT_EQ(out[0].shape, (std::vector<int64_t>{3, c, 7, 5}));
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t bin = 0; bin < 35; ++bin) {
        EXPECT_NEAR(out[0].data[(r * c + ch) * 35 + bin], 0.25 * static_cast<double>(ch + 1), 1e-6);
      }
    }
  }
}

// Greedy NMS over 300 boxes in clusters (many overlaps), against a loop written here; the
// seed gives no IoU within 1e-3 of the threshold, where float and double could disagree.
TEST(Isa, NmsKeepsWhatAGreedyLoopKeeps) {
  const size_t count = 300;
  const std::vector<float> noise = RandomValues(count * 5, 5);
  std::vector<float> boxes, scores;
  for (size_t i = 0; i < count; ++i) {
    const float cx = 40.0f * static_cast<float>(i % 7) + 5 * noise[5 * i], cy = 30.0f * static_cast<float>(i % 5);
    const float half_w = 12 + 4 * noise[5 * i + 1], half_h = 10 + 4 * noise[5 * i + 2];
    boxes.insert(boxes.end(), {cx - half_w, cy - half_h + 3 * noise[5 * i + 3], cx + half_w, cy + half_h});
    scores.push_back(noise[5 * i + 4]);
  }
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  const auto iou = [&](size_t a, size_t b) {
    const float* p = &boxes[4 * a];
    const float* q = &boxes[4 * b];
    const double iw = std::max(0.0, double{std::min(p[2], q[2])} - std::max(p[0], q[0]));
    const double ih = std::max(0.0, double{std::min(p[3], q[3])} - std::max(p[1], q[1]));
    const double area_p = double{p[2] - p[0]} * (p[3] - p[1]), area_q = double{q[2] - q[0]} * (q[3] - q[1]);
    return iw * ih / (area_p + area_q - iw * ih);
  };
  std::vector<int64_t> expected;
  std::vector<bool> suppressed(count, false);
  for (size_t a : order) {
    if (suppressed[a]) continue;
    expected.push_back(static_cast<int64_t>(a));
    for (size_t b : order) {
      if (b == a || suppressed[b]) continue;
      const double value = iou(a, b);
      ASSERT_GT(std::abs(value - 0.5), 1e-3) << "a borderline pair: pick another seed";
      if (value > 0.5) suppressed[b] = true;
    }
  }
  ASSERT_GT(expected.size(), 20u);  // the clusters overlap, but not all into one box
  ASSERT_LT(expected.size(), count / 2);
  Ort::Session session = MakeSession(MakeModel(NmsNode()));
  std::vector<int64_t> kept = RunNms(session, boxes, scores);
  std::sort(kept.begin(), kept.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(kept, expected);
}

}  // namespace
}  // namespace ortops
