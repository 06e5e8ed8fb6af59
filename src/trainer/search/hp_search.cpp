// Kiln's hyperparameter search backends (random, grid) and the trial loop: HF's
// Trainer.hyperparameter_search without Optuna.
#include "kiln/hp_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/file_io.h"
#include "core/json_text.h"
#include "kiln/error.h"

namespace kiln::trainer {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

double number(const ordered_json& spec, const char* key, const std::string& where) {
  const auto it = spec.find(key);
  if (it == spec.end() || !it->is_number())
    throw InvalidArgument(fmt::format("{}: '{}' needs a number '{}'", where, spec.dump(), key));
  return it->get<double>();
}

HpParam parse_param(const std::string& name, const ordered_json& spec, const std::string& source) {
  const std::string where = fmt::format("{}: parameter '{}'", source, name);
  HpParam p;
  p.name = name;
  if (spec.is_array()) {
    if (spec.empty()) throw InvalidArgument(where + ": an empty list of choices");
    p.choices = json::parse(spec.dump());
    return p;
  }
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    throw InvalidArgument(
        fmt::format("{}: expected a list of choices or an object with a \"type\" (float, int, "
                    "categorical), got {}",
                    where, spec.dump()));
  const std::string type = spec["type"].get<std::string>();
  for (const auto& [key, value] : spec.items())
    if (key != "type" && key != "low" && key != "high" && key != "log" && key != "step" && key != "choices")
      throw InvalidArgument(fmt::format("{}: unknown key '{}'", where, key));
  if (type == "categorical") {
    if (!spec.contains("choices") || !spec["choices"].is_array() || spec["choices"].empty())
      throw InvalidArgument(where + ": a categorical parameter needs a non-empty list \"choices\"");
    p.choices = json::parse(spec["choices"].dump());
    return p;
  }
  if (type != "float" && type != "int")
    throw InvalidArgument(fmt::format("{}: type '{}' is not float, int or categorical", where, type));
  p.kind = type == "float" ? HpParam::Kind::Float : HpParam::Kind::Int;
  p.low = number(spec, "low", where);
  p.high = number(spec, "high", where);
  p.log = spec.value("log", false);
  p.step = spec.contains("step") ? number(spec, "step", where) : (p.kind == HpParam::Kind::Int ? 1.0 : 0.0);
  if (!(p.low <= p.high)) throw InvalidArgument(fmt::format("{}: low {} is above high {}", where, p.low, p.high));
  if (p.log && p.low <= 0) throw InvalidArgument(fmt::format("{}: log needs low > 0, got {}", where, p.low));
  if (p.step < 0 || (p.kind == HpParam::Kind::Int && (p.step < 1 || p.step != std::floor(p.step))))
    throw InvalidArgument(fmt::format("{}: step {} is not a positive {}", where, p.step, type));
  if (p.log && p.step != 0 && p.kind == HpParam::Kind::Float)
    throw InvalidArgument(where + ": a float parameter takes log or step, not both (optuna's rule)");
  if (p.kind == HpParam::Kind::Int && (p.low != std::floor(p.low) || p.high != std::floor(p.high)))
    throw InvalidArgument(
        fmt::format("{}: an int parameter needs integer bounds, got {} and {}", where, p.low, p.high));
  return p;
}

bool is_speed_or_memory(const std::string& k) {
  const auto ends = [&](const std::string& s) {
    return k.size() >= s.size() && k.compare(k.size() - s.size(), s.size(), s) == 0;
  };
  return ends("_runtime") || ends("_per_second") || ends("_compilation_time") || k.find("_mem_") != std::string::npos;
}

}  // namespace

HpSpace HpSpace::from_json(const ordered_json& space, const std::string& source) {
  if (!space.is_object() || space.empty())
    throw InvalidArgument(fmt::format("{}: expected a JSON object of parameters, got {}", source, space.dump()));
  HpSpace out;
  for (const auto& [name, spec] : space.items()) out.params.push_back(parse_param(name, spec, source));
  return out;
}

