// kiln::nn's MultiheadAttention / TransformerEncoderLayer / TransformerDecoderLayer: torch's
// state_dict layout and initialisation, option and input errors, and the exported graph run in a
// Session against a double-precision transcription of torch's multi_head_attention_forward.
// (Parity with torch itself: tests/python/test_nn_transformer.py.)
#include "kiln/nn/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>

#include "kiln/session.h"
#include "test_util.h"

namespace {

using namespace kiln;
using kiln::test::expect_error;
using namespace kiln::nn;

Tensor random_tensor(Shape shape, std::mt19937& gen, double scale = 1.0) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(scale) * dist(gen);
  return t;
}

// Every parameter random (non-zero biases, so that a bias applied in the wrong place shows).
void randomize(Module& m, std::mt19937& gen) {
  std::map<std::string, Tensor> state;
  for (auto& [key, value] : m.state_dict()) state[key] = random_tensor(value.shape(), gen, 0.5);
  m.load_state_dict(state);
}

Model trace(const std::function<std::vector<Var>(Tracer&)>& body) {
  Tracer t;
  const std::vector<Var> out = body(t);
  for (size_t i = 0; i < out.size(); ++i) t.output(out[i], "out" + std::to_string(i));
  return t.finish();
}

std::vector<std::string> keys(Module& m) {
  std::vector<std::string> k;
  for (auto& [key, value] : m.state_dict()) k.push_back(key + to_string(value.shape()));
  return k;
}

// torch's multi_head_attention_forward in double for batch-first [N, L, E] query and [N, S, E]
// key/value; `mask(n, h, i, j)` is added to the scores (-inf masks). Returns the output [N, L, E]
// and the attention weights [N, H, L, S].
struct Reference {
  std::vector<double> out, weights;
};
Reference reference_mha(Module& m, const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                        const std::function<double(int64_t, int64_t, int64_t, int64_t)>& mask) {
  const int64_t n = q.dim(0), l = q.dim(1), s = k.dim(1), e = q.dim(2), d = e / heads;
  const Tensor& w = m.get_parameter("in_proj_weight");
  const Tensor& b = m.get_parameter("in_proj_bias");
  const Tensor& wo = m.get_parameter("out_proj.weight");
  const Tensor& bo = m.get_parameter("out_proj.bias");
  auto project = [&](const Tensor& x, int64_t len, int64_t part) {  // x W_part^T + b_part: [N, len, E]
    std::vector<double> y(static_cast<size_t>(n * len * e));
    for (int64_t i = 0; i < n * len; ++i)
      for (int64_t o = 0; o < e; ++o) {
        double acc = b.data<float>()[part * e + o];
        for (int64_t c = 0; c < e; ++c)
          acc += double(x.data<float>()[i * e + c]) * w.data<float>()[(part * e + o) * e + c];
        y[size_t(i * e + o)] = acc;
      }
    return y;
  };
  const auto pq = project(q, l, 0), pk = project(k, s, 1), pv = project(v, s, 2);
  Reference r;
  r.weights.assign(size_t(n * heads * l * s), 0.0);
  std::vector<double> heads_out(size_t(n * l * e), 0.0);
  for (int64_t bi = 0; bi < n; ++bi)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < l; ++i) {
        std::vector<double> row(static_cast<size_t>(s));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < s; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += pq[size_t((bi * l + i) * e + h * d + c)] * pk[size_t((bi * s + j) * e + h * d + c)];
          row[size_t(j)] = dot / std::sqrt(double(d)) + mask(bi, h, i, j);
          mx = std::max(mx, row[size_t(j)]);
        }
        double sum = 0;
        for (double& x : row) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < s; ++j) {
          const double p = row[size_t(j)] / sum;
          r.weights[size_t(((bi * heads + h) * l + i) * s + j)] = p;
          for (int64_t c = 0; c < d; ++c)
            heads_out[size_t((bi * l + i) * e + h * d + c)] += p * pv[size_t((bi * s + j) * e + h * d + c)];
        }
      }
  r.out.assign(size_t(n * l * e), 0.0);
  for (int64_t i = 0; i < n * l; ++i)
    for (int64_t o = 0; o < e; ++o) {
      double acc = bo.data<float>()[o];
      for (int64_t c = 0; c < e; ++c) acc += heads_out[size_t(i * e + c)] * wo.data<float>()[o * e + c];
      r.out[size_t(i * e + o)] = acc;
    }
  return r;
}

