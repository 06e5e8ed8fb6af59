// Subgraphs (the branches of If, the bodies of Loop and Scan) read values of the graphs around them
// by name. A Session makes those reads explicit before it plans: lift_captures appends each such
// value to the node's inputs and records the names the subgraph uses for them in the node's
// attribute "kiln.captures" (strings), so that planning, value lifetimes and renaming passes see
// them as ordinary inputs, and the control-flow kernels (kernels/cpu/control_flow.cpp) feed them to
// the subgraph under its own names.
#pragma once

#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln {

inline constexpr const char* kCapturesAttr = "kiln.captures";

// Names the nodes of `g` (and of the subgraphs within them, recursively) read that `g` does not
// define (as an input, an initializer or a node output): what `g` takes from outside, in first-use
// order.
std::vector<std::string> free_values(const Graph& g);

// For every node of `g` that has subgraph attributes and no kiln.captures yet: appends the values
// its subgraphs read from outside them to its inputs and records their names. Returns how many
// nodes changed.
size_t lift_captures(Graph& g);

// The node as ONNX writes it (the saver): the lifted inputs and kiln.captures dropped, and where a
// pass renamed a captured value, the subgraphs reading the new name.
Node unlifted(const Node& n);

}  // namespace kiln
