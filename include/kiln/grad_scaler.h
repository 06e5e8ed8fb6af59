// Dynamic loss scaling for float16 mixed precision, with torch.cuda.amp.GradScaler's semantics (the
// Hugging Face Trainer's fp16=True uses it): the backward pass is seeded with the scale, so that
// small gradients survive float16; before the optimizer step the gradients are unscaled and
// checked; a step whose gradients are not all finite is skipped and the scale multiplied by
// backoff_factor; after growth_interval finite steps in a row it is multiplied by growth_factor.
//
//   kiln::training::GradScaler scaler;                      // 2^16, x2 every 2000, x0.5 on overflow
//   module.set_loss_scale(scaler.scale());
//   module(batch);                                          // gradients scaled by 65536
//   const bool skip = scaler.unscale(grads);                // divided back, true when not finite
//   if (!skip) optimizer.step();
//   scaler.update(skip);
//   module.set_loss_scale(scaler.scale());
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::training {

class Module;

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  // false: the scale never changes (IPUConfig's fixed loss_scaling; its auto_loss_scaling is the
  // dynamic default). Updates whose gradients are not finite are still skipped.
  bool dynamic = true;
  // DeepSpeed's fp16 loss scaler (its config's fp16 section): the scale backs off only at the
  // hysteresis-th overflow since it last grew (1: at every overflow, torch's rule), or, with
  // consecutive_hysteresis, since the last finite step; it never goes below min_scale.
  int64_t hysteresis = 1;
  bool consecutive_hysteresis = false;
  double min_scale = 0;
};

class GradScaler {
 public:
  // InvalidArgument for a scale that is not finite and > 0, a growth factor <= 1, a backoff factor
  // outside (0, 1), or an interval < 1 (torch's rules).
  explicit GradScaler(GradScalerOptions options = {});

  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  const GradScalerOptions& options() const { return options_; }

  // Multiplies every gradient by factor / scale() in place (factor: 1 / accumulation steps, say)
  // and returns whether any element is infinite or NaN (torch's found_inf). float32 gradients.
  bool unscale(const std::vector<Tensor*>& grads, double factor = 1.0) const;
  // The same over the accumulated gradients of a Module's trainable parameters.
  bool unscale(Module& module, double factor = 1.0) const;
  // torch's update(): backoff on found_inf (the tracker restarts), else count the finite step and
  // grow the scale when the count reaches growth_interval. Nothing when not dynamic. With a
  // hysteresis of h > 1, the first h - 1 overflows only restart the count (DeepSpeed's).
  void update(bool found_inf);

  // torch's state_dict keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker;
  // with DeepSpeed's options also hysteresis, _hysteresis_left, min_scale.
  nlohmann::json state_dict() const;
  // CorruptFile naming the key for a missing or bad value. `dynamic` is not part of the state.
  void load_state_dict(const nlohmann::json& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_left_ = 1;
};

}  // namespace kiln::training
