// kiln::nn layers: torch.nn's building blocks with torch's names, arguments, defaults, parameter
// names (state_dict keys) and initialisation, each emitting the ONNX (opset 17) that
// torch.onnx.export writes for it.
//
//   using namespace kiln::nn;
//   auto conv = std::make_shared<Conv2d>(Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false));
//   auto bn = std::make_shared<BatchNorm2d>(64);
//   auto pool = std::make_shared<MaxPool2d>(MaxPool2dOptions(3).stride(2).padding(1));
//   auto head = std::make_shared<Linear>(64, 10);
//   conv->extra_repr();   // "3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False"
//
// Arguments that torch takes as "an int or a tuple" are ExpandingArray<D>: `3` or `{3, 5}`.
// Validation failures are InvalidArgument with torch's wording; shape mismatches found while
// tracing are ShapeError naming the module and the shapes; what Kiln cannot export is Unsupported.
//
// Modes: BatchNorm in training mode exports BatchNormalization(training_mode=1) with its
// running-statistic outputs (momentum written as 1 - torch's momentum, as torch's exporter does);
// in eval mode the inference form. Dropout in training mode exports Dropout(x, ratio,
// training_mode=True) with its mask output (what the gradient reads); in eval mode an Identity. An Embedding's
// padding_idx row gets no gradient in generated training graphs, as in torch (see Embedding).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

// torch's `int or tuple of D ints` (libtorch's ExpandingArray): one value repeated, or D values.
// Remembers which form it was given in, because torch's pooling modules print it back as given.
template <size_t D>
class ExpandingArray {
 public:
  ExpandingArray(int64_t value) : scalar_(true) { values_.fill(value); }  // implicit, as torch's
  ExpandingArray(std::initializer_list<int64_t> values) : ExpandingArray(std::vector<int64_t>(values)) {}
  explicit ExpandingArray(const std::vector<int64_t>& values);  // 1 or D values; InvalidArgument otherwise
  int64_t operator[](size_t i) const { return values_[i]; }
  const std::array<int64_t, D>& values() const { return values_; }
  std::vector<int64_t> vec() const { return {values_.begin(), values_.end()}; }
  bool given_as_scalar() const { return scalar_; }
  bool all_equal(int64_t v) const;
  // Python's repr: "(3, 3)", "(3,)"; or "3" when given as one int and `as_given` is set.
  std::string repr(bool as_given = false) const;

 private:
  std::array<int64_t, D> values_{};
  bool scalar_ = false;
};

// ---- Linear and Embedding ------------------------------------------------------------------------
// y = x W^T + b over the last dim. Gemm(transB=1) for 2-D inputs; Transpose + MatMul (+ Add)
// otherwise, as torch.onnx.export writes it.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  void reset_parameters();  // kaiming_uniform_(a=sqrt(5)) weight, U(-1/sqrt(in), 1/sqrt(in)) bias
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  bool has_bias() const { return bias_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

 private:
  int64_t in_features_, out_features_;
  bool bias_;
};

// A lookup table: Gather(weight, indices) over int64/int32 indices. Weight ~ N(0, 1), the
// padding_idx row zero (a negative padding_idx counts from the end, as torch's). With a
// padding_idx, positions holding it read the row as a constant taken at trace time (Where over
// Gather), so that training graphs give the row no gradient, as torch does; torch.onnx.export's
// plain Gather would train it.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = {});
  void reset_parameters();
  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  std::optional<int64_t> padding_idx() const { return padding_idx_; }
  // Hugging Face's `embed_tokens.weight = shared.weight`: this module's weight becomes `owner`'s
  // (one storage, both keys in the state_dict) and traces as the owner's initializer, so an
  // exported model holds the matrix once and trains it with the sum of every use's gradient.
  // ShapeError unless the shapes agree.
  void share_weight(std::shared_ptr<Embedding> owner);
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

 private:
  int64_t num_embeddings_, embedding_dim_;
  std::optional<int64_t> padding_idx_;
  std::shared_ptr<Embedding> weight_owner_;
};

