// CSV datasets. The first byte picks the options (header or not, which label column, delimiter).
#include "fuzz_util.h"
#include "kiln/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  kiln::data::CsvOptions options;
  options.header = (pick & 1) == 0;
  static const char* const kLabels[] = {"label", "-1", "0", ""};
  options.label_column = kLabels[(pick >> 1) & 3];
  options.delimiter = (pick & 8) ? ';' : ',';
  const std::string path = kiln::fuzz::write_scratch("data.csv", {reinterpret_cast<const char*>(data) + 1, size - 1});
  kiln::fuzz::expect_kiln_errors_only([&] {
    const auto ds = kiln::data::load_csv(path, options);
    if (ds->size() > 0) (void)ds->get(0);
  });
  return 0;
}
