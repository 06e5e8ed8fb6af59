#include "kiln/random.h"

#include <atomic>

namespace kiln {
namespace {

std::atomic<uint64_t> g_seed{0};

// splitmix64's finaliser: a bijective mix, so nearby inputs give unrelated outputs.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

void set_random_seed(uint64_t seed) { g_seed.store(seed); }
uint64_t random_seed() { return g_seed.load(); }

uint64_t derive_seed(uint64_t base, std::string_view stream) {
  uint64_t h = mix(base);
  for (unsigned char c : stream) h = mix(h ^ c);  // FNV-like fold of the name through the mixer
  return h;
}

std::string_view random_stream_name(std::string_view node_name) {
  if (node_name.ends_with(kRecomputeSuffix)) return node_name.substr(0, node_name.size() - kRecomputeSuffix.size());
  return node_name;
}

uint64_t derive_seed(uint64_t base, uint64_t index) { return mix(mix(base) ^ mix(index + 0x5851f42d4c957f2dULL)); }

}  // namespace kiln
