// PipelineStage (kiln/pipeline.h): one rank's stage, its schedule, and the transfers between stages.
//
// A transfer is a list of tensors: an 8-byte length, then the tensors (dtype, rank, dims, bytes),
// as two messages to the neighbour rank. Tags name the micro-batch and the direction, so messages
// of different micro-batches never match each other; sends are posted and not waited for until the
// end of the call (their buffers live until then).
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <set>

#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/pipeline.h"

namespace kiln::training {

namespace {

namespace fs = std::filesystem;

std::string serialize(const std::vector<Tensor>& tensors) {
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  for (const Tensor& t0 : tensors) {
    const Tensor t = t0.is_contiguous() ? t0 : t0.clone();
    const int32_t code = dtype_to_onnx(t.dtype());
    const auto rank = static_cast<int32_t>(t.rank());
    put(&code, sizeof code);
    put(&rank, sizeof rank);
    for (int64_t d : t.shape()) put(&d, sizeof d);
    put(t.raw_data(), t.nbytes());
  }
  return out;
}

std::vector<Tensor> deserialize(const std::string& bytes, size_t count, const std::string& what) {
  std::vector<Tensor> out;
  size_t at = 0;
  auto get = [&](void* p, size_t n) {
    if (at + n > bytes.size()) throw CorruptFile(fmt::format("pipeline: a truncated transfer ({})", what));
    std::memcpy(p, bytes.data() + at, n);
    at += n;
  };
  for (size_t k = 0; k < count; ++k) {
    int32_t code = 0, rank = 0;
    get(&code, sizeof code);
    get(&rank, sizeof rank);
    const auto dtype = dtype_from_onnx(code);
    if (!dtype || rank < 0 || rank > 16) throw CorruptFile(fmt::format("pipeline: a malformed transfer ({})", what));
    Shape shape(static_cast<size_t>(rank));
    for (auto& d : shape) get(&d, sizeof d);
    Tensor t = Tensor::empty(*dtype, shape);
    get(t.raw_data(), t.nbytes());
    out.push_back(std::move(t));
  }
  if (at != bytes.size()) throw CorruptFile(fmt::format("pipeline: a transfer longer than its tensors ({})", what));
  return out;
}

// The micro-batches' forwards and backwards in schedule order: `ahead` forwards first (GPipe: all
// of them; 1F1B: stages - 1 - s), then one forward and one backward in turn, then the backwards
// left. The last stage's forward does its backward too.
template <class F, class B>
void run_schedule(size_t count, size_t ahead, bool last, const F& forward, const B& backward) {
  ahead = std::min(ahead, count);
  for (size_t mb = 0; mb < ahead; ++mb) forward(mb);
  for (size_t mb = ahead; mb < count; ++mb) {
    forward(mb);
    if (!last) backward(mb - ahead);
  }
  if (!last)
    for (size_t mb = count - ahead; mb < count; ++mb) backward(mb);
}

constexpr int kForward = 0, kBackward = 2;
int tag_of(size_t micro_batch, int direction) { return static_cast<int>((micro_batch % 8000) * 4) + direction; }

}  // namespace

struct PipelineStage::Impl {
  Module& module;
  std::shared_ptr<dist::Communicator> comm;
  Schedule schedule;
  std::unique_ptr<Session> forward;  // every stage but the last
  struct Pending {
    std::shared_ptr<uint64_t> size;
    std::shared_ptr<std::string> payload;
    std::shared_future<void> a, b;
  };
  std::deque<Pending> sends;
  double waited = 0;

  Impl(Module& m, std::shared_ptr<dist::Communicator> c, Schedule s) : module(m), comm(std::move(c)), schedule(s) {}

  void send(const std::vector<Tensor>& tensors, int to, size_t micro_batch, int direction) {
    Pending p;
    p.payload = std::make_shared<std::string>(serialize(tensors));
    p.size = std::make_shared<uint64_t>(p.payload->size());
    const int tag = tag_of(micro_batch, direction);
    p.a = comm->send_async(p.size.get(), sizeof(uint64_t), to, tag);
    p.b = comm->send_async(p.payload->data(), p.payload->size(), to, tag + 1);
    sends.push_back(std::move(p));
  }

