// ai.kiln.DFTGrad and ai.kiln.STFTGrad: the gradients of DFT and STFT (signal.cpp). Both
// transforms are linear, so each gradient is the adjoint: the transform the other way round (an
// unnormalized inverse for a forward DFT, a forward one scaled by 1 / length for an inverse DFT) of
// dY with the bins onesided left out as zeros, cropped to the input's points (none for points that
// dft_length cut off); a real input keeps the real part. STFT's frames then overlap-add into the
// signal's gradient, times the window, and the window's gradient sums each frame's product with
// its signal points.
#include <fmt/format.h>

#include "core/parallel.h"
#include "kernels/cpu/signal_common.h"
#include "kernels/cpu/visit_float.h"

namespace kiln {
namespace {

using signal::cplx;

using signal::optional_input;

void check_dy(const char* op, const TensorMeta& dy, const Shape& want, DType dt) {
  if (dy.shape != want || dy.dtype != dt)
    throw ShapeError(fmt::format("{}: dY {}{} must be {}{}", op, dtype_name(dy.dtype), to_string(dy.shape),
                                 dtype_name(dt), to_string(want)));
}

// (dY, X, dft_length?) -> dX.
class DftGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(1);
    d_ = signal::dft_shape(node_, x.shape, optional_input(ctx, 2), "DFTGrad");
    check_dy("DFTGrad", ctx.input(0), d_.y, x.dtype);
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const signal::DftShape& d = d_;
    const int64_t c = d.complex_in ? 2 : 1;
    visit_float32_64(ctx.input(1).dtype(), "DFTGrad", [&](auto tag) {
      using T = decltype(tag);
      const T* pdy = ctx.input(0).data<T>();
      T* pdx = ctx.output(0).data<T>();
      parallel_for(d.outer * d.inner, 1, [&](int64_t b, int64_t e) {
        std::vector<cplx> in(static_cast<size_t>(d.bins)), out(static_cast<size_t>(d.len));
        for (int64_t line = b; line < e; ++line) {
          const int64_t o = line / d.inner, i = line % d.inner;
          for (int64_t k = 0; k < d.bins; ++k) {
            const T* v = pdy + ((o * d.bins + k) * d.inner + i) * 2;
            in[size_t(k)] = cplx(double(v[0]), double(v[1]));
          }
          signal::dft(in.data(), d.bins, d.len, !d.inverse, out.data());
          const double scale = d.inverse ? 1.0 / double(d.len) : 1.0;
          for (int64_t n = 0; n < d.n; ++n) {
            T* v = pdx + ((o * d.n + n) * d.inner + i) * c;
            const cplx g = n < d.len ? out[size_t(n)] * scale : cplx(0, 0);
            v[0] = T(g.real());
            if (c == 2) v[1] = T(g.imag());
          }
        }
      });
    });
  }

 private:
  signal::DftShape d_;
};

// (dY, signal, frame_step, window?, frame_length?) -> (dsignal, dwindow).
class StftGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(1);
    s_ = signal::stft_shape(node_, x.shape, ctx.value(2), optional_input(ctx, 3), optional_input(ctx, 4), "STFTGrad");
    check_dy("STFTGrad", ctx.input(0), s_.y, x.dtype);
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}, TensorMeta{x.dtype, {s_.frame}, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const signal::StftShape& s = s_;
    const int64_t c = s.complex_in ? 2 : 1;
    const Tensor* window = optional_input(ctx, 3);
    visit_float32_64(ctx.input(1).dtype(), "STFTGrad", [&](auto tag) {
      using T = decltype(tag);
      const T* pdy = ctx.input(0).data<T>();
      const T* px = ctx.input(1).data<T>();
      const T* pw = window ? window->data<T>() : nullptr;
      std::vector<double> dx(static_cast<size_t>(ctx.input(1).numel()), 0.0), dw(static_cast<size_t>(s.frame), 0.0);
      std::vector<cplx> in(static_cast<size_t>(s.bins)), out(static_cast<size_t>(s.frame));
      for (int64_t f = 0; f < s.batch * s.frames; ++f) {
        const int64_t bi = f / s.frames, start = (f % s.frames) * s.step;
        for (int64_t k = 0; k < s.bins; ++k)
          in[size_t(k)] = cplx(double(pdy[(f * s.bins + k) * 2]), double(pdy[(f * s.bins + k) * 2 + 1]));
        signal::dft(in.data(), s.bins, s.frame, true, out.data());
        for (int64_t n = 0; n < s.frame; ++n) {
          const int64_t at = (bi * s.length + start + n) * c;
          const double w = pw ? double(pw[n]) : 1.0;
          const cplx g = out[size_t(n)];
          dx[size_t(at)] += g.real() * w;
          dw[size_t(n)] += g.real() * double(px[at]);
          if (c == 2) {
            dx[size_t(at + 1)] += g.imag() * w;
            dw[size_t(n)] += g.imag() * double(px[at + 1]);
          }
        }
      }
      if (ctx.outputs[0] && ctx.outputs[0]->defined())
        for (size_t i = 0; i < dx.size(); ++i) ctx.output(0).data<T>()[i] = T(dx[i]);
      if (ctx.outputs.size() > 1 && ctx.outputs[1] && ctx.outputs[1]->defined())
        for (size_t i = 0; i < dw.size(); ++i) ctx.output(1).data<T>()[i] = T(dw[i]);
    });
  }

 private:
  signal::StftShape s_;
};

const std::vector<DType> kFloats = {DType::Float32, DType::Float64};
const KernelRegistrar dft_grad_reg({kKilnDomain, "DFTGrad", 1, kMaxOpset, kFloats, 1},
                                   [](const Node& n) { return std::make_unique<DftGradKernel>(n); });
const KernelRegistrar stft_grad_reg({kKilnDomain, "STFTGrad", 1, kMaxOpset, kFloats, 1},
                                    [](const Node& n) { return std::make_unique<StftGradKernel>(n); });
const OpDocRegistrar dft_grad_doc(
    {kKilnDomain,
     "DFTGrad",
     "Gradient of DFT (opset 17) with respect to its input; attributes are the DFT's (axis, inverse, onesided).",
     {"dY: gradient of the DFT output", "X: the DFT input (real [..., 1] or complex [..., 2])",
      "dft_length: the DFT's (optional)"},
     {"dX: gradient of X"},
     "forward DFT: dX[n] = sum_k dY[k] e^{+2 pi i k n / L}; inverse: dX[n] = (1 / L) sum_k dY[k] e^{-2 pi i k n / L}; "
     "k over the output's bins, n < min(input points, L); the real part for a real X"});
const OpDocRegistrar stft_grad_doc(
    {kKilnDomain,
     "STFTGrad",
     "Gradients of STFT with respect to the signal and the window; attributes are the STFT's (onesided).",
     {"dY: gradient of the STFT output [batch, frames, bins, 2]",
      "signal, frame_step, window, frame_length: the "
      "STFT's inputs (window and frame_length optional)"},
     {"dsignal: gradient of the signal", "dwindow: gradient of the window [frame_length] (zeros without a window)"},
     "per frame f at start s: g = sum_k dY[f, k] e^{+2 pi i k n / L}; dsignal[s + n] += g[n] w[n]; dwindow[n] += "
     "Re(g[n]) x_re[s + n] + Im(g[n]) x_im[s + n]"});

}  // namespace
}  // namespace kiln
