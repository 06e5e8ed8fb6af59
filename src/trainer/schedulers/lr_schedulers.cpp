// The Hugging Face schedulers (transformers/optimization.py) as one registry of named factories.
//
// How to add a schedule: write its lambda as a function of the step (keep HF's expression order:
// Python evaluates left to right in double, and reordering changes the last bit), then add an entry
// to registry() with its accepted kwargs. Step-driven schedules are LambdaScheduler (torch's
// LambdaLR: lr = base_lr * lambda(step)); metric-driven ones implement LRScheduler directly.
#include "kiln/lr_schedulers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <utility>

namespace kiln::trainer {

LRScheduler::~LRScheduler() = default;

namespace {

using Json = nlohmann::json;
using Lambda = std::function<double(int64_t)>;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

// Python's max(0.0, x): the first argument unless x is strictly greater (so NaN and -0.0 give 0.0).
double py_max0(double x) { return x > 0.0 ? x : 0.0; }

// Python's float x % y: the result takes the sign of y (C's fmod takes the sign of x).
double py_mod(double x, double y) {
  double mod = std::fmod(x, y);
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) mod += y;
  } else {
    mod = std::copysign(0.0, y);
  }
  return mod;
}

// JSON has no inf/nan (nlohmann writes null); ReduceLROnPlateau's best starts at inf.
Json json_double(double v) {
  if (std::isfinite(v)) return v;
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

const Json& field(const Json& state, const std::string& name, const std::string& type) {
  if (!state.is_object() || !state.contains(name))
    throw InvalidArgument(fmt::format("LRScheduler::load_state: the {} scheduler's state has no field '{}': {}", type,
                                      name, state.dump()));
  return state.at(name);
}

double read_double(const Json& state, const std::string& name, const std::string& type) {
  const Json& v = field(state, name, type);
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  throw InvalidArgument(fmt::format(
      "LRScheduler::load_state: field '{}' of the {} scheduler's state is {}, not a number", name, type, v.dump()));
}

int64_t read_int(const Json& state, const std::string& name, const std::string& type) {
  const Json& v = field(state, name, type);
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    throw InvalidArgument(
        fmt::format("LRScheduler::load_state: field '{}' of the {} scheduler's state is {}, not a non-negative integer",
                    name, type, v.dump()));
  return v.get<int64_t>();
}

void check_type(const Json& state, const std::string& type) {
  const Json& t = field(state, "type", type);
  if (!t.is_string() || t.get<std::string>() != type)
    throw InvalidArgument(fmt::format("LRScheduler::load_state: the state is of a '{}' scheduler, this one is '{}'",
                                      t.is_string() ? t.get<std::string>() : t.dump(), type));
}

void check_step(int64_t step, const std::string& type) {
  if (step < 0)
    throw InvalidArgument(fmt::format("LRScheduler::lr: step {} of the {} schedule is negative", step, type));
}

// The scheduler's kwargs, checked against the names its type accepts; typed reads with defaults.
class Kwargs {
 public:
  Kwargs(const std::string& type, const Json& kwargs, const std::vector<std::string>& accepted)
      : type_(type), kwargs_(kwargs) {
    if (kwargs.is_null()) return;
    if (!kwargs.is_object())
      throw InvalidArgument(
          fmt::format("lr_scheduler_kwargs for '{}' must be a JSON object, got {}", type, kwargs.dump()));
    for (const auto& [name, value] : kwargs.items())
      if (std::find(accepted.begin(), accepted.end(), name) == accepted.end())
        throw InvalidArgument(
            fmt::format("lr_scheduler_kwargs: '{}' is not an argument of the '{}' scheduler; valid: {}", name, type,
                        join(accepted)));
  }

  const Json* get(const std::string& name) const {
    if (!kwargs_.is_object() || !kwargs_.contains(name)) return nullptr;
    return &kwargs_.at(name);
  }

  double number(const std::string& name, double fallback) const {
    const Json* v = get(name);
    if (!v) return fallback;
    if (!v->is_number()) bad(name, *v, "a number");
    return v->get<double>();
  }

  // An integer (a float with an integral value is accepted, as Python would use it).
  std::optional<int64_t> optional_integer(const std::string& name) const {
    const Json* v = get(name);
    if (!v || v->is_null()) return std::nullopt;
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>() &&
        std::abs(v->get<double>()) < 9e15)
      return static_cast<int64_t>(v->get<double>());
    bad(name, *v, "an integer");
  }
  int64_t integer(const std::string& name, int64_t fallback) const { return optional_integer(name).value_or(fallback); }

  std::string choice(const std::string& name, const std::string& fallback,
                     const std::vector<std::string>& options) const {
    const Json* v = get(name);
    if (!v) return fallback;
    if (!v->is_string() || std::find(options.begin(), options.end(), v->get<std::string>()) == options.end())
      bad(name, *v, "one of " + join(options));
    return v->get<std::string>();
  }

  bool boolean(const std::string& name, bool fallback) const {
    const Json* v = get(name);
    if (!v) return fallback;
    if (!v->is_boolean()) bad(name, *v, "true or false");
    return v->get<bool>();
  }

  [[noreturn]] void bad(const std::string& name, const Json& v, const std::string& expected) const {
    throw InvalidArgument(fmt::format("lr_scheduler_kwargs: '{}' of the '{}' scheduler is {}; expected {}", name, type_,
                                      v.dump(), expected));
  }

  [[noreturn]] void invalid(const std::string& message) const {
    throw InvalidArgument(fmt::format("lr_scheduler_kwargs of the '{}' scheduler: {}", type_, message));
  }

 private:
  std::string type_;
  const Json& kwargs_;
};

