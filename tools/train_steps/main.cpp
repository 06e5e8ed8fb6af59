// `kiln-train-steps ARTIFACT_DIR --batches MANIFEST.json --steps N ...`: runs N training steps of
// generated artifacts over saved batches through the public training API only (CheckpointState,
// Module, Optimizer, LinearLRScheduler), as a user of the library would. The PyTorch parity tests
// and bench/bench.py drive it: it prints one JSON line per step and a summary line.
//
// A manifest is a JSON list of batches, each {"input name": "file.npy"} (paths relative to the
// manifest); step i uses batch i % len. Errors: one line `kiln-train-steps: error: ...`, exit 1.
#include <fmt/format.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/artifacts.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "kiln/npy.h"
#include "kiln/session.h"
#include "kiln/training.h"

namespace {

namespace fs = std::filesystem;
using kiln::Tensor;
using kiln::training::CheckpointState;
using kiln::training::LinearLRScheduler;
using kiln::training::Module;
using kiln::training::Optimizer;

struct Options {
  std::string artifacts;
  std::string prefix;
  std::string batches;
  int64_t steps = 0;
  int threads = 0;
  int64_t warmup = 0;
  std::string save;
  bool with_optimizer_state = false;
  std::string export_path;
  std::vector<std::string> export_outputs;
  std::string eval;
  std::string eval_out;
  std::optional<float> lr;
  std::optional<int64_t> scheduler_warmup;
  std::optional<int64_t> scheduler_total;
};

using Batch = std::vector<Tensor>;  // in the order of the module's input names

// Reads a manifest and loads every batch, ordered as `names`. Every batch must name exactly these
// inputs: a missing one cannot run, and an extra one is most likely a misspelt name.
std::vector<Batch> load_manifest(const std::string& path, const std::vector<std::string>& names) {
  std::ifstream in(path);
  if (!in) throw kiln::IOError(fmt::format("cannot read the manifest '{}'", path));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw kiln::InvalidArgument(fmt::format("manifest '{}' is not valid JSON: {}", path, e.what()));
  }
  if (!doc.is_array() || doc.empty())
    throw kiln::InvalidArgument(fmt::format("manifest '{}' must be a non-empty JSON list of batches", path));
  const fs::path base = fs::path(path).parent_path();
  const std::set<std::string> expected(names.begin(), names.end());
  std::vector<Batch> batches;
  for (size_t b = 0; b < doc.size(); ++b) {
    const nlohmann::json& entry = doc[b];
    if (!entry.is_object())
      throw kiln::InvalidArgument(
          fmt::format("manifest '{}': batch {} must be an object {{input: file.npy}}", path, b));
    for (const auto& [name, file] : entry.items()) {
      if (!expected.count(name))
        throw kiln::InvalidArgument(
            fmt::format("manifest '{}': batch {} names input '{}', which the model does not "
                        "take (its inputs: {})",
                        path, b, name, fmt::join(names, ", ")));
      if (!file.is_string())
        throw kiln::InvalidArgument(
            fmt::format("manifest '{}': batch {}, input '{}': expected a file name", path, b, name));
    }
    Batch batch;
    for (const std::string& name : names) {
      if (!entry.contains(name))
        throw kiln::InvalidArgument(fmt::format("manifest '{}': batch {} lacks input '{}'", path, b, name));
      const fs::path file = base / entry[name].get<std::string>();
      try {
        batch.push_back(kiln::load_npy(file.string()));
      } catch (kiln::Error& e) {
        e.add_context(fmt::format("manifest '{}', batch {}, input '{}': ", path, b, name));
        throw;
      }
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

std::string artifact(const Options& o, const std::string& file) { return (fs::path(o.artifacts) / file).string(); }

double scalar_of(const std::vector<Tensor>& outputs, int64_t step) {
  if (outputs.empty() || !outputs[0].defined() || outputs[0].numel() < 1)
    throw kiln::InvalidModel(fmt::format("step {}: the training model returned no loss value", step));
  return outputs[0].contiguous().item_as_double(0);
}

// This process's peak resident set size in KiB: VmHWM, the high-water mark of its own address
// space. getrusage's ru_maxrss survives exec on Linux, so a tool started by a large parent (a
// Python benchmark holding PyTorch) would report the parent's peak; it is the fallback only.
long peak_rss_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));  // "VmHWM:   123456 kB"
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // kilobytes on Linux
}