// ---- Convolutions --------------------------------------------------------------------------------
// torch's padding='valid' / padding='same' (stride 1 only, as torch).
enum class ConvPadding { Valid, Same };
inline constexpr ConvPadding kValid = ConvPadding::Valid;
inline constexpr ConvPadding kSame = ConvPadding::Same;

template <size_t D>
class ConvOptions {
 public:
  ConvOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  ConvOptions& stride(ExpandingArray<D> v) {
    stride_ = v;
    return *this;
  }
  ConvOptions& padding(ExpandingArray<D> v) {
    padding_ = v;
    padding_mode_same_.reset();
    return *this;
  }
  ConvOptions& padding(ConvPadding v) {
    padding_mode_same_ = v == ConvPadding::Same;
    return *this;
  }
  ConvOptions& dilation(ExpandingArray<D> v) {
    dilation_ = v;
    return *this;
  }
  ConvOptions& groups(int64_t v) {
    groups_ = v;
    return *this;
  }
  ConvOptions& bias(bool v) {
    bias_ = v;
    return *this;
  }
  ConvOptions& padding_mode(std::string v) {
    padding_mode_ = std::move(v);
    return *this;
  }  // "zeros" only

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  const ExpandingArray<D>& kernel_size() const { return kernel_size_; }
  const ExpandingArray<D>& stride() const { return stride_; }
  const ExpandingArray<D>& padding() const { return padding_; }
  // Set when padding was given as kValid (false) or kSame (true) rather than as numbers.
  std::optional<bool> padding_same() const { return padding_mode_same_; }
  const ExpandingArray<D>& dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }
  bool bias() const { return bias_; }
  const std::string& padding_mode() const { return padding_mode_; }

 private:
  int64_t in_channels_, out_channels_;
  ExpandingArray<D> kernel_size_;
  ExpandingArray<D> stride_ = 1, padding_ = 0, dilation_ = 1;
  std::optional<bool> padding_mode_same_;
  int64_t groups_ = 1;
  bool bias_ = true;
  std::string padding_mode_ = "zeros";
};
using Conv1dOptions = ConvOptions<1>;
using Conv2dOptions = ConvOptions<2>;

template <size_t D>
class ConvTransposeOptions {
 public:
  ConvTransposeOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  ConvTransposeOptions& stride(ExpandingArray<D> v) {
    stride_ = v;
    return *this;
  }
  ConvTransposeOptions& padding(ExpandingArray<D> v) {
    padding_ = v;
    return *this;
  }
  ConvTransposeOptions& output_padding(ExpandingArray<D> v) {
    output_padding_ = v;
    return *this;
  }
  ConvTransposeOptions& dilation(ExpandingArray<D> v) {
    dilation_ = v;
    return *this;
  }
  ConvTransposeOptions& groups(int64_t v) {
    groups_ = v;
    return *this;
  }
  ConvTransposeOptions& bias(bool v) {
    bias_ = v;
    return *this;
  }
  ConvTransposeOptions& padding_mode(std::string v) {
    padding_mode_ = std::move(v);
    return *this;
  }

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  const ExpandingArray<D>& kernel_size() const { return kernel_size_; }
  const ExpandingArray<D>& stride() const { return stride_; }
  const ExpandingArray<D>& padding() const { return padding_; }
  const ExpandingArray<D>& output_padding() const { return output_padding_; }
  const ExpandingArray<D>& dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }
  bool bias() const { return bias_; }
  const std::string& padding_mode() const { return padding_mode_; }

 private:
  int64_t in_channels_, out_channels_;
  ExpandingArray<D> kernel_size_;
  ExpandingArray<D> stride_ = 1, padding_ = 0, output_padding_ = 0, dilation_ = 1;
  int64_t groups_ = 1;
  bool bias_ = true;
  std::string padding_mode_ = "zeros";
};
using ConvTranspose2dOptions = ConvTransposeOptions<2>;

// Conv over D spatial dims ([N, C, *] or unbatched [C, *]); weight [out, in/groups, *kernel].
template <size_t D>
class ConvNd : public Module {
 public:
  explicit ConvNd(ConvOptions<D> options);
  void reset_parameters();  // torch's: kaiming_uniform_(a=sqrt(5)), bias U(+-1/sqrt(fan_in))
  const ConvOptions<D>& options() const { return options_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return D == 1 ? "Conv1d" : "Conv2d"; }
  std::string extra_repr() const override;

