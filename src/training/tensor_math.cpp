#include "training/tensor_math.h"

#include <fmt/format.h>

#include "core/parallel.h"
#include "kiln/error.h"

namespace kiln::training {

namespace {

template <class T>
void add(T* dst, const T* src, int64_t n) {
  parallel_for(n, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] += src[i];
  });
}

template <class T>
void scale(T* p, int64_t n, double factor) {
  parallel_for(n, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(p[i] * factor);
  });
}

}  // namespace

void scale_in_place(Tensor& t, double factor) {
  if (!t.is_contiguous()) throw InvalidArgument(fmt::format("cannot scale a strided {}", t.describe()));
  switch (t.dtype()) {
    case DType::Float32:
      scale(t.data<float>(), t.numel(), factor);
      break;
    case DType::Float64:
      scale(t.data<double>(), t.numel(), factor);
      break;
    default:
      throw Unsupported(fmt::format("scaling {} gradients; float32 and float64 are supported", t.describe()));
  }
}

void add_into(Tensor& dst, const Tensor& src) {
  if (dst.dtype() != src.dtype() || dst.shape() != src.shape())
    throw ShapeError(fmt::format("cannot add {} into {}", src.describe(), dst.describe()));
  if (!dst.is_contiguous()) throw InvalidArgument(fmt::format("cannot add into a strided {}", dst.describe()));
  const Tensor s = src.contiguous();
  switch (dst.dtype()) {
    case DType::Float32:
      add(dst.data<float>(), s.data<float>(), dst.numel());
      break;
    case DType::Float64:
      add(dst.data<double>(), s.data<double>(), dst.numel());
      break;
    default:
      throw Unsupported(fmt::format("accumulating {} gradients; float32 and float64 are supported", src.describe()));
  }
}

}  // namespace kiln::training
