// Seeds of Kiln's random draws (Dropout masks; initialisers and data shuffling are meant to use the
// same helpers), so that the same seed gives the same run.
//
//   kiln::set_random_seed(42);        // before creating the Session whose kernels draw
//   kiln::Session s(model);           // each Dropout node seeds its own generator now:
//                                     //   from its `seed` attribute if it has one, else from
//                                     //   derive_seed(random_seed(), node name)
//
// A kernel's draws in a run come from derive_seed(its seed, the Session's run index): successive
// runs of a Session give different masks, two Sessions created under the same seed give the same
// sequence, and Session::set_run_count replays a sequence from any point (exact resume).
#pragma once

#include <cstdint>
#include <random>
#include <string_view>

namespace kiln {

// The process-wide base seed (default 0). Thread-safe.
void set_random_seed(uint64_t seed);
uint64_t random_seed();

// A seed for one consumer (a node, a data loader) from a base seed and the consumer's name:
// distinct names give independent streams, the same pair always the same seed (splitmix64 mixing).
uint64_t derive_seed(uint64_t base, std::string_view stream);
// The seed of draw `index` of a stream (a kernel's run `index`): counter-based, so a run can be
// replayed from its index alone (exact resume needs no generator state).
uint64_t derive_seed(uint64_t base, uint64_t index);

// The suffix of a node that recomputes another's forward for gradient checkpointing
// ("<node>/recompute"), and the name a node's random draws are keyed on: a recompute copy's are its
// original's, so that a recomputed Dropout draws the original's mask.
inline constexpr std::string_view kRecomputeSuffix = "/recompute";
std::string_view random_stream_name(std::string_view node_name);

// A double uniform in [0, 1) from 53 bits of one draw: the same on every platform and standard
// library (std::uniform_real_distribution is not specified bit for bit).
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace kiln
