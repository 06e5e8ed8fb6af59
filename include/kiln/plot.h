// `kiln plot`: the curves of a training run as a PNG, for people who would rather look than read.
//
//   kiln::trainer::plot_run("kiln_output", "kiln_output/training_curves.png");
//   kiln::trainer::plot_run("kiln_output/checkpoint-500/trainer_state.json", "curves.png", {.title = "lr 3e-4"});
//
// The picture is made from trainer_state.json's log_history (what Trainer::save_state writes, HF's
// format): panels of value against step sharing one step axis, laid out in a grid:
//   loss           training "loss" as a line; "eval_loss" as a line with markers; a legend
//   learning_rate  scientific tick labels for small rates (5e-5)
//   grad_norm      when logged
//   eval metrics   every other eval_<metric> (accuracy, f1, ...), one line each with markers;
//                  timings (eval_runtime, eval_*_per_second) and memory deltas are left out
// The run summary that ends log_history (train_loss, train_runtime, ...) is not plotted.
// Non-finite values (a NaN loss, saved by JSON as null) are skipped and leave a gap in the line.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln::trainer {

struct PlotOptions {
  int width = 1200, height = 800;  // pixels; at least 400x300, at most 16384 each
  std::string title;               // default: the run's folder name
};

// The series colours (RGB), matplotlib's "tab10" cycle: loss, eval_loss, learning_rate, grad_norm,
// then the eval metrics in name order, cycling through the rest.
inline constexpr std::array<std::array<uint8_t, 3>, 10> kPlotPalette{{{31, 119, 180},
                                                                      {255, 127, 14},
                                                                      {44, 160, 44},
                                                                      {214, 39, 40},
                                                                      {148, 103, 189},
                                                                      {140, 86, 75},
                                                                      {227, 119, 194},
                                                                      {127, 127, 127},
                                                                      {188, 189, 34},
                                                                      {23, 190, 207}}};

// The trainer_state.json plot_run reads for `path`: path itself when it is a file; else
// path/trainer_state.json; else that of the newest path/checkpoint-N. IOError saying where it looked.
std::string find_trainer_state(const std::string& path);

// The picture as 8-bit RGB, rows top first (options.width * options.height * 3 bytes). `source`
// names the data in messages. InvalidArgument when log_history has no finite loss or eval metric,
// or the size is out of range; CorruptFile when an entry is not an object or a value not a number.
std::vector<uint8_t> render_log_history(const std::vector<nlohmann::json>& log_history, const PlotOptions& options,
                                        const std::string& source = "log_history");

// Reads the run's trainer_state.json (find_trainer_state) and writes the PNG atomically.
// CorruptFile for malformed JSON or a missing log_history, naming the file; IOError when png_path
// cannot be written.
void plot_run(const std::string& output_dir_or_state_file, const std::string& png_path,
              const PlotOptions& options = {});

}  // namespace kiln::trainer
