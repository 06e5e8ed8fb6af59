// The convolution problem shared by Conv, ConvTranspose and their gradients, stated once in the
// direction of a Conv: input x [N, C, in...], weight w [M, C/group, k...], output y [N, M, out...],
// output position o and tap k reading input position o * stride - pad_begin + k * dilation.
//
// ConvTranspose is the adjoint of such a Conv (its input plays y, its output plays x), so the three
// direct loops below (forward, backward data, backward weights) and the oneDNN backward runner
// serve all four ops. The loops are the float64 path and the fallback for geometries oneDNN
// refuses (ConvTranspose outputs past the full line: a negative pad_end).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_common.h"
#include "kiln/tensor.h"

namespace kiln {
class Kernel;
struct Node;
}  // namespace kiln

namespace kiln::conv {

// The float32 Conv kernel (conv.cpp); for an ai.kiln.ConvChannelsLast node, its channels-last form.
std::unique_ptr<Kernel> make_conv_f32(const Node& n);

struct Problem {
  Shape x, w, y;  // conv-direction shapes, ONNX layouts
  int64_t group = 1;
  std::vector<int64_t> strides, dilations, pad_begin, pad_end;  // pad_end may be negative
};

// Which layouts oneDNN may pick for a float32 convolution: weights and output always take the
// layout it prefers ("any"); the input too from 4 channels on. Measured with oneDNN 2.6 at 2 threads
// on AVX-512 (LeNet's and ResNet's first layers): "any" weights and output select the direct JIT
// kernels, 2-10x faster than plain NCHW's gemm path in forward and backward-weights even counting
// the output's reorder; a blocked input pads its channels to 8 or 16, which below 4 channels makes
// backward-data 2-3x slower than plain, so such inputs stay plain.
inline bool blocked_input(int64_t channels) { return channels >= 4; }

// The kernel taps that read the input somewhere, per spatial dim: on small maps (ResNet's last
// stages at 32x32 have 2x2 and 1x1 maps) the outer taps of a padded 3x3 kernel read only padding,
// whose zeros add nothing. Cropping them is exact and removes their multiply-adds: a 3x3 kernel
// over a 1x1 map with padding 1 is a 1x1 convolution. `first`/`last` are inclusive tap indices;
// a dim is left whole when cropping would need a negative padding.
struct TapCrop {
  std::vector<int64_t> first, last, pad_begin, pad_end;
  bool any = false;
};

// `x`: [N, C, in...]; the other vectors per spatial dim.
inline TapCrop crop_taps(const Shape& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                         const std::vector<int64_t>& dilations, const std::vector<int64_t>& pad_begin,
                         const std::vector<int64_t>& pad_end, const std::vector<int64_t>& out_sizes) {
  const size_t n = kernel.size();
  TapCrop c{std::vector<int64_t>(n, 0), {}, pad_begin, pad_end};
  for (size_t i = 0; i < n; ++i) {
    const int64_t k = kernel[i], d = dilations[i], s = strides[i], p = pad_begin[i];
    const int64_t in = x[i + 2], out = out_sizes[i];
    c.last.push_back(k - 1);
    const auto used = [&](int64_t tap) {  // some output's window puts this tap inside the input
      const int64_t lo = tap * d - p;     // the input index it reads for output 0
      const int64_t o = lo >= 0 ? 0 : (-lo + s - 1) / s;
      return o < out && o * s + lo < in;
    };
    int64_t first = 0, last = k - 1;
    while (first < k && !used(first)) ++first;
    while (last > first && !used(last)) --last;
    if (first == k || (first == 0 && last == k - 1)) continue;
    const int64_t pb = p - first * d, pe = (out - 1) * s + (last - first) * d + 1 - in - pb;
    if (pb < 0 || pe < 0) continue;
    c.first[i] = first;
    c.last[i] = last;
    c.pad_begin[i] = pb;
    c.pad_end[i] = pe;
    c.any = true;
  }
  return c;
}

// Where each kept tap of a weight row [k...] sits in it, for copy_taps and expand_taps.
inline std::vector<int64_t> tap_offsets(const Shape& wshape, const TapCrop& c) {
  const size_t nsp = wshape.size() - 2;
  const Strides st = contiguous_strides(wshape);
  Shape taps(nsp);
  int64_t per_row = 1;
  for (size_t i = 0; i < nsp; ++i) per_row *= taps[i] = c.last[i] - c.first[i] + 1;
  int64_t base = 0;
  for (size_t i = 0; i < nsp; ++i) base += c.first[i] * st[i + 2];
  std::vector<int64_t> offsets(static_cast<size_t>(per_row));
  for (int64_t t = 0; t < per_row; ++t) {
    int64_t off = base;
    for (int64_t rem = t, i = static_cast<int64_t>(nsp) - 1; i >= 0; --i) {
      off += (rem % taps[size_t(i)]) * st[size_t(i) + 2];
      rem /= taps[size_t(i)];
    }
    offsets[size_t(t)] = off;
  }
  return offsets;
}

// w[M, C, k...] cropped to the taps [first, last] of each spatial dim, contiguous, into `out`.
template <class T>
void copy_taps(const T* w, const Shape& wshape, const TapCrop& c, T* out) {
  const std::vector<int64_t> offsets = tap_offsets(wshape, c);
  const int64_t per_row = static_cast<int64_t>(offsets.size()), k = numel(wshape) / (wshape[0] * wshape[1]);
  parallel_for(wshape[0] * wshape[1], 4096 / std::max<int64_t>(1, per_row), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row)
      for (int64_t t = 0; t < per_row; ++t) out[row * per_row + t] = w[row * k + offsets[size_t(t)]];
  });
}