// max |got - want| / max(1, max |want|); `at(i)` maps Kiln's flat index to the reference's.
double error(const Tensor& got, const std::vector<double>& want, const std::function<size_t(int64_t)>& at) {
  double scale = 1.0, worst = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  EXPECT_EQ(static_cast<size_t>(got.numel()), want.size()) << got.describe();
  for (int64_t i = 0; i < got.numel(); ++i) worst = std::max(worst, std::abs(got.data<float>()[i] - want[at(i)]));
  return worst / scale;
}
size_t same(int64_t i) { return static_cast<size_t>(i); }

// [L, N, E] <-> [N, L, E]
Tensor to_batch_first(const Tensor& x) { return x.permute({1, 0, 2}).contiguous(); }

constexpr double kTol = 1e-5;  // float32 kernels against a double reference, relative to max(1, |ref|)

TEST(NnMultiheadAttention, StateDictAndModulesAreTorchs) {
  manual_seed(0);
  MultiheadAttention m(8, 2);
  EXPECT_EQ(keys(m), (std::vector<std::string>{"in_proj_weight[24, 8]", "in_proj_bias[24]", "out_proj.weight[8, 8]",
                                               "out_proj.bias[8]"}));
  MultiheadAttention no_bias(MultiheadAttentionOptions{.embed_dim = 8, .num_heads = 2, .bias = false});
  EXPECT_EQ(keys(no_bias), (std::vector<std::string>{"in_proj_weight[24, 8]", "out_proj.weight[8, 8]"}));

  TransformerDecoderLayer dec({.d_model = 8, .nhead = 2, .dim_feedforward = 16});
  std::vector<std::string> modules;
  for (auto& [name, mod] : dec.named_modules()) modules.push_back(name);
  EXPECT_EQ(modules, (std::vector<std::string>{"", "self_attn", "self_attn.out_proj", "multihead_attn",
                                               "multihead_attn.out_proj", "linear1", "dropout", "linear2", "norm1",
                                               "norm2", "norm3", "dropout1", "dropout2", "dropout3"}));
  TransformerEncoderLayer enc({.d_model = 8, .nhead = 2, .dim_feedforward = 16});
  EXPECT_EQ(keys(enc),
            (std::vector<std::string>{
                "self_attn.in_proj_weight[24, 8]", "self_attn.in_proj_bias[24]", "self_attn.out_proj.weight[8, 8]",
                "self_attn.out_proj.bias[8]", "linear1.weight[16, 8]", "linear1.bias[16]", "linear2.weight[8, 16]",
                "linear2.bias[8]", "norm1.weight[8]", "norm1.bias[8]", "norm2.weight[8]", "norm2.bias[8]"}));
}

TEST(NnMultiheadAttention, InitialisationIsTorchs) {
  manual_seed(3);
  MultiheadAttention m(64, 4);
  const Tensor& w = m.get_parameter("in_proj_weight");
  const double bound = std::sqrt(6.0 / (64 + 3 * 64));  // xavier_uniform_ over fan_in 64, fan_out 192
  double sum_sq = 0, max_abs = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    sum_sq += double(w.data<float>()[i]) * w.data<float>()[i];
    max_abs = std::max(max_abs, double(std::abs(w.data<float>()[i])));
  }
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.95 * bound);
  // U(-a, a) has std a / sqrt(3); 12288 draws put the sample std within 2% of it.
  EXPECT_NEAR(std::sqrt(sum_sq / double(w.numel())), bound / std::sqrt(3.0), 0.02 * bound / std::sqrt(3.0));
  for (const char* zero : {"in_proj_bias", "out_proj.bias"}) {
    const Tensor& b = m.get_parameter(zero);
    for (int64_t i = 0; i < b.numel(); ++i) ASSERT_EQ(b.data<float>()[i], 0.f) << zero;
  }
  // out_proj.weight keeps Linear's kaiming_uniform_(a=sqrt(5)): bound 1/sqrt(fan_in).
  const Tensor& wo = m.get_parameter("out_proj.weight");
  for (int64_t i = 0; i < wo.numel(); ++i) ASSERT_LE(std::abs(wo.data<float>()[i]), 1.0 / 8.0);
}

