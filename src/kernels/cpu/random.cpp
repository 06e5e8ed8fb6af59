// Random sampling: RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike, Bernoulli and
// Multinomial.
// Each node seeds its generator once, from its `seed` attribute (a float in ONNX: its value picks
// the stream) or else from the process seed and its name (kiln/random.h), and a run draws from
// derive_seed(that seed, the Session's run index), serially: the same seed gives the same sequence
// of runs on any thread count, and successive runs differ. Normal draws are Box-Muller over
// uniform01, the same on every platform.
#include "kiln/random.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>
#include <random>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

enum class Draw { Uniform, Normal, Bernoulli };

uint64_t node_seed(const Node& n, const char* op) {
  if (n.has_attr("seed")) return derive_seed(std::bit_cast<uint32_t>(n.attr_float("seed")), op);
  return derive_seed(random_seed(), random_stream_name(n.name));
}

DType output_dtype(const Node& n, const char* op, std::optional<DType> fallback) {
  if (!n.has_attr("dtype")) return fallback.value_or(DType::Float32);
  const std::optional<DType> dt = dtype_from_onnx(n.attr_int("dtype"));
  if (!dt || *dt == DType::String)
    throw Unsupported(fmt::format("{}: dtype {} is not a numeric type Kiln has", op, n.attr_int("dtype")));
  return *dt;
}

