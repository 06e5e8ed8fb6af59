// Prefetcher (kiln/data.h): worker threads take the next batch index in turn, load it, and leave it
// in a slot for the consumer; a worker waits while it is prefetch_factor x workers batches ahead.
#include <fmt/format.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "kiln/data.h"
#include "kiln/error.h"

namespace kiln::data {

struct Prefetcher::State {
  const DataLoader& loader;
  size_t window;
  std::mutex mutex;
  std::condition_variable changed;
  bool stop = false;
  uint64_t generation = 0;  // one per start(): a worker drops a batch of an earlier epoch
  int64_t epoch = 0;
  size_t next_to_load = 0, next_to_hand = 0, end = 0;
  std::map<size_t, Example> ready;
  std::map<size_t, std::exception_ptr> failed;
  std::vector<std::thread> threads;

  State(const DataLoader& l, size_t w) : loader(l), window(w) {}

  void work() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stop || (next_to_load < end && next_to_load < next_to_hand + window); });
      if (stop) return;
      const size_t index = next_to_load++;
      const uint64_t gen = generation;
      const int64_t e = epoch;
      lock.unlock();
      Example batch;
      std::exception_ptr error;
      try {
        batch = loader.batch(e, index);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (gen != generation) continue;  // start() moved on meanwhile
      if (error) failed[index] = error;
      else ready[index] = std::move(batch);
      changed.notify_all();
    }
  }
};

Prefetcher::Prefetcher(const DataLoader& loader, int workers, int prefetch_factor)
    : state_(
          std::make_unique<State>(loader, static_cast<size_t>(std::max(1, workers) * std::max(1, prefetch_factor)))) {
  if (workers < 1) throw InvalidArgument(fmt::format("Prefetcher: {} workers; give at least 1", workers));
  if (prefetch_factor < 1)
    throw InvalidArgument(fmt::format("Prefetcher: prefetch_factor {} must be at least 1", prefetch_factor));
  for (int w = 0; w < workers; ++w) state_->threads.emplace_back([s = state_.get()] { s->work(); });
}

Prefetcher::~Prefetcher() {
  {
    const std::lock_guard lock(state_->mutex);
    state_->stop = true;
  }
  state_->changed.notify_all();
  for (auto& t : state_->threads) t.join();
}

void Prefetcher::start(int64_t epoch, size_t first, size_t end) {
  const std::lock_guard lock(state_->mutex);
  ++state_->generation;
  state_->epoch = epoch;
  state_->next_to_load = state_->next_to_hand = first;
  state_->end = end;
  state_->ready.clear();
  state_->failed.clear();
  state_->changed.notify_all();
}

Example Prefetcher::next() {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  const size_t index = s.next_to_hand;
  if (index >= s.end) throw InvalidArgument(fmt::format("Prefetcher: batch {} is past the end ({})", index, s.end));
  s.changed.wait(lock, [&] { return s.ready.count(index) || s.failed.count(index); });
  ++s.next_to_hand;
  s.changed.notify_all();  // a worker may load one more
  if (const auto it = s.failed.find(index); it != s.failed.end()) {
    const std::exception_ptr error = it->second;
    s.failed.erase(it);
    const int64_t epoch = s.epoch;
    lock.unlock();
    try {
      std::rethrow_exception(error);
    } catch (Error& e) {
      const auto items = s.loader.batch_indices(epoch, index);
      e.add_context(fmt::format("loading batch {} of epoch {} (items {}{}) on a worker thread: ", index, epoch,
                                items.empty() ? 0 : items.front(), items.size() > 1 ? ", ..." : ""));
      throw;
    }
  }
  Example batch = std::move(s.ready.at(index));
  s.ready.erase(index);
  return batch;
}

}  // namespace kiln::data
