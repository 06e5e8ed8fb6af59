// The Trainer as one of several ranks (distributed_run.h).
#include "trainer/loop/distributed_run.h"

#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "core/content_hash.h"
#include "kiln/error.h"
#include "kiln/npy.h"
#include "trainer/loop/gather.h"

namespace kiln::trainer {
namespace {

// The arguments every rank must share: all of them but local_rank, which the launcher sets per rank,
// and logging_dir, whose default carries the time the rank started (only rank 0 reports there).
nlohmann::json shared_arguments(const TrainingArguments& args) {
  nlohmann::json j = args.to_json();
  j.erase("local_rank");
  j.erase("logging_dir");
  return j;
}

// The first entry of [[name, checksum], ...] lists that differ between rank 0 and the others:
// InvalidArgument saying what differs in `what`.
void check_same(const DistributedRun& run, const nlohmann::json& mine, const char* what) {
  const std::vector<std::string> all = run.comm->allgather(mine.dump());
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const nlohmann::json first = nlohmann::json::parse(all[0]), other = nlohmann::json::parse(all[r]);
    for (size_t i = 0; i < first.size(); ++i)
      if (i >= other.size() || other[i] != first[i])
        throw InvalidArgument(fmt::format(
            "rank {} starts from another model than rank 0: {} '{}' differs (checksum {} against {}); every rank "
            "must load the same model, checkpoint and seed",
            r, what, first[i][0].get<std::string>(), i < other.size() ? other[i][1].dump() : "none",
            first[i][1].dump()));
    throw InvalidArgument(fmt::format("rank {} starts from another model than rank 0: it has more {}s", r, what));
  }
}

}  // namespace

uint64_t tensor_checksum(const Tensor& t) {
  const Tensor packed = t.contiguous();
  return fnv1a(std::string_view(static_cast<const char*>(packed.raw_data()), packed.nbytes()));
}

void check_same_model(const DistributedRun& run, const nlohmann::json& fingerprint) {
  if (run.distributed()) check_same(run, fingerprint, "initializer");
}

double DistributedRun::mean(double value) const {
  if (!distributed()) return value;
  comm->allreduce_sum(&value, 1);
  return value / static_cast<double>(comm->size());
}

bool DistributedRun::all(bool value) const {
  if (!distributed()) return value;
  double failed = value ? 0.0 : 1.0;
  comm->allreduce_sum(&failed, 1);
  return failed == 0.0;
}

double DistributedRun::sum(double value) const {
  if (distributed()) comm->allreduce_sum(&value, 1);
  return value;
}

void DistributedRun::barrier() const {
  if (distributed()) comm->barrier();
}

DistributedRun open_distributed_run(const TrainingArguments& args) {
  DistributedRun run;
  dist::set_timeout(static_cast<double>(args.ddp_timeout));
  run.comm = dist::world();
  run.broadcast_buffers = args.ddp_broadcast_buffers.value_or(true);
  if (!run.distributed()) return run;
  // Cores per rank: the host's (this process's affinity) over its ranks, unless the user said.
  if (std::getenv("OMP_NUM_THREADS") == nullptr)
    omp_set_num_threads(std::max(1, omp_get_num_procs() / std::max(1, run.comm->local_size())));
  const std::string mine = shared_arguments(args).dump();
  const std::vector<std::string> all = run.comm->allgather(mine);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const nlohmann::json first = nlohmann::json::parse(all[0]), other = nlohmann::json::parse(all[r]);
    std::string fields;
    for (auto it = first.begin(); it != first.end(); ++it)
      if (!other.contains(it.key()) || other[it.key()] != it.value())
        fields += fmt::format("{}{} ({} on rank 0, {} on rank {})", fields.empty() ? "" : ", ", it.key(),
                              it.value().dump(), other.value(it.key(), nlohmann::json()).dump(), r);
    throw InvalidArgument(fmt::format("rank {} was started with other arguments than rank 0: {}", r, fields));
  }
  return run;
}

