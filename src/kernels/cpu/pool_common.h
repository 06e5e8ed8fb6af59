// Pooling windows as a table, shared by the float64 forward pools and the pooling gradients: for
// every output position of a plane, the input offsets its window reads (taps inside the input
// only) and the divisor AveragePool uses. Built once per shape; the same for every plane.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/dnnl_common.h"
#include "kiln/graph.h"

namespace kiln {
class Kernel;
}  // namespace kiln

namespace kiln::pool {

// pool.cpp's float32 kernels; for the ai.kiln.*ChannelsLast nodes, their channels-last forms.
std::unique_ptr<Kernel> make_max_pool(const Node& n);
std::unique_ptr<Kernel> make_average_pool(const Node& n);
std::unique_ptr<Kernel> make_global_pool(const Node& n, bool mean);

struct WindowTable {
  int64_t in_plane = 1, out_plane = 1;
  std::vector<int64_t> start;  // taps of output o: taps[start[o] .. start[o + 1])
  std::vector<int64_t> taps;   // input offsets within a plane
  std::vector<double> padded;  // per output: taps inside the explicitly padded input
  int64_t size(int64_t o) const { return start[size_t(o) + 1] - start[size_t(o)]; }
};

// The window table of `w` over an input with spatial dims `in`.
inline WindowTable make_table(const Shape& in, const dnnl_util::Window& w) {
  WindowTable t;
  const size_t nsp = in.size();
  for (size_t i = 0; i < nsp; ++i) {
    t.in_plane *= in[i];
    t.out_plane *= w.out[i];
  }
  t.start.reserve(size_t(t.out_plane) + 1);
  t.start.push_back(0);
  std::vector<int64_t> o(nsp, 0), k(nsp, 0);
  for (int64_t flat = 0; flat < t.out_plane; ++flat) {
    // Decompose flat into output coordinates (row-major).
    for (size_t i = nsp, rest = size_t(flat); i-- > 0;) {
      o[i] = int64_t(rest % size_t(w.out[i]));
      rest /= size_t(w.out[i]);
    }
    int64_t padded = 0;
    std::fill(k.begin(), k.end(), 0);
    for (bool more = true; more;) {
      bool inside = true, in_padded = true;
      int64_t off = 0;
      for (size_t i = 0; i < nsp; ++i) {
        const int64_t pos = o[i] * w.strides[i] - w.pad_begin[i] + k[i] * w.dilations[i];
        inside = inside && pos >= 0 && pos < in[i];
        in_padded = in_padded && pos >= -w.pad_begin[i] && pos < in[i] + w.pad_end[i];
        off = off * in[i] + pos;
      }
      if (inside) t.taps.push_back(off);
      padded += in_padded;
      more = false;
      for (size_t i = nsp; i-- > 0;) {
        if (++k[i] < w.kernel[i]) {
          more = true;
          break;
        }
        k[i] = 0;
      }
    }
    t.start.push_back(int64_t(t.taps.size()));
    t.padded.push_back(double(padded));
  }
  return t;
}

// AveragePool's divisor of output o: count_include_pad counts the explicit pads (never ceil_mode's
// extra partial window, as ONNX Runtime), otherwise only the taps inside the input.
inline double avg_divisor(const WindowTable& t, int64_t o, bool include_pad) {
  return include_pad ? t.padded[size_t(o)] : double(t.size(o));
}

inline bool count_include_pad(const Node& node) { return node.attr_int("count_include_pad", 0) != 0; }

}  // namespace kiln::pool