// The inverse for a gradient: w[M, C, k...] gets the cropped taps back in place and zeros elsewhere.
template <class T>
void expand_taps(const T* cropped, const Shape& wshape, const TapCrop& c, T* w) {
  const std::vector<int64_t> offsets = tap_offsets(wshape, c);
  const int64_t per_row = static_cast<int64_t>(offsets.size()), k = numel(wshape) / (wshape[0] * wshape[1]);
  parallel_for(wshape[0] * wshape[1], 4096 / std::max<int64_t>(1, k), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      T* r = w + row * k;
      std::fill(r, r + k, T{});
      for (int64_t t = 0; t < per_row; ++t) r[offsets[size_t(t)]] = cropped[row * per_row + t];
    }
  });
}

// copy_taps for a channels-last input read as one product: out[m, (taps..., c)] = w[m, c, taps...];
// output channels split across threads.
template <class T>
void copy_taps_channels_last(const T* w, const Shape& wshape, const TapCrop& c, T* out) {
  const std::vector<int64_t> offsets = tap_offsets(wshape, c);
  const int64_t taps = static_cast<int64_t>(offsets.size()), channels = wshape[1];
  const int64_t k = numel(wshape) / (wshape[0] * channels);
  parallel_for(wshape[0], std::max<int64_t>(1, 16384 / std::max<int64_t>(1, channels * k)),
               [&](int64_t m0, int64_t m1) {
                 for (int64_t m = m0; m < m1; ++m)
                   for (int64_t t = 0; t < taps; ++t) {
                     const T* src = w + m * channels * k + offsets[size_t(t)];
                     T* dst = out + (m * taps + t) * channels;
                     for (int64_t ch = 0; ch < channels; ++ch) dst[ch] = src[ch * k];
                   }
               });
}

// Its inverse for a gradient: w[m, c, taps...] from cropped[m, (taps..., c)], zeros elsewhere.
template <class T>
void expand_taps_channels_last(const T* cropped, const Shape& wshape, const TapCrop& c, T* w) {
  const std::vector<int64_t> offsets = tap_offsets(wshape, c);
  const int64_t taps = static_cast<int64_t>(offsets.size()), channels = wshape[1];
  const int64_t k = numel(wshape) / (wshape[0] * channels);
  parallel_for(wshape[0], std::max<int64_t>(1, 16384 / std::max<int64_t>(1, channels * k)),
               [&](int64_t m0, int64_t m1) {
                 std::fill(w + m0 * channels * k, w + m1 * channels * k, T{});
                 for (int64_t m = m0; m < m1; ++m)
                   for (int64_t t = 0; t < taps; ++t) {
                     const T* src = cropped + (m * taps + t) * channels;
                     T* dst = w + m * channels * k + offsets[size_t(t)];
                     for (int64_t ch = 0; ch < channels; ++ch) dst[ch * k] = src[ch];
                   }
               });
}

