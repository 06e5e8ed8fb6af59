// The command line: `--dim name=value` lists (kiln run / inspect) and the training flags of
// `kiln train` (HF's TrainingArguments names, parsed as HfArgumentParser does). Input: arguments
// separated by NUL bytes; the first byte picks the parser.
#include "fuzz_util.h"
#include "kiln/training_args.h"
#include "options.h"
#include "trainer_cli.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::vector<std::string> argv =
      kiln::fuzz::split_bytes({reinterpret_cast<const char*>(data) + 1, size - 1}, '\0');
  kiln::fuzz::expect_kiln_errors_only([&] {
    switch (data[0] % 3) {
      case 0:
        (void)kiln::cli::parse_dims(argv);
        break;
      case 1:
        (void)kiln::cli::cli_training_arguments(argv);
        break;
      default:
        (void)kiln::trainer::TrainingArguments::parse_args(argv);
        break;
    }
  });
  return 0;
}
