// The comparisons, logical ops and float tests (kernels/cpu/compare.cpp) produce booleans: no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{"", "Equal", 1, kMaxOpset},
                       {"", "Less", 1, kMaxOpset},
                       {"", "Greater", 1, kMaxOpset},
                       {"", "LessOrEqual", 1, kMaxOpset},
                       {"", "GreaterOrEqual", 1, kMaxOpset},
                       {"", "Not", 1, kMaxOpset},
                       {"", "And", 1, kMaxOpset},
                       {"", "Or", 1, kMaxOpset},
                       {"", "Xor", 1, kMaxOpset},
                       {"", "IsNaN", 1, kMaxOpset},
                       {"", "IsInf", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln
