// The window functions of opset 17: HannWindow, HammingWindow and BlackmanWindow, the generalized
// cosine windows y[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) for n < size, with N = size
// (periodic, the default) or size - 1 (symmetric), as ONNX's function bodies define them (Hann
// 0.5 / 0.5, Hamming 25/46 / 21/46, Blackman 0.42 / 0.5 / 0.08); computed in double, written in
// output_datatype (float by default). The length comes from the value of `size`, so a fed size
// plans at run time.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <numbers>

#include "kiln/kernel.h"

namespace kiln {
namespace {

constexpr std::array<double, 3> kHann{0.5, 0.5, 0.0};
constexpr std::array<double, 3> kHamming{25.0 / 46.0, 21.0 / 46.0, 0.0};
constexpr std::array<double, 3> kBlackman{0.42, 0.5, 0.08};

class WindowKernel : public Kernel {
 public:
  WindowKernel(const Node& node, std::array<double, 3> a) : Kernel(node), a_(a) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Tensor& size = ctx.value(0);
    if (size.numel() != 1 || size.rank() > 1)
      throw ShapeError(fmt::format("size must be a scalar, got {}", size.describe()));
    const int64_t n = size.contiguous().to_int64_vector().at(0);
    if (n < 0) throw InvalidArgument(fmt::format("size {} is negative", n));
    const int64_t code = node_.attr_int("output_datatype", 1);
    const auto dt = dtype_from_onnx(code);
    if (!dt || (*dt != DType::Float32 && *dt != DType::Float64 && *dt != DType::Float16 && *dt != DType::BFloat16))
      throw Unsupported(
          fmt::format("output_datatype {} (Kiln writes windows as float, double, float16 or bfloat16)", code));
    periodic_ = node_.attr_int("periodic", 1) != 0;
    return {{*dt, {n}, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    Tensor& out = ctx.output(0);
    const int64_t n = out.numel();
    const double period = static_cast<double>(periodic_ ? n : n - 1), tau = 2 * std::numbers::pi;
    visit_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = out.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        const double angle = tau * static_cast<double>(i) / period;  // size 1 symmetric: 0 / 0, as ONNX's body
        p[i] = from_double<T>(a_[0] - a_[1] * std::cos(angle) + a_[2] * std::cos(2 * angle));
      }
    });
  }

 private:
  std::array<double, 3> a_;
  bool periodic_ = true;
};

template <const std::array<double, 3>& A>
KernelRegistrar reg(const char* op) {
  return KernelRegistrar({"", op, 17, kMaxOpset, {DType::Int32, DType::Int64}},
                         [](const Node& n) { return std::make_unique<WindowKernel>(n, A); });
}

const KernelRegistrar reg_hann = reg<kHann>("HannWindow");
const KernelRegistrar reg_hamming = reg<kHamming>("HammingWindow");
const KernelRegistrar reg_blackman = reg<kBlackman>("BlackmanWindow");

}  // namespace
}  // namespace kiln
