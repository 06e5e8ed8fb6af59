// The optional ops (kernels/cpu/optional.cpp) test and unwrap optionals: no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient no_optional{{"", "Optional", 15, kMaxOpset}};
const NoGradient no_has{{"", "OptionalHasElement", 15, kMaxOpset}};
const NoGradient no_get{{"", "OptionalGetElement", 15, kMaxOpset}};

}  // namespace
}  // namespace kiln
