// Transcendental functions over float32 arrays at vector width, for the elementwise kernels
// oneDNN has no primitive for, and the exponentials of a softmax row for the loss kernels.
#pragma once

#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::vmath {

// y[i] = erf(x[i]), rounded once from erf in double: the float nearest the true value up to the
// double function's own error, on every CPU alike. Runs on glibc's vector math library (libmvec)
// at AVX-512 or AVX2 width where the CPU has it, across Kiln's threads; x and y may be the same.
void erf(const float* x, float* y, int64_t n);

// The value erf() gives for one element (the baseline path, and the reference of its test).
float erf_one(float x);

// One softmax row on the calling thread (loss kernels split rows across threads), exp in double
// on libmvec's vector exp where the CPU has AVX-512 or AVX2 (within 4 ulp of double; std::exp
// otherwise):
//   sum_exp:    sum over i of exp(double(x[i]) - shift), summed in double;
//   scaled_exp: y[i] = float(scale * exp(double(x[i]) - shift)).
double sum_exp(const float* x, int64_t n, double shift);
// The largest of x[0..n), NaNs skipped (-inf for an empty or all-NaN row), at vector width.
float max(const float* x, int64_t n);
void scaled_exp(const float* x, float* y, int64_t n, double shift, double scale);
// x[i] = exp(x[i] - shift) in place, in float at the CPU's vector width (within 2 ulp of exp in
// double for results from 1.7e-38 to float's max; 0 below, and for -inf; NaN stays NaN), on the
// calling thread; returns the sum of the results, summed in double. The rows of a softmax over
// float32 scores (the fused attention kernels), where masked scores are -inf.
double exp_sum(float* x, int64_t n, float shift);
// The same into y (x unchanged): y[i] = exp(x[i] - shift), returning their sum.
double exp_sum(const float* x, float* y, int64_t n, float shift);

// Gelu and its gradient over float32 arrays at vector width (libmvec; scalar libm otherwise); x and
// y (dx and dy) may be the same. Gelu's tanh form is evaluated in double and rounded once; its erf
// form in float32, the erfc of the rounded argument corrected to first order for that rounding
// (within 4 ulp of the double value: 3.3 measured); the gradient in float32 (within 1e-5).
//   "none": y = x/2 erfc(-x/sqrt 2), dy/dx = erfc(-x/sqrt 2)/2 + x e^(-x^2/2)/sqrt(2 pi);
//   "tanh": y = x s with s = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3),
//           dy/dx = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// (x/2 erfc(-x/sqrt 2) and x sigmoid(2u) equal the textbook forms and do not cancel for x << 0.)
void gelu(const float* x, float* y, int64_t n, bool tanh_form);
void gelu_grad(const float* dy, const float* x, float* dx, int64_t n, bool tanh_form);
// Gelu of float32 x into a 16-bit y, each block of results rounded as it is made (low_precision.h's
// narrow_values): mixed precision's Gelu whose result only a 16-bit product reads (ir/fusion.h's
// fold_16_bit_casts). Evaluated in float32 with the float vector library's erfc and exp (the
// gradient's accuracy: within 1e-5 relative of the double evaluation, far below a 16-bit
// rounding), so a result differs from gelu() then a Cast by at most one 16-bit unit, where the
// double value lies that close to halfway between two 16-bit values; in the tanh form's tail
// (x < -9.5, |y| < 1e-37) float's exponential overflows and the result is 0.
void gelu(const float* x, BFloat16* y, int64_t n, bool tanh_form);
void gelu(const float* x, Half* y, int64_t n, bool tanh_form);
// The same formulas on one double, the reference of the float32 paths and the float64 kernels.
double gelu_one(double x, bool tanh_form);
double gelu_slope(double x, bool tanh_form);

}  // namespace kiln::vmath
