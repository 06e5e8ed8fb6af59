// The safetensors reader (model.safetensors, optimizer.safetensors, Kiln checkpoints).
#include "fuzz_util.h"
#include "kiln/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::expect_kiln_errors_only([&] {
    const kiln::SafetensorsFile f =
        kiln::parse_safetensors({reinterpret_cast<const char*>(data), size}, "fuzz.safetensors");
    for (const auto& [name, t] : f.tensors) (void)t.describe();
  });
  return 0;
}
