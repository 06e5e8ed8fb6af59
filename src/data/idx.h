// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln {

// Reads an IDX file into a tensor of its stored type (uint8, int8, int16, int32, float, double)
// and shape. Gzip is detected by its magic bytes. Throws IOError / InvalidArgument naming the file
// for a missing, truncated or malformed file.
Tensor read_idx(const std::string& path);

}  // namespace kiln
