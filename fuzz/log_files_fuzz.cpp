// The run's log files that a resumed run reads back: logs.jsonl (report_to jsonl, JSON Lines) and
// logs.csv (report_to csv). The first byte picks the file, the second the step being resumed; the
// logger then drops the lines after that step, as at the start of a resumed run.
#include "fuzz_util.h"
#include "kiln/integrations.h"
#include "kiln/trainer_state.h"
#include "kiln/training_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool jsonl = (data[0] & 1) == 0;
  kiln::fuzz::write_scratch(jsonl ? "logs.jsonl" : "logs.csv", {reinterpret_cast<const char*>(data) + 2, size - 2});
  kiln::fuzz::expect_kiln_errors_only([&] {
    kiln::trainer::TrainingArguments args;
    args.output_dir = kiln::fuzz::scratch_dir().string();
    kiln::trainer::TrainerState state;
    state.global_step = data[1];
    kiln::trainer::TrainerControl control;
    std::shared_ptr<kiln::trainer::TrainerCallback> logger;
    if (jsonl) logger = std::make_shared<kiln::trainer::JsonLinesCallback>();
    else logger = std::make_shared<kiln::trainer::CsvLoggerCallback>();
    logger->on_train_begin(args, state, control, {});
  });
  return 0;
}
