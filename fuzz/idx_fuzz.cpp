// MNIST-style IDX files, plain or gzipped (detected by magic), as a dataset of images and labels.
// Input: the images file, then the labels file (fuzz_util.h's split_prefixed).
#include "fuzz_util.h"
#include "kiln/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = kiln::fuzz::split_prefixed({reinterpret_cast<const char*>(data), size});
  const std::string images_path = kiln::fuzz::write_scratch("images.idx", parts.first);
  const std::string labels_path = kiln::fuzz::write_scratch("labels.idx", parts.second);
  kiln::fuzz::expect_kiln_errors_only([&] {
    const auto ds = kiln::data::load_idx(images_path, labels_path);
    if (ds->size() > 0) (void)ds->get(ds->size() - 1);
  });
  return 0;
}
