// The MPI communicator. One communication thread initializes MPI and makes every MPI call, in the
// order the collectives were posted, so that a collective started asynchronously runs while the
// caller computes; the caller waits on a future, at most timeout() seconds, then ends the job.
#include "dist/mpi_communicator.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/error.h"

#ifdef KILN_HAVE_MPI
// The C API only: Open MPI's and MPICH's headers otherwise pull in their deprecated C++ bindings,
// whose library a C link does not bring.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace kiln::dist {

#ifndef KILN_HAVE_MPI

bool built_with_mpi() { return false; }
std::shared_ptr<Communicator> make_mpi_communicator() { throw Unsupported("this Kiln was built without MPI"); }

#else

bool built_with_mpi() { return true; }

namespace {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(fmt::format("MPI {} failed: {}", what, std::string(text, static_cast<size_t>(length))));
}

// Element counts past INT_MAX go in several calls.
constexpr size_t kChunk = static_cast<size_t>(INT_MAX) / 8;

// The communication thread: it initializes MPI, runs the posted jobs in order, and completes the
// point-to-point transfers it started (MPI_Isend / MPI_Irecv) as MPI reports them done, so that a
// send never waits for the peer to post its receive (two stages sending to each other in the
// same order cannot deadlock). Shared by the world communicator and those split from it.
class Engine {
 public:
  Engine() {
    std::promise<void> started;
    auto ready = started.get_future();
    thread_ = std::thread([this, &started] { loop(started); });
    ready.get();  // MPI_Init's error, if any
  }

  ~Engine() { shutdown(); }