HpSpace HpSpace::from_json_file(const std::string& path) {
  const std::string text = read_file_bytes(path, "search space");
  check_json_limits(text, path);
  try {
    return from_json(ordered_json::parse(text), path);
  } catch (const ordered_json::parse_error& e) {
    throw CorruptFile(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

double HpSampler::uniform01() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

uint64_t HpSampler::below(uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = rng_();
    if (r >= threshold) return r % bound;
  }
}

double HpSampler::suggest_float(double low, double high, bool log, double step) {
  if (log) return std::exp(std::log(low) + (std::log(high) - std::log(low)) * uniform01());
  if (step > 0)
    return low + step * static_cast<double>(below(static_cast<uint64_t>(std::llround((high - low) / step)) + 1));
  return low + (high - low) * uniform01();
}

int64_t HpSampler::suggest_int(int64_t low, int64_t high, int64_t step, bool log) {
  if (log) {  // optuna's rule: log-uniform over [low - 0.5, high + 0.5], rounded
    const double v = suggest_float(static_cast<double>(low) - 0.5, static_cast<double>(high) + 0.5, true, 0);
    return std::clamp(static_cast<int64_t>(std::llround(v)), low, high);
  }
  const auto count = static_cast<uint64_t>((high - low) / step) + 1;
  return low + step * static_cast<int64_t>(below(count));
}

size_t HpSampler::suggest_index(size_t n) { return static_cast<size_t>(below(n)); }

json HpSampler::draw(const HpParam& p) {
  switch (p.kind) {
    case HpParam::Kind::Float:
      return suggest_float(p.low, p.high, p.log, p.step);
    case HpParam::Kind::Int:
      return suggest_int(static_cast<int64_t>(p.low), static_cast<int64_t>(p.high), static_cast<int64_t>(p.step),
                         p.log);
    case HpParam::Kind::Categorical:
      break;
  }
  return p.choices[suggest_index(p.choices.size())];
}

double default_compute_objective(const Metrics& metrics) {
  const auto loss = metrics.find("eval_loss");
  double sum = 0;
  bool others = false;
  for (const auto& [k, v] : metrics) {
    if (k == "eval_loss" || k == "epoch" || is_speed_or_memory(k)) continue;
    sum += v;
    others = true;
  }
  if (others) return sum;
  if (loss == metrics.end()) throw InvalidArgument("the final evaluation gave no metrics to compute an objective from");
  return loss->second;
}

TrainingArguments trial_arguments(const TrainingArguments& base, const json& params, int number) {
  json values = base.to_json();
  for (const auto& [name, value] : params.items()) {
    if (!values.contains(name))
      throw InvalidArgument(
          fmt::format("Trying to set {} in the hyperparameter search but there is no "
                      "corresponding field in `TrainingArguments`.",
                      name));
    values[name] = value;
  }
  values["output_dir"] = (std::filesystem::path(base.output_dir) / fmt::format("run-{}", number)).string();
  values.erase("logging_dir");  // each run's own, under its output_dir
  return TrainingArguments::from_json(values);
}

std::vector<json> grid_points(const HpSpace& space) {
  std::vector<json> points{json::object()};
  for (const HpParam& p : space.params) {
    if (p.kind != HpParam::Kind::Categorical)
      throw InvalidArgument(
          fmt::format("backend 'grid' searches categorical choices only: give '{}' a list of "
                      "choices",
                      p.name));
    std::vector<json> next;
    for (const json& point : points)
      for (const json& choice : p.choices) {
        json q = point;
        q[p.name] = choice;
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  return points;
}

BestRun hyperparameter_search(const TrainerFactory& make, const TrainingArguments& base, const HpSpace& space,
                              const HpSearchOptions& options, const ComputeObjective& compute_objective,
                              const std::function<void(const HpTrial&)>& on_trial) {
  if (options.direction != "minimize" && options.direction != "maximize")
    throw InvalidArgument(fmt::format("direction must be 'minimize' or 'maximize', not '{}'", options.direction));
  if (options.n_trials < 1) throw InvalidArgument(fmt::format("n_trials {} is not positive", options.n_trials));
  std::vector<json> points;
  if (options.backend == "grid") {
    points = grid_points(space);
    if (points.size() > static_cast<size_t>(options.n_trials)) points.resize(static_cast<size_t>(options.n_trials));
  } else if (options.backend == "random") {
    HpSampler sampler(options.seed);
    for (int n = 0; n < options.n_trials; ++n) {
      json point = json::object();
      for (const HpParam& p : space.params) point[p.name] = sampler.draw(p);
      points.push_back(std::move(point));
    }
  } else {
    throw InvalidArgument(
        fmt::format("backend '{}' is not one of 'random', 'grid' (optuna: from Python)", options.backend));
  }
  const ComputeObjective objective = compute_objective ? compute_objective : default_compute_objective;
  BestRun best;
  bool have = false;
  for (size_t n = 0; n < points.size(); ++n) {
    HpTrial trial;
    trial.number = static_cast<int>(n);
    trial.params = points[n];
    const TrainingArguments args = trial_arguments(base, trial.params, trial.number);
    std::unique_ptr<Trainer> trainer = make(args);
    trainer->train();
    trial.metrics = trainer->evaluate();
    trial.objective = objective(trial.metrics);
    const bool better = !have || (options.direction == "minimize" ? trial.objective < best.objective
                                                                  : trial.objective > best.objective);
    if (better) {
      best.run_id = std::to_string(trial.number);
      best.objective = trial.objective;
      best.hyperparameters = trial.params;
      have = true;
    }
    if (on_trial) on_trial(trial);
    best.trials.push_back(std::move(trial));
  }
  return best;
}

}  // namespace kiln::trainer
