// bfloat16 kernels over float32 ones (bf16_via_float.h).
#include "kernels/cpu/bf16_via_float.h"

#include <cstring>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "core/scratch.h"

namespace kiln {
namespace {

constexpr int64_t kGrain = 1 << 15;

void widen(const uint16_t* src, float* dst, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t u = uint32_t(src[i]) << 16;
      std::memcpy(dst + i, &u, 4);
    }
  });
}

// Round to nearest even; NaN stays a (quiet) NaN.
void narrow(const float* src, uint16_t* dst, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      uint32_t u;
      std::memcpy(&u, src + i, 4);
      if ((u & 0x7fffffffu) > 0x7f800000u) {
        dst[i] = static_cast<uint16_t>((u >> 16) | 0x40);
        continue;
      }
      u += 0x7fffu + ((u >> 16) & 1u);
      dst[i] = static_cast<uint16_t>(u >> 16);
    }
  });
}

Tensor widened_copy(const Tensor& t) {
  const Tensor packed = t.is_contiguous() ? t : t.clone();
  Tensor f = Tensor::empty(DType::Float32, packed.shape());
  widen(static_cast<const uint16_t*>(packed.raw_data()), f.data<float>(), packed.numel());
  return f;
}

TensorMeta widened(const TensorMeta& m) {
  if (m.dtype != DType::BFloat16) return m;
  return TensorMeta{DType::Float32, m.shape, m.dynamic, m.value.defined() ? widened_copy(m.value) : Tensor()};
}

class Bf16ViaFloat32 : public Kernel {
 public:
  Bf16ViaFloat32(const Node& node, std::unique_ptr<Kernel> inner) : Kernel(node), inner_(std::move(inner)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    std::vector<TensorMeta> outs = inner_->infer(widened_context(ctx));
    for (TensorMeta& m : outs) narrow_meta(m);
    return outs;
  }
  void prepare(const InferContext& ctx, const std::vector<TensorMeta>& outputs) override {
    std::vector<TensorMeta> wide = outputs;
    for (TensorMeta& m : wide)
      if (m.dtype == DType::BFloat16) m.dtype = DType::Float32;
    inner_->prepare(widened_context(ctx), wide);
  }
  void compute(ComputeContext& ctx) override {
    std::vector<Tensor> in(ctx.inputs.size()), out(ctx.outputs.size());
    ComputeContext wide{ctx.node, {}, {}, ctx.run_index};
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const Tensor* t = ctx.inputs[i];
      if (t != nullptr && t->dtype() == DType::BFloat16 && inner_->reads_only_shape(i)) {
        in[i] = Tensor::wrap(const_cast<void*>(t->raw_data()), DType::Float32, t->shape());  // never read
        t = &in[i];
      } else if (t != nullptr && t->dtype() == DType::BFloat16) {
        in[i] = scratch_float(t->shape());
        const Tensor packed = t->is_contiguous() ? *t : t->clone();
        widen(static_cast<const uint16_t*>(packed.raw_data()), in[i].data<float>(), packed.numel());
        t = &in[i];
      }
      wide.inputs.push_back(t);
    }
    for (size_t i = 0; i < ctx.outputs.size(); ++i) {
      Tensor* t = ctx.outputs[i];
      if (t != nullptr && t->defined() && t->dtype() == DType::BFloat16) {
        out[i] = scratch_float(t->shape());
        t = &out[i];
      }
      wide.outputs.push_back(t);
    }
    inner_->compute(wide);
    for (size_t i = 0; i < ctx.outputs.size(); ++i)
      if (out[i].defined())
        narrow(out[i].data<float>(), static_cast<uint16_t*>(ctx.outputs[i]->raw_data()), out[i].numel());
  }
  bool reads_only_shape(size_t input) const override { return inner_->reads_only_shape(input); }
  bool foldable() const override { return inner_->foldable(); }

 private:
  static void narrow_meta(TensorMeta& m) {
    if (m.dtype != DType::Float32) return;
    m.dtype = DType::BFloat16;
    if (m.value.defined()) {
      Tensor b = Tensor::empty(DType::BFloat16, m.value.shape());
      const Tensor packed = m.value.is_contiguous() ? m.value : m.value.clone();
      narrow(packed.data<float>(), static_cast<uint16_t*>(b.raw_data()), packed.numel());
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
};

}  // namespace

KernelFactory bf16_via_float32(KernelFactory float32) {
  return [float32 = std::move(float32)](const Node& n) -> std::unique_ptr<Kernel> {
    return std::make_unique<Bf16ViaFloat32>(n, float32(n));
  };
}

const char* bf16_compute_path() { return "float32 (emulated: bfloat16 operands widened, float32 accumulation)"; }

}  // namespace kiln
