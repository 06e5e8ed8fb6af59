// MaxPool, AveragePool and the global pools against a naive double-precision reference on random
// inputs: strides, dilations, asymmetric pads, auto_pad, ceil_mode, count_include_pad, 1-D to 3-D.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

enum class Mode { Max, AvgExclude, AvgInclude };

struct PoolCase {
  std::string name;
  Shape x;
  std::vector<int64_t> kernel, strides, dilations, pads;  // empty: omitted
  std::string auto_pad;
  bool ceil = false;
};

struct RefOut {
  Shape shape;
  std::vector<double> values;
  std::vector<int64_t> argmax;  // row-major flat index into x
};

// ONNX's pooling definition evaluated directly: output sizes (with ceil_mode dropping a window that
// would start in the right padding), then every window's taps. Spatial dims padded to three.
RefOut ref_pool(const PoolCase& c, const Tensor& x, Mode mode) {
  const size_t nsp = c.x.size() - 2, off = 3 - nsp;
  std::vector<int64_t> in(3, 1), k(3, 1), s(3, 1), d(3, 1), pb(3, 0), pe(3, 0), out(3, 1);
  for (size_t i = 0; i < nsp; ++i) {
    const size_t j = off + i;
    in[j] = c.x[2 + i];
    k[j] = c.kernel[i];
    if (!c.strides.empty()) s[j] = c.strides[i];
    if (!c.dilations.empty()) d[j] = c.dilations[i];
    const int64_t ext = (k[j] - 1) * d[j] + 1;
    if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      out[j] = (in[j] + s[j] - 1) / s[j];
      const int64_t total = std::max<int64_t>(0, (out[j] - 1) * s[j] + ext - in[j]);
      pb[j] = c.auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
      pe[j] = total - pb[j];
    } else {
      pb[j] = c.pads.empty() ? 0 : c.pads[i];
      pe[j] = c.pads.empty() ? 0 : c.pads[nsp + i];
      const double span = double(in[j] + pb[j] + pe[j] - ext) / double(s[j]);
      out[j] = int64_t(c.ceil ? std::ceil(span) : std::floor(span)) + 1;
      if (c.ceil && (out[j] - 1) * s[j] >= in[j] + pb[j]) --out[j];
    }
  }
  RefOut r;
  r.shape = {c.x[0], c.x[1]};
  for (size_t i = 0; i < nsp; ++i) r.shape.push_back(out[off + i]);
  const int64_t plane = in[0] * in[1] * in[2];
  for (int64_t nc = 0; nc < c.x[0] * c.x[1]; ++nc)
    for (int64_t o0 = 0; o0 < out[0]; ++o0)
      for (int64_t o1 = 0; o1 < out[1]; ++o1)
        for (int64_t o2 = 0; o2 < out[2]; ++o2) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t count_in = 0, count_padded = 0, at = -1;
          for (int64_t k0 = 0; k0 < k[0]; ++k0)
            for (int64_t k1 = 0; k1 < k[1]; ++k1)
              for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                const int64_t i[3] = {o0 * s[0] - pb[0] + k0 * d[0], o1 * s[1] - pb[1] + k1 * d[1],
                                      o2 * s[2] - pb[2] + k2 * d[2]};
                bool inside = true, in_padded = true;
                for (int a = 0; a < 3; ++a) {
                  inside = inside && i[a] >= 0 && i[a] < in[a];
                  in_padded = in_padded && i[a] >= -pb[a] && i[a] < in[a] + pe[a];
                }
                count_padded += in_padded;
                if (!inside) continue;
                const int64_t flat = nc * plane + (i[0] * in[1] + i[1]) * in[2] + i[2];
                const double v = x.item_as_double(flat);
                ++count_in;
                sum += v;
                if (v > best) {
                  best = v;
                  at = flat;
                }
              }
          r.values.push_back(mode == Mode::Max          ? best
                             : mode == Mode::AvgExclude ? sum / double(count_in)
                                                        : sum / double(count_padded));
          r.argmax.push_back(at);
        }
  return r;
}

Node pool_node(const std::string& op, const PoolCase& c, int64_t count_include_pad = -1, bool indices = false) {
  Node n;
  n.name = "pool";
  n.op_type = op;
  n.inputs = {"x"};
  n.outputs = {"y"};
  if (indices) n.outputs.push_back("i");
  if (!c.kernel.empty()) n.attrs["kernel_shape"] = Attribute::of_ints(c.kernel);
  if (!c.strides.empty()) n.attrs["strides"] = Attribute::of_ints(c.strides);
  if (!c.dilations.empty()) n.attrs["dilations"] = Attribute::of_ints(c.dilations);
  if (!c.pads.empty()) n.attrs["pads"] = Attribute::of_ints(c.pads);
  if (!c.auto_pad.empty()) n.attrs["auto_pad"] = Attribute::of_string(c.auto_pad);
  if (c.ceil) n.attrs["ceil_mode"] = Attribute::of_int(1);
  if (count_include_pad >= 0) n.attrs["count_include_pad"] = Attribute::of_int(count_include_pad);
  return n;
}

void expect_close(const Tensor& y, const RefOut& ref, double tol) {
  ASSERT_EQ(y.shape(), ref.shape);
  double err = 0;
  for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, std::abs(y.item_as_double(i) - ref.values[size_t(i)]));
  EXPECT_LE(err, tol) << "max abs err " << err;
}

