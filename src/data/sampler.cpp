// Samplers: the order of an epoch as a pure function of (n, epoch), so that a resumed run
// recomputes any epoch's order without drawing the earlier ones.
#include <fmt/format.h>

#include <algorithm>
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

LengthGroupedSampler::LengthGroupedSampler(std::vector<int64_t> lengths, size_t batch_size, uint64_t seed,
                                           size_t mega_batch_mult)
    : lengths_(std::move(lengths)), batch_size_(batch_size), mega_batch_mult_(mega_batch_mult), random_(seed) {
  if (batch_size_ == 0) throw InvalidArgument("LengthGroupedSampler: batch_size is 0");
  for (size_t i = 0; i < lengths_.size(); ++i)
    if (lengths_[i] < 0)
      throw InvalidArgument(fmt::format("LengthGroupedSampler: item {} has a negative length {}", i, lengths_[i]));
  if (mega_batch_mult_ == 0)
    mega_batch_mult_ = std::max<size_t>(std::min<size_t>(lengths_.size() / (batch_size_ * 4), 50), 1);
}

std::vector<size_t> LengthGroupedSampler::order(size_t n, int64_t epoch) const {
  if (n != lengths_.size())
    throw InvalidArgument(
        fmt::format("LengthGroupedSampler: the dataset has {} items but {} lengths were given", n, lengths_.size()));
  std::vector<size_t> out = random_.order(n, epoch);
  const size_t mega = mega_batch_mult_ * batch_size_;
  const auto longer = [&](size_t a, size_t b) { return lengths_[a] > lengths_[b]; };
  size_t longest_block = 0;
  for (size_t begin = 0; begin < n; begin += mega) {
    const auto first = out.begin() + static_cast<std::ptrdiff_t>(begin);
    std::stable_sort(first, out.begin() + static_cast<std::ptrdiff_t>(std::min(n, begin + mega)), longer);
    // The first mega-batch whose longest item is the longest of all (torch.argmax: the first maximum).
    if (lengths_[*first] > lengths_[out[longest_block]]) longest_block = begin;
  }
  std::swap(out[0], out[longest_block]);
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
