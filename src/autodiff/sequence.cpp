// The sequence ops (kernels/cpu/sequence.cpp) build, index and cut lists of tensors; Kiln's gradient
// graphs carry tensors only, so they have no gradient (a model that trains through one gets an
// Unsupported error naming the node).
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient no_empty{{"", "SequenceEmpty", 11, kMaxOpset}};
const NoGradient no_construct{{"", "SequenceConstruct", 11, kMaxOpset}};
const NoGradient no_insert{{"", "SequenceInsert", 11, kMaxOpset}};
const NoGradient no_erase{{"", "SequenceErase", 11, kMaxOpset}};
const NoGradient no_at{{"", "SequenceAt", 11, kMaxOpset}};
const NoGradient no_length{{"", "SequenceLength", 11, kMaxOpset}};
const NoGradient no_split{{"", "SplitToSequence", 11, kMaxOpset}};
const NoGradient no_concat{{"", "ConcatFromSequence", 11, kMaxOpset}};

}  // namespace
}  // namespace kiln
