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
// the backward pass), into buckets of bucket_cap_mb, the first of at most 1 MiB (as torch's). When the last gradient of
// a bucket is ready (Module's gradient-ready hook), the bucket is copied into a flat buffer and its allreduce starts on
// the communication thread while the backward pass goes on; finish() waits for all of them and writes the averages back
// into the gradients. Ranks make the same calls in the same order, so the collectives match.
//
// ZeRO (DeepSpeed's stages 1 and 2): the trainable parameters, flattened one after the other in
// the module's order, are cut into one equal range of elements per rank, as DeepSpeed partitions
// its flat buffer; each rank's Optimizer updates only its range (owned_ranges(): pieces of
// parameters) and holds only its optimizer state, 1/N of the whole. gather_parameters() then sends
// every rank's updated elements to all. Stage 1 averages the gradients with allreduce as DDP does;
// stage 2 reduce-scatters them (a bucket is a run of consecutive parameters, so each rank's part of
// it is one contiguous segment), so that each rank receives the averages of its own range only
// (half the bytes of an allreduce), and lets go of the gradients it owns no element of.
//
//   DataParallelOptions o; o.zero_stage = 2;
//   training::DataParallel ddp(module, dist::world(), o);
//   training::Optimizer optimizer(path, module, ddp.owned_ranges());
//   module({x, y}); ddp.finish();           // this rank's averaged gradients
//   optimizer.step(); ddp.gather_parameters();
#pragma once

#include <array>
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
  double bucket_cap_mb = 25;  // torch's and HF's ddp_bucket_cap_mb (DeepSpeed's reduce_bucket_size)
  int zero_stage = 0;         // 0: DDP; 1: optimizer state sharded; 2: gradients too
  // The gradient buckets' collectives start as the backward pass completes them (DeepSpeed's
  // overlap_comm), or all at finish().
  bool overlap_comm = true;
  // Stage 2: reduce-scatter (DeepSpeed's reduce_scatter, the default), or allreduce then keep
  // this rank's part.
  bool reduce_scatter = true;
  double allgather_bucket_mb = 25;  // gather_parameters' buckets (DeepSpeed's allgather_bucket_size)
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

  int zero_stage() const { return zero_stage_; }
  // Seconds this rank has waited in finish() and gather_parameters() for collectives to complete:
  // the communication the computation did not hide.
  double wait_seconds() const { return wait_seconds_; }
  // The pieces of parameters a rank updates, in the module's order: without ZeRO every trainable
  // parameter whole, on every rank.
  std::vector<ParameterRange> ranges_of(int rank) const;
  std::vector<ParameterRange> owned_ranges() const { return ranges_of(comm_->rank()); }
  // The trainable elements each rank owns (all of them on each rank without ZeRO).
  std::vector<int64_t> owned_elements() const;
  // ZeRO, after this rank's Optimizer step: every rank's updated parameters on every rank, in
  // buckets of allgather_bucket_mb. Nothing to do without ZeRO.
  void gather_parameters();

 private:
  // A run of consecutive trainable parameters (in the module's order), as they sit in `flat`.
  struct Bucket {
    std::vector<std::string> params;
    std::vector<int64_t> offsets;      // of each parameter in `flat`
    int64_t first = 0;                 // where `flat` starts in the flattened parameters
    int64_t size = 0;                  // elements
    Tensor flat;                       // float32
    size_t ready = 0;                  // gradients copied in this call
    std::vector<bool> seen;            // which, by position
    std::vector<Tensor> grads;         // the gradient tensors to write the average into
    std::shared_future<void> reduced;  // the allreduce, once started
    bool started = false;
    std::vector<size_t> counts;  // ZeRO: elements of each rank's range in `flat`, in rank order
  };
  // Buckets of at most `cap` bytes (or one parameter) over the trainable parameters, made from the
  // last parameter back when `from_end` (the order the backward pass completes them).
  std::vector<Bucket> make_buckets(int64_t cap, bool from_end) const;
  // Copies the elements [begin, end) of the flattened parameters (or gradients) into the bucket's
  // `flat` (to_flat) or back.
  void copy_range(Bucket& b, int64_t begin, int64_t end, bool to_flat, bool grads);
  bool scatters() const { return zero_stage_ >= 2 && reduce_scatter_; }
  int64_t range_begin(int rank) const { return bounds_[static_cast<size_t>(rank)]; }
  int64_t range_end(int rank) const { return bounds_[static_cast<size_t>(rank) + 1]; }
  void on_ready(const std::string& name, Tensor& grad);
  void start(Bucket& b);

  Module& module_;
  std::shared_ptr<dist::Communicator> comm_;
  std::vector<Bucket> buckets_;
  std::map<std::string, std::pair<size_t, size_t>> where_;  // parameter -> (bucket, index in it)
  std::vector<std::string> trainable_;                      // in the module's order
  std::map<std::string, int64_t> flat_offset_;              // where each starts when flattened
  std::vector<int64_t> bounds_;                             // ZeRO: rank r owns [bounds_[r], bounds_[r+1])
  std::vector<Bucket> gather_buckets_;                      // ZeRO's allgather of the parameters
  std::array<Tensor, 2> gather_flat_;                       // their buffers, in turn
  int zero_stage_ = 0;
  double wait_seconds_ = 0;
  bool overlap_ = true, reduce_scatter_ = true;
  bool sync_ = true;
};

}  // namespace kiln::training
