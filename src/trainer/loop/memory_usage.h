// The Trainer's memory metrics (HF's TrainerMemoryTracker, CPU side): resident memory before and
// after a stage (init, train, eval, test) and its peak, from /proc/self/status.
#pragma once

#include <cstdint>

namespace kiln::trainer {

// Resident memory and its peak, in bytes.
struct MemoryUsage {
  int64_t rss = 0, peak = 0;
};

// VmRSS and VmHWM now; `reset_peak` starts a new peak first (clear_refs 5).
MemoryUsage memory_usage(bool reset_peak = false);

// HF's <stage>_mem_cpu_alloc_delta (end - start) and <stage>_mem_cpu_peaked_delta (how far the
// peak rose above the end) of a stage measured from `start` to now.
struct MemoryDelta {
  double alloc = 0, peaked = 0;
};
MemoryDelta memory_delta_since(const MemoryUsage& start);

}  // namespace kiln::trainer
