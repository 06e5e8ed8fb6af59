// kiln::nn layers: torch's default initialisation (bounds and moments), parameter names, traced
// output shapes with dynamic dims, the nodes each mode emits, extra_repr, and validation errors in
// torch's words. Numerical parity with torch is tests/python/test_nn_layers.py.
#include "kiln/nn/layers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "test_util.h"

namespace kiln::nn {
namespace {

using kiln::test::expect_error;
using kiln::test::has;

struct Moments {
  double min = 1e300, max = -1e300, mean = 0, var = 0;
};

Moments moments(const Tensor& t) {
  Moments m;
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    m.min = std::min(m.min, double(p[i]));
    m.max = std::max(m.max, double(p[i]));
    m.mean += p[i];
  }
  m.mean /= double(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) m.var += (p[i] - m.mean) * (p[i] - m.mean);
  m.var /= double(t.numel());
  return m;
}

// U(-b, b): every value inside, the range used up to its edges, and mean and variance (b^2 / 3)
// within 5 standard errors for n draws (the sample variance's is sqrt(4/45/n) b^2).
void expect_uniform(const Tensor& t, double bound) {
  const Moments m = moments(t);
  const double n = double(t.numel());
  EXPECT_GE(m.min, -bound);
  EXPECT_LE(m.max, bound);
  // P(every draw below b (1 - 20/n)) = (1 - 10/n)^n < e^-10
  EXPECT_GT(m.max, bound * (1 - 20 / n));
  EXPECT_LT(m.min, -bound * (1 - 20 / n));
  EXPECT_LE(std::abs(m.mean), 5 * bound / std::sqrt(3.0 * n));
  EXPECT_NEAR(m.var, bound * bound / 3, 5 * std::sqrt(4.0 / 45.0 / n) * bound * bound);
}

void expect_constant(const Tensor& t, float v) {
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], v) << i;
}

// The traced output (a Var is plain data: it outlives its Tracer).
Var trace(Module& m, std::vector<int64_t> shape, DType dtype = DType::Float32) {
  Tracer t;
  return m.call(t, t.input("input", dtype, shape));
}

Model traced_model(Module& m, std::vector<int64_t> shape, DType dtype = DType::Float32) {
  ExportOptions options;
  options.input_dtypes = {dtype};
  return m.to_onnx({{"input", shape}}, {}, options);
}

// A copy, so that a caller may pass a temporary model (a reference into it would dangle).
Node only_node(const Model& model, const std::string& op) {
  const Node* found = nullptr;
  for (const Node& n : model.graph.nodes)
    if (n.op_type == op) {
      EXPECT_EQ(found, nullptr) << "two " << op << " nodes";
      found = &n;
    }
  if (!found) throw KeyError("no " + op + " node");
  return *found;
}

TEST(NnLayersInit, LinearAndConvFollowTorchsKaimingUniformAndBiasBounds) {
  manual_seed(0);
  Linear lin(256, 128);
  // kaiming_uniform_(a=sqrt(5)): bound = sqrt(3) * sqrt(2 / 6) / sqrt(fan_in) = 1 / sqrt(fan_in)
  expect_uniform(lin.get_parameter("weight"), 1.0 / 16);
  expect_uniform(lin.get_parameter("bias"), 1.0 / 16);
  EXPECT_EQ(lin.get_parameter("weight").shape(), (Shape{128, 256}));

  Conv2d conv(Conv2dOptions(16, 512, 3));
  expect_uniform(conv.get_parameter("weight"), 1.0 / 12);  // fan_in 16 * 3 * 3
  expect_uniform(conv.get_parameter("bias"), 1.0 / 12);

  // torch takes ConvTranspose's fan_in from weight dim 1 (out / groups) times the kernel.
  ConvTranspose2d deconv(ConvTranspose2dOptions(64, 32, 4).groups(2));
  EXPECT_EQ(deconv.get_parameter("weight").shape(), (Shape{64, 16, 4, 4}));
  expect_uniform(deconv.get_parameter("weight"), 1.0 / 16);
  expect_uniform(deconv.get_parameter("bias"), 1.0 / 16);

  Conv1d c1(Conv1dOptions(4, 8, 5).bias(false));
  EXPECT_EQ(c1.state_dict().size(), 1u);
}

