// scheduler.json: a learning-rate scheduler's state, loaded into a scheduler of each registered
// type (the first byte picks it), which then steps and reports its rates.
#include "core/json_text.h"
#include "fuzz_util.h"
#include "kiln/lr_schedulers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::vector<std::string> types = kiln::trainer::LRScheduler::names();
  const std::string& type = types[data[0] % types.size()];
  kiln::fuzz::expect_kiln_errors_only([&] {
    auto scheduler = kiln::trainer::make_lr_scheduler(type, 1e-3, 10, 100);
    scheduler->load_state(kiln::parse_json({reinterpret_cast<const char*>(data) + 1, size - 1}, "scheduler.json"));
    for (int i = 0; i < 3; ++i) {
      scheduler->step(scheduler->steps_on_metric() ? std::optional<double>(1.0 / (i + 1)) : std::nullopt);
      (void)scheduler->current_lr();
    }
    (void)scheduler->state();
  });
  return 0;
}
