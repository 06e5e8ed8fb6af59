// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln {

// Reads an IDX file into a tensor of its stored type (uint8, int8, int16, int32, float, double)
// and shape. Gzip is detected by its magic bytes. IOError for a file that cannot be opened;
// CorruptFile naming the file and the byte offset for a malformed or truncated one (offsets past
// the magic are in the decompressed data of a gzipped file).
Tensor read_idx(const std::string& path);

// The same over bytes already in memory (decompressed); `path` names them in errors.
Tensor parse_idx(const std::string& bytes, const std::string& path, bool gzipped = false);

}  // namespace kiln
