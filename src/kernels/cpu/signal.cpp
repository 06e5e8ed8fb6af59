// Signal processing (opset 17): DFT (forward or inverse along one axis, real or complex input,
// dft_length padding or cropping, onesided), STFT (frames of a real or complex signal, optionally
// windowed, onesided by default) and MelWeightMatrix (the triangular mel filter bank of ONNX's
// reference). Complex values are a trailing dimension of 2 (real, imaginary). Transforms run in
// double, by radix-2 FFT for power-of-two lengths and the direct sum otherwise. The gradients of
// DFT and STFT are in signal_grad.cpp.
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "core/parallel.h"
#include "kernels/cpu/signal_common.h"
#include "kernels/cpu/visit_float.h"

namespace kiln::signal {
namespace {

std::string describe(const Shape& s) { return to_string(s); }

int64_t scalar_int(const Tensor& t, const char* op, const char* what) {
  if (t.numel() != 1) throw ShapeError(fmt::format("{}: {} {} must be a scalar", op, what, t.describe()));
  if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32)
    throw TypeError(fmt::format("{}: {} {} must be int32 or int64", op, what, t.describe()));
  return t.to_int64_vector()[0];
}

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

void dft(const cplx* in, int64_t n_in, int64_t len, bool inverse, cplx* out) {
  const double sign = inverse ? 1.0 : -1.0;
  const int64_t used = std::min(n_in, len);
  if (power_of_two(len)) {
    // Bit-reversed copy, then butterflies.
    int bits = 0;
    while ((int64_t(1) << bits) < len) ++bits;
    for (int64_t i = 0; i < len; ++i) {
      int64_t r = 0;
      for (int b = 0; b < bits; ++b) r |= ((i >> b) & 1) << (bits - 1 - b);
      out[r] = i < used ? in[i] : cplx(0, 0);
    }
    for (int64_t size = 2; size <= len; size *= 2) {
      const double angle = sign * 2 * std::numbers::pi / double(size);
      for (int64_t start = 0; start < len; start += size)
        for (int64_t j = 0; j < size / 2; ++j) {
          const cplx w = std::polar(1.0, angle * double(j));
          const cplx a = out[start + j], b = out[start + j + size / 2] * w;
          out[start + j] = a + b;
          out[start + j + size / 2] = a - b;
        }
    }
    return;
  }
  for (int64_t k = 0; k < len; ++k) {
    cplx acc(0, 0);
    for (int64_t n = 0; n < used; ++n)
      acc += in[n] * std::polar(1.0, sign * 2 * std::numbers::pi * double((k * n) % len) / double(len));
    out[k] = acc;
  }
}

DftShape dft_shape(const Node& node, const Shape& x, const Tensor* dft_length, const char* op) {
  DftShape d;
  const int64_t rank = int64_t(x.size());
  if (rank < 3 || (x.back() != 1 && x.back() != 2))
    throw ShapeError(fmt::format("{}: input {} must be [batch, ..., 1 or 2] (real or complex)", op, describe(x)));
  d.axis = node.attr_int("axis", 1);
  if (d.axis < 0) d.axis += rank;
  if (d.axis < 1 || d.axis > rank - 2)
    throw InvalidModel(
        fmt::format("{}: axis {} must name a signal dim of input {}", op, node.attr_int("axis", 1), describe(x)));
  d.complex_in = x.back() == 2;
  d.inverse = node.attr_int("inverse", 0) != 0;
  d.onesided = node.attr_int("onesided", 0) != 0;
  if (d.onesided && d.complex_in)
    throw InvalidModel(fmt::format("{}: onesided needs a real input, got {}", op, describe(x)));
  d.n = x[size_t(d.axis)];
  d.len = dft_length ? scalar_int(*dft_length, op, "dft_length") : d.n;
  if (d.len < 1) throw InvalidModel(fmt::format("{}: dft_length {} must be positive", op, d.len));
  d.bins = d.onesided ? d.len / 2 + 1 : d.len;
  for (int64_t i = 0; i < d.axis; ++i) d.outer *= x[size_t(i)];
  for (int64_t i = d.axis + 1; i < rank - 1; ++i) d.inner *= x[size_t(i)];
  d.y = x;
  d.y[size_t(d.axis)] = d.bins;
  d.y.back() = 2;
  return d;
}

StftShape stft_shape(const Node& node, const Shape& signal, const Tensor& frame_step, const Tensor* window,
                     const Tensor* frame_length, const char* op) {
  StftShape s;
  if (signal.size() != 3 || (signal[2] != 1 && signal[2] != 2))
    throw ShapeError(fmt::format("{}: signal {} must be [batch, length, 1 or 2]", op, describe(signal)));
  s.batch = signal[0];
  s.length = signal[1];
  s.complex_in = signal[2] == 2;
  s.step = scalar_int(frame_step, op, "frame_step");
  if (window && window->rank() != 1) throw ShapeError(fmt::format("{}: window {} must be 1-D", op, window->describe()));
  s.frame = frame_length ? scalar_int(*frame_length, op, "frame_length") : window ? window->dim(0) : 0;
  if (!window && !frame_length) throw InvalidModel(fmt::format("{}: needs a window or a frame_length", op));
  if (window && window->dim(0) != s.frame)
    throw ShapeError(fmt::format("{}: window {} must have frame_length {} points", op, window->describe(), s.frame));
  if (s.step < 1 || s.frame < 1 || s.frame > s.length)
    throw InvalidModel(
        fmt::format("{}: frame_step {} and frame_length {} must be positive, the frame no longer than "
                    "the signal {}",
                    op, s.step, s.frame, describe(signal)));
  const bool onesided = node.attr_int("onesided", 1) != 0;
  if (onesided && s.complex_in)
    throw InvalidModel(fmt::format("{}: onesided (the default) needs a real signal, got {}", op, describe(signal)));
  s.frames = 1 + (s.length - s.frame) / s.step;
  s.bins = onesided ? s.frame / 2 + 1 : s.frame;
  s.y = {s.batch, s.frames, s.bins, 2};
  return s;
}

}  // namespace kiln::signal

