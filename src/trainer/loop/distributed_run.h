// What the Trainer does differently as one of several ranks (`mpirun -np N kiln train ...`), with
// the HF Trainer's and torch DDP's semantics: the run's communicator and DataParallel, the checks
// that every rank starts from the same arguments and parameters, reductions of what it logs, and
// the gathering of a sharded evaluation in dataset order. A run of one rank has comm->size() 1 and
// no DataParallel; every function here is then the identity.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/data_parallel.h"
#include "kiln/deepspeed_config.h"
#include "kiln/distributed.h"
#include "kiln/tensor.h"
#include "kiln/training_args.h"

namespace kiln::trainer {

struct DistributedRun {
  std::shared_ptr<dist::Communicator> comm;
  std::unique_ptr<training::DataParallel> ddp;
  bool broadcast_buffers = true;
  int zero_stage = 0;  // DeepSpeed's ZeRO stage (0 without a config)

  // Pipeline parallelism (an IPUConfig of several stages): rank r runs stage r % stages of replica
  // r / stages; `pipeline` holds the ranks of its replica (rank s: stage s), `stage_ranks` those of
  // its stage in every replica (data parallelism between replicas).
  int stages = 1, stage = 0, replica = 0;
  std::shared_ptr<dist::Communicator> pipeline, stage_ranks;
  bool pipelined() const { return stages > 1; }
  // The share of the data this rank trains on: its replica's.
  int data_rank() const { return pipelined() ? replica : rank(); }
  int data_size() const { return pipelined() ? size() / stages : size(); }

  bool distributed() const { return comm && comm->size() > 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
  // The mean of `value` over the ranks (the losses HF logs: _nested_gather(tr_loss).mean()).
  double mean(double value) const;
  // Whether `value` holds on every rank (a non-finite loss on one rank skips the update on all).
  bool all(bool value) const;
  // The sum of `value` over the ranks.
  double sum(double value) const;
  // ZeRO with several ranks: each rank updates its own parameters only.
  bool sharded() const { return ddp && ddp->zero_stage() > 0; }
  void barrier() const;
};

// The communicator (dist::world(), its timeout set from ddp_timeout), the OpenMP threads per rank
// (the cores over the ranks on this host, unless OMP_NUM_THREADS says), and the check that every
// rank was given the same arguments (InvalidArgument naming the fields that differ).
DistributedRun open_distributed_run(const TrainingArguments& args);

// Splits the world into pipelines of `stages` ranks and the stages' groups across them.
void open_pipeline(DistributedRun& run, int stages);

// FNV-1a over a tensor's bytes: equal tensors give equal sums on every rank.
uint64_t tensor_checksum(const Tensor& t);

// Every rank's forward model must be the same ([[initializer, checksum], ...] from
// prepare_artifacts): InvalidArgument naming the first initializer that differs.
void check_same_model(const DistributedRun& run, const nlohmann::json& fingerprint);

// After the Module exists: every rank's parameters must be the same (InvalidArgument naming the
// first that differs, by checksum); then the DataParallel that averages the gradients, with the
// DeepSpeed config's ZeRO stage and buckets when there is one.
void start_data_parallel(DistributedRun& run, training::Module& module, const TrainingArguments& args,
                         const DeepSpeedConfig* deepspeed);

// Evaluation shards the dataset without padding: rank r takes items r, r + N, ... Each rank's
// outputs, concatenated along dim 0 in its order, put back in dataset order on every rank.
// Undefined parts (a rank with nothing to give) are skipped.
Tensor gather_in_dataset_order(const DistributedRun& run, const Tensor& mine);

}  // namespace kiln::trainer
