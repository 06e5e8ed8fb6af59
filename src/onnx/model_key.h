// A name for a model's content, for caches keyed by the model (the artifacts cache, the plan
// cache): its graph as ONNX without the weights, then each initializer's name, dtype, shape and
// CRC-32. Two models with the same key serialize alike.
#pragma once

#include <string>

#include "kiln/graph.h"

namespace kiln {

// Hex digits. Costs one serialization of the graph's structure and one CRC-32 pass over the
// weights (zlib's, gigabytes per second).
std::string model_content_key(const Model& model);

}  // namespace kiln
