// Thread-parallel loops over OpenMP, the runtime oneDNN uses too, so one thread setting rules both.
#pragma once

#include <omp.h>

#include <cstdint>

namespace kiln {

// Calls f(begin, end) over [0, n) split in chunks across threads; serial when n < grain.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int threads = omp_get_max_threads();
  if (threads <= 1 || n < grain || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks;
    const int64_t end = n * (c + 1) / chunks;
    f(begin, end);
  }
}

}  // namespace kiln