struct Config {
  std::string type;
  double base_lr;
  int64_t warmup;
  int64_t total;
};

// torch.optim.lr_scheduler.LambdaLR over one of HF's lambdas.
class LambdaScheduler final : public LRScheduler {
 public:
  LambdaScheduler(std::string type, double base_lr, Lambda lambda)
      : type_(std::move(type)), base_lr_(base_lr), lambda_(std::move(lambda)) {}

  const std::string& type() const override { return type_; }
  double base_lr() const override { return base_lr_; }
  double lr(int64_t step) const override {
    check_step(step, type_);
    return base_lr_ * lambda_(step);
  }
  void step(std::optional<double> metric) override {
    if (metric)
      throw InvalidArgument(
          fmt::format("LRScheduler::step: the {} schedule advances per optimizer step and takes no "
                      "metric (got {}); only reduce_lr_on_plateau steps on a metric",
                      type_, *metric));
    ++step_;
  }
  double current_lr() const override { return lr(step_); }
  int64_t last_step() const override { return step_; }

  Json state() const override { return {{"type", type_}, {"last_step", step_}, {"base_lr", json_double(base_lr_)}}; }
  void load_state(const Json& state) override {
    check_type(state, type_);
    const int64_t step = read_int(state, "last_step", type_);
    const double base_lr = read_double(state, "base_lr", type_);
    step_ = step;
    base_lr_ = base_lr;
  }

 private:
  std::string type_;
  double base_lr_;
  Lambda lambda_;
  int64_t step_ = 0;
};

// The linear warmup every HF lambda starts with: float(step) / float(max(1, num_warmup_steps)).
double warmup_factor(int64_t step, int64_t warmup) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
}

double progress_after_warmup(int64_t step, int64_t warmup, int64_t total) {
  return static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
}

std::unique_ptr<LRScheduler> lambda_scheduler(const Config& c, Lambda lambda) {
  return std::make_unique<LambdaScheduler>(c.type, c.base_lr, std::move(lambda));
}

// _get_linear_schedule_with_warmup_lr_lambda
std::unique_ptr<LRScheduler> make_linear(const Config& c, const Kwargs&) {
  return lambda_scheduler(c, [w = c.warmup, t = c.total](int64_t s) {
    if (s < w) return warmup_factor(s, w);
    return py_max0(static_cast<double>(t - s) / static_cast<double>(std::max<int64_t>(1, t - w)));
  });
}