TEST(NnLayersInit, EmbeddingIsStandardNormalWithAZeroPaddingRow) {
  manual_seed(0);
  Embedding emb(1000, 64, -1);
  EXPECT_EQ(emb.padding_idx(), 999);
  const Tensor& w = emb.get_parameter("weight");
  const Moments m = moments(w);
  EXPECT_LE(std::abs(m.mean), 5.0 / std::sqrt(double(w.numel())));
  EXPECT_NEAR(m.var, 1.0, 5 * std::sqrt(2.0 / double(w.numel())));  // 5 standard errors
  for (int64_t j = 0; j < 64; ++j) EXPECT_EQ(w.data<float>()[999 * 64 + j], 0.f);
}

TEST(NnLayersInit, NormsStartAtOnesZerosAndTorchsBuffers) {
  BatchNorm2d bn(8);
  const StateDict sd = bn.state_dict();
  ASSERT_EQ(sd.size(), 5u);
  const char* keys[] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(sd[i].first, keys[i]);
  expect_constant(sd[0].second, 1.f);
  expect_constant(sd[1].second, 0.f);
  expect_constant(sd[2].second, 0.f);
  expect_constant(sd[3].second, 1.f);
  EXPECT_EQ(sd[4].second.dtype(), DType::Int64);
  EXPECT_EQ(sd[4].second.rank(), 0);
  EXPECT_EQ(BatchNorm1d(4, 1e-5, 0.1, false, false).state_dict().size(), 0u);

  LayerNorm ln({3, 4});
  expect_constant(ln.get_parameter("weight"), 1.f);
  expect_constant(ln.get_parameter("bias"), 0.f);
  EXPECT_EQ(ln.get_parameter("weight").shape(), (Shape{3, 4}));
  EXPECT_EQ(LayerNorm({4}, 1e-5, true, false).state_dict().size(), 1u);
  GroupNorm gn(2, 6);
  expect_constant(gn.get_parameter("weight"), 1.f);
  expect_constant(gn.get_parameter("bias"), 0.f);
}

TEST(NnLayersInit, ManualSeedMakesInitialisationRepeatable) {
  manual_seed(7);
  Linear a(8, 8);
  manual_seed(7);
  Linear b(8, 8);
  Linear c(8, 8);
  const Tensor &wa = a.get_parameter("weight"), &wb = b.get_parameter("weight"), &wc = c.get_parameter("weight");
  EXPECT_EQ(std::memcmp(wa.raw_data(), wb.raw_data(), wa.nbytes()), 0);
  EXPECT_NE(std::memcmp(wa.raw_data(), wc.raw_data(), wa.nbytes()), 0);
}

TEST(NnLayersShapes, ConvPoolChainPropagatesDynamicDims) {
  Conv2d conv(Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false));
  EXPECT_EQ(trace(conv, {-1, 3, 224, 224}).shape, (std::vector<int64_t>{-1, 64, 112, 112}));
  EXPECT_EQ(trace(conv, {2, 3, -1, 15}).shape, (std::vector<int64_t>{2, 64, -1, 8}));
  MaxPool2d pool(MaxPool2dOptions(3).stride(2).padding(1));
  EXPECT_EQ(trace(pool, {-1, 64, 112, 112}).shape, (std::vector<int64_t>{-1, 64, 56, 56}));
  // torch's ceil_mode: 5 -> ceil((5 - 2) / 2) + 1 = 3 windows, the last starting inside
  MaxPool2d ceil(MaxPool2dOptions(2).ceil_mode(true));
  EXPECT_EQ(trace(ceil, {1, 1, 5, 4}).shape, (std::vector<int64_t>{1, 1, 3, 2}));
  ConvTranspose2d up(ConvTranspose2dOptions(8, 4, 3).stride(2).padding(1).output_padding(1));
  EXPECT_EQ(trace(up, {-1, 8, 7, 7}).shape, (std::vector<int64_t>{-1, 4, 14, 14}));
  Conv2d same(Conv2dOptions(3, 4, {4, 3}).padding(kSame).dilation(2));
  EXPECT_EQ(trace(same, {1, 3, 9, 10}).shape, (std::vector<int64_t>{1, 4, 9, 10}));
  Conv1d unbatched(Conv1dOptions(3, 5, 3));
  EXPECT_EQ(trace(unbatched, {3, 10}).shape, (std::vector<int64_t>{5, 8}));
  AdaptiveAvgPool2d gap(1), grid({2, 3});
  EXPECT_EQ(trace(gap, {-1, 8, -1, -1}).shape, (std::vector<int64_t>{-1, 8, 1, 1}));
  EXPECT_EQ(trace(grid, {-1, 8, 4, 9}).shape, (std::vector<int64_t>{-1, 8, 2, 3}));
}

