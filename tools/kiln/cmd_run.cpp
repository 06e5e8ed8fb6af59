// `kiln run MODEL.onnx --input NAME=FILE.npy ... [--output-dir DIR] [--threads N] [--repeat N]`:
// runs a model on .npy inputs, writes each output to DIR/<name>.npy and, with --repeat, times it.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "commands.h"
#include "kiln/error.h"
#include "kiln/npy.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"

namespace kiln::cli {
namespace {

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;
  std::string output_dir;
  int threads = 0;
  int repeat = 0;
  bool profile = false;
  int profile_nodes = 0;
};

// ONNX names may hold '/', ':' and other characters a file name cannot (PyTorch writes
// "onnx::Gemm_7"); keep [A-Za-z0-9._-], replace the rest, and never produce "", "." or "..".
std::string sanitize_file_stem(const std::string& name, size_t index) {
  std::string out;
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out.find_first_not_of('.') == std::string::npos) out = fmt::format("output_{}", index);
  return out.substr(0, 200);
}

// Distinct file names for the outputs, in graph order: "a/b" and "a:b" both sanitise to "a_b".
std::vector<std::string> output_file_names(const std::vector<std::string>& names) {
  std::vector<std::string> files;
  std::set<std::string> used;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string stem = sanitize_file_stem(names[i], i);
    std::string file = stem + ".npy";
    for (int k = 1; used.count(file); ++k) file = fmt::format("{}_{}.npy", stem, k);
    used.insert(file);
    files.push_back(file);
  }
  return files;
}

std::map<std::string, Tensor> read_feeds(const std::vector<std::string>& specs) {
  std::map<std::string, Tensor> feeds;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw InvalidArgument(fmt::format("--input expects NAME=FILE.npy, got '{}'", spec));
    const std::string name = spec.substr(0, eq);
    if (feeds.count(name)) throw InvalidArgument(fmt::format("input '{}' is given twice", name));
    try {
      feeds[name] = load_npy(spec.substr(eq + 1));
    } catch (Error& e) {
      e.add_context(fmt::format("input '{}': ", name));
      throw;
    }
  }
  return feeds;
}

void print_timing(Session& session, const std::map<std::string, Tensor>& feeds, int repeat) {
  using Clock = std::chrono::steady_clock;
  double total = 0, best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < repeat; ++i) {
    const auto start = Clock::now();
    session.run(feeds);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    total += ms;
    best = std::min(best, ms);
  }
  std::cout << fmt::format("time_ms mean={:.4f} min={:.4f} runs={}", total / repeat, best, repeat) << std::endl;
}

void run(const RunOptions& o) {
  Model model = load_model(o.model);
  std::map<std::string, Tensor> feeds = read_feeds(o.inputs);
  SessionOptions options;
  options.num_threads = o.threads;
  options.profile = o.profile || o.profile_nodes > 0;
  Session session(std::move(model), options);

  // The first run also serves as the warm-up for --repeat (plans, oneDNN primitives, page faults).
  std::map<std::string, Tensor> results = session.run(feeds);
  std::vector<std::string> names;
  for (const ValueInfo& v : session.outputs()) names.push_back(v.name);
  const std::vector<std::string> files = output_file_names(names);

  if (!o.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.output_dir, ec);
    if (ec) throw IOError(fmt::format("cannot create the output folder '{}': {}", o.output_dir, ec.message()));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = results.find(names[i]);
    if (it == results.end()) throw Error(fmt::format("the session returned no value for output '{}'", names[i]));
    std::string line = fmt::format("output {} {}", names[i], it->second.describe());
    if (!o.output_dir.empty()) {
      const std::string path = (std::filesystem::path(o.output_dir) / files[i]).string();
      save_npy(it->second, path);
      line += " -> " + path;
    }
    std::cout << line << "\n";
  }
  std::cout.flush();
  // With --repeat, the profile covers the timed runs only: the warm-up run pays for first touches.
  if (o.repeat > 0) {
    session.reset_profile();
    print_timing(session, feeds, o.repeat);
  }
  if (o.profile) {
    const auto ops = session.profile();
    const int runs = o.repeat > 0 ? o.repeat : 1;
    double total = 0;
    for (const OpProfile& p : ops) total += p.total_ms;
    std::cout << fmt::format("profile over {} run{} (kernel time {:.3f} ms per run):\n", runs, runs > 1 ? "s" : "",
                             total / runs);
    for (const OpProfile& p : ops)
      std::cout << fmt::format("  {:<28} {:>6} calls {:>10.3f} ms/run {:>6.1f}%\n", p.op_type, p.calls,
                               p.total_ms / runs, total > 0 ? 100 * p.total_ms / total : 0.0);
  }
  if (o.profile_nodes > 0) {
    const auto nodes = session.node_profile();
    const int runs = o.repeat > 0 ? o.repeat : 1;
    const size_t shown = std::min(nodes.size(), static_cast<size_t>(o.profile_nodes));
    std::cout << fmt::format("slowest {} nodes (ms per run, shapes):\n", shown);
    for (size_t i = 0; i < shown; ++i)
      std::cout << fmt::format("  {:>8.3f}  {}  {}\n", nodes[i].total_ms / runs, nodes[i].label, nodes[i].shapes);
  }
}

Action setup(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  app.add_option("model", o->model, "The ONNX model file")->required();
  // One value per --input, so a model path after it is not swallowed as another input.
  app.add_option("-i,--input", o->inputs, "An input as NAME=FILE.npy (repeat for each input)")->allow_extra_args(false);
  app.add_option("-o,--output-dir", o->output_dir,
                 "Write each output to DIR/<output name>.npy (names made safe for the file system)");
  app.add_option("-t,--threads", o->threads, "Threads for kernels; 0 means all cores")->check(CLI::NonNegativeNumber);
  app.add_flag("--profile", o->profile, "Print the kernel time per op type");
  app.add_option("--profile-nodes", o->profile_nodes, "Print the N slowest nodes with their shapes (profiles the run)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-r,--repeat", o->repeat, "After one warm-up run, time N runs and print 'time_ms mean=X min=Y runs=N'")
      ->check(CLI::NonNegativeNumber);
  return [o] { run(*o); };
}

const CommandRegistrar reg({"run", "Run a model on .npy inputs and write its outputs as .npy", setup});

}  // namespace
}  // namespace kiln::cli
