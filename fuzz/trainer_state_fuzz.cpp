// trainer_state.json: what resume reads (TrainerState::from_json) and what `kiln plot` draws from
// its log_history (a small picture, so that every input is cheap).
#include "core/json_text.h"
#include "fuzz_util.h"
#include "kiln/plot.h"
#include "kiln/trainer_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::expect_kiln_errors_only([&] {
    const nlohmann::json j = kiln::parse_json({reinterpret_cast<const char*>(data), size}, "trainer_state.json");
    const kiln::trainer::TrainerState state = kiln::trainer::TrainerState::from_json(j);
    (void)kiln::trainer::render_log_history(state.log_history, {.width = 400, .height = 300}, "trainer_state.json");
  });
  return 0;
}
