// MemoryPlan: places buffers with known lifetimes in one arena so that buffers whose lifetimes do
// not overlap share bytes. Greedy by size (largest first, lowest free offset), as TFLite's and
// ggml's allocators do; offsets are 64-byte aligned.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kiln {

struct BufferRequest {
  size_t bytes = 0;
  size_t first = 0;  // step that writes it
  size_t last = 0;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per request
  size_t arena_bytes = 0;       // planned peak
};

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

// Whether `plan` places `requests` soundly, as a plan loaded from a file must before it is used:
// one offset per request, each aligned, every buffer inside the arena, and no two buffers alive at
// one step (lifetimes overlapping) sharing a byte. False with the reason in `why` otherwise.
bool memory_plan_fits(const std::vector<BufferRequest>& requests, const MemoryPlan& plan, std::string* why = nullptr);

}  // namespace kiln