// Spatial geometry padded to three dims (size 1, kernel 1) so one loop nest serves 1-D to 3-D.
struct Geometry {
  int64_t n = 0, c = 0, m = 0, cg = 0, mg = 0;  // batch, in/out channels, per group
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1}, p{0, 0, 0};
  int64_t in_plane = 1, out_plane = 1, ksz = 1;

  explicit Geometry(const Problem& pr) {
    const size_t nsp = pr.x.size() - 2, off = 3 - nsp;
    n = pr.x[0];
    c = pr.x[1];
    m = pr.w[0];
    cg = c / pr.group;
    mg = m / pr.group;
    for (size_t i = 0; i < nsp; ++i) {
      in[off + i] = pr.x[2 + i];
      out[off + i] = pr.y[2 + i];
      k[off + i] = pr.w[2 + i];
      s[off + i] = pr.strides[i];
      d[off + i] = pr.dilations[i];
      p[off + i] = pr.pad_begin[i];
    }
    in_plane = in[0] * in[1] * in[2];
    out_plane = out[0] * out[1] * out[2];
    ksz = k[0] * k[1] * k[2];
  }

  // Calls f(output offset, input offset, tap offset) within one plane for every tap that lands
  // inside the input (padding contributes nothing).
  template <class F>
  void for_each_tap(F&& f) const {
    for (int64_t o0 = 0; o0 < out[0]; ++o0)
      for (int64_t k0 = 0; k0 < k[0]; ++k0) {
        const int64_t i0 = o0 * s[0] - p[0] + k0 * d[0];
        if (i0 < 0 || i0 >= in[0]) continue;
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t k1 = 0; k1 < k[1]; ++k1) {
            const int64_t i1 = o1 * s[1] - p[1] + k1 * d[1];
            if (i1 < 0 || i1 >= in[1]) continue;
            for (int64_t o2 = 0; o2 < out[2]; ++o2)
              for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                const int64_t i2 = o2 * s[2] - p[2] + k2 * d[2];
                if (i2 < 0 || i2 >= in[2]) continue;
                f((o0 * out[1] + o1) * out[2] + o2, (i0 * in[1] + i1) * in[2] + i2, (k0 * k[1] + k1) * k[2] + k2);
              }
          }
      }
  }
};

// y = conv(x, w) + b; threads split the (batch, output channel) planes.
template <class T>
void forward_direct(const Problem& pr, const T* x, const T* w, const T* b, T* y) {
  const Geometry g(pr);
  parallel_for(g.n * g.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / g.m, oc = plane % g.m, grp = oc / g.mg;
      T* yp = y + plane * g.out_plane;
      std::fill(yp, yp + g.out_plane, b ? b[oc] : T(0));
      for (int64_t icg = 0; icg < g.cg; ++icg) {
        const T* xp = x + (n * g.c + grp * g.cg + icg) * g.in_plane;
        const T* wp = w + (oc * g.cg + icg) * g.ksz;
        g.for_each_tap([&](int64_t o, int64_t i, int64_t k) { yp[o] += xp[i] * wp[k]; });
      }
    }
  });
}

// dx = conv^T(dy, w); threads split the (batch, input channel) planes of dx.
template <class T>
void backward_data_direct(const Problem& pr, const T* dy, const T* w, T* dx) {
  const Geometry g(pr);
  parallel_for(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / g.c, ic = plane % g.c, grp = ic / g.cg, icg = ic % g.cg;
      T* xp = dx + plane * g.in_plane;
      std::fill(xp, xp + g.in_plane, T(0));
      for (int64_t ocg = 0; ocg < g.mg; ++ocg) {
        const int64_t oc = grp * g.mg + ocg;
        const T* yp = dy + (n * g.m + oc) * g.out_plane;
        const T* wp = w + (oc * g.cg + icg) * g.ksz;
        g.for_each_tap([&](int64_t o, int64_t i, int64_t k) { xp[i] += yp[o] * wp[k]; });
      }
    }
  });
}

