#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "kiln/tensor.h"

namespace kiln {

namespace {
size_t align_up(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }
}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].bytes != requests[b].bytes ? requests[a].bytes > requests[b].bytes
                                                  : requests[a].first < requests[b].first;
  });
  struct Placed {
    size_t offset, end, first, last;
  };
  std::vector<Placed> placed;
  placed.reserve(requests.size());
  for (size_t idx : order) {
    const BufferRequest& r = requests[idx];
    if (r.bytes == 0) continue;
    // Occupied intervals of buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Placed& p : placed)
      if (p.first <= r.last && r.first <= p.last) busy.emplace_back(p.offset, p.end);
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    const size_t need = align_up(r.bytes);
    for (const auto& [b, e] : busy) {
      if (b >= offset + need) break;
      offset = std::max(offset, align_up(e));
    }
    plan.offsets[idx] = offset;
    placed.push_back({offset, offset + r.bytes, r.first, r.last});
    plan.arena_bytes = std::max(plan.arena_bytes, align_up(offset + r.bytes));
  }
  return plan;
}

}  // namespace kiln
