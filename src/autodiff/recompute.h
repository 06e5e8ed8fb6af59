// Gradient checkpointing: a training graph that keeps only the activations at segment boundaries
// for its backward pass and recomputes each segment's forward just before that segment's backward.
//
// Boundaries are the points of the forward where a single parameter-dependent value is live (a
// transformer layer's residual stream between its sublayers, a residual block's output), found from
// the graph, or values the caller names. Each segment's values that backward nodes read are
// recomputed by copies of the segment's forward nodes ("<node>/recompute"), placed right before the
// first backward node that reads one of them, so that the originals die during the forward pass.
// The last segment (the one the backward starts with) is not recomputed. Dropout copies draw the
// original's mask (the kernel seeds a "/recompute" copy as the original), BatchNormalization copies'
// running statistics go unused, and other random ops are never copied (their outputs are kept).
#pragma once

#include <string>
#include <vector>

#include "kiln/autodiff.h"

namespace kiln {

struct RecomputeReport {
  std::vector<std::string> boundaries;  // kept values between segments, in forward order
  size_t segments = 0;                  // segments with values recomputed
  size_t nodes = 0;                     // forward nodes copied
  size_t values = 0;                    // values the backward now reads from copies
};

// Rewrites `model` (a forward graph whose first `forward_nodes` nodes are the forward pass and the
// rest its backward) as above. `parameters`: the trainable initializers (what "parameter-dependent"
// starts from). InvalidArgument naming a boundary in options.boundaries that no forward node writes.
RecomputeReport recompute_segments(Model& model, size_t forward_nodes, const std::vector<std::string>& parameters,
                                   const RecomputeOptions& options);

}  // namespace kiln
