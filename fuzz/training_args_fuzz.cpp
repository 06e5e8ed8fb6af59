// training_args.json (HfArgumentParser.parse_json_file's rules), then its round trip.
#include "core/json_text.h"
#include "fuzz_util.h"
#include "kiln/training_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool allow_extra = (data[0] & 1) != 0;
  kiln::fuzz::expect_kiln_errors_only([&] {
    const nlohmann::json j =
        kiln::parse_json({reinterpret_cast<const char*>(data) + 1, size - 1}, "training_args.json");
    const auto args = kiln::trainer::TrainingArguments::from_json(j, allow_extra);
    (void)kiln::trainer::TrainingArguments::from_json(args.to_json());
  });
  return 0;
}
