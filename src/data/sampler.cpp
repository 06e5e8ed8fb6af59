// Samplers: the order of an epoch as a pure function of (n, epoch), so that a resumed run
// recomputes any epoch's order without drawing the earlier ones.
#include <fmt/format.h>

#include <numeric>
#include <random>

#include "kiln/data.h"
#include "kiln/random.h"

namespace kiln::data {
namespace {

// A uniform integer in [0, bound) by rejection: std::uniform_int_distribution is not specified
// bit for bit, and the permutation must be the same with every standard library.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  // Values below `threshold` would make the low residues more likely; draw again (rare).
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

Sampler::~Sampler() = default;

std::vector<size_t> SequentialSampler::order(size_t n, int64_t /*epoch*/) const {
  std::vector<size_t> out(n);
  std::iota(out.begin(), out.end(), size_t{0});
  return out;
}

std::vector<size_t> RandomSampler::order(size_t n, int64_t epoch) const {
  if (epoch < 0) throw InvalidArgument(fmt::format("RandomSampler: epoch {} is negative", epoch));
  std::vector<size_t> out(n);
  std::iota(out.begin(), out.end(), size_t{0});
  std::mt19937_64 rng(derive_seed(seed_, static_cast<uint64_t>(epoch)));
  // Fisher-Yates, from the back.
  for (size_t i = n; i > 1; --i) std::swap(out[i - 1], out[uniform_below(rng, i)]);
  return out;
}

}  // namespace kiln::data
