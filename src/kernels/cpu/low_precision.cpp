// bfloat16 and float16 kernels over float32 ones (low_precision.h).
#include "kernels/cpu/low_precision.h"

#include <fmt/format.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "core/parallel.h"
#include "core/scratch.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/simd_dispatch.h"

namespace kiln {
namespace {

constexpr int64_t kGrain = 1 << 15;

// A tensor's 16-bit values into float32 (exact).
void widen(const Tensor& t, float* dst) {
  const Tensor packed = t.is_contiguous() ? t : t.clone();
  const bool bf16 = t.dtype() == DType::BFloat16;
  parallel_for(packed.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (bf16) widen_values(packed.data<BFloat16>() + begin, dst + begin, end - begin);
    else widen_values(packed.data<Half>() + begin, dst + begin, end - begin);
  });
}

// float32 values rounded to the output's 16-bit type (narrow_values).
void narrow(const float* src, Tensor& out) {
  const bool bf16 = out.dtype() == DType::BFloat16;
  parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (bf16) narrow_values(src + begin, out.data<BFloat16>() + begin, end - begin);
    else narrow_values(src + begin, out.data<Half>() + begin, end - begin);
  });
}

TensorMeta widened(const TensorMeta& m) {
  if (!is_16_bit(m.dtype)) return m;
  Tensor value;
  if (m.value.defined()) {
    value = Tensor::empty(DType::Float32, m.value.shape());
    widen(m.value, value.data<float>());
  }
  return TensorMeta{DType::Float32, m.shape, m.dynamic, value};
}

class ViaFloat32 : public Kernel {
 public:
  // A node whose out_dtype says float32 (FusedMatMul) keeps its float32 outputs unrounded.
  ViaFloat32(const Node& node, std::unique_ptr<Kernel> inner)
      : Kernel(node), inner_(std::move(inner)), float_out_(node.has_attr("out_dtype")) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    DType low = DType::BFloat16;
    for (const auto& m : ctx.inputs) {
      if (m && is_16_bit(m->dtype)) {
        low = m->dtype;
        break;
      }
    }
    std::vector<TensorMeta> outs = inner_->infer(widened_context(ctx));
    if (!float_out_)
      for (TensorMeta& m : outs) narrow_meta(m, low);
    return outs;
  }
  void prepare(const InferContext& ctx, const std::vector<TensorMeta>& outputs) override {
    std::vector<TensorMeta> wide = outputs;
    for (TensorMeta& m : wide)
      if (is_16_bit(m.dtype)) m.dtype = DType::Float32;
    inner_->prepare(widened_context(ctx), wide);
  }
  void compute(ComputeContext& ctx) override {
    if (inner_->output_aliases_input()) {  // a reshape-like case (SumToShapeOf to its own shape)
      Tensor& y = ctx.output(0);
      if (y.raw_data() != ctx.input(0).raw_data()) y.copy_from(ctx.input(0).reshape(y.shape()));
      return;
    }
    std::vector<Tensor> in(ctx.inputs.size()), out(ctx.outputs.size());
    ComputeContext wide{ctx.node, {}, {}, ctx.run_index};
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const Tensor* t = ctx.inputs[i];
      if (t != nullptr && is_16_bit(t->dtype()) && inner_->reads_only_shape(i)) {
        in[i] = Tensor::wrap(const_cast<void*>(t->raw_data()), DType::Float32, t->shape());  // never read
        t = &in[i];
      } else if (t != nullptr && is_16_bit(t->dtype())) {
        in[i] = scratch_float(t->shape());
        widen(*t, in[i].data<float>());
        t = &in[i];
      }
      wide.inputs.push_back(t);
    }
    for (size_t i = 0; i < ctx.outputs.size(); ++i) {
      Tensor* t = ctx.outputs[i];
      if (t != nullptr && t->defined() && is_16_bit(t->dtype())) {
        out[i] = scratch_float(t->shape());
        t = &out[i];
      }
      wide.outputs.push_back(t);
    }
    inner_->compute(wide);
    for (size_t i = 0; i < ctx.outputs.size(); ++i)
      if (out[i].defined()) narrow(out[i].data<float>(), *ctx.outputs[i]);
  }
  bool reads_only_shape(size_t input) const override { return inner_->reads_only_shape(input); }
  // The 16-bit output is then the 16-bit input's bytes, as the float32 one would be the input's.
  bool output_aliases_input() const override { return inner_->output_aliases_input(); }
  bool foldable() const override { return inner_->foldable(); }

 private:
  static void narrow_meta(TensorMeta& m, DType low) {
    if (m.dtype != DType::Float32) return;
    m.dtype = low;
    if (m.value.defined()) {
      Tensor b = Tensor::empty(low, m.value.shape());
      const Tensor packed = m.value.is_contiguous() ? m.value : m.value.clone();
      narrow(packed.data<float>(), b);
      m.value = b;
    }
  }
  static InferContext widened_context(const InferContext& ctx) {
    InferContext wide{ctx.node, ctx.opset, {}};
    for (const auto& m : ctx.inputs) wide.inputs.push_back(m ? std::optional<TensorMeta>(widened(*m)) : std::nullopt);
    return wide;
  }
  // Per-call memory (core/scratch.h): given back when the executor's scope around this call closes.
  static Tensor scratch_float(const Shape& shape) {
    const size_t bytes = static_cast<size_t>(numel(shape)) * sizeof(float);
    return Tensor::wrap(scratch_take(bytes == 0 ? sizeof(float) : bytes), DType::Float32, shape);
  }

  std::unique_ptr<Kernel> inner_;
  bool float_out_;
};

}  // namespace

