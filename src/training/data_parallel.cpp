// Data-parallel gradient averaging in buckets (kiln/data_parallel.h).
#include "kiln/data_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "kiln/error.h"

namespace kiln::training {
namespace {

// The trainable parameters' names and shapes, as one line every rank can compare.
std::string signature(const Module& module, CheckpointState& state) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& name : module.parameter_names()) {
    const Parameter& p = state.parameter(name);
    j.push_back({name, p.requires_grad(), p.shape(), dtype_name(p.dtype())});
  }
  return j.dump();
}

// Waits for a collective at most ddp_timeout; past that the other ranks are gone or stuck, and
// the whole job ends.
void wait_or_abort(dist::Communicator& comm, const std::shared_future<void>& done, const char* what) {
  const auto limit = std::chrono::duration<double>(dist::timeout());
  if (done.wait_for(limit) != std::future_status::ready)
    comm.abort(fmt::format("a {} waited more than {} s for the other ranks (ddp_timeout): a rank died or hung", what,
                           dist::timeout()));
  done.get();
}

}  // namespace

DataParallel::DataParallel(Module& module, std::shared_ptr<dist::Communicator> comm, DataParallelOptions options)
    : module_(module),
      comm_(std::move(comm)),
      zero_stage_(options.zero_stage),
      overlap_(options.overlap_comm),
      reduce_scatter_(options.reduce_scatter) {
  if (!comm_) throw InvalidArgument("DataParallel needs a communicator");
  if (!(options.bucket_cap_mb > 0))
    throw InvalidArgument(fmt::format("ddp_bucket_cap_mb must be > 0, got {}", options.bucket_cap_mb));
  if (!(options.allgather_bucket_mb > 0))
    throw InvalidArgument(fmt::format("the allgather bucket size must be > 0 MB, got {}", options.allgather_bucket_mb));
  if (zero_stage_ == 3)
    throw Unsupported(
        "ZeRO stage 3 (parameters sharded too) is not implemented; stages 0 (data parallel), 1 (optimizer state "
        "sharded) and 2 (gradients too) are");
  if (zero_stage_ < 0 || zero_stage_ > 3)
    throw InvalidArgument(fmt::format("ZeRO stage {}: DeepSpeed's stages are 0 to 3", zero_stage_));
  CheckpointState& state = module_.state();
  const std::string mine = signature(module_, state);
  const std::vector<std::string> all = comm_->allgather(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      throw InvalidArgument(fmt::format(
          "rank {} trains other parameters than rank 0 (names, shapes or dtypes differ): every rank must load the "
          "same model; rank 0: {} ... rank {}: {}",
          r, all[0].substr(0, 200), r, all[r].substr(0, 200)));
  int64_t total = 0;
  for (const auto& name : module_.parameter_names()) {
    const Parameter& p = state.parameter(name);
    if (!p.requires_grad()) continue;
    if (p.dtype() != DType::Float32)
      throw Unsupported(fmt::format("data parallel training of parameter '{}' in {}: float32 parameters only", name,
                                    dtype_name(p.dtype())));
    trainable_.push_back(name);
    flat_offset_[name] = total;
    total += numel(p.shape());
  }
  // ZeRO's ranges: equal, the last ones shorter when the total does not divide (DeepSpeed pads).
  const auto n = static_cast<int64_t>(comm_->size());
  const int64_t chunk = (total + n - 1) / n;
  for (int64_t r = 0; r <= n; ++r) bounds_.push_back(std::min(total, r * chunk));
  buckets_ = make_buckets(static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024), true);
  for (size_t k = 0; k < buckets_.size(); ++k)
    for (size_t i = 0; i < buckets_[k].params.size(); ++i) where_[buckets_[k].params[i]] = {k, i};
  if (zero_stage_ > 0) {  // two buffers of the largest bucket, taken in turn
    gather_buckets_ = make_buckets(static_cast<int64_t>(options.allgather_bucket_mb * 1024 * 1024), false);
    int64_t largest = 0;
    for (const Bucket& b : gather_buckets_) largest = std::max(largest, b.size);
    for (Tensor& t : gather_flat_) t = Tensor::zeros(DType::Float32, {largest});
  }
  broadcast_parameters();
  module_.set_gradient_ready_hook([this](const std::string& name, Tensor& grad) { on_ready(name, grad); });
}

DataParallel::~DataParallel() {
  module_.set_gradient_ready_hook(nullptr);
  for (auto* list : {&buckets_, &gather_buckets_})
    for (Bucket& b : *list)  // a collective still running writes into b.flat
      if (b.started && b.reduced.valid()) b.reduced.wait();
}

