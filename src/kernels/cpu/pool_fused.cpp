// The layout pass's pools (ir/fusion.h, to_channels_last): MaxPool and AveragePool over 2-D maps
// held channels last, and the global pools of such maps, whose [N, C, 1, 1] output is channels
// first again (for one position, the same bytes). Their kernels are pool.cpp's, reading the layout
// from the op's name.
#include "kernels/cpu/pool_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

const KernelRegistrar max_pool_cl({kKilnDomain, "MaxPoolChannelsLast", 1, kMaxOpset, {DType::Float32}},
                                  pool::make_max_pool);
const KernelRegistrar avg_pool_cl({kKilnDomain, "AveragePoolChannelsLast", 1, kMaxOpset, {DType::Float32}},
                                  pool::make_average_pool);
const KernelRegistrar global_avg_cl({kKilnDomain, "GlobalAveragePoolChannelsLast", 1, kMaxOpset, {DType::Float32}},
                                    [](const Node& n) { return pool::make_global_pool(n, true); });
const KernelRegistrar global_max_cl({kKilnDomain, "GlobalMaxPoolChannelsLast", 1, kMaxOpset, {DType::Float32}},
                                    [](const Node& n) { return pool::make_global_pool(n, false); });

const OpDocRegistrar max_pool_cl_doc({kKilnDomain,
                                      "MaxPoolChannelsLast",
                                      "MaxPool over 2-D maps held channels last (the layout pass, ir/fusion.h).",
                                      {"X: [N, H, W, C]"},
                                      {"Y: [N, H', W', C]"},
                                      "MaxPool's attributes; no Indices output. Float32."});
const OpDocRegistrar avg_pool_cl_doc(
    {kKilnDomain,
     "AveragePoolChannelsLast",
     "AveragePool over 2-D maps held channels last (the layout pass, ir/fusion.h).",
     {"X: [N, H, W, C]"},
     {"Y: [N, H', W', C]"},
     "AveragePool's attributes, except count_include_pad together with ceil_mode's extra window. Float32."});
const OpDocRegistrar global_avg_cl_doc({kKilnDomain,
                                        "GlobalAveragePoolChannelsLast",
                                        "GlobalAveragePool of 2-D maps held channels last.",
                                        {"X: [N, H, W, C]"},
                                        {"Y: [N, C, 1, 1], channels first as GlobalAveragePool's"},
                                        "the mean over H and W. Float32."});
const OpDocRegistrar global_max_cl_doc({kKilnDomain,
                                        "GlobalMaxPoolChannelsLast",
                                        "GlobalMaxPool of 2-D maps held channels last.",
                                        {"X: [N, H, W, C]"},
                                        {"Y: [N, C, 1, 1], channels first as GlobalMaxPool's"},
                                        "the maximum over H and W. Float32."});

}  // namespace
}  // namespace kiln
