// ai.kiln.Attention and ai.kiln.AttentionGrad (attention_fused.cpp, attention_grad.cpp) refuse what
// they cannot compute with errors naming the operands: shapes that do not chain, batch dims that
// do not broadcast, a mask or bias larger than the scores, wrong dtypes, a bad probabilities mode,
// a dY or kept P of the wrong shape. Their values are checked in tests/ir/attention_fusion_test.cpp
// and tests/autodiff/attention_rules_test.cpp; here, their 16-bit forms against the float32 ones.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

#include "kernels/cpu/low_precision.h"
#include "kernels/kernel_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using test_util::Bf16Mode;

using test::expect_error;
using test_util::cast_to;
using test_util::expect_bytes_equal;
using test_util::make_node;
using test_util::random_f32;
using test_util::run1;

Node attention(size_t inputs, std::map<std::string, Attribute> attrs = {}, size_t outputs = 1) {
  Node n = make_node("Attention", inputs, std::move(attrs), outputs);
  n.domain = kKilnDomain;
  return n;
}

Tensor f32(const Shape& s) { return Tensor::zeros(DType::Float32, s); }

TEST(AttentionKernel, ShapesThatDoNotChainAreErrorsNamingTheOperands) {
  expect_error<ShapeError>(
      [] {
        run_node(attention(3), {f32({2, 5, 4}), f32({2, 3, 6}), f32({2, 6, 2})});
      },
      {"Attention", "do not agree", "Q[2, 5, 4] Kt[2, 3, 6] V[2, 6, 2]"});
  expect_error<ShapeError>(
      [] {
        run_node(attention(3), {f32({2, 5, 4}), f32({2, 4, 6}), f32({2, 7, 2})});
      },
      "do not agree");
  expect_error<ShapeError>(
      [] {
        run_node(attention(3), {f32({2, 5, 4}), f32({3, 4, 6}), f32({2, 6, 2})});
      },
      {"the batch dims do not broadcast", "Kt[3, 4, 6]"});
  expect_error<ShapeError>([] { run_node(attention(3), {f32({4}), f32({4, 6}), f32({6, 2})}); }, "rank >= 2");
  const Tensor wide_mask = Tensor::zeros(DType::Bool, {5, 7});
  expect_error<ShapeError>(
      [&] {
        run_node(attention(4), {f32({2, 5, 4}), f32({2, 4, 6}), f32({2, 6, 2}), wide_mask});
      },
      {"must broadcast to the scores [.., 5, 6]", "mask[5, 7]"});
}

TEST(AttentionKernel, WrongDtypesAndABadModeAreErrors) {
  const Tensor q = f32({2, 5, 4}), kt = f32({2, 4, 6}), v = f32({2, 6, 2});
  expect_error<Unsupported>(
      [&] {
        run_node(attention(3), {Tensor::zeros(DType::Int64, {2, 5, 4}), kt, v});
      },
      {"Attention", "has no kernel for opset 17 and dtype int64"});
  expect_error<TypeError>(
      [&] {
        run_node(attention(3), {q, Tensor::zeros(DType::Float64, {2, 4, 6}), v});
      },
      "Kt and V must have Q's dtype float, got double[2, 4, 6]");
  expect_error<TypeError>([&] { run_node(attention(4), {q, kt, v, f32({5, 6})}); }, "the mask must be bool");
  Node biased = attention(5);
  biased.inputs[3] = "";
  expect_error<TypeError>(
      [&] {
        run_node(biased, {q, kt, v, Tensor(), Tensor::zeros(DType::Float64, {5, 6})});
      },
      "the bias must have Q's dtype");
  expect_error<InvalidModel>(
      [&] {
        run_node(attention(3, {{"probabilities", Attribute::of_string("never")}}, 2), {q, kt, v});
      },
      "attribute probabilities must be \"auto\", \"keep\" or \"recompute\", got \"never\"");
}

