// SequenceMap (kernels/cpu/sequence_map.cpp) maps a body over sequences, which Kiln's gradient graphs
// do not carry: no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient no_grad{{"", "SequenceMap", 17, kMaxOpset}};

}  // namespace
}  // namespace kiln