// Runs the steps, printing a line per step and the summary line.
void train(const Options& o, Module& module, Optimizer& optimizer) {
  const std::vector<Batch> batches = load_manifest(o.batches, module.input_names(true));
  if (o.lr) optimizer.set_learning_rate(*o.lr);
  std::optional<LinearLRScheduler> scheduler;
  if (o.scheduler_warmup)
    scheduler.emplace(optimizer, *o.scheduler_warmup, *o.scheduler_total, o.lr.value_or(optimizer.get_learning_rate()));

  using Clock = std::chrono::steady_clock;
  std::vector<double> timed;
  for (int64_t i = 0; i < o.steps; ++i) {
    const Batch& batch = batches[static_cast<size_t>(i) % batches.size()];
    const auto start = Clock::now();
    module.train();
    const std::vector<Tensor> outputs = module(batch);
    optimizer.step();
    module.lazy_reset_grad();
    if (scheduler) scheduler->step();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (i >= o.warmup) timed.push_back(ms);
    std::cout << nlohmann::json{{"step", i}, {"loss", scalar_of(outputs, i)}, {"ms", ms}}.dump() << std::endl;
  }
  nlohmann::json summary{{"steps", o.steps},
                         {"timed_steps", timed.size()},
                         {"peak_rss_kb", peak_rss_kb()},
                         {"training_peak_bytes", module.training_peak_bytes()}};
  if (timed.empty()) {  // every step was a warm-up step: no honest timing to report
    summary["mean_ms"] = nullptr;
    summary["min_ms"] = nullptr;
  } else {
    double total = 0;
    for (double ms : timed) total += ms;
    summary["mean_ms"] = total / static_cast<double>(timed.size());
    summary["min_ms"] = *std::min_element(timed.begin(), timed.end());
  }
  std::cout << summary.dump() << std::endl;
}

// Eval mode over every batch of the eval manifest: writes DIR/out_{batch}_{j}.npy for output j.
void evaluate(const Options& o, Module& module) {
  const std::vector<Batch> batches = load_manifest(o.eval, module.input_names(false));
  std::error_code ec;
  fs::create_directories(o.eval_out, ec);
  if (ec) throw kiln::IOError(fmt::format("cannot create the eval output folder '{}': {}", o.eval_out, ec.message()));
  module.eval();
  const std::vector<std::string> names = module.output_names(false);
  for (size_t b = 0; b < batches.size(); ++b) {
    const std::vector<Tensor> outputs = module(batches[b]);
    for (size_t j = 0; j < outputs.size(); ++j)
      kiln::save_npy(outputs[j], (fs::path(o.eval_out) / fmt::format("out_{}_{}.npy", b, j)).string());
    std::cout << nlohmann::json{{"eval_batch", b}, {"outputs", names}}.dump() << std::endl;
  }
}

