// Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, and the integer
// matrix products MatMulInteger and QLinearMatMul. Quantized types are uint8 and int8; products
// accumulate exactly in int32 (ONNX's definition) before any rescaling. The convolutions are in
// quantize_conv.cpp.
#include <fmt/format.h>

#include <algorithm>

#include "core/parallel.h"
#include "kernels/cpu/matmul_common.h"
#include "kernels/cpu/quantize_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"
#include "kiln/shape.h"

namespace kiln::quant {

PerAxis per_axis(const Tensor& t, const Shape& shape, int64_t axis, const std::string& what) {
  PerAxis p;
  const int64_t n = t.numel();
  if (t.rank() > 1 || n < 1 || (n > 1 && (axis >= int64_t(shape.size()) || n != shape[size_t(axis)])))
    throw ShapeError(fmt::format("{} {} must be a scalar or 1-D with one value per slice of axis {} of data {}", what,
                                 t.describe(), axis, to_string(shape)));
  for (int64_t i = 0; i < n; ++i) p.values.push_back(t.item_as_double(i));
  if (n > 1) {
    p.dim = n;
    for (size_t d = size_t(axis) + 1; d < shape.size(); ++d) p.inner *= shape[d];
  }
  return p;
}

int64_t normalize_axis(int64_t axis, size_t rank, const char* op) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= std::max<int64_t>(r, 1))
    throw InvalidModel(fmt::format("{}: axis {} is outside the rank {} of the input", op, axis, r));
  return axis < 0 ? axis + r : axis;
}

}  // namespace kiln::quant

namespace kiln {
namespace {

using quant::per_axis;
using quant::saturate;
using quant::visit_8bit;

// Inputs 1 and 2 of QuantizeLinear / DequantizeLinear against input 0: per tensor, or per slice of
// the node's axis (which matters only then).
std::pair<quant::PerAxis, quant::PerAxis> scale_and_zero(const Node& node, const ComputeContext& ctx, const char* op,
                                                         const char* scale_name, const char* zero_name) {
  const Tensor& x = ctx.input(0);
  const int64_t axis =
      ctx.input(1).numel() > 1 ? quant::normalize_axis(node.attr_int("axis", 1), size_t(x.rank()), op) : 0;
  quant::PerAxis scale = per_axis(ctx.input(1), x.shape(), axis, fmt::format("{}: {}", op, scale_name));
  quant::PerAxis zero = ctx.has_input(2) ? per_axis(ctx.input(2), x.shape(), axis, fmt::format("{}: {}", op, zero_name))
                                         : quant::PerAxis{{0.0}};
  return {std::move(scale), std::move(zero)};
}

// x float32 -> saturate(round(x / scale) + zero_point) in the zero point's type (uint8 if absent).
class QuantizeLinearKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    if (ctx.dtype(1) != DType::Float32)
      throw TypeError(fmt::format("QuantizeLinear: y_scale {} must be float32", ctx.input(1).describe()));
    const DType q = ctx.has_input(2) ? ctx.dtype(2) : DType::Uint8;
    visit_8bit(q, "QuantizeLinear: y_zero_point", [](auto) {});
    return {TensorMeta{q, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto params = scale_and_zero(node_, ctx, "QuantizeLinear", "y_scale", "y_zero_point");
    const quant::PerAxis &scale = params.first, &zero = params.second;
    Tensor& y = ctx.output(0);
    const bool ints = x.dtype() == DType::Int32;  // opsets 10-18 also quantize int32
    visit_8bit(y.dtype(), "QuantizeLinear: y", [&](auto tag) {
      using Q = decltype(tag);
      Q* py = y.data<Q>();
      parallel_for(x.numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float v = ints ? float(x.data<int32_t>()[i]) : x.data<float>()[i];
          py[i] = saturate<Q>(std::nearbyint(v / float(scale.at(i))) + float(zero.at(i)));
        }
      });
    });
  }
};