TEST(AttentionKernel, TheGradientChecksDYAndTheKeptProbabilities) {
  Node grad = make_node("AttentionGrad", 4, {}, 3);
  grad.domain = kKilnDomain;
  const Tensor q = f32({2, 5, 4}), kt = f32({2, 4, 6}), v = f32({2, 6, 2});
  expect_error<ShapeError>(
      [&] {
        run_node(grad, {f32({2, 5, 3}), q, kt, v});
      },
      "dY must be float[2, 5, 2] (the forward's output), got float[2, 5, 3]");
  expect_error<TypeError>(
      [&] {
        run_node(grad, {f32({2, 5, 2}), Tensor::zeros(DType::Int64, {2, 5, 4}), kt, v});
      },
      "AttentionGrad: Q must be float32, float64, bfloat16 or float16, got int64[2, 5, 4]");
  Node kept = make_node("AttentionGrad", 7, {}, 3);
  kept.domain = kKilnDomain;
  kept.inputs[4] = kept.inputs[5] = "";
  expect_error<ShapeError>(
      [&] {
        run_node(kept, {f32({2, 5, 2}), q, kt, v, Tensor(), Tensor(), f32({2, 5, 5})});
      },
      "P must be empty or float[2, 5, 6] (the forward's probabilities), got float[2, 5, 5]");
}

// 16-bit operands (mixed precision's bfloat16 and float16) without oneDNN's bfloat16 products
// (float16 always; bfloat16 on CPUs without the instructions, or KILN_BF16=emulate): Attention and
// AttentionGrad widen the blocks they read in their own buffers and round each output once, so they
// give exactly the float32 kernels' outputs on the same values, rounded. With a mask (a fully masked
// row among its rows), a float32 or 16-bit bias, batch dims that broadcast, query blocks of 3 over 7
// rows, P kept or recomputed, and the scores' gradient dZ.
TEST(AttentionKernel, SixteenBitOperandsGiveTheFloat32KernelsOutputsRounded) {
  const Bf16Mode emulate("emulate");
  const Tensor q = random_f32({2, 3, 7, 4}, 1, -2.f, 2.f), kt = random_f32({1, 3, 4, 5}, 2, -2.f, 2.f),
               v = random_f32({2, 3, 5, 3}, 3, -1.f, 1.f), bias = random_f32({7, 5}, 4, -1.f, 1.f),
               dy = random_f32({2, 3, 7, 3}, 5, -1.f, 1.f);
  Tensor mask = Tensor::empty(DType::Bool, {7, 5});
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = i % 3 == 0 || i / 5 == 4;  // row 4: all filled
  for (const DType type : {DType::BFloat16, DType::Float16}) {
    const auto low = [&](const Tensor& t) { return cast_to(t, type); };
    const auto wide = [&](const Tensor& t) { return cast_to(cast_to(t, type), DType::Float32); };
    for (const bool low_bias : {false, true}) {
      for (const char* mode : {"keep", "recompute"}) {
        std::map<std::string, Attribute> attrs{{"probabilities", Attribute::of_string(mode)},
                                               {"block_rows", Attribute::of_int(3)},
                                               {"scale", Attribute::of_float(0.5f)},
                                               {"fill", Attribute::of_float(-1e4f)}};
        const std::string what = std::string(dtype_name(type)) + ", " + mode + (low_bias ? ", 16-bit bias" : "");
        SCOPED_TRACE(what);
        const Tensor b16 = low_bias ? low(bias) : bias, bw = low_bias ? wide(bias) : bias;
        const std::vector<Tensor> got = run_node(attention(5, attrs, 2), {low(q), low(kt), low(v), mask, b16});
        const std::vector<Tensor> want = run_node(attention(5, attrs, 2), {wide(q), wide(kt), wide(v), mask, bw});
        ASSERT_EQ(got.size(), 2u);
        for (size_t o = 0; o < got.size(); ++o) expect_bytes_equal(got[o], cast_to(want[o], type));
        Node grad = make_node("AttentionGrad", 7, attrs, 4);
        grad.domain = kKilnDomain;
        const std::vector<Tensor> dgot = run_node(grad, {low(dy), low(q), low(kt), low(v), mask, b16, got[1]});
        const std::vector<Tensor> dwant =
            run_node(grad, {wide(dy), wide(q), wide(kt), wide(v), mask, bw, cast_to(got[1], DType::Float32)});
        ASSERT_EQ(dgot.size(), 4u);
        for (size_t o = 0; o < dgot.size(); ++o) expect_bytes_equal(dgot[o], cast_to(dwant[o], type));
      }
    }
  }
}