class RandomKernel final : public Kernel {
 public:
  RandomKernel(const Node& n, const char* op, Draw draw, bool like)
      : Kernel(n), op_(op), draw_(draw), like_(like), seed_(node_seed(n, op)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (draw_ == Draw::Normal) {
      a_ = node_.attr_float("mean", 0.0f);
      b_ = node_.attr_float("scale", 1.0f);
    } else if (draw_ == Draw::Uniform) {
      a_ = node_.attr_float("low", 0.0f);
      b_ = node_.attr_float("high", 1.0f);
      if (!(a_ <= b_)) throw InvalidModel(fmt::format("{}: low {} must not exceed high {}", op_, a_, b_));
    }
    if (!like_) {
      if (!node_.has_attr("shape")) throw InvalidModel(fmt::format("{}: attribute 'shape' is required", op_));
      const Shape shape = node_.attr_ints("shape");
      for (int64_t d : shape)
        if (d < 0) throw InvalidModel(fmt::format("{}: shape {} has a negative dim", op_, to_string(shape)));
      return {TensorMeta{output_dtype(node_, op_, std::nullopt), shape, false, Tensor()}};
    }
    const TensorMeta& x = ctx.input(0);
    const DType dt = output_dtype(node_, op_, x.dtype);
    if (!is_floating(dt) && draw_ != Draw::Bernoulli)
      throw TypeError(fmt::format("{}: dtype {} must be a float type", op_, dtype_name(dt)));
    return {TensorMeta{dt, x.shape, x.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    Tensor& y = ctx.output(0);
    std::mt19937_64 rng(derive_seed(seed_, ctx.run_index));
    const Tensor* p = draw_ == Draw::Bernoulli ? &ctx.input(0) : nullptr;
    visit_dtype(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* out = y.data<T>();
      for (int64_t i = 0; i < y.numel(); ++i) {
        double v = 0;
        if (draw_ == Draw::Uniform) {
          v = a_ + (b_ - a_) * uniform01(rng);
        } else if (draw_ == Draw::Normal) {
          const double u1 = 1.0 - uniform01(rng), u2 = uniform01(rng);  // u1 in (0, 1]
          v = a_ + b_ * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
        } else {
          const double prob = p->item_as_double(i);
          if (!(prob >= 0 && prob <= 1))
            throw InvalidModel(fmt::format("{}: probability input[{}] = {} is outside [0, 1]", op_, i, prob));
          v = uniform01(rng) < prob ? 1.0 : 0.0;
        }
        if constexpr (std::is_same_v<T, bool>) out[i] = v != 0;
        else if constexpr (std::is_arithmetic_v<T>) out[i] = static_cast<T>(v);
        else out[i] = from_double<T>(v);
      }
    });
  }
  // Random draws: never computed at plan time.
  bool foldable() const override { return false; }

 private:
  const char* op_;
  Draw draw_;
  bool like_;
  uint64_t seed_;
  double a_ = 0, b_ = 1;
};

// Multinomial: sample_size class indices per row of input [batch, classes], drawn with probabilities
// softmax(row) (the input holds unnormalised log-probabilities, as torch.multinomial's of
// exp(row)). A -inf logit is never drawn; a NaN or +inf one, or a row without a finite one, is an
// InvalidModel error naming the row. Each draw inverts the row's cumulative distribution at one
// uniform01 value.
class MultinomialKernel final : public Kernel {
 public:
  explicit MultinomialKernel(const Node& n) : Kernel(n), seed_(node_seed(n, "Multinomial")) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    if (x.shape.size() != 2)
      throw ShapeError(fmt::format("Multinomial: input {} must be [batch_size, class_size]", x.describe()));
    samples_ = node_.attr_int("sample_size", 1);
    if (samples_ < 1) throw InvalidModel(fmt::format("Multinomial: sample_size {} must be positive", samples_));
    const int64_t code = node_.attr_int("dtype", dtype_to_onnx(DType::Int32));
    if (code != dtype_to_onnx(DType::Int32) && code != dtype_to_onnx(DType::Int64))
      throw InvalidModel(fmt::format("Multinomial: dtype {} must be int32 (6) or int64 (7)", code));
    return {TensorMeta{*dtype_from_onnx(code), {x.shape[0], samples_}, x.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const int64_t rows = x.dim(0), classes = x.dim(1);
    std::mt19937_64 rng(derive_seed(seed_, ctx.run_index));
    std::vector<double> cdf(static_cast<size_t>(classes));
    for (int64_t r = 0; r < rows; ++r) {
      double top = -INFINITY;
      for (int64_t c = 0; c < classes; ++c) {
        const double v = x.item_as_double(r * classes + c);
        if (std::isnan(v) || v == INFINITY)
          throw InvalidModel(fmt::format("Multinomial: input[{}, {}] = {} is not a log-probability", r, c, v));
        top = std::max(top, v);
      }
      if (top == -INFINITY)
        throw InvalidModel(fmt::format("Multinomial: row {} of {} has no finite log-probability", r, classes));
      double total = 0;
      for (int64_t c = 0; c < classes; ++c)
        cdf[static_cast<size_t>(c)] = total += std::exp(x.item_as_double(r * classes + c) - top);
      for (int64_t s = 0; s < samples_; ++s) {
        const double u = uniform01(rng) * total;
        // The first class whose cumulative mass exceeds u (never a class of zero mass).
        const auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
        const int64_t k = it == cdf.end() ? classes - 1 : it - cdf.begin();
        if (y.dtype() == DType::Int64) y.data<int64_t>()[r * samples_ + s] = k;
        else y.data<int32_t>()[r * samples_ + s] = static_cast<int32_t>(k);
      }
    }
  }
  bool foldable() const override { return false; }

 private:
  uint64_t seed_;
  int64_t samples_ = 1;
};

KernelRegistrar reg(const char* op, int64_t since, Draw draw, bool like, std::vector<DType> dtypes) {
  return KernelRegistrar({"", op, since, kMaxOpset, std::move(dtypes)},
                         [op, draw, like](const Node& n) { return std::make_unique<RandomKernel>(n, op, draw, like); });
}

const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
const KernelRegistrar uniform_reg = reg("RandomUniform", 1, Draw::Uniform, false, {});
const KernelRegistrar normal_reg = reg("RandomNormal", 1, Draw::Normal, false, {});
const KernelRegistrar uniform_like_reg = reg("RandomUniformLike", 1, Draw::Uniform, true, {});
const KernelRegistrar normal_like_reg = reg("RandomNormalLike", 1, Draw::Normal, true, {});
const KernelRegistrar bernoulli_reg = reg("Bernoulli", 15, Draw::Bernoulli, true, kFloats);
const KernelRegistrar multinomial_reg({"", "Multinomial", 7, kMaxOpset, kFloats},
                                      [](const Node& n) { return std::make_unique<MultinomialKernel>(n); });

}  // namespace
}  // namespace kiln
