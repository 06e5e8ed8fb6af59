// `kiln plot OUTPUT_DIR [--output FILE]`: a run's loss, learning rate and eval metric curves as a PNG
// (default OUTPUT_DIR/training_curves.png), read from its trainer_state.json.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "commands.h"
#include "kiln/plot.h"

namespace kiln::cli {
namespace {

struct PlotCommandOptions {
  std::string run, output;
  trainer::PlotOptions plot;
};

Action setup_plot(CLI::App& app) {
  auto o = std::make_shared<PlotCommandOptions>();
  app.add_option("OUTPUT_DIR", o->run, "A training output_dir, a checkpoint folder or a trainer_state.json")
      ->required();
  app.add_option("--output,-o", o->output, "The PNG to write (default: OUTPUT_DIR/training_curves.png)");
  app.add_option("--title", o->plot.title, "The picture's title (default: the run's folder name)");
  app.add_option("--width", o->plot.width, "Width in pixels")->capture_default_str();
  app.add_option("--height", o->plot.height, "Height in pixels")->capture_default_str();
  return [o] {
    std::string output = o->output;
    if (output.empty()) {
      // Beside the state file when given one, else inside the folder.
      const std::filesystem::path run(o->run);
      const std::filesystem::path folder = std::filesystem::is_directory(run) ? run : run.parent_path();
      output = (folder / "training_curves.png").string();
    }
    trainer::plot_run(o->run, output, o->plot);
    fmt::print("wrote {}\n", output);
  };
}

const CommandRegistrar reg({"plot", "Draw a training run's loss, learning rate and eval metrics as a PNG", setup_plot});

}  // namespace
}  // namespace kiln::cli
