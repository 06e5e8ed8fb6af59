// What ConvTranspose and its gradient (conv_transpose.cpp, conv_transpose_grad.cpp) share: the
// geometry of a transposed convolution, validated from the node and its inputs, and the Conv it is
// the adjoint of.
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/conv_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::deconv {

struct DeconvShape {
  Shape x, w, y;
  int64_t group = 1;
  bool has_bias = false;
  std::vector<int64_t> kernel, strides, dilations;
  std::vector<int64_t> pad_begin, pad_end;  // pad_end < 0: the output extends past the full line
};

// The geometry of a ConvTranspose node with inputs X, W[, B]; throws naming the node's inputs when
// their dtypes, shapes or the attributes do not fit.
DeconvShape deconv_shape(const Node& node, const InferContext& ctx);

// ConvTranspose(X, W) is the adjoint of the Conv that reads an output-shaped input Z with the same
// W ([C, M/group, k...] is a Conv weight from M to C channels), strides, dilations and pads: so
// dX = Conv(dY, W) and dW is that Conv's weight gradient with X as its output gradient.
inline conv::Problem as_conv(const DeconvShape& s) {
  return conv::Problem{s.y, s.w, s.x, s.group, s.strides, s.dilations, s.pad_begin, s.pad_end};
}

}  // namespace kiln::deconv