TEST(NnLayersShapes, LinearEmbeddingFlattenNorms) {
  Linear lin(4, 3);
  EXPECT_EQ(trace(lin, {-1, -1, 4}).shape, (std::vector<int64_t>{-1, -1, 3}));
  EXPECT_EQ(trace(lin, {4}).shape, (std::vector<int64_t>{3}));
  Embedding emb(10, 6);
  EXPECT_EQ(trace(emb, {-1, 7}, DType::Int64).shape, (std::vector<int64_t>{-1, 7, 6}));
  Flatten all, middle(1, 2), from0(0);
  EXPECT_EQ(trace(all, {-1, 3, 4, 5}).shape, (std::vector<int64_t>{-1, 60}));
  EXPECT_EQ(trace(middle, {-1, 3, -1, 5}).shape, (std::vector<int64_t>{-1, -1, 5}));
  EXPECT_EQ(trace(from0, {2, 3}).shape, (std::vector<int64_t>{6}));
  GroupNorm gn(2, 6);
  EXPECT_EQ(trace(gn, {-1, 6, -1, 4}).shape, (std::vector<int64_t>{-1, 6, -1, 4}));
}

TEST(NnLayersExport, BatchNormTrainingModeHasRunningStatOutputsAndTorchsMomentum) {
  BatchNorm2d bn(4, 1e-3, 0.25);
  const Node train = only_node(traced_model(bn, {2, 4, 3, 3}), "BatchNormalization");
  EXPECT_EQ(train.attr_int("training_mode"), 1);
  EXPECT_FLOAT_EQ(train.attr_float("momentum"), 0.75f);  // ONNX weighs the old value
  EXPECT_FLOAT_EQ(train.attr_float("epsilon"), 1e-3f);
  ASSERT_EQ(train.outputs.size(), 3u);
  EXPECT_EQ(train.inputs[3], "running_mean");
  bn.eval();
  const Node eval = only_node(traced_model(bn, {2, 4, 3, 3}), "BatchNormalization");
  EXPECT_EQ(eval.attr_int("training_mode", 0), 0);
  EXPECT_EQ(eval.outputs.size(), 1u);
  // Without running statistics: batch statistics as arithmetic, no BatchNormalization node.
  BatchNorm2d batch_only(4, 1e-5, 0.1, true, false);
  batch_only.eval();
  for (const Node& n : traced_model(batch_only, {2, 4, 3, 3}).graph.nodes) EXPECT_NE(n.op_type, "BatchNormalization");
}

TEST(NnLayersExport, DropoutFollowsTrainingMode) {
  Dropout drop(0.25);
  const Model train = traced_model(drop, {2, 8});
  const Node d = only_node(train, "Dropout");
  ASSERT_EQ(d.inputs.size(), 3u);   // x, ratio, training_mode
  ASSERT_EQ(d.outputs.size(), 2u);  // y, mask (the gradient reads the mask)
  drop.eval();
  for (const Node& n : traced_model(drop, {2, 8}).graph.nodes) EXPECT_NE(n.op_type, "Dropout");
}

TEST(NnLayersExport, LinearIsGemmForMatricesAndMatMulOtherwise) {
  Linear lin(4, 3);
  const Node gemm = only_node(traced_model(lin, {2, 4}), "Gemm");
  EXPECT_EQ(gemm.attr_int("transB"), 1);
  EXPECT_EQ(gemm.inputs[1], "weight");
  EXPECT_EQ(gemm.inputs[2], "bias");
  const Model rank3 = traced_model(lin, {2, 5, 4});
  EXPECT_EQ(only_node(rank3, "Transpose").inputs[0], "weight");
  EXPECT_NO_THROW(only_node(rank3, "MatMul"));
  EXPECT_NO_THROW(only_node(rank3, "Add"));
}

