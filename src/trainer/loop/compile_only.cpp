#include "trainer/loop/compile_only.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "trainer/loop/batch_padding.h"

namespace kiln::trainer {

namespace {

// The batch's columns the model takes, in its input order.
std::vector<Tensor> model_inputs(const training::Module& module, const data::Example& batch, bool training) {
  std::vector<Tensor> inputs;
  for (const auto& name : module.input_names(training)) {
    const auto it = batch.find(name);
    if (it == batch.end())
      throw InvalidArgument(
          fmt::format("compile_only: the model takes input '{}', which the batch does not have", name));
    inputs.push_back(it->second);
  }
  return inputs;
}

std::string shapes_of(const training::Module& module, const std::vector<Tensor>& inputs, bool training) {
  std::vector<std::string> parts;
  const auto names = module.input_names(training);
  for (size_t i = 0; i < inputs.size(); ++i)
    parts.push_back(fmt::format("{} {}", names[i], kiln::to_string(inputs[i].shape())));
  return fmt::format("{}", fmt::join(parts, ", "));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TrainOutput compile_only(Trainer::Impl& m, const TrainingArguments& args, const data::DataLoader& train_loader) {
  const auto start = std::chrono::steady_clock::now();
  const bool speak = !m.dist.distributed() || args.should_log();
  TrainOutput out;
  auto report = [&](const char* what, const std::string& shapes, const PlanStats& s, double secs) {
    if (speak)
      std::cerr << fmt::format(
          "kiln: compile_only: {} planned{}: {} kernels, {} folded, arena {:.1f} MiB, {:.2f} s{}\n", what,
          shapes.empty() ? "" : " for " + shapes, s.num_steps, s.num_folded,
          static_cast<double>(s.peak_bytes) / (1 << 20), secs,
          s.graph_from_cache || s.memory_plan_from_cache
              ? fmt::format(" (from the plan cache: {}{}{})", s.graph_from_cache ? "graph" : "",
                            s.graph_from_cache && s.memory_plan_from_cache ? ", " : "",
                            s.memory_plan_from_cache ? "memory plan" : "")
              : "");
  };
  data::Example batch = train_loader.batch(0, 0);
  if (args.pad_on_batch_axis) pad_batch(batch, args.per_device_train_batch_size, label_columns(args));
  auto t = std::chrono::steady_clock::now();
  std::vector<Tensor> inputs = model_inputs(*m.module, batch, true);
  const PlanStats train = m.module->plan(inputs, true);
  report("training model", shapes_of(*m.module, inputs, true), train, seconds_since(t));
  out.metrics["train_plan_bytes"] = static_cast<double>(train.peak_bytes);
  if (m.eval_dataset && args.eval_strategy != IntervalStrategy::no) {
    data::DataLoader eval_loader(m.eval_dataset, static_cast<size_t>(args.per_device_eval_batch_size));
    data::Example eval_batch = eval_loader.batch(0, 0);
    if (args.pad_on_batch_axis) pad_batch(eval_batch, args.per_device_eval_batch_size, label_columns(args));
    t = std::chrono::steady_clock::now();
    inputs = model_inputs(*m.module, eval_batch, false);
    const PlanStats eval = m.module->plan(inputs, false);
    report("eval model", shapes_of(*m.module, inputs, false), eval, seconds_since(t));
    out.metrics["eval_plan_bytes"] = static_cast<double>(eval.peak_bytes);
  }
  t = std::chrono::steady_clock::now();
  const PlanStats optimizer = m.optimizer->plan();
  report("optimizer model", "", optimizer, seconds_since(t));
  out.metrics["optimizer_plan_bytes"] = static_cast<double>(optimizer.peak_bytes);
  out.metrics["compile_seconds"] = seconds_since(start);
  return out;
}

}  // namespace kiln::trainer
