// Small in-place tensor arithmetic the training loop needs outside any graph.
#pragma once

#include "kiln/tensor.h"

namespace kiln::training {

// dst += src (same dtype and shape; float32 or float64). Accumulates gradients across calls.
void add_into(Tensor& dst, const Tensor& src);
// t *= factor in place (float32 or float64): the mean over accumulated micro-batches.
void scale_in_place(Tensor& t, double factor);

}  // namespace kiln::training
