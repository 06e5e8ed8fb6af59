// Kiln's own vector code follows oneDNN's ISA cap (kernels/cpu/simd_dispatch.h), so that one
// variable runs a whole process as on a CPU without AVX-512 (the kernels_held_to_avx2 test and
// `bench/bench.py --max-isa avx2` set it).
#include "kernels/cpu/simd_dispatch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::simd {
namespace {

// Sets the two variables for one test and puts them back after it.
class CapVariables {
 public:
  CapVariables() {
    for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(name);
    }
  }
  ~CapVariables() {
    for (const auto& [name, value] : saved_) {
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
    }
  }
  CapVariables(const CapVariables&) = delete;
  CapVariables& operator=(const CapVariables&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(SimdDispatch, OneDnnsIsaCapHoldsKilnsVectorCode) {
  const CapVariables restore;
  EXPECT_EQ(isa_cap(), SimdLevel::Avx512);  // unset: no cap
  setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  EXPECT_EQ(isa_cap(), SimdLevel::Avx2);
  setenv("ONEDNN_MAX_CPU_ISA", "avx2_vnni", 1);  // oneDNN takes any case
  EXPECT_EQ(isa_cap(), SimdLevel::Avx2);
  setenv("ONEDNN_MAX_CPU_ISA", "SSE41", 1);
  EXPECT_EQ(isa_cap(), SimdLevel::Baseline);
  setenv("ONEDNN_MAX_CPU_ISA", "AVX", 1);
  EXPECT_EQ(isa_cap(), SimdLevel::Baseline);
  for (const char* none : {"ALL", "AVX512_CORE", "AVX512_CORE_AMX", "NOT_AN_ISA"}) {
    setenv("ONEDNN_MAX_CPU_ISA", none, 1);
    EXPECT_EQ(isa_cap(), SimdLevel::Avx512) << none;
  }
  unsetenv("ONEDNN_MAX_CPU_ISA");
  setenv("DNNL_MAX_CPU_ISA", "AVX2", 1);  // oneDNN's older name
  EXPECT_EQ(isa_cap(), SimdLevel::Avx2);
}

// Under the cap this process's level is at most the cap's (the level is read once per process).
TEST(SimdDispatch, TheLevelRespectsTheCapOfThisProcess) { EXPECT_LE(simd_level(), isa_cap()); }

}  // namespace
}  // namespace kiln::simd
