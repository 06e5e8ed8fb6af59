// The ONNX loader with external data, then a Session over what loaded (shape inference, planning,
// constant folding; nothing is run). Input: a 4-byte length, the model's bytes, and the bytes of
// the one external data file a model may name, "weights.bin" (fuzz_util.h's split_prefixed).
#include "fuzz_util.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = kiln::fuzz::split_prefixed({reinterpret_cast<const char*>(data), size});
  const std::string model(parts.first);
  kiln::fuzz::write_scratch("weights.bin", parts.second);
  kiln::fuzz::expect_kiln_errors_only([&] {
    kiln::Model m = kiln::load_model_from_bytes(model, kiln::fuzz::scratch_dir().string(), {}, "fuzz.onnx");
    kiln::Session session(std::move(m), {.num_threads = 1});
  });
  return 0;
}
