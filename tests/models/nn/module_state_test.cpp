// Module state: torch's state_dict order and keys, load_state_dict's messages and conversions,
// safetensors and .npz weight files, get_submodule / repr, and the seeded initialisers.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "data/data_test_util.h"
#include "kiln/safetensors.h"
#include "models/nn/nn_test_modules.h"
#include "test_util.h"

namespace kiln::nn {
namespace {

using kiln::test::error_message;
using kiln::test::expect_error;
using kiln::test::has;
using namespace kiln::nn::testing;

// A module with its own parameter and buffers before its children, to check torch's order.
class Block : public Module {
 public:
  Block() {
    register_parameter("scale", Tensor::from_vector<float>({2}, {1, 2}));
    register_buffer("count", Tensor::scalar<int64_t>(0));
    register_buffer("scratch", Tensor::zeros(DType::Float32, {2}), false);
    register_module("bn", std::make_shared<TBatchNorm1d>(2));
    register_module("fc", std::make_shared<TLinear>(2, 1));
  }
  std::vector<Var> forward(Tracer&, const std::vector<Var>& x) override { return x; }
  std::string type_name() const override { return "Block"; }
};

std::vector<std::string> keys_of(Module& m) {
  std::vector<std::string> keys;
  for (const auto& [k, t] : m.state_dict()) keys.push_back(k);
  return keys;
}

std::map<std::string, Tensor> as_map(const StateDict& sd) {
  std::map<std::string, Tensor> m;
  for (const auto& [k, t] : sd) m[k] = t.clone();
  return m;
}

TEST(NnState, StateDictHasTorchsOrderAndKeys) {
  Block b;
  EXPECT_EQ(keys_of(b), (std::vector<std::string>{"scale", "count", "bn.weight", "bn.bias", "bn.running_mean",
                                                  "bn.running_var", "bn.num_batches_tracked", "fc.weight", "fc.bias"}));
  std::vector<std::string> params, buffers, modules;
  for (const auto& [k, t] : b.named_parameters()) params.push_back(k);
  for (const auto& [k, t] : b.named_buffers()) buffers.push_back(k);
  for (const auto& [k, m] : b.named_modules()) modules.push_back(k);
  EXPECT_EQ(params, (std::vector<std::string>{"scale", "bn.weight", "bn.bias", "fc.weight", "fc.bias"}));
  EXPECT_EQ(buffers, (std::vector<std::string>{"count", "scratch", "bn.running_mean", "bn.running_var",
                                               "bn.num_batches_tracked"}));
  EXPECT_EQ(modules, (std::vector<std::string>{"", "bn", "fc"}));
  EXPECT_EQ(b.num_parameters(), 2 + 2 + 2 + 2 + 1);
}

TEST(NnState, LoadStateDictErrorsAreTorchs) {
  manual_seed(0);
  Sequential net(std::vector<ModulePtr>{std::make_shared<TLinear>(3, 2), std::make_shared<TLinear>(2, 1)});
  auto state = as_map(net.state_dict());
  state.erase("1.weight");
  state["2.weight"] = Tensor::zeros(DType::Float32, {1});
  const std::string msg = error_message<InvalidArgument>([&] { net.load_state_dict(state); });
  EXPECT_EQ(msg,
            "Error(s) in loading state_dict for Sequential:\n\tMissing key(s) in state_dict: \"1.weight\". \n\t"
            "Unexpected key(s) in state_dict: \"2.weight\". ");
  // Not strict: the lists come back and the present keys are loaded.
  state["0.bias"] = Tensor::from_vector<float>({2}, {7, 8});
  IncompatibleKeys r = net.load_state_dict(state, false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"1.weight"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"2.weight"}));
  EXPECT_EQ(net.get_parameter("0.bias").item_as_double(1), 8.0);
  // A size mismatch is an error whatever `strict` says, and nothing is loaded.
  state = as_map(net.state_dict());
  state["0.weight"] = Tensor::zeros(DType::Float32, {2, 4});
  state["0.bias"] = Tensor::from_vector<float>({2}, {-1, -1});
  const std::string mm = error_message<InvalidArgument>([&] { net.load_state_dict(state, false); });
  EXPECT_EQ(mm,
            "Error(s) in loading state_dict for Sequential:\n\tsize mismatch for 0.weight: copying a param with "
            "shape [2, 4] from checkpoint, the shape in current model is [2, 3].");
  EXPECT_EQ(net.get_parameter("0.bias").item_as_double(0), 7.0);
}

