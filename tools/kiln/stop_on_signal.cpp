#include "stop_on_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace kiln::cli {

namespace {

std::atomic<int> g_received{0};
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];

void on_signal(int signo) {
  g_received.store(signo);
  // Async-signal-safe: write(2) of a fixed text. SA_RESETHAND has put the default action back.
  const char* text =
      "\nkiln: signal received: saving a checkpoint at the end of this step, then stopping "
      "(send it again to stop at once)\n";
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

}  // namespace

StopOnSignal::StopOnSignal() {
  g_received.store(0);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;  // the second signal takes the default action: exit at once
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &action, &g_previous[i]);
}

StopOnSignal::~StopOnSignal() {
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
}

void StopOnSignal::on_step_end(const trainer::TrainingArguments&, const trainer::TrainerState&,
                               trainer::TrainerControl& control, const trainer::CallbackContext&) {
  if (g_received.load() == 0) return;
  control.should_save = true;
  control.should_training_stop = true;
}

int StopOnSignal::received() { return g_received.load(); }

}  // namespace kiln::cli
