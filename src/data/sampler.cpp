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

DistributedSampler::DistributedSampler(std::shared_ptr<const Sampler> inner, int rank, int num_replicas, bool drop_last,
                                       bool pad)
    : inner_(std::move(inner)), rank_(rank), replicas_(num_replicas), drop_last_(drop_last), pad_(pad) {
  if (!inner_) throw InvalidArgument("DistributedSampler needs a sampler to shard");
  if (num_replicas < 1) throw InvalidArgument(fmt::format("DistributedSampler: num_replicas {} < 1", num_replicas));
  if (rank < 0 || rank >= num_replicas)
    throw InvalidArgument(fmt::format("DistributedSampler: rank {} is not in [0, {})", rank, num_replicas));
}

size_t DistributedSampler::length(size_t n) const {
  const auto replicas = static_cast<size_t>(replicas_), rank = static_cast<size_t>(rank_);
  if (pad_) return drop_last_ ? n / replicas : (n + replicas - 1) / replicas;
  return n > rank ? (n - rank + replicas - 1) / replicas : 0;
}

std::vector<size_t> DistributedSampler::order(size_t n, int64_t epoch) const {
  std::vector<size_t> all = inner_->order(n, epoch);
  const auto replicas = static_cast<size_t>(replicas_);
  size_t total = all.size();
  if (pad_ && drop_last_) {
    total = all.size() / replicas * replicas;  // torch: the tail that does not divide is dropped
  } else if (pad_ && !all.empty()) {
    total = (all.size() + replicas - 1) / replicas * replicas;
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i]);  // torch repeats from the start
  }
  std::vector<size_t> mine;
  mine.reserve(total / replicas + 1);
  for (size_t i = static_cast<size_t>(rank_); i < total; i += replicas) mine.push_back(all[i]);
  return mine;
}

}  // namespace kiln::data