 private:
  ConvOptions<D> options_;
};

class Conv1d : public ConvNd<1> {
 public:
  explicit Conv1d(Conv1dOptions options) : ConvNd<1>(std::move(options)) {}
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : ConvNd<1>(Conv1dOptions(in_channels, out_channels, kernel_size)) {}
};

class Conv2d : public ConvNd<2> {
 public:
  explicit Conv2d(Conv2dOptions options) : ConvNd<2>(std::move(options)) {}
  Conv2d(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : ConvNd<2>(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
};

// Transposed convolution; weight [in, out/groups, kH, kW].
class ConvTranspose2d : public Module {
 public:
  explicit ConvTranspose2d(ConvTranspose2dOptions options);
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : ConvTranspose2d(ConvTranspose2dOptions(in_channels, out_channels, kernel_size)) {}
  void reset_parameters();
  const ConvTranspose2dOptions& options() const { return options_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;

 private:
  ConvTranspose2dOptions options_;
};

// ---- Normalisation -------------------------------------------------------------------------------
// torch's _BatchNorm: weight, bias (when affine); running_mean, running_var, num_batches_tracked
// buffers (when track_running_stats). Without running statistics the batch statistics are used in
// both modes, written as ReduceMean arithmetic so that no inference rewrite can replace them.
class BatchNorm : public Module {
 public:
  void reset_running_stats();
  void reset_parameters();
  int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  double momentum() const { return momentum_; }
  bool affine() const { return affine_; }
  bool track_running_stats() const { return track_running_stats_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return name_; }
  std::string extra_repr() const override;

 protected:
  // `name`: torch's class name; `ranks`: the input ranks it accepts.
  BatchNorm(std::string name, std::vector<int64_t> ranks, int64_t num_features, double eps, double momentum,
            bool affine, bool track_running_stats);

 private:
  std::string name_;
  std::vector<int64_t> ranks_;
  int64_t num_features_;
  double eps_, momentum_;
  bool affine_, track_running_stats_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNorm("BatchNorm1d", {2, 3}, num_features, eps, momentum, affine, track_running_stats) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNorm("BatchNorm2d", {4}, num_features, eps, momentum, affine, track_running_stats) {}
};

// LayerNormalization over the trailing normalized_shape dims; weight ones, bias zeros.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  void reset_parameters();
  const std::vector<int64_t>& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return elementwise_affine_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

 private:
  std::vector<int64_t> normalized_shape_;
  double eps_;
  bool elementwise_affine_, bias_;
};

// torch 1.13's export: Reshape to [N, G, -1], InstanceNormalization, Reshape back, then the
// per-channel affine as Mul and Add.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  void reset_parameters();
  int64_t num_groups() const { return num_groups_; }
  int64_t num_channels() const { return num_channels_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;

 private:
  int64_t num_groups_, num_channels_;
  double eps_;
  bool affine_;
};

// ---- Activations and dropout ---------------------------------------------------------------------
class ReLU : public Module {
 public:
  explicit ReLU(bool inplace = false) : inplace_(inplace) {}
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "ReLU"; }
  std::string extra_repr() const override { return inplace_ ? "inplace=True" : ""; }

 private:
  bool inplace_;
};

// approximate "none": 0.5 x (1 + erf(x / sqrt 2)); "tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// (ONNX's Gelu op is opset 20; these are the formulas torch exports at opset 17.)
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  const std::string& approximate() const { return approximate_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='" + approximate_ + "'"; }

 private:
  std::string approximate_;
};

// x * sigmoid(x)
class SiLU : public Module {
 public:
  explicit SiLU(bool inplace = false) : inplace_(inplace) {}
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "SiLU"; }
  std::string extra_repr() const override { return inplace_ ? "inplace=True" : ""; }

 private:
  bool inplace_;
};

class Tanh : public Module {
 public:
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "Tanh"; }
};

class Sigmoid : public Module {
 public:
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "Sigmoid"; }
};

