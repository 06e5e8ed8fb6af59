#include "kiln/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "kiln/safetensors.h"
#include "test_util.h"

namespace kiln::training {
namespace {

namespace fs = std::filesystem;

class Checkpoint : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  kiln::test::TempDir dir_;
};

using kiln::test::error_message;
using kiln::test::expect_error;
using kiln::test::has;

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// Two trainable parameters and a frozen one, as a small classifier with a fixed embedding has.
CheckpointState make_state() {
  CheckpointState s;
  s.add_parameter(
      Parameter("fc.weight", Tensor::from_vector<float>({2, 3}, {0.1f, -0.2f, 0.3f, 1e-30f, -0.0f, 7.5f}), true));
  s.add_parameter(Parameter("embedding", Tensor::from_vector<double>({2, 2}, {1.0 / 3, 2, 3, 4}), false));
  s.add_parameter(Parameter("fc.bias", Tensor::from_vector<float>({3}, {1, 2, 3}), true));
  s.add_parameter(Parameter("steps_seen", Tensor::scalar<int64_t>(int64_t{1} << 40), false));
  return s;
}

// AdamW's two slots for the trainable parameters, SGD's one: deterministic values.
OptimizerState adamw_state(const CheckpointState& s) {
  OptimizerState o;
  o.type = "AdamW";
  o.step = 7;
  o.learning_rate = 1e-3f;
  for (const std::string name : {"fc.weight", "fc.bias"}) {
    const Parameter& p = s.parameter(name);
    Tensor m = Tensor::empty(DType::Float32, p.shape());
    Tensor v = Tensor::empty(DType::Float32, p.shape());
    for (int64_t i = 0; i < m.numel(); ++i) {
      m.data<float>()[i] = 0.5f * static_cast<float>(i) - 1.0f;
      v.data<float>()[i] = 0.25f * static_cast<float>(i * i);
    }
    o.slots["exp_avg"][name] = m;
    o.slots["exp_avg_sq"][name] = v;
  }
  return o;
}

void expect_same_parameters(const CheckpointState& a, const CheckpointState& b) {
  ASSERT_EQ(a.parameter_names(), b.parameter_names());
  for (const std::string& name : a.parameter_names()) {
    SCOPED_TRACE(name);
    const Parameter& x = a.parameter(name);
    const Parameter& y = b.parameter(name);
    EXPECT_EQ(x.name(), y.name());
    EXPECT_EQ(x.dtype(), y.dtype());
    EXPECT_EQ(x.shape(), y.shape());
    EXPECT_EQ(x.requires_grad(), y.requires_grad());
    ASSERT_EQ(x.has_data(), y.has_data());
    if (x.has_data()) {
      EXPECT_EQ(bytes_of(x.data()), bytes_of(y.data()));  // bit for bit
    }
  }
}

std::vector<std::string> tensor_names(const std::string& file) {
  std::vector<std::string> names;
  for (const auto& entry : read_safetensors(file).tensors) names.push_back(entry.first);
  return names;
}

TEST_F(Checkpoint, RoundTripsParametersAndPropertiesOfAllTypes) {
  CheckpointState s = make_state();
  s.properties().set("epoch", int64_t{3});
  s.properties().set("min_int", std::numeric_limits<int64_t>::min());
  s.properties().set("max_int", std::numeric_limits<int64_t>::max());
  s.properties().set("best", 0.1f);
  s.properties().set("three", 3.0f);
  s.properties().set("tiny", std::numeric_limits<float>::denorm_min());
  s.properties().set("huge", std::numeric_limits<float>::max());
  s.properties().set("neg_zero", -0.0f);
  s.properties().set("nan", std::numeric_limits<float>::quiet_NaN());
  s.properties().set("inf", -std::numeric_limits<float>::infinity());
  s.properties().set("run", std::string("mnist-α \"1\"\n"));
  s.parameter("fc.bias").grad() = Tensor::from_vector<float>({3}, {9, 9, 9});  // never saved
  CheckpointState::save_checkpoint(s, path("ckpt"));

  const CheckpointState t = CheckpointState::load_checkpoint(path("ckpt"));
  expect_same_parameters(s, t);
  EXPECT_EQ(t.parameter_names(), (std::vector<std::string>{"fc.weight", "embedding", "fc.bias", "steps_seen"}));
  EXPECT_TRUE(t.parameter("fc.weight").requires_grad());
  EXPECT_FALSE(t.parameter("embedding").requires_grad());
  EXPECT_FALSE(t.parameter("fc.bias").grad().defined());
  EXPECT_FALSE(t.is_nominal());
  EXPECT_TRUE(t.optimizer_state().empty());

  const PropertyBag& p = t.properties();
  EXPECT_EQ(p.size(), 11u);
  EXPECT_EQ(p.get_as<int64_t>("epoch"), 3);
  EXPECT_EQ(p.get_as<int64_t>("min_int"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(p.get_as<int64_t>("max_int"), std::numeric_limits<int64_t>::max());
  for (const char* name : {"best", "three", "tiny", "huge", "neg_zero", "inf"}) {
    const float a = s.properties().get_as<float>(name), b = p.get_as<float>(name);
    EXPECT_EQ(std::memcmp(&a, &b, sizeof(float)), 0) << name << ": " << a << " vs " << b;
  }
  EXPECT_TRUE(std::isnan(p.get_as<float>("nan")));
  EXPECT_EQ(p.get_as<std::string>("run"), "mnist-α \"1\"\n");

  // The stored JSON keeps the types: 3 stays an integer, 3.0f a float, text a string.
  const SafetensorsFile f = read_safetensors(path("ckpt"));
  EXPECT_EQ(f.metadata.at("format"), "kiln.checkpoint");
  EXPECT_EQ(f.metadata.at("kiln.version"), "0.1.0");
  EXPECT_EQ(f.metadata.at("kiln.trainable"), R"(["fc.weight","fc.bias"])");
  EXPECT_EQ(f.metadata.at("kiln.frozen"), R"(["embedding","steps_seen"])");
  const std::string& props = f.metadata.at("kiln.properties");
  EXPECT_TRUE(has(props, R"("epoch":3,)")) << props;
  EXPECT_TRUE(has(props, R"("three":3.0,)")) << props;
  EXPECT_TRUE(has(props, R"("best":0.10000000149011612,)")) << props;
  EXPECT_TRUE(has(props, R"("nan":{"float":"nan"})")) << props;
  EXPECT_EQ(f.metadata.count("kiln.optimizer"), 0u);
  EXPECT_EQ(f.metadata.count("kiln.nominal"), 0u);
  EXPECT_EQ(tensor_names(path("ckpt")), t.parameter_names());
}

TEST_F(Checkpoint, AdamWStateRoundTripsAndIsLeftOutOnRequest) {
  CheckpointState s = make_state();
  s.optimizer_state() = adamw_state(s);
  CheckpointState::save_checkpoint(s, path("with"), true);
  const CheckpointState t = CheckpointState::load_checkpoint(path("with"));
  expect_same_parameters(s, t);
  const OptimizerState& o = t.optimizer_state();
  EXPECT_EQ(o.type, "AdamW");
  EXPECT_EQ(o.step, 7);
  EXPECT_EQ(o.learning_rate, 1e-3f);
  ASSERT_EQ(o.slots.size(), 2u);
  for (const auto& [slot, per_param] : s.optimizer_state().slots) {
    ASSERT_EQ(o.slots.at(slot).size(), 2u) << slot;
    for (const auto& [name, tensor] : per_param) {
      EXPECT_EQ(o.slots.at(slot).at(name).shape(), tensor.shape());
      EXPECT_EQ(bytes_of(o.slots.at(slot).at(name)), bytes_of(tensor)) << slot << " " << name;
    }
  }
  EXPECT_EQ(tensor_names(path("with")),
            (std::vector<std::string>{"fc.weight", "embedding", "fc.bias", "steps_seen", "optimizer.exp_avg.fc.weight",
                                      "optimizer.exp_avg.fc.bias", "optimizer.exp_avg_sq.fc.weight",
                                      "optimizer.exp_avg_sq.fc.bias"}));
  EXPECT_EQ(read_safetensors(path("with")).metadata.at("kiln.optimizer"),
            R"({"type":"AdamW","step":7,"learning_rate":0.0010000000474974513,"slots":["exp_avg","exp_avg_sq"]})");

  CheckpointState::save_checkpoint(s, path("without"), false);
  EXPECT_TRUE(CheckpointState::load_checkpoint(path("without")).optimizer_state().empty());
  EXPECT_EQ(tensor_names(path("without")), s.parameter_names());
  EXPECT_EQ(read_safetensors(path("without")).metadata.count("kiln.optimizer"), 0u);
}

TEST_F(Checkpoint, SgdStateWithOneSlot) {
  CheckpointState s = make_state();
  OptimizerState& o = s.optimizer_state();
  o.type = "SGD";
  o.step = 12;
  o.learning_rate = 0.05f;
  o.slots["momentum_buffer"]["fc.bias"] = Tensor::from_vector<float>({3}, {-1, 0, 1});
  CheckpointState::save_checkpoint(s, path("sgd"), true);
  const CheckpointState t = CheckpointState::load_checkpoint(path("sgd"));
  EXPECT_EQ(t.optimizer_state().type, "SGD");
  EXPECT_EQ(t.optimizer_state().step, 12);
  EXPECT_EQ(t.optimizer_state().learning_rate, 0.05f);
  ASSERT_EQ(t.optimizer_state().slots.size(), 1u);
  const auto& slot = t.optimizer_state().slots.at("momentum_buffer");
  ASSERT_EQ(slot.size(), 1u);
  EXPECT_EQ(slot.at("fc.bias").to_int64_vector(), (std::vector<int64_t>{-1, 0, 1}));
}

TEST_F(Checkpoint, NominalStateHasNoTensorsAndLoadsWithoutData) {
  CheckpointState s;
  s.add_parameter(Parameter::nominal("w", DType::Float32, {4, 3}, true));
  s.add_parameter(Parameter::nominal("b", DType::BFloat16, {}, false));
  s.add_parameter(Parameter::nominal("e", DType::Int64, {0, 2}, true));
  s.properties().set("epoch", int64_t{0});
  ASSERT_TRUE(s.is_nominal());
  CheckpointState::save_checkpoint(s, path("nominal"), true);
  const SafetensorsFile f = read_safetensors(path("nominal"));
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_EQ(f.metadata.at("kiln.nominal"),
            R"({"w":{"dtype":"F32","shape":[4,3]},"b":{"dtype":"BF16","shape":[]},"e":{"dtype":"I64","shape":[0,2]}})");

  CheckpointState t = CheckpointState::load_checkpoint(path("nominal"));
  expect_same_parameters(s, t);
  EXPECT_TRUE(t.is_nominal());
  EXPECT_EQ(t.properties().get_as<int64_t>("epoch"), 0);
  expect_error<InvalidArgument>([&] { t.parameter("w").data(); }, {"'w'", "no data"});
  t.parameter("w").set_data(Tensor::zeros(DType::Float32, {4, 3}));
  EXPECT_TRUE(t.parameter("w").has_data());
  EXPECT_FALSE(t.is_nominal());

  // Only "w" has data now: neither full nor nominal.
  const std::string mixed = error_message<InvalidArgument>([&] { CheckpointState::save_checkpoint(t, path("mixed")); });
  EXPECT_TRUE(has(mixed, "'b'")) << mixed;
  EXPECT_FALSE(fs::exists(path("mixed")));

  // An empty state is nominal too and round-trips.
  CheckpointState::save_checkpoint(CheckpointState(), path("empty"));
  EXPECT_TRUE(CheckpointState::load_checkpoint(path("empty")).parameters().empty());
}

TEST_F(Checkpoint, OptimizerKeyCollisionAndBadSlotsAreRefused) {
  CheckpointState s = make_state();
  s.add_parameter(Parameter("optimizer.exp_avg.fc.bias", Tensor::scalar<float>(0), false));
  s.optimizer_state() = adamw_state(s);
  expect_error<InvalidArgument>([&] { CheckpointState::save_checkpoint(s, path("c"), true); },
                                "'optimizer.exp_avg.fc.bias'");
  CheckpointState::save_checkpoint(s, path("c"), false);  // without the optimizer there is no clash
  EXPECT_EQ(CheckpointState::load_checkpoint(path("c")).parameters().size(), 5u);

  CheckpointState u = make_state();
  u.optimizer_state() = adamw_state(u);
  u.optimizer_state().slots["exp_avg"]["ghost"] = Tensor::scalar<float>(1);
  expect_error<InvalidArgument>([&] { CheckpointState::save_checkpoint(u, path("g"), true); }, "'ghost'");
  u.optimizer_state() = adamw_state(u);
  u.optimizer_state().slots["a.b"]["fc.bias"] = Tensor::scalar<float>(1);
  expect_error<InvalidArgument>([&] { CheckpointState::save_checkpoint(u, path("g"), true); }, "'a.b'");
}

TEST_F(Checkpoint, LookupsAndSetDataErrorsNameWhatIsWrong) {
  CheckpointState s = make_state();
  expect_error<KeyError>([&] { s.parameter("fc.wieght"); }, "'fc.wieght'");
  expect_error<KeyError>([&] { s.properties().get("epoch"); }, "'epoch'");
  s.properties().set("epoch", int64_t{2});
  expect_error<TypeError>([&] { s.properties().get_as<float>("epoch"); }, "'epoch' is int64, read as float");
  expect_error<InvalidArgument>([&] { s.add_parameter(Parameter("fc.bias", Tensor::scalar<float>(0), true)); },
                                "'fc.bias'");

  Parameter& w = s.parameter("fc.weight");
  expect_error<ShapeError>(
      [&] {
        w.set_data(Tensor::zeros(DType::Float32, {3, 2}));
      },
      {"'fc.weight'", "[2, 3]", "[3, 2]"});
  expect_error<TypeError>(
      [&] {
        w.set_data(Tensor::zeros(DType::Float64, {2, 3}));
      },
      {"'fc.weight'", "float[2, 3]", "double[2, 3]"});

  // set_data writes into the existing buffer: a view taken before sees the new values.
  const Tensor view = w.data().reshape({6});
  w.set_data(Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6}).permute({1, 0}));
  EXPECT_EQ(view.to_int64_vector(), (std::vector<int64_t>{1, 3, 5, 2, 4, 6}));
  EXPECT_EQ(w.data().storage(), view.storage());
}

TEST_F(Checkpoint, MissingAndForeignFiles) {
  // An IOError, not its subclass CorruptFile: a missing file is not corrupt.
  expect_error<IOError>([&] { CheckpointState::load_checkpoint(path("none")); }, path("none"));

  std::ofstream(path("text"), std::ios::binary) << "definitely not safetensors";
  expect_error<CorruptFile>([&] { CheckpointState::load_checkpoint(path("text")); }, path("text"));

  // A valid safetensors file that some other program wrote.
  write_safetensors(path("hf.safetensors"), {{"w", Tensor::scalar<float>(1)}}, {{"format", "pt"}});
  expect_error<CorruptFile>([&] { CheckpointState::load_checkpoint(path("hf.safetensors")); },
                            {path("hf.safetensors"), "not a valid Kiln checkpoint", "\"format\": \"pt\""});
  write_safetensors(path("bare.safetensors"), {{"w", Tensor::scalar<float>(1)}});
  expect_error<CorruptFile>([&] { CheckpointState::load_checkpoint(path("bare.safetensors")); }, "no \"format\"");
}

// Metadata that parses but contradicts the tensors: each a CorruptFile naming the file and what.
TEST_F(Checkpoint, InconsistentMetadataIsCorruptFile) {
  const Tensor one = Tensor::scalar<float>(1);
  auto meta = [](std::map<std::string, std::string> extra) {
    std::map<std::string, std::string> m = {
        {"format", "kiln.checkpoint"}, {"kiln.trainable", R"(["w"])"}, {"kiln.frozen", "[]"}};
    for (auto& [k, v] : extra) m[k] = v;
    return m;
  };
  struct Case {
    const char* label;
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> metadata;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"listed without tensor", {}, meta({}), "'w' is listed in \"kiln.trainable\" but the file has no tensor"},
      {"unlisted tensor", {{"w", one}, {"x", one}}, meta({}), "tensor 'x' is neither"},
      {"slot without optimizer", {{"w", one}, {"optimizer.exp_avg.w", one}}, meta({}), "'optimizer.exp_avg.w'"},
      {"slot of unknown parameter",
       {{"w", one}, {"optimizer.exp_avg.v", one}},
       meta({{"kiln.optimizer", R"({"type":"AdamW","step":1,"learning_rate":0.5,"slots":["exp_avg"]})"}}),
       "'optimizer.exp_avg.v'"},
      {"both lists", {{"w", one}}, meta({{"kiln.frozen", R"(["w"])"}}), "'w' is listed in both"},
      {"no trainable list",
       {{"w", one}},
       {{"format", "kiln.checkpoint"}, {"kiln.frozen", "[]"}},
       "no \"kiln.trainable\""},
      {"bad JSON list", {{"w", one}}, meta({{"kiln.trainable", "[\"w\""}}), "\"kiln.trainable\" is not valid JSON"},
      {"list of numbers", {{"w", one}}, meta({{"kiln.trainable", "[1]"}}), "not a string"},
      {"bad properties JSON", {{"w", one}}, meta({{"kiln.properties", "{"}}), "\"kiln.properties\" is not valid JSON"},
      {"boolean property", {{"w", one}}, meta({{"kiln.properties", R"({"p":true})"}}), "property 'p'"},
      {"float out of range", {{"w", one}}, meta({{"kiln.properties", R"({"p":1e300})"}}), "outside the range of float"},
      {"optimizer without step",
       {{"w", one}},
       meta({{"kiln.optimizer", R"({"type":"SGD","learning_rate":0.5,"slots":[]})"}}),
       "has no \"step\""},
      {"nominal with tensors",
       {{"w", one}},
       meta({{"kiln.nominal", R"({"w":{"dtype":"F32","shape":[]}})"}}),
       "nominal"},
      {"nominal unlisted",
       {},
       meta({{"kiln.nominal", R"({"w":{"dtype":"F32","shape":[]},"v":{"dtype":"F32","shape":[]}})"}}),
       "'v'"},
      {"nominal missing", {}, meta({{"kiln.nominal", "{}"}}), "no \"kiln.nominal\" entry"},
      {"nominal bad dtype", {}, meta({{"kiln.nominal", R"({"w":{"dtype":"F33","shape":[]}})"}}), "'F33'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    write_safetensors(path("bad"), c.tensors, c.metadata);
    const std::string message = error_message<CorruptFile>([&] { CheckpointState::load_checkpoint(path("bad")); });
    EXPECT_TRUE(has(message, path("bad"))) << message;
    EXPECT_TRUE(has(message, c.expected)) << message << "\nlacks: " << c.expected;
  }
}

// The reader printed in docs/checkpoint.md, run by NumPy on a checkpoint Kiln wrote: the file is a
// real safetensors file and the documented reader is right.
TEST_F(Checkpoint, NumpyReaderFromTheDocsReadsIt) {
  std::ifstream doc(std::string(KILN_SOURCE_DIR) + "/docs/checkpoint.md");
  const std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  const size_t begin = text.find("```python\n");
  ASSERT_NE(begin, std::string::npos) << "docs/checkpoint.md has no python block";
  const size_t end = text.find("```", begin + 10);
  const std::string reader = text.substr(begin + 10, end - begin - 10);

  CheckpointState s = make_state();
  s.add_parameter(Parameter(
      "half", Tensor::from_vector<Half>({3}, {float_to_half(0.5f), float_to_half(-2.0f), float_to_half(65504.0f)}),
      true));
  s.add_parameter(Parameter("empty", Tensor::empty(DType::Float32, {0, 4}), true));
  s.properties().set("epoch", int64_t{5});
  s.properties().set("best", 0.1f);
  s.optimizer_state() = adamw_state(s);
  CheckpointState::save_checkpoint(s, path("ckpt"), true);

  // The script checks the layout itself and prints every value for the comparison below.
  const std::string script = reader + R"(
import sys
path = sys.argv[1]
tensors, metadata = read_safetensors(path)
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
assert (8 + n) % 8 == 0 and sum(t.nbytes for t in tensors.values()) == len(raw) - 8 - n
print(json.dumps({"names": list(tensors), "metadata": metadata,
                  "shapes": {k: list(v.shape) for k, v in tensors.items()},
                  "values": {k: v.astype(np.float64).ravel().tolist() for k, v in tensors.items()}}))
)";
  std::string quoted;
  for (char c : script) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  const std::string command = "/usr/bin/python3 -c '" + quoted + "' '" + path("ckpt") + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  ASSERT_EQ(::pclose(pipe), 0) << output;

  const nlohmann::json j = nlohmann::json::parse(output);
  const SafetensorsFile f = read_safetensors(path("ckpt"));
  std::vector<std::string> names;
  for (const auto& [name, t] : f.tensors) names.push_back(name);
  EXPECT_EQ(j["names"].get<std::vector<std::string>>(), names);
  EXPECT_EQ((j["metadata"].get<std::map<std::string, std::string>>()), f.metadata);
  EXPECT_EQ(nlohmann::json::parse(j["metadata"]["kiln.properties"].get<std::string>())["best"].get<double>(),
            static_cast<double>(0.1f));
  for (const auto& [name, t] : f.tensors) {
    SCOPED_TRACE(name);
    EXPECT_EQ(j["shapes"][name].get<Shape>(), t.shape());
    const auto values = j["values"][name].get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(values.size()), t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(values[static_cast<size_t>(i)], t.item_as_double(i)) << i;
  }
  EXPECT_EQ(j["values"]["half"], nlohmann::json::parse("[0.5, -2.0, 65504.0]"));
  EXPECT_EQ(j["values"]["steps_seen"], nlohmann::json::parse("[1099511627776.0]"));
}

}  // namespace
}  // namespace kiln::training
