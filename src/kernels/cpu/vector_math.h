// Transcendental functions over float32 arrays at vector width, for the elementwise kernels
// oneDNN has no primitive for.
#pragma once

#include <cstdint>

namespace kiln::vmath {

// y[i] = erf(x[i]), rounded once from erf in double: the float nearest the true value up to the
// double function's own error, on every CPU alike. Runs on glibc's vector math library (libmvec)
// at AVX-512 or AVX2 width where the CPU has it, across Kiln's threads; x and y may be the same.
void erf(const float* x, float* y, int64_t n);

// The value erf() gives for one element (the baseline path, and the reference of its test).
float erf_one(float x);

}  // namespace kiln::vmath