namespace {

// float_to_bfloat16's rounding on the bits: to nearest even, NaN kept (quieted).
inline uint16_t bf16_bits(uint32_t u) {
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns that the intrinsics' own headers use an undefined register (_mm512_undefined_epi32).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 16 values a step in AVX-512 registers (the compiler's own vectorization of the loops below keeps
// them 4 wide), the tail as the scalar loop.
[[gnu::target("avx512f")]] void narrow_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  const __m512i round = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    const __m512i high = _mm512_srli_epi32(u, 16);
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, round), _mm512_and_si512(high, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs), inf);
    const __m512i bits = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bits));
  }
  for (; i < n; ++i) dst[i] = bf16_bits(std::bit_cast<uint32_t>(src[i]));
}

[[gnu::target("avx512f")]] void widen_bf16_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) dst[i] = std::bit_cast<float>(uint32_t(src[i]) << 16);
}
#pragma GCC diagnostic pop
#endif

bool avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  return simd::simd_level() == simd::SimdLevel::Avx512;
#else
  return false;
#endif
}

}  // namespace

std::optional<DType> rounded_out_dtype(const Node& n) {
  if (!n.has_attr("out_dtype")) return std::nullopt;
  const int64_t code = n.attr_int("out_dtype");
  const std::optional<DType> t = dtype_from_onnx(code);
  if (!t || !is_16_bit(*t))
    throw InvalidModel(fmt::format("attribute out_dtype is {}; it must be bfloat16 ({}) or float16 ({})", code,
                                   dtype_to_onnx(DType::BFloat16), dtype_to_onnx(DType::Float16)));
  return t;
}