// Zeroes each element with probability p in training mode and scales the rest by 1/(1-p); the
// identity in eval mode. p = 1 exports as a multiplication by zero (ONNX's ratio must be < 1).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, bool inplace = false);
  double p() const { return p_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;

 private:
  double p_;
  bool inplace_;
};

// ---- Pooling -------------------------------------------------------------------------------------
// Options as torch's arguments; stride defaults to kernel_size (torch's stride=None).
template <size_t D>
class MaxPoolOptions {
 public:
  MaxPoolOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  MaxPoolOptions& stride(ExpandingArray<D> v) {
    stride_ = v;
    return *this;
  }
  MaxPoolOptions& padding(ExpandingArray<D> v) {
    padding_ = v;
    return *this;
  }
  MaxPoolOptions& dilation(ExpandingArray<D> v) {
    dilation_ = v;
    return *this;
  }
  MaxPoolOptions& ceil_mode(bool v) {
    ceil_mode_ = v;
    return *this;
  }
  const ExpandingArray<D>& kernel_size() const { return kernel_size_; }
  const ExpandingArray<D>& stride() const { return stride_; }
  const ExpandingArray<D>& padding() const { return padding_; }
  const ExpandingArray<D>& dilation() const { return dilation_; }
  bool ceil_mode() const { return ceil_mode_; }

 private:
  ExpandingArray<D> kernel_size_, stride_, padding_ = 0, dilation_ = 1;
  bool ceil_mode_ = false;
};
using MaxPool2dOptions = MaxPoolOptions<2>;

template <size_t D>
class AvgPoolOptions {
 public:
  AvgPoolOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  AvgPoolOptions& stride(ExpandingArray<D> v) {
    stride_ = v;
    return *this;
  }
  AvgPoolOptions& padding(ExpandingArray<D> v) {
    padding_ = v;
    return *this;
  }
  AvgPoolOptions& ceil_mode(bool v) {
    ceil_mode_ = v;
    return *this;
  }
  AvgPoolOptions& count_include_pad(bool v) {
    count_include_pad_ = v;
    return *this;
  }
  const ExpandingArray<D>& kernel_size() const { return kernel_size_; }
  const ExpandingArray<D>& stride() const { return stride_; }
  const ExpandingArray<D>& padding() const { return padding_; }
  bool ceil_mode() const { return ceil_mode_; }
  bool count_include_pad() const { return count_include_pad_; }

 private:
  ExpandingArray<D> kernel_size_, stride_, padding_ = 0;
  bool ceil_mode_ = false, count_include_pad_ = true;
};
using AvgPool2dOptions = AvgPoolOptions<2>;

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(MaxPool2dOptions options);
  explicit MaxPool2d(ExpandingArray<2> kernel_size) : MaxPool2d(MaxPool2dOptions(kernel_size)) {}
  const MaxPool2dOptions& options() const { return options_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

 private:
  MaxPool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(AvgPool2dOptions options);
  explicit AvgPool2d(ExpandingArray<2> kernel_size) : AvgPool2d(AvgPool2dOptions(kernel_size)) {}
  const AvgPool2dOptions& options() const { return options_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;

 private:
  AvgPool2dOptions options_;
};

// GlobalAveragePool for a 1x1 output; otherwise AveragePool with kernel = stride = input / output,
// which needs static spatial dims divisible by output_size (Unsupported otherwise, as in torch's
// exporter). output_size: one value (square) or two.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::vector<int64_t> output_size);
  explicit AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d(std::vector<int64_t>{output_size}) {}
  std::array<int64_t, 2> output_size() const;
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;

 private:
  std::vector<int64_t> output_size_;  // as given: 1 or 2 values
};

// ---- Shape -----------------------------------------------------------------------------------------
// Flattens dims start_dim..end_dim: ONNX Flatten for (1, -1), Reshape otherwise.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  int64_t start_dim() const { return start_dim_; }
  int64_t end_dim() const { return end_dim_; }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;

 private:
  int64_t start_dim_, end_dim_;
};

class Identity : public Module {
 public:
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "Identity"; }
};

}  // namespace kiln::nn
