// ConvTranspose (1-D to 3-D; group, strides, dilations, pads, output_padding, output_shape,
// auto_pad, optional bias). float32 runs on oneDNN's deconvolution_forward, built once per planned
// shape; float64 (and float32 geometries oneDNN refuses) run a direct scatter loop.
//
// Geometry, as ONNX Runtime computes it: the full transposed convolution of an input of size `in`
// is (in - 1) * stride + (kernel - 1) * dilation + 1 long; output_padding extends it at the end.
// The output is that line cropped by pads (begin, end). With output_shape (or SAME auto_pad, whose
// output is in * stride) the pads are derived from the requested size; when the request exceeds
// the full length, the extra positions at the end receive only the bias.
#include <fmt/format.h>

#include <cstring>

#include "core/parallel.h"
#include "kernels/cpu/conv_transpose_common.h"
#include "kernels/cpu/low_precision.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::deconv {
namespace {

std::vector<int64_t> ints_attr(const Node& node, const std::string& key, size_t n, int64_t fallback, int64_t min) {
  std::vector<int64_t> v = node.attr_ints(key, std::vector<int64_t>(n, fallback));
  if (v.size() != n)
    throw InvalidModel(
        fmt::format("ConvTranspose: attribute '{}' = [{}] must have {} values", key, fmt::join(v, ", "), n));
  for (int64_t x : v)
    if (x < min)
      throw InvalidModel(
          fmt::format("ConvTranspose: attribute '{}' = [{}] must be >= {}", key, fmt::join(v, ", "), min));
  return v;
}

// The input's and weight's dtypes and ranks; returns the spatial rank.
size_t check_operands(const TensorMeta& x, const TensorMeta& w) {
  if (w.dtype != x.dtype)
    throw TypeError(
        fmt::format("ConvTranspose: weight {} must have the dtype of input {}", w.describe(), x.describe()));
  if (x.shape.size() < 3)
    throw ShapeError(
        fmt::format("ConvTranspose: input {} must be [N, C, D1, ...] with at least one spatial dim", x.describe()));
  if (w.shape.size() != x.shape.size())
    throw ShapeError(fmt::format("ConvTranspose: weight {} must have the rank of input {} ([C, M/group, k1, ...])",
                                 w.describe(), x.describe()));
  const size_t nsp = x.shape.size() - 2;
  if (nsp > 3)
    throw Unsupported(
        fmt::format("ConvTranspose: input {} has {} spatial dims; Kiln supports 1 to 3", x.describe(), nsp));
  return nsp;
}

}  // namespace

DeconvShape deconv_shape(const Node& node, const InferContext& ctx) {
  const TensorMeta& x = ctx.input(0);
  const TensorMeta& w = ctx.input(1);
  const size_t nsp = check_operands(x, w);
  DeconvShape s;
  s.x = x.shape;
  s.w = w.shape;
  s.group = node.attr_int("group", 1);
  if (s.group < 1) throw InvalidModel(fmt::format("ConvTranspose: group {} must be positive", s.group));
  if (w.shape[0] != x.shape[1] || x.shape[1] % s.group != 0)
    throw ShapeError(
        fmt::format("ConvTranspose: input {} has {} channels but weight {} expects {} (group {}; the "
                    "channel count must be a multiple of group)",
                    x.describe(), x.shape[1], w.describe(), w.shape[0], s.group));
  s.kernel.assign(w.shape.begin() + 2, w.shape.end());
  if (node.has_attr("kernel_shape") && node.attr_ints("kernel_shape") != s.kernel)
    throw ShapeError(fmt::format("ConvTranspose: kernel_shape [{}] does not match weight {}",
                                 fmt::join(node.attr_ints("kernel_shape"), ", "), w.describe()));
  const int64_t m = w.shape[1] * s.group;
  if (ctx.has_input(2)) {
    const TensorMeta& b = ctx.input(2);
    if (b.dtype != x.dtype || b.shape != Shape{m})
      throw ShapeError(
          fmt::format("ConvTranspose: bias {} must be {}[{}] (one per output channel: weight {} times "
                      "group {})",
                      b.describe(), dtype_name(x.dtype), m, w.describe(), s.group));
    s.has_bias = true;
  }
  s.strides = ints_attr(node, "strides", nsp, 1, 1);
  s.dilations = ints_attr(node, "dilations", nsp, 1, 1);
  const std::vector<int64_t> adj = ints_attr(node, "output_padding", nsp, 0, 0);
  const std::vector<int64_t> pads = ints_attr(node, "pads", 2 * nsp, 0, 0);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    throw InvalidModel(
        fmt::format("ConvTranspose: auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", auto_pad));
  std::vector<int64_t> out_shape;
  if (node.has_attr("output_shape")) {
    out_shape = node.attr_ints("output_shape");
    // Some exporters write the whole [N, C, D...]; the spatial part is what matters.
    if (out_shape.size() == nsp + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    if (out_shape.size() != nsp)
      throw InvalidModel(fmt::format("ConvTranspose: output_shape [{}] must have one value per spatial dim of input {}",
                                     fmt::join(node.attr_ints("output_shape"), ", "), x.describe()));
  }
  s.y = {x.shape[0], m};
  s.pad_begin.assign(nsp, 0);
  s.pad_end.assign(nsp, 0);
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t in = x.shape[2 + i];
    const int64_t full = (in - 1) * s.strides[i] + (s.kernel[i] - 1) * s.dilations[i] + 1 + adj[i];
    int64_t out = 0;
    if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out = !out_shape.empty() ? out_shape[i] : in * s.strides[i];
      const int64_t total = std::max<int64_t>(0, full - out);
      s.pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else {
      if (auto_pad == "NOTSET") s.pad_begin[i] = pads[i];
      out = full - s.pad_begin[i] - (auto_pad == "NOTSET" ? pads[nsp + i] : 0);
    }
    if (out < 0 || (out == 0 && in > 0))
      throw ShapeError(
          fmt::format("ConvTranspose: spatial dim {} of input {} gives output size {} (pads [{}], "
                      "output_padding [{}], output_shape [{}])",
                      i, x.describe(), out, fmt::join(pads, ", "), fmt::join(adj, ", "), fmt::join(out_shape, ", ")));
    s.pad_end[i] = full - adj[i] - s.pad_begin[i] - out;  // relative to the line without output_padding
    s.y.push_back(out);
  }
  return s;
}

}  // namespace kiln::deconv

