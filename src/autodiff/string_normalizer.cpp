// StringNormalizer (kernels/cpu/string_normalizer.cpp) works on strings: no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient no_grad{{"", "StringNormalizer", 10, kMaxOpset}};

}  // namespace
}  // namespace kiln
