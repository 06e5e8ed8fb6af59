// What Pad and its gradient (expand.cpp, expand_grad.cpp) share: the pad modes, the map from an
// output coordinate to the input coordinate it copies, and the padded geometry.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::pad {

// Whether any present input's shape is known only at run time.
bool any_dynamic(const InferContext& ctx);

// Each output coordinate maps, per dimension, to an input coordinate or to "outside" (-1, constant
// mode only); an output row is a contiguous run of the input plus mapped borders.
enum class PadMode { Constant, Reflect, Edge };

const char* node_mode_name(PadMode m);
// The input coordinate output coordinate `i` (already shifted by the pad before) copies, or -1.
int64_t map_coordinate(int64_t i, int64_t dim, PadMode mode);
// The node's mode attribute; Unsupported for a mode other than constant, reflect, edge.
PadMode parse_pad_mode(const Node& node);
// The padded shape of `s` and the pad before each dimension; `axes_input` is the index of the
// optional axes input (opset 18), or 0 for none.
Shape pad_geometry(const Shape& s, const std::vector<int64_t>& pads, const InferContext& ctx, size_t axes_input,
                   PadMode mode, std::vector<int64_t>& begin);

}  // namespace kiln::pad
