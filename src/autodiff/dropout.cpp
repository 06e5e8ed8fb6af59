// Gradient rule of Dropout (kernels/cpu/dropout.cpp).
//
// The gradient must drop exactly the elements the forward dropped, so it reads the forward's mask
// output: ai.kiln.DropoutGrad(dY, mask, ratio, training_mode). Replaying the generator in the
// backward instead would tie the gradient to the order kernels run in; the mask is one byte per
// element and is what PyTorch's exporter emits anyway (aten::dropout becomes Dropout with outputs
// (Y, mask)). A Dropout without a mask output that may run in training mode (it has a
// training_mode input) therefore has no gradient: an Unsupported error says to keep the mask.
// Without a training_mode input the forward is the identity and so is the gradient.
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

void dropout_grad(GradContext& g) {
  const bool may_train = g.opset() >= 12 && g.has_input(2);
  if (!may_train) {
    g.set_GI(0, g.GO(0));
    return;
  }
  if (g.num_outputs() < 2 || g.node.outputs[1].empty())
    throw Unsupported(
        "the gradient of Dropout with a training_mode input needs the forward's mask output (output 1) "
        "to drop the same elements; give the node a second output");
  g.set_GI(0, g.emit(kKilnDomain, "DropoutGrad", {g.GO(0), g.O(1), g.has_input(1) ? g.I(1) : "", g.I(2)}));
}

const GradientRegistrar r_dropout({"", "Dropout", 1, kMaxOpset}, dropout_grad);

}  // namespace
}  // namespace kiln
