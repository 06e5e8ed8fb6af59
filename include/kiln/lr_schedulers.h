// Learning-rate schedulers with the Hugging Face Trainer's names, kwargs and exact formulas
// (transformers/optimization.py, get_scheduler), and gradient clipping by global norm.
//
//   using namespace kiln::trainer;
//   auto sched = make_lr_scheduler("cosine", 5e-5, /*num_warmup_steps=*/100, /*num_training_steps=*/1000,
//                                  {{"num_cycles", 0.5}});
//   for (int64_t s = 0; s < 1000; ++s) {
//     optimizer.set_learning_rate(sched->current_lr());   // the rate for optimizer step s
//     ... forward, backward ...
//     double norm = clip_grad_norm(grads, 1.0);          // torch.nn.utils.clip_grad_norm_
//     optimizer.step();
//     sched->step();                                     // as the HF Trainer does after each optimizer step
//   }
//   nlohmann::json saved = sched->state();               // scheduler.pt in a checkpoint
//
// Step-driven schedules are torch's LambdaLR over HF's lambdas: lr(step) = base_lr * lambda(step),
// where `step` counts scheduler.step() calls (0 right after construction). reduce_lr_on_plateau is
// torch.optim.lr_scheduler.ReduceLROnPlateau: it moves only when step(metric) is called with an
// evaluation metric (steps_on_metric() is true), as the HF Trainer does after each evaluation.
//
// All arithmetic is in double, in the order Python evaluates HF's expressions, so the rates equal
// HF's bit for bit (the Python parity test checks every step to 1e-12 relative).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::trainer {

class LRScheduler {
 public:
  virtual ~LRScheduler();

  // The registered type name ("linear", "cosine", ..., "reduce_lr_on_plateau").
  virtual const std::string& type() const = 0;
  // The learning rate of the optimizer's first parameter group before any schedule (HF's
  // optimizer.defaults["lr"], torch's base_lrs[0]).
  virtual double base_lr() const = 0;
  // The rate for optimizer step `step` (0-based): what torch's scheduler gives after `step`
  // scheduler.step() calls. reduce_lr_on_plateau counts evaluations instead of steps: the rate after
  // `step` evaluations, taken from its history for past ones and the current rate for later ones.
  virtual double lr(int64_t step) const = 0;
  // Advances one step. Step-driven schedules take no metric (InvalidArgument if one is given);
  // reduce_lr_on_plateau needs one (InvalidArgument without).
  virtual void step(std::optional<double> metric = std::nullopt) = 0;
  // lr(last_step()): the rate to use now.
  virtual double current_lr() const = 0;
  // Number of step() calls so far (torch's last_epoch), restored by load_state.
  virtual int64_t last_step() const = 0;
  // True for reduce_lr_on_plateau: the Trainer steps it with the evaluation metric, not per step.
  virtual bool steps_on_metric() const { return false; }

  // Everything that changes while training, as JSON; load_state into a scheduler built with the
  // same type continues bit for bit. Like torch's load_state_dict, the state carries base_lr and the
  // counters; warmup/total steps and kwargs come from the constructor (a resumed run may change them).
  // Non-finite doubles (ReduceLROnPlateau's initial best = inf) are stored as "inf", "-inf", "nan".
  virtual nlohmann::json state() const = 0;
  // InvalidArgument if the state is of another type or malformed (naming the missing/bad field).
  virtual void load_state(const nlohmann::json& state) = 0;

  // The registered type names, sorted.
  static std::vector<std::string> names();
};

// HF's get_scheduler(type, optimizer with lr=base_lr, num_warmup_steps, num_training_steps,
// scheduler_specific_kwargs=kwargs). kwargs per type (HF's names and defaults):
//   linear: none                         cosine: num_cycles=0.5
//   cosine_with_restarts: num_cycles=1   polynomial: lr_end=1e-7, power=1.0 (base_lr must be > lr_end)
//   constant: none (ignores warmup)      constant_with_warmup: none
//   inverse_sqrt: timescale (integer > 0; default num_warmup_steps, or 10000 when that is 0)
//   reduce_lr_on_plateau: mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
//     cooldown=0, min_lr=0, eps=1e-8, verbose=false (accepted, prints nothing); ignores warmup/total.
// An unknown type or kwarg, a kwarg of the wrong JSON type, negative step counts, or a value torch/HF
// reject (factor >= 1, lr_end >= base_lr, ...) is an InvalidArgument listing what is valid.
// Deviations from HF, both stricter: HF's get_scheduler silently drops kwargs for constant,
// constant_with_warmup and inverse_sqrt (Kiln rejects unknown ones and honours inverse_sqrt's
// timescale); HF's polynomial divides by zero at step num_training_steps when it equals
// num_warmup_steps (Kiln rejects that configuration at construction).
std::unique_ptr<LRScheduler> make_lr_scheduler(const std::string& type, double base_lr, int64_t num_warmup_steps,
                                               int64_t num_training_steps, const nlohmann::json& kwargs = {});

// torch.nn.utils.clip_grad_norm_(grads, max_norm, norm_type=2.0, error_if_nonfinite=False):
// total = sqrt(sum over tensors of ||g||^2), each ||g|| computed first (torch's norm of norms), in
// double; clip_coef = max_norm / (total + 1e-6), clamped to at most 1 and multiplied into every
// gradient in place unless it is exactly 1 (a NaN total makes the gradients NaN and an infinite one
// zeroes them, as torch does). Returns the total norm (inf/nan as is). An empty list returns 0.
// Gradients: contiguous float32, float64, float16 or bfloat16 tensors (mixed dtypes allowed); the
// sums of squares run on kiln's threads in fixed-size blocks, so the result does not depend on the
// thread count. Null/undefined/non-contiguous tensors and negative or NaN max_norm are
// InvalidArgument; integer gradients a TypeError, each naming the gradient's index.
double clip_grad_norm(const std::vector<Tensor*>& grads, double max_norm);
// The same over gradients split between the ranks of a distributed run (ZeRO: each rank holds its
// parameters' gradients): `sum_over_ranks` turns this rank's sum of squares into the sum over all
// ranks (an allreduce), so that every rank clips by the global norm.
double clip_grad_norm(const std::vector<Tensor*>& grads, double max_norm,
                      const std::function<double(double)>& sum_over_ranks);

}  // namespace kiln::trainer