// _get_cosine_schedule_with_warmup_lr_lambda: HF defines it twice and the second definition (with
// min_lr_rate=0.0) is the one in effect, so the factor goes through `f * (1 - 0.0) + 0.0` and max(0, f).
std::unique_ptr<LRScheduler> make_cosine(const Config& c, const Kwargs& kw) {
  const double cycles = kw.number("num_cycles", 0.5);
  return lambda_scheduler(c, [w = c.warmup, t = c.total, cycles](int64_t s) {
    if (s < w) return warmup_factor(s, w);
    const double progress = progress_after_warmup(s, w, t);
    constexpr double min_lr_rate = 0.0;
    double factor = 0.5 * (1.0 + std::cos(std::numbers::pi * cycles * 2.0 * progress));
    factor = factor * (1 - min_lr_rate) + min_lr_rate;
    return py_max0(factor);
  });
}

// _get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda
std::unique_ptr<LRScheduler> make_cosine_with_restarts(const Config& c, const Kwargs& kw) {
  const double cycles = kw.number("num_cycles", 1.0);
  return lambda_scheduler(c, [w = c.warmup, t = c.total, cycles](int64_t s) {
    if (s < w) return warmup_factor(s, w);
    const double progress = progress_after_warmup(s, w, t);
    if (progress >= 1.0) return 0.0;
    return py_max0(0.5 * (1.0 + std::cos(std::numbers::pi * py_mod(cycles * progress, 1.0))));
  });
}

// _get_polynomial_decay_schedule_with_warmup_lr_lambda (lr_init is the optimizer's lr).
std::unique_ptr<LRScheduler> make_polynomial(const Config& c, const Kwargs& kw) {
  const double lr_end = kw.number("lr_end", 1e-7);
  const double power = kw.number("power", 1.0);
  const double lr_init = c.base_lr;
  if (!(lr_init > lr_end)) kw.invalid(fmt::format("lr_end ({}) must be smaller than initial lr ({})", lr_end, lr_init));
  if (c.total == c.warmup)
    kw.invalid(
        fmt::format("polynomial decay needs num_training_steps ({}) != num_warmup_steps ({}): HF divides by "
                    "their difference at step {}",
                    c.total, c.warmup, c.total));
  return lambda_scheduler(c, [w = c.warmup, t = c.total, lr_end, power, lr_init](int64_t s) {
    if (s < w) return warmup_factor(s, w);
    if (s > t) return lr_end / lr_init;
    const double lr_range = lr_init - lr_end;
    const int64_t decay_steps = t - w;
    const double pct_remaining = 1 - static_cast<double>(s - w) / static_cast<double>(decay_steps);
    const double decay = lr_range * std::pow(pct_remaining, power) + lr_end;
    return decay / lr_init;
  });
}

// _get_constant_lambda: get_scheduler ignores the warmup for "constant".
std::unique_ptr<LRScheduler> make_constant(const Config& c, const Kwargs&) {
  return lambda_scheduler(c, [](int64_t) { return 1.0; });
}

// _get_constant_schedule_with_warmup_lr_lambda (note max(1.0, ...), a float, unlike the others).
std::unique_ptr<LRScheduler> make_constant_with_warmup(const Config& c, const Kwargs&) {
  return lambda_scheduler(c, [w = c.warmup](int64_t s) {
    if (s < w) return static_cast<double>(s) / std::max(1.0, static_cast<double>(w));
    return 1.0;
  });
}

