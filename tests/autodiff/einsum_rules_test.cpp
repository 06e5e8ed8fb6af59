// Finite-difference checks of Einsum's gradient rule: matrix products, batches, transposes, full
// and partial sums, outer and dot products, implicit outputs, ellipses that broadcast or are
// summed away, labels only one operand has; and the Unsupported forms.
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"
#include "kiln/error.h"
#include "test_util.h"

namespace kiln::testing::math {
namespace {

using kiln::test::expect_error;

Node einsum(const std::string& eq, size_t n_in) {
  return op("Einsum", n_in, 1, {{"equation", Attribute::of_string(eq)}});
}

TEST(EinsumGradients, TwoOperandEquations) {
  uint64_t seed = 900;
  struct Case {
    const char* eq;
    Shape a, b;
  };
  for (const Case& c : {Case{"ij,jk->ik", {3, 4}, {4, 2}}, Case{"bij,bjk->bik", {2, 3, 4}, {2, 4, 3}},
                        Case{"bhqd,bhkd->bhqk", {1, 2, 3, 2}, {1, 2, 4, 2}}, Case{"ij,jk", {2, 3}, {3, 4}},
                        Case{"i,i->", {5}, {5}}, Case{"i,j->ij", {3}, {4}}, Case{"ij,ij->i", {3, 4}, {3, 4}},
                        Case{"ij,k->ik", {2, 3}, {4}}, Case{"...ij,...jk->...ik", {2, 1, 3, 4}, {3, 4, 2}},
                        Case{"...ij,...jk->ik", {2, 3, 4}, {2, 4, 2}}, Case{"ij , jk -> ki", {2, 3}, {3, 2}}}) {
    ++seed;
    SCOPED_TRACE(c.eq);
    both({einsum(c.eq, 2), {random_tensor(c.a, seed), random_tensor(c.b, seed + 50)}, {0, 1}, 17, seed});
  }
}

TEST(EinsumGradients, OneAndThreeOperands) {
  uint64_t seed = 950;
  struct Case {
    const char* eq;
    Shape a;
  };
  for (const Case& c : {Case{"ij->ji", {3, 4}}, Case{"ij->", {3, 4}}, Case{"ijk->j", {2, 3, 4}}, Case{"ba", {2, 3}},
                        Case{"...i->...", {2, 3, 4}}, Case{"...ij->ij", {2, 3, 4}}}) {
    ++seed;
    SCOPED_TRACE(c.eq);
    both({einsum(c.eq, 1), {random_tensor(c.a, seed)}, {0}, 17, seed});
  }
  both({einsum("ij,jk,kl->il", 3),
        {random_tensor({2, 3}, 960), random_tensor({3, 4}, 961), random_tensor({4, 2}, 962)},
        {0, 1, 2},
        17,
        960});
}

// A repeated label: the trace or diagonal of the operand that repeats it, differentiated through
// both operands (its gradient is the diagonal's put back on the diagonal), at opset 17 and 12, with a
// leading ellipsis too; with an ellipsis after the term's start it is Unsupported, the term named.
TEST(EinsumGradients, RepeatedLabels) {
  both({einsum("ii,j->j", 2), {random_tensor({3, 3}, 970), random_tensor({4}, 971)}, {0, 1}, 17, 970});
  both({einsum("ii->i", 1), {random_tensor({3, 3}, 972)}, {0}, 17, 972});
  both({einsum("ii", 1), {random_tensor({4, 4}, 976)}, {0}, 17, 976});
  both({einsum("iji,jk->ik", 2), {random_tensor({3, 2, 3}, 977), random_tensor({2, 4}, 978)}, {0, 1}, 17, 977});
  both({einsum("iijj->ij", 1), {random_tensor({2, 2, 3, 3}, 979)}, {0}, 17, 979});
  both({einsum("ii->i", 1), {random_tensor({3, 3}, 980)}, {0}, 12, 980});
  // With a leading ellipsis: batched diagonals, one broadcast against the other operand's ellipsis
  // (summed back), and two repeated labels at opset 12.
  both({einsum("...ii->...i", 1), {random_tensor({2, 3, 3}, 981)}, {0}, 17, 981});
  both({einsum("...ii,...i->...", 2), {random_tensor({1, 3, 3}, 982), random_tensor({2, 4, 3}, 983)}, {0, 1}, 17, 982});
  both({einsum("...iijj->...ij", 1), {random_tensor({2, 2, 2, 3, 3}, 984)}, {0}, 12, 984});
  expect_error<Unsupported>(
      [&] {
        check_gradient({einsum("i...i->...", 1), {random_tensor({3, 2, 3}, 985)}, {0}, 17, 985});
      },
      "'i...i'");
  EXPECT_THROW(check_gradient({einsum("i...j->ij", 1), {random_tensor({2, 3, 4}, 973)}, {0}, 17, 973}), Unsupported);
  EXPECT_THROW(
      check_gradient(
          {einsum("i...j,...j->i", 2), {random_tensor({2, 3, 4}, 974), random_tensor({3, 4}, 975)}, {0}, 17, 974}),
      Unsupported);
}

// Einsum-12 predates Unsqueeze's axes input.
TEST(EinsumGradients, Opset12) {
  both({einsum("ij,k->ik", 2), {random_tensor({2, 3}, 990), random_tensor({4}, 991)}, {0, 1}, 12, 990});
}

// An ellipsis inside a term that nothing broadcasts against and the output keeps, with labels only
// that operand has before and after it.
TEST(EinsumGradients, InnerEllipsis) {
  both({einsum("i...j,jk->i...k", 2), {random_tensor({2, 3, 2, 4}, 980), random_tensor({4, 3}, 981)}, {0, 1}, 17, 980});
  both({einsum("ai...jb->...j", 1), {random_tensor({2, 3, 4, 2, 3}, 982)}, {0}, 17, 982});
}

}  // namespace
}  // namespace kiln::testing::math