TEST(NnMultiheadAttention, UnsupportedAndInvalidOptions) {
  expect_error<InvalidArgument>([] { MultiheadAttention(10, 3); }, "embed_dim (10) must be divisible by num_heads (3)");
  expect_error<Unsupported>([] { MultiheadAttention(8, 2, 0.0, true, true); }, "add_bias_kv");
  expect_error<Unsupported>([] { MultiheadAttention(8, 2, 0.0, true, false, true); }, "add_zero_attn");
  expect_error<Unsupported>([] { MultiheadAttention(8, 2, 0.0, true, false, false, 4); },
                            "kdim=4 differs from embed_dim=8");
  EXPECT_NO_THROW(MultiheadAttention(8, 2, 0.0, true, false, false, 8, 8));
  expect_error<InvalidArgument>([] { TransformerEncoderLayer({.d_model = 8, .nhead = 2, .activation = "tanh"}); },
                                "activation should be relu/gelu, not tanh");
  expect_error<InvalidArgument>([] { TransformerDecoderLayer({.d_model = 8, .nhead = 3}); },
                                "embed_dim (8) must be divisible by num_heads (3)");
}

TEST(NnMultiheadAttention, BadInputsAreNamedErrors) {
  MultiheadAttention m(8, 2);
  auto attend = [&](std::vector<int64_t> shape, std::optional<std::pair<DType, Shape>> mask,
                    std::optional<Shape> padding) {
    trace([&](Tracer& t) {
      Var x = t.input("x", DType::Float32, shape);
      MultiheadAttentionCall call;
      if (mask) call.attn_mask = t.input("mask", mask->first, mask->second);
      if (padding) call.key_padding_mask = t.input("pad", DType::Bool, *padding);
      return m.attend(t, x, x, x, call);
    });
  };
  expect_error<ShapeError>([&] { attend({5, 2, 6}, {}, {}); }, "query is float[5, 2, 6] but embed_dim is 8");
  expect_error<TypeError>(
      [&] {
        attend({5, 2, 8}, std::pair{DType::Int64, Shape{5, 5}}, {});
      },
      "attn_mask must be bool or float like the query, got int64");
  expect_error<ShapeError>(
      [&] {
        attend({5, 2, 8}, {}, Shape{2, 4});
      },
      "key_padding_mask must be [N, S] (source length 5), got bool[2, 4]");
  expect_error<ShapeError>(
      [&] {
        attend({5, 2, 8}, std::pair{DType::Bool, Shape{5, 3}}, {});
      },
      "attn_mask bool[5, 3] does not fit target length 5 and source length 5");
  expect_error<InvalidArgument>(
      [&] { trace([&](Tracer& t) {
              return m.call(t, std::vector<Var>{t.input("x", DType::Float32, {5, 2, 8})});
            }); },
      "forward takes (query, key, value");
}

// Self-attention, sequence first, dynamic batch and length: one exported graph, two input sizes,
// output and head-averaged weights against the reference.
TEST(NnMultiheadAttention, SelfAttentionMatchesReferenceAtTwoSizes) {
  std::mt19937 gen(1);
  manual_seed(1);
  MultiheadAttention m(8, 2);
  randomize(m, gen);
  Session s(trace([&](Tracer& t) {
    Var x = t.input("x", DType::Float32, {-1, -1, 8}, {{0, "seq"}, {1, "batch"}});
    return m.attend(t, x, x, x);
  }));
  for (auto [l, n] : {std::pair<int64_t, int64_t>{5, 2}, {3, 4}}) {
    const Tensor x = random_tensor({l, n, 8}, gen);
    auto out = s.run({{"x", x}});
    const Tensor xb = to_batch_first(x);
    const Reference r = reference_mha(m, xb, xb, xb, 2, [](int64_t, int64_t, int64_t, int64_t) { return 0.0; });
    ASSERT_EQ(out["out0"].shape(), (Shape{l, n, 8}));
    // Kiln's out0 is [L, N, E]; the reference is [N, L, E].
    EXPECT_LE(error(out["out0"], r.out,
                    [n = n, l = l](int64_t i) { return size_t(((i / 8) % n * l + i / 8 / n) * 8 + i % 8); }),
              kTol);
    ASSERT_EQ(out["out1"].shape(), (Shape{n, l, l}));
    std::vector<double> averaged(size_t(n * l * l), 0.0);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t ij = 0; ij < l * l; ++ij)
          averaged[size_t(b * l * l + ij)] += r.weights[size_t((b * 2 + h) * l * l + ij)] / 2;
    EXPECT_LE(error(out["out1"], averaged, same), kTol);
  }
}

