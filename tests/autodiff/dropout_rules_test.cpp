// The Dropout rule: in training mode the gradient drops exactly the elements the forward's mask
// dropped and scales the rest by 1 / (1 - ratio); in inference it is the identity.
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "kiln/autodiff.h"
#include "kiln/session.h"
#include "test_util.h"

namespace kiln::testing {
namespace {

using kiln::test::expect_error;

ValueInfo value(const std::string& name, DType dtype, Shape shape) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_type = v.has_shape = true;
  for (int64_t d : shape) v.dims.push_back(Dim{d, ""});
  return v;
}

// loss = sum(Dropout(w * 1, ratio, training) * r); outputs loss, the mask and d loss / d w.
Model dropout_model(const Tensor& w, const Tensor& r, double ratio, bool training, bool with_mask) {
  Model m;
  m.opsets = {{"", 13}};
  m.graph.initializers = {
      {"w", w}, {"r", r}, {"ratio", Tensor::scalar<double>(ratio)}, {"training", Tensor::scalar<bool>(training)}};
  Node drop;
  drop.name = "drop";
  drop.op_type = "Dropout";
  drop.inputs = {"w", "ratio", "training"};
  drop.outputs = with_mask ? std::vector<std::string>{"y", "mask"} : std::vector<std::string>{"y"};
  Node mul;
  mul.op_type = "Mul";
  mul.inputs = {"y", "r"};
  mul.outputs = {"p"};
  Node sum;
  sum.op_type = "ReduceSum";
  sum.inputs = {"p"};
  sum.outputs = {"loss"};
  sum.attrs["keepdims"] = Attribute::of_int(0);
  m.graph.nodes = {drop, mul, sum};
  m.graph.outputs = {value("loss", DType::Float64, {})};
  if (with_mask) m.graph.outputs.push_back(value("mask", DType::Bool, w.shape()));
  return m;
}

TEST(DropoutRules, TrainingGradientReusesTheForwardMask) {
  const Tensor w = random_tensor({6, 50}, 400), r = random_tensor({6, 50}, 401);
  const double ratio = 0.4;
  GradientGraph g = build_gradient_graph(dropout_model(w, r, ratio, true, true), {.loss = "loss"});
  Session s(g.model);
  for (int step = 0; step < 2; ++step) {  // a new mask each run; the gradient follows it each time
    auto out = s.run({});
    const Tensor& mask = out.at("mask");
    const Tensor& grad = out.at("w_grad");
    int64_t kept = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      const bool k = mask.data<bool>()[i];
      kept += k;
      EXPECT_EQ(grad.data<double>()[i], k ? r.data<double>()[i] * (1.0 / (1.0 - ratio)) : 0.0) << i;
    }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, w.numel());
  }
}

TEST(DropoutRules, InferenceIsTheIdentity) {
  const Tensor w = random_tensor({3, 4}, 410), r = random_tensor({3, 4}, 411);
  GradientGraph g = build_gradient_graph(dropout_model(w, r, 0.5, false, true), {.loss = "loss"});
  auto out = Session(g.model).run({});
  for (int64_t i = 0; i < w.numel(); ++i) EXPECT_EQ(out.at("w_grad").data<double>()[i], r.data<double>()[i]);
  // No training_mode input: identity through the finite-difference checker too.
  Node n;
  n.op_type = "Dropout";
  n.inputs = {"in"};
  n.outputs = {"out"};
  check_gradient({n, {random_tensor({3, 4}, 412)}, {0}, 13, 412});
}

TEST(DropoutRules, TrainingWithoutAMaskOutputIsNamed) {
  const Tensor w = random_tensor({3, 4}, 420), r = random_tensor({3, 4}, 421);
  expect_error<Unsupported>([&] { build_gradient_graph(dropout_model(w, r, 0.5, true, false), {.loss = "loss"}); },
                            {"needs the forward's mask output", "drop"});
}

}  // namespace
}  // namespace kiln::testing
