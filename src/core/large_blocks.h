// The cache of large freed tensor blocks (core/tensor.cpp): owning tensors of 4 MiB or more give
// their block back to it when freed, and a new tensor of the same rounded size takes it again (no
// fresh mapping, no page faults); at most 256 MiB are held, the oldest returned to the system first.
#pragma once

#include <cstddef>

namespace kiln {

// The bytes the cache holds now.
size_t cached_large_block_bytes();

}  // namespace kiln