// _get_inverse_sqrt_schedule_lr_lambda; timescale defaults to `num_warmup_steps or 10_000`.
std::unique_ptr<LRScheduler> make_inverse_sqrt(const Config& c, const Kwargs& kw) {
  const int64_t timescale = kw.optional_integer("timescale").value_or(c.warmup != 0 ? c.warmup : 10'000);
  if (timescale <= 0) kw.invalid(fmt::format("timescale must be a positive integer, got {}", timescale));
  return lambda_scheduler(c, [w = c.warmup, timescale](int64_t s) {
    if (s < w) return warmup_factor(s, w);
    const int64_t shift = timescale - w;
    return 1.0 / std::sqrt(static_cast<double>(s + shift) / static_cast<double>(timescale));
  });
}

// torch.optim.lr_scheduler.ReduceLROnPlateau on one parameter group (HF: get_reduce_on_plateau_schedule).
class PlateauScheduler final : public LRScheduler {
 public:
  PlateauScheduler(const Config& c, const Kwargs& kw)
      : type_(c.type),
        base_lr_(c.base_lr),
        mode_max_(kw.choice("mode", "min", {"min", "max"}) == "max"),
        factor_(kw.number("factor", 0.1)),
        patience_(kw.integer("patience", 10)),
        threshold_(kw.number("threshold", 1e-4)),
        threshold_rel_(kw.choice("threshold_mode", "rel", {"rel", "abs"}) == "rel"),
        cooldown_(kw.integer("cooldown", 0)),
        min_lr_(kw.number("min_lr", 0.0)),
        eps_(kw.number("eps", 1e-8)),
        lr_(c.base_lr),
        best_(worst()) {
    kw.boolean("verbose", false);  // torch only prints with it; checked for its type
    if (factor_ >= 1.0) kw.invalid(fmt::format("factor should be < 1.0, got {}", factor_));
    history_.push_back({0, lr_});
  }

  const std::string& type() const override { return type_; }
  double base_lr() const override { return base_lr_; }
  bool steps_on_metric() const override { return true; }
  double current_lr() const override { return lr_; }
  int64_t last_step() const override { return last_step_; }

  double lr(int64_t step) const override {
    check_step(step, type_);
    // The last change at or before `step`; history_ starts with {0, base_lr}.
    auto it = std::upper_bound(history_.begin(), history_.end(), step,
                               [](int64_t s, const std::pair<int64_t, double>& h) { return s < h.first; });
    return std::prev(it)->second;
  }

  // ReduceLROnPlateau.step(metrics), its order of updates kept.
  void step(std::optional<double> metric) override {
    if (!metric)
      throw InvalidArgument(
          "LRScheduler::step: reduce_lr_on_plateau steps once per evaluation with the metric "
          "(metric_for_best_model); none was given");
    const double current = *metric;
    ++last_step_;
    if (is_better(current, best_)) {
      best_ = current;
      num_bad_epochs_ = 0;
    } else {
      ++num_bad_epochs_;
    }
    if (cooldown_counter_ > 0) {
      --cooldown_counter_;
      num_bad_epochs_ = 0;  // bad epochs in cooldown are ignored
    }
    if (num_bad_epochs_ > patience_) {
      reduce_lr();
      cooldown_counter_ = cooldown_;
      num_bad_epochs_ = 0;
    }
  }

  Json state() const override {
    Json history = Json::array();
    for (const auto& [s, lr] : history_) history.push_back({s, json_double(lr)});
    return {{"type", type_},
            {"last_step", last_step_},
            {"base_lr", json_double(base_lr_)},
            {"lr", json_double(lr_)},
            {"best", json_double(best_)},
            {"num_bad_epochs", num_bad_epochs_},
            {"cooldown_counter", cooldown_counter_},
            {"history", history}};
  }

  void load_state(const Json& state) override {
    check_type(state, type_);
    const Json& history = field(state, "history", type_);
    std::vector<std::pair<int64_t, double>> parsed;
    if (history.is_array())
      for (const Json& h : history)
        if (h.is_array() && h.size() == 2 && h[0].is_number_integer() && h[1].is_number())
          parsed.emplace_back(h[0].get<int64_t>(), h[1].get<double>());
    if (parsed.empty() || parsed.size() != history.size() || parsed.front().first != 0 ||
        !std::is_sorted(parsed.begin(), parsed.end()))
      throw InvalidArgument(fmt::format(
          "LRScheduler::load_state: field 'history' of the {} scheduler's state must be [[0, lr], [step, lr], ...] "
          "in step order, got {}",
          type_, history.dump()));
    const int64_t last_step = read_int(state, "last_step", type_);
    const double base_lr = read_double(state, "base_lr", type_);
    const double lr = read_double(state, "lr", type_);
    const double best = read_double(state, "best", type_);
    const int64_t bad = read_int(state, "num_bad_epochs", type_);
    const int64_t cooldown = read_int(state, "cooldown_counter", type_);
    last_step_ = last_step;
    base_lr_ = base_lr;
    lr_ = lr;
    best_ = best;
    num_bad_epochs_ = bad;
    cooldown_counter_ = cooldown;
    history_ = std::move(parsed);
  }

 private:
  double worst() const {
    return mode_max_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }

  bool is_better(double a, double best) const {
    if (!mode_max_ && threshold_rel_) return a < best * (1. - threshold_);
    if (!mode_max_) return a < best - threshold_;
    if (threshold_rel_) return a > best * (threshold_ + 1.);
    return a > best + threshold_;
  }

  // _reduce_lr: new = max(old * factor, min_lr) with Python's max, applied only if it moves by > eps.
  void reduce_lr() {
    const double old_lr = lr_;
    const double scaled = old_lr * factor_;
    const double new_lr = min_lr_ > scaled ? min_lr_ : scaled;
    if (old_lr - new_lr > eps_) {
      lr_ = new_lr;
      history_.push_back({last_step_, lr_});
    }
  }

  std::string type_;
  double base_lr_;
  bool mode_max_;
  double factor_;
  int64_t patience_;
  double threshold_;
  bool threshold_rel_;
  int64_t cooldown_;
  double min_lr_;
  double eps_;
  double lr_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_step_ = 0;
  std::vector<std::pair<int64_t, double>> history_;  // (evaluation count, rate from then on)
};

struct SchedulerEntry {
  std::vector<std::string> kwargs;  // the names lr_scheduler_kwargs may hold for this type
  std::function<std::unique_ptr<LRScheduler>(const Config&, const Kwargs&)> make;
};

// HF's TYPE_TO_SCHEDULER_FUNCTION with get_scheduler's argument handling folded in.
const std::map<std::string, SchedulerEntry>& registry() {
  static const std::map<std::string, SchedulerEntry> entries = {
      {"linear", {{}, make_linear}},
      {"cosine", {{"num_cycles"}, make_cosine}},
      {"cosine_with_restarts", {{"num_cycles"}, make_cosine_with_restarts}},
      {"polynomial", {{"lr_end", "power"}, make_polynomial}},
      {"constant", {{}, make_constant}},
      {"constant_with_warmup", {{}, make_constant_with_warmup}},
      {"inverse_sqrt", {{"timescale"}, make_inverse_sqrt}},
      {"reduce_lr_on_plateau",
       {{"mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lr", "eps", "verbose"},
        [](const Config& c, const Kwargs& kw) -> std::unique_ptr<LRScheduler> {
          return std::make_unique<PlateauScheduler>(c, kw);
        }}},
  };
  return entries;
}

}  // namespace

std::vector<std::string> LRScheduler::names() {
  std::vector<std::string> out;
  for (const auto& [name, entry] : registry()) out.push_back(name);
  return out;
}

std::unique_ptr<LRScheduler> make_lr_scheduler(const std::string& type, double base_lr, int64_t num_warmup_steps,
                                               int64_t num_training_steps, const nlohmann::json& kwargs) {
  const auto it = registry().find(type);
  if (it == registry().end())
    throw InvalidArgument(
        fmt::format("lr_scheduler_type '{}' is not a scheduler; valid: {}", type, join(LRScheduler::names())));
  if (num_warmup_steps < 0 || num_training_steps < 0)
    throw InvalidArgument(fmt::format("the {} scheduler needs num_warmup_steps ({}) and num_training_steps ({}) >= 0",
                                      type, num_warmup_steps, num_training_steps));
  if (!std::isfinite(base_lr))
    throw InvalidArgument(fmt::format("the {} scheduler's learning rate is {}", type, base_lr));
  const Kwargs kw(type, kwargs, it->second.kwargs);
  return it->second.make(Config{type, base_lr, num_warmup_steps, num_training_steps}, kw);
}

}  // namespace kiln::trainer
