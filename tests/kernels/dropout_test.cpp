// Dropout in inference: identity output, all-true mask; training mode refused (unless ratio is 0,
// where the spec's result is the identity too).
#include <gtest/gtest.h>

#include "kiln/kernel.h"

namespace kiln {
namespace {

Node dropout(size_t inputs, size_t outputs, std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = "drop";
  n.op_type = "Dropout";
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back("x" + std::to_string(i));
  for (size_t i = 0; i < outputs; ++i) n.outputs.push_back("y" + std::to_string(i));
  n.attrs = std::move(attrs);
  return n;
}

const Tensor kX = Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0, 5.5f, -6});

void expect_identity_and_mask(const std::vector<Tensor>& out) {
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[0].shape(), kX.shape());
  for (int64_t i = 0; i < kX.numel(); ++i) EXPECT_EQ(out[0].data<float>()[i], kX.data<float>()[i]);
  ASSERT_EQ(out[1].dtype(), DType::Bool);
  ASSERT_EQ(out[1].shape(), kX.shape());
  for (int64_t i = 0; i < kX.numel(); ++i) EXPECT_TRUE(out[1].data<bool>()[i]);
}

TEST(Dropout, InferenceIsIdentityWithAnAllTrueMask) {
  expect_identity_and_mask(run_node(dropout(1, 2), {kX}, 13));
  expect_identity_and_mask(run_node(dropout(3, 2), {kX, Tensor::scalar<float>(0.7f), Tensor::scalar<bool>(false)}, 13));
  expect_identity_and_mask(run_node(dropout(1, 2, {{"ratio", Attribute::of_float(0.2f)}}), {kX}, 11));
  // Ratio 0 in training mode keeps everything: the identity, by the spec.
  expect_identity_and_mask(run_node(dropout(3, 2), {kX, Tensor::scalar<float>(0.f), Tensor::scalar<bool>(true)}, 13));
  const auto one = run_node(dropout(1, 1), {kX}, 13);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].data<float>()[4], 5.5f);
}

TEST(Dropout, TrainingModeIsUnsupportedForNow) {
  try {
    run_node(dropout(3, 1), {kX, Tensor::scalar<float>(0.5f), Tensor::scalar<bool>(true)}, 13);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(
        std::string(e.what()).find("Dropout in training mode arrives with training (training_mode=true, ratio=0.5)"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(run_node(dropout(2, 1), {kX, Tensor::scalar<float>(1.f)}, 13), InvalidModel);  // ratio in [0, 1)
  EXPECT_THROW(run_node(dropout(1, 1, {{"ratio", Attribute::of_float(1.5f)}}), {kX}, 10), InvalidModel);
}

}  // namespace
}  // namespace kiln
