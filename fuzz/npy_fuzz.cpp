// The .npy reader (kiln run's feeds and outputs, one-array-per-column datasets).
#include "fuzz_util.h"
#include "kiln/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::expect_kiln_errors_only([&] {
    const kiln::Tensor t = kiln::parse_npy(std::string(reinterpret_cast<const char*>(data), size), "fuzz.npy");
    (void)t.describe();
  });
  return 0;
}