const std::vector<PoolCase>& cases() {
  static const std::vector<PoolCase> all = {
      {"2-D k3 p1", {2, 3, 8, 9}, {3, 3}, {}, {}, {1, 1, 1, 1}},
      {"stride+dilation+asymmetric pads", {1, 4, 11, 10}, {3, 2}, {2, 3}, {2, 1}, {1, 0, 2, 1}},
      {"ceil_mode", {1, 2, 7, 8}, {2, 3}, {2, 2}, {}, {}, "", true},
      {"ceil_mode with pads", {2, 2, 9, 7}, {3, 3}, {2, 2}, {}, {1, 1, 1, 0}, "", true},
      {"ceil_mode drops a window starting in the pad", {1, 1, 5, 5}, {2, 2}, {2, 2}, {}, {1, 1, 1, 1}, "", true},
      {"SAME_UPPER", {1, 3, 7, 6}, {4, 3}, {2, 2}, {}, {}, "SAME_UPPER"},
      {"SAME_LOWER", {1, 3, 7, 6}, {4, 3}, {2, 2}, {}, {}, "SAME_LOWER"},
      {"VALID", {1, 3, 7, 6}, {3, 2}, {2, 2}, {}, {}, "VALID"},
      {"1-D", {2, 3, 15}, {4}, {3}, {}, {2, 1}, "", true},
      {"3-D", {1, 2, 5, 6, 7}, {2, 3, 2}, {1, 2, 2}, {}, {0, 1, 1, 1, 1, 0}},
  };
  return all;
}

TEST(MaxPool, MatchesReference) {
  uint32_t seed = 1;
  for (const PoolCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = random_f32(c.x, seed++, -1.f, 1.f);
    expect_close(run_node(pool_node("MaxPool", c), {x}).at(0), ref_pool(c, x, Mode::Max), 0.0);
  }
}

TEST(MaxPool, IndicesMatchReferenceArgmax) {
  uint32_t seed = 50;
  for (const PoolCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = random_f32(c.x, seed++, -1.f, 1.f);
    const RefOut ref = ref_pool(c, x, Mode::Max);
    const std::vector<Tensor> out = run_node(pool_node("MaxPool", c, -1, true), {x});
    ASSERT_EQ(out.size(), 2u);
    expect_close(out[0], ref, 0.0);
    ASSERT_EQ(out[1].dtype(), DType::Int64);
    ASSERT_EQ(out[1].shape(), ref.shape);
    for (int64_t i = 0; i < out[1].numel(); ++i) ASSERT_EQ(out[1].data<int64_t>()[i], ref.argmax[size_t(i)]) << i;
  }
}

TEST(MaxPool, Uint8MatchesReference) {
  const PoolCase c{"u8", {1, 2, 6, 7}, {3, 3}, {2, 2}, {}, {1, 1, 0, 1}, "", true};
  std::mt19937 gen(3);
  Tensor x = Tensor::empty(DType::Uint8, c.x);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = uint8_t(gen() % 256);
  const Tensor y = run_node(pool_node("MaxPool", c), {x}).at(0);
  EXPECT_EQ(y.dtype(), DType::Uint8);
  expect_close(y, ref_pool(c, x, Mode::Max), 0.0);
}

TEST(AveragePool, MatchesReferenceWithAndWithoutPadCounting) {
  uint32_t seed = 100;
  for (const PoolCase& c : cases()) {
    if (!c.dilations.empty()) continue;  // AveragePool has dilations only from opset 19
    for (int include = 0; include < 2; ++include) {
      SCOPED_TRACE(c.name + (include ? " count_include_pad=1" : " count_include_pad=0"));
      Tensor x = random_f32(c.x, seed++, -1.f, 1.f);
      expect_close(run_node(pool_node("AveragePool", c, include), {x}).at(0),
                   ref_pool(c, x, include ? Mode::AvgInclude : Mode::AvgExclude), 1e-6);
    }
  }
}

TEST(GlobalPool, MatchesReference) {
  uint32_t seed = 200;
  for (const Shape& s : {Shape{2, 3, 5, 7}, Shape{2, 3, 9}, Shape{1, 2, 3, 4, 5}}) {
    SCOPED_TRACE(to_string(s));
    Tensor x = random_f32(s, seed++, -1.f, 1.f);
    PoolCase whole{"global", s, Shape(s.begin() + 2, s.end())};
    Node avg = pool_node("GlobalAveragePool", {}), max = pool_node("GlobalMaxPool", {});
    expect_close(run_node(avg, {x}).at(0), ref_pool(whole, x, Mode::AvgExclude), 1e-6);
    expect_close(run_node(max, {x}).at(0), ref_pool(whole, x, Mode::Max), 0.0);
  }
}

TEST(Pool, BadKernelShapeIsNamed) {
  PoolCase c{"bad", {1, 3, 8, 8}, {3}};
  expect_error<ShapeError>(
      [&] { run_node(pool_node("MaxPool", c), {random_f32(c.x, 1, -1.f, 1.f)}); },
      {"kernel_shape [3] has 1 dims but input float[1, 3, 8, 8] has 2 spatial dims", "node 'pool' (MaxPool)"});
  PoolCase none{"no kernel", {1, 3, 8, 8}};
  EXPECT_THROW(run_node(pool_node("AveragePool", none), {random_f32(none.x, 1, -1.f, 1.f)}), InvalidModel);
  EXPECT_THROW(run_node(pool_node("GlobalMaxPool", {}), {random_f32({3, 4}, 1, -1.f, 1.f)}), ShapeError);
}

}  // namespace
}  // namespace kiln