TEST(NnLayersExport, EmbeddingPaddingRowsPassThroughStopGradient) {
  Embedding plain(10, 4);
  EXPECT_EQ(traced_model(plain, {2, 3}, DType::Int64).graph.nodes.size(), 2u);  // Gather, Identity to "output"
  Embedding padded(10, 4, 2);
  const Model m = traced_model(padded, {2, 3}, DType::Int64);
  const Node where = only_node(m, "Where");
  const Node stop = only_node(m, "StopGradient");
  EXPECT_EQ(stop.domain, kKilnDomain);
  EXPECT_EQ(m.opsets.at(kKilnDomain), 1);
  EXPECT_EQ(where.inputs[1], stop.outputs[0]);  // padding positions: the rows, without a gradient
  EXPECT_EQ(stop.inputs[0], only_node(m, "Gather").outputs[0]);
  EXPECT_EQ(where.inputs[2], only_node(m, "Gather").outputs[0]);
  EXPECT_EQ(only_node(m, "Gather").inputs[0], "weight");
}

TEST(NnLayersExport, SharedEmbeddingWeightsAreOneStorageAndOneInitializer) {
  auto owner = std::make_shared<Embedding>(10, 4);
  Embedding tied(10, 4, 1);
  tied.share_weight(owner);
  EXPECT_EQ(tied.get_parameter("weight").raw_data(), owner->get_parameter("weight").raw_data());
  const Model m = traced_model(tied, {2, 3}, DType::Int64);
  EXPECT_EQ(m.graph.initializers.size(), 1u);
  EXPECT_EQ(only_node(m, "Gather").inputs[0], m.graph.initializers.begin()->first);
  expect_error<ShapeError>([&] { Embedding(10, 5).share_weight(owner); },
                           "this embedding is (10, 5), the owner's (10, 4)");
  auto self = std::make_shared<Embedding>(3, 2);
  expect_error<InvalidArgument>([&] { self->share_weight(self); }, "needs another Embedding");
}

TEST(NnLayersRepr, ExtraReprIsTorchs) {
  EXPECT_EQ(Linear(4, 2).extra_repr(), "in_features=4, out_features=2, bias=True");
  EXPECT_EQ(Conv2d(Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)).extra_repr(),
            "3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False");
  EXPECT_EQ(Conv1d(Conv1dOptions(2, 4, 3).dilation(2).groups(2)).extra_repr(),
            "2, 4, kernel_size=(3,), stride=(1,), dilation=(2,), groups=2");
  EXPECT_EQ(Conv2d(Conv2dOptions(2, 4, 3).padding(kSame)).extra_repr(),
            "2, 4, kernel_size=(3, 3), stride=(1, 1), padding=same");
  EXPECT_EQ(ConvTranspose2d(ConvTranspose2dOptions(4, 2, 3).stride(2).output_padding(1)).extra_repr(),
            "4, 2, kernel_size=(3, 3), stride=(2, 2), output_padding=(1, 1)");
  EXPECT_EQ(BatchNorm2d(64).extra_repr(), "64, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True");
  EXPECT_EQ(LayerNorm({768}, 1e-12).extra_repr(), "(768,), eps=1e-12, elementwise_affine=True");
  EXPECT_EQ(GroupNorm(32, 64, 1.0).extra_repr(), "32, 64, eps=1.0, affine=True");
  EXPECT_EQ(Embedding(10, 3, 0).extra_repr(), "10, 3, padding_idx=0");
  EXPECT_EQ(Dropout().extra_repr(), "p=0.5, inplace=False");
  EXPECT_EQ(GELU("tanh").extra_repr(), "approximate='tanh'");
  EXPECT_EQ(MaxPool2d(MaxPool2dOptions(3).stride(2).padding(1)).extra_repr(),
            "kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False");
  EXPECT_EQ(AvgPool2d(AvgPool2dOptions({2, 3})).extra_repr(), "kernel_size=(2, 3), stride=(2, 3), padding=0");
  EXPECT_EQ(AdaptiveAvgPool2d({7, 7}).extra_repr(), "output_size=(7, 7)");
  EXPECT_EQ(Flatten().extra_repr(), "start_dim=1, end_dim=-1");
  EXPECT_EQ(ReLU().repr(), "ReLU()");
}

