// The optimizer loops compiled for each instruction set (optimizer_common.h: parallel_simd_loop)
// must give the same bits: fma, sqrt and division are exactly rounded at any vector width, so a
// model's trajectory cannot depend on the CPU it trains on. Each copy the CPU running the test can
// execute is compared with the baseline copy and with a plain scalar loop, in place and not.
#include "kernels/cpu/optimizer_loops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/optimizer_common.h"

namespace kiln::optim {
namespace {

constexpr int64_t kSize = 1037;  // not a multiple of any vector width: the loops' tails run too

std::vector<float> random_values(std::mt19937& rng, float scale, bool positive) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(kSize);
  for (auto& x : v) x = positive ? std::fabs(d(rng)) : d(rng);
  return v;
}

struct Buffers {
  std::vector<float> x, g, m, v;
};

Buffers make_buffers(unsigned seed) {
  std::mt19937 rng(seed);
  Buffers b{random_values(rng, 1.f, false), random_values(rng, 0.1f, false), random_values(rng, 0.01f, false),
            random_values(rng, 1e-4f, true)};
  b.g[5] = 0.f;  // a zero gradient and a zero second moment: sqrt(0), the eps-only denominator
  b.v[5] = 0.f;
  return b;
}

enum class Copy { Baseline, Avx2, Avx512, Dispatched };

// The copies this CPU can run.
std::vector<Copy> copies() {
  std::vector<Copy> c = {Copy::Baseline, Copy::Dispatched};
#if defined(__x86_64__) && defined(__GNUC__)
  if (simd_level() >= SimdLevel::Avx2) c.push_back(Copy::Avx2);
  if (simd_level() >= SimdLevel::Avx512) c.push_back(Copy::Avx512);
#endif
  return c;
}

template <auto Body, class Args>
void run_copy(Copy copy, const Args& a) {
  switch (copy) {
#if defined(__x86_64__) && defined(__GNUC__)
    case Copy::Avx2:
      return run_chunk_avx2<Body>(a, 0, kSize);
    case Copy::Avx512:
      return run_chunk_avx512<Body>(a, 0, kSize);
#endif
    case Copy::Dispatched:
      return parallel_simd_loop<Body>(kSize, a);
    default:
      return run_chunk<Body>(a, 0, kSize);
  }
}

// One AdamW update (torch's, or transformers' when `hf`) by `copy` over copies of `in`; in place
// (outputs over inputs) or into fresh buffers.
Buffers run_adamw(const Buffers& in, bool in_place, bool hf, Copy copy) {
  Buffers src = in, dst{std::vector<float>(kSize), {}, std::vector<float>(kSize), std::vector<float>(kSize)};
  Buffers& out = in_place ? src : dst;
  const AdamWArgs<float> a{.x = src.x.data(),
                           .g = src.g.data(),
                           .m = src.m.data(),
                           .v = src.v.data(),
                           .x_out = out.x.data(),
                           .m_out = out.m.data(),
                           .v_out = out.v.data(),
                           .decay = hf ? -1e-4f : 0.9999f,
                           .b1 = 0.9f,
                           .one_minus_b1 = 0.1f,
                           .b2 = 0.999f,
                           .one_minus_b2 = 0.001f,
                           .bc2_sqrt = hf ? 1.f : 0.0316f,
                           .eps = 1e-8f,
                           .neg_step_size = -0.01f,
                           .flag = hf};
  if (hf) run_copy<adamw_hf<float>>(copy, a);
  else run_copy<adamw_torch<float>>(copy, a);
  return out;
}

// One SGD update with momentum, weight decay and Nesterov (the buffer in Buffers::m).
Buffers run_sgd(const Buffers& in, bool in_place, Copy copy) {
  Buffers src = in, dst{std::vector<float>(kSize), {}, std::vector<float>(kSize), {}};
  Buffers& out = in_place ? src : dst;
  const SGDArgs<float> a{.x = src.x.data(),
                         .g = src.g.data(),
                         .buf = src.m.data(),
                         .x_out = out.x.data(),
                         .buf_out = out.m.data(),
                         .neg_lr = -0.05f,
                         .wd = 1e-3f,
                         .mom = 0.9f,
                         .one_minus_damp = 1.f,
                         .first = false,
                         .use_wd = true,
                         .use_momentum = true,
                         .nesterov = true,
                         .maximize = false};
  run_copy<sgd_torch<float>>(copy, a);
  return out;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
}

void expect_same(const Buffers& got, const Buffers& want) {
  expect_same_bits(got.x, want.x, "x");
  expect_same_bits(got.m, want.m, "m");
  expect_same_bits(got.v, want.v, "v");
}

// The torch AdamW arithmetic written out element by element, as the file comment of
// optimizer_kiln.cpp states it.
Buffers scalar_adamw(const Buffers& in) {
  Buffers out = in;
  for (int64_t i = 0; i < kSize; ++i) {
    const float g = in.g[i];
    out.m[i] = std::fma(g, 0.1f, in.m[i] * 0.9f);
    out.v[i] = std::fma(0.001f * g, g, in.v[i] * 0.999f);
    out.x[i] = in.x[i] * 0.9999f + (-0.01f * out.m[i]) / (std::sqrt(out.v[i]) / 0.0316f + 1e-8f);
  }
  return out;
}

TEST(OptimizerLoops, AdamWGivesTheSameBitsOnEveryInstructionSet) {
  const Buffers in = make_buffers(7);
  for (const bool in_place : {false, true}) {
    const Buffers want = scalar_adamw(in);
    const Buffers want_hf = run_adamw(in, in_place, true, Copy::Baseline);
    for (const Copy copy : copies()) {
      SCOPED_TRACE(::testing::Message() << "copy " << static_cast<int>(copy) << ", in place " << in_place);
      expect_same(run_adamw(in, in_place, false, copy), want);
      expect_same(run_adamw(in, in_place, true, copy), want_hf);
    }
  }
}

TEST(OptimizerLoops, SGDGivesTheSameBitsOnEveryInstructionSet) {
  const Buffers in = make_buffers(11);
  for (const bool in_place : {false, true}) {
    const Buffers want = run_sgd(in, in_place, Copy::Baseline);
    for (const Copy copy : copies()) {
      SCOPED_TRACE(::testing::Message() << "copy " << static_cast<int>(copy) << ", in place " << in_place);
      const Buffers got = run_sgd(in, in_place, copy);
      expect_same_bits(got.x, want.x, "x");
      expect_same_bits(got.m, want.m, "momentum buffer");
    }
  }
}

}  // namespace
}  // namespace kiln::optim