namespace kiln {
namespace {

using dnnl::memory;
using dnnl_util::to_dims;

using deconv::deconv_shape;
using deconv::DeconvShape;

// y = bias, then every input element scatters its kernel-shaped contribution. Spatial dims padded
// to three; threads split the (batch, output channel) planes, so no two write the same element.
template <class T>
void deconv_direct(const DeconvShape& s, const T* x, const T* w, const T* b, T* y) {
  const size_t nsp = s.kernel.size(), off = 3 - nsp;
  std::vector<int64_t> in(3, 1), out(3, 1), k(3, 1), st(3, 1), d(3, 1), p(3, 0);
  for (size_t i = 0; i < nsp; ++i) {
    in[off + i] = s.x[2 + i];
    out[off + i] = s.y[2 + i];
    k[off + i] = s.kernel[i];
    st[off + i] = s.strides[i];
    d[off + i] = s.dilations[i];
    p[off + i] = s.pad_begin[i];
  }
  const int64_t c = s.x[1], m = s.y[1], cg = c / s.group, mg = m / s.group;
  const int64_t in_plane = in[0] * in[1] * in[2], out_plane = out[0] * out[1] * out[2], ksz = k[0] * k[1] * k[2];
  parallel_for(s.x[0] * m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / m, oc = plane % m, g = oc / mg, ocg = oc % mg;
      T* yp = y + plane * out_plane;
      std::fill(yp, yp + out_plane, b ? b[oc] : T(0));
      for (int64_t icg = 0; icg < cg; ++icg) {
        const int64_t ic = g * cg + icg;
        const T* xp = x + (n * c + ic) * in_plane;
        const T* wp = w + (ic * mg + ocg) * ksz;
        for (int64_t i0 = 0; i0 < in[0]; ++i0)
          for (int64_t i1 = 0; i1 < in[1]; ++i1)
            for (int64_t i2 = 0; i2 < in[2]; ++i2) {
              const T xv = xp[(i0 * in[1] + i1) * in[2] + i2];
              for (int64_t k0 = 0; k0 < k[0]; ++k0) {
                const int64_t o0 = i0 * st[0] - p[0] + k0 * d[0];
                if (o0 < 0 || o0 >= out[0]) continue;
                for (int64_t k1 = 0; k1 < k[1]; ++k1) {
                  const int64_t o1 = i1 * st[1] - p[1] + k1 * d[1];
                  if (o1 < 0 || o1 >= out[1]) continue;
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t o2 = i2 * st[2] - p[2] + k2 * d[2];
                    if (o2 < 0 || o2 >= out[2]) continue;
                    yp[(o0 * out[1] + o1) * out[2] + o2] += xv * wp[(k0 * k[1] + k1) * k[2] + k2];
                  }
                }
              }
            }
      }
    }
  });
}

class ConvTransposeKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    s_ = deconv_shape(node_, ctx);
    dtype_ = ctx.dtype(0);
    built_ = false;
    return {TensorMeta{dtype_, s_.y, ctx.input(0).dynamic, Tensor()}};
  }
  void prepare(const InferContext&, const std::vector<TensorMeta>&) override { build(); }

  void compute(ComputeContext& ctx) override {
    if (!built_) build();
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    if (!use_dnnl_) {
      visit_dtype(dtype_, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
          deconv_direct<T>(s_, ctx.input(0).data<T>(), ctx.input(1).data<T>(),
                           s_.has_bias ? ctx.input(2).data<T>() : nullptr, y.data<T>());
        else throw Unsupported(fmt::format("ConvTranspose: {} input", dtype_name(dtype_)));
      });
      return;
    }
    std::unordered_map<int, memory> args;
    dnnl_util::bind(DNNL_ARG_SRC, src_, ctx.input(0), args);
    dnnl_util::bind(DNNL_ARG_WEIGHTS, wei_, ctx.input(1), args);
    if (s_.has_bias) args[DNNL_ARG_BIAS] = dnnl_util::memory_of(dnnl_util::plain_desc({s_.y[1]}), ctx.input(2));
    dnnl_util::bind_output(DNNL_ARG_DST, dst_, y, args);
    dnnl_util::execute(prim_, args, "deconvolution");
    dnnl_util::finish_output(dst_, y, "the deconvolution output");
  }

 private:
  void build() {
    built_ = true;
    use_dnnl_ = false;
    if (dtype_ != DType::Float32 || numel(s_.y) == 0 || numel(s_.x) == 0) return;
    // ONNX's weight [C, M/group, k...] is oneDNN's [G, M/G, C/G, k...] with the channel strides
    // swapped ("giohw"); a strided descriptor states that, and the reorder packs it.
    const Shape kdims(s_.w.begin() + 2, s_.w.end());
    const Strides ks = contiguous_strides(kdims);
    const int64_t ksz = numel(kdims), cg = s_.x[1] / s_.group, mg = s_.w[1];
    Shape wdims{mg * s_.group, cg};
    Strides wstrides{ksz, mg * ksz};
    if (s_.group > 1) {
      wdims = {s_.group, mg, cg};
      wstrides = {cg * mg * ksz, ksz, mg * ksz};
    }
    wdims.insert(wdims.end(), kdims.begin(), kdims.end());
    wstrides.insert(wstrides.end(), ks.begin(), ks.end());
    const memory::desc xp = dnnl_util::plain_desc(s_.x), wp = dnnl_util::strided_desc(wdims, wstrides),
                       yp = dnnl_util::plain_desc(s_.y);
    const memory::desc bp = s_.has_bias ? dnnl_util::plain_desc({s_.y[1]}) : memory::desc();
    std::vector<int64_t> dil = s_.dilations;
    for (int64_t& d : dil) d -= 1;  // oneDNN counts the holes between taps
    auto any = [](const Shape& s) { return memory::desc(to_dims(s), memory::data_type::f32, memory::format_tag::any); };
    const bool blocked = s_.x[1] >= 8 && s_.y[1] >= 8;
    try {
      dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                          blocked ? any(s_.x) : xp, any(wdims), bp, blocked ? any(s_.y) : yp,
                                          to_dims(s_.strides), to_dims(dil), to_dims(s_.pad_begin),
                                          to_dims(s_.pad_end));
      dnnl::deconvolution_forward::primitive_desc pd(d, dnnl_util::engine());
      src_ = dnnl_util::operand(xp, pd.src_desc(), false);
      wei_ = dnnl_util::operand(wp, pd.weights_desc(), false);
      dst_ = dnnl_util::operand(yp, pd.dst_desc(), true);
      prim_ = dnnl::deconvolution_forward(pd);
      use_dnnl_ = true;
    } catch (const dnnl::error&) {
      // oneDNN has no implementation for some geometries (an output past the full line, i.e. a
      // negative right padding); the direct loop computes those exactly.
      use_dnnl_ = false;
    }
  }

  DeconvShape s_;
  DType dtype_ = DType::Float32;
  bool built_ = false, use_dnnl_ = false;
  dnnl_util::Operand src_, wei_, dst_;
  dnnl::deconvolution_forward prim_;
};

const KernelRegistrar conv_transpose({"", "ConvTranspose", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                     [](const Node& n) { return std::make_unique<ConvTransposeKernel>(n); });
const KernelRegistrar conv_transpose_low({"", "ConvTranspose", 1, kMaxOpset, {DType::BFloat16, DType::Float16}},
                                         via_float32([](const Node& n) {
                                           return std::make_unique<ConvTransposeKernel>(n);
                                         }));

}  // namespace
}  // namespace kiln
