// What the optimizer kernels (optimizer_kiln.cpp: ai.kiln.AdamWStep / SGDStep; optimizer_onnx.cpp:
// ai.onnx.preview.training Adam / Momentum / Adagrad) share: reading hyperparameters, the learning
// rate and the step count, and checking that the updated tensors agree.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/simd_dispatch.h"
#include "kiln/error.h"
#include "kiln/kernel.h"

namespace kiln::optim {

// The loops are memory bound: split them only when each thread gets a sizeable run.
inline constexpr int64_t kGrain = 32768;

// The library is built for baseline x86-64, where std::fma is a call into libm and a loop runs 4
// floats at a time at best. Each optimizer's loop is therefore an always_inline function template
// `body(const Args&, begin, end)`, compiled three times by parallel_simd_loop: for AVX-512, for
// AVX2 + FMA3 and for the baseline, and the copy the CPU can run is picked once. Every copy rounds
// identically (fma, sqrt and division are exactly rounded at any width), so the choice never
// changes a result. A body must copy its scalars out of `Args` into locals before its loop (a
// load through the reference cannot be hoisted past the stores, and blocks vectorization) and mark
// the loop `#pragma omp simd`: the parameter and its slots are updated in place, element i read
// before element i is written, which is what that pragma promises. The kernels layer is compiled
// with -fno-math-errno, without which std::sqrt cannot be vectorized.
using simd::run_chunk;
using simd::simd_level;
using simd::SimdLevel;
#if defined(__x86_64__) && defined(__GNUC__)
using simd::run_chunk_avx2;
using simd::run_chunk_avx512;
#endif

// parallel_for over [0, n) of the best copy of `Body` for this CPU.
template <auto Body, class Args>
void parallel_simd_loop(int64_t n, const Args& args) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return parallel_for(n, kGrain, [&](int64_t b, int64_t e) { run_chunk_avx512<Body>(args, b, e); });
    case SimdLevel::Avx2:
      return parallel_for(n, kGrain, [&](int64_t b, int64_t e) { run_chunk_avx2<Body>(args, b, e); });
    case SimdLevel::Baseline:
      break;
  }
#endif
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { run_chunk<Body>(args, b, e); });
}

// A float attribute or a float32 learning rate holds the float nearest the decimal the user wrote
// (0.9 -> 0.899999976). PyTorch computes with the decimal itself (a Python float), and factors
// such as 1 - beta1 round differently from the two (0.1f vs 0.10000002f). The shortest decimal
// that rounds to the float is what the user wrote, so defaults and typical settings give torch's
// numbers exactly; any other float is changed by less than half its ulp.
inline double decimal_value(float f) {
  if (!std::isfinite(f)) return static_cast<double>(f);
  const std::string s = fmt::format("{}", f);  // shortest round-trip form of the float
  return std::strtod(s.c_str(), nullptr);
}

inline double decimal_attr(const Node& n, const std::string& key, float fallback) {
  return decimal_value(n.attr_float(key, fallback));
}

// Input 0 (learning rate) must be a float scalar, input 1 (step) an int64 scalar; "scalar" is
// shape [] or [1] (exporters write either).
inline void check_scalars(const InferContext& ctx, const char* op) {
  const DType r = ctx.dtype(0);
  if (r != DType::Float32 && r != DType::Float64)
    throw TypeError(fmt::format("{}: the learning rate must be float32 or float64, got {}", op, dtype_name(r)));
  if (numel(ctx.shape(0)) != 1)
    throw ShapeError(fmt::format("{}: the learning rate must be a scalar, got shape {}", op, to_string(ctx.shape(0))));
  if (ctx.dtype(1) != DType::Int64)
    throw TypeError(fmt::format("{}: the step count must be int64, got {}", op, dtype_name(ctx.dtype(1))));
  if (numel(ctx.shape(1)) != 1)
    throw ShapeError(fmt::format("{}: the step count must be a scalar, got shape {}", op, to_string(ctx.shape(1))));
}

// Every listed input (index, name) must have the dtype and shape of the first.
inline void check_same_tensors(const InferContext& ctx, const char* op,
                               const std::vector<std::pair<size_t, std::string>>& tensors) {
  const auto& [first, first_name] = tensors.front();
  for (const auto& [i, name] : tensors) {
    if (ctx.dtype(i) != ctx.dtype(first))
      throw TypeError(fmt::format("{}: {} is {} but {} is {}", op, name, dtype_name(ctx.dtype(i)), first_name,
                                  dtype_name(ctx.dtype(first))));
    if (ctx.shape(i) != ctx.shape(first))
      throw ShapeError(fmt::format("{}: {} has shape {} but {} has shape {}; they must be equal", op, name,
                                   to_string(ctx.shape(i)), first_name, to_string(ctx.shape(first))));
  }
}

// Adam-family updates (AdamWStep, LambStep): torch.optim's checks of the hyperparameters, and the
// node layout (learning_rate, step, X, G, M, V) -> (X_new, M_new, V_new), each output X's type.
inline void check_adam_hyperparameters(const char* op, double beta1, double beta2, double eps, double weight_decay) {
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    throw InvalidArgument(fmt::format("{}: beta1 = {} and beta2 = {} must lie in [0, 1)", op, beta1, beta2));
  if (!(eps >= 0)) throw InvalidArgument(fmt::format("{}: epsilon = {} must be >= 0", op, eps));
  if (!(weight_decay >= 0)) throw InvalidArgument(fmt::format("{}: weight_decay = {} must be >= 0", op, weight_decay));
}

inline std::vector<TensorMeta> infer_moment_update(const InferContext& ctx, const char* op) {
  if (ctx.num_inputs() != 6)
    throw InvalidModel(
        fmt::format("{} takes 6 inputs (learning_rate, step, X, G, M, V), got {}", op, ctx.num_inputs()));
  check_scalars(ctx, op);
  check_same_tensors(ctx, op, {{2, "X"}, {3, "G"}, {4, "M"}, {5, "V"}});
  const TensorMeta x{ctx.dtype(2), ctx.shape(2), false, Tensor()};
  return {x, x, x};
}

// The learning rate as torch would hold it (see decimal_value); learning_rate() also refuses
// negative rates, as torch.optim does (ONNX's ops allow them).
inline double rate_value(const ComputeContext& ctx) {
  const Tensor& r = ctx.input(0);
  return r.dtype() == DType::Float32 ? decimal_value(r.data<float>()[0]) : r.data<double>()[0];
}

inline double learning_rate(const ComputeContext& ctx, const char* op) {
  const double lr = rate_value(ctx);
  if (!(lr >= 0)) throw InvalidArgument(fmt::format("{}: the learning rate must be >= 0, got {}", op, lr));
  return lr;
}

inline int64_t step_count(const ComputeContext& ctx) { return ctx.input(1).data<int64_t>()[0]; }

// The Kiln ops' step t counts the update being made, so it starts at 1.
inline int64_t step_number(const ComputeContext& ctx, const char* op) {
  const int64_t t = step_count(ctx);
  if (t < 1)
    throw InvalidArgument(fmt::format("{}: step must be >= 1 (the number of this update, counting it), got {}", op, t));
  return t;
}

}  // namespace kiln::optim
