// What the signal-processing kernels (signal.cpp: DFT, STFT, MelWeightMatrix) share with their
// gradients (signal_grad.cpp): the 1-D discrete Fourier transform and the reading of DFT's and
// STFT's inputs and attributes.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::signal {

using cplx = std::complex<double>;

// out[k] = sum_{n < min(n_in, len)} in[n] e^{-+2 pi i k n / len} for k < len (the sign + when
// `inverse`), without the 1 / len of an inverse transform. Radix-2 FFT when len is a power of
// two, else the direct sum.
void dft(const cplx* in, int64_t n_in, int64_t len, bool inverse, cplx* out);

// A DFT node's geometry: X [.., n (axis), .., 1 or 2] as `outer` lines of `n` points `inner` apart.
struct DftShape {
  int64_t axis = 1, n = 0, len = 0, bins = 0, outer = 1, inner = 1;
  bool complex_in = false, inverse = false, onesided = false;
  Shape y;
};

// Reads axis, inverse, onesided and dft_length (input 1, when given) for X of `x_shape`.
DftShape dft_shape(const Node& node, const Shape& x_shape, const Tensor* dft_length, const char* op);

// An STFT node's geometry: signal [B, L, 1 or 2], frames of `frame` points every `step`.
struct StftShape {
  int64_t batch = 0, length = 0, step = 0, frame = 0, frames = 0, bins = 0;
  bool complex_in = false;
  Shape y;
};

StftShape stft_shape(const Node& node, const Shape& signal, const Tensor& frame_step, const Tensor* window,
                     const Tensor* frame_length, const char* op);

// Input i's value (known at plan time, or at run time for dynamic inputs), or null when omitted.
inline const Tensor* optional_input(const InferContext& ctx, size_t i) {
  return ctx.has_input(i) ? &ctx.value(i) : nullptr;
}
inline const Tensor* optional_input(const ComputeContext& ctx, size_t i) {
  return ctx.has_input(i) ? &ctx.input(i) : nullptr;
}

}  // namespace kiln::signal