TEST(NnState, LoadConvertsDtypesAsCopyDoes) {
  TBatchNorm1d bn(2);
  std::map<std::string, Tensor> state = as_map(bn.state_dict());
  state["weight"] = Tensor::from_vector<double>({2}, {0.1, 3.5});
  state["num_batches_tracked"] = Tensor::scalar<int32_t>(41);
  bn.load_state_dict(state);
  EXPECT_EQ(bn.get_parameter("weight").dtype(), DType::Float32);
  EXPECT_FLOAT_EQ(float(bn.get_parameter("weight").item_as_double(0)), 0.1f);
  for (auto& [k, t] : bn.named_buffers())
    if (k == "num_batches_tracked") {
      EXPECT_EQ(t->dtype(), DType::Int64);
      EXPECT_EQ(t->data<int64_t>()[0], 41);
    }
}

TEST(NnState, SafetensorsRoundTrip) {
  manual_seed(5);
  Block a;
  const kiln::test::TempDir tmp;
  const std::string path = (tmp / "block.safetensors").string();
  a.save_safetensors(path);
  SafetensorsFile f = read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 9u);
  EXPECT_EQ(f.tensors[0].first, "scale");
  manual_seed(6);
  Block b;
  EXPECT_NE(b.get_parameter("fc.weight").item_as_double(0), a.get_parameter("fc.weight").item_as_double(0));
  EXPECT_TRUE(b.load_safetensors(path).ok());
  EXPECT_EQ(b.get_parameter("fc.weight").item_as_double(1), a.get_parameter("fc.weight").item_as_double(1));
  auto w = load_weights_file(path);
  EXPECT_EQ(w.size(), 9u);
  // Errors name the file.
  expect_error<IOError>([&] { load_weights_file(path + ".missing"); }, path + ".missing");
  kiln::data::testing::write_file(path + ".bad", std::string("\x10\0\0\0\0\0\0\0{\"a\":", 14));
  expect_error<CorruptFile>([&] { load_weights_file(path + ".bad"); }, path + ".bad");
}

TEST(NnState, NpzWeightsFromNumpy) {
  const kiln::test::TempDir dir;
  for (const char* fn : {"savez", "savez_compressed"}) {
    const std::string path = (dir / (std::string("kiln_nn_") + fn + ".npz")).string();
    kiln::data::testing::run_python(
        std::string("import numpy as np; np.") + fn + "('" + path +
        "', **{'0.weight': np.arange(6, dtype=np.float64).reshape(2, 3) / 8, '0.bias': np.array([1.5, -2], "
        "dtype=np.float32), '1.weight': np.ones((1, 2), np.float32), '1.bias': np.zeros(1, np.float32)})");
    auto w = load_weights_file(path);
    ASSERT_EQ(w.size(), 4u);
    EXPECT_EQ(w.at("0.weight").dtype(), DType::Float64);
    Sequential net(std::vector<ModulePtr>{std::make_shared<TLinear>(3, 2), std::make_shared<TLinear>(2, 1)});
    EXPECT_TRUE(net.load_state_dict(w).ok());
    EXPECT_FLOAT_EQ(float(net.get_parameter("0.weight").item_as_double(5)), 5.0f / 8);
    EXPECT_FLOAT_EQ(float(net.get_parameter("0.bias").item_as_double(1)), -2.0f);
  }
}