void open_pipeline(DistributedRun& run, int stages) {
  if (stages <= 1) return;
  if (run.size() % stages != 0)
    throw InvalidArgument(fmt::format("a pipeline of {} stages needs a multiple of {} ranks; the run has {}", stages,
                                      stages, run.size()));
  run.stages = stages;
  run.stage = run.rank() % stages;
  run.replica = run.rank() / stages;
  run.pipeline = run.comm->split(run.replica, run.stage);
  run.stage_ranks = run.comm->split(run.stage, run.replica);
}

void start_data_parallel(DistributedRun& run, training::Module& module, const TrainingArguments& args,
                         const DeepSpeedConfig* deepspeed) {
  if (run.pipelined()) {  // replicas of each stage average their gradients; stages hold different parameters
    if (deepspeed && deepspeed->zero_stage > 0)
      throw Unsupported("ZeRO with pipeline stages: shard the optimizer state of unpipelined runs only");
    if (run.stage_ranks->size() <= 1) return;
    training::DataParallelOptions o;
    o.bucket_cap_mb = static_cast<double>(args.ddp_bucket_cap_mb.value_or(25));
    run.ddp = std::make_unique<training::DataParallel>(module, run.stage_ranks, o);
    return;
  }
  if (!run.distributed()) return;
  training::CheckpointState& state = module.state();
  nlohmann::json sums = nlohmann::json::array();
  for (const auto& name : module.parameter_names())
    sums.push_back({name, state.parameter(name).has_data() ? tensor_checksum(state.parameter(name).data()) : 0});
  check_same(run, sums, "parameter");
  training::DataParallelOptions o;
  o.bucket_cap_mb = static_cast<double>(args.ddp_bucket_cap_mb.value_or(25));
  if (deepspeed) {  // DeepSpeed's sizes are in elements (float32 here)
    constexpr double kMb = 1024.0 * 1024.0;
    o.zero_stage = deepspeed->zero_stage;
    o.bucket_cap_mb = static_cast<double>(deepspeed->reduce_bucket_size) * 4 / kMb;
    o.allgather_bucket_mb = static_cast<double>(deepspeed->allgather_bucket_size) * 4 / kMb;
    o.overlap_comm = deepspeed->overlap_comm;
    o.reduce_scatter = deepspeed->reduce_scatter;
    run.zero_stage = deepspeed->zero_stage;
    if (o.zero_stage > 0 && args.save_on_each_node)
      throw Unsupported(
          "save_on_each_node with ZeRO: every rank writes its optimizer shard into the checkpoint folder, which "
          "must be on a file system all ranks share");
  }
  run.ddp = std::make_unique<training::DataParallel>(module, run.comm, o);
  if (args.ddp_sync_batchnorm) {
    std::shared_ptr<dist::Communicator> comm = run.comm;
    module.set_batch_norm_sync([comm](double* values, size_t n) { comm->allreduce_sum(values, n); });
  }
}

Tensor gather_in_dataset_order(const DistributedRun& run, const Tensor& mine) {
  if (!run.distributed()) return mine;
  const std::vector<std::string> parts = run.comm->allgather(mine.defined() ? serialize_npy(mine) : std::string());
  std::vector<Tensor> tensors;
  std::vector<int64_t> rows;  // per rank
  for (size_t r = 0; r < parts.size(); ++r) {
    if (parts[r].empty()) {
      rows.push_back(0);
      continue;
    }
    tensors.push_back(parse_npy(parts[r], fmt::format("rank {}'s predictions", r)));
    rows.push_back(tensors.back().rank() == 0 ? 1 : tensors.back().dim(0));
  }
  Tensor stacked = concat_padded(tensors);  // rank after rank
  if (!stacked.defined()) return stacked;
  // Dataset item i sits on rank i % N, at row i / N of its part.
  const auto n = static_cast<int64_t>(parts.size());
  std::vector<int64_t> first(parts.size(), 0);
  for (size_t r = 1; r < parts.size(); ++r) first[r] = first[r - 1] + rows[r - 1];
  const int64_t total = stacked.dim(0);
  Tensor out = Tensor::empty(stacked.dtype(), stacked.shape());
  const size_t row_bytes = total == 0 ? 0 : stacked.nbytes() / static_cast<size_t>(total);
  const auto* src = static_cast<const char*>(stacked.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t i = 0; i < total; ++i) {
    const int64_t from = first[static_cast<size_t>(i % n)] + i / n;
    std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(from) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace kiln::trainer