namespace kiln {
namespace {

using signal::cplx;

using signal::optional_input;

class DftKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    d_ = signal::dft_shape(node_, x.shape, optional_input(ctx, 1), "DFT");
    return {TensorMeta{x.dtype, d_.y, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const signal::DftShape& d = d_;
    const int64_t c = d.complex_in ? 2 : 1;
    visit_float(x.dtype(), "DFT", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      T* py = ctx.output(0).data<T>();
      parallel_for(d.outer * d.inner, 1, [&](int64_t b, int64_t e) {
        std::vector<cplx> in(static_cast<size_t>(d.n)), out(static_cast<size_t>(d.len));
        for (int64_t line = b; line < e; ++line) {
          const int64_t o = line / d.inner, i = line % d.inner;
          for (int64_t n = 0; n < d.n; ++n) {
            const T* v = px + ((o * d.n + n) * d.inner + i) * c;
            in[size_t(n)] = cplx(to_double(v[0]), c == 2 ? to_double(v[1]) : 0.0);
          }
          signal::dft(in.data(), d.n, d.len, d.inverse, out.data());
          const double scale = d.inverse ? 1.0 / double(d.len) : 1.0;
          for (int64_t k = 0; k < d.bins; ++k) {
            T* v = py + ((o * d.bins + k) * d.inner + i) * 2;
            v[0] = from_double<T>(out[size_t(k)].real() * scale);
            v[1] = from_double<T>(out[size_t(k)].imag() * scale);
          }
        }
      });
    });
  }

 private:
  signal::DftShape d_;
};

class StftKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    s_ = signal::stft_shape(node_, x.shape, ctx.value(1), optional_input(ctx, 2), optional_input(ctx, 3), "STFT");
    if (ctx.has_input(2) && ctx.dtype(2) != x.dtype)
      throw TypeError(
          fmt::format("STFT: window {} must have the signal's dtype {}", ctx.value(2).describe(), dtype_name(x.dtype)));
    return {TensorMeta{x.dtype, s_.y, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor* window = optional_input(ctx, 2);
    const signal::StftShape& s = s_;
    const int64_t c = s.complex_in ? 2 : 1;
    visit_float(x.dtype(), "STFT", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      const T* pw = window ? window->data<T>() : nullptr;
      T* py = ctx.output(0).data<T>();
      parallel_for(s.batch * s.frames, 1, [&](int64_t b, int64_t e) {
        std::vector<cplx> in(static_cast<size_t>(s.frame)), out(static_cast<size_t>(s.frame));
        for (int64_t f = b; f < e; ++f) {
          const int64_t bi = f / s.frames, start = (f % s.frames) * s.step;
          for (int64_t n = 0; n < s.frame; ++n) {
            const T* v = px + (bi * s.length + start + n) * c;
            const double w = pw ? to_double(pw[n]) : 1.0;
            in[size_t(n)] = cplx(to_double(v[0]) * w, c == 2 ? to_double(v[1]) * w : 0.0);
          }
          signal::dft(in.data(), s.frame, s.frame, false, out.data());
          for (int64_t k = 0; k < s.bins; ++k) {
            py[(f * s.bins + k) * 2] = from_double<T>(out[size_t(k)].real());
            py[(f * s.bins + k) * 2 + 1] = from_double<T>(out[size_t(k)].imag());
          }
        }
      });
    });
  }

