// Finite-difference checks of ai.kiln.Attention's rule (ai.kiln.AttentionGrad, which recomputes the
// probabilities: a one-output node keeps none): plain and scaled; a causal mask under a -inf, a very
// negative and a positive fill (where the mask's zero gradient shows), either polarity; an additive
// bias that needs its own gradient; batch dims broadcast (keys shared across the batch, a per-head
// bias); more query rows than one block holds.
#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

using indexing::node;

Node attention(const std::vector<Tensor>& inputs, double scale, std::map<std::string, Attribute> more = {}) {
  more["scale"] = Attribute::of_float(static_cast<float>(scale));
  Node n = node("Attention", inputs, std::move(more));
  n.domain = kKilnDomain;
  return n;
}

Tensor causal(int64_t sq, int64_t sk, bool masked) {
  Tensor t = Tensor::empty(DType::Bool, {sq, sk});
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j) t.data<bool>()[i * sk + j] = (j > i) == masked;
  return t;
}

TEST(AttentionRules, PlainAndScaled) {
  uint64_t seed = 700;
  for (const double scale : {1.0, 0.35}) {
    const std::vector<Tensor> in{random_tensor({2, 3, 5, 4}, ++seed, -2, 2), random_tensor({2, 3, 4, 6}, ++seed, -2, 2),
                                 random_tensor({2, 3, 6, 3}, ++seed)};
    both({attention(in, scale), in, {0, 1, 2}, 17, seed});
  }
}

TEST(AttentionRules, MaskedWithEitherFillAndPolarity) {
  uint64_t seed = 720;
  for (const bool fill_where : {true, false})
    for (const double fill : {-double(INFINITY), -30.0, 0.5}) {
      SCOPED_TRACE(::testing::Message() << "fill_where " << fill_where << ", fill " << fill);
      const std::vector<Tensor> in{random_tensor({2, 5, 3}, ++seed, -2, 2), random_tensor({2, 3, 5}, ++seed, -2, 2),
                                   random_tensor({2, 5, 4}, ++seed), causal(5, 5, fill_where)};
      both({attention(in, 0.5,
                      {{"fill", Attribute::of_float(static_cast<float>(fill))},
                       {"fill_where", Attribute::of_int(fill_where ? 1 : 0)}}),
            in,
            {0, 1, 2},
            17,
            seed});
    }
}

TEST(AttentionRules, BiasGetsTheScoresGradient) {
  const std::vector<Tensor> in{random_tensor({2, 2, 4, 3}, 740, -2, 2), random_tensor({2, 2, 3, 5}, 741, -2, 2),
                               random_tensor({2, 2, 5, 3}, 742), Tensor(), random_tensor({2, 1, 1, 5}, 743, -1, 1)};
  both({attention(in, 0.7), in, {0, 1, 2, 4}, 17, 740});
}

// Keys, values and the mask shared across the batch (dims of 1), a bias per head; and blocks of 2
// query rows (block_rows) over 5 queries: three blocks, dKt and dV summed across them.
TEST(AttentionRules, BroadcastBatchAndSeveralBlocks) {
  const std::vector<Tensor> in{random_tensor({3, 2, 4, 3}, 760, -2, 2), random_tensor({1, 2, 3, 6}, 761, -2, 2),
                               random_tensor({2, 6, 2}, 762), causal(4, 6, true), random_tensor({2, 1, 6}, 763)};
  both({attention(in, 0.5, {{"fill", Attribute::of_float(-INFINITY)}}), in, {0, 1, 2, 4}, 17, 760});
  const std::vector<Tensor> blocks{random_tensor({2, 5, 3}, 770, -2, 2), random_tensor({2, 3, 6}, 771, -2, 2),
                                   random_tensor({2, 6, 2}, 772), causal(5, 6, true)};
  both({attention(blocks, 0.5, {{"fill", Attribute::of_float(-INFINITY)}, {"block_rows", Attribute::of_int(2)}}),
        blocks,
        {0, 1, 2},
        17,
        770});
}

}  // namespace
}  // namespace kiln::testing