TEST(NnState, GetSubmoduleAndRepr) {
  auto inner =
      std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<TLinear>(4, 2), std::make_shared<TRelu>()});
  Sequential net(
      std::vector<std::pair<std::string, ModulePtr>>{{"features", inner}, {"head", std::make_shared<TLinear>(2, 1)}});
  EXPECT_EQ(net.get_submodule("features.0")->type_name(), "Linear");
  EXPECT_EQ(error_message<KeyError>([&] { net.get_submodule("features.5"); }), "Sequential has no attribute `5`");
  EXPECT_EQ(error_message<KeyError>([&] { net.get_submodule("head.weight"); }), "`weight` is not an nn.Module");
  EXPECT_EQ(error_message<KeyError>([&] { net.get_parameter("head.gamma"); }), "Linear has no attribute `gamma`");
  EXPECT_EQ(net.repr(),
            "Sequential(\n"
            "  (features): Sequential(\n"
            "    (0): Linear(in_features=4, out_features=2, bias=True)\n"
            "    (1): ReLU()\n"
            "  )\n"
            "  (head): Linear(in_features=2, out_features=1, bias=True)\n"
            ")");
  expect_error<KeyError>([&] { net.add_module("head", std::make_shared<TRelu>()); }, "'head' already exists");
  expect_error<KeyError>([&] { net.add_module("a.b", std::make_shared<TRelu>()); }, "can't contain \".\"");
  ModuleDict d({{"a", std::make_shared<TRelu>()}});
  EXPECT_TRUE(d.contains("a"));
  expect_error<KeyError>([&] { d.at("b"); }, "no key 'b' (keys: a)");
}

TEST(NnInit, SeededAndWithinTorchsBounds) {
  Tensor w = Tensor::empty(DType::Float32, {16, 8, 3, 3});
  EXPECT_EQ(fan_in_and_fan_out(w), (std::pair<int64_t, int64_t>{72, 144}));
  manual_seed(42);
  kaiming_uniform_(w, std::sqrt(5.0));
  const double bound = 1.0 / std::sqrt(72.0);  // torch: gain sqrt(2 / 6) * sqrt(3 / fan_in)
  double lo = 1, hi = -1, sum = 0, sq = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double v = w.item_as_double(i);
    lo = std::min(lo, v), hi = std::max(hi, v), sum += v, sq += v * v;
  }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.95 * bound);  // 1152 draws reach the ends
  EXPECT_GT(hi, 0.95 * bound);
  // Uniform variance bound^2 / 3 within 10%.
  EXPECT_NEAR(sq / double(w.numel()), bound * bound / 3, 0.1 * bound * bound / 3);
  manual_seed(42);
  Tensor w2 = Tensor::empty(DType::Float32, {16, 8, 3, 3});
  kaiming_uniform_(w2, std::sqrt(5.0));
  EXPECT_EQ(w2.item_as_double(100), w.item_as_double(100));

  Tensor n = Tensor::empty(DType::Float64, {20000});
  trunc_normal_(n, 0.0, 1.0, -2.0, 2.0);
  double m = 0, v = 0;
  for (int64_t i = 0; i < n.numel(); ++i) {
    const double x = n.item_as_double(i);
    ASSERT_TRUE(x >= -2.0 && x <= 2.0);
    m += x, v += x * x;
  }
  m /= double(n.numel()), v /= double(n.numel());
  EXPECT_NEAR(m, 0.0, 0.03);
  EXPECT_NEAR(v, 0.7737, 0.03);  // variance of N(0, 1) truncated to [-2, 2]
  expect_error<InvalidArgument>(
      [&] {
        Tensor b = Tensor::empty(DType::Float32, {3});
        kaiming_uniform_(b, 0);
      },
      "fewer than 2 dimensions");
}

}  // namespace
}  // namespace kiln::nn
