// IPUTrainingArguments' compile_only: every graph of the run planned for its batch shapes (the
// training model on the first training batch, the eval model on the first eval batch, the optimizer
// model), each plan's size reported, and no step taken.
#pragma once

#include "kiln/data.h"
#include "trainer/loop/trainer_impl.h"

namespace kiln::trainer {

// Plans the run's graphs and returns what a train() that stopped before its first step returns:
// global_step 0, and metrics with each plan's arena bytes ("train_plan_bytes", "eval_plan_bytes",
// "optimizer_plan_bytes") and the seconds planning took ("compile_seconds").
TrainOutput compile_only(Trainer::Impl& m, const TrainingArguments& args, const data::DataLoader& train_loader);

}  // namespace kiln::trainer
