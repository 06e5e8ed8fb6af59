// Random sampling (kernels/cpu/random.cpp): the draws carry no gradient (a *Like op reads only its
// input's shape; Bernoulli's outputs are 0 or 1, Multinomial's class indices).
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient no_grad{{"", "RandomUniform", 1, kMaxOpset},     {"", "RandomNormal", 1, kMaxOpset},
                         {"", "RandomUniformLike", 1, kMaxOpset}, {"", "RandomNormalLike", 1, kMaxOpset},
                         {"", "Bernoulli", 15, kMaxOpset},        {"", "Multinomial", 7, kMaxOpset}};

}  // namespace
}  // namespace kiln
