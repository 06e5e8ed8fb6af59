// ai.kiln.ConvChannelsLast: Conv over channels-last 2-D maps with an optional residual added and an
// optional Relu applied as the output is written (oneDNN's post-ops), the layout pass's convolution (ir/fusion.h,
// to_channels_last). Its kernel is Conv's float32 one (conv.cpp) reading the node's layout attributes.
#include "kernels/cpu/conv_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

const KernelRegistrar conv_channels_last({kKilnDomain, "ConvChannelsLast", 1, kMaxOpset, {DType::Float32}},
                                         conv::make_conv_f32);
const OpDocRegistrar conv_channels_last_doc(
    {kKilnDomain,
     "ConvChannelsLast",
     "Conv over 2-D maps with channels-last activations (the Session's layout pass, ir/fusion.h).",
     {"X: [N, H, W, C] (input_channels_last 1, the default) or [N, C, H, W] (0)", "W: [M, C/group, kH, kW], as Conv's",
      "B (optional): [M]", "R (optional): a residual added to the convolution, broadcast as Add does"},
     {"Y: [N, H', W', M] (R's broadcast with it, when given), then the activation"},
     "Conv's attributes, plus input_channels_last (int, default 1) and activation (string: \"Relu\", or empty for "
     "none). Y = activation(Conv(X, W, B) + R), the sum and the activation applied as the output is written. "
     "Float32."});

}  // namespace
}  // namespace kiln
