// Hashes that name content for caches and cross-process checks: FNV-1a over bytes, and the
// identity of the libkiln build running (a rebuilt library must not trust what its predecessor
// cached, even under the same version number).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

inline constexpr uint64_t kFnv1aOffset = 14695981039346656037ull;

// 64-bit FNV-1a of `bytes`, continuing from `h` (chain calls to hash several strings as one).
uint64_t fnv1a(std::string_view bytes, uint64_t h = kFnv1aOffset);

// The loaded libkiln file's size and modification time ("unknown" where it cannot be found).
std::string library_build_id();

}  // namespace kiln
