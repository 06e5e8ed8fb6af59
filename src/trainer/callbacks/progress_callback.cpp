// ProgressCallback: tqdm's bar on a terminal ("42%|████▍     | 420/1000 [00:03<00:04, 131.20it/s,
// loss=0.4132]"), redrawn in place at most every 0.1 s as tqdm does; plain lines every 5% of the
// run when the output is not a terminal. Logs are printed as HF's ProgressCallback prints them.
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kiln/data.h"
#include "kiln/trainer_callback.h"

namespace kiln::trainer {

using Clock = std::chrono::steady_clock;

struct ProgressCallback::Bar {
  int64_t total = 0, n = 0, start_n = 0;
  Clock::time_point start = Clock::now(), last_draw{};
  std::optional<double> loss;
};

namespace {

// tqdm's format_interval: [H:]MM:SS.
std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds);
  if (s >= 3600) return fmt::format("{:d}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{:02d}:{:02d}", s / 60, s % 60);
}

int terminal_columns(std::FILE* f) {
  winsize ws{};
  if (::ioctl(::fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 100;
}

// The bar body in tqdm's unicode blocks: full cells, then one partial cell in eighths.
std::string bar_body(double fraction, int width) {
  static const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int eighths = static_cast<int>(fraction * width * 8);
  const int full = eighths / 8, part = eighths % 8;
  std::string out;
  for (int i = 0; i < full; ++i) out += "█";
  int used = full;
  if (part > 0 && used < width) {
    out += kEighths[part];
    ++used;
  }
  out.append(static_cast<size_t>(width - used), ' ');
  return out;
}

}  // namespace

ProgressCallback::ProgressCallback(std::FILE* bar, std::FILE* logs)
    : bar_file_(bar), log_file_(logs), terminal_(::isatty(::fileno(bar)) != 0) {}

void ProgressCallback::draw(Bar& bar, bool final_draw) {
  const auto now = Clock::now();
  if (!final_draw && now - bar.last_draw < std::chrono::milliseconds(100)) return;
  bar.last_draw = now;
  const double elapsed = std::chrono::duration<double>(now - bar.start).count();
  const double done = static_cast<double>(bar.n - bar.start_n);
  const double rate = elapsed > 0 ? done / elapsed : 0.0;
  const double remaining = rate > 0 ? static_cast<double>(bar.total - bar.n) / rate : NAN;
  const double fraction = bar.total > 0 ? static_cast<double>(bar.n) / static_cast<double>(bar.total) : 0.0;
  const std::string rate_text = rate <= 0   ? "?it/s"
                                : rate >= 1 ? fmt::format("{:.2f}it/s", rate)
                                            : fmt::format("{:.2f}s/it", 1 / rate);
  const std::string postfix = bar.loss ? fmt::format(", loss={:.4f}", *bar.loss) : "";
  // Whole percent done, in integers (floor(0.29 * 100) would be 28).
  const int64_t percent = bar.total > 0 ? bar.n * 100 / bar.total : 0;
  const std::string left = fmt::format("{:3d}%|", percent);
  const std::string right = fmt::format("| {}/{} [{}<{}, {}{}]", bar.n, bar.total, clock_text(elapsed),
                                        bar.n >= bar.total ? "00:00" : clock_text(remaining), rate_text, postfix);
  const int width = std::max(10, terminal_columns(bar_file_) - static_cast<int>(left.size() + right.size()) - 1);
  std::fprintf(bar_file_, "\r%s%s%s\033[K", left.c_str(), bar_body(fraction, width).c_str(), right.c_str());
  std::fflush(bar_file_);
}

void ProgressCallback::on_train_begin(const Args&, const TrainerState& state, TrainerControl&, const CallbackContext&) {
  if (!state.is_local_process_zero) return;
  training_bar_ = std::make_shared<Bar>();
  training_bar_->total = state.max_steps;
  training_bar_->n = training_bar_->start_n = state.global_step;
  last_line_step_ = state.global_step;
  if (terminal_) draw(*training_bar_, true);
}

void ProgressCallback::on_step_end(const Args&, const TrainerState& state, TrainerControl&,
                                   const CallbackContext& ctx) {
  if (!training_bar_) return;
  Bar& bar = *training_bar_;
  bar.n = state.global_step;
  if (ctx.loss) bar.loss = ctx.loss;
  if (terminal_) {
    draw(bar, bar.n >= bar.total);
    return;
  }
  // Not a terminal: a line every 5% of the run, and at the end.
  const int64_t every = std::max<int64_t>(1, bar.total / 20);
  if (bar.n / every == last_line_step_ / every && bar.n < bar.total) return;
  last_line_step_ = bar.n;
  const double elapsed = std::chrono::duration<double>(Clock::now() - bar.start).count();
  const double rate = elapsed > 0 ? static_cast<double>(bar.n - bar.start_n) / elapsed : 0.0;
  const double remaining = rate > 0 ? static_cast<double>(bar.total - bar.n) / rate : NAN;
  std::fprintf(bar_file_, "step %lld/%lld (%d%%)%s, %.2f it/s, elapsed %s, remaining %s\n",
               static_cast<long long>(bar.n), static_cast<long long>(bar.total),
               bar.total > 0 ? static_cast<int>(100 * bar.n / bar.total) : 0,
               bar.loss ? fmt::format(" loss {:.4f}", *bar.loss).c_str() : "", rate, clock_text(elapsed).c_str(),
               clock_text(remaining).c_str());
  std::fflush(bar_file_);
}

void ProgressCallback::on_prediction_step(const Args&, const TrainerState& state, TrainerControl&,
                                          const CallbackContext& ctx) {
  if (!state.is_local_process_zero || !terminal_ || !ctx.eval_dataloader) return;
  if (!prediction_bar_) {
    prediction_bar_ = std::make_shared<Bar>();
    prediction_bar_->total = static_cast<int64_t>(ctx.eval_dataloader->num_batches());
  }
  ++prediction_bar_->n;
  draw(*prediction_bar_, prediction_bar_->n >= prediction_bar_->total);
}

void ProgressCallback::on_evaluate(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {
  if (!prediction_bar_) return;
  prediction_bar_.reset();
  // The evaluation bar does not stay (tqdm's leave=False under a training bar): clear its line.
  std::fprintf(bar_file_, "\r\033[K");
  if (training_bar_) draw(*training_bar_, true);
  else std::fprintf(bar_file_, "\n");
  std::fflush(bar_file_);
}

void ProgressCallback::on_predict(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) {
  on_evaluate(a, s, c, x);
}

void ProgressCallback::on_log(const Args&, const TrainerState& state, TrainerControl&, const CallbackContext& ctx) {
  if (!state.is_local_process_zero || !training_bar_ || !ctx.logs) return;
  Logs shown;
  for (const auto& [k, v] : *ctx.logs) {
    if (k == "total_flos") continue;
    shown.emplace_back(k, k == "epoch" ? std::round(v * 100) / 100 : v);  // HF rounds the epoch to 2 places
  }
  // tqdm.write: clear the bar, print the line, draw the bar again.
  if (terminal_) std::fprintf(bar_file_, "\r\033[K"), std::fflush(bar_file_);
  std::fprintf(log_file_, "%s\n", format_logs(shown).c_str());
  std::fflush(log_file_);
  if (terminal_) draw(*training_bar_, true);
}

void ProgressCallback::on_train_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {
  if (!training_bar_) return;
  if (terminal_) {
    draw(*training_bar_, true);
    std::fprintf(bar_file_, "\n");
    std::fflush(bar_file_);
  }
  training_bar_.reset();
}

}  // namespace kiln::trainer
