// .npz datasets: the zip reader (stored and deflated members) and the .npy arrays inside.
#include "fuzz_util.h"
#include "kiln/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln::fuzz::write_scratch("data.npz", {reinterpret_cast<const char*>(data), size});
  kiln::fuzz::expect_kiln_errors_only([&] {
    const auto ds = kiln::data::load_npz(path);
    if (ds->size() > 0) (void)ds->get(0);
  });
  return 0;
}