 private:
  signal::StftShape s_;
};

// The mel filter bank of ONNX's reference: num_mel_bins + 2 points equally spaced in mel from
// lower_edge_hertz to upper_edge_hertz (mel = 2595 log10(1 + hz / 700)), mapped to DFT bins
// floor((dft_length + 1) hz / sample_rate), and a triangle over each three consecutive points.
class MelWeightMatrixKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    mels_ = ctx.value(0).to_int64_vector().at(0);
    dft_length_ = ctx.value(1).to_int64_vector().at(0);
    if (mels_ < 1 || dft_length_ < 1)
      throw InvalidModel(
          fmt::format("MelWeightMatrix: num_mel_bins {} and dft_length {} must be positive", mels_, dft_length_));
    const int64_t code = node_.attr_int("output_datatype", 1);
    const std::optional<DType> dt = dtype_from_onnx(code);
    if (!dt || *dt == DType::Bool || *dt == DType::String)
      throw Unsupported(fmt::format("MelWeightMatrix: output_datatype {} is not a numeric type Kiln has", code));
    return {TensorMeta{*dt, {dft_length_ / 2 + 1, mels_}, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const double rate = ctx.input(2).item_as_double(), lo = ctx.input(3).item_as_double();
    const double hi = ctx.input(4).item_as_double();
    if (!(rate > 0) || lo < 0 || hi < lo)
      throw InvalidModel(
          fmt::format("MelWeightMatrix: sample_rate {} must be positive and 0 <= lower_edge_hertz {} "
                      "<= upper_edge_hertz {}",
                      rate, lo, hi));
    const int64_t rows = dft_length_ / 2 + 1;
    const double lo_mel = 2595 * std::log10(1 + lo / 700), hi_mel = 2595 * std::log10(1 + hi / 700);
    const double step = (hi_mel - lo_mel) / double(mels_ + 2);
    std::vector<int64_t> bin(static_cast<size_t>(mels_ + 2));
    for (int64_t i = 0; i < mels_ + 2; ++i) {
      const double hz = 700 * (std::pow(10, (double(i) * step + lo_mel) / 2595) - 1);
      bin[size_t(i)] = static_cast<int64_t>(std::floor(double(dft_length_ + 1) * hz / rate));
    }
    std::vector<double> out(static_cast<size_t>(rows * mels_), 0.0);
    const auto set = [&](int64_t r, int64_t m, double v) {
      if (r < 0 || r >= rows)
        throw InvalidModel(
            fmt::format("MelWeightMatrix: mel bin {} reaches DFT bin {}, past the {} bins of "
                        "dft_length {} (upper_edge_hertz {} above sample_rate / 2?)",
                        m, r, rows, dft_length_, hi));
      out[size_t(r * mels_ + m)] = v;
    };
    for (int64_t m = 0; m < mels_; ++m) {
      const int64_t left = bin[size_t(m)], center = bin[size_t(m + 1)], right = bin[size_t(m + 2)];
      if (center == left) set(center, m, 1.0);
      else
        for (int64_t j = left; j <= center; ++j) set(j, m, double(j - left) / double(center - left));
      for (int64_t j = center; j < right; ++j) set(j, m, double(right - j) / double(right - center));
    }
    Tensor& y = ctx.output(0);
    visit_dtype(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_arithmetic_v<T>) {
        T* py = y.data<T>();
        for (size_t i = 0; i < out.size(); ++i) py[i] = static_cast<T>(out[i]);
      } else {
        T* py = y.data<T>();
        for (size_t i = 0; i < out.size(); ++i) py[i] = from_double<T>(out[i]);
      }
    });
  }

 private:
  int64_t mels_ = 0, dft_length_ = 0;
};

const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16};
// Opset 20 moved DFT's axis into an input.
const KernelRegistrar dft_reg({"", "DFT", 17, 19, kFloats},
                              [](const Node& n) { return std::make_unique<DftKernel>(n); });
const KernelRegistrar stft_reg({"", "STFT", 17, kMaxOpset, kFloats},
                               [](const Node& n) { return std::make_unique<StftKernel>(n); });
const KernelRegistrar mel_reg({"", "MelWeightMatrix", 17, kMaxOpset, {}},
                              [](const Node& n) { return std::make_unique<MelWeightMatrixKernel>(n); });

}  // namespace
}  // namespace kiln
