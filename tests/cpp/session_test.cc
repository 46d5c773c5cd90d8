// libortops.so loaded into a real ONNX Runtime session, the way every user loads it.
#include <gtest/gtest.h>
#include <onnxruntime_cxx_api.h>

#include <array>
#include <string>
#include <thread>
#include <vector>

#include "onnx_model.h"
#include "op_table.h"

namespace ortops {
namespace {

using testing::MakeModel;
using testing::NodeSpec;

constexpr int kFloat = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

Ort::Env& Env() {
  static Ort::Env env(ORT_LOGGING_LEVEL_FATAL, "ortops_tests");
  return env;
}

Ort::Session MakeSession(const std::string& model, int threads = 1) {
  Ort::SessionOptions options;
  options.SetIntraOpNumThreads(threads);
  options.RegisterCustomOpsLibrary(ORTOPS_LIBRARY_PATH);
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
  const int64_t* data = outputs[0].GetTensorData<int64_t>();
  return {data, data + count};
}

// Two overlapping boxes (IoU 81/119 > 0.5) and one apart; the second-best overlapping one goes.
const std::vector<float> kBoxes{0, 0, 10, 10, 20, 20, 30, 30, 1, 1, 11, 11};
const std::vector<float> kScores{0.9f, 0.7f, 0.8f};
const std::vector<int64_t> kKept{0, 1};

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
      options[t].RegisterCustomOpsLibrary(ORTOPS_LIBRARY_PATH);
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

}  // namespace
}  // namespace ortops
