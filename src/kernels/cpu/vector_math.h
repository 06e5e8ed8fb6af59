// Transcendental functions over float32 arrays at vector width, for the elementwise kernels
// oneDNN has no primitive for, and the exponentials of a softmax row for the loss kernels.
#pragma once

#include <cstdint>

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
void scaled_exp(const float* x, float* y, int64_t n, double shift, double scale);

}  // namespace kiln::vmath
