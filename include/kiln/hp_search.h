// Hyperparameter search with the Hugging Face Trainer's semantics (Trainer.hyperparameter_search):
// each trial sets its values on a copy of the TrainingArguments, trains a fresh Trainer in
// <output_dir>/run-<n> and is scored on its final evaluation; the best run is returned. Kiln's own
// backends: "random" (a seeded sampler: the same draws as Python's kiln.Trainer backend "random")
// and "grid" (every combination of categorical choices, in the space's order). Python's optuna
// backend is in python/kiln/hp_search.py; `kiln hpsearch --hp-space space.json` runs this one.
//
//   // space.json: {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": true},
//   //              "per_device_train_batch_size": [16, 32]}
//   HpSpace space = HpSpace::from_json_file("space.json");
//   BestRun best = hyperparameter_search([&](const TrainingArguments& a) {
//     return std::make_unique<Trainer>(ModelSource::builtin("lenet"), a, train, eval); }, args, space, {});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kiln/trainer.h"

namespace kiln::trainer {

// One dimension: optuna's suggest_float / suggest_int / suggest_categorical.
struct HpParam {
  enum class Kind { Float, Int, Categorical };
  std::string name;  // a TrainingArguments field
  Kind kind = Kind::Categorical;
  double low = 0, high = 0;
  bool log = false;
  double step = 0;  // Float: 0 for continuous; Int: at least 1
  nlohmann::json choices = nlohmann::json::array();
};

struct HpSpace {
  std::vector<HpParam> params;  // in the order they are drawn
  // A JSON object: name -> {"type": "float"|"int", "low", "high", "log"?, "step"?} or
  // {"type": "categorical", "choices": [...]} or a bare list of choices, drawn in the object's order
  // (ordered_json keeps a file's). InvalidArgument naming the field for anything else (low > high,
  // log with low <= 0, an empty list, unknown keys).
  static HpSpace from_json(const nlohmann::ordered_json& space, const std::string& source = "the search space");
  static HpSpace from_json_file(const std::string& path);
};

// The random backend's draws: a 64-bit Mersenne Twister seeded with `seed`, uniform doubles from
// its top 53 bits and integers by rejection, so that any platform (and Python, through the
// bindings) draws the same values.
class HpSampler {
 public:
  explicit HpSampler(uint64_t seed) : rng_(seed) {}
  double suggest_float(double low, double high, bool log = false, double step = 0);
  int64_t suggest_int(int64_t low, int64_t high, int64_t step = 1, bool log = false);
  size_t suggest_index(size_t n);  // a categorical choice
  nlohmann::json draw(const HpParam& p);

 private:
  double uniform01();
  uint64_t below(uint64_t bound);
  std::mt19937_64 rng_;
};

struct HpSearchOptions {
  int n_trials = 20;
  std::string direction = "minimize";  // or "maximize"
  std::string backend = "random";      // or "grid"
  uint64_t seed = 0;                   // random
};

struct HpTrial {
  int number = 0;
  nlohmann::json params = nlohmann::json::object();
  double objective = 0;
  Metrics metrics;
};

struct BestRun {
  std::string run_id;  // the trial's number
  double objective = 0;
  nlohmann::json hyperparameters = nlohmann::json::object();
  std::vector<HpTrial> trials;  // every trial, in order (HF's run_summary)
};

// HF's default objective: eval_loss when it is the only metric, else the sum of the others
// (runtime, per-second, epoch and memory metrics left out).
double default_compute_objective(const Metrics& metrics);

// The trial's values on a copy of `base` (each converted to its field's type by the arguments'
// own JSON rules), output_dir <base.output_dir>/run-<number>. InvalidArgument, with HF's text, for
// a name that is no TrainingArguments field.
TrainingArguments trial_arguments(const TrainingArguments& base, const nlohmann::json& params, int number);

// The grid backend's points: every combination of the (categorical) choices, the first parameter
// varying slowest. InvalidArgument for a float or int parameter.
std::vector<nlohmann::json> grid_points(const HpSpace& space);

using TrainerFactory = std::function<std::unique_ptr<Trainer>(const TrainingArguments&)>;
using ComputeObjective = std::function<double(const Metrics&)>;

// Runs the trials one after another (each: make(args), train(), evaluate()) and returns the best;
// `on_trial` (optional) sees each finished trial. The grid backend runs min(n_trials, grid size).
BestRun hyperparameter_search(const TrainerFactory& make, const TrainingArguments& base, const HpSpace& space,
                              const HpSearchOptions& options, const ComputeObjective& compute_objective = nullptr,
                              const std::function<void(const HpTrial&)>& on_trial = nullptr);

}  // namespace kiln::trainer