// Attention and AttentionGrad on oneDNN's bfloat16 products (attention_bf16.h, where the CPU has the
// instructions): within bfloat16's roundings of the float32 kernels on the same values. The products
// are exact in float32 either way; this path also rounds P and dZ to bfloat16 before the products
// that read them (as a bfloat16 autocast does), and writes each output rounded once: 1e-2 relative
// (L2) bounds both, where bfloat16's own rounding is 2^-9 = 2e-3 per element. With a mask, a
// float32 and a bfloat16 bias, P kept or recomputed, dZ, and (1200 x 1200 scores per item) items
// in two chunks.
TEST(AttentionKernel, Bfloat16ProductsStayWithinBfloat16RoundingOfFloat32) {
  if (!bf16_native()) GTEST_SKIP() << "this CPU computes bfloat16 products in float32: " << bf16_compute_path();
  struct Case {
    Shape q, kt, v;
    bool masked;
  };
  for (const Case& c :
       {Case{{2, 3, 7, 4}, {2, 3, 4, 5}, {2, 3, 5, 3}, true}, Case{{3, 1200, 8}, {3, 8, 1200}, {3, 1200, 8}, false}}) {
    const int64_t sq = c.q[c.q.size() - 2], sk = c.kt.back();
    const Tensor q = random_f32(c.q, 1, -2.f, 2.f), kt = random_f32(c.kt, 2, -2.f, 2.f),
                 v = random_f32(c.v, 3, -1.f, 1.f);
    Shape y_shape = c.q;
    y_shape.back() = c.v.back();
    const Tensor dy = random_f32(y_shape, 5, -1.f, 1.f), bias = random_f32({sq, sk}, 4, -1.f, 1.f);
    Tensor mask = Tensor::empty(DType::Bool, {sq, sk});
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = c.masked && (i % 3 == 0 || i / sk == 4);
    const auto low = [](const Tensor& t) { return cast_to(t, DType::BFloat16); };
    const auto wide = [](const Tensor& t) { return cast_to(cast_to(t, DType::BFloat16), DType::Float32); };
    for (const bool low_bias : {false, true}) {
      for (const char* mode : {"keep", "recompute"}) {
        SCOPED_TRACE(to_string(c.q) + ", " + mode + (low_bias ? ", bfloat16 bias" : ""));
        std::map<std::string, Attribute> attrs{{"probabilities", Attribute::of_string(mode)},
                                               {"scale", Attribute::of_float(0.5f)},
                                               {"fill", Attribute::of_float(-1e4f)}};
        const Tensor b16 = low_bias ? low(bias) : bias, bw = low_bias ? wide(bias) : bias;
        const std::vector<Tensor> got = run_node(attention(5, attrs, 2), {low(q), low(kt), low(v), mask, b16});
        const std::vector<Tensor> want = run_node(attention(5, attrs, 2), {wide(q), wide(kt), wide(v), mask, bw});
        EXPECT_LT(test::relative_l2(cast_to(got[0], DType::Float32), want[0]), 1e-2);
        if (std::string(mode) == "keep") {
          EXPECT_LT(test::relative_l2(cast_to(got[1], DType::Float32), want[1]), 1e-2);
        }
        Node grad = make_node("AttentionGrad", 7, attrs, 4);
        grad.domain = kKilnDomain;
        const Tensor p32 =
            std::string(mode) == "keep" ? cast_to(got[1], DType::Float32) : Tensor::zeros(DType::Float32, {0});
        const std::vector<Tensor> dgot = run_node(grad, {low(dy), low(q), low(kt), low(v), mask, b16, got[1]});
        const std::vector<Tensor> dwant = run_node(grad, {wide(dy), wide(q), wide(kt), wide(v), mask, bw, p32});
        for (size_t o = 0; o < dgot.size(); ++o) {
          ASSERT_EQ(dgot[o].dtype(), DType::BFloat16) << o;
          EXPECT_LT(test::relative_l2(cast_to(dgot[o], DType::Float32), dwant[o]), 1e-2) << "output " << o;
        }
      }
    }
  }
}