std::vector<DataParallel::Bucket> DataParallel::make_buckets(int64_t cap, bool from_end) const {
  const CheckpointState& state = module_.state();
  std::vector<std::vector<std::string>> groups;
  int64_t filled = 0;
  // The gradients' first bucket holds at most 1 MiB (torch DDP's first bucket), so that the first
  // reduction starts early in the backward pass.
  constexpr int64_t kFirstBucket = 1 << 20;
  const auto add = [&](const std::string& name) {
    const int64_t n = numel(state.parameter(name).shape());
    const int64_t limit = from_end && groups.size() == 1 ? std::min(cap, kFirstBucket) : cap;
    if (groups.empty() || (filled + n) * 4 > limit) {
      groups.emplace_back();
      filled = 0;
    }
    groups.back().push_back(name);
    filled += n;
  };
  if (from_end) std::for_each(trainable_.rbegin(), trainable_.rend(), add);
  else std::for_each(trainable_.begin(), trainable_.end(), add);
  std::vector<Bucket> buckets;
  for (auto& group : groups) {
    if (from_end) std::reverse(group.begin(), group.end());  // laid out in the module's order
    Bucket& b = buckets.emplace_back();
    b.params = std::move(group);
    b.first = flat_offset_.at(b.params.front());
    for (const auto& name : b.params) {
      b.offsets.push_back(b.size);
      b.size += numel(state.parameter(name).shape());
    }
    for (int r = 0; r < comm_->size(); ++r) {
      const int64_t lo = std::max(b.first, range_begin(r)), hi = std::min(b.first + b.size, range_end(r));
      b.counts.push_back(static_cast<size_t>(std::max<int64_t>(0, hi - lo)));
    }
    if (from_end) b.flat = Tensor::zeros(DType::Float32, {b.size});  // gather buckets share two buffers
    b.seen.assign(b.params.size(), false);
    b.grads.resize(b.params.size());
  }
  return buckets;
}

std::vector<ParameterRange> DataParallel::ranges_of(int rank) const {
  if (rank < 0 || rank >= comm_->size())
    throw InvalidArgument(fmt::format("rank {} of a run of {}", rank, comm_->size()));
  std::vector<ParameterRange> out;
  const CheckpointState& state = module_.state();
  for (const auto& name : trainable_) {
    const int64_t n = numel(state.parameter(name).shape());
    if (zero_stage_ == 0) {
      out.push_back({name, 0, n});
      continue;
    }
    const int64_t at = flat_offset_.at(name);
    const int64_t lo = std::max(at, range_begin(rank)), hi = std::min(at + n, range_end(rank));
    if (lo < hi) out.push_back({name, lo - at, hi - at});
  }
  return out;
}

std::vector<int64_t> DataParallel::owned_elements() const {
  std::vector<int64_t> n;
  n.reserve(static_cast<size_t>(comm_->size()));
  for (int r = 0; r < comm_->size(); ++r)
    n.push_back(zero_stage_ == 0 ? bounds_.back() : range_end(r) - range_begin(r));
  return n;
}

void DataParallel::copy_range(Bucket& b, int64_t begin, int64_t end, bool to_flat, bool grads) {
  CheckpointState& state = module_.state();
  float* flat = b.flat.data<float>();
  for (size_t i = 0; i < b.params.size(); ++i) {
    const int64_t at = b.first + b.offsets[i];
    Parameter& p = state.parameter(b.params[i]);
    const int64_t lo = std::max(begin, at), hi = std::min(end, at + numel(p.shape()));
    if (lo >= hi) continue;
    float* values = (grads ? p.grad() : p.data()).data<float>() + (lo - at);
    float* in_flat = flat + (lo - b.first);
    const auto bytes = static_cast<size_t>(hi - lo) * sizeof(float);
    if (to_flat) std::memcpy(in_flat, values, bytes);
    else std::memcpy(values, in_flat, bytes);
  }
}

void DataParallel::on_ready(const std::string& name, Tensor& grad) {
  if (!sync_) return;
  const auto it = where_.find(name);
  if (it == where_.end()) return;  // not trainable here
  Bucket& b = buckets_[it->second.first];
  const size_t i = it->second.second;
  if (b.seen[i] || b.started) return;
  if (grad.dtype() != DType::Float32 || !grad.is_contiguous() ||
      grad.shape() != module_.state().parameter(name).shape())
    throw Error(fmt::format("data parallel: the gradient of '{}' is {}, not its parameter's float32 shape", name,
                            grad.describe()));
  std::memcpy(b.flat.data<float>() + b.offsets[i], grad.data<float>(), grad.nbytes());
  b.grads[i] = grad;
  b.seen[i] = true;
  if (++b.ready == b.params.size() && overlap_) start(b);
}