void widen_values(const BFloat16* src, float* dst, int64_t n) {
  const auto* bits = reinterpret_cast<const uint16_t*>(src);
#if defined(__x86_64__) && defined(__GNUC__)
  if (avx512()) return widen_bf16_avx512(bits, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(uint32_t(bits[i]) << 16);
}

void widen_values(const Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void narrow_values(const float* src, BFloat16* dst, int64_t n) {
  auto* bits = reinterpret_cast<uint16_t*>(dst);
#if defined(__x86_64__) && defined(__GNUC__)
  if (avx512()) return narrow_bf16_avx512(src, bits, n);
#endif
  for (int64_t i = 0; i < n; ++i) bits[i] = bf16_bits(std::bit_cast<uint32_t>(src[i]));
}

void narrow_values(const float* src, Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

KernelFactory via_float32(KernelFactory float32) {
  return [float32 = std::move(float32)](const Node& n) -> std::unique_ptr<Kernel> {
    return std::make_unique<ViaFloat32>(n, float32(n));
  };
}

namespace {

// The implementation oneDNN picks for a bfloat16 matrix product on this CPU, when it uses bfloat16
// instructions ("brg:avx512_core_amx_bf16", "brg:avx512_core_bf16"); empty when it would only
// emulate them or run its reference loops.
const std::string& native_bf16_impl() {
  static const std::string impl = [] {
    try {
      using dt = dnnl::memory::data_type;
      const dnnl::memory::desc a = dnnl_util::plain_desc({64, 64}, dt::bf16);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, a), dnnl_util::engine());
      const std::string name = pd.impl_info_str();
      return name.find("bf16") != std::string::npos || name.find("amx") != std::string::npos ? name : std::string();
    } catch (const dnnl::error&) {
      return std::string();
    }
  }();
  return impl;
}

}  // namespace

bool bf16_native() {
  const char* mode = std::getenv("KILN_BF16");
  const std::string m = mode == nullptr ? "" : mode;
  if (m.empty() || m == "auto") return !native_bf16_impl().empty();
  if (m == "emulate") return false;
  if (m == "native") {
    if (native_bf16_impl().empty())
      throw Unsupported(
          "KILN_BF16=native, but this CPU has no bfloat16 instructions oneDNN uses (AVX512-BF16, "
          "AMX-BF16); unset it to compute bfloat16 products in float32");
    return true;
  }
  throw InvalidArgument(fmt::format("KILN_BF16='{}': expected auto, native or emulate", m));
}

KernelFactory bf16_kernels(KernelFactory native, KernelFactory float32) {
  return [native = std::move(native), emulated = via_float32(std::move(float32))](const Node& n) {
    return bf16_native() ? native(n) : emulated(n);
  };
}

namespace {

// Native where the geometry has a bfloat16 implementation, widened float32 elsewhere: decided when
// the plan is prepared, for its shapes.
class NativeWhereSupported : public Kernel {
 public:
  NativeWhereSupported(const Node& node, std::unique_ptr<NativeBf16Kernel> native, std::unique_ptr<Kernel> wide)
      : Kernel(node), native_(std::move(native)), wide_(std::move(wide)) {}
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    decided_ = false;
    return native_->infer(ctx);
  }
  void prepare(const InferContext& ctx, const std::vector<TensorMeta>& outputs) override {
    use_native_ = native_->supported();
    if (use_native_) {
      native_->prepare(ctx, outputs);
    } else {
      (void)wide_->infer(ctx);
      wide_->prepare(ctx, outputs);
    }
    decided_ = true;
  }
  void compute(ComputeContext& ctx) override {
    if (!decided_) throw Error(fmt::format("{}: the kernel ran before its plan was prepared", node_.label()));
    (use_native_ ? static_cast<Kernel&>(*native_) : *wide_).compute(ctx);
  }

 private:
  std::unique_ptr<NativeBf16Kernel> native_;
  std::unique_ptr<Kernel> wide_;
  bool decided_ = false, use_native_ = false;
};

}  // namespace

KernelFactory bf16_kernels_where_supported(NativeBf16Factory native, KernelFactory float32) {
  return [native = std::move(native), emulated = via_float32(std::move(float32))](const Node& n) {
    if (!bf16_native()) return emulated(n);
    return std::unique_ptr<Kernel>(std::make_unique<NativeWhereSupported>(n, native(n), emulated(n)));
  };
}

const char* bf16_compute_path() {
  static const std::string native =
      "native (oneDNN " + native_bf16_impl() + ": bfloat16 operands, float32 accumulation)";
  static const std::string emulated = "float32 (emulated: bfloat16 operands widened, float32 accumulation)";
  return bf16_native() ? native.c_str() : emulated.c_str();
}

}  // namespace kiln
