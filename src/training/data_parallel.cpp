// Data-parallel gradient averaging in buckets (kiln/data_parallel.h).
#include "kiln/data_parallel.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

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

}  // namespace

DataParallel::DataParallel(Module& module, std::shared_ptr<dist::Communicator> comm, DataParallelOptions options)
    : module_(module), comm_(std::move(comm)) {
  if (!comm_) throw InvalidArgument("DataParallel needs a communicator");
  if (!(options.bucket_cap_mb > 0))
    throw InvalidArgument(fmt::format("ddp_bucket_cap_mb must be > 0, got {}", options.bucket_cap_mb));
  CheckpointState& state = module_.state();
  const std::string mine = signature(module_, state);
  const std::vector<std::string> all = comm_->allgather(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      throw InvalidArgument(fmt::format(
          "rank {} trains other parameters than rank 0 (names, shapes or dtypes differ): every rank must load the "
          "same model; rank 0: {} ... rank {}: {}",
          r, all[0].substr(0, 200), r, all[r].substr(0, 200)));
  // Buckets over the trainable float32 parameters, last first.
  const auto cap = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  const std::vector<std::string>& names = module_.parameter_names();
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    const Parameter& p = state.parameter(*it);
    if (!p.requires_grad()) continue;
    if (p.dtype() != DType::Float32)
      throw Unsupported(fmt::format("data parallel training of parameter '{}' in {}: float32 parameters only", *it,
                                    dtype_name(p.dtype())));
    const int64_t n = numel(p.shape());
    if (buckets_.empty() || (buckets_.back().size + n) * 4 > cap) buckets_.emplace_back();
    Bucket& b = buckets_.back();
    where_[*it] = {buckets_.size() - 1, b.params.size()};
    b.params.push_back(*it);
    b.offsets.push_back(b.size);
    b.size += n;
  }
  for (Bucket& b : buckets_) {
    b.flat = Tensor::zeros(DType::Float32, {b.size});
    b.seen.assign(b.params.size(), false);
    b.grads.resize(b.params.size());
  }
  broadcast_parameters();
  module_.set_gradient_ready_hook([this](const std::string& name, Tensor& grad) { on_ready(name, grad); });
}

DataParallel::~DataParallel() {
  module_.set_gradient_ready_hook(nullptr);
  for (Bucket& b : buckets_)  // a collective still running writes into b.flat
    if (b.started && b.reduced.valid()) b.reduced.wait();
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
  if (++b.ready == b.params.size()) start(b);
}

void DataParallel::start(Bucket& b) {
  b.started = true;
  b.reduced = comm_->allreduce_sum_async(b.flat.data<float>(), static_cast<size_t>(b.flat.numel()));
}

void DataParallel::finish() {
  if (!sync_) return;
  CheckpointState& state = module_.state();
  // Buckets the hook did not complete, in bucket order (the same on every rank).
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
  for (Bucket& b : buckets_) {
    const auto limit = std::chrono::duration<double>(dist::timeout());
    if (b.reduced.wait_for(limit) != std::future_status::ready)
      comm_->abort(
          fmt::format("a gradient allreduce waited more than {} s for the other ranks (ddp_timeout): a rank "
                      "died or hung",
                      dist::timeout()));
    b.reduced.get();
    for (size_t i = 0; i < b.params.size(); ++i) {
      Parameter& p = state.parameter(b.params[i]);
      if (!p.grad().defined()) p.grad() = Tensor::empty(DType::Float32, p.shape());
      const float* src = b.flat.data<float>() + b.offsets[i];
      float* dst = p.grad().data<float>();
      const int64_t n = numel(p.shape());
      for (int64_t k = 0; k < n; ++k) dst[k] = src[k] * scale;
    }
    b.ready = 0;
    b.started = false;
    std::fill(b.seen.begin(), b.seen.end(), false);
    b.grads.assign(b.grads.size(), Tensor());
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