void DataParallel::start(Bucket& b) {
  b.started = true;
  if (scatters()) b.reduced = comm_->reduce_scatter_sum_async(b.flat.data<float>(), b.counts);
  else b.reduced = comm_->allreduce_sum_async(b.flat.data<float>(), static_cast<size_t>(b.flat.numel()));
}

void DataParallel::finish() {
  if (!sync_) return;
  CheckpointState& state = module_.state();
  // Buckets the hook did not start, in bucket order (the same on every rank).
  for (Bucket& b : buckets_) {
    if (b.started) continue;
    for (size_t i = 0; i < b.params.size(); ++i) {
      if (b.seen[i]) continue;
      Parameter& p = state.parameter(b.params[i]);
      float* dst = b.flat.data<float>() + b.offsets[i];
      const int64_t n = numel(p.shape());
      if (p.grad().defined()) std::memcpy(dst, p.grad().data<float>(), static_cast<size_t>(n) * 4);
      else std::memset(dst, 0, static_cast<size_t>(n) * 4);
      b.grads[i] = p.grad();
    }
    start(b);
  }
  const float scale = 1.0f / static_cast<float>(comm_->size());
  // Stage 2: only this rank's range is reduced here (and written back).
  const int64_t mine_lo = zero_stage_ >= 2 ? range_begin(comm_->rank()) : 0;
  const int64_t mine_hi = zero_stage_ >= 2 ? range_end(comm_->rank()) : bounds_.back();
  for (Bucket& b : buckets_) {
    const auto waited = std::chrono::steady_clock::now();
    wait_or_abort(*comm_, b.reduced, "gradient reduction");
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - waited).count();
    for (size_t i = 0; i < b.params.size(); ++i) {
      Parameter& p = state.parameter(b.params[i]);
      const int64_t at = b.first + b.offsets[i], n = numel(p.shape());
      const int64_t lo = std::max(at, mine_lo), hi = std::min(at + n, mine_hi);
      if (lo >= hi) {  // another rank's parameter: its gradient is let go
        p.grad() = Tensor();
        continue;
      }
      if (!p.grad().defined()) p.grad() = Tensor::empty(DType::Float32, p.shape());
      const float* src = b.flat.data<float>() + (lo - b.first);
      float* dst = p.grad().data<float>() + (lo - at);
      for (int64_t k = 0; k < hi - lo; ++k) dst[k] = src[k] * scale;
    }
    b.ready = 0;
    b.started = false;
    std::fill(b.seen.begin(), b.seen.end(), false);
    b.grads.assign(b.grads.size(), Tensor());
  }
}

void DataParallel::gather_parameters() {
  if (zero_stage_ == 0 || comm_->size() == 1) return;
  const int rank = comm_->rank();
  // Bucket k goes through buffer k % 2: the next bucket's allgather runs while this one is
  // unpacked.
  auto start = [&](size_t k) {
    Bucket& b = gather_buckets_[k];
    b.flat = Tensor::view_of(gather_flat_[k % 2].storage(), 0, DType::Float32, {b.size});
    copy_range(b, range_begin(rank), range_end(rank), true, false);
    b.reduced = comm_->allgather_async(b.flat.data<float>(), b.counts);
    b.started = true;
  };
  if (!gather_buckets_.empty()) start(0);
  for (size_t k = 0; k < gather_buckets_.size(); ++k) {
    Bucket& b = gather_buckets_[k];
    const auto waited = std::chrono::steady_clock::now();
    wait_or_abort(*comm_, b.reduced, "parameter allgather");
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - waited).count();
    b.started = false;
    if (k + 1 < gather_buckets_.size()) start(k + 1);
    copy_range(b, range_end(rank), bounds_.back(), false, false);
    copy_range(b, 0, range_begin(rank), false, false);
  }
}

void DataParallel::broadcast_buffers() {
  if (comm_->size() == 1) return;
  CheckpointState& state = module_.state();
  for (const auto& name : module_.parameter_names()) {
    Parameter& p = state.parameter(name);
    if (p.requires_grad() || !p.has_data()) continue;
    comm_->broadcast(p.data().raw_data(), p.data().nbytes(), 0);
  }
}

void DataParallel::broadcast_parameters() {
  if (comm_->size() == 1) return;
  CheckpointState& state = module_.state();
  for (const auto& name : module_.parameter_names()) {
    Parameter& p = state.parameter(name);
    if (!p.has_data())
      throw InvalidArgument(fmt::format("data parallel: parameter '{}' has no data (a nominal checkpoint)", name));
    comm_->broadcast(p.data().raw_data(), p.data().nbytes(), 0);
  }
}

}  // namespace kiln::training