// Cross-attention, batch first: a float [N*H, L, S] attn_mask plus a bool key_padding_mask, and
// per-head weights.
TEST(NnMultiheadAttention, CrossAttentionWithMasksMatchesReference) {
  std::mt19937 gen(2);
  manual_seed(2);
  MultiheadAttention m(MultiheadAttentionOptions{.embed_dim = 12, .num_heads = 3, .batch_first = true});
  randomize(m, gen);
  const int64_t n = 2, l = 3, s = 4, h = 3;
  const Tensor q = random_tensor({n, l, 12}, gen), k = random_tensor({n, s, 12}, gen),
               v = random_tensor({n, s, 12}, gen);
  const Tensor add = random_tensor({n * h, l, s}, gen);
  const Tensor pad = Tensor::from_vector<bool>({n, s}, {false, false, true, false, false, false, false, true});
  Session sess(trace([&](Tracer& t) {
    Var vq = t.input("q", DType::Float32, {-1, -1, 12}), vk = t.input("k", DType::Float32, {-1, -1, 12});
    Var vv = t.input("v", DType::Float32, {-1, -1, 12});
    Var vm = t.input("mask", DType::Float32, {-1, -1, -1}), vp = t.input("pad", DType::Bool, {-1, -1});
    return m.attend(t, vq, vk, vv, {.key_padding_mask = vp, .attn_mask = vm, .average_attn_weights = false});
  }));
  auto out = sess.run({{"q", q}, {"k", k}, {"v", v}, {"mask", add}, {"pad", pad}});
  const Reference r = reference_mha(m, q, k, v, h, [&](int64_t b, int64_t hh, int64_t i, int64_t j) {
    if (pad.data<bool>()[b * s + j]) return -std::numeric_limits<double>::infinity();
    return double(add.data<float>()[((b * h + hh) * l + i) * s + j]);
  });
  EXPECT_LE(error(out["out0"], r.out, same), kTol);
  ASSERT_EQ(out["out1"].shape(), (Shape{n, h, l, s}));
  EXPECT_LE(error(out["out1"], r.weights, same), kTol);
  // Padded keys (position 2 of batch 0, 3 of batch 1) get exactly zero weight.
  for (int64_t i = 0; i < n * h * l; ++i) EXPECT_EQ(out["out1"].data<float>()[i * s + (i < h * l ? 2 : 3)], 0.f);
}

// is_causal without a mask builds the causal mask at run time: the same numbers as torch's
// generate_square_subsequent_mask passed as a float mask, and zero weight on later positions.
TEST(NnMultiheadAttention, IsCausalEqualsAnExplicitSubsequentMask) {
  std::mt19937 gen(4);
  manual_seed(4);
  MultiheadAttention m(MultiheadAttentionOptions{.embed_dim = 8, .num_heads = 2, .batch_first = true});
  randomize(m, gen);
  Session sess(trace([&](Tracer& t) {
    Var x = t.input("x", DType::Float32, {-1, -1, 8});
    return m.attend(t, x, x, x, {.is_causal = true});
  }));
  for (int64_t l : {4, 7}) {
    const Tensor x = random_tensor({2, l, 8}, gen);
    auto out = sess.run({{"x", x}});
    const Reference r = reference_mha(m, x, x, x, 2, [](int64_t, int64_t, int64_t i, int64_t j) {
      return j > i ? -std::numeric_limits<double>::infinity() : 0.0;
    });
    EXPECT_LE(error(out["out0"], r.out, same), kTol) << "L=" << l;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < l; ++i)
        for (int64_t j = i + 1; j < l; ++j) EXPECT_EQ(out["out1"].data<float>()[(b * l + i) * l + j], 0.f);
  }
}

