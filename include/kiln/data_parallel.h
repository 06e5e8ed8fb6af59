// Data-parallel training with torch DistributedDataParallel's semantics, over a
// kiln::dist::Communicator: every rank holds the whole model and trains on its own shard of each
// batch; gradients are averaged across the ranks before each optimizer step.
//
//   training::DataParallel ddp(module, dist::world());       // rank 0's parameters everywhere
//   ddp.set_sync(last_micro_step);                            // no_sync() for the others
//   module({x, y});                                           // buckets are reduced as the
//   ddp.finish();                                             //   backward completes them
//   optimizer.step();
//
// The trainable parameters are packed, in reverse order (the order their gradients come out of
// the backward pass), into buckets of bucket_cap_mb. When the last gradient of a bucket is ready
// (Module's gradient-ready hook), the bucket is copied into a flat buffer and its allreduce starts
// on the communication thread while the backward pass goes on; finish() waits for all of them and
// writes the averages back into the gradients. Ranks make the same calls in the same order, so the
// collectives match.
#pragma once

#include <cstddef>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/distributed.h"
#include "kiln/training.h"

namespace kiln::training {

struct DataParallelOptions {
  double bucket_cap_mb = 25;  // torch's and HF's ddp_bucket_cap_mb
};

class DataParallel {
 public:
  // Checks that every rank has the same trainable parameters (names, shapes: InvalidArgument naming
  // the first difference), broadcasts rank 0's parameters and buffers (torch DDP does at
  // construction) and installs the gradient hook on `module`.
  DataParallel(Module& module, std::shared_ptr<dist::Communicator> comm, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Whether the next training calls reduce their gradients (true, the default) or only accumulate
  // them locally (torch's no_sync(), for the micro-steps of gradient accumulation but the last).
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  // After a synced training call: reduces what the hook did not start (a parameter the call gave
  // no gradient: zeros), waits for every bucket, and writes each averaged gradient back.
  void finish();
  // Rank 0's values of the module's non-trainable parameters (BatchNorm's running statistics) on
  // every rank: DDP's broadcast_buffers, before each forward.
  void broadcast_buffers();
  // Rank 0's values of every parameter, trainable or not, on every rank.
  void broadcast_parameters();

  const dist::Communicator& communicator() const { return *comm_; }
  size_t num_buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::vector<std::string> params;   // in the order they sit in `flat`
    std::vector<int64_t> offsets;      // of each parameter in `flat`
    int64_t size = 0;                  // elements
    Tensor flat;                       // float32
    size_t ready = 0;                  // gradients copied in this call
    std::vector<bool> seen;            // which, by position
    std::vector<Tensor> grads;         // the gradient tensors to write the average into
    std::shared_future<void> reduced;  // the allreduce, once started
    bool started = false;
  };
  void on_ready(const std::string& name, Tensor& grad);
  void start(Bucket& b);

  Module& module_;
  std::shared_ptr<dist::Communicator> comm_;
  std::vector<Bucket> buckets_;
  std::map<std::string, std::pair<size_t, size_t>> where_;  // parameter -> (bucket, index in it)
  bool sync_ = true;
};

}  // namespace kiln::training