  std::vector<Tensor> receive(size_t count, int from, size_t micro_batch, int direction) {
    const auto start = std::chrono::steady_clock::now();
    const int tag = tag_of(micro_batch, direction);
    uint64_t size = 0;
    const std::string what = fmt::format("micro-batch {} {} rank {}", micro_batch,
                                         direction == kForward ? "activations from" : "gradients from", from);
    comm->wait(comm->recv_async(&size, sizeof size, from, tag), what);
    std::string payload(size, '\0');
    comm->wait(comm->recv_async(payload.data(), size, from, tag + 1), what);
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return deserialize(payload, count, what);
  }

  void finish_sends() {
    const auto start = std::chrono::steady_clock::now();
    for (auto& p : sends) {
      comm->wait(p.a, "a pipeline send");
      comm->wait(p.b, "a pipeline send");
    }
    sends.clear();
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

PipelineStage::PipelineStage(const std::string& stage_dir, Module& module, std::shared_ptr<dist::Communicator> pipeline,
                             Schedule schedule)
    : info_(load_stage_info(stage_dir)), impl_(std::make_unique<Impl>(module, std::move(pipeline), schedule)) {
  if (impl_->comm->size() != info_.stages || impl_->comm->rank() != info_.index)
    throw InvalidArgument(
        fmt::format("pipeline: stage {} of {} runs on rank {} of a pipeline of {} ranks; stage s "
                    "runs on rank s",
                    info_.index, info_.stages, impl_->comm->rank(), impl_->comm->size()));
  if (!is_last())
    impl_->forward = std::make_unique<Session>(load_model((fs::path(stage_dir) / "forward_model.onnx").string()));
}

PipelineStage::~PipelineStage() = default;

std::vector<double> PipelineStage::train(const std::vector<std::map<std::string, Tensor>>& micro_batches,
                                         const std::function<void()>& before_last_backward) {
  Impl& m = *impl_;
  const auto start = std::chrono::steady_clock::now();
  m.waited = 0;
  const size_t count = micro_batches.size();
  const int s = info_.index;
  const uint64_t first_run = m.module.training_run_count();
  size_t received_grads = 0, sent_grads = 0;
  for (bool d : info_.received_differentiable) received_grads += d ? 1 : 0;
  for (bool d : info_.sent_differentiable) sent_grads += d ? 1 : 0;
  std::vector<std::vector<Tensor>> stash(count);  // what each micro-batch received, until its backward
  std::vector<double> losses(count, 0.0);
  m.module.train();

  auto column = [&](size_t mb, const std::string& name) -> const Tensor& {
    const auto it = micro_batches[mb].find(name);
    if (it == micro_batches[mb].end())
      throw InvalidArgument(fmt::format("pipeline stage {}: the batch has no column '{}'", s, name));
    return it->second;
  };
  auto receive_activations = [&](size_t mb) {
    if (s > 0) stash[mb] = m.receive(info_.received.size(), s - 1, mb, kForward);
  };
  // The training model over micro-batch mb: its feeds by name, the gradients of what it received out.
  auto backward = [&](size_t mb, const std::vector<Tensor>& dy) {
    if (mb + 1 == count && before_last_backward) before_last_backward();
    std::map<std::string, Tensor> feeds;
    for (const auto& name : info_.model_inputs) feeds[name] = column(mb, name);
    for (size_t k = 0; k < info_.received.size(); ++k) feeds[info_.received[k]] = stash[mb][k];
    for (size_t k = 0, d = 0; k < info_.sent.size(); ++k)
      if (info_.sent_differentiable[k]) feeds["kiln.pipeline/dy/" + info_.sent[k]] = dy.at(d++);
    std::vector<Tensor> inputs;
    for (const auto& name : m.module.input_names(true)) inputs.push_back(feeds.at(name));
    m.module.set_training_run_count(first_run + mb);
    const std::vector<Tensor> out = m.module(inputs);
    const auto names = m.module.output_names(true);
    if (is_last()) losses[mb] = out.at(0).item_as_double();
    if (s > 0 && received_grads > 0) {
      std::vector<Tensor> dx;
      for (size_t k = 0; k < info_.received.size(); ++k) {
        if (!info_.received_differentiable[k]) continue;
        const auto it = std::find(names.begin(), names.end(), info_.received[k] + "_grad");
        if (it == names.end())
          throw InvalidModel(
              fmt::format("pipeline stage {}: the training model has no gradient of '{}'", s, info_.received[k]));
        dx.push_back(out[static_cast<size_t>(it - names.begin())]);
      }
      m.send(dx, s - 1, mb, kBackward);
    }
    stash[mb].clear();
  };
  auto forward = [&](size_t mb) {
    receive_activations(mb);
    if (is_last()) return backward(mb, {});
    std::map<std::string, Tensor> feeds;
    for (const auto& name : info_.model_inputs) feeds[name] = column(mb, name);
    for (size_t k = 0; k < info_.received.size(); ++k) feeds[info_.received[k]] = stash[mb][k];
    for (const auto& v : m.forward->inputs())
      if (!feeds.count(v.name)) feeds[v.name] = m.module.state().parameter(v.name).data();
    m.forward->set_run_count(first_run + mb);  // Dropout draws the training model's masks
    std::map<std::string, Tensor> out = m.forward->run(feeds);
    std::vector<Tensor> sent;
    for (const auto& name : info_.sent) sent.push_back(out.at(name));
    m.send(sent, s + 1, mb, kForward);
  };
  auto backward_of = [&](size_t mb) { backward(mb, m.receive(sent_grads, s + 1, mb, kBackward)); };

  // The last stage's forward is its training model's; the others run the schedule.
  const size_t ahead = is_last() ? 0 : m.schedule == Schedule::GPipe ? count : info_.stages - 1 - s;
  run_schedule(count, ahead, is_last(), forward, backward_of);
  m.module.set_training_run_count(first_run + count);
  m.finish_sends();
  m.comm->broadcast(losses.data(), losses.size() * sizeof(double), info_.stages - 1);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  wait_seconds_ = m.waited;
  compute_seconds_ = total - m.waited;
  return losses;
}

std::vector<std::vector<Tensor>> PipelineStage::evaluate(const std::map<std::string, Tensor>& batch) {
  Impl& m = *impl_;
  const int s = info_.index;
  std::vector<Tensor> received;
  if (s > 0) received = m.receive(info_.received.size(), s - 1, 0, kForward);
  std::map<std::string, Tensor> feeds;
  for (const auto& name : info_.model_inputs) {
    const auto it = batch.find(name);
    if (it == batch.end())
      throw InvalidArgument(fmt::format("pipeline stage {}: the batch has no column '{}'", s, name));
    feeds[name] = it->second;
  }
  for (size_t k = 0; k < info_.received.size(); ++k) feeds[info_.received[k]] = received[k];
  std::vector<Tensor> inputs;
  for (const auto& name : m.module.input_names(false)) inputs.push_back(feeds.at(name));
  m.module.eval();
  std::vector<Tensor> out = m.module(inputs);
  m.module.train();
  if (!is_last()) {
    m.send(out, s + 1, 0, kForward);
    m.finish_sends();
    return {};
  }
  return {out};
}

void PipelineStage::reduce_shared_gradients() {
  if (info_.shared.empty()) return;
  int64_t total = 0;
  for (const auto& x : info_.shared) total += x.numel;
  std::vector<float> buffer(static_cast<size_t>(total), 0.0f);
  CheckpointState& state = impl_->module.state();
  int64_t at = 0;
  for (const auto& x : info_.shared) {
    if (state.parameters().count(x.name)) {
      const Tensor& g = state.parameter(x.name).grad();
      if (g.defined()) {
        if (g.dtype() != DType::Float32 || g.numel() != x.numel)
          throw Unsupported(
              fmt::format("pipeline: shared parameter '{}' must be float32 of {} elements", x.name, x.numel));
        std::memcpy(buffer.data() + at, g.data<float>(), static_cast<size_t>(x.numel) * sizeof(float));
      }
    }
    at += x.numel;
  }
  impl_->comm->allreduce_sum(buffer.data(), buffer.size());
  at = 0;
  for (const auto& x : info_.shared) {
    if (state.parameters().count(x.name)) {
      Tensor& g = state.parameter(x.name).grad();
      if (g.defined()) std::memcpy(g.data<float>(), buffer.data() + at, static_cast<size_t>(x.numel) * sizeof(float));
    }
    at += x.numel;
  }
}

double PipelineStage::sum(double value) const {
  impl_->comm->allreduce_sum(&value, 1);
  return value;
}

}  // namespace kiln::training
