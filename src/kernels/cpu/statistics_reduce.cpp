// The reduction synchronized batch statistics use (statistics_reduce.h).
#include "kernels/cpu/statistics_reduce.h"

#include <fmt/format.h>

#include <mutex>

#include "kiln/error.h"

namespace kiln {
namespace {

std::mutex g_mutex;
StatisticsReduce g_reduce;

}  // namespace

void set_statistics_reduce(StatisticsReduce reduce) {
  const std::lock_guard lock(g_mutex);
  g_reduce = std::move(reduce);
}

bool syncs_statistics(const Node& node) { return node.attr_int("sync_statistics", 0) != 0; }

void reduce_statistics(const Node& node, double* values, size_t n) {
  if (!syncs_statistics(node)) return;
  StatisticsReduce reduce;
  {
    const std::lock_guard lock(g_mutex);
    reduce = g_reduce;
  }
  if (!reduce)
    throw Unsupported(
        fmt::format("{} asks for batch statistics synchronized across ranks, but this process runs no "
                    "distributed training",
                    node.label()));
  reduce(values, n);
}

}  // namespace kiln