  // Runs what was posted, finalizes MPI and ends the thread; later posts fail. The world's
  // destructor calls it at exit, even while communicators split from it are still held.
  void shutdown() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  }

  std::shared_future<void> post(std::function<void()> task) {
    std::packaged_task<void()> job([this, task = std::move(task)] {
      const auto start = std::chrono::steady_clock::now();
      try {
        task();
      } catch (...) {
        add_busy(start);
        throw;
      }
      add_busy(start);
    });
    std::shared_future<void> done = job.get_future().share();
    {
      const std::lock_guard lock(mutex_);
      if (stop_) {
        std::promise<void> refused;
        refused.set_exception(std::make_exception_ptr(Error("MPI was finalized: the run is over")));
        return refused.get_future().share();
      }
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
    return done;
  }

  // A transfer `start` begins on the communication thread (returning its request); the future is
  // ready when MPI completes it.
  std::shared_future<void> transfer(std::function<MPI_Request()> start) {
    auto promise = std::make_shared<std::promise<void> >();
    std::shared_future<void> done = promise->get_future().share();
    post([this, start = std::move(start), promise] {
      try {
        pending_.push_back({start(), promise});  // the communication thread alone touches pending_
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
    return done;
  }

  double busy_seconds() const { return busy_.load(); }
  bool multiple() const { return multiple_; }
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

 private:
  struct Pending {
    MPI_Request request;
    std::shared_ptr<std::promise<void> > promise;
  };

  void loop(std::promise<void>& started) {
    try {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "initialization");
      multiple_ = provided >= MPI_THREAD_MULTIPLE;
      check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "error handler");
      check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "rank");
      check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "size");
      MPI_Comm local;
      check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local), "host split");
      check(MPI_Comm_rank(local, &local_rank_), "local rank");
      check(MPI_Comm_size(local, &local_size_), "local size");
      MPI_Comm_free(&local);
      started.set_value();
    } catch (...) {
      started.set_exception(std::current_exception());
      return;
    }
    for (;;) {
      std::packaged_task<void()> job;
      {
        std::unique_lock lock(mutex_);
        const auto ready = [&] { return stop_ || !jobs_.empty(); };
        if (pending_.empty()) wake_.wait(lock, ready);
        else wake_.wait_for(lock, std::chrono::microseconds(50), ready);
        if (!jobs_.empty()) {
          job = std::move(jobs_.front());
          jobs_.pop_front();
        } else if (stop_ && pending_.empty()) {
          break;
        }
      }
      if (job.valid()) job();  // exceptions go to the job's future
      progress();
    }
    MPI_Finalize();
  }

  // Completes the transfers MPI has finished.
  void progress() {
    for (size_t i = 0; i < pending_.size();) {
      int done = 0;
      MPI_Status status;
      const int code = MPI_Test(&pending_[i].request, &done, &status);
      if (code != MPI_SUCCESS || done) {
        try {
          check(code, "transfer");
          pending_[i].promise->set_value();
        } catch (...) {
          pending_[i].promise->set_exception(std::current_exception());
        }
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  void add_busy(std::chrono::steady_clock::time_point start) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    busy_.store(busy_.load() + s);  // the communication thread alone writes it
  }

  std::atomic<double> busy_{0.0};
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()> > jobs_;
  std::vector<Pending> pending_;
  bool stop_ = false;
  bool multiple_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

class MpiCommunicator final : public Communicator {
 public:
  // The world. MPI is finalized at exit even when communicators (a Trainer's) are never released:
  // a process that ends without MPI_Finalize is an error to mpirun.
  MpiCommunicator() : engine_(std::make_shared<Engine>()), comm_(MPI_COMM_WORLD) {
    rank_ = engine_->world_rank();
    size_ = engine_->world_size();
    static struct FinalizeAtExit {
      std::weak_ptr<Engine> engine;
      ~FinalizeAtExit() {
        if (auto e = engine.lock()) e->shutdown();
      }
    } at_exit;
    at_exit.engine = engine_;
  }
  // A communicator split from another (made on the communication thread).
  MpiCommunicator(std::shared_ptr<Engine> engine, MPI_Comm comm, int rank, int size)
      : engine_(std::move(engine)), comm_(comm), rank_(rank), size_(size) {}

  ~MpiCommunicator() override {
    if (comm_ == MPI_COMM_WORLD) engine_->shutdown();
    else {
      MPI_Comm comm = comm_;
      engine_->post([comm]() mutable { MPI_Comm_free(&comm); });
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return engine_->local_rank(); }
  int local_size() const override { return engine_->local_size(); }
  std::string backend() const override { return "mpi"; }

  void allreduce_sum(float* data, size_t count) override { wait(allreduce_sum_async(data, count), "allreduce"); }
  void allreduce_sum(double* data, size_t count) override {
    wait(engine_->post([this, data, count] { allreduce(data, count, MPI_DOUBLE); }), "allreduce");
  }
  std::shared_future<void> allreduce_sum_async(float* data, size_t count) override {
    return engine_->post([this, data, count] { allreduce(data, count, MPI_FLOAT); });
  }
  std::shared_future<void> reduce_scatter_sum_async(float* data, std::vector<size_t> counts) override {
    std::vector<int> n = segment_counts(counts, "reduce-scatter");
    return engine_->post([this, data, n = std::move(n)] {
      // In place, MPI leaves this rank's sums at the start of the buffer: moved to its segment.
      check(MPI_Reduce_scatter(MPI_IN_PLACE, data, n.data(), MPI_FLOAT, MPI_SUM, comm_), "reduce-scatter");
      size_t offset = 0;
      for (int r = 0; r < rank_; ++r) offset += static_cast<size_t>(n[static_cast<size_t>(r)]);
      if (offset > 0)
        std::memmove(data + offset, data, static_cast<size_t>(n[static_cast<size_t>(rank_)]) * sizeof(float));
    });
  }
  std::shared_future<void> allgather_async(float* data, std::vector<size_t> counts) override {
    std::vector<int> n = segment_counts(counts, "allgather");
    return engine_->post([this, data, n = std::move(n)] {
      std::vector<int> offsets(n.size());
      int64_t total = 0;
      for (size_t r = 0; r < n.size(); ++r) {
        offsets[r] = static_cast<int>(total);
        total += n[r];
      }
      check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, n.data(), offsets.data(), MPI_FLOAT, comm_),
            "allgather");
    });
  }
  void broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= size_) throw InvalidArgument(fmt::format("broadcast from rank {} of {}", root, size_));
    wait(engine_->post([=, this] {
      auto* p = static_cast<char*>(data);
      for (size_t done = 0; done < bytes; done += kChunk)
        check(MPI_Bcast(p + done, static_cast<int>(std::min(kChunk, bytes - done)), MPI_BYTE, root, comm_),
              "broadcast");
    }),
         "broadcast");
  }
  std::vector<std::string> allgather(const std::string& bytes) override {
    if (bytes.size() > static_cast<size_t>(INT_MAX))
      throw Unsupported(fmt::format("allgather of {} bytes from one rank (at most 2 GiB)", bytes.size()));
    std::vector<std::string> out(static_cast<size_t>(size_));
    wait(engine_->post([&] {
      const int mine = static_cast<int>(bytes.size());
      std::vector<int> lengths(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
      check(MPI_Allgather(&mine, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_), "allgather");
      int64_t total = 0;
      for (int r = 0; r < size_; ++r) {
        offsets[static_cast<size_t>(r)] = static_cast<int>(total);
        total += lengths[static_cast<size_t>(r)];
      }
      if (total > INT_MAX) throw Unsupported(fmt::format("allgather of {} bytes in all (at most 2 GiB)", total));
      std::string all(static_cast<size_t>(total), '\0');
      check(MPI_Allgatherv(bytes.data(), mine, MPI_BYTE, all.data(), lengths.data(), offsets.data(), MPI_BYTE, comm_),
            "allgather");
      for (int r = 0; r < size_; ++r)
        out[static_cast<size_t>(r)] = all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                                                 static_cast<size_t>(lengths[static_cast<size_t>(r)]));
    }),
         "allgather");
    return out;
  }
  void barrier() override {
    wait(engine_->post([this] { check(MPI_Barrier(comm_), "barrier"); }), "barrier");
  }

  std::shared_future<void> send_async(const void* data, size_t bytes, int dest, int tag) override {
    check_peer(dest, "send to");
    check_size(bytes);
    return engine_->transfer([=, this] {
      MPI_Request r;
      check(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dest, tag, comm_, &r), "send");
      return r;
    });
  }
  std::shared_future<void> recv_async(void* data, size_t bytes, int source, int tag) override {
    check_peer(source, "receive from");
    check_size(bytes);
    return engine_->transfer([=, this] {
      MPI_Request r;
      check(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, source, tag, comm_, &r), "receive");
      return r;
    });
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    if (color < 0) throw InvalidArgument(fmt::format("split: color {} must be >= 0", color));
    MPI_Comm sub = MPI_COMM_NULL;
    int rank = 0, size = 0;
    wait(engine_->post([&] {
      check(MPI_Comm_split(comm_, color, key, &sub), "split");
      check(MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN), "error handler");
      check(MPI_Comm_rank(sub, &rank), "rank");
      check(MPI_Comm_size(sub, &size), "size");
    }),
         "split");
    return std::make_shared<MpiCommunicator>(engine_, sub, rank, size);
  }

  double busy_seconds() const override { return engine_->busy_seconds(); }

  // Waits at most timeout() seconds; past that the other ranks are gone or stuck.
  void wait(const std::shared_future<void>& done, const std::string& what) override {
    const auto limit = std::chrono::duration<double>(timeout());
    if (done.wait_for(limit) != std::future_status::ready)
      abort(
          fmt::format("a collective ({}) waited more than {} s for the other ranks (ddp_timeout): a rank died, "
                      "hung, or is running something else",
                      what, timeout()));
    done.get();
  }

  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "kiln: error: rank %d of %d: %s\n", engine_->world_rank(), engine_->world_size(),
                 message.c_str());
    std::fflush(stderr);
    // Any thread may call MPI_Abort under MPI_THREAD_MULTIPLE; else leave it to the launcher,
    // which ends the job when a rank exits with an error.
    if (engine_->multiple()) MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

 private:
  template <class T>
  void allreduce(T* data, size_t count, MPI_Datatype type) const {
    for (size_t done = 0; done < count; done += kChunk)
      check(MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(std::min(kChunk, count - done)), type, MPI_SUM,
                          comm_),
            "allreduce");
  }

  // The segments' counts as MPI's ints: one per rank, their total under 2^31 elements.
  std::vector<int> segment_counts(const std::vector<size_t>& counts, const char* what) const {
    if (counts.size() != static_cast<size_t>(size_))
      throw InvalidArgument(fmt::format("{} over {} segments with {} ranks", what, counts.size(), size_));
    size_t total = 0;
    for (const size_t c : counts) total += c;
    if (total > static_cast<size_t>(INT_MAX))
      throw Unsupported(fmt::format("{} of {} elements in one call (at most 2^31; use smaller buckets)", what, total));
    std::vector<int> n;
    n.reserve(counts.size());
    for (const size_t c : counts) n.push_back(static_cast<int>(c));
    return n;
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw InvalidArgument(
          fmt::format("{} rank {}: ranks are 0..{} and this is rank {}", what, peer, size_ - 1, rank_));
  }
  static void check_size(size_t bytes) {
    if (bytes > static_cast<size_t>(INT_MAX))
      throw Unsupported(fmt::format("a transfer of {} bytes (at most 2 GiB in one)", bytes));
  }

  std::shared_ptr<Engine> engine_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_communicator() { return std::make_shared<MpiCommunicator>(); }

#endif

}  // namespace kiln::dist
