// Kiln's on-device checkpoint file (CheckpointState::load_checkpoint: a safetensors file whose
// metadata names the trainable and frozen parameters, the properties and the optimizer state).
#include "fuzz_util.h"
#include "kiln/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln::fuzz::write_scratch("checkpoint", {reinterpret_cast<const char*>(data), size});
  kiln::fuzz::expect_kiln_errors_only([&] {
    const auto state = kiln::training::CheckpointState::load_checkpoint(path);
    (void)state.parameter_names();
  });
  return 0;
}