// Post-norm (torch's default) ends with norm2 at its initial weight 1 and bias 0: every output row
// has mean 0 and variance 1. (The full numbers are checked against torch in the Python test.)
TEST(NnTransformerEncoderLayer, PostNormRowsAreNormalised) {
  std::mt19937 gen(5);
  manual_seed(5);
  TransformerEncoderLayer enc({.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  enc.eval();
  Session s(trace([&](Tracer& t) {
    Var x = t.input("x", DType::Float32, {-1, -1, 8});
    return std::vector<Var>{enc.apply(t, x)};
  }));
  auto out = s.run({{"x", random_tensor({3, 5, 8}, gen, 3.0)}});
  const Tensor& y = out["out0"];
  ASSERT_EQ(y.shape(), (Shape{3, 5, 8}));
  for (int64_t row = 0; row < 15; ++row) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < 8; ++c) mean += y.data<float>()[row * 8 + c] / 8.0;
    for (int64_t c = 0; c < 8; ++c) var += std::pow(y.data<float>()[row * 8 + c] - mean, 2) / 8.0;
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(var, 1.0, 1e-3);  // LayerNorm's eps 1e-5 over a variance near 1
  }
}

// Training mode puts torch's attention dropout (F.dropout on the weights) in the graph as a
// Dropout node of ratio p; eval mode leaves it out, as do the layer's Dropout submodules.
TEST(NnMultiheadAttention, DropoutOnlyInTrainingMode) {
  MultiheadAttention m(8, 2, 0.25);
  auto dropouts = [&](bool training) {
    m.train(training);
    const Model model = trace([&](Tracer& t) {
      Var x = t.input("x", DType::Float32, {-1, -1, 8});
      return m.attend(t, x, x, x);
    });
    std::vector<double> ratios;
    for (const Node& n : model.graph.nodes)
      if (n.op_type == "Dropout")
        for (const Node& c : model.graph.nodes)
          if (c.op_type == "Constant" && c.outputs[0] == n.inputs.at(1))
            ratios.push_back(c.attr_tensor("value").item_as_double());
    return ratios;
  };
  EXPECT_EQ(dropouts(true), std::vector<double>{0.25});
  EXPECT_TRUE(dropouts(false).empty());
}

// The layer through the Module API: to_onnx names initializers by state_dict keys and keeps
// batch and sequence dynamic; operator() runs it and a forward hook on self_attn sees the
// (query, key, value) it got and its output.
TEST(NnTransformerEncoderLayer, ExportsAndRunsThroughTheModuleApi) {
  manual_seed(7);
  auto enc = std::make_shared<TransformerEncoderLayer>(
      TransformerEncoderLayerOptions{.d_model = 8, .nhead = 2, .dim_feedforward = 16, .batch_first = true});
  enc->eval();
  const Model model = enc->to_onnx({{"src", {2, 5, 8}}}, {{"src", {{0, "batch"}, {1, "seq"}}}});
  std::vector<std::string> inits, state;
  for (const auto& [name, value] : model.graph.initializers) inits.push_back(name);
  for (const auto& [key, value] : enc->state_dict()) state.push_back(key);
  std::sort(state.begin(), state.end());
  EXPECT_EQ(inits, state);
  ASSERT_EQ(model.graph.inputs.at(0).dims.size(), 3u);
  EXPECT_EQ(model.graph.inputs[0].dims[1].param, "seq");

  std::vector<Shape> seen;
  auto attn = enc->get_submodule("self_attn");
  attn->register_forward_hook([&](Module&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
    for (const auto& t : in) seen.push_back(t.shape());
    for (const auto& t : out) seen.push_back(t.shape());
  });
  std::mt19937 gen(8);
  const std::vector<Tensor> y = (*enc)({random_tensor({3, 4, 8}, gen)});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].shape(), (Shape{3, 4, 8}));
  EXPECT_EQ(seen, (std::vector<Shape>{{3, 4, 8}, {3, 4, 8}, {3, 4, 8}, {3, 4, 8}}));  // q, k, v; need_weights=false
}

}  // namespace
