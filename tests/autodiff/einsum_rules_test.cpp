// Finite-difference checks of Einsum's gradient rule: matrix products, batches, transposes, full
// and partial sums, outer and dot products, implicit outputs, ellipses that broadcast or are
// summed away (leading or inner), labels only one operand has, repeated labels; and the one
// Unsupported form (an inner ellipsis of unknown rank).
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"
#include "kiln/autodiff.h"
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
  // An ellipsis after the term's start, with a repeated label: the operand is transposed so that the
  // ellipsis leads.
  both({einsum("i...i->...", 1), {random_tensor({3, 2, 3}, 985)}, {0}, 17, 985});
  both({einsum("i...i,...->i", 2), {random_tensor({3, 1, 4, 3}, 986), random_tensor({2, 4}, 987)}, {0, 1}, 17, 986});
  both({einsum("ij...i->j...", 1), {random_tensor({2, 3, 2}, 988)}, {0}, 12, 988});
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

// An inner ellipsis summed away or broadcast against another operand's: the operand is transposed so
// that the ellipsis leads, and the broadcast dims are summed back before transposing back.
TEST(EinsumGradients, InnerEllipsisBroadcastOrSummed) {
  struct Case {
    const char* eq;
    Shape a, b;
  };
  uint64_t seed = 1000;
  for (const Case& c : {Case{"i...j->ij", {2, 3, 4}, {}}, Case{"i...j,...j->i", {2, 3, 4}, {3, 4}},
                        Case{"i...j,...j->i", {2, 3, 4}, {4}}, Case{"i...j,...j->i...", {2, 1, 4}, {3, 4}},
                        Case{"i...j,j...->...", {2, 3, 1, 4}, {4, 1, 5}}, Case{"i...,...->i", {2}, {3}}}) {
    ++seed;
    SCOPED_TRACE(c.eq);
    const bool two = !c.b.empty() || std::string(c.eq).find(',') != std::string::npos;
    if (two) both({einsum(c.eq, 2), {random_tensor(c.a, seed), random_tensor(c.b, seed + 50)}, {0, 1}, 17, seed});
    else both({einsum(c.eq, 1), {random_tensor(c.a, seed)}, {0}, 17, seed});
  }
}

// A leading ellipsis summed away whose operand's dims outnumber the other operand's: the gradient is
// expanded back to them.
TEST(EinsumGradients, LeadingEllipsisSummedAwayAndBroadcast) {
  both({einsum("...ij,...j->i", 2), {random_tensor({5, 3, 2}, 1010), random_tensor({2}, 1011)}, {0, 1}, 17, 1010});
  both(
      {einsum("...ij,...j->i", 2), {random_tensor({2, 1, 3, 2}, 1012), random_tensor({4, 2}, 1013)}, {0, 1}, 17, 1012});
}

// An inner ellipsis that needs the operand's rank, which shape inference could not give: Unsupported,
// naming the term and the value.
TEST(EinsumGradients, InnerEllipsisOfUnknownRank) {
  Model m;
  m.opsets[""] = 17;
  m.graph.initializers = {{"w", random_tensor({2, 3, 4}, 1020)}};
  ValueInfo shape{.name = "s", .dtype = DType::Int64, .has_type = true};  // of unknown length
  m.graph.inputs = {shape};
  Node reshape = op("Reshape", 2);
  reshape.inputs = {"w", "s"};
  reshape.outputs = {"x"};
  Node e = einsum("i...j,...j->", 2);
  e.inputs = {"x", "w"};
  e.outputs = {"loss"};
  m.graph.nodes = {reshape, e};
  m.graph.outputs = {ValueInfo::of("loss", Tensor::scalar<double>(0))};
  expect_error<Unsupported>([&] { build_gradient_graph(m, {.loss = "loss"}); }, {"'i...j'", "needs the rank of 'x'"});
}

}  // namespace
}  // namespace kiln::testing::math
