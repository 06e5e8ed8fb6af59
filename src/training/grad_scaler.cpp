// Dynamic loss scaling (kiln/grad_scaler.h), as torch.cuda.amp.GradScaler.
#include "kiln/grad_scaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/parallel.h"
#include "kiln/error.h"
#include "kiln/training.h"

namespace kiln::training {

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(options.init_scale), hysteresis_left_(options.hysteresis) {
  if (!(options.init_scale > 0) || !std::isfinite(options.init_scale))
    throw InvalidArgument(fmt::format("GradScaler: init_scale must be finite and > 0, got {}", options.init_scale));
  if (!(options.growth_factor > 1.0))
    throw InvalidArgument(fmt::format("GradScaler: growth_factor must be > 1, got {}", options.growth_factor));
  if (!(options.backoff_factor > 0.0 && options.backoff_factor < 1.0))
    throw InvalidArgument(fmt::format("GradScaler: backoff_factor must be in (0, 1), got {}", options.backoff_factor));
  if (options.growth_interval < 1)
    throw InvalidArgument(fmt::format("GradScaler: growth_interval must be >= 1, got {}", options.growth_interval));
  if (options.hysteresis < 1)
    throw InvalidArgument(fmt::format("GradScaler: hysteresis must be >= 1, got {}", options.hysteresis));
  if (!(options.min_scale >= 0) || !(options.min_scale <= options.init_scale))
    throw InvalidArgument(fmt::format("GradScaler: min_scale must be in [0, init_scale {}], got {}", options.init_scale,
                                      options.min_scale));
}

bool GradScaler::unscale(const std::vector<Tensor*>& grads, double factor) const {
  const float multiplier = static_cast<float>(factor / scale_);
  bool found_inf = false;
  for (Tensor* g : grads) {
    if (g == nullptr || !g->defined()) continue;
    if (g->dtype() != DType::Float32 || !g->is_contiguous())
      throw TypeError(fmt::format("GradScaler::unscale: gradients must be contiguous float32, got {}", g->describe()));
    float* p = g->data<float>();
    std::atomic<bool> bad_here{false};
    parallel_for(g->numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      bool bad = false;
      for (int64_t i = begin; i < end; ++i) {
        p[i] *= multiplier;
        bad = bad || !std::isfinite(p[i]);
      }
      if (bad) bad_here = true;
    });
    found_inf = found_inf || bad_here;
  }
  return found_inf;
}

bool GradScaler::unscale(Module& module, double factor) const {
  std::vector<Tensor*> grads;
  for (const auto& name : module.parameter_names()) {
    Parameter& p = module.state().parameter(name);
    if (p.requires_grad() && p.grad().defined()) grads.push_back(&p.grad());
  }
  return unscale(grads, factor);
}

void GradScaler::update(bool found_inf) {
  if (!options_.dynamic) return;
  if (found_inf) {
    if (hysteresis_left_ > 1) --hysteresis_left_;
    else scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    growth_tracker_ = 0;
    return;
  }
  if (options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
  if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
    hysteresis_left_ = options_.hysteresis;
  }
}

nlohmann::json GradScaler::state_dict() const {
  nlohmann::json j{{"scale", scale_},
                   {"growth_factor", options_.growth_factor},
                   {"backoff_factor", options_.backoff_factor},
                   {"growth_interval", options_.growth_interval},
                   {"_growth_tracker", growth_tracker_}};
  if (options_.hysteresis > 1 || options_.min_scale > 0) {
    j["hysteresis"] = options_.hysteresis;
    j["_hysteresis_left"] = hysteresis_left_;
    j["min_scale"] = options_.min_scale;
  }
  return j;
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  auto number = [&](const char* key) {
    if (!state.contains(key) || !state[key].is_number())
      throw CorruptFile(fmt::format("GradScaler state: '{}' is missing or not a number", key));
    return state[key].get<double>();
  };
  GradScalerOptions o = options_;
  o.growth_factor = number("growth_factor");
  o.backoff_factor = number("backoff_factor");
  o.growth_interval = static_cast<int64_t>(number("growth_interval"));
  o.init_scale = number("scale");
  if (state.contains("hysteresis")) {
    o.hysteresis = static_cast<int64_t>(number("hysteresis"));
    o.min_scale = number("min_scale");
  }
  const double tracker = number("_growth_tracker");
  const double left = state.contains("_hysteresis_left") ? number("_hysteresis_left") : 1.0;
  if (tracker < 0 || tracker >= static_cast<double>(o.growth_interval) || tracker != std::floor(tracker))
    throw CorruptFile(fmt::format("GradScaler state: '_growth_tracker' {} is not in [0, growth_interval)", tracker));
  try {
    *this = GradScaler(o);
  } catch (const InvalidArgument& e) {
    throw CorruptFile(fmt::format("GradScaler state: {}", e.what()));
  }
  if (left < 1 || left > static_cast<double>(o.hysteresis) || left != std::floor(left))
    throw CorruptFile(fmt::format("GradScaler state: '_hysteresis_left' {} is not in [1, hysteresis]", left));
  growth_tracker_ = static_cast<int64_t>(tracker);
  hysteresis_left_ = static_cast<int64_t>(left);
}

}  // namespace kiln::training