// x uint8 / int8 / int32 -> (x - zero_point) * scale as float32.
class DequantizeLinearKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    if (x.dtype != DType::Uint8 && x.dtype != DType::Int8 && x.dtype != DType::Int32)
      throw TypeError(fmt::format("DequantizeLinear: x {} must be uint8, int8 or int32", x.describe()));
    if (ctx.dtype(1) != DType::Float32)
      throw TypeError(fmt::format("DequantizeLinear: x_scale {} must be float32", ctx.input(1).describe()));
    if (ctx.has_input(2) && ctx.dtype(2) != x.dtype)
      throw TypeError(fmt::format("DequantizeLinear: x_zero_point {} must have x's type {}", ctx.input(2).describe(),
                                  dtype_name(x.dtype)));
    return {TensorMeta{DType::Float32, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto params = scale_and_zero(node_, ctx, "DequantizeLinear", "x_scale", "x_zero_point");
    const quant::PerAxis &scale = params.first, &zero = params.second;
    float* py = ctx.output(0).data<float>();
    const auto run = [&](auto tag) {
      using Q = decltype(tag);
      const Q* px = x.data<Q>();
      parallel_for(x.numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) py[i] = (float(px[i]) - float(zero.at(i))) * float(scale.at(i));
      });
    };
    if (x.dtype() == DType::Int32) run(int32_t{});
    else visit_8bit(x.dtype(), "DequantizeLinear: x", run);
  }
};

// x float32 -> (y uint8, y_scale, y_zero_point) over the range [min(x, 0), max(x, 0)].
class DynamicQuantizeLinearKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    if (x.dtype != DType::Float32)
      throw TypeError(fmt::format("DynamicQuantizeLinear: x {} must be float32", x.describe()));
    return {TensorMeta{DType::Uint8, x.shape, x.dynamic, Tensor()}, TensorMeta{DType::Float32, {}, false, Tensor()},
            TensorMeta{DType::Uint8, {}, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const float* px = x.data<float>();
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      lo = std::min(lo, px[i]);
      hi = std::max(hi, px[i]);
    }
    const float scale = (hi - lo) / 255.0f;
    const uint8_t zero = scale > 0 ? saturate<uint8_t>(0.0f - lo / scale) : uint8_t{0};
    uint8_t* py = ctx.output(0).data<uint8_t>();
    parallel_for(x.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        py[i] = scale > 0 ? saturate<uint8_t>(std::nearbyint(px[i] / scale) + float(zero)) : zero;
    });
    if (ctx.outputs.size() > 1 && ctx.outputs[1] && ctx.outputs[1]->defined()) *ctx.output(1).data<float>() = scale;
    if (ctx.outputs.size() > 2 && ctx.outputs[2] && ctx.outputs[2]->defined()) *ctx.output(2).data<uint8_t>() = zero;
  }
};

// acc[b, m, n] = sum_k (A[b, m, k] - a_zero[m]) (B[b, k, n] - b_zero[n]) in int32, then emit(b, m, n, acc).
template <class QA, class QB, class Emit>
void int_product(const MatMulShape& p, const QA* a, const QB* b, const quant::PerAxis& az, const quant::PerAxis& bz,
                 Emit&& emit) {
  const std::vector<std::pair<int64_t, int64_t>> pairs = batch_pairs(p);
  parallel_for(numel(p.batch) * p.m, 1, [&](int64_t r0, int64_t r1) {
    std::vector<int32_t> row(static_cast<size_t>(p.n));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bi = r / p.m, m = r % p.m;
      const QA* pa = a + pairs[size_t(bi)].first * p.m * p.k + m * p.k;
      const QB* pb = b + pairs[size_t(bi)].second * p.k * p.n;
      const int32_t za = int32_t(az.values.size() == 1 ? az.values[0] : az.values[size_t(m)]);
      std::fill(row.begin(), row.end(), 0);
      int32_t sum_a = 0;  // for B's zero point: sum_k (a - za) (b - zb) = sum_k (a - za) b - zb sum_k (a - za)
      for (int64_t k = 0; k < p.k; ++k) {
        const int32_t va = int32_t(pa[k]) - za;
        sum_a += va;
        if (va == 0) continue;
        const QB* bk = pb + k * p.n;
        for (int64_t n = 0; n < p.n; ++n) row[size_t(n)] += va * int32_t(bk[n]);
      }
      for (int64_t n = 0; n < p.n; ++n) {
        const int32_t zb = int32_t(bz.values.size() == 1 ? bz.values[0] : bz.values[size_t(n)]);
        emit(bi, m, n, row[size_t(n)] - zb * sum_a);
      }
    }
  });
}

// A scale or zero point of a product operand: scalar, or 1-D per row of A (size M) / per column of
// B (size N).
quant::PerAxis row_or_column_values(const ComputeContext& ctx, size_t i, int64_t per, const char* what) {
  if (!ctx.has_input(i)) return quant::PerAxis{{0.0}};
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1 && (t.rank() != 1 || t.numel() != per))
    throw ShapeError(fmt::format("{} {} must be a scalar or hold {} values", what, t.describe(), per));
  quant::PerAxis p;
  for (int64_t j = 0; j < t.numel(); ++j) p.values.push_back(t.item_as_double(j));
  return p;
}

class MatMulIntegerKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    for (size_t i : {size_t(0), size_t(1)})
      visit_8bit(ctx.dtype(i), fmt::format("MatMulInteger: {} {}", i ? "B" : "A", ctx.input(i).describe()),
                 [](auto) {});
    shape_ = matmul_shape(ctx.input(0), ctx.input(1), "MatMulInteger");
    return {TensorMeta{DType::Int32, shape_.out, ctx.input(0).dynamic || ctx.input(1).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const quant::PerAxis az = row_or_column_values(ctx, 2, shape_.m, "MatMulInteger: a_zero_point");
    const quant::PerAxis bz = row_or_column_values(ctx, 3, shape_.n, "MatMulInteger: b_zero_point");
    int32_t* y = ctx.output(0).data<int32_t>();
    const MatMulShape& p = shape_;
    visit_8bit(ctx.input(0).dtype(), "A", [&](auto ta) {
      visit_8bit(ctx.input(1).dtype(), "B", [&](auto tb) {
        int_product(p, ctx.input(0).data<decltype(ta)>(), ctx.input(1).data<decltype(tb)>(), az, bz,
                    [&](int64_t b, int64_t m, int64_t n, int32_t acc) { y[(b * p.m + m) * p.n + n] = acc; });
      });
    });
  }

 private:
  MatMulShape shape_;
};

// (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point) -> y quantized.
class QLinearMatMulKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    shape_ = matmul_shape(ctx.input(0), ctx.input(3), "QLinearMatMul");
    for (size_t i : {size_t(0), size_t(3), size_t(7)})
      visit_8bit(ctx.dtype(i), fmt::format("QLinearMatMul: input {} {}", i, ctx.input(i).describe()), [](auto) {});
    return {TensorMeta{ctx.dtype(7), shape_.out, ctx.input(0).dynamic || ctx.input(3).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const MatMulShape& p = shape_;
    const quant::PerAxis as = row_or_column_values(ctx, 1, p.m, "QLinearMatMul: a_scale");
    const quant::PerAxis az = row_or_column_values(ctx, 2, p.m, "QLinearMatMul: a_zero_point");
    const quant::PerAxis bs = row_or_column_values(ctx, 4, p.n, "QLinearMatMul: b_scale");
    const quant::PerAxis bz = row_or_column_values(ctx, 5, p.n, "QLinearMatMul: b_zero_point");
    const float ys = float(ctx.input(6).item_as_double()), yz = float(ctx.input(7).item_as_double());
    Tensor& y = ctx.output(0);
    visit_8bit(ctx.input(0).dtype(), "a", [&](auto ta) {
      visit_8bit(ctx.input(3).dtype(), "b", [&](auto tb) {
        visit_8bit(y.dtype(), "y", [&](auto ty) {
          using Y = decltype(ty);
          Y* py = y.data<Y>();
          int_product(p, ctx.input(0).data<decltype(ta)>(), ctx.input(3).data<decltype(tb)>(), az, bz,
                      [&](int64_t b, int64_t m, int64_t n, int32_t acc) {
                        const float scale = float(as.values.size() == 1 ? as.values[0] : as.values[size_t(m)]) *
                                            float(bs.values.size() == 1 ? bs.values[0] : bs.values[size_t(n)]) / ys;
                        py[(b * p.m + m) * p.n + n] = saturate<Y>(std::nearbyint(float(acc) * scale) + yz);
                      });
        });
      });
    });
  }

 private:
  MatMulShape shape_;
};

const KernelRegistrar quantize_reg({"", "QuantizeLinear", 10, kMaxOpset, {DType::Float32, DType::Int32}},
                                   [](const Node& n) { return std::make_unique<QuantizeLinearKernel>(n); });
const KernelRegistrar dequantize_reg({"", "DequantizeLinear", 10, kMaxOpset, {}},
                                     [](const Node& n) { return std::make_unique<DequantizeLinearKernel>(n); });
const KernelRegistrar dynamic_reg({"", "DynamicQuantizeLinear", 11, kMaxOpset, {DType::Float32}},
                                  [](const Node& n) { return std::make_unique<DynamicQuantizeLinearKernel>(n); });
const KernelRegistrar matmul_integer_reg({"", "MatMulInteger", 10, kMaxOpset, {}},
                                         [](const Node& n) { return std::make_unique<MatMulIntegerKernel>(n); });
const KernelRegistrar qlinear_matmul_reg({"", "QLinearMatMul", 10, kMaxOpset, {}},
                                         [](const Node& n) { return std::make_unique<QLinearMatMulKernel>(n); });

}  // namespace
}  // namespace kiln
