// Finite-difference checks of the pooling gradients (ai.kiln.MaxPoolGrad, ai.kiln.AveragePoolGrad,
// GlobalAveragePool and GlobalMaxPool as standard ops): strides, asymmetric pads, dilations,
// ceil_mode, count_include_pad, auto_pad, 1-D to 3-D, float64 (<= 1e-6) and float32 (<= 1e-3).
// Inputs are continuous random values, so window maxima are never tied.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"
#include "kiln/kernel.h"

namespace kiln::testing {
namespace {

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

Node pool(const std::string& type, std::map<std::string, Attribute> attrs, size_t outputs = 1) {
  Node n;
  n.op_type = type;
  n.inputs = {"x"};
  for (size_t i = 0; i < outputs; ++i) n.outputs.push_back(fmt::format("y{}", i));
  n.attrs = std::move(attrs);
  return n;
}

struct Case {
  Shape x;
  std::map<std::string, Attribute> attrs;
};

const std::vector<Case> kWindows = {
    {{2, 2, 5, 6}, {{"kernel_shape", ints({2, 2})}}},
    {{1, 2, 6, 7}, {{"kernel_shape", ints({3, 2})}, {"strides", ints({2, 3})}, {"pads", ints({1, 0, 1, 1})}}},
    {{1, 2, 7, 6}, {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", Attribute::of_int(1)}}},
    {{1, 2, 6, 7},
     {{"kernel_shape", ints({2, 3})},
      {"strides", ints({2, 2})},
      {"pads", ints({1, 1, 0, 1})},
      {"ceil_mode", Attribute::of_int(1)}}},
    {{1, 2, 5, 5},
     {{"kernel_shape", ints({3, 3})}, {"auto_pad", Attribute::of_string("SAME_UPPER")}, {"strides", ints({2, 2})}}},
    {{1, 2, 5, 6}, {{"kernel_shape", ints({2, 2})}, {"auto_pad", Attribute::of_string("SAME_LOWER")}}},
    {{2, 3, 9}, {{"kernel_shape", ints({3})}, {"strides", ints({2})}, {"pads", ints({1, 2})}}},
    {{1, 2, 4, 5, 4},
     {{"kernel_shape", ints({2, 3, 2})}, {"strides", ints({2, 1, 2})}, {"pads", ints({0, 1, 0, 1, 1, 0})}}},
};

TEST(PoolGradient, MaxPoolGeometries) {
  uint64_t seed = 800;
  for (const Case& c : kWindows) both({pool("MaxPool", c.attrs), {random_tensor(c.x, ++seed)}, {0}, 17, seed});
  // Dilations, and the Indices output present (it carries no gradient).
  both({pool("MaxPool", {{"kernel_shape", ints({2, 2})}, {"dilations", ints({2, 2})}, {"pads", ints({1, 0, 0, 1})}}, 2),
        {random_tensor({1, 2, 6, 6}, 850)},
        {0},
        17,
        850});
}

TEST(PoolGradient, AveragePoolGeometriesWithAndWithoutPadCounting) {
  uint64_t seed = 900;
  for (int64_t include : {0, 1})
    for (const Case& c : kWindows) {
      auto attrs = c.attrs;
      attrs["count_include_pad"] = Attribute::of_int(include);
      both({pool("AveragePool", attrs), {random_tensor(c.x, ++seed)}, {0}, 17, seed});
    }
  both({pool("AveragePool", {{"kernel_shape", ints({2, 2})},
                             {"dilations", ints({2, 1})},
                             {"pads", ints({1, 1, 1, 1})},
                             {"count_include_pad", Attribute::of_int(1)}}),
        {random_tensor({1, 2, 6, 5}, 950)},
        {0},
        19,
        950});
}

TEST(PoolGradient, GlobalPools) {
  uint64_t seed = 1000;
  for (const char* type : {"GlobalAveragePool", "GlobalMaxPool"})
    for (Shape x : {Shape{2, 3, 4, 5}, Shape{1, 2, 7}, Shape{1, 2, 3, 2, 3}})
      both({pool(type, {}), {random_tensor(x, ++seed)}, {0}, 17, seed});
}

Tensor to_f32(const Tensor& t) {
  Tensor out = Tensor::empty(DType::Float32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = float(t.data<double>()[i]);
  return out;
}

// The float64 forward loops (which the finite differences run) agree with the oneDNN float32
// kernels the conformance tests check, so the gradients above are of the right function.
TEST(PoolGradient, Float64ForwardMatchesFloat32) {
  uint64_t seed = 1050;
  std::vector<std::pair<std::string, std::map<std::string, Attribute>>> nodes;
  for (const Case& c : kWindows) {
    nodes.push_back({"MaxPool", c.attrs});
    for (int64_t include : {0, 1}) {
      auto attrs = c.attrs;
      attrs["count_include_pad"] = Attribute::of_int(include);
      nodes.push_back({"AveragePool", attrs});
    }
  }
  for (size_t k = 0; k < nodes.size(); ++k) {
    const Case& c = kWindows[k / 3];
    const Tensor x = random_tensor(c.x, ++seed);
    const Node n = pool(nodes[k].first, nodes[k].second);
    const Tensor y64 = run_node(n, {x}, 19)[0], y32 = run_node(n, {to_f32(x)}, 19)[0];
    ASSERT_EQ(y64.shape(), y32.shape()) << nodes[k].first << " case " << k / 3;
    for (int64_t i = 0; i < y64.numel(); ++i)
      ASSERT_NEAR(y64.data<double>()[i], y32.data<float>()[i], 1e-6)
          << nodes[k].first << " case " << k / 3 << " at " << i;
  }
  for (const char* type : {"GlobalAveragePool", "GlobalMaxPool"}) {
    const Tensor x = random_tensor({2, 3, 4, 5}, ++seed);
    const Tensor y64 = run_node(pool(type, {}), {x})[0], y32 = run_node(pool(type, {}), {to_f32(x)})[0];
    for (int64_t i = 0; i < y64.numel(); ++i) ASSERT_NEAR(y64.data<double>()[i], y32.data<float>()[i], 1e-6) << type;
  }
}

// A hand-computed MaxPoolGrad: each window's gradient lands on its maximum.
TEST(PoolGradient, MaxPoolGradRoutesToTheArgmax) {
  Node n;
  n.domain = "ai.kiln";
  n.op_type = "MaxPoolGrad";
  n.inputs = {"dy", "x"};
  n.outputs = {"dx"};
  n.attrs["kernel_shape"] = ints({2});
  n.attrs["strides"] = ints({1});
  const Tensor x = Tensor::from_vector<double>({1, 1, 4}, {1.0, 3.0, 2.0, 5.0});
  const Tensor dy = Tensor::from_vector<double>({1, 1, 3}, {10.0, 20.0, 40.0});
  const Tensor dx = run_node(n, {dy, x}, 17)[0];
  const std::vector<double> expect{0.0, 30.0, 0.0, 40.0};
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(dx.data<double>()[i], expect[size_t(i)]) << i;
}

// MaxPoolGrad against a brute-force reference, exactly: inputs on a coarse grid (many tied maxima,
// which go to the first tap in row-major order), rows wider than the kernel's 64-window runs, and
// windows cut by pads, dilations and ceil_mode in 1-D to 3-D, float32 and float64.
struct MaxPoolGradCase {
  Shape x;
  std::vector<int64_t> kernel, strides, dilations, pads;
  int64_t ceil_mode = 0;
};

template <class T>
std::vector<T> max_pool_grad_reference(const MaxPoolGradCase& c, const Shape& y, const std::vector<T>& x,
                                       const std::vector<T>& dy) {
  const size_t nsp = c.x.size() - 2;
  int64_t in_plane = 1, out_plane = 1;
  for (size_t i = 0; i < nsp; ++i) {
    in_plane *= c.x[2 + i];
    out_plane *= y[2 + i];
  }
  std::vector<T> dx(x.size(), T(0));
  for (int64_t plane = 0; plane < c.x[0] * c.x[1]; ++plane)
    for (int64_t o = 0; o < out_plane; ++o) {
      std::vector<int64_t> oc(nsp);
      for (size_t i = nsp, rest = size_t(o); i-- > 0; rest /= size_t(y[2 + i]))
        oc[i] = int64_t(rest % size_t(y[2 + i]));
      int64_t taps = 1;
      for (int64_t k : c.kernel) taps *= k;
      int64_t at = -1;
      for (int64_t t = 0; t < taps; ++t) {  // taps in row-major order
        int64_t off = 0, rest = t;
        bool inside = true;
        std::vector<int64_t> kc(nsp);
        for (size_t i = nsp; i-- > 0; rest /= c.kernel[i]) kc[i] = rest % c.kernel[i];
        for (size_t i = 0; i < nsp; ++i) {
          const int64_t pos = oc[i] * c.strides[i] - c.pads[i] + kc[i] * c.dilations[i];
          inside = inside && pos >= 0 && pos < c.x[2 + i];
          off = off * c.x[2 + i] + pos;
        }
        if (inside && (at < 0 || x[size_t(plane * in_plane + off)] > x[size_t(plane * in_plane + at)])) at = off;
      }
      if (at >= 0) dx[size_t(plane * in_plane + at)] += dy[size_t(plane * out_plane + o)];
    }
  return dx;
}

template <class T>
void check_max_pool_grad(const MaxPoolGradCase& c, uint64_t seed) {
  Node n;
  n.domain = "ai.kiln";
  n.op_type = "MaxPoolGrad";
  n.inputs = {"dy", "x"};
  n.outputs = {"dx"};
  n.attrs = {{"kernel_shape", ints(c.kernel)},
             {"strides", ints(c.strides)},
             {"dilations", ints(c.dilations)},
             {"pads", ints(c.pads)},
             {"ceil_mode", Attribute::of_int(c.ceil_mode)}};
  Node forward = pool("MaxPool", n.attrs);
  const Tensor xt = random_tensor(c.x, seed);
  std::vector<T> x(size_t(xt.numel()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = T(std::round(xt.data<double>()[i] * 2));  // few values: ties
  const Tensor x_in = Tensor::from_vector<T>(c.x, x);
  const Shape y = run_node(forward, {x_in}, 17)[0].shape();
  const Tensor dyt = random_tensor(y, seed + 1);
  std::vector<T> dy(size_t(dyt.numel()));
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = T(dyt.data<double>()[i]);
  const Tensor dx = run_node(n, {Tensor::from_vector<T>(y, dy), x_in}, 17)[0];
  const std::vector<T> want = max_pool_grad_reference<T>(c, y, x, dy);
  ASSERT_EQ(dx.numel(), int64_t(want.size()));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(dx.data<T>()[i], want[i]) << "x " << to_string(c.x) << " at " << i;
}

TEST(PoolGradient, MaxPoolGradMatchesBruteForceWithTies) {
  const std::vector<MaxPoolGradCase> cases = {
      {{2, 3, 9, 150}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},     // ResNet's stem pool, wide rows
      {{1, 2, 8, 140}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}},     // LeNet's, 70 windows per row
      {{2, 3, 9, 141}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}},     // tiled, a last row and column in no window
      {{1, 2, 9, 13}, {3, 3}, {3, 3}, {1, 1}, {0, 0, 0, 0}},      // tiled 3 x 3
      {{1, 2, 7, 131}, {3, 2}, {1, 3}, {2, 1}, {2, 0, 1, 1}, 1},  // dilated, ceil_mode, asymmetric pads
      {{2, 2, 200}, {4}, {3}, {1}, {3, 2}},                       // 1-D, windows mostly in the padding
      {{1, 2, 3, 4, 90}, {2, 2, 3}, {1, 2, 2}, {1, 1, 2}, {1, 0, 1, 0, 1, 2}},
  };
  uint64_t seed = 1200;
  for (const MaxPoolGradCase& c : cases) {
    check_max_pool_grad<float>(c, seed += 2);
    check_max_pool_grad<double>(c, seed += 2);
  }
}

}  // namespace
}  // namespace kiln::testing
