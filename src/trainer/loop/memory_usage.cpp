#include "trainer/loop/memory_usage.h"

#include <algorithm>
#include <fstream>
#include <string>

namespace kiln::trainer {

MemoryUsage memory_usage(bool reset_peak) {
  if (reset_peak) std::ofstream("/proc/self/clear_refs") << "5";
  MemoryUsage u;
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (status >> key) {
    if (key == "VmRSS:" && status >> kb >> unit) u.rss = kb * 1024;
    else if (key == "VmHWM:" && status >> kb >> unit) u.peak = kb * 1024;
  }
  return u;
}

MemoryDelta memory_delta_since(const MemoryUsage& start) {
  const MemoryUsage end = memory_usage();
  return {static_cast<double>(end.rss - start.rss), static_cast<double>(std::max<int64_t>(0, end.peak - end.rss))};
}

}  // namespace kiln::trainer
