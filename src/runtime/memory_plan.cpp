#include "runtime/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <set>

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

bool memory_plan_fits(const std::vector<BufferRequest>& requests, const MemoryPlan& plan, std::string* why) {
  auto fail = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (plan.offsets.size() != requests.size())
    return fail(fmt::format("{} offsets for {} buffers", plan.offsets.size(), requests.size()));
  std::vector<size_t> order;
  for (size_t i = 0; i < requests.size(); ++i) {
    const size_t offset = plan.offsets[i], bytes = requests[i].bytes;
    if (bytes == 0) continue;
    if (offset % kAlignment != 0) return fail(fmt::format("buffer {} at offset {} is not aligned", i, offset));
    if (offset > plan.arena_bytes || bytes > plan.arena_bytes - offset)
      return fail(fmt::format("buffer {} ({} bytes at {}) passes the arena's end ({} bytes)", i, bytes, offset,
                              plan.arena_bytes));
    order.push_back(i);
  }
  // A sweep over the steps: the buffers alive, by offset, are disjoint; a buffer coming to life
  // must fit between its neighbours there.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].first < requests[b].first; });
  std::set<std::pair<size_t, size_t>> alive;  // (offset, buffer)
  using Ending = std::pair<size_t, size_t>;   // (last step, buffer)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<>> endings;
  for (const size_t i : order) {
    const BufferRequest& r = requests[i];
    while (!endings.empty() && endings.top().first < r.first) {
      alive.erase({plan.offsets[endings.top().second], endings.top().second});
      endings.pop();
    }
    const size_t offset = plan.offsets[i];
    const auto next = alive.lower_bound({offset, 0});
    size_t other = requests.size();
    if (next != alive.end() && next->first < offset + r.bytes) other = next->second;
    if (next != alive.begin()) {
      const auto prev = std::prev(next);
      if (prev->first + requests[prev->second].bytes > offset) other = prev->second;
    }
    if (other != requests.size())
      return fail(fmt::format("buffers {} and {} are alive at once and share bytes", other, i));
    alive.emplace(offset, i);
    endings.emplace(r.last, i);
  }
  return true;
}

}  // namespace kiln