TEST(NnLayersErrors, ConstructorsValidateWithTorchsWords) {
  expect_error<InvalidArgument>([] { Conv2d(Conv2dOptions(3, 4, 3).groups(2)); },
                                "in_channels must be divisible by groups");
  expect_error<InvalidArgument>([] { Conv2d(Conv2dOptions(4, 6, 3).groups(4)); },
                                "out_channels must be divisible by groups");
  expect_error<InvalidArgument>([] { Conv2d(Conv2dOptions(4, 4, 3).groups(0)); }, "groups must be a positive integer");
  expect_error<InvalidArgument>([] { Conv2d(Conv2dOptions(3, 4, 3).stride(2).padding(kSame)); },
                                "padding='same' is not supported for strided convolutions");
  expect_error<InvalidArgument>([] { Conv2d(Conv2dOptions(3, 4, 3).padding_mode("mirror")); },
                                "padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular']");
  expect_error<Unsupported>([] { Conv2d(Conv2dOptions(3, 4, 3).padding_mode("reflect")); }, "'reflect'");
  expect_error<InvalidArgument>([] { ConvTranspose2d(ConvTranspose2dOptions(3, 4, 3).output_padding(1)); },
                                "output padding must be smaller than either stride or dilation");
  expect_error<InvalidArgument>([] { Conv2d(Conv2dOptions(3, 4, {3, 3, 3})); }, "expected 1 or 2 values");
  expect_error<InvalidArgument>([] { GroupNorm(4, 6); }, "num_channels must be divisible by num_groups");
  expect_error<InvalidArgument>([] { Embedding(5, 2, 5); }, "Padding_idx must be within num_embeddings");
  expect_error<InvalidArgument>([] { Dropout(1.5); }, "dropout probability has to be between 0 and 1, but got 1.5");
  expect_error<InvalidArgument>([] { GELU("fast"); }, "approximate argument must be either none or tanh");
  expect_error<InvalidArgument>([] { MaxPool2d(MaxPool2dOptions(3).padding(2)); },
                                "pad should be at most half of effective kernel size");
  expect_error<InvalidArgument>([] { AdaptiveAvgPool2d(std::vector<int64_t>{1, 2, 3}); }, "one int or two");
}

TEST(NnLayersErrors, ForwardNamesTheInputAndShapes) {
  Linear lin(4, 2);
  expect_error<ShapeError>([&] { trace(lin, {2, 5}); }, {"'input'", "[2, 5]", "in_features=4"});
  BatchNorm2d bn(3);
  expect_error<ShapeError>([&] { trace(bn, {2, 3, 4}); }, "expected 4D input (got 3D input");
  expect_error<ShapeError>([&] { trace(bn, {2, 5, 4, 4}); }, "has 5 channels");
  Conv2d conv(Conv2dOptions(3, 8, 3));
  expect_error<ShapeError>([&] { trace(conv, {2, 4, 8, 8}); }, "to have 3 channels, but got 4 channels instead");
  expect_error<ShapeError>([&] { trace(conv, {8, 8}); }, "Expected 3D (unbatched) or 4D (batched) input to conv2d");
  expect_error<ShapeError>([&] { trace(conv, {1, 3, 2, 2}); }, "too small");
  LayerNorm ln({4});
  expect_error<ShapeError>([&] { trace(ln, {2, 3}); }, "expected input with shape [*, 4]");
  AdaptiveAvgPool2d pool(3);
  expect_error<Unsupported>([&] { trace(pool, {1, 2, 7, 7}); }, "divisible");
  expect_error<Unsupported>([&] { trace(pool, {1, 2, -1, 6}); }, "static spatial dims");
  Embedding emb(5, 2);
  expect_error<TypeError>([&] { trace(emb, {2, 3}); }, "int64, int32");
  expect_error<TypeError>([&] { trace(lin, {2, 4}, DType::Float64); }, "is double[2, 4]");
  Flatten bad(2, 1);
  expect_error<InvalidArgument>([&] { trace(bad, {2, 3, 4}); }, "start_dim cannot come after end_dim");
  Flatten out_of_range(3);
  expect_error<ShapeError>([&] { trace(out_of_range, {2, 3}); }, "out of range");
}

}  // namespace
}  // namespace kiln::nn
