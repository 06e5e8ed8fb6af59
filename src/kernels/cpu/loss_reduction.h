// The `reduction` attribute of the loss ops (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss)
// and of their gradient kernels, which must read it alike.
#pragma once

#include <fmt/format.h>

#include <string>

#include "kiln/error.h"
#include "kiln/graph.h"

namespace kiln::loss {

enum class Reduction { None, Sum, Mean };

inline Reduction parse_reduction(const Node& node) {
  const std::string r = node.attr_string("reduction", "mean");
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  if (r == "mean") return Reduction::Mean;
  throw InvalidModel(fmt::format("attribute reduction is '{}'; it must be \"none\", \"sum\" or \"mean\"", r));
}

}  // namespace kiln::loss