void run(const Options& o) {
  using namespace kiln::training;
  if (o.threads > 0) kiln::set_num_threads(o.threads);
  kiln::SessionOptions session_options;
  session_options.num_threads = o.threads;

  CheckpointState state = CheckpointState::load_checkpoint(artifact(o, checkpoint_file(o.prefix)));
  const std::string eval_path = artifact(o, eval_model_file(o.prefix));
  std::optional<std::string> eval_model;
  if (fs::exists(eval_path)) eval_model = eval_path;
  else if (!o.eval.empty() || !o.export_path.empty())
    throw kiln::IOError(fmt::format("--eval and --export need the eval model, and '{}' does not exist", eval_path));
  Module module(artifact(o, training_model_file(o.prefix)), state, eval_model, "cpu", session_options);

  if (o.steps > 0) {
    const std::string optimizer_path = artifact(o, optimizer_model_file(o.prefix));
    if (!fs::exists(optimizer_path))
      throw kiln::IOError(
          fmt::format("training steps need the optimizer model, and '{}' does not exist "
                      "(generate the artifacts with --optimizer)",
                      optimizer_path));
    Optimizer optimizer(optimizer_path, module);
    train(o, module, optimizer);
  }
  if (!o.eval.empty()) evaluate(o, module);
  if (!o.save.empty()) CheckpointState::save_checkpoint(state, o.save, o.with_optimizer_state);
  if (!o.export_path.empty()) module.export_model_for_inferencing(o.export_path, o.export_outputs);
}

std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      const size_t comma = std::min(item.find(',', start), item.size());
      if (comma > start) out.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return out;
}

void add_options(CLI::App& app, Options& o) {
  app.add_option("artifact_dir", o.artifacts, "Folder of the training artifacts")->required();
  app.add_option("--prefix", o.prefix, "Prefix of the artifact file names");
  auto* batches = app.add_option("--batches", o.batches, "JSON manifest: a list of {input: file.npy} batches");
  app.add_option("--steps", o.steps, "Training steps (step i uses batch i % len)")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", o.threads, "Threads for kernels; 0 means all cores")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", o.warmup, "Steps left out of mean_ms / min_ms")->check(CLI::NonNegativeNumber);
  auto* save = app.add_option("--save", o.save, "Write the checkpoint here after the steps");
  app.add_flag("--with-optimizer-state", o.with_optimizer_state, "Include the optimizer state in --save")->needs(save);
  auto* exp = app.add_option("--export", o.export_path, "Write the inference model here after the steps");
  auto* outs = app.add_option("--export-outputs", o.export_outputs, "Outputs of the inference model (comma separated)");
  exp->needs(outs);
  outs->needs(exp);
  auto* eval = app.add_option("--eval", o.eval, "JSON manifest of batches to run in eval mode after the steps");
  auto* eval_out = app.add_option("--eval-out", o.eval_out, "Folder for the eval outputs (out_{batch}_{j}.npy)");
  eval->needs(eval_out);
  eval_out->needs(eval);
  app.add_option("--lr", o.lr, "Learning rate (default: the optimizer model's or the checkpoint's)");
  auto* sw = app.add_option("--scheduler-warmup", o.scheduler_warmup, "LinearLRScheduler warm-up steps")
                 ->check(CLI::NonNegativeNumber);
  auto* st = app.add_option("--scheduler-total", o.scheduler_total, "LinearLRScheduler total steps")
                 ->check(CLI::NonNegativeNumber);
  sw->needs(st);
  st->needs(sw);
  app.callback([&o, batches] {
    if (o.steps > 0 && batches->count() == 0) throw CLI::ValidationError("--steps", "training steps need --batches");
  });
}

std::string one_line(std::string message) {
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::replace(message.begin(), message.end(), '\r', ' ');
  return message;
}

int report(const std::string& message) {
  std::cout.flush();
  std::cerr << "kiln-train-steps: error: " << one_line(message) << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs training steps of Kiln training artifacts over saved batches.", "kiln-train-steps"};
  Options o;
  try {
    add_options(app, o);
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      return report(e.what());
    }
    o.export_outputs = split_commas(o.export_outputs);
    run(o);
    return 0;
  } catch (const kiln::Error& e) {
    return report(e.what());
  } catch (const std::bad_alloc&) {
    return report("out of memory");
  } catch (const std::exception& e) {
    return report(fmt::format("internal error: {}", e.what()));
  } catch (...) {
    return report("internal error: unknown exception");
  }
}
