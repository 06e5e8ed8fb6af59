// Einsum against a brute-force double reference that sums the product of the operands over every
// assignment of every label. The kernel gets the real equation (ellipses, implicit outputs); the
// reference gets the same contraction spelled with letters only.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

Tensor random_tensor(DType dt, const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> idist(-5, 5);
  Tensor t = Tensor::empty(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::Float64) t.data<double>()[i] = dist(gen);
    if (dt == DType::Float32) t.data<float>()[i] = static_cast<float>(dist(gen));
    if (dt == DType::Float16) t.data<Half>()[i] = float_to_half(static_cast<float>(dist(gen)));
    if (dt == DType::Int64) t.data<int64_t>()[i] = idist(gen);
    if (dt == DType::Int32) t.data<int32_t>()[i] = static_cast<int32_t>(idist(gen));
  }
  return t;
}

// "ab,bc->ac" with letters only; a dim of size 1 broadcasts against its label's size elsewhere.
std::vector<double> reference(const std::string& eq, const std::vector<Tensor>& in, Shape& out_shape) {
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, arrow), cur;
  for (char c : lhs + ",") {
    if (c == ',') {
      terms.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  const std::string out = eq.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t)
    for (size_t d = 0; d < terms[t].size(); ++d) size[terms[t][d]] = std::max(size[terms[t][d]], in[t].shape()[d]);
  std::vector<char> labels;
  for (const auto& [c, n] : size) labels.push_back(c);
  out_shape.clear();
  for (char c : out) out_shape.push_back(size[c]);
  std::vector<double> y(size_t(numel(out_shape)), 0.0);
  std::map<char, int64_t> at;
  for (char c : labels) at[c] = 0;
  int64_t total = 1;
  for (char c : labels) total *= size[c];
  for (int64_t it = 0; it < total; ++it) {
    int64_t rem = it;
    for (size_t i = labels.size(); i-- > 0;) {
      at[labels[i]] = rem % size[labels[i]];
      rem /= size[labels[i]];
    }
    double prod = 1;
    for (size_t t = 0; t < terms.size(); ++t) {
      int64_t flat = 0;
      for (size_t d = 0; d < terms[t].size(); ++d) {
        const int64_t dim = in[t].shape()[d];
        flat = flat * dim + (dim == 1 ? 0 : at[terms[t][d]]);
      }
      prod *= in[t].item_as_double(flat);
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + at[c];
    y[size_t(o)] += prod;
  }
  return y;
}

Node einsum_node(const std::string& eq, size_t inputs) {
  Node n;
  n.name = "es";
  n.op_type = "Einsum";
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back(fmt::format("x{}", i));
  n.outputs = {"y"};
  n.attrs["equation"] = Attribute::of_string(eq);
  return n;
}

struct Case {
  std::string equation, reference;
  std::vector<Shape> shapes;
};

TEST(Einsum, MatchesBruteForce) {
  const std::vector<Case> cases = {
      {"ij,jk->ik", "ij,jk->ik", {{3, 4}, {4, 5}}},
      {"ij,jk", "ij,jk->ik", {{3, 4}, {4, 5}}},
      {"ba", "ba->ab", {{3, 4}}},
      {"bij,bjk->bik", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}},
      {"ii->i", "ii->i", {{4, 4}}},
      {"ii", "ii->", {{4, 4}}},
      {"...ii->...i", "xyii->xyi", {{2, 3, 4, 4}}},
      {"ij->ji", "ij->ji", {{3, 5}}},
      {"ij->", "ij->", {{3, 5}}},
      {"ij->j", "ij->j", {{3, 5}}},
      {"i,i", "i,i->", {{7}, {7}}},
      {"i,j->ij", "i,j->ij", {{3}, {4}}},
      {"ab,ab->ab", "ab,ab->ab", {{3, 4}, {3, 4}}},
      {"...ij,...jk->...ik", "xyij,yjk->xyik", {{2, 1, 3, 4}, {5, 4, 2}}},  // batch dims broadcast
      {"...j,j", "xj,j->x", {{6, 4}, {4}}},
      {"abc,cd,de->abe", "abc,cd,de->abe", {{2, 3, 4}, {4, 5}, {5, 3}}},
      {"iij,jk->ik", "iij,jk->ik", {{3, 3, 4}, {4, 2}}},
      {"ijk,ikl->jl", "ijk,ikl->jl", {{2, 3, 4}, {2, 4, 5}}},
      {"i j , j k -> i k", "ij,jk->ik", {{2, 3}, {3, 2}}},
      {"Ab,bA->A", "Ab,bA->A", {{3, 4}, {4, 3}}},
      {"ij,jk->ik", "ij,jk->ik", {{0, 4}, {4, 5}}},
      {"ij,jk->ik", "ij,jk->ik", {{3, 0}, {0, 5}}},
  };
  uint32_t seed = 1;
  for (DType dt : {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::Float16})
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} on {}", c.equation, dtype_name(dt)));
      std::vector<Tensor> in;
      for (const Shape& s : c.shapes) in.push_back(random_tensor(dt, s, seed++));
      Shape want;
      const std::vector<double> ref = reference(c.reference, in, want);
      const Tensor y = run_node(einsum_node(c.equation, in.size()), in).at(0);
      ASSERT_EQ(y.shape(), want);
      ASSERT_EQ(y.dtype(), dt);
      double err = 0, scale = 1;
      for (size_t i = 0; i < ref.size(); ++i) {
        err = std::max(err, std::abs(y.item_as_double(int64_t(i)) - ref[i]));
        scale = std::max(scale, std::abs(ref[i]));
      }
      // Integers are exact; float32 and float64 rounding over at most ~100 terms of |x| <= 1;
      // float16 is rounded once at the end (relative 2^-11).
      const double tol = dt == DType::Float16 ? 1e-3 : dt == DType::Float32 ? 1e-5 : dt == DType::Float64 ? 1e-12 : 0;
      EXPECT_LE(err, tol * scale);
    }
}

TEST(Einsum, BadEquationsAreNamed) {
  Tensor a = random_tensor(DType::Float32, {3, 4}, 1), b = random_tensor(DType::Float32, {5, 6}, 2);
  expect_error<ShapeError>(
      [&] {
        run_node(einsum_node("ij,jk->ik", 2), {a, b});
      },
      {"equation 'ij,jk->ik': a label has size 5 in input 1 [5, 6] but 4 elsewhere", "node 'es' (Einsum)"});
  EXPECT_THROW(run_node(einsum_node("ij->ik", 1), {a}), InvalidModel);     // k is not an input label
  EXPECT_THROW(run_node(einsum_node("ij,jk->ik", 1), {a}), InvalidModel);  // two terms, one input
  EXPECT_THROW(run_node(einsum_node("ijk->i", 1), {a}), ShapeError);       // three labels for a 2-D input
  EXPECT_THROW(run_node(einsum_node("i.j->i", 1), {a}), InvalidModel);     // malformed ellipsis
  EXPECT_THROW(run_node(einsum_node("ij->ii", 1), {a}), InvalidModel);     // repeated output label
}

}  // namespace
}  // namespace kiln
