// One call into the engine: IPUConfig's device_iterations updates with their batches staged up front,
// and, for a pipelined run, each accumulation group's micro-batches sent through the stages.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kiln/error.h"
#include "trainer/loop/batch_padding.h"
#include "trainer/loop/train_run.h"
#include "training/tensor_math.h"

namespace kiln::trainer {

// The micro-batches [first, end) of the epoch: their batches collated (and padded) first, then
// trained on, an optimizer update at the end of each accumulation group.
void TrainRun::run_call(int64_t epoch, int64_t first, int64_t end) {
  const int64_t accum = schedule_.accum, len = schedule_.len_dataloader;
  std::vector<data::Example> batches;
  std::vector<int64_t> rows;
  for (int64_t step = first; step < end; ++step) {
    batches.push_back(prefetch_ ? prefetch_->next() : loader_.batch(epoch, static_cast<size_t>(step)));
    rows.push_back(args_.pad_on_batch_axis
                       ? pad_batch(batches.back(), args_.per_device_train_batch_size, label_columns(args_))
                       : batches.back().begin()->second.dim(0));
  }
  due_ = TrainerControl();
  call_loss_ = 0;
  int64_t group_start = first;
  for (int64_t step = first; step < end; ++step) {
    const bool ends_group = (step + 1) % accum == 0 || step + 1 == len;
    quiet_ = last_only_ && step + 1 < end;  // every update but the call's last, under "final" / "sum"
    if (step % accum == 0 && (!last_only_ || step == first)) cb_.call(&TrainerCallback::on_step_begin, args_, state_);
    const size_t i = static_cast<size_t>(step - first);
    if (m_.pipeline) {  // the group's micro-batches go through the stages together
      if (!ends_group) continue;
      const auto b = static_cast<std::ptrdiff_t>(group_start - first), e = static_cast<std::ptrdiff_t>(i + 1);
      train_pipelined_group({batches.begin() + b, batches.begin() + e}, {rows.begin() + b, rows.begin() + e});
      group_start = step + 1;
    } else {
      const double loss = train_batch(batches[i], ends_group, rows[i]);
      if (!ends_group && !last_only_) {
        CallbackContext ctx;
        ctx.loss = loss;
        cb_.call(&TrainerCallback::on_substep_end, args_, state_, ctx);
      }
    }
    if (ends_group) {
      optimizer_update(epoch, step);
      if (quiet_) {
        note_due_events();
        continue;
      }
      // The events due at the updates the callbacks did not see.
      cb_.control.should_log = cb_.control.should_log || due_.should_log;
      cb_.control.should_evaluate = cb_.control.should_evaluate || due_.should_evaluate;
      cb_.control.should_save = cb_.control.should_save || due_.should_save;
      maybe_log_save_evaluate();
    }
    if (cb_.control.should_epoch_stop || cb_.control.should_training_stop) break;
  }
  quiet_ = false;
}

// What HF's DefaultFlowCallback would ask for at this update, kept for the end of the call.
void TrainRun::note_due_events() {
  const int64_t step = state_.global_step;
  if (args_.logging_strategy == IntervalStrategy::steps && step % state_.logging_steps == 0) due_.should_log = true;
  if (args_.eval_strategy == IntervalStrategy::steps && step % state_.eval_steps == 0 && args_.eval_delay <= step)
    due_.should_evaluate = true;
  if (args_.save_strategy == SaveStrategy::steps && state_.save_steps > 0 && step % state_.save_steps == 0)
    due_.should_save = true;
}

// An accumulation group through the pipeline: every stage's gradients accumulate over the group's
// micro-batches (reduced across replicas on the last one), the shared parameters' gradients are
// summed over the stages that hold them, and each micro-batch's loss (the last stage's, broadcast)
// enters the logs as a micro-batch of one process would.
void TrainRun::train_pipelined_group(const std::vector<data::Example>& batches, const std::vector<int64_t>& rows) {
  training::DataParallel* ddp = m_.dist.ddp.get();
  if (ddp) ddp->set_sync(false);
  const std::vector<double> losses = m_.pipeline->train(batches, [ddp] {
    if (ddp) ddp->set_sync(true);
  });
  if (ddp) ddp->finish();
  m_.pipeline_compute += m_.pipeline->compute_seconds();
  m_.pipeline_wait += m_.pipeline->wait_seconds();
  m_.pipeline->reduce_shared_gradients();
  for (size_t i = 0; i < batches.size(); ++i) account(batches[i], losses[i], rows[i]);
}

// Clipping by the norm over every stage's gradients, a shared parameter's counted once (by the first
// stage that holds it); every stage scales its own by the same coefficient.
double TrainRun::clip_pipelined(double max_norm) {
  const training::StageInfo& info = m_.pipeline->info();
  std::set<std::string> counted_elsewhere;
  for (const auto& x : info.shared)
    if (x.stages.front() != info.index) counted_elsewhere.insert(x.name);
  std::vector<Tensor*> counted, others;
  for (const auto& name : m_.module->parameter_names()) {
    training::Parameter& p = m_.state->parameter(name);
    if (!p.requires_grad() || !p.grad().defined()) continue;
    (counted_elsewhere.count(name) ? others : counted).push_back(&p.grad());
  }
  const double norm = clip_grad_norm(counted, max_norm, [this](double s) { return m_.pipeline->sum(s); });
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  if (coef != 1.0)
    for (Tensor* g : others) training::scale_in_place(*g, coef);
  return norm;
}

}  // namespace kiln::trainer