Tensor transposed(const Tensor& t, std::vector<int64_t> perm) {
  return run1(make_node("Transpose", 1, {{"perm", Attribute::of_ints(std::move(perm))}}), {t});
}

std::vector<int64_t> inverse(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return inv;
}

// Within `ulps` units in the last place of `type` (float: 2^-23, bfloat16: 2^-7, float16: 2^-10)
// of the value, element by element, plus `floor` absolute.
void expect_close(const Tensor& got, const Tensor& want, DType type, double floor) {
  ASSERT_EQ(got.shape(), want.shape());
  const Tensor g = cast_to(got, DType::Float64), w = cast_to(want, DType::Float64);
  const double ulp = type == DType::Float64    ? 0
                     : type == DType::Float32  ? 0x1p-23
                     : type == DType::BFloat16 ? 0x1p-7
                                               : 0x1p-10;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double a = g.data<double>()[i], b = w.data<double>()[i];
    ASSERT_LE(std::abs(a - b), 2 * ulp * std::abs(b) + floor) << "element " << i << ": " << a << " vs " << b;
  }
}

// The perm attributes (what fold_views_into_attention writes for the exporters' head-splitting
// Transposes): Attention reading Q, Kt and V as Transpose(input, perm_*) and writing Y as
// Transpose(Y, inverse(perm_y)), and AttentionGrad reading dY so and writing dQ, dKt, dV in their
// operands' layouts, give the plain kernels' values on the transposed tensors: float64 exactly (the
// same sums in the same order), float32 within 1e-6 (the products' kernels differ with the
// layout), and the 16-bit kernels (which widen strided rows) within one rounding of theirs. Cases:
// nn.MultiheadAttention's [S, B*H, D] (the keys read from K's own layout), Hugging Face's [B, S, H,
// D] with perm_y, keys whose D axis is strided but Sk contiguous (and a perm_y that is not its own
// inverse), and K [Sk, D] broadcast over the
// batch of Q, with a mask, several query blocks, and P kept or recomputed.
TEST(AttentionKernel, PermutedOperandsGiveThePlainKernelsValues) {
  struct Case {
    Shape q, kt, v;  // as stored
    std::vector<int64_t> pq, pkt, pv, py;
    Shape mask;
  };
  const std::vector<Case> cases{
      {{7, 6, 4}, {5, 6, 4}, {5, 6, 3}, {1, 0, 2}, {1, 2, 0}, {1, 0, 2}, {1, 0, 2}, {7, 5}},
      {{2, 7, 3, 4}, {2, 5, 3, 4}, {2, 5, 3, 3}, {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 2, 1, 3}, {0, 2, 1, 3}, {1, 1, 7, 5}},
      {{2, 7, 3, 4}, {4, 2, 3, 5}, {2, 3, 5, 3}, {0, 2, 1, 3}, {1, 2, 0, 3}, {}, {1, 2, 0, 3}, {7, 5}},
      {{2, 7, 4}, {5, 4}, {2, 5, 3}, {}, {1, 0}, {}, {}, {7, 5}},
  };
  for (const DType type : {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16}) {
    const Bf16Mode emulate("emulate");
    for (size_t c = 0; c < cases.size(); ++c) {
      const Case& k = cases[c];
      const auto in = [&](const Shape& s, uint64_t seed, float r) { return cast_to(random_f32(s, seed, -r, r), type); };
      const Tensor q = in(k.q, 1, 2.f), kt = in(k.kt, 2, 2.f), v = in(k.v, 3, 1.f);
      Tensor mask = Tensor::empty(DType::Bool, k.mask);
      for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = i % 4 == 1;
      const auto view = [](const Tensor& t, const std::vector<int64_t>& p) { return p.empty() ? t : transposed(t, p); };
      const Tensor lq = view(q, k.pq), lkt = view(kt, k.pkt), lv = view(v, k.pv);
      for (const char* mode : {"keep", "recompute"}) {
        SCOPED_TRACE(testing::Message() << dtype_name(type) << ", case " << c << ", " << mode);
        std::map<std::string, Attribute> plain{{"probabilities", Attribute::of_string(mode)},
                                               {"block_rows", Attribute::of_int(3)},
                                               {"scale", Attribute::of_float(0.5f)},
                                               {"fill", Attribute::of_float(-1e4f)}};
        std::map<std::string, Attribute> views = plain;
        for (const auto& [name, p] :
             {std::pair{"perm_q", k.pq}, {"perm_kt", k.pkt}, {"perm_v", k.pv}, {"perm_y", k.py}})
          if (!p.empty()) views[name] = Attribute::of_ints(p);
        const std::vector<Tensor> want = run_node(attention(4, plain, 2), {lq, lkt, lv, mask});
        const std::vector<Tensor> got = run_node(attention(4, views, 2), {q, kt, v, mask});
        const Tensor want_y = k.py.empty() ? want[0] : transposed(want[0], inverse(k.py));
        expect_close(got[0], want_y, type, type == DType::Float32 ? 1e-6 : 0);
        expect_close(got[1], want[1], type, type == DType::Float32 ? 1e-6 : 0);
        const Tensor dy = in(want_y.shape(), 5, 1.f);
        const Tensor ldy = k.py.empty() ? dy : transposed(dy, k.py);
        Node grad = make_node("AttentionGrad", 7, plain, 3);
        grad.domain = kKilnDomain;
        grad.inputs[5] = "";
        const std::vector<Tensor> dwant = run_node(grad, {ldy, lq, lkt, lv, mask, Tensor(), want[1]});
        grad.attrs = views;
        const std::vector<Tensor> dgot = run_node(grad, {dy, q, kt, v, mask, Tensor(), got[1]});
        const std::vector<int64_t>* perms[] = {&k.pq, &k.pkt, &k.pv};
        for (size_t o = 0; o < 3; ++o) {
          SCOPED_TRACE(testing::Message() << "gradient " << o);
          std::vector<int64_t> back = *perms[o];
          const size_t rank = dwant[o].shape().size();
          if (!back.empty() && back.size() < rank) {  // the batch it broadcast over leads
            const auto extra = static_cast<int64_t>(rank - back.size());
            for (int64_t& a : back) a += extra;
            for (int64_t a = extra; a-- > 0;) back.insert(back.begin(), a);
          }
          expect_close(dgot[o], back.empty() ? dwant[o] : transposed(dwant[o], inverse(back)), type,
                       type == DType::Float32   ? 1e-5
                       : type == DType::Float64 ? 0
                                                : 1e-3);
        }
      }
    }
  }
}

// Perm attributes that are not permutations, or that leave an operand's matrix without a unit
// step, are errors naming the node.
TEST(AttentionKernel, BadPermAttributesAreErrorsNamingTheNode) {
  const Tensor q = f32({5, 2, 4}), kt = f32({2, 4, 6}), v = f32({2, 6, 3});
  expect_error<InvalidModel>(
      [&] {
        run_node(attention(3, {{"perm_q", Attribute::of_ints({1, 0})}}), {q, kt, v});
      },
      {"node 'n'", "perm_q must be a permutation of the 3 axes of its operand, got [1, 0]"});
  expect_error<InvalidModel>(
      [&] {
        run_node(attention(3, {{"perm_q", Attribute::of_ints({1, 2, 0})}}), {f32({4, 2, 5}), kt, v});
      },
      {"node 'n'", "Q's layout", "neither its rows nor its columns contiguous"});
  expect_error<InvalidModel>(
      [&] {
        run_node(attention(3, {{"perm_y", Attribute::of_ints({0, 1})}}), {f32({2, 5, 4}), kt, v});
      },
      {"node 'n'", "perm_y must be a permutation of the 3 axes of its operand, got [0, 1]"});
}

}  // namespace
}  // namespace kiln