// dw[oc, icg, k] = sum over batch and output positions of dy * x; threads split output channels.
template <class T>
void backward_weights_direct(const Problem& pr, const T* x, const T* dy, T* dw) {
  const Geometry g(pr);
  parallel_for(g.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t oc = begin; oc < end; ++oc) {
      const int64_t grp = oc / g.mg;
      for (int64_t icg = 0; icg < g.cg; ++icg) {
        T* wp = dw + (oc * g.cg + icg) * g.ksz;
        std::fill(wp, wp + g.ksz, T(0));
        for (int64_t n = 0; n < g.n; ++n) {
          const T* xp = x + (n * g.c + grp * g.cg + icg) * g.in_plane;
          const T* yp = dy + (n * g.m + oc) * g.out_plane;
          g.for_each_tap([&](int64_t o, int64_t i, int64_t k) { wp[k] += yp[o] * xp[i]; });
        }
      }
    }
  });
}

// db[c] = sum of t[n, c, ...] over batch and spatial positions (t is [N, C, ...]).
template <class T>
void channel_sum(const Shape& shape, const T* t, T* db) {
  const int64_t n = shape[0], c = shape[1], plane = n * c != 0 ? numel(shape) / (n * c) : 0;
  parallel_for(c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      double acc = 0;
      for (int64_t b = 0; b < n; ++b) {
        const T* p = t + (b * c + ch) * plane;
        for (int64_t i = 0; i < plane; ++i) acc += static_cast<double>(p[i]);
      }
      db[ch] = static_cast<T>(acc);
    }
  });
}

// oneDNN's convolution_forward (training, no bias), convolution_backward_data and
// convolution_backward_weights for a float32 Problem, each built only when asked, once per planned
// shape. build() returns false when oneDNN has no implementation for the geometry; the caller then
// runs the direct loops.
// Which activations of a 2-D convolution Kiln holds channels last ([N, H, W, C]; the layout pass,
// ir/fusion.h): X (and dX), Y (and dY). The others are channels first.
struct ChannelsLast {
  bool x = false, y = false;
  bool any() const { return x || y; }
};

class DnnlConv {
 public:
  // false when oneDNN has no implementation for the geometry, or (`native_only`) only its
  // reference loops. `dt`: f32, or bf16 (native bfloat16 with float32 accumulation). Channels-last
  // activations are read and written in place where oneDNN has a kernel for that layout.
  bool build(const Problem& pr, bool forward, bool data, bool weights, bool bias,
             dnnl::memory::data_type dt = dnnl::memory::data_type::f32, bool native_only = false,
             ChannelsLast layout = {});
  void forward(const Tensor& x, const Tensor& w, Tensor& y);
  void data(const Tensor& dy, const Tensor& w, Tensor& dx);
  // `dy_from_data`: data() ran in this same kernel call with the same dy, so when both passes
  // want dy in the same layout its reordered copy is taken from there instead of made again.
  void weights(const Tensor& x, const Tensor& dy, Tensor& dw_out, Tensor* db, bool dy_from_data = false);

 private:
  // The primitives for activation descriptors xa and ya (explicit layouts, or "any").
  void make(const Problem& pr, bool forward, bool data, bool weights, dnnl::memory::data_type dt,
            const dnnl::memory::desc& xa, const dnnl::memory::desc& ya);
  // Whether any primitive built is one of oneDNN's reference loops.
  bool any_reference() const;
  // The weights' taps the primitives read (a contiguous copy), and dW's they write.
  Tensor kept_taps(const Tensor& w) const;

  bool has_bias_ = false;
  TapCrop crop_;
  Shape w_shape_, cropped_w_shape_;  // ONNX layout [M, C/group, k...], and with the kept taps
  DType dtype_ = DType::Float32;
  dnnl_util::Operand fw_x_, fw_w_, fw_y_;
  dnnl_util::Operand bd_dy_, bd_w_, bd_dx_;
  dnnl_util::Operand bw_x_, bw_dy_, bw_dw_;
  dnnl::memory::desc bias_, xp_, yp_, wp_;  // the bias, and Kiln's layouts of X, Y and the weights
  std::vector<std::string> impls_;          // oneDNN's implementation of each primitive built
  dnnl::convolution_forward forward_prim_;
  dnnl::convolution_backward_data data_prim_;
  dnnl::convolution_backward_weights weights_prim_;
};

// Which of (dX, dW, dB) a gradient node computes: its "output_mask" attribute (PyTorch's
// convolution_backward convention; default all), and only outputs the node names.
std::array<bool, 3> output_mask(const Node& node);

}  // namespace kiln::conv
